#include "workers/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "devicerace/errors.h"
#include "util/text_util.h"

extern char** environ;

namespace devicerace::detail {

std::string findProgram(const std::string& name) {
    if (name.find('/') != std::string::npos) {
        return name;
    }
    const char* path = std::getenv("PATH");
    for (const auto& dir : splitString(path ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
        std::string candidate = (dir.empty() ? std::string(".") : std::string(dir)) + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) {
            return candidate;
        }
    }
    return {};
}

std::vector<std::string> environmentWith(const EnvChanges& changes) {
    std::vector<std::string> out;
    auto named = [](std::string_view entry, std::string_view name) {
        return entry.size() > name.size() && entry.substr(0, name.size()) == name && entry[name.size()] == '=';
    };
    for (char** e = environ; e && *e; ++e) {
        const std::string_view entry(*e);
        bool drop = false;
        for (const auto& name : changes.unset) {
            drop = drop || named(entry, name);
        }
        for (const auto& [name, value] : changes.set) {
            drop = drop || named(entry, name);
        }
        if (!drop) {
            out.emplace_back(entry);
        }
    }
    for (const auto& [name, value] : changes.set) {
        out.push_back(name + "=" + value);
    }
    return out;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const EnvChanges& env) {
    if (argv.empty()) {
        throw UsageError("no program to start");
    }
    const std::string program = findProgram(argv[0]);
    if (program.empty() || ::access(program.c_str(), F_OK) != 0) {
        throw UsageError(fmt::format("{}: no such program{}", argv[0],
                                     argv[0].find('/') == std::string::npos ? " on the PATH" : ""));
    }
    if (::access(program.c_str(), X_OK) != 0) {
        throw UsageError(fmt::format("{}: not executable: {}", program, std::strerror(errno)));
    }
    // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
    std::vector<char*> args;
    for (const auto& a : argv) {
        args.push_back(const_cast<char*>(a.c_str()));
    }
    args.push_back(nullptr);
    const auto environment = env.empty() ? std::vector<std::string>{} : environmentWith(env);
    std::vector<char*> envp;
    for (const auto& e : environment) {
        envp.push_back(const_cast<char*>(e.c_str()));
    }
    envp.push_back(nullptr);
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
        throw Error(fmt::format("cannot create pipes for {}: {}", argv[0], std::strerror(errno)));
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        const int e = errno;
        for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) {
            ::close(fd);
        }
        throw Error(fmt::format("cannot start {}: {}", argv[0], std::strerror(e)));
    }
    if (pid == 0) {
        ::setsid(); // its own session and group: signalled as a whole, no terminal
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) {
            ::_exit(125); // the parent died before the line above
        }
        ::dup2(in[0], 0);
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
        ::syscall(SYS_close_range, 3U, ~0U, 0U);
        ::signal(SIGPIPE, SIG_DFL);
        ::execve(program.c_str(), args.data(), env.empty() ? environ : envp.data());
        ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    m_pid = pid;
    m_in = in[1];
    m_out = out[0];
    m_err = err[0];
}

ChildProcess::~ChildProcess() {
    closeStdin();
    if (!m_status && m_pid > 0) {
        signal(SIGKILL);
        int status = 0;
        while (::waitpid(m_pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    closeOutput();
}

bool ChildProcess::write(std::string_view line) {
    if (m_in < 0) {
        return false;
    }
    while (!line.empty()) {
        // MSG_NOSIGNAL is for sockets; SIGPIPE is ignored process-wide by the lanes' owner
        // (see ignoreSigpipe in worker_lane.cpp), so a dead reader gives EPIPE here.
        const auto n = ::write(m_in, line.data(), line.size());
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return false;
        }
        line.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
}

void ChildProcess::closeStdin() {
    if (m_in >= 0) {
        ::close(m_in);
        m_in = -1;
    }
}

void ChildProcess::closeOutput() {
    for (int* fd : {&m_out, &m_err}) {
        if (*fd >= 0) {
            ::close(*fd);
            *fd = -1;
        }
    }
}

void ChildProcess::signal(int sig) {
    if (m_pid > 0 && !m_status) {
        if (::kill(-m_pid, sig) != 0) {
            ::kill(m_pid, sig);
        }
    }
}

std::optional<int> ChildProcess::tryWait() {
    if (m_status || m_pid <= 0) {
        return m_status;
    }
    int status = 0;
    if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
        m_status = status;
    }
    return m_status;
}

std::string describeWaitStatus(int status) {
    if (WIFEXITED(status)) {
        return fmt::format("exit status {}", WEXITSTATUS(status));
    }
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char* abbrev = sigabbrev_np(sig);
        return fmt::format("killed by signal {} (SIG{}{})", sig, abbrev ? abbrev : "?",
                           WCOREDUMP(status) ? ", core dumped" : "");
    }
    return fmt::format("wait status {}", status);
}

} // namespace devicerace::detail
