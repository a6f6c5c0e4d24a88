#include "cli_output.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "devicerace/peak_flops.h"
#include "devicerace/workload.h"

namespace devicerace::cli {

std::size_t textColumns(const std::string& text) {
    std::size_t n = 0;
    for (const char c : text) {
        n += (static_cast<unsigned char>(c) & 0xC0) != 0x80; // UTF-8: count the first byte of each
    }
    return n;
}

namespace {

// Columns as wide as what they hold: "cpu·2·keras-tensorflow", "gpubox·cuda:0·bf16" and the
// user's own names keep the table aligned.
template <typename Lanes>
std::size_t laneColumn(const Lanes& lanes, std::size_t least = 12) {
    std::size_t width = least;
    for (const auto& l : lanes) {
        width = std::max(width, textColumns(l.name));
    }
    return width;
}

} // namespace

using nlohmann::json;

std::string stateText(LaneState state, const std::string& message) {
    const auto name = toString(state);
    if (message.empty()) {
        return name;
    }
    return message.starts_with(name) ? message : name + ": " + message;
}

std::string blasWarning(const DeviceReport& report) {
    if (!report.cpu.blasIsReference) {
        return {};
    }
    return fmt::format("warning: LibTorch uses the {}; CPU training is ~17x slower than with an optimised BLAS "
                       "(measured). Install libopenblas0 or use the torch wheel (scripts/setup).",
                       report.cpu.blas);
}

std::string devicesText(const DeviceReport& r) {
    std::string out;
    out += fmt::format("LibTorch {}{}\n", r.torchVersion,
                       r.torchCudaVersion.empty() ? " (CPU only)" : fmt::format(" (CUDA {})", r.torchCudaVersion));
    out += fmt::format(
        "cpu      {} · {} cores · {} logical CPUs · {} threads by default · {} · BLAS: {} · bf16: {}\n", r.cpu.model,
        r.cpu.physicalCores, r.cpu.logicalCpus, r.cpu.torchThreads, r.cpu.parallelBackend, r.cpu.blas,
        r.cpu.bf16Units.empty() ? "emulated (no AMX or AVX-512 BF16)"
        : r.cpu.amxNotExposed   ? r.cpu.bf16Units + " (this Xeon model has AMX, but this system does not expose it)"
                                : r.cpu.bf16Units);
    if (auto w = blasWarning(r); !w.empty()) {
        out += "         " + w + "\n";
    }
    for (const auto& g : r.gpus) {
        out += fmt::format("cuda:{}   {} · {} · compute {}.{} · {} SMs{}\n", g.index, g.name,
                           formatBytes(g.totalMemoryBytes), g.computeMajor, g.computeMinor, g.multiprocessors,
                           g.utilizationPercent ? fmt::format(" · {}% busy", *g.utilizationPercent) : "");
    }
    if (!r.cudaAvailable) {
        out += fmt::format("cuda     unavailable: {}\n", r.cudaUnavailableReason);
    }
    return out;
}

std::string peaksText(const DeviceReport& r, bool remeasure) {
    std::vector<int> threads = {1};
    if (r.cpu.physicalCores > 1) {
        threads.push_back(r.cpu.physicalCores);
    }
    std::vector<Precision> precisions = {Precision::Fp32};
    if (!r.cpu.bf16Units.empty()) {
        precisions.push_back(Precision::Bf16);
    }
    std::string cpu, source, busy, limited, slowerBf16;
    bool cached = true;
    for (const auto p : precisions) {
        cpu += fmt::format("{}{}:", cpu.empty() ? "" : " · ", p == Precision::Bf16 ? "bf16" : "fp32");
        for (const auto t : threads) {
            cpu += t == threads.front() ? "" : ",";
            const auto peak = cpuPeakFlops(p, t, remeasure);
            cached = cached && peak.cached;
            if (peak.slowerBf16FlopsPerSec == 0) {
                source = peak.source; // (a bf16 one held to the fp32 figure says so in its source first)
            }
            if (peak.busy) {
                busy = peak.source;
            }
            if (peak.usableCores > 0 && limited.empty()) {
                limited = fmt::format("{} thread{} measured on the {:.3g} core{} this process may use (CPU quota or "
                                      "affinity)",
                                      t, t == 1 ? "" : "s", peak.usableCores, peak.usableCores == 1 ? "" : "s");
            }
            // A bf16 figure below the fp32 one is shown as measured; a bf16 lane is held to the fp32 one.
            const double shown = peak.slowerBf16FlopsPerSec > 0 ? peak.slowerBf16FlopsPerSec : peak.flopsPerSec;
            if (peak.slowerBf16FlopsPerSec > 0 && slowerBf16.empty()) {
                slowerBf16 = fmt::format("{} GFLOP/s against fp32's {} on {} thread{} ({})",
                                         groupThousands(peak.slowerBf16FlopsPerSec / 1e9),
                                         groupThousands(peak.flopsPerSec / 1e9), t, t == 1 ? "" : "s",
                                         fmt::format("{:.2f}×", peak.slowerBf16FlopsPerSec / peak.flopsPerSec));
            }
            cpu += fmt::format(" {} thread{} {} GFLOP/s", t, t == 1 ? "" : "s", groupThousands(shown / 1e9));
        }
    }
    const auto file = peakCacheFile();
    // "measured 2026-12-02: the faster of 1024x1024 GEMMs (…) and …" -> its date; the method
    const auto colon = source.find(':');
    std::string out = fmt::format(
        "peak     cpu {}\n         ({}: the faster of square GEMMs and 3x3 convolutions, median of 7 batches each; "
        "{})\n",
        cpu, source.substr(0, colon),
        file.empty()    ? "not cached: no cache folder"
        : !busy.empty() ? "a figure from a busy CPU is not kept: other work shared the cores"
                        : fmt::format("{} {}", cached ? "read from" : "kept in", file.string()));
    if (!limited.empty()) {
        // A container's --cpus or a taskset: what lanes here can reach, not the CPU's own peak.
        out += fmt::format("         {}: this process's ceiling, not the CPU's\n", limited);
    }
    if (!busy.empty()) {
        out += fmt::format("         {}; run `devicerace-cli devices --remeasure` when the machine is idle\n", busy);
    }
    if (!slowerBf16.empty()) {
        out += fmt::format(
            "bf16     slower than fp32 on this CPU: {}{}; bf16 lanes are held to the fp32 peak and their "
            "GEMMs take fp32 where timed faster\n",
            slowerBf16, r.cpu.amxNotExposed ? "; its AVX-512 BF16 runs at half its fp32 rate without AMX" : "");
    }
    {
        // Which library each bf16 GEMM shape of a fused step takes here, chosen by timing them all
        // (without bf16 units too: MKL's bf16 GEMM or fp32 on the bf16 values).
        const auto routes = cachedBf16GemmRoutes();
        if (routes.empty()) {
            out += "bf16     GEMM routes: not timed yet (the first bf16 lane here times each shape it uses)\n";
        }
        for (const auto& [threads, counts] : routes) {
            std::string line;
            for (const auto& [route, n] : counts) {
                line += fmt::format("{}{} {}", line.empty() ? "" : ", ", bf16GemmRouteName(route), n);
            }
            out += fmt::format("bf16     GEMM routes at {}: {} (shapes, the fastest timed here)\n", threads, line);
        }
    }
    for (const auto& g : r.gpus) {
        const auto bf16 = gpuDatasheetPeak(g.name, Precision::Bf16);
        const auto tf32 = gpuDatasheetPeak(g.name, Precision::Fp32);
        const auto fp16 = gpuDatasheetPeak(g.name, Precision::Fp16);
        if (!bf16 && !tf32 && !fp16) {
            out += fmt::format("peak     cuda:{} unknown: {} is not in the datasheet table\n", g.index, g.name);
            continue;
        }
        const auto& any = bf16 ? *bf16 : fp16 ? *fp16 : *tf32;
        out += fmt::format(
            "peak     cuda:{} {}{}{} ({})\n", g.index,
            bf16 ? fmt::format("bf16 {} TFLOP/s", groupThousands(bf16->flopsPerSec / 1e12)) : "bf16 -",
            fp16 ? fmt::format(" · fp16 {} TFLOP/s", groupThousands(fp16->flopsPerSec / 1e12)) : "",
            tf32 ? fmt::format(" · fp32 lanes (TF32) {} TFLOP/s", groupThousands(tf32->flopsPerSec / 1e12)) : "",
            any.source.substr(0, any.source.find(", dense")) + ", dense");
    }
    return out;
}

std::string devicesJson(const DeviceReport& r) {
    // The device report's one JSON shape: the worker protocol's hello and a recording's manifest
    // carry the same object.
    return json::parse(deviceReportToJson(r)).dump(2) + "\n";
}

std::string workloadsText() {
    std::string out;
    for (const auto& w : workloads()) {
        // Language models: the count depends on the text's alphabet; listed at tiny-shakespeare's.
        out += fmt::format("{:<14} {}\n{:<14} data {} · batch {} · {} · {} epochs · target {} · {} parameters{}\n",
                           w.name, w.description, "", w.dataset, w.defaultBatch, w.optimizer, w.defaultEpochs,
                           w.defaultTargetLoss ? fmt::format("validation loss {:.2f}", *w.defaultTargetLoss)
                                               : fmt::format("{:.2f}", w.defaultTarget),
                           groupThousands(static_cast<double>(w.parameters)),
                           w.tokensPerSample > 0 ? fmt::format(" at {} characters · context {} · {} schedule",
                                                               w.vocabulary, w.tokensPerSample, w.schedule)
                                                 : "");
    }
    return out;
}

std::string workloadsJson() {
    // The engine's schema entries: the one definition the Python lanes read too.
    return json::parse(workloadSchemaJson()).at("workloads").dump(2) + "\n";
}

namespace {

std::string flopRate(double v) {
    return v >= 1e12 ? fmt::format("{:.2f} TFLOP/s", v / 1e12) : fmt::format("{:.1f} GFLOP/s", v / 1e9);
}

// "data 7% · forward 27% · backward 48% · optimizer 11% · other 7%", in the step's order.
std::string breakdownText(const std::map<std::string, double>& phases) {
    double sum = 0;
    for (const auto& [phase, secs] : phases) {
        sum += secs;
    }
    std::string out;
    for (const char* phase : {"data", "forward", "backward", "communication", "optimizer", "compute", "other"}) {
        const auto it = phases.find(phase);
        if (it == phases.end() || sum <= 0) {
            continue;
        }
        out += fmt::format("{}{} {:.0f}%", out.empty() ? "" : " · ", phase, 100 * it->second / sum);
    }
    return out;
}

} // namespace

// Why the lanes finished as they did: the FLOP rate each reached and its share of
// the device's peak, where a step's time goes, and the energy where a counter was read.
std::string explainText(const RaceSummary& s) {
    bool any = false;
    for (const auto& l : s.lanes) {
        any = any || l.flopsPerSample || !l.stepBreakdown.empty() || !l.energySource.empty();
    }
    if (!any) {
        return {};
    }
    const auto w = laneColumn(s.lanes);
    std::string out = fmt::format("\n{:<{}} {:>14} {:>7} {:>9}  {}\n", "lane", w, "achieved", "of peak", "ms/step",
                                  "where a step's time goes");
    for (const auto& l : s.lanes) {
        double step = 0;
        for (const auto& [phase, secs] : l.stepBreakdown) {
            step += secs;
        }
        auto where = breakdownText(l.stepBreakdown);
        if (l.inputBound && l.dataShare) {
            where += fmt::format("  input-bound ({:.0f}% waiting for data)", *l.dataShare * 100);
        }
        out += fmt::format("{:<{}} {:>14} {:>7} {:>9}  {}\n", l.name, w,
                           l.achievedFlopsPerSec ? flopRate(*l.achievedFlopsPerSec) : "-",
                           l.utilization ? fmt::format("{:.1f}%", *l.utilization * 100) : "-",
                           step > 0 ? fmt::format("{:.2f}", step * 1e3) : "-", where.empty() ? "-" : where);
    }
    for (const auto& l : s.lanes) {
        if (l.peakFlopsPerSec) {
            out += fmt::format(
                "  peak of {}: {} ({}){}\n", l.name, flopRate(*l.peakFlopsPerSec), l.peakSource,
                l.flopsPerSample ? fmt::format(" · {:.3g} FLOPs per sample counted {}", *l.flopsPerSample,
                                               l.kind == LaneKind::External ? "for the script (its execution says how)"
                                                                            : "from the network")
                                 : "");
        }
    }
    // Energy: one line when no lane could be measured for one reason, else a line per lane.
    std::set<std::string> reasons;
    bool measured = false;
    for (const auto& l : s.lanes) {
        measured = measured || l.energyJoules;
        if (!l.energyJoules && !l.energySource.empty()) {
            reasons.insert(l.energySource);
        }
    }
    if (!measured && reasons.size() == 1) {
        out += fmt::format("  energy: {}\n", *reasons.begin());
    } else {
        for (const auto& l : s.lanes) {
            if (l.energyJoules) {
                out += fmt::format("  energy of {}: {:.1f} J over the measured intervals · {} samples/J ({})\n", l.name,
                                   *l.energyJoules, groupThousands(l.samplesPerJoule.value_or(0)), l.energySource);
            } else if (!l.energySource.empty()) {
                out += fmt::format("  energy of {}: {}\n", l.name, l.energySource);
            }
        }
    }
    // The rest of the machine, when it was busy enough to matter for some lane.
    bool busy = false;
    for (const auto& l : s.lanes) {
        busy = busy || l.otherCpus.value_or(0) >= kBusyElsewhereCpus || l.stealShare.value_or(0) >= kStolenShare;
    }
    if (busy) {
        std::string each;
        for (const auto& l : s.lanes) {
            if (l.otherCpus && l.stealShare) {
                each += fmt::format("{}{} {:.1f} CPUs busy elsewhere, {:.0f}% stolen", each.empty() ? "" : " · ",
                                    l.name, *l.otherCpus, *l.stealShare * 100);
            }
        }
        out += fmt::format("  the rest of the machine while each lane trained (/proc/stat): {}\n", each);
    }
    return out;
}

std::string repeatsText(const RepeatSummary& r) {
    const auto& first = r.repeats.front();
    const double perSample = first.tokensPerSample > 0 ? static_cast<double>(first.tokensPerSample) : 1.0;
    std::string out = fmt::format("\n{} repeats of the race, fresh lanes each time (median ± one standard deviation)\n",
                                  r.repeats.size());
    out += fmt::format("{:<{}} {:>22} {:>20} {:>16}  {}\n", "lane", laneColumn(r.lanes),
                       first.tokensPerSample > 0 ? "tokens/s" : "samples/s", "range", "t→target",
                       "speedup over the first lane");
    for (const auto& lane : r.lanes) {
        const auto& s = lane.samplesPerSec;
        const auto& t = lane.timeToTargetSeconds;
        out += fmt::format(
            "{:<{}} {:>22} {:>20} {:>16}  {}\n", lane.name, laneColumn(r.lanes),
            s ? fmt::format("{} ± {}", groupThousands(s->median * perSample), groupThousands(s->stddev * perSample))
              : "-",
            s ? fmt::format("{}–{}", groupThousands(s->min * perSample), groupThousands(s->max * perSample)) : "-",
            t ? fmt::format("{:.1f} ± {:.1f}s ({})", t->median, t->stddev, t->n) : "-", speedupText(lane));
    }
    return out;
}

std::string summaryText(const RaceSummary& s, const QualityTarget& target) {
    std::string out =
        s.workload == kScriptWorkload
            ? fmt::format("\nyour command: {} · {} mode\n", fmt::join(s.command, " "),
                          s.fair ? "fair (one lane at a time)" : "live")
            : fmt::format("\n{} on {}{} · {} mode\n", s.workload, s.datasetName, s.synthetic ? "" : " (real data)",
                          s.fair ? "fair (one lane at a time)" : "live");
    // Language models: tokens/s is the throughput, sequences/s beside it, and the validation loss.
    const bool lm = s.tokensPerSample > 0;
    // The language models' extra columns; other workloads keep the table as it was.
    auto seqs = [lm](const std::string& v) { return lm ? fmt::format(" {:>10}", v) : std::string(); };
    const auto w = laneColumn(s.lanes);
    std::size_t dw = 8;
    for (const auto& l : s.lanes) {
        dw = std::max(dw, textColumns(l.host.empty() ? l.device : parseSshTarget(l.host).host + "/" + l.device));
    }
    out += fmt::format("{:<{}} {:<{}} {:>10}{} {:>8} {:>7}{} {:>9} {:>10} {:>8}  {}\n", "lane", w, "device", dw,
                       lm ? "tokens/s" : "samples/s", seqs("seqs/s"), "steps/s", "acc", lm ? "  val loss" : "",
                       target.loss       ? fmt::format("t→≤{:.2f}", *target.loss)
                       : target.accuracy ? fmt::format("t→{:.2f}", *target.accuracy)
                                         : std::string("t→target"),
                       "peak mem", "speedup", "status");
    bool costs = false;
    for (const auto& l : s.lanes) {
        costs = costs || l.costPerHour.has_value();
    }
    for (const auto& l : s.lanes) {
        auto sp = s.speedup.find(l.name);
        const auto rate = lm ? l.tokensPerSec : l.samplesPerSec;
        out += fmt::format(
            "{:<{}} {:<{}} {:>10}{} {:>8} {:>7}{} {:>9} {:>10} {:>8}  {}{}\n", l.name, w,
            l.host.empty() ? l.device : parseSshTarget(l.host).host + "/" + l.device, dw,
            rate ? groupThousands(*rate) : "-", seqs(l.samplesPerSec ? groupThousands(*l.samplesPerSec) : "-"),
            l.stepsPerSec ? fmt::format("{:.1f}", *l.stepsPerSec) : "-",
            l.finalTestAccuracy ? fmt::format("{:.4f}", *l.finalTestAccuracy) : "-",
            lm ? fmt::format("  {:>8}", l.finalTestLoss ? fmt::format("{:.4f}", *l.finalTestLoss) : "-") : "",
            l.timeToTargetSeconds ? fmt::format("{:.1f}s", *l.timeToTargetSeconds) : "-",
            l.peakMemoryBytes ? formatBytes(*l.peakMemoryBytes) : "-",
            sp != s.speedup.end() ? fmt::format("{:.2f}x", sp->second) : "-",
            stateText(l.state, l.state == LaneState::Finished ? std::string() : l.error), "");
    }
    // Time to the first step: what a lane spent before it trained (imports, data, compilation;
    // a script's whole start-up), outside the lane clock.
    std::string preparing;
    for (const auto& l : s.lanes) {
        if (l.preparingSeconds) {
            preparing += fmt::format("{}{} {:.1f} s", preparing.empty() ? "" : " · ", l.name, *l.preparingSeconds);
        }
    }
    if (!preparing.empty()) {
        out += fmt::format("time to the first step (preparing): {}\n", preparing);
    }
    bool scaling = false;
    for (const auto& l : s.lanes) {
        scaling = scaling || l.workers > 0;
    }
    if (scaling) {
        // Seed 002's figures: speedup against the fewest workers, efficiency = speedup ÷ N.
        out += fmt::format("\n{:<{}} {:>7} {:>12} {:>10} {:>8} {:>11} {:>10}  {}\n", "lane", w, "workers",
                           "global batch", "samples/s", "speedup", "efficiency", "allreduce", "per worker samples/s");
        for (const auto& l : s.lanes) {
            if (l.workers == 0) {
                continue;
            }
            std::string perWorker;
            for (double r : l.workerSamplesPerSec) {
                if (!perWorker.empty()) {
                    perWorker += ' ';
                }
                perWorker += groupThousands(r);
            }
            out += fmt::format("{:<{}} {:>7} {:>12} {:>10} {:>8} {:>11} {:>10}  {}\n", l.name, w, l.workers,
                               groupThousands(static_cast<double>(l.batch)),
                               l.samplesPerSec ? groupThousands(*l.samplesPerSec) : "-",
                               l.scalingSpeedup ? fmt::format("{:.2f}x", *l.scalingSpeedup) : "-",
                               l.scalingEfficiency ? fmt::format("{:.0f}%", *l.scalingEfficiency * 100) : "-",
                               l.allreduceShare ? fmt::format("{:.0f}%", *l.allreduceShare * 100) : "-",
                               perWorker.empty() ? "-" : perWorker);
        }
    }
    out += explainText(s);
    if (costs) {
        out += fmt::format("\n{:<{}} {:>8} {:>10} {:>12} {:>12}\n", "lane", w, "$/hour", "cost", "$→target", "cost ×");
        for (const auto& l : s.lanes) {
            auto money = [](const std::optional<double>& v) {
                return v ? fmt::format("${:.4f}", *v) : std::string("-");
            };
            out += fmt::format("{:<{}} {:>8} {:>10} {:>12} {:>12}\n", l.name, w,
                               l.costPerHour ? fmt::format("{:.2f}", *l.costPerHour) : "-", money(l.totalCostUsd),
                               money(l.costToTargetUsd),
                               l.costVsBaseline ? fmt::format("{:.2f}x", *l.costVsBaseline) : "-");
        }
    }
    return out;
}

} // namespace devicerace::cli
