#include "dashboard.h"

#include <QTimer>
#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QResizeEvent>
#include <QScopedValueRollback>
#include <QSlider>
#include <QVBoxLayout>
#include <QtCharts/QChart>
#include <QtCharts/QLegend>

#include "charts/axis_ticks.h"
#include "charts/metric_chart.h"
#include "charts/safe_chart_view.h"
#include "device_panel.h"
#include "race_strip.h"
#include "summary_table.h"
#include "text_strip.h"
#include "breakdown_bars.h"
#include "dashboard_fit.h"

namespace devicerace::ui {

Dashboard::Dashboard(RaceController* race, QWidget* parent) : QWidget(parent), m_race(race) {
    setAutoFillBackground(true);
    auto* layout = new QVBoxLayout(this);
    m_title = new QLabel(tr("DeviceRace"), this);
    QFont titleFont = m_title->font();
    titleFont.setPointSizeF(titleFont.pointSizeF() * 1.4);
    titleFont.setBold(true);
    m_title->setFont(titleFont);
    // A long title (a replayed lane's data description) wraps instead of widening the window:
    // unwrapped, "char-gpt · text: … (Debian fortunes, copied to the GPU machine)" pushed a
    // 1280 px window to 1,671 px.
    m_title->setWordWrap(true);
    m_title->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    layout->addWidget(m_title);
    m_grid = new QGridLayout();
    auto* grid = m_grid;
    m_throughput = new MetricChart(tr("Throughput"), Metric::SamplesPerSec, this);
    m_accuracy = new MetricChart(tr("Test accuracy"), Metric::Accuracy, this);
    m_loss = new MetricChart(tr("Training loss"), Metric::Loss, this);
    m_devices = new DevicePanel(this);
    layout->addLayout(grid, 5);
    // What the language models write, under the charts (hidden until a lane has written).
    m_text = new TextStrip(this);
    layout->addWidget(m_text);
    // Where each lane's step time goes (hidden until a lane has measured one).
    m_breakdown = new BreakdownBars(this);
    layout->addWidget(m_breakdown);

    m_controls = new QWidget(this);
    auto* controls = new QHBoxLayout(m_controls);
    controls->setContentsMargins(0, 0, 0, 0);
    m_xAxis = new QComboBox(this);
    m_xAxis->setObjectName(QStringLiteral("xAxis"));
    m_xAxis->addItems({tr("relative time"), tr("step"), tr("samples seen"), tr("cost")});
    m_rate = new QComboBox(this);
    m_rate->setObjectName(QStringLiteral("rateMetric"));
    m_rate->addItems({tr("samples/s"), tr("steps/s")});
    m_smoothing = new QSlider(Qt::Horizontal, this);
    m_smoothing->setRange(0, 100);
    m_smoothing->setValue(60);
    m_smoothing->setMaximumWidth(160);
    m_smoothing->setMinimumWidth(60);
    m_scaleBox = new QComboBox(this);
    m_scaleBox->setObjectName(QStringLiteral("throughputScale"));
    m_scaleBox->addItems({tr("auto"), tr("linear"), tr("log")});
    m_scaleBox->setToolTip(tr("Throughput axis: auto turns logarithmic when lanes differ by more than 10×"));
    m_modeLabel = new QLabel(this);
    controls->addWidget(new QLabel(tr("x:"), this));
    controls->addWidget(m_xAxis);
    controls->addWidget(new QLabel(tr("throughput:"), this));
    controls->addWidget(m_rate);
    controls->addWidget(m_scaleBox);
    controls->addWidget(new QLabel(tr("smoothing:"), this));
    controls->addWidget(m_smoothing);
    controls->addStretch(1);
    controls->addWidget(new QLabel(tr("speedup vs"), this));
    m_baseline = new QComboBox(this);
    m_baseline->setObjectName(QStringLiteral("baseline"));
    m_baseline->setSizeAdjustPolicy(QComboBox::AdjustToContents); // a lane's whole name, never elided
    controls->addWidget(m_baseline);
    layout->addWidget(m_controls);
    // The race's mode in words, on a line of its own that wraps: in the controls row its width
    // pushed a 1280 px window off the screen.
    m_modeLabel->setObjectName(QStringLiteral("modeNote"));
    m_modeLabel->setWordWrap(true);
    m_modeLabel->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    m_modeLabel->setVisible(false);
    layout->addWidget(m_modeLabel);

    m_strip = new RaceStrip(this);
    layout->addWidget(m_strip);
    // Repeats: "repeat 2 of 5", then the speedups with their spread (both modes).
    m_repeatLabel = new QLabel(this);
    m_repeatLabel->setObjectName(QStringLiteral("repeatNote"));
    m_repeatLabel->setWordWrap(true);
    m_repeatLabel->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    QFont repeatFont = m_repeatLabel->font();
    repeatFont.setBold(true);
    m_repeatLabel->setFont(repeatFont);
    m_repeatLabel->setVisible(false);
    layout->addWidget(m_repeatLabel);
    m_summary = new SummaryTable(this);
    layout->addWidget(m_summary);

    connect(m_xAxis, &QComboBox::currentIndexChanged, this, [this](int i) {
        for (auto* c : charts()) {
            c->setXAxis(static_cast<XAxis>(i));
        }
        // A finished or replayed race gets no more ticks: recompute the shared range for the
        // new units and redraw every chart from all the stored samples now.
        refreshCharts();
    });
    connect(m_rate, &QComboBox::currentIndexChanged, this,
            [this](int i) { m_throughput->setMetric(i == 0 ? firstRate() : Metric::StepsPerSec); });
    connect(m_smoothing, &QSlider::valueChanged, this, [this](int v) {
        for (auto* c : charts()) {
            c->setSmoothing(v / 100.0);
        }
    });
    connect(m_baseline, &QComboBox::currentIndexChanged, this, [this] {
        m_baselineName = m_baseline->currentText();
        refresh();
    });
    connect(m_scaleBox, &QComboBox::currentIndexChanged, this,
            [this](int i) { setThroughputScale(static_cast<Scale>(i)); });
    for (auto* c : charts()) {
        c->setSmoothing(m_smoothing->value() / 100.0);
    }
    linkZoom();
    arrange(Arrangement::Row, true);
    fitHeights(true);
    refreshCharts(); // before any race: axes with ticks and gridlines, titles in their places
}

void Dashboard::resizeEvent(QResizeEvent* event) {
    QWidget::resizeEvent(event);
    fitHeights();
    if (m_race->histories().empty()) {
        // Empty charts: ticks fitted to the new size, once the charts have laid out their plots.
        QTimer::singleShot(0, this, [this] {
            if (m_race->histories().empty()) {
                refreshCharts();
            }
        });
    }
}

bool Dashboard::event(QEvent* event) {
    // A part grew or shrank (a lane's row, a wrapped note): what gives way is decided again
    // before the layout places the parts.
    if (event->type() == QEvent::LayoutRequest) {
        fitHeights();
    }
    return QWidget::event(event);
}

void Dashboard::fitInside(QWidget* viewport) {
    m_viewport = viewport;
    viewport->installEventFilter(this);
    fitHeights();
}

int Dashboard::heightForWidth(int width) const { return layout()->totalMinimumHeightForWidth(width); }

bool Dashboard::eventFilter(QObject* watched, QEvent* event) {
    if (watched == m_viewport && event->type() == QEvent::Resize) {
        fitHeights();
    }
    return QWidget::eventFilter(watched, event);
}

void Dashboard::fitHeights(bool force) {
    if (m_fitting) {
        return;
    }
    const QScopedValueRollback guard(m_fitting, true);
    auto* box = layout();
    const QMargins margins = box->contentsMargins();
    const int contentWidth = std::max(1, width() - margins.left() - margins.right());
    DashboardHeights h;
    h.available = m_viewport ? m_viewport->height() : height();
    h.spacing = std::max(0, box->spacing());
    // Everything but the parts that give way, at the heights they take at this width.
    int items = 0;
    h.rest = margins.top() + margins.bottom();
    for (int i = 0; i < box->count(); ++i) {
        QLayoutItem* item = box->itemAt(i);
        QWidget* w = item->widget();
        if (w == m_breakdown) {
            items += m_breakdown->rows().empty() ? 0 : 1; // counted while the fit hides it
            continue;
        }
        if (item->isEmpty()) {
            continue;
        }
        ++items;
        if (item->layout() == m_grid || w == m_strip || w == m_summary) {
            continue;
        }
        h.rest += item->hasHeightForWidth() ? item->heightForWidth(contentWidth) : item->sizeHint().height();
    }
    h.rest += h.spacing * std::max(0, items - 1);
    for (auto* c : charts()) {
        h.chartMin = std::max(h.chartMin, c->readableHeight(false));
        h.gridChartMin = std::max(h.gridChartMin, c->readableHeight(true));
    }
    h.chartGap = std::max(0, m_grid->verticalSpacing());
    // Below ~850 px two rows of charts leave each plot too short; presentation keeps one row.
    constexpr int kGridMinHeight = 850;
    h.gridAllowed = !m_presentation && h.available >= kGridMinHeight;
    if (!m_breakdown->rows().empty()) {
        h.barsFull = m_breakdown->heightFor(false);
        h.barsCompact = m_breakdown->heightFor(true);
    }
    h.stripFull = m_strip->heightFor(false);
    h.stripCompact = m_strip->heightFor(true);
    if (!m_summary->isHidden()) {
        h.tableFull = m_summary->fullHeight();
        h.tableMin = m_summary->heightOfRows(kTableRowsKept);
    }
    h.mayHideBars = m_presentation;
    const DashboardFit fit = fitDashboard(h);
    m_breakdown->setFit(fit.compactBars, fit.hideBars);
    m_strip->setCompact(fit.compactStrip);
    m_summary->setHeightLimit(fit.tableHeight < h.tableFull ? fit.tableHeight : 0);
    arrange(fit.grid ? Arrangement::Grid : Arrangement::Row, force);
    // The charts never shrink below readable: where even that does not fit, the window scrolls.
    const int chartMin = fit.grid ? h.gridChartMin : h.chartMin;
    for (auto* c : charts()) {
        if (c->minimumHeight() != chartMin) {
            c->setMinimumHeight(chartMin);
        }
    }
    // Legends repeat the strip's coloured lane names: shown in the grid where every name fits,
    // never elided ("cpu·1·bf…" with eight lanes at 1920 px).
    const int gridColumn = (contentWidth - std::max(0, m_grid->horizontalSpacing())) / 2; // laid out after this
    for (auto* c : charts()) {
        const bool legend = fit.grid && c->legendFits(gridColumn);
        if (c->chart()->legend()->isVisible() != legend) {
            c->chart()->legend()->setVisible(legend);
        }
    }
}

void Dashboard::arrange(Arrangement want, bool force) {
    if (want == m_arrangement && !force) {
        return;
    }
    m_arrangement = want;
    for (QWidget* w : {static_cast<QWidget*>(m_throughput), static_cast<QWidget*>(m_accuracy),
                       static_cast<QWidget*>(m_loss), static_cast<QWidget*>(m_devices)}) {
        m_grid->removeWidget(w);
    }
    for (int i = 0; i < 3; ++i) {
        m_grid->setRowStretch(i, 0);
        m_grid->setColumnStretch(i, 0);
    }
    if (want == Arrangement::Grid) {
        m_grid->addWidget(m_throughput, 0, 0);
        m_grid->addWidget(m_accuracy, 0, 1);
        m_grid->addWidget(m_loss, 1, 0);
        m_grid->addWidget(m_devices, 1, 1);
        m_grid->setRowStretch(0, 1);
        m_grid->setRowStretch(1, 1);
        m_grid->setColumnStretch(0, 1);
        m_grid->setColumnStretch(1, 1);
    } else {
        m_grid->addWidget(m_throughput, 0, 0);
        m_grid->addWidget(m_accuracy, 0, 1);
        m_grid->addWidget(m_loss, 0, 2);
        m_grid->setRowStretch(0, 1);
        for (int i = 0; i < 3; ++i) {
            m_grid->setColumnStretch(i, 1);
        }
    }
    // The device panel needs the grid's fourth cell; its sharing warning is also in the strip.
    m_devices->setVisible(want == Arrangement::Grid && !m_presentation);
}

QList<MetricChart*> Dashboard::charts() const { return {m_throughput, m_accuracy, m_loss}; }

void Dashboard::linkZoom() {
    // Zoom/pan on one chart moves the others; right-click on any resets all.
    for (auto* source : charts()) {
        connect(source, &MetricChart::xRangeChanged, this, [this, source](double lo, double hi) {
            for (auto* c : charts()) {
                if (c != source) {
                    const QSignalBlocker block(c);
                    c->setXRange(lo, hi);
                }
            }
        });
        // One crosshair across the charts: they share the x axis.
        connect(source, &MetricChart::hoveredAt, this, [this](std::optional<double> x) {
            for (auto* c : charts()) {
                c->showCrosshair(x);
            }
        });
        connect(source, &MetricChart::resetZoomRequested, this, [this] {
            for (auto* c : charts()) {
                c->resetZoom();
            }
        });
    }
}

void Dashboard::setHeadline(const QString& text) {
    m_titleText = text;
    updateTitle();
}

QString Dashboard::titleText() const { return m_title->text(); }

int Dashboard::baseline() const { return std::max(0, m_baseline->currentIndex()); }

void Dashboard::fillBaseline(const QStringList& names) {
    // The lane the user chose stays chosen by name (a planned lane keeps its name in the race,
    // and a list refilled while the setup is half-edited does not forget it); a name that is
    // gone falls back to the same row, then to the first.
    const int previous = m_baseline->currentIndex();
    m_baseline->clear();
    m_baseline->addItems(names);
    const int byName = m_baselineName.isEmpty() ? -1 : static_cast<int>(names.indexOf(m_baselineName));
    m_baseline->setCurrentIndex(byName >= 0 ? byName : (previous >= 0 && previous < names.size() ? previous : 0));
}

void Dashboard::setPlannedLanes(const QStringList& names) {
    if (!m_race->histories().empty()) {
        return; // a race (or a replay) is on screen: its lanes are the list
    }
    if (names.isEmpty()) {
        return; // a half-edited lane: keep the last list until the plan reads again
    }
    const QSignalBlocker block(m_baseline);
    fillBaseline(names);
}

Metric Dashboard::firstRate() const {
    return m_race->tokensPerSample() > 0 ? Metric::TokensPerSec : Metric::SamplesPerSec;
}

void Dashboard::onRaceStarted() {
    const auto& lanes = m_race->lanes();
    if (m_rateAuto) {
        const QSignalBlocker block(m_rate);
        m_rate->setCurrentIndex(0); // the last race chose steps/s by itself: this one chooses anew
    }
    m_rateDecided = m_rateAuto = false;
    for (auto* c : charts()) {
        c->setLanes(lanes);
    }
    // Language models: throughput in tokens/s, accuracy per next character.
    const auto tokens = m_race->tokensPerSample();
    m_rate->setItemText(0, tokens > 0 ? tr("tokens/s") : tr("samples/s"));
    m_throughput->setTokensPerSample(std::max<std::int64_t>(1, tokens));
    m_throughput->setMetric(m_rate->currentIndex() == 0 ? firstRate() : Metric::StepsPerSec);
    // Language models: validation loss is the quality curve (next-character accuracy is in
    // the strip and the table).
    m_accuracy->setMetric(tokens > 0 ? Metric::EvalLoss : Metric::Accuracy);
    m_accuracy->setTitle(tokens > 0 ? tr("Validation loss") : tr("Test accuracy"));
    m_accuracy->setTarget(m_race->tokensPerSample() > 0 ? std::nullopt : m_race->targetAccuracy());
    m_qualityDecided = tokens > 0;
    {
        QStringList names;
        for (const auto& l : lanes) {
            names << l.name;
        }
        const QSignalBlocker block(m_baseline);
        fillBaseline(names);
        m_autoLog = false;
    }
    m_modeLabel->setText(m_race->fair() ? tr("fair mode: lanes ran one at a time, aligned at their start")
                                        : tr("live mode: lanes race at once"));
    m_modeLabel->setVisible(!m_presentation);
    refresh();
    refreshSummary();
}

void Dashboard::chooseRateForScripts() {
    if (m_rateDecided) {
        return;
    }
    bool steps = false;
    for (const auto& h : m_race->histories()) {
        if (h.samplesSeen) {
            m_rateDecided = true; // some lane counts samples: keep the user's choice
            return;
        }
        steps = steps || (h.stepsOnly && !h.stepsPerSec.empty());
    }
    if (steps) {
        m_rateDecided = true;
        if (m_rate->currentIndex() == 0) {
            m_rateAuto = true;
            m_rate->setCurrentIndex(1); // steps/s, as TensorBoard charts a script's steps
        }
    }
}

void Dashboard::chooseQualityForScripts() {
    // Scripts whose evaluations say only a loss (a language model's, a VAE's): the quality chart
    // shows it, where a "Test accuracy" chart would stay empty. A lane with an accuracy keeps it.
    if (m_qualityDecided) {
        return;
    }
    bool loss = false;
    for (const auto& h : m_race->histories()) {
        if (h.lastAccuracy) {
            m_qualityDecided = true;
            return;
        }
        loss = loss || h.lastEvalLoss.has_value();
    }
    if (loss) {
        m_qualityDecided = true;
        m_accuracy->setMetric(Metric::EvalLoss);
        m_accuracy->setTitle(tr("Test loss"), tr("test loss"));
        m_accuracy->setTarget(std::nullopt);
    }
}

void Dashboard::refresh() {
    chooseRateForScripts();
    chooseQualityForScripts();
    // Share of the GUI thread the charts may take; their frame rate drops below ~15 Hz only
    // when one refresh + paint costs more than ~16 ms.
    constexpr double kChartDuty = 0.25;
    const bool due = !m_sinceCharts.isValid() || !m_race->running() ||
                     static_cast<double>(m_sinceCharts.elapsed()) >= m_chartCostMs / kChartDuty;
    if (due) {
        refreshCharts();
    }
    auto rows = stripRows(*m_race, baseline(), m_race->warmupSteps());
    m_headline = headlineText(rows, baseline());
    m_strip->setRows(std::move(rows));
    m_text->setLines(textLines(*m_race));
    m_breakdown->setRows(breakdownRows(*m_race));
    updateTitle();
}

void Dashboard::updateTitle() {
    // Presentation: the speedup is the headline, the largest text on screen.
    const QString text = m_presentation && !m_headline.isEmpty() ? m_headline : m_titleText;
    if (m_title->text() != text) {
        m_title->setText(text);
    }
}

void Dashboard::setThroughputScale(Scale scale) {
    m_scale = scale;
    {
        const QSignalBlocker block(m_scaleBox);
        m_scaleBox->setCurrentIndex(static_cast<int>(scale));
    }
    refreshCharts();
}

bool Dashboard::wantLog() {
    if (m_scale != Scale::Auto) {
        return m_scale == Scale::Log;
    }
    // Lanes' recent median throughputs; log above a 10x spread, back to linear below 5x (a
    // race near the threshold must not flip axes every second).
    std::vector<double> rates;
    for (const auto& h : m_race->histories()) {
        if (auto r = h.medianSamplesPerSec(50)) {
            rates.push_back(*r);
        }
    }
    if (rates.size() >= 2) {
        m_autoLog = wantsLogAxis(rates, m_autoLog ? 5.0 : 10.0);
    }
    return m_autoLog;
}

void Dashboard::refreshCharts() {
    QElapsedTimer clock;
    clock.start();
    double paintMs = 0;
    const auto& histories = m_race->histories();
    // One x range for every chart: the widest of their rounded auto ranges.
    const auto axis = static_cast<XAxis>(std::max(0, m_xAxis->currentIndex()));
    double xMax = 0;
    for (const auto& h : histories) {
        for (bool eval : {false, true}) {
            if (const auto& xs = xColumn(h, axis, eval); !xs.empty()) {
                xMax = std::max(xMax, xs.back());
            }
        }
    }
    if (axis == XAxis::Time) {
        xMax = std::max(xMax, m_fixedXMax);
    }
    double shared = 0;
    for (auto* c : charts()) {
        shared = std::max(shared, c->autoXTicks(xMax).hi);
    }
    m_throughput->setLogScale(wantLog());
    const BandSources bands = m_race->bandSources();
    for (auto* c : charts()) {
        c->setSharedXMax(shared);
        c->setBandSources(bands);
        c->refresh(histories);
        paintMs += c->view()->lastPaintMs();
    }
    const double cost = static_cast<double>(clock.nsecsElapsed()) / 1e6 + paintMs;
    m_chartCostMs = m_chartCostMs == 0 ? cost : 0.8 * m_chartCostMs + 0.2 * cost;
    m_sinceCharts.restart();
}

void Dashboard::refreshSummary() {
    if (auto s = m_race->summary()) {
        m_summary->showSummary(*s, m_race->lanes());
        // Where the audience looks: why a lane with more resources is slower, in words (it
        // covers the shared cores of a live race too); else the sharing warning.
        m_strip->setBadge(s->explanations.empty() ? m_sharingNote
                                                  : tr("Why? ") + QString::fromStdString(s->explanations.front()));
    }
}

void Dashboard::setSharingNote(const QString& note) {
    m_sharingNote = note;
    m_strip->setBadge(note);
}

void Dashboard::setRepeatNote(const QString& note) {
    m_repeatLabel->setText(note);
    m_repeatLabel->setVisible(!note.isEmpty());
}

QString Dashboard::repeatNote() const { return m_repeatLabel->text(); }

void Dashboard::setDark(bool dark) {
    for (auto* c : charts()) {
        c->setDark(dark);
    }
}

void Dashboard::setPresentation(bool on, double fontScale) {
    m_presentation = on;
    m_summary->setVisible(!on);
    m_controls->setVisible(!on);
    m_modeLabel->setVisible(!on && !m_modeLabel->text().isEmpty());
    for (auto* c : charts()) {
        c->setFontScale(fontScale);
    }
    m_strip->setFontScale(fontScale);
    m_text->setFontScale(fontScale);
    m_breakdown->setFontScale(fontScale);
    QFont titleFont = font();
    titleFont.setBold(true);
    // 1.4x the body text; in presentation 2x the scaled text, above the strip's 1.35x names.
    titleFont.setPointSizeF(titleFont.pointSizeF() * (on ? 2.0 : 1.4) * fontScale);
    m_title->setFont(titleFont);
    // The repeats' verdict is what the audience asks about: as large as the strip's status text.
    QFont repeatFont = font();
    repeatFont.setBold(true);
    repeatFont.setPointSizeF(repeatFont.pointSizeF() * (on ? 1.3 : 1.0) * fontScale);
    m_repeatLabel->setFont(repeatFont);
    updateTitle();
    fitHeights(true);
}

} // namespace devicerace::ui
