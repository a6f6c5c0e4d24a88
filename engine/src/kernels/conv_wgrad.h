// The convolutions' tuned weight gradient (models.h convolve): where its choices are kept.
#pragma once

#include <filesystem>

namespace devicerace::detail {

/// The machine's record of which weight gradient each convolution shape takes ("conv-wgrad.json"
/// beside the peak cache, peakCacheFile()); empty when no cache folder can be named.
std::filesystem::path convChoiceFile();

/// Tests: forget this process's choices (the machine's file keeps its own).
void forgetConvChoices();

} // namespace devicerace::detail
