#pragma once
// The parent's end of one worker: the child (devicerace-cli worker, or ssh running it on
// another machine), its lines, the hello, and what its end means. One thread at a time
// reads (the lane's constructor, then its I/O thread); send() may come from any thread.
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "devicerace/device_info.h"
#include "devicerace/lane_spec.h"
#include "devicerace/worker.h"
#include "workers/child_process.h"
#include "workers/protocol.h"

namespace devicerace::detail {

/// Where a worker runs and how it is reached.
struct WorkerEndpoint {
    bool remote = false;
    std::vector<std::string> program; // external lanes: the argv before "--proto 1"
    SshTarget target;                 // remote only
    std::string cli;                  // the devicerace-cli to run (remote: as the remote shell finds it), or cmd=
    bool command = false;             // remote only: cli is a cmd= program, run as "CMD --proto 1"
    std::string framework;            // a shipped lane program (remote: "devicerace-cli worker --framework F")
    std::string where;                // the machine, for messages: "gpubox", "this machine"
    std::string who;                  // the worker, for messages: "the worker on gpubox", "the pytorch lane"
    std::string attach;               // attach:// lanes: the job's HOST:PORT (program is the bridge)
    double helloTimeout = 0;          // seconds to wait for the hello (0: the default for local or remote)
    bool spinWaits = false;           // local: started with libgomp's default waits (WaitPolicy)
};
WorkerEndpoint endpointFor(const LaneSpec& spec);
/// The argv that starts the worker (no shell locally; ssh in BatchMode remotely).
std::vector<std::string> workerArgv(const WorkerEndpoint& endpoint);
/// One word for a POSIX shell: 'text' with its quotes escaped.
std::string shellQuote(const std::string& text);
/// ssh and its options for `target` (BatchMode, timeouts, port, user), before the host name.
std::vector<std::string> sshOptions(const SshTarget& target);
/// The local devicerace-cli: $DEVICERACE_CLI, next to this program, the build tree's, the PATH's.
std::string localWorkerProgram();
/// The Python that runs the shipped lane programs: $DEVICERACE_PYTHON, the build's .venv, python3.
std::string pythonProgram();
/// Where the shipped lane programs are: $DEVICERACE_LANES, the installed copy, the source tree's.
std::string laneProgramDir();

class WorkerConnection {
public:
    using Clock = std::chrono::steady_clock;
    /// Starts the worker; throws UsageError when it cannot be started.
    explicit WorkerConnection(WorkerEndpoint endpoint);
    ~WorkerConnection();

    /// Reads until the hello (or throws UsageError saying why there is none: unreachable,
    /// authentication, host key, not installed, another protocol version, no answer).
    void awaitHello(double timeoutSeconds);
    /// Reads what is available within `timeoutSeconds` and hands each protocol message to
    /// `onMessage`; other lines go to the log tail. False once stdout and stderr are closed.
    bool pump(double timeoutSeconds, const std::function<void(Message&&)>& onMessage);
    bool send(const nlohmann::json& message);
    void closeStdin();
    void signal(int sig);
    /// Waits for the child to exit, up to `graceSeconds`, then kills it; returns the wait status.
    int reap(double graceSeconds);
    std::optional<int> tryWait();

    double secondsSinceLastLine() const;
    /// Lines over the rate cap in the last second (flooding), else 0.
    std::size_t floodLines() const { return m_flood; }
    /// The last `n` lines the worker printed outside the protocol (stderr, noise), joined.
    std::string logTail(std::size_t n) const;
    /// Why the worker ended, for a worker that ended without finishing its lane.
    std::string describeEnd(int status, std::int64_t step) const;

    const WorkerEndpoint& endpoint() const { return m_ep; }
    const DeviceReport& devices() const { return m_devices; }
    const std::string& version() const { return m_version; }

private:
    void onStdoutLine(std::string&& line, const std::function<void(Message&&)>& onMessage);
    void addLog(std::string line);
    [[noreturn]] void failBeforeHello(const std::string& reason);
    std::string classifyBeforeHello(int status) const;

    WorkerEndpoint m_ep;
    std::unique_ptr<ChildProcess> m_child;
    std::mutex m_writeMutex; // guards m_child's stdin
    LineSplitter m_out;
    LineSplitter m_err{4096};
    bool m_outOpen = true, m_errOpen = true;
    std::deque<std::string> m_log;
    bool m_hello = false;
    std::size_t m_noise = 0; // non-protocol stdout lines before the hello
    std::string m_firstNoise;
    DeviceReport m_devices;
    std::string m_version, m_peerProto;
    Clock::time_point m_lastLine;
    Clock::time_point m_secondStart;
    std::size_t m_linesThisSecond = 0;
    std::size_t m_flood = 0;
};

} // namespace devicerace::detail
