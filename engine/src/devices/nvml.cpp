#include "devices/nvml.h"

#include <dlfcn.h>

#include <mutex>

namespace devicerace::detail {

namespace {

// The few NVML entry points used, declared here so no NVML header is needed.
using nvmlDevice_t = void*;
struct NvmlUtilization {
    unsigned gpu, memory;
};
struct NvmlMemory {
    unsigned long long total, free, used;
};

struct Nvml {
    bool ok = false;
    int (*getHandle)(unsigned, nvmlDevice_t*) = nullptr;
    int (*getUtilization)(nvmlDevice_t, NvmlUtilization*) = nullptr;
    int (*getMemory)(nvmlDevice_t, NvmlMemory*) = nullptr;
    int (*getEnergy)(nvmlDevice_t, unsigned long long*) = nullptr; // millijoules since the driver loaded
    std::string driver;
};

const Nvml& nvml() {
    static const Nvml lib = [] {
        Nvml n;
        void* h = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (!h) {
            return n;
        }
        auto init = reinterpret_cast<int (*)()>(dlsym(h, "nvmlInit_v2"));
        auto driver = reinterpret_cast<int (*)(char*, unsigned)>(dlsym(h, "nvmlSystemGetDriverVersion"));
        n.getHandle = reinterpret_cast<int (*)(unsigned, nvmlDevice_t*)>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
        n.getUtilization =
            reinterpret_cast<int (*)(nvmlDevice_t, NvmlUtilization*)>(dlsym(h, "nvmlDeviceGetUtilizationRates"));
        n.getMemory = reinterpret_cast<int (*)(nvmlDevice_t, NvmlMemory*)>(dlsym(h, "nvmlDeviceGetMemoryInfo"));
        n.getEnergy = reinterpret_cast<int (*)(nvmlDevice_t, unsigned long long*)>(
            dlsym(h, "nvmlDeviceGetTotalEnergyConsumption"));
        if (!init || !n.getHandle || init() != 0) {
            return n;
        }
        char buf[96] = {};
        if (driver && driver(buf, sizeof buf) == 0) {
            n.driver = buf;
        }
        n.ok = true;
        return n;
    }();
    return lib;
}

} // namespace

std::string nvmlDriverVersion() { return nvml().driver; }

NvmlReading nvmlRead(int index) {
    NvmlReading r;
    const auto& n = nvml();
    nvmlDevice_t dev = nullptr;
    if (!n.ok || n.getHandle(static_cast<unsigned>(index), &dev) != 0) {
        return r;
    }
    NvmlUtilization u{};
    if (n.getUtilization && n.getUtilization(dev, &u) == 0) {
        r.utilizationPercent = static_cast<int>(u.gpu);
    }
    NvmlMemory m{};
    if (n.getMemory && n.getMemory(dev, &m) == 0) {
        r.usedMemoryBytes = m.used;
    }
    return r;
}

std::optional<double> nvmlEnergyJoules(int index) {
    const auto& n = nvml();
    nvmlDevice_t dev = nullptr;
    unsigned long long mj = 0;
    if (!n.ok || !n.getEnergy || n.getHandle(static_cast<unsigned>(index), &dev) != 0 || n.getEnergy(dev, &mj) != 0) {
        return std::nullopt;
    }
    return static_cast<double>(mj) / 1000.0;
}

bool nvmlPresent() { return nvml().ok; }

} // namespace devicerace::detail
