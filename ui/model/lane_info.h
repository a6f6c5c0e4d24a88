#pragma once
// What the window shows of a lane besides its samples (the race controller fills it; the charts
// and tables read it).
#include <QColor>
#include <QString>

#include <cstdint>
#include <optional>
#include <string>

namespace devicerace::ui {

/// What the window shows of a lane besides its samples.
struct LaneInfo {
    bool recorded = false; // replayed from a recording, not racing now
    QString name;
    QString device;
    QColor color;
    std::int64_t totalSteps = 0;
    std::int64_t batch = 0;
    std::optional<double> costPerHour;
    bool launched = false; // slurm:// or attach://: its job, shape and size are known once it runs
    QString job;           // "job 12 · 2 ranks on localhost" once known
    bool settled = false;  // launched: rank 0 said ready, nothing above changes any more
    // The energy counter it read, as lanes that ran at once share it (devicerace::energyCounter,
    // prefixed by its race); unique to the lane where lanes ran one at a time.
    std::string energyCounter;
};

} // namespace devicerace::ui
