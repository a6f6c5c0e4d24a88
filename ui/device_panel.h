#pragma once
// What the machine offers: CPU model, cores, BLAS (a warning banner for a reference BLAS),
// CUDA devices with memory; live process CPU use and GPU utilisation. GUI thread only.
#include <QColor>
#include <QLabel>

#include <tuple>
#include <QWidget>

#include "devicerace/device_info.h"

namespace devicerace::ui {

class DevicePanel : public QWidget {
    Q_OBJECT
public:
    explicit DevicePanel(QWidget* parent = nullptr);
    /// Re-reads live figures (process CPU %, NVML); call ~1 Hz. While a race runs the CPU figure is
    /// this process's use over the last period; once it ends, the race's average, so a finished
    /// race never reads as the idle window's 1%.
    void refreshLive(bool racing);
    /// The note about lanes sharing CPU cores in live mode ("" hides it).
    void setSharingNote(const QString& note);
    /// Live per-lane CPU use: (lane name, colour, percent of one CPU over the last second).
    /// Lanes whose ranks a cluster's launcher started: "name: job 12 · 2 ranks on node[01-02]".
    void setClusterJobs(const QStringList& jobs);
    void setLaneCpu(const QList<std::tuple<QString, QColor, double>>& lanes);
    QString text() const;
    /// The live line as shown (CPU use, GPUs).
    QString liveText() const;
    /// The lanes' CPU line as shown ("" between races).
    QString laneCpuText() const;
    bool blasWarningVisible() const;

private:
    QLabel* m_static = nullptr;
    QLabel* m_banner = nullptr;
    QLabel* m_live = nullptr;
    QLabel* m_note = nullptr;
    QLabel* m_jobs = nullptr;
    QLabel* m_lanes = nullptr;
    double m_lastCpuSeconds = -1;
    double m_lastWall = 0;
    double m_raceStartCpu = -1;
    double m_raceStartWall = 0;
    QString m_lastRace;
};

} // namespace devicerace::ui
