#include "workers/worker_connection.h"
#include "workers/attach.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "devicerace/environment.h"
#include "devicerace/errors.h"
#include "devicerace/format.h"
#include "devices/device_json.h"

namespace devicerace::detail {

namespace {

namespace fs = std::filesystem;

// Lines of the worker's stderr (and non-protocol stdout) kept for failure messages.
constexpr std::size_t kLogLines = 20;
// Characters kept of one log line.
constexpr std::size_t kLogLineChars = 400;
// Non-protocol lines tolerated before the hello (a login shell's greeting), then "not a worker".
constexpr std::size_t kNoiseBeforeHello = 200;
// Protocol lines per second a worker may send (it sends ~10 samples/s and a heartbeat).
constexpr std::size_t kMaxLinesPerSecond = 2000;

bool contains(const std::string& text, std::string_view what) { return text.find(what) != std::string::npos; }

} // namespace

std::string localWorkerProgram() {
    if (const char* env = devicerace::environmentSwitch("DEVICERACE_CLI"); env && *env) {
        return env;
    }
    std::error_code ec;
    const auto self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        for (const auto& candidate :
             {self.parent_path() / "devicerace-cli", self.parent_path() / "../cli/devicerace-cli"}) {
            if (::access(candidate.c_str(), X_OK) == 0) {
                return fs::weakly_canonical(candidate, ec).string();
            }
        }
    }
#ifdef DEVICERACE_BUILD_CLI
    if (::access(DEVICERACE_BUILD_CLI, X_OK) == 0) {
        return DEVICERACE_BUILD_CLI;
    }
#endif
    return "devicerace-cli";
}

std::string pythonProgram() {
    if (const char* env = devicerace::environmentSwitch("DEVICERACE_PYTHON"); env && *env) {
        return env;
    }
#ifdef DEVICERACE_VENV_PYTHON
    if (::access(DEVICERACE_VENV_PYTHON, X_OK) == 0) {
        return DEVICERACE_VENV_PYTHON;
    }
#endif
    return "python3";
}

std::string laneProgramDir() {
    if (const char* env = devicerace::environmentSwitch("DEVICERACE_LANES"); env && *env) {
        return env;
    }
#ifdef DEVICERACE_INSTALL_LANES
    if (::access(DEVICERACE_INSTALL_LANES "/pytorch_lane.py", R_OK) == 0) {
        return DEVICERACE_INSTALL_LANES;
    }
#endif
#ifdef DEVICERACE_SOURCE_LANES
    return DEVICERACE_SOURCE_LANES;
#else
    return "lanes/python";
#endif
}

WorkerEndpoint endpointFor(const LaneSpec& spec) {
    WorkerEndpoint ep;
    const auto framework = spec.framework.value_or("devicerace");
    if (!spec.host.empty()) {
        // Any worker on another machine: ssh runs the program the lane names there.
        ep.remote = true;
        ep.target = parseSshTarget(spec.host);
        ep.where = ep.target.host;
        if (spec.cmd) {
            ep.cli = *spec.cmd;
            ep.command = true;
            ep.who = fmt::format("the command '{}' on {}", *spec.cmd, ep.where);
        } else {
            ep.cli = spec.cli.value_or("devicerace-cli");
            if (framework != "devicerace") {
                ep.framework = framework;
                ep.who = fmt::format("the {} lane on {}", framework, ep.where);
            } else {
                ep.who = "the worker on " + ep.where;
            }
        }
        return ep;
    }
    ep.where = "this machine";
    if (spec.launcher == "attach") {
        // The bridge process connects to the job's rank 0 and proves the token (workers/attach.h).
        ep.attach = spec.launcherTarget;
        ep.program = {spec.cli.value_or(localWorkerProgram()), "attach", spec.launcherTarget};
        if (spec.tokenFile) {
            ep.program.insert(ep.program.end(), {"--token-file", *spec.tokenFile});
        }
        ep.cli = ep.program.front();
        ep.where = spec.launcherTarget.substr(0, spec.launcherTarget.rfind(':'));
        ep.who = fmt::format("the job at {}", spec.launcherTarget);
        return ep;
    }
    if (spec.cmd) {
        ep.program = {*spec.cmd};
        ep.cli = *spec.cmd;
        ep.who = fmt::format("the command '{}'", *spec.cmd);
    } else if (framework != "devicerace") {
        const auto program = frameworkProgram(framework);
        if (!program) {
            throw UsageError(fmt::format("framework={}: no such lane program", framework));
        }
        ep.program = localFrameworkArgv(*program);
        ep.cli = ep.program[1];
        ep.framework = framework;
        ep.who = fmt::format("the {} lane", framework);
    } else {
        ep.cli = spec.cli.value_or(localWorkerProgram());
        ep.who = "the worker process";
    }
    return ep;
}

} // namespace devicerace::detail

