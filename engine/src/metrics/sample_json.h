#pragma once
// A metric sample from an already parsed JSON object: what sampleFromJsonLine does after parsing,
// for a worker message whose body holds the sample (no dump and parse again).
#include <nlohmann/json.hpp>

#include "devicerace/metric_sample.h"

namespace devicerace::detail {

/// Throws DataError on a malformed sample (as sampleFromJsonLine).
MetricSample sampleFromJson(const nlohmann::json& j);

} // namespace devicerace::detail
