#include "race_strip.h"

#include <QContextMenuEvent>
#include <QPainter>

#include <algorithm>
#include <cmath>

#include "charts/palette.h"

namespace devicerace::ui {

namespace {
// Intervals (~0.1 s each) in the running median behind a live speedup.
constexpr std::size_t kRecentIntervals = 50;
} // namespace

QString formatDuration(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) {
        return QStringLiteral("--:--");
    }
    if (seconds < 9.95) {
        // A lane done in under ten seconds (a short demo race) read "done 0:00".
        return QStringLiteral("%1 s").arg(seconds, 0, 'f', 1);
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

namespace {
// "1.9×", "41×": one decimal below ten.
QString times(double ratio) { return QString::number(ratio, 'f', ratio >= 10 ? 0 : 1) + QStringLiteral("×"); }
} // namespace

QString speedupText(double ratio, const QString& baseline) {
    if (ratio > 0 && ratio < 0.5) {
        return QObject::tr("%1 slower than %2").arg(times(1 / ratio), baseline);
    }
    return QStringLiteral("%1 %2").arg(times(ratio), baseline);
}

QString headlineText(const std::vector<StripRow>& rows, int baseline) {
    if (baseline < 0 || baseline >= static_cast<int>(rows.size())) {
        return {};
    }
    const auto& base = rows[static_cast<std::size_t>(baseline)];
    const StripRow* best = nullptr;
    for (const auto& r : rows) {
        if (r.ratio && (!best || *r.ratio > *best->ratio)) {
            best = &r;
        }
    }
    if (!best) {
        QStringList names;
        for (const auto& r : rows) {
            names << r.name;
        }
        return names.join(QObject::tr(" vs "));
    }
    if (*best->ratio >= 1.05) {
        return QObject::tr("%1 %2 faster than %3").arg(best->name, times(*best->ratio), base.name);
    }
    // Every lane is slower than the baseline: say how much faster the baseline is.
    const StripRow* slowest = best;
    for (const auto& r : rows) {
        if (r.ratio && *r.ratio < *slowest->ratio) {
            slowest = &r;
        }
    }
    if (*slowest->ratio > 0 && 1.0 / *slowest->ratio >= 1.05) {
        return QObject::tr("%1 %2 faster than %3").arg(base.name, times(1.0 / *slowest->ratio), slowest->name);
    }
    return QObject::tr("%1 and %2: neck and neck").arg(base.name, best->name);
}

namespace {
// Four significant digits, zeros kept (7.200, 0.7358, 262.3): a loss that moves keeps its width.
QString fourDigits(double v) {
    const double a = std::abs(v);
    const int decimals = a > 0 ? std::clamp(3 - static_cast<int>(std::floor(std::log10(a))), 0, 6) : 3;
    return QString::number(v, 'f', decimals);
}
} // namespace

std::optional<double> projectedTimeToTarget(const LaneHistory& h, double target) {
    const auto acc = finiteEvals(h.evalTime, h.evalAccuracy); // evaluations that said an accuracy
    for (std::size_t i = 0; i < acc.y.size(); ++i) {
        if (acc.y[i] >= target) {
            return acc.x[i];
        }
    }
    const std::size_t n = acc.y.size();
    if (n < 2) {
        return std::nullopt;
    }
    const double a1 = acc.y[n - 2], a2 = acc.y[n - 1];
    const double t1 = acc.x[n - 2], t2 = acc.x[n - 1];
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
    auto rate = [](const LaneHistory& h) { return h.medianSamplesPerSec(isTerminal(h.state) ? 0 : kRecentIntervals); };
    std::optional<double> baseRate;
    if (baseline >= 0 && baseline < static_cast<int>(hist.size())) {
        baseRate = rate(hist[static_cast<std::size_t>(baseline)]);
    }
    // A lane whose length only its command knows (a script without --steps) is measured against
    // the steps such a lane finished with: the same command, so in a fair race the lanes after
    // the first show their progress. Until one finishes, the bar stays empty and the status
    // counts steps.
    std::int64_t unknownLength = 0;
    for (std::size_t i = 0; i < lanes.size() && i < hist.size(); ++i) {
        if (lanes[i].totalSteps <= 0 && hist[i].state == LaneState::Finished) {
            unknownLength = std::max(unknownLength, hist[i].lastStep);
        }
    }
    for (std::size_t i = 0; i < lanes.size() && i < hist.size(); ++i) {
        const auto& lane = lanes[i];
        const auto& h = hist[i];
        StripRow row;
        row.name = lane.name;
        row.color = lane.color;
        const std::int64_t length = lane.totalSteps > 0 ? lane.totalSteps : unknownLength;
        row.progress = h.state == LaneState::Finished ? 1.0
                       : length > 0                   ? static_cast<double>(h.lastStep) / static_cast<double>(length)
                                                      : 0.0;
        // The latest evaluation's accuracy, or its loss where the lane says only that (a script's).
        const QString acc = h.lastAccuracy   ? QStringLiteral(" · acc %1").arg(*h.lastAccuracy, 0, 'f', 3)
                            : h.lastEvalLoss ? QStringLiteral(" · test loss %1").arg(fourDigits(*h.lastEvalLoss))
                                             : QString();
        switch (h.state) {
        case LaneState::Pending: row.status = QObject::tr("waiting"); break;
        case LaneState::Preparing:
            // A Slurm lane says where its job stands ("queued: job 12 waiting for 8 nodes ...").
            row.status = h.message.isEmpty() ? QObject::tr("loading data and model") : h.message;
            break;
        case LaneState::Evaluating: row.status = QObject::tr("evaluating on the test set") + acc; break;
        case LaneState::Paused: row.status = QObject::tr("paused at step %1").arg(h.lastStep) + acc; break;
        case LaneState::Running: {
            if (h.lastStep < warmupSteps) {
                row.status = QObject::tr("warm-up (not measured)");
                break;
            }
            if (lane.totalSteps <= 0) { // a script that alone knows its length: no epoch, no ETA
                row.status = QObject::tr("step %1").arg(h.lastStep) + acc;
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
        if (!lane.job.isEmpty() && h.state != LaneState::Preparing) {
            row.status += QStringLiteral(" · ") + lane.job;
        }
        // How much of the device the lane uses: FLOPs counted from the network over the peak.
        if ((h.state == LaneState::Running && h.lastStep >= warmupSteps) || h.state == LaneState::Finished) {
            if (const auto u = h.utilization()) {
                row.status += QObject::tr(" · %1% of peak").arg(*u * 100, 0, 'f', *u < 0.1 ? 1 : 0);
            }
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
            row.ratio = ratio;
            row.speedup = speedupText(ratio, lanes[static_cast<std::size_t>(baseline)].name);
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

void RaceStrip::setCompact(bool compact) {
    if (compact == m_compact) {
        return;
    }
    m_compact = compact;
    setMinimumHeight(sizeHint().height());
    updateGeometry();
    update();
}

namespace {
// Pixels between the strip's columns, and the narrowest useful progress bar.
constexpr int kGap = 12;
constexpr int kMinBar = 40;
// The bar takes at most this share of the width (the texts matter more).
constexpr double kMaxBarShare = 0.3;
// Fonts shrink to this factor before a status text is elided.
constexpr double kMinFit = 0.6;

struct StripFonts {
    QFont base, big;
};

StripFonts stripFonts(const QFont& font, double scale) {
    StripFonts f{font, font};
    f.base.setPointSizeF(font.pointSizeF() * scale);
    f.big = f.base;
    f.big.setBold(true);
    f.big.setPointSizeF(f.base.pointSizeF() * 1.35);
    return f;
}

// The widest name, status and speed-up text of the rows in these fonts.
struct ColumnWidths {
    int name = 0, status = 0, speed = 0;
};

ColumnWidths columnWidths(const std::vector<StripRow>& rows, const StripFonts& f) {
    const QFontMetrics big(f.big), base(f.base);
    ColumnWidths w;
    for (const auto& row : rows) {
        w.name = std::max(w.name, big.horizontalAdvance(row.name));
        w.status = std::max(w.status, base.horizontalAdvance(row.status));
        w.speed = std::max(w.speed, big.horizontalAdvance(row.speedup));
    }
    return w;
}

} // namespace

int RaceStrip::rowHeight() const { return rowHeight(m_compact); }

// A row is 1.9 lines of the base font (the names are 1.35x); tight rows keep the names whole.
int RaceStrip::rowHeight(bool compact) const {
    return static_cast<int>(fontMetrics().height() * (compact ? 1.5 : 1.9) * m_fontScale);
}

double RaceStrip::fitScale() const {
    for (double fit = 1.0; fit > kMinFit - 1e-9; fit -= 0.05) {
        const auto w = columnWidths(m_rows, stripFonts(font(), m_fontScale * fit));
        if (6 + w.name + kGap + kMinBar + kGap + w.status + kGap + w.speed + 6 <= width()) {
            return fit;
        }
    }
    return kMinFit;
}

std::vector<StripText> RaceStrip::texts() const {
    std::vector<StripText> out;
    const double fit = fitScale();
    const auto f = stripFonts(font(), m_fontScale * fit);
    const QFontMetrics big(f.big), base(f.base);
    const int h = rowHeight();
    const auto w = columnWidths(m_rows, f);
    const int nameW = w.name, speedW = w.speed;
    const auto barRects = bars();
    const QRect firstBar = barRects.empty() ? QRect(6 + nameW + kGap, 0, 0, 0) : barRects.front();
    const int statusX = firstBar.right() + 1 + kGap;
    const int statusW = std::max(0, width() - statusX - speedW - kGap - 6);
    const QColor text = palette().color(QPalette::WindowText);
    for (std::size_t i = 0; i < m_rows.size(); ++i) {
        const auto& row = m_rows[i];
        const int y = 4 + static_cast<int>(i) * h;
        out.push_back({row.name, QRect(6, y, nameW, h), f.big, readableOn(row.color, palette().color(QPalette::Window)),
                       Qt::AlignVCenter | Qt::AlignLeft});
        StripText status{row.status, QRect(statusX, y, statusW, h), f.base,
                         row.failed ? failureOn(palette().color(QPalette::Window)) : text,
                         Qt::AlignVCenter | Qt::AlignLeft};
        if (base.horizontalAdvance(row.status) > statusW) {
            // Too long for one line (a failure's reason): two lines in a smaller font, word-wrapped;
            // elided only when even that cannot hold it.
            QFont small = f.base;
            small.setPointSizeF(f.base.pointSizeF() * 0.85);
            const QFontMetrics sm(small);
            const QRect need = sm.boundingRect(QRect(0, 0, statusW, 10 * h), Qt::TextWordWrap, row.status);
            if (need.height() <= h && need.width() <= statusW) {
                status.font = small;
                status.flags |= Qt::TextWordWrap;
            } else {
                status.text = base.elidedText(row.status, Qt::ElideRight, statusW);
            }
        }
        out.push_back(status);
        out.push_back(
            {row.speedup, QRect(width() - speedW - 6, y, speedW, h), f.big, text, Qt::AlignVCenter | Qt::AlignRight});
    }
    if (!m_badge.isEmpty()) {
        // A note (the shared cores, why a lane is slower) wraps onto as many lines as it needs.
        const int y = 4 + static_cast<int>(m_rows.size()) * h;
        out.push_back({keepOptionsWhole(m_badge), QRect(6, y, width() - 12, badgeHeight()), f.base,
                       warningOn(palette().color(QPalette::Window)),
                       Qt::AlignVCenter | Qt::AlignLeft | Qt::TextWordWrap});
    }
    return out;
}

std::vector<QRect> RaceStrip::bars() const {
    const auto w = columnWidths(m_rows, stripFonts(font(), m_fontScale * fitScale()));
    // The bar gets what the texts leave, up to its share of the width.
    const int free = width() - (6 + w.name + kGap + kGap + w.status + kGap + w.speed + 6);
    const int barW = std::clamp(free, kMinBar, std::max(kMinBar, static_cast<int>(width() * kMaxBarShare)));
    std::vector<QRect> out;
    const int h = rowHeight();
    for (std::size_t i = 0; i < m_rows.size(); ++i) {
        out.emplace_back(6 + w.name + kGap, 4 + static_cast<int>(i) * h + h / 4, barW, h / 2);
    }
    return out;
}

QString keepOptionsWhole(const QString& text) {
    QString out;
    out.reserve(text.size() + 8);
    bool inOption = false;
    for (qsizetype i = 0; i < text.size(); ++i) {
        const QChar c = text[i];
        if (c.isSpace()) {
            inOption = false;
        } else if (!inOption && c == u'-' && i + 2 < text.size() && text[i + 1] == u'-' && text[i + 2].isLetter() &&
                   (i == 0 || text[i - 1].isSpace() || text[i - 1] == u'(' || text[i - 1] == u'"' ||
                    text[i - 1] == u'\'')) {
            inOption = true;
        }
        out += c;
        if (inOption && c == u'-') {
            out += QChar(0x2060);
        }
    }
    return out;
}

void RaceStrip::setBadge(const QString& text) {
    if (text == m_badge) {
        return;
    }
    m_badge = text;
    setMinimumHeight(sizeHint().height());
    updateGeometry();
    update();
}

int RaceStrip::badgeHeight(bool compact) const {
    if (m_badge.isEmpty()) {
        return 0;
    }
    const auto f = stripFonts(font(), m_fontScale * fitScale());
    const QRect need = QFontMetrics(f.base).boundingRect(QRect(0, 0, std::max(100, width() - 12), 100000),
                                                         Qt::TextWordWrap, keepOptionsWhole(m_badge));
    return std::max(rowHeight(compact), need.height() + 6);
}

QSize RaceStrip::sizeHint() const { return {600, heightFor(m_compact)}; }

int RaceStrip::heightFor(bool compact) const {
    const int rows = std::max<int>(1, static_cast<int>(m_rows.size()));
    return rows * rowHeight(compact) + badgeHeight(compact) + 8;
}

void RaceStrip::resizeEvent(QResizeEvent* event) {
    QWidget::resizeEvent(event);
    if (!m_badge.isEmpty() && minimumHeight() != sizeHint().height()) {
        setMinimumHeight(sizeHint().height()); // a wrapped note takes more or fewer lines
        updateGeometry();
    }
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
    const auto bars = this->bars();
    for (std::size_t i = 0; i < m_rows.size() && i < bars.size(); ++i) {
        const auto& row = m_rows[i];
        p.setPen(Qt::NoPen);
        p.setBrush(palette().color(QPalette::Mid));
        p.drawRoundedRect(bars[i], 3, 3);
        QRect fill = bars[i];
        fill.setWidth(static_cast<int>(bars[i].width() * std::clamp(row.progress, 0.0, 1.0)));
        p.setBrush(row.failed ? QColor(200, 60, 60) : row.color);
        p.drawRoundedRect(fill, 3, 3);
    }
    for (const auto& t : texts()) {
        p.setFont(t.font);
        p.setPen(t.color);
        p.drawText(t.rect, t.flags, t.text);
    }
}

} // namespace devicerace::ui
