#pragma once
// Which update rule a workload trains with: part of the workload's definition (models/), used
// by the optimizers of train/. Includes nothing.

namespace devicerace::detail {

/// Which update rule a workload trains with (the kind decides the fast path).
struct OptimizerRecipe {
    enum class Kind { Adam, Sgd, RmsProp };
    Kind kind = Kind::Adam;
    bool nesterov = false; // SGD
    double alpha = 0.99;   // RMSprop smoothing (Keras: 0.9)
    double eps = 1e-8;     // Adam/RMSprop epsilon (Keras RMSprop: 1e-7)
};

} // namespace devicerace::detail
