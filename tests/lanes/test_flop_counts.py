"""A script lane's FLOPs per sample (lanes/python/devicerace/_keras_flops.py, devicerace/_torch.py,
devicerace/_jax_flops.py, devicerace/_tf_flops.py): a JAX step's from its jaxpr and a
TensorFlow step's from its graph, against figures worked out by hand;
the counter a PyTorch script's step runs under, on the CPU's fused attention and a grouped
convolution; a Keras model counted from its layers, checked against PyTorch's FlopCounterMode over one
train_on_batch of the same model on Keras' torch backend where that counter is right, and
against figures worked out by hand where it is not (it has no formula for the CPU's fused
attention, and counts a grouped convolution's weight gradient once per group).

Run as: .venv/bin/python tests/lanes/test_flop_counts.py (skipped, saying so, without Keras).
"""
import importlib.util
import os
import sys
import unittest

os.environ["KERAS_BACKEND"] = "torch"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lanes", "python"))

HAVE_KERAS = all(importlib.util.find_spec(m) is not None for m in ("keras", "torch"))
if HAVE_KERAS:
    import keras
    import numpy as np
    from torch.utils.flop_counter import FlopCounterMode

    from devicerace import _keras_flops

BATCH = 4


def torch_count(model, x):
    """PyTorch's FlopCounterMode over one train_on_batch (after a first one), a sample."""
    y = np.zeros((len(x),), dtype="int64")
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.train_on_batch(x, y)
    counter = FlopCounterMode(display=False)
    with counter:
        model.train_on_batch(x, y)
    return counter.get_total_flops() / len(x)


def images(*shape):
    return np.random.default_rng(0).random((BATCH, *shape), dtype=np.float32)


