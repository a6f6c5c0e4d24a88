// The figures a race summary derives from its lanes' summaries: speedups, costs against the
// baseline, data-parallel scaling. Torch-free (the fuzz build links it for recordings).
#include "devicerace/race_summary.h"
#include "devicerace/format.h"
#include "devicerace/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace devicerace {

void normaliseCosts(std::vector<LaneSummary>& lanes, std::size_t baseline) {
    if (baseline >= lanes.size() || !lanes[baseline].costToTargetUsd || *lanes[baseline].costToTargetUsd <= 0) {
        return;
    }
    for (auto& lane : lanes) {
        if (lane.costToTargetUsd) {
            lane.costVsBaseline = *lane.costToTargetUsd / *lanes[baseline].costToTargetUsd;
        }
    }
}

void finishRaceSummary(RaceSummary& s) {
    s.speedup = speedups(s.lanes);
    normaliseCosts(s.lanes);
    fillScaling(s.lanes);
    s.tokensPerSample = tokensPerSampleOf(s.workload);
    for (auto& l : s.lanes) {
        if (s.tokensPerSample > 0 && l.samplesPerSec) {
            l.tokensPerSec = *l.samplesPerSec * static_cast<double>(s.tokensPerSample);
        }
    }
    attributeEnergy(s.lanes, s.fair);
    s.explanations = explainSlowerLanes(s.lanes, s.fair, s.workload);
    for (auto& line : explainBf16Lanes(s.lanes)) {
        s.explanations.push_back(std::move(line));
    }
    for (auto& line : explainPeaksExceeded(s.lanes)) {
        s.explanations.push_back(std::move(line));
    }
    for (auto& line : explainUnmeasuredLanes(s.lanes)) {
        s.explanations.push_back(std::move(line));
    }
    for (const auto& l : s.lanes) {
        if (!l.slowestRank.empty()) {
            s.explanations.push_back(fmt::format("{}: {}", l.name, l.slowestRank));
        }
    }
}

std::string energyCounter(const std::string& host, const std::string& device) {
    return host + "|" + (device.rfind("cuda", 0) == 0 ? device : "cpu");
}

std::vector<int> energySharers(const std::vector<std::string>& counters) {
    // A counter (a host's CPU packages, one GPU) read by lanes that ran at once measured them all.
    std::map<std::string, int> readers;
    for (const auto& c : counters) {
        readers[c] += c.empty() ? 0 : 1;
    }
    std::vector<int> out;
    out.reserve(counters.size());
    for (const auto& c : counters) {
        out.push_back(c.empty() ? 0 : readers[c]);
    }
    return out;
}

void attributeEnergy(std::vector<LaneSummary>& lanes, bool fair) {
    if (fair) {
        return; // one lane at a time: each counter measured that lane alone
    }
    std::vector<std::string> counters;
    for (const auto& lane : lanes) {
        counters.push_back(lane.energyJoules ? energyCounter(lane.host, lane.device) : std::string());
    }
    const auto sharers = energySharers(counters);
    for (std::size_t i = 0; i < lanes.size(); ++i) {
        auto& lane = lanes[i];
        const int sharing = sharers[i];
        if (lane.energyJoules && sharing > 1) {
            lane.energyJoules.reset();
            lane.samplesPerJoule.reset();
            lane.energySource = fmt::format("not attributable: {} lanes ran at once on one counter ({}); race with "
                                            "--fair to measure each",
                                            sharing, lane.energySource);
        }
    }
}

void fillScaling(std::vector<LaneSummary>& lanes) {
    for (auto& lane : lanes) {
        if (lane.workers < 1 || !lane.samplesPerSec) {
            continue;
        }
        const LaneSummary* base = nullptr;
        for (const auto& other : lanes) {
            if (other.workers >= 1 && other.samplesPerSec && *other.samplesPerSec > 0 &&
                (other.device == "cpu") == (lane.device == "cpu") && (!base || other.workers < base->workers)) {
                base = &other;
            }
        }
        if (!base) {
            continue;
        }
        lane.scalingBaseline = base->name;
        lane.scalingSpeedup = *lane.samplesPerSec / *base->samplesPerSec;
        lane.scalingEfficiency = *lane.scalingSpeedup / (static_cast<double>(lane.workers) / base->workers);
    }
}

