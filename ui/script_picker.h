#pragma once
// The "Your script…" workload's row: the user's own training command, built from the
// interpreter (the first python3 on PATH, or one chosen), the script (typed, picked in a file
// dialog or taken from the recent ones) and its arguments. Naming a script here is the user's
// consent to run it; presets and recordings never fill it. GUI thread only.
#include <QWidget>

#include <string>
#include <vector>

class QComboBox;
class QLineEdit;

namespace devicerace::ui {

class ScriptPicker : public QWidget {
    Q_OBJECT
public:
    explicit ScriptPicker(QWidget* parent = nullptr);

    /// The command as the lanes run it (an argv, never through a shell): [interpreter] script
    /// arguments...; empty while no script is named. Arguments split as a shell would (quotes),
    /// without expanding anything.
    std::vector<std::string> command() const;
    /// Shows `command` (from the window's command line after --): a Python interpreter first is
    /// put in its field, the script and the rest in theirs.
    void setCommand(const std::vector<std::string>& command);
    /// Remembers the current script first among the recent ones (at most kRecent), for the next
    /// session too (QSettings "scripts/recent").
    void remember();
    static constexpr int kRecent = 8;

Q_SIGNALS:
    void changed();

private:
    void browse();
    QLineEdit* m_interpreter = nullptr;
    QComboBox* m_script = nullptr; // editable: typed, browsed or recent
    QLineEdit* m_args = nullptr;
};

/// The first python3 on PATH ("python3" when none is found: the race then says so).
QString defaultInterpreter();

} // namespace devicerace::ui
