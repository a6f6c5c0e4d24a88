#include "race_controller.h"

#include "devicerace/errors.h"
#include "palette.h"

namespace devicerace::ui {

namespace {
// The GUI's polling period: ~15 Hz is smooth to the eye and costs the lanes nothing.
constexpr int kPollMs = 66;
} // namespace

RaceController::RaceController(QObject* parent) : QObject(parent) {
    m_timer.setInterval(kPollMs);
    connect(&m_timer, &QTimer::timeout, this, &RaceController::poll);
}

RaceController::~RaceController() {
    m_timer.stop();
    m_race.reset(); // requests stop and joins every lane
}

bool RaceController::start(const RaceSpec& spec, const std::vector<QColor>& colors) {
    std::unique_ptr<Race> race;
    try {
        race = std::make_unique<Race>(spec);
    } catch (const std::exception& e) {
        Q_EMIT failed(QString::fromStdString(e.what()));
        return false;
    }
    m_timer.stop();
    m_race = std::move(race);
    m_lanes.clear();
    m_histories.clear();
    m_samples.clear();
    m_paused = false;
    m_announcedFinish = false;
    int i = 0;
    for (auto* lane : m_race->lanes()) {
        LaneInfo info;
        info.name = QString::fromStdString(lane->spec().name);
        info.device = QString::fromStdString(lane->spec().device);
        info.color = i < static_cast<int>(colors.size()) ? colors[static_cast<std::size_t>(i)] : laneColor(i);
        info.totalSteps = lane->totalSteps();
        info.batch = lane->batch();
        info.costPerHour = lane->spec().costPerHour;
        m_lanes.push_back(info);
        m_histories.emplace_back();
        m_histories.back().costPerHour = info.costPerHour;
        ++i;
    }
    m_race->start();
    m_timer.start();
    Q_EMIT started();
    return true;
}

void RaceController::stop() {
    if (m_race) {
        m_race->requestStop();
    }
}

void RaceController::setPaused(bool paused) {
    if (m_race) {
        m_paused = paused;
        m_race->setPaused(paused);
    }
}

void RaceController::setLanePaused(int lane, bool paused) {
    if (m_race && lane >= 0 && lane < static_cast<int>(m_lanes.size())) {
        m_race->lanes()[static_cast<std::size_t>(lane)]->setPaused(paused);
    }
}

void RaceController::stopLane(int lane) {
    if (m_race && lane >= 0 && lane < static_cast<int>(m_lanes.size())) {
        m_race->lanes()[static_cast<std::size_t>(lane)]->requestStop();
    }
}

std::vector<double> RaceController::laneCpuSeconds() const {
    std::vector<double> out;
    if (m_race) {
        for (auto* lane : m_race->lanes()) {
            out.push_back(lane->cpuSeconds());
        }
    }
    return out;
}

bool RaceController::running() const { return m_race && !m_race->finished(); }
bool RaceController::finished() const { return !m_race || m_race->finished(); }

void RaceController::poll() {
    if (!m_race) {
        return;
    }
    const bool done = m_race->finished(); // read before taking samples: nothing can follow a final state
    bool changed = false;
    auto lanes = m_race->lanes();
    for (std::size_t i = 0; i < lanes.size(); ++i) {
        auto batch = lanes[i]->takeSamples();
        for (const auto& s : batch) {
            m_histories[i].append(s);
        }
        changed = changed || !batch.empty();
        m_samples.insert(m_samples.end(), batch.begin(), batch.end());
    }
    if (changed) {
        Q_EMIT updated();
    }
    if (done && !m_announcedFinish) {
        m_announcedFinish = true;
        m_timer.stop();
        Q_EMIT finishedRace();
    }
}

std::optional<RaceSummary> RaceController::summary() const {
    if (!m_race) {
        return std::nullopt;
    }
    return m_race->summary();
}

QString RaceController::datasetLabel() const {
    if (!m_race) {
        return {};
    }
    const auto& ds = m_race->dataset();
    return QString::fromStdString(ds.name) + (ds.synthetic ? QStringLiteral(" (synthetic)") : QStringLiteral(" (real)"));
}

bool RaceController::fair() const { return m_race && m_race->spec().fair; }
std::int64_t RaceController::warmupSteps() const { return m_race ? m_race->spec().warmupSteps : 0; }
std::optional<double> RaceController::targetAccuracy() const {
    return m_race ? m_race->spec().targetAccuracy : std::nullopt;
}

} // namespace devicerace::ui
