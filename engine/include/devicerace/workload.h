#pragma once
/// The registry of workloads (model + data set + default hyperparameters). Thread-safe (read-only).
#include <cstdint>
#include <string>
#include <vector>

namespace devicerace {

struct WorkloadInfo {
    std::string name;          // "fashion-mlp"
    std::string description;   // one line
    std::string dataset;       // "fashion-mnist"
    std::string origin;        // where the network comes from
    std::string optimizer;     // "RMSprop(lr=1e-3, alpha=0.9, eps=1e-7)"
    std::int64_t defaultBatch = 128;
    double defaultLr = 1e-3;
    int defaultEpochs = 1;
    double defaultTarget = 0.85; // test accuracy the "time to target" clock stops at
    std::int64_t parameters = 0; // trainable parameter count
};

const std::vector<WorkloadInfo>& workloads();
/// Throws UsageError listing the known names when `name` is unknown.
const WorkloadInfo& findWorkload(const std::string& name);

} // namespace devicerace
