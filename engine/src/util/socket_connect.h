#pragma once
// A TCP connection to host:port before a deadline: the attach bridge's to a job's rank 0, a rank's
// liveness connection to rank 0.
#include <chrono>
#include <string>

namespace devicerace::detail {

/// One pass over host:port's addresses (getaddrinfo, numeric or named port), each connect given
/// until `deadline`. Returns a blocking, close-on-exec socket, or -1 with `why` set to the last
/// failure's words ("Connection refused", a resolver's message).
int connectTcpBefore(const std::string& host, const std::string& port, std::chrono::steady_clock::time_point deadline,
                     std::string& why);

} // namespace devicerace::detail
