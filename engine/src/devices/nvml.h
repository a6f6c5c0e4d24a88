#pragma once
// Optional NVML access through dlopen (no link-time dependency). Thread-safe.
#include <cstdint>
#include <optional>
#include <string>

namespace devicerace::detail {

struct NvmlReading {
    std::optional<int> utilizationPercent;
    std::optional<std::uint64_t> usedMemoryBytes;
};

/// Driver version, or empty when NVML is not present.
std::string nvmlDriverVersion();
/// Live utilisation and memory of GPU `index`, when NVML is present.
NvmlReading nvmlRead(int index);

} // namespace devicerace::detail
