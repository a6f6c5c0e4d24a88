#pragma once
// The text strip under the charts: what each lane's model wrote at its latest evaluation
// (language models, charlstm), one entry per lane in the lane's colour, wrapped, never
// elided. GUI thread only.
#include <QColor>
#include <QFont>
#include <QRect>
#include <QString>
#include <QWidget>

#include <vector>

#include "race_controller.h"

namespace devicerace::ui {

/// One lane's latest text.
struct TextLine {
    QString name;
    QColor color;
    QString text; // on one line: line breaks shown as " ↵ ", tabs as spaces
    std::int64_t step = 0;
};

/// The lanes that have written text so far, in lane order.
std::vector<TextLine> textLines(const RaceController& race);
/// `text` on one line: line breaks as " ↵ ", tabs and carriage returns as spaces.
QString oneLineText(const QString& text);

class TextStrip : public QWidget {
    Q_OBJECT
public:
    explicit TextStrip(QWidget* parent = nullptr);
    void setLines(std::vector<TextLine> lines);
    const std::vector<TextLine>& lines() const { return m_lines; }
    void setFontScale(double scale);

    /// One wrapped line of a lane's text (or its name label) as painted at the current width.
    struct Piece {
        QString text;
        QRect rect;
        QColor color;
        bool label = false; // the lane's name and step
    };
    /// Everything painted, laid out for the current width: each lane's whole text appears,
    /// wrapped over as many lines as it needs (the concatenated pieces equal the text).
    std::vector<Piece> pieces() const;
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override { return sizeHint(); }
    bool hasHeightForWidth() const override { return true; }
    int heightForWidth(int width) const override;

protected:
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    void fitHeight();
    QFont textFont() const;
    QFont labelFont() const;
    std::vector<Piece> layout(int width) const;
    std::vector<TextLine> m_lines;
    double m_fontScale = 1.0;
};

} // namespace devicerace::ui
