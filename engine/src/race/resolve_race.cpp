#include "devicerace/environment.h"
#include "devicerace/race_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdlib>
#include <string_view>

#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "data/data_choice.h"
#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/frameworks.h"
#include "devicerace/workload.h"
#include "workers/launch_spec.h"
#include "distributed/parallel_lane.h"
#include "train/run_plan.h"
#include "workers/child_process.h"
#include "workers/script_copy.h"
#include "workers/worker_connection.h"

namespace devicerace {

namespace {

// The keys `lane` sets that `other` does not set alike ("batch=256", "lr=0.01"): what tells two
// lanes of one default name apart. Keys the name already says (threads, precision, plain) and its
// name are left out.
std::vector<std::string> keysBeyond(const LaneSpec& lane, const LaneSpec& other) {
    auto keys = [](const LaneSpec& s) {
        std::vector<std::string> out;
        const std::string text = formatLaneSpec(s);
        for (std::size_t at = text.find(','); at != std::string::npos;) {
            const std::size_t next = text.find(',', at + 1);
            std::string part = text.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
            if (!part.starts_with("name=") && !part.starts_with("threads=") && !part.starts_with("precision=") &&
                part != "fused=false") {
                out.push_back(std::move(part));
            }
            at = next;
        }
        return out;
    };
    const auto theirs = keys(other);
    std::vector<std::string> out;
    for (auto& k : keys(lane)) {
        if (std::find(theirs.begin(), theirs.end(), k) == theirs.end()) {
            out.push_back(std::move(k));
        }
    }
    return out;
}

// "cpu·1", "cpu·2", "cuda:0"; a framework lane adds its framework ("cpu·2·pytorch",
// "cpu·2·keras-jax"), a fused=false lane "plain" ("cpu·2·plain"); a lane whose name is taken adds
// the keys that set it apart ("cpu·2·batch=256"), and a lane like another "#2", "#3".
void nameLanes(std::vector<LaneSpec>& lanes) {
    std::set<std::string> used;
    std::map<std::string, const LaneSpec*> holders; // the first lane of each default name
    for (auto& lane : lanes) {
        const bool named = !lane.name.empty();
        if (lane.name.empty() && !lane.launcher.empty()) {
            // "slurm·cpu×2", "slurm·cuda×16", "attach·10.0.0.5:29400": the launcher and the ranks.
            if (lane.launcher == "slurm") {
                lane.name =
                    fmt::format("slurm·{}×{}", lane.device == "cpu" ? "cpu" : "cuda", detail::slurmShape(lane).ranks());
            } else {
                lane.name = "attach·" + lane.launcherTarget;
            }
            if (lane.precision != Precision::Fp32) {
                lane.name += "·" + toString(lane.precision);
            }
        } else if (lane.name.empty() && laneKind(lane) == LaneKind::Parallel) {
            // "cpu·1×2", "cuda×8", "gpubox·cuda×8", "2 hosts·cpu×2": the ranks' device and count.
            const auto ranks = laneRanks(lane);
            std::set<std::string> hosts;
            for (const auto& r : ranks) {
                hosts.insert(r.host);
            }
            std::string where;
            if (hosts.size() > 1) {
                where = fmt::format("{} hosts·", hosts.size());
            } else if (!lane.host.empty()) {
                where = parseSshTarget(lane.host).host + "·";
            }
            std::string device = lane.device.starts_with("cuda") ? "cuda" : "cpu";
            if (device == "cpu" && lane.threads) {
                device += fmt::format("·{}", *lane.threads);
            }
            lane.name =
                lane.device == "cuda:all" ? where + "cuda×all" : fmt::format("{}{}×{}", where, device, ranks.size());
            if (lane.precision != Precision::Fp32) {
                lane.name += "·" + toString(lane.precision);
            }
        } else if (lane.name.empty() && !lane.host.empty()) {
            // "gpubox·cuda:0": remote lanes carry their host (threads are decided over there).
            lane.name = parseSshTarget(lane.host).host + "·" + (lane.device == "cuda" ? "cuda:0" : lane.device);
            if (lane.threads) {
                lane.name += fmt::format("·{}", *lane.threads);
            }
            if (lane.precision != Precision::Fp32) {
                lane.name += "·" + toString(lane.precision);
            }
        } else if (lane.name.empty()) {
            if (lane.device == "cpu") {
                int threads = lane.threads.value_or(detail::defaultCpuThreads());
                lane.name = fmt::format("cpu·{}", threads);
            } else {
                lane.name = lane.device == "cuda" ? "cuda:0" : lane.device;
            }
            if (lane.precision != Precision::Fp32) {
                lane.name += "·" + toString(lane.precision);
            }
        }
        if (!named && lane.fused == false && (!lane.framework || *lane.framework == "devicerace")) {
            lane.name += "·plain"; // plain LibTorch: no fast paths (README, "Fast paths")
        }
        if (!named && lane.framework && *lane.framework != "devicerace" && *lane.framework != "script") {
            lane.name += "·" + *lane.framework; // a script lane runs the user's command: no framework of ours
        }
        if (!named && lane.framework == "script" && lane.launcher.empty() && lane.workers.value_or(1) > 1) {
            // workers=N: N processes of the command, named for its ranks as a data-parallel lane is
            lane.name += fmt::format("×{}", *lane.workers);
        }
        if (!named && used.count(lane.name) && holders.count(lane.name)) {
            // What sets it apart, where that is short enough to read in the strip and the legend.
            constexpr std::size_t kLongestSuffix = 24;
            const std::string apart = fmt::format("{}", fmt::join(keysBeyond(lane, *holders[lane.name]), "·"));
            if (!apart.empty() && apart.size() <= kLongestSuffix) {
                lane.name += "·" + apart;
            }
        }
        std::string base = lane.name;
        for (int k = 2; used.count(lane.name); ++k) {
            lane.name = fmt::format("{}#{}", base, k);
        }
        used.insert(lane.name);
        holders.emplace(base, &lane);
    }
}

// A CPU process of this machine that a lane runs (data-parallel CPU ranks: one each).
int localCpuProcesses(const LaneSpec& lane) {
    if (!lane.launcher.empty()) {
        return 0; // the launcher places the ranks (and the CPUs they get)
    }
    if (laneKind(lane) != LaneKind::Parallel) {
        // A script lane's workers=N are N processes of the command.
        const int processes = lane.framework == "script" ? lane.workers.value_or(1) : 1;
        return lane.device == "cpu" && lane.host.empty() ? processes : 0;
    }
    int n = 0;
    for (const auto& r : laneRanks(lane)) {
        n += r.device == "cpu" && r.host.empty();
    }
    return n;
}

// Live races share the CPU: CPU lanes that did not ask for a thread count split the cores
// that lanes with an explicit count left over, so the race never oversubscribes the machine
// unless a lane asks for it (threads=N is honoured as given).
void shareCores(std::vector<LaneSpec>& lanes) {
    const int cores = detail::defaultCpuThreads();
    int asked = 0, open = 0;
    for (const auto& lane : lanes) {
        const int n = localCpuProcesses(lane);
        lane.threads ? asked += * lane.threads* n : open += n;
    }
    if (open == 0) {
        return;
    }
    const int each = std::max(1, (cores - asked) / open);
    for (auto& lane : lanes) {
        if (localCpuProcesses(lane) > 0 && !lane.threads) {
            lane.threads = each;
        }
    }
}

// A device-side assert poisons the CUDA context of its whole process, so when a race has more
// than one local CUDA lane each runs in its own worker process unless it says otherwise.
// Everything else stays a thread (no process start-up, no second copy of the data).
void defaultIsolation(std::vector<LaneSpec>& lanes) {
    int cudaLanes = 0;
    for (const auto& lane : lanes) {
        cudaLanes +=
            lane.host.empty() && lane.device != "cpu" && laneKind(lane) != LaneKind::Parallel && lane.launcher.empty();
    }
    for (auto& lane : lanes) {
        if (!lane.isolate && lane.host.empty() && lane.device != "cpu" && cudaLanes > 1 &&
            laneKind(lane) != LaneKind::Parallel && lane.launcher.empty()) {
            lane.isolate = LaneKind::Process;
        }
    }
}

std::string describe(const std::exception& e) { return e.what(); }

// A race of the user's own command (`-- python3 train.py`): without a workload of DeviceRace's
// every lane runs the command; beside one, the lanes that say framework=script do. The command
// itself is checked here for local lanes (a remote host checks it there).
void planScriptLanes(RaceSpec& spec, std::vector<std::string>& problems) {
    const bool scriptRace = spec.workload == kScriptWorkload;
    if (scriptRace && spec.command.empty()) {
        problems.push_back("a race of your own training needs its command: the words after -- (devicerace-cli race "
                           "--lane cpu -- python3 train.py)");
    }
    bool anyScript = false;
    for (auto& lane : spec.lanes) {
        if (scriptRace && !lane.framework && !lane.cmd && lane.launcher != "attach") {
            lane.framework = "script";
        }
        const bool script = lane.framework == "script";
        anyScript |= script;
        const std::string label = lane.name.empty() ? formatLaneSpec(lane) : lane.name;
        if (scriptRace && !script) {
            problems.push_back(fmt::format("lane {}: a race of your command runs script lanes only; to race a "
                                           "built-in workload beside it, name it with --workload and give the "
                                           "script lanes framework=script",
                                           label));
        } else if (script && spec.command.empty()) {
            problems.push_back(fmt::format("lane {}: framework=script runs the race's command, and there is none: "
                                           "give it after -- (devicerace-cli race --lane cpu -- python3 train.py)",
                                           label));
        } else if (script && (!lane.members.empty() || lane.launcher == "attach" ||
                              (lane.launcher == "slurm" && lane.nodes.value_or(1) > 1))) {
            problems.push_back(fmt::format("lane {}: a script lane runs on one device of one machine (workers=N: N "
                                           "processes of the command on it; slurm://: one node)",
                                           label));
        } else if (lane.args && !script) {
            problems.push_back(fmt::format("lane {}: args= adds words to the race's command (a script lane's); "
                                           "this lane runs the built-in {} workload",
                                           label, spec.workload));
        } else if (lane.copy && lane.host.empty()) {
            problems.push_back(
                fmt::format("lane {}: copy= copies a folder to an ssh:// host; this lane runs here", label));
        }
        if (script && lane.host.empty() && lane.launcher.empty() && lane.device != "cpu") {
            // Here the engine knows the GPUs: a script would quietly fall back to the CPU without one.
            const auto& report = deviceReport();
            const auto index = lane.device.size() > 5 ? std::atoi(lane.device.c_str() + 5) : 0;
            if (!report.cudaAvailable) {
                problems.push_back(fmt::format("lane {}: {}: CUDA is not available here ({})", label, lane.device,
                                               report.cudaUnavailableReason));
            } else if (index < 0 || static_cast<std::size_t>(index) >= report.gpus.size()) {
                problems.push_back(fmt::format("lane {}: {}: this machine has {} GPU{}", label, lane.device,
                                               report.gpus.size(), report.gpus.size() == 1 ? "" : "s"));
            }
        }
        if (script && lane.copy && !lane.host.empty() && !lane.workdir) {
            lane.workdir = detail::scriptCopyDestination(lane); // the command runs in the copy
        }
    }
    if (!spec.command.empty() && !anyScript && !scriptRace) {
        problems.push_back(fmt::format("the command after -- runs in framework=script lanes, and no lane of this "
                                       "{} race is one (leave out --workload to race the command alone)",
                                       spec.workload));
    }
    if (spec.command.empty() || !anyScript) {
        return;
    }
    bool local = false;
    for (const auto& lane : spec.lanes) {
        local |= lane.framework == "script" && lane.host.empty() && lane.launcher.empty();
    }
    const auto& program = spec.command.front();
    if (local && program.find('/') == std::string::npos && detail::findProgram(program).empty()) {
        problems.push_back(fmt::format("{}: command not found (not on PATH)", program));
    } else if (local && program.find('/') != std::string::npos) {
        if (::access(program.c_str(), F_OK) != 0) {
            problems.push_back(fmt::format("{}: no such file", program));
        } else if (::access(program.c_str(), X_OK) != 0) {
            problems.push_back(fmt::format("{}: not executable (chmod +x it, or name its interpreter first: -- "
                                           "python3 {})",
                                           program, program));
        }
    }
}

// The race-level checks of what the user wrote.
void checkRace(const RaceSpec& spec, std::vector<std::string>& problems) {
    if (spec.epochs && *spec.epochs < 1) {
        problems.push_back(fmt::format("--epochs {}: must be 1 or more", *spec.epochs));
    }
    if (spec.steps && *spec.steps < 1) {
        problems.push_back(fmt::format("--steps {}: must be 1 or more", *spec.steps));
    }
    if (spec.targetAccuracy && !(*spec.targetAccuracy > 0 && *spec.targetAccuracy <= 1)) {
        problems.push_back(fmt::format("--target-accuracy {}: expected a fraction in (0, 1]", *spec.targetAccuracy));
    }
    if (spec.targetLoss && !(std::isfinite(*spec.targetLoss) && *spec.targetLoss > 0)) {
        problems.push_back(fmt::format("--target-loss {}: expected a loss above 0", *spec.targetLoss));
    }
    if (spec.trainLimit && *spec.trainLimit < 1) {
        problems.push_back("the training subset needs at least 1 example");
    }
    if (spec.testLimit && *spec.testLimit < 1) {
        problems.push_back("the test subset needs at least 1 example");
    }
    if (spec.evalEverySteps < 0) {
        problems.push_back(fmt::format("--eval-every {}: must be 0 (each epoch) or more", spec.evalEverySteps));
    }
}

// Plans the lanes DeviceRace's engine trains on this machine (thread, process, local
// data-parallel); the others say what they are once they run.
class LanePlanner {
public:
    LanePlanner(const RaceSpec& spec, const WorkloadInfo& workload) : m_spec(spec), m_workload(workload) {}

