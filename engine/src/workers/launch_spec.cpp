#include "workers/launch_spec.h"

#include <fmt/format.h>

#include "lanes/lane_fields.h"
#include "train/rendezvous_store.h"

namespace devicerace::detail {

LaneSpec launchedMemberSpec(const LaneSpec& spec) {
    LaneSpec m = spec;
    detail::clearGroupKeys(m);
    m.cli.reset();                                    // the nodes' devicerace-cli: srun's business, never the worker's
    m.device = spec.device == "cpu" ? "cpu" : "cuda"; // each rank takes its local rank's GPU
    return m;
}

DistConfig launchedDist(const LaneSpec& spec, int world) {
    DistConfig d;
    d.rank = 0;
    d.world = std::max(1, world);
    d.backend = spec.backend.value_or(spec.device == "cpu" ? "gloo" : "nccl");
    d.timeoutSeconds = rendezvousTimeout(true);
    d.fixedGlobalBatch = spec.fixedGlobalBatch.value_or(false);
    return d;
}

SlurmShape slurmShape(const LaneSpec& spec) {
    SlurmShape s;
    if (spec.framework == "script") {
        // One task, the script lane, which starts the command's workers=N processes on its node.
        s.gpusPerNode = spec.device.starts_with("cuda") ? 1 : 0;
        s.cpusPerTask = spec.device == "cpu" ? spec.threads.value_or(0) * spec.workers.value_or(1) : 0;
        return s;
    }
    s.nodes = spec.nodes.value_or(1);
    int devices = 1;
    if (spec.device.starts_with("cuda")) {
        if (const auto dash = spec.device.find('-'); dash != std::string::npos) {
            devices = std::stoi(spec.device.substr(dash + 1)) - std::stoi(spec.device.substr(5, dash - 5)) + 1;
        }
        s.gpusPerNode = devices;
    }
    s.tasksPerNode = devices * spec.workers.value_or(1);
    s.cpusPerTask = spec.device == "cpu" ? spec.threads.value_or(0) : 0;
    return s;
}

std::vector<std::string> srunArgv(const LaneSpec& spec, const std::string& jobName, const std::string& cli) {
    const auto shape = slurmShape(spec);
    std::vector<std::string> argv{"srun",
                                  "--job-name=" + jobName,
                                  fmt::format("--nodes={}", shape.nodes),
                                  fmt::format("--ntasks-per-node={}", shape.tasksPerNode),
                                  fmt::format("--ntasks={}", shape.ranks()),
                                  "--kill-on-bad-exit=1",
                                  "--input=0"};
    if (shape.cpusPerTask > 0) {
        argv.push_back(fmt::format("--cpus-per-task={}", shape.cpusPerTask));
    }
    if (shape.gpusPerNode > 0) {
        argv.push_back(fmt::format("--gpus-per-node={}", shape.gpusPerNode));
    }
    if (spec.partition) {
        argv.push_back("--partition=" + *spec.partition);
    }
    if (spec.timeLimit) {
        argv.push_back(fmt::format("--time={}", *spec.timeLimit));
    }
    if (spec.storePort) {
        argv.push_back(fmt::format("--export=ALL,DEVICERACE_STORE_PORT={}", *spec.storePort));
    }
    if (spec.framework == "script") {
        argv.insert(argv.end(), {cli, "worker", "--framework", "script"}); // the protocol through srun
    } else {
        argv.insert(argv.end(), {cli, "worker", "--ranks-from", "slurm"});
    }
    return argv;
}

} // namespace devicerace::detail
