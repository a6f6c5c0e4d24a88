"""A JAX function's FLOPs, counted from its jaxpr (jax.make_jaxpr: traced, never run or compiled),
as DeviceRace counts its own networks: matrix products (`dot_general`) and convolutions
(`conv_general_dilated`), a multiply-add as 2. A training step's jaxpr holds its backward pass
as the products JAX's autodiff made, so the count is what the step runs: no input gradient for
the data, a recomputed forward under `jax.checkpoint`, the optimizer's update (elementwise: 0).

Nested jaxprs are counted where they run: a `jit` or `checkpoint` once, a `scan` `length` times,
a `cond` by its costliest branch. A `while_loop` whose body computes products is not counted
(its trip count is not known before it runs), nor a call into compiled code of its own (Pallas,
a custom call), which counts 0.
"""
import functools
import math

from devicerace._step_flops import Count, NotCounted, step_count


def _dot(eqn):
    """Multiply-adds of a dot_general: every output element sums over the contracted dimensions."""
    lhs = eqn.invars[0].aval.shape
    (contract, _), _ = eqn.params["dimension_numbers"]
    return math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[d] for d in contract)


def _conv(eqn):
    """Multiply-adds of a conv_general_dilated: each output element reads the kernel's input
    features (already divided by the groups) over its window. An input's gradient is a
    convolution of the output's gradient, dilated by the stride or padded past the kernel's
    reach (a valid convolution's): there each gradient element meets each kernel tap once, as
    many products as the forward's, as DeviceRace counts its networks' backward passes (the
    padding's zeros and the dilation's holes are not counted)."""
    p = eqn.params
    numbers = p["dimension_numbers"]
    lhs, kernel, out = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape, eqn.outvars[0].aval.shape
    spatial = list(zip(numbers.lhs_spec[2:], numbers.rhs_spec[2:]))
    lhs_dilation = p.get("lhs_dilation") or (1,) * len(spatial)
    rhs_dilation = p.get("rhs_dilation") or (1,) * len(spatial)
    padding = p["padding"]
    plain = isinstance(padding, str) or all(
        ld == 1 and lo + hi <= (kernel[k] - 1) * rd
        for (_, k), ld, rd, (lo, hi) in zip(spatial, lhs_dilation, rhs_dilation, padding))
    if plain:
        return math.prod(out) * (math.prod(kernel) // kernel[numbers.rhs_spec[0]])
    pairs = math.prod(lhs[i] * kernel[k] for i, k in spatial)
    return out[numbers.out_spec[0]] * out[numbers.out_spec[1]] * kernel[numbers.rhs_spec[1]] * pairs


def _subjaxprs(value):
    """The jaxprs a parameter holds (a Jaxpr, a ClosedJaxpr, or a tuple of them)."""
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from _subjaxprs(v)
    elif hasattr(value, "eqns"):
        yield value
    elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):
        yield value.jaxpr


def _walk(jaxpr, count, times):
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            count.add("dot_general", str(eqn.invars[0].aval.dtype), _dot(eqn) * times)
        elif name == "conv_general_dilated":
            count.add("conv_general_dilated", str(eqn.invars[0].aval.dtype), _conv(eqn) * times)
        elif name == "cond":
            branches = []
            for branch in _subjaxprs(eqn.params["branches"]):
                c = Count()
                _walk(branch, c, times)
                branches.append(c)
            if branches:
                count.merge(max(branches, key=Count.total), 1)
        elif name == "while":
            inner = Count()
            for sub in _subjaxprs(eqn.params.get("body_jaxpr")):
                _walk(sub, inner, 1)
            if inner.total():
                raise NotCounted("a while_loop computes products, and its trip count is not known before it runs")
        else:
            n = times * int(eqn.params["length"]) if name == "scan" else times
            for value in eqn.params.values():
                for sub in _subjaxprs(value):
                    _walk(sub, count, n)


def _jaxpr(jax, fn, args, kwargs):
    """The function's jaxpr for these arguments: a jitted function's own trace (its static
    arguments as it declares them), else make_jaxpr's, Python scalars held static (a `training`
    flag branches in Python)."""
    if hasattr(fn, "trace"):
        return fn.trace(*args, **kwargs).jaxpr.jaxpr
    scalar = (bool, int, float, str, type(None))
    static = tuple(i for i, a in enumerate(args) if isinstance(a, scalar))
    fixed = {k: v for k, v in kwargs.items() if isinstance(v, scalar)}
    rest = {k: v for k, v in kwargs.items() if k not in fixed}
    target = functools.partial(fn, **fixed) if fixed else fn
    return jax.make_jaxpr(target, static_argnums=static)(*args, **rest).jaxpr


def count(fn, args, kwargs, samples):
    """{"per_sample", "precision", "how"} of one call of `fn(*args, **kwargs)` over `samples`
    examples, or {"not_counted": why}. Never raises."""

    def walk(c):
        import jax

        _walk(_jaxpr(jax, fn, args, kwargs), c, 1)

    return step_count("JAX", "jaxpr", walk, samples)
