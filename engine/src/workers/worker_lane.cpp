#include "workers/worker_lane.h"
#include "models/flops_per_sample.h"
#include "devicerace/environment.h"
#include "devicerace/device_info.h"
#include "devicerace/peak_flops.h"

#include <signal.h>

#include <fmt/format.h>

#include <atomic>
#include <future>
#include <map>
#include <cstdlib>
#include <thread>

#include "devicerace/errors.h"
#include "devicerace/format.h"
#include "metrics/sample_json.h"
#include "train/run_plan.h"
#include "workers/launch_spec.h"
#include "workers/script_copy.h"
#include "workers/worker_connection.h"

namespace devicerace {

namespace {

using Clock = std::chrono::steady_clock;
using detail::Message;

// Seconds to wait for a worker's hello: a local process loads LibTorch (~1 s); ssh may also
// connect, authenticate and start a login shell.
constexpr double kHelloLocal = 20;
constexpr double kHelloRemote = 60;
// Seconds without any line (the worker sends a heartbeat every second) before the lane is lost.
constexpr double kSilenceLost = 15;
// Seconds between our pings (the worker stops after 20 s without one: its parent is gone).
constexpr double kPingEvery = 2;
// After a stop: seconds until stdin is closed, until SIGTERM, until SIGKILL.
constexpr double kStopClose = 5, kStopTerm = 10, kStopKill = 15;

// DEVICERACE_HELLO_TIMEOUT=SECONDS overrides both (slow links; tests of a silent worker).
double helloTimeout(bool remote) {
    if (const char* env = devicerace::environmentSwitch("DEVICERACE_HELLO_TIMEOUT"); env && *env) {
        try {
            const double v = std::stod(env);
            if (v > 0 && v <= 3600) {
                return v;
            }
        } catch (const std::exception&) {
        }
    }
    return remote ? kHelloRemote : kHelloLocal;
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

} // namespace

struct WorkerLane::Impl {
    LaneSpec spec;
    LaneRunSettings settings;
    std::optional<detail::WorkerEndpoint> endpoint; // given (a Slurm lane's srun), else the spec's
    std::unique_ptr<detail::WorkerConnection> conn;
    detail::LaneRecord* record = nullptr; // the lane's (LaneBase)
    detail::ReadyInfo ready;
    std::shared_ptr<Dataset> data;
    std::string workerError; // an `error` message's text
    std::thread io;
    std::atomic<bool> started{false};
    std::atomic<bool> stopRequested{false};
    std::atomic<double> stopAt{0}; // steady seconds when stop was sent (0: not yet)
    std::atomic<double> cpu{0};
    std::string failure; // io thread: why it gave up on the worker

    static double nowSeconds() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

    void handle(Message&& m) {
        if (m.type == "sample") {
            try {
                auto s = detail::sampleFromJson(m.body.at("sample"));
                s.lane = spec.name; // the parent's name, whatever the worker wrote
                explainFrameworkLane(s);
                peakOfScriptLane(s);
                record->push(std::move(s));
            } catch (const std::exception& e) {
                failure = fmt::format("the worker sent a malformed sample: {}", e.what());
            }
        } else if (m.type == "hb") {
            if (auto it = m.body.find("cpu"); it != m.body.end() && it->is_number()) {
                cpu = it->get<double>();
            }
        } else if (m.type == "execution") {
            if (auto it = m.body.find("text"); it != m.body.end() && it->is_string()) {
                record->setExecution(it->get<std::string>());
            }
        } else if (m.type == "flops") {
            // A script lane counted one step's FLOPs: the peak of the arithmetic it ran in.
            const auto precision = m.body.value("precision", std::string());
            const auto it = scriptPeaks.find(precision == "bf16"   ? Precision::Bf16
                                             : precision == "fp16" ? Precision::Fp16
                                                                   : Precision::Fp32);
            scriptPeak = it != scriptPeaks.end() ? std::optional<PeakFlops>(it->second) : std::nullopt;
        } else if (m.type == "error") {
            workerError = m.body.value("message", std::string("(no message)"));
        }
        // ack, bye, log and unknown types: nothing to do (unknown types are ignored by design).
    }

