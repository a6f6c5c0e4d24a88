// devicerace-cli worker: one lane, driven over the worker protocol on two file descriptors.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/race.h"
#include "devicerace/worker.h"
#include "devicerace/workload.h"
#include "devices/device_json.h"
#include "cluster/launched_rank.h"
#include "train/rendezvous_store.h"
#include "train/run_plan.h"
#include "lanes/thread_lane.h"
#include "util/host_name.h"
#include "workers/attach.h"
#include "workers/protocol.h"

#ifndef DEVICERACE_VERSION
#define DEVICERACE_VERSION "unknown"
#endif

namespace devicerace {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Seconds between heartbeats (the parent declares a worker lost after 15 s of silence).
constexpr auto kHeartbeat = std::chrono::seconds(1);
// Seconds without a line from the parent (it pings every 2 s) before the worker stops itself.
constexpr double kParentSilence = 20;
// Seconds a lane gets to stop once the parent is gone (a signal, its connection closed or
// silent): a lane blocked in a data load never looks at its stop flag, and nobody is left to
// kill this process, so it leaves without the lane.
constexpr double kOrphanStopGrace = 3;
// Longest control line accepted from the parent.
constexpr std::size_t kMaxControlLine = 64 * 1024;

// How often the lane's new samples are forwarded (latency from sample to parent).
constexpr int kForwardMs = 10;

std::atomic<int> g_signal{0};
extern "C" void onTerminate(int sig) { g_signal = sig; }

class Writer {
public:
    explicit Writer(int fd) : m_fd(fd) {}
    /// Sends one message; false once the parent stopped reading (EPIPE).
    bool send(const json& message) {
        const auto line = detail::encodeMessage(message);
        std::lock_guard lock(m_mutex);
        if (m_broken) {
            return false;
        }
        std::string_view rest = line;
        while (!rest.empty()) {
            const auto n = ::write(m_fd, rest.data(), rest.size());
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                m_broken = true;
                return false;
            }
            rest.remove_prefix(static_cast<std::size_t>(n));
        }
        return true;
    }
    bool broken() const {
        std::lock_guard lock(m_mutex);
        return m_broken;
    }

private:
    int m_fd;
    mutable std::mutex m_mutex;
    bool m_broken = false;
};

class WorkerServer {
public:
    WorkerServer(int in, int out, const detail::LaunchedRank* launched = nullptr,
                 std::shared_ptr<detail::LaunchStore> store = nullptr)
        : m_in(in), m_out(out), m_launched(launched), m_store(std::move(store)) {}

    int run() {
        const int status = serve();
        if (m_launched && !m_started) {
            // The other ranks wait for a lane or this word: send them home.
            abortOthers(m_lane ? "the race stopped before it started" : "no lane was configured");
        }
        return status;
    }

private:
    void abortOthers(const std::string& why) {
        try {
            m_store->set(detail::launchKey("abort"), why);
        } catch (const std::exception&) {
        }
    }

