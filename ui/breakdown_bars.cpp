#include "breakdown_bars.h"

#include <QFontMetrics>
#include <QPainter>

#include <algorithm>
#include <map>

#include "devicerace/race.h"
#include "devicerace/summary.h"
#include "summary_table.h"

namespace devicerace::ui {

namespace {
constexpr int kGap = 10;     // pixels between the columns
constexpr int kMinBar = 120; // the bar keeps at least this; the fonts shrink first
constexpr double kMinScale = 0.6;
constexpr int kPadding = 6;        // a row's height above its text's
constexpr int kCompactPadding = 2; // thin rows: the segments' labels still fit

// Black or white, whichever reads on `background`.
QColor textOn(const QColor& background) {
    const double l = 0.2126 * background.redF() + 0.7152 * background.greenF() + 0.0722 * background.blueF();
    return l > 0.5 ? QColor(Qt::black) : QColor(Qt::white);
}
} // namespace

const std::vector<QString>& phaseOrder() {
    static const std::vector<QString> order = {QStringLiteral("data"),      QStringLiteral("forward"),
                                               QStringLiteral("backward"),  QStringLiteral("communication"),
                                               QStringLiteral("optimizer"), QStringLiteral("compute"),
                                               QStringLiteral("other")};
    return order;
}

QColor phaseColor(const QString& phase) {
    static const std::map<QString, QColor> colors = {{QStringLiteral("data"), QColor(0xE6, 0x9F, 0x00)},
                                                     {QStringLiteral("forward"), QColor(0x56, 0xB4, 0xE9)},
                                                     {QStringLiteral("backward"), QColor(0x00, 0x72, 0xB2)},
                                                     {QStringLiteral("communication"), QColor(0xCC, 0x79, 0xA7)},
                                                     {QStringLiteral("optimizer"), QColor(0x00, 0x9E, 0x73)},
                                                     {QStringLiteral("compute"), QColor(0xF0, 0xE4, 0x42)},
                                                     {QStringLiteral("other"), QColor(0x99, 0x99, 0x99)}};
    const auto it = colors.find(phase);
    return it == colors.end() ? QColor(0xD5, 0x5E, 0x00) : it->second; // a phase from a newer worker
}

namespace {
// The phases of `phases` in the step's order, then any this build does not know.
std::vector<std::pair<QString, double>> orderedPhases(const std::map<std::string, double>& phases) {
    std::vector<std::pair<QString, double>> out;
    for (const auto& phase : phaseOrder()) {
        if (auto it = phases.find(phase.toStdString()); it != phases.end() && it->second > 0) {
            out.emplace_back(phase, it->second);
        }
    }
    for (const auto& [phase, secs] : phases) {
        const auto name = QString::fromStdString(phase);
        if (secs > 0 && std::find(phaseOrder().begin(), phaseOrder().end(), name) == phaseOrder().end()) {
            out.emplace_back(name, secs);
        }
    }
    return out;
}

// The row's phases in order, its step time and the data and communication shares; false when the
// step has no time.
bool setPhases(BreakdownRow& row, const std::map<std::string, double>& phases) {
    row.phases = orderedPhases(phases);
    double data = 0, communication = 0;
    for (const auto& [phase, secs] : row.phases) {
        row.stepSeconds += secs;
        data += phase == QLatin1String("data") ? secs : 0.0;
        communication += phase == QLatin1String("communication") ? secs : 0.0;
    }
    if (row.stepSeconds <= 0) {
        return false;
    }
    row.dataShare = data / row.stepSeconds;
    row.waitShare = communication / row.stepSeconds;
    return true;
}

// A data-parallel lane's ranks, under its row: which rank the others wait for, at a glance.
void appendRankRows(std::vector<BreakdownRow>& out, const std::vector<std::map<std::string, double>>& ranks,
                    const QColor& color) {
    if (ranks.size() < 2) {
        return;
    }
    constexpr std::size_t kAllUpTo = 4;
    const auto slow = slowestRank(ranks);
    std::vector<double> step(ranks.size(), 0.0);
    for (std::size_t r = 0; r < ranks.size(); ++r) {
        for (const auto& [phase, secs] : ranks[r]) {
            step[r] += phase == "communication" || phase == "other" ? 0.0 : secs;
        }
    }
    std::vector<std::size_t> shown;
    if (ranks.size() <= kAllUpTo) {
        for (std::size_t r = 0; r < ranks.size(); ++r) {
            shown.push_back(r);
        }
    } else {
        const auto busiest = static_cast<std::size_t>(std::max_element(step.begin(), step.end()) - step.begin());
        const auto quickest = static_cast<std::size_t>(std::min_element(step.begin(), step.end()) - step.begin());
        shown = {0, quickest, slow ? slow->rank : busiest};
        std::sort(shown.begin(), shown.end());
        shown.erase(std::unique(shown.begin(), shown.end()), shown.end());
    }
    for (const std::size_t r : shown) {
        BreakdownRow row;
        row.rank = static_cast<int>(r);
        row.name = ranks.size() <= kAllUpTo ? QObject::tr("rank %1").arg(r)
                                            : QObject::tr("rank %1 of %2").arg(r).arg(ranks.size());
        row.color = color;
        if (!setPhases(row, ranks[r])) {
            continue;
        }
        if (slow && slow->rank == r) {
            row.waitedForSlowerBy = slow->slowerBy();
        }
        out.push_back(std::move(row));
    }
}
} // namespace

std::vector<BreakdownRow> breakdownRows(const RaceController& race) {
    std::vector<BreakdownRow> out;
    const auto& lanes = race.lanes();
    const auto& histories = race.histories();
    // Energy read on one counter by lanes that ran at once is theirs together: no lane's own.
    std::vector<std::string> counters;
    for (std::size_t i = 0; i < lanes.size() && i < histories.size(); ++i) {
        counters.push_back(histories[i].samplesPerJoule() ? lanes[i].energyCounter : std::string());
    }
    const auto sharers = energySharers(counters);
    for (std::size_t i = 0; i < lanes.size() && i < histories.size(); ++i) {
        const auto& h = histories[i];
        const auto breakdown = h.shownBreakdown();
        if (breakdown.empty()) {
            continue;
        }
        BreakdownRow row;
        row.name = lanes[i].name;
        row.color = lanes[i].color;
        if (!setPhases(row, breakdown)) {
            continue;
        }
        row.inputBound = row.dataShare > kInputBoundShare;
        row.utilization = h.utilization();
        if (sharers[i] <= 1) {
            row.samplesPerJoule = h.samplesPerJoule();
        }
        out.push_back(std::move(row));
        appendRankRows(out, h.lastRankBreakdowns, lanes[i].color);
    }
    return out;
}

QString breakdownNote(const BreakdownRow& row) {
    const double ms = row.stepSeconds * 1e3;
    QString note = ms >= 1000  ? QObject::tr("%1 s/step").arg(ms / 1e3, 0, 'f', ms >= 10000 ? 0 : 1)
                   : ms >= 100 ? QObject::tr("%1 ms/step").arg(ms, 0, 'f', 0)
                               : QObject::tr("%1 ms/step").arg(ms, 0, 'f', ms >= 10 ? 1 : 2);
    if (row.rank >= 0) {
        // A rank: whether the others wait for it, else its share of the step in communication.
        if (row.waitedForSlowerBy) {
            return note +
                   QObject::tr(" · the others wait for it (%1% slower)").arg(*row.waitedForSlowerBy * 100, 0, 'f', 0);
        }
        return row.waitShare >= 0.005 ? note + QObject::tr(" · communication %1%").arg(row.waitShare * 100, 0, 'f', 0)
                                      : note;
    }
    if (row.utilization) {
        const double pct = *row.utilization * 100;
        note += QObject::tr(" · %1% of peak").arg(pct, 0, 'f', pct < 10 ? 1 : 0);
    }
    if (row.samplesPerJoule) {
        note += QObject::tr(" · %1 samples/J")
                    .arg(*row.samplesPerJoule >= 100 ? groupedNumber(*row.samplesPerJoule)
                                                     : QString::number(*row.samplesPerJoule, 'f', 1));
    }
    if (row.inputBound) {
        note += QObject::tr(" · input-bound (%1% data)").arg(row.dataShare * 100, 0, 'f', 0);
    }
    return note;
}

BreakdownBars::BreakdownBars(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("breakdownBars"));
    setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed);
    setVisible(false);
}

