#pragma once
// Rank 0's half of a data-parallel lane's rendezvous, torch-free for the worker server.
#include <memory>

namespace devicerace::detail {

/// Starts rank 0's c10d TCPStore on a free port (all interfaces) and returns it, to be kept in
/// DistConfig::store for the lane's life; `port` receives the port. Throws Error.
std::shared_ptr<void> serveRendezvousStore(double timeoutSeconds, int* port);

} // namespace devicerace::detail
