// Peak FLOP/s for "% of peak": a GEMM and convolution calibration for CPUs (cached), datasheet figures for GPUs.
#include "devicerace/environment.h"
#include "devicerace/peak_flops.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "devicerace/device_info.h"
#include "devices/bf16_route_cache.h"
#include "devices/cpu_info.h"
#include "devices/machine_load.h"
#include "util/file_util.h"

namespace devicerace {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::int64_t kSide = 1024;   // square GEMMs: 2.1 GFLOP each, ~10 ms at 200 GFLOP/s
constexpr int kBatches = 7;            // the peak is the median batch's rate
constexpr double kBatchSeconds = 0.08; // each batch times at least this long
constexpr double kWarmupSeconds = 0.2; // GEMMs first, untimed: clocks ramp up, pools start
constexpr std::uint64_t kMaxCacheBytes = 1u << 20;
// A calibration whose threads got less of the cores' time than this was shared with other work
// (a build, another process, a hypervisor's steal): its rate is not the machine's peak, and every
// later race's "% of peak" would read high against it (docs/ENGINEERING.md, "CPU peaks").
constexpr double kMinCpuShare = 0.85;
// Nor is one beside other work on the machine's other CPUs: a neighbour on the other vCPU of a
// VM slows a GEMM (shared core resources, memory bandwidth) without taking the calibrating
// thread's CPU time, and a peak below what a lane reaches reads over 100%. Judged by the whole
// machine's counters (/proc/stat): more than this many CPUs busy beyond the calibration's own, or the hypervisor
// taking more than kMaxSteal of the machine's time, and the figure is not kept.
constexpr double kMaxOtherCpus = 0.25;
constexpr double kMaxSteal = 0.05;
// 3: figures are the faster of a GEMM and a convolution probe, from calibrations that had their
// cores to themselves; a format-1 or -2 file may hold a GEMM-only figure below what a lane
// reaches, or one from a busy machine, so it is measured over once.
constexpr int kCacheFormat = 3;

std::mutex g_mutex; // one calibration at a time (two at once would share the cores)

const char* precisionName(Precision p) {
    return p == Precision::Bf16 ? "bf16" : p == Precision::Fp16 ? "fp16" : "fp32";
}

// Fewer usable cores than threads (affinity, a container's CPU quota) make a lower peak, kept apart.
std::string cacheKey(Precision p, int threads, double cores) {
    return fmt::format("{}|{} threads{}|{}|LibTorch {}", deviceReport().cpu.model, threads,
                       cores < threads ? fmt::format(" on {:.3g} cores", cores) : "", precisionName(p), TORCH_VERSION);
}

double processCpuSeconds() {
    timespec t{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The probes, each timed the same way; the peak is the faster one's rate. GEMMs alone are no
// ceiling everywhere: on some CPUs (an AMD EPYC Zen 5) MKL's fp32 GEMM gives far less than what
// oneDNN's fp32 convolutions reach on the same core (docs/ENGINEERING.md, "CPU peaks"), and a
// convolutional lane would read over 100% of a GEMM-only peak.
enum class Probe { Gemm, Conv };
constexpr std::array<Probe, 2> kProbes = {Probe::Gemm, Probe::Conv};
// The convolutions: 3x3, stride 1, 64 -> 64 channels on 32 x 32, a batch of 32, channels_last
// as the lanes run them: 2.4 GFLOP each.
constexpr std::int64_t kConvBatch = 32, kConvChannels = 64, kConvSide = 32;

struct Calibration {
    double rate = 0;                    // FLOP/s, the faster probe's median batch
    std::array<double, 2> probeRates{}; // each probe's, in kProbes' order (0: not timed)
    double cpuShare = 1;                // this process's CPU time over the timed batches ÷ (wall time × cores)
    std::optional<detail::MachineLoadReading> machine; // the rest of the machine meanwhile
    bool busy() const {
        return cpuShare < kMinCpuShare ||
               (machine && (machine->otherCpus > kMaxOtherCpus || machine->stealShare > kMaxSteal));
    }
};

// nullopt where there is no /proc/stat (the CPU-share check alone then).
std::optional<detail::CpuTicks> machineTicks() { return detail::readProcStat(); }

// One probe's work: a call and the FLOPs it does. fp16 has the GEMM only.
struct ProbeWork {
    std::function<void()> call;
    double flops = 0;
};
std::optional<ProbeWork> probeWork(Probe probe, at::ScalarType dtype, at::Generator& gen) {
    if (probe == Probe::Gemm) {
        auto a = at::randn({kSide, kSide}, gen).to(dtype);
        auto b = at::randn({kSide, kSide}, gen).to(dtype);
        auto c = at::empty({kSide, kSide}, a.options());
        return ProbeWork{[a, b, c]() mutable { at::mm_out(c, a, b); }, 2.0 * kSide * kSide * kSide};
    }
    if (dtype == at::kHalf) {
        return std::nullopt;
    }
    const auto cl = at::MemoryFormat::ChannelsLast;
    auto x = at::randn({kConvBatch, kConvChannels, kConvSide, kConvSide}, gen).to(dtype).contiguous(cl);
    auto w = at::randn({kConvChannels, kConvChannels, 3, 3}, gen).to(dtype).contiguous(cl);
    const double flops = 2.0 * kConvBatch * kConvChannels * kConvChannels * kConvSide * kConvSide * 9;
    return ProbeWork{[x, w] { (void)at::conv2d(x, w, {}, 1, 1); }, flops};
}

// The median batch's rate of `work`, after a warm-up.
double timeProbe(const ProbeWork& work) {
    using Clock = std::chrono::steady_clock;
    const auto warm = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - warm).count() < kWarmupSeconds) {
        work.call();
    }
    auto t0 = Clock::now();
    work.call();
    const double once = std::chrono::duration<double>(Clock::now() - t0).count();
    const int reps = std::max(1, static_cast<int>(kBatchSeconds / std::max(once, 1e-6)));
    std::array<double, kBatches> rates{};
    for (auto& r : rates) {
        t0 = Clock::now();
        for (int i = 0; i < reps; ++i) {
            work.call();
        }
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        r = work.flops * reps / s;
    }
    std::sort(rates.begin(), rates.end());
    return rates[kBatches / 2];
}

// Times the probes on a thread of its own, so the caller's thread count and OpenMP pool stay as
// they are. `cores`: what `threads` threads can use here (detail::usableCores), the share's whole.
Calibration measure(Precision p, int threads, double cores) {
    Calibration out;
    std::thread worker([&] {
        at::set_num_threads(threads);
        const auto dtype = p == Precision::Bf16 ? at::kBFloat16 : p == Precision::Fp16 ? at::kHalf : at::kFloat;
        auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
        std::vector<std::optional<ProbeWork>> work;
        for (const auto probe : kProbes) {
            work.push_back(probeWork(probe, dtype, gen));
        }
        const auto ticks0 = machineTicks();
        const auto wall0 = std::chrono::steady_clock::now();
        const double cpu0 = processCpuSeconds();
        for (std::size_t i = 0; i < kProbes.size(); ++i) {
            out.probeRates[i] = work[i] ? timeProbe(*work[i]) : 0.0;
            out.rate = std::max(out.rate, out.probeRates[i]);
        }
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
        const double own = processCpuSeconds() - cpu0;
        out.cpuShare = own / std::max(wall * cores, 1e-9);
        if (const auto ticks1 = machineTicks(); ticks0 && ticks1) {
            // At most `cores` CPUs' worth is the calibration's; the rest, this process's other
            // threads included (the window drawing), was other work.
            out.machine = detail::machineLoadBetween(*ticks0, *ticks1, std::min(own, wall * cores), wall,
                                                     static_cast<double>(::sysconf(_SC_CLK_TCK)));
        }
    });
    worker.join();
    return out;
}

json readCache(const fs::path& file) {
    try {
        auto j = json::parse(detail::readFileBounded(file, kMaxCacheBytes));
        if (j.is_object() && j.value("format", 0) == kCacheFormat && j.contains("peaks") && j["peaks"].is_object()) {
            return j;
        }
    } catch (const std::exception&) {
        // absent, unreadable or not ours: measured again and rewritten
    }
    return json{{"format", kCacheFormat}, {"peaks", json::object()}};
}

// Best effort: a cache that cannot be written only means measuring again next time.
void writeCache(const fs::path& file, const json& j) { detail::replaceFileBestEffort(file, j.dump(2) + "\n"); }

std::string today() {
    const auto t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    return fmt::format("{:04}-{:02}-{:02}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
}

struct Datasheet {
    const char* match;       // a substring of CUDA's device name (the first row that matches wins)
    const char* model;       // the datasheet's product
    double bf16, fp16, tf32; // dense tensor-core TFLOP/s (0: not in hardware)
};

// NVIDIA's datasheets, dense (without 2:4 sparsity). More specific names come first.
constexpr std::array kDatasheets = {
    Datasheet{"H100 PCIe", "H100 PCIe", 756.5, 756.5, 378.0},
    Datasheet{"H100 NVL", "H100 NVL", 835.5, 835.5, 417.5},
    Datasheet{"H100", "H100 SXM5", 989.4, 989.4, 494.7},
    Datasheet{"GH200", "GH200", 989.4, 989.4, 494.7},
    Datasheet{"H200", "H200 SXM", 989.4, 989.4, 494.7},
    Datasheet{"A100", "A100", 312.0, 312.0, 156.0},
    Datasheet{"A10G", "A10G", 70.0, 70.0, 35.0},
    Datasheet{"A10", "A10", 125.0, 125.0, 62.5},
    Datasheet{"L40S", "L40S", 362.05, 362.05, 183.0},
    Datasheet{"L40", "L40", 181.05, 181.05, 90.5},
    Datasheet{"L4", "L4", 121.0, 121.0, 60.0},
    Datasheet{"V100", "V100 SXM2", 0.0, 125.0, 0.0},
    Datasheet{"T4", "T4", 0.0, 65.0, 0.0},
};

} // namespace

fs::path peakCacheFile() {
    if (const char* dir = devicerace::environmentSwitch("DEVICERACE_CACHE_DIR"); dir && *dir) {
        return fs::path(dir) / "peaks.json";
    }
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
        return fs::path(xdg) / "devicerace" / "peaks.json";
    }
    if (const char* home = std::getenv("HOME"); home && *home) {
        return fs::path(home) / ".cache" / "devicerace" / "peaks.json";
    }
    return {};
}

