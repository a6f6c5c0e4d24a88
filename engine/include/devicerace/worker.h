#pragma once
/// The worker end of the worker protocol (docs/EVENTS.md): `devicerace-cli worker` runs one
/// lane for a parent DeviceRace on this or another machine, speaking one JSON object per line.

#include <string>
#include <vector>

#include "devicerace/lane_spec.h"

namespace devicerace {

/// python, the shipped lane program and its arguments (before "--proto N") on this machine:
/// $DEVICERACE_PYTHON or the build's .venv, and $DEVICERACE_LANES, the installed or the
/// source tree's lanes/python.
std::vector<std::string> localFrameworkArgv(const FrameworkProgram& program);

/// Runs the worker on `inFd` (the parent's control lines) and `outFd` (protocol lines only:
/// the caller has already moved stdout out of everyone else's way). `requestedProto` is the
/// parent's protocol major (--proto). Returns the process exit status: 0 lane finished or
/// stopped, 1 lane failed or diverged, 2 the lane was refused, 3 protocol refused. Never
/// 126, 127 or 255 (those mean "not installed" and "ssh failed" to the parent).
int runWorker(int inFd, int outFd, int requestedProto);

/// A worker that a cluster's launcher started as one rank of a data-parallel lane (docs/PARALLEL.md).
struct WorkerLaunch {
    std::string ranksFrom; // "slurm" (SLURM_PROCID, ...) or "env" (RANK, WORLD_SIZE, MASTER_ADDR, ...)
    std::string listen;    // rank 0: [ADDR:]PORT to wait on for a race (attach://); "": stdin/stdout
    std::string tokenFile; // with listen: the token's file (else $DEVICERACE_ATTACH_TOKEN)
};
/// runWorker for a launched rank: rank 0 speaks the protocol (on the fds, or to the one parent
/// that attaches with the token); the other ranks get their lane through rank 0's store and
/// stay silent on outFd.
int runLaunchedWorker(int inFd, int outFd, int requestedProto, const WorkerLaunch& launch);

/// `devicerace-cli attach HOST:PORT`: the parent's end of an attach:// lane (workers/attach.h).
int runAttachBridge(const std::string& address, int proto, const std::string& tokenFile);

} // namespace devicerace
