#pragma once
// Where each lane's step time goes: one stacked horizontal bar per lane — data,
// forward, backward, communication, optimizer (or a CUDA graph's one "compute"), other — each
// phase in the same colour on every lane, the bar's length the share of the step, and beside it
// the step time, the share of the device's peak and an input-bound flag. Updated live with the
// latest measured interval; hidden until a lane has one. GUI thread only.
#include <QColor>
#include <QFont>
#include <QRect>
#include <QString>
#include <QWidget>

#include <optional>
#include <vector>

#include "race_controller.h"

namespace devicerace::ui {

struct BreakdownRow {
    QString name;
    QColor color;
    std::vector<std::pair<QString, double>> phases; // seconds per step, in the step's order
    double stepSeconds = 0;                         // their sum
    std::optional<double> utilization;              // share of the device's peak
    bool inputBound = false;                        // data > kInputBoundShare of the step
    double dataShare = 0;
    std::optional<double> samplesPerJoule; // where the lane's energy was measured
    // A data-parallel lane's rank (rows under the lane's own; -1: the lane's row): the share of its
    // step spent waiting for the others, or how much slower it is when the others wait for it.
    int rank = -1;
    double waitShare = 0;
    std::optional<double> waitedForSlowerBy;
    bool operator==(const BreakdownRow&) const = default;
};

/// The lanes with a measured breakdown, in lane order; under a data-parallel lane, a row per rank
/// (every rank up to four; past four, rank 0, the fastest and the slowest, named "rank 7 of 8").
std::vector<BreakdownRow> breakdownRows(const RaceController& race);
/// The phases in the order a step runs them, and each one's colour (Okabe–Ito: told apart with
/// the common colour-vision deficiencies, on light and dark themes alike).
const std::vector<QString>& phaseOrder();
QColor phaseColor(const QString& phase);
/// "3.80 ms/step · 63% of peak · 410 samples/J · input-bound (59% data)" ("7.5 s/step" past a second)
QString breakdownNote(const BreakdownRow& row);

class BreakdownBars : public QWidget {
    Q_OBJECT
public:
    explicit BreakdownBars(QWidget* parent = nullptr);
    void setRows(std::vector<BreakdownRow> rows);
    const std::vector<BreakdownRow>& rows() const { return m_rows; }
    void setFontScale(double scale);
    /// Where the dashboard is short of height: thinner rows (compact), or none shown (hidden;
    /// presentation mode with many lanes). Both off by default.
    void setFit(bool compact, bool hidden);
    bool compact() const { return m_compact; }
    /// The height the bars take, with thin rows or not (0 while there are no rows).
    int heightFor(bool compact) const;

    /// What is painted, laid out for the current width (tests: nothing cut or elided).
    struct Piece {
        enum Kind { Title, Legend, Name, Segment, SegmentLabel, Note } kind;
        QString text; // the label, the phase of a segment, or the note
        QRect rect;
        QColor color;
    };
    std::vector<Piece> pieces() const;
    QFont pieceFont() const;
    QSize sizeHint() const override;
    /// Any width (the fonts shrink to fit): only the height is fixed.
    QSize minimumSizeHint() const override { return {0, sizeHint().height()}; }

protected:
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    std::vector<Piece> layout(int width, const QFont& font) const;
    double fitScale() const; // 1 or less: what makes the notes and legend fit the width
    void fitHeight();
    std::vector<BreakdownRow> m_rows;
    double m_fontScale = 1.0;
    bool m_compact = false;
    bool m_hidden = false;
};

} // namespace devicerace::ui
