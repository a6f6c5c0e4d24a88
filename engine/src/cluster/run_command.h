#pragma once
// Runs a short command (squeue, scancel, scontrol) and collects its output, with a time limit.
#include <string>
#include <vector>

namespace devicerace::detail {

struct CommandResult {
    int status = -1; // the wait status (-1: could not start it, or it ran past the limit)
    std::string out; // its standard output
    std::string err; // its standard error (or why it could not run)
    bool ok() const; // exited with status 0
};

/// argv without a shell; killed after `timeoutSeconds`.
CommandResult runCommand(const std::vector<std::string>& argv, double timeoutSeconds);

} // namespace devicerace::detail
