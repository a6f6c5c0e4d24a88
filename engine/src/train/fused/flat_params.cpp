#include "train/fused/flat_params.h"

#include <ATen/ATen.h>

namespace devicerace::detail {

FlatParams::FlatParams(std::int64_t total, bool bf16)
    : params(at::empty({total}, at::TensorOptions().dtype(at::kFloat))),
      grads(at::zeros({total}, at::TensorOptions().dtype(at::kFloat))) {
    if (bf16) {
        mirror = at::empty({total}, at::TensorOptions().dtype(at::kBFloat16));
    }
}

FlatParams::Slice FlatParams::adopt(const at::Tensor& moduleParam, std::int64_t& offset, bool mirrored) {
    const auto n = moduleParam.numel();
    Slice s;
    s.w = params.narrow(0, offset, n).view(moduleParam.sizes());
    s.g = grads.narrow(0, offset, n).view(moduleParam.sizes());
    if (mirrored && mirror.defined()) {
        s.wb = mirror.narrow(0, offset, n).view(moduleParam.sizes());
    }
    offset += n;
    s.w.copy_(moduleParam);
    auto same = moduleParam;
    same.set_data(s.w);
    return s;
}

void FlatParams::syncMirror() {
    if (mirror.defined()) {
        mirror.copy_(params);
    }
}

} // namespace devicerace::detail
