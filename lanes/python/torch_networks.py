"""The PyTorch networks of every DeviceRace workload and the per-step work around them: what
lanes/python/pytorch_lane.py (framework=pytorch) trains, and what the benchmark's PyTorch peers
(bench/peers/peer.py, bench/peers/ddp_peer.py) import from here to measure the C++ lanes against.

Each network is what a PyTorch user would write for the same job, matching the C++ lane in
everything that decides the work done per step:

- network: the same layers, shapes, padding, shortcuts (option A for the CIFAR ResNets,
  a 1x1 projection for ResNet-50 v1.5 with the stride on the 3x3 conv), dropout rates, output
  scale (DavidNet's x0.125) and init scheme (engine/src/models*.cpp: Glorot-uniform with zero
  biases for the Keras networks, He fan-out normal convs / BN 1,0 / U(+-1/sqrt(fan_in)) linears
  for the ResNets, U(+-0.05) embeddings, U(+-1/sqrt(hidden)) LSTMs);
- optimizer: the same class and hyperparameters (Keras RMSprop alpha=0.9 eps=1e-7, Adam,
  SGD with momentum / Nesterov and weight decay on every parameter), PyTorch's DEFAULT
  implementation (no foreach= / fused= passed: in torch 2.11 that is the per-parameter for-loop
  on the CPU and the foreach (multi-tensor) kernels on CUDA);
- data: synthetic sets generated on the device once (a pool of examples reused with perm % pool
  when the set would be large), and each batch prepared as the engine's prepareInput does (uint8
  images as float /255, channel-expanded and padded to 32x32 or bilinearly resized to 224);
- per step: forward (under torch.autocast for bf16/fp16), float32 loss, zero_grad(set_to_none),
  backward, step (GradScaler for fp16), the loss and the batch's correct count returned as
  device tensors (no host sync per step).

The workloads' definitions and the run-length constants come from the engine
(engine_schema.py); the learning-rate schedules and the Fashion-MNIST reader are in
workload_table.py (no framework; shared with keras_lane.py). Nothing here imports
from bench/: the product's lane programs never depend on the benchmark.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import workload_table
from workload_table import WORKLOADS  # noqa: F401  (the engine's, re-exported for the peers)

# The network of each workload, built from its engine entry `w` (the shape numbers of
# w["network"]) and the options `o` (fused LSTM, the text's vocabulary).
MODELS = {
    "fashion-mlp": lambda w, o: MnistMlp(),
    "fashion-cnn": lambda w, o: MnistCnn(),
    "cifar-resnet20": lambda w, o: CifarResNet((w["network"]["depth"] - 2) // 6),
    "cifar-resnet32": lambda w, o: CifarResNet((w["network"]["depth"] - 2) // 6),
    "cifar-resnet56": lambda w, o: CifarResNet((w["network"]["depth"] - 2) // 6),
    "cifar-vgg": lambda w, o: CifarVgg(),
    "davidnet": lambda w, o: DavidNet(),
    "imdb-bilstm": lambda w, o: ImdbBiLstm(o["fused"]),
    "fasttext": lambda w, o: FastText(),
    "charlstm": lambda w, o: CharLstm(o["fused"], w["vocabulary"]),
    "char-gpt": lambda w, o: CharGpt(o.get("vocabulary") or w["vocabulary"], **w["network"]),
    "char-gpt-6l": lambda w, o: CharGpt(o.get("vocabulary") or w["vocabulary"], **w["network"]),
    "imagenet-resnet50": lambda w, o: ResNet50(),
}

# ---------------------------------------------------------------------------------------------
# Initialisers (engine/src/models.cpp).
# ---------------------------------------------------------------------------------------------

def glorot_(module):
    """Keras' default: Glorot-uniform weights, zero biases (every parameter of `module`)."""
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() >= 2:
                nn.init.xavier_uniform_(p)
            else:
                nn.init.zeros_(p)


def he_(module):
    """He et al.: conv weights N(0, 2/fan_out), BN scale 1 / shift 0, linear U(+-1/sqrt(fan_in)), biases 0."""
    with torch.no_grad():
        for m in module.modules():
            for name, p in m.named_parameters(recurse=False):
                if isinstance(m, nn.BatchNorm2d):
                    nn.init.ones_(p) if name == "weight" else nn.init.zeros_(p)
                elif p.dim() == 4:
                    nn.init.kaiming_normal_(p, mode="fan_out", nonlinearity="relu")
                elif p.dim() == 2:
                    bound = 1.0 / math.sqrt(p.size(1))
                    nn.init.uniform_(p, -bound, bound)
                else:
                    nn.init.zeros_(p)


