#pragma once
// A child program with pipes on its standard streams, in its own session, started without a
// shell (an argv). Owned by one thread at a time; the lane that spawns it keeps it.
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devicerace::detail {

/// What a child's environment changes from this process's: variables removed, then set.
struct EnvChanges {
    std::vector<std::string> unset;
    std::vector<std::pair<std::string, std::string>> set;
    bool empty() const { return unset.empty() && set.empty(); }
};

/// This process's environment as "NAME=value" strings, with `changes` applied.
std::vector<std::string> environmentWith(const EnvChanges& changes);

class ChildProcess {
public:
    /// Starts argv (argv[0]: a path, or a name looked up in PATH before forking) in this
    /// process's environment with `env` applied. The child gets SIGTERM when the spawning thread
    /// ends (PR_SET_PDEATHSIG). Throws UsageError when the program is missing or cannot be started.
    explicit ChildProcess(const std::vector<std::string>& argv, const EnvChanges& env = {});
    ~ChildProcess(); // kills the group if still running, then reaps
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;

    pid_t pid() const { return m_pid; }
    int stdoutFd() const { return m_out; }
    int stderrFd() const { return m_err; }
    /// Writes a whole line to the child's stdin; false once the child no longer reads it.
    bool write(std::string_view line);
    void closeStdin();
    /// Signals the child's process group (its session).
    void signal(int sig);
    /// The wait status once the child has exited (reaps it; non-blocking).
    std::optional<int> tryWait();
    /// Closes our read ends (after EOF).
    void closeOutput();

private:
    pid_t m_pid = -1;
    int m_in = -1, m_out = -1, m_err = -1;
    std::optional<int> m_status;
};

/// "exit status 3", "killed by signal 9 (SIGKILL)".
std::string describeWaitStatus(int status);
/// The absolute path PATH gives for a program name (names with '/' are returned as they are);
/// empty when not found.
std::string findProgram(const std::string& name);

} // namespace devicerace::detail
