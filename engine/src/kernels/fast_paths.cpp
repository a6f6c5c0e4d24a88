#include "kernels/fast_paths.h"

#include <atomic>
#include <string_view>
#include <utility>
#include <vector>

#include "devicerace/environment.h"
#include "devices/cpu_info.h"
#include "kernels/bf16_gemm.h"

namespace devicerace::detail {

namespace {

// A benchmark switch's value that turns one lever off ("0").
bool switchedOff(const char* value) { return value && std::string_view(value) == "0"; }

std::atomic<std::uint64_t> g_entered{0};

} // namespace

bool FastPaths::any() const {
    return optimizer || denseStep || gptStep || reluPool || normRelu || convWeightGrad || bf16Dense || tokenLstm ||
           onePassCells || hashedDropout || hostCache || flushDenormals;
}

std::string FastPaths::names() const {
    const std::vector<std::pair<bool, const char*>> levers = {
        {optimizer, "optimizer"},          {denseStep, "dense-step"}, {gptStep, "gpt-step"},
        {reluPool, "relu-pool"},           {normRelu, "norm-relu"},   {convWeightGrad, "conv-wgrad"},
        {bf16Dense, "bf16-dense"},         {tokenLstm, "token-lstm"}, {onePassCells, "one-pass-cells"},
        {hashedDropout, "hashed-dropout"}, {hostCache, "host-cache"}, {flushDenormals, "flush-denormals"},
    };
    std::string out;
    for (const auto& [on, name] : levers) {
        if (on) {
            out += out.empty() ? "" : ",";
            out += name;
        }
    }
    return out;
}

FastPaths decideFastPaths(const LaneSpec& spec, const std::string& device, bool channelsLast, bool fusedLstm) {
    FastPaths f;
    const bool cpu = device == "cpu";
    if (!spec.fused.value_or(true)) {
        f.hashedDropout = cpu && plainLanesDrawHashedMasks();
        return f; // plain LibTorch
    }
    const bool fp32 = spec.precision == Precision::Fp32;
    f.optimizer = true;
    if (!cpu) {
        return f; // on CUDA the fast path is the optimizer's multi-tensor kernels (and graph=)
    }
    f.denseStep = !switchedOff(devicerace::environmentSwitch("DEVICERACE_DENSE_STEP"));
    f.gptStep = true;
    f.reluPool = true;
    f.normRelu = channelsLast && !switchedOff(devicerace::environmentSwitch("DEVICERACE_FUSED_NORM"));
    // bf16: where the AVX-512 BF16 kernel can take the weight gradients (kernels/bf16_conv_wgrad.h),
    // or where there are no bf16 units (the convolutions on their bf16 values in fp32 kernels)
    const bool bf16Node = spec.precision == Precision::Bf16 && (cpu::haveAvx512Bf16Gemm() || hostBf16Units().empty());
    f.convWeightGrad =
        (fp32 || bf16Node) && channelsLast && !switchedOff(devicerace::environmentSwitch("DEVICERACE_CONV_WGRAD"));
    f.bf16Dense =
        spec.precision == Precision::Bf16 && !switchedOff(devicerace::environmentSwitch("DEVICERACE_BF16_DENSE"));
    f.tokenLstm = fp32 && fusedLstm && !switchedOff(devicerace::environmentSwitch("DEVICERACE_TOKEN_LSTM"));
    f.onePassCells = fp32 && !fusedLstm && !switchedOff(devicerace::environmentSwitch("DEVICERACE_FUSED_CELL"));
    f.hashedDropout = true;
    f.hostCache = devicerace::environmentSwitch("DEVICERACE_KEEP_MALLOC") == nullptr;
    f.flushDenormals = devicerace::environmentSwitch("DEVICERACE_KEEP_DENORMALS") == nullptr;
    return f;
}

void countFastPath() noexcept { g_entered.fetch_add(1, std::memory_order_relaxed); }

std::uint64_t fastPathsEntered() noexcept { return g_entered.load(std::memory_order_relaxed); }

bool plainLanesDrawHashedMasks() {
    const char* env = devicerace::environmentSwitch("DEVICERACE_TEST_HASHED_DROPOUT");
    return env && std::string_view(env) == "1";
}

} // namespace devicerace::detail