    int serve() {
        hello();
        std::jthread heartbeat([this](std::stop_token stop) {
            while (!stop.stop_requested()) {
                std::this_thread::sleep_for(kHeartbeat);
                json hb = {{"type", "hb"}};
                if (auto* lane = m_laneReady.load()) {
                    hb["cpu"] = lane->cpuSeconds();
                }
                m_out.send(hb);
            }
        });
        auto lastFromParent = Clock::now();
        detail::LineSplitter lines(kMaxControlLine);
        bool inputOpen = true;
        while (true) {
            if (g_signal && !m_parentGone) {
                m_parentGone = true;
                if (!m_stopping) {
                    const int sig = g_signal.load();
                    const char* abbrev = sigabbrev_np(sig); // (as child_process.cpp names signals)
                    stop(fmt::format("signal {} (SIG{})", sig, abbrev ? abbrev : "?"));
                }
            }
            if (m_parentGone && m_lane && m_started && !isTerminal(m_lane->state()) &&
                std::chrono::duration<double>(Clock::now() - m_stopAt).count() > kOrphanStopGrace) {
                std::fprintf(stderr, "devicerace-cli worker: the lane did not stop within %.0f s; leaving without it\n",
                             kOrphanStopGrace);
                std::fflush(nullptr);
                // Whoever still reads (a signal's sender need not be the parent) learns why.
                m_out.send({{"type", "error"}, {"message", orphanMessage()}});
                std::_Exit(1);
            }
            if (!inputOpen && !m_lane) {
                return 0; // the parent left before a lane was set up
            }
            if (m_lane && m_started) {
                forward();
                if (isTerminal(m_lane->state())) {
                    m_lane->wait();
                    forward();
                    m_out.send({{"type", "bye"}, {"reason", toString(m_lane->state())}});
                    const auto st = m_lane->state();
                    return st == LaneState::Finished || st == LaneState::Stopped ? 0 : 1;
                }
            }
            if (m_lane && !m_started && (!inputOpen || m_stopping)) {
                return 0; // accepted but never started
            }
            if (m_out.broken() && !m_parentGone) {
                m_parentGone = true;
                if (!m_stopping) {
                    stop("the parent stopped reading");
                }
            }
            if (inputOpen && std::chrono::duration<double>(Clock::now() - lastFromParent).count() > kParentSilence &&
                !m_parentGone) {
                m_parentGone = true;
                if (!m_stopping) {
                    stop("no word from the parent for 20 s");
                }
            }
            pollfd pfd{inputOpen ? m_in : -1, POLLIN, 0};
            if (::poll(&pfd, 1, kForwardMs) <= 0 || !inputOpen) {
                continue;
            }
            char buf[4096];
            const auto n = ::read(m_in, buf, sizeof buf);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                inputOpen = false;
                m_parentGone = true;
                if (!m_stopping && m_lane) {
                    stop("the parent closed the connection");
                }
                continue;
            }
            lastFromParent = Clock::now();
            std::optional<int> exitCode;
            lines.feed(std::string_view(buf, static_cast<std::size_t>(n)), [&](std::string&& line) {
                if (!exitCode) {
                    exitCode = control(line);
                }
            });
            // The parent's silence counts while we listen: a config that took 25 s to load its
            // data is not 25 s of silence (the pings sent meanwhile wait in the pipe).
            lastFromParent = Clock::now();
            if (exitCode) {
                return *exitCode;
            }
        }
    }

    void hello() {
        json devices = detail::deviceReportJson(refreshDeviceReport());
        m_out.send({{"type", "hello"},
                    {"proto", detail::protoVersion()},
                    {"version", DEVICERACE_VERSION},
                    {"host", detail::hostName()},
                    {"pid", ::getpid()},
                    {"devices", devices}});
    }

    // Why a worker left without its lane (it did not stop within kOrphanStopGrace).
    std::string orphanMessage() const {
        std::string text = fmt::format("the worker was stopped ({}) and its lane did not stop within {:.0f} s",
                                       m_stopWhy, kOrphanStopGrace);
        if (m_launched && m_launched->world > 1 && g_signal) {
            text += fmt::format(": rank 0 of a {}-rank job was ended from outside, as torchrun and srun end every "
                                "rank once one fails (the job's own log says which)",
                                m_launched->world);
        }
        return text;
    }

    void stop(const std::string& why) {
        m_stopWhy = why;
        m_stopping = true;
        m_stopAt = Clock::now();
        if (m_lane) {
            m_lane->requestStop();
        }
        std::fprintf(stderr, "devicerace-cli worker: stopping: %s\n", why.c_str());
    }

    // Handles one control line; returns an exit status when the worker must end now.
    std::optional<int> control(const std::string& line) {
        auto m = detail::parseMessage(line);
        if (!m) {
            std::fprintf(stderr, "devicerace-cli worker: ignored a line that is not a message\n");
            return std::nullopt;
        }
        if (m->type == "config") {
            if (m_lane) {
                return refuse("the lane is already configured");
            }
            try {
                configure(m->body, line);
            } catch (const std::exception& e) {
                if (m_launched) {
                    abortOthers(e.what());
                }
                return refuse(e.what());
            }
        } else if (m->type == "start" && m_lane && !m_started && !m_stopping) {
            if (m_launched) {
                try {
                    m_store->set(detail::launchKey("start"), "1");
                } catch (const std::exception& e) {
                    return refuse(e.what());
                }
            }
            m_started = true;
            m_lane->start();
        } else if (m->type == "stop") {
            stop("asked to");
        } else if (m->type == "pause" && m_lane) {
            m_lane->setPaused(true);
        } else if (m->type == "resume" && m_lane) {
            m_lane->setPaused(false);
        }
        if (m->body.contains("id")) {
            m_out.send({{"type", "ack"}, {"id", m->body["id"]}});
        }
        return std::nullopt; // ping and unknown types: nothing to do
    }

    int refuse(const std::string& why) {
        m_out.send({{"type", "error"}, {"phase", "config"}, {"message", why}});
        return 2;
    }

    void configure(const json& message, const std::string& line) {
        const auto proto = detail::protoMajor(message.value("proto", std::string()));
        if (!proto || *proto != detail::kProtoMajor) {
            throw UsageError(fmt::format("config for protocol '{}'; this worker speaks {}",
                                         message.value("proto", std::string()), detail::protoVersion()));
        }
        auto [spec, settings] = detail::configFromMessage(message);
        if (m_launched) {
            // The other ranks build the same lane meanwhile, each as its own rank.
            detail::applyLaunchedRank(*m_launched, spec, settings, m_store);
            m_store->set(detail::launchKey("config"), line);
        }
        const auto& workload = findWorkload(settings.workload);
        auto resolved = resolveData(workload, spec.data ? spec.data : settings.dataMode, settings.dataDir,
                                    settings.trainLimit, settings.testLimit);
        settings.data = resolved.dataset;
        settings.allowProcessFaults = true;
        int storePort = 0;
        if (settings.dist && settings.dist->rank == 0 && !settings.dist->store) {
            // Rank 0 serves the lane's rendezvous; the parent passes the port to the others.
            settings.dist->store = detail::serveRendezvousStore(settings.dist->timeoutSeconds, &storePort);
        }
        if (spec.name.empty()) {
            spec.name = spec.device;
        }
        m_lane = std::make_unique<ThreadLane>(spec, settings);
        detail::ReadyInfo ready;
        ready.batch = m_lane->batch();
        ready.totalSteps = m_lane->totalSteps();
        ready.threads = m_lane->spec().threads;
        ready.datasetName = resolved.dataset->name;
        ready.datasetSource = resolved.dataset->source;
        ready.synthetic = resolved.dataset->synthetic;
        ready.trainCount = resolved.dataset->train.count;
        ready.testCount = resolved.dataset->test.count;
        ready.dataNote = resolved.note;
        ready.vocabulary = resolved.dataset->vocabulary;
        if (resolved.dataset->tokenText.size() <= kListedTokenTexts) { // a text's alphabet, not IMDb's words
            ready.tokenText = resolved.dataset->tokenText;
        }
        if (storePort) {
            ready.storePort = storePort;
        }
        if (m_launched) {
            awaitOtherRanks(settings.dist->timeoutSeconds);
            ready.ranks = m_launched->world;
            ready.job = m_launched->jobId;
            ready.nodes = m_launched->nodeList;
        }
        m_laneReady = m_lane.get();
        m_out.send(detail::readyMessage(ready));
    }

    // Every other rank says it built the lane ("") or why it could not.
    void awaitOtherRanks(double timeoutSeconds) {
        const auto deadline = Clock::now() + std::chrono::duration<double>(timeoutSeconds);
        for (int r = 1; r < m_launched->world; ++r) {
            const auto key = detail::launchKey(fmt::format("ready/{}", r));
            while (true) {
                if (auto v = m_store->tryGet(key)) {
                    if (!v->empty()) {
                        throw UsageError(fmt::format("rank {} could not build the lane: {}", r, *v));
                    }
                    break;
                }
                if (Clock::now() > deadline) {
                    throw UsageError(fmt::format("rank {} did not build the lane within {:.0f} s{}", r, timeoutSeconds,
                                                 m_store->tryGet(detail::launchKey(fmt::format("alive/{}", r)))
                                                     ? ""
                                                     : " (it never reached rank 0's store)"));
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
            }
        }
    }

    // How this process's OpenMP threads wait, for a CPU lane with a team (several threads): a
    // worker is a process of its own, whose waits may differ from its parent's (the window's
    // passive ones; a spinning race's workers keep libgomp's default).
    static std::string ownWaitsNote(const LaneSpec& spec) {
        if (spec.device != "cpu" || spec.threads.value_or(detail::defaultCpuThreads()) < 2) {
            return {};
        }
        const char* wait = std::getenv("OMP_WAIT_POLICY");
        return wait && *wait ? fmt::format(", in its own process (OpenMP waits: {})", wait)
                             : ", in its own process (OpenMP waits: spin, then sleep)";
    }

    void forward() {
        bool stateChanged = false;
        for (auto& s : m_lane->takeSamples()) {
            stateChanged = stateChanged || s.kind == SampleKind::State;
            m_out.send({{"type", "sample"}, {"sample", json::parse(toJsonLine(s))}});
        }
        if (!stateChanged) {
            return; // the lane describes how it trains just before it starts running
        }
        auto exec = m_lane->summary().execution;
        if (!exec.empty()) {
            exec += ownWaitsNote(m_lane->spec());
        }
        if (!exec.empty() && exec != m_execution) {
            m_execution = exec;
            m_out.send({{"type", "execution"}, {"text", exec}});
        }
    }

    int m_in;
    Writer m_out;
    const detail::LaunchedRank* m_launched; // a launcher started this rank (rank 0)
    std::shared_ptr<detail::LaunchStore> m_store;
    std::unique_ptr<ThreadLane> m_lane;
    std::atomic<ThreadLane*> m_laneReady{nullptr};
    bool m_started = false;
    bool m_stopping = false;
    bool m_parentGone = false; // a signal, or the parent's connection closed, broken or silent
    Clock::time_point m_stopAt{};
    std::string m_execution;
    std::string m_stopWhy;
};

} // namespace

