#pragma once
// The fused training step of a dense network on a CPU (Net::denseStack, e.g. fashion-mlp):
// forward, softmax cross-entropy, backward and the optimizer without autograd, in buffers
// allocated once. The GEMMs go through ATen's mm_out (MKL sgemm for fp32; oneDNN, with AMX
// where the CPU has it, for bf16), or on an AMX CPU MKL's bf16 GEMM with fp32 sums
// (kernels/mkl_gemm.h); bias + ReLU + dropout and its backward are one pass each
// (kernels/cpu_kernels.h); the parameters live in one flat buffer that the model's own tensors
// view, so evaluation, checkpoints and digests see them, updated by one optimizer pass.
// bf16: fp32 master weights and a bf16 mirror the optimizer pass rewrites; activations and
// their gradients in bf16; weight gradients converted to fp32 (MKL: summed in fp32, and the
// bias, ReLU and dropout applied to fp32 sums before they round to bf16). Where fp32 is the
// fastest route for all but a sliver of the arithmetic (chooseRoutes), every GEMM runs in fp32
// and the activations and gradients are bf16 values kept in fp32 storage (cpu::Bf16InF32): the
// same values, without bf16 copies that each GEMM would widen again.
// Several intra-op threads: two parallel regions a step, not one per op. In the first, each
// thread takes a share of the batch's rows through the whole forward, the loss and the
// input-gradient chain (all row-independent; bias gradients and the loss as partial sums of
// fixed blocks of 4 rows); in the second, each takes a share of every layer's output units:
// their weight gradients (every row), bias gradients (the blocks' partials added in block
// order) and, for an elementwise optimizer (RMSprop), their update. The GEMMs inside run on
// their caller's thread. The shares follow each thread's measured speed (ShareBalancer), and
// no sum depends on them. Lane thread only (the regions are the lane's own).
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/lane_data.h"
#include "devicerace/lane_spec.h"
#include "kernels/bf16_routes.h"
#include "models/models.h"
#include "train/fused/fused_step.h"
#include "kernels/share_balancer.h"

namespace devicerace::detail {

class DenseStep final : public FusedStep {
public:
    /// Why this lane cannot take the fused step (nullopt: it can). `fused`: the lane's fused= key.
    static std::optional<std::string> whyNot(Net& net, Task task, const c10::Device& dev, Precision precision,
                                             bool distributed, bool fused);

    /// Moves the network's parameters into one flat buffer (the module keeps viewing them).
    DenseStep(Net& net, std::int64_t maxBatch, bool bf16, const DeviceData& data,
              const std::vector<std::int64_t>& inputShape);
    ~DenseStep() override;
    DenseStep(const DenseStep&) = delete;
    DenseStep& operator=(const DenseStep&) = delete;

    FlatParams& flat() override { return m_flat; }

    /// One step on a batch as stored (uint8 images, or anything prepareInput takes) with int64
    /// labels: fills `loss` (mean) and `correct` (0-dim, float / int64) and steps `optimizer`.
    /// Dropout masks: one draw of `gen` per dropout layer (the masks laneDropout makes).
    /// `timer` (optional) gets the forward, backward and optimizer marks.
    void step(const at::Tensor& x, const at::Tensor& y, at::Generator& gen, LaneOptimizer& optimizer, at::Tensor& loss,
              at::Tensor& correct, StepTimer* timer = nullptr) override;

    /// "fused dense step (bf16 GEMMs, fp32 master weights)" and the like.
    std::string describe() const override;
    /// "each step's batch rows, then its units, split over 2 threads"; empty on one thread.
    std::string describeThreads() const override;
    /// The speeds the row and unit shares settled on (their mean), the fastest thread's 1.
    std::vector<double> threadSpeeds() const override;

private:
    struct Layer {
        std::int64_t in = 0, out = 0;
        std::int64_t offset = 0; // of the weights in the flat buffer (the bias follows them)
        bool relu = false;
        float dropout = 0;
        at::Tensor w, b, gw, gb; // views of the flat params / grads
        at::Tensor wb;           // bf16: view of the mirror
        at::Tensor wWide;        // bf16 in fp32 storage: the mirror widened, each step
        // bf16: the routes of its forward GEMM, its input-gradient GEMM and its weight-gradient GEMM
        cpu::Bf16Route forward = cpu::Bf16Route::OneDnn, inputGrad = cpu::Bf16Route::OneDnn,
                       weightGrad = cpu::Bf16Route::OneDnn;
        at::Tensor act, grad;         // [maxBatch, out]: the layer's output and its gradient
        std::vector<float> biasParts; // [blocks, out]: each block of rows' bias gradient
    };

    /// What one step shares between its workers (a worker: a share of the rows, then of the units).
    struct StepState;
    // One step's state, kept between steps so its per-layer and per-worker vectors keep their
    // capacity (no heap allocation on the step's path after the first step).
    std::unique_ptr<StepState> m_step;

    at::Tensor input(const at::Tensor& x);
    /// Rows [r0, r1): input, forward, loss, input-gradient chain, bias-gradient partials.
    void rowsPass(StepState& s, std::int64_t worker);
    /// Every layer's output units of `worker`: weight and bias gradients, optimizer slices.
    void unitsPass(StepState& s, std::int64_t worker);
    /// Before a region: a fixed split (DEVICERACE_DENSE_BALANCE) sets the shares.
    void fixShares(ShareBalancer& shares, std::int64_t workers) const;
    /// bf16: each layer's three GEMM routes, at the shapes of a full batch split as a step splits it.
    void chooseRoutes(std::int64_t maxBatch);
    /// After a region: the balancer learns from when each worker finished its share.
    template <class ShareOf>
    void learnShares(ShareBalancer& shares, StepState& s, const ShareOf& shareOf) const;

    std::vector<Layer> m_layers;
    bool m_bf16 = false;
    bool m_inF32 = false; // bf16, every GEMM in fp32: activations and gradients as bf16 values in fp32 storage
    bool m_dropoutOff = false;
    bool m_split = true;     // several threads split each step's rows, then its units
    bool m_balance = true;   // the shares follow each thread's measured speed (else fixed)
    double m_fixedShare = 0; // not balancing: worker 0's share (0: even shares)
    ShareBalancer m_rowShares, m_unitShares;
    const DeviceData& m_data;
    std::vector<std::int64_t> m_inputShape;
    FlatParams m_flat;
    at::Tensor m_input; // [maxBatch, in]: the batch as the first GEMM reads it
    at::Tensor m_sums;  // bf16: [maxBatch, m_sumsLd] fp32, a GEMM's sums before they become bf16
    std::int64_t m_sumsLd = 0;
    std::string m_routes; // bf16: what chose the GEMM routes, for describe()
    bool m_byteInput = false;
    float m_scale = 1, m_shift = 0; // bytes -> network input
};

} // namespace devicerace::detail
