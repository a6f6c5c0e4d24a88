"""DeviceRace's automatic instrumentation of an unchanged PyTorch script (way 1 of "Race your own
training"): installed when the script imports torch, in a race's lane only (sitecustomize.py).

- Steps: torch.optim's global step hooks count every optimizer step (any optimizer, any
  training loop: plain, Hugging Face, Lightning).
- Loss: the scalar `backward()` is called on, kept on its device (a detached running sum) and
  read only at report points: no synchronisation per step.
- Samples: the first dimension of the input of the last loss function called before
  `backward()` (torch.nn.functional's losses, which the torch.nn loss modules call): the batch,
  or the tokens of a language model whose logits are flattened to (B*T, V).
- Evaluations: the time between a module's `eval()` and its `train()` is left out of the
  throughput intervals (what it measured is not visible here).
- Phases: on the CPU, the seconds spent waiting for a `torch.utils.data.DataLoader`'s next
  batch ("data": what makes a lane input-bound, as for the built-in lanes; outside evaluations),
  in `backward()` and in the optimizer's step; the rest of a step (the forward pass, the loss, a
  batch the script makes itself) is "other". On a GPU those calls only queue work, so no phases
  are said.
"""
import time

import devicerace

# torch.nn.functional's losses whose first argument's first dimension is the batch.
_LOSSES = ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss",
           "gaussian_nll_loss", "soft_margin_loss", "multilabel_soft_margin_loss", "multi_margin_loss",
           "hinge_embedding_loss", "cosine_embedding_loss", "margin_ranking_loss", "triplet_margin_loss",
           "ctc_loss")

_installed = False
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


def install(torch):
    """Hooks `torch` (just imported) for the lane. Idempotent."""
    global _installed
    if _installed:
        return
    _installed = True
    lane = devicerace.lane()
    if not lane.in_race:
        return
    state = _State()
    functional = torch.nn.functional

    def wrap_loss(name):
        original = getattr(functional, name, None)
        if original is None:
            return

        def loss(input, *args, **kwargs):
            try:
                state.batch = input.shape[0] if input.dim() > 0 else 1
            except Exception:
                state.batch = None
            return original(input, *args, **kwargs)

        loss.__wrapped__ = original
        loss.__name__ = original.__name__
        loss.__doc__ = original.__doc__
        setattr(functional, name, loss)
        _swaps.append((functional, name, original, loss))

    for name in _LOSSES:
        wrap_loss(name)

    tensor_backward = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            if self.numel() == 1:
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
        if state.on_cpu and lane._source != "api":
            lane._add_phase("backward", time.perf_counter() - started)
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
        state.optimizer_started = time.perf_counter()

    def after_step(optimizer, args, kwargs):
        if lane._source == "api":
            return
        lane._take_over("torch")
        if state.on_cpu and state.optimizer_started is not None:
            lane._add_phase("optimizer", time.perf_counter() - state.optimizer_started)
        losses = state.pending_losses
        samples = state.pending_samples if state.pending_known and losses else None
        state.pending_losses = []
        state.pending_samples, state.pending_known = 0, True
        lane._count(samples, losses, 1)

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
            if not (state.device_known and state.on_cpu and state.eval_started is None and lane._source != "api"):
                return loader_next(self)
            started = time.perf_counter()
            try:
                return loader_next(self)
            finally:
                lane._add_phase("data", time.perf_counter() - started)

        next_batch.__doc__ = loader_next.__doc__
        _BaseDataLoaderIter.__next__ = next_batch
        _swaps.append((_BaseDataLoaderIter, "__next__", loader_next, next_batch))

    module_train = torch.nn.Module.train

    def train(self, mode=True):
        # Only the outermost call counts: Module.train recurses into the children.
        if lane._source != "api" and lane._step > 0:
            if not mode and state.eval_started is None:
                state.eval_started = devicerace.now()
                lane._flush()  # the interval ends at the last step before the evaluation
            elif mode and state.eval_started is not None:
                started, state.eval_started = state.eval_started, None
                lane._evaluation(None, None, None, started=started)
        return module_train(self, mode)

    train.__doc__ = module_train.__doc__
    torch.nn.Module.train = train
    _swaps.append((torch.nn.Module, "train", module_train, train))


def set_enabled(on):
    """Puts PyTorch's own functions back (False) or DeviceRace's wrappers and hooks in again (True):
    a measurement of what the instrumentation costs, in one process (bench/script_overhead.py)."""
    for owner, name, original, wrapped in _swaps:
        setattr(owner, name, wrapped if on else original)
    for i, (register, hook, handle) in enumerate(_hooks):
        if handle is not None:
            handle.remove()
        _hooks[i] = (register, hook, register(hook) if on else None)
