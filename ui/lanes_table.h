#pragma once
// The lanes of the race being set up: device (unusable ones greyed with the reason),
// threads, batch, learning rate, precision, $/hour, name and colour. GUI thread only.
#include <QTableWidget>

#include <vector>

#include "devicerace/lane_spec.h"

namespace devicerace::ui {

/// "cpu,threads=2,batch=64,name=laptop": the CLI's lane syntax (used for settings too).
QString laneSpecText(const LaneSpec& spec);
/// The keys without a column of their own ("lstm=cells,wd=0.0005"), as the CLI writes them.
QString extraOptionsText(const LaneSpec& spec);
/// The "more options" keys with their help, defaults and lanes (the engine's lane-key table).
QString extraKeysHelp();

/// Why `device` cannot race on this machine, in the CLI's words ("device cuda: CUDA is not
/// available: no NVIDIA driver found ..."), or "" when it can.
QString deviceProblem(const std::string& device);
/// The device (and host, for "ssh://host/DEVICE") of a device-picker value.
LaneSpec laneDevice(const QString& value);

class LanesTable : public QTableWidget {
    Q_OBJECT
public:
    enum Column {
        ColColor,
        ColName,
        ColDevice,
        ColThreads,
        ColBatch,
        ColLr,
        ColPrecision,
        ColCost,
        ColOptions,
        ColCount
    };
    explicit LanesTable(QWidget* parent = nullptr);

    void addLane(const LaneSpec& spec, std::optional<QColor> color = std::nullopt);
    void removeLane(int row);
    void duplicateLane(int row);
    void setLanes(const std::vector<LaneSpec>& lanes);
    /// Reads every row; throws UsageError naming the row when a value is bad.
    std::vector<LaneSpec> lanes() const;
    std::vector<QColor> colors() const;
    void setLaneColor(int row, const QColor& color);
    /// Why row `row` cannot race here ("lane keras-jax: framework=keras-jax: keras, jax are not
    /// installed ...; run scripts/setup --frameworks", "checking…"), or "": what the setup panel
    /// last set from the race's plan (the row is greyed with it; Start refuses it).
    QString rowProblem(int row) const;
    void setRowProblem(int row, const QString& problem);
    /// Why the row's device and options do not parse as a lane (the CLI's message), or "".
    QString rowParseProblem(int row) const;
    /// Rebuilds the device pickers (Settings → Hosts… answered), keeping each lane's device.
    void refreshDevices();

Q_SIGNALS:
    void lanesChanged();

private:
    QColor nextColor() const;
    /// The row's device and Options keys, parsed as the CLI parses a lane ("cuda:0,lstm=cells");
    /// throws UsageError naming the row when a key is bad.
    LaneSpec rowOptions(int row) const;
    /// The row's learning rate (unset when empty); throws UsageError naming the row.
    std::optional<double> rowLr(int row) const;
};

} // namespace devicerace::ui
