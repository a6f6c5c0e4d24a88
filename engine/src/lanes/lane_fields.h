#pragma once
// The lane keys' codecs (the table of devicerace/lane_keys.h): parse one key=value into a
// LaneSpec, write a spec's keys back, and carry them as typed JSON fields (the worker protocol's
// `config.lane_fields`). Thread-safe.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "devicerace/lane_spec.h"

namespace devicerace::detail {

/// Sets key=value on `spec` (`text`: the whole lane, for messages); throws UsageError naming the
/// lane, the key and what it takes. Unknown keys are refused listing every key.
void applyLaneKey(LaneSpec& spec, std::string_view key, std::string_view value, const std::string& text);

/// The checks across keys (cmd= with framework=, data-parallel-only keys, ...), after every key
/// was applied; throws UsageError naming the lane `text`.
void checkLaneSpec(const LaneSpec& spec, const std::string& text);

/// Clears what belongs to a whole data-parallel lane and not to one of its ranks: the ranks'
/// devices, workers, backend, global_batch, master and the launcher's keys (slurm://, attach://).
void clearGroupKeys(LaneSpec& spec);

/// ",threads=2,batch=64,...,name=x": every key the spec sets, in the table's order.
std::string formatLaneKeys(const LaneSpec& spec);

/// {"device": "cpu", "threads": 2, "lr": 0.01, "fused": true, "fault": {"kind": "segv", "step": 3}}:
/// the device part and every set key, each in its JSON type.
nlohmann::json laneToFields(const LaneSpec& spec);
/// The reverse, every value checked by its key's parser; throws UsageError naming the field.
LaneSpec laneFromFields(const nlohmann::json& fields);

} // namespace devicerace::detail
