// A CPU convolution whose weight gradient may come from im2col + one MKL GEMM (fp32) or the
// AVX-512 BF16 kernel (a bf16 lane's, kernels/bf16_conv_wgrad.h) instead of oneDNN's
// backward-weights kernel, chosen per shape by timing both once (kernels/autograd_nodes.h:
// convolveTuned).
#include "kernels/conv_wgrad.h"

#include <ATen/Functions.h>
#include <torch/autograd.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/file.h>
#include <torch/nn/modules/conv.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "devicerace/environment.h"
#include "devicerace/peak_flops.h"
#include "devices/cpu_info.h"
#include "kernels/autograd_nodes.h"
#include "kernels/bf16_conv_wgrad.h"
#include "kernels/bf16_gemm.h"
#include "kernels/fast_paths.h"
#include "kernels/node_casts.h"
#include "util/file_util.h"

namespace devicerace::detail {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr std::int64_t kMaxColumnBytes = 32 << 20; // one chunk of im2col columns at most
// im2col must beat oneDNN by this much to be chosen: a near tie is the VM's noise.
constexpr double kMinGain = 1.05;

// DEVICERACE_CONV_WGRAD: "0" off (oneDNN's weight gradient, as fused=false), "gemm" im2col +
// GEMM for every shape (tests), else chosen per shape by timing.
enum class Mode { Off, Tuned, Gemm };
Mode mode() {
    const char* env = devicerace::environmentSwitch("DEVICERACE_CONV_WGRAD");
    const std::string_view v = env ? env : "";
    return v == "0" ? Mode::Off : v == "gemm" ? Mode::Gemm : Mode::Tuned;
}

struct Geometry {
    std::int64_t n, c, h, w, oc, kh, kw, ph, pw, sh, sw;
    std::int64_t oh() const { return (h + 2 * ph - kh) / sh + 1; }
    std::int64_t ow() const { return (w + 2 * pw - kw) / sw + 1; }
    std::vector<std::int64_t> stride() const { return {sh, sw}; }
    std::vector<std::int64_t> padding() const { return {ph, pw}; }
};

Geometry geometryOf(const at::Tensor& x, const at::Tensor& weight, const std::vector<std::int64_t>& padStride) {
    return {x.size(0),      x.size(1),       x.size(2),       x.size(3),       weight.size(0), weight.size(2),
            weight.size(3), padStride.at(0), padStride.at(1), padStride.at(2), padStride.at(3)};
}

// dW (OC x KH*KW*C, the weight in channels_last order) = dY^T (OC x N*OH*OW) x columns (N*OH*OW x
// KH*KW*C), the columns built a chunk of images at a time. x and gy: channels_last contiguous, fp32.
at::Tensor weightGradByGemm(const at::Tensor& x, const at::Tensor& gy, const Geometry& g) {
    const std::int64_t taps = g.kh * g.kw, width = taps * g.c, oh = g.oh(), ow = g.ow(), pixels = oh * ow;
    const std::int64_t imagesPerChunk =
        std::clamp<std::int64_t>(kMaxColumnBytes / std::max<std::int64_t>(1, pixels * width * 4), 1, g.n);
    auto columns = at::empty({imagesPerChunk * pixels, width}, x.options().memory_format(at::MemoryFormat::Contiguous));
    auto dw = at::empty({g.oc, width}, columns.options());
    const auto gyRows = gy.permute({0, 2, 3, 1}).view({g.n * pixels, g.oc});          // NHWC: a view
    if (g.kh == 1 && g.kw == 1 && g.ph == 0 && g.pw == 0 && g.sh == 1 && g.sw == 1) { // columns: x itself
        return at::mm(gyRows.t(), x.permute({0, 2, 3, 1}).reshape({g.n * pixels, g.c}))
            .view({g.oc, 1, 1, g.c})
            .permute({0, 3, 1, 2});
    }
    const float* src = x.data_ptr<float>();
    for (std::int64_t n0 = 0; n0 < g.n; n0 += imagesPerChunk) {
        const std::int64_t images = std::min(imagesPerChunk, g.n - n0);
        float* cols = columns.data_ptr<float>();
        // One output row (image, y) per task: its OW pixels' KH*KW*C values each.
        at::parallel_for(0, images * oh, 1, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t row = begin; row < end; ++row) {
                const std::int64_t image = n0 + row / oh, y = row % oh;
                float* out = cols + row * ow * width;
                for (std::int64_t x0 = 0; x0 < ow; ++x0) {
                    for (std::int64_t i = 0; i < g.kh; ++i) {
                        const std::int64_t iy = y * g.sh + i - g.ph;
                        for (std::int64_t j = 0; j < g.kw; ++j, out += g.c) {
                            const std::int64_t ix = x0 * g.sw + j - g.pw;
                            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) {
                                std::memset(out, 0, sizeof(float) * g.c);
                            } else {
                                std::memcpy(out, src + ((image * g.h + iy) * g.w + ix) * g.c, sizeof(float) * g.c);
                            }
                        }
                    }
                }
            }
        });
        const auto rows = gyRows.narrow(0, n0 * pixels, images * pixels);
        const auto used = columns.narrow(0, 0, images * pixels);
        if (n0 == 0) {
            at::mm_out(dw, rows.t(), used);
        } else {
            dw.addmm_(rows.t(), used);
        }
    }
    return dw.view({g.oc, g.kh, g.kw, g.c}).permute({0, 3, 1, 2}); // [OC, C, KH, KW], channels_last strides
}

