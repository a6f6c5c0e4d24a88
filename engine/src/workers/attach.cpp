// attach://: rank 0's listener and the parent's bridge (attach.h).
#include "workers/attach.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "devicerace/environment.h"
#include "devicerace/errors.h"
#include "util/socket_connect.h"
#include "util/socket_line.h"
#include "workers/protocol.h"

namespace devicerace::detail {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Seconds a connection gets to send its token.
constexpr int kAuthSeconds = 10;
constexpr int kConnectSeconds = 10;
constexpr std::size_t kMaxAuthLine = 4096;

void logLine(const std::string& text) {
    std::fprintf(stderr, "%s%s\n", std::string(kAttachLogPrefix).c_str(), text.c_str());
    std::fflush(stderr);
}

bool sameToken(const std::string& a, const std::string& b) {
    // Constant time in the token's length: no early exit on the first differing byte.
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    for (std::size_t i = 0; i < a.size(); ++i) {
        diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
    }
    return diff == 0;
}

bool writeAll(int fd, std::string_view data) {
    while (!data.empty()) {
        const auto n = ::write(fd, data.data(), data.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
}

// One line from fd within `seconds` (without its newline); nullopt on timeout, EOF or overflow.
std::optional<std::string> readLine(int fd, int seconds) {
    return readLineBefore(fd, Clock::now() + std::chrono::seconds(seconds), kMaxAuthLine);
}

std::pair<std::string, std::string> splitAddress(const std::string& address, const std::string& defaultHost) {
    const auto colon = address.rfind(':');
    std::string host = colon == std::string::npos ? defaultHost : address.substr(0, colon);
    std::string port = colon == std::string::npos ? address : address.substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    int value = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || ptr != port.data() + port.size() || value < 1 || value > 65535) {
        throw UsageError(fmt::format("'{}': expected [ADDRESS:]PORT with a port from 1 to 65535", address));
    }
    return {host, port};
}

std::string peerName(const sockaddr_storage& addr) {
    char host[NI_MAXHOST] = {}, port[NI_MAXSERV] = {};
    if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), sizeof addr, host, sizeof host, port, sizeof port,
                      NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        return "?";
    }
    return fmt::format("{}:{}", host, port);
}

} // namespace

std::string attachToken(const std::string& tokenFile) {
    std::string token;
    if (!tokenFile.empty()) {
        std::ifstream in(tokenFile);
        if (!in) {
            throw UsageError(fmt::format("cannot read the token file {}: {}", tokenFile, std::strerror(errno)));
        }
        std::getline(in, token);
    } else if (const char* v = devicerace::environmentSwitch("DEVICERACE_ATTACH_TOKEN"); v) {
        token = v;
    }
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) {
        token.pop_back();
    }
    if (token.empty()) {
        throw UsageError("no token: give the job's token in a file (token_file=, --token-file) or in "
                         "DEVICERACE_ATTACH_TOKEN");
    }
    if (token.size() < kMinTokenLength) {
        throw UsageError(fmt::format("the token is {} characters; use at least {} (e.g. openssl rand -hex 16)",
                                     token.size(), kMinTokenLength));
    }
    return token;
}

int acceptParent(const std::string& listen, const std::string& token, const std::atomic<int>& stop) {
    const auto [host, port] = splitAddress(listen, "127.0.0.1");
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
        throw UsageError(fmt::format("--listen {}: {}", listen, ::gai_strerror(rc)));
    }
    const int server = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
    const int one = 1;
    if (server < 0 || ::setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        ::bind(server, found->ai_addr, found->ai_addrlen) != 0 || ::listen(server, 4) != 0) {
        const auto why = std::strerror(errno);
        ::freeaddrinfo(found);
        if (server >= 0) {
            ::close(server);
        }
        throw UsageError(fmt::format("--listen {}: {}", listen, why));
    }
    ::freeaddrinfo(found);
    logLine(fmt::format("rank 0 waits for a race on {} (attach://{}/DEVICE with the job's token)", listen,
                        listen.find(':') == std::string::npos ? "127.0.0.1:" + listen : listen));
    while (!stop) {
        pollfd p{server, POLLIN, 0};
        if (::poll(&p, 1, 200) <= 0) {
            continue;
        }
        sockaddr_storage peer{};
        socklen_t len = sizeof peer;
        const int fd = ::accept4(server, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
        if (fd < 0) {
            continue;
        }
        const auto who = peerName(peer);
        std::string why = "no token within 10 s";
        if (const auto line = readLine(fd, kAuthSeconds)) {
            why = "not an auth message";
            try {
                const auto m = json::parse(*line);
                if (m.value("type", "") == "auth") {
                    if (sameToken(m.value("token", ""), token)) {
                        ::close(server);
                        logLine(fmt::format("a race attached from {}", who));
                        return fd;
                    }
                    why = "wrong token";
                }
            } catch (const std::exception&) {
            }
        }
        logLine(fmt::format("refused a connection from {}: {}", who, why));
        writeAll(fd, encodeMessage({{"type", "error"}, {"phase", "auth"}, {"message", why}}));
        ::close(fd);
    }
    ::close(server);
    return -1;
}

int runAttachBridge(const std::string& address, int proto, const std::string& tokenFile) {
    std::string token;
    try {
        token = attachToken(tokenFile);
    } catch (const std::exception& e) {
        logLine(e.what());
        return 2;
    }
    const auto [host, port] = splitAddress(address, "");
    std::string why;
    const int fd = connectTcpBefore(host, port, Clock::now() + std::chrono::seconds(kConnectSeconds), why);
    if (fd < 0) {
        logLine(fmt::format("cannot reach {}: {} (is the job's rank 0 listening there? devicerace-cli worker --listen)",
                            address, why));
        return kAttachUnreachable;
    }
    if (!writeAll(fd, encodeMessage({{"type", "auth"}, {"token", token}, {"proto", proto}}))) {
        logLine(fmt::format("lost {} while sending the token", address));
        return kAttachUnreachable;
    }
    // The job's first line: its refusal, or the worker's hello.
    const auto first = readLine(fd, kAuthSeconds + 20);
    if (!first) {
        logLine(fmt::format("{} closed the connection without a word (is another race attached?)", address));
        return kAttachTokenRefused;
    }
    try {
        const auto m = json::parse(*first);
        if (m.value("type", "") == "error" && m.value("phase", "") == "auth") {
            logLine(fmt::format("{} refused the token: {}", address, m.value("message", "")));
            return kAttachTokenRefused;
        }
    } catch (const std::exception&) {
    }
    if (!writeAll(1, *first + "\n")) {
        return 0;
    }
    // Relay until the job's side ends; our stdin's end is passed on as a half close.
    bool inOpen = true;
    char buf[65536];
    while (true) {
        pollfd p[2] = {{fd, POLLIN, 0}, {inOpen ? 0 : -1, POLLIN, 0}};
        if (::poll(p, 2, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            return 1;
        }
        if (p[0].revents) {
            const auto n = ::read(fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0 || !writeAll(1, std::string_view(buf, static_cast<std::size_t>(n)))) {
                return 0;
            }
        }
        if (inOpen && p[1].revents) {
            const auto n = ::read(0, buf, sizeof buf);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                inOpen = false;
                ::shutdown(fd, SHUT_WR);
            } else if (!writeAll(fd, std::string_view(buf, static_cast<std::size_t>(n)))) {
                return 0;
            }
        }
    }
}

} // namespace devicerace::detail
