#pragma once
/// The registry of workloads (model + data set + default hyperparameters). Thread-safe (read-only).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devicerace/dataset.h"
#include "devicerace/errors.h"

namespace devicerace {

struct WorkloadInfo {
    std::string name;        // "fashion-mlp"
    std::string description; // one line
    std::string dataset;     // "fashion-mnist", "cifar10", "imagenet", "imdb", "text"
    std::string origin;      // where the network comes from
    std::string optimizer;   // "RMSprop(lr=1e-3, alpha=0.9, eps=1e-7)"
    std::int64_t defaultBatch = 128;
    double defaultLr = 1e-3;
    double weightDecay = 0;
    double momentum = 0;
    std::string schedule = "constant"; // "constant", "step", "onecycle", "cosine"
    int defaultEpochs = 1;
    double defaultTarget = 0.85; // test accuracy the "time to target" clock stops at
    // Language models: the validation loss the clock stops at instead (when the race names no
    // target of either kind).
    std::optional<double> defaultTargetLoss;
    std::int64_t parameters = 0; // trainable parameter count
    DataKind input = DataKind::Images;
    std::vector<std::int64_t> inputShape; // one example: {C, H, W} or {T}
    int classes = 10;
    int vocabulary = 0;              // token inputs: the embedding size
    bool syntheticByDefault = false; // no real data set of its own on a stock machine
    bool hasLstm = false;            // the lane key lstm=fused|cells applies
    bool samplesText = false;        // evaluations carry generated text
    // Language models: tokens scored per example (the context T; an example holds T+1 tokens,
    // inputShape {T+1}). Throughput is then shown as tokens/s = samples/s x this; 0 otherwise.
    std::int64_t tokensPerSample = 0;
    bool cudaGraphByDefault = true; // CUDA lanes capture their training step unless graph=false
    bool channelsLastOnCpu = false; // CPU lanes default to channels_last (measured faster: docs/BENCHMARKS.md)
};

const std::vector<WorkloadInfo>& workloads();
/// The workload name of a race of a user's own training command (script lanes): no network,
/// no data set of DeviceRace's. findWorkload knows it; workloads() does not list it.
inline constexpr const char* kScriptWorkload = "script";
/// Throws UsageError listing the known names when `name` is unknown.
const WorkloadInfo& findWorkload(const std::string& name);
/// Tokens scored per example of a language model (WorkloadInfo::tokensPerSample); 0 for other
/// workloads and for names this build does not know (a recording from another version). Reads
/// the workload's fixed fields and builds no network (findWorkload builds one to count its
/// parameters): race summaries, recordings and the window call it.
std::int64_t tokensPerSampleOf(const std::string& name);
/// The workload schema as JSON text: {"schema": 1, "constants": {...}, "workloads": [...]}, every
/// workload with every field another framework's lane builds its network and training from
/// (`devicerace-cli workloads --schema`; lanes/python/workload_table.py reads it).
std::string workloadSchemaJson();

} // namespace devicerace
