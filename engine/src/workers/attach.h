#pragma once
// attach://: a race drives rank 0 of a job that another launcher started (torchrun, a Kubernetes
// job) over TCP instead of a child's pipes. Rank 0 listens (`devicerace-cli worker --listen`)
// and serves exactly one parent that proves it holds the job's token; the parent's side is a
// bridge process (`devicerace-cli attach HOST:PORT`) that the worker lane starts like any other
// worker, so the worker protocol, its supervision and its failure messages stay the same.
#include <atomic>
#include <string>
#include <string_view>

namespace devicerace::detail {

/// Exit statuses of the bridge that the parent turns into messages.
constexpr int kAttachUnreachable = 4;  // no connection to HOST:PORT
constexpr int kAttachTokenRefused = 5; // the job refused the token
constexpr std::size_t kMinTokenLength = 16;
/// What the listener and the bridge put before each line they log on stderr.
constexpr std::string_view kAttachLogPrefix = "devicerace-cli: ";

/// The token: the file's first line, else $DEVICERACE_ATTACH_TOKEN. Throws UsageError when there
/// is none, it is shorter than kMinTokenLength, or the file cannot be read.
std::string attachToken(const std::string& tokenFile);

/// Rank 0: listens on [ADDR:]PORT (default address 127.0.0.1: reach it through ssh port
/// forwarding) until a parent sends the token; refuses (and logs) every other connection.
/// Returns the connected socket, or -1 once `stop` is set (a signal) before one did.
int acceptParent(const std::string& listen, const std::string& token, const std::atomic<int>& stop);

/// The parent's bridge: connects to HOST:PORT, proves the token, then copies stdin to the socket
/// and the socket to stdout until either ends. Returns the process exit status.
int runAttachBridge(const std::string& address, int proto, const std::string& tokenFile);

} // namespace devicerace::detail