namespace devicerace {

std::vector<std::string> localFrameworkArgv(const FrameworkProgram& program) {
    using detail::laneProgramDir;
    using detail::pythonProgram;
    std::vector<std::string> argv{pythonProgram(), (std::filesystem::path(laneProgramDir()) / program.script).string()};
    argv.insert(argv.end(), program.args.begin(), program.args.end());
    return argv;
}

} // namespace devicerace

namespace devicerace::detail {

std::string shellQuote(const std::string& s) {
    std::string out = "'";
    for (char c : s) {
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return out + "'";
}

std::vector<std::string> sshOptions(const SshTarget& target) {
    // BatchMode: never a password or passphrase prompt (the user's agent and keys only);
    // ConnectTimeout bounds an unreachable host; ServerAlive* notices a dead link in ~15 s.
    std::vector<std::string> argv{"ssh", "-T",
                                  "-o",  "BatchMode=yes",
                                  "-o",  "ConnectTimeout=10",
                                  "-o",  "ServerAliveInterval=5",
                                  "-o",  "ServerAliveCountMax=3",
                                  "-o",  "PasswordAuthentication=no",
                                  "-o",  "KbdInteractiveAuthentication=no"};
    if (const char* cfg = devicerace::environmentSwitch("DEVICERACE_SSH_CONFIG"); cfg && *cfg) {
        argv.insert(argv.end(), {"-F", cfg});
    }
    if (target.port) {
        argv.insert(argv.end(), {"-p", std::to_string(*target.port)});
    }
    if (!target.user.empty()) {
        argv.insert(argv.end(), {"-l", target.user});
    }
    return argv;
}

std::vector<std::string> workerArgv(const WorkerEndpoint& ep) {
    const std::string proto = std::to_string(kProtoMajor);
    if (!ep.remote) {
        if (!ep.program.empty()) {
            auto argv = ep.program;
            argv.insert(argv.end(), {"--proto", proto});
            return argv;
        }
        return {ep.cli, "worker", "--proto", proto};
    }
    auto argv = sshOptions(ep.target);
    // The remote login shell re-parses this one string: the program is quoted, the rest fixed
    // (a framework name is one of frameworkProgram's, never free text).
    std::string remote = ep.command ? fmt::format("exec {} --proto {}", shellQuote(ep.cli), proto)
                                    : fmt::format("exec {} worker --proto {}", shellQuote(ep.cli), proto);
    if (!ep.framework.empty()) {
        remote += " --framework " + ep.framework;
    }
    argv.insert(argv.end(), {"--", ep.target.host, remote});
    return argv;
}

WorkerConnection::WorkerConnection(WorkerEndpoint endpoint) : m_ep(std::move(endpoint)) {
    // A worker that died must give EPIPE on our writes, not a SIGPIPE that ends this process.
    static const bool sigpipeIgnored = [] {
        ::signal(SIGPIPE, SIG_IGN);
        return true;
    }();
    (void)sigpipeIgnored;
    try {
        EnvChanges env;
        if (m_ep.spinWaits && !m_ep.remote) {
            // The race runs each lane alone: the worker keeps libgomp's default, spinning waits
            // whatever this process's are (the window's are passive), as a CLI race's would.
            env.unset = {"OMP_WAIT_POLICY"};
            env.set = {{"DEVICERACE_OMP_WAIT", "spin"}};
        }
        m_child = std::make_unique<ChildProcess>(workerArgv(m_ep), env);
    } catch (const UsageError& e) {
        if (m_ep.remote) {
            throw UsageError(
                fmt::format("cannot reach {}: the ssh client is not installed here ({})", m_ep.where, e.what()));
        }
        throw UsageError(
            fmt::format("cannot start the worker: {} (set DEVICERACE_CLI or name it with cli=PATH)", e.what()));
    }
    m_lastLine = m_secondStart = Clock::now();
}

WorkerConnection::~WorkerConnection() = default;

void WorkerConnection::addLog(std::string line) {
    if (line.size() > kLogLineChars) {
        line.resize(kLogLineChars);
        line += "…";
    }
    m_log.push_back(std::move(line));
    if (m_log.size() > kLogLines) {
        m_log.pop_front();
    }
}

std::string WorkerConnection::logTail(std::size_t n) const {
    std::string out;
    for (std::size_t i = m_log.size() > n ? m_log.size() - n : 0; i < m_log.size(); ++i) {
        if (m_log[i].empty()) {
            continue;
        }
        out += (out.empty() ? "" : " | ") + m_log[i];
    }
    return out;
}

void WorkerConnection::onStdoutLine(std::string&& line, const std::function<void(Message&&)>& onMessage) {
    auto message = parseMessage(line);
    if (!m_hello) {
        if (message && message->type == "hello") {
            m_hello = true;
            const auto& b = message->body;
            m_peerProto = b.value("proto", std::string());
            m_version = b.value("version", std::string());
            if (b.contains("devices") && b["devices"].is_object()) {
                try {
                    m_devices = detail::deviceReportFromJsonValue(b["devices"]);
                } catch (const DataError& e) {
                    addLog(fmt::format("hello: {}", e.what()));
                }
            }
            return;
        }
        ++m_noise;
        if (m_firstNoise.empty()) {
            m_firstNoise = line.substr(0, 120);
        }
        addLog(std::move(line));
        return;
    }
    if (!message) {
        addLog(std::move(line)); // a stray print: kept for the log, never interpreted
        return;
    }
    onMessage(std::move(*message));
}

bool WorkerConnection::pump(double timeoutSeconds, const std::function<void(Message&&)>& onMessage) {
    if (!m_outOpen && !m_errOpen) {
        return false;
    }
    std::array<pollfd, 2> fds{pollfd{m_outOpen ? m_child->stdoutFd() : -1, POLLIN, 0},
                              pollfd{m_errOpen ? m_child->stderrFd() : -1, POLLIN, 0}};
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeoutSeconds * 1000));
    if (ready <= 0) {
        return true;
    }
    std::array<char, 65536> buf{};
    for (int i = 0; i < 2; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
            continue;
        }
        const auto n = ::read(fds[i].fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            (i == 0 ? m_outOpen : m_errOpen) = false;
            const auto& rest = i == 0 ? m_out.partial() : m_err.partial();
            if (!rest.empty()) {
                addLog(fmt::format("(cut off) {}", rest));
            }
            continue;
        }
        const std::string_view bytes(buf.data(), static_cast<std::size_t>(n));
        if (i == 1) {
            m_err.feed(bytes, [this](std::string&& line) { addLog(std::move(line)); });
            continue;
        }
        m_out.feed(bytes, [&](std::string&& line) {
            const auto now = Clock::now();
            m_lastLine = now;
            if (now - m_secondStart >= std::chrono::seconds(1)) {
                m_secondStart = now;
                m_linesThisSecond = 0;
            }
            if (++m_linesThisSecond > kMaxLinesPerSecond) {
                m_flood = m_linesThisSecond;
                return;
            }
            onStdoutLine(std::move(line), onMessage);
        });
    }
    return m_outOpen || m_errOpen;
}