std::map<std::string, double> speedups(const std::vector<LaneSummary>& lanes, std::size_t baseline) {
    std::map<std::string, double> out;
    if (baseline >= lanes.size()) {
        return out;
    }
    const auto& base = lanes[baseline];
    for (const auto& lane : lanes) {
        if (lane.samplesPerSec && base.samplesPerSec && *base.samplesPerSec > 0) {
            out[lane.name] = *lane.samplesPerSec / *base.samplesPerSec;
        } else if (!lane.samplesPerSec && !base.samplesPerSec && lane.stepsPerSec && base.stepsPerSec &&
                   *base.stepsPerSec > 0) {
            // Script lanes that cannot see their batch: the same script's steps, compared.
            out[lane.name] = *lane.stepsPerSec / *base.stepsPerSec;
        }
    }
    return out;
}

namespace {

bool onCpu(const LaneSummary& l) { return l.device == "cpu"; }
bool onGpu(const LaneSummary& l) { return l.device.rfind("cuda", 0) == 0; }

std::string ratioText(double r) { return fmt::format("{:.2f}×", r); }

// "4.4 ms", "0.38 ms", "1.2 s"
std::string durationText(double seconds) {
    if (seconds >= 1) {
        return fmt::format("{:.1f} s", seconds);
    }
    const double ms = seconds * 1e3;
    return ms >= 10  ? fmt::format("{:.0f} ms", ms)
           : ms >= 1 ? fmt::format("{:.1f} ms", ms)
                     : fmt::format("{:.2f} ms", ms);
}

// "1 step", "1,200 steps"
std::string stepsText(std::int64_t n) {
    return n == 1 ? std::string("1 step") : groupThousands(static_cast<double>(n)) + " steps";
}

std::string timesText(int n) {
    switch (n) {
    case 2: return "two";
    case 3: return "three";
    case 4: return "four";
    default: return fmt::format("{}", n);
    }
}

// Why `more` (more resources than `fewer`) is slower, or "" when the pair is not one we explain.
std::string explainPair(const LaneSummary& fewer, const LaneSummary& more, double ratio, bool fair,
                        const std::string& workload) {
    // Lanes that run different commands (args=: another optimizer, --compile) race variants of
    // the script, not resources: which is faster is the race's answer, not something to explain.
    if (more.args != fewer.args) {
        return {};
    }
    const auto head = fmt::format("{} runs at {} the speed of {}", more.name, ratioText(ratio), fewer.name);
    // Data-parallel ranks: more of them, slower.
    if (more.workers > 1 && fewer.workers >= 1 && more.workers > fewer.workers && onCpu(more) == onCpu(fewer)) {
        if (more.allreduceShare && *more.allreduceShare >= 0.15) {
            return fmt::format(
                "{}: its {} ranks wait for each other's gradients (the allreduce) {:.0f}% of every step, "
                "more than the extra ranks win back",
                head, more.workers, *more.allreduceShare * 100);
        }
        return fmt::format("{}: splitting each step across {} ranks costs more in synchronisation than it saves at "
                           "this model's size",
                           head, more.workers);
    }
    if (more.workers > 0 || fewer.workers > 0 || !more.host.empty() || !fewer.host.empty()) {
        return {};
    }
    // More CPU threads on this machine.
    if (onCpu(more) && onCpu(fewer) && more.threads && fewer.threads && *more.threads > *fewer.threads) {
        if (!fair) {
            return fmt::format("{}: the lanes race at the same time and share this machine's cores, so the extra "
                               "threads compete with the other lane (fair mode runs each lane alone)",
                               head);
        }
        // Measured evidence first: the rest of the machine left its threads too few cores — its
        // threads and the other processes' load wanted more CPUs than the machine has (a
        // one-thread lane beside the same load can still have a core to itself), or the machine
        // was busier while this lane ran than while the faster one did.
        constexpr double kBusier = 0.2; // ... more than while the faster lane ran
        const double other = more.otherCpus.value_or(0);
        const bool crowded = more.machineCpus && other + *more.threads > *more.machineCpus + 0.1;
        if (other >= kBusyElsewhereCpus && (crowded || other >= fewer.otherCpus.value_or(0) + kBusier)) {
            const auto cpus =
                more.machineCpus ? fmt::format(" of this machine's {}", *more.machineCpus) : std::string();
            const auto during =
                fewer.otherCpus ? fmt::format("; {:.1f} while {} ran", *fewer.otherCpus, fewer.name) : std::string();
            return fmt::format("{}: while it ran, other processes kept {:.1f} CPUs{} busy on average (measured from "
                               "/proc/stat{}), so its {} threads did not have the cores to themselves",
                               head, other, cpus, during, *more.threads);
        }
        constexpr double kMoreStolen = 0.03;
        if (more.stealShare && *more.stealShare >= kStolenShare &&
            *more.stealShare >= fewer.stealShare.value_or(0) + kMoreStolen) {
            return fmt::format("{}: while it ran, the hypervisor gave {:.0f}% of this virtual machine's CPU time to "
                               "other machines ({:.0f}% while {} ran; steal time in /proc/stat), so its threads "
                               "waited on vCPUs that were not running",
                               head, *more.stealShare * 100, fewer.stealShare.value_or(0) * 100, fewer.name);
        }
        // Its input: steps that mostly wait for their data gain little from more compute threads.
        if (more.inputBound && more.dataShare) {
            const auto other =
                fewer.dataShare ? fmt::format("; {:.0f}% for {}", *fewer.dataShare * 100, fewer.name) : std::string();
            return fmt::format("{}: it waited for its input {:.0f}% of each step (the data phase{}), time its {} "
                               "threads do not shorten: the input pipeline, not the arithmetic, sets its pace",
                               head, *more.dataShare * 100, other, *more.threads);
        }
        // Then the step's work shares: they found its threads at unequal speeds.
        constexpr double kUneven = 0.85;
        if (more.threadSpeeds.size() > 1) {
            const double slowest = *std::min_element(more.threadSpeeds.begin(), more.threadSpeeds.end());
            if (slowest > 0 && slowest < kUneven) {
                return fmt::format("{}: its threads did not run at one speed — the slowest ran at {:.0f}% of the "
                                   "fastest (measured by how its steps shared the work), so a core it ran on was "
                                   "busy with something else — another process, or a vCPU that shares a physical "
                                   "core on this virtual machine",
                                   head, slowest * 100);
            }
        }
        const std::optional<double> stepSeconds =
            fewer.samplesPerSec && *fewer.samplesPerSec > 0 && fewer.batch > 0
                ? std::optional(static_cast<double>(fewer.batch) / *fewer.samplesPerSec)
                : std::nullopt;
        // A step of tens of milliseconds splits well (fashion-cnn: 1.9x on 2 threads here): when
        // such a lane still loses, the cores were not its own, not the work too small.
        constexpr double kSplitsWell = 0.02;
        if (stepSeconds && *stepSeconds >= kSplitsWell) {
            return fmt::format("{}: a {} step takes {} on {} thread{}, work enough to split {} ways, so the extra "
                               "threads did not get cores of their own — another busy process, or vCPUs that share "
                               "one physical core on this virtual machine",
                               head, workload, durationText(*stepSeconds), *fewer.threads,
                               *fewer.threads == 1 ? "" : "s", timesText(*more.threads));
        }
        const std::string step =
            stepSeconds ? fmt::format(" a {} step takes only {} on {} thread{},", workload, durationText(*stepSeconds),
                                      *fewer.threads, *fewer.threads == 1 ? "" : "s")
                        : fmt::format(" a {} step is", workload);
        return fmt::format("{}:{} too little work to split {} ways — the threads spend more time handing work to each "
                           "other and waiting than they save (a larger model gains from more threads; on a virtual "
                           "machine two vCPUs may also be one physical core)",
                           head, step, timesText(*more.threads));
    }
    // A GPU slower than a CPU.
    if (onGpu(more) && onCpu(fewer)) {
        if (more.inputBound && more.dataShare) {
            return fmt::format("{}: it waited for its input {:.0f}% of each step (the data phase), the GPU idle "
                               "meanwhile: the input pipeline, not the GPU, sets its pace",
                               head, *more.dataShare * 100);
        }
        const std::string step =
            more.samplesPerSec && more.batch > 0
                ? fmt::format(" (a step takes {})", durationText(static_cast<double>(more.batch) / *more.samplesPerSec))
                : std::string();
        return fmt::format("{}: {}'s steps are too small to keep the GPU busy{} — most of each one is spent "
                           "launching kernels and moving data, not computing (larger models and batches turn this "
                           "around)",
                           head, workload, step);
    }
    return {};
}

// The phase of `slow`'s step that grew most against `fast`'s, as "its backward took 3.1 ms a
// step against 1.2 ms"; empty without both breakdowns.
std::string grownPhase(const LaneSummary& slow, const LaneSummary& fast) {
    std::string phase;
    double grown = 0, was = 0, is = 0;
    for (const auto& [name, seconds] : slow.stepBreakdown) {
        const auto it = fast.stepBreakdown.find(name);
        if (it != fast.stepBreakdown.end() && seconds - it->second > grown) {
            grown = seconds - it->second;
            phase = name;
            was = it->second;
            is = seconds;
        }
    }
    return phase.empty()
               ? std::string()
               : fmt::format("; its {} phase took {} a step against {}", phase, durationText(is), durationText(was));
}

// The routes the fused steps' GEMMs took, from "(bf16 GEMMs with fp32 results: <routes>; …)";
// empty for a lane without them. The routes' own parentheses may hold semicolons ("(… at 2
// threads; with no bf16 units …)"): they end at a semicolon or a closing parenthesis outside them.
std::string gemmRoutesOf(const std::string& e) {
    const auto at = e.find("bf16 GEMMs with fp32 ");
    const auto colon = at == std::string::npos ? at : e.find(": ", at);
    if (colon == std::string::npos) {
        return {};
    }
    const auto from = colon + 2;
    int depth = 0;
    auto end = from;
    for (; end < e.size(); ++end) {
        if (e[end] == '(') {
            ++depth;
        } else if (e[end] == ')' && depth-- == 0) {
            break;
        } else if (e[end] == ';' && depth == 0) {
            break;
        }
    }
    return e.substr(from, end - from);
}

// The routes an autograd lane's dense layers took, from "dense layers' bf16 GEMMs: <routes> (the
// fastest timed …)", without that parenthesis; empty for a lane without them.
std::string denseRoutesOf(const std::string& e) {
    constexpr std::string_view kDense = "dense layers' bf16 GEMMs: ";
    const auto at = e.find(kDense);
    if (at == std::string::npos) {
        return {};
    }
    const auto from = at + kDense.size();
    auto end = e.find(" (the fastest timed", from);
    if (end == std::string::npos) {
        end = e.find(" (DEVICERACE_BF16_ROUTE)", from);
    }
    if (end == std::string::npos) {
        return {}; // before the first step: "each shape's fastest route, timed at its first use"
    }
    return e.substr(from, end - from);
}

std::string bf16Cause(const LaneSummary& bf16) {
    const auto& e = bf16.execution;
    // "bf16 slower than fp32 on this CPU (bf16 peak 89 against fp32 160 GFLOP/s at 1 thread…)"
    constexpr std::string_view kSlower = "bf16 slower than fp32 on this CPU (";
    if (const auto at = e.find(kSlower); at != std::string::npos) {
        const auto open = at + kSlower.size();
        const auto close = e.find(')', open);
        const auto measured = e.substr(open, close == std::string::npos ? close : close - open);
        const auto routes = gemmRoutesOf(e);
        // the fused steps' bf16 values in fp32 storage: no conversions, only the roundings
        const bool keptInFp32 = e.find("kept in fp32 storage") != std::string::npos;
        const bool convsInFp32 = e.find("convolutions on their bf16 values in fp32") != std::string::npos;
        const auto dense = denseRoutesOf(e);
        const auto denseText = dense.empty() ? std::string() : fmt::format(", its dense layers' GEMMs took {}", dense);
        return fmt::format(
            "this CPU's bf16 arithmetic is slower than its fp32 ({}), so bf16 cannot pay here{}", measured,
            !routes.empty() && keptInFp32
                ? fmt::format(": its GEMMs took {}, and rounding their inputs to bf16 comes on top", routes)
            : !routes.empty() ? fmt::format(": its GEMMs took {}, and the conversions to bf16 and back "
                                            "come on top",
                                            routes)
            : convsInFp32     ? fmt::format(": its convolutions ran on their bf16 values in fp32 where timed "
                                                "faster{}, and the casts to bf16 and back come on top",
                                            denseText)
            : !dense.empty()  ? fmt::format(": its dense layers' GEMMs took {}, its other bf16 layers run at the "
                                             "slower rate",
                                            dense)
                              : std::string(": its bf16 layers run at the slower rate"));
    }
    if (e.find("bf16 emulated") != std::string::npos) {
        constexpr std::string_view kEmulated =
            "this CPU has no bf16 units (neither AMX nor AVX-512 BF16), so bf16 arithmetic is emulated on its fp32 "
            "units";
        // the fused steps' GEMMs, on the routes timed here (MKL's bf16 GEMM, fp32 on the bf16 values)
        if (const auto routes = gemmRoutesOf(e); !routes.empty()) {
            const bool keptInFp32 = e.find("kept in fp32 storage") != std::string::npos;
            return fmt::format("{}: its GEMMs took {}, and {} on top", kEmulated, routes,
                               keptInFp32 ? "rounding their inputs to bf16 comes"
                                          : "the conversions to bf16 and back come");
        }
        // an autograd lane's tuned convolutions and routed dense layers
        const auto dense = denseRoutesOf(e);
        const auto denseText = dense.empty() ? std::string() : fmt::format(", its dense layers' GEMMs took {}", dense);
        if (e.find("convolutions on their bf16 values in fp32") != std::string::npos) {
            return fmt::format("{}: its convolutions ran on their bf16 values in fp32{}, and the casts to bf16 and "
                               "back come on top",
                               kEmulated, denseText);
        }
        if (!dense.empty()) {
            return fmt::format("{}: its dense layers' GEMMs took {}, its other bf16 layers run on the emulation",
                               kEmulated, dense);
        }
        return std::string(kEmulated);
    }
    if (e.find("bf16 autocast") != std::string::npos) {
        return "it runs autocast, which casts every weight and the activations around the fp32 layers each step, "
               "and those casts cost more than its bf16 matrix products save";
    }
    if (const auto routes = gemmRoutesOf(e); !routes.empty()) {
        // the fused steps' routes, as timed here
        return fmt::format("its GEMMs took {}, and the rest of its step (the fp32 loops, the conversions to bf16) "
                           "did not shrink with them",
                           routes);
    }
    return "its step spends most of its time outside the bf16 matrix products";
}

} // namespace