void BreakdownBars::setRows(std::vector<BreakdownRow> rows) {
    if (rows == m_rows) {
        return; // the refresh runs ~15 times a second; a new interval comes every 0.1 s or more
    }
    const bool shape = rows.size() != m_rows.size();
    m_rows = std::move(rows);
    setVisible(!m_rows.empty() && !m_hidden);
    if (shape) {
        fitHeight();
    }
    update();
}

void BreakdownBars::setFontScale(double scale) {
    m_fontScale = scale;
    fitHeight();
    update();
}

void BreakdownBars::setFit(bool compact, bool hidden) {
    if (compact == m_compact && hidden == m_hidden) {
        return;
    }
    m_compact = compact;
    m_hidden = hidden;
    setVisible(!m_rows.empty() && !m_hidden);
    fitHeight();
    update();
}

QFont BreakdownBars::pieceFont() const {
    QFont f = font();
    f.setPointSizeF(font().pointSizeF() * m_fontScale * fitScale());
    return f;
}

double BreakdownBars::fitScale() const {
    const int w = width() > 0 ? width() : 1280;
    QFont f = font();
    f.setPointSizeF(font().pointSizeF() * m_fontScale);
    const QFontMetrics fm(f);
    int names = 0, notes = 0;
    for (const auto& r : m_rows) {
        names = std::max(names, fm.horizontalAdvance(r.name));
        notes = std::max(notes, fm.horizontalAdvance(breakdownNote(r)));
    }
    int legend = fm.horizontalAdvance(tr("Where a step's time goes")) + kGap;
    for (const auto& phase : phaseOrder()) {
        legend += fm.height() + 4 + fm.horizontalAdvance(phase) + kGap;
    }
    const double need = std::max<double>(names + notes + 2 * kGap + kMinBar, legend);
    return std::clamp(w / need, kMinScale, 1.0);
}

