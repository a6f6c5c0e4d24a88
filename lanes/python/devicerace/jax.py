"""A JAX training step's FLOPs for its DeviceRace lane (plain JAX, Flax, Optax: any jittable step):

    import devicerace.jax
    devicerace.jax.count_flops(train_step, state, x, y, samples=len(x))  # once, before or after a step

The step is traced (jax.make_jaxpr), never run or compiled: its matrix products and convolutions,
the backward pass's included, are counted as DeviceRace counts its own networks (a multiply-add
is 2; devicerace/_jax_flops.py), divided by `samples`, and given to the lane (lane.flops) in the
precision its products take (bf16 inputs: the bf16 peak). Returns the count, or {"not_counted":
why} (the lane's execution text says it). A no-op outside a race (returns None).
"""
import devicerace
from devicerace import _jax_flops


def count_flops(step, *args, samples, **kwargs):
    return devicerace.lane()._count_step(_jax_flops.count, step, args, kwargs, samples)