namespace {

// One precision's calibrated figure, cached or measured now (cpuPeakFlops without the bf16 rules).
PeakFlops ownCpuPeak(Precision precision, int threads, bool remeasure) {
    std::lock_guard lock(g_mutex);
    const auto file = peakCacheFile();
    // A container's quota or a narrow affinity is this machine's ceiling, not other work: the
    // busy check measures against it (a 1.5-core quota once made every 2-thread figure "busy").
    const double cores = detail::usableCores(threads);
    const auto key = cacheKey(precision, threads, cores);
    auto cache = file.empty() ? json{{"format", kCacheFormat}, {"peaks", json::object()}} : readCache(file);
    auto& peaks = cache["peaks"];
    if (!remeasure && peaks.contains(key) && peaks[key].is_object()) {
        const auto& e = peaks[key];
        const auto f = e.value("flops_per_sec", 0.0);
        if (f > 0 && std::isfinite(f)) {
            return {f, e.value("source", std::string("measured")), true, true, false, cores < threads ? cores : 0};
        }
    }
    auto m = measure(precision, threads, cores);
    if (m.busy()) {
        // Once more: a passing burst of other work should not cost the cache its figure.
        if (const auto again = measure(precision, threads, cores); !again.busy() || again.rate > m.rate) {
            m = again;
        }
    }
    const bool busy = m.busy();
    PeakFlops p;
    p.flopsPerSec = m.rate;
    p.measured = true;
    p.busy = busy;
    p.usableCores = cores < threads ? cores : 0;
    const bool convFaster = m.probeRates[1] > m.probeRates[0];
    p.source = fmt::format("measured {}: the faster of {}x{} GEMMs ({:.0f} GFLOP/s) and 3x3 convolutions ({}), {}, {} "
                           "thread{}, median of {} each{}",
                           today(), kSide, kSide, m.probeRates[0] / 1e9,
                           m.probeRates[1] > 0 ? fmt::format("{:.0f} GFLOP/s", m.probeRates[1] / 1e9) : "not timed",
                           precisionName(precision), threads, threads == 1 ? "" : "s", kBatches,
                           convFaster ? " (the convolutions)" : "");
    if (p.usableCores > 0) {
        p.source += fmt::format(" on the {:.3g} core{} this process may use (CPU quota or affinity)", cores,
                                cores == 1 ? "" : "s");
    }
    if (busy) {
        if (m.cpuShare < kMinCpuShare) {
            p.source += fmt::format(" on a busy CPU (it got {:.0f}% of {:.3g} core{}): below the peak, not kept",
                                    100 * m.cpuShare, cores, cores == 1 ? "" : "s");
        } else if (m.machine && m.machine->stealShare > kMaxSteal) {
            p.source += fmt::format(" on a busy CPU (the hypervisor took {:.0f}% of this machine's time): below the "
                                    "peak, not kept",
                                    100 * m.machine->stealShare);
        } else {
            p.source += fmt::format(" on a busy CPU (other work kept {:.1f} of this machine's CPUs busy while it "
                                    "timed): below the peak, not kept",
                                    m.machine ? m.machine->otherCpus : 0.0);
        }
        return p;
    }
    if (!file.empty()) {
        peaks[key] = {{"flops_per_sec", p.flopsPerSec},
                      {"gemm_flops_per_sec", m.probeRates[0]},
                      {"conv_flops_per_sec", m.probeRates[1]},
                      {"source", p.source}};
        writeCache(file, cache);
    }
    return p;
}

} // namespace