std::vector<BreakdownBars::Piece> BreakdownBars::layout(int width, const QFont& font) const {
    std::vector<Piece> out;
    if (m_rows.empty()) {
        return out;
    }
    QFont bold = font;
    bold.setBold(true);
    const QFontMetrics fm(font), bm(bold);
    const int line = fm.height() + (m_compact ? kCompactPadding : kPadding);
    // The title and the legend: the phases any lane has, in the step's order.
    const QString title = tr("Where a step's time goes");
    out.push_back(
        {Piece::Title, title, QRect(0, 0, bm.horizontalAdvance(title), line), palette().color(QPalette::WindowText)});
    int x = out.back().rect.right() + 1 + kGap;
    for (const auto& phase : phaseOrder()) {
        const bool used = std::any_of(m_rows.begin(), m_rows.end(), [&](const BreakdownRow& r) {
            return std::any_of(r.phases.begin(), r.phases.end(), [&](const auto& p) { return p.first == phase; });
        });
        if (!used) {
            continue;
        }
        const int box = fm.height() - 4;
        out.push_back(
            {Piece::Legend, phase, QRect(x, 0, box + 4 + fm.horizontalAdvance(phase), line), phaseColor(phase)});
        x = out.back().rect.right() + 1 + kGap;
    }
    int nameWidth = 0, noteWidth = 0;
    for (const auto& r : m_rows) {
        nameWidth = std::max(nameWidth, bm.horizontalAdvance(r.name));
        noteWidth = std::max(noteWidth, fm.horizontalAdvance(breakdownNote(r)));
    }
    const int barX = nameWidth + kGap;
    const int barWidth = std::max(kMinBar, width - barX - kGap - noteWidth);
    int y = line;
    for (const auto& r : m_rows) {
        out.push_back({Piece::Name, r.name, QRect(0, y, nameWidth, line), r.color});
        double left = 0;
        for (const auto& [phase, secs] : r.phases) {
            const double share = secs / r.stepSeconds;
            const int x0 = barX + static_cast<int>(left * barWidth + 0.5);
            left += share;
            const int x1 = barX + static_cast<int>(left * barWidth + 0.5);
            if (x1 <= x0) {
                continue;
            }
            const QRect seg(x0, y + 2, x1 - x0, line - 4);
            out.push_back({Piece::Segment, phase, seg, phaseColor(phase)});
            // Inside the segment: "forward 40%", else "40%", else nothing (the legend says).
            const QString pct = QStringLiteral("%1%").arg(share * 100, 0, 'f', 0);
            for (const QString& label : {QString(phase + QLatin1Char(' ') + pct), pct}) {
                if (fm.horizontalAdvance(label) + 6 <= seg.width()) {
                    out.push_back({Piece::SegmentLabel, label, seg, textOn(phaseColor(phase))});
                    break;
                }
            }
        }
        out.push_back({Piece::Note, breakdownNote(r), QRect(barX + barWidth + kGap, y, noteWidth, line),
                       palette().color(QPalette::WindowText)});
        y += line;
    }
    return out;
}