    // The lane's data (its own data= or the race's), measured once per mode.
    const detail::DataExtent& data(const LaneSpec& lane) {
        const auto mode = lane.data ? lane.data : m_spec.data;
        const int key = mode ? static_cast<int>(*mode) : -1;
        auto it = m_data.find(key);
        if (it == m_data.end()) {
            it = m_data
                     .emplace(key, detail::measureData(m_workload, mode, m_spec.dataDir, m_spec.trainLimit,
                                                       m_spec.testLimit))
                     .first;
        }
        return it->second;
    }

    void plan(LanePlan& lane) {
        const bool engineLane = lane.kind == LaneKind::Thread || lane.kind == LaneKind::Process;
        if (lane.kind == LaneKind::Parallel) {
            planParallel(lane);
        } else if (engineLane) {
            const auto& extent = data(lane.spec);
            detail::PlanRun run;
            run.epochs = m_spec.epochs;
            run.steps = m_spec.steps;
            run.allowProcessFaults = lane.kind == LaneKind::Process;
            const auto plan =
                detail::planRun(lane.spec, m_workload, {extent.train, extent.synthetic, extent.deviceBytes}, run);
            lane.batch = plan.batch;
            lane.totalSteps = plan.totalSteps;
            lane.localThreads = plan.device == "cpu" ? plan.threads : 0;
        }
    }

private:
    void planParallel(LanePlan& lane) {
        const auto expanded = expandParallelSpec(lane.spec);
        auto ranks = laneRanks(expanded);
        if (ranks.empty()) {
            ranks.push_back({expanded.host, expanded.device});
        }
        const bool allLocal =
            std::all_of(ranks.begin(), ranks.end(), [](const LaneMember& r) { return r.host.empty(); });
        lane.localThreads = expanded.device == "cpu" ? expanded.threads.value_or(0) : 0;
        if (!allLocal) {
            return; // remote ranks plan themselves where they run
        }
        LaneSpec rank = expanded;
        rank.device = ranks.front().device;
        rank.members.clear();
        detail::PlanRun run;
        run.epochs = m_spec.epochs;
        run.steps = m_spec.steps;
        run.distributed = true;
        run.world = static_cast<int>(ranks.size());
        run.fixedGlobalBatch = expanded.fixedGlobalBatch.value_or(false);
        run.allowProcessFaults = true;
        const auto& extent = data(lane.spec);
        const auto plan = detail::planRun(rank, m_workload, {extent.train, extent.synthetic, extent.deviceBytes}, run);
        lane.batch = plan.batch * run.world;
        lane.totalSteps = plan.totalSteps;
    }