PeakFlops cpuPeakFlops(Precision precision, int threads, bool remeasure) {
    threads = std::max(1, threads);
    if (precision != Precision::Bf16) {
        return ownCpuPeak(precision, threads, remeasure);
    }
    if (detail::hostBf16Units().empty()) {
        // Without AMX or AVX-512 BF16, bf16 arithmetic runs on the fp32 units (oneDNN's
        // convolutions widen to fp32), while its bf16 GEMM is a slow emulation and no ceiling (a
        // bf16 convolutional lane would read several times 100% of it). The hardware's ceiling
        // is the fp32 one.
        auto p = ownCpuPeak(Precision::Fp32, threads, remeasure);
        p.source = "the fp32 peak (no bf16 units: bf16 runs on the fp32 ones): " + p.source;
        return p;
    }
    // bf16 units that are slower than the fp32 ones (an Intel Xeon's AVX-512 BF16 without AMX:
    // half its FMAs' rate, measured): a bf16 lane's GEMMs take fp32 there where timed faster
    // (kernels/bf16_routes.h), so the ceiling a bf16 lane is held to is the higher figure.
    auto bf16 = ownCpuPeak(Precision::Bf16, threads, remeasure);
    auto fp32 = ownCpuPeak(Precision::Fp32, threads, remeasure);
    if (fp32.flopsPerSec <= bf16.flopsPerSec) {
        return bf16;
    }
    fp32.slowerBf16FlopsPerSec = bf16.flopsPerSec;
    fp32.busy = fp32.busy || bf16.busy;
    fp32.cached = fp32.cached && bf16.cached;
    fp32.source = fmt::format("the fp32 peak, above this CPU's bf16 one ({:.0f} GFLOP/s: its bf16 arithmetic is "
                              "slower than its fp32): {}",
                              bf16.flopsPerSec / 1e9, fp32.source);
    return fp32;
}

