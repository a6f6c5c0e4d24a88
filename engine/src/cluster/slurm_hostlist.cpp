#include "cluster/slurm_hostlist.h"

namespace devicerace::detail {

std::string firstSlurmHost(const std::string& list) {
    // The first entry: up to the first ',' outside brackets.
    std::size_t end = 0;
    int depth = 0;
    for (; end < list.size(); ++end) {
        depth += list[end] == '[' ? 1 : list[end] == ']' ? -1 : 0;
        if (list[end] == ',' && depth == 0) {
            break;
        }
    }
    std::string entry = list.substr(0, end);
    // Each bracket's first number, zero padding kept: "rack[1-2]-n[01-04,07]" -> "rack1-n01".
    for (auto open = entry.find('['); open != std::string::npos; open = entry.find('[')) {
        const auto close = entry.find(']', open);
        if (close == std::string::npos) {
            break;
        }
        const std::string ranges = entry.substr(open + 1, close - open - 1);
        entry = entry.substr(0, open) + ranges.substr(0, ranges.find_first_of("-,")) + entry.substr(close + 1);
    }
    return entry;
}

} // namespace devicerace::detail
