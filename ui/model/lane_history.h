#pragma once
// The GUI's own full history of every lane's samples, and the min/max decimation that
// hands each chart series at most ~2 points per pixel. GUI thread only.
#include <QPointF>
#include <QList>
#include <QString>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "devicerace/metric_sample.h"
#include "devicerace/summary.h"

namespace devicerace::ui {

enum class XAxis { Time, Step, Samples, Cost };
// TokensPerSec: language models' throughput, the samples/s column times the tokens per
// example (MetricChart::setTokensPerSample scales it).
// EvalLoss: the evaluations' loss (language models' validation loss, their quality curve).
enum class Metric { SamplesPerSec, StepsPerSec, Loss, Accuracy, TokensPerSec, EvalLoss };
/// The metrics read from the evaluation columns (drawn as points joined by lines).
inline bool isEval(Metric m) { return m == Metric::Accuracy || m == Metric::EvalLoss; }
/// The throughput metrics (log axes, rate formatting).
inline bool isRate(Metric m) {
    return m == Metric::SamplesPerSec || m == Metric::StepsPerSec || m == Metric::TokensPerSec;
}

/// One lane's samples as parallel columns (non-finite values never enter). Bounded: past
/// kMaxPoints train points, neighbours are merged in pairs and each later point stands for
/// `stride` intervals (time-weighted rates, mean loss), so an hours-long lane keeps at most
/// kMaxPoints points, evenly spaced, at every length. Evaluations and rate boundaries are few
/// and kept whole.
struct LaneHistory {
    static constexpr std::size_t kMaxPoints = std::size_t(1) << 19;
    std::optional<double> costPerHour; // set before the first append; enables the cost axis
    // Train intervals
    std::vector<double> time, step, samples, samplesPerSec, stepsPerSec, loss, cost; // cost: USD so far
    std::vector<char> warmup;
    // Evaluations: each one with an accuracy or a loss (a script may report either alone). An
    // accuracy it lacks is NaN (charts and the strip read the finite ones: finiteEvals); a
    // non-finite loss repeats the previous one (the lane's state says why), or is NaN before one.
    std::vector<double> evalTime, evalStep, evalSamples, evalAccuracy, evalCost;
    std::vector<double> evalLoss;
    // Learning-rate schedule boundaries: where the rate jumped (≥ 1.5× either way) between two
    // train samples (step schedules; a one-cycle ramp changes too smoothly to mark)
    std::vector<double> lrTime, lrStep, lrSamples, lrCost;
    std::optional<double> lastLr;
    LaneState state = LaneState::Pending;
    QString message;
    std::int64_t lastStep = 0;
    double lastTime = 0;
    double lastEpoch = 0;
    std::optional<double> lastAccuracy;
    std::optional<double> lastEvalLoss;
    QString lastText; // the text the latest evaluation generated (charlstm, char-gpt), else ""
    std::int64_t lastTextStep = 0;
    std::optional<double> recentSamplesPerSec; // last interval after warm-up
    // A script lane that cannot see its batch reports steps/s alone: its samples/s points are 0
    // and the dashboard charts steps/s (Dashboard::chooseRateForScripts).
    bool stepsOnly = false;
    bool samplesSeen = false; // some train sample carried samples/s
    std::optional<std::uint64_t> peakMemory;
    // Explaining the race: the latest measured interval's seconds per step by phase,
    // and what utilisation divides by (from the lane's "running" state sample).
    std::map<std::string, double> lastBreakdown;
    std::vector<std::map<std::string, double>> lastRankBreakdowns; // data-parallel lanes: each rank's
    std::optional<double> flopsPerSample, peakFlopsPerSec;
    QString peakSource;
    /// FLOPs per sample x the lane's samples/s ÷ the device's peak; nullopt until known. The
    /// samples/s is the latest measured interval's while the lane runs, and the median of its
    /// measured intervals once it finished or stopped: the summary table's figure, so the strip,
    /// the breakdown and the table say one number for a finished lane.
    std::optional<double> utilization() const;
    /// Seconds per step by phase: the latest measured interval's while the lane runs; once it
    /// finished or stopped, each phase's median over the measured intervals (the summary's
    /// step_breakdown). Empty where the lane reported none.
    std::map<std::string, double> shownBreakdown() const;
    /// Median samples/s of the measured intervals as they arrived (as the engine's summary
    /// takes it: RunningMedian, unaffected by the column merges below); nullopt before one.
    std::optional<double> laneSamplesPerSec() const;
    // Energy over the measured intervals that carried a reading (RAPL, NVML), and their samples.
    double energyJoules = 0;
    double energySamples = 0;
    /// Samples per joule so far; nullopt where nothing was measured.
    std::optional<double> samplesPerJoule() const;