namespace {

void installWorkerSignals() {
    ::signal(SIGPIPE, SIG_IGN);
    struct sigaction sa {};
    sa.sa_handler = onTerminate;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
        ::sigaction(sig, &sa, nullptr);
    }
}

} // namespace

int runWorker(int inFd, int outFd, int requestedProto) {
    installWorkerSignals();
    if (requestedProto != detail::kProtoMajor) {
        // Say hello anyway, so the parent can name both versions, then refuse.
        Writer out(outFd);
        out.send({{"type", "hello"}, {"proto", detail::protoVersion()}, {"version", DEVICERACE_VERSION}});
        std::fprintf(stderr,
                     "devicerace-cli worker: the parent asked for protocol %d; this DeviceRace (%s) speaks %s\n",
                     requestedProto, DEVICERACE_VERSION, detail::protoVersion().c_str());
        return 3;
    }
    return WorkerServer(inFd, outFd).run();
}

int runLaunchedWorker(int inFd, int outFd, int requestedProto, const WorkerLaunch& launch) {
    const auto fail = [](const std::string& why, int status) {
        std::fprintf(stderr, "devicerace-cli worker: %s\n", why.c_str());
        return status;
    };
    if (launch.ranksFrom.empty()) {
        return fail("--listen and --token-file need --ranks-from slurm|env (a rank of a launched job)", 2);
    }
    detail::LaunchedRank me;
    try {
        me = detail::launchedRankFromEnvironment(launch.ranksFrom);
    } catch (const std::exception& e) {
        return fail(e.what(), 2);
    }
    if (me.rank != 0) {
        return detail::runLaunchedFollower(me); // silent on outFd: rank 0 speaks for the lane
    }
    installWorkerSignals();
    if (requestedProto != detail::kProtoMajor) {
        return runWorker(inFd, outFd, requestedProto); // says hello, then refuses
    }
    std::string token;
    if (!launch.listen.empty()) {
        try {
            token = detail::attachToken(launch.tokenFile);
        } catch (const std::exception& e) {
            return fail(fmt::format("--listen: {}", e.what()), 2);
        }
    }
    std::shared_ptr<detail::LaunchStore> store;
    try {
        store = detail::openLaunchStore(me);
    } catch (const std::exception& e) {
        return fail(e.what(), 2);
    }
    if (launch.listen.empty()) {
        return WorkerServer(inFd, outFd, &me, store).run();
    }
    int fd = -1;
    try {
        fd = detail::acceptParent(launch.listen, token, g_signal);
    } catch (const std::exception& e) {
        store->set(detail::launchKey("abort"), e.what());
        return fail(e.what(), 2);
    }
    if (fd < 0) {
        store->set(detail::launchKey("abort"), "rank 0 was stopped before a race attached");
        return 0;
    }
    const int status = WorkerServer(fd, fd, &me, store).run();
    ::close(fd);
    return status;
}

int runAttachBridge(const std::string& address, int proto, const std::string& tokenFile) {
    ::signal(SIGPIPE, SIG_IGN);
    try {
        return detail::runAttachBridge(address, proto, tokenFile);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "devicerace-cli attach: %s\n", e.what());
        return 2;
    }
}

} // namespace devicerace