at::Tensor weightGradByOneDnn(const at::Tensor& x, const at::Tensor& w, const at::Tensor& gy, const Geometry& g) {
    return std::get<1>(at::convolution_backward(gy, x, w, std::nullopt, g.stride(), g.padding(), {1, 1}, false, {0, 0},
                                                1, {false, true, false}));
}

// The AVX-512 BF16 kernel's weight gradient, fp32: x and gy bf16, channels_last contiguous.
at::Tensor weightGradByBf16Kernel(const at::Tensor& x, const at::Tensor& gy, const Geometry& g) {
    auto dw = at::empty({g.oc, g.kh, g.kw, g.c}, x.options().dtype(at::kFloat));
    cpu::convWeightGradBf16({g.n, g.c, g.h, g.w, g.oc, g.kh, g.kw, g.ph, g.pw, g.sh, g.sw},
                            reinterpret_cast<const cpu::Bf16*>(x.const_data_ptr<at::BFloat16>()),
                            reinterpret_cast<const cpu::Bf16*>(gy.const_data_ptr<at::BFloat16>()),
                            dw.data_ptr<float>());
    return dw.permute({0, 3, 1, 2}); // [OC, C, KH, KW], channels_last strides
}

// A weight gradient's two candidates: fp32, im2col + GEMM against oneDNN's; bf16 (x, w and gy
// bf16), the AVX-512 BF16 kernel against oneDNN's bf16 one widened to fp32 (as autocast would).
at::Tensor weightGradOwn(const at::Tensor& x, const at::Tensor& gy, const Geometry& g, bool bf16) {
    return bf16 ? weightGradByBf16Kernel(x, gy, g) : weightGradByGemm(x, gy, g);
}
at::Tensor weightGradOneDnn(const at::Tensor& x, const at::Tensor& w, const at::Tensor& gy, const Geometry& g,
                            bool bf16) {
    auto dw = weightGradByOneDnn(x, w, gy, g);
    return bf16 ? dw.to(at::kFloat) : dw;
}

// Which weight gradient is faster for a shape and thread count: decided once per machine. The
// first lane to meet the shape times both (twice each: the first oneDNN call builds its kernel)
// and writes the choice to the machine's file; lanes meeting an undecided shape meanwhile wait for
// it, in this process (a mutex) and in others (an flock on the file's lock), and then read it. So
// every lane takes the same path from its first step, and lanes with one seed train bit-identically
// whether they are threads of one process, worker processes, data-parallel ranks or a Slurm job's
// ranks on this host: a choice timed in each process had let a near-tie part them. A lane looking
// up a shape its process has decided takes only the map's lock, never waiting behind a timing.
using ShapeKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                            std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, bool>;
std::mutex g_choiceMutex; // the map
std::mutex g_timingMutex; // one timing at a time (two would disturb each other's clocks)
std::map<ShapeKey, bool> g_useGemm;

