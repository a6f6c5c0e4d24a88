#pragma once
// The one JSON shape of a DeviceReport, as a JSON value: the worker protocol's hello, the CLI's
// `devices --json` and a recording's manifest all write and read it (device_info.h has the text
// forms). Thread-safe.
#include <nlohmann/json.hpp>

#include "devicerace/device_info.h"

namespace devicerace::detail {

nlohmann::json deviceReportJson(const DeviceReport& report);
/// Strict about types, bounded in size; throws DataError.
DeviceReport deviceReportFromJsonValue(const nlohmann::json& j);
/// "gpubox: AMD EPYC 9654 · NVIDIA H100 80GB HBM3 · LibTorch 2.11.0": a machine in one line.
std::string describeMachine(const DeviceReport& report);

} // namespace devicerace::detail