    // The first "running" of a framework lane carries what prepareFrameworkExplanation found.
    void explainFrameworkLane(MetricSample& s) {
        if (explained || s.kind != SampleKind::State || s.state != LaneState::Running || s.flopsPerSample ||
            !frameworkHere()) {
            return;
        }
        explained = true;
        s.flopsPerSample = fwFlops;
        if (fwPeak && fwPeak->flopsPerSec > 0) {
            s.peakFlopsPerSec = fwPeak->flopsPerSec;
            s.peakSource = fwPeak->source;
        }
        if (s.energySource.empty()) {
            s.energySource = "not measured for framework lanes";
        }
    }
    bool explained = false;

    // A script lane's FLOPs are counted by its own PyTorch (devicerace._torch, one step under
    // FlopCounterMode), after its "flops" message names the precision: the running state that
    // carries them gets this machine's peak for that precision, prepared with the lane (never
    // measured while lanes train). Local lanes of one process only: a remote one's peak is its
    // host's, and a data-parallel one's would be the ranks' together.
    void peakOfScriptLane(MetricSample& s) {
        if (s.kind == SampleKind::State && s.flopsPerSample && !s.peakFlopsPerSec && scriptPeak &&
            scriptPeak->flopsPerSec > 0) {
            s.peakFlopsPerSec = scriptPeak->flopsPerSec;
            s.peakSource = scriptPeak->source;
        }
    }
    void prepareScriptPeaks() {
        if (!spec.framework || *spec.framework != "script" || !spec.host.empty() || spec.workers.value_or(1) > 1 ||
            endpoint) {
            return;
        }
        try {
            if (spec.device == "cpu") {
                const int threads = spec.threads.value_or(detail::defaultCpuThreads());
                scriptPeaks[Precision::Fp32] = cpuPeakFlops(Precision::Fp32, threads);
                if (!deviceReport().cpu.bf16Units.empty()) {
                    scriptPeaks[Precision::Bf16] = cpuPeakFlops(Precision::Bf16, threads);
                }
                // fp16 on a CPU: held to the fp32 figure (no fp16 calibration; a peak must not be low).
                scriptPeaks[Precision::Fp16] = scriptPeaks[Precision::Fp32];
            } else {
                const auto& gpus = deviceReport().gpus;
                const auto index = spec.device.size() > 5 ? std::stoi(spec.device.substr(5)) : 0;
                if (index >= 0 && static_cast<std::size_t>(index) < gpus.size()) {
                    for (const auto p : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
                        if (auto peak = gpuDatasheetPeak(gpus[static_cast<std::size_t>(index)].name, p)) {
                            scriptPeaks[p] = *peak;
                        }
                    }
                }
            }
        } catch (const std::exception&) {
            // No peak: the lane still shows its achieved FLOP/s.
        }
    }
    std::map<Precision, PeakFlops> scriptPeaks;
    std::optional<PeakFlops> scriptPeak;

