#pragma once
// Small nlohmann::json helpers shared by the engine's readers and writers.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

namespace devicerace::detail {

/// `j.get<T>()`, except that an integer T refuses a number outside its range: nlohmann converts
/// with an unchecked cast, undefined behaviour for a float such as 6e38 (found by fuzzing the
/// protocol) and a silent wrap for a large integer. Throws json::out_of_range naming `key` (a
/// wrong type still throws json::type_error), so each reader's json::exception handler turns it
/// into its own DataError with the file or message it came from.
template <typename T>
T checkedGet(const nlohmann::json& j, const char* key) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        using Limits = std::numeric_limits<T>;
        bool fits = true;
        if (j.is_number_float()) {
            const double v = j.get<double>();
            fits = v >= static_cast<double>(Limits::min()) && v < static_cast<double>(Limits::max()) + 1.0;
        } else if (j.is_number_unsigned()) {
            fits = j.get<std::uint64_t>() <= static_cast<std::uint64_t>(Limits::max());
        } else if (j.is_number_integer()) {
            const auto v = j.get<std::int64_t>();
            fits = std::is_signed_v<T>
                       ? v >= static_cast<std::int64_t>(Limits::min()) && v <= static_cast<std::int64_t>(Limits::max())
                       : v >= 0;
        }
        if (!fits) {
            throw nlohmann::json::out_of_range::create(
                406, std::string("\"") + key + "\" is " + j.dump() + ", out of range for an integer of this field", &j);
        }
    }
    return j.get<T>();
}

/// `j.at(key)` as a T, range-checked (checkedGet).
template <typename T>
T checkedAt(const nlohmann::json& j, const char* key) {
    return checkedGet<T>(j.at(key), key);
}

/// `j.value(key, fallback)`, range-checked (checkedGet).
template <typename T>
T checkedValue(const nlohmann::json& j, const char* key, T fallback) {
    if (!j.is_object()) {
        return j.value(key, fallback); // throws nlohmann's type_error, as value() does
    }
    auto it = j.find(key);
    return it == j.end() ? fallback : checkedGet<T>(*it, key);
}

/// The value at `key`, or nullopt when it is missing or null (a wrong type still throws;
/// integers are range-checked as by checkedGet).
template <typename T>
std::optional<T> optionalOf(const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        return std::nullopt;
    }
    return checkedGet<T>(*it, key);
}

/// An optional as JSON: its value, or null.
template <typename Optional>
nlohmann::json orNull(const Optional& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

} // namespace devicerace::detail
