#pragma once
// Writes a small recording folder (manifest.json + one JSON-lines file per lane) with made-up
// but well-formed samples: lanes of chosen throughput, evaluations, a finish. Tests only.
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QString>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "devicerace/metric_sample.h"

namespace devicerace::test {

struct FakeLane {
    QString name;
    QString device = QStringLiteral("cpu");
    double samplesPerSec = 1000; // steady throughput
    double seconds = 60;         // lane time to the finish
    double costPerHour = 0;      // USD per hour (0: none)
    QString text = {};           // what each evaluation's model wrote ("" : nothing, like most workloads)
    // seconds per step by phase in every train sample, and what utilisation divides by.
    std::map<std::string, double> breakdown = {};
    double flopsPerSample = 0, peakFlopsPerSec = 0;
    double watts = 0; // > 0: each train sample carries the energy of its interval
    // A data-parallel lane: each rank's breakdown in every train sample (rank 0 reports for all).
    std::vector<std::map<std::string, double>> rankBreakdowns = {};
    bool lengthKnown = true;   // false: total_steps 0, as a script lane's whose command alone knows it
    bool evalLossOnly = false; // evaluations say a loss and no accuracy (a script's language model)
};

// Writes the recording into `dir` (created); returns false when a file cannot be written.
inline bool writeFakeRecording(const QString& dir, const std::vector<FakeLane>& lanes, double sampleEvery = 0.5,
                               int evaluations = 10, const QString& workload = QStringLiteral("fashion-mlp"),
                               const QString& mode = QStringLiteral("live")) {
    constexpr int kBatch = 128;
    if (!QDir().mkpath(dir)) {
        return false;
    }
    QJsonArray manifestLanes;
    for (const auto& lane : lanes) {
        const QString file = lane.name + QStringLiteral(".jsonl");
        const auto totalSteps =
            lane.lengthKnown ? static_cast<qint64>(lane.samplesPerSec * lane.seconds / kBatch) : qint64{0};
        QJsonObject entry{{QStringLiteral("name"), lane.name},         {QStringLiteral("file"), file},
                          {QStringLiteral("spec"), lane.device},       {QStringLiteral("device"), lane.device},
                          {QStringLiteral("total_steps"), totalSteps}, {QStringLiteral("batch"), kBatch}};
        if (lane.costPerHour > 0) {
            entry.insert(QStringLiteral("cost_per_hour"), lane.costPerHour);
        }
        manifestLanes.append(entry);
        QFile out(dir + QLatin1Char('/') + file);
        if (!out.open(QIODevice::WriteOnly)) {
            return false;
        }
        auto write = [&](const MetricSample& s) { out.write((toJsonLine(s) + "\n").c_str()); };
        MetricSample state;
        state.kind = SampleKind::State;
        state.lane = lane.name.toStdString();
        state.state = LaneState::Running;
        if (lane.flopsPerSample > 0 && lane.peakFlopsPerSec > 0) {
            state.flopsPerSample = lane.flopsPerSample;
            state.peakFlopsPerSec = lane.peakFlopsPerSec;
            state.peakSource = "test peak";
        }
        write(state);
        int evalsDone = 0;
        for (double t = sampleEvery; t <= lane.seconds + 1e-9; t += sampleEvery) {
            MetricSample s;
            s.lane = lane.name.toStdString();
            s.time = t;
            s.samples = static_cast<std::int64_t>(lane.samplesPerSec * t);
            s.step = s.samples / kBatch;
            s.epoch = t / lane.seconds;
            // A little wobble so lines are not ruler-straight; loss falls, accuracy rises.
            s.samplesPerSec = lane.samplesPerSec * (1 + 0.05 * std::sin(t * 1.7));
            s.stepsPerSec = *s.samplesPerSec / kBatch;
            s.loss = 0.3 + 2.0 * std::exp(-3 * t / lane.seconds);
            s.intervalSeconds = sampleEvery;
            s.warmup = t < 2 * sampleEvery;
            s.stepBreakdown = lane.breakdown;
            s.workerStepBreakdown = lane.rankBreakdowns;
            if (lane.watts > 0) {
                s.energyJoules = lane.watts * sampleEvery;
            }
            write(s);
            while (evalsDone < evaluations && t >= lane.seconds * (evalsDone + 1) / evaluations - 1e-9) {
                ++evalsDone;
                MetricSample e = s;
                e.kind = SampleKind::Eval;
                e.accuracy = 0.9 - 0.4 * std::exp(-3.0 * evalsDone / evaluations);
                e.loss = 2.0 * std::exp(-1.0 * evalsDone / evaluations);
                if (lane.evalLossOnly) {
                    e.accuracy.reset();
                }
                e.samplesPerSec.reset();
                e.stepsPerSec.reset();
                e.text = lane.text.toStdString();
                write(e);
            }
        }
        state.time = lane.seconds;
        state.state = LaneState::Finished;
        write(state);
    }
    const QJsonObject manifest{
        {QStringLiteral("format"), 1},
        {QStringLiteral("app_version"), QStringLiteral("0.1.0")},
        {QStringLiteral("workload"), workload},
        {QStringLiteral("dataset"),
         QJsonObject{{QStringLiteral("name"), QStringLiteral("Fashion-MNIST")}, {QStringLiteral("synthetic"), false}}},
        {QStringLiteral("mode"), mode},
        {QStringLiteral("target_accuracy"), 0.85},
        {QStringLiteral("started_at"), QStringLiteral("2026-11-23T10:00:00Z")},
        {QStringLiteral("device"), QJsonObject{{QStringLiteral("cpu"), QStringLiteral("test CPU")},
                                               {QStringLiteral("gpus"), QStringLiteral("Test GPU")}}},
        {QStringLiteral("lanes"), manifestLanes}};
    QFile m(dir + QStringLiteral("/manifest.json"));
    return m.open(QIODevice::WriteOnly) && m.write(QJsonDocument(manifest).toJson()) > 0;
}

} // namespace devicerace::test
