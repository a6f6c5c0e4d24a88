#include "video_dialog.h"

#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QProgressDialog>

#include "exporter.h"
#include "video_export.h"

namespace devicerace::ui {

QString runVideoDialog(QWidget* parent, const QStringList& recordings, QString* error) {
    const QString path = QFileDialog::getSaveFileName(parent, QObject::tr("Export video"),
                                                      exportStartPath(QStringLiteral("devicerace.mp4")),
                                                      QObject::tr("MP4 video (*.mp4);;Animated GIF (*.gif)"));
    rememberExportPath(path);
    if (path.isEmpty()) {
        return {};
    }
    QDialog dialog(parent);
    dialog.setWindowTitle(QObject::tr("Video"));
    auto* form = new QFormLayout(&dialog);
    auto* size = new QComboBox(&dialog);
    size->addItem(QStringLiteral("1280×720"), QSize(1280, 720));
    size->addItem(QStringLiteral("1920×1080"), QSize(1920, 1080));
    size->addItem(QStringLiteral("640×360"), QSize(640, 360));
    auto* speed = new QComboBox(&dialog);
    for (double s : {1.0, 2.0, 5.0, 10.0, 20.0, 60.0}) {
        speed->addItem(QObject::tr("%1× (1 minute of race → %2 s)").arg(s).arg(60.0 / s, 0, 'g', 3), s);
    }
    speed->setCurrentIndex(3);
    auto* fps = new QComboBox(&dialog);
    for (int f : {30, 25, 15, 10}) {
        fps->addItem(QObject::tr("%1 frames/s").arg(f), f);
    }
    if (path.endsWith(QStringLiteral(".gif"), Qt::CaseInsensitive)) {
        fps->setCurrentIndex(2); // GIFs grow fast: 15 frames/s is smooth enough
    }
    form->addRow(QObject::tr("Size"), size);
    form->addRow(QObject::tr("Speed-up"), speed);
    form->addRow(QObject::tr("Frame rate"), fps);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
    QObject::connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    QObject::connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    form->addRow(buttons);
    if (dialog.exec() != QDialog::Accepted) {
        return {};
    }
    VideoOptions o;
    o.path = path;
    o.recordings = recordings;
    o.size = size->currentData().toSize();
    o.speed = speed->currentData().toDouble();
    o.fps = fps->currentData().toDouble();
    QProgressDialog progress(QObject::tr("Rendering %1…").arg(path), QObject::tr("Cancel"), 0, 100, parent);
    progress.setWindowModality(Qt::WindowModal);
    progress.setMinimumDuration(0);
    const auto result = exportVideo(o, [&](int frame, int frames) {
        progress.setMaximum(frames);
        progress.setValue(frame); // also keeps the window responsive
        return !progress.wasCanceled();
    });
    progress.reset();
    if (!result.error.isEmpty()) {
        if (!progress.wasCanceled() && error) {
            *error = result.error;
        }
        return {};
    }
    return path;
}

} // namespace devicerace::ui
