#pragma once
// The lane-key table behind devicerace/lane_keys.h: each key's description (name, JSON type,
// choices, default, the lanes it applies to, help) with how it parses into a LaneSpec and writes
// back. lane_keys.cpp builds parsing, formatting, help and the worker protocol's typed fields on
// it. Thread-safe (built once).
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "devicerace/lane_keys.h"
#include "devicerace/lane_spec.h"

namespace devicerace::detail {

/// One key: its description and how it reads, writes and travels.
struct KeyCodec {
    LaneKeyInfo info;
    std::function<void(LaneSpec&, std::string_view value, const std::string& text)> parse;
    std::function<std::optional<std::string>(const LaneSpec&)> format; // nullopt: unset
};

/// Every key, in the order lanes are written.
const std::vector<KeyCodec>& keyCodecs();
/// The key named `name`, or null.
const KeyCodec* findKeyCodec(std::string_view name);
/// `value` as a whole integer; throws UsageError naming the lane `spec` and `key` otherwise.
std::int64_t parseInteger(std::string_view key, std::string_view value, const std::string& spec);
/// "a, b or c".
std::string orList(const std::vector<std::string>& words);

} // namespace devicerace::detail
