#include "exporter.h"

#include <QBuffer>
#include <QCoreApplication>
#include <QEvent>
#include <QDir>
#include <QFileInfo>
#include <QSettings>
#include <QStandardPaths>
#include <QImage>
#include <QPainter>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QWidget>

namespace devicerace::ui {

namespace {
[[noreturn]] void fail(const QString& path, const QString& why) {
    throw ExportError(QObject::tr("%1: %2").arg(path, why).toStdString());
}

// Lays out what changed since the last pass of the event loop before a widget is rendered: a
// screenshot taken as a race ends (the same turn that sets the strip's why-line) drew the
// strip at its old height, its wrapped note under the table. A strip that grows can narrow
// the note's lines and ask again, so a few passes.
void settleLayouts() {
    for (int pass = 0; pass < 3; ++pass) {
        QCoreApplication::sendPostedEvents(nullptr, QEvent::LayoutRequest);
    }
}
} // namespace

void saveBytes(const QString& path, const QByteArray& data) {
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
        fail(path, QObject::tr("cannot write: %1").arg(file.errorString()));
    }
    if (file.write(data) != data.size()) {
        file.cancelWriting();
        fail(path, QObject::tr("write failed: %1").arg(file.errorString()));
    }
    if (!file.commit()) {
        fail(path, QObject::tr("could not be saved: %1").arg(file.errorString()));
    }
}

void savePng(QWidget* widget, const QString& path, QSize size) {
    settleLayouts();
    if (size.isEmpty()) {
        size = widget->size();
    }
    QImage image(size, QImage::Format_ARGB32_Premultiplied);
    image.fill(widget->palette().color(QPalette::Window));
    {
        QPainter painter(&image);
        painter.setRenderHint(QPainter::Antialiasing);
        painter.scale(static_cast<double>(size.width()) / widget->width(),
                      static_cast<double>(size.height()) / widget->height());
        widget->render(&painter, QPoint(), QRegion(), QWidget::DrawWindowBackground | QWidget::DrawChildren);
    }
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    if (!image.save(&buffer, "PNG")) {
        fail(path, QObject::tr("PNG encoding failed"));
    }
    saveBytes(path, bytes);
}

void saveSvg(QWidget* widget, const QString& path) {
    settleLayouts();
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    QSvgGenerator svg;
    svg.setOutputDevice(&buffer);
    svg.setSize(widget->size());
    svg.setViewBox(QRect(QPoint(), widget->size()));
    svg.setTitle(QStringLiteral("DeviceRace"));
    {
        QPainter painter(&svg);
        widget->render(&painter, QPoint(), QRegion(), QWidget::DrawWindowBackground | QWidget::DrawChildren);
    }
    saveBytes(path, bytes);
}

QString exportStartPath(const QString& fileName) {
    QString folder = QSettings().value(QStringLiteral("export/lastFolder")).toString();
    if (folder.isEmpty() || !QFileInfo(folder).isDir()) {
        folder = QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation);
    }
    if (folder.isEmpty() || !QFileInfo(folder).isDir()) {
        folder = QDir::homePath();
    }
    return fileName.isEmpty() ? folder : QDir(folder).filePath(fileName);
}

void rememberExportPath(const QString& chosen) {
    if (chosen.isEmpty()) {
        return;
    }
    const QFileInfo info(chosen);
    QSettings().setValue(QStringLiteral("export/lastFolder"),
                         info.isDir() ? info.absoluteFilePath() : info.absolutePath());
}

} // namespace devicerace::ui
