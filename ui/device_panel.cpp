#include "device_panel.h"

#include <QDateTime>
#include <QVBoxLayout>

#include "process_cpu.h"
#include "summary_table.h"

namespace devicerace::ui {

DevicePanel::DevicePanel(QWidget* parent) : QWidget(parent) {
    const auto& r = deviceReport();
    auto* layout = new QVBoxLayout(this);
    m_banner = new QLabel(this);
    m_banner->setWordWrap(true);
    m_banner->setStyleSheet(QStringLiteral("background:#b00020;color:white;padding:6px;border-radius:4px;"));
    m_banner->setText(tr("⚠ LibTorch uses the %1: CPU training is ~17× slower than with an optimised BLAS.")
                          .arg(QString::fromStdString(r.cpu.blas)));
    m_banner->setVisible(r.cpu.blasIsReference);
    layout->addWidget(m_banner);
    QString text = tr("<b>CPU</b> %1 · %2 cores · %3 logical · BLAS: %4")
                       .arg(QString::fromStdString(r.cpu.model).toHtmlEscaped())
                       .arg(r.cpu.physicalCores)
                       .arg(r.cpu.logicalCpus)
                       .arg(QString::fromStdString(r.cpu.blas).toHtmlEscaped());
    for (const auto& g : r.gpus) {
        text += tr("<br><b>GPU%1</b> %2 · %3 · compute %4.%5")
                    .arg(g.index)
                    .arg(QString::fromStdString(g.name).toHtmlEscaped())
                    .arg(formatBytes(g.totalMemoryBytes))
                    .arg(g.computeMajor)
                    .arg(g.computeMinor);
    }
    if (!r.cudaAvailable) {
        text += tr("<br><span style='color:gray'>CUDA unavailable: %1</span>")
                    .arg(QString::fromStdString(r.cudaUnavailableReason).toHtmlEscaped());
    }
    text += tr("<br>LibTorch %1").arg(QString::fromStdString(r.torchVersion));
    m_static = new QLabel(text, this);
    m_static->setWordWrap(true);
    m_static->setTextFormat(Qt::RichText);
    layout->addWidget(m_static);
    m_live = new QLabel(this);
    layout->addWidget(m_live);
    m_lanes = new QLabel(this);
    m_lanes->setTextFormat(Qt::RichText);
    m_lanes->setWordWrap(true);
    layout->addWidget(m_lanes);
    m_jobs = new QLabel(this);
    m_jobs->setWordWrap(true);
    m_jobs->setVisible(false);
    layout->addWidget(m_jobs);
    m_note = new QLabel(this);
    m_note->setWordWrap(true);
    m_note->setVisible(false);
    layout->addWidget(m_note);
    layout->addStretch(1);
    refreshLive(false);
}

void DevicePanel::refreshLive(bool racing) {
    const double cpu = processTreeCpuSeconds(); // the window and its lanes' worker processes
    const double wall = static_cast<double>(QDateTime::currentMSecsSinceEpoch()) / 1000.0;
    QString live;
    if (racing) {
        if (m_raceStartCpu < 0) {
            m_raceStartCpu = cpu;
            m_raceStartWall = wall;
        } else if (m_lastCpuSeconds >= 0 && wall > m_lastWall) {
            live = tr("CPU use of the race: %1%").arg((cpu - m_lastCpuSeconds) / (wall - m_lastWall) * 100, 0, 'f', 0);
        }
    } else if (m_raceStartCpu >= 0) {
        m_lastRace = wall > m_raceStartWall
                         ? tr("CPU use of the last race: %1% on average")
                               .arg((cpu - m_raceStartCpu) / (wall - m_raceStartWall) * 100, 0, 'f', 0)
                         : QString();
        m_raceStartCpu = -1;
    }
    if (!racing) {
        live = m_lastRace;
    }
    m_lastCpuSeconds = cpu;
    m_lastWall = wall;
    for (const auto& g : refreshDeviceReport().gpus) {
        if (g.utilizationPercent) {
            live += tr("  ·  GPU%1 %2% busy, %3 used")
                        .arg(g.index)
                        .arg(*g.utilizationPercent)
                        .arg(g.usedMemoryBytes ? formatBytes(*g.usedMemoryBytes) : QStringLiteral("?"));
        }
    }
    m_live->setText(live);
}

void DevicePanel::setSharingNote(const QString& note) {
    m_note->setText(note);
    m_note->setVisible(!note.isEmpty());
}

void DevicePanel::setClusterJobs(const QStringList& jobs) {
    m_jobs->setText(jobs.isEmpty() ? QString() : tr("Cluster jobs: ") + jobs.join(QStringLiteral("  ·  ")));
    m_jobs->setVisible(!jobs.isEmpty());
}

void DevicePanel::setLaneCpu(const QList<std::tuple<QString, QColor, double>>& lanes) {
    QStringList parts;
    for (const auto& [name, color, percent] : lanes) {
        parts << QStringLiteral("<span style='color:%1'>■</span> %2 %3%")
                     .arg(color.name(), name.toHtmlEscaped())
                     .arg(percent, 0, 'f', 0);
    }
    m_lanes->setText(parts.isEmpty() ? QString() : tr("Lane threads' CPU use: ") + parts.join(QStringLiteral("  ")));
}

QString DevicePanel::liveText() const { return m_live->text(); }
QString DevicePanel::laneCpuText() const { return m_lanes->text(); }
QString DevicePanel::text() const { return m_static->text() + QLatin1Char('\n') + m_note->text(); }
bool DevicePanel::blasWarningVisible() const { return !m_banner->isHidden(); }

} // namespace devicerace::ui
