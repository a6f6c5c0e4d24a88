#pragma once
/// The user's description of one lane and of a whole race. Plain values, thread-safe to copy.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace devicerace {

enum class Precision { Fp32, Bf16, Fp16 };
enum class DataMode { Real, Synthetic };

/// Where a lane trains.
enum class LaneKind {
    Thread,   // a thread of this process
    Process,  // a local `devicerace-cli worker` child process
    Remote,   // `devicerace-cli worker` on another machine, through the system ssh
    External, // another program speaking the worker protocol: framework=pytorch, or cmd=
    Parallel, // one model trained data-parallel by N worker processes (c10d): workers=N, cuda:0-7, A+B
    Slurm,    // a data-parallel lane whose ranks Slurm starts (srun): slurm://[login]/DEVICE (docs/PARALLEL.md)
    Attached  // a data-parallel job that another launcher started (torchrun, Kubernetes): attach://host:port/DEVICE
};

/// One rank of a data-parallel lane: a device on this machine or on an ssh:// host.
struct LaneMember {
    std::string host;   // "": this machine; else "ssh://[user@]host[:port]"
    std::string device; // "cpu", "cuda", "cuda:N", or "cuda:all" until expanded (this machine only)
    bool operator==(const LaneMember&) const = default;
};

std::string toString(Precision p);
std::string toString(LaneKind k);
std::string toString(DataMode m);

/// fault=KIND[:STEP][@RANK], for tests of how a race copes with a lane that fails.
struct LaneFault {
    std::string kind;                 // throw | abort | segv | exit | hang | slow-data
    std::optional<std::int64_t> step; // the step it fires at (unset: 1; 0: before training starts)
    std::optional<int> rank;          // a data-parallel lane's rank it hits (unset: the last)
    std::int64_t firingStep() const { return step.value_or(1); }
    std::string text() const; // back to "KIND[:STEP][@RANK]"
    bool operator==(const LaneFault&) const = default;
};

