// A data-parallel lane: N WorkerLanes as the ranks of one c10d group (parallel_lane.h).
#include "distributed/parallel_lane.h"
#include "train/run_plan.h"

#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <set>
#include <thread>

#include "devicerace/errors.h"
#include "lanes/lane_fields.h"
#include "train/rendezvous_store.h"
#include "util/host_name.h"
#include "workers/worker_lane.h"

namespace devicerace {

namespace {

using Clock = std::chrono::steady_clock;

// How often the lane gathers its ranks' samples and states.
constexpr auto kPoll = std::chrono::milliseconds(20);
// After the first rank fails: how long the others get to end on their own (their collectives
// fail at once when a peer's sockets close) before they are told to stop.
constexpr auto kGraceAfterFailure = std::chrono::seconds(2);

std::string hostOf(const LaneMember& m) { return m.host.empty() ? std::string() : parseSshTarget(m.host).host; }

// "rank 1 (gpubox, cuda:1)" / "rank 1 (cpu)"
std::string rankName(int rank, const LaneMember& m) {
    return m.host.empty() ? fmt::format("rank {} ({})", rank, m.device)
                          : fmt::format("rank {} ({}, {})", rank, hostOf(m), m.device);
}

// The fault a test injects hits one rank: fault=KIND[:STEP][@RANK], default the last rank.
std::optional<LaneFault> faultFor(const std::optional<LaneFault>& fault, int rank, int world) {
    if (!fault || rank != fault->rank.value_or(world - 1)) {
        return std::nullopt;
    }
    auto mine = *fault;
    mine.rank.reset(); // the worker runs one rank: the fault is its own
    return mine;
}

} // namespace

struct ParallelLane::Impl {
    LaneSpec spec;
    LaneRunSettings settings;
    std::vector<LaneMember> ranks;
    std::vector<std::unique_ptr<WorkerLane>> members;
    std::vector<std::optional<Clock::time_point>>
        failedAt;                         // per rank: first seen failing (max: after the lane asked it to stop)
    detail::LaneRecord* record = nullptr; // the lane's (LaneBase)
    std::thread monitor;
    std::atomic<bool> started{false};
    std::atomic<bool> stopRequested{false};

    LaneSpec memberSpec(int rank) const {
        LaneSpec m = spec;
        detail::clearGroupKeys(m);
        m.device = ranks[static_cast<std::size_t>(rank)].device;
        m.host = ranks[static_cast<std::size_t>(rank)].host;
        m.isolate = LaneKind::Process;
        m.fault = faultFor(spec.fault, rank, static_cast<int>(ranks.size()));
        m.name = fmt::format("{}/rank {}", spec.name, rank);
        return m;
    }

    // Where rank `r` reaches rank 0's store: master=, loopback on rank 0's machine, else its name.
    std::string storeHostFor(int r) const {
        if (spec.master) {
            return *spec.master;
        }
        const auto& zero = ranks.front();
        const auto& mine = ranks[static_cast<std::size_t>(r)];
        if (hostOf(zero) == hostOf(mine)) {
            return "127.0.0.1";
        }
        return zero.host.empty() ? detail::hostName() : hostOf(zero);
    }

