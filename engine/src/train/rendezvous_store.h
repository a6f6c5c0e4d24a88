#pragma once
// Rank 0's half of a data-parallel lane's rendezvous, torch-free for the worker server.
#include <memory>

namespace devicerace::detail {

/// Starts rank 0's c10d TCPStore on a free port (all interfaces) and returns it, to be kept in
/// DistConfig::store for the lane's life; `port` receives the port. Throws Error.
std::shared_ptr<void> serveRendezvousStore(double timeoutSeconds, int* port);

} // namespace devicerace::detail

namespace devicerace {

/// How long ranks wait for each other at a rendezvous: DEVICERACE_RENDEZVOUS_TIMEOUT=SECONDS
/// (1-3600), else 60 s (local ranks) or 120 s (any remote rank).
double rendezvousTimeout(bool remote);

} // namespace devicerace
