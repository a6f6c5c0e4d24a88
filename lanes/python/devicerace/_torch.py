"""DeviceRace's automatic instrumentation of an unchanged PyTorch script (way 1 of "Race your own
training"): installed when the script imports torch, in a race's lane only (sitecustomize.py).

- Steps: torch.optim's global step hooks count every optimizer step (any optimizer, any
  training loop: plain, Hugging Face, Lightning). A script that updates its weights by hand (no
  torch.optim: pytorch/examples' word language model and regression) resets its gradients with a
  module's zero_grad() once a step: until an optimizer steps, the backward() passes before such a
  reset (or before an evaluation, or the script's end) are one step. A script that does neither
  is told, after _HINT_AFTER backward() passes, how to report its steps.
- Loss: the scalar `backward()` is called on, kept on its device (a detached running sum) and
  read only at report points: no synchronisation per step.
- Samples: the first dimension of the input of the last loss function called before
  `backward()` (torch.nn.functional's losses, which the torch.nn loss modules call): the batch,
  or the tokens of a language model whose logits are flattened to (B*T, V).
- Evaluations: the time between a module's `eval()` and its `train()` is left out of the
  throughput intervals (what it measured is not visible here).
- FLOPs: one training step in the warm-up (the one after the third optimizer step) runs under
  PyTorch's FlopCounterMode: its matrix products, convolutions and attention (a multiply-add is 2
  FLOPs, as DeviceRace counts its own networks) over the step's samples are the lane's FLOPs per
  sample, sent once with the precision its loss saw (bf16 under autocast), so the lane has an
  achieved FLOP/s and a "% of peak". A torch.compile'd model is counted too: while a dispatch
  mode is on the stack, Dynamo runs the compiled frames' Python eagerly (PyTorch 2.11 checked:
  the same count as eager, no recompilation), so the counted step is one eager step. On an older
  PyTorch, a script that compiled anything is not counted. Never across an evaluation (counted
  again).
- Phases: on the CPU, the seconds spent waiting for a `torch.utils.data.DataLoader`'s next
  batch ("data": what makes a lane input-bound, as for the built-in lanes; outside evaluations);
  "forward" (with the loss), from the later of the last training batch's arrival, the last
  optimizer step's or backward()'s end to the end of the last loss function before backward()
  (a loss outside torch.nn.functional leaves it to "other"); backward(); the optimizer's step;
  the rest of a step (a batch the script slices itself, zero_grad, logging) is "other". On a GPU
  those calls only queue work, so no phases are said.
"""
import sys
import time
import warnings

import devicerace

# torch.nn.functional's losses whose first argument's first dimension is the batch.
_LOSSES = ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss",
           "gaussian_nll_loss", "soft_margin_loss", "multilabel_soft_margin_loss", "multi_margin_loss",
           "hinge_embedding_loss", "cosine_embedding_loss", "margin_ranking_loss", "triplet_margin_loss",
           "ctc_loss")

# What install() replaced, and its replacements: (owner, attribute, original, wrapped), and the
# optimizer hooks' handles (set_enabled swaps them; bench/script_overhead.py times both ways).
_swaps = []
_hooks = []


class _State:
    batch = None          # first dimension of the last loss function's input
    pending_samples = 0   # examples of the backward passes since the last optimizer step
    pending_known = True
    pending_losses = []   # their losses, detached (read at report points only)
    on_cpu = True
    device_known = False  # the first backward() has said where the lane trains
    optimizer_started = None
    eval_started = None
    forward_from = None   # when the step's forward could start (perf_counter), while timing phases
    loss_end = None       # the end of the last loss function since then
    flop_mode = None      # the FlopCounterMode of the step being counted, while it runs
    flop_tries = 0
    flop_spoiled = False  # an evaluation ran inside the counted step: counted again
    flop_precision = "fp32"
    optimizer_seen = False  # a torch.optim optimizer has stepped: its steps are the lane's
    by_hand = False       # steps counted at a module's zero_grad() (weights updated by hand)
    optimizers = ()       # the optimizers seen stepping (ids, a few): a GAN's discriminator's and generator's
    flop_steps_left = 0   # steps the counted window still spans (one of each optimizer)
    flop_samples = 0      # their samples so far (None: not seen)
    backwards = 0         # backward() passes while no step was counted

