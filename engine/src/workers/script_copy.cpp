#include "workers/script_copy.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "devicerace/errors.h"
#include "workers/child_process.h"
#include "util/text_util.h"
#include "workers/worker_connection.h"

namespace devicerace::detail {

namespace fs = std::filesystem;

std::string scriptCopyDestination(const LaneSpec& spec) {
    if (spec.workdir && !spec.workdir->empty()) {
        auto dest = *spec.workdir;
        // rsync's --protect-args keeps the path from the remote shell, so ~ is not expanded
        // there: a path under the home folder is given relative to it (the login folder).
        if (dest == "~") {
            return ".";
        }
        if (dest.starts_with("~/")) {
            return dest.substr(2);
        }
        return dest;
    }
    auto folder = fs::path(spec.copy.value_or("")).lexically_normal();
    if (folder.filename().empty()) {
        folder = folder.parent_path(); // "project/": its name is the part before the slash
    }
    const auto name = folder.filename().string();
    return name.empty() || name == "." ? std::string("devicerace-script") : name;
}

void copyScriptFolder(const LaneSpec& spec, double timeoutSeconds) {
    if (!spec.copy) {
        return;
    }
    const auto& source = *spec.copy;
    std::error_code ec;
    if (!fs::is_directory(source, ec)) {
        throw UsageError(fmt::format("copy={}: no such folder here", source));
    }
    if (findProgram("rsync").empty()) {
        throw UsageError(fmt::format("copy={}: rsync is not installed here (apt-get install rsync; the host needs it "
                                     "too)",
                                     source));
    }
    const auto target = parseSshTarget(spec.host);
    std::string ssh;
    for (const auto& word : sshOptions(target)) {
        ssh += (ssh.empty() ? "" : " ") + shellQuote(word);
    }
    const auto dest = scriptCopyDestination(spec);
    const std::vector<std::string> argv{"rsync",
                                        "-a",
                                        "--protect-args",
                                        "-e",
                                        ssh,
                                        "--",
                                        fs::path(source).lexically_normal().string() + "/",
                                        target.host + ":" + dest + "/"};
    ChildProcess child(argv);
    child.closeStdin();
    std::string err;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSeconds);
    bool open = true;
    while (open) {
        pollfd fds[2] = {{child.stdoutFd(), POLLIN, 0}, {child.stderrFd(), POLLIN, 0}};
        ::poll(fds, 2, 100);
        open = false;
        for (auto& f : fds) {
            if (f.revents & (POLLIN | POLLHUP)) {
                char buf[4096];
                const auto n = ::read(f.fd, buf, sizeof buf);
                if (n > 0) {
                    if (f.fd == child.stderrFd() && err.size() < 8192) {
                        err.append(buf, static_cast<std::size_t>(n));
                    }
                    open = true;
                }
            } else {
                open = true;
            }
        }
        if (std::chrono::steady_clock::now() > deadline) {
            child.signal(SIGKILL);
            throw UsageError(fmt::format("copy={} to {}: rsync took more than {:.0f} s; stopped", source, target.host,
                                         timeoutSeconds));
        }
    }
    int status = 0;
    for (;;) {
        if (auto s = child.tryWait()) {
            status = *s;
            break;
        }
        ::usleep(20000);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::string said;
        for (const auto line : splitString(err, '\n')) {
            if (!line.empty()) {
                said = std::string(line); // rsync's first line names the cause, its last sums up
                break;
            }
        }
        throw UsageError(fmt::format("copy={} to {}:{} failed ({}){}{}", source, target.host, dest,
                                     describeWaitStatus(status), said.empty() ? "" : ": ", said));
    }
}

} // namespace devicerace::detail
