#pragma once
// The race strip: one bar per lane with progress to the finish, its status (warm-up,
// evaluating, epoch, accuracy, ETA, done, failed) and the speedup relative to a baseline
// lane, the largest text on screen in presentation mode. GUI thread only.
#include <QWidget>

#include <vector>

#include "race_controller.h"

namespace devicerace::ui {

/// The texts of one row, computed without painting (testable).
struct StripRow {
    QString name;
    QColor color;
    double progress = 0;         // 0..1
    QString status;              // "epoch 2 · acc 0.88 · ETA 6:10", "done 0:41", "failed: …"
    QString speedup;             // "37.2× cpu·1", "baseline", ""
    std::optional<double> ratio; // throughput over the baseline's
    bool failed = false;
};

/// Builds the strip's rows from the race state (`baseline` indexes the lanes).
std::vector<StripRow> stripRows(const RaceController& race, int baseline, std::int64_t warmupSteps);
/// Lane-clock seconds at which the lane reaches `target`: the first evaluation at or above it,
/// else a straight line through the last two evaluations (none while accuracy is not rising).
std::optional<double> projectedTimeToTarget(const LaneHistory& history, double target);
/// The presentation headline: "cuda:0 41× faster than cpu·1" (the fastest lane against the
/// baseline), or "cpu·1 vs cpu·2" before there is a measurement.
QString headlineText(const std::vector<StripRow>& rows, int baseline);
/// A lane's throughput against the baseline's, as the strip says it: "1.9× cpu·1", "41× cpu·1",
/// and below half the baseline's "24× slower than cuda:0" (never "0.0×").
QString speedupText(double ratio, const QString& baseline);
/// "4.2 s" under ten seconds, then "1:05", "1:02:03"
QString formatDuration(double seconds);
/// `text` as drawn word-wrapped: a command-line option ("--warmup-steps") is never broken at one
/// of its hyphens (a word joiner, U+2060, follows each of them; it draws as nothing).
QString keepOptionsWhole(const QString& text);

/// One piece of text the strip draws, where, and in which font (layout is testable).
struct StripText {
    QString text;
    QRect rect;
    QFont font;
    QColor color;
    int flags = 0; // Qt::Alignment
};

class RaceStrip : public QWidget {
    Q_OBJECT
public:
    explicit RaceStrip(QWidget* parent = nullptr);
    void setRows(std::vector<StripRow> rows);
    void setFontScale(double scale);
    /// Tighter rows where the dashboard is short of height (many lanes); off by default.
    void setCompact(bool compact);
    bool compact() const { return m_compact; }
    /// The strip's height with tight rows or not, at the current width.
    int heightFor(bool compact) const;
    const std::vector<StripRow>& rows() const { return m_rows; }
    /// A warning shown under the lanes ("⚠ live lanes share 2 CPU cores"); "" hides it.
    void setBadge(const QString& text);
    QString badge() const { return m_badge; }
    /// Every text as it is drawn at the current size: fonts shrink (to 60%) before anything
    /// is elided, so on a 1280-pixel screen nothing is.
    std::vector<StripText> texts() const;
    /// The progress bars, one per row.
    std::vector<QRect> bars() const;
    QSize sizeHint() const override;
    /// The lane row at `y` (widget coordinates), or -1.
    int rowAt(int y) const;

Q_SIGNALS:
    /// Right-click on a lane: the window offers Pause / Resume / Stop for that lane.
    void laneMenuRequested(int lane, const QPoint& globalPos);

protected:
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    void contextMenuEvent(QContextMenuEvent* event) override;

private:
    int rowHeight() const;
    int rowHeight(bool compact) const;
    int badgeHeight() const { return badgeHeight(m_compact); }
    int badgeHeight(bool compact) const; // the note under the lanes, wrapped to the width (0: none)
    double fitScale() const;             // 1 or less: what makes every row fit the width
    std::vector<StripRow> m_rows;
    QString m_badge;
    double m_fontScale = 1.0;
    bool m_compact = false;
};

} // namespace devicerace::ui