    // Starts the worker, checks its hello, sends the lane, waits until it was accepted.
    // Throws UsageError saying what went wrong.
    void connect() {
        if (spec.framework == "script" && spec.copy && !spec.host.empty()) {
            detail::copyScriptFolder(spec); // the user's folder, before the script lane starts there
        }
        auto ep = endpoint ? *endpoint : detail::endpointFor(spec);
        ep.spinWaits = settings.spinInLaneProcesses && !endpoint; // not a launcher's (srun's) ranks
        conn = std::make_unique<detail::WorkerConnection>(std::move(ep));
        const auto& where = conn->endpoint().where;
        const auto& who = conn->endpoint().who;
        // Python lanes import their framework first (torch: 3-7 s on a busy 2-core machine).
        conn->awaitHello(conn->endpoint().helloTimeout > 0
                             ? conn->endpoint().helloTimeout
                             : helloTimeout(conn->endpoint().remote || !conn->endpoint().program.empty()));
        // A launched lane's rank 0 gets the training keys and the ranks' c10d settings; it hands
        // them on to the other ranks (cluster/launched_rank.h).
        auto sent = settings;
        auto lane = spec;
        if (spec.framework == "script") {
            // A slurm:// script lane: its one task runs the script lane, which starts the ranks.
            lane.launcher.clear();
            lane.launcherTarget.clear();
            lane.nodes.reset();
            lane.partition.reset();
            lane.timeLimit.reset();
            lane.queueLimit.reset();
            lane.storePort.reset();
        } else if (!spec.launcher.empty()) {
            sent.dist = detail::launchedDist(spec, spec.launcher == "slurm" ? detail::slurmShape(spec).ranks() : 0);
            lane = detail::launchedMemberSpec(spec);
        }
        if (!conn->send(detail::configMessage(lane, sent))) {
            // It left right after its hello (e.g. it refused our protocol version): say why.
            throw UsageError(fmt::format("{} ended after its hello: {}", who, conn->describeEnd(conn->reap(2), 0)));
        }
        // The worker loads its data and builds the lane; heartbeats show it is alive meanwhile.
        bool readySeen = false;
        const auto onMessage = [&](Message&& m) {
            if (m.type == "ready") {
                ready = detail::readyFromMessage(m.body);
                readySeen = true;
            } else {
                handle(std::move(m));
            }
        };
        // Pings meanwhile too: a worker stops after 20 s without a word from its parent, and a
        // Keras/JAX lane building ResNet-20 on a busy 2-core machine took longer than that to be
        // ready (CI, Presets.EveryPresetLoadsAndRunsShortened: "no word from the parent for 20 s").
        auto lastPing = Clock::now();
        while (!readySeen && workerError.empty()) {
            if (since(lastPing) >= kPingEvery) {
                conn->send({{"type", "ping"}});
                lastPing = Clock::now();
            }
            if (!conn->pump(0.1, onMessage)) {
                throw UsageError(
                    fmt::format("{} ended while preparing the lane: {}", who, conn->describeEnd(conn->reap(2), 0)));
            }
            if (conn->secondsSinceLastLine() > kSilenceLost) {
                conn->signal(SIGKILL);
                throw UsageError(fmt::format("{} stopped answering while preparing the lane", who));
            }
        }
        if (!workerError.empty()) {
            throw UsageError(conn->endpoint().remote ? fmt::format("{}: {}", where, workerError) : workerError);
        }
        auto ds = std::make_shared<Dataset>();
        ds->name = ready.datasetName;
        ds->source = ready.datasetSource;
        ds->synthetic = ready.synthetic;
        ds->train.count = ready.trainCount;
        ds->test.count = ready.testCount;
        if (ready.vocabulary > 0) {
            ds->kind = DataKind::Tokens;
            ds->vocabulary = ready.vocabulary;
            ds->tokenText = ready.tokenText;
        }
        data = std::move(ds);
        if (ready.threads && !spec.threads) {
            spec.threads = ready.threads;
        }
        prepareFrameworkExplanation();
        prepareScriptPeaks();
    }

    // A framework lane (another framework's program on this machine) sends no FLOP count or peak:
    // it trains the same network (parameter counts are checked at start-up), so the engine's count
    // and this machine's peak for its precision and threads make its utilisation comparable.
    // Counted here, while preparing (the peak is cached by the race), never while lanes train.
    // A script lane counts its own FLOPs (devicerace._torch) and says its own energy: see peakOfScriptLane.
    bool frameworkHere() const {
        return spec.framework && *spec.framework != "devicerace" && *spec.framework != "script" && spec.host.empty();
    }
    void prepareFrameworkExplanation() {
        if (!frameworkHere()) {
            return;
        }
        fwFlops = detail::countedFlopsPerSample(settings.workload, data ? data->vocabulary : 0);
        try {
            if (spec.device == "cpu") {
                fwPeak = cpuPeakFlops(spec.precision, spec.threads.value_or(1));
            } else {
                const auto& gpus = deviceReport().gpus;
                const auto index = spec.device.size() > 5 ? std::stoi(spec.device.substr(5)) : 0;
                if (index >= 0 && static_cast<std::size_t>(index) < gpus.size()) {
                    fwPeak = gpuDatasheetPeak(gpus[static_cast<std::size_t>(index)].name, spec.precision);
                }
            }
        } catch (const std::exception&) {
        }
    }
    std::optional<double> fwFlops;
    std::optional<PeakFlops> fwPeak;

