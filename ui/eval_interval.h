#pragma once
// The window's default evaluation interval: about ten test-set evaluations per race, so a
// short race still draws an accuracy line. GUI thread only (builds a race to count steps).
#include <cstdint>

#include "devicerace/lane_spec.h"

namespace devicerace::ui {

/// Evaluations a race gets by default.
inline constexpr int kDefaultEvaluations = 10;

/// Steps between evaluations giving about `evaluations` to the lane with the fewest steps
/// (every lane also evaluates at its end). Throws what Race throws for a bad spec.
std::int64_t autoEvalInterval(const RaceSpec& spec, int evaluations = kDefaultEvaluations);

} // namespace devicerace::ui
