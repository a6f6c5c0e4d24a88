#pragma once
/// What the machine offers to race on: the CPU, its BLAS, and CUDA devices.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace devicerace {

/// The host CPU as LibTorch sees it.
struct CpuInfo {
    std::string model;            // /proc/cpuinfo "model name"
    int physicalCores = 0;        // distinct (package, core) pairs
    int logicalCpus = 0;          // hardware threads this process may use
    int torchThreads = 0;         // at::get_num_threads() on the main thread
    std::string parallelBackend;  // "OpenMP", "native thread pool", ...
    std::string blas;             // e.g. "MKL (bundled with LibTorch)", "OpenBLAS", "reference BLAS"
    bool blasIsReference = false; // true: CPU training is ~17x slower (measured with Debian's LibTorch)
    std::string bf16Units;        // bf16 matrix hardware: "AMX", "AVX-512 BF16", "" (bf16 is emulated)
    bool amxNotExposed = false;   // an Intel Xeon model with AMX whose AMX this system hides (a VM, an old kernel)
};

/// One CUDA device, usable or not.
struct GpuInfo {
    int index = 0;
    std::string name;
    std::uint64_t totalMemoryBytes = 0;
    int computeMajor = 0;
    int computeMinor = 0;
    int multiprocessors = 0;
    std::optional<int> utilizationPercent;        // NVML, when available
    std::optional<std::uint64_t> usedMemoryBytes; // NVML, when available
};

/// Everything discovered about the machine, plus why CUDA is unusable when it is.
struct DeviceReport {
    CpuInfo cpu;
    std::vector<GpuInfo> gpus;
    bool cudaAvailable = false;
    std::string cudaUnavailableReason; // empty when cudaAvailable
    std::string torchVersion;          // e.g. "2.11.0"
    std::string torchCudaVersion;      // CUDA version LibTorch was built with, empty for CPU builds
    std::string cudnnVersion;          // empty when unknown
    std::string nvmlDriverVersion;     // empty without NVML
    std::string hostName;
};

/// Probes the machine. Safe to call from any thread; the result is cached after the first call.
const DeviceReport& deviceReport();

/// Re-reads the live figures (GPU utilisation/memory through NVML) into a copy.
DeviceReport refreshDeviceReport();

/// Why a lane cannot train on `device` ("cpu", "cuda", "cuda:N") on this machine ("device cuda:1:
/// this machine has 1 CUDA device (cuda:0)"), or "": the words a race refuses it with.
std::string deviceProblem(const std::string& device);

/// "cpu", "cuda:0", ...: the device names a lane spec accepts on this machine.
std::vector<std::string> usableDeviceNames();

} // namespace devicerace

namespace devicerace {

/// The whole report as one JSON object (the worker protocol's `hello` carries it) and back.
/// Reading is strict about types and bounded in size; throws DataError.
std::string deviceReportToJson(const DeviceReport& report);
DeviceReport deviceReportFromJson(const std::string& text);

/// The devices of a machine reached through ssh ("ssh://[user@]host[:port]"): a worker is
/// started there, says hello and is sent away. `cli`: the remote devicerace-cli (empty: the one
/// on its PATH). Throws UsageError with the same distinct messages as a remote lane (host
/// unreachable, key refused, host key unknown, devicerace-cli missing, version mismatch).
DeviceReport remoteDeviceReport(const std::string& hostUrl, const std::string& cli = {});

} // namespace devicerace
