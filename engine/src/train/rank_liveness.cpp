#include "train/rank_liveness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "devicerace/errors.h"
#include "util/socket_connect.h"
#include "util/socket_line.h"

namespace devicerace::detail {

namespace {

using Clock = std::chrono::steady_clock;

const std::string kPortKey = "devicerace/liveness/port";
const std::string kTokenKey = "devicerace/liveness/token";

std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<std::uint8_t>& b) { return {b.begin(), b.end()}; }

int remainingMs(Clock::time_point deadline) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return ms > 0 ? static_cast<int>(ms) : 0;
}

// A listening socket on every address (the rendezvous store listens there too): IPv6 with
// IPv4 mapped where the machine has IPv6, else IPv4.
int listenAnywhere(int backlog, int* port) {
    int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        int off = 0;
        ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
        sockaddr_in6 a{};
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, backlog) == 0) {
            socklen_t len = sizeof a;
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
            *port = ntohs(a.sin6_port);
            return fd;
        }
        ::close(fd);
    }
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, backlog) != 0) {
        const int err = errno;
        if (fd >= 0) {
            ::close(fd);
        }
        throw Error(
            fmt::format("rank 0 cannot listen for the other ranks' liveness connections: {}", std::strerror(err)));
    }
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    *port = ntohs(a.sin_port);
    return fd;
}

int connectTo(const std::string& host, int port, Clock::time_point deadline) {
    std::string why;
    while (true) {
        // rank 0 may not listen yet: each try is short, the tries go on to the deadline
        const auto tryEnd = std::min(deadline, Clock::now() + std::chrono::seconds(1));
        if (const int fd = connectTcpBefore(host, std::to_string(port), tryEnd, why); fd >= 0) {
            return fd;
        }
        if (Clock::now() > deadline) {
            throw Error(fmt::format("cannot reach rank 0 at {}:{} for its liveness connection: {}", host, port, why));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

bool sendAll(int fd, const std::string& s) {
    std::size_t done = 0;
    while (done < s.size()) {
        const auto n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        done += static_cast<std::size_t>(n);
    }
    return true;
}

std::string newToken() {
    std::random_device rd;
    return fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
}

} // namespace

RankLiveness::RankLiveness(c10d::Store& store, int rank, int world, const std::string& rank0Host, double timeoutSeconds)
    : m_rank(rank) {
    if (world < 2) {
        return;
    }
    const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(timeoutSeconds * 1000));
    const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeoutSeconds * 1000));
    if (rank != 0) {
        store.wait({kPortKey, kTokenKey}, timeout);
        const int port = std::stoi(text(store.get(kPortKey)));
        const int fd = connectTo(rank0Host, port, deadline);
        m_peers.push_back({fd, 0});
        if (!sendAll(fd, fmt::format("{} {}\n", text(store.get(kTokenKey)), rank))) {
            throw Error(fmt::format("rank {} could not open its liveness connection to rank 0", rank));
        }
        return;
    }
    int port = 0;
    const int server = listenAnywhere(world, &port);
    const auto token = newToken();
    store.set(kTokenKey, bytes(token));
    store.set(kPortKey, bytes(std::to_string(port)));
    std::set<int> missing;
    for (int r = 1; r < world; ++r) {
        missing.insert(r);
    }
    // Only connections that name the token and an expected rank count (the port is open to all).
    while (!missing.empty()) {
        pollfd p{server, POLLIN, 0};
        if (::poll(&p, 1, remainingMs(deadline)) <= 0) {
            ::close(server);
            throw Error(fmt::format("rank 0: {} rank(s) did not open their liveness connection within {:.0f} s",
                                    missing.size(), timeoutSeconds));
        }
        const int fd = ::accept4(server, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            continue;
        }
        const auto line = readLineBefore(fd, deadline, 256); // "TOKEN RANK"
        const auto space = line ? line->find(' ') : std::string::npos;
        int who = -1;
        if (space != std::string::npos && line->substr(0, space) == token) {
            try {
                who = std::stoi(line->substr(space + 1));
            } catch (const std::exception&) {
            }
        }
        if (!missing.count(who)) {
            ::close(fd);
            continue;
        }
        missing.erase(who);
        m_peers.push_back({fd, who});
    }
    ::close(server);
}

RankLiveness::~RankLiveness() {
    for (const auto& p : m_peers) {
        ::close(p.fd);
    }
}

std::optional<int> RankLiveness::lostRank() const {
    for (const auto& p : m_peers) {
        pollfd q{p.fd, POLLIN, 0};
        if (::poll(&q, 1, 0) <= 0) {
            continue; // nothing to read: the process is there
        }
        char c = 0;
        const auto n = ::recv(p.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            return p.rank; // closed (FIN) or reset: the process ended
        }
    }
    return std::nullopt;
}

} // namespace devicerace::detail