/// One lane: a device plus per-lane overrides. Unset optionals take the workload's defaults.
struct LaneSpec {
    std::string name;           // shown everywhere; defaults to "cpu·2", "cuda:0", ...
    std::string device = "cpu"; // "cpu", "cuda", "cuda:N" (on `host` for remote lanes)
    std::string host;           // "": this machine; else "ssh://[user@]host[:port]"
    std::optional<int> threads; // CPU intra-op threads for this lane
    std::optional<std::int64_t> batch;
    std::optional<double> lr;
    Precision precision = Precision::Fp32;
    std::optional<double> costPerHour;     // USD per hour of this device
    std::optional<bool> channelsLast;      // 4-D activations and weights in NHWC
    std::optional<std::int64_t> evalBatch; // examples per evaluation pass (separate from batch)
    std::optional<double> weightDecay;
    std::optional<double> momentum;
    std::optional<std::string> schedule; // constant | step | onecycle
    std::optional<std::string> lstm;     // fused | cells
    std::optional<DataMode> data;        // overrides the race's data mode for this lane
    std::optional<std::string> augment;  // none | crop-flip: image workloads' per-example augmentation
    // Fast paths (unset: on where they help; see docs/BENCHMARKS.md).
    std::optional<bool> fused;    // fused optimizer kernels; on a CPU also the fused dense step
    std::optional<bool> graph;    // CUDA lanes: the whole training step captured in a CUDA graph
    std::optional<bool> resident; // CUDA lanes: the data set on the GPU (false: pinned host copies, prefetched)
    // Where the lane runs (unset: see defaultIsolation in race/resolve_race.cpp).
    std::optional<LaneKind> isolate; // Thread or Process (an ssh:// device is always Remote)
    std::optional<std::string> cli;  // worker lanes: the devicerace-cli to run (remote default: on PATH)
    std::optional<LaneFault> fault;  // tests of isolation (fault=)
    // Other trainers as lanes (docs/EVENTS.md, the worker protocol).
    std::optional<std::string> framework; // devicerace (default) | pytorch | keras-jax | keras-tensorflow |
                                          // keras-torch: a shipped lane program (frameworkProgram)
    std::optional<std::string> cmd;       // any program speaking the protocol; runs only with consent
    // Script lanes (framework=script: the race's command, a user's own training; README "Race your
    // own training"):
    std::optional<bool> instrument;     // the PyTorch hooks in the script's Python (default true)
    std::optional<bool> printed;        // held-out figures read from the script's printed lines (default true)
    std::optional<std::string> logdir;  // read the TensorBoard event files the script writes there
    std::optional<std::string> lossTag; // logdir: the training loss's tag (a regular expression)
    std::optional<std::string> accTag;  // logdir: the evaluation accuracy's tag (a regular expression)
    std::optional<double> quiet;        // seconds without a step before the lane fails (default 120)
    std::optional<std::string> workdir; // the folder the command runs in (ssh://: on that host)
    std::optional<std::string> copy;    // ssh://: a local folder copied to workdir before the race
    std::optional<std::string> args;    // words added to the race's command for this lane (--compile)
    // Data-parallel lanes (docs/PARALLEL.md): one model, N ranks, gradients averaged by c10d.
    std::vector<LaneMember> members;      // the ranks' devices before `workers` multiplies them ("" = one device)
    std::optional<int> workers;           // ranks per listed device (a CPU lane: N processes of `threads` each)
    std::optional<std::string> backend;   // gloo | nccl (default: nccl for CUDA, gloo for the CPU)
    std::optional<bool> fixedGlobalBatch; // global_batch=fixed: batch is the global batch, split over the ranks
    std::optional<std::string> master;    // the address the ranks reach rank 0's store at (default: derived)
    // Ranks that a cluster's launcher starts (docs/PARALLEL.md, "Clusters"):
    std::string launcher; // "": DeviceRace starts the ranks; "slurm" (srun); "attach" (a running job's rank 0)
    std::string
        launcherTarget;       // slurm: the login host "ssh://[user@]host[:port]" or "" (srun here); attach: "host:port"
    std::optional<int> nodes; // slurm: nodes asked for (default 1)
    std::optional<std::string> partition; // slurm: the partition (default: the cluster's)
    std::optional<int> timeLimit;         // slurm: the job's time limit in minutes (default: the partition's)
    std::optional<double> queueLimit;     // slurm: seconds the job may wait in the queue (default 600)
    std::optional<int> storePort;         // slurm: the port rank 0's store listens on (default: from the job id)
    std::optional<std::string> tokenFile; // attach: the file holding the job's token (default $DEVICERACE_ATTACH_TOKEN)
    bool operator==(const LaneSpec&) const = default;
};

/// "ssh://[user@]host[:port]" split into its parts; throws UsageError for anything else
/// (a host starting with '-', characters ssh would read as options or a shell would expand).
struct SshTarget {
    std::string user; // empty: ssh's default (~/.ssh/config, then the local user)
    std::string host; // a name from ~/.ssh/config, a DNS name or an address
    std::optional<int> port;
    std::string url() const; // back to "ssh://..."
};
SshTarget parseSshTarget(const std::string& text);

/// A shipped lane program (lanes/python): the script, its arguments before "--proto", and the
/// Python packages it needs. nullopt for a framework= value that names none.
struct FrameworkProgram {
    std::string script;             // file name in the lane program folder
    std::vector<std::string> args;  // e.g. {"--backend", "jax"}
    std::vector<std::string> needs; // Python modules it imports (for the "install it" message)
};
std::optional<FrameworkProgram> frameworkProgram(std::string_view framework);

/// The srun that slurm:// lanes without a login host run ("" where Slurm's client is not installed).
std::string localSrun();

/// The lane's kind as it will run: Remote for ssh:// devices, else `isolate`, else the default.
LaneKind laneKind(const LaneSpec& spec);

