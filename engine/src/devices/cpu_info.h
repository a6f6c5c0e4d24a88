#pragma once
// Host CPU facts read from /proc and the loader's view of this process. Thread-safe.
#include <optional>
#include <string>
#include <string_view>

namespace devicerace::detail {

struct HostCpu {
    std::string model;
    int physicalCores = 0;
    int logicalCpus = 0;
    std::string bf16Units;      // "AMX", "AVX-512 BF16" or "" (from the CPU's flags)
    bool amxNotExposed = false; // amxModelWithoutAmx: this CPU model has AMX, this system hides it
};

HostCpu readHostCpu();
/// What of readHostCpu() never changes while the process runs (the model and its bf16 units),
/// read once: asked on hot paths (a bf16 step's convolutions, each GEMM shape's route).
/// readHostCpu() itself reads again (its logical CPUs follow the calling thread's affinity).
const std::string& hostCpuModel();
const std::string& hostBf16Units();
/// The bf16 matrix units a /proc/cpuinfo "flags" line names: "AMX" (amx_bf16), "AVX-512 BF16"
/// (avx512_bf16), else "".
std::string bf16UnitsOf(std::string_view flags);
/// True for an Intel Xeon model that has AMX (family 6: Sapphire Rapids 143, Emerald Rapids 207,
/// Granite Rapids 173 and 174) whose "flags" line lacks amx_bf16: a virtual machine's CPU model
/// that hides it, or a Linux kernel older than 5.16. Its AVX-512 BF16 dot products then run at
/// about half its fp32 FMAs' rate (measured on an Emerald Rapids VM), so bf16 does not pay there.
bool amxModelWithoutAmx(std::string_view vendor, int family, int model, std::string_view flags);

/// Cores' worth of CPU time a "cpu.max" line of cgroup v2 allows ("150000 100000" -> 1.5);
/// nullopt for "max ..." (no limit) or a line that is not one.
std::optional<double> quotaCoresFromCpuMax(std::string_view line);
/// The same for cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us (quota -1: no limit).
std::optional<double> quotaCoresFromCfs(std::string_view quotaUs, std::string_view periodUs);

/// The CPU time this process's cgroups allow it, in cores (a container started with
/// `--cpus=1.5` gives 1.5): the tightest quota on the way from its cgroup up to the hierarchy's
/// root, v2 (cpu.max) or v1 (cpu.cfs_quota_us). nullopt when no quota applies or none is readable.
/// `root` replaces "/" in the paths read (tests).
std::optional<double> cpuQuotaCores(const std::string& root = "/");

/// Cores `threads` threads can keep busy here: at most the CPUs this process may run on
/// (affinity) and the cgroup's CPU quota.
double usableCores(int threads);

/// The BLAS library actually mapped into this process (from /proc/self/maps), e.g.
/// "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"; empty when none is mapped.
std::string mappedBlasLibrary();

/// True when `path` is the netlib reference BLAS (Debian's libblas3).
bool isReferenceBlasPath(const std::string& path);

} // namespace devicerace::detail