# backward() passes without an optimizer step or a module's zero_grad() before the lane is told
# how such a script reports its steps (it fails later, after quiet= seconds without a step).
_HINT_AFTER = 50
_HINT = ("its backward() ran {n} times, but no torch.optim optimizer stepped and no module's zero_grad() "
         "reset the gradients: a script that updates its weights by hand reports each step with "
         "devicerace.lane().step(samples=..., loss=...), or calls model.zero_grad() once a step")

# The optimizer step after which one step's FLOPs are counted: inside the warm-up (whose 20 steps
# the figures leave out), past the first steps' one-off work (lazy modules, allocator growth).
_FLOP_STEP = 3
_FLOP_TRIES = 3


def install(torch):
    """Hooks `torch` (just imported) for the lane: called once, in a race's lane
    (sitecustomize._instrument)."""
    lane = devicerace.lane()
    state = _State()
    functional = torch.nn.functional

    def wrap_loss(name):
        original = getattr(functional, name, None)
        if original is None:
            return

        def loss(input, *args, **kwargs):
            try:
                state.batch = input.shape[0] if input.dim() > 0 else 1
                if state.flop_mode is not None:
                    state.flop_precision = _precision(torch, input)
            except Exception:
                state.batch = None
            result = original(input, *args, **kwargs)
            state.loss_end = time.perf_counter()
            return result

        loss.__wrapped__ = original
        loss.__name__ = original.__name__
        loss.__doc__ = original.__doc__
        setattr(functional, name, loss)
        _swaps.append((functional, name, original, loss))

    for name in _LOSSES:
        wrap_loss(name)

    tensor_backward = torch.Tensor.backward

    def timing():
        # Phases are timed on a CPU lane the hooks report, outside evaluations.
        return state.device_known and state.on_cpu and state.eval_started is None and lane._source != "api"

    def backward(self, *args, **kwargs):
        started = time.perf_counter()
        if timing() and state.forward_from is not None and state.loss_end is not None \
                and state.loss_end > state.forward_from:
            lane._add_phase("forward", state.loss_end - state.forward_from)
        state.loss_end = None
        try:
            if self.numel() == 1:
                if not state.optimizer_seen and not state.by_hand and lane._source is None:
                    state.backwards += 1
                    if state.backwards == _HINT_AFTER:
                        lane._hint(_HINT.format(n=_HINT_AFTER))
                state.pending_losses.append(self.detach())
                state.on_cpu = not self.is_cuda
                state.device_known = True
                if state.batch is None:
                    state.pending_known = False
                else:
                    state.pending_samples += state.batch
                state.batch = None
        except Exception:
            pass
        result = tensor_backward(self, *args, **kwargs)
        ended = time.perf_counter()
        if state.on_cpu and lane._source != "api":
            lane._add_phase("backward", ended - started)
        state.forward_from = ended  # a next micro-batch's forward (gradient accumulation) starts here
        return result

    def losses_since():
        # The script reports its own steps (lane.step without a loss): the backward() losses
        # since the last report stand for its loss.
        pending = state.pending_losses
        state.pending_losses = []
        state.pending_samples, state.pending_known = 0, True
        return pending

    lane._hook_losses = losses_since

    backward.__doc__ = tensor_backward.__doc__
    torch.Tensor.backward = backward
    _swaps.append((torch.Tensor, "backward", tensor_backward, backward))

    def before_step(optimizer, args, kwargs):
        state.optimizer_seen = True
        if len(state.optimizers) < 8 and id(optimizer) not in state.optimizers:
            state.optimizers += (id(optimizer),)
        state.optimizer_started = time.perf_counter()

    def after_step(optimizer, args, kwargs):
        if lane._source == "api":
            _end_flop_count(state)  # the script took over: never leave the counter on
            return
        if state.on_cpu and state.optimizer_started is not None:
            lane._add_phase("optimizer", time.perf_counter() - state.optimizer_started)
        end_step()

    def end_step():
        lane._take_over("torch")
        losses = state.pending_losses
        samples = state.pending_samples if state.pending_known and losses else None
        state.pending_losses = []
        state.pending_samples, state.pending_known = 0, True
        lane._count(samples, losses, 1)
        _count_flops(torch, lane, state, samples)
        state.forward_from = time.perf_counter()

    def end_step_by_hand():
        # The backward() passes since the last step were a step whose weights the script updated
        # itself (no optimizer has stepped in this process).
        if state.optimizer_seen or not state.pending_losses or lane._source == "api":
            return
        if not state.by_hand:
            state.by_hand = True
            lane._steps_by = "zero_grad"
        end_step()

    module_zero_grad = torch.nn.Module.zero_grad

    def zero_grad(self, *args, **kwargs):
        end_step_by_hand()
        return module_zero_grad(self, *args, **kwargs)

    zero_grad.__doc__ = module_zero_grad.__doc__
    torch.nn.Module.zero_grad = zero_grad
    _swaps.append((torch.nn.Module, "zero_grad", module_zero_grad, zero_grad))

    def last_step_by_hand():
        # The script's last step has no reset after it: counted at its exit, before the lane's
        # last report.
        if state.by_hand:
            end_step_by_hand()

    lane._at_exit.append(last_step_by_hand)
    # Run last of the exit hooks (they run in reverse): Gloo's threads settle before the
    # interpreter finalizes (devicerace/_gloo_exit.py).
    from devicerace import _gloo_exit
    lane._at_exit.insert(0, _gloo_exit.settle)

    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    _hooks[:] = [(register_optimizer_step_pre_hook, before_step), (register_optimizer_step_post_hook, after_step)]
    _hooks[:] = [(register, hook, register(hook)) for register, hook in _hooks]

    try:
        from torch.utils.data.dataloader import _BaseDataLoaderIter
    except ImportError:  # a PyTorch without it: no data phase
        _BaseDataLoaderIter = None
    if _BaseDataLoaderIter is not None:
        loader_next = _BaseDataLoaderIter.__next__

        def next_batch(self):
            # Training batches only: a test loader read during an evaluation is the evaluation's.
            if not timing():
                return loader_next(self)
            started = time.perf_counter()
            try:
                return loader_next(self)
            finally:
                state.forward_from = time.perf_counter()
                lane._add_phase("data", state.forward_from - started)

        next_batch.__doc__ = loader_next.__doc__
        _BaseDataLoaderIter.__next__ = next_batch
        _swaps.append((_BaseDataLoaderIter, "__next__", loader_next, next_batch))

    module_train = torch.nn.Module.train

    def train(self, mode=True):
        # Only the outermost call counts: Module.train recurses into the children.
        if lane._source != "api" and lane._step > 0:
            if not mode and state.eval_started is None:
                if state.by_hand:
                    end_step_by_hand()  # the step before the evaluation is not reset by then
                state.eval_started = devicerace.now()
                state.flop_spoiled = state.flop_mode is not None
                lane._flush()  # the interval ends at the last step before the evaluation
            elif mode and state.eval_started is not None:
                started, state.eval_started = state.eval_started, None
                state.forward_from, state.loss_end = time.perf_counter(), None  # the evaluation is not a forward
                lane._evaluation(None, None, None, started=started)
        return module_train(self, mode)

    train.__doc__ = module_train.__doc__
    torch.nn.Module.train = train
    _swaps.append((torch.nn.Module, "train", module_train, train))


