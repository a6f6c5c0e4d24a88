#pragma once
// The fused training step of a dense network on a CPU (Net::denseStack, e.g. fashion-mlp):
// forward, softmax cross-entropy, backward and the optimizer without autograd, in buffers
// allocated once. The GEMMs go through ATen's mm_out (MKL sgemm for fp32; oneDNN, with AMX
// where the CPU has it, for bf16); bias + ReLU + dropout and its backward are one pass each
// (kernels/cpu_kernels.h); the parameters live in one flat buffer that the model's own tensors
// view, so evaluation, checkpoints and digests see them, updated by one optimizer pass.
// bf16: fp32 master weights and a bf16 mirror the optimizer pass rewrites; activations and
// their gradients in bf16; weight gradients converted to fp32. Lane thread only.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/lane_data.h"
#include "devicerace/lane_spec.h"
#include "models/models.h"

namespace devicerace::detail {

class StepTimer;

class LaneOptimizer;

class DenseStep {
public:
    /// Why this lane cannot take the fused step (nullopt: it can). `fused`: the lane's fused= key.
    static std::optional<std::string> whyNot(Net& net, Task task, const c10::Device& dev, Precision precision,
                                             bool distributed, bool fused);

    /// Moves the network's parameters into one flat buffer (the module keeps viewing them).
    DenseStep(Net& net, std::int64_t maxBatch, bool bf16, const DeviceData& data,
              const std::vector<std::int64_t>& inputShape);

    at::Tensor& params() { return m_params; }
    at::Tensor& grads() { return m_grads; }
    /// The bf16 copy of params() the GEMMs read (undefined for fp32); the optimizer rewrites it.
    at::Tensor& mirror() { return m_mirror; }

    /// One step on a batch as stored (uint8 images, or anything prepareInput takes) with int64
    /// labels: fills `loss` (mean) and `correct` (0-dim, float / int64) and steps `optimizer`.
    /// Dropout masks: one draw of `gen` per dropout layer (the masks laneDropout makes).
    /// `timer` (optional) gets the forward, backward and optimizer marks.
    void step(const at::Tensor& x, const at::Tensor& y, at::Generator& gen, LaneOptimizer& optimizer, at::Tensor& loss,
              at::Tensor& correct, StepTimer* timer = nullptr);

    /// "fused dense step (bf16 GEMMs, fp32 master weights)" and the like.
    std::string describe() const;

private:
    struct Layer {
        std::int64_t in = 0, out = 0;
        bool relu = false;
        float dropout = 0;
        at::Tensor w, b, gw, gb; // views of the flat params / grads
        at::Tensor wb;           // bf16: view of the mirror
        at::Tensor act, grad;    // [maxBatch, out]: the layer's output and its gradient
    };

    at::Tensor input(const at::Tensor& x);

    std::vector<Layer> m_layers;
    bool m_bf16 = false;
    bool m_dropoutOff = false;
    const DeviceData& m_data;
    std::vector<std::int64_t> m_inputShape;
    at::Tensor m_params, m_grads, m_mirror;
    at::Tensor m_input;     // [maxBatch, in]: the batch as the first GEMM reads it
    at::Tensor m_weightTmp; // bf16: one weight gradient before it becomes fp32
    bool m_byteInput = false;
    float m_scale = 1, m_shift = 0; // bytes -> network input
};

} // namespace devicerace::detail
