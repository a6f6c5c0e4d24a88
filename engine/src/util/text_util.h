#pragma once
// Small string helpers shared by the engine's parsers. Thread-safe (pure).
#include <string>
#include <string_view>
#include <vector>

namespace devicerace {

std::string_view trim(std::string_view s);
std::vector<std::string_view> splitString(std::string_view s, char sep);

} // namespace devicerace