std::vector<BreakdownBars::Piece> BreakdownBars::pieces() const { return layout(width(), pieceFont()); }

QSize BreakdownBars::sizeHint() const { return {width() > 0 ? width() : 800, heightFor(m_compact)}; }

int BreakdownBars::heightFor(bool compact) const {
    const QFontMetrics fm(pieceFont());
    const int rows = m_rows.empty() ? 0 : static_cast<int>(m_rows.size()) + 1;
    return rows * (fm.height() + (compact ? kCompactPadding : kPadding)) + (rows ? 4 : 0);
}

void BreakdownBars::fitHeight() {
    const int h = sizeHint().height();
    if (h != height() || minimumHeight() != h) {
        setFixedHeight(h);
    }
}

void BreakdownBars::resizeEvent(QResizeEvent* event) {
    QWidget::resizeEvent(event);
    fitHeight();
}

void BreakdownBars::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QFont font = pieceFont();
    QFont bold = font;
    bold.setBold(true);
    for (const auto& piece : pieces()) {
        switch (piece.kind) {
        case Piece::Title:
        case Piece::Name:
            p.setFont(bold);
            p.setPen(piece.color);
            p.drawText(piece.rect, Qt::AlignLeft | Qt::AlignVCenter, piece.text);
            break;
        case Piece::Legend: {
            p.setFont(font);
            const int box = QFontMetrics(font).height() - 4;
            p.fillRect(QRect(piece.rect.left(), piece.rect.top() + (piece.rect.height() - box) / 2, box, box),
                       piece.color);
            p.setPen(palette().color(QPalette::WindowText));
            p.drawText(piece.rect.adjusted(box + 4, 0, 0, 0), Qt::AlignLeft | Qt::AlignVCenter, piece.text);
            break;
        }
        case Piece::Segment: p.fillRect(piece.rect, piece.color); break;
        case Piece::SegmentLabel:
            p.setFont(font);
            p.setPen(piece.color);
            p.drawText(piece.rect, Qt::AlignCenter, piece.text);
            break;
        case Piece::Note:
            p.setFont(font);
            p.setPen(piece.color);
            p.drawText(piece.rect, Qt::AlignLeft | Qt::AlignVCenter, piece.text);
            break;
        }
    }
}

} // namespace devicerace::ui