std::map<std::string, std::map<std::string, int>> cachedBf16GemmRoutes() { return detail::cachedBf16RouteCounts(); }

namespace {

// The cached figure for `precision` on `threads`, if there is one.
std::optional<double> cachedOwnCpuPeak(Precision precision, int threads) {
    std::lock_guard lock(g_mutex);
    const auto file = peakCacheFile();
    if (file.empty()) {
        return std::nullopt;
    }
    const auto cache = readCache(file);
    const auto peaks = cache.find("peaks");
    if (peaks == cache.end() || !peaks->is_object()) {
        return std::nullopt;
    }
    const auto entry = peaks->find(cacheKey(precision, threads, detail::usableCores(threads)));
    if (entry == peaks->end() || !entry->is_object()) {
        return std::nullopt;
    }
    return entry->value("flops_per_sec", 0.0);
}

bool forgetOwnCpuPeak(Precision precision, int threads, double belowFlopsPerSec) {
    std::lock_guard lock(g_mutex);
    const auto file = peakCacheFile();
    if (file.empty()) {
        return false;
    }
    auto cache = readCache(file);
    auto& peaks = cache["peaks"];
    const auto key = cacheKey(precision, threads, detail::usableCores(threads));
    if (!peaks.contains(key) || !peaks[key].is_object() ||
        !(peaks[key].value("flops_per_sec", 0.0) < belowFlopsPerSec)) {
        return false;
    }
    peaks.erase(key);
    writeCache(file, cache);
    return true;
}

} // namespace

