#pragma once
// A lane's data on its device (or in pinned host memory) and the per-batch preparation the
// network needs. Lane thread only.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>
#include <memory>
#include <cstdint>
#include <optional>
#include <vector>

#include "devicerace/dataset.h"

namespace c10::cuda {
struct CUDAEvent;
}

namespace devicerace::detail {

/// Synthetic data larger than this (bytes) is a pool of examples reused through the epoch
/// (tf_cnn_benchmarks style): an ImageNet-sized epoch cannot be resident.
inline constexpr std::int64_t kSyntheticPoolBytes = 256ll << 20;

struct DeviceData {
    at::Tensor trainX, trainY, testX, testY;    // X: uint8 images, float images or int64 tokens
    std::int64_t trainCount = 0, testCount = 0; // examples per epoch / per evaluation
    at::Tensor mean, stddev;                    // per-channel normalisation (undefined: none)
    bool onHost = false;                        // resident=false: X/Y in pinned host memory
};

/// Real data: bytes/token ids copied to `dev` as they are (images stay uint8 and become float
/// per batch: 4x less memory); with `onHost` they stay in pinned host memory instead.
/// Synthetic: generated on the device from the lane's generator with labels fixed for the whole
/// run (tf_cnn_benchmarks style), as a pool of examples when the whole set would not fit.
DeviceData loadLaneData(const Dataset& ds, const c10::Device& dev, at::Generator& gen, std::int64_t batch, bool onHost);

/// One batch as the network eats it: float images scaled to [0,1] (and normalised where the
/// data set says so), channel-expanded and padded/resized to the network's input shape
/// (Fashion-MNIST into a CIFAR or ImageNet network); token ids as they are.
at::Tensor prepareInput(at::Tensor x, const DeviceData& d, const std::vector<std::int64_t>& want, bool channelsLast);

/// A 4-D tensor in channels_last order with channels_last strides on every dimension, size-1 ones
/// included. `contiguous(ChannelsLast)` returns a contiguous [N, 1, H, W] tensor as it is (it is
/// channels_last-contiguous too), and oneDNN, reading its strides as NCHW, then runs that
/// convolution in NCHW and writes an NCHW output that the next layer turns over every step
/// (fashion-cnn's first layer). The same elements, so a view where the tensor already is in order.
at::Tensor channelsLastStrided(const at::Tensor& t);

/// resident=false: gathers each batch on the host into one of two pinned buffers and copies
/// it to the device without blocking, so the host gathers batch i+1 while the GPU trains on
/// batch i. A buffer is reused only after its previous copy has finished (CUDA event).
class PinnedBatcher {
public:
    PinnedBatcher(const DeviceData& data, std::int64_t batch);
    ~PinnedBatcher();
    PinnedBatcher(const PinnedBatcher&) = delete;
    PinnedBatcher& operator=(const PinnedBatcher&) = delete;

    /// Copies rows `hostIndex` (int64 on the CPU) of the host X/Y into `x`/`y` on the device
    /// (resized when the batch is smaller), enqueued on the current stream.
    void fetch(const at::Tensor& hostIndex, at::Tensor& x, at::Tensor& y);

private:
    const DeviceData& m_data;
    std::array<at::Tensor, 2> m_stageX, m_stageY;
    std::array<std::unique_ptr<c10::cuda::CUDAEvent>, 2> m_copied;
    int m_next = 0;
};

} // namespace devicerace::detail
