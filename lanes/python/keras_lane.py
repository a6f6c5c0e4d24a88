#!/usr/bin/env python3
"""DeviceRace's Keras lane: one lane trained by Keras 3 on JAX, TensorFlow or PyTorch, driven over
the worker protocol (seed 003 raced Keras on two backends; this races it on three).

DeviceRace starts it for a lane with framework=keras-jax, keras-tensorflow or keras-torch as
    python lanes/python/keras_lane.py --backend jax|tensorflow|torch --proto 1
and speaks the worker protocol (docs/EVENTS.md) with it on stdin/stdout (devicerace_worker.py).

What it trains is what a Keras user writes for the workload: the engine's network built from
Keras layers (channels-last images, Keras' Glorot-uniform defaults for the Keras networks, He
fan-out normal convolutions and BatchNormalization(momentum=0.9, epsilon=1e-5) - PyTorch's -
for the ResNets), the engine's optimizer with its hyperparameters (Adam's epsilon 1e-8 as the
engine's; weight decay added to every gradient as torch.optim does), the engine's learning-rate
schedule as a Keras LearningRateSchedule, and the workload table and data of the PyTorch lane
(workload_table.py, in this folder; uint8 images scaled by 1/255, channel-expanded and padded to
32x32 for the CIFAR networks, inside the compiled step). Parameter counts are checked against
the engine's before any data loads.

One training step is the backend's own compiled step, as Keras' fit() would run it: a jax.jit
of stateless_call + value_and_grad + the optimizer's stateless_apply (JAX); a tf.function with
a GradientTape and optimizer.apply, XLA only where TensorFlow sees a GPU as Keras' jit_compile
"auto" decides (TensorFlow); eager model call, backward and optimizer.apply (PyTorch). Each step's
loss and correct count stay on the device until a report point (lane_common.train_loop), where
the lane waits for the device (jax.block_until_ready; reading the values) before the clock is
read.

Devices: a `cpu` lane runs on the framework's CPU device; a `cuda` / `cuda:N` lane on the N-th
accelerator the framework finds - for JAX that is a GPU or a TPU, so on a Cloud TPU VM reached
over ssh:// a keras-jax `cuda` lane is a TPU lane (README, "Race frameworks"; untested here).
threads=N on a CPU lane pins the process to N CPUs (XLA's CPU thread pool has no other knob once
JAX has started, which it has for the hello) and sets PyTorch's / TensorFlow's intra-op threads.

A backend that is not installed is refused at config with the command that installs it
(scripts/setup --frameworks).
"""
import importlib.metadata
import importlib.util
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import devicerace_worker as dw  # noqa: E402  (must come before any framework: it guards stdout)
import lane_common as lc  # noqa: E402

NAME = "keras_lane"
# The backends and the Python modules each needs besides keras.
BACKENDS = {"jax": ("jax", "jaxlib"), "tensorflow": ("tensorflow",), "torch": ("torch",)}
# Lane keys this lane acts on, and the engine keys it accepts without acting on them (DeviceRace's
# own fast paths, costs, process placement; Keras images are channels-last already).
ACCEPTED = ("name", "threads", "batch", "lr", "precision", "wd", "momentum", "schedule", "data", "eval_batch",
            "fault")
IGNORED = ("framework", "fused", "graph", "resident", "cost", "isolate", "cli", "cmd", "channels_last")
# What installs the frameworks (the refusal names it).
SETUP = "scripts/setup --frameworks"
# Networks the Keras lane builds as a Keras user writes them, whose parameter count differs from
# the engine's by a known, harmless amount: Keras' LSTM keeps one bias vector per gate where
# PyTorch's (the engine's) keeps two (b_ih + b_hh, which add up to one bias in the cell's sum), so
# the Keras network has 4 x hidden fewer parameters per direction and computes the same function.
MERGED_BIAS = {
    "imdb-bilstm": (2 * 4 * 64, "Keras' LSTM has one bias vector per gate, PyTorch's two: 512 fewer parameters "
                                "for the same cell"),
    "charlstm": (4 * 128, "Keras' LSTM has one bias vector per gate, PyTorch's two: 512 fewer parameters "
                          "for the same cell"),
}

keras = ops = np = wt = None  # imported by load_framework(), after the protocol stream is guarded
BACKEND = None


def package_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def version_text(backend):
    b = {"jax": "jax", "tensorflow": "tensorflow-cpu", "torch": "torch"}[backend]
    bv = package_version(b) or (package_version("tensorflow") if backend == "tensorflow" else None)
    return f"keras {package_version('keras') or '(not installed)'} on {backend} {bv or '(not installed)'}"


def missing_modules(backend):
    """The modules this backend needs that this Python cannot import (find_spec: nothing loads)."""
    return [m for m in ("numpy", "keras") + BACKENDS[backend] if importlib.util.find_spec(m) is None]


def load_framework(backend):
    """Imports keras on `backend`; returns None, or why it cannot (shown in the refusal)."""
    global keras, ops, np, wt, BACKEND
    missing = missing_modules(backend)
    if missing:
        return (f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed for {sys.executable}; "
                f"run {SETUP} (it installs the pinned keras, jax, jaxlib and tensorflow-cpu into .venv)")
    os.environ["KERAS_BACKEND"] = backend
    # Passive OpenMP waiting (shared cores); TensorFlow's C++ INFO lines would fill the lane's log.
    if os.environ.get("DEVICERACE_OMP_WAIT") != "spin":  # the race runs each lane alone: libgomp's default
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import numpy as numpy_module
        import keras as keras_module
        import workload_table
    except Exception as e:
        return (f"keras on {backend} cannot be imported ({type(e).__name__}: {' '.join(str(e).split())}); "
                f"run {SETUP}")
    if keras_module.backend.backend() != backend:
        return f"keras chose the {keras_module.backend.backend()} backend, not {backend} (KERAS_BACKEND)"
    keras, ops, np, wt, BACKEND = keras_module, keras_module.ops, numpy_module, workload_table, backend
    return None

