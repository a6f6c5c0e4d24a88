#include "race_strip.h"

#include <QContextMenuEvent>
#include <QPainter>

#include <cmath>

namespace devicerace::ui {

namespace {
// Intervals (~0.1 s each) in the running median behind a live speedup.
constexpr std::size_t kRecentIntervals = 50;
} // namespace

QString formatDuration(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) {
        return QStringLiteral("--:--");
    }
    const auto s = static_cast<long long>(std::llround(seconds));
    if (s >= 3600) {
        return QStringLiteral("%1:%2:%3")
            .arg(s / 3600)
            .arg((s / 60) % 60, 2, 10, QLatin1Char('0'))
            .arg(s % 60, 2, 10, QLatin1Char('0'));
    }
    return QStringLiteral("%1:%2").arg(s / 60).arg(s % 60, 2, 10, QLatin1Char('0'));
}

std::optional<double> projectedTimeToTarget(const LaneHistory& h, double target) {
    for (std::size_t i = 0; i < h.evalAccuracy.size(); ++i) {
        if (h.evalAccuracy[i] >= target) {
            return h.evalTime[i];
        }
    }
    const std::size_t n = h.evalAccuracy.size();
    if (n < 2) {
        return std::nullopt;
    }
    const double a1 = h.evalAccuracy[n - 2], a2 = h.evalAccuracy[n - 1];
    const double t1 = h.evalTime[n - 2], t2 = h.evalTime[n - 1];
    if (a2 <= a1 || t2 <= t1) {
        return std::nullopt;
    }
    return t2 + (target - a2) * (t2 - t1) / (a2 - a1);
}

std::vector<StripRow> stripRows(const RaceController& race, int baseline, std::int64_t warmupSteps) {
    std::vector<StripRow> rows;
    const auto& lanes = race.lanes();
    const auto& hist = race.histories();
    // Speedups compare medians: of the last few seconds while racing (a steady line to read
    // aloud), of the whole run once a lane has ended (the summary's figure).
    auto rate = [](const LaneHistory& h) {
        return h.medianSamplesPerSec(isTerminal(h.state) ? 0 : kRecentIntervals);
    };
    std::optional<double> baseRate;
    if (baseline >= 0 && baseline < static_cast<int>(hist.size())) {
        baseRate = rate(hist[static_cast<std::size_t>(baseline)]);
    }
    for (std::size_t i = 0; i < lanes.size() && i < hist.size(); ++i) {
        const auto& lane = lanes[i];
        const auto& h = hist[i];
        StripRow row;
        row.name = lane.name;
        row.color = lane.color;
        row.progress = lane.totalSteps > 0 ? static_cast<double>(h.lastStep) / static_cast<double>(lane.totalSteps) : 0;
        const QString acc = h.lastAccuracy ? QStringLiteral(" · acc %1").arg(*h.lastAccuracy, 0, 'f', 3) : QString();
        switch (h.state) {
        case LaneState::Pending: row.status = QObject::tr("waiting"); break;
        case LaneState::Preparing: row.status = QObject::tr("loading data and model…"); break;
        case LaneState::Evaluating: row.status = QObject::tr("evaluating on the test set…") + acc; break;
        case LaneState::Paused: row.status = QObject::tr("paused at step %1").arg(h.lastStep) + acc; break;
        case LaneState::Running: {
            if (h.lastStep < warmupSteps) {
                row.status = QObject::tr("warm-up (not measured)");
                break;
            }
            double eta = NAN;
            if (h.recentSamplesPerSec && *h.recentSamplesPerSec > 0 && lane.batch > 0) {
                eta = static_cast<double>(lane.totalSteps - h.lastStep) * static_cast<double>(lane.batch) /
                      *h.recentSamplesPerSec;
            }
            row.status = QObject::tr("epoch %1").arg(std::floor(h.lastEpoch) + 1) + acc +
                         QObject::tr(" · ETA %1").arg(formatDuration(eta));
            break;
        }
        case LaneState::Finished: row.status = QObject::tr("done %1").arg(formatDuration(h.lastTime)) + acc; break;
        case LaneState::Stopped: row.status = QObject::tr("stopped at step %1").arg(h.lastStep) + acc; break;
        case LaneState::Failed:
        case LaneState::Diverged:
            row.failed = true;
            row.status = h.message.isEmpty() ? QString::fromStdString(toString(h.state)) : h.message;
            break;
        }
        // Money, as the seed posts talk about it: spent so far, and for the whole run at this pace.
        if (lane.costPerHour && *lane.costPerHour > 0) {
            const double spent = h.lastTime / 3600.0 * *lane.costPerHour;
            row.status += QObject::tr(" · $%1").arg(spent, 0, 'f', spent < 1 ? 4 : 2);
            if (auto target = race.targetAccuracy()) {
                if (auto t = projectedTimeToTarget(h, *target)) {
                    const double cost = *t / 3600.0 * *lane.costPerHour;
                    const bool reached = h.lastAccuracy && *h.lastAccuracy >= *target;
                    row.status += (reached ? QObject::tr(" · $%1 to %2") : QObject::tr(" · ≈$%1 to %2 (projected)"))
                                      .arg(cost, 0, 'f', cost < 1 ? 4 : 2)
                                      .arg(*target, 0, 'f', 2);
                }
            }
        }
        if (static_cast<int>(i) == baseline) {
            row.speedup = QObject::tr("baseline");
        } else if (auto own = rate(h); baseRate && *baseRate > 0 && own) {
            const double ratio = *own / *baseRate;
            row.speedup = QStringLiteral("%1× %2")
                              .arg(ratio, 0, 'f', ratio >= 10 ? 0 : 1)
                              .arg(lanes[static_cast<std::size_t>(baseline)].name);
        }
        rows.push_back(row);
    }
    return rows;
}

