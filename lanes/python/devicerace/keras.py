"""A Keras 3 callback (any backend: JAX, TensorFlow, PyTorch) that reports a fit() to its
DeviceRace lane:

    import devicerace.keras
    model.fit(x, y, batch_size=64, callbacks=[devicerace.keras.Callback(batch_size=64)])

Each training batch is a step (with steps_per_execution > 1, a callback call covers that many
steps); its loss is the running mean Keras keeps in `logs`, read at report points only. Keras
does not tell callbacks the batch size: give `batch_size` for samples/s (else steps/s). An
evaluation (fit's validation, evaluate()) reports its loss and the first metric whose name
contains "acc". After the first batch, the model's FLOPs a sample are counted from its layers
(devicerace/_keras_flops.py: any backend), for the lane's achieved FLOP/s and % of peak. A no-op
outside a race.
"""
import keras

import devicerace
from devicerace import _keras_flops
from devicerace._channel import now


class Callback(keras.callbacks.Callback):
    def __init__(self, batch_size=None):
        super().__init__()
        self.batch_size = batch_size
        self._lane = devicerace.lane()
        self._last_batch = None
        self._test_started = None
        self._flops_counted = False

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        # `batch` is the index of the call's last batch in the epoch (steps_per_execution steps per call).
        steps = 1 if self._last_batch is None or batch <= self._last_batch else batch - self._last_batch
        self._last_batch = batch
        if not self._flops_counted and self._lane.in_race:
            # After the first batch: a Sequential model without an Input is built by then.
            self._flops_counted = True
            self._lane._flops = _keras_flops.count(self.model)
        self._lane.step(samples=self.batch_size * steps if self.batch_size else None, loss=logs.get("loss"),
                        steps=steps)

    def on_epoch_begin(self, epoch, logs=None):
        self._last_batch = None

    def on_test_begin(self, logs=None):
        self._test_started = now()

    def on_test_end(self, logs=None):
        logs = logs or {}
        accuracy = next((v for k, v in logs.items() if "acc" in k), None)
        started, self._test_started = self._test_started, None
        self._lane.evaluate(accuracy=accuracy, loss=logs.get("loss"),
                            seconds=now() - started if started is not None else None)