@unittest.skipUnless(HAVE_KERAS, "Keras 3 and PyTorch are not installed (scripts/setup --frameworks)")
class KerasFlops(unittest.TestCase):
    def counted(self, model):
        c = _keras_flops.count(model)
        self.assertIn("per_sample", c, c)
        return c

    def test_dense_and_convolutions_as_pytorch_counts_them(self):
        # The first layer's input needs no gradient (only the weights'), every later one's does.
        mlp = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                                keras.layers.Dense(10)])
        c = self.counted(mlp)
        self.assertEqual(c["per_sample"], 2 * (784 * 256 * 2 + 256 * 10 * 3))
        self.assertEqual(c["per_sample"], torch_count(mlp, images(784)))
        self.assertEqual((c["precision"], c["how"]), ("fp32", "counted from the Keras model's layers (Dense)"))
        inp = keras.Input((28, 28, 3))
        x = keras.layers.Conv2D(8, 3, strides=2, padding="same", activation="relu")(inp)
        x = keras.layers.Conv2D(16, 3)(x)
        x = keras.layers.Conv2DTranspose(4, 3, strides=2)(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        conv = keras.Model(inp, keras.layers.Dense(10)(x))
        self.assertEqual(self.counted(conv)["per_sample"], torch_count(conv, images(28, 28, 3)))

    def test_recurrent_layers_nested_models_and_an_embedding(self):
        # The recurrent state's gradient goes through the recurrent kernel at every step but the
        # first, whether or not the layer's input needs one; an embedding trains, so what follows
        # it needs input gradients; a Sequential inside is counted by its own graph.
        inp = keras.Input((20,))
        x = keras.layers.Embedding(50, 16)(inp)
        x = keras.layers.Bidirectional(keras.layers.LSTM(12, return_sequences=True))(x)
        x = keras.layers.GRU(10)(x)
        head = keras.Sequential([keras.Input((10,)), keras.layers.Dense(32, activation="relu"),
                                 keras.layers.Dense(10)])
        model = keras.Model(inp, head(x))
        c = self.counted(model)
        tokens = np.random.default_rng(0).integers(0, 50, (BATCH, 20))
        self.assertEqual(c["per_sample"], torch_count(model, tokens))
        self.assertEqual(c["how"], "counted from the Keras model's layers (Bidirectional(LSTM), GRU, Dense)")
        inp = keras.Input((20, 16))
        lstm = keras.Model(inp, keras.layers.Dense(10)(keras.layers.LSTM(12)(inp)))
        recurrent = 12 * 48  # the kernels: 16 x 4·12 on the input, 12 x 4·12 on the state
        self.assertEqual(self.counted(lstm)["per_sample"],
                         2 * (20 * (16 * 48 * 2 + recurrent * 3) - recurrent + 12 * 10 * 3))
        self.assertEqual(self.counted(lstm)["per_sample"], torch_count(lstm, images(20, 16)))

    def test_attention_and_grouped_convolutions_by_hand(self):
        # Self-attention, 2 heads of 8 on 20 tokens of 16: q, k, v projections (their input the
        # data's: no input gradient), the output projection (its input the context: a gradient),
        # scores and context (both operands' gradients). PyTorch's counter leaves the fused CPU
        # attention out: it reads the scores and context short.
        inp = keras.Input((20, 16))
        x = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)(inp, inp)
        attention = keras.Model(inp, keras.layers.Dense(10)(keras.layers.Flatten()(x)))
        projections, output, between, dense = 3 * 20 * 16 * 16, 20 * 16 * 16, 20 * 20 * 2 * 16, 320 * 10
        expected = 2 * (projections * 2 + output * 3 + between * 3 + dense * 3)
        self.assertEqual(self.counted(attention)["per_sample"], expected)
        self.assertEqual(torch_count(attention, images(20, 16)), expected - 2 * between * 3)
        # Depthwise 3x3 on 11x11x16 (9x9 out), then separable: depthwise 3x3 (7x7 out) and a
        # pointwise 16 -> 8; PyTorch's counter multiplies a grouped weight gradient by the groups.
        inp = keras.Input((11, 11, 16))
        x = keras.layers.DepthwiseConv2D(3)(inp)
        x = keras.layers.SeparableConv2D(8, 3)(x)
        grouped = keras.Model(inp, keras.layers.Dense(10)(keras.layers.Flatten()(x)))
        depthwise, separable, dense = 9 * 16 * 81, (9 * 16 + 16 * 8) * 49, 7 * 7 * 8 * 10
        self.assertEqual(self.counted(grouped)["per_sample"], 2 * (depthwise * 2 + separable * 3 + dense * 3))

    def test_what_it_cannot_count_is_said(self):
        class Scaled(keras.layers.Layer):  # weights it has no formula for
            def build(self, shape):
                self.w = self.add_weight(shape=(shape[-1], shape[-1]))

            def call(self, x):
                return keras.ops.matmul(x, self.w)

        inp = keras.Input((8,))
        unknown = keras.Model(inp, keras.layers.Dense(2)(Scaled()(inp)))
        self.assertEqual(_keras_flops.count(unknown),
                         {"not_counted": "the Keras model's FLOPs: a layer with weights it has no formula for (Scaled)"})

        class Untraceable(keras.Model):  # a call that needs values, not shapes
            def __init__(self):
                super().__init__()
                self.dense = keras.layers.Dense(2)

            def call(self, x):
                return self.dense(x) * float(keras.ops.convert_to_numpy(x).max())

        sub = Untraceable()
        sub(np.zeros((1, 8), dtype="float32"))
        self.assertIn("Untraceable is a subclassed model whose call could not be traced on symbolic inputs",
                      _keras_flops.count(sub)["not_counted"])
        never = Untraceable()
        self.assertIn("not built", _keras_flops.count(never)["not_counted"])
        # A weightless layer that may compute anything is counted as 0 and named.
        inp = keras.Input((8,))
        x = keras.layers.Lambda(lambda t: t * 2)(inp)
        lam = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Dropout(0.1)(x)))
        c = self.counted(lam)
        self.assertEqual(c["per_sample"], 2 * 8 * 2 * 2)
        self.assertEqual(c["how"], "counted from the Keras model's layers (Dense); counted as 0: Lambda")

    def test_subclassed_models_and_custom_blocks_are_traced(self):
        """A subclassed model is counted from its call run on symbolic inputs of its first batch's
        shape, a custom block (weights all its sublayers') from its call on its own inputs: as
        PyTorch counts a train_on_batch of them, with a raw matrix product of activations in."""

        class Block(keras.layers.Layer):  # a residual pair of dense layers, self-attention by matmul
            def __init__(self, width):
                super().__init__()
                self.qk = keras.layers.Dense(2 * width)
                self.out = keras.layers.Dense(width)

            def call(self, x):
                q, k = keras.ops.split(self.qk(x), 2, axis=-1)
                scores = keras.ops.softmax(keras.ops.matmul(q, keras.ops.transpose(k, (0, 2, 1))))
                return x + self.out(keras.ops.matmul(scores, x))

        class Net(keras.Model):
            def __init__(self):
                super().__init__()
                self.embed = keras.layers.Dense(16)
                self.block = Block(16)
                self.conv = keras.layers.Conv1D(8, 3)
                self.drop = keras.layers.Dropout(0.2)
                self.head = keras.layers.Dense(10)

            def call(self, x, training=False):
                h = self.block(self.embed(x))
                h = self.drop(keras.ops.relu(self.conv(h)), training=training)
                return self.head(keras.ops.reshape(h, (-1, 18 * 8)))

        net = Net()
        x = images(20, 6)
        net(x)
        c = self.counted(net)
        self.assertEqual(c["per_sample"], torch_count(net, x))
        embed, qk, scores, context, out, conv, head = (20 * 6 * 16, 20 * 16 * 32, 20 * 20 * 16, 20 * 20 * 16,
                                                       20 * 16 * 16, 18 * 3 * 16 * 8, 18 * 8 * 10)
        self.assertEqual(c["per_sample"], 2 * (embed * 2 + (qk + scores + context + out + conv + head) * 3))
        self.assertEqual(c["how"], "counted from the Keras model's layers (Dense, Matmul, Conv1D)")

        # The same block inside a functional model, on token embeddings (integer inputs).
        inp = keras.Input((20,), dtype="int32")
        h = Block(16)(keras.layers.Embedding(50, 16)(inp))
        functional = keras.Model(inp, keras.layers.Dense(10)(keras.layers.Flatten()(h)))
        tokens = np.random.default_rng(0).integers(0, 50, (BATCH, 20))
        self.assertEqual(self.counted(functional)["per_sample"], torch_count(functional, tokens))

        class Tokens(keras.Model):  # subclassed, on integer inputs, its output layer the embedding's
            def __init__(self):
                super().__init__()
                self.embed = keras.layers.Embedding(50, 16)
                self.mix = keras.layers.Dense(16)

            def call(self, x):
                h = self.mix(keras.ops.mean(self.embed(x), axis=1))
                return keras.ops.matmul(h, keras.ops.transpose(self.embed.embeddings))

        text = Tokens()
        text(tokens)
        c = self.counted(text)
        # The tied output: forward, the embedding's gradient, the input's.
        self.assertEqual(c["per_sample"], 2 * (16 * 16 * 3 + 16 * 50 * 3))
        self.assertEqual(c["per_sample"], torch_count(text, tokens))

    def test_mixed_bf16_is_said(self):
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
        try:
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
            self.assertEqual(self.counted(model)["precision"], "bf16")
        finally:
            keras.mixed_precision.set_global_policy("float32")