def _precision(torch, tensor):
    """The arithmetic a loss's input came from: autocast's dtype where it is on, else the tensor's."""
    dtype = tensor.dtype
    try:
        if torch.is_autocast_enabled(tensor.device.type):
            dtype = torch.get_autocast_dtype(tensor.device.type)
    except Exception:
        pass
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")


def _compiled():
    """torch.compile has compiled something in this process (or that cannot be told)."""
    if "torch._dynamo" not in sys.modules:
        return False
    try:
        return sys.modules["torch._dynamo"].utils.counters["frames"]["ok"] > 0
    except Exception:
        return True


# The first PyTorch whose compiled frames were checked to run eagerly under the FLOP counter.
_COMPILED_COUNTED_FROM = (2, 11)


def _counts_compiled(torch):
    """This PyTorch counts a compiled model's step as its eager one (its version, major.minor)."""
    try:
        major, minor = (int(part) for part in str(torch.__version__).split(".")[:2])
    except Exception:
        return False
    return (major, minor) >= _COMPILED_COUNTED_FROM


# PyTorch warns when a compiled module runs while global module hooks exist: the counter's own
# (its module tracker), for the counted step only. Not the script's warning to see.
_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks on modules"


def _quiet_compiled_hooks_warning(on):
    """Adds (True) or removes (False) the filter of the counter's global-hooks warning."""
    entry = ("ignore", _HOOKS_WARNING, UserWarning)
    if on:
        warnings.filterwarnings(*entry)
        return
    try:
        for i, f in enumerate(warnings.filters):
            if f[0] == entry[0] and f[2] is entry[2] and getattr(f[1], "pattern", None) == _HOOKS_WARNING:
                del warnings.filters[i]
                mutated = getattr(warnings, "_filters_mutated", None)  # (the module's cache of them)
                if mutated is not None:
                    mutated()
                return
    except Exception:
        pass  # a Python whose filters are not this list: the filter stays