RaceStrip::RaceStrip(QWidget* parent) : QWidget(parent) {
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
}

void RaceStrip::setRows(std::vector<StripRow> rows) {
    const bool resize = rows.size() != m_rows.size();
    m_rows = std::move(rows);
    if (resize) {
        setMinimumHeight(sizeHint().height());
        updateGeometry();
    }
    update();
}

void RaceStrip::setFontScale(double scale) {
    m_fontScale = scale;
    setMinimumHeight(sizeHint().height());
    updateGeometry();
    update();
}

int RaceStrip::rowHeight() const { return static_cast<int>(fontMetrics().height() * 1.9 * m_fontScale); }

QSize RaceStrip::sizeHint() const {
    return {600, std::max<int>(1, static_cast<int>(m_rows.size())) * rowHeight() + 8};
}

int RaceStrip::rowAt(int y) const {
    const int row = (y - 4) / std::max(1, rowHeight());
    return y >= 4 && row < static_cast<int>(m_rows.size()) ? row : -1;
}

void RaceStrip::contextMenuEvent(QContextMenuEvent* event) {
    const int row = rowAt(event->pos().y());
    if (row >= 0) {
        Q_EMIT laneMenuRequested(row, event->globalPos());
        event->accept();
    }
}

void RaceStrip::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    QFont base = font();
    base.setPointSizeF(base.pointSizeF() * m_fontScale);
    QFont big = base;
    big.setBold(true);
    big.setPointSizeF(base.pointSizeF() * 1.35);
    const int h = rowHeight();
    int nameW = width() / 12;
    const QFontMetrics bigMetrics(big);
    for (const auto& row : m_rows) {
        nameW = std::max(nameW, bigMetrics.horizontalAdvance(row.name) + 8);
    }
    const int barW = width() * 3 / 10;
    const QColor text = palette().color(QPalette::WindowText);
    for (std::size_t i = 0; i < m_rows.size(); ++i) {
        const auto& row = m_rows[i];
        const int y = 4 + static_cast<int>(i) * h;
        p.setFont(big);
        p.setPen(row.color);
        p.drawText(QRect(6, y, nameW, h), Qt::AlignVCenter | Qt::AlignLeft, row.name);
        const QRect bar(nameW + 12, y + h / 4, barW, h / 2);
        p.setPen(Qt::NoPen);
        p.setBrush(palette().color(QPalette::Mid));
        p.drawRoundedRect(bar, 3, 3);
        QRect fill = bar;
        fill.setWidth(static_cast<int>(bar.width() * std::clamp(row.progress, 0.0, 1.0)));
        p.setBrush(row.failed ? QColor(200, 60, 60) : row.color);
        p.drawRoundedRect(fill, 3, 3);
        p.setFont(base);
        p.setPen(row.failed ? QColor(220, 70, 70) : text);
        const int statusX = bar.right() + 12;
        const int speedW = std::max(width() / 6, QFontMetrics(big).horizontalAdvance(row.speedup) + 12);
        const int statusW = width() - statusX - speedW - 6;
        p.drawText(QRect(statusX, y, statusW, h), Qt::AlignVCenter | Qt::AlignLeft,
                   QFontMetrics(base).elidedText(row.status, Qt::ElideRight, statusW));
        p.setFont(big);
        p.setPen(text);
        p.drawText(QRect(width() - speedW - 6, y, speedW, h), Qt::AlignVCenter | Qt::AlignRight, row.speedup);
    }
}

} // namespace devicerace::ui
