"""A TensorBoard log folder read live, for script lanes with logdir= (way 2 of "Race your own
training"): the scalars a user's script writes, as steps and evaluations.

Event files are read with the tensorboard package's own reader (EventFileLoader: it resumes
where the previous read stopped, and a record still being written is read next time). Only files
that appear or grow after the lane started are read, so an older run in the same folder is not
raced again. Scalars come from summary values whether written as simple_value (TensorFlow 1,
torch.utils.tensorboard) or as a scalar tensor (tf.summary in TF 2, Keras' TensorBoard callback).
"""
import os
import re
import time

# Default tag patterns (case-insensitive, searched): the training loss, and what is an
# evaluation's (accuracy, validation or test loss).
DEFAULT_LOSS_TAG = r"loss"
DEFAULT_ACC_TAG = r"acc"
EVAL_WORDS = re.compile(r"(^|[/_.\-])(val|valid|validation|test|eval|evaluation)([/_.\-]|$)", re.I)


def _scalar(value):
    """A summary value's scalar, or None."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        t = value.tensor
        if t.float_val:
            return float(t.float_val[0])
        if t.double_val:
            return float(t.double_val[0])
        if t.tensor_content and t.dtype in (1, 2):  # DT_FLOAT, DT_DOUBLE
            import struct
            size = 4 if t.dtype == 1 else 8
            if len(t.tensor_content) >= size:
                return struct.unpack("<f" if size == 4 else "<d", t.tensor_content[:size])[0]
    return None


class LogdirWatcher:
    """Polls `folder` for event files; `poll()` returns the new scalar points as
    (kind, step, wall_time, value, tag) with kind "loss", "eval_loss" or "eval_acc"."""

    def __init__(self, folder, loss_tag=None, acc_tag=None, started=None):
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        self._loader_type = EventFileLoader
        self.folder = folder
        self.loss_re = re.compile(loss_tag or DEFAULT_LOSS_TAG, re.I)
        self.acc_re = re.compile(acc_tag or DEFAULT_ACC_TAG, re.I)
        self.started = started if started is not None else time.time()
        self.loaders = {}
        self.before = {}  # event files there before the lane started: their size then
        for path in self._event_files():
            try:
                self.before[path] = os.path.getsize(path)
            except OSError:
                pass
        self.files_seen = 0
        self.tags = set()

    def _event_files(self):
        out = []
        for root, _dirs, files in os.walk(self.folder):
            for name in files:
                if "tfevents" in name:
                    out.append(os.path.join(root, name))
        return sorted(out)

    def classify(self, tag, where=""):
        """Which curve a scalar feeds: an accuracy or a loss of an evaluation (its tag or its
        run folder names one: val_loss, validation/epoch_accuracy), the training loss, or none
        (training accuracy and every other scalar)."""
        evaluation = bool(EVAL_WORDS.search(tag) or EVAL_WORDS.search(where.replace(os.sep, "/") + "/"))
        if self.acc_re.search(tag):
            return "eval_acc" if evaluation else None
        if self.loss_re.search(tag):
            return "eval_loss" if evaluation else "loss"
        return None

    def poll(self):
        points = []
        if not os.path.isdir(self.folder):
            return points
        for path in self._event_files():
            loader = self.loaders.get(path)
            if loader is None:
                if path in self.before:
                    try:
                        if os.path.getsize(path) <= self.before[path]:
                            continue  # an older run's file: not this lane's
                    except OSError:
                        continue
                loader = self.loaders[path] = self._loader_type(path)
                loader.where = os.path.relpath(os.path.dirname(path), self.folder)
                self.files_seen += 1
            try:
                for event in loader.Load():
                    if event.wall_time and event.wall_time < self.started - 1:
                        continue  # written before the lane started (an older run, appended to)
                    if not event.HasField("summary"):
                        continue
                    for value in event.summary.value:
                        kind = self.classify(value.tag, loader.where)
                        if kind is None:
                            continue
                        v = _scalar(value)
                        if v is None:
                            continue
                        self.tags.add(value.tag)
                        points.append((kind, int(event.step), float(event.wall_time), v, value.tag))
            except Exception:
                continue  # a record still being written: read again next time
        return points
