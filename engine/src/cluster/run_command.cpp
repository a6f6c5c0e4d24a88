#include "cluster/run_command.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>

#include "workers/child_process.h"

namespace devicerace::detail {

bool CommandResult::ok() const { return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

CommandResult runCommand(const std::vector<std::string>& argv, double timeoutSeconds) {
    CommandResult r;
    std::unique_ptr<ChildProcess> child;
    try {
        child = std::make_unique<ChildProcess>(argv);
    } catch (const std::exception& e) {
        r.err = e.what();
        return r;
    }
    child->closeStdin();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSeconds);
    bool outOpen = true, errOpen = true;
    char buf[4096];
    while (outOpen || errOpen) {
        if (std::chrono::steady_clock::now() > deadline) {
            child->signal(SIGKILL);
            r.err += "\n(ran past its time limit)";
            (void)child->tryWait();
            return r;
        }
        pollfd p[2] = {{outOpen ? child->stdoutFd() : -1, POLLIN, 0}, {errOpen ? child->stderrFd() : -1, POLLIN, 0}};
        if (::poll(p, 2, 100) <= 0) {
            continue;
        }
        for (int i = 0; i < 2; ++i) {
            if (!p[i].revents) {
                continue;
            }
            const auto n = ::read(p[i].fd, buf, sizeof buf);
            if (n <= 0) {
                (i == 0 ? outOpen : errOpen) = false;
            } else if ((i == 0 ? r.out : r.err).size() < (1 << 20)) {
                (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
            }
        }
    }
    child->closeOutput();
    while (std::chrono::steady_clock::now() < deadline) {
        if (auto st = child->tryWait()) {
            r.status = *st;
            return r;
        }
        ::usleep(10000);
    }
    child->signal(SIGKILL);
    return r;
}

} // namespace devicerace::detail
