#pragma once
// The fused training step of a GPT decoder on a CPU (Net::gptView: char-gpt, char-gpt-6l): embeddings,
// the pre-LayerNorm blocks (causal attention, GELU MLP), the tied head, the token cross-entropy,
// their backward, dropout (the masks laneDropout draws) and the optimizer, without autograd, in
// buffers allocated once.
// GEMMs: fp32 through ATen's mm_out (MKL sgemm); bf16 by each shape's fastest route with fp32
// results (kernels/bf16_routes.h), reading bf16 activations and a bf16 mirror of the weights. Everything
// else stays fp32 in one-pass loops (kernels/gpt_kernels.h), which write a GEMM's bf16 input
// directly: no casts of weights or activations as autocast makes, no bf16 elementwise kernels.
// Attention: fp32 in both precisions (as causalAttention does at short sequences), the scores
// of every head by one batched GEMM (at::bmm), the weights kept for the backward.
// Parameters: one flat fp32 buffer, the matrices and embeddings first (the decaying ones), that
// the model's tensors view. Threads: on several, the batch's sequences split into one share a
// thread, each worker running its share's forward and backward on its own thread (its GEMMs on
// MKL's one thread) into its own gradient buffer, the workers' gradients summed before the
// optimizer: one parallel region a step. DEVICERACE_GPT_SPLIT=0: the whole batch, each GEMM and
// loop on the lane's threads (a region each).
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "devicerace/lane_spec.h"
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "models/models.h"
#include "train/fused/fused_step.h"

namespace devicerace::detail {

namespace cpu {
class Bf16Router;
} // namespace cpu

class GptStep final : public FusedStep {
public:
    /// Why this lane cannot take the fused step (nullopt: it can). `fused`: the lane's fused= key;
    /// `batch` x `seq`: the largest training batch.
    static std::optional<std::string> whyNot(Net& net, Task task, const c10::Device& dev, Precision precision,
                                             bool distributed, bool fused, std::int64_t batch, std::int64_t seq);

    /// Moves the network's parameters into one flat buffer (the module keeps viewing them).
    GptStep(Net& net, std::int64_t maxBatch, std::int64_t seq, bool bf16);
    ~GptStep() override;
    GptStep(const GptStep&) = delete;
    GptStep& operator=(const GptStep&) = delete;

    FlatParams& flat() override { return m_flat; }
    std::int64_t decayedCount() const override { return m_decayed; }

    /// `x`: [B, T] token ids (T <= seq), `y`: [B, T] next tokens (views with any row stride).
    void step(const at::Tensor& x, const at::Tensor& y, at::Generator& gen, LaneOptimizer& optimizer, at::Tensor& loss,
              at::Tensor& correct, StepTimer* timer = nullptr) override;
    /// The loss and next-token hits over `x` → `y` ([B, T] token ids, any B), by the step's own
    /// forward in chunks of its batch (the workers' split included), without dropout.
    std::optional<Evaluation> evaluate(const at::Tensor& x, const at::Tensor& y) override;
    bool evaluates() const override { return true; }
    std::string describe() const override;
    std::string describeThreads() const override;

private:
    /// A parameter: its flat fp32 view, its gradient's and (bf16, matrices) its mirror's.
    using Param = FlatParams::Slice;
    /// A worker of a split step (workers 1..W-1): `primary`'s weights, bf16 mirror, GEMM routes
    /// and shape, its own activations for `sequences` sequences and its own gradient buffer.
    GptStep(GptStep& primary, std::int64_t sequences);
    /// The activation and scratch buffers for a part of `sequences` sequences.
    void allocate(std::int64_t sequences);
    /// The workers a batch of `batch` sequences splits into (1: none, the lane's threads run it).
    std::int64_t workersFor(std::int64_t batch) const;
    /// Adds workers 1..workers-1's gradients into this step's (the flat buffer the optimizer reads).
    void sumWorkersGradients(std::int64_t workers);
    /// Worker w (0: this step itself).
    GptStep& part(std::int64_t w) { return w == 0 ? *this : *m_workers[static_cast<std::size_t>(w) - 1]; }
    /// One block's parameters and what its forward keeps for the backward.
    struct Block {
        Param ln1w, ln1b, attnW, attnB, projW, projB, ln2w, ln2b, fcW, fcB, mlpW, mlpB;
        at::Tensor a, mean1, rstd1; // ln_1's output (a GEMM input) and its row statistics
        at::Tensor qh, kh, vh;      // bmm: [B·H, T, D] fp32, flat
        at::Tensor qkv;             // tiles: the qkv GEMM's output with its bias, [N, 3C] fp32
        at::Tensor p;               // the attention weights, [B·H, T, T] fp32, flat (rows of
                                    // attentionRowStride(T) with the tiles)
        at::Tensor y;               // the heads merged (a GEMM input)
        at::Tensor mid;             // the residual stream after attention, fp32
        at::Tensor m, mean2, rstd2; // ln_2's output and statistics
        at::Tensor f, g;            // the GELU's slope at the MLP's pre-activation (fp32), its output (a GEMM input)
    };

