#pragma once
// Small nlohmann::json helpers shared by the engine's readers and writers.
#include <nlohmann/json.hpp>

#include <optional>

namespace devicerace::detail {

/// The value at `key`, or nullopt when it is missing or null (a wrong type still throws).
template <typename T>
std::optional<T> optionalOf(const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        return std::nullopt;
    }
    return it->get<T>();
}

/// An optional as JSON: its value, or null.
template <typename Optional>
nlohmann::json orNull(const Optional& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

} // namespace devicerace::detail
