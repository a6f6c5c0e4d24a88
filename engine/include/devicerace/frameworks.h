#pragma once
// Whether this machine can run a framework= lane (pytorch, keras-jax, ...): the Python the lane
// programs run on must import the framework's modules. Asked by the window (to grey such lanes
// before Start) and by the race (to refuse them with the command that installs them). Torch-free.
#include <optional>
#include <string>
#include <string_view>

#include "devicerace/lane_spec.h"

namespace devicerace {

/// "" when `framework` (one of frameworkProgram's names, or "devicerace") can run on this
/// machine, else why not, with the command that installs it: "framework=keras-jax: keras, jax
/// are not installed for /x/.venv/bin/python; run scripts/setup --frameworks". Asks the Python
/// once per framework and process (a find_spec check: nothing is imported), at most ~10 s.
std::string frameworkProblem(std::string_view framework);

/// The problem of a lane that runs a framework on this machine (a local framework= lane, not
/// cmd=); "" for every other lane: a remote host answers for itself, a cmd= lane is the user's
/// own program. The race refuses such a lane with it; the window greys its row.
std::string localFrameworkProblem(const LaneSpec& spec);

/// localFrameworkProblem's answer if this process already has it (never starts Python): nullopt
/// while a lane's framework has not been checked yet. What the window asks on its GUI thread.
std::optional<std::string> knownFrameworkProblem(const LaneSpec& spec);

/// Forgets the answers (after the user installed something).
void forgetFrameworkAnswers();

} // namespace devicerace
