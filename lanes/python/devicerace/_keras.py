"""DeviceRace's automatic instrumentation of an unchanged Keras 3 script (way 1 of "Race your own
training", for Keras as devicerace/_torch.py is for PyTorch): installed when the script imports
keras, in a race's lane only (sitecustomize.py). Every `Model.fit` gets DeviceRace's callback
(devicerace.keras.Callback) added to its callbacks, unless the script gave one itself: each
training batch a step, fit's validation and `evaluate()` the lane's evaluations. The batch size is
fit's `batch_size`, or Keras' default of 32 for arrays; for a dataset or a generator it is not
known, and the lane shows steps/s.
"""
import devicerace

# fit's parameters in order, as Keras 3 declares them (a positional batch_size or callbacks).
_FIT_ORDER = ("x", "y", "batch_size", "epochs", "verbose", "callbacks")


def _batch_size(arguments):
    size = arguments.get("batch_size")
    if size is not None:
        return size
    x = arguments.get("x")
    # Arrays (NumPy, a backend's tensor, a dict or list of them) are batched by fit: 32 by default.
    first = next(iter(x.values()), None) if isinstance(x, dict) else x[0] if isinstance(x, (list, tuple)) and x else x
    return 32 if hasattr(first, "shape") and hasattr(first, "dtype") else None


def install(keras):
    """Wraps `keras.Model.fit` (just imported) for the lane: called once, in a race's lane
    (sitecustomize._instrument)."""
    lane = devicerace.lane()
    model_fit = keras.Model.fit

    def fit(self, *args, **kwargs):
        from devicerace.keras import Callback
        arguments = dict(zip(_FIT_ORDER, args))
        arguments.update(kwargs)
        given = list(arguments.get("callbacks") or [])
        if lane._source != "api" and not any(isinstance(c, Callback) for c in given):
            given.append(Callback(batch_size=_batch_size(arguments)))
            if len(args) > _FIT_ORDER.index("callbacks"):
                args = args[:5] + (given,) + args[6:]
            else:
                kwargs["callbacks"] = given
        return model_fit(self, *args, **kwargs)

    fit.__doc__ = model_fit.__doc__
    fit.__wrapped__ = model_fit
    keras.Model.fit = fit