bool WorkerConnection::send(const nlohmann::json& message) {
    std::lock_guard lock(m_writeMutex);
    return m_child->write(encodeMessage(message));
}

void WorkerConnection::closeStdin() {
    std::lock_guard lock(m_writeMutex);
    m_child->closeStdin();
}

void WorkerConnection::signal(int sig) { m_child->signal(sig); }
std::optional<int> WorkerConnection::tryWait() { return m_child->tryWait(); }

int WorkerConnection::reap(double graceSeconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(graceSeconds);
    while (Clock::now() < deadline) {
        if (auto st = m_child->tryWait()) {
            return *st;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    m_child->signal(SIGKILL);
    while (true) {
        if (auto st = m_child->tryWait()) {
            return *st;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

double WorkerConnection::secondsSinceLastLine() const {
    return std::chrono::duration<double>(Clock::now() - m_lastLine).count();
}

std::string WorkerConnection::classifyBeforeHello(int status) const {
    const std::string err = logTail(kLogLines);
    const std::string tail = logTail(2);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (m_ep.remote && code == 255) {
        const auto& host = m_ep.where;
        if (contains(err, "Host key verification failed") || contains(err, "host key is known") ||
            contains(err, "HOST IDENTIFICATION HAS CHANGED") || contains(err, "No matching host key")) {
            return fmt::format("cannot reach {}: its host key is unknown or has changed; check it and accept it once "
                               "with 'ssh {}' (DeviceRace never accepts host keys for you)",
                               host, host);
        }
        if (contains(err, "Permission denied") || contains(err, "Too many authentication failures")) {
            return fmt::format("cannot reach {}: authentication refused; DeviceRace uses your ssh keys and agent "
                               "without prompting (BatchMode): load the key with ssh-add or name it with IdentityFile "
                               "in ~/.ssh/config ({})",
                               host, tail);
        }
        return fmt::format("cannot reach {}: host unreachable ({})", host, tail.empty() ? "ssh exit status 255" : tail);
    }
    if (code == 127) {
        return m_ep.remote ? fmt::format("{} has no '{}': install DeviceRace there, or name its devicerace-cli with "
                                         "cli=PATH ({})",
                                         m_ep.where, m_ep.cli, tail)
                           : fmt::format("cannot start the worker '{}' ({})", m_ep.cli, tail);
    }
    if (code == 126) {
        return fmt::format("'{}' on {} is not executable ({})", m_ep.cli, m_ep.where, tail);
    }
    if (!m_ep.attach.empty() && (code == kAttachUnreachable || code == kAttachTokenRefused || code == 2)) {
        return tail.empty() ? fmt::format("cannot attach to {} ({})", m_ep.attach, describeWaitStatus(status))
                            : tail.substr(tail.starts_with(kAttachLogPrefix) ? kAttachLogPrefix.size() : 0);
    }
    if (code == 3) {
        return fmt::format("{} refused worker protocol {}: it runs another DeviceRace version; install the same "
                           "version on both sides ({})",
                           m_ep.who, kProtoMajor, tail);
    }
    if (m_noise > 0) {
        return fmt::format("'{}' on {} is not a DeviceRace worker: it printed '{}' and ended ({})", m_ep.cli,
                           m_ep.where, m_firstNoise, describeWaitStatus(status));
    }
    return fmt::format("{} ended before saying hello ({}{}{})", m_ep.who, describeWaitStatus(status),
                       tail.empty() ? "" : ": ", tail);
}

void WorkerConnection::failBeforeHello(const std::string& reason) {
    m_child->signal(SIGKILL);
    throw UsageError(reason);
}

void WorkerConnection::awaitHello(double timeoutSeconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeoutSeconds);
    const auto ignore = [](Message&&) {};
    while (!m_hello) {
        if (!pump(0.1, ignore)) {
            failBeforeHello(classifyBeforeHello(reap(2)));
        }
        if (m_noise > kNoiseBeforeHello) {
            failBeforeHello(fmt::format("'{}' on {} is not a DeviceRace worker (it printed {} lines, the first: '{}')",
                                        m_ep.cli, m_ep.where, m_noise, m_firstNoise));
        }
        if (!m_hello && Clock::now() > deadline) {
            failBeforeHello(fmt::format("no answer from {} within {:.0f} s{}{}", m_ep.who, timeoutSeconds,
                                        m_log.empty() ? "" : ": ", logTail(2)));
        }
    }
    const auto major = protoMajor(m_peerProto);
    if (!major || *major != kProtoMajor) {
        failBeforeHello(fmt::format("{} ({}) speaks worker protocol '{}'; this DeviceRace speaks {}: "
                                    "install the same version on both sides",
                                    m_ep.where, m_version.empty() ? "(unknown version)" : m_version, m_peerProto,
                                    protoVersion()));
    }
}

std::string WorkerConnection::describeEnd(int status, std::int64_t step) const {
    const std::string at = fmt::format("at step {}", groupThousands(static_cast<double>(step)));
    const std::string tail = logTail(3);
    const std::string last = tail.empty() ? "" : fmt::format(" (last output: {})", tail);
    if (m_ep.remote && WIFEXITED(status) && WEXITSTATUS(status) == 255) {
        return fmt::format("connection to {} lost {}{}", m_ep.where, at, last);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
        return classifyBeforeHello(status); // the worker refused our protocol version
    }
    return fmt::format("worker {} {}{}", describeWaitStatus(status), at, last);
}

} // namespace devicerace::detail