// 2: bf16 shapes (the AVX-512 BF16 kernel) joined; a file of an earlier format is timed again.
constexpr int kChoiceFormat = 2;
constexpr std::uint64_t kMaxChoiceBytes = 1u << 20;
// A pick timed while the CPU was busy (more tasks ready to run than the timing's threads, or the
// timing thread got less than this share of its wall time: other lanes, a build, a test suite, a
// hypervisor's steal) is provisional: it is kept for
// kProvisionalSeconds, so that the other ranks and worker processes of the same race follow it and
// stay bit-identical, and then timed again by the next process to meet the shape. Only a pick
// timed on an idle CPU is the machine's for good (a GEMM pick timed during a ctest run was once
// kept for a shape that is a tie on the idle machine).
constexpr double kMinCpuShare = 0.85;
constexpr double kProvisionalSeconds = 600;

double threadCpuSeconds() {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Tasks ready to run on the machine at this moment, this thread included (/proc/stat's
// procs_running); 0 where it cannot be read. A timing of a few milliseconds often runs a whole
// time slice unpreempted even on a crowded CPU, so its own CPU share cannot show the crowd.
int runnableTasks() {
    std::ifstream in("/proc/stat");
    std::string word;
    while (in >> word) {
        if (word == "procs_running") {
            int n = 0;
            in >> n;
            return n;
        }
        in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    return 0;
}

double unixSeconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<bool> decided(const ShapeKey& key) {
    std::lock_guard lock(g_choiceMutex);
    const auto it = g_useGemm.find(key);
    return it == g_useGemm.end() ? std::nullopt : std::optional<bool>(it->second);
}

void remember(const ShapeKey& key, bool useGemm) {
    std::lock_guard lock(g_choiceMutex);
    g_useGemm.emplace(key, useGemm);
}

// The machine's choices, held under an exclusive flock for this object's life. Best effort: with no
// cache folder, or one that cannot be written, each process decides for itself as before.
class MachineChoices {
public:
    explicit MachineChoices(std::filesystem::path file) : m_file(std::move(file)) {
        if (m_file.empty()) {
            return;
        }
        std::error_code ec;
        std::filesystem::create_directories(m_file.parent_path(), ec);
        m_lock = ::open((m_file.parent_path() / "conv-wgrad.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        while (m_lock >= 0 && ::flock(m_lock, LOCK_EX) != 0 && errno == EINTR) {
        }
        try {
            auto j = nlohmann::json::parse(readFileBounded(m_file, kMaxChoiceBytes));
            if (j.is_object() && j.value("format", 0) == kChoiceFormat && j.contains("choices") &&
                j["choices"].is_object()) {
                m_json = std::move(j);
            }
        } catch (const std::exception&) {
            // absent, unreadable or not ours: timed again and rewritten
        }
    }
    ~MachineChoices() {
        if (m_lock >= 0) {
            ::close(m_lock); // releases the flock
        }
    }
    MachineChoices(const MachineChoices&) = delete;
    MachineChoices& operator=(const MachineChoices&) = delete;

    /// A pick timed on an idle CPU ("gemm" or "onednn"), or a provisional one (an object: the pick,
    /// when it was timed and the CPU share it got) while it is younger than kProvisionalSeconds.
    std::optional<bool> find(const std::string& key) const {
        const auto pick = findPick(key);
        if (pick == "gemm" || pick == "onednn") {
            return pick == "gemm";
        }
        return std::nullopt;
    }
    /// The same for any pick's text ("bf16" or "fp32": a bf16 convolution's arithmetic); "" if none.
    std::string findPick(const std::string& key) const {
        const auto& c = m_json["choices"];
        const auto it = c.find(key);
        if (it == c.end()) {
            return {};
        }
        std::string pick;
        if (it->is_string()) {
            pick = it->get<std::string>();
        } else if (it->is_object()) { // find(), not a const operator[]: a missing key there is undefined
            const auto p = it->find("pick");
            const auto t = it->find("timed_at");
            if (p != it->end() && p->is_string() && t != it->end() && t->is_number()) {
                const double age = unixSeconds() - t->get<double>();
                if (age >= 0 && age < kProvisionalSeconds) {
                    pick = p->get<std::string>();
                }
            }
        }
        return pick;
    }
    void keep(const std::string& key, bool useGemm, bool busy, double cpuShare, int runnable) {
        keepPick(key, useGemm ? "gemm" : "onednn", busy, cpuShare, runnable);
    }
    void keepPick(const std::string& key, const char* pick, bool busy, double cpuShare, int runnable) {
        if (m_file.empty()) {
            return;
        }
        if (!busy) {
            m_json["choices"][key] = pick;
        } else {
            m_json["choices"][key] = {
                {"pick", pick}, {"timed_at", unixSeconds()}, {"cpu_share", cpuShare}, {"runnable_tasks", runnable}};
        }
        replaceFileBestEffort(m_file, m_json.dump(1) + "\n");
    }

private:
    std::filesystem::path m_file;
    int m_lock = -1;
    nlohmann::json m_json = {{"format", kChoiceFormat}, {"choices", nlohmann::json::object()}};
};

// The file's key: the CPU, LibTorch (its oneDNN), the shape (" bf16" after it for a bf16 lane's)
// and the threads (with the cores they may use, where a quota or an affinity allows fewer).
std::string machineKey(const Geometry& g, int threads, bool bf16) {
    const double cores = usableCores(threads);
    return fmt::format("{}|LibTorch {}|n{} c{}->{} {}x{} k{}x{} pad {}x{} stride {}x{}{}|{} threads{}", hostCpuModel(),
                       TORCH_VERSION, g.n, g.c, g.oc, g.h, g.w, g.kh, g.kw, g.ph, g.pw, g.sh, g.sw, bf16 ? " bf16" : "",
                       threads, cores < threads ? fmt::format(" on {:.3g} cores", cores) : "");
}

// Whether this shape takes the engine's weight gradient (weightGradOwn); `result` gets the
// gradient where this call computed it (while timing), else stays undefined.
bool ownIsFaster(const at::Tensor& x, const at::Tensor& w, const at::Tensor& gy, const Geometry& g, bool bf16,
                 at::Tensor& result) {
    if (bf16 && !cpu::haveAvx512Bf16Gemm()) {
        return false; // bf16 arithmetic forced (DEVICERACE_BF16_CONV=bf16) where the kernel cannot run
    }
    if (mode() == Mode::Gemm) {
        return true;
    }
    const int threads = at::get_num_threads();
    const ShapeKey key{g.n, g.c, g.h, g.w, g.oc, g.kh, g.kw, g.ph, g.pw, g.sh, g.sw, threads, bf16};
    if (const auto known = decided(key)) {
        return *known;
    }
    std::lock_guard timing(g_timingMutex);
    if (const auto known = decided(key)) { // decided while this lane waited
        return *known;
    }
    MachineChoices machine(convChoiceFile()); // waits while another process times
    const auto fileKey = machineKey(g, threads, bf16);
    if (const auto known = machine.find(fileKey)) {
        remember(key, *known);
        return *known;
    }
    using Clock = std::chrono::steady_clock;
    const auto timed = [](auto&& f) {
        const auto t0 = Clock::now();
        auto out = f();
        return std::pair{std::chrono::duration<double>(Clock::now() - t0).count(), out};
    };
    double oneDnn = 1e300, gemm = 1e300;
    at::Tensor byOneDnn, byGemm;
    const auto wall0 = Clock::now();
    const double cpu0 = threadCpuSeconds();
    int runnable = runnableTasks();
    for (int round = 0; round < 2; ++round) {
        runnable = std::max(runnable, runnableTasks());
        auto [a, fromOneDnn] = timed([&] { return weightGradOneDnn(x, w, gy, g, bf16); });
        auto [b, fromGemm] = timed([&] { return weightGradOwn(x, gy, g, bf16); });
        oneDnn = std::min(oneDnn, a);
        gemm = std::min(gemm, b);
        byOneDnn = fromOneDnn;
        byGemm = fromGemm;
    }
    // Busy: more tasks ready to run than the timing's own threads (other lanes of this process,
    // other processes), or the timing thread got too little of its wall time (it runs its share of
    // each OpenMP region; the process's CPU time would also count other lanes' threads).
    const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
    const double cpuShare = (threadCpuSeconds() - cpu0) / std::max(wall, 1e-9);
    runnable = std::max(runnable, runnableTasks());
    const bool busy = cpuShare < kMinCpuShare || runnable > threads;
    const bool useGemm = gemm * kMinGain < oneDnn;
    result = useGemm ? byGemm : byOneDnn; // this step already takes the chosen path
    machine.keep(fileKey, useGemm, busy, cpuShare, runnable);
    remember(key, useGemm);
    if (const char* log = devicerace::environmentSwitch("DEVICERACE_CONV_WGRAD_LOG");
        log && *log && std::string_view(log) != "0") {
        std::fprintf(stderr,
                     "conv weight gradient, n%ld c%ld->%ld %ldx%ld k%ldx%ld%s, %d thread(s): oneDNN %.2f ms, %s "
                     "%.2f ms: %s%s\n",
                     static_cast<long>(g.n), static_cast<long>(g.c), static_cast<long>(g.oc), static_cast<long>(g.h),
                     static_cast<long>(g.w), static_cast<long>(g.kh), static_cast<long>(g.kw), bf16 ? " bf16" : "",
                     threads, 1e3 * oneDnn, bf16 ? "AVX-512 BF16 kernel" : "im2col + GEMM", 1e3 * gemm,
                     useGemm ? (bf16 ? "kernel" : "GEMM") : "oneDNN",
                     busy ? " (timed on a busy CPU: provisional)" : "");
    }
    return useGemm;
}

// How a convolution of the node computes. A bf16 autocast lane's takes bf16 operands (oneDNN's bf16
// kernels, the AVX-512 BF16 weight gradient), or, where that measured slower, the same bf16 values
// widened to fp32 for fp32 kernels, its output rounded to bf16 as autocast's would be: on a CPU
// whose bf16 arithmetic is slower than its fp32 (an Intel Xeon's AVX-512 BF16 without AMX runs at
// half its FMAs' rate) every product is still one of bf16 values, exact in fp32.
enum class Arith : std::int64_t { Fp32 = 0, Bf16 = 1, Bf16ValuesInFp32 = 2 };

// One forward and backward (input and weight gradients, oneDNN's) of the convolution in `arith`,
// the casts included: the trial the choice is made by.
void convolutionTrial(const at::Tensor& x, const at::Tensor& w, const Geometry& g, Arith arith) {
    const bool widen = arith == Arith::Bf16ValuesInFp32;
    const auto xc = widen ? bf16ValuesInF32(x) : x.to(at::kBFloat16);
    const auto wc = widen ? bf16ValuesInF32(w) : w.to(at::kBFloat16);
    auto y = at::convolution(xc, wc, std::nullopt, g.stride(), g.padding(), {1, 1}, false, {0, 0}, 1);
    if (widen) {
        y = castFloat(castFloat(y, true), false); // the node's bf16 output, and its gradient widened
    }
    const auto grads = at::convolution_backward(y, xc, wc, std::nullopt, g.stride(), g.padding(), {1, 1}, false, {0, 0},
                                                1, {true, true, false});
    if (widen) {
        (void)castFloat(std::get<0>(grads), x.scalar_type() == at::kBFloat16); // the input's gradient, as the node
    }
}

// DEVICERACE_BF16_CONV: "bf16" or "fp32" forces a bf16 lane's convolutions' arithmetic (tests,
// benchmarks); else it is timed per shape where this CPU's bf16 peak measured below its fp32 one.
std::optional<Arith> forcedArith() {
    const char* env = devicerace::environmentSwitch("DEVICERACE_BF16_CONV");
    const std::string_view v = env ? env : "";
    if (v == "bf16") {
        return Arith::Bf16;
    }
    if (v == "fp32") {
        return Arith::Bf16ValuesInFp32;
    }
    if (!v.empty() && v != "measure") {
        throw std::invalid_argument(fmt::format("DEVICERACE_BF16_CONV={}: expected bf16, fp32 or measure", v));
    }
    return std::nullopt;
}

std::mutex g_arithMutex; // the map
std::map<ShapeKey, Arith> g_arith;

// A bf16 lane's convolution: bf16 arithmetic, unless this CPU has no bf16 units (bf16 values in
// fp32, untimed), or its bf16 is slower than its fp32 and this shape ran faster on bf16 values in fp32 (fwd + bwd, the
// faster of two interleaved trials each), timed once per machine and kept in conv-wgrad.json beside the weight-gradient
// picks.
Arith bf16Arithmetic(const at::Tensor& x, const at::Tensor& w, const Geometry& g) {
    if (const auto forced = forcedArith()) {
        return *forced;
    }
    const int threads = at::get_num_threads();
    const ShapeKey key{g.n, g.c, g.h, g.w, g.oc, g.kh, g.kw, g.ph, g.pw, g.sh, g.sw, threads, true};
    {
        std::lock_guard lock(g_arithMutex);
        if (const auto it = g_arith.find(key); it != g_arith.end()) {
            return it->second;
        }
    }
    const auto decide = [&](Arith a) {
        std::lock_guard lock(g_arithMutex);
        g_arith.emplace(key, a);
        return a;
    };
    if (hostBf16Units().empty()) {
        // No bf16 units: oneDNN's bf16 convolutions are an emulation (a bf16 fashion-cnn step took
        // 1.9 s against fp32's 0.16 s on an AMD EPYC Zen 3), never the faster: nothing to time.
        return decide(Arith::Bf16ValuesInFp32);
    }
    if (cpuPeakFlops(Precision::Bf16, threads).slowerBf16FlopsPerSec <= 0) {
        return decide(Arith::Bf16); // bf16 units at least as fast as the fp32 ones: nothing to time
    }
    std::lock_guard timing(g_timingMutex);
    MachineChoices machine(convChoiceFile());
    const auto fileKey = machineKey(g, threads, true) + "|arithmetic";
    if (const auto pick = machine.findPick(fileKey); pick == "bf16" || pick == "fp32") {
        return decide(pick == "fp32" ? Arith::Bf16ValuesInFp32 : Arith::Bf16);
    }
    torch::NoGradGuard noGrad;
    const NoAutocast noAutocast; // the trial casts for itself
    using Clock = std::chrono::steady_clock;
    const auto wall0 = Clock::now();
    const double cpu0 = threadCpuSeconds();
    int runnable = runnableTasks();
    constexpr std::array<Arith, 2> kTried = {Arith::Bf16, Arith::Bf16ValuesInFp32};
    std::array<double, 2> fastest = {1e300, 1e300}; // of two rounds, the arithmetics interleaved
    for (int round = 0; round < 2; ++round) {
        for (std::size_t i = 0; i < kTried.size(); ++i) {
            const auto t0 = Clock::now();
            convolutionTrial(x, w, g, kTried[i]);
            fastest[i] = std::min(fastest[i], std::chrono::duration<double>(Clock::now() - t0).count());
        }
        runnable = std::max(runnable, runnableTasks());
    }
    const double bf16 = fastest[0], fp32 = fastest[1];
    const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
    const double cpuShare = (threadCpuSeconds() - cpu0) / std::max(wall, 1e-9);
    const bool busy = cpuShare < kMinCpuShare || runnable > threads;
    const auto pick = fp32 * kMinGain < bf16 ? Arith::Bf16ValuesInFp32 : Arith::Bf16;
    machine.keepPick(fileKey, pick == Arith::Bf16 ? "bf16" : "fp32", busy, cpuShare, runnable);
    if (const char* log = devicerace::environmentSwitch("DEVICERACE_CONV_WGRAD_LOG");
        log && *log && std::string_view(log) != "0") {
        std::fprintf(stderr,
                     "bf16 convolution n%ld c%ld->%ld %ldx%ld, %d thread(s): bf16 %.2f ms, fp32 %.2f ms: %s%s\n",
                     static_cast<long>(g.n), static_cast<long>(g.c), static_cast<long>(g.oc), static_cast<long>(g.h),
                     static_cast<long>(g.w), threads, 1e3 * bf16, 1e3 * fp32, pick == Arith::Bf16 ? "bf16" : "fp32",
                     busy ? " (timed on a busy CPU: provisional)" : "");
    }
    return decide(pick);
}

struct ConvTunedWeightGrad : torch::autograd::Function<ConvTunedWeightGrad> {
    // bias: the module's, read where `withBias` (else the weight again: a custom function's
    // inputs cannot be undefined tensors).
    // padStride: {padding h, w, stride h, w}.
    // arith (Arith): Bf16 for a bf16 autocast lane's (autocast's casts, done here): x and the
    // weight in bf16 for oneDNN's forward and input gradient, the weight's gradient fp32 from the
    // start; Bf16ValuesInFp32 the same lane's on the bf16 values widened (fp32 kernels throughout,
    // the output rounded to bf16, or as `output` says (ConvOutput: Unrounded left fp32, Relu the
    // relu's bf16 output, its gradient masked as it widens).
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& bias, bool withBias, std::vector<std::int64_t> padStride,
                              std::int64_t arith, std::int64_t output) {
        const bool bf16 = static_cast<Arith>(arith) == Arith::Bf16;
        const bool widened = static_cast<Arith>(arith) == Arith::Bf16ValuesInFp32;
        const auto cast = [&](const at::Tensor& t) {
            return bf16 ? t.to(at::kBFloat16) : widened ? bf16ValuesInF32(t) : t;
        };
        const auto xc = cast(x);
        const auto wc = cast(weight);
        const bool relu = widened && static_cast<ConvOutput>(output) == ConvOutput::Relu;
        ctx->saved_data["bias"] = withBias;
        ctx->saved_data["padStride"] = padStride;
        ctx->saved_data["bf16"] = bf16;
        ctx->saved_data["xType"] = static_cast<std::int64_t>(x.scalar_type());
        const auto g = geometryOf(x, weight, padStride);
        const auto b = withBias ? std::optional<at::Tensor>(cast(bias)) : std::nullopt;
        const auto y = at::convolution(xc, wc, b, g.stride(), g.padding(), {1, 1}, false, {0, 0}, 1);
        if (relu) {
            auto out = reluToBf16(y);
            ctx->save_for_backward({xc, wc, out});
            return out;
        }
        ctx->save_for_backward({xc, wc});
        return widened && static_cast<ConvOutput>(output) == ConvOutput::AsAutocast ? castFloat(y, true) : y;
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const auto saved = ctx->get_saved_variables();
        const auto& x = saved[0];
        const auto& w = saved[1];
        const bool bf16 = ctx->saved_data["bf16"].toBool();
        const auto g = geometryOf(x, w, ctx->saved_data["padStride"].toIntVector());
        const auto gy = (saved.size() > 2 ? reluGradToFloat(grads[0], saved[2])
                                          : castFloat(grads[0], x.scalar_type() == at::kBFloat16))
                            .contiguous(at::MemoryFormat::ChannelsLast);
        at::Tensor dx, dw, db;
        if (ctx->needs_input_grad(0)) {
            dx = std::get<0>(at::convolution_backward(gy, x, w, std::nullopt, g.stride(), g.padding(), {1, 1}, false,
                                                      {0, 0}, 1, {true, false, false}));
            const auto xType = static_cast<at::ScalarType>(ctx->saved_data["xType"].toInt());
            dx = xType == at::kBFloat16 || xType == at::kFloat ? castFloat(dx, xType == at::kBFloat16) : dx.to(xType);
        }
        if (ctx->needs_input_grad(1)) {
            at::Tensor tuned;
            if (ownIsFaster(x, w, gy, g, bf16, tuned)) {
                dw = tuned.defined() ? tuned : weightGradOwn(x, gy, g, bf16);
            } else {
                dw = tuned.defined() ? tuned : weightGradOneDnn(x, w, gy, g, bf16);
            }
        }
        if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) {
            db = gy.sum({0, 2, 3}, false, at::kFloat);
        }
        return {dx, dw, db, {}, {}, {}, {}};
    }
};

// A bf16 autocast lane whose convolutions take the node: on a CPU with the AVX-512 BF16 kernel
// (its weight gradients), or one without bf16 units (its convolutions on their bf16 values in fp32:
// bf16Arithmetic).
bool bf16AutocastTakesNode() {
    // asked at every convolution of a step: /proc/cpuinfo is read once
    static const bool noBf16Units = hostBf16Units().empty();
    return at::autocast::is_autocast_enabled(at::kCPU) && at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16 &&
           (cpu::haveAvx512Bf16Gemm() || noBf16Units);
}

} // namespace

std::filesystem::path convChoiceFile() {
    const auto peaks = peakCacheFile();
    return peaks.empty() ? std::filesystem::path() : peaks.parent_path() / "conv-wgrad.json";
}

void forgetConvChoices() {
    {
        std::lock_guard lock(g_choiceMutex);
        g_useGemm.clear();
    }
    std::lock_guard lock(g_arithMutex);
    g_arith.clear();
}

bool tunedWeightGradEnabled() { return mode() != Mode::Off; }

namespace {
// The convolutions the node computes: one group, a padding of zeros given in pixels, no
// dilation, not transposed.
bool plainConvolution(const torch::nn::Conv2dImpl& conv) {
    const auto& o = conv.options;
    return o.groups() == 1 && std::holds_alternative<torch::ExpandingArray<2>>(o.padding()) &&
           (*o.dilation())[0] == 1 && (*o.dilation())[1] == 1 && !o.transposed() &&
           std::holds_alternative<torch::enumtype::kZeros>(o.padding_mode());
}
} // namespace

bool tunedWeightGradFits(const torch::nn::Conv2dImpl& conv, const at::Tensor& x) {
    if (!tunedWeightGradEnabled() || !plainConvolution(conv)) {
        return false;
    }
    const auto& o = conv.options;
    const auto& pad = std::get<torch::ExpandingArray<2>>(o.padding());
    // fp32 outside autocast, or a bf16 autocast lane's (x fp32, or bf16 from the layer before)
    const bool autocast = at::autocast::is_autocast_enabled(at::kCPU);
    const bool bf16 = bf16AutocastTakesNode();
    return torch::GradMode::is_enabled() && conv.weight.requires_grad() && x.is_cpu() && x.dim() == 4 &&
           (x.scalar_type() == at::kFloat || (bf16 && x.scalar_type() == at::kBFloat16)) &&
           conv.weight.scalar_type() == at::kFloat && (!conv.bias.defined() || conv.bias.scalar_type() == at::kFloat) &&
           (!autocast || bf16) && x.is_contiguous(at::MemoryFormat::ChannelsLast) &&
           // a one-channel input with NCHW strides is channels_last-contiguous too, but oneDNN
           // then writes an NCHW output, and the GEMM's rows would need a transposed copy of its
           // gradient each step (lanes give it channels_last strides: channelsLastStrided)
           x.suggest_memory_format() == at::MemoryFormat::ChannelsLast &&
           x.size(2) + 2 * (*pad)[0] >= o.kernel_size()->at(0) && x.size(3) + 2 * (*pad)[1] >= o.kernel_size()->at(1);
}

at::Tensor evaluateAsTrained(torch::nn::Conv2dImpl& conv, const at::Tensor& x, ConvOutput out) {
    if (torch::GradMode::is_enabled() || !bf16AutocastTakesNode() || !plainConvolution(conv) || !x.is_cpu() ||
        x.dim() != 4 || (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16) ||
        conv.weight.scalar_type() != at::kFloat) {
        return {};
    }
    const auto& o = conv.options;
    const auto& pad = std::get<torch::ExpandingArray<2>>(o.padding());
    const std::vector<std::int64_t> padStride{(*pad)[0], (*pad)[1], (*o.stride())[0], (*o.stride())[1]};
    const auto g = geometryOf(x, conv.weight, padStride);
    const int threads = at::get_num_threads();
    const auto forced = forcedArith();
    bool inFp32 = forced == Arith::Bf16ValuesInFp32;
    if (!forced) {
        std::lock_guard lock(g_arithMutex);
        for (const auto& [key, arith] : g_arith) { // the training shapes' choices, whatever their batch
            const auto& [n, c, h, w, oc, kh, kw, ph, pw, sh, sw, t, bf16] = key;
            if (c == g.c && h == g.h && w == g.w && oc == g.oc && kh == g.kh && kw == g.kw && ph == g.ph &&
                pw == g.pw && sh == g.sh && sw == g.sw && t == threads) {
                inFp32 = arith == Arith::Bf16ValuesInFp32;
                break;
            }
        }
    }
    if (!inFp32) {
        return {};
    }
    countFastPath();
    const auto b = conv.bias.defined() ? std::optional<at::Tensor>(bf16ValuesInF32(conv.bias)) : std::nullopt;
    auto y = at::convolution(bf16ValuesInF32(x), bf16ValuesInF32(conv.weight), b, g.stride(), g.padding(), {1, 1},
                             false, {0, 0}, 1);
    return out == ConvOutput::Unrounded ? y : out == ConvOutput::Relu ? reluToBf16(y) : castFloat(y, true);
}

at::Tensor convolveTuned(torch::nn::Conv2dImpl& conv, const at::Tensor& x, ConvOutput out) {
    countFastPath();
    const auto& pad = std::get<torch::ExpandingArray<2>>(conv.options.padding());
    const auto& stride = conv.options.stride();
    const bool withBias = conv.bias.defined();
    std::vector<std::int64_t> padStride{(*pad)[0], (*pad)[1], (*stride)[0], (*stride)[1]};
    auto arith = Arith::Fp32;
    if (bf16AutocastTakesNode()) {
        arith = bf16Arithmetic(x, conv.weight, geometryOf(x, conv.weight, padStride));
    }
    auto y =
        ConvTunedWeightGrad::apply(x, conv.weight, withBias ? conv.bias : conv.weight, withBias, std::move(padStride),
                                   static_cast<std::int64_t>(arith), static_cast<std::int64_t>(out));
    // the node applies the relu only where it casts: elsewhere ATen's, as the module's caller would
    return out == ConvOutput::Relu && arith != Arith::Bf16ValuesInFp32 ? y.relu_() : y;
}

} // namespace devicerace::detail