@unittest.skipUnless(importlib.util.find_spec("torch") is not None, "PyTorch is not installed")
class TorchScriptFlops(unittest.TestCase):
    def test_the_cpus_fused_attention_and_a_grouped_convolution_are_counted_right(self):
        """The counter a PyTorch script's step runs under (devicerace/_torch.py) counts the CPU's
        fused attention as PyTorch counts the GPU's (the backward recomputes the scores: 5 products
        against the forward's 2), and a depthwise convolution's weight gradient once, not per group
        (PyTorch's own counter: 0 for the attention, x16 for the weight gradient here)."""
        import torch
        import torch.nn.functional as F

        from devicerace import _torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.dw = torch.nn.Conv2d(16, 16, 3, groups=16)
                self.qkv = torch.nn.Linear(8, 24)
                self.out = torch.nn.Linear(9 * 9 * 16 + 20 * 8, 10)

            def forward(self, image, seq):
                a = self.dw(image)
                q, k, v = self.qkv(seq).view(len(seq), 20, 3, 2, 4).permute(2, 0, 3, 1, 4)
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(len(seq), -1)
                return self.out(torch.cat([a.flatten(1), o], 1))

        net, batch = Net(), 4
        counter = _torch._flop_counter()(display=False)
        with counter:
            loss = F.cross_entropy(net(torch.rand(batch, 16, 11, 11), torch.rand(batch, 20, 8)),
                                   torch.zeros(batch, dtype=torch.long))
            loss.backward()
        self.assertFalse(counter.failed)
        depthwise, qkv, product, out = 9 * 16 * 81, 20 * 8 * 24, 20 * 20 * 2 * 4, (9 * 9 * 16 + 20 * 8) * 10
        # The data's layers: forward and weight gradient; attention: 2 products, then 5; the head: 3.
        expected = 2 * (depthwise * 2 + qkv * 2 + product * (2 + 5) + out * 3)
        self.assertEqual(counter.get_total_flops() / batch, expected)


    def test_a_fused_lstm_on_the_cpu_is_counted(self):
        """nn.LSTM on a CPU runs as oneDNN's fused layer (`mkldnn_rnn_layer`, one a layer and
        direction), which PyTorch's own counter counts as 0: each of its weight matrices over
        every time step of every sequence, forward once, backward twice (the inputs' and hidden
        state's gradients, the weights')."""
        import torch
        import torch.nn.functional as F

        from devicerace import _torch

        if not torch.backends.mkldnn.is_available():
            self.skipTest("this PyTorch has no oneDNN: its LSTM is matrix products it counts itself")
        batch, steps, features, hidden = 4, 28, 28, 64
        lstm = torch.nn.LSTM(features, hidden, num_layers=2, batch_first=True, bidirectional=True)
        head = torch.nn.Linear(2 * hidden, 10)
        counter = _torch._flop_counter()(display=False)
        with counter:
            out, _ = lstm(torch.rand(batch, steps, features))
            F.cross_entropy(head(out[:, -1]), torch.zeros(batch, dtype=torch.long)).backward()
        self.assertFalse(counter.failed)
        gates = 4 * hidden
        per_direction = gates * (features + hidden) + gates * (2 * hidden + hidden)  # layer 1, layer 2
        expected = 2 * steps * 2 * per_direction * 3 + 2 * 2 * hidden * 10 * 3
        self.assertEqual(counter.get_total_flops() / batch, expected)


