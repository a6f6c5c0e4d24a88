#include "devicerace/race.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <set>
#include <thread>

#include "devicerace/dataset.h"
#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/workload.h"

namespace devicerace {

namespace {

// "cpu·1", "cpu·2", "cuda:0"; duplicates get "#2", "#3".
void nameLanes(std::vector<LaneSpec>& lanes) {
    std::set<std::string> used;
    for (auto& lane : lanes) {
        if (lane.name.empty() && laneKind(lane) == LaneKind::Parallel) {
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
            lane.name = lane.device == "cuda:all" ? where + "cuda×all"
                                                  : fmt::format("{}{}×{}", where, device, ranks.size());
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
                int threads = lane.threads.value_or(std::max(1, deviceReport().cpu.physicalCores));
                lane.name = fmt::format("cpu·{}", threads);
            } else {
                lane.name = lane.device == "cuda" ? "cuda:0" : lane.device;
            }
            if (lane.precision != Precision::Fp32) {
                lane.name += "·" + toString(lane.precision);
            }
        }
        std::string base = lane.name;
        for (int k = 2; used.count(lane.name); ++k) {
            lane.name = fmt::format("{}#{}", base, k);
        }
        used.insert(lane.name);
    }
}

// Live races share the CPU: CPU lanes that did not ask for a thread count split the cores
// that lanes with an explicit count left over, so the race never oversubscribes the machine
// unless a lane asks for it (threads=N is honoured as given).
void shareCores(std::vector<LaneSpec>& lanes) {
    const int cores = std::max(1, deviceReport().cpu.physicalCores);
    // A data-parallel lane's local CPU ranks each take `threads` (one process per rank).
    const auto localCpuProcesses = [](const LaneSpec& lane) {
        if (laneKind(lane) != LaneKind::Parallel) {
            return lane.device == "cpu" && lane.host.empty() ? 1 : 0;
        }
        int n = 0;
        for (const auto& r : laneRanks(lane)) {
            n += r.device == "cpu" && r.host.empty();
        }
        return n;
    };
    int asked = 0, open = 0;
    for (const auto& lane : lanes) {
        const int n = localCpuProcesses(lane);
        lane.threads ? asked += *lane.threads * n : open += n;
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
        cudaLanes += lane.host.empty() && lane.device != "cpu" && laneKind(lane) != LaneKind::Parallel;
    }
    for (auto& lane : lanes) {
        if (!lane.isolate && lane.host.empty() && lane.device != "cpu" && cudaLanes > 1 &&
            laneKind(lane) != LaneKind::Parallel) {
            lane.isolate = LaneKind::Process;
        }
    }
}

} // namespace

ResolvedData resolveData(const WorkloadInfo& w, std::optional<DataMode> mode, const std::string& dataDir,
                         std::optional<std::int64_t> trainLimit, std::optional<std::int64_t> testLimit) {
    namespace fs = std::filesystem;
    const auto limited = [&](std::int64_t train, std::int64_t test) {
        return std::pair{trainLimit ? std::min(*trainLimit, train) : train, testLimit ? std::min(*testLimit, test) : test};
    };
    auto synthetic = [&](std::int64_t train, std::int64_t test, std::string note) {
        auto [tr, te] = limited(train, test);
        auto ds = std::make_shared<Dataset>(*syntheticDataset(w.input, w.inputShape, w.classes, w.vocabulary, tr, te));
        ds->name = fmt::format("synthetic ({})", fmt::join(w.inputShape, "x"));
        return ResolvedData{ds, std::move(note)};
    };
    const bool wantSynthetic = mode == DataMode::Synthetic;
    const bool explicitReal = mode == DataMode::Real;
    if (w.dataset == "imagenet") {
        if (wantSynthetic || (!explicitReal && dataDir.empty())) {
            return synthetic(1281167, 50000, mode ? "" : "no ImageNet here: racing on synthetic data (tf_cnn_benchmarks style)");
        }
    } else if (w.dataset == "imdb") {
        if (wantSynthetic || (!explicitReal && dataDir.empty())) {
            return synthetic(25000, 25000, mode ? "" : "no IMDb reviews given (--data-dir aclImdb): racing on synthetic tokens");
        }
        if (dataDir.empty()) {
            throw UsageError(fmt::format("{}: IMDb is not on this machine; pass --data-dir with the aclImdb folder, or "
                                         "--data synthetic",
                                         w.name));
        }
        return {loadImdb(dataDir, w.vocabulary, static_cast<int>(w.inputShape.at(0)), trainLimit, testLimit), ""};
    } else if (w.dataset == "text") {
        if (wantSynthetic) {
            return synthetic(30000, 3000, "");
        }
        const fs::path corpus = dataDir.empty() ? defaultTextCorpus() : fs::path(dataDir);
        // The Keras example's windows: 40 characters, a new one every 3.
        return {loadTextCorpus(corpus, static_cast<int>(w.inputShape.at(0)), 3, trainLimit, testLimit), ""};
    } else if (wantSynthetic) {
        return synthetic(w.dataset == "cifar10" ? 50000 : 60000, 10000, "");
    }
    // Image workloads on real data: CIFAR-10 when given, otherwise the Fashion-MNIST the
    // machine has, padded/resized and channel-expanded to the network's input.
    if (w.dataset == "cifar10" && !dataDir.empty()) {
        return {loadCifar10(dataDir, trainLimit, testLimit), ""};
    }
    auto fashion = loadFashionMnist(dataDir.empty() || w.dataset != "fashion-mnist" ? defaultFashionMnistDir()
                                                                                     : fs::path(dataDir),
                                    trainLimit, testLimit);
    if (w.dataset == "fashion-mnist") {
        return {fashion, ""};
    }
    auto adapted = std::make_shared<Dataset>(*fashion);
    adapted->name = fmt::format("Fashion-MNIST (adapted to {})", fmt::join(w.inputShape, "x"));
    return {adapted, fmt::format("{} races on real Fashion-MNIST, padded/resized and channel-expanded to {}{}", w.name,
                                 fmt::join(w.inputShape, "x"),
                                 w.dataset == "cifar10" ? " (pass --data-dir with CIFAR-10 binaries to use CIFAR-10)" : "")};
}