std::vector<std::string> explainBf16Lanes(const std::vector<LaneSummary>& lanes) {
    constexpr double kTie = 0.97;
    std::vector<std::string> out;
    for (const auto& bf16 : lanes) {
        if (bf16.precision != Precision::Bf16 || !onCpu(bf16) || !bf16.samplesPerSec || *bf16.samplesPerSec <= 0) {
            continue;
        }
        // The fp32 lane of this machine with the same threads it loses to most.
        const LaneSummary* fp32 = nullptr;
        double worst = kTie;
        for (const auto& other : lanes) {
            if (other.precision != Precision::Fp32 || !onCpu(other) || other.host != bf16.host ||
                other.threads != bf16.threads || other.workers != bf16.workers || !other.samplesPerSec ||
                *other.samplesPerSec <= 0) {
                continue;
            }
            if (const double r = *bf16.samplesPerSec / *other.samplesPerSec; r < worst) {
                worst = r;
                fp32 = &other;
            }
        }
        if (!fp32) {
            continue;
        }
        std::string line = fmt::format("{} (bf16) runs at {} the speed of {} (fp32): {}", bf16.name, ratioText(worst),
                                       fp32->name, bf16Cause(bf16));
        if (bf16.utilization && fp32->utilization) {
            // A bf16 lane is held to the fp32 peak where this CPU's bf16 one measured lower (cpuPeakFlops).
            const bool heldToFp32 = bf16.execution.find("bf16 slower than fp32 on this CPU") != std::string::npos;
            const bool emulated = bf16.execution.find("bf16 emulated") != std::string::npos;
            line += emulated ? fmt::format("; it reached {:.0f}% of this CPU's fp32 peak (an emulated bf16 lane's), {} "
                                           "{:.0f}%",
                                           *bf16.utilization * 100, fp32->name, *fp32->utilization * 100)
                    : heldToFp32
                        ? fmt::format("; it reached {:.0f}% of this CPU's fp32 peak (the higher, which it is held "
                                      "to), {} {:.0f}%",
                                      *bf16.utilization * 100, fp32->name, *fp32->utilization * 100)
                        : fmt::format("; it reached {:.0f}% of this CPU's bf16 GEMM peak, {} {:.0f}% of the fp32 one",
                                      *bf16.utilization * 100, fp32->name, *fp32->utilization * 100);
        }
        out.push_back(line + grownPhase(bf16, *fp32) + ".");
    }
    return out;
}

