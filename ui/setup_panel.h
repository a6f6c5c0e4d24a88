#pragma once
// Race setup: workload (with its description and data set), data real/synthetic, length
// (epochs or steps), target accuracy, seed, fair mode, and the lanes. GUI thread only.
#include <QStringList>
#include <optional>
#include <QWidget>

#include "devicerace/lane_spec.h"
#include "devicerace/race_plan.h"
#include "devicerace/workload.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QSpinBox;

namespace devicerace::ui {

class LanesTable;
class ScriptPicker;

class SetupPanel : public QWidget {
    Q_OBJECT
public:
    explicit SetupPanel(QWidget* parent = nullptr);

    /// The race as set up; throws UsageError for values the widgets cannot catch.
    RaceSpec raceSpec() const;
    /// The race as it would run (resolveRace, the engine's one decision), without waiting on
    /// anything slow: a framework= lane not yet checked is `checking`. Throws as raceSpec().
    RacePlan plan() const;
    void setRaceSpec(const RaceSpec& spec);
    std::vector<QColor> laneColors() const;
    /// "About ten evaluations per race" is chosen (raceSpec().autoEvaluations: resolveRace
    /// works the interval out from the lanes' step counts).
    /// The evaluation setting as the user left it (0: ≈10 per race, 1: every N steps, 2: at
    /// epoch ends) and N, for the window's saved settings.
    std::pair<int, int> evalSetting() const;
    void setEvalSetting(int mode, int steps);
    bool autoEvaluations() const;
    LanesTable* lanesTable() const { return m_lanes; }
    /// How many times Start runs the race (fresh lanes each time; 1: once).
    int repeats() const;
    void setRepeats(int repeats);
    /// Setup is disabled while a race runs (never a half-applied change).
    void setEditable(bool editable);
    /// The chosen workload's name ("script": the user's own command).
    std::string currentWorkload() const;
    /// A race of the user's script starts: the script joins the recent ones.
    void rememberScript();
    /// Loads race `race` of the named preset into the setup; false (and `error`) when it cannot.
    bool loadPreset(const QString& name, int race, QString* error = nullptr);

Q_SIGNALS:
    /// The rows were checked again (after an edit, or when a slow check answered).
    void validated();
    /// A loaded preset race ships a recording of its GPU lane and this machine has no GPU: the
    /// window shows it beside the live lanes (PresetRace::standIn).
    void standInOffered(const QString& recordingDir);

public:
    /// Checks every row against the plan: each row's problem (or "checking…") greys it, and
    /// frameworks not yet asked are asked off the GUI thread, then the rows are checked again.
    void validate();

protected:
    void resizeEvent(QResizeEvent* event) override;
    /// A new palette (the theme) colours the notes again for it.
    void changeEvent(QEvent* event) override;

private:
    void updateWorkloadInfo();
    // The preset's notes (amber) and the workload's description (grey), readable at 4.5:1 on the
    // panel's background in either theme.
    void colourNotes();
    void fitWrappedLabels();
    void checkFrameworksInBackground(const RacePlan& plan);
    QStringList m_asking; // frameworks being asked about off the GUI thread
    QComboBox* m_preset = nullptr;
    QComboBox* m_presetRace = nullptr;
    QLabel* m_presetNotes = nullptr;
    QComboBox* m_workload = nullptr;
    ScriptPicker* m_script = nullptr;
    QFormLayout* m_formLayout = nullptr;
    void showScriptRows(bool script);
    QLabel* m_workloadInfo = nullptr;
    QComboBox* m_data = nullptr;
    QComboBox* m_lengthUnit = nullptr;
    QSpinBox* m_length = nullptr;
    QDoubleSpinBox* m_target = nullptr;
    QLabel* m_targetLabel = nullptr; // "Target accuracy", or "Target val loss" for a language model
    // Shows the target of the chosen workload's kind (accuracy, or a language model's loss).
    void showTargetKind(const WorkloadInfo& w, std::optional<double> value);
    QSpinBox* m_seed = nullptr;
    QSpinBox* m_repeats = nullptr;
    QComboBox* m_evalMode = nullptr;
    QSpinBox* m_evalSteps = nullptr;
    QCheckBox* m_fair = nullptr;
    LanesTable* m_lanes = nullptr;
    QWidget* m_form = nullptr;
};

} // namespace devicerace::ui
