#include "cli_commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "cli_output.h"
#include "devicerace/environment.h"
#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/exports.h"
#include "devicerace/preset.h"
#include "devicerace/recording.h"
#include "devicerace/repeats.h"
#include "devicerace/tensorboard.h"
#include "devicerace/race.h"
#include "devicerace/race_plan.h"
#include "devicerace/race_runner.h"
#include "devicerace/worker.h"
#include "devicerace/workload.h"
#include "live_table.h"

namespace devicerace::cli {

namespace {

// How often the main thread collects lane samples and redraws (the CLI's ~2 Hz).
constexpr auto kPollPeriod = std::chrono::milliseconds(500);
// After Ctrl-C / SIGTERM: how long lanes get to stop before the CLI leaves without them (a lane
// blocked in a data load or a device call never looks at its stop flag). With the summary and
// outputs written after it, the CLI is gone within 2 s of the signal (tests/cli/test_shutdown.py).
constexpr auto kStopGrace = std::chrono::milliseconds(1200);

std::atomic<int> g_interrupts{0};

// The first Ctrl-C / SIGTERM asks the race to stop; a second leaves at once, also while the
// main thread is blocked setting a race up (async-signal-safe: an atomic and _Exit).
std::atomic<bool> g_settingUp{false}; // a race is being set up: nothing has run yet
void onInterrupt(int) {
    if (g_settingUp.load()) {
        // Data loading or a worker's hello (up to a minute over ssh) would make a first Ctrl-C
        // wait for nothing: leave now; started workers see their pipe close and stop.
        constexpr char kMessage[] = "\ndevicerace-cli: interrupted while the race was being set up: no lane ran\n";
        (void)!::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
        std::_Exit(130);
    }
    if (g_interrupts.fetch_add(1) >= 1) {
        std::_Exit(130);
    }
}

// Installs onInterrupt for SIGINT and SIGTERM for its lifetime, then restores the previous ones.
class InterruptScope {
public:
    InterruptScope() {
        g_interrupts = 0;
        m_int = std::signal(SIGINT, onInterrupt);
        m_term = std::signal(SIGTERM, onInterrupt);
    }
    ~InterruptScope() {
        std::signal(SIGINT, m_int);
        std::signal(SIGTERM, m_term);
    }
    InterruptScope(const InterruptScope&) = delete;
    InterruptScope& operator=(const InterruptScope&) = delete;

private:
    void (*m_int)(int) = SIG_DFL;
    void (*m_term)(int) = SIG_DFL;
};

int usageError(const std::string& what) {
    fmt::print(stderr, "devicerace-cli: error: {}\n", what);
    return 2;
}

// Replaces this process with `program` run with `args` (args[0] first; `program` is a path, or
// a name looked up on PATH when `searchPath`; "/proc/self/exe" starts this program again).
// Returns only when the exec failed: errno says why.
void execArgs(const char* program, std::vector<std::string> args, bool searchPath = false) {
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    if (searchPath) {
        ::execvp(program, argv.data());
    } else {
        ::execv(program, argv.data());
    }
}

} // namespace

int runDevices(bool json, bool remeasurePeaks) {
    const auto& report = refreshDeviceReport();
    fmt::print("{}", json ? devicesJson(report) : devicesText(report) + peaksText(report, remeasurePeaks));
    return 0;
}

int runRemoteDevices(const std::string& host, const std::string& cliPath, bool json) {
    try {
        const auto report = remoteDeviceReport(host, cliPath);
        if (!json) {
            fmt::print("{} ({}):\n", report.hostName.empty() ? host : report.hostName, host);
        }
        fmt::print("{}", json ? devicesJson(report) : devicesText(report));
        return 0;
    } catch (const std::exception& e) {
        return usageError(e.what());
    }
}

// The parent race decided that its lanes' processes run alone (waitPolicyFor): a worker then
// keeps libgomp's default waits, as the parent does.
static bool spinsAlone() {
    const char* wait = devicerace::environmentSwitch("DEVICERACE_OMP_WAIT");
    return wait && std::strcmp(wait, "spin") == 0;
}

int runWorkerCommand(int proto, const std::string& framework, const WorkerLaunch& launch) {
    // A shipped lane program (a framework= lane started on this machine by a parent elsewhere):
    // this machine's Python runs this machine's copy. The name is one of frameworkProgram's.
    if (!framework.empty()) {
        const auto program = frameworkProgram(framework);
        if (!program) {
            return usageError(fmt::format("worker: --framework {}: expected pytorch, keras-jax, keras-tensorflow, "
                                          "keras-torch or script",
                                          framework));
        }
        auto argv = localFrameworkArgv(*program);
        argv.insert(argv.end(), {"--proto", std::to_string(proto)});
        if (!spinsAlone()) {
            ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
        }
        execArgs(argv[0].c_str(), argv, true);
        return usageError(fmt::format("worker: cannot run {}: {}", argv[0], std::strerror(errno)));
    }
    // A worker started through ssh gets a login environment without the launchers' settings;
    // spin-waiting OpenMP threads collapse throughput when anything else shares the cores, and
    // libgomp reads its settings once at load: so set it and start again (once).
    const bool launched = !launch.ranksFrom.empty() || !launch.listen.empty() || !launch.tokenFile.empty();
    if (!std::getenv("OMP_WAIT_POLICY") && !(spinsAlone() && launch.ranksFrom.empty())) {
        ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
        std::vector<std::string> args{"devicerace-cli", "worker", "--proto", std::to_string(proto)};
        for (const auto& [flag, value] :
             {std::pair{"--ranks-from", launch.ranksFrom}, std::pair{"--listen", launch.listen},
              std::pair{"--token-file", launch.tokenFile}}) {
            if (!value.empty()) {
                args.insert(args.end(), {flag, value});
            }
        }
        execArgs("/proc/self/exe", std::move(args));
        // Not fatal: the worker runs with OpenMP's defaults.
    }
    // Protocol lines only on the real stdout: anything else that prints (LibTorch warnings,
    // NCCL, a stray printf) lands on stderr, which the parent keeps as the lane's log.
    const int out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
    if (out < 0 || ::dup2(2, 1) < 0) {
        return usageError(fmt::format("worker: cannot set up its output: {}", std::strerror(errno)));
    }
    return launched ? runLaunchedWorker(0, out, proto, launch) : runWorker(0, out, proto);
}

int runWorkloads(bool json, bool schema) {
    fmt::print("{}", schema ? workloadSchemaJson() : json ? workloadsJson() : workloadsText());
    return 0;
}

namespace {

struct RaceResult {
    int status = 0;
    std::optional<RaceSummary> summary;
    std::vector<MetricSample> samples;
    bool interrupted = false; // Ctrl-C / SIGTERM: no further race of a preset starts
    bool abandoned = false;   // a lane did not stop in time: the process must leave without joining it
};

// Leaves without destroying a race whose lane never stopped (joining it would hang): every
// output is written and flushed by now; worker processes get SIGTERM (PR_SET_PDEATHSIG).
int leave(int status, bool abandoned) {
    if (abandoned) {
        std::fflush(nullptr);
        std::_Exit(status);
    }
    return status;
}

RaceResult runOne(const RaceSpec& spec, const RaceOptions& options);

void checkOutputFolders(const RaceOptions& options) {
    // Fail before training on output paths that cannot be written.
    for (const auto& file : {options.jsonFile, options.csvFile, options.jsonlFile}) {
        if (file.empty()) {
            continue;
        }
        auto dir = std::filesystem::path(file).parent_path();
        if (!dir.empty() && !std::filesystem::is_directory(dir)) {
            throw UsageError(fmt::format("{}: cannot write: folder {} does not exist", file, dir.string()));
        }
    }
}

int writeOutputs(const RaceOptions& options, const std::string& json, const std::vector<MetricSample>& samples) {
    try {
        if (!options.jsonFile.empty()) {
            writeFileAtomically(options.jsonFile, json);
        }
        if (!options.csvFile.empty()) {
            writeFileAtomically(options.csvFile, samplesToCsv(samples));
        }
        if (!options.jsonlFile.empty()) {
            writeFileAtomically(options.jsonlFile, samplesToJsonLines(samples));
        }
    } catch (const Error& e) {
        fmt::print(stderr, "devicerace-cli: error: {}\n", e.what());
        return 2;
    }
    return 0;
}

// --repeat N: the race N times with fresh lanes, then the medians and spreads (is the gap real?).
int runRepeats(const RaceOptions& options) {
    if (!options.csvFile.empty() || !options.jsonlFile.empty()) {
        return usageError("--csv and --jsonl hold one race; with --repeat, --record DIR keeps every repeat "
                          "(DIR/repeat-K) and `export` writes each one's");
    }
    std::error_code ec;
    if (!options.recordDir.empty() && !std::filesystem::is_directory(options.recordDir, ec) &&
        !std::filesystem::create_directories(options.recordDir, ec)) {
        return usageError(fmt::format("--record {}: cannot create the folder: {}", options.recordDir, ec.message()));
    }
    std::vector<RaceSummary> summaries;
    int status = 0;
    for (int r = 1; r <= options.repeats; ++r) {
        fmt::print("\n— repeat {} of {} —\n", r, options.repeats);
        std::fflush(stdout);
        RaceOptions one = options;
        if (!options.recordDir.empty()) {
            one.recordDir = (std::filesystem::path(options.recordDir) / fmt::format("repeat-{}", r)).string();
        }
        if (r > 1) {
            one.firstRaceNote.clear(); // said before the first repeat
        }
        auto result = runOne(options.spec, one);
        if (result.status == 2 || !result.summary) {
            return 2;
        }
        status = std::max(status, result.status);
        summaries.push_back(std::move(*result.summary));
        if (result.abandoned || result.interrupted) {
            fmt::print(stderr, "stopped: {} of {} repeats ran\n", r, options.repeats);
            status = std::max(status, 1);
            if (result.abandoned) {
                return leave(status, true);
            }
            break;
        }
    }
    const auto summary = summarizeRepeats(std::move(summaries));
    fmt::print("{}", repeatsText(summary));
    const int written = writeOutputs(options, repeatsToJson(summary), {});
    return written ? written : status;
}

// libgomp reads OMP_WAIT_POLICY once, when it loads. Left unset, its threads spin a while
// between parallel regions (libgomp's default): the faster choice for lanes that run alone, and
// the slowest where live lanes share the cores. So where the user left it unset and this race
// wants passive waits (waitPolicyFor), start the same command again with it set. Returns only
// when no restart is needed, or the restart failed (then the race runs with the default).
static void startAgainWaitingAsTheRaceNeeds(const RaceOptions& options, std::optional<bool> spin = std::nullopt) {
    if (std::getenv("OMP_WAIT_POLICY") || options.argv.empty()) {
        return;
    }
    if (spin.value_or(waitPolicyFor(options.spec).spin)) {
        ::setenv("DEVICERACE_OMP_WAIT", "spin", 1); // the lanes' processes run alone too
        return;
    }
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execArgs("/proc/self/exe", options.argv);
    ::unsetenv("OMP_WAIT_POLICY"); // not fatal: the race runs with libgomp's default
}

// A preset's races one after another; the command-line race options override the preset's.
// A preset's race with the run-length, data and fair options given on the command line.
RaceSpec withRunOptions(RaceSpec spec, const RaceSpec& o) {
    if (o.epochs || o.steps) {
        spec.epochs = o.epochs;
        spec.steps = o.steps;
    }
    spec.trainLimit = o.trainLimit ? o.trainLimit : spec.trainLimit;
    spec.testLimit = o.testLimit ? o.testLimit : spec.testLimit;
    spec.data = o.data ? o.data : spec.data;
    spec.dataDir = o.dataDir.empty() ? spec.dataDir : o.dataDir;
    spec.fair = spec.fair || o.fair;
    return spec;
}

int runPreset(const RaceOptions& options) {
    Preset preset;
    try {
        checkOutputFolders(options);
        preset = loadPreset(options.preset);
    } catch (const Error& e) {
        return usageError(e.what());
    }
    if (options.planOnly) {
        // Each race as it would run, nothing trained: {"preset": name, "races": [plan, ...]}.
        std::string out = "{\"preset\": \"" + preset.name + "\", \"races\": [";
        bool ok = true;
        for (std::size_t i = 0; i < preset.races.size(); ++i) {
            const auto plan = resolveRace(withRunOptions(preset.races[i].spec, options.spec));
            auto text = planToJson(plan);
            while (!text.empty() && text.back() == '\n') {
                text.pop_back();
            }
            out += (i ? ", " : "") + text;
            ok = ok && plan.ok();
        }
        fmt::print("{}]}}\n", out);
        return ok ? 0 : 2;
    }
    // One wait policy for the whole run: spin only where every race of the preset would.
    bool spin = true;
    for (auto race : preset.races) {
        race.spec.fair = race.spec.fair || options.spec.fair;
        spin = spin && waitPolicyFor(race.spec).spin;
    }
    startAgainWaitingAsTheRaceNeeds(options, spin);
    fmt::print("preset {} (seed {}): {}\n", preset.name, preset.seed, preset.description);
    int status = 0;
    std::string json = "{\"preset\": \"" + preset.name + "\", \"races\": [";
    std::vector<MetricSample> all;
    bool abandoned = false;
    for (std::size_t i = 0; i < preset.races.size(); ++i) {
        auto race = preset.races[i];
        race.spec = withRunOptions(race.spec, options.spec);
        fmt::print("\n== race {}/{}: {}\n", i + 1, preset.races.size(), race.title);
        RaceOptions raceOptions = options;
        if (!options.recordDir.empty() && preset.races.size() > 1) {
            raceOptions.recordDir = (std::filesystem::path(options.recordDir) / fmt::format("race-{}", i + 1)).string();
        }
        for (const auto& note : race.notes) {
            fmt::print("note: {}\n", note);
        }
        auto result = runOne(race.spec, raceOptions);
        if (result.status == 2) {
            return 2;
        }
        status = std::max(status, result.status);
        json += (i ? ", " : "") + (result.summary ? summaryToJson(*result.summary) : std::string("null"));
        all.insert(all.end(), result.samples.begin(), result.samples.end());
        abandoned = abandoned || result.abandoned;
        if (result.interrupted) {
            if (i + 1 < preset.races.size()) {
                fmt::print("stopped: the preset's other {} race{} did not run\n", preset.races.size() - i - 1,
                           preset.races.size() - i - 1 == 1 ? "" : "s");
            }
            break;
        }
    }
    json += "]}\n";
    const int written = writeOutputs(options, json, all);
    return leave(written ? written : status, abandoned);
}

} // namespace

int runPresets(bool json) {
    std::string out = json ? "[" : "";
    bool first = true;
    for (const auto& name : presetNames()) {
        try {
            auto p = loadPreset(name);
            if (json) {
                out += fmt::format("{}{{\"name\": \"{}\", \"seed\": \"{}\", \"races\": {}}}", first ? "" : ", ", p.name,
                                   p.seed, p.races.size());
            } else {
                out += fmt::format("{:<26} seed {} · {} race{} · {}\n", p.name, p.seed, p.races.size(),
                                   p.races.size() == 1 ? "" : "s", p.description);
            }
            first = false;
        } catch (const Error& e) {
            fmt::print(stderr, "warning: {}\n", e.what());
        }
    }
    fmt::print("{}{}", out, json ? "]\n" : "");
    return 0;
}

int runRace(RaceOptions options) {
    if (!options.preset.empty()) {
        if (!options.laneTexts.empty()) {
            return usageError("--preset names its own lanes; leave out --lane");
        }
        if (!options.spec.command.empty()) {
            return usageError("--preset races its own workloads and never a command; leave out the command after --");
        }
        return runPreset(options);
    }
    const bool scriptRace = !options.spec.command.empty() && !options.workloadGiven;
    if (scriptRace) {
        options.spec.workload = kScriptWorkload; // every lane runs the command
    }
    if (options.live && options.spec.fair) {
        return usageError("--live and --fair exclude each other");
    }
    try {
        for (const auto& text : options.laneTexts) {
            options.spec.lanes.push_back(parseLaneSpec(text));
        }
        checkOutputFolders(options);
    } catch (const Error& e) {
        return usageError(e.what());
    }
    if (options.spec.lanes.empty()) {
        // No lanes: the engine's first race, as the window opens with it (fair unless --live);
        // --workload, --epochs and --steps still choose what it trains and how long.
        const auto first = defaultRace();
        options.spec.lanes = first.lanes;
        options.spec.fair = (first.fair && !options.live) || options.spec.fair;
        if (!options.workloadGiven && !scriptRace) {
            options.spec.workload = first.workload;
            if (!options.spec.epochs && !options.spec.steps) {
                options.spec.steps = first.steps;
            }
        }
        if (!scriptRace) {
            // With --workload or --live the first race's own note would be untrue: say what runs.
            std::vector<std::string> lanes;
            for (const auto& lane : first.lanes) {
                lanes.push_back(formatLaneSpec(lane));
            }
            options.firstRaceNote =
                options.workloadGiven || options.spec.fair != first.fair
                    ? fmt::format("no --lane given: {} on the first race's lanes, {}{}", options.spec.workload,
                                  fmt::join(lanes, " against "),
                                  options.spec.fair ? ", each lane alone on the machine (fair mode)" : "")
                    : first.note;
        }
        if (!options.planOnly) {
            startAgainWaitingAsTheRaceNeeds(options);
        }
    }
    if (options.planOnly) {
        // Frameworks are asked too: the answer Start would give.
        const auto plan = resolveRace(options.spec);
        fmt::print("{}", planToJson(plan));
        return plan.ok() ? 0 : 2;
    }
    startAgainWaitingAsTheRaceNeeds(options);
    if (options.repeats > 1) {
        return runRepeats(options);
    }
    auto result = runOne(options.spec, options);
    if (result.status == 2 || !result.summary) {
        return 2;
    }
    const int written = writeOutputs(options, summaryToJson(*result.summary), result.samples);
    return leave(written ? written : result.status, result.abandoned);
}

int runReplay(const std::string& dir) {
    try {
        if (const auto repeats = repeatSetFolders(dir); !repeats.empty()) {
            // A repeat set: each repeat's line, then the spread as --repeat printed it.
            std::vector<RaceSummary> summaries;
            for (const auto& folder : repeats) {
                const auto rec = readRecording(folder);
                fmt::print("{} · {} · started {} · {}{}\n", folder.string(), rec.workload, rec.startedAt,
                           rec.machine.cpu.model, rec.gpuNames.empty() ? "" : " · " + rec.gpuNames);
                for (const auto& w : rec.warnings) {
                    fmt::print("note: {}\n", w);
                }
                summaries.push_back(summarizeRecording(rec));
            }
            fmt::print("{}", repeatsText(summarizeRepeats(std::move(summaries))));
            return 0;
        }
        const auto rec = readRecording(dir);
        fmt::print("recording {} · {} · started {} · {}{}\n", dir, rec.workload, rec.startedAt, rec.machine.cpu.model,
                   rec.gpuNames.empty() ? "" : " · " + rec.gpuNames);
        if (!rec.command.empty()) {
            fmt::print("command: {} (as it raced; a replay never runs it)\n", fmt::join(rec.command, " "));
        }
        for (const auto& w : rec.warnings) {
            fmt::print("note: {}\n", w);
        }
        const auto summary = summarizeRecording(rec);
        fmt::print("{}", summaryText(summary, {rec.targetAccuracy, rec.targetLoss}));
        for (const auto& why : summary.explanations) {
            fmt::print("why: {}\n", why); // as the race printed it: a lane with more resources was slower
        }
    } catch (const Error& e) {
        return usageError(e.what());
    }
    return 0;
}

int runExport(const ExportOptions& o) {
    try {
        const auto rec = readRecording(o.dir);
        for (const auto& w : rec.warnings) {
            fmt::print(stderr, "note: {}\n", w);
        }
        std::vector<MetricSample> all;
        for (const auto& lane : rec.lanes) {
            const auto& s = rec.samples.at(lane.name);
            all.insert(all.end(), s.begin(), s.end());
        }
        // Every file written is named, with its lane where a file holds one.
        if (!o.csvFile.empty()) {
            writeFileAtomically(o.csvFile, samplesToCsv(all));
            fmt::print("wrote {}\n", o.csvFile);
        }
        if (!o.jsonFile.empty()) {
            writeFileAtomically(o.jsonFile, summaryToJson(summarizeRecording(rec)));
            fmt::print("wrote {}\n", o.jsonFile);
        }
        if (!o.tensorboardDir.empty()) {
            for (const auto& f : writeTensorBoard(rec, o.tensorboardDir)) {
                fmt::print("wrote {}\n", f.string());
            }
        }
        if (!o.dawnbenchFile.empty()) {
            // One TSV per lane when there are several: FILE, FILE.lane-2, ...
            for (std::size_t i = 0; i < rec.lanes.size(); ++i) {
                const auto file = i == 0 ? o.dawnbenchFile : fmt::format("{}.lane-{}", o.dawnbenchFile, i + 1);
                writeFileAtomically(file, dawnbenchTsv(rec, rec.lanes[i].name));
                fmt::print("wrote {} ({})\n", file, rec.lanes[i].name);
            }
        }
    } catch (const Error& e) {
        return usageError(e.what());
    }
    return 0;
}

namespace {

// Sleeps until the next poll, in slices, so that a signal is acted on within ~50 ms; a stopping
// race is polled every slice.
void sleepUntilNextPoll(const RaceRunner& runner, bool stopping) {
    const auto slice = std::chrono::milliseconds(50);
    const auto period = stopping ? slice : kPollPeriod;
    const int seen = g_interrupts;
    for (auto slept = std::chrono::milliseconds(0); slept < period && g_interrupts == seen && !runner.done();
         slept += slice) {
        std::this_thread::sleep_for(slice);
    }
}

RaceResult runOne(const RaceSpec& raceSpec, const RaceOptions& options) {
    // From here Ctrl-C / SIGTERM stop the race cleanly; while it is set up (data loading,
    // workers connecting over ssh: seconds) they leave at once with a message.
    const InterruptScope interrupts;
    std::unique_ptr<Race> race;
    g_settingUp = true;
    try {
        race = std::make_unique<Race>(raceSpec);
    } catch (const Error& e) {
        g_settingUp = false;
        return {usageError(e.what()), std::nullopt, {}};
    }
    g_settingUp = false;
    // The runner polls the lanes and writes the recording on a thread of its own; this loop
    // takes its batches for the live view, acts on signals and renders.
    SampleInbox inbox;
    std::unique_ptr<RaceRunner> runner;
    try {
        runner = std::make_unique<RaceRunner>(*race, inbox, options.recordDir);
    } catch (const Error& e) {
        return {usageError(e.what()), std::nullopt, {}};
    }

    const auto& report = deviceReport();
    if (auto warning = blasWarning(report); !warning.empty()) {
        fmt::print(stderr, "{}\n", warning);
    }
    if (!options.firstRaceNote.empty()) {
        fmt::print("note: {}\n", options.firstRaceNote);
    }
    const auto& spec = race->spec();
    const auto lanes = race->lanes();
    const auto& ds = race->dataset();
    const std::string target = spec.targetLoss       ? fmt::format("target validation loss {:.2f}", *spec.targetLoss)
                               : spec.targetAccuracy ? fmt::format("target accuracy {:.2f}", *spec.targetAccuracy)
                                                     : std::string("no target");
    if (spec.workload == kScriptWorkload) {
        // A race of the user's own command: its data and length are the script's.
        fmt::print("your command: {} · {} mode · {}\n", fmt::join(spec.command, " "), spec.fair ? "fair" : "live",
                   target);
    } else {
        fmt::print("{} · {} · {} mode · {}\n", spec.workload,
                   ds.train.count == 0
                       ? std::string("data: each lane's workers resolve their own (none has said yet)")
                       : fmt::format("{} ({}, {} train / {} test)", ds.name,
                                     ds.synthetic ? "synthetic" : "real: " + ds.source, ds.train.count, ds.test.count),
                   spec.fair ? "fair" : "live", target);
    }
    fmt::print("cpu: {} · {} cores · BLAS {}\n", report.cpu.model, report.cpu.physicalCores, report.cpu.blas);
    if (!race->dataNote().empty()) {
        fmt::print("note: {}\n", race->dataNote());
    }
    if (!race->plan().sharingNote.empty()) {
        fmt::print("note: {}\n", race->plan().sharingNote);
    }
    std::fflush(stdout);

    const LiveMode mode =
        options.quiet ? LiveMode::Quiet : (::isatty(STDOUT_FILENO) ? LiveMode::Table : LiveMode::Lines);
    LiveView view(mode, stdout);
    view.setTokensPerSample(findWorkload(race->spec().workload).tokensPerSample);
    for (auto* lane : lanes) {
        view.addLane(lane->spec().name, lane->totalSteps());
    }

    std::vector<MetricSample> all;
    const bool keepSamples = !options.csvFile.empty() || !options.jsonlFile.empty();
    const auto t0 = std::chrono::steady_clock::now();
    runner->start();
    std::optional<std::chrono::steady_clock::time_point> stopSent;
    bool abandoned = false;
    while (true) {
        const bool done = runner->done(); // read first: the last batches are then in the inbox
        if (auto why = inbox.takeRecordingFailure(); !why.empty()) {
            fmt::print(stderr, "warning: {} (recording stopped; the race goes on)\n", why);
        }
        for (auto& batch : inbox.take()) {
            view.update(batch.lane, batch.samples);
            if (keepSamples) { // only --csv and --jsonl need them: a long race stays bounded
                all.insert(all.end(), std::make_move_iterator(batch.samples.begin()),
                           std::make_move_iterator(batch.samples.end()));
            }
        }
        view.render(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (done) {
            break;
        }
        if (g_interrupts > 0 && !stopSent) {
            stopSent = std::chrono::steady_clock::now();
            fmt::print(stderr, "\nstopping all lanes (Ctrl-C again to quit at once)…\n");
            race->requestStop();
        }
        if (stopSent && std::chrono::steady_clock::now() - *stopSent >= kStopGrace) {
            abandoned = true; // the lanes still running are left behind (summary below says which)
            break;
        }
        sleepUntilNextPoll(*runner, stopSent.has_value());
    }
    if (abandoned) {
        runner->halt();
    } else {
        race->wait();
    }
    view.finish();

    auto summary = race->summary();
    if (abandoned) {
        const double grace = std::chrono::duration<double>(kStopGrace).count();
        for (auto& lane : summary.lanes) {
            if (!isTerminal(lane.state)) {
                lane.state = LaneState::Stopped;
                lane.error = fmt::format("did not stop within {:.1f} s of the stop request (still starting, or "
                                         "blocked, e.g. loading data): left behind at exit",
                                         grace);
                fmt::print(stderr, "lane {}: {}\n", lane.name, lane.error);
            }
        }
        (void)race.release(); // never destroyed: its destructor would join the stuck lane (leave() exits)
    }
    fmt::print("{}", summaryText(summary, {spec.targetAccuracy, spec.targetLoss}));
    for (const auto& why : summary.explanations) {
        fmt::print("why: {}\n", why); // a lane with more resources was slower
    }
    int status = 0;
    for (const auto& lane : summary.lanes) {
        if (lane.state != LaneState::Finished) {
            status = 1;
        }
    }
    return {status, summary, std::move(all), stopSent.has_value(), abandoned};
}

} // namespace

} // namespace devicerace::cli