_counter_class = None


def _flop_counter():
    """PyTorch's FlopCounterMode, made never to raise into the script: an op whose FLOP formula
    fails (a shape it does not expect) marks the count failed (not sent) and the op's result stands."""
    global _counter_class
    if _counter_class is None:
        from torch.utils.flop_counter import FlopCounterMode

        class Counter(FlopCounterMode):
            failed = False

            def __init__(self, **kwargs):
                super().__init__(custom_mapping=_counter_fixes(), **kwargs)

            def _count_flops(self, func_packet, out, args, kwargs):
                try:
                    return super()._count_flops(func_packet, out, args, kwargs)
                except Exception:
                    self.failed = True
                    return out

        _counter_class = Counter
    return _counter_class


def _counter_fixes():
    """FLOP formulas PyTorch's counter lacks or gets wrong ({op: raw formula}), each kept only
    where this PyTorch has the op and the formulas it reuses:
    - the CPU's fused attention (`_scaled_dot_product_flash_attention_for_cpu`, what
      F.scaled_dot_product_attention runs on a CPU: Hugging Face's models, Keras' attention) and
      its backward, which it counts as 0: as the GPU's fused attention is counted;
    - a grouped convolution's weight gradient, which it counts once per group (its formula
      ignores `groups`): a depthwise layer's x channels;
    - the fused recurrent layers it has no formula for, so counts as 0: oneDNN's on a CPU
      (`mkldnn_rnn_layer`, one layer and direction a call: nn.LSTM's on a CPU) and cuDNN's on a GPU
      (`_cudnn_rnn`, every layer: nn.LSTM's, nn.GRU's, nn.RNN's), each weight matrix a product over
      every time step of every sequence (a multiply-add is 2); a backward pass as the forward's
      products again for the inputs' and the hidden state's gradients, and once more where the
      weights' gradients are asked for."""
    import torch
    from torch.utils import flop_counter as fc

    fixes = {}
    aten = torch.ops.aten

    def raw(formula):
        formula._get_raw = True  # called with the op's own arguments (FlopCounterMode's custom_mapping)
        return formula

    if hasattr(fc, "sdpa_flop_count") and hasattr(fc, "sdpa_backward_flop_count"):
        if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
            fixes[aten._scaled_dot_product_flash_attention_for_cpu] = raw(
                lambda q, k, v, *args, out_val=None, **kwargs: fc.sdpa_flop_count(q.shape, k.shape, v.shape))
        if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward"):
            fixes[aten._scaled_dot_product_flash_attention_for_cpu_backward] = raw(
                lambda grad, q, k, v, *args, out_val=None, **kwargs: fc.sdpa_backward_flop_count(
                    grad.shape, q.shape, k.shape, v.shape))
    if hasattr(fc, "conv_backward_flop"):
        def conv_backward(*args, out_val=None, **kwargs):
            groups, mask = max(1, int(args[9])), list(args[10])
            flops = 0
            if mask[0]:
                flops += fc.conv_backward_flop(*args[:10], [True, False, False], out_val=out_val)
            if mask[1]:
                flops += fc.conv_backward_flop(*args[:10], [False, True, False], out_val=out_val) // groups
            return flops

        fixes[aten.convolution_backward] = raw(conv_backward)

    def recurrent(x, weights):
        # Every time step of every sequence: x's dimensions but its features (packed sequences: its
        # rows), times each weight matrix (the input's, the hidden state's, a projection's).
        steps = x.numel() // max(1, x.shape[-1])
        return 2 * steps * sum(w.numel() for w in weights if w is not None and w.dim() == 2)

    if hasattr(aten, "mkldnn_rnn_layer"):
        fixes[aten.mkldnn_rnn_layer] = raw(
            lambda x, w0, w1, *args, out_val=None, **kwargs: recurrent(x, (w0, w1)))
    if hasattr(aten, "mkldnn_rnn_layer_backward"):
        fixes[aten.mkldnn_rnn_layer_backward] = raw(
            lambda x, w1, w2, *args, out_val=None, **kwargs: 2 * recurrent(x, (w1, w2)))
    if hasattr(aten, "_cudnn_rnn"):
        fixes[aten._cudnn_rnn] = raw(lambda x, weights, *args, out_val=None, **kwargs: recurrent(x, weights))
    if hasattr(aten, "_cudnn_rnn_backward"):
        def cudnn_rnn_backward(x, weights, *args, out_val=None, **kwargs):
            mask = kwargs.get("output_mask", args[-1] if args else None)
            weight_grads = 1 if mask is None or bool(list(mask)[3]) else 0
            return (1 + weight_grads) * recurrent(x, weights)

        fixes[aten._cudnn_rnn_backward] = raw(cudnn_rnn_backward)
    return fixes


