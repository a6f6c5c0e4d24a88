#pragma once
// Slurm's compressed host lists ("gpu[01-04,07],login2"), as SLURM_JOB_NODELIST holds them.
#include <string>

namespace devicerace::detail {

/// The first host of a Slurm host list: "gpu[01-04,07],login2" -> "gpu01". Empty for an empty
/// list; the text itself where it holds no brackets.
std::string firstSlurmHost(const std::string& list);

} // namespace devicerace::detail
