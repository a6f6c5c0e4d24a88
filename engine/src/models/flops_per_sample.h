#pragma once
// FLOPs per training example of a workload's network (models/flop_count.h), for code that does
// not include torch: a framework lane's utilisation (the same network in another framework does
// the same products). Thread-safe; remembered per workload and vocabulary.
#include <optional>
#include <string>

namespace devicerace::detail {

/// Forward + backward FLOPs per example; nullopt when the network cannot be counted.
std::optional<double> countedFlopsPerSample(const std::string& workload, int vocabulary);

} // namespace devicerace::detail