def _end_flop_count(state):
    """Leaves the FlopCounterMode of the step being counted; the mode, or None."""
    mode, state.flop_mode = state.flop_mode, None
    if mode is not None:
        try:
            mode.__exit__(None, None, None)
        except Exception:
            state.flop_tries = _FLOP_TRIES
            return None
        finally:
            _quiet_compiled_hooks_warning(False)
    return mode


def _count_flops(torch, lane, state, samples):
    """At an optimizer step's end: ends the counted window (its FLOPs per sample to the lane), or
    starts counting the next one once the warm-up is past its first steps. The window spans one
    step of each optimizer seen (a GAN's discriminator's and generator's steps do different work,
    and the lane's samples count both)."""
    if state.flop_mode is not None:
        state.flop_samples = None if samples is None or state.flop_samples is None else state.flop_samples + samples
        state.flop_steps_left -= 1
        if state.flop_steps_left > 0:
            return
    mode = _end_flop_count(state)
    if mode is not None:
        spoiled, state.flop_spoiled = state.flop_spoiled, False
        samples = state.flop_samples
        if spoiled or not samples:
            # An evaluation inside it, or samples not seen: the next window is counted, or, after
            # the last try for want of samples, the execution text says why there is no count.
            if not spoiled and state.flop_tries >= _FLOP_TRIES:
                lane._flops = {"not_counted": "the script's batch is not seen (its loss is not one of "
                                              "torch.nn.functional's), so no FLOPs a sample"}
            return
        try:
            total = 0 if mode.failed else mode.get_total_flops()
        except Exception:
            total = 0
        state.flop_tries = _FLOP_TRIES
        if total > 0:
            lane._flops = {"per_sample": total / samples, "precision": state.flop_precision}
            if len(state.optimizers) > 1:
                lane._flops["how"] = (f"counted by PyTorch's FlopCounterMode over one step of each of its "
                                      f"{len(state.optimizers)} optimizers")
        return
    if state.flop_tries >= _FLOP_TRIES or lane._step < _FLOP_STEP or state.eval_started is not None:
        return
    if _compiled() and not _counts_compiled(torch):
        state.flop_tries = _FLOP_TRIES
        lane._flops = {"not_counted": f"torch.compile has compiled code in this script, and PyTorch "
                                      f"{torch.__version__} is older than "
                                      f"{'.'.join(map(str, _COMPILED_COUNTED_FROM))}, where counting it was checked"}
        return
    state.flop_tries += 1
    try:
        counter = _flop_counter()(display=False)
        _quiet_compiled_hooks_warning(True)
        counter.__enter__()
    except Exception:
        _quiet_compiled_hooks_warning(False)
        state.flop_tries = _FLOP_TRIES
        return
    state.flop_mode, state.flop_spoiled, state.flop_precision = counter, False, "fp32"
    state.flop_steps_left, state.flop_samples = max(1, len(state.optimizers)), 0


def set_enabled(on):
    """Puts PyTorch's own functions back (False) or DeviceRace's wrappers and hooks in again (True):
    a measurement of what the instrumentation costs, in one process (bench/script_overhead.py)."""
    for owner, name, original, wrapped in _swaps:
        setattr(owner, name, wrapped if on else original)
    for i, (register, hook, handle) in enumerate(_hooks):
        if handle is not None:
            handle.remove()
        _hooks[i] = (register, hook, register(hook) if on else None)