void normaliseCosts(std::vector<LaneSummary>& lanes, std::size_t baseline) {
    if (baseline >= lanes.size() || !lanes[baseline].costToTargetUsd || *lanes[baseline].costToTargetUsd <= 0) {
        return;
    }
    for (auto& lane : lanes) {
        if (lane.costToTargetUsd) {
            lane.costVsBaseline = *lane.costToTargetUsd / *lanes[baseline].costToTargetUsd;
        }
    }
}

void fillScaling(std::vector<LaneSummary>& lanes) {
    for (auto& lane : lanes) {
        if (lane.workers < 1 || !lane.samplesPerSec) {
            continue;
        }
        const LaneSummary* base = nullptr;
        for (const auto& other : lanes) {
            if (other.workers >= 1 && other.samplesPerSec && *other.samplesPerSec > 0 &&
                (other.device == "cpu") == (lane.device == "cpu") && (!base || other.workers < base->workers)) {
                base = &other;
            }
        }
        if (!base) {
            continue;
        }
        lane.scalingBaseline = base->name;
        lane.scalingSpeedup = *lane.samplesPerSec / *base->samplesPerSec;
        lane.scalingEfficiency = *lane.scalingSpeedup / (static_cast<double>(lane.workers) / base->workers);
    }
}

std::map<std::string, double> speedups(const std::vector<LaneSummary>& lanes, std::size_t baseline) {
    std::map<std::string, double> out;
    if (baseline >= lanes.size() || !lanes[baseline].samplesPerSec || *lanes[baseline].samplesPerSec <= 0) {
        return out;
    }
    for (const auto& lane : lanes) {
        if (lane.samplesPerSec) {
            out[lane.name] = *lane.samplesPerSec / *lanes[baseline].samplesPerSec;
        }
    }
    return out;
}

struct Race::Impl {
    RaceSpec spec;
    std::shared_ptr<const Dataset> data;
    std::string dataNote;
    std::vector<std::unique_ptr<Lane>> lanes;
    std::thread sequencer; // fair mode: runs lanes one after another
    std::atomic<bool> stop{false};
    bool started = false;
};