    void runIo() {
        auto lastPing = Clock::now();
        bool stdinClosed = false;
        int escalation = 0; // 0 none, 1 stdin closed, 2 SIGTERM, 3 SIGKILL
        double killAt = 0;
        const auto onMessage = [this](Message&& m) { handle(std::move(m)); };
        while (conn->pump(0.05, onMessage)) {
            if (!stdinClosed && since(lastPing) >= kPingEvery) {
                conn->send({{"type", "ping"}});
                lastPing = Clock::now();
            }
            if (failure.empty() && conn->floodLines() > 0) {
                failure = fmt::format("{} flooded its output ({} lines in one second); stopped", conn->endpoint().who,
                                      groupThousands(static_cast<double>(conn->floodLines())));
            }
            if (failure.empty() && conn->secondsSinceLastLine() > kSilenceLost) {
                failure = conn->endpoint().remote
                              ? fmt::format("connection to {} lost at step {} (nothing received for {:.0f} s)",
                                            conn->endpoint().where,
                                            groupThousands(static_cast<double>(record->lastStep())), kSilenceLost)
                              : fmt::format("the worker stopped answering at step {} (nothing received for {:.0f} s)",
                                            groupThousands(static_cast<double>(record->lastStep())), kSilenceLost);
            }
            if (!failure.empty() && killAt == 0) {
                conn->signal(SIGTERM);
                killAt = nowSeconds() + 2;
            }
            if (killAt > 0 && nowSeconds() > killAt) {
                conn->signal(SIGKILL);
                killAt = nowSeconds() + 3600;
            }
            const double stopped = stopAt.load();
            if (stopped > 0) {
                const double t = nowSeconds() - stopped;
                if (escalation < 1 && t > kStopClose) {
                    conn->closeStdin();
                    stdinClosed = true;
                    escalation = 1;
                } else if (escalation < 2 && t > kStopTerm) {
                    conn->signal(SIGTERM);
                    escalation = 2;
                } else if (escalation < 3 && t > kStopKill) {
                    conn->signal(SIGKILL);
                    escalation = 3;
                }
            }
        }
        const int status = conn->reap(5);
        if (isTerminal(record->state())) {
            return;
        }
        if (!failure.empty()) {
            record->finish(LaneState::Failed, failure);
        } else if (stopRequested && escalation >= 2) {
            record->finish(LaneState::Stopped, fmt::format("stopped at step {} (the worker was {} after the stop)",
                                                           groupThousands(static_cast<double>(record->lastStep())),
                                                           escalation == 3 ? "killed" : "terminated"));
        } else if (!workerError.empty()) {
            record->finish(LaneState::Failed, workerError);
        } else {
            record->finish(LaneState::Failed, conn->describeEnd(status, record->lastStep()));
        }
    }
};

WorkerLane::WorkerLane(LaneSpec spec, LaneRunSettings settings, detail::WorkerEndpoint endpoint)
    : WorkerLane(std::move(spec), std::move(settings), std::optional<detail::WorkerEndpoint>(std::move(endpoint))) {}

WorkerLane::WorkerLane(LaneSpec spec, LaneRunSettings settings)
    : WorkerLane(std::move(spec), std::move(settings), std::optional<detail::WorkerEndpoint>()) {}

WorkerLane::WorkerLane(LaneSpec spec, LaneRunSettings settings, std::optional<detail::WorkerEndpoint> endpoint)
    : LaneBase(spec.name, {settings.targetAccuracy, settings.targetLoss}), m_impl(std::make_unique<Impl>()) {
    auto& d = *m_impl;
    d.endpoint = std::move(endpoint);
    d.spec = std::move(spec);
    d.settings = std::move(settings);
    d.settings.data.reset(); // the worker resolves its own
    d.record = &record();
    // The lane's own thread starts the worker and keeps it: the child's PR_SET_PDEATHSIG fires
    // when its parent *thread* ends, so it must be one that lives exactly as long as the lane
    // (whichever thread builds the race: the GUI's, a helper's, the CLI's).
    std::promise<void> connected;
    auto result = connected.get_future();
    d.io = std::thread([impl = m_impl.get(), connected = std::move(connected)]() mutable {
        try {
            impl->connect();
        } catch (...) {
            connected.set_exception(std::current_exception());
            impl->conn.reset(); // kills and reaps the worker
            return;
        }
        connected.set_value();
        impl->runIo();
    });
    try {
        result.get();
    } catch (...) {
        d.io.join();
        throw;
    }
}

WorkerLane::~WorkerLane() {
    requestStop();
    if (m_impl->io.joinable()) {
        m_impl->io.join();
    }
}

LaneKind WorkerLane::kind() const { return laneKind(m_impl->spec); }
const LaneSpec& WorkerLane::spec() const { return m_impl->spec; }
// A launched lane's global batch: rank 0's × the job's ranks (as a data-parallel lane's).
std::int64_t WorkerLane::batch() const { return m_impl->ready.batch * m_impl->ready.ranks.value_or(1); }
const std::string& WorkerLane::launchedJob() const { return m_impl->ready.job; }
std::int64_t WorkerLane::totalSteps() const { return m_impl->ready.totalSteps; }
std::shared_ptr<const Dataset> WorkerLane::dataset() const { return m_impl->data; }
const DeviceReport* WorkerLane::workerMachine() const { return &m_impl->conn->devices(); }
const std::string& WorkerLane::workerVersion() const { return m_impl->conn->version(); }
std::optional<int> WorkerLane::storePort() const { return m_impl->ready.storePort; }

void WorkerLane::start() {
    if (m_impl->started.exchange(true) || m_impl->stopRequested) {
        return;
    }
    m_impl->conn->send({{"type", "start"}, {"id", 1}});
}

void WorkerLane::requestStop() {
    if (m_impl->stopRequested.exchange(true)) {
        return;
    }
    if (!m_impl->started) {
        // The worker waits for start: stdin's end sends it away.
        m_impl->record->stopIfPending("stopped before it started");
        m_impl->conn->closeStdin();
        // A worker that does not leave on its input's end is terminated, then killed.
        m_impl->stopAt = Impl::nowSeconds() - kStopClose;
        return;
    }
    m_impl->conn->send({{"type", "stop"}, {"id", 2}});
    m_impl->stopAt = Impl::nowSeconds();
}

void WorkerLane::setPaused(bool paused) {
    if (m_impl->started) {
        m_impl->conn->send({{"type", paused ? "pause" : "resume"}});
    }
}

void WorkerLane::wait() {
    if (!m_impl->started && !m_impl->stopRequested) {
        return;
    }
    if (m_impl->io.joinable()) {
        m_impl->io.join();
    }
}

double WorkerLane::cpuSeconds() const { return m_impl->cpu.load(); }

void WorkerLane::completeSummary(LaneSummary& s) const {
    s.datasetName = m_impl->ready.datasetName;
    s.synthetic = m_impl->ready.synthetic;
    if (m_impl->ready.ranks) {
        s.workers = *m_impl->ready.ranks;
        s.job = m_impl->ready.job;
        s.nodes = m_impl->ready.nodes;
    }
}

DeviceReport remoteDeviceReport(const std::string& hostUrl, const std::string& cli) {
    LaneSpec spec;
    spec.host = parseSshTarget(hostUrl).url();
    if (!cli.empty()) {
        spec.cli = cli;
    }
    detail::WorkerConnection conn(detail::endpointFor(spec));
    conn.awaitHello(helloTimeout(true));
    conn.closeStdin(); // the worker leaves on its input's end
    conn.reap(5);
    return conn.devices();
}

} // namespace devicerace
