#pragma once
// The fused steps' workers (train/fused/dense_step.cpp, gpt_step.cpp): each a share of a step's
// work, one per thread of one parallel region.
#include <ATen/Parallel.h>

#include <cstdint>

#include "kernels/mkl_gemm.h"

namespace devicerace::detail {

/// work(w) for every worker w < workers, one per thread of one parallel region (a thread runs
/// several where the region got fewer threads), each worker's GEMMs on its own thread: so a row's
/// bits do not follow the shares. Worker 0 runs on the calling thread. One worker runs outside any
/// region, so the ops inside keep their own threading. A file that calls this builds with OpenMP
/// (ATen's parallel_for is serial without it: tests/lint/test_openmp_objects.py).
template <class F>
void eachWorker(std::int64_t workers, const F& work) {
    if (workers == 1) {
        work(0);
        return;
    }
    at::parallel_for(0, workers, 1, [&](std::int64_t begin, std::int64_t end) {
        const cpu::SerialMkl serial;
        for (auto w = begin; w < end; ++w) {
            work(w);
        }
    });
}

} // namespace devicerace::detail
