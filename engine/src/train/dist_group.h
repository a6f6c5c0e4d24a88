#pragma once
// One rank's membership of a data-parallel lane (docs/PARALLEL.md), in the worker process that
// trains it: the rendezvous on rank 0's c10d TCPStore, a c10d process group (ProcessGroupGloo for
// CPU tensors, ProcessGroupNCCL for CUDA), identical initial weights (broadcast from rank 0),
// gradients averaged in buckets that autograd hooks launch while the backward pass still runs
// (DDP's scheme: reverse parameter order, a small first bucket), and the per-step agreement
// that keeps every rank on one schedule (stop, pause, report) carried in the first bucket.
// Lane thread only (the hooks run inside its backward pass).
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "devicerace/lane.h"
#include "train/rendezvous_store.h"

namespace devicerace::detail {

class DistGroup {
public:
    /// Figures each rank contributes at a report point (gather()).
    /// PhaseFirst.. : the rank's step breakdown (train/step_timer.h's phases in order; -1: none).
    enum Stat { LossSum, LossCount, Correct, Seconds, WaitSeconds, PhaseFirst, kStats = PhaseFirst + 7 };
    using Stats = std::array<double, kStats>;
    struct Agreement {
        bool report = false; // rank 0 asked for a report point after this step
        bool stop = false;   // some rank was asked to stop
        bool pause = false;  // some rank was asked to pause
    };

    /// Rendezvous and process group. Throws Error naming what did not happen: the ranks that
    /// never arrived (rank 0), rank 0's store not reachable or not answering (the others).
    DistGroup(const DistConfig& config, const c10::Device& device);
    ~DistGroup();
    DistGroup(const DistGroup&) = delete;
    DistGroup& operator=(const DistGroup&) = delete;

    int rank() const { return m_rank; }
    int world() const { return m_world; }
    std::string describe() const; // "gloo, 2 ranks, 3 buckets"

    /// Every rank ends with rank 0's values (parameters and buffers, in place).
    void broadcast(const std::vector<at::Tensor>& tensors);
    /// Buckets and autograd hooks for these parameters (call once, before the first step).
    void attach(const std::vector<at::Tensor>& params);
    /// Before each step's backward pass: this rank's flags for the step's agreement.
    void beginStep(bool wantReport, bool wantStop, bool wantPause);
    /// After the backward pass: launches what the hooks did not, waits, writes the averaged
    /// gradients into .grad, and reads the agreement.
    void finishGradients();
    /// What the ranks agreed in the last finished step (CUDA: two steps ago, so that no rank
    /// waits for its device in the middle of the step).
    Agreement agreed() const { return m_agreed; }
    /// Each rank's figures at a report point, in rank order (a collective: every rank calls it
    /// at the same step).
    std::vector<Stats> gather(const Stats& mine);
    /// Seconds this rank waited for gradient buckets since the last call.
    double takeWaitSeconds();

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
    int m_rank = 0, m_world = 1;
    Agreement m_agreed;
};

/// The message of a collective that failed because another rank left ("lost a peer rank: …"),
/// which the parent ranks below the failure of the rank that left.
std::string peerLostMessage(const std::string& what);

} // namespace devicerace::detail
