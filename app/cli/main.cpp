// devicerace-cli: race the same training job on several devices, headless.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <string_view>
#include <fmt/format.h>

#include "cli_commands.h"
#include "devicerace/errors.h"
#include "devicerace/lane_keys.h"

using namespace devicerace;

int main(int argc, char** argv) {
    CLI::App app{"DeviceRace: train the same model on several devices side by side and compare their speed",
                 "devicerace-cli"};
    app.require_subcommand(0, 1);
    // One line per usage error, like every other error the CLI prints.
    app.failure_message([](const CLI::App*, const CLI::Error& e) {
        // Words the race does not know are most often a training command without its "--".
        const bool extras = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr;
        return fmt::format("devicerace-cli: error: {} (see --help{})\n", e.what(),
                           extras ? "; your own training command goes after --: race --lane cpu -- python3 train.py"
                                  : "");
    });
    app.set_version_flag("--version", "devicerace-cli " DEVICERACE_VERSION);

    bool devicesJson = false;
    std::string devicesHost, devicesCli;
    auto* devices =
        app.add_subcommand("devices", "List the CPU, its BLAS and the CUDA devices, and why any is unusable");
    bool remeasurePeaks = false;
    devices->add_flag("--json", devicesJson, "Print JSON");
    devices->add_flag(
        "--remeasure", remeasurePeaks,
        "Measure this CPU's GEMM peaks again (they are measured once and cached; run it on an idle machine)");
    devices->add_option("--host", devicesHost, "ssh://[user@]host[:port]: list that machine's devices (through ssh)");
    devices->add_option("--cli", devicesCli, "With --host: the devicerace-cli there (default: on its PATH)");

    int workerProto = 0;
    auto* worker = app.add_subcommand("worker", "Run one lane for a parent DeviceRace, speaking the worker protocol "
                                                "on stdin/stdout (docs/EVENTS.md); started by DeviceRace itself");
    worker->add_option("--proto", workerProto, "The protocol major version the parent speaks")->required();
    std::string workerFramework;
    worker->add_option("--framework", workerFramework,
                       "Run this machine's shipped lane program instead (pytorch, keras-jax, keras-tensorflow, "
                       "keras-torch)");

    WorkerLaunch workerLaunch;
    worker
        ->add_option("--ranks-from", workerLaunch.ranksFrom,
                     "One rank of a data-parallel lane that a launcher started: slurm (srun's SLURM_* variables) "
                     "or env (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT: torchrun, PyTorchJob)")
        ->check(CLI::IsMember({"slurm", "env"}));
    worker->add_option("--listen", workerLaunch.listen,
                       "Rank 0: wait on [ADDR:]PORT (default address 127.0.0.1) for a race to attach "
                       "(attach://HOST:PORT/DEVICE) with the job's token");
    worker->add_option("--token-file", workerLaunch.tokenFile,
                       "With --listen: the file holding the job's token (default: $DEVICERACE_ATTACH_TOKEN)");

    std::string attachAddress, attachTokenFile;
    int attachProto = 0;
    auto* attach = app.add_subcommand("attach", "Connect a parent DeviceRace to a job's rank 0 (attach:// lanes; "
                                                "started by DeviceRace itself)");
    attach->add_option("address", attachAddress, "HOST:PORT")->required();
    attach->add_option("--proto", attachProto, "The protocol major version the parent speaks")->required();
    attach->add_option("--token-file", attachTokenFile,
                       "The file holding the job's token (default: "
                       "$DEVICERACE_ATTACH_TOKEN)");

    bool workloadsJson = false;
    auto* wl = app.add_subcommand("workloads", "List the workloads (model + data + hyperparameters)");
    wl->add_flag("--json", workloadsJson, "Print JSON");
    bool workloadsSchema = false;
    wl->add_flag("--schema", workloadsSchema,
                 "Print the workload schema: every workload and the constants the lane programs share, as JSON");

    bool presetsJson = false;
    auto* presets = app.add_subcommand("presets", "List the presets (the seed experiments as ready races)");
    presets->add_flag("--json", presetsJson, "Print JSON");

    cli::RaceOptions opt;
    auto& spec = opt.spec;
    std::string data;
    int epochs = 0;
    std::int64_t steps = 0, trainLimit = 0, testLimit = 0;
    double target = 0;
    auto* race = app.add_subcommand("race", "Train one workload on several lanes and compare them");
    auto* workloadOpt =
        race->add_option("--workload", spec.workload,
                         "Workload name (see 'workloads'; default: fashion-mlp, or the first race's without --lane)");
    race->add_option("--preset", opt.preset, "Run a preset's races (see 'presets'); race options override it");
    // The keys' help comes from the engine's lane-key table (devicerace/lane_keys.h).
    static const std::string laneHelp =
        "DEVICE[,key=value]... DEVICE: cpu, cuda, cuda:N, or ssh://[user@]host[:port]/DEVICE (a lane on another "
        "machine); data-parallel lanes (docs/PARALLEL.md): cuda:A-B, cuda:all or DEVICE+DEVICE+..., or workers=N. "
        "Repeat for more lanes. Default: the first race (cpu,threads=1 vs cuda:0; without CUDA, fashion-cnn on "
        "1 thread vs every core; on one core, fp32 vs bf16 where it has bf16 units, else batch 32 vs 512; fair). "
        "Keys:\n" +
        laneKeysHelp();
    race->add_option("--lane", opt.laneTexts, laneHelp);
    auto* epochsOpt = race->add_option("--epochs", epochs, "Epochs per lane (default: the workload's)");
    auto* stepsOpt = race->add_option("--steps", steps, "Training steps per lane instead of epochs");
    epochsOpt->excludes(stepsOpt);
    auto* targetOpt = race->add_option("--target-accuracy", target, "Test accuracy for time-to-target");
    double targetLoss = 0;
    auto* targetLossOpt =
        race->add_option("--target-loss", targetLoss,
                         "Validation loss for time-to-target (language models; replaces the accuracy target)");
    race->add_option("--data", data, "real or synthetic (default: real where the machine has it)")
        ->check(CLI::IsMember({"real", "synthetic"}));
    race->add_option("--data-dir", spec.dataDir, "Folder with the Fashion-MNIST IDX files");
    race->add_option("--seed", spec.seed, "Seed of every lane's own generator")->capture_default_str();
    race->add_flag("--fair", spec.fair, "Run lanes one after another, each alone on the machine");
    race->add_flag("--live", opt.live,
                   "Race the lanes at once (the default race without --lane is fair where lanes would share cores)");
    race->add_flag("--allow-commands", spec.allowCommands,
                   "Allow the programs that cmd= lanes name to run (never implied by a preset or file)");
    std::string evalEvery;
    race->add_option("--eval-every", evalEvery,
                     "Also evaluate every N steps (0: each epoch only; auto: about ten evaluations in the shortest "
                     "lane, the window's default)")
        ->check([](const std::string& v) -> std::string {
            if (v == "auto" ||
                (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() < 16)) {
                return {};
            }
            return "expected a number of steps or auto";
        });
    race->add_flag("--plan", opt.planOnly,
                   "Print the race as it would run (lanes, threads, steps, evaluation interval, notes, problems) as "
                   "JSON and exit without training; status 2 when it cannot run");
    race->add_option("--warmup-steps", spec.warmupSteps, "Steps excluded from throughput figures")
        ->capture_default_str();
    auto* trainLimitOpt = race->add_option("--train-limit", trainLimit, "Use only the first N training examples");
    auto* testLimitOpt = race->add_option("--test-limit", testLimit, "Use only the first N test examples");
    race->add_option("--json", opt.jsonFile, "Write the summary as JSON");
    race->add_option("--csv", opt.csvFile, "Write every metric sample as CSV");
    race->add_option("--jsonl", opt.jsonlFile, "Write every metric sample as JSON lines");
    race->add_flag("--quiet", opt.quiet, "Print only evaluations, state changes and the summary");
    race->add_option("--record", opt.recordDir, "Record the race into this folder (manifest + JSON lines per lane)");
    race->add_option("--repeat", opt.repeats,
                     "Run the whole race N times with fresh lanes: medians, spreads and speedups as "
                     "'1.93× ± 0.04 (N = 5)' (with --record: one recording per repeat, DIR/repeat-K)")
        ->check(CLI::Range(1, 100));

    race->footer("After --: your own training command, run once per lane, never through a shell (README, \"Race "
                 "your own training\"): devicerace-cli race --lane cpu,threads=1 --lane cpu,threads=2 -- python3 "
                 "train.py --epochs 1");

    std::string replayDir;
    auto* replay =
        app.add_subcommand("replay", "Print the summary table of a recording, or a repeat set's spread (DIR/repeat-K)");
    replay->add_option("DIR", replayDir, "Recording folder, or a folder of repeat-K recordings")->required();

    cli::ExportOptions exportOpt;
    auto* exporter = app.add_subcommand("export", "Export a recording: CSV, JSON summary, TensorBoard, DAWNBench TSV");
    exporter->add_option("DIR", exportOpt.dir, "Recording folder")->required();
    exporter->add_option("--csv", exportOpt.csvFile, "One row per metric sample");
    exporter->add_option("--json", exportOpt.jsonFile, "The summary (the race command's --json schema)");
    exporter->add_option("--tensorboard", exportOpt.tensorboardDir, "One TensorBoard run folder per lane");
    exporter->add_option("--dawnbench", exportOpt.dawnbenchFile, "epoch, hours, top1Accuracy (TSV)");

    // Everything after the first "--" is the user's command, the script lanes' (never parsed as
    // the race's options, never run through a shell).
    std::vector<std::string> words(argv + 1, argv + argc);
    if (const auto dash = std::find(words.begin(), words.end(), "--"); dash != words.end()) {
        spec.command.assign(dash + 1, words.end());
        if (spec.command.empty()) {
            fmt::print(stderr, "devicerace-cli: error: nothing after --: give your training command there "
                               "(devicerace-cli race --lane cpu -- python3 train.py)\n");
            return 2;
        }
        words.erase(dash, words.end());
    }
    std::reverse(words.begin(), words.end()); // CLI11 takes the arguments last first
    try {
        app.parse(words);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? 0 : 2;
    }

    if (app.get_subcommands().empty()) {
        fmt::print(stderr, "devicerace-cli: error: expected a command: devices, workloads or race (see --help)\n");
        return 2;
    }
    if (*worker) {
        return cli::runWorkerCommand(workerProto, workerFramework, workerLaunch);
    }
    if (*attach) {
        return runAttachBridge(attachAddress, attachProto, attachTokenFile);
    }
    if (*devices) {
        return devicesHost.empty() ? cli::runDevices(devicesJson, remeasurePeaks)
                                   : cli::runRemoteDevices(devicesHost, devicesCli, devicesJson);
    }
    if (*wl) {
        return cli::runWorkloads(workloadsJson, workloadsSchema);
    }
    if (*presets) {
        return cli::runPresets(presetsJson);
    }
    if (*replay) {
        return cli::runReplay(replayDir);
    }
    if (*exporter) {
        return cli::runExport(exportOpt);
    }
    opt.workloadGiven = workloadOpt->count() > 0;
    if (!spec.command.empty() && !*race) {
        fmt::print(stderr, "devicerace-cli: error: a command after -- is raced by 'race' only\n");
        return 2;
    }
    if (*epochsOpt) {
        spec.epochs = epochs;
    }
    if (*stepsOpt) {
        spec.steps = steps;
    }
    if (*targetOpt) {
        spec.targetAccuracy = target;
    }
    if (*targetLossOpt) {
        spec.targetLoss = targetLoss;
    }
    if (*trainLimitOpt) {
        spec.trainLimit = trainLimit;
    }
    if (*testLimitOpt) {
        spec.testLimit = testLimit;
    }
    if (evalEvery == "auto") {
        spec.autoEvaluations = true;
    } else if (!evalEvery.empty()) {
        spec.evalEverySteps = std::stoll(evalEvery);
    }
    if (!data.empty()) {
        spec.data = data == "synthetic" ? DataMode::Synthetic : DataMode::Real;
    }
    try {
        opt.argv.assign(argv, argv + argc);
        return cli::runRace(std::move(opt));
    } catch (const std::exception& e) {
        fmt::print(stderr, "devicerace-cli: error: {}\n", e.what());
        return 2;
    }
}
