#include "main_window.h"

#include <QSettings>

#include "dashboard.h"
#include "devicerace/device_info.h"
#include "devicerace/exports.h"
#include "devicerace/recording.h"
#include "devicerace/tensorboard.h"
#include "devicerace/workload.h"
#include "exporter.h"
#include "lanes_table.h"
#include "race_controller.h"
#include "setup_panel.h"

// The window's exports and its saved settings (split from main_window.cpp).
namespace devicerace::ui {

QString MainWindow::exportDashboardPng(const QString& path, QSize size) {
    try {
        savePng(m_dashboard, path, size);
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

QString MainWindow::exportDashboardSvg(const QString& path) {
    try {
        saveSvg(m_dashboard, path);
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

QString MainWindow::exportCsv(const QString& path) {
    try {
        m_race->writeCsv(path);
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

QString MainWindow::exportJson(const QString& path) {
    auto summary = m_race->summary();
    if (!summary) {
        return tr("%1: nothing to export yet: run a race first").arg(path);
    }
    try {
        saveBytes(path, QByteArray::fromStdString(summaryToJson(*summary)));
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

QString MainWindow::exportTensorBoard(const QString& dir) {
    // TensorBoard files are written from recordings: the race's own and those opened.
    QStringList recordings = m_race->recordingDirs();
    if (!m_race->recordDir().isEmpty() && !m_race->running()) {
        recordings.prepend(m_race->recordDir());
    }
    if (recordings.isEmpty()) {
        return tr("%1: nothing to export: race with recording on (Record), or open a recording").arg(dir);
    }
    try {
        for (const auto& rec : recordings) {
            const auto recording = readRecording(rec.toStdString());
            // One folder per recording when there are several (lane names may repeat).
            const std::filesystem::path out =
                recordings.size() == 1
                    ? std::filesystem::path(dir.toStdString())
                    : std::filesystem::path(dir.toStdString()) / std::filesystem::path(rec.toStdString()).filename();
            writeTensorBoard(recording, out);
        }
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

void MainWindow::restoreWindowSettings() {
    QSettings s;
    restoreGeometry(s.value(QStringLiteral("window/geometry")).toByteArray());
    fitToScreen(); // saved on a bigger screen, perhaps
    setDarkTheme(s.value(QStringLiteral("window/dark"), false).toBool());
}

bool MainWindow::restoreSettings() {
    restoreWindowSettings();
    QSettings s;
    if (!s.contains(QStringLiteral("race/workload"))) {
        return false;
    }
    RaceSpec spec;
    try {
        spec.workload = s.value(QStringLiteral("race/workload")).toString().toStdString();
        findWorkload(spec.workload);
        const QString data = s.value(QStringLiteral("race/data")).toString();
        if (data == QStringLiteral("synthetic") || data == QStringLiteral("real")) {
            spec.data = data == QStringLiteral("real") ? DataMode::Real : DataMode::Synthetic;
        }
        if (s.contains(QStringLiteral("race/steps"))) {
            spec.steps = s.value(QStringLiteral("race/steps")).toLongLong();
        } else {
            spec.epochs = s.value(QStringLiteral("race/epochs"), 1).toInt();
        }
        spec.targetAccuracy = s.value(QStringLiteral("race/target"), 0.85).toDouble();
        spec.seed = s.value(QStringLiteral("race/seed"), 0).toULongLong();
        spec.fair = s.value(QStringLiteral("race/fair"), false).toBool();
        for (const auto& text : s.value(QStringLiteral("race/lanes")).toStringList()) {
            auto lane = parseLaneSpec(text.toStdString());
            if (lane.device != "cpu" && !deviceReport().cudaAvailable) {
                continue; // a GPU lane from another machine
            }
            spec.lanes.push_back(lane);
        }
    } catch (const std::exception&) {
        return false; // settings from another version: keep the defaults
    }
    m_setup->setRaceSpec(spec);
    m_setup->setEvalSetting(s.value(QStringLiteral("race/evalMode"), 0).toInt(),
                            s.value(QStringLiteral("race/evalSteps"), 100).toInt());
    return true;
}

void MainWindow::saveSettings() const {
    if (!m_savesSettings) {
        return;
    }
    QSettings s;
    s.setValue(QStringLiteral("window/geometry"), saveGeometry());
    s.setValue(QStringLiteral("window/dark"), m_dark);
    RaceSpec spec;
    try {
        spec = m_setup->raceSpec();
    } catch (const std::exception&) {
        return;
    }
    s.setValue(QStringLiteral("race/workload"), QString::fromStdString(spec.workload));
    s.setValue(QStringLiteral("race/data"), spec.data ? QString::fromStdString(toString(*spec.data)) : QString());
    s.remove(QStringLiteral("race/steps"));
    s.remove(QStringLiteral("race/epochs"));
    if (spec.steps) {
        s.setValue(QStringLiteral("race/steps"), static_cast<qlonglong>(*spec.steps));
    } else {
        s.setValue(QStringLiteral("race/epochs"), spec.epochs.value_or(1));
    }
    s.setValue(QStringLiteral("race/target"), spec.targetAccuracy.value_or(0.85));
    s.setValue(QStringLiteral("race/seed"), static_cast<qulonglong>(spec.seed));
    s.setValue(QStringLiteral("race/fair"), spec.fair);
    const auto [evalMode, evalSteps] = m_setup->evalSetting();
    s.setValue(QStringLiteral("race/evalMode"), evalMode);
    s.setValue(QStringLiteral("race/evalSteps"), evalSteps);
    QStringList lanes;
    for (const auto& l : spec.lanes) {
        lanes << laneSpecText(l);
    }
    s.setValue(QStringLiteral("race/lanes"), lanes);
}

} // namespace devicerace::ui
