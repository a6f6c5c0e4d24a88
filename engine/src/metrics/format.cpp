#include "devicerace/format.h"

#include <fmt/format.h>

#include <cmath>

namespace devicerace {

std::string groupThousands(double value) {
    if (!std::isfinite(value)) {
        return "-";
    }
    auto digits = fmt::format("{:.0f}", std::fabs(value));
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) {
            out += ',';
        }
        out += digits[i];
    }
    return (value < 0 && digits != "0" ? "-" : "") + out;
}

std::string formatBytes(std::uint64_t bytes) {
    const char* units[] = {"B", "KB", "MB", "GB", "TB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        ++u;
    }
    return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

} // namespace devicerace