    std::size_t stride = 1;        // train intervals per stored point (doubles at each merge)
    std::uint64_t compactions = 0; // merges so far: caches built on the columns start again

    void append(const MetricSample& s);
    /// Median samples/s of the last `window` stored points after warm-up (all when window <= 0).
    std::optional<double> medianSamplesPerSec(std::size_t window) const;
    std::size_t trainCount() const { return time.size(); }

private:
    struct Point {
        double time = 0, step = 0, samples = 0, samplesPerSec = 0, stepsPerSec = 0, loss = 0, cost = 0;
        bool warmup = false;
    };
    void appendPoint(const Point& p, double weight);
    void push(const Point& p);
    void mergePairs();
    // The intervals gathered for the next stored point while stride > 1.
    Point m_acc;
    double m_accWeight = 0, m_accLoss = 0, m_accSps = 0, m_accSteps = 0;
    std::size_t m_accCount = 0;
    std::optional<double> m_lastRawTime;
    // The measured intervals' rates and phases, for the finished lane's figures.
    RunningMedian m_rates;
    std::map<std::string, RunningMedian> m_phases;
};

/// The x column of `h` for `axis` (train points, or evaluation points when `eval`).
const std::vector<double>& xColumn(const LaneHistory& h, XAxis axis, bool eval);
/// The x positions of the learning-rate boundaries of `h` for `axis`.
const std::vector<double>& lrColumn(const LaneHistory& h, XAxis axis);
/// The y column for `metric` (Accuracy reads the evaluation columns).
const std::vector<double>& yColumn(const LaneHistory& h, Metric metric);

/// Evaluation points that have the figure charted (a script's evaluation may say only its
/// accuracy or only its loss; the other is NaN), as parallel columns.
struct EvalPoints {
    std::vector<double> x, y;
};
EvalPoints finiteEvals(std::span<const double> xs, std::span<const double> ys);

/// Keeps the points with x in [xMin, xMax] and reduces them to the first/last point plus the
/// minimum and maximum of each of `buckets` equal x slices, in x order (<= 2 per bucket + 2).
QList<QPointF> decimateMinMax(std::span<const double> xs, std::span<const double> ys, double xMin, double xMax,
                              int buckets);

/// A min/max-reduced copy of a growing (x, y) series for long histories: each group of
/// kGroup consecutive points becomes its lowest and highest point, in x order. Decimating
/// this copy shows the same extremes (shifted by under kGroup samples) at 1/32 of the cost.
class CoarseSeries {
public:
    static constexpr std::size_t kGroup = 64;
    /// Reduces the complete groups of `xs`/`ys` not reduced yet (the arrays only grow).
    void extend(std::span<const double> xs, std::span<const double> ys);
    void clear();
    std::size_t covered() const { return m_covered; } // source points reduced so far
    std::span<const double> x() const { return m_x; }
    std::span<const double> y() const { return m_y; }
    /// The next coarser level (of this level's points), created on first use.
    CoarseSeries& next();

private:
    std::vector<double> m_x, m_y;
    std::size_t m_covered = 0;
    std::unique_ptr<CoarseSeries> m_next;
};

/// Decimates with `coarse` for the part it covers when the window holds many points per
/// bucket, and with the raw points otherwise (and for the uncovered tail).
QList<QPointF> decimateLod(std::span<const double> xs, std::span<const double> ys, CoarseSeries& coarse, double xMin,
                           double xMax, int buckets);

/// Time-weighted exponential moving average: each point pulls the average toward it by
/// 1 - exp(-dx / tau), so uneven sample spacing does not skew it. tau <= 0 returns ys.
std::vector<double> smoothEma(const std::vector<double>& xs, const std::vector<double>& ys, double tau);

} // namespace devicerace::ui
