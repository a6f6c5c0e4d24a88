#include "script_picker.h"

#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QStandardPaths>

namespace devicerace::ui {

namespace {

const QString kRecentKey = QStringLiteral("scripts/recent");

bool isPython(const QString& program) {
    static const QRegularExpression python(QStringLiteral("python[0-9.]*$"));
    return python.match(QFileInfo(program).fileName()).hasMatch();
}

// A word as QProcess::splitCommand reads it back: "..." groups, a literal quote is three of them.
QString quoted(QString word) {
    if (word.isEmpty() || word.contains(QRegularExpression(QStringLiteral("[\\s\"]")))) {
        word = QLatin1Char('"') + word.replace(QStringLiteral("\""), QStringLiteral("\"\"\"")) + QLatin1Char('"');
    }
    return word;
}

QString joined(const std::vector<std::string>& words, std::size_t from, std::size_t to) {
    QStringList out;
    for (std::size_t k = from; k < to; ++k) {
        out << quoted(QString::fromStdString(words[k]));
    }
    return out.join(QLatin1Char(' '));
}

} // namespace

QString defaultInterpreter() {
    const QString found = QStandardPaths::findExecutable(QStringLiteral("python3"));
    return found.isEmpty() ? QStringLiteral("python3") : found;
}

ScriptPicker::ScriptPicker(QWidget* parent) : QWidget(parent) {
    auto* grid = new QGridLayout(this);
    grid->setContentsMargins(0, 0, 0, 0);
    m_script = new QComboBox(this);
    m_script->setObjectName(QStringLiteral("scriptPath"));
    m_script->setEditable(true);
    m_script->setInsertPolicy(QComboBox::NoInsert);
    m_script->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_script->setMinimumContentsLength(12);
    m_script->lineEdit()->setPlaceholderText(tr("train.py"));
    m_script->setToolTip(tr("Your training script or Jupyter notebook, run once per lane with the lane's device and "
                            "threads"));
    m_script->addItems(QSettings().value(kRecentKey).toStringList());
    m_script->setCurrentIndex(-1);
    auto* browse = new QPushButton(tr("Browse…"), this);
    browse->setObjectName(QStringLiteral("browseScript"));
    m_args = new QLineEdit(this);
    m_args->setObjectName(QStringLiteral("scriptArgs"));
    m_args->setPlaceholderText(tr("--epochs 1"));
    m_args->setToolTip(tr("The script's arguments (quotes as in a shell; nothing is expanded)"));
    m_interpreter = new QLineEdit(defaultInterpreter(), this);
    m_interpreter->setObjectName(QStringLiteral("scriptInterpreter"));
    m_interpreter->setToolTip(tr("The program that runs the script, with its options: python3, python3 -u, "
                                 "accelerate launch, torchrun --nproc-per-node 2 (empty: the script is a "
                                 "program itself)"));
    grid->addWidget(new QLabel(tr("Script"), this), 0, 0);
    grid->addWidget(m_script, 0, 1);
    grid->addWidget(browse, 0, 2);
    grid->addWidget(new QLabel(tr("Arguments"), this), 1, 0);
    grid->addWidget(m_args, 1, 1, 1, 2);
    grid->addWidget(new QLabel(tr("Interpreter"), this), 2, 0);
    grid->addWidget(m_interpreter, 2, 1, 1, 2);
    grid->setColumnStretch(1, 1);
    connect(browse, &QPushButton::clicked, this, &ScriptPicker::browse);
    connect(m_script, &QComboBox::currentTextChanged, this, &ScriptPicker::changed);
    connect(m_args, &QLineEdit::textChanged, this, &ScriptPicker::changed);
    connect(m_interpreter, &QLineEdit::textChanged, this, &ScriptPicker::changed);
}

void ScriptPicker::browse() {
    const QString start = m_script->currentText().isEmpty() ? QString() : QFileInfo(m_script->currentText()).path();
    const QString file = QFileDialog::getOpenFileName(this, tr("Your training script"), start,
                                                      tr("Python scripts and notebooks (*.py *.ipynb);;All files (*)"));
    if (!file.isEmpty()) {
        m_script->setCurrentText(file);
    }
}

std::vector<std::string> ScriptPicker::command() const {
    const QString script = m_script->currentText().trimmed();
    if (script.isEmpty()) {
        return {};
    }
    std::vector<std::string> out;
    // The interpreter may be a launcher with its options (accelerate launch, torchrun
    // --nproc-per-node 2): its words, unless it is one program whose path has spaces.
    if (const QString interpreter = m_interpreter->text().trimmed(); QFileInfo(interpreter).isFile()) {
        out.push_back(interpreter.toStdString());
    } else {
        for (const auto& word : QProcess::splitCommand(interpreter)) {
            out.push_back(word.toStdString());
        }
    }
    out.push_back(script.toStdString());
    for (const auto& arg : QProcess::splitCommand(m_args->text())) {
        out.push_back(arg.toStdString());
    }
    return out;
}

void ScriptPicker::setCommand(const std::vector<std::string>& command) {
    // The script is the first .py (or .ipynb) word after the program (what comes before it, the interpreter
    // and its options or a launcher: python3 -u, accelerate launch, torchrun --nproc-per-node 2),
    // else the word after a Python, else the program itself (./train.sh).
    std::size_t script = 0;
    for (std::size_t k = 1; k < command.size() && script == 0; ++k) {
        const QString word = QString::fromStdString(command[k]);
        script = word.endsWith(QStringLiteral(".py")) || word.endsWith(QStringLiteral(".ipynb")) ? k : 0;
    }
    if (script == 0 && command.size() > 1 && isPython(QString::fromStdString(command[0]))) {
        script = 1;
    }
    if (command.empty()) {
        m_interpreter->setText(defaultInterpreter());
    } else {
        m_interpreter->setText(joined(command, 0, script)); // empty: a program of its own
    }
    m_script->setCurrentText(script < command.size() ? QString::fromStdString(command[script]) : QString());
    m_args->setText(command.empty() ? QString() : joined(command, script + 1, command.size()));
}

void ScriptPicker::remember() {
    const QString script = m_script->currentText().trimmed();
    if (script.isEmpty()) {
        return;
    }
    QStringList recent = QSettings().value(kRecentKey).toStringList();
    recent.removeAll(script);
    recent.prepend(script);
    while (recent.size() > kRecent) {
        recent.removeLast();
    }
    QSettings().setValue(kRecentKey, recent);
    const QSignalBlocker block(m_script);
    const QString text = m_script->currentText();
    m_script->clear();
    m_script->addItems(recent);
    m_script->setCurrentText(text);
}

} // namespace devicerace::ui
