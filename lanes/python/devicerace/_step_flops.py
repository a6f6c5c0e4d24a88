"""What the JAX and TensorFlow step counters share (devicerace/_jax_flops.py, _tf_flops.py): the
multiply-adds by the dtype of the products' inputs, and the count a lane takes, or why not."""


class NotCounted(Exception):
    """Why the FLOPs are not counted (a sentence for the lane's execution text)."""


_PRECISIONS = {"bfloat16": "bf16", "float16": "fp16"}


class Count:
    def __init__(self):
        self.by_dtype = {}  # multiply-adds by the products' dtype
        self.kinds = []     # the ops counted, in the order met

    def add(self, kind, dtype, mults):
        self.by_dtype[dtype] = self.by_dtype.get(dtype, 0) + mults
        if kind not in self.kinds:
            self.kinds.append(kind)

    def merge(self, other, times):
        """Another walk's count (a loop's body, a branch), `times` times."""
        for dtype, mults in other.by_dtype.items():
            self.by_dtype[dtype] = self.by_dtype.get(dtype, 0) + mults * times
        self.kinds += [k for k in other.kinds if k not in self.kinds]

    def total(self):
        return sum(self.by_dtype.values())


def step_count(framework, source, walk, samples):
    """{"per_sample", "precision", "how"} of the step `walk` counts (it fills a Count) over
    `samples` examples, or {"not_counted": why}. Never raises."""
    try:
        if not isinstance(samples, int) or samples <= 0:
            raise NotCounted(f"samples must be a positive whole number (it was {samples!r:.40})")
        c = Count()
        walk(c)
        if c.total() <= 0:
            raise NotCounted("the step computes no matrix product or convolution")
        dtype = max(c.by_dtype, key=c.by_dtype.get)
        how = f"counted from the {framework} step's {source} ({', '.join(c.kinds)})"
        return {"per_sample": 2 * c.total() / samples, "precision": _PRECISIONS.get(dtype, "fp32"), "how": how}
    except NotCounted as e:
        return {"not_counted": f"the {framework} step's FLOPs: {e}"}
    except Exception as e:  # a function that cannot be traced: no count, never an error
        return {"not_counted": f"the {framework} step's FLOPs could not be counted ({type(e).__name__}: {e})"[:200]}