@unittest.skipUnless(importlib.util.find_spec("jax") is not None, "JAX is not installed (scripts/setup --frameworks)")
class JaxStepFlops(unittest.TestCase):
    """A JAX step's products counted from its jaxpr (devicerace/_jax_flops.py), the backward
    pass's as autodiff wrote them, against figures worked out by hand."""

    def test_dense_convolutions_and_a_scan(self):
        import jax
        import jax.numpy as jnp

        from devicerace import _jax_flops

        def mlp_loss(w, x, y):
            return jnp.mean((jnp.tanh(x @ w["a"]) @ w["b"] - y) ** 2)

        @jax.jit
        def step(w, x, y):
            loss, g = jax.value_and_grad(mlp_loss)(w, x, y)
            return jax.tree.map(lambda p, d: p - 0.1 * d, w, g), loss

        w = {"a": jnp.ones((784, 256)), "b": jnp.ones((256, 10))}
        c = _jax_flops.count(step, (w, jnp.ones((32, 784)), jnp.ones((32, 10))), {}, 32)
        # The data's layer: forward and weight gradient; the next: its input's gradient too.
        self.assertEqual(c["per_sample"], 2 * (784 * 256 * 2 + 256 * 10 * 3))
        self.assertEqual((c["precision"], c["how"]), ("fp32", "counted from the JAX step's jaxpr (dot_general)"))

        # 3x3 convolution 3 -> 8 channels on 12x12 (10x10 out), then a depthwise 3x3 (8x8 out): its
        # gradients are convolutions JAX writes with groups; the depthwise one's input gradient too.
        def conv(x, k, groups=1, stride=1, padding="VALID"):
            return jax.lax.conv_general_dilated(x, k, (stride, stride), padding,
                                                dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=groups)

        def conv_loss(k, x):
            return jnp.sum(conv(jax.nn.relu(conv(x, k["a"])), k["b"], 8) ** 2)

        k = {"a": jnp.ones((3, 3, 3, 8)), "b": jnp.ones((3, 3, 1, 8))}
        c = _jax_flops.count(jax.grad(conv_loss), (k, jnp.ones((4, 12, 12, 3))), {}, 4)
        first, depthwise = 10 * 10 * 8 * 3 * 9, 8 * 8 * 8 * 9
        self.assertEqual(c["per_sample"], 2 * (first * 2 + depthwise * 3))

        # Same padding, stride 2 then a valid convolution: the input gradients as many products as
        # the forwards (JAX writes them dilated by the stride, or padded past the kernel's reach).
        def strided_loss(k, x):
            h = jax.nn.relu(conv(x, k["a"], padding="SAME"))
            h = conv(h, k["b"], stride=2, padding="SAME")
            return jnp.sum(conv(h, k["c"]) ** 2)

        k = {"a": jnp.ones((3, 3, 4, 4)), "b": jnp.ones((3, 3, 4, 8)), "c": jnp.ones((3, 3, 8, 8))}
        c = _jax_flops.count(jax.grad(strided_loss), (k, jnp.ones((2, 16, 16, 4))), {}, 2)
        same, strided, valid = 16 * 16 * 4 * 4 * 9, 8 * 8 * 8 * 4 * 9, 6 * 6 * 8 * 8 * 9
        self.assertEqual(c["per_sample"], 2 * (same * 2 + (strided + valid) * 3))

        # A recurrent layer by lax.scan over 20 steps: each step's products counted 20 times (the
        # state's gradient at every step: the scan's backward runs its body whole).
        def rnn_loss(w, xs):
            def cell(h, x):
                h = jnp.tanh(x @ w["x"] + h @ w["h"])
                return h, h

            h, _ = jax.lax.scan(cell, jnp.zeros((xs.shape[1], 12)), xs)
            return jnp.sum(h)

        w = {"x": jnp.ones((16, 12)), "h": jnp.ones((12, 12))}
        c = _jax_flops.count(jax.grad(rnn_loss), (w, jnp.ones((20, 4, 16))), {}, 4)
        self.assertEqual(c["per_sample"], 2 * 20 * (16 * 12 * 2 + 12 * 12 * 3))

    def test_bf16_branches_loops_and_what_is_not_counted(self):
        import jax
        import jax.numpy as jnp

        from devicerace import _jax_flops

        x16, w16 = jnp.ones((8, 64), jnp.bfloat16), jnp.ones((64, 32), jnp.bfloat16)
        c = _jax_flops.count(lambda x, w: x @ w, (x16, w16), {}, 8)
        self.assertEqual((c["per_sample"], c["precision"]), (2 * 64 * 32, "bf16"))
        # A cond counts its costliest branch.
        branchy = lambda p, x, w: jax.lax.cond(p, lambda: (x @ w) @ w.T, lambda: x)  # noqa: E731
        x, w = jnp.ones((8, 64)), jnp.ones((64, 32))
        self.assertEqual(_jax_flops.count(branchy, (True, x, w), {}, 8)["per_sample"], 2 * 64 * 32 * 2)
        # A while loop of products: its trips are not known.
        looped = lambda x, w: jax.lax.while_loop(lambda v: v[0, 0] < 100, lambda v: v @ w, x)  # noqa: E731
        self.assertEqual(_jax_flops.count(looped, (jnp.ones((8, 8)), jnp.ones((8, 8))), {}, 8),
                         {"not_counted": "the JAX step's FLOPs: a while_loop computes products, and its trip count "
                                         "is not known before it runs"})
        # A training flag: a jitted step's static argument, or a Python scalar given to a plain one.
        from functools import partial

        @partial(jax.jit, static_argnames="train")
        def flagged(x, w, train=False):
            return x @ w if train else x

        self.assertEqual(_jax_flops.count(flagged, (x, w), {"train": True}, 8)["per_sample"], 2 * 64 * 32)
        self.assertEqual(_jax_flops.count(flagged.__wrapped__, (x, w, True), {}, 8)["per_sample"], 2 * 64 * 32)
        self.assertIn("no matrix product", _jax_flops.count(lambda x: x * 2, (x,), {}, 8)["not_counted"])
        self.assertIn("samples must be", _jax_flops.count(lambda x: x @ x.T, (x,), {}, 0)["not_counted"])
        self.assertIn("could not be counted", _jax_flops.count(lambda x: float(x.sum()), (x,), {}, 8)["not_counted"])

    def test_a_scripts_own_count_goes_with_its_next_report(self):
        import devicerace

        class Pipe:  # the report pipe of a lane in a race
            active, interval = True, 0.0

            def __init__(self):
                self.sent = []

            def send(self, message):
                self.sent.append(message)
                return True

        pipe = Pipe()
        lane = devicerace.Lane(pipe)
        for bad in (0, -1, float("nan"), float("inf"), "many"):
            with self.assertRaisesRegex(ValueError, "a positive number of FLOPs"):
                lane.flops(bad)
        with self.assertRaisesRegex(ValueError, "in fp32, bf16 or fp16"):
            lane.flops(1e6, precision="int8")
        lane.flops(3.2e6, "bf16")
        lane.step(samples=32, loss=1.0)
        lane.step(samples=32, loss=0.9)
        steps = [m for m in pipe.sent if m["t"] == "step"]
        self.assertEqual(steps[0]["flops"], {"per_sample": 3.2e6, "precision": "bf16",
                                             "how": "as the script counts them"})
        self.assertNotIn("flops", steps[1])  # sent once

    def test_outside_a_race_nothing_is_traced(self):
        import devicerace.jax

        def never(*args):
            raise AssertionError("traced outside a race")

        self.assertIsNone(devicerace.jax.count_flops(never, 1, samples=1))