def lstm_init_(module, hidden):
    """PyTorch's LSTM default, U(+-1/sqrt(hidden)), on every parameter (weights and biases)."""
    bound = 1.0 / math.sqrt(hidden)
    with torch.no_grad():
        for p in module.parameters():
            nn.init.uniform_(p, -bound, bound)


def conv(cin, cout, k, stride=1):
    return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)

# ---------------------------------------------------------------------------------------------
# Networks (engine/src/models_keras.cpp, models_resnet.cpp, models_rnn.cpp).
# ---------------------------------------------------------------------------------------------

class MnistMlp(nn.Module):
    """Keras mnist_mlp: Dense 512 ReLU, Dropout 0.2, Dense 512 ReLU, Dropout 0.2, Dense 10."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)
        glorot_(self)

    def forward(self, x):
        h = F.dropout(F.relu(self.fc1(x.flatten(1)), inplace=True), 0.2, self.training)
        h = F.dropout(F.relu(self.fc2(h), inplace=True), 0.2, self.training)
        return self.fc3(h)


class MnistCnn(nn.Module):
    """Keras mnist_cnn: Conv 32 3x3, Conv 64 3x3, MaxPool 2, Dropout .25, Dense 128, Dropout .5, Dense 10."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.fc1, self.fc2 = nn.Linear(64 * 12 * 12, 128), nn.Linear(128, 10)
        glorot_(self)

    def forward(self, x):
        h = F.relu(self.conv1(x), inplace=True)
        h = F.max_pool2d(F.relu(self.conv2(h), inplace=True), 2)
        h = F.dropout(h, 0.25, self.training).flatten(1)
        h = F.dropout(F.relu(self.fc1(h), inplace=True), 0.5, self.training)
        return self.fc2(h)


class CifarVgg(nn.Module):
    """Keras cifar10_cnn: Conv32 same, Conv32, MaxPool, Drop .25, Conv64 same, Conv64, MaxPool, Drop .25,
    Dense 512, Drop .5, Dense 10 (1,250,858 parameters)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 32, 3)
        self.c3, self.c4 = nn.Conv2d(32, 64, 3, padding=1), nn.Conv2d(64, 64, 3)
        self.fc1, self.fc2 = nn.Linear(64 * 6 * 6, 512), nn.Linear(512, 10)
        glorot_(self)

    def forward(self, x):
        h = F.relu(self.c2(F.relu(self.c1(x), inplace=True)), inplace=True)
        h = F.dropout(F.max_pool2d(h, 2), 0.25, self.training)
        h = F.relu(self.c4(F.relu(self.c3(h), inplace=True)), inplace=True)
        h = F.dropout(F.max_pool2d(h, 2), 0.25, self.training).flatten(1)
        h = F.dropout(F.relu(self.fc1(h), inplace=True), 0.5, self.training)
        return self.fc2(h)


class FastText(nn.Module):
    """Keras imdb_fasttext (unigrams): Embedding 20000 x 50, mean over tokens, Dense 1 (1,000,051 parameters)."""

    def __init__(self):
        super().__init__()
        self.embed, self.fc = nn.Embedding(20000, 50), nn.Linear(50, 1)
        with torch.no_grad():
            nn.init.uniform_(self.embed.weight, -0.05, 0.05)  # Keras' embedding initialiser
        glorot_(self.fc)

    def forward(self, x):
        return self.fc(self.embed(x).mean(1))


class BasicBlock(nn.Module):
    """He et al. CIFAR basic block, option-A shortcut (strided identity zero-padded on channels)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.pad, self.stride = cout - cin, stride
        self.c1, self.b1 = conv(cin, cout, 3, stride), nn.BatchNorm2d(cout)
        self.c2, self.b2 = conv(cout, cout, 3), nn.BatchNorm2d(cout)

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)), inplace=True)
        h = self.b2(self.c2(h))
        shortcut = x
        if self.stride != 1 or self.pad != 0:
            shortcut = x[:, :, ::self.stride, ::self.stride]
            shortcut = F.pad(shortcut, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(h + shortcut, inplace=True)


class CifarResNet(nn.Module):
    def __init__(self, blocks_per_stage):
        super().__init__()
        self.stem, self.bn = conv(3, 16, 3), nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for width in (16, 32, 64):
            for b in range(blocks_per_stage):
                blocks.append(BasicBlock(cin, width, 2 if (b == 0 and width != 16) else 1))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, 10)
        he_(self)

    def forward(self, x):
        h = F.relu(self.bn(self.stem(x)), inplace=True)
        return self.fc(self.blocks(h).mean((2, 3)))


