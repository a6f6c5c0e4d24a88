#include "text_strip.h"

#include <QFontDatabase>
#include <QFontMetrics>
#include <QPainter>
#include <QTextLayout>

#include <algorithm>

namespace devicerace::ui {

namespace {
// Pixels between the name column and the text, and between lanes.
constexpr int kGap = 10;
constexpr int kLaneGap = 4;
} // namespace

QString oneLineText(const QString& text) {
    QString out;
    out.reserve(text.size() + 16);
    for (const QChar c : text) {
        if (c == QLatin1Char('\n')) {
            out += QStringLiteral(" \u21b5 ");
        } else if (c == QLatin1Char('\t') || c == QLatin1Char('\r')) {
            out += QLatin1Char(' ');
        } else {
            out += c;
        }
    }
    return out;
}

std::vector<TextLine> textLines(const RaceController& race) {
    std::vector<TextLine> out;
    const auto& lanes = race.lanes();
    const auto& histories = race.histories();
    for (std::size_t i = 0; i < lanes.size() && i < histories.size(); ++i) {
        if (!histories[i].lastText.isEmpty()) {
            out.push_back(
                {lanes[i].name, lanes[i].color, oneLineText(histories[i].lastText), histories[i].lastTextStep});
        }
    }
    return out;
}

TextStrip::TextStrip(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("textStrip"));
    setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed);
    setVisible(false);
}

QFont TextStrip::textFont() const {
    QFont f = QFontDatabase::systemFont(QFontDatabase::FixedFont);
    f.setPointSizeF(font().pointSizeF() * m_fontScale);
    return f;
}

QFont TextStrip::labelFont() const {
    QFont f = font();
    f.setPointSizeF(font().pointSizeF() * m_fontScale);
    f.setBold(true);
    return f;
}

void TextStrip::setLines(std::vector<TextLine> lines) {
    const bool changed = lines.size() != m_lines.size() ||
                         !std::equal(lines.begin(), lines.end(), m_lines.begin(), [](const auto& a, const auto& b) {
                             return a.text == b.text && a.name == b.name && a.step == b.step;
                         });
    m_lines = std::move(lines);
    setVisible(!m_lines.empty());
    if (changed) {
        fitHeight();
        update();
    }
}

void TextStrip::setFontScale(double scale) {
    m_fontScale = scale;
    fitHeight();
    update();
}

void TextStrip::fitHeight() {
    // The wrapped height depends on the width: a fixed height that follows it.
    const int h = heightForWidth(width() > 0 ? width() : 800);
    if (h != height() || minimumHeight() != h) {
        setFixedHeight(h);
    }
}

std::vector<TextStrip::Piece> TextStrip::layout(int width) const {
    std::vector<Piece> out;
    const QFont label = labelFont(), text = textFont();
    const QFontMetrics lm(label), tm(text);
    int nameWidth = 0;
    for (const auto& l : m_lines) {
        nameWidth = std::max(nameWidth, lm.horizontalAdvance(l.name));
    }
    // The step under the name: "step 1,200".
    int stepWidth = 0;
    for (const auto& l : m_lines) {
        stepWidth = std::max(stepWidth, lm.horizontalAdvance(tr("step %1").arg(l.step)));
    }
    const int labelWidth = std::max(nameWidth, stepWidth);
    const int textX = labelWidth + kGap;
    const int textWidth = std::max(tm.averageCharWidth() * 8, width - textX);
    const int lineHeight = std::max(tm.lineSpacing(), lm.lineSpacing());
    int y = 0;
    for (const auto& l : m_lines) {
        QTextLayout layout(l.text, text);
        QTextOption option;
        option.setWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
        layout.setTextOption(option);
        layout.beginLayout();
        int lines = 0;
        for (QTextLine line = layout.createLine(); line.isValid(); line = layout.createLine()) {
            line.setLineWidth(textWidth);
            out.push_back({l.text.mid(line.textStart(), line.textLength()),
                           QRect(textX, y + lines * lineHeight, textWidth, lineHeight), l.color, false});
            ++lines;
        }
        layout.endLayout();
        out.push_back({l.name, QRect(0, y, labelWidth, lineHeight), l.color, true});
        lines = std::max(lines, 1);
        if (lines >= 2) {
            out.push_back({tr("step %1").arg(l.step), QRect(0, y + lineHeight, labelWidth, lineHeight), l.color, true});
        }
        y += lines * lineHeight + kLaneGap;
    }
    return out;
}

std::vector<TextStrip::Piece> TextStrip::pieces() const { return layout(width()); }

int TextStrip::heightForWidth(int width) const {
    int bottom = 0;
    for (const auto& p : layout(width)) {
        bottom = std::max(bottom, p.rect.bottom() + 1);
    }
    return m_lines.empty() ? 0 : bottom + kLaneGap;
}

QSize TextStrip::sizeHint() const {
    const int w = width() > 0 ? width() : 800;
    return {w, heightForWidth(w)};
}

void TextStrip::resizeEvent(QResizeEvent* event) {
    QWidget::resizeEvent(event);
    fitHeight();
}

void TextStrip::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QFont label = labelFont(), text = textFont();
    for (const auto& piece : pieces()) {
        p.setFont(piece.label ? label : text);
        p.setPen(piece.color);
        p.drawText(piece.rect, Qt::AlignLeft | Qt::AlignVCenter, piece.text);
    }
}

} // namespace devicerace::ui
