#include "remote_hosts.h"

#include <QCoreApplication>
#include <QMetaObject>
#include <QPointer>
#include <QSettings>

#include <thread>

#include "devicerace/errors.h"
#include "devicerace/lane_spec.h"

namespace devicerace::ui {

namespace {
const auto kSettingsKey = QStringLiteral("remoteHosts");
} // namespace

RemoteHosts& RemoteHosts::instance() {
    static auto* hosts = new RemoteHosts(QCoreApplication::instance());
    return *hosts;
}

RemoteHosts::RemoteHosts(QObject* parent) : QObject(parent), m_generation(std::make_shared<int>(0)) {
    QSettings s;
    const auto list = s.value(kSettingsKey).toStringList();
    for (const auto& entry : list) {
        // "url\tcli"
        const auto parts = entry.split(QLatin1Char('\t'));
        try {
            Host h;
            h.url = QString::fromStdString(parseSshTarget(parts.value(0).toStdString()).url());
            h.cli = parts.value(1);
            m_hosts.push_back(h);
        } catch (const std::exception&) {
            // A hand-edited setting that no longer parses is dropped, not run.
        }
    }
    probeAll();
}

void RemoteHosts::setHosts(const QVector<QPair<QString, QString>>& urlsAndClis) {
    QVector<Host> hosts;
    for (const auto& [url, cli] : urlsAndClis) {
        Host h;
        h.url = QString::fromStdString(parseSshTarget(url.trimmed().toStdString()).url()); // throws UsageError
        h.cli = cli.trimmed();
        if (h.cli.contains(QLatin1Char(',')) || h.cli.contains(QLatin1Char('\n'))) {
            throw UsageError(
                tr("%1: the devicerace-cli path may not hold a comma or a newline").arg(h.url).toStdString());
        }
        hosts.push_back(h);
    }
    m_hosts = hosts;
    save();
    probeAll();
}

void RemoteHosts::save() const {
    QStringList list;
    for (const auto& h : m_hosts) {
        list << h.url + QLatin1Char('\t') + h.cli;
    }
    QSettings().setValue(kSettingsKey, list);
}

void RemoteHosts::probeAll() {
    m_generation = std::make_shared<int>(*m_generation + 1);
    for (int i = 0; i < m_hosts.size(); ++i) {
        probe(i);
    }
    Q_EMIT changed();
}

void RemoteHosts::probe(int index) {
    auto& host = m_hosts[index];
    host.status = Status::Checking;
    host.reason.clear();
    const std::string url = host.url.toStdString();
    const std::string cli = host.cli.toStdString();
    QPointer<RemoteHosts> self(this);
    std::weak_ptr<int> generation = m_generation;
    // ssh may take up to its ConnectTimeout (10 s) plus the worker's start: off the GUI thread.
    std::thread([self, generation, index, url, cli] {
        Host result;
        try {
            result.report = remoteDeviceReport(url, cli);
            result.status = Status::Reachable;
        } catch (const std::exception& e) {
            result.status = Status::Unreachable;
            result.reason = QString::fromStdString(e.what());
        }
        if (generation.expired()) {
            return; // the list changed, or the window closed, meanwhile
        }
        QMetaObject::invokeMethod(
            self.data(),
            [self, generation, index, result] {
                if (!self || generation.expired() || index >= self->m_hosts.size()) {
                    return; // the list changed meanwhile
                }
                auto& h = self->m_hosts[index];
                h.status = result.status;
                h.reason = result.reason;
                h.report = result.report;
                Q_EMIT self->changed();
            },
            Qt::QueuedConnection);
    }).detach();
}

QString RemoteHosts::laneDevice(const Host& host, const QString& device) {
    return host.url + QLatin1Char('/') + device;
}

} // namespace devicerace::ui
