#pragma once
// Host CPU facts read from /proc and the loader's view of this process. Thread-safe.
#include <string>
#include <string_view>

namespace devicerace::detail {

struct HostCpu {
    std::string model;
    int physicalCores = 0;
    int logicalCpus = 0;
    std::string bf16Units; // "AMX", "AVX-512 BF16" or "" (from the CPU's flags)
};

HostCpu readHostCpu();
/// The bf16 matrix units a /proc/cpuinfo "flags" line names: "AMX" (amx_bf16), "AVX-512 BF16"
/// (avx512_bf16), else "".
std::string bf16UnitsOf(std::string_view flags);

/// The BLAS library actually mapped into this process (from /proc/self/maps), e.g.
/// "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"; empty when none is mapped.
std::string mappedBlasLibrary();

/// True when `path` is the netlib reference BLAS (Debian's libblas3).
bool isReferenceBlasPath(const std::string& path);

} // namespace devicerace::detail
