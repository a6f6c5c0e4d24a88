#pragma once
// copy=DIR for ssh:// script lanes: the user's folder copied to the lane's host before the race,
// with rsync over the same ssh (the same options, the user's own keys and config). Called by the
// lane's own thread while it connects.
#include <string>

#include "devicerace/lane_spec.h"

namespace devicerace::detail {

/// Where copy=DIR lands on the host: workdir=, else DIR's own name in the login folder.
std::string scriptCopyDestination(const LaneSpec& spec);

/// Copies spec.copy (a local folder) into scriptCopyDestination(spec) on spec.host: rsync -a
/// (only what changed; nothing at the destination is deleted). Throws UsageError with rsync's
/// own words when it cannot (no rsync here or there, the host unreachable, the folder missing).
void copyScriptFolder(const LaneSpec& spec, double timeoutSeconds = 600);

} // namespace devicerace::detail
