"""A Keras 3 model's training FLOPs per sample, counted from its layers (any backend): what the
lane's "% of peak" and achieved FLOP/s divide by, as devicerace/_torch.py counts a PyTorch step.

DeviceRace counts matrix products, convolutions and attention, a multiply-add as 2 FLOPs, as it
counts its own networks: a layer's forward, its weights' gradients (as much again, where the
weights train) and its input's gradient (as much again, unless nothing before it trains: the
first dense or convolution layer on the data). The shapes are those the model's graph holds (a
functional or Sequential model, nested models included). A subclassed model has no graph: its
`call` is run once more on symbolic inputs of the shape its first batch built it with, which
makes the graph of the layers and ops it calls (nothing is computed, no weight is made); a custom
layer whose weights are all its sublayers' (a transformer block) is read the same way, on the
shapes of its call. A layer with weights of its own that is not in the tables below is not
counted (the whole model is then not counted: a part would mislead); a layer without weights
that is not known to compute nothing (a Lambda, a custom layer) and a raw op that computes
products without a formula here (einsum, a raw convolution) are counted as 0 and named. A raw
matrix product of two activations and keras.ops' attention are counted.
"""
import inspect
import math

# Layers with weights whose arithmetic DeviceRace does not count (lookups, normalisations,
# elementwise): they add no FLOPs here.
_ZERO_WITH_WEIGHTS = {"Embedding", "BatchNormalization", "LayerNormalization", "GroupNormalization",
                      "RMSNormalization", "UnitNormalization", "Normalization", "PReLU", "InputLayer"}
# Weightless layers known to do no matrix products: not named in what was left out.
_ZERO_KNOWN_PREFIXES = ("Activation", "ReLU", "LeakyReLU", "ELU", "Softmax", "Dropout", "SpatialDropout",
                        "GaussianNoise", "GaussianDropout", "AlphaDropout", "MaxPooling", "AveragePooling",
                        "GlobalMaxPooling", "GlobalAveragePooling", "Flatten", "Reshape", "Permute", "RepeatVector",
                        "Cropping", "ZeroPadding", "UpSampling", "Add", "Subtract", "Multiply", "Average", "Maximum",
                        "Minimum", "Concatenate", "Rescaling", "Resizing", "CenterCrop", "Random", "Masking",
                        "Identity", "ActivityRegularization", "InputLayer", "Normalization", "Embedding")


class NotCounted(Exception):
    """Why the model's FLOPs are not counted (a sentence for the lane's execution text)."""


class NoFormula(NotCounted):
    """A layer with weights that _layer has no formula for (a custom block is traced instead)."""


def _mro_names(op):
    return {cls.__name__ for cls in type(op).__mro__}


def _size(shape):
    """The product of a per-sample shape (the batch dimension left out)."""
    dims = list(shape)[1:]
    if any(d is None for d in dims):
        raise NotCounted(f"a shape with an unknown dimension ({tuple(shape)})")
    return math.prod(dims)


def _spatial(op, shape):
    """A convolution's spatial dimensions of a (batch, ...) shape, channels first or last."""
    dims = list(shape)[1:]
    spatial = dims[1:] if getattr(op, "data_format", "channels_last") == "channels_first" else dims[:-1]
    if any(d is None for d in spatial):
        raise NotCounted(f"a convolution with an unknown size ({tuple(shape)})")
    return math.prod(spatial)


def _weight_size(op, name):
    w = getattr(op, name, None)
    if w is None:
        raise NotCounted(f"{type(op).__name__} without its {name} built")
    return math.prod(w.shape)


def _einsum(equation, inputs, kernel, output):
    """Multiply-adds of an EinsumDense: the product of every index's size but the batch's."""
    left, out = equation.split("->")
    x, k = left.split(",")
    sizes = {}
    for letters, shape in ((x, inputs), (k, kernel), (out, output)):
        if len(letters) != len(shape):
            raise NotCounted(f"an EinsumDense equation it does not read ({equation})")
        for letter, d in zip(letters, shape):
            if d is not None:
                sizes[letter] = d
    batch = x[0]
    return math.prod(d for letter, d in sizes.items() if letter != batch)


