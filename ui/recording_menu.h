#pragma once
// The "Open recording" menu: the newest recordings in the runs folder by workload, lanes, date
// and result, and a file dialog for any other. GUI thread only.
#include <QString>

#include <functional>

class QMenu;
class QWidget;

namespace devicerace::ui {

/// One line describing the recording in `dir` and its result ("fashion-mlp · cpu·1 vs cuda:0 ·
/// 2026-11-23 10:00:05 — cpu·1 0.823 in 0:06, cuda:0 0.830 in 0:01"), read from its manifest and
/// the last 16 KiB of each lane file; "" when `dir` holds no readable manifest.
QString describeRecording(const QString& dir);

/// Rebuilds `menu`: up to ten recordings under `runsDir`, newest first, then "Other…" (a file
/// dialog for a manifest.json). `open` gets the chosen folder.
void fillRecordingMenu(QMenu* menu, const QString& runsDir, QWidget* dialogParent,
                       const std::function<void(const QString&)>& open);

} // namespace devicerace::ui
