# Sourced on a GPU machine (no Qt, no Debian packages, no build there): the engine, the
# CLI and the GPU tests built on the build machine travel in .gpu/ (bench/gpu/pack) and link
# the LibTorch of the machine's own torch 2.11 wheel, the same version as the .venv here.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"
TORCH_LIB="$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
NV="$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia"))')"
export LD_LIBRARY_PATH="$ROOT/.gpu/lib:$TORCH_LIB:$NV/cu13/lib:$NV/cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DEVICERACE_FASHION_MNIST="$ROOT/.gpu/data"
export DEVICERACE_TEXT_CORPUS="$ROOT/.gpu/data/fortunes"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
export PYTHONUNBUFFERED=1
CLI="$ROOT/.gpu/bin/devicerace-cli"
# The Python lane programs and peers read the workload schema from it (lanes/python/engine_schema.py).
export DEVICERACE_CLI="$CLI"
# The framework lanes (framework=pytorch) run the source tree's lane programs with the machine's python.
export DEVICERACE_LANES="$ROOT/lanes/python"
export DEVICERACE_PYTHON="$PY"