bool forgetCpuPeak(Precision precision, int threads, double belowFlopsPerSec) {
    threads = std::max(1, threads);
    if (precision != Precision::Bf16) {
        return forgetOwnCpuPeak(precision, threads, belowFlopsPerSec);
    }
    if (detail::hostBf16Units().empty()) {
        // bf16 lanes there are measured against the fp32 peak
        return forgetOwnCpuPeak(Precision::Fp32, threads, belowFlopsPerSec);
    }
    // A bf16 lane is held to the higher of the two figures (cpuPeakFlops). Where that was the
    // fp32 one, the lane passed the fp32 figure (its GEMMs ran in fp32), which proves nothing of
    // the slower bf16 units' figure: only the fp32 one is dropped.
    const auto bf16 = cachedOwnCpuPeak(Precision::Bf16, threads);
    const auto fp32 = cachedOwnCpuPeak(Precision::Fp32, threads);
    const bool fp32IsTheCeiling = bf16 && fp32 && *fp32 > *bf16;
    return forgetOwnCpuPeak(fp32IsTheCeiling ? Precision::Fp32 : Precision::Bf16, threads, belowFlopsPerSec);
}

std::optional<PeakFlops> gpuDatasheetPeak(const std::string& deviceName, Precision precision) {
    for (const auto& d : kDatasheets) {
        if (deviceName.find(d.match) == std::string::npos) {
            continue;
        }
        const double tflops = precision == Precision::Bf16 ? d.bf16 : precision == Precision::Fp16 ? d.fp16 : d.tf32;
        if (tflops <= 0) {
            return std::nullopt;
        }
        return PeakFlops{tflops * 1e12,
                         fmt::format("datasheet: NVIDIA {}, dense {}", d.model,
                                     precision == Precision::Fp32 ? "TF32" : precisionName(precision)),
                         false, false};
    }
    return std::nullopt;
}

} // namespace devicerace
