#include "lanes_table.h"

#include <QColorDialog>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHeaderView>
#include <QLineEdit>
#include <QPalette>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardItemModel>

#include <cmath>

#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/frameworks.h"
#include "devicerace/lane_keys.h"
#include "devicerace/recording.h"
#include "remote_hosts.h"
#include "charts/palette.h"

namespace devicerace::ui {

QString laneSpecText(const LaneSpec& s) { return QString::fromStdString(formatLaneSpec(s)); }

namespace {
// The devicerace-cli the Hosts dialog names for every host of a lane (its own host, or each
// rank's), when they agree; nullopt: on the host's PATH, or typed as cli= in the lane.
std::optional<std::string> hostsCli(const LaneSpec& s) {
    std::vector<std::string> hosts;
    for (const auto& m : s.members) {
        hosts.push_back(m.host);
    }
    if (s.members.empty()) {
        hosts.push_back(s.host);
    }
    std::optional<std::string> cli;
    for (const auto& host : hosts) {
        if (host.empty()) {
            return std::nullopt; // a rank on this machine runs this machine's devicerace-cli
        }
        std::optional<std::string> mine;
        for (const auto& h : RemoteHosts::instance().hosts()) {
            try {
                if (parseSshTarget(h.url.toStdString()).url() == parseSshTarget(host).url() && !h.cli.isEmpty()) {
                    mine = h.cli.toStdString();
                }
            } catch (const UsageError&) {
            }
        }
        if (!mine || (cli && *cli != *mine)) {
            return std::nullopt;
        }
        cli = mine;
    }
    return cli;
}

// The device combo's value for a spec: "cpu", "cuda:0", or "ssh://gpubox/cuda:0".
QString deviceValue(const LaneSpec& spec) {
    if (!spec.launcher.empty()) {
        // "slurm:///cpu", "slurm://login1/cuda:0-7", "attach://10.0.0.5:29400/cuda": the device part.
        const auto text = formatLaneSpec(spec);
        return QString::fromStdString(text.substr(0, text.find(',')));
    }
    if (!spec.members.empty()) {
        // A data-parallel lane's ranks: "cuda:0-7", "ssh://a/cpu+ssh://b/cpu".
        std::string out;
        for (const auto& m : spec.members) {
            out += (out.empty() ? "" : "+") + (m.host.empty() ? m.device : m.host + "/" + m.device);
        }
        return QString::fromStdString(out);
    }
    const std::string device = spec.device == "cuda" ? "cuda:0" : spec.device;
    return QString::fromStdString(spec.host.empty() ? device : spec.host + "/" + device);
}
} // namespace

QString extraOptionsText(const LaneSpec& s) {
    QStringList keys;
    for (const auto& key : laneKeys()) {
        if (const auto value = laneKeyValue(s, key.name); !key.windowColumn && !value.empty()) {
            keys << QString::fromStdString(key.name + "=" + value);
        }
    }
    return keys.join(QLatin1Char(','));
}

QString extraKeysHelp() {
    QStringList lines{QObject::tr("More lane keys, as in devicerace-cli (key=value, comma-separated):")};
    for (const auto& key : laneKeys()) {
        if (!key.windowColumn) {
            lines << QString::fromStdString(key.name + ": " + key.help + " (default: " + key.defaultText + "; " +
                                            key.appliesTo + ")");
        }
    }
    return lines.join(QLatin1Char('\n'));
}

LaneSpec laneDevice(const QString& value) {
    try {
        return parseLaneSpec(value.toStdString());
    } catch (const std::exception&) {
        LaneSpec s;
        s.device = value.toStdString(); // refused with its reason at Start
        return s;
    }
}

QString deviceProblem(const std::string& device) { return QString::fromStdString(devicerace::deviceProblem(device)); }

namespace {

void paintSwatch(QPushButton* button, const QColor& color) {
    button->setProperty("laneColor", color);
    button->setStyleSheet(QStringLiteral("background:%1;border:1px solid #444;").arg(color.name()));
}

QComboBox* deviceCombo(QWidget* parent) {
    auto* combo = new QComboBox(parent);
    auto* model = new QStandardItemModel(combo);
    auto add = [&](const QString& text, const QString& value, bool enabled, const QString& tip) {
        auto* item = new QStandardItem(text);
        item->setData(value, Qt::UserRole);
        item->setToolTip(tip);
        if (!enabled) {
            item->setFlags(item->flags() & ~(Qt::ItemIsEnabled | Qt::ItemIsSelectable));
        }
        model->appendRow(item);
    };
    const auto& r = deviceReport();
    add(QStringLiteral("cpu"), QStringLiteral("cpu"), true, QString::fromStdString(r.cpu.model));
    for (const auto& g : r.gpus) {
        const auto name = QStringLiteral("cuda:%1").arg(g.index);
        add(name + QStringLiteral(" · ") + QString::fromStdString(g.name), name, true, QString::fromStdString(g.name));
    }
    if (!r.cudaAvailable) {
        const auto why = QString::fromStdString(r.cudaUnavailableReason);
        add(QObject::tr("cuda (unavailable: %1)").arg(why), QStringLiteral("cuda"), false, why);
    }
    // A Slurm cluster reachable from here (its srun): lanes whose ranks Slurm starts; the nodes,
    // tasks (workers=), partition and limits go in the lane's more options (docs/PARALLEL.md).
    if (!localSrun().empty()) {
        add(QObject::tr("Slurm job · cpu"), QStringLiteral("slurm:///cpu"), true,
            QObject::tr("srun starts the ranks: nodes=, workers= (tasks per node), partition=, time=, queue="));
        add(QObject::tr("Slurm job · cuda"), QStringLiteral("slurm:///cuda"), true,
            QObject::tr("srun starts one rank per GPU: cuda:0-7 in the lane's device for 8 per node"));
    }
    // The hosts of Settings → Hosts…: their devices once they answered, else greyed with why.
    for (const auto& h : RemoteHosts::instance().hosts()) {
        const QString host = QString::fromStdString(parseSshTarget(h.url.toStdString()).host);
        if (h.status != RemoteHosts::Status::Reachable) {
            const QString why = h.status == RemoteHosts::Status::Unreachable ? h.reason : QObject::tr("checking…");
            add(QStringLiteral("%1 (%2)").arg(h.url, why), h.url, false, why);
            continue;
        }
        add(host + QStringLiteral(" · cpu"), RemoteHosts::laneDevice(h, QStringLiteral("cpu")), true,
            QString::fromStdString(h.report.cpu.model));
        for (const auto& g : h.report.gpus) {
            const auto name = QStringLiteral("cuda:%1").arg(g.index);
            add(host + QStringLiteral(" · ") + name + QStringLiteral(" · ") + QString::fromStdString(g.name),
                RemoteHosts::laneDevice(h, name), true, QString::fromStdString(g.name));
        }
        if (h.report.gpus.empty()) {
            const auto why = QString::fromStdString(h.report.cudaUnavailableReason);
            add(host + QObject::tr(" · cuda (unavailable: %1)").arg(why),
                RemoteHosts::laneDevice(h, QStringLiteral("cuda")), false, why);
        }
    }
    combo->setModel(model);
    // The long "unavailable: why" items must not widen the column: the reason is in the
    // list and in the tooltip.
    combo->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    combo->setMinimumContentsLength(6);
    return combo;
}

// Selects `value` in a device combo; a device not offered stays what was asked for: a local
// one greyed with the reason (never silently a CPU lane; Start refuses it as the CLI does), a
// remote one as it is (its host checks it when the race starts).
void selectDevice(QComboBox* combo, const QString& value, const LaneSpec& spec) {
    int found = combo->findData(value);
    // Elsewhere: an ssh:// host, or a cluster's job; their devices are checked there at Start.
    const bool elsewhere = !spec.host.empty() || !spec.launcher.empty();
    if (found < 0 && !elsewhere) {
        found = combo->findData(QString::fromStdString(spec.device));
    }
    if (found < 0) {
        const QString why = elsewhere ? QObject::tr("checked at Start") : deviceProblem(spec.device);
        auto* model = qobject_cast<QStandardItemModel*>(combo->model());
        auto* item = new QStandardItem(value + QStringLiteral(" (") + why + QLatin1Char(')'));
        item->setData(value, Qt::UserRole);
        item->setToolTip(why);
        if (!elsewhere) {
            item->setFlags(item->flags() & ~(Qt::ItemIsEnabled | Qt::ItemIsSelectable));
        }
        model->appendRow(item);
        found = combo->count() - 1;
    }
    combo->setCurrentIndex(found);
}

} // namespace

LanesTable::LanesTable(QWidget* parent) : QTableWidget(parent) {
    setColumnCount(ColCount);
    setHorizontalHeaderLabels({QString(), tr("name"), tr("device"), tr("threads"), tr("batch"), tr("lr"),
                               tr("precision"), tr("$/h"), tr("more options")});
    verticalHeader()->setVisible(false);
    horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    horizontalHeader()->setStretchLastSection(true);
    // What differs between lanes first (device, threads, batch, precision), so a narrow setup
    // panel shows it without scrolling; name, lr, cost and more options follow.
    auto* header = horizontalHeader();
    const int order[] = {ColColor, ColDevice, ColThreads, ColBatch, ColPrecision, ColName, ColLr, ColCost, ColOptions};
    for (int visual = 0; visual < ColCount; ++visual) {
        header->moveSection(header->visualIndex(order[visual]), visual);
    }
    setSelectionBehavior(QAbstractItemView::SelectRows);
    setSelectionMode(QAbstractItemView::SingleSelection);
    connect(&RemoteHosts::instance(), &RemoteHosts::changed, this, &LanesTable::refreshDevices);
}

void LanesTable::refreshDevices() {
    for (int r = 0; r < rowCount(); ++r) {
        auto* old = qobject_cast<QComboBox*>(cellWidget(r, ColDevice));
        if (!old) {
            continue;
        }
        const LaneSpec current = laneDevice(old->currentData().toString());
        auto* combo = deviceCombo(this);
        selectDevice(combo, old->currentData().toString(), current);
        setCellWidget(r, ColDevice, combo); // deletes the old one
    }
}

QColor LanesTable::nextColor() const {
    // The first palette colour no lane uses yet.
    auto used = colors();
    for (int i = 0; i < 64; ++i) {
        if (std::find(used.begin(), used.end(), laneColor(i)) == used.end()) {
            return laneColor(i);
        }
    }
    return laneColor(rowCount());
}

void LanesTable::addLane(const LaneSpec& spec, std::optional<QColor> color) {
    const int row = rowCount();
    insertRow(row);
    auto* swatch = new QPushButton(this);
    swatch->setFixedWidth(28);
    swatch->setToolTip(tr("Lane colour (same in every chart)"));
    paintSwatch(swatch, color.value_or(nextColor()));
    connect(swatch, &QPushButton::clicked, this, [this, swatch] {
        QColor c = QColorDialog::getColor(swatch->property("laneColor").value<QColor>(), this, tr("Lane colour"));
        if (c.isValid()) {
            paintSwatch(swatch, c);
            Q_EMIT lanesChanged();
        }
    });
    setCellWidget(row, ColColor, swatch);

    auto* name = new QLineEdit(QString::fromStdString(spec.name), this);
    name->setPlaceholderText(tr("auto"));
    name->setMaximumWidth(fontMetrics().horizontalAdvance(QStringLiteral("cuda:0·bf16#2")) + 12);
    setCellWidget(row, ColName, name);

    auto* device = deviceCombo(this);
    selectDevice(device, deviceValue(spec), spec);
    setCellWidget(row, ColDevice, device);

    auto* threads = new QSpinBox(this);
    threads->setRange(0, std::max(1, deviceReport().cpu.logicalCpus) * 4);
    threads->setSpecialValueText(tr("auto"));
    threads->setValue(spec.threads.value_or(0));
    setCellWidget(row, ColThreads, threads);

    auto* batch = new QSpinBox(this);
    batch->setRange(0, 1 << 20);
    batch->setSpecialValueText(tr("default"));
    batch->setValue(static_cast<int>(spec.batch.value_or(0)));
    setCellWidget(row, ColBatch, batch);

    auto* lr = new QLineEdit(spec.lr ? QString::number(*spec.lr, 'g', 12) : QString(), this);
    lr->setPlaceholderText(tr("default"));
    setCellWidget(row, ColLr, lr);

    auto* precision = new QComboBox(this);
    precision->addItems({QStringLiteral("fp32"), QStringLiteral("bf16"), QStringLiteral("fp16")});
    precision->setCurrentText(QString::fromStdString(toString(spec.precision)));
    setCellWidget(row, ColPrecision, precision);

    auto* cost = new QDoubleSpinBox(this);
    cost->setRange(0, 1000);
    cost->setDecimals(2);
    cost->setSpecialValueText(tr("–"));
    cost->setValue(spec.costPerHour.value_or(0));
    setCellWidget(row, ColCost, cost);

    auto* options = new QLineEdit(extraOptionsText(spec), this);
    options->setPlaceholderText(QStringLiteral("lstm=cells,wd=5e-4,…"));
    setCellWidget(row, ColOptions, options);
    // Every edit is checked against the race's plan (SetupPanel::validate).
    connect(options, &QLineEdit::editingFinished, this, &LanesTable::lanesChanged);
    connect(name, &QLineEdit::editingFinished, this, &LanesTable::lanesChanged);
    connect(lr, &QLineEdit::editingFinished, this, &LanesTable::lanesChanged);
    connect(device, &QComboBox::currentIndexChanged, this, &LanesTable::lanesChanged);
    connect(precision, &QComboBox::currentIndexChanged, this, &LanesTable::lanesChanged);
    connect(threads, &QSpinBox::valueChanged, this, &LanesTable::lanesChanged);
    connect(batch, &QSpinBox::valueChanged, this, &LanesTable::lanesChanged);
    Q_EMIT lanesChanged();
}

LaneSpec LanesTable::rowOptions(int row) const {
    // Applied to the lane's own device: some keys depend on it (backend=nccl, workers).
    LaneSpec spec = laneDevice(qobject_cast<QComboBox*>(cellWidget(row, ColDevice))->currentData().toString());
    const QString extra = qobject_cast<QLineEdit*>(cellWidget(row, ColOptions))->text().trimmed();
    try {
        setLaneKeys(spec, extra.toStdString());
    } catch (const UsageError& e) {
        throw UsageError(QObject::tr("lane %1: %2").arg(row + 1).arg(QString::fromStdString(e.what())).toStdString());
    }
    return spec;
}

std::optional<double> LanesTable::rowLr(int row) const {
    // Checked by the lane key's own parser: the CLI's message, word for word.
    const QString lr = qobject_cast<QLineEdit*>(cellWidget(row, ColLr))->text().trimmed();
    if (lr.isEmpty()) {
        return std::nullopt;
    }
    try {
        LaneSpec spec;
        setLaneKey(spec, "lr", lr.toStdString());
        return spec.lr;
    } catch (const UsageError& e) {
        throw UsageError(QObject::tr("lane %1: %2").arg(row + 1).arg(QString::fromStdString(e.what())).toStdString());
    }
}

QString LanesTable::rowProblem(int row) const {
    const QWidget* w = cellWidget(row, ColOptions);
    return w ? w->property("problem").toString() : QString();
}

QString LanesTable::rowParseProblem(int row) const {
    if (!qobject_cast<QLineEdit*>(cellWidget(row, ColOptions)) ||
        !qobject_cast<QComboBox*>(cellWidget(row, ColDevice))) {
        return {};
    }
    try {
        rowOptions(row);
        rowLr(row);
        return {};
    } catch (const std::exception& e) {
        return QString::fromStdString(e.what());
    }
}

void LanesTable::setRowProblem(int row, const QString& why) {
    const QString tip = extraKeysHelp();
    for (int c = ColName; c < ColCount; ++c) {
        QWidget* w = cellWidget(row, c);
        if (!w) {
            continue;
        }
        // Greyed as a disabled row reads, still editable (so the options can be mended).
        // Only the text roles are set, so the rest follows the theme; QPalette() inherits all.
        QPalette p;
        if (!why.isEmpty()) {
            for (auto group : {QPalette::Active, QPalette::Inactive}) {
                p.setColor(group, QPalette::Text, palette().color(QPalette::Disabled, QPalette::Text));
                p.setColor(group, QPalette::ButtonText, palette().color(QPalette::Disabled, QPalette::ButtonText));
            }
        }
        w->setPalette(p);
        w->setProperty("unusable", !why.isEmpty());
        w->setProperty("problem", why);
        // Every cell of a greyed row says why on hover (the device's list keeps its own hints).
        w->setToolTip(c == ColOptions && why.isEmpty() ? tip : why);
    }
    if (auto* swatch = cellWidget(row, ColColor)) {
        swatch->setToolTip(why.isEmpty() ? tr("Lane colour (same in every chart)") : why);
    }
}

void LanesTable::removeLane(int row) {
    if (row >= 0 && row < rowCount()) {
        removeRow(row);
        Q_EMIT lanesChanged();
    }
}

void LanesTable::duplicateLane(int row) {
    auto all = lanes();
    if (row >= 0 && row < static_cast<int>(all.size())) {
        auto copy = all[static_cast<std::size_t>(row)];
        copy.name.clear();
        addLane(copy);
    }
}

void LanesTable::setLanes(const std::vector<LaneSpec>& lanes) {
    setRowCount(0);
    for (const auto& l : lanes) {
        addLane(l);
    }
}

std::vector<LaneSpec> LanesTable::lanes() const {
    std::vector<LaneSpec> out;
    for (int r = 0; r < rowCount(); ++r) {
        // The device and "more options" (checked with it), then each column through its lane key.
        LaneSpec s = rowOptions(r);
        s.name = qobject_cast<QLineEdit*>(cellWidget(r, ColName))->text().trimmed().toStdString();
        if (int t = qobject_cast<QSpinBox*>(cellWidget(r, ColThreads))->value(); t > 0) {
            setLaneKey(s, "threads", std::to_string(t));
        }
        if (int b = qobject_cast<QSpinBox*>(cellWidget(r, ColBatch))->value(); b > 0) {
            setLaneKey(s, "batch", std::to_string(b));
        }
        s.lr = rowLr(r);
        setLaneKey(s, "precision", qobject_cast<QComboBox*>(cellWidget(r, ColPrecision))->currentText().toStdString());
        if (double c = qobject_cast<QDoubleSpinBox*>(cellWidget(r, ColCost))->value(); c > 0) {
            s.costPerHour = c;
        }
        if (!s.cli) {
            s.cli = hostsCli(s); // Settings → Hosts…: "devicerace-cli there"
        }
        out.push_back(s);
    }
    return out;
}

std::vector<QColor> LanesTable::colors() const {
    std::vector<QColor> out;
    for (int r = 0; r < rowCount(); ++r) {
        if (auto* w = cellWidget(r, ColColor)) {
            out.push_back(w->property("laneColor").value<QColor>());
        }
    }
    return out;
}

void LanesTable::setLaneColor(int row, const QColor& color) {
    if (auto* b = qobject_cast<QPushButton*>(cellWidget(row, ColColor))) {
        paintSwatch(b, color);
    }
}

} // namespace devicerace::ui
