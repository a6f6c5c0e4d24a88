"""A TensorFlow function's FLOPs, counted from its graph (tf.function's concrete function: traced,
never run), as DeviceRace counts its own networks: matrix products and convolutions, a
multiply-add as 2. A training step's graph holds the gradients `tf.GradientTape` made, so the
count is what the step runs (the data's input gradient is not computed unless watched).

A convolution's input and filter gradients count as many products as its forward (each output
gradient element meets each kernel tap once). Nested functions are counted where they are
called; a `while_loop` (Keras' recurrent layers) its body times its `maximum_iterations` when
that is known before it runs, and is not counted otherwise if its body computes products; a
`cond` by its costliest branch.
"""
import math

from devicerace._step_flops import Count, NotCounted, step_count


def _shape(t):
    dims = t.shape.as_list() if t.shape.rank is not None else None
    if dims is None or any(d is None for d in dims):
        raise NotCounted(f"{t.op.type} on a shape not known before it runs ({t.shape})")
    return dims


def _window(filter_shape, depthwise):
    """Multiply-adds a convolution output element makes: the kernel's window times its input
    features ([..., in, out] filters), or the window alone for a depthwise one."""
    return math.prod(filter_shape[:-1 if depthwise else -1]) // (filter_shape[-2] if depthwise else 1)


def _einsum(op):
    equation = op.get_attr("equation").decode()
    left, _ = equation.replace("...", "").split("->")
    sizes = {}
    for letters, t in zip(left.split(","), op.inputs):
        dims = _shape(t)
        for letter, d in zip(letters, dims[len(dims) - len(letters):]):
            sizes[letter] = d
    return math.prod(sizes.values())


def _products(op):
    """Multiply-adds of one op, or 0."""
    kind = op.type
    if kind == "MatMul":
        a = _shape(op.inputs[0])
        return math.prod(_shape(op.outputs[0])) * a[0 if op.get_attr("transpose_a") else 1]
    if kind.startswith("BatchMatMul"):
        a = _shape(op.inputs[0])
        return math.prod(_shape(op.outputs[0])) * a[-2 if op.get_attr("adj_x") else -1]
    if kind == "Einsum":
        return _einsum(op)
    depthwise = kind.startswith("DepthwiseConv")
    if kind in ("Conv2D", "Conv3D", "DepthwiseConv2dNative"):
        return math.prod(_shape(op.outputs[0])) * _window(_shape(op.inputs[1]), depthwise)
    if kind in ("Conv2DBackpropInput", "Conv3DBackpropInputV2", "DepthwiseConv2dNativeBackpropInput"):
        return math.prod(_shape(op.inputs[2])) * _window(_shape(op.inputs[1]), depthwise)
    if kind in ("Conv2DBackpropFilter", "Conv3DBackpropFilterV2", "DepthwiseConv2dNativeBackpropFilter"):
        return math.prod(_shape(op.inputs[2])) * _window(_shape(op.outputs[0]), depthwise)
    return 0


def _static(t):
    """A tensor's value where the graph fixes it before running (TensorFlow's own folding, then a
    reduction or copy of such a value: Keras' recurrent layers bound their loop by
    reduce_max of their sequence length), or None."""
    import numpy as np
    import tensorflow as tf

    value = tf.get_static_value(t)
    if value is None and t.op.type in ("Max", "Min", "Identity", "Cast") and t.op.inputs:
        inner = _static(t.op.inputs[0])
        if inner is not None:
            value = {"Max": np.max, "Min": np.min}.get(t.op.type, np.asarray)(inner)
    return value


def _attr_functions(op, names):
    for name in names:
        try:
            attr = op.get_attr(name)
        except (ValueError, TypeError):
            continue
        for a in attr if isinstance(attr, list) else [attr]:
            yield op.graph._get_function(a.name)


def _live(graph):
    """The ops whose results the function uses: back from its outputs and its stateful ops (a
    variable's update). A gradient function makes every input's gradient, and TensorFlow prunes
    the unused ones (the data's) before running: they are not counted."""
    ends = [t.op for t in graph.outputs] + list(getattr(graph, "control_outputs", []))
    ends += [op for op in graph.get_operations() if op._is_stateful and op.type not in ("VarHandleOp",)]
    live, stack = set(), list(ends)
    while stack:
        op = stack.pop()
        if op.name in live:
            continue
        live.add(op.name)
        stack += [t.op for t in op.inputs] + list(op.control_inputs)
    return live


def _walk(graph, count):
    live = _live(graph)
    for op in graph.get_operations():
        if op.name not in live:
            continue
        kind = op.type
        mults = _products(op)
        if mults:
            count.add(kind, op.outputs[0].dtype.name, mults)  # TensorFlow's products: out in their inputs' type
        elif kind in ("While", "StatelessWhile"):
            body = Count()
            for fn in _attr_functions(op, ["body"]):
                _walk(fn.graph, body)
            if body.total():
                trips = _static(op.inputs[1])
                if trips is None or int(trips) <= 0:
                    raise NotCounted("a while_loop computes products, and its trip count is not known before it runs")
                count.merge(body, int(trips))
        elif kind in ("If", "StatelessIf", "Case", "StatelessCase"):
            branches = []
            for fn in _attr_functions(op, ["then_branch", "else_branch", "branches"]):
                c = Count()
                _walk(fn.graph, c)
                branches.append(c)
            if branches:
                count.merge(max(branches, key=Count.total), 1)
        else:
            for fn in _attr_functions(op, ["f"]):
                _walk(fn.graph, count)


def count(fn, args, kwargs, samples):
    """{"per_sample", "precision", "how"} of one call of `fn(*args, **kwargs)` over `samples`
    examples, or {"not_counted": why}. Never raises."""

    def walk(c):
        import tensorflow as tf

        function = fn if hasattr(fn, "get_concrete_function") else tf.function(fn)
        _walk(function.get_concrete_function(*args, **kwargs).graph, c)

    return step_count("TensorFlow", "graph", walk, samples)
