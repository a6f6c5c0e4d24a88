#pragma once
// What the autograd nodes' bf16 paths share (kernels/*_node.cpp): autocast off for a node's own
// calls, and a tensor's values rounded to bf16 but kept in fp32. LibTorch's types are only named
// here (declared, not included), as in autograd_nodes.h. Lane thread only.

namespace at {
class Tensor;
} // namespace at

namespace devicerace::detail {

/// CPU autocast off while it lives (a node's casts are explicit, and its fp32 GEMMs and
/// convolutions must stay fp32), the thread's previous setting back after.
class NoAutocast {
public:
    NoAutocast();
    ~NoAutocast();
    NoAutocast(const NoAutocast&) = delete;
    NoAutocast& operator=(const NoAutocast&) = delete;

private:
    bool m_was = false;
};

/// `t`'s values rounded to bf16 (to nearest even), in a new fp32 tensor of `t`'s strides where `t`
/// is dense (a channels_last activation stays channels_last), else contiguous: a bf16 tensor
/// widened, an fp32 one rounded, by the engine's loops in one pass.
at::Tensor bf16ValuesInF32(const at::Tensor& t);

/// `t` (fp32 or bf16) as bf16 (rounded to nearest even) or as fp32 (widened): ATen's `t.to(type)`
/// by the engine's one-pass loops, in a new tensor of `t`'s strides where `t` is dense (else
/// contiguous). Other types, or `t` already of `type`: ATen's `to` (the same tensor where no
/// cast is needed).
at::Tensor castFloat(const at::Tensor& t, bool toBf16);

/// relu(t.to(bf16)) for an fp32 `t` (cpu::reluToBf16, one pass), strided as castFloat's.
at::Tensor reluToBf16(const at::Tensor& t);
/// The gradient of reluToBf16's input, widened to fp32: `dy` where the bf16 output `y` is above 0,
/// else 0 (cpu::reluGradToFloat, one pass), laid out as `y`.
at::Tensor reluGradToFloat(const at::Tensor& dy, const at::Tensor& y);

} // namespace devicerace::detail
