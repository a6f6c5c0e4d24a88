"""A Hugging Face Trainer callback that reports training to its DeviceRace lane:

    import devicerace.transformers
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[devicerace.transformers.Callback()])

Each optimizer step (on_step_end: gradient accumulation included) is a step of
per_device_train_batch_size x gradient_accumulation_steps examples (a workers=N lane counts
rank 0's x N); the loss is the scalar backward() was called on since the last report
(DeviceRace's PyTorch instrumentation: the Trainer logs its own only every logging_steps), and an
evaluation reports eval_loss and the first eval metric whose name contains "acc". A no-op
outside a race.
"""
import transformers

import devicerace
from devicerace._channel import now


class Callback(transformers.TrainerCallback):
    def __init__(self):
        self._lane = devicerace.lane()
        self._evaluating_since = None

    def _batch(self, args):
        return args.per_device_train_batch_size * args.gradient_accumulation_steps

    def on_step_end(self, args, state, control, **kwargs):
        # The Trainer logs its loss only every logging_steps: the loss comes from the backward()
        # calls DeviceRace's instrumentation sees (instrument=on, the default).
        self._lane.step(samples=self._batch(args))

    def on_prediction_step(self, args, state, control, **kwargs):
        if self._evaluating_since is None:
            self._evaluating_since = now()

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        metrics = metrics or {}
        accuracy = next((v for k, v in metrics.items() if k.startswith("eval_") and "acc" in k), None)
        started, self._evaluating_since = self._evaluating_since, None
        self._lane.evaluate(accuracy=accuracy, loss=metrics.get("eval_loss"),
                            seconds=now() - started if started is not None else metrics.get("eval_runtime"))
