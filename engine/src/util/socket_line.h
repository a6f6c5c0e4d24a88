#pragma once
// A line from a socket or pipe before a deadline: the first words a connection says (an attach
// token, a rank's liveness greeting).
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace devicerace::detail {

/// One line from fd (without its newline) read before `deadline`; nullopt on timeout, EOF or a
/// line longer than maxLength. Reads byte by byte: what follows the line stays for the next reader.
std::optional<std::string> readLineBefore(int fd, std::chrono::steady_clock::time_point deadline,
                                          std::size_t maxLength);

} // namespace devicerace::detail
