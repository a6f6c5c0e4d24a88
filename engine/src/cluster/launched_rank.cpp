// A rank that a cluster's launcher started: its environment, its lane, and ranks 1..N-1's life
// (launched_rank.h).
#include "cluster/launched_rank.h"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cluster/slurm_hostlist.h"
#include "devicerace/errors.h"
#include "devicerace/race.h"
#include "devicerace/workload.h"
#include "lanes/thread_lane.h"
#include "util/host_name.h"
#include "workers/protocol.h"

namespace devicerace::detail {

namespace {

// How long a rank tries to reach rank 0's store (rank 0 serves it once it has loaded LibTorch).
constexpr double kStoreConnect = 120;
constexpr auto kPoll = std::chrono::milliseconds(100);

std::atomic<int> g_followerSignal{0};
extern "C" void onFollowerSignal(int sig) { g_followerSignal = sig; }

std::optional<std::string> env(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) {
        return std::nullopt;
    }
    return std::string(v);
}

std::optional<long long> envInteger(const char* name) {
    const auto v = env(name);
    if (!v) {
        return std::nullopt;
    }
    long long out = 0;
    auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
    if (ec != std::errc() || ptr != v->data() + v->size()) {
        throw UsageError(fmt::format("worker: {}={} is not an integer", name, *v));
    }
    return out;
}

long long required(const char* name, const char* launcher) {
    const auto v = envInteger(name);
    if (!v) {
        throw UsageError(fmt::format("worker: --ranks-from {}: {} is not set (is this process started by {}?)",
                                     launcher, name,
                                     std::string(launcher) == "slurm" ? "srun" : "a launcher such as torchrun"));
    }
    return *v;
}

} // namespace

std::string launchKey(const std::string& what) { return "devicerace/launch/" + what; }

LaunchedRank launchedRankFromEnvironment(const std::string& source) {
    LaunchedRank me;
    me.source = source;
    if (source == "slurm") {
        me.rank = static_cast<int>(required("SLURM_PROCID", "slurm"));
        me.world = static_cast<int>(envInteger("SLURM_NTASKS").value_or(required("SLURM_NPROCS", "slurm")));
        me.localRank = static_cast<int>(required("SLURM_LOCALID", "slurm"));
        me.nodes = static_cast<int>(envInteger("SLURM_JOB_NUM_NODES").value_or(envInteger("SLURM_NNODES").value_or(1)));
        me.localWorld = me.nodes > 0 ? (me.world + me.nodes - 1) / me.nodes : me.world;
        me.jobId = env("SLURM_JOB_ID").value_or(env("SLURM_JOBID").value_or(""));
        me.nodeList = env("SLURM_JOB_NODELIST").value_or(env("SLURM_NODELIST").value_or(hostName()));
        // Rank 0 runs on the first node of the job: one node is this machine.
        me.masterAddr = env("MASTER_ADDR").value_or(me.nodes <= 1 ? "127.0.0.1" : firstSlurmHost(me.nodeList));
        long long jobNumber = 0;
        std::from_chars(me.jobId.data(), me.jobId.data() + me.jobId.size(), jobNumber);
        me.masterPort = static_cast<int>(envInteger("DEVICERACE_STORE_PORT")
                                             .value_or(envInteger("MASTER_PORT").value_or(20000 + jobNumber % 20000)));
    } else if (source == "env") {
        me.rank = static_cast<int>(required("RANK", "env"));
        me.world = static_cast<int>(required("WORLD_SIZE", "env"));
        me.localRank = static_cast<int>(envInteger("LOCAL_RANK").value_or(me.rank));
        me.localWorld = static_cast<int>(envInteger("LOCAL_WORLD_SIZE").value_or(me.world));
        me.nodes =
            static_cast<int>(envInteger("GROUP_WORLD_SIZE").value_or(me.localWorld > 0 ? me.world / me.localWorld : 1));
        const auto addr = env("MASTER_ADDR");
        if (!addr) {
            throw UsageError(
                "worker: --ranks-from env: MASTER_ADDR is not set (torchrun, PyTorchJob and SkyPilot set it)");
        }
        me.masterAddr = *addr;
        me.masterPort = static_cast<int>(required("MASTER_PORT", "env"));
        me.agentStore = env("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True");
        me.jobId = env("TORCHELASTIC_RUN_ID").value_or("");
        me.nodeList = me.nodes <= 1 ? hostName() : me.masterAddr;
    } else {
        throw UsageError(fmt::format("worker: --ranks-from {} (expected slurm or env)", source));
    }
    if (me.world < 1 || me.world > 65536 || me.rank < 0 || me.rank >= me.world || me.localRank < 0 ||
        me.masterPort < 1 || me.masterPort > 65535) {
        throw UsageError(fmt::format("worker: --ranks-from {}: rank {} of {} (local rank {}), store port {} are out of "
                                     "range",
                                     source, me.rank, me.world, me.localRank, me.masterPort));
    }
    return me;
}

