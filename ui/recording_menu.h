#pragma once
// The "Open recording" menu: the newest recordings in the runs folder by workload, lanes and
// date (read from their manifests only), and a file dialog for any other. GUI thread only.
#include <QString>

#include <functional>

class QMenu;
class QWidget;

namespace devicerace::ui {

/// One line describing the recording in `dir` ("fashion-mlp · cpu·1 vs cuda:0 · 2026-11-23
/// 10:00"), or "" when `dir` holds no readable manifest.
QString describeRecording(const QString& dir);

/// Rebuilds `menu`: up to ten recordings under `runsDir`, newest first, then "Other…" (a file
/// dialog for a manifest.json). `open` gets the chosen folder.
void fillRecordingMenu(QMenu* menu, const QString& runsDir, QWidget* dialogParent,
                       const std::function<void(const QString&)>& open);

} // namespace devicerace::ui