# ---------------------------------------------------------------------------------------------
# The machine (hello) and the lane's device.
# ---------------------------------------------------------------------------------------------


def accelerators():
    """[(platform, index, name, extra report fields)] of the accelerators the backend sees."""
    out = []
    if BACKEND == "jax":
        import jax
        for platform in ("gpu", "tpu"):
            try:
                devices = jax.devices(platform)
            except RuntimeError:  # no such backend in this jaxlib
                continue
            for i, d in enumerate(devices):
                out.append((platform, i, d.device_kind, {"jax_device": str(d)}))
    elif BACKEND == "tensorflow":
        import tensorflow as tf
        for i, d in enumerate(tf.config.list_physical_devices("GPU")):
            details = tf.config.experimental.get_device_details(d)
            cc = details.get("compute_capability")
            out.append(("gpu", i, details.get("device_name", d.name),
                        {"compute": f"{cc[0]}.{cc[1]}" if cc else ""}))
    else:
        import torch
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                out.append(("gpu", i, p.name, {"total_memory_bytes": int(p.total_memory),
                                               "compute": f"{p.major}.{p.minor}"}))
    return out


def device_report():
    cpu = dw.cpu_report()
    cpu["blas"] = {"jax": "XLA:CPU (Eigen)", "tensorflow": "oneDNN / Eigen",
                   "torch": "MKL (bundled with PyTorch)"}[BACKEND]
    cpu["blas_is_reference"] = False
    gpus, others = [], []
    reason = ""
    try:
        found = accelerators()
    except Exception as e:
        found, reason = [], f"{BACKEND} could not list its devices: {type(e).__name__}: {e}"
    for platform, i, name, extra in found:
        entry = dict({"index": i, "name": name, "utilization_percent": None, "used_memory_bytes": None}, **extra)
        (gpus if platform == "gpu" else others).append(dict(entry, platform=platform))
    if not gpus and not reason:
        reason = f"{BACKEND} finds no GPU here" + (f" (it finds {len(others)} TPU core(s))" if others else "")
    report = {"cpu": cpu, "gpus": gpus, "cuda_available": bool(gpus), "cuda_unavailable_reason": reason,
              "accelerators": gpus + others, "keras": keras.__version__, "backend": BACKEND,
              "backend_version": version_text(BACKEND), "host": dw.host_name()}
    if BACKEND == "torch":
        import torch
        report["torch"] = torch.__version__.split("+")[0]
    return report


def lane_device(spec, name):
    """(keras device for keras.device(), label, is_accelerator) for the lane's DEVICE."""
    if spec["device"] == "cpu":
        if BACKEND == "jax":
            import jax
            return jax.devices("cpu")[0], "CPU", False
        # Keras' PyTorch variables are .to(device) Parameters: "cpu:0" would copy them into plain tensors.
        return "cpu" if BACKEND == "torch" else "cpu:0", "CPU", False
    index = int(spec["device"].split(":")[1]) if ":" in spec["device"] else 0
    found = accelerators()
    if not found:
        hint = {"jax": f"{SETUP} installs a CPU-only jaxlib: add jax[cuda12] for a GPU, jax[tpu] on a TPU VM",
                "tensorflow": f"{SETUP} installs tensorflow-cpu: add tensorflow[and-cuda] for a GPU",
                "torch": "this PyTorch sees no CUDA device"}[BACKEND]
        raise dw.LaneRefused(f"lane {name}: {BACKEND} finds no GPU{' or TPU' if BACKEND == 'jax' else ''} on this "
                             f"machine ({hint}); race it on cpu")
    if index >= len(found):
        raise dw.LaneRefused(f"lane {name}: {spec['device']} does not exist ({BACKEND} finds {len(found)} "
                             "accelerator(s))")
    platform, i, kind, _ = found[index]
    if BACKEND == "jax":
        import jax
        return jax.devices(platform)[i], f"{platform.upper()} {i} ({kind})", True
    return f"gpu:{i}", f"GPU {i} ({kind})", True


