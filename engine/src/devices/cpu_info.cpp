#include "devices/cpu_info.h"

#include <sched.h>

#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "util/text_util.h"

namespace devicerace::detail {

std::string bf16UnitsOf(std::string_view flags) {
    bool amx = false, avx512 = false;
    for (const auto& word : splitString(flags, ' ')) {
        amx = amx || word == "amx_bf16";
        avx512 = avx512 || word == "avx512_bf16";
    }
    return amx ? "AMX" : avx512 ? "AVX-512 BF16" : "";
}

HostCpu readHostCpu() {
    HostCpu cpu;
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    std::set<std::pair<std::string, std::string>> cores;
    std::string physicalId = "0";
    while (std::getline(in, line)) {
        auto colon = line.find(':');
        if (colon == std::string::npos) {
            continue;
        }
        auto key = trim(std::string_view(line).substr(0, colon));
        auto value = std::string(trim(std::string_view(line).substr(colon + 1)));
        if (key == "model name" && cpu.model.empty()) {
            cpu.model = value;
        } else if (key == "physical id") {
            physicalId = value;
        } else if (key == "core id") {
            cores.emplace(physicalId, value);
        } else if (key == "flags" && cpu.bf16Units.empty()) {
            cpu.bf16Units = bf16UnitsOf(value);
        }
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    cpu.logicalCpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    cpu.physicalCores = cores.empty() ? cpu.logicalCpus : static_cast<int>(cores.size());
    // A container may pin us to fewer CPUs than the host has cores.
    if (cpu.physicalCores > cpu.logicalCpus) {
        cpu.physicalCores = cpu.logicalCpus;
    }
    if (cpu.model.empty()) {
        cpu.model = "unknown CPU";
    }
    return cpu;
}

std::string mappedBlasLibrary() {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        auto slash = line.find('/');
        if (slash == std::string::npos) {
            continue;
        }
        auto path = line.substr(slash);
        auto base = path.substr(path.rfind('/') + 1);
        if (base.starts_with("libblas.so") || base.starts_with("libopenblas") || base.starts_with("libblis") ||
            base.starts_with("libmkl_rt")) {
            return path;
        }
    }
    return {};
}

bool isReferenceBlasPath(const std::string& path) {
    // Debian's alternatives put netlib's reference BLAS at .../blas/libblas.so.3; OpenBLAS
    // and BLIS install theirs under .../openblas*/ or .../blis*/ with the same file name.
    return path.find("/blas/libblas.so") != std::string::npos;
}

} // namespace devicerace::detail
