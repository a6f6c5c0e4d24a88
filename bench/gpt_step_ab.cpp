// The fused transformer step's attention, A/B in one process: two GptSteps on the same workload,
// one with the causal attention tiles and one with bmm (DEVICERACE_CPU_ATTENTION, read when a step
// is built), stepped alternately on the same random tokens, so the VM's drift hits both alike.
// Forward and backward only (the optimizer is the same for both and is left out). Measured, never
// asserted.
// Usage: bench_gpt_step_ab [WORKLOAD] [PAIRS] [THREADS] [fp32|bf16]   e.g. char-gpt-6l 6 1 fp32
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/models.h"
#include "train/fused/gpt_step.h"
#include "train/lane_optimizer.h"

using namespace devicerace;
using namespace devicerace::detail;

namespace {

struct NoOptimizer final : LaneOptimizer {
    void setLr(double) override {}
    void zeroGrad() override {}
    void step() override {}
    bool captureSafe() const override { return false; }
    std::string describe() const override { return "none"; }
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
    const std::string workload = argc > 1 ? argv[1] : "char-gpt-6l";
    const int pairs = argc > 2 ? std::atoi(argv[2]) : 6;
    const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
    const bool bf16 = argc > 4 && std::string(argv[4]) == "bf16";
    at::set_num_threads(threads);
    torch::NoGradGuard noGrad;
    ModelOptions o;
    o.vocabulary = 113; // the fortunes text's
    const auto& impl = workloadImpl(workload);
    const auto batch = impl.info.defaultBatch, seq = impl.info.tokensPerSample;
    std::vector<std::shared_ptr<Net>> nets;
    std::vector<std::unique_ptr<GptStep>> steps;
    const char* routes[] = {"tiles", "bmm"};
    for (const char* route : routes) {
        setenv("DEVICERACE_CPU_ATTENTION", route, 1);
        nets.push_back(impl.makeModel(at::detail::createCPUGenerator(7), o));
        nets.back()->train();
        steps.push_back(std::make_unique<GptStep>(*nets.back(), batch, seq, bf16));
    }
    unsetenv("DEVICERACE_CPU_ATTENTION");
    auto gen = at::detail::createCPUGenerator(11);
    const auto data = torch::randint(0, o.vocabulary, {batch, seq + 1}, gen, torch::kLong);
    const auto x = data.narrow(1, 0, seq), y = data.narrow(1, 1, seq);
    NoOptimizer none;
    auto loss = torch::zeros({});
    auto correct = torch::zeros({}, torch::kLong);
    std::vector<double> ms[2], ratio;
    for (int p = -1; p < pairs; ++p) { // pair -1 warms up
        double t[2];
        for (int r = 0; r < 2; ++r) {
            const auto start = std::chrono::steady_clock::now();
            steps[r]->step(x, y, nets[r]->gen, none, loss, correct);
            t[r] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        }
        if (p >= 0) {
            ms[0].push_back(t[0]);
            ms[1].push_back(t[1]);
            ratio.push_back(t[1] / t[0]);
        }
    }
    fmt::print("{} ({}, {} thread{}), batch {} x {}, {} pairs, forward + backward:\n", workload, bf16 ? "bf16" : "fp32",
               threads, threads > 1 ? "s" : "", batch, seq, pairs);
    fmt::print("  tiles {:.2f} ms ({})\n  bmm   {:.2f} ms ({})\n  bmm / tiles, median of the pairs: {:.3f}\n",
               median(ms[0]), steps[0]->describe(), median(ms[1]), steps[1]->describe(), median(ratio));
    return 0;
}