def limit_cpus(threads):
    """Pins every thread of this process (and so the threads it starts later) to `threads` of the
    CPUs it may use; True when it pinned."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return False
    if threads >= len(allowed):
        return False
    keep = set(allowed[:threads])
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), keep)
        except OSError:
            pass
    return True

# ---------------------------------------------------------------------------------------------
# Networks (engine/src/models_keras.cpp, models_resnet.cpp; torch_networks.py's PyTorch versions).
# ---------------------------------------------------------------------------------------------


def he_conv(filters, k, stride=1):
    """PyTorch-style conv: no bias, N(0, 2/fan_out) weights, symmetric zero padding k//2."""
    L = keras.layers
    init = keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")
    layers = []
    if k // 2 and stride != 1:
        layers.append(L.ZeroPadding2D(k // 2))  # "same" would pad bottom/right only at stride 2
    layers.append(L.Conv2D(filters, k, strides=stride, padding="same" if stride == 1 else "valid", use_bias=False,
                           kernel_initializer=init))

    def apply(x):
        for layer in layers:
            x = layer(x)
        return x
    return apply


def bn():
    return keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5)  # PyTorch's defaults


def torch_dense(units, fan_in, use_bias=True):
    bound = 1.0 / math.sqrt(fan_in)
    return keras.layers.Dense(units, use_bias=use_bias, kernel_initializer=keras.initializers.RandomUniform(-bound, bound))


def option_a_shortcut(pad, stride):
    """He et al.'s option A: the strided identity, zero-padded on channels."""
    class ShortcutA(keras.layers.Layer):
        def call(self, x):
            x = x[:, ::stride, ::stride, :]
            lo = pad // 2
            return ops.pad(x, [[0, 0], [0, 0], [0, 0], [lo, pad - lo]])
    return ShortcutA()


def mlp(inputs):
    L = keras.layers
    h = L.Flatten()(inputs)
    h = L.Dropout(0.2)(L.Dense(512, activation="relu")(h))
    h = L.Dropout(0.2)(L.Dense(512, activation="relu")(h))
    return L.Dense(10)(h)


def cnn(inputs):
    L = keras.layers
    h = L.Conv2D(32, 3, activation="relu")(inputs)
    h = L.MaxPooling2D(2)(L.Conv2D(64, 3, activation="relu")(h))
    h = L.Flatten()(L.Dropout(0.25)(h))
    h = L.Dropout(0.5)(L.Dense(128, activation="relu")(h))
    return L.Dense(10)(h)


def vgg(inputs):
    L = keras.layers
    h = L.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    h = L.Dropout(0.25)(L.MaxPooling2D(2)(L.Conv2D(32, 3, activation="relu")(h)))
    h = L.Conv2D(64, 3, padding="same", activation="relu")(h)
    h = L.Dropout(0.25)(L.MaxPooling2D(2)(L.Conv2D(64, 3, activation="relu")(h)))
    h = L.Dropout(0.5)(L.Dense(512, activation="relu")(L.Flatten()(h)))
    return L.Dense(10)(h)


def cifar_resnet(workload):
    def build(inputs):
        depth = wt.WORKLOADS[workload]["network"]["depth"]
        L = keras.layers
        h = L.ReLU()(bn()(he_conv(16, 3)(inputs)))
        cin = 16
        for width in (16, 32, 64):
            for b in range((depth - 2) // 6):
                stride = 2 if (b == 0 and width != 16) else 1
                r = L.ReLU()(bn()(he_conv(width, 3, stride)(h)))
                r = bn()(he_conv(width, 3)(r))
                shortcut = option_a_shortcut(width - cin, stride)(h) if (stride != 1 or width != cin) else h
                h = L.ReLU()(L.Add()([r, shortcut]))
                cin = width
        return torch_dense(10, 64)(L.GlobalAveragePooling2D()(h))
    return build


def davidnet(inputs):
    L = keras.layers

    def conv_bn(x, filters):
        return L.ReLU()(bn()(he_conv(filters, 3)(x)))

    h = conv_bn(inputs, 64)
    h = L.MaxPooling2D(2)(conv_bn(h, 128))
    h = L.Add()([h, conv_bn(conv_bn(h, 128), 128)])
    h = L.MaxPooling2D(2)(conv_bn(h, 256))
    h = L.MaxPooling2D(2)(conv_bn(h, 512))
    h = L.Add()([h, conv_bn(conv_bn(h, 512), 512)])
    h = L.GlobalMaxPooling2D()(h)
    return L.Rescaling(0.125)(torch_dense(10, 512, use_bias=False)(h))  # the reference's output scale


def fasttext(inputs):
    L = keras.layers
    h = L.GlobalAveragePooling1D()(L.Embedding(20000, 50)(inputs))  # Keras' U(+-0.05) embedding
    return L.Dense(1)(h)


def lstm_layer(hidden, fan=None):
    """keras.layers.LSTM with the engine's (PyTorch's) U(+-1/sqrt(hidden)) on kernels and bias
    (no unit forget bias); Keras picks its fused cuDNN kernel where the backend has one."""
    u = keras.initializers.RandomUniform(-1.0 / math.sqrt(hidden), 1.0 / math.sqrt(hidden))
    return keras.layers.LSTM(hidden, kernel_initializer=u, recurrent_initializer=u, bias_initializer=u,
                             unit_forget_bias=False)


def imdb_bilstm(inputs):
    """Keras' imdb_bidirectional_lstm example: Embedding 20000 x 128, BiLSTM 64, Dropout 0.5, Dense 1."""
    L = keras.layers
    h = L.Embedding(20000, 128)(inputs)  # Keras' U(+-0.05), as the engine
    h = L.Bidirectional(lstm_layer(64))(h)  # forward final state ++ backward final state
    return L.Dense(1)(L.Dropout(0.5)(h))


def charlstm(inputs):
    """Keras' lstm_text_generation example: one-hot characters, LSTM 128, Dense over 60 characters."""
    class OneHot(keras.layers.Layer):
        def call(self, x):
            return ops.one_hot(x, 60, dtype=self.compute_dtype)
    h = lstm_layer(128)(OneHot()(inputs))
    return keras.layers.Dense(60)(h)


def resnet50(inputs):
    """ResNet-50 v1.5 (the stride on the 3x3 conv), as engine/src/models_resnet.cpp and torch_networks.py."""
    L = keras.layers
    h = L.ReLU()(bn()(he_conv(64, 7, 2)(inputs)))
    h = L.MaxPooling2D(3, strides=2)(L.ZeroPadding2D(1)(h))  # after a ReLU, zero padding is -inf padding
    cin = 64
    for width, count in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(count):
            stride = 2 if (b == 0 and width != 64) else 1
            cout = width * 4
            r = L.ReLU()(bn()(he_conv(width, 1)(h)))
            r = L.ReLU()(bn()(he_conv(width, 3, stride)(r)))
            r = bn()(he_conv(cout, 1)(r))
            shortcut = bn()(he_conv(cout, 1, stride)(h)) if (stride != 1 or cin != cout) else h
            h = L.ReLU()(L.Add()([r, shortcut]))
            cin = cout
    return torch_dense(1000, 2048)(L.GlobalAveragePooling2D()(h))


def char_gpt(workload):
    """nanoGPT's GPT in Keras layers (models_gpt.cpp, torch_networks.CharGpt): token + learned
    position embeddings, pre-LayerNorm blocks of causal keras.layers.MultiHeadAttention (separate
    q/k/v projections with biases: 4C^2 + 4C parameters, as nanoGPT's fused c_attn + c_proj) and a
    GELU MLP 4x wide, a final LayerNorm, the output head tied to the token embedding. N(0, 0.02)
    init; the MLP's output projection at 0.02/sqrt(2L) (MultiHeadAttention takes one initialiser
    for all four of its projections: its output projection stays at 0.02)."""
    def build(inputs, vocabulary=0):
        L = keras.layers
        cfg = wt.WORKLOADS[workload]["network"]
        width, heads, layers, drop = cfg["width"], cfg["heads"], cfg["layers"], cfg["dropout"]
        vocabulary = vocabulary or wt.WORKLOADS[workload]["vocabulary"]
        normal = keras.initializers.RandomNormal(stddev=0.02)
        proj = keras.initializers.RandomNormal(stddev=0.02 / math.sqrt(2 * layers))

        class Positions(L.Layer):
            def build(self, shape):
                self.table = self.add_weight(shape=(cfg["context"], width), initializer=normal, name="wpe")

            def call(self, x):
                return x + self.table[: ops.shape(x)[1]]

        class TiedHead(L.Layer):
            def __init__(self, embedding, **kw):
                super().__init__(**kw)
                self.embedding = embedding

            def call(self, h):
                return ops.matmul(h, ops.transpose(ops.cast(self.embedding.embeddings, h.dtype)))

        wte = L.Embedding(vocabulary, width, embeddings_initializer=normal, name="wte")
        h = L.Dropout(drop)(Positions(name="positions")(wte(inputs)))
        for i in range(layers):
            a = L.LayerNormalization(epsilon=1e-5, name=f"ln_1_{i}")(h)
            a = L.MultiHeadAttention(heads, width // heads, kernel_initializer=normal, name=f"attn_{i}")(
                a, a, use_causal_mask=True)
            h = L.Add()([h, L.Dropout(drop)(a)])
            m = L.LayerNormalization(epsilon=1e-5, name=f"ln_2_{i}")(h)
            m = L.Dense(4 * width, kernel_initializer=normal, name=f"c_fc_{i}")(m)
            m = L.Activation(lambda z: ops.gelu(z, approximate=False))(m)
            m = L.Dense(width, kernel_initializer=proj, name=f"mlp_c_proj_{i}")(m)
            h = L.Add()([h, L.Dropout(drop)(m)])
        h = L.LayerNormalization(epsilon=1e-5, name="ln_f")(h)
        return TiedHead(wte, name="lm_head")(h)
    return build


BUILDERS = {"fashion-mlp": mlp, "fashion-cnn": cnn, "cifar-resnet20": cifar_resnet("cifar-resnet20"),
            "cifar-resnet32": cifar_resnet("cifar-resnet32"), "cifar-resnet56": cifar_resnet("cifar-resnet56"), "cifar-vgg": vgg,
            "davidnet": davidnet, "fasttext": fasttext, "imdb-bilstm": imdb_bilstm, "charlstm": charlstm,
            "imagenet-resnet50": resnet50, "char-gpt": char_gpt("char-gpt"), "char-gpt-6l": char_gpt("char-gpt-6l")}


def input_shape(w):
    """The network's input as Keras sees it: channels-last images, token sequences as is (a
    language model sees T of each example's T+1 tokens)."""
    if w["lm"]:
        return (w["lm"],)
    if w["tokens"]:
        return tuple(w["shape"])
    c, h, wd = w["shape"]
    return (h, wd, c)


def build_model(workload, w, vocabulary=0):
    if workload not in BUILDERS:
        raise dw.LaneRefused(f"unknown workload '{workload}' for the Keras lane (it runs {', '.join(BUILDERS)})")
    inputs = keras.Input(input_shape(w), dtype="int32" if w["tokens"] else "float32")
    outputs = BUILDERS[workload](inputs, vocabulary) if w["lm"] else BUILDERS[workload](inputs)
    return keras.Model(inputs, outputs, name=workload.replace("-", "_"))

# ---------------------------------------------------------------------------------------------
# Optimizer, schedule, loss, input preparation (keras.ops: the same code on every backend).
# ---------------------------------------------------------------------------------------------


def engine_schedule(lr, schedule, total):
    """workload_table.schedule_factor as a Keras schedule of the optimizer's step count."""
    class EngineSchedule(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            f = ops.cast(step, "float32") / float(total)
            if schedule == "step":
                factor = ops.where(f < 4.0 / 9, 1.0, ops.where(f < 6.0 / 9, 0.1, ops.where(f < 8.0 / 9, 0.01, 0.001)))
            elif schedule == "cosine":  # nanoGPT: linear warm-up over 5%, then a cosine down to 0.1
                warm = (ops.cast(step, "float32") + 1.0) / (0.05 * float(total) + 1.0)
                ratio = ops.minimum(1.0, ops.maximum(0.0, (f - 0.05) / 0.95))
                factor = ops.where(f < 0.05, warm, 0.1 + 0.45 * (1.0 + ops.cos(math.pi * ratio)))
            else:  # onecycle
                peak = 5.0 / 24.0
                factor = ops.where(f < peak, f / peak, ops.maximum(0.0, (1.0 - f) / (1.0 - peak)))
            return lr * factor

        def get_config(self):
            return {"lr": lr, "schedule": schedule, "total": total}
    return EngineSchedule()


def make_optimizer(rule, lr, momentum, wd=0.0):
    """The workload's update rule (the engine's kind, alpha, eps, beta2, clip) in Keras."""
    O = keras.optimizers
    kind = rule["kind"]
    clip = rule["clip_norm"] or None
    if kind == "adamw":  # nanoGPT: decay on matrices and embeddings only
        opt = O.AdamW(learning_rate=lr, weight_decay=wd, beta_2=rule["beta2"], epsilon=rule["eps"],
                      global_clipnorm=clip)
        if rule["decay_matrices_only"]:
            opt.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
        return opt
    if kind == "rmsprop":  # Keras' own defaults: rho 0.9, epsilon 1e-7
        return O.RMSprop(learning_rate=lr, rho=rule["alpha"], epsilon=rule["eps"], global_clipnorm=clip)
    if kind == "adam":  # the engine's (PyTorch's) epsilon
        return O.Adam(learning_rate=lr, beta_2=rule["beta2"], epsilon=rule["eps"], global_clipnorm=clip)
    if kind in ("sgd", "sgd-nesterov"):
        return O.SGD(learning_rate=lr, momentum=momentum, nesterov=kind == "sgd-nesterov")
    raise ValueError(kind)


def make_loss(binary):
    """loss_and_correct(logits, y) -> (mean float32 loss, int32 correct count) and the summed form."""
    def losses(logits, y):
        logits = ops.cast(logits, "float32")
        if binary:
            z = ops.squeeze(logits, 1)
            per = ops.binary_crossentropy(ops.cast(y, "float32"), z, from_logits=True)
            right = ops.equal(ops.cast(z > 0, "int32"), ops.cast(y, "int32"))
        else:
            per = ops.sparse_categorical_crossentropy(y, logits, from_logits=True)
            right = ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), ops.cast(y, "int32"))
        return per, ops.sum(ops.cast(right, "int32"))

    def mean(logits, y):
        per, correct = losses(logits, y)
        return ops.mean(per), correct

    def total(logits, y):
        per, correct = losses(logits, y)
        return ops.sum(per), correct
    return mean, total


def make_prepare(w):
    """One batch as the network eats it (lane_data.cpp prepareInput): uint8 images scaled to
    [0, 1], channel-expanded and padded (or resized) to the network's shape."""
    if w["tokens"]:
        return lambda x: x
    c, h, wd = w["shape"]

    def prepare(x):
        if x.dtype == "uint8" or str(x.dtype).endswith("uint8"):
            x = ops.cast(x, "float32") / 255.0
            x = ops.expand_dims(x, -1)  # (B, 28, 28, 1)
        if x.shape[-1] != c:
            x = ops.repeat(x, c, axis=-1)
        dh, dwid = h - x.shape[1], wd - x.shape[2]
        if 0 < dh <= 8 and 0 < dwid <= 8:
            x = ops.pad(x, [[0, 0], [dh // 2, dh - dh // 2], [dwid // 2, dwid - dwid // 2], [0, 0]])
        elif dh or dwid:
            x = ops.image.resize(x, (h, wd), interpolation="bilinear")
        return x
    return prepare

# ---------------------------------------------------------------------------------------------
# The backends' training steps: step(x, y) -> (loss, correct) left on the device.
# ---------------------------------------------------------------------------------------------


# Every this many steps, the Keras lanes time the compiled step alone (the step breakdown's
# "compute"; "data" is timed on every step).
KERAS_BREAKDOWN_EVERY = 8


def fetch_stacked(queued):
    """The queued (loss, correct) values on the host, stacked on the device first (one copy)."""
    losses = ops.convert_to_numpy(ops.stack([q[0] for q in queued]))
    correct = int(ops.convert_to_numpy(ops.sum(ops.stack([q[1] for q in queued]))))
    return [float(v) for v in losses], correct


class JaxSteps:
    """jax.jit of the whole step on the model's state as arrays (Keras' JAX trainer does the same)."""

    def __init__(self, model, optimizer, wd, prepare, loss_mean, loss_sum):
        import jax
        self.jax = jax
        optimizer.build(model.trainable_variables)
        self.state = ([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables],
                      [v.value for v in optimizer.variables])

        def forward(tv, ntv, x, y):
            logits, ntv = model.stateless_call(tv, ntv, prepare(x), training=True)
            loss, correct = loss_mean(logits, y)
            return loss, (ntv, correct)
        grad = jax.value_and_grad(forward, has_aux=True)

        def train(state, x, y):
            tv, ntv, ov = state
            (loss, (ntv, correct)), grads = grad(tv, ntv, x, y)
            if wd:
                grads = [g + wd * v for g, v in zip(grads, tv)]
            tv, ov = optimizer.stateless_apply(ov, grads, tv)
            return (tv, ntv, ov), loss, correct

        def evaluate(state, x, y):
            tv, ntv, _ = state
            logits, _ = model.stateless_call(tv, ntv, prepare(x), training=False)
            return loss_sum(logits, y)
        def logits(state, x):
            tv, ntv, _ = state
            return model.stateless_call(tv, ntv, prepare(x), training=False)[0]
        self._train = jax.jit(train, donate_argnums=0)
        self._eval = jax.jit(evaluate)
        self._logits = jax.jit(logits)

    def step(self, x, y):
        self.state, loss, correct = self._train(self.state, x, y)
        return loss, correct

    def logits(self, x):
        """The network's output for `x` with the trained weights (the model's own variables
        are stale: the state lives in the jitted step's arrays)."""
        return self._logits(self.state, x)

    def evaluate(self, x, y):
        return self._eval(self.state, x, y)

    def sync(self):
        self.jax.block_until_ready(self.state)

    def wait(self, result):
        """Returns once the step that gave `result` is done (jax dispatches asynchronously)."""
        self.jax.block_until_ready(result)

    def fetch(self, queued):
        """The queued (loss, correct) values on the host: one transfer, no stack (jnp.stack would
        compile anew for every count of steps between reports)."""
        values = self.jax.device_get(queued)
        return [float(loss) for loss, _ in values], int(sum(int(c) for _, c in values))


class TensorFlowSteps:
    """A tf.function of forward, GradientTape and optimizer.apply; XLA as Keras' "auto" decides."""

    def __init__(self, model, optimizer, wd, prepare, loss_mean, loss_sum, accelerator):
        import tensorflow as tf
        variables = model.trainable_variables
        optimizer.build(variables)
        self.xla = accelerator  # Keras: jit_compile "auto" is off on CPU-only machines

        def train(x, y):
            with tf.GradientTape() as tape:
                logits = model(prepare(x), training=True)
                loss, correct = loss_mean(logits, y)
            grads = tape.gradient(loss, [v.value for v in variables])
            if wd:
                grads = [g + wd * v.value for g, v in zip(grads, variables)]
            optimizer.apply(grads, variables)
            return loss, correct

        def evaluate(x, y):
            return loss_sum(model(prepare(x), training=False), y)
        self._model = model
        self._train = tf.function(train, jit_compile=self.xla, reduce_retracing=True)
        self._eval = tf.function(evaluate, jit_compile=self.xla, reduce_retracing=True)

    def step(self, x, y):
        return self._train(x, y)

    def evaluate(self, x, y):
        return self._eval(x, y)

    def logits(self, x):
        return self._model(x, training=False)

    def sync(self):
        pass  # reading the values waits for them

    def wait(self, result):
        result[0].numpy()  # a value read from the step's output is there once the step is done

    def fetch(self, queued):
        return fetch_stacked(queued)


class TorchSteps:
    """Eager forward, backward and optimizer.apply (Keras' PyTorch trainer: no torch.compile by default)."""

    def __init__(self, model, optimizer, wd, prepare, loss_mean, loss_sum, device):
        import torch
        self.torch, self.model, self.optimizer = torch, model, optimizer
        self.variables = model.trainable_variables
        optimizer.build(self.variables)
        self.wd, self.prepare, self.loss_mean, self.loss_sum = wd, prepare, loss_mean, loss_sum
        self.cuda = device.startswith("gpu")

    def tensor(self, a):
        return ops.convert_to_tensor(a)

    def step(self, x, y):
        torch = self.torch
        logits = self.model(self.prepare(self.tensor(x)), training=True)
        loss, correct = self.loss_mean(logits, self.tensor(y))
        self.model.zero_grad()
        loss.backward()
        grads = [v.value.grad for v in self.variables]
        with torch.no_grad():
            if self.wd:
                grads = [g + self.wd * v.value for g, v in zip(grads, self.variables)]
            self.optimizer.apply(grads, self.variables)
        return loss.detach(), correct

    def evaluate(self, x, y):
        with self.torch.no_grad():
            return self.loss_sum(self.model(self.prepare(self.tensor(x)), training=False), self.tensor(y))

    def logits(self, x):
        with self.torch.no_grad():
            return self.model(self.tensor(x), training=False)

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def wait(self, result):
        self.sync()

    def fetch(self, queued):
        return fetch_stacked(queued)

# ---------------------------------------------------------------------------------------------
# The lane.
# ---------------------------------------------------------------------------------------------


def synthetic_arrays(w, count, batch, rng):
    """(X, Y) numpy arrays of a synthetic set: a pool of min(count, max(8 batches, 256 MiB))
    examples reused with index % pool, as torch_networks.synthetic_split."""
    shape = tuple(w["shape"]) if w["tokens"] else input_shape(w)  # a language model's T+1 tokens
    elems = math.prod(shape)
    pool = min(count, max(8 * batch, wt.SYNTHETIC_POOL_BYTES // max(1, elems * 4)))
    if w["tokens"]:
        x = rng.integers(0, w["vocabulary"], (pool, *shape), dtype=np.int32)
    else:
        x = rng.random((pool, *shape), dtype=np.float32)
    return x, rng.integers(0, w["classes"], (pool,), dtype=np.int32)


class KerasLane:
    step_buffer = None

    def __init__(self, config, session):
        c = dw.parse_config(config)
        workload = c["workload"]
        if workload not in BUILDERS or workload not in wt.WORKLOADS:
            raise dw.LaneRefused(f"unknown workload '{workload}' for the Keras lane (it runs {', '.join(BUILDERS)})")
        w = dict(wt.WORKLOADS[workload])
        lane_label = f"the Keras ({BACKEND}) lane"
        spec = dw.lane_fields(c, ACCEPTED, IGNORED, lane_label)
        self.c, self.w, self.spec = c, w, spec
        self.name = spec.get("name") or spec["device"]
        self.step_buffer = wt.STEP_BUFFER

        # Device, threads, precision.
        self.device, self.device_label, self.accelerator = lane_device(spec, self.name)
        threads, cpu = lc.check_threads(spec, self.name)
        self.threads = threads or (1 if self.accelerator else cpu["physical_cores"])
        self.pinned = False
        if not self.accelerator:
            self.pinned = limit_cpus(self.threads)
            self.set_threads()
        self.precision = spec.get("precision", "fp32")
        if self.precision == "fp16":
            raise dw.LaneRefused(f"lane {self.name}: the Keras lane trains in fp32 or bf16 (mixed_bfloat16), not fp16")
        keras.mixed_precision.set_global_policy("mixed_bfloat16" if self.precision == "bf16" else "float32")
        self.lr = spec.get("lr", w["lr"])
        self.wd = spec.get("wd", w["wd"])
        self.momentum = spec.get("momentum", w["momentum"])
        self.schedule = spec.get("schedule", w["schedule"])
        self.fault = lc.parse_fault(spec.get("fault"))
        keras.utils.set_random_seed(c["seed"])

        with keras.device(self.device):
            # The network first: a model that differs from the engine's is refused before any data loads.
            self.model = build_model(workload, w)
            self.parameters = parameter_count(self.model)
            expected, self.network_note = c["expected_parameters"], ""
            if expected is not None and workload in MERGED_BIAS:
                fewer, why = MERGED_BIAS[workload]
                if self.parameters == expected - fewer:
                    expected, self.network_note = self.parameters, why
            lc.check_parameters(workload, self.parameters, expected, "Keras")

            # Data: numpy on the host, one batch gathered per step (as Keras' fit feeds arrays).
            mode = spec.get("data") or c["data"]
            d = lc.resolve_data(workload, w, mode, c["data_dir"], c["train_limit"], c["test_limit"], lane_label)
            self.batch = spec.get("batch", w["batch"])
            rng = np.random.default_rng(c["seed"])
            self.alphabet = []
            if "text" in d:
                # A language model on real text: the network at the text's alphabet (checked
                # above at the nominal one, as the engine counts it).
                train_ids, test_ids, self.alphabet = lc.load_lm_text(w, d, c)
                keras.utils.set_random_seed(c["seed"])
                self.model = build_model(workload, w, len(self.alphabet))
                self.train_x, self.test_x = train_ids.astype(np.int32), test_ids.astype(np.int32)
                self.train_y = np.zeros(len(self.train_x), np.int32)  # the targets are inside x
                self.test_y = np.zeros(len(self.test_x), np.int32)
                train_count, test_count = len(self.train_x), len(self.test_x)
                if self.batch > train_count:
                    raise dw.LaneRefused(f"lane {self.name}: batch={self.batch} is larger than the {train_count} "
                                         "training examples")
            elif d["synthetic"]:
                train_count, test_count = d["counts"]
                if self.batch > train_count:
                    raise dw.LaneRefused(f"lane {self.name}: batch={self.batch} is larger than the {train_count} "
                                         "training examples")
                self.train_x, self.train_y = synthetic_arrays(w, train_count, self.batch, rng)
                self.test_x, self.test_y = synthetic_arrays(w, test_count, self.batch, rng)
            else:
                self.train_x, self.train_y = lc.load_fashion_split(d["fashion"], "train", c["train_limit"], w["classes"])
                self.test_x, self.test_y = lc.load_fashion_split(d["fashion"], "t10k", c["test_limit"], w["classes"])
                self.train_y, self.test_y = self.train_y.astype(np.int32), self.test_y.astype(np.int32)
                train_count, test_count = len(self.train_x), len(self.test_x)
                if self.batch > train_count:
                    raise dw.LaneRefused(f"lane {self.name}: batch={self.batch} is larger than the {train_count} "
                                         "training examples")
            self.train_count, self.test_count = train_count, test_count
            self.dataset = {k: d[k] for k in ("name", "source", "synthetic", "note")}
            self.dataset.update(train=train_count, test=test_count)
            if self.alphabet:  # the text's alphabet, as the engine's worker sends it
                self.dataset.update(vocabulary=len(self.alphabet), tokens=[str(t) for t in self.alphabet])
            self.rng = rng

            # Run length, evaluation batches.
            self.steps_per_epoch = (train_count + self.batch - 1) // self.batch
            self.total_steps = c["steps"] or self.steps_per_epoch * (c["epochs"] or w["epochs"])
            per_eval = 32768 // w["lm"] if w["lm"] else 3072000 // math.prod(w["shape"])  # run_plan.cpp
            self.eval_batch = spec.get("eval_batch") or max(self.batch, min(1000, per_eval))

            # Optimizer and the backend's step.
            lr = self.lr if self.schedule == "constant" else engine_schedule(self.lr, self.schedule, self.total_steps)
            self.optimizer = make_optimizer(w["rule"], lr, self.momentum, self.wd)
            if w["optimizer"] == "adamw":
                self.wd = 0.0  # decoupled, inside AdamW (matrices only): not added to the gradients
            loss_mean, loss_sum = make_loss(w["binary"])
            prepare = make_prepare(w)
            if BACKEND == "jax":
                self.steps = JaxSteps(self.model, self.optimizer, self.wd, prepare, loss_mean, loss_sum)
            elif BACKEND == "tensorflow":
                self.steps = TensorFlowSteps(self.model, self.optimizer, self.wd, prepare, loss_mean, loss_sum,
                                             self.accelerator)
            else:
                self.steps = TorchSteps(self.model, self.optimizer, self.wd, prepare, loss_mean, loss_sum,
                                        str(self.device))
        self.queued = []

        self.meter = dw.Meter(session.emit, self.name, self.steps_per_epoch, c["warmup"])
        # The step breakdown: the backend runs the step as one compiled program (jax.jit,
        # tf.function) or dispatches it asynchronously, so its phases are "data" and "compute".
        self.clock = lc.CompiledStepClock(every=KERAS_BREAKDOWN_EVERY)
        self.ready = {"batch": self.batch, "total_steps": self.total_steps,
                      "threads": self.threads if (not self.accelerator or threads) else None, "dataset": self.dataset,
                      "device": self.device_label}

    def set_threads(self):
        if BACKEND == "torch":
            import torch
            torch.set_num_threads(self.threads)
        elif BACKEND == "tensorflow":
            import tensorflow as tf
            try:
                tf.config.threading.set_intra_op_parallelism_threads(self.threads)
                tf.config.threading.set_inter_op_parallelism_threads(self.threads)
            except RuntimeError:  # the runtime already started: the CPU pinning bounds it
                pass

    def describe(self):
        kind = {"rmsprop": "RMSprop", "adam": "Adam", "adamw": "AdamW", "sgd": "SGD",
                "sgd-nesterov": "Nesterov SGD"}[self.w["optimizer"]]
        how = {"jax": "jax.jit step (stateless_call, value_and_grad, stateless_apply)",
               "tensorflow": "tf.function step" + (" with XLA" if getattr(self.steps, "xla", False) else
                                                   " (no XLA on a CPU, as Keras' jit_compile=auto)"),
               "torch": "eager step (Keras' PyTorch trainer, no torch.compile)"}[BACKEND]
        text = f"Keras {keras.__version__} on {version_text(BACKEND).split(' on ', 1)[1]}, {how}, keras.optimizers.{kind}"
        text += f", {'mixed_bfloat16' if self.precision == 'bf16' else 'fp32'}, channels-last, on {self.device_label}"
        if self.network_note:
            text += f"; {self.network_note}"
        if self.pinned:
            text += f" (pinned to {self.threads} CPU{'s' if self.threads > 1 else ''})"
        return text

    # Report points and evaluations ------------------------------------------------------

    def pending(self):
        return len(self.queued)

    def report(self):
        if not self.queued:
            return None
        self.steps.sync()
        losses, correct = self.steps.fetch(self.queued)
        self.queued = []
        breakdown, overlapped = self.clock.take()
        return self.meter.report(losses, correct / (self.w["lm"] or 1),  # language models: per character
                                 breakdown, overlapped)

    def evaluate(self):
        meter = self.meter
        meter.state("evaluating")
        start = time.perf_counter()
        n = len(self.test_x)
        loss_sum, correct = 0.0, 0
        with keras.device(self.device):
            for i in range(0, n, self.eval_batch):
                x, y = self.split(self.test_x[i:i + self.eval_batch], self.test_y[i:i + self.eval_batch])
                loss, right = self.steps.evaluate(x, y)
                loss_sum += float(ops.convert_to_numpy(loss))
                correct += int(ops.convert_to_numpy(right))
            text = self.sample_text() if self.alphabet else ""
        scored = n * (self.w["lm"] or 1)
        meter.evaluation(loss_sum / scored, correct / scored, time.perf_counter() - start, text)
        meter.state("running")

    # The loop ---------------------------------------------------------------------------------

    def split(self, x, y):
        """Language models: T+1 tokens per example as the input (the first T) and the next-token
        targets (the last T); other workloads unchanged."""
        if self.w["lm"]:
            return np.ascontiguousarray(x[:, :-1]), np.ascontiguousarray(x[:, 1:])
        return x, y

    def sample_text(self):
        """120 characters from a newline, temperature 0.8, drawn with a numpy generator seeded by
        the lane's seed (the same weights write the same text). The window is always T long: the
        tokens so far at positions 0.., causal attention keeps the padding after them unseen."""
        t = self.w["lm"]
        ids = [self.alphabet.index("\n") if "\n" in self.alphabet else int(self.test_x[0, 0])]
        rng = np.random.default_rng(self.c["seed"])
        out = []
        for _ in range(120):
            window = ids[-t:]
            x = np.zeros((1, t), np.int32)
            x[0, :len(window)] = window
            logits = ops.convert_to_numpy(ops.cast(self.steps.logits(x), "float32"))[0, len(window) - 1]
            z = logits / 0.8
            p = np.exp(z - z.max())
            nxt = int(rng.choice(len(p), p=p / p.sum()))
            ids.append(nxt)
            out.append(self.alphabet[nxt])
        return "".join(out)

    def new_order(self):
        return self.rng.permutation(self.train_count)

    def step(self, order, pos, take, step):
        start = time.perf_counter()
        idx = order[pos:pos + take]
        if len(self.train_x) < self.train_count:  # a synthetic pool
            idx = idx % len(self.train_x)
        x, y = self.split(self.train_x[idx], self.train_y[idx])
        self.clock.add_data(time.perf_counter() - start)
        if self.clock.due(step):
            if self.queued:
                self.steps.wait(self.queued[-1])  # the steps before it are done: it runs alone
            start = time.perf_counter()
            result = self.steps.step(x, y)
            self.steps.wait(result)
            self.clock.add_compute(time.perf_counter() - start)
        else:
            result = self.steps.step(x, y)
        self.queued.append(result)

    def run(self, session):
        self.meter.state("preparing")
        if not self.accelerator:
            self.set_threads()
        with keras.device(self.device):
            return lc.train_loop(self, session, NAME)


def parameter_count(model):
    """The parameter count as the engine (PyTorch) counts it: trainable weights; BatchNorm's
    moving mean and variance are buffers there, not parameters."""
    return int(sum(math.prod(v.shape) for v in model.trainable_weights))


class KerasProgram:
    def __init__(self, backend, missing):
        self.backend, self.missing = backend, missing

    def hello(self):
        if self.missing:
            return {"version": version_text(self.backend), "devices": {
                "cpu": dw.cpu_report(), "gpus": [], "cuda_available": False,
                "cuda_unavailable_reason": f"keras-{self.backend} is not installed", "host": dw.host_name()}}
        return {"version": version_text(self.backend), "devices": device_report()}

    def configure(self, config, session):
        if self.missing:
            raise dw.LaneRefused(f"framework=keras-{self.backend}: {self.missing}")
        return KerasLane(config, session)


def parse_backend(argv):
    for i, a in enumerate(argv):
        if a == "--backend" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--backend="):
            return a.split("=", 1)[1]
    return None


def main(argv):
    dw.guard_stdout()
    backend = parse_backend(argv)
    if backend not in BACKENDS:
        dw.log(f"{NAME}: --backend {backend or '(missing)'}: expected one of {', '.join(BACKENDS)}")
        return dw.EXIT_FAILED
    proto = dw.parse_proto(argv)
    if proto != dw.PROTO_MAJOR:
        return dw.refuse_protocol(proto if proto is not None else "(not a number)", version_text(backend), NAME)
    missing = load_framework(backend)
    if missing:
        dw.log(f"{NAME}: {missing}")
    return dw.Worker(KerasProgram(backend, missing), NAME).run()


if __name__ == "__main__":
    dw.run_main(main, NAME)