    /// A batch of `x` → `y` through each worker's share: forward, and with `train` dropout, the
    /// backward and the workers' gradients summed; the loss summed over its tokens and the hits.
    void runParts(const at::Tensor& x, const at::Tensor& y, bool train, double& lossSum, std::int64_t& right,
                  StepTimer* timer);
    void forward(std::int64_t batch, std::int64_t seq, double& lossSum, std::int64_t& correct);
    void backward(std::int64_t batch, std::int64_t seq);
    void attentionForward(Block& k, std::int64_t batch, std::int64_t seq);
    void attentionBackward(Block& k, std::int64_t batch, std::int64_t seq);
    /// c = a · b: 2-D views, either of a and b may be a transposed view; c fp32 with contiguous
    /// rows. bf16: a and b bf16, the shape's route (m_router); the fp32 route reads each operand's
    /// widened copy (widened).
    void gemm(const at::Tensor& a, const at::Tensor& b, at::Tensor c) const;
    /// A bf16 GEMM operand (a 2-D view, maybe transposed) as fp32 values, widened once a step: an
    /// activation the forward wrote is read again by the backward's weight gradient, a weight by
    /// the forward and the input gradient, a layer's output gradient by both of its GEMMs; the
    /// fp32 route would widen each at every read.
    at::Tensor widened(const at::Tensor& t) const;
    /// Drops the widened copy of `buffer` (a bf16 scratch buffer rewritten within the step).
    void rewritten(const at::Tensor& buffer) const;
    /// `f32` as a GEMM reads it: itself (fp32), or its bf16 copy in `buffer` (same shape).
    at::Tensor gemmInput(const at::Tensor& f32, const at::Tensor& buffer) const;
    /// A layer's output gradient `grad` ([N, out] fp32): its column sums into `biasGrad`, and it as
    /// a GEMM reads it (its bf16 copy, made in the same pass, in `buffer`).
    at::Tensor biasGradAndInput(const at::Tensor& grad, float* biasGrad, const at::Tensor& buffer) const;
    /// The bf16 GEMM inputs the loops write (activations, gradient copies) become fp32 buffers of
    /// bf16 values (cpu::Bf16InF32), which the GEMMs read as they are: for a step whose every
    /// route is fp32.
    void keepGemmInputsInF32();
    const at::Tensor& weight(const Param& p) const { return m_bf16 ? p.wb : p.w; }
    /// The gradient of a dropout's output as its input's: `grad` itself without dropout, else
    /// grad × the mask of `seed`, in m_masked.
    at::Tensor throughDropout(const at::Tensor& grad, std::uint64_t seed) const;
    /// Block `block`'s dropout seed this step: 0 its attention's output, 1 its MLP's (0 without dropout).
    std::uint64_t seedOf(std::size_t block, int which) const {
        return m_seeds.empty() ? 0 : m_seeds[1 + 2 * block + static_cast<std::size_t>(which)];
    }

    bool m_bf16 = false;
    bool m_routesSettled = false; // bf16: the first step has chosen every full batch's route
    bool m_inF32Allowed = true;   // DEVICERACE_BF16_IN_F32 is not 0
    bool m_inF32 = false;         // bf16, every route fp32: the GEMM inputs in fp32 storage (keepGemmInputsInF32)
    std::shared_ptr<cpu::Bf16Router> m_router;       // bf16: each GEMM shape's route, chosen at its first use
                                                     // (shared by the workers)
    std::vector<std::unique_ptr<GptStep>> m_workers; // workers 1..W-1 of a split step
    std::int64_t m_maxWorkers = 1;                   // the most a batch splits into (1: no split)
    bool m_training = true;                          // this pass learns (dropout on); an evaluation's does not
    std::int64_t m_firstRow = 0;                     // where this part's rows start in the batch (its dropout masks')
    std::int64_t m_meanOver = 0;                     // the batch's tokens, which the loss averages over
    // (batch, seq) shapes whose split step has run once worker by worker outside a region, so that
    // each GEMM shape was routed (timed with the workers side by side) where nothing else runs:
    // from then on the workers run in one region, where the router is only read.
    std::set<std::pair<std::int64_t, std::int64_t>> m_routedSplits;
    float m_dropout = 0;                // after the embeddings and each block's two branches
    std::vector<std::uint64_t> m_seeds; // this step's dropout seeds (see seedOf)
    std::int64_t m_maxBatch = 0, m_seq = 0, m_heads = 0, m_width = 0, m_vocabulary = 0;
    std::int64_t m_decayed = 0;
    FlatParams m_flat;
    Param m_wte, m_wpe, m_lnFw, m_lnFb;
    std::vector<Block> m_blocks;
    std::vector<at::Tensor> m_h;                 // the residual stream into each block and out of the last, fp32
    at::Tensor m_z, m_meanF, m_rstdF;            // ln_f's output (the head's GEMM input) and statistics
    at::Tensor m_logits, m_dlogits;              // [N, V] fp32
    at::Tensor m_tokens, m_targets;              // [N] int64, contiguous
    at::Tensor m_qkv, m_narrow, m_wide;          // fp32 scratch: [N, 3C], [N, C], [N, 4C]
    at::Tensor m_dh;                             // the residual stream's gradient, fp32 [N, C]
    at::Tensor m_masked;                         // dropout: a branch's output gradient through its mask, fp32 [N, C]
    at::Tensor m_heads1, m_dq, m_dk, m_dv, m_dp; // attention scratch: [B·H, T, D] x4, [B·H, T, T] (bmm only;
                                                 // tiles: m_heads1 holds bf16's fp32 y)
    bool m_tiles = false; // attention by cpu::causalAttention* (kernels/attention_kernels.h), else bmm
    at::Tensor m_actNarrow, m_actQkv, m_actWide, m_actLogits; // bf16 copies of gradients a GEMM reads
    /// bf16 operands' widened copies (see widened), by where the operand is stored (its first
    /// value, rows, columns, row stride); each holds the step it was widened in.
    struct Widened {
        at::Tensor values; // fp32, [rows, cols] packed
        std::uint64_t step = 0;
    };
    mutable std::map<std::tuple<const void*, std::int64_t, std::int64_t, std::int64_t>, Widened> m_widened;
    std::uint64_t m_pass = 0; // forward passes so far: a widened copy from an earlier one is stale
};

} // namespace devicerace::detail
