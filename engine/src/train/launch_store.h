#pragma once
// The key-value store through which the ranks of a launched data-parallel lane (slurm://,
// attach://; docs/PARALLEL.md) learn their lane from rank 0: c10d's TCPStore, torch-free here.
// Rank 0 serves it (or, under torchrun, every rank is a client of the launcher's own store);
// the same store then carries the lane's rendezvous (DistConfig::store). Thread-safe.
#include <memory>
#include <optional>
#include <string>

namespace devicerace::detail {

class LaunchStore {
public:
    /// Rank 0: serves a store on `port` (all interfaces). Throws Error naming the port.
    static std::shared_ptr<LaunchStore> serve(int port, double timeoutSeconds);
    /// Any rank: a client of the store at host:port, trying for up to `timeoutSeconds`.
    static std::shared_ptr<LaunchStore> connect(const std::string& host, int port, double timeoutSeconds);
    ~LaunchStore();

    void set(const std::string& key, const std::string& value);
    /// The key's value, or nullopt while nobody has set it. Throws Error when the store is gone.
    std::optional<std::string> tryGet(const std::string& key);
    /// For DistConfig::store (rank 0's rendezvous runs on this store).
    std::shared_ptr<void> rendezvousHolder() const;

private:
    LaunchStore() = default;
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace devicerace::detail
