#include "recording_menu.h"

#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMenu>

namespace devicerace::ui {

namespace {
// Recordings listed in the menu; older ones are one "Other…" away.
constexpr int kRecent = 10;
// A manifest larger than this is not read for a menu line (bytes).
constexpr qint64 kMaxManifest = 1 << 20;
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
    QStringList lanes;
    for (const auto& l : m.value(QStringLiteral("lanes")).toArray()) {
        lanes << l.toObject().value(QStringLiteral("name")).toString();
    }
    QString when = m.value(QStringLiteral("started_at")).toString().left(16);
    when.replace(QLatin1Char('T'), QLatin1Char(' '));
    return m.value(QStringLiteral("workload")).toString() + QStringLiteral(" · ") + lanes.join(QObject::tr(" vs ")) +
           QStringLiteral(" · ") + when;
}

void fillRecordingMenu(QMenu* menu, const QString& runsDir, QWidget* dialogParent,
                       const std::function<void(const QString&)>& open) {
    menu->clear();
    const auto dirs = QDir(runsDir).entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Time);
    int listed = 0;
    for (const auto& info : dirs) {
        const QString text = describeRecording(info.absoluteFilePath());
        if (text.isEmpty()) {
            continue;
        }
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
