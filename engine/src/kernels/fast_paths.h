#pragma once
// Which of DeviceRace's fast paths a lane takes: decided once per lane, in planRun, from the
// lane's keys (fused=, precision, device, lstm=, channels_last) and the benchmark switches that
// turn one lever off (devicerace/environment.h), and carried in the lane's plan. The trainer,
// the networks, the optimizer, the allocator and the execution text read it and decide nothing
// themselves. fused=false turns every one off: plain LibTorch — ATen's ops, torch::optim,
// dropout by ATen's bernoulli_ mask, denormals kept, every large block malloc'ed and freed as
// LibTorch's own allocator does (the memory guard still checks it: kernels/host_allocator.h).
// Torch-free.
#include <cstdint>
#include <string>

#include "devicerace/lane_spec.h"

namespace devicerace::detail {

struct FastPaths {
    bool optimizer = false;      // fused/foreach/one-pass optimizer kernels (else torch::optim)
    bool denseStep = false;      // the CPU's fused dense step, where the network is a dense stack
    bool gptStep = false;        // the CPU's fused transformer step, where the network is a GPT
    bool reluPool = false;       // relu + max pool + dropout in one pass (CPU)
    bool normRelu = false;       // batch norm (+ residual add) + relu in one pass (CPU, channels_last)
    bool convWeightGrad = false; // conv weight gradients by im2col + GEMM (fp32) or the AVX-512 BF16 kernel
                                 // (bf16) where timed faster (CPU channels_last)
    bool bf16Dense = false;      // a bf16 lane's dense layers, each GEMM shape on its fastest route (CPU)
    bool tokenLstm = false;      // an LSTM over token ids, its input a row gather (CPU fp32, lstm=fused)
    bool onePassCells = false;   // LSTM cells with their gates in one pass (CPU fp32, lstm=cells)
    bool hashedDropout = false;  // the counter-hash dropout masks (CPU; kernels/cpu_kernels.h)
    bool hostCache = false;      // the caching host allocator keeps the lane's large blocks (CPU)
    bool flushDenormals = false; // denormals flushed to zero on the lane's threads (CPU)

    /// True when any of the above is on.
    bool any() const;
    /// The levers that are on, comma-separated, by the names above ("" when none).
    std::string names() const;
};

/// The lane's fast paths: every one that applies to its device, precision and layout when
/// fused=true (the default), minus the ones a benchmark switch turns off; none when fused=false.
/// Reads DEVICERACE_DENSE_STEP, _FUSED_NORM, _FUSED_CELL, _TOKEN_LSTM, _CONV_WGRAD, _BF16_DENSE,
/// _KEEP_DENORMALS and _KEEP_MALLOC.
FastPaths decideFastPaths(const LaneSpec& spec, const std::string& device, bool channelsLast, bool fusedLstm);

/// Every place the engine enters one of its own kernels or fast paths counts itself here, once
/// per op on the lane's thread (relaxed, process-wide): a test runs a plain lane and checks that
/// the count stays put (tests/engine/test_plain_libtorch.cpp).
void countFastPath() noexcept;
std::uint64_t fastPathsEntered() noexcept;

/// Tests that compare a fast path with plain LibTorch step by step: a fused=false lane draws the
/// fast paths' dropout masks (DEVICERACE_TEST_HASHED_DROPOUT=1), so the two drop the same units.
bool plainLanesDrawHashedMasks();

} // namespace devicerace::detail
