// A slurm:// lane: srun starts the ranks, rank 0 reports through srun (slurm_lane.h).
#include "cluster/slurm_lane.h"

#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cctype>
#include <mutex>
#include <thread>

#include "workers/launch_spec.h"
#include "cluster/run_command.h"
#include "devicerace/errors.h"
#include "devicerace/format.h"
#include "devicerace/workload.h"
#include "util/text_util.h"
#include "workers/child_process.h"
#include "workers/worker_connection.h"
#include "workers/worker_lane.h"

namespace devicerace {

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kDefaultQueueLimit = 600;
constexpr auto kPoll = std::chrono::milliseconds(20);
constexpr auto kQueuePoll = std::chrono::milliseconds(1000);
// Seconds after the allocation for rank 0's hello (its node loads LibTorch; ssh to a login host).
constexpr double kHelloAfterQueue = 120;
constexpr double kCommandSeconds = 20;
// Seconds to wait for Slurm's verdict on a job that ended without our stop.
constexpr double kSlurmVerdict = 15;

std::atomic<int> g_jobs{0};

std::string lower(std::string s) {
    for (auto& c : s) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return s;
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "KEY=VALUE" out of scontrol's one-line record.
std::string field(const std::string& record, const std::string& key) {
    const auto at = record.find(" " + key + "=");
    if (at == std::string::npos) {
        return {};
    }
    const auto start = at + key.size() + 2;
    return record.substr(start, record.find_first_of(" \n", start) - start);
}

} // namespace

struct SlurmLane::Impl {
    LaneSpec spec;
    LaneRunSettings settings;
    detail::LaneRecord* record = nullptr;
    std::string jobName;
    std::optional<SshTarget> login;
    mutable std::mutex mutex; // guards member, job, started
    std::unique_ptr<WorkerLane> member;
    std::string job;
    bool started = false;
    std::atomic<bool> startWanted{false}, stopWanted{false}, pausedWanted{false}, launchEnded{false};
    std::string queueFailure; // the watcher cancelled the job: why
    std::thread launch, watcher;

    // A Slurm command, here or on the login host (ssh in BatchMode; its shell re-parses the one
    // string, so every word is quoted).
    std::vector<std::string> command(const std::vector<std::string>& argv) const {
        if (!login) {
            return argv;
        }
        auto ssh = detail::sshOptions(*login);
        std::string remote = "exec";
        for (const auto& a : argv) {
            remote += ' '; // two appends: GCC 12 warns (-Wrestrict, a false positive) on " " + string
            remote += detail::shellQuote(a);
        }
        ssh.insert(ssh.end(), {"--", login->host, remote});
        return ssh;
    }

    detail::WorkerEndpoint endpoint() const {
        detail::WorkerEndpoint ep;
        const auto cli = spec.cli.value_or(login ? std::string("devicerace-cli") : detail::localWorkerProgram());
        ep.program = command(detail::srunArgv(spec, jobName, cli)); // then "--proto N" (ssh joins the words)
        ep.where = login ? login->host : "this machine";
        ep.cli = cli;
        ep.who = fmt::format("the Slurm job {}", jobName);
        ep.helloTimeout = spec.queueLimit.value_or(kDefaultQueueLimit) + kHelloAfterQueue;
        return ep;
    }

    void setJob(const std::string& id) {
        std::lock_guard lock(mutex);
        if (job.empty()) {
            job = id;
        }
    }
    std::string jobNow() const {
        std::lock_guard lock(mutex);
        return job;
    }

    void preparing(const std::string& message) {
        MetricSample s;
        s.kind = SampleKind::State;
        s.lane = spec.name;
        s.state = LaneState::Preparing;
        s.message = message;
        record->push(std::move(s));
    }

    void cancel() { (void)detail::runCommand(command({"scancel", "--name=" + jobName}), kCommandSeconds); }