@unittest.skipUnless(importlib.util.find_spec("tensorflow") is not None, "TensorFlow is not installed")
class TensorFlowStepFlops(unittest.TestCase):
    """A tf.GradientTape step's products counted from its graph (devicerace/_tf_flops.py), against
    figures worked out by hand: the gradients the tape made, less those TensorFlow prunes."""

    def test_dense_convolutions_and_a_bounded_loop(self):
        import tensorflow as tf

        from devicerace import _tf_flops

        w = {"conv": tf.Variable(tf.ones((3, 3, 4, 8))), "depthwise": tf.Variable(tf.ones((3, 3, 8, 1))),
             "head": tf.Variable(tf.ones((6 * 6 * 8, 12))), "state": tf.Variable(tf.ones((12, 12)))}

        def step(x):
            with tf.GradientTape() as tape:
                h = tf.nn.relu(tf.nn.conv2d(x, w["conv"], 2, "SAME"))  # 16x16x4 -> 8x8x8
                h = tf.nn.depthwise_conv2d(h, w["depthwise"], [1, 1, 1, 1], "VALID")  # -> 6x6x8
                s = tf.reshape(h, (-1, 6 * 6 * 8)) @ w["head"]
                _, s = tf.while_loop(lambda i, s: i < 5, lambda i, s: (i + 1, tf.tanh(s @ w["state"])), (0, s),
                                     maximum_iterations=5)
                loss = tf.reduce_sum(s)
            grads = tape.gradient(loss, list(w.values()))
            for v, g in zip(w.values(), grads):
                v.assign_sub(0.1 * g)
            return loss

        c = _tf_flops.count(step, (tf.ones((2, 16, 16, 4)),), {}, 2)
        conv, depthwise, head, state = 8 * 8 * 8 * 4 * 9, 6 * 6 * 8 * 9, 288 * 12, 12 * 12
        # The data's convolution: forward and filter gradient (its input gradient is pruned).
        self.assertEqual(c["per_sample"], 2 * (conv * 2 + (depthwise + head + 5 * state) * 3))
        self.assertEqual(c["precision"], "fp32")
        self.assertTrue(c["how"].startswith("counted from the TensorFlow step's graph (Conv2D, "), c["how"])

    def test_branches_unbounded_loops_and_bf16(self):
        import tensorflow as tf

        from devicerace import _tf_flops

        x, w = tf.ones((8, 64)), tf.ones((64, 32))
        branchy = tf.function(lambda p, x, w: tf.cond(p, lambda: (x @ w) @ tf.transpose(w), lambda: x))
        self.assertEqual(_tf_flops.count(branchy, (tf.constant(True), x, w), {}, 8)["per_sample"], 2 * 64 * 32 * 2)
        looped = lambda x, w: tf.while_loop(lambda v: v[0, 0] < 100, lambda v: [v @ w], [x])  # noqa: E731
        self.assertEqual(_tf_flops.count(looped, (tf.ones((8, 8)), tf.ones((8, 8))), {}, 8),
                         {"not_counted": "the TensorFlow step's FLOPs: a while_loop computes products, and its trip "
                                         "count is not known before it runs"})
        c = _tf_flops.count(lambda a, b: a @ b, (tf.ones((8, 64), tf.bfloat16), tf.ones((64, 32), tf.bfloat16)), {}, 8)
        self.assertEqual((c["per_sample"], c["precision"]), (2 * 64 * 32, "bf16"))
        self.assertIn("no matrix product", _tf_flops.count(lambda a: a * 2, (x,), {}, 8)["not_counted"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