class ConvBn(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.c, self.b = conv(cin, cout, 3), nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.relu(self.b(self.c(x)), inplace=True)


class DavidNet(nn.Module):
    """DAWNBench ResNet-9: prep, three layers with two residual blocks, max-pool, bias-free linear x 1/8."""

    def __init__(self):
        super().__init__()
        self.prep, self.l1 = ConvBn(3, 64), ConvBn(64, 128)
        self.r1a, self.r1b = ConvBn(128, 128), ConvBn(128, 128)
        self.l2, self.l3 = ConvBn(128, 256), ConvBn(256, 512)
        self.r3a, self.r3b = ConvBn(512, 512), ConvBn(512, 512)
        self.fc = nn.Linear(512, 10, bias=False)
        he_(self)

    def forward(self, x):
        h = self.prep(x)
        h = F.max_pool2d(self.l1(h), 2)
        h = h + self.r1b(self.r1a(h))
        h = F.max_pool2d(self.l2(h), 2)
        h = F.max_pool2d(self.l3(h), 2)
        h = h + self.r3b(self.r3a(h))
        h = F.adaptive_max_pool2d(h, 1).flatten(1)
        return self.fc(h) * 0.125  # the reference's output scale


class Bottleneck(nn.Module):
    """ResNet-50 v1.5 bottleneck: the stride sits on the 3x3 conv."""

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.c1, self.b1 = conv(cin, width, 1), nn.BatchNorm2d(width)
        self.c2, self.b2 = conv(width, width, 3, stride), nn.BatchNorm2d(width)
        self.c3, self.b3 = conv(width, cout, 1), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(conv(cin, cout, 1, stride), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)), inplace=True)
        h = F.relu(self.b2(self.c2(h)), inplace=True)
        h = self.b3(self.c3(h))
        return F.relu(h + (self.down(x) if self.down is not None else x), inplace=True)