    // While the job waits: its place in the queue on the lane; past the queue limit, cancelled.
    void watch() {
        const auto begun = Clock::now();
        const double limit = spec.queueLimit.value_or(kDefaultQueueLimit);
        std::string last;
        bool cancelled = false;
        while (!launchEnded) {
            {
                std::lock_guard lock(mutex);
                if (member) {
                    return;
                }
            }
            if (stopWanted && !cancelled) {
                cancel();
                cancelled = true;
            }
            const auto q = detail::runCommand(command({"squeue", "-h", "--name=" + jobName, "-o", "%i|%T|%r|%D|%P"}),
                                              kCommandSeconds);
            const auto line = std::string(trim(q.out.substr(0, q.out.find('\n'))));
            const auto parts = splitString(line, '|');
            if (q.ok() && parts.size() == 5) {
                const std::string id(parts[0]), state(parts[1]), reason(parts[2]), nodes(parts[3]), partition(parts[4]);
                setJob(id);
                std::string message;
                if (state == "PENDING") {
                    message = fmt::format("queued: job {} waiting for {} node{} ({}){}", id, nodes,
                                          nodes == "1" ? "" : "s", reason, queuePosition(id, partition));
                    if (since(begun) > limit && !cancelled) {
                        queueFailure = fmt::format("job {} was still queued after {:.0f} s (Slurm's reason: {}); "
                                                   "cancelled it (raise queue= to wait longer)",
                                                   id, limit, reason);
                        cancel();
                        cancelled = true;
                    }
                } else {
                    message = fmt::format("job {} {}: starting the ranks", id, lower(state));
                }
                if (message != last) {
                    preparing(message);
                    last = message;
                }
            }
            for (int i = 0; i < 10 && !launchEnded && !stopWanted; ++i) {
                std::this_thread::sleep_for(kQueuePoll / 10);
            }
        }
    }

    // ", position 2 of 5" among the partition's pending jobs, by priority.
    std::string queuePosition(const std::string& id, const std::string& partition) const {
        const auto q = detail::runCommand(
            command({"squeue", "-h", "-t", "PENDING", "-p", partition, "-o", "%i", "--sort=-p,i"}), kCommandSeconds);
        if (!q.ok()) {
            return {};
        }
        int position = 0, count = 0;
        for (auto line : splitString(q.out, '\n')) {
            line = trim(line);
            if (line.empty()) {
                continue;
            }
            ++count;
            if (line == id) {
                position = count;
            }
        }
        return position > 0 ? fmt::format(", position {} of {}", position, count) : std::string();
    }

    void startMember() {
        std::lock_guard lock(mutex);
        if (member && !started && startWanted && !stopWanted) {
            started = true;
            member->start();
            if (pausedWanted) {
                member->setPaused(true);
            }
        }
    }

    void run() {
        std::unique_ptr<WorkerLane> built;
        try {
            built = std::make_unique<WorkerLane>(spec, settings, endpoint());
        } catch (const std::exception& e) {
            launchEnded = true;
            if (watcher.joinable()) {
                watcher.join();
            }
            if (stopWanted) {
                const auto id = jobNow();
                record->finish(LaneState::Stopped, id.empty() ? std::string("stopped before Slurm started the job")
                                                              : fmt::format("stopped: job {} cancelled", id));
            } else {
                record->finish(LaneState::Failed,
                               queueFailure.empty() ? fmt::format("Slurm: {}", e.what()) : queueFailure);
            }
            return;
        }
        {
            std::lock_guard lock(mutex);
            member = std::move(built);
            if (!member->launchedJob().empty()) {
                job = member->launchedJob();
            }
        }
        launchEnded = true;
        if (watcher.joinable()) {
            watcher.join();
        }
        if (stopWanted) {
            member->requestStop();
        }
        startMember();
        while (true) {
            startMember();
            const bool ended = isTerminal(member->state());
            for (auto& s : member->takeSamples()) {
                if (s.kind == SampleKind::State && isTerminal(s.state)) {
                    continue; // the lane's end is decided below, with Slurm's word on it
                }
                s.lane = spec.name;
                record->push(std::move(s));
            }
            if (ended) {
                break;
            }
            std::this_thread::sleep_for(kPoll);
        }
        member->wait();
        finish();
    }

