"""A TensorFlow training step's FLOPs for its DeviceRace lane (a custom loop with
tf.GradientTape; Keras' fit() is counted by devicerace.keras):

    import devicerace.tensorflow
    devicerace.tensorflow.count_flops(train_step, x, y, samples=len(x))  # once

The step (a tf.function, or a Python function it wraps) is traced to its graph, never run: its
matrix products and convolutions, the gradients the tape made included, are counted as
DeviceRace counts its own networks (a multiply-add is 2; devicerace/_tf_flops.py), divided by
`samples`, and given to the lane (lane.flops) in the precision its products take. Returns the
count, or {"not_counted": why} (the lane's execution text says it). A no-op outside a race
(returns None).
"""
import devicerace
from devicerace import _tf_flops


def count_flops(step, *args, samples, **kwargs):
    return devicerace.lane()._count_step(_tf_flops.count, step, args, kwargs, samples)
