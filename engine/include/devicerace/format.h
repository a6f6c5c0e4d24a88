#pragma once
/// Numbers as people read them, shared by the CLI and the window. Thread-safe (pure).
#include <cstdint>
#include <string>

namespace devicerace {

/// 61204.3 -> "61,204"; non-finite -> "-".
std::string groupThousands(double value);
/// 1288490188 -> "1.3 GB" (decimal units).
std::string formatBytes(std::uint64_t bytes);

} // namespace devicerace
