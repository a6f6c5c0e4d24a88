#include "util/socket_line.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace devicerace::detail {

std::optional<std::string> readLineBefore(int fd, std::chrono::steady_clock::time_point deadline,
                                          std::size_t maxLength) {
    std::string line;
    while (line.size() < maxLength) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) {
            return std::nullopt;
        }
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) <= 0) {
            continue;
        }
        char c = 0;
        const auto n = ::read(fd, &c, 1);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return std::nullopt;
        }
        if (c == '\n') {
            return line;
        }
        line += c;
    }
    return std::nullopt;
}

} // namespace devicerace::detail