    void connect() {
        const int world = static_cast<int>(ranks.size());
        std::set<std::string> machines;
        bool remote = false;
        for (const auto& r : ranks) {
            machines.insert(hostOf(r));
            remote = remote || !r.host.empty();
        }
        DistConfig dist;
        dist.world = world;
        dist.backend = spec.backend.value_or(spec.device == "cpu" ? "gloo" : "nccl");
        dist.bindHost = machines.size() == 1 ? "127.0.0.1" : "";
        dist.timeoutSeconds = rendezvousTimeout(remote);
        dist.fixedGlobalBatch = spec.fixedGlobalBatch.value_or(false);
        const auto settingsFor = [&](int rank) {
            LaneRunSettings s = settings;
            s.data.reset();
            s.dist = dist;
            s.dist->rank = rank;
            return s;
        };
        const auto wrap = [&](int rank, const std::exception& e) {
            return UsageError(fmt::format("lane {}: {}: {}", spec.name,
                                          rankName(rank, ranks[static_cast<std::size_t>(rank)]), e.what()));
        };
        try {
            members.push_back(std::make_unique<WorkerLane>(memberSpec(0), settingsFor(0)));
        } catch (const std::exception& e) {
            throw wrap(0, e);
        }
        const auto port = members.front()->storePort();
        if (!port) {
            throw UsageError(fmt::format("lane {}: rank 0's worker started no rendezvous store (is DeviceRace there "
                                         "older than this one? {})",
                                         spec.name, members.front()->workerVersion()));
        }
        dist.storePort = *port;
        // The other ranks start together (each loads LibTorch and its data).
        std::vector<std::future<std::unique_ptr<WorkerLane>>> pending;
        for (int r = 1; r < world; ++r) {
            dist.storeHost = storeHostFor(r);
            pending.push_back(std::async(std::launch::async, [spec = memberSpec(r), s = settingsFor(r)] {
                return std::make_unique<WorkerLane>(spec, s);
            }));
        }
        std::optional<UsageError> first;
        for (int r = 1; r < world; ++r) {
            try {
                members.push_back(pending[static_cast<std::size_t>(r - 1)].get());
            } catch (const std::exception& e) {
                if (!first) {
                    first = wrap(r, e);
                }
            }
        }
        if (first) {
            throw *first;
        }
    }

    // Forwards rank 0's samples as the lane's; ends the lane when every rank has ended.
    void run() {
        std::optional<Clock::time_point> firstFailure;
        failedAt.assign(members.size(), std::nullopt);
        bool told = false;
        while (true) {
            bool allEnded = true;
            for (std::size_t r = 0; r < members.size(); ++r) {
                auto samples = members[r]->takeSamples();
                const auto st = members[r]->state();
                allEnded = allEnded && isTerminal(st);
                if ((st == LaneState::Failed || st == LaneState::Diverged) && !failedAt[r]) {
                    failedAt[r] = told ? Clock::time_point::max() : Clock::now(); // max: after the stop we asked for
                    if (!firstFailure) {
                        firstFailure = failedAt[r];
                    }
                }
                if (r != 0) {
                    continue; // the other ranks' samples stay in their own records
                }
                for (auto& s : samples) {
                    if (s.kind == SampleKind::State && isTerminal(s.state)) {
                        continue; // the lane's end is decided below, over all ranks
                    }
                    s.lane = spec.name;
                    record->push(std::move(s));
                }
            }
            if (allEnded) {
                break;
            }
            if (firstFailure && !told && Clock::now() - *firstFailure > kGraceAfterFailure) {
                for (auto& m : members) {
                    m->requestStop();
                }
                told = true;
            }
            std::this_thread::sleep_for(kPoll);
        }
        for (auto& m : members) {
            m->wait();
        }
        finish();
    }

