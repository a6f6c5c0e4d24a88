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
/// GPU `index`'s total energy since the driver loaded (nvmlDeviceGetTotalEnergyConsumption,
/// Volta and later), in joules; nullopt without NVML or where the GPU does not report it.
std::optional<double> nvmlEnergyJoules(int index);
/// Whether NVML loaded and initialised.
bool nvmlPresent();

} // namespace devicerace::detail
