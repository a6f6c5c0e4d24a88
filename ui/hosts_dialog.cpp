#include "hosts_dialog.h"

#include <QDialogButtonBox>
#include <QEvent>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

#include "charts/palette.h"
#include "remote_hosts.h"

namespace devicerace::ui {

namespace {

enum Column { ColUrl, ColCli, ColStatus };

QString statusText(const RemoteHosts::Host& h) {
    switch (h.status) {
    case RemoteHosts::Status::Unchecked: return QObject::tr("not checked");
    case RemoteHosts::Status::Checking: return QObject::tr("checking…");
    case RemoteHosts::Status::Unreachable: return h.reason;
    case RemoteHosts::Status::Reachable: {
        QStringList parts{QString::fromStdString(h.report.cpu.model)};
        for (const auto& g : h.report.gpus) {
            parts << QStringLiteral("cuda:%1 %2").arg(g.index).arg(QString::fromStdString(g.name));
        }
        if (h.report.gpus.empty()) {
            parts << QObject::tr("no CUDA device");
        }
        return parts.join(QStringLiteral(" · "));
    }
    }
    return {};
}

} // namespace

HostsDialog::HostsDialog(QWidget* parent)
    : QDialog(parent), m_table(new QTableWidget(this)), m_error(new QLabel(this)) {
    setWindowTitle(tr("Hosts"));
    auto* layout = new QVBoxLayout(this);
    auto* intro = new QLabel(tr("Machines to race over ssh, as ssh://[user@]host[:port] (names from your ~/.ssh/config "
                                "work). DeviceRace runs your ssh client without prompting and stores no secrets; the "
                                "host needs DeviceRace installed."),
                             this);
    intro->setWordWrap(true);
    layout->addWidget(intro);
    m_table->setColumnCount(3);
    m_table->setHorizontalHeaderLabels({tr("host"), tr("devicerace-cli there"), tr("status")});
    m_table->horizontalHeaderItem(ColCli)->setToolTip(
        tr("The devicerace-cli program on that host, used by every lane there (blank: the one on its PATH)"));
    // Every header in full: the first two fit their titles and contents, the status takes the rest.
    m_table->horizontalHeader()->setSectionResizeMode(ColUrl, QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setSectionResizeMode(ColCli, QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setSectionResizeMode(ColStatus, QHeaderView::Stretch);
    m_table->horizontalHeader()->setMinimumSectionSize(120);
    setMinimumWidth(720);
    m_table->setObjectName(QStringLiteral("hostsTable"));
    layout->addWidget(m_table);
    auto* buttons = new QHBoxLayout;
    auto* add = new QPushButton(tr("Add"), this);
    auto* remove = new QPushButton(tr("Remove"), this);
    auto* check = new QPushButton(tr("Check again"), this);
    buttons->addWidget(add);
    buttons->addWidget(remove);
    buttons->addWidget(check);
    buttons->addStretch();
    layout->addLayout(buttons);
    m_error->setObjectName(QStringLiteral("hostsError"));
    colourError();
    m_error->setWordWrap(true);
    layout->addWidget(m_error);
    auto* box = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    layout->addWidget(box);
    connect(add, &QPushButton::clicked, this, [this] {
        const int row = m_table->rowCount();
        m_table->insertRow(row);
        m_table->setItem(row, ColUrl, new QTableWidgetItem(QStringLiteral("ssh://")));
        m_table->setItem(row, ColCli, new QTableWidgetItem);
        auto* status = new QTableWidgetItem(tr("not checked"));
        status->setFlags(status->flags() & ~Qt::ItemIsEditable);
        m_table->setItem(row, ColStatus, status);
        m_table->editItem(m_table->item(row, ColUrl));
    });
    connect(remove, &QPushButton::clicked, this, [this] {
        if (m_table->currentRow() >= 0) {
            m_table->removeRow(m_table->currentRow());
        }
    });
    connect(check, &QPushButton::clicked, this, [this] {
        if (apply()) {
            fill();
        }
    });
    connect(box, &QDialogButtonBox::accepted, this, [this] {
        if (apply()) {
            accept();
        }
    });
    connect(box, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(&RemoteHosts::instance(), &RemoteHosts::changed, this, &HostsDialog::refreshStatus);
    fill();
    resize(900, 320);
}

void HostsDialog::fill() {
    const auto& hosts = RemoteHosts::instance().hosts();
    m_table->setRowCount(static_cast<int>(hosts.size()));
    for (int r = 0; r < hosts.size(); ++r) {
        m_table->setItem(r, ColUrl, new QTableWidgetItem(hosts[r].url));
        m_table->setItem(r, ColCli, new QTableWidgetItem(hosts[r].cli));
        auto* status = new QTableWidgetItem;
        status->setFlags(status->flags() & ~Qt::ItemIsEditable);
        m_table->setItem(r, ColStatus, status);
    }
    refreshStatus();
}

void HostsDialog::refreshStatus() {
    const auto& hosts = RemoteHosts::instance().hosts();
    for (int r = 0; r < m_table->rowCount() && r < hosts.size(); ++r) {
        if (auto* item = m_table->item(r, ColStatus); item && m_table->item(r, ColUrl)->text() == hosts[r].url) {
            item->setText(statusText(hosts[r]));
            item->setToolTip(statusText(hosts[r]));
        }
    }
}

bool HostsDialog::apply() {
    QVector<QPair<QString, QString>> entries;
    for (int r = 0; r < m_table->rowCount(); ++r) {
        const QString url = m_table->item(r, ColUrl) ? m_table->item(r, ColUrl)->text().trimmed() : QString();
        if (url.isEmpty() || url == QStringLiteral("ssh://")) {
            continue;
        }
        entries.push_back({url, m_table->item(r, ColCli) ? m_table->item(r, ColCli)->text() : QString()});
    }
    try {
        RemoteHosts::instance().setHosts(entries);
        m_error->clear();
        return true;
    } catch (const std::exception& e) {
        m_error->setText(QString::fromStdString(e.what()));
        return false;
    }
}

void HostsDialog::colourError() {
    QPalette p = m_error->palette();
    p.setColor(QPalette::WindowText, failureOn(palette().color(QPalette::Window)));
    m_error->setPalette(p);
}

void HostsDialog::changeEvent(QEvent* event) {
    QDialog::changeEvent(event);
    if (event->type() == QEvent::PaletteChange) {
        colourError(); // the theme changed: the message stays readable
    }
}

} // namespace devicerace::ui
