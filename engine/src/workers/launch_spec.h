#pragma once
// The parent's side of a lane whose ranks a launcher starts (slurm://, attach://): what rank 0 is
// sent, and how many ranks a Slurm lane asks for. Thread-safe (plain values).
#include <string>
#include <vector>

#include "devicerace/lane_spec.h"
#include "devicerace/run_settings.h"

namespace devicerace::detail {

/// The lane as rank 0 gets it: the device kind and the training keys, without the launcher's
/// keys (rank 0 and the others fill in their rank, GPU and store: cluster/launched_rank.h).
LaneSpec launchedMemberSpec(const LaneSpec& spec);
/// The ranks' c10d settings (`world` 0: the launcher's, as an attached job has).
DistConfig launchedDist(const LaneSpec& spec, int world);

/// A slurm:// lane's shape: nodes, tasks per node (listed GPUs × workers), GPUs per node.
struct SlurmShape {
    int nodes = 1;
    int tasksPerNode = 1;
    int gpusPerNode = 0;
    int cpusPerTask = 0; // 0: Slurm's default (one CPU per task)
    int ranks() const { return nodes * tasksPerNode; }
};
SlurmShape slurmShape(const LaneSpec& spec);

/// srun's argv for the lane (before "--proto N"): the job's name, its shape, partition and time
/// limit, no stdin for ranks but 0, the whole job killed when a rank fails, then the worker.
std::vector<std::string> srunArgv(const LaneSpec& spec, const std::string& jobName, const std::string& cli);

} // namespace devicerace::detail
