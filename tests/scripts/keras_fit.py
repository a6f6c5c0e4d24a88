"""A user's Keras 3 fit() with DeviceRace's callback (any backend: KERAS_BACKEND=jax, tensorflow,
torch), on random tensors: a small MLP, one epoch of --steps batches, a validation run at the end.
--unchanged leaves the callback out (the script as its user wrote it: DeviceRace adds it to fit);
--subclassed writes the MLP as a subclassed keras.Model.
Writes its own counts to --out FILE (JSON)."""
import argparse
import json
import os

import numpy as np
import keras

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--out", default="")
p.add_argument("--unchanged", action="store_true")
p.add_argument("--subclassed", action="store_true")
a = p.parse_args()
callbacks = []
if not a.unchanged:
    import devicerace.keras
    callbacks.append(devicerace.keras.Callback(batch_size=a.batch))

rng = np.random.default_rng(0)
x = rng.random((a.steps * a.batch, 64), dtype=np.float32)
y = (x[:, :10].argmax(1)).astype("int64")


class MLP(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden, self.out = keras.layers.Dense(64), keras.layers.Dense(10)

    def call(self, x):
        return self.out(keras.ops.relu(self.hidden(x)))


if a.subclassed:
    model = MLP()
else:
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
history = model.fit(x, y, batch_size=a.batch, epochs=1, validation_data=(x[:256], y[:256]), verbose=0,
                    callbacks=callbacks)
if a.out:
    with open(a.out, "w") as f:
        json.dump({"steps": a.steps, "samples": a.steps * a.batch, "backend": keras.backend.backend(),
                   "val_accuracy": float(history.history["val_accuracy"][-1])}, f)
