#pragma once
// Export → Video: asks for the file, size, speed-up and frame rate, then renders with a
// progress bar (cancellable). GUI thread only.
#include <QString>
#include <QStringList>

class QWidget;

namespace devicerace::ui {

/// Runs the dialog for `recordings`; returns the saved path, or "" (with `error` set when
/// something failed rather than being cancelled).
QString runVideoDialog(QWidget* parent, const QStringList& recordings, QString* error);

} // namespace devicerace::ui
