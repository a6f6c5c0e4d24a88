"""A user's plain JAX training loop (no framework) reporting to its DeviceRace lane: a 64-64-10
MLP on random tensors, SGD, --steps steps of --batch, the step's FLOPs counted from its jaxpr
(devicerace.jax.count_flops), a test accuracy printed at the end. Writes its own counts to
--out FILE (JSON)."""
import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

import devicerace
import devicerace.jax

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=200)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--out", default="")
a = p.parse_args()

rng = np.random.default_rng(0)
x = rng.random((a.steps * a.batch, 64), dtype=np.float32)
y = x[:, :10].argmax(1)
keys = jax.random.split(jax.random.PRNGKey(0), 2)
params = {"a": jax.random.normal(keys[0], (64, 64)) * 0.1, "b": jax.random.normal(keys[1], (64, 10)) * 0.1}


def loss_fn(w, xb, yb):
    logits = jax.nn.relu(xb @ w["a"]) @ w["b"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), yb[:, None], 1))


@jax.jit
def train_step(w, xb, yb):
    loss, grads = jax.value_and_grad(loss_fn)(w, xb, yb)
    return jax.tree.map(lambda v, g: v - 0.5 * g, w, grads), loss


lane = devicerace.lane()
devicerace.jax.count_flops(train_step, params, x[:a.batch], y[:a.batch], samples=a.batch)
for i in range(a.steps):
    xb, yb = x[i * a.batch:(i + 1) * a.batch], y[i * a.batch:(i + 1) * a.batch]
    params, loss = train_step(params, xb, yb)
    lane.step(samples=a.batch, loss=loss)
logits = jax.nn.relu(x[:512] @ params["a"]) @ params["b"]
accuracy = float((logits.argmax(1) == y[:512]).mean())
print(f"test accuracy {accuracy:.4f}")
if a.out:
    with open(a.out, "w") as f:
        json.dump({"steps": a.steps, "samples": a.steps * a.batch, "accuracy": accuracy}, f)
