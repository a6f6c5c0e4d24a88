// Precompiled for the engine's torch translation units only (see engine/CMakeLists.txt).
#pragma once
#include <ATen/ATen.h>
#include <torch/nn.h>
#include <torch/optim.h>
