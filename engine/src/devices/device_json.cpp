// DeviceReport <-> JSON: the one shape the hello, `devices --json` and recordings share.
#include "devices/device_json.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "util/json_util.h"

namespace devicerace {

using detail::checkedAt;
using detail::checkedValue;
using detail::optionalOf;
using detail::orNull;
using nlohmann::json;

namespace {

// A machine with more GPUs than this is not one we know how to describe.
constexpr std::size_t kMaxGpus = 64;

} // namespace

namespace detail {

json deviceReportJson(const DeviceReport& r) {
    json gpus = json::array();
    for (const auto& g : r.gpus) {
        gpus.push_back({{"index", g.index},
                        {"name", g.name},
                        {"total_memory_bytes", g.totalMemoryBytes},
                        {"compute", fmt::format("{}.{}", g.computeMajor, g.computeMinor)},
                        {"multiprocessors", g.multiprocessors},
                        {"utilization_percent", orNull(g.utilizationPercent)},
                        {"used_memory_bytes", orNull(g.usedMemoryBytes)}});
    }
    json j = {{"cpu",
               {{"model", r.cpu.model},
                {"physical_cores", r.cpu.physicalCores},
                {"logical_cpus", r.cpu.logicalCpus},
                {"torch_threads", r.cpu.torchThreads},
                {"parallel_backend", r.cpu.parallelBackend},
                {"blas", r.cpu.blas},
                {"blas_is_reference", r.cpu.blasIsReference},
                {"bf16_units", r.cpu.bf16Units},
                {"amx_not_exposed", r.cpu.amxNotExposed}}},
              {"gpus", gpus},
              {"cuda_available", r.cudaAvailable},
              {"cuda_unavailable_reason", r.cudaUnavailableReason},
              {"torch", r.torchVersion},
              {"torch_cuda", r.torchCudaVersion},
              {"cudnn", r.cudnnVersion},
              {"nvml_driver", r.nvmlDriverVersion},
              {"host", r.hostName}};
    return j;
}

DeviceReport deviceReportFromJsonValue(const json& j) {
    try {
        DeviceReport r;
        const auto& cpu = j.at("cpu");
        r.cpu.model = cpu.at("model").get<std::string>();
        r.cpu.physicalCores = checkedAt<int>(cpu, "physical_cores");
        r.cpu.logicalCpus = checkedAt<int>(cpu, "logical_cpus");
        r.cpu.torchThreads = checkedValue(cpu, "torch_threads", 0);
        r.cpu.parallelBackend = cpu.value("parallel_backend", std::string());
        r.cpu.blas = cpu.value("blas", std::string());
        r.cpu.blasIsReference = cpu.value("blas_is_reference", false);
        r.cpu.bf16Units = cpu.value("bf16_units", std::string());
        r.cpu.amxNotExposed = cpu.value("amx_not_exposed", false);
        const auto& gpus = j.at("gpus");
        if (!gpus.is_array() || gpus.size() > kMaxGpus) {
            throw DataError(fmt::format("gpus: expected a list of at most {}", kMaxGpus));
        }
        for (const auto& g : gpus) {
            GpuInfo info;
            info.index = checkedAt<int>(g, "index");
            info.name = g.at("name").get<std::string>();
            info.totalMemoryBytes = checkedAt<std::uint64_t>(g, "total_memory_bytes");
            const auto compute = g.value("compute", std::string("0.0"));
            if (std::sscanf(compute.c_str(), "%d.%d", &info.computeMajor, &info.computeMinor) != 2) {
                throw DataError(fmt::format("gpu {}: compute capability '{}' is not MAJOR.MINOR", info.index, compute));
            }
            info.multiprocessors = checkedValue(g, "multiprocessors", 0);
            info.utilizationPercent = optionalOf<int>(g, "utilization_percent");
            info.usedMemoryBytes = optionalOf<std::uint64_t>(g, "used_memory_bytes");
            r.gpus.push_back(std::move(info));
        }
        r.cudaAvailable = j.at("cuda_available").get<bool>();
        r.cudaUnavailableReason = j.value("cuda_unavailable_reason", std::string());
        r.torchVersion = j.value("torch", std::string());
        r.torchCudaVersion = j.value("torch_cuda", std::string());
        r.cudnnVersion = j.value("cudnn", std::string());
        r.nvmlDriverVersion = j.value("nvml_driver", std::string());
        r.hostName = j.value("host", std::string());
        return r;
    } catch (const json::exception& e) {
        throw DataError(fmt::format("malformed device report: {}", e.what()));
    }
}

std::string describeMachine(const DeviceReport& r) {
    std::string out = r.hostName.empty() ? r.cpu.model : r.hostName + ": " + r.cpu.model;
    for (const auto& g : r.gpus) {
        out += " · " + g.name;
    }
    if (!r.torchVersion.empty()) {
        out += " · LibTorch " + r.torchVersion;
    }
    return out;
}

} // namespace detail

std::string deviceReportToJson(const DeviceReport& r) {
    return detail::deviceReportJson(r).dump(-1, ' ', false, json::error_handler_t::replace);
}

DeviceReport deviceReportFromJson(const std::string& text) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        throw DataError(fmt::format("malformed device report: {}", e.what()));
    }
    return detail::deviceReportFromJsonValue(j);
}

} // namespace devicerace
