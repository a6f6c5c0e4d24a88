// Every bf16 GEMM route side by side at the fused steps' shapes: fashion-mlp's dense step (batch
// 128, split over the workers as its step splits it) and char-gpt's transformer step (768
// tokens x 128 wide), each route timed by the routers' own trial (cpu::timeBf16Route), the
// routes interleaved trial by trial, the median of TRIALS. Measured, never asserted.
// Usage: bench_bf16_gemm_shapes [THREADS] [TRIALS] [mlp|gpt|all]   e.g. 2 7 all
#include <ATen/Parallel.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "devices/cpu_info.h"
#include "kernels/bf16_routes.h"

using namespace devicerace::detail;
using cpu::Bf16Route;
using cpu::GemmShape;

namespace {

struct Case {
    std::string workload;
    GemmShape shape;
    int workers = 1;
};

std::vector<Case> mlpCases(int threads) {
    // 784-512-512-10 at batch 128; with 2 threads each of 2 workers runs half the rows and half
    // the units (kernels as in train/fused/dense_step.cpp, chooseRoutes).
    const int workers = std::clamp(128 / 16, 1, threads);
    const auto share = [&](std::int64_t v) { return (v + workers - 1) / workers; };
    const std::vector<std::pair<std::int64_t, std::int64_t>> layers = {{784, 512}, {512, 512}, {512, 10}};
    std::vector<Case> out;
    const auto rows = share(128);
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const auto [in, units] = layers[i];
        out.push_back({"fashion-mlp", {rows, units, in, false, true}, workers});
        if (i > 0) {
            out.push_back({"fashion-mlp", {rows, in, units, false, false}, workers});
        }
        out.push_back({"fashion-mlp", {share(units), in, 128, true, false}, workers});
    }
    return out;
}

std::vector<Case> gptCases() {
    // char-gpt: 12 x 64 tokens, 128 wide, a 512-wide MLP, 65 characters (train/fused/gpt_step.cpp).
    const std::int64_t t = 768, w = 128, f = 512, v = 65;
    const std::vector<GemmShape> shapes = {
        {t, 3 * w, w, false, true}, {t, w, w, false, true},     {t, f, w, false, true},     {t, w, f, false, true},
        {t, v, w, false, true},     {t, w, v, false, false},    {v, w, t, true, false},     {w, f, t, true, false},
        {t, f, w, false, false},    {f, w, t, true, false},     {t, w, f, false, false},    {w, w, t, true, false},
        {t, w, w, false, false},    {3 * w, w, t, true, false}, {t, w, 3 * w, false, false}};
    std::vector<Case> out;
    for (const auto& s : shapes) {
        out.push_back({"char-gpt", s, 1});
    }
    return out;
}

} // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
    const int trials = argc > 2 ? std::max(1, std::atoi(argv[2])) : 7;
    const std::string which = argc > 3 ? argv[3] : "all";
    at::set_num_threads(threads);
    std::vector<Case> cases;
    if (which != "gpt") {
        cases = mlpCases(threads);
    }
    if (which != "mlp") {
        const auto g = gptCases();
        cases.insert(cases.end(), g.begin(), g.end());
    }
    const auto routes = cpu::availableBf16Routes();
    fmt::print("{} · {} thread{} · median of {} trials (µs a call; the GFLOP/s of the fastest)\n\n",
               readHostCpu().model, threads, threads == 1 ? "" : "s", trials);
    std::string head = "| workload | shape (m x n x k) | workers |";
    std::string rule = "|---|---|---:|";
    for (const auto r : routes) {
        head += fmt::format(" {} |", cpu::bf16RouteName(r));
        rule += "---:|";
    }
    fmt::print("{} fastest | GFLOP/s |\n{}---|---:|\n", head, rule);
    std::map<Bf16Route, int> wins;
    for (const auto& c : cases) {
        const auto choice = cpu::pickBf16Route(
            routes, [&](Bf16Route r) { return cpu::timeBf16Route(r, c.shape, c.workers); }, trials);
        std::string row = fmt::format("| {} | {} | {} |", c.workload, cpu::gemmShapeText(c.shape), c.workers);
        double best = 0;
        for (const auto& t : choice.timings) {
            row += fmt::format(" {:.1f} |", t.seconds * 1e6);
            if (t.route == choice.route) {
                best = t.seconds;
            }
        }
        const double flops = 2.0 * static_cast<double>(c.shape.m * c.shape.n * c.shape.k) * c.workers;
        fmt::print("{} {} | {:.0f} |\n", row, cpu::bf16RouteName(choice.route), flops / best / 1e9);
        ++wins[choice.route];
    }
    fmt::print("\nfastest:");
    for (const auto& [r, n] : wins) {
        fmt::print(" {} {};", cpu::bf16RouteName(r), n);
    }
    fmt::print("\n");
}