def _rnn(op, time_steps):
    """(the input's kernel, the recurrent kernel) multiply-adds of a recurrent layer's forward."""
    cell = getattr(op, "cell", None)
    kernel, recurrent = getattr(cell, "kernel", None), getattr(cell, "recurrent_kernel", None)
    if kernel is None or recurrent is None or len(kernel.shape) != 2:
        raise NotCounted(f"a recurrent layer it does not count ({type(op).__name__})")
    return math.prod(kernel.shape) * time_steps, math.prod(recurrent.shape) * time_steps, math.prod(recurrent.shape)


class _Parts:
    """One call's multiply-adds a sample, by what its backward pass does with them:
    - outer: weights on the call's input (the input's gradient only where the input needs one);
    - inner: weights on values made inside the layer (their gradient always: attention's output
      projection, a recurrent layer's state);
    - between: products of two activations (attention's scores and context: both operands'
      gradients, no weights);
    - extra: multiply-adds added once as they are (a recurrent state's first step has no gradient).
    """

    def __init__(self, kind, outer=0, inner=0, between=0, extra=0):
        self.kind, self.outer, self.inner, self.between, self.extra = kind, outer, inner, between, extra

    def training(self, trains, needs):
        """A training step's multiply-adds: forward, the weights' gradients where they train, the
        inputs' gradients where needed."""
        t = 1 if trains else 0
        return (self.outer * (1 + t + (1 if needs else 0)) + self.inner * (2 + t) + self.between * 3 +
                self.extra)


def _recurrent(op, steps, kind):
    if steps is None:
        raise NotCounted("a recurrent layer over an unknown number of steps")
    x, h, first = _rnn(op, steps)
    return _Parts(kind, outer=x, inner=h, extra=-first)


# Raw ops (keras.ops in a subclassed model's or custom layer's call) that compute products: the
# others (elementwise, shapes, reductions, normalisations) count 0 and go unnamed.
_PRODUCT_OPS = {"Matmul", "Einsum", "Dot", "Tensordot", "Inner", "Outer", "Vdot", "Kron", "Conv", "ConvTranspose",
                "DepthwiseConv", "SeparableConv", "DotProductAttention", "Correlate"}


def _needs_grad(x, grad):
    """Whether a raw op's operand gets a gradient: a tensor downstream of a trainable weight, a
    trainable weight, or a backend tensor the call made from its weights outside the graph (a
    tied embedding's transpose used as an output layer); not a NumPy constant."""
    import keras

    if isinstance(x, keras.KerasTensor):
        return id(x) in grad
    if isinstance(x, keras.Variable):
        return bool(getattr(x, "trainable", False))
    return not isinstance(x, (int, float)) and type(x).__module__.split(".")[0] != "numpy"


def _raw_op(op, args, outs, grad):
    """A training step's multiply-adds a sample of a raw op that DeviceRace counts, or 0: a matrix
    product (of two activations, or of an activation and a weight: forward, then as much again
    for each operand that gets a gradient) and keras.ops' attention (scores and context, three
    times where its inputs get gradients)."""
    kind = type(op).__name__
    if kind == "Matmul" and len(args) >= 2:
        a, b = args[0], args[1]
        sa, sb = getattr(a, "shape", None), getattr(b, "shape", None)
        if sa is None or sb is None or len(sa) < 2 or len(sb) < 2:
            return 0
        return _size(outs[0]) * sa[-1] * (1 + _needs_grad(a, grad) + _needs_grad(b, grad))
    if kind == "DotProductAttention" and len(args) >= 3 and len(getattr(args[0], "shape", ())) == 4:
        (_, tq, heads, d), (_, tk, _, dv) = list(args[0].shape), list(args[2].shape)
        needs = any(_needs_grad(x, grad) for x in args[:3])
        return tq * tk * heads * (d + dv) * (3 if needs else 1)
    return 0