std::shared_ptr<LaunchStore> openLaunchStore(const LaunchedRank& me) {
    if (me.rank == 0 && !me.agentStore) {
        return LaunchStore::serve(me.masterPort, kStoreConnect);
    }
    return LaunchStore::connect(me.masterAddr, me.masterPort, kStoreConnect);
}

void applyLaunchedRank(const LaunchedRank& me, LaneSpec& spec, LaneRunSettings& settings,
                       const std::shared_ptr<LaunchStore>& store) {
    DistConfig d = settings.dist.value_or(DistConfig{});
    if (settings.dist && settings.dist->world > 1 && settings.dist->world != me.world) {
        throw UsageError(fmt::format("the lane asked for {} ranks; the {} started {}", settings.dist->world,
                                     me.source == "slurm" ? "Slurm job" : "launcher", me.world));
    }
    if (!settings.dist) {
        d.backend = spec.device == "cpu" ? "gloo" : "nccl";
        d.timeoutSeconds = 120;
    }
    d.rank = me.rank;
    d.world = me.world;
    d.storeHost = me.masterAddr;
    d.storePort = me.masterPort;
    d.bindHost = me.nodes <= 1 ? "127.0.0.1" : "";
    if (me.rank == 0) {
        d.store = store->rendezvousHolder();
    }
    settings.dist = std::move(d);
    if (spec.device != "cpu") {
        spec.device = fmt::format("cuda:{}", me.localRank); // the launcher gave each node's ranks its GPUs
    }
    if (spec.fault) {
        if (spec.fault->rank.value_or(me.world - 1) != me.rank) {
            spec.fault.reset();
        } else {
            spec.fault->rank.reset();
        }
    }
    spec.name = fmt::format("{}/rank {}", spec.name.empty() ? std::string("lane") : spec.name, me.rank);
}

int runLaunchedFollower(const LaunchedRank& me) {
    struct sigaction sa {};
    sa.sa_handler = onFollowerSignal;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
        ::sigaction(sig, &sa, nullptr);
    }
    const auto say = [&](const std::string& what) {
        std::fprintf(stderr, "devicerace-cli worker (rank %d): %s\n", me.rank, what.c_str());
        std::fflush(stderr);
    };
    std::shared_ptr<LaunchStore> store;
    try {
        store = openLaunchStore(me);
    } catch (const std::exception& e) {
        say(e.what());
        return 1;
    }
    const auto mine = [&](const std::string& what) { return launchKey(fmt::format("{}/{}", what, me.rank)); };
    std::unique_ptr<ThreadLane> lane;
    try {
        store->set(mine("alive"), hostName());
        // The lane, once a parent sent it to rank 0 (an attached job may wait long for one).
        std::optional<std::string> config;
        while (!config) {
            if (auto why = store->tryGet(launchKey("abort"))) {
                say("rank 0 ended without a lane: " + *why);
                return 0;
            }
            if (g_followerSignal) {
                return 0;
            }
            config = store->tryGet(launchKey("config"));
            if (!config) {
                std::this_thread::sleep_for(kPoll);
            }
        }
        try {
            auto message = parseMessage(*config);
            if (!message) {
                throw DataError("the lane in the store is not a message");
            }
            auto [spec, settings] = configFromMessage(message->body);
            applyLaunchedRank(me, spec, settings, store);
            const auto& workload = findWorkload(settings.workload);
            auto resolved = resolveData(workload, spec.data ? spec.data : settings.dataMode, settings.dataDir,
                                        settings.trainLimit, settings.testLimit);
            settings.data = resolved.dataset;
            settings.allowProcessFaults = true;
            lane = std::make_unique<ThreadLane>(spec, settings);
        } catch (const std::exception& e) {
            store->set(mine("ready"), fmt::format("{}: {}", hostName(), e.what()));
            say(e.what());
            return 2;
        }
        store->set(mine("ready"), "");
        while (!store->tryGet(launchKey("start"))) {
            if (auto why = store->tryGet(launchKey("abort"))) {
                say("rank 0 ended before the start: " + *why);
                return 0;
            }
            if (g_followerSignal) {
                return 0;
            }
            std::this_thread::sleep_for(kPoll);
        }
    } catch (const std::exception& e) {
        say(e.what()); // rank 0's store is gone: rank 0 left
        return 1;
    }
    lane->start();
    bool told = false;
    while (!isTerminal(lane->state())) {
        if (g_followerSignal && !told) {
            lane->requestStop();
            told = true;
        }
        (void)lane->takeSamples(); // rank 0 reports for the lane
        std::this_thread::sleep_for(kPoll);
    }
    lane->wait();
    const auto st = lane->state();
    if (st != LaneState::Finished && st != LaneState::Stopped) {
        say(fmt::format("{}: {}", toString(st), lane->message()));
        return 1;
    }
    return 0;
}

} // namespace devicerace::detail