    // A rank's own end, or Slurm's: a job that ends without our stop is Slurm's doing.
    void finish() {
        const auto st = member->state();
        if (stopWanted || st == LaneState::Finished || st == LaneState::Diverged) {
            record->finish(st, member->message());
            return;
        }
        const auto id = jobNow();
        // Slurm says COMPLETING while it signals the tasks, then the job's end (CANCELLED, TIMEOUT,
        // NODE_FAIL, ...): wait a little for that word.
        std::string state, reason;
        const auto asked = Clock::now();
        while (!id.empty() && since(asked) < kSlurmVerdict) {
            const auto q = detail::runCommand(command({"scontrol", "show", "job", id, "-o"}), kCommandSeconds);
            state = field(" " + q.out, "JobState");
            reason = field(" " + q.out, "Reason");
            if (!state.empty() && state != "COMPLETING" && state != "RUNNING") {
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
        if (state.empty() || state == "COMPLETED" || state == "COMPLETING" || state == "RUNNING") {
            record->finish(LaneState::Failed, member->message());
            return;
        }
        record->finish(LaneState::Failed,
                       fmt::format("Slurm ended job {} ({}{}) at step {}{}", id, state,
                                   reason.empty() || reason == "None" ? "" : ", reason: " + reason,
                                   groupThousands(static_cast<double>(record->lastStep())),
                                   st == LaneState::Failed ? ": " + member->message() : std::string()));
    }
};

std::string localSrun() { return detail::findProgram("srun"); }

SlurmLane::SlurmLane(LaneSpec spec, LaneRunSettings settings)
    : LaneBase(spec.name, {settings.targetAccuracy, settings.targetLoss}), m_impl(std::make_unique<Impl>()) {
    auto& d = *m_impl;
    if (!spec.launcherTarget.empty()) {
        d.login = parseSshTarget(spec.launcherTarget);
    } else if (localSrun().empty()) {
        throw UsageError(fmt::format("lane {}: this machine has no srun: install Slurm's client (Debian: slurm-client) "
                                     "or name a login host, slurm://LOGIN-HOST/{}",
                                     spec.name, spec.device));
    }
    d.jobName = fmt::format("devicerace-{}-{}", ::getpid(), g_jobs.fetch_add(1));
    d.spec = std::move(spec);
    d.settings = std::move(settings);
    d.settings.data.reset(); // every rank resolves its own where it runs
    d.record = &record();
    d.preparing(fmt::format("submitting the job to Slurm ({} rank{})", detail::slurmShape(d.spec).ranks(),
                            detail::slurmShape(d.spec).ranks() == 1 ? "" : "s"));
    // The launch thread owns srun (its PR_SET_PDEATHSIG follows that thread's life).
    d.watcher = std::thread([impl = m_impl.get()] { impl->watch(); });
    d.launch = std::thread([impl = m_impl.get()] { impl->run(); });
}

SlurmLane::~SlurmLane() {
    requestStop();
    if (m_impl->launch.joinable()) {
        m_impl->launch.join();
    }
    if (m_impl->watcher.joinable()) {
        m_impl->watcher.join();
    }
    m_impl->member.reset();
}

const LaneSpec& SlurmLane::spec() const { return m_impl->spec; }

std::int64_t SlurmLane::batch() const {
    std::lock_guard lock(m_impl->mutex);
    if (m_impl->member) {
        return m_impl->member->batch();
    }
    const auto& s = m_impl->spec;
    const auto perRank = s.batch.value_or(findWorkload(m_impl->settings.workload).defaultBatch);
    return s.fixedGlobalBatch.value_or(false) ? perRank : perRank * detail::slurmShape(s).ranks();
}

std::int64_t SlurmLane::totalSteps() const {
    std::lock_guard lock(m_impl->mutex);
    return m_impl->member ? m_impl->member->totalSteps() : m_impl->settings.steps.value_or(0);
}

void SlurmLane::start() {
    m_impl->startWanted = true;
    m_impl->startMember();
}

void SlurmLane::requestStop() {
    if (m_impl->stopWanted.exchange(true)) {
        return;
    }
    std::lock_guard lock(m_impl->mutex);
    if (m_impl->member) {
        m_impl->member->requestStop();
    }
    // Queued: the watcher cancels the job, and srun then ends.
}

void SlurmLane::setPaused(bool paused) {
    m_impl->pausedWanted = paused;
    std::lock_guard lock(m_impl->mutex);
    if (m_impl->member && m_impl->started) {
        m_impl->member->setPaused(paused);
    }
}

void SlurmLane::wait() {
    if (!m_impl->startWanted && !m_impl->stopWanted) {
        return;
    }
    if (m_impl->launch.joinable()) {
        m_impl->launch.join();
    }
}

double SlurmLane::cpuSeconds() const {
    std::lock_guard lock(m_impl->mutex);
    return m_impl->member ? m_impl->member->cpuSeconds() : 0;
}

std::shared_ptr<const Dataset> SlurmLane::dataset() const {
    std::lock_guard lock(m_impl->mutex);
    return m_impl->member ? m_impl->member->dataset() : nullptr;
}

const DeviceReport* SlurmLane::workerMachine() const {
    std::lock_guard lock(m_impl->mutex);
    return m_impl->member ? m_impl->member->workerMachine() : nullptr;
}

std::string SlurmLane::jobId() const { return m_impl->jobNow(); }

void SlurmLane::completeSummary(LaneSummary& s) const {
    std::lock_guard lock(m_impl->mutex);
    s.workers = detail::slurmShape(m_impl->spec).ranks();
    s.job = m_impl->job;
    if (m_impl->member) {
        const auto m = m_impl->member->summary();
        s.datasetName = m.datasetName;
        s.synthetic = m.synthetic;
        s.execution = m.execution;
        s.threads = m.threads;
        s.nodes = m.nodes;
    }
}

} // namespace devicerace