def _layer(op, ins, outs):
    """The _Parts of one call of `op` (input and output shapes), or None: it computes nothing
    DeviceRace counts. Raises NotCounted for a layer with weights it has no formula for."""
    names = _mro_names(op)
    kind = type(op).__name__
    if "Dense" in names:  # kernel (in, units) on every position of the input
        return _Parts(kind, outer=_weight_size(op, "kernel") * (_size(outs[0]) // list(outs[0])[-1]))
    if "EinsumDense" in names:
        return _Parts(kind, outer=_einsum(op.equation, ins[0], op.kernel.shape, outs[0]))
    if "BaseSeparableConv" in names:  # depthwise, then a pointwise convolution of its output
        s = _spatial(op, outs[0])
        return _Parts(kind, outer=_weight_size(op, "depthwise_kernel") * s,
                      inner=_weight_size(op, "pointwise_kernel") * s)
    if "BaseConvTranspose" in names:
        return _Parts(kind, outer=_weight_size(op, "kernel") * _spatial(op, ins[0]))
    if "BaseConv" in names or "BaseDepthwiseConv" in names:
        return _Parts(kind, outer=_weight_size(op, "kernel") * _spatial(op, outs[0]))
    if "Bidirectional" in names:
        steps = list(ins[0])[1]
        a = _recurrent(op.forward_layer, steps, kind)
        b = _recurrent(op.backward_layer, steps, kind)
        return _Parts(f"Bidirectional({type(op.forward_layer).__name__})", a.outer + b.outer, a.inner + b.inner,
                      extra=a.extra + b.extra)
    if "RNN" in names:
        return _recurrent(op, list(ins[0])[1], kind)
    if "MultiHeadAttention" in names:
        query, value = ins[0], ins[1] if len(ins) > 1 else ins[0]
        key = ins[2] if len(ins) > 2 else value
        heads, kd = op._num_heads, op._key_dim
        vd = op._value_dim or kd
        tq, tk = _size(query) // list(query)[-1], _size(value) // list(value)[-1]
        return _Parts(kind, outer=(tq * list(query)[-1] * heads * kd + tk * list(key)[-1] * heads * kd +
                                   tk * list(value)[-1] * heads * vd),
                      inner=tq * heads * vd * list(outs[0])[-1], between=tq * tk * heads * (kd + vd))
    if names & {"Attention", "AdditiveAttention"}:
        query, value = ins[0], ins[1] if len(ins) > 1 else ins[0]
        tq, tv, d = _size(query) // list(query)[-1], _size(value) // list(value)[-1], list(query)[-1]
        return _Parts(kind, between=tq * tv * d * 2)
    if names & _ZERO_WITH_WEIGHTS or not getattr(op, "weights", None):
        return None
    raise NoFormula(f"a layer with weights it has no formula for ({kind})")


def _graph(model):
    """The model's own graph (Keras' Function nodes by depth), or None (a subclassed model)."""
    fn = model
    if getattr(model, "_nodes_by_depth", None) is None:
        fn = getattr(model, "_functional", None)  # a Sequential's graph, once built
    by_depth = getattr(fn, "_nodes_by_depth", None) if fn is not None else None
    return (fn, by_depth) if by_depth else (None, None)


def _own_variables(op):
    return list(getattr(op, "_trainable_variables", [])) + list(getattr(op, "_non_trainable_variables", []))


def _is_container(op):
    """A custom layer or subclassed model whose weights are all its sublayers': read by tracing
    its call."""
    sublayers = getattr(op, "_layers", None) or []
    return bool(sublayers) and not _own_variables(op)


def _traced(op, args, kwargs):
    """The graph of `op.call` run on symbolic arguments (KerasTensors): (inputs, Function). A
    layer not built yet (one the first batch did not reach) would make weights here: refused."""
    import keras
    from keras.src.ops.function import Function

    for layer in op._flatten_layers(include_self=False):
        if not layer.built:
            raise NotCounted(f"{type(layer).__name__} in {type(op).__name__} was not built by the first batch")
    kwargs = dict(kwargs)
    if "training" in inspect.signature(op.call).parameters:
        kwargs["training"] = True  # dropout and the like as a training step runs them
    inputs = [t for t in keras.tree.flatten((args, kwargs)) if isinstance(t, keras.KerasTensor)]
    outputs = op.call(*args, **kwargs)
    return inputs, Function(inputs, outputs)


def _trace_model(model):
    """A subclassed model's graph, traced on symbolic inputs of its first batch's shapes."""
    import keras

    shapes = getattr(model, "_build_shapes_dict", None)
    if not shapes or len(shapes) != 1:
        raise NotCounted(f"{type(model).__name__} is a subclassed model not built by one input")
    shape = next(iter(shapes.values()))
    errors = []
    for dtype in ("float32", "int32"):  # a first batch's dtype is not kept: images, then tokens
        try:
            args = keras.tree.map_shape_structure(lambda s: keras.KerasTensor((None, *tuple(s)[1:]), dtype), shape)
            return _traced(model, (args,), {})[1]
        except NotCounted:
            raise
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")
    raise NotCounted(f"{type(model).__name__} is a subclassed model whose call could not be traced "
                     f"on symbolic inputs ({errors[0]})"[:300])


class _Count:
    def __init__(self):
        self.mults = 0          # multiply-adds of a training step, a sample
        self.kinds = []         # what was counted, in graph order, once each
        self.left_out = []      # weightless layers or ops it could not tell compute nothing

    def note(self, names, kind):
        if kind not in names:
            names.append(kind)


def _walk(model, count, inputs_need_grad):
    fn, _ = _graph(model)
    if fn is None:
        fn = _trace_model(model)
    _walk_graph(fn, count, fn.inputs if inputs_need_grad else [])


def _walk_graph(fn, count, needing_grad):
    """Adds a graph's calls to `count`; `needing_grad`: those of its inputs that need a gradient."""
    by_depth = fn._nodes_by_depth
    grad = {id(t) for t in needing_grad}
    for depth in sorted(by_depth, reverse=True):
        for node in by_depth[depth]:
            op = node.operation
            if op is None or getattr(node, "is_input", False):
                continue
            ins, outs = list(node.input_tensors), list(node.output_tensors)
            needs = any(id(t) in grad for t in ins)
            trains = bool(getattr(op, "trainable_weights", None))
            if _graph(op)[0] is not None:  # a nested model: its own graph, with this call's grads
                _walk(op, count, needs)
            elif "Layer" not in _mro_names(op):  # a raw op (keras.ops on symbolic tensors)
                kind = type(op).__name__
                mults = _raw_op(op, list(node.arguments.args), [t.shape for t in outs], grad)
                if mults:
                    count.mults += mults
                    count.note(count.kinds, kind)
                elif kind in _PRODUCT_OPS:
                    count.note(count.left_out, kind)
            else:
                try:
                    counted = _layer(op, [t.shape for t in ins], [t.shape for t in outs])
                except NoFormula:
                    if not _is_container(op):
                        raise
                    # a custom block whose weights are all its sublayers': its call, traced
                    inputs, sub = _traced(op, node.arguments.args, node.arguments.kwargs)
                    _walk_graph(sub, count, [t for t in inputs if id(t) in grad])
                else:
                    if counted is None:
                        kind = type(op).__name__
                        if not kind.startswith(_ZERO_KNOWN_PREFIXES) and not getattr(op, "weights", None):
                            count.note(count.left_out, kind)
                    else:
                        count.mults += counted.training(trains, needs)
                        count.note(count.kinds, counted.kind)
            if trains or needs:
                grad.update(id(t) for t in outs)


def _precision(model):
    policy = getattr(model, "dtype_policy", None)
    dtype = str(getattr(policy, "compute_dtype", "float32"))
    return {"bfloat16": "bf16", "float16": "fp16"}.get(dtype, "fp32")


def count(model):
    """{"per_sample", "precision", "how"} for the lane, or {"not_counted": why}. Never raises."""
    try:
        c = _Count()
        _walk(model, c, False)
        if c.mults <= 0:
            raise NotCounted("no dense, convolution, recurrent or attention layer in the model")
        how = "counted from the Keras model's layers (" + ", ".join(c.kinds) + ")"
        if c.left_out:
            how += "; counted as 0: " + ", ".join(c.left_out)
        return {"per_sample": 2 * c.mults, "precision": _precision(model), "how": how}
    except NotCounted as e:
        return {"not_counted": f"the Keras model's FLOPs: {e}"}
    except Exception as e:  # a Keras whose graph is not as read here: no count, never an error
        return {"not_counted": f"the Keras model's FLOPs could not be read ({type(e).__name__}: {e})"[:200]}
