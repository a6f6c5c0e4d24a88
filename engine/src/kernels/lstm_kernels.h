#pragma once
// One-pass CPU loops of an LSTM layer (kernels/lstm_nodes.cpp): the four gates' activations and
// the cell update in one pass per time step, their backward in one, and the input projection
// of token ids as a row gather (a one-hot input times a weight matrix picks one row). The
// gate layout is PyTorch's: [i, f, g, o] blocks of `hidden` columns per row. sigmoid and tanh
// come from one vectorised exp (Cephes' expf polynomial, relative error ~1e-7), so a time
// step's 4 × batch × hidden activations vectorise. Torch-free header; float only.
#include <cstdint>

namespace devicerace::detail::cpu {

/// exp, sigmoid and tanh as the LSTM loops compute them (for the tests).
float lstmExp(float x);
float lstmSigmoid(float x);
float lstmTanh(float x);

/// out[r] = bias + table[ids[r * idStride]] for r < rows (each a row of `cols` floats). False
/// (nothing written for that row) when an id is outside [0, tableRows). Parallel over rows.
bool gatherRowsPlusBias(const float* table, std::int64_t tableRows, const std::int64_t* ids, std::int64_t idStride,
                        const float* bias, float* out, std::int64_t rows, std::int64_t cols);

/// table[ids[r * idStride]] += src[r] for r < rows (rows of `cols`); ids checked by the gather.
/// Parallel over column blocks, so rows with the same id never race.
void scatterAddRows(const float* src, const std::int64_t* ids, std::int64_t idStride, float* table, std::int64_t rows,
                    std::int64_t cols);

/// One time step forward over batch × 4·hidden gate pre-activations, in place: they become the
/// activations [sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)]; c = f·cPrev + i·g, h = o·tanh(c).
/// cPrev null: a zero state. Parallel over rows.
void lstmStepForward(float* gates, const float* cPrev, float* c, float* h, std::int64_t batch, std::int64_t hidden);

/// Its backward: from the step's activations, cPrev (null: zero) and c, the gradient dh of h
/// and dc of c (in: from the next step; out: of cPrev), writes dGates (the pre-activations'
/// gradient, batch × 4·hidden). Parallel over rows.
void lstmStepBackward(const float* gates, const float* cPrev, const float* c, const float* dh, float* dc, float* dGates,
                      std::int64_t batch, std::int64_t hidden);

} // namespace devicerace::detail::cpu
