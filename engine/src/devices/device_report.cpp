// Device discovery: CPU and BLAS through LibTorch and /proc, CUDA through torch and NVML.
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <mutex>

#include "devices/cpu_info.h"
#include "devicerace/device_info.h"
#include "devices/nvml.h"

namespace devicerace {

namespace {

std::string blasDescription(bool& isReference) {
    isReference = false;
    const std::string config = at::show_config();
    if (config.find("BLAS_INFO=mkl") != std::string::npos) {
        return "MKL (bundled with LibTorch)";
    }
    auto mapped = detail::mappedBlasLibrary();
    if (!mapped.empty()) {
        isReference = detail::isReferenceBlasPath(mapped);
        if (isReference) {
            return fmt::format("reference BLAS ({})", mapped);
        }
        if (mapped.find("openblas") != std::string::npos) {
            return fmt::format("OpenBLAS ({})", mapped);
        }
        return mapped;
    }
    auto pos = config.find("BLAS_INFO=");
    if (pos != std::string::npos) {
        auto end = config.find_first_of(", \n", pos);
        return config.substr(pos + 10, end - pos - 10);
    }
    return "unknown";
}

std::string cudaReason() {
    if (!at::detail::getCUDAHooks().isBuilt()) {
        return "this LibTorch was built without CUDA";
    }
    if (void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD); h == nullptr) {
        if (void* probe = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
            dlclose(probe);
        } else {
            return "no NVIDIA driver found (libcuda.so.1 cannot be loaded)";
        }
    }
    return "the NVIDIA driver reports no usable CUDA device";
}

DeviceReport probe() {
    DeviceReport r;
    auto host = detail::readHostCpu();
    r.cpu.model = host.model;
    r.cpu.physicalCores = host.physicalCores;
    r.cpu.logicalCpus = host.logicalCpus;
    r.cpu.bf16Units = host.bf16Units;
    r.cpu.amxNotExposed = host.amxNotExposed;
    r.cpu.torchThreads = at::get_num_threads();
    r.cpu.parallelBackend = at::get_parallel_info().find("OpenMP") != std::string::npos ? "OpenMP" : "native";
    r.cpu.blas = blasDescription(r.cpu.blasIsReference);
    r.torchVersion = TORCH_VERSION;
    char host_name[256] = {};
    if (gethostname(host_name, sizeof host_name - 1) == 0) {
        r.hostName = host_name;
    }
    if (at::detail::getCUDAHooks().isBuilt()) {
        const long v = at::detail::getCUDAHooks().versionCUDART(); // e.g. 13000 for 13.0
        r.torchCudaVersion = fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
    }
    r.cudaAvailable = torch::cuda::is_available();
    if (!r.cudaAvailable) {
        r.cudaUnavailableReason = cudaReason();
        return r;
    }
    r.cudnnVersion = fmt::format("{}", at::detail::getCUDAHooks().versionCuDNN());
    r.nvmlDriverVersion = detail::nvmlDriverVersion();
    const int count = static_cast<int>(torch::cuda::device_count());
    for (int i = 0; i < count; ++i) {
        const auto* props = at::cuda::getDeviceProperties(i);
        GpuInfo g;
        g.index = i;
        g.name = props->name;
        g.totalMemoryBytes = props->totalGlobalMem;
        g.computeMajor = props->major;
        g.computeMinor = props->minor;
        g.multiprocessors = props->multiProcessorCount;
        auto live = detail::nvmlRead(i);
        g.utilizationPercent = live.utilizationPercent;
        g.usedMemoryBytes = live.usedMemoryBytes;
        r.gpus.push_back(g);
    }
    return r;
}

} // namespace

const DeviceReport& deviceReport() {
    static const DeviceReport report = probe();
    return report;
}

DeviceReport refreshDeviceReport() {
    DeviceReport r = deviceReport();
    for (auto& g : r.gpus) {
        auto live = detail::nvmlRead(g.index);
        g.utilizationPercent = live.utilizationPercent;
        g.usedMemoryBytes = live.usedMemoryBytes;
    }
    return r;
}

std::vector<std::string> usableDeviceNames() {
    std::vector<std::string> out{"cpu"};
    for (const auto& g : deviceReport().gpus) {
        out.push_back(fmt::format("cuda:{}", g.index));
    }
    return out;
}

} // namespace devicerace
