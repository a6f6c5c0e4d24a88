// The launched ranks' store: c10d's TCPStore behind a torch-free face (launch_store.h).
#include "train/launch_store.h"

#include <fmt/format.h>

#include "devicerace/errors.h"
#include "train/store_holder.h"

namespace devicerace::detail {

struct LaunchStore::Impl {
    std::shared_ptr<StoreHolder> holder = std::make_shared<StoreHolder>();
};

namespace {

c10d::TCPStoreOptions options(int port, bool server, double timeoutSeconds) {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(port);
    opts.isServer = server;
    opts.waitWorkers = false;
    opts.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeoutSeconds * 1000));
    return opts;
}

std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

} // namespace

std::shared_ptr<LaunchStore> LaunchStore::serve(int port, double timeoutSeconds) {
    std::shared_ptr<LaunchStore> out(new LaunchStore);
    out->m_impl = std::make_unique<Impl>();
    try {
        out->m_impl->holder->store =
            c10::make_intrusive<c10d::TCPStore>("0.0.0.0", options(port, true, timeoutSeconds));
    } catch (const std::exception& e) {
        throw Error(fmt::format("rank 0 cannot serve the rendezvous store on port {} (in use? name another with "
                                "port=): {}",
                                port, e.what()));
    }
    return out;
}

std::shared_ptr<LaunchStore> LaunchStore::connect(const std::string& host, int port, double timeoutSeconds) {
    std::shared_ptr<LaunchStore> out(new LaunchStore);
    out->m_impl = std::make_unique<Impl>();
    try {
        out->m_impl->holder->store = c10::make_intrusive<c10d::TCPStore>(host, options(port, false, timeoutSeconds));
    } catch (const std::exception& e) {
        throw Error(fmt::format("cannot reach the rendezvous store at {}:{} within {:.0f} s: {}", host, port,
                                timeoutSeconds, e.what()));
    }
    return out;
}

LaunchStore::~LaunchStore() = default;

void LaunchStore::set(const std::string& key, const std::string& value) {
    try {
        m_impl->holder->store->set(key, bytes(value));
    } catch (const std::exception& e) {
        throw Error(fmt::format("the rendezvous store is gone: {}", e.what()));
    }
}

std::optional<std::string> LaunchStore::tryGet(const std::string& key) {
    try {
        if (!m_impl->holder->store->check({key})) {
            return std::nullopt;
        }
        const auto v = m_impl->holder->store->get(key);
        return std::string(v.begin(), v.end());
    } catch (const std::exception& e) {
        throw Error(fmt::format("the rendezvous store is gone: {}", e.what()));
    }
}

std::shared_ptr<void> LaunchStore::rendezvousHolder() const { return m_impl->holder; }

} // namespace devicerace::detail