/// Parses "DEVICE[,key=value]..." (keys: name, threads, batch, lr, precision, cost, channels_last,
/// eval_batch, wd, momentum, schedule, lstm, data, augment, fused, graph, resident, isolate, cli, fault;
/// DEVICE may be ssh://[user@]host[:port]/DEVICE, slurm://[login]/DEVICE or attach://host:port/DEVICE).
/// Throws UsageError naming the bad part.
LaneSpec parseLaneSpec(const std::string& text);
/// Applies "key=value[,key=value]..." — the part of a lane text after DEVICE — to `spec`, each
/// key by its parser, then checks the lane as a whole (keys that depend on the device or on each
/// other). Throws UsageError naming the bad part; `spec` is unchanged then.
void setLaneKeys(LaneSpec& spec, const std::string& keys);

/// "cpu,threads=2,batch=64,name=laptop": a lane in the CLI's syntax (parseLaneSpec's inverse).
std::string formatLaneSpec(const LaneSpec& spec);

/// The ranks of a data-parallel lane in rank order (members × workers, cuda:A-B expanded;
/// cuda:all left for the lane to expand). Empty for any other lane.
std::vector<LaneMember> laneRanks(const LaneSpec& spec);

/// A whole race as the user asked for it.
struct RaceSpec {
    std::string workload = "fashion-mlp";
    std::vector<LaneSpec> lanes;
    std::optional<int> epochs; // exactly one of epochs/steps is used; default 1 epoch
    std::optional<std::int64_t> steps;
    std::optional<double> targetAccuracy; // default: the workload's target
    std::optional<double> targetLoss;     // set: time to target is the first validation loss at or below it
    std::optional<DataMode> data;         // unset: real data where the machine has it, else synthetic
    std::string dataDir;                  // empty: the workload's default location
    std::uint64_t seed = 0;
    bool fair = false; // lanes one after another instead of concurrently
    /// The user consented to running the programs that cmd= lanes name (--allow-commands, or
    /// the window's confirmation). Never set from a file.
    bool allowCommands = false;
    std::int64_t evalEverySteps = 0; // 0: evaluate at the end of every epoch only
    /// Instead of evalEverySteps: about kAutoEvaluations evaluations in the lane with the fewest
    /// steps (the window's default, the CLI's --eval-every auto). Decided by resolveRace.
    bool autoEvaluations = false;
    std::int64_t warmupSteps = 20; // steps excluded from throughput figures
    /// A user's training command (`-- python3 train.py ...`), run once per script lane (never
    /// through a shell). Only the CLI's and the window's own command lines and the window's
    /// file dialog set it: presets and recordings never carry one (they cannot start a command).
    std::vector<std::string> command;
    std::optional<std::int64_t> trainLimit; // use only the first N training examples (smoke runs)
    std::optional<std::int64_t> testLimit;  // use only the first N test examples
};

/// The first race on this machine: the window's opening setup and the CLI's race without lanes.
/// It must show a real difference, explained: with a CUDA device, fashion-mlp on cpu·1 vs cuda:0
/// (live); else fashion-cnn, 1 thread vs every core, 240 steps in fair mode (one lane at a time,
/// each alone: lanes at once would share the cores) — fashion-cnn's steps are large enough to
/// split between threads where fashion-mlp's may not be (docs/BENCHMARKS.md); on a one-core
/// CPU with bf16 units (AMX, AVX-512 BF16), fp32 vs bf16; on one without, batch 32 vs 512.
/// `note` says what it shows and why.
struct DefaultRace {
    std::string workload;
    std::vector<LaneSpec> lanes;
    bool fair = false;
    std::optional<std::int64_t> steps; // unset: the workload's epochs
    std::string note;
};
DefaultRace defaultRace();

/// defaultRace().lanes
std::vector<LaneSpec> defaultLanes();

} // namespace devicerace
