// devicerace-cli worker: one lane, driven over the worker protocol on two file descriptors.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/race.h"
#include "devicerace/worker.h"
#include "devicerace/workload.h"
#include "devices/device_json.h"
#include "train/rendezvous_store.h"
#include "lanes/thread_lane.h"
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

std::string hostName() {
    char buf[256] = {};
    ::gethostname(buf, sizeof buf - 1);
    return buf;
}

class WorkerServer {
public:
    WorkerServer(int in, int out) : m_in(in), m_out(out) {}

    int run() {
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
                    stop(fmt::format("signal {}", g_signal.load()));
                }
            }
            if (m_parentGone && m_lane && m_started && !isTerminal(m_lane->state()) &&
                std::chrono::duration<double>(Clock::now() - m_stopAt).count() > kOrphanStopGrace) {
                std::fprintf(stderr, "devicerace-cli worker: the lane did not stop within %.0f s; leaving without it\n",
                             kOrphanStopGrace);
                std::fflush(nullptr);
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

private:
    void hello() {
        json devices = detail::deviceReportJson(refreshDeviceReport());
        m_out.send({{"type", "hello"},
                    {"proto", detail::protoVersion()},
                    {"version", DEVICERACE_VERSION},
                    {"host", hostName()},
                    {"pid", ::getpid()},
                    {"devices", devices}});
    }

    void stop(const std::string& why) {
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
                configure(m->body);
            } catch (const std::exception& e) {
                return refuse(e.what());
            }
        } else if (m->type == "start" && m_lane && !m_started && !m_stopping) {
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

    void configure(const json& message) {
        const auto proto = detail::protoMajor(message.value("proto", std::string()));
        if (!proto || *proto != detail::kProtoMajor) {
            throw UsageError(fmt::format("config for protocol '{}'; this worker speaks {}",
                                         message.value("proto", std::string()), detail::protoVersion()));
        }
        auto [spec, settings] = detail::configFromMessage(message);
        const auto& workload = findWorkload(settings.workload);
        auto resolved = resolveData(workload, spec.data ? spec.data : settings.dataMode, settings.dataDir,
                                    settings.trainLimit, settings.testLimit);
        settings.data = resolved.dataset;
        settings.allowProcessFaults = true;
        int storePort = 0;
        if (settings.dist && settings.dist->rank == 0) {
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
        m_laneReady = m_lane.get();
        m_out.send(detail::readyMessage(ready));
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
        const auto exec = m_lane->summary().execution;
        if (!exec.empty() && exec != m_execution) {
            m_execution = exec;
            m_out.send({{"type", "execution"}, {"text", exec}});
        }
    }

    int m_in;
    Writer m_out;
    std::unique_ptr<ThreadLane> m_lane;
    std::atomic<ThreadLane*> m_laneReady{nullptr};
    bool m_started = false;
    bool m_stopping = false;
    bool m_parentGone = false; // a signal, or the parent's connection closed, broken or silent
    Clock::time_point m_stopAt{};
    std::string m_execution;
};

} // namespace

int runWorker(int inFd, int outFd, int requestedProto) {
    ::signal(SIGPIPE, SIG_IGN);
    struct sigaction sa {};
    sa.sa_handler = onTerminate;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
        ::sigaction(sig, &sa, nullptr);
    }
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

} // namespace devicerace
