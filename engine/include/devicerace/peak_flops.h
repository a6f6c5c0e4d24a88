#pragma once
// The peak a lane's achieved FLOP/s is compared with ("% of peak"): for a CPU, a short
// GEMM calibration run once per machine, thread count and precision, then cached; for a GPU, the
// datasheet's dense tensor-core figure found by the device's name, with its source named. An
// unknown GPU has no peak (never a guess).
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "devicerace/lane_spec.h"

namespace devicerace {

struct PeakFlops {
    double flopsPerSec = 0;
    std::string source;    // "measured DATE: the faster of 1024x1024 GEMMs (…) and …" or "datasheet: …"
    bool measured = false; // a calibration on this machine (false: a datasheet figure)
    bool cached = false;   // read from the cache file rather than measured by this call
    bool busy = false;     // measured while other work shared the cores: below the peak, not cached
    /// A CPU figure's ceiling where fewer cores than threads are usable here (a CPU quota or a
    /// narrow affinity: 1.5 for `--cpus=1.5`); 0 where every thread has a core of its own.
    double usableCores = 0;
    /// A bf16 figure measured below this CPU's fp32 one (AVX-512 BF16 without AMX on an Intel
    /// Xeon runs its bf16 dot products at about half its fp32 FMAs' rate): that bf16 figure. The
    /// peak itself is then the fp32 one, since a bf16 lane's GEMMs may take fp32 where timed
    /// faster and a peak must be an upper bound. 0 otherwise.
    double slowerBf16FlopsPerSec = 0;
};

/// Where measured CPU peaks are kept: $DEVICERACE_CACHE_DIR, else $XDG_CACHE_HOME/devicerace,
/// else ~/.cache/devicerace; "peaks.json" in it. Empty when none can be named.
std::filesystem::path peakCacheFile();

/// The CPU's dense arithmetic peak for `precision` on `threads` intra-op threads: the faster of
/// two probes, each the median rate of seven timed batches after a warm-up on a thread of its
/// own — square GEMMs (at::mm: MKL for fp32, oneDNN for bf16) and 3x3 convolutions (oneDNN) —
/// since neither library is the faster on every CPU (fp16: the GEMMs alone); cached per CPU
/// model, threads, precision and LibTorch version (a broken or foreign cache file is ignored and
/// rewritten). `remeasure` skips the cache. Run it while the machine is otherwise idle: it
/// measures what the cores give now. When the process got under 85% of the cores `threads`
/// threads may use (at most the CPUs in its affinity and its cgroup's CPU quota) while it timed,
/// or the rest of the machine was busy
/// (/proc/stat: over a quarter of a CPU beyond the calibration's own, this process's other
/// threads included, or over 5% steal), other work shared them: it measures once
/// more; if still busy the figure is returned with "on a busy CPU" in its source and not cached,
/// so a later call measures again. Fewer usable cores than threads is this process's ceiling,
/// not other work: that figure is kept under its own key, its source saying "on the 1.5 cores
/// this process may use". A bf16 peak is never below the fp32 one: where the bf16 calibration
/// measures less, the fp32 figure is returned, its source saying so (slowerBf16FlopsPerSec).
PeakFlops cpuPeakFlops(Precision precision, int threads, bool remeasure = false);

/// Drops the cached peak for `precision` on `threads` threads when it is below
/// `belowFlopsPerSec` (what a lane reached: a peak must be an upper bound, so that figure was
/// measured low), so the next race or `devicerace-cli devices` measures it again while nothing
/// trains. True when it dropped one. Never measures (lanes may still be training).
bool forgetCpuPeak(Precision precision, int threads, double belowFlopsPerSec);

/// The bf16 GEMM routes the fused steps chose by measurement on this CPU and LibTorch (kept in
/// bf16-routes.json beside the peaks): per "<threads> threads[ x <workers> workers]", how many GEMM
/// shapes took each route ("mkl", "onednn", "avx512", "fp32"). Empty before a bf16 lane has run here.
std::map<std::string, std::map<std::string, int>> cachedBf16GemmRoutes();

/// The name a lane's execution gives a bf16 GEMM route by its key ("mkl": "MKL bf16", "avx512":
/// "AVX-512 BF16 kernel"); a key it does not know (a newer cache) as it is.
std::string bf16GemmRouteName(const std::string& key);

/// A GPU's dense peak for a lane of `precision` by the device name (CUDA's, e.g. "NVIDIA H100
/// 80GB HBM3"), from NVIDIA's datasheets: bf16/fp16 tensor cores; fp32 lanes at TF32 (DeviceRace
/// allows TF32 for fp32 matmuls on GPUs that have it). nullopt when the name is not in the table
/// or the GPU lacks the precision in hardware.
std::optional<PeakFlops> gpuDatasheetPeak(const std::string& deviceName, Precision precision);

} // namespace devicerace
