#include "setup_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QEvent>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include "devicerace/device_info.h"
#include "devicerace/preset.h"
#include "devicerace/workload.h"
#include "devicerace/errors.h"
#include "background_task.h"
#include "charts/palette.h"
#include "devicerace/frameworks.h"
#include "lanes_table.h"
#include "script_picker.h"

namespace devicerace::ui {

SetupPanel::SetupPanel(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    auto* title = new QLabel(tr("<b>RACE SETUP</b>"), this);
    layout->addWidget(title);
    m_form = new QWidget(this);
    auto* form = new QFormLayout(m_form);
    m_formLayout = form;
    form->setContentsMargins(0, 0, 0, 0);
    m_preset = new QComboBox(this);
    m_preset->setObjectName(QStringLiteral("preset"));
    m_preset->addItem(tr("(none)"));
    for (const auto& name : presetNames()) {
        m_preset->addItem(QString::fromStdString(name));
    }
    m_preset->setToolTip(tr("The seed experiments as ready races; they adapt to this machine"));
    form->addRow(tr("Preset"), m_preset);
    m_presetRace = new QComboBox(this);
    m_presetRace->setVisible(false);
    form->addRow(m_presetRace);
    m_presetNotes = new QLabel(this);
    m_presetNotes->setWordWrap(true);
    m_presetNotes->setObjectName(QStringLiteral("presetNotes"));
    m_presetNotes->setVisible(false);
    form->addRow(m_presetNotes);
    m_workload = new QComboBox(this);
    m_workload->setObjectName(QStringLiteral("workload"));
    for (const auto& w : workloads()) {
        m_workload->addItem(QString::fromStdString(w.name), QString::fromStdString(w.name));
        m_workload->setItemData(m_workload->count() - 1, QString::fromStdString(w.description), Qt::ToolTipRole);
    }
    // A user's own training command, run once per lane (README, "Race your own training").
    m_workload->addItem(tr("Your script…"), QString::fromLatin1(kScriptWorkload));
    m_workload->setItemData(m_workload->count() - 1,
                            tr("Your own training script, run once per lane with the lane's device and threads"),
                            Qt::ToolTipRole);
    form->addRow(tr("Workload"), m_workload);
    m_script = new ScriptPicker(this);
    m_script->setObjectName(QStringLiteral("scriptPicker"));
    form->addRow(m_script);
    m_workloadInfo = new QLabel(this);
    m_workloadInfo->setWordWrap(true);
    m_workloadInfo->setTextFormat(Qt::PlainText); // a rich-text label asks for 9 lines where 3 do
    m_workloadInfo->setObjectName(QStringLiteral("workloadInfo"));
    form->addRow(m_workloadInfo);
    colourNotes();
    m_data = new QComboBox(this);
    m_data->addItem(tr("default (real where available)"), QString());
    m_data->addItem(tr("real"), QStringLiteral("real"));
    m_data->addItem(tr("synthetic"), QStringLiteral("synthetic"));
    form->addRow(tr("Data"), m_data);
    auto* lengthRow = new QHBoxLayout();
    m_length = new QSpinBox(this);
    m_length->setRange(1, 100000000);
    m_length->setValue(1);
    m_lengthUnit = new QComboBox(this);
    m_lengthUnit->addItems({tr("epochs"), tr("steps")});
    lengthRow->addWidget(m_length);
    lengthRow->addWidget(m_lengthUnit);
    form->addRow(tr("Length"), lengthRow);
    m_target = new QDoubleSpinBox(this);
    m_target->setObjectName(QStringLiteral("target"));
    m_target->setRange(0.01, 1.0);
    m_target->setDecimals(3);
    m_target->setSingleStep(0.01);
    m_targetLabel = new QLabel(tr("Target accuracy"), this);
    form->addRow(m_targetLabel, m_target);
    auto* evalRow = new QHBoxLayout();
    m_evalMode = new QComboBox(this);
    m_evalMode->setObjectName(QStringLiteral("evalMode"));
    m_evalMode->addItems({tr("≈10 times per race"), tr("every N steps"), tr("at epoch ends")});
    m_evalMode->setToolTip(tr("When lanes measure test accuracy (each evaluation pauses the lane's clock)"));
    m_evalSteps = new QSpinBox(this);
    m_evalSteps->setObjectName(QStringLiteral("evalSteps"));
    m_evalSteps->setRange(1, 100000000);
    m_evalSteps->setValue(100);
    m_evalSteps->setSuffix(tr(" steps"));
    m_evalSteps->setVisible(false);
    evalRow->addWidget(m_evalMode, 1);
    evalRow->addWidget(m_evalSteps);
    form->addRow(tr("Evaluate"), evalRow);
    connect(m_evalMode, &QComboBox::currentIndexChanged, this, [this](int i) { m_evalSteps->setVisible(i == 1); });
    m_seed = new QSpinBox(this);
    m_seed->setRange(0, 1 << 30);
    // Is the gap real? The whole race again with fresh lanes: medians and spreads at the end.
    m_repeats = new QSpinBox(this);
    m_repeats->setRange(1, 20);
    m_repeats->setObjectName(QStringLiteral("repeats"));
    m_repeats->setToolTip(tr("Run the whole race this many times with fresh lanes; the speedups are then given "
                             "as median ± spread, and a gap within the spread is called noise"));
    auto* seedRow = new QHBoxLayout();
    seedRow->addWidget(m_seed, 1);
    seedRow->addWidget(new QLabel(tr("repeats"), this));
    seedRow->addWidget(m_repeats);
    form->addRow(tr("Seed"), seedRow);
    m_fair = new QCheckBox(tr("Fair mode: one lane at a time, each alone on the machine"), this);
    form->addRow(m_fair);
    layout->addWidget(m_form);

    auto* lanesHeader = new QHBoxLayout();
    lanesHeader->addWidget(new QLabel(tr("<b>LANES</b>"), this));
    lanesHeader->addStretch(1);
    auto* add = new QPushButton(tr("+ Add"), this);
    auto* dup = new QPushButton(tr("Duplicate"), this);
    auto* remove = new QPushButton(tr("Remove"), this);
    add->setObjectName(QStringLiteral("addLane"));
    dup->setObjectName(QStringLiteral("duplicateLane"));
    remove->setObjectName(QStringLiteral("removeLane"));
    for (auto* b : {add, dup, remove}) {
        lanesHeader->addWidget(b);
    }
    layout->addLayout(lanesHeader);
    m_lanes = new LanesTable(this);
    layout->addWidget(m_lanes, 1);
    connect(add, &QPushButton::clicked, this, [this] {
        LaneSpec s;
        s.threads = 1;
        m_lanes->addLane(s);
    });
    connect(dup, &QPushButton::clicked, this, [this] { m_lanes->duplicateLane(std::max(0, m_lanes->currentRow())); });
    connect(remove, &QPushButton::clicked, this, [this] {
        m_lanes->removeLane(m_lanes->currentRow() >= 0 ? m_lanes->currentRow() : m_lanes->rowCount() - 1);
    });
    connect(m_workload, &QComboBox::currentTextChanged, this, [this] {
        const auto& w = findWorkload(currentWorkload());
        showScriptRows(w.name == kScriptWorkload);
        showTargetKind(w, std::nullopt);
        if (m_lengthUnit->currentIndex() == 0) {
            m_length->setValue(w.defaultEpochs);
        }
        updateWorkloadInfo();
    });
    connect(m_preset, &QComboBox::currentIndexChanged, this, [this](int index) {
        if (index > 0) {
            loadPreset(m_preset->currentText(), 0);
        } else {
            m_presetRace->setVisible(false);
            m_presetNotes->setVisible(false);
        }
    });
    connect(m_presetRace, &QComboBox::activated, this, [this](int race) { loadPreset(m_preset->currentText(), race); });
    // The first race is the engine's (defaultRace: what it shows and why, the same as the CLI's):
    // without a GPU its CPU lanes run in fair mode, one at a time, each alone on the machine.
    const auto race = defaultRace();
    RaceSpec first;
    first.workload = race.workload;
    first.lanes = race.lanes;
    first.fair = race.fair;
    first.steps = race.steps;
    setRaceSpec(first);
    // Every change is checked against the engine's plan (cheap: headers, no process).
    connect(m_lanes, &LanesTable::lanesChanged, this, &SetupPanel::validate);
    connect(m_workload, &QComboBox::currentTextChanged, this, &SetupPanel::validate);
    connect(m_data, &QComboBox::currentIndexChanged, this, &SetupPanel::validate);
    connect(m_lengthUnit, &QComboBox::currentIndexChanged, this, &SetupPanel::validate);
    connect(m_lengthUnit, &QComboBox::currentIndexChanged, this,
            [this](int unit) { m_length->setEnabled(unit == 1 || currentWorkload() != kScriptWorkload); });
    connect(m_length, &QSpinBox::valueChanged, this, &SetupPanel::validate);
    connect(m_fair, &QCheckBox::toggled, this, &SetupPanel::validate);
    connect(m_script, &ScriptPicker::changed, this, &SetupPanel::validate);
    validate();
}

bool SetupPanel::loadPreset(const QString& name, int race, QString* error) {
    try {
        const auto preset = devicerace::loadPreset(name.toStdString());
        if (race < 0 || race >= static_cast<int>(preset.races.size())) {
            throw UsageError("no such race in the preset");
        }
        {
            const QSignalBlocker block(m_presetRace);
            m_presetRace->clear();
            for (const auto& r : preset.races) {
                m_presetRace->addItem(QString::fromStdString(r.title));
            }
            m_presetRace->setCurrentIndex(race);
            m_presetRace->setVisible(preset.races.size() > 1);
        }
        if (const int shown = m_preset->findText(name); shown >= 0 && shown != m_preset->currentIndex()) {
            const QSignalBlocker block(m_preset); // loaded from code: the box names it too
            m_preset->setCurrentIndex(shown);
        }
        const auto& chosen = preset.races[static_cast<std::size_t>(race)];
        setRaceSpec(chosen.spec);
        QStringList notes;
        for (const auto& n : chosen.notes) {
            notes << QString::fromStdString(n);
        }
        m_presetNotes->setText(notes.join(QLatin1Char('\n')));
        m_presetNotes->setVisible(!notes.isEmpty());
        fitWrappedLabels();
        m_preset->setToolTip(QString::fromStdString(preset.description));
        if (chosen.standIn) {
            Q_EMIT standInOffered(QString::fromStdString(chosen.standIn->string()));
        }
        return true;
    } catch (const std::exception& e) {
        if (error) {
            *error = QString::fromStdString(e.what());
        }
        m_presetNotes->setText(QString::fromStdString(e.what()));
        m_presetNotes->setVisible(true);
        fitWrappedLabels();
        return false;
    }
}

void SetupPanel::resizeEvent(QResizeEvent* event) {
    QWidget::resizeEvent(event);
    fitWrappedLabels();
}

void SetupPanel::fitWrappedLabels() {
    // QFormLayout gives a wrapped label that spans its row fewer lines than the label's width
    // needs (the preset's notes and the workload's description lost their last line at
    // 1280x720): each asks for the height of its text at the form's width, which a spanning
    // row takes whole (a label not laid out yet still has Qt's default width of 100 px).
    for (auto* label : {m_presetNotes, m_workloadInfo}) {
        label->setMinimumHeight(0); // QLabel's heightForWidth never answers below the minimum
        label->setMinimumHeight(label->isHidden() ? 0 : label->heightForWidth(m_form->contentsRect().width()));
    }
}

void SetupPanel::showScriptRows(bool script) {
    // A script's data and accuracy are its own: no data mode, no target (and the rows they leave
    // make room for the script's three at 1280x720).
    m_formLayout->setRowVisible(m_script, script);
    m_formLayout->setRowVisible(m_workloadInfo, !script); // the entry's tooltip says what it does
    m_formLayout->setRowVisible(m_data, !script);
    m_formLayout->setRowVisible(m_target, !script);
    // A script runs its own length unless stopped at N steps (--steps).
    m_lengthUnit->setItemText(0, script ? tr("the script's own") : tr("epochs"));
    m_length->setEnabled(!script || m_lengthUnit->currentIndex() == 1);
}

std::string SetupPanel::currentWorkload() const { return m_workload->currentData().toString().toStdString(); }

void SetupPanel::rememberScript() {
    if (currentWorkload() == kScriptWorkload) {
        m_script->remember();
    }
}

void SetupPanel::updateWorkloadInfo() {
    const auto& w = findWorkload(currentWorkload());
    if (w.name == kScriptWorkload) {
        m_workloadInfo->setText(tr("Your command, once per lane with the lane's device and threads (README, "
                                   "\"Race your own training\")"));
        fitWrappedLabels();
        return;
    }
    m_workloadInfo->setText(tr("%1\ndata: %2 · batch %3 · %4")
                                .arg(QString::fromStdString(w.description), QString::fromStdString(w.dataset))
                                .arg(w.defaultBatch)
                                .arg(QString::fromStdString(w.optimizer)));
    fitWrappedLabels();
}

RaceSpec SetupPanel::raceSpec() const {
    RaceSpec spec;
    spec.workload = currentWorkload();
    const bool script = spec.workload == kScriptWorkload;
    const QString data = m_data->currentData().toString();
    if (!data.isEmpty() && !script) {
        spec.data = data == QStringLiteral("synthetic") ? DataMode::Synthetic : DataMode::Real;
    }
    if (script) {
        spec.command = m_script->command();
        if (m_lengthUnit->currentIndex() == 1) {
            spec.steps = m_length->value(); // the script's own length, unless stopped at N steps
        }
    } else if (m_lengthUnit->currentIndex() == 0) {
        spec.epochs = m_length->value();
    } else {
        spec.steps = m_length->value();
    }
    if (findWorkload(spec.workload).defaultTargetLoss) {
        spec.targetLoss = m_target->value(); // a language model races to a validation loss
    } else if (!script) {
        spec.targetAccuracy = m_target->value(); // a script has none but the CLI's --target-accuracy
    }
    spec.seed = static_cast<std::uint64_t>(m_seed->value());
    spec.fair = m_fair->isChecked();
    spec.lanes = m_lanes->lanes();
    spec.evalEverySteps = m_evalMode->currentIndex() == 1 ? m_evalSteps->value() : 0;
    spec.autoEvaluations = m_evalMode->currentIndex() == 0;
    return spec;
}

RacePlan SetupPanel::plan() const {
    PlanOptions options;
    options.askFrameworks = false; // never a Python start-up on the GUI thread
    return resolveRace(raceSpec(), options);
}

void SetupPanel::validate() {
    std::vector<QString> problems(static_cast<std::size_t>(m_lanes->rowCount()));
    // A row whose keys do not parse says so itself; the others get the plan's word.
    bool parsed = true;
    for (int r = 0; r < m_lanes->rowCount(); ++r) {
        problems[static_cast<std::size_t>(r)] = m_lanes->rowParseProblem(r);
        parsed = parsed && problems[static_cast<std::size_t>(r)].isEmpty();
    }
    if (parsed) {
        try {
            const auto plan = this->plan();
            for (std::size_t i = 0; i < plan.lanes.size() && i < problems.size(); ++i) {
                const auto& lane = plan.lanes[i];
                problems[i] = lane.checking ? tr("checking framework=%1 on this machine…")
                                                  .arg(QString::fromStdString(lane.spec.framework.value_or("")))
                                            : QString::fromStdString(lane.problem);
            }
            checkFrameworksInBackground(plan);
        } catch (const std::exception&) {
            // a value the widgets cannot hold: Start names it
        }
    }
    for (int r = 0; r < m_lanes->rowCount(); ++r) {
        m_lanes->setRowProblem(r, problems[static_cast<std::size_t>(r)]);
    }
    Q_EMIT validated();
}

void SetupPanel::checkFrameworksInBackground(const RacePlan& plan) {
    for (const auto& lane : plan.lanes) {
        if (!lane.checking) {
            continue;
        }
        const QString framework = QString::fromStdString(lane.spec.framework.value_or(""));
        if (m_asking.contains(framework)) {
            continue;
        }
        m_asking << framework;
        // Up to ~10 s on a cold cache (the Python starts): off the GUI thread; the answer is
        // cached in the engine, so the next validate() reads it.
        runInBackground(
            this, [name = framework.toStdString()] { return frameworkProblem(name); },
            [this, framework](const std::string&) {
                m_asking.removeAll(framework);
                validate();
            });
    }
}

void SetupPanel::setRaceSpec(const RaceSpec& spec) {
    const QSignalBlocker block(m_workload);
    m_workload->setCurrentIndex(std::max(0, m_workload->findData(QString::fromStdString(spec.workload))));
    const auto& w = findWorkload(currentWorkload());
    showScriptRows(w.name == kScriptWorkload);
    if (w.name == kScriptWorkload) {
        m_script->setCommand(spec.command);
    }
    m_data->setCurrentIndex(!spec.data ? 0 : *spec.data == DataMode::Real ? 1 : 2);
    if (spec.steps) {
        m_lengthUnit->setCurrentIndex(1);
        m_length->setValue(static_cast<int>(*spec.steps));
    } else {
        m_lengthUnit->setCurrentIndex(0);
        m_length->setValue(spec.epochs.value_or(w.defaultEpochs));
    }
    showTargetKind(w, w.defaultTargetLoss ? spec.targetLoss : spec.targetAccuracy);
    m_seed->setValue(static_cast<int>(spec.seed));
    m_fair->setChecked(spec.fair);
    // 0 (no interval given) takes the window's default: about ten evaluations per race.
    m_evalMode->setCurrentIndex(spec.evalEverySteps > 0 ? 1 : 0);
    if (spec.evalEverySteps > 0) {
        m_evalSteps->setValue(static_cast<int>(std::min<std::int64_t>(spec.evalEverySteps, 100000000)));
    }
    m_lanes->setLanes(spec.lanes.empty() ? defaultLanes() : spec.lanes);
    updateWorkloadInfo();
}

std::vector<QColor> SetupPanel::laneColors() const { return m_lanes->colors(); }

bool SetupPanel::autoEvaluations() const { return m_evalMode->currentIndex() == 0; }

std::pair<int, int> SetupPanel::evalSetting() const { return {m_evalMode->currentIndex(), m_evalSteps->value()}; }

void SetupPanel::setEvalSetting(int mode, int steps) {
    if (mode >= 0 && mode < m_evalMode->count()) {
        m_evalMode->setCurrentIndex(mode);
    }
    if (steps >= m_evalSteps->minimum() && steps <= m_evalSteps->maximum()) {
        m_evalSteps->setValue(steps);
    }
}

int SetupPanel::repeats() const { return m_repeats->value(); }

void SetupPanel::setRepeats(int repeats) { m_repeats->setValue(repeats); }

void SetupPanel::setEditable(bool editable) {
    m_form->setEnabled(editable);
    m_lanes->setEnabled(editable);
    for (auto* b : findChildren<QPushButton*>()) {
        if (b->parent() == this) {
            b->setEnabled(editable);
        }
    }
}

void SetupPanel::showTargetKind(const WorkloadInfo& w, std::optional<double> value) {
    const bool loss = w.defaultTargetLoss.has_value();
    m_targetLabel->setText(loss ? tr("Target val loss") : tr("Target accuracy"));
    m_target->setToolTip(loss ? tr("The race's clock stops at each lane's first validation loss at or below this")
                              : tr("The race's clock stops at each lane's first test accuracy at or above this"));
    m_target->setRange(0.01, loss ? 20.0 : 1.0);
    m_target->setValue(value.value_or(loss ? *w.defaultTargetLoss : w.defaultTarget));
}

void SetupPanel::colourNotes() {
    const QColor background = palette().color(QPalette::Window);
    // 4.8:1 asked: small antialiased text draws a little lighter than its colour (4.49:1
    // measured in the drawn pixels of a 4.5:1 grey).
    constexpr double kSmallText = 4.8;
    const auto colour = [](QLabel* label, const QColor& c) {
        QPalette p = label->palette();
        p.setColor(QPalette::WindowText, c);
        label->setPalette(p);
    };
    colour(m_presetNotes, warningOn(background, kSmallText));
    colour(m_workloadInfo, readableOn(QColor(0x80, 0x80, 0x80), background, kSmallText));
}

void SetupPanel::changeEvent(QEvent* event) {
    QWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange) {
        colourNotes();
    }
}

} // namespace devicerace::ui
