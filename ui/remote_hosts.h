#pragma once
// The machines the user races over ssh (Settings → Hosts…), with what each offers: its devices
// when reachable, the reason when not. Probing runs off the GUI thread (ssh may take seconds);
// results arrive as changed(). GUI thread only.
#include <QObject>
#include <QString>
#include <QVector>

#include <memory>

#include "devicerace/device_info.h"

namespace devicerace::ui {

class RemoteHosts : public QObject {
    Q_OBJECT
public:
    enum class Status { Unchecked, Checking, Reachable, Unreachable };
    struct Host {
        QString url; // "ssh://[user@]host[:port]"
        QString cli; // the devicerace-cli there ("" = on its PATH)
        Status status = Status::Unchecked;
        QString reason;      // Unreachable: why, in the engine's words
        DeviceReport report; // Reachable: its devices
    };

    /// The application's list (loaded from QSettings on first use).
    static RemoteHosts& instance();

    const QVector<Host>& hosts() const { return m_hosts; }
    /// Replaces the list (validated: throws UsageError naming a bad URL), saves it and probes it.
    void setHosts(const QVector<QPair<QString, QString>>& urlsAndClis);
    /// Asks every host again for its devices.
    void probeAll();
    /// The lane-spec device for one of a host's devices: "ssh://gpubox/cuda:0".
    static QString laneDevice(const Host& host, const QString& device);

Q_SIGNALS:
    void changed();

private:
    explicit RemoteHosts(QObject* parent = nullptr);
    void probe(int index);
    void save() const;

    QVector<Host> m_hosts;
    std::shared_ptr<int> m_generation; // bumps on every new list; late answers for an old list are dropped
};

} // namespace devicerace::ui
