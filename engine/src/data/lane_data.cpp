// A lane's data: resident on its device, or pinned on the host and prefetched (lane_data.h).
#include "data/lane_data.h"

#include <ATen/Functions.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/nn/functional/padding.h>
#include <torch/nn/functional/upsampling.h>

#include <algorithm>

namespace devicerace::detail {

DeviceData loadLaneData(const Dataset& ds, const c10::Device& dev, at::Generator& gen, std::int64_t batch,
                        bool onHost) {
    DeviceData d;
    d.onHost = onHost && !ds.synthetic;
    const c10::Device home = d.onHost ? c10::Device(c10::kCPU) : dev;
    auto make = [&](const DataSplit& set, at::Tensor& x, at::Tensor& y) {
        std::vector<std::int64_t> shape{set.count};
        shape.insert(shape.end(), set.shape.begin(), set.shape.end());
        auto opts = at::TensorOptions().device(dev);
        if (ds.synthetic) {
            const std::int64_t bytesPer = set.exampleSize() * 4;
            shape[0] =
                std::min(set.count, std::max(8 * batch, kSyntheticPoolBytes / std::max<std::int64_t>(1, bytesPer)));
            x = ds.kind == DataKind::Images ? at::rand(shape, gen, opts)
                                            : at::randint(0, ds.vocabulary, shape, gen, opts.dtype(at::kLong));
            y = at::randint(0, ds.classes, {shape[0]}, gen, opts.dtype(at::kLong));
            return;
        }
        if (ds.kind == DataKind::Images) {
            auto* pixels = const_cast<std::uint8_t*>(set.pixels.data());
            // from_blob never writes; .to()/clone() copies into tensors the lane owns.
            x = at::from_blob(pixels, shape, at::kByte).to(home, at::kByte, false, true);
        } else {
            auto* tokens = const_cast<std::int32_t*>(set.tokens.data());
            x = at::from_blob(tokens, shape, at::kInt).to(home, at::kLong, false, true);
        }
        auto* labels = const_cast<std::int32_t*>(set.labels.data());
        y = at::from_blob(labels, {set.count}, at::kInt).to(home, at::kLong, false, true);
        if (d.onHost) {
            x = x.pin_memory();
            y = y.pin_memory();
        }
    };
    make(ds.train, d.trainX, d.trainY);
    make(ds.test, d.testX, d.testY);
    d.trainCount = ds.train.count;
    d.testCount = ds.test.count;
    if (!ds.mean.empty()) {
        const auto c = static_cast<std::int64_t>(ds.mean.size());
        d.mean = at::tensor(ds.mean).view({1, c, 1, 1}).to(dev);
        d.stddev = at::tensor(ds.stddev).view({1, c, 1, 1}).to(dev);
    }
    return d;
}

at::Tensor prepareInput(at::Tensor x, const DeviceData& d, const std::vector<std::int64_t>& want, bool channelsLast) {
    namespace F = torch::nn::functional;
    if (x.scalar_type() == at::kLong) {
        return x;
    }
    if (x.scalar_type() == at::kByte) {
        x = x.to(at::kFloat).div_(255.0);
    }
    if (d.mean.defined()) {
        x = (x - d.mean) / d.stddev;
    }
    if (want.size() == 3) {
        if (x.size(1) != want[0]) {
            x = x.expand({x.size(0), want[0], x.size(2), x.size(3)});
        }
        const auto h = want[1], w = want[2];
        if (x.size(2) != h || x.size(3) != w) {
            if (h - x.size(2) > 0 && h - x.size(2) <= 8 && w - x.size(3) > 0 && w - x.size(3) <= 8) {
                const auto top = (h - x.size(2)) / 2, left = (w - x.size(3)) / 2;
                x = F::pad(x, F::PadFuncOptions({left, w - x.size(3) - left, top, h - x.size(2) - top}));
            } else {
                x = F::interpolate(x, F::InterpolateFuncOptions()
                                          .size(std::vector<std::int64_t>{h, w})
                                          .mode(torch::kBilinear)
                                          .align_corners(false));
            }
        }
        x = channelsLast ? channelsLastStrided(x) : x.contiguous();
    }
    return x;
}

at::Tensor channelsLastStrided(const at::Tensor& t) {
    if (t.dim() != 4) {
        return t;
    }
    auto x = t.contiguous(at::MemoryFormat::ChannelsLast);
    const auto strides = c10::get_channels_last_strides_2d(x.sizes());
    // channels_last-contiguous: every dimension longer than 1 already has these strides, and a
    // size-1 dimension's stride addresses nothing, so the view reads the same elements.
    return x.strides() == c10::IntArrayRef(strides) ? x : x.as_strided(x.sizes(), strides);
}

PinnedBatcher::PinnedBatcher(const DeviceData& data, std::int64_t batch) : m_data(data) {
    auto shapeOf = [&](const at::Tensor& t) {
        auto s = t.sizes().vec();
        s[0] = batch;
        return s;
    };
    for (int k = 0; k < 2; ++k) {
        m_stageX[k] = at::empty(shapeOf(data.trainX), data.trainX.options().pinned_memory(true));
        m_stageY[k] = at::empty({batch}, data.trainY.options().pinned_memory(true));
        m_copied[k] = std::make_unique<c10::cuda::CUDAEvent>();
    }
}

PinnedBatcher::~PinnedBatcher() = default;

void PinnedBatcher::fetch(const at::Tensor& hostIndex, at::Tensor& x, at::Tensor& y) {
    const int k = m_next;
    m_next = 1 - m_next;
    // The copy that last read this buffer (two batches ago) has long finished in steady state.
    m_copied[k]->synchronize();
    const auto n = hostIndex.size(0);
    auto sx = m_stageX[k].narrow(0, 0, n);
    auto sy = m_stageY[k].narrow(0, 0, n);
    at::index_select_out(sx, m_data.trainX, 0, hostIndex);
    at::index_select_out(sy, m_data.trainY, 0, hostIndex);
    if (x.size(0) != n) {
        x = at::empty(sx.sizes(), x.options());
        y = at::empty({n}, y.options());
    }
    x.copy_(sx, /*non_blocking=*/true);
    y.copy_(sy, /*non_blocking=*/true);
    m_copied[k]->record(c10::cuda::getCurrentCUDAStream());
}

} // namespace devicerace::detail