Race::Race(RaceSpec spec, LaneFactory factory) : m_impl(std::make_unique<Impl>()) {
    const auto& workload = findWorkload(spec.workload);
    if (spec.epochs && *spec.epochs < 1) {
        throw UsageError(fmt::format("--epochs {}: must be 1 or more", *spec.epochs));
    }
    if (spec.steps && *spec.steps < 1) {
        throw UsageError(fmt::format("--steps {}: must be 1 or more", *spec.steps));
    }
    if (spec.targetAccuracy && !(*spec.targetAccuracy > 0 && *spec.targetAccuracy <= 1)) {
        throw UsageError(fmt::format("--target-accuracy {}: expected a fraction in (0, 1]", *spec.targetAccuracy));
    }
    if (spec.trainLimit && *spec.trainLimit < 1) {
        throw UsageError("the training subset needs at least 1 example");
    }
    if (spec.testLimit && *spec.testLimit < 1) {
        throw UsageError("the test subset needs at least 1 example");
    }
    if (spec.lanes.empty()) {
        spec.lanes = defaultLanes();
    }
    if (!spec.fair) {
        shareCores(spec.lanes);
    }
    for (const auto& lane : spec.lanes) {
        if (lane.cmd && !spec.allowCommands) {
            throw UsageError(fmt::format("lane {}: cmd={} would run that program; DeviceRace runs a command only with "
                                         "your consent: pass --allow-commands (the window asks)",
                                         lane.name.empty() ? lane.device : lane.name, *lane.cmd));
        }
    }
    defaultIsolation(spec.lanes);
    nameLanes(spec.lanes);
    if (!spec.targetAccuracy) {
        spec.targetAccuracy = workload.defaultTarget;
    }
    for (const auto& laneSpec : spec.lanes) {
        // A lane's data=... overrides the race's mode. Thread lanes get their data here; worker
        // lanes resolve theirs where they run (the remote machine may hold data this one lacks).
        auto mode = laneSpec.data ? laneSpec.data : spec.data;
        LaneRunSettings settings;
        if (laneKind(laneSpec) == LaneKind::Thread) {
            auto resolved = resolveData(workload, mode, spec.dataDir, spec.trainLimit, spec.testLimit);
            settings.data = resolved.dataset;
            if (m_impl->dataNote.empty()) {
                m_impl->dataNote = resolved.note;
            }
        }
        settings.dataMode = mode;
        settings.dataDir = spec.dataDir;
        settings.trainLimit = spec.trainLimit;
        settings.testLimit = spec.testLimit;
        settings.workload = workload.name;
        settings.epochs = spec.epochs;
        settings.steps = spec.steps;
        settings.targetAccuracy = spec.targetAccuracy;
        settings.seed = spec.seed;
        settings.evalEverySteps = spec.evalEverySteps;
        settings.warmupSteps = spec.warmupSteps;
        m_impl->lanes.push_back(factory ? factory(laneSpec, std::move(settings))
                                        : makeLane(laneSpec, std::move(settings)));
        if (!m_impl->data) {
            m_impl->data = m_impl->lanes.back()->dataset();
        }
    }
    m_impl->spec = std::move(spec);
}

Race::~Race() {
    requestStop();
    if (m_impl->sequencer.joinable()) {
        m_impl->sequencer.join();
    }
    m_impl->lanes.clear(); // each lane stops and joins
}

const RaceSpec& Race::spec() const { return m_impl->spec; }
const Dataset& Race::dataset() const { return *m_impl->data; }
const std::string& Race::dataNote() const { return m_impl->dataNote; }

std::vector<Lane*> Race::lanes() const {
    std::vector<Lane*> out;
    for (const auto& l : m_impl->lanes) {
        out.push_back(l.get());
    }
    return out;
}

void Race::start() {
    if (m_impl->started) {
        return;
    }
    m_impl->started = true;
    if (!m_impl->spec.fair) {
        for (auto& lane : m_impl->lanes) {
            lane->start();
        }
        return;
    }
    m_impl->sequencer = std::thread([impl = m_impl.get()] {
        for (auto& lane : impl->lanes) {
            if (impl->stop) {
                break;
            }
            lane->start();
            lane->wait();
        }
    });
}

void Race::requestStop() {
    m_impl->stop = true;
    for (auto& lane : m_impl->lanes) {
        lane->requestStop();
    }
}

void Race::setPaused(bool paused) {
    for (auto& lane : m_impl->lanes) {
        lane->setPaused(paused);
    }
}

bool Race::finished() const {
    for (const auto& lane : m_impl->lanes) {
        if (!isTerminal(lane->state())) {
            return false;
        }
    }
    return true;
}

void Race::wait() {
    if (m_impl->sequencer.joinable()) {
        m_impl->sequencer.join();
    }
    for (auto& lane : m_impl->lanes) {
        lane->wait();
    }
}

RaceSummary Race::summary() const {
    RaceSummary out;
    out.workload = m_impl->spec.workload;
    out.datasetName = m_impl->data->name;
    out.dataNote = m_impl->dataNote;
    out.synthetic = m_impl->data->synthetic;
    out.fair = m_impl->spec.fair;
    for (const auto& lane : m_impl->lanes) {
        out.lanes.push_back(lane->summary());
    }
    out.speedup = speedups(out.lanes);
    normaliseCosts(out.lanes);
    fillScaling(out.lanes);
    return out;
}

} // namespace devicerace
