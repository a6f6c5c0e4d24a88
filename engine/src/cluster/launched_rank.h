#pragma once
// One rank of a data-parallel lane that a cluster's launcher started (docs/PARALLEL.md,
// "Clusters"): `devicerace-cli worker --ranks-from slurm|env`. Its rank, world and rendezvous
// address come from the launcher's environment (Slurm's SLURM_*; torch.distributed's RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT as torchrun, Kubeflow's PyTorchJob and
// SkyPilot set them). Rank 0 speaks the worker protocol to the parent and hands the lane to the
// others through the store; the others stay silent on stdout.
#include <memory>
#include <optional>
#include <string>

#include "devicerace/lane_spec.h"
#include "devicerace/run_settings.h"
#include "train/launch_store.h"

namespace devicerace::detail {

struct LaunchedRank {
    std::string source; // "slurm" | "env"
    int rank = 0, world = 1, localRank = 0, localWorld = 1, nodes = 1;
    std::string masterAddr; // where rank 0's store listens
    int masterPort = 0;
    bool agentStore = false; // torchrun: its agent serves the store; every rank is a client
    std::string jobId;       // Slurm's job id, torchrun's run id
    std::string nodeList;    // Slurm's node list ("node[01-04]"), else the master's name
};

/// Reads the launcher's environment (`source`: slurm or env). Throws UsageError naming the
/// variables that are missing or malformed.
LaunchedRank launchedRankFromEnvironment(const std::string& source);

/// The store keys the ranks share (prefixed: the launcher's own store may hold other keys).
std::string launchKey(const std::string& what);

/// Makes the parent's lane this rank's: its rank, world and store in `settings.dist`, its GPU
/// (cuda: the local rank's), its fault (only the rank the fault names). Throws UsageError when
/// the parent asked for another number of ranks than the launcher started.
void applyLaunchedRank(const LaunchedRank& me, LaneSpec& spec, LaneRunSettings& settings,
                       const std::shared_ptr<LaunchStore>& store);

/// The store this rank talks to: rank 0 serves it, unless torchrun's agent already does.
std::shared_ptr<LaunchStore> openLaunchStore(const LaunchedRank& me);

/// Ranks 1..N-1: wait for the lane (or an abort) in the store, build it, say ready, train when
/// rank 0 starts. Returns the process exit status (0 finished/stopped/aborted, 1 failed, 2 refused).
int runLaunchedFollower(const LaunchedRank& me);

} // namespace devicerace::detail