class ResNet50(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.bn = conv(3, 64, 7, 2), nn.BatchNorm2d(64)
        blocks, cin = [], 64
        for width, count in ((64, 3), (128, 4), (256, 6), (512, 3)):
            for b in range(count):
                blocks.append(Bottleneck(cin, width, 2 if (b == 0 and width != 64) else 1))
                cin = width * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(2048, 1000)
        he_(self)

    def forward(self, x):
        h = F.relu(self.bn(self.stem(x)), inplace=True)
        h = F.max_pool2d(h, 3, stride=2, padding=1)
        return self.fc(self.blocks(h).mean((2, 3)))


class LstmRunner(nn.Module):
    """One LSTM layer over (B, T, F) -> final hidden state (B, H), or (B, 2H) forward ++ backward:
    nn.LSTM (fused; cuDNN on GPU) or an LSTMCell loop (cells), like engine LstmRunnerImpl."""

    def __init__(self, cin, hidden, bidirectional, fused):
        super().__init__()
        self.fused, self.bi = fused, bidirectional
        if fused:
            self.lstm = nn.LSTM(cin, hidden, batch_first=True, bidirectional=bidirectional)
        else:
            self.fwd = nn.LSTMCell(cin, hidden)
            if bidirectional:
                self.bwd = nn.LSTMCell(cin, hidden)

    def forward(self, x):
        if self.fused:
            _, (hn, _) = self.lstm(x)  # hn: (directions, B, H)
            return torch.cat((hn[0], hn[1]), 1) if self.bi else hn[0]

        def run(cell, reverse):
            steps, state = x.size(1), None
            for i in range(steps):
                state = cell(x.select(1, steps - 1 - i if reverse else i), state)
            return state[0]

        h = run(self.fwd, False)
        return torch.cat((h, run(self.bwd, True)), 1) if self.bi else h


class ImdbBiLstm(nn.Module):
    """Keras imdb_bidirectional_lstm: Embedding 20000 x 128, BiLSTM 64, Dropout 0.5, Dense 1."""

    def __init__(self, fused):
        super().__init__()
        self.embed = nn.Embedding(20000, 128)
        self.rnn = LstmRunner(128, 64, True, fused)
        self.fc = nn.Linear(128, 1)
        with torch.no_grad():
            nn.init.uniform_(self.embed.weight, -0.05, 0.05)
        lstm_init_(self.rnn, 64)
        glorot_(self.fc)

    def forward(self, x):
        return self.fc(F.dropout(self.rnn(self.embed(x)), 0.5, self.training))


class CharLstm(nn.Module):
    """Keras lstm_text_generation: one-hot characters, LSTM 128 over 40-character windows, Dense."""

    def __init__(self, fused, vocabulary):
        super().__init__()
        self.vocab = vocabulary
        self.rnn = LstmRunner(vocabulary, 128, False, fused)
        self.fc = nn.Linear(128, vocabulary)
        lstm_init_(self.rnn, 128)
        glorot_(self.fc)

    def forward(self, x):
        return self.fc(self.rnn(F.one_hot(x, self.vocab).to(torch.float32)))


class GptBlock(nn.Module):
    """nanoGPT's Block: x + attn(ln_1(x)), then x + mlp(ln_2(x)); causal attention through
    F.scaled_dot_product_attention (models_gpt.cpp)."""

    def __init__(self, heads, width, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.attn_c_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_c_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        x = x + F.dropout(self.attn_c_proj(y), self.dropout, self.training)
        return x + F.dropout(self.mlp_c_proj(F.gelu(self.c_fc(self.ln_2(x)))), self.dropout, self.training)


class CharGpt(nn.Module):
    """nanoGPT's GPT, character level: token + learned position embeddings, pre-LayerNorm blocks,
    a final LayerNorm and the head tied to the token embedding; N(0, 0.02) init with the residual
    projections at 0.02 / sqrt(2 * layers), zero biases."""

    def __init__(self, vocabulary, layers, heads, width, context, dropout):
        super().__init__()
        self.dropout = dropout
        self.wte = nn.Embedding(vocabulary, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(GptBlock(heads, width, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
                elif p.dim() >= 2:
                    nn.init.normal_(p, 0.0, 0.02)
                elif name.endswith("bias") and "ln_" not in name:
                    nn.init.zeros_(p)

    def forward(self, x):
        pos = torch.arange(x.size(1), device=x.device)
        h = F.dropout(self.wte(x) + self.wpe(pos), self.dropout, self.training)
        for block in self.blocks:
            h = block(h)
        return F.linear(self.ln_f(h), self.wte.weight)

# ---------------------------------------------------------------------------------------------
# Optimizers (engine models*.cpp; the schedules are in workload_table.py).
# ---------------------------------------------------------------------------------------------

def make_optimizer(w, params, lr, wd, momentum):
    """The workload's update rule (w["rule"]: the engine's kind, alpha, eps, beta2) at the lane's
    lr, weight decay and momentum. PyTorch's defaults decide the implementation (no foreach= /
    fused=): see the docstring."""
    rule = w["rule"]
    kind = rule["kind"]
    if kind == "adamw":  # nanoGPT's configure_optimizers: matrices decay, biases and LayerNorms do not
        params = list(params)
        groups = [{"params": [p for p in params if p.dim() >= 2 or not rule["decay_matrices_only"]],
                   "weight_decay": wd},
                  {"params": [p for p in params if p.dim() < 2 and rule["decay_matrices_only"]], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, rule["beta2"]), eps=rule["eps"])
    if kind == "rmsprop":  # Keras RMSprop: rho 0.9, epsilon 1e-7
        return torch.optim.RMSprop(params, lr=lr, alpha=rule["alpha"], eps=rule["eps"], weight_decay=wd)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(0.9, rule["beta2"]), eps=rule["eps"], weight_decay=wd)
    if kind in ("sgd", "sgd-nesterov"):
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=wd, nesterov=kind == "sgd-nesterov")
    raise ValueError(kind)

# ---------------------------------------------------------------------------------------------
# Data (engine race.cpp resolveData, lane_data.cpp loadLaneData / prepareInput).
# ---------------------------------------------------------------------------------------------

def synthetic_split(w, count, batch, device):
    """(X, Y) of a synthetic set of `count` examples, generated on the device with the global
    generator: a pool of min(count, max(8 batches, 256 MiB)) examples (loadLaneData)."""
    elems = math.prod(w["shape"])
    pool = min(count, max(8 * batch, workload_table.SYNTHETIC_POOL_BYTES // max(1, elems * 4)))
    shape = (pool, *w["shape"])
    if w["tokens"]:
        x = torch.randint(0, w["vocabulary"], shape, device=device, dtype=torch.int64)
    else:
        x = torch.rand(shape, device=device)
    y = torch.randint(0, w["classes"], (pool,), device=device, dtype=torch.int64)
    return x, y


def prepare_input(x, want, channels_last):
    """One batch as the network eats it (prepareInput; no data set here has a mean/stddev)."""
    if x.dtype == torch.int64:
        return x
    if x.dtype == torch.uint8:
        x = x.to(torch.float32).div_(255.0)
    if len(want) == 3:
        c, h, w = want
        if x.size(1) != c:
            x = x.expand(x.size(0), c, x.size(2), x.size(3))
        if x.size(2) != h or x.size(3) != w:
            dh, dw = h - x.size(2), w - x.size(3)
            if 0 < dh <= 8 and 0 < dw <= 8:
                top, left = dh // 2, dw // 2
                x = F.pad(x, (left, dw - left, top, dh - top))
            else:
                x = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False)
        x = x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    return x

# ---------------------------------------------------------------------------------------------
# One training step.
# ---------------------------------------------------------------------------------------------

def loss_functions(w):
    """(loss_of(logits, y, reduction="mean"), correct_of(logits, y)) for the workload: binary
    cross-entropy on one logit for the binary ones, cross-entropy otherwise."""
    if w["binary"]:
        def loss_of(logits, y, reduction="mean"):
            return F.binary_cross_entropy_with_logits(logits.squeeze(1), y.to(torch.float32), reduction=reduction)

        def correct_of(logits, y):
            return ((logits.squeeze(1) > 0) == y).sum()
    elif w["lm"]:  # next-token prediction: logits (B, T, V), targets (B, T)
        def loss_of(logits, y, reduction="mean"):
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction=reduction)

        def correct_of(logits, y):
            return (logits.argmax(-1) == y).sum()
    else:
        def loss_of(logits, y, reduction="mean"):
            return F.cross_entropy(logits, y, reduction=reduction)

        def correct_of(logits, y):
            return (logits.argmax(1) == y).sum()
    return loss_of, correct_of


def split_targets(w, x, y):
    """Language models: a batch of T+1-token examples as inputs (the first T) and next-token
    targets (the last T); other workloads unchanged (Trainer::splitTargets)."""
    if w["lm"]:
        return x[:, :-1], x[:, 1:]
    return x, y


def train_step_once(model, opt, scaler, autocast, loss_of, correct_of, x, y, clip=0.0, mark=None):
    """One optimizer step on a prepared batch: forward (under `autocast()`), float32 loss,
    zero_grad(set_to_none), backward, gradients clipped to a global norm of `clip` (> 0; nanoGPT's
    grad_clip), step (through `scaler` for fp16). Returns the detached loss and the batch's
    correct count as device tensors (no host sync). `mark(phase)`, where given, is called as each
    phase ends: forward (with the loss), backward, optimizer (zeroing, clipping, the update)."""
    mark = mark or (lambda phase: None)
    with autocast():
        logits = model(x).to(torch.float32)
        loss = loss_of(logits, y)
    mark("forward")
    opt.zero_grad(set_to_none=True)
    mark("optimizer")
    if scaler is not None:
        scaler.scale(loss).backward()
        mark("backward")
        if clip > 0:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        mark("backward")
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    mark("optimizer")
    return loss.detach(), correct_of(logits.detach(), y)


def build_model(name, fused=True, vocabulary=0):
    """The workload's network; `vocabulary`: the text's alphabet for the language models (0: the
    nominal 65 that the engine's parameter count assumes)."""
    return MODELS[name](WORKLOADS[name], {"fused": fused, "vocabulary": vocabulary})


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())
