#pragma once
// Which update rule a workload trains with: part of the workload's definition (models/), used
// by the optimizers of train/. Includes nothing.

namespace devicerace::detail {

/// Which update rule a workload trains with (the kind decides the fast path).
struct OptimizerRecipe {
    enum class Kind { Adam, AdamW, Sgd, RmsProp };
    Kind kind = Kind::Adam;
    bool nesterov = false; // SGD
    double alpha = 0.99;   // RMSprop smoothing (Keras: 0.9)
    double eps = 1e-8;     // Adam/RMSprop epsilon (Keras RMSprop: 1e-7)
    double beta2 = 0.999;  // Adam/AdamW second-moment decay (nanoGPT: 0.99)
    // AdamW: decoupled weight decay applies only to matrices (weights of matmuls and
    // embeddings, dim >= 2), never to biases and LayerNorm gains (nanoGPT's two groups).
    bool decayMatricesOnly = false;
    double clipNorm = 0; // > 0: gradients scaled so their global L2 norm is at most this
};

} // namespace devicerace::detail