std::vector<std::string> explainPeaksExceeded(const std::vector<LaneSummary>& lanes) {
    std::vector<std::string> out;
    for (const auto& l : lanes) {
        if (l.achievedFlopsPerSec && l.peakFlopsPerSec && *l.peakFlopsPerSec > 0 &&
            *l.achievedFlopsPerSec > *l.peakFlopsPerSec) {
            out.push_back(fmt::format(
                "{} reached {:.0f}% of the peak it is measured against ({} GFLOP/s, {}), shown as 100%: a peak is "
                "an upper bound, so that figure was measured low (other work ran while it was measured); a live "
                "race drops it and measures it again before the next one.",
                l.name, 100 * *l.achievedFlopsPerSec / *l.peakFlopsPerSec, groupThousands(*l.peakFlopsPerSec / 1e9),
                l.peakSource));
        }
    }
    return out;
}

std::vector<std::string> explainUnmeasuredLanes(const std::vector<LaneSummary>& lanes) {
    std::vector<std::string> out;
    // Lanes whose steps were all warm-up, by their steps and warm-up: one sentence each.
    std::vector<std::pair<std::pair<std::int64_t, std::int64_t>, std::vector<std::string>>> allWarmup;
    for (const auto& l : lanes) {
        if ((l.state != LaneState::Finished && l.state != LaneState::Stopped) || l.steps <= 0 || l.stepsPerSec) {
            continue;
        }
        if (l.warmupSteps <= 0) { // a recording: the warm-up's length is not kept
            out.push_back(fmt::format("{} has no speed: its {} took {}, and every interval they were timed in began "
                                      "in the warm-up, which is left out of the speed (--warmup-steps); race more "
                                      "steps.",
                                      l.name, stepsText(l.steps), durationText(l.wallSeconds)));
        } else if (l.steps <= l.warmupSteps) {
            const std::pair key{l.steps, l.warmupSteps};
            auto it = std::find_if(allWarmup.begin(), allWarmup.end(), [&](const auto& g) { return g.first == key; });
            if (it == allWarmup.end()) {
                allWarmup.push_back({key, {}});
                it = allWarmup.end() - 1;
            }
            it->second.push_back(l.name);
        } else {
            out.push_back(fmt::format(
                "{} has no speed: its {} took {}, and no timed interval began after the warm-up (the first {}) "
                "before it finished{}; race more steps.",
                l.name, stepsText(l.steps), durationText(l.wallSeconds), stepsText(l.warmupSteps),
                l.kind == LaneKind::External ? " (its program reports its steps every 0.1 s, and a speed is timed "
                                               "from one report to the next)"
                                             : ""));
        }
    }
    for (const auto& [key, names] : allWarmup) {
        std::string who = names.front();
        for (std::size_t i = 1; i < names.size(); ++i) {
            who += (i + 1 == names.size() ? " and " : ", ") + names[i];
        }
        const auto [steps, warmup] = key;
        const bool one = names.size() == 1;
        out.insert(out.begin(),
                   fmt::format("{} {} no speed: {} {} all warm-up, which is left out of the speed (the first {} of "
                               "a lane: --warmup-steps); race more steps, or lower --warmup-steps.",
                               who, one ? "has" : "have",
                               steps == 1 ? std::string(one ? "its one step" : "one step each")
                                          : (one ? "its " : "their ") + stepsText(steps),
                               steps == 1 ? "was" : "were", stepsText(warmup)));
    }
    return out;
}

std::vector<std::string> explainSlowerLanes(const std::vector<LaneSummary>& lanes, bool fair,
                                            const std::string& workload) {
    constexpr double kTie = 0.97; // within 3%: a tie, nothing to explain
    std::vector<std::string> out;
    for (const auto& more : lanes) {
        if (!more.samplesPerSec || *more.samplesPerSec <= 0) {
            continue;
        }
        // The fastest lane with fewer resources that this one loses to.
        std::string best;
        double bestRatio = kTie;
        for (const auto& fewer : lanes) {
            if (&fewer == &more || !fewer.samplesPerSec || *fewer.samplesPerSec <= 0) {
                continue;
            }
            const double ratio = *more.samplesPerSec / *fewer.samplesPerSec;
            if (ratio >= bestRatio) {
                continue;
            }
            if (auto why = explainPair(fewer, more, ratio, fair, workload); !why.empty()) {
                best = std::move(why);
                bestRatio = ratio;
            }
        }
        if (!best.empty()) {
            out.push_back(best + ".");
        }
    }
    return out;
}

} // namespace devicerace
