#pragma once
// Settings → Hosts…: the ssh:// machines whose devices the lane picker offers, each with what
// it answered (its CPU and GPUs, or why it cannot be reached). GUI thread only.
#include <QDialog>

class QTableWidget;
class QLabel;

namespace devicerace::ui {

class HostsDialog : public QDialog {
    Q_OBJECT
public:
    explicit HostsDialog(QWidget* parent = nullptr);
    /// Saves the edited list into RemoteHosts (and probes it); false with a message when an
    /// entry does not parse.
    bool apply();

protected:
    void changeEvent(QEvent* event) override;

private:
    void colourError();
    void fill();
    void refreshStatus();

    QTableWidget* m_table;
    QLabel* m_error;
};

} // namespace devicerace::ui
