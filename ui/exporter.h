#pragma once
// Saving what the window shows: PNG (chosen size) or SVG of any widget, and bytes written
// atomically with every write checked. Errors throw ExportError with the path and reason.
// GUI thread only.
#include <QByteArray>
#include <QSize>
#include <QString>

#include <stdexcept>

class QWidget;

namespace devicerace::ui {

class ExportError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Writes `data` to `path` through QSaveFile (atomic replace; a short write is an error).
void saveBytes(const QString& path, const QByteArray& data);
/// Renders `widget` scaled to `size` (the widget's own size when empty) and saves a PNG.
void savePng(QWidget* widget, const QString& path, QSize size = {});
/// Renders `widget` as SVG.
void saveSvg(QWidget* widget, const QString& path);

/// Where an export dialog opens: the folder of the last export (settings), else the user's
/// Documents (else home) folder — never the program's working directory — with `fileName`.
QString exportStartPath(const QString& fileName = {});
/// Remembers the folder of a chosen export path for the next dialog ("" is ignored).
void rememberExportPath(const QString& chosen);

} // namespace devicerace::ui