    // The lane's end: a rank's own failure (killed, lost, out of memory, diverged) ranks above
    // the failures it caused in the others ("lost a peer rank: ...", or a rank stuck in a
    // collective with the dead one that failed only once the lane asked it to stop); among
    // causes, the rank seen failing first. Else rank 0's end.
    void finish() {
        std::optional<std::size_t> cause;
        const auto when = [&](std::size_t r) {
            return failedAt.size() > r && failedAt[r] ? *failedAt[r] : Clock::time_point::max();
        };
        const auto consequence = [&](std::size_t r) {
            return members[r]->message().find("lost a peer rank") != std::string::npos ||
                   when(r) == Clock::time_point::max();
        };
        for (std::size_t r = 0; r < members.size(); ++r) {
            const auto st = members[r]->state();
            if (st != LaneState::Failed && st != LaneState::Diverged) {
                continue;
            }
            if (!cause || (consequence(*cause) && !consequence(r)) ||
                (consequence(*cause) == consequence(r) && when(r) < when(*cause))) {
                cause = r;
            }
        }
        if (cause) {
            const int r = static_cast<int>(*cause);
            record->finish(members[*cause]->state(),
                           fmt::format("{} {}: {}", rankName(r, ranks[*cause]),
                                       members[*cause]->state() == LaneState::Diverged ? "diverged" : "failed",
                                       members[*cause]->message()));
            return;
        }
        record->finish(members.front()->state(), members.front()->message());
    }
};

LaneSpec expandParallelSpec(LaneSpec spec) {
    if (spec.device == "cuda:all") {
        const auto& report = deviceReport();
        if (!report.cudaAvailable || report.gpus.empty()) {
            throw UsageError(
                fmt::format("lane {}: cuda:all: this machine has no usable CUDA device{}", spec.name,
                            report.cudaUnavailableReason.empty() ? "" : " (" + report.cudaUnavailableReason + ")"));
        }
        spec.members.clear();
        spec.device = "cuda:0";
        spec.members.push_back(
            {"", report.gpus.size() == 1 ? std::string("cuda:0") : fmt::format("cuda:0-{}", report.gpus.size() - 1)});
    }
    auto ranks = laneRanks(spec);
    if (ranks.empty()) {
        ranks.push_back({spec.host, spec.device});
    }
    int local = 0;
    for (const auto& r : ranks) {
        if ((r.device == "cpu") != (spec.device == "cpu")) {
            throw UsageError(fmt::format("lane {}: every rank of a data-parallel lane trains on one kind of device "
                                         "(all cpu, or all cuda)",
                                         spec.name));
        }
        local += r.host.empty();
    }
    if (!spec.threads && spec.device == "cpu" && local > 0) {
        // Not shared by a live race (fair mode): the local ranks split this machine's cores.
        spec.threads = std::max(1, detail::defaultCpuThreads() / local);
    }
    return spec;
}

ParallelLane::ParallelLane(LaneSpec spec, LaneRunSettings settings)
    : LaneBase(spec.name, {settings.targetAccuracy, settings.targetLoss}), m_impl(std::make_unique<Impl>()) {
    auto& d = *m_impl;
    spec = expandParallelSpec(std::move(spec));
    d.ranks = laneRanks(spec);
    if (d.ranks.empty()) {
        d.ranks.push_back({spec.host, spec.device});
    }
    d.spec = std::move(spec);
    d.settings = std::move(settings);
    d.record = &record();
    d.connect();
}

ParallelLane::~ParallelLane() {
    requestStop();
    if (m_impl->monitor.joinable()) {
        m_impl->monitor.join();
    }
    m_impl->members.clear(); // each worker: stop, close, SIGTERM, SIGKILL (bounded), reap
}

const LaneSpec& ParallelLane::spec() const { return m_impl->spec; }
std::int64_t ParallelLane::batch() const { return m_impl->members.front()->batch() * ranks(); }
std::int64_t ParallelLane::totalSteps() const { return m_impl->members.front()->totalSteps(); }
int ParallelLane::ranks() const { return static_cast<int>(m_impl->ranks.size()); }

void ParallelLane::start() {
    if (m_impl->started.exchange(true) || m_impl->stopRequested) {
        return;
    }
    for (auto& m : m_impl->members) {
        m->start();
    }
    m_impl->monitor = std::thread([impl = m_impl.get()] { impl->run(); });
}

void ParallelLane::requestStop() {
    m_impl->stopRequested = true;
    if (!m_impl->started) {
        m_impl->record->stopIfPending("stopped before it started");
    }
    for (auto& m : m_impl->members) {
        m->requestStop();
    }
}

void ParallelLane::setPaused(bool paused) {
    for (auto& m : m_impl->members) {
        m->setPaused(paused);
    }
}

void ParallelLane::wait() {
    if (m_impl->monitor.joinable()) {
        m_impl->monitor.join();
    }
}

double ParallelLane::cpuSeconds() const {
    double total = 0;
    for (const auto& m : m_impl->members) {
        total += m->cpuSeconds();
    }
    return total;
}

void ParallelLane::completeSummary(LaneSummary& s) const {
    const auto zero = m_impl->members.front()->summary();
    s.datasetName = zero.datasetName;
    s.synthetic = zero.synthetic;
    s.execution = zero.execution;
    s.threads = zero.threads;
    s.workers = ranks();
}

std::shared_ptr<const Dataset> ParallelLane::dataset() const { return m_impl->members.front()->dataset(); }
const DeviceReport* ParallelLane::workerMachine() const { return m_impl->members.front()->workerMachine(); }

} // namespace devicerace
