#include "recording_menu.h"

#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMenu>
#include <QSet>

#include <cmath>
#include <optional>

#include "devicerace/metric_sample.h"

namespace devicerace::ui {

namespace {
// Recordings listed in the menu; older ones are one "Other…" away.
constexpr int kRecent = 10;
// A manifest larger than this is not read for a menu line (bytes).
constexpr qint64 kMaxManifest = 1 << 20;
// The tail of a lane file read for its result (bytes): its last evaluation and final state.
constexpr qint64 kTail = 16 << 10;

// "0.830 in 0:07" / "stopped at step 90": a lane's result from the end of its file.
QString laneResult(const QString& file) {
    QFile f(file);
    if (!f.open(QIODevice::ReadOnly)) {
        return {};
    }
    f.seek(std::max<qint64>(0, f.size() - kTail));
    const QList<QByteArray> lines = f.readAll().split('\n');
    std::optional<MetricSample> last, lastEval;
    for (const auto& line : lines) {
        try {
            auto s = sampleFromJsonLine(line.toStdString());
            if (s.kind == SampleKind::Eval && s.accuracy) {
                lastEval = s;
            }
            last = std::move(s);
        } catch (const std::exception&) { // the first (cut) line of the tail, or a cut last one
        }
    }
    if (!last) {
        return {};
    }
    const auto secs = static_cast<qint64>(std::llround(last->time));
    const QString time = QStringLiteral("%1:%2").arg(secs / 60).arg(secs % 60, 2, 10, QLatin1Char('0'));
    const QString acc = lastEval ? QString::number(*lastEval->accuracy, 'f', 3) + QLatin1Char(' ') : QString();
    if (last->kind == SampleKind::State && last->state == LaneState::Finished) {
        return acc + QObject::tr("in %1").arg(time);
    }
    if (last->kind == SampleKind::State && isTerminal(last->state)) {
        return QString::fromStdString(toString(last->state)) + QObject::tr(" at step %1").arg(last->step);
    }
    return acc + QObject::tr("cut at %1").arg(time);
}
} // namespace

QString describeRecording(const QString& dir) {
    QFile f(dir + QStringLiteral("/manifest.json"));
    if (f.size() > kMaxManifest || !f.open(QIODevice::ReadOnly)) {
        return {};
    }
    const auto m = QJsonDocument::fromJson(f.readAll()).object();
    if (m.isEmpty() || !m.contains(QStringLiteral("lanes"))) {
        return {};
    }
    QStringList lanes, results;
    for (const auto& l : m.value(QStringLiteral("lanes")).toArray()) {
        const auto lane = l.toObject();
        const QString name = lane.value(QStringLiteral("name")).toString();
        lanes << name;
        const QString file = lane.value(QStringLiteral("file")).toString();
        if (!file.isEmpty() && !file.contains(QLatin1Char('/')) && !file.contains(QStringLiteral(".."))) {
            if (const QString r = laneResult(dir + QLatin1Char('/') + file); !r.isEmpty()) {
                results << name + QLatin1Char(' ') + r;
            }
        }
    }
    QString when = m.value(QStringLiteral("started_at")).toString().left(19);
    when.replace(QLatin1Char('T'), QLatin1Char(' '));
    return m.value(QStringLiteral("workload")).toString() + QStringLiteral(" · ") + lanes.join(QObject::tr(" vs ")) +
           QStringLiteral(" · ") + when +
           (results.isEmpty() ? QString() : QStringLiteral(" — ") + results.join(QStringLiteral(", ")));
}

void fillRecordingMenu(QMenu* menu, const QString& runsDir, QWidget* dialogParent,
                       const std::function<void(const QString&)>& open) {
    menu->clear();
    const auto dirs = QDir(runsDir).entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Time);
    int listed = 0;
    QSet<QString> shown;
    for (const auto& info : dirs) {
        QString text = describeRecording(info.absoluteFilePath());
        if (text.isEmpty()) {
            continue;
        }
        if (shown.contains(text)) { // two races alike to the second: the folder tells them apart
            text += QStringLiteral(" (") + info.fileName() + QLatin1Char(')');
        }
        shown.insert(text);
        const QString path = info.absoluteFilePath();
        menu->addAction(text, menu, [open, path] { open(path); })->setToolTip(path);
        if (++listed == kRecent) {
            break;
        }
    }
    if (listed == 0) {
        menu->addAction(QObject::tr("(no recordings in %1 yet)").arg(QDir::toNativeSeparators(runsDir)))
            ->setEnabled(false);
    }
    menu->addSeparator();
    menu->addAction(QObject::tr("Other recording…"), menu, [dialogParent, runsDir, open] {
        const QString manifest = QFileDialog::getOpenFileName(dialogParent, QObject::tr("Open a recording"), runsDir,
                                                              QObject::tr("DeviceRace recording (manifest.json)"));
        if (!manifest.isEmpty()) {
            open(QFileInfo(manifest).absolutePath());
        }
    });
}

} // namespace devicerace::ui
