"""A Lightning callback that reports a Trainer's fit() to its DeviceRace lane:

    import devicerace.lightning
    trainer = lightning.Trainer(max_epochs=1, callbacks=[devicerace.lightning.Callback()])

Each optimizer step (trainer.global_step advancing; gradient accumulation included) is a step,
its samples the first dimension of the batch (the first tensor found in it) x the batches
accumulated; the loss is the training_step's returned loss, kept on its device until a report
point. A validation run reports the first logged metric whose name contains "acc" and the first
containing "loss". Works with `lightning` and `pytorch_lightning`. A no-op outside a race.
"""
try:
    import lightning.pytorch as pl
except ImportError:  # the older package name
    import pytorch_lightning as pl

import devicerace
from devicerace._channel import now


def _first_dim(batch):
    """The first dimension of the first tensor in a batch (a tensor, or a tuple/list/dict of them)."""
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            n = _first_dim(item)
            if n is not None:
                return n
    return None


class Callback(pl.Callback):
    def __init__(self):
        super().__init__()
        self._lane = devicerace.lane()
        self._step = None
        self._samples = 0
        self._known = True
        self._validating_since = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        n = _first_dim(batch)
        if n is None:
            self._known = False
        else:
            self._samples += n
        if self._step is None:
            self._step = 0
        steps = trainer.global_step - self._step
        if steps <= 0:
            return  # accumulating gradients: the optimizer has not stepped yet
        self._step = trainer.global_step
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        samples = self._samples if self._known else None
        self._samples, self._known = 0, True
        self._lane.step(samples=samples, loss=loss, steps=steps)

    def on_validation_start(self, trainer, pl_module):
        self._validating_since = now()

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            self._validating_since = None
            return
        metrics = trainer.callback_metrics
        accuracy = next((v for k, v in metrics.items() if "acc" in k), None)
        loss = next((v for k, v in metrics.items() if "loss" in k and "train" not in k), None)
        started, self._validating_since = self._validating_since, None
        self._lane.evaluate(accuracy=accuracy, loss=loss, seconds=now() - started if started is not None else None)