    const RaceSpec& m_spec;
    const WorkloadInfo& m_workload;
    std::map<int, detail::DataExtent> m_data;
};

} // namespace

WaitPolicy waitPolicyFor(const RaceSpec& spec) {
    for (const auto& lane : spec.lanes) {
        if (localCpuProcesses(lane) > 1) {
            return {false, fmt::format("passive: lane {} runs {} processes on this machine's cores", lane.name,
                                       localCpuProcesses(lane))};
        }
    }
    if (spec.fair) {
        return {true, "spin: fair mode runs each lane alone"};
    }
    if (spec.lanes.size() <= 1) {
        return {true, "spin: one lane"};
    }
    return {false, "passive: live lanes share the cores (spinning threads would take them from each other)"};
}

namespace {

// Who set this process's waits: DEVICERACE_OMP_WAIT is "spin" where the CLI runs a race that
// spins, "passive" in the window; unset, the waits are the user's (or libgomp's default), and
// stay as they are in every lane's process.
std::string_view waitsSetBy() {
    const char* managed = devicerace::environmentSwitch("DEVICERACE_OMP_WAIT");
    return managed ? managed : "";
}

} // namespace

bool spinsOnlyInProcesses() { return waitsSetBy() == "passive"; }

namespace {

// A spinning race in a process that waits passively (the window): local CPU thread lanes of
// several threads run as processes of their own, which spin. One-thread lanes have no team to
// keep awake and stay threads; a lane the user gave isolate= keeps it.
void spinInOwnProcesses(std::vector<LaneSpec>& lanes, WaitPolicy& wait) {
    std::vector<LaneSpec*> teams;
    std::vector<std::string> names;
    for (auto& lane : lanes) {
        if (!lane.isolate && laneKind(lane) == LaneKind::Thread && lane.device == "cpu" && lane.host.empty() &&
            lane.threads.value_or(detail::defaultCpuThreads()) > 1) {
            teams.push_back(&lane);
            names.push_back(lane.name);
        }
    }
    if (teams.empty()) {
        return;
    }
    const auto worker = detail::localWorkerProgram();
    const auto path = detail::findProgram(worker);
    if (path.empty() || ::access(path.c_str(), X_OK) != 0) {
        // An install without the CLI beside the window: the lanes stay threads, as before.
        wait.reason += fmt::format("; this process waits passively (the window) and no worker program ({}) was "
                                   "found to run {} in a process that spins",
                                   worker, fmt::join(names, ", "));
        return;
    }
    for (auto* lane : teams) {
        lane->isolate = LaneKind::Process;
    }
    const bool many = teams.size() > 1;
    wait.reason += fmt::format("; this process waits passively (the window), so {} {} in {} of {} own, whose threads "
                               "spin",
                               fmt::join(names, ", "), many ? "run" : "runs", many ? "processes" : "a process",
                               many ? "their" : "its");
}

} // namespace

RacePlan resolveRace(const RaceSpec& in, const PlanOptions& options) {
    RacePlan out;
    out.spec = in;
    auto& spec = out.spec;
    checkRace(spec, out.problems);
    const WorkloadInfo* workload = nullptr;
    try {
        workload = &findWorkload(spec.workload);
    } catch (const std::exception& e) {
        out.problems.push_back(describe(e));
    }
    if (spec.lanes.empty()) {
        spec.lanes = defaultLanes();
    }
    planScriptLanes(spec, out.problems);
    if (!spec.fair) {
        shareCores(spec.lanes);
    }
    defaultIsolation(spec.lanes);
    try {
        nameLanes(spec.lanes);
    } catch (const std::exception& e) {
        out.problems.push_back(describe(e));
    }
    out.wait = waitPolicyFor(spec);
    out.wait.spinInLaneProcesses = out.wait.spin && (waitsSetBy() == "spin" || waitsSetBy() == "passive");
    if (out.wait.spin && spinsOnlyInProcesses()) {
        spinInOwnProcesses(spec.lanes, out.wait);
    }
    if (!spec.targetAccuracy && !spec.targetLoss && workload && workload->defaultTargetLoss) {
        spec.targetLoss = workload->defaultTargetLoss; // a language model races to a validation loss
    }
    if (!spec.targetAccuracy && workload && spec.workload != kScriptWorkload) {
        spec.targetAccuracy = workload->defaultTarget; // a script has no target but the user's own
    }
    out.logicalCpus = std::max(1, deviceReport().cpu.logicalCpus);

    std::optional<LanePlanner> planner;
    if (workload) {
        planner.emplace(spec, *workload);
        // The race's own data (its first lane's): the note, and a missing data set said once. A
        // race of the user's command has none of DeviceRace's (the script loads its own).
        try {
            if (spec.workload != kScriptWorkload) {
                out.dataNote = planner->data(spec.lanes.empty() ? LaneSpec{} : spec.lanes.front()).note;
            }
        } catch (const std::exception&) {
            // said by the lanes that need it
        }
    }
    std::set<std::string> said;
    for (const auto& laneSpec : spec.lanes) {
        LanePlan lane;
        lane.spec = laneSpec;
        lane.kind = laneKind(laneSpec);
        lane.needsConsent = laneSpec.cmd.has_value();
        lane.localCpuProcesses = localCpuProcesses(laneSpec);
        lane.localThreads = lane.localCpuProcesses > 0 ? laneSpec.threads.value_or(detail::defaultCpuThreads()) : 0;
        try {
            if (laneSpec.framework == "script") {
                // The command decides its own batch and length; --steps stops it there.
                lane.batch = laneSpec.batch;
                lane.totalSteps = spec.steps;
            } else if (planner) {
                planner->plan(lane);
            }
            if (lane.kind == LaneKind::External && !laneSpec.cmd) {
                if (options.askFrameworks) {
                    lane.problem = localFrameworkProblem(laneSpec);
                } else if (auto known = knownFrameworkProblem(laneSpec)) {
                    lane.problem = *known;
                } else {
                    lane.checking = true;
                }
                if (!lane.problem.empty()) {
                    lane.problem = fmt::format("lane {}: {}", laneSpec.name, lane.problem);
                }
            }
        } catch (const std::exception& e) {
            lane.problem = describe(e);
        }
        if (!lane.problem.empty() && said.insert(lane.problem).second) {
            out.problems.push_back(lane.problem);
        }
        out.cpuThreads += lane.localThreads * lane.localCpuProcesses;
        out.lanes.push_back(std::move(lane));
    }
    if (!spec.fair && out.cpuThreads > out.logicalCpus) {
        out.sharingNote =
            fmt::format("live mode: the CPU lanes share {} CPUs with {} threads in total; fair mode (--fair) "
                        "runs them one at a time",
                        out.logicalCpus, out.cpuThreads);
    }
    out.evalEverySteps = spec.evalEverySteps;
    if (spec.autoEvaluations) {
        // About kAutoEvaluations evaluations in the lane with the fewest steps, never more often
        // than every kMinInterval steps: a 30-step race spending most of its time on ten
        // test-set passes would be a slow demo of nothing.
        constexpr std::int64_t kMinInterval = 10;
        std::optional<std::int64_t> fewest;
        for (const auto& lane : out.lanes) {
            if (lane.totalSteps) {
                fewest = std::min(fewest.value_or(*lane.totalSteps), *lane.totalSteps);
            }
        }
        out.evalEverySteps = fewest ? std::max(kMinInterval, *fewest / kAutoEvaluations) : 0;
    }
    spec.evalEverySteps = out.evalEverySteps;
    spec.autoEvaluations = false;
    return out;
}

} // namespace devicerace
