#include "devicerace/race.h"
#include "devicerace/peak_flops.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <cstdlib>
#include <set>
#include <thread>

#include "devicerace/dataset.h"
#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/workload.h"
#include "data/data_choice.h"
#include "race/script_cpus.h"

namespace devicerace {

ResolvedData resolveData(const WorkloadInfo& w, std::optional<DataMode> mode, const std::string& dataDir,
                         std::optional<std::int64_t> trainLimit, std::optional<std::int64_t> testLimit) {
    const auto choice = detail::chooseData(w, mode, dataDir);
    switch (choice.source) {
    case detail::DataSource::Synthetic: {
        const auto train = trainLimit ? std::min(*trainLimit, choice.syntheticTrain) : choice.syntheticTrain;
        const auto test = testLimit ? std::min(*testLimit, choice.syntheticTest) : choice.syntheticTest;
        auto ds =
            std::make_shared<Dataset>(*syntheticDataset(w.input, w.inputShape, w.classes, w.vocabulary, train, test));
        ds->name = fmt::format("synthetic ({})", fmt::join(w.inputShape, "x"));
        return {ds, choice.note};
    }
    case detail::DataSource::Imdb:
        return {loadImdb(choice.path, w.vocabulary, static_cast<int>(w.inputShape.at(0)), trainLimit, testLimit),
                choice.note};
    case detail::DataSource::Text:
        return {loadTextCorpus(choice.path, choice.text, trainLimit, testLimit), choice.note};
    case detail::DataSource::Cifar10: return {loadCifar10(choice.path, trainLimit, testLimit), choice.note};
    case detail::DataSource::FashionMnist: break;
    }
    auto fashion = loadFashionMnist(choice.path, trainLimit, testLimit);
    if (!choice.adapted) {
        return {fashion, choice.note};
    }
    auto adapted = std::make_shared<Dataset>(*fashion);
    adapted->name = fmt::format("Fashion-MNIST (adapted to {})", fmt::join(w.inputShape, "x"));
    return {adapted, choice.note};
}

struct Race::Impl {
    RacePlan plan;
    RaceSpec spec;
    std::shared_ptr<const Dataset> data;
    std::string dataNote;
    std::vector<std::unique_ptr<Lane>> lanes;
    std::thread sequencer; // fair mode: runs lanes one after another
    std::atomic<bool> stop{false};
    bool started = false;
};

namespace {

// Whether a lane is made by waiting for a worker out of this process to be ready: a framework's
// import, its data and its model take a Keras lane 5-40 s, and a process or ssh lane seconds.
bool preparesAside(const LaneSpec& spec) {
    const auto kind = laneKind(spec);
    return kind == LaneKind::Process || kind == LaneKind::Remote || kind == LaneKind::External;
}

// The race's lanes, in its order. Lanes that prepare aside are made side by side, as many at once
// as the machine has cores (at least 2), while this thread makes the others in turn: a race of four
// framework lanes used to wait for each worker in turn (Presets.EveryPresetLoadsAndRunsShortened:
// 33-40 s a race of Keras lanes on a 2-core machine, most of the test). A factory (the tests'
// fakes) is called in turn, as before. The first failure in lane order is thrown, after
// every lane made meanwhile is ended.
std::vector<std::unique_ptr<Lane>> makeLanes(std::vector<std::pair<LaneSpec, LaneRunSettings>> todo,
                                             const LaneFactory& factory) {
    const std::size_t n = todo.size();
    std::vector<std::unique_ptr<Lane>> made(n);
    std::vector<std::exception_ptr> failed(n);
    std::atomic<bool> anyFailed{false};
    auto makeOne = [&](std::size_t i) {
        if (anyFailed) {
            return;
        }
        try {
            made[i] = factory ? factory(todo[i].first, std::move(todo[i].second))
                              : makeLane(todo[i].first, std::move(todo[i].second));
        } catch (...) {
            failed[i] = std::current_exception();
            anyFailed = true;
        }
    };
    // Side by side only when at least two lanes would be: one alone is made in turn, in order.
    const auto asideCount =
        std::count_if(todo.begin(), todo.end(), [](const auto& t) { return preparesAside(t.first); });
    const bool sideBySide = !factory && asideCount >= 2;
    std::vector<std::size_t> aside, here;
    for (std::size_t i = 0; i < n; ++i) {
        (sideBySide && preparesAside(todo[i].first) ? aside : here).push_back(i);
    }
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> helpers;
    const auto width = std::min<std::size_t>(aside.size(), std::max(2u, std::thread::hardware_concurrency()));
    for (std::size_t h = 0; h < width; ++h) {
        helpers.emplace_back([&] {
            for (std::size_t k; (k = next++) < aside.size();) {
                makeOne(aside[k]);
            }
        });
    }
    for (const auto i : here) {
        makeOne(i);
    }
    for (auto& t : helpers) {
        t.join();
    }
    for (const auto& e : failed) {
        if (e) {
            made.clear(); // every lane made meanwhile stops its worker
            std::rethrow_exception(e);
        }
    }
    return made;
}

} // namespace

Race::Race(RaceSpec requested, LaneFactory factory) : m_impl(std::make_unique<Impl>()) {
    // Every decision (names, threads, isolation, steps, evaluations, refusals) is resolveRace's.
    auto plan = resolveRace(requested);
    if (!plan.ok()) {
        throw UsageError(plan.problems.front());
    }
    for (const auto& lane : plan.lanes) {
        if (lane.needsConsent && !plan.spec.allowCommands) {
            throw UsageError(fmt::format("lane {}: cmd={} would run that program; DeviceRace runs a command only with "
                                         "your consent: pass --allow-commands (the window asks)",
                                         lane.spec.name, *lane.spec.cmd));
        }
    }
    m_impl->plan = plan;
    // The CPU peaks "% of peak" divides by, measured now if this machine has none cached: never
    // while lanes train (the calibration would measure the race, and slow it).
    // A script lane's arithmetic is its script's: fp32, or bf16 under autocast where this CPU has
    // bf16 units (its "% of peak" takes the peak of what its FLOP count saw).
    const bool bf16Units = !deviceReport().cpu.bf16Units.empty();
    for (const auto& lane : plan.lanes) {
        if (lane.localThreads > 0) {
            try {
                (void)cpuPeakFlops(lane.spec.precision, lane.localThreads);
                if (lane.spec.framework == "script" && bf16Units && lane.localCpuProcesses == 1) {
                    (void)cpuPeakFlops(Precision::Bf16, lane.localThreads);
                }
            } catch (const std::exception&) {
                // The lane then reports no peak; the race still runs.
            }
        }
    }
    auto& spec = plan.spec;
    const auto& workload = findWorkload(spec.workload);
    const auto scriptCpus = detail::scriptLaneCpus(plan);
    std::vector<std::pair<LaneSpec, LaneRunSettings>> todo;
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
        settings.targetLoss = spec.targetLoss;
        settings.seed = spec.seed;
        settings.evalEverySteps = spec.evalEverySteps;
        settings.warmupSteps = spec.warmupSteps;
        settings.spinInLaneProcesses = plan.wait.spinInLaneProcesses;
        if (laneSpec.framework == "script") {
            settings.command = spec.command;
            settings.cpus = scriptCpus[todo.size()];
        }
        todo.emplace_back(laneSpec, std::move(settings));
    }
    m_impl->lanes = makeLanes(std::move(todo), factory);
    for (const auto& lane : m_impl->lanes) {
        if (!m_impl->data) {
            m_impl->data = lane->dataset();
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
const RacePlan& Race::plan() const { return m_impl->plan; }
const Dataset& Race::dataset() const {
    if (m_impl->data) {
        return *m_impl->data;
    }
    // Every lane resolves its data where it runs, and none has said yet (a Slurm job in the queue).
    for (const auto& lane : m_impl->lanes) {
        if (auto d = lane->dataset()) {
            return *d;
        }
    }
    static const Dataset unknown = [] {
        Dataset d;
        d.name = "(data not known yet: the lanes' workers have not said)";
        return d;
    }();
    return unknown;
}
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
    out.command = m_impl->spec.command;
    out.datasetName = dataset().name;
    out.dataNote = m_impl->dataNote;
    out.synthetic = dataset().synthetic;
    out.fair = m_impl->spec.fair;
    const char* wait = std::getenv("OMP_WAIT_POLICY"); // read at load, never changed after it
    out.ompWaitPolicy = wait ? wait : "";
    for (const auto& lane : m_impl->lanes) {
        out.lanes.push_back(lane->summary());
        out.lanes.back().warmupSteps = m_impl->spec.warmupSteps;
    }
    finishRaceSummary(out);
    return out;
}

} // namespace devicerace
