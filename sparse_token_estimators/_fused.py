"""Fits trained side by side as one stacked model (``fit_group(..., trainer="fused")``).

An estimator class that can train so declares it with a class attribute
``fused_trainer``, a :class:`StackedTrainer`; ``fit_group`` and
``critical_width`` ask the estimator for it (:func:`trainer_of`), never a list
of classes. Each fit still runs its own plain ``fit`` (its own checks,
transaction, seeded weights, data, shuffling and positional draws, callbacks,
``history_``, Adam with its own rate, in its own thread): only skorch's
``train_step_single`` is replaced, on the instance and for the call. That
step hands its batch to the group; when every fit still training has handed
one, the group runs its modules' own ``forward`` once, vectorised over the
stacked weights (``torch.func.functional_call`` under ``torch.func.vmap``, as
in PyTorch's model-ensembling tutorial), each model's loss by its own
``get_loss``, and one backward pass of their sum, which leaves each model's
gradients on its own parameters. Each fit's own optimizer then steps, as in
its lone fit. Models whose modules differ (class, shapes, public settings) or
whose batches differ in shape run in separate stacked passes of one round.

The results equal the lone fits' to float rounding, not bit for bit: the
batched kernels round differently (tested to 1e-5). A fit that ends (its
steps done, a callback's stop, a divergence) leaves the group; the others go
on. What it pays per family: ``benchmarks/bench_group.py`` (on a 2-core CPU,
1 thread: the paper's model 1.07-1.2x per model, each fit's own skorch loop,
callbacks and Adam step staying per fit; the stacked pass pays most where a
step is per-operation overhead, as on a GPU).
"""

import copy
import threading
import time

import torch
from skorch.dataset import unpack_data
from skorch.utils import to_tensor
from torch.func import functional_call, vmap

__all__ = ["StackedTrainer", "trainer_of"]


def trainer_of(net, trainer):
    """What trains ``net`` under ``trainer``: "fused" where its class declares a
    ``fused_trainer`` that accepts it, else "exact" (its lone fit). The one place
    that decides it: ``fit_group`` trains by it, the reproduction's records say it."""
    fused = getattr(type(net), "fused_trainer", None)
    if trainer == "fused" and fused is not None and fused.accepts(net):
        return "fused"
    return "exact"


class StackedTrainer:
    """How an estimator class trains side by side: its module's forward on stacked weights.

    Parameters
    ----------
    forward_kwargs : callable or None, default=None
        ``forward_kwargs(net, X)``: the keywords the estimator passes to its
        module's ``forward`` for a training batch ``X`` (e.g. the positional
        draws, from the estimator's own generator); None: none.

    Examples
    --------
    >>> from sparse_token_estimators import SparseTokenTransformer
    >>> isinstance(SparseTokenTransformer.fused_trainer, StackedTrainer)
    True
    >>> SparseTokenTransformer.fused_trainer.accepts(SparseTokenTransformer())
    True
    """

    def __init__(self, forward_kwargs=None):
        self.forward_kwargs = forward_kwargs

    def accepts(self, net):
        """Whether ``net`` (not yet fitted) trains fused: its class's own module, not
        compiled (a user's module may not run under ``vmap``)."""
        import inspect

        default = inspect.signature(type(net)).parameters.get("module")
        return (default is not None and net.module is default.default
                and not getattr(net, "compile", False))

    def train_step_single(self, group, k, net):
        """The ``train_step_single`` of member ``k`` of ``group`` (skorch's signature)."""

        def step(batch, **fit_params):
            net.module_.train()  # what skorch's own step sets before its forward
            net.criterion_.train()
            Xi, yi = unpack_data(batch)
            Xi = to_tensor(Xi, device=net.device)  # as skorch's infer (within the fit)
            kwargs = dict(self.forward_kwargs(net, Xi)) if self.forward_kwargs else {}
            return group.submit(k, (net, Xi, yi, {**kwargs, **fit_params}))

        return step


class StackedRound:
    """The rounds of a fused group of ``n`` members, each training in its own thread.

    The members take turns, in order (0, 1, ...): one runs until it hands its
    batch (:meth:`submit`) or its fit ends (:meth:`leave`), then the next; so
    everything outside the stacked pass (data, draws, callbacks) runs one
    member at a time, in the same order every time. When every member still
    training has handed a batch, the thread that runs the group (:meth:`run`)
    makes the round's stacked pass, and the turns begin again at the first.
    """

    def __init__(self, n):
        self.cond = threading.Condition()  # the group's (the rounds): one lock for all
        # each member waits on its own: a turn wakes the one member whose turn it is
        self.turns = [threading.Condition(self.cond) for _ in range(n)]
        self.active = set(range(n))
        self.waiting = {}
        self.results = {}
        self.turn = 0 if n else None
        self.stop = None  # an exception every member raises at its next turn
        self.seconds = dict.fromkeys(range(n), 0.0)
        self.clock = time.process_time()
        self.bases = {}  # a key of _key -> its module's skeleton (on the "meta" device)
        self.module_keys = {}  # member -> _module_key of its module

    def begin(self, k):
        """Wait for member ``k``'s first turn (in its thread, before its fit)."""
        with self.cond:
            while self.turn != k:
                self.turns[k].wait()

    def submit(self, k, request):
        """Member ``k``'s batch -> its step (``{"loss", "y_pred"}``), after the round."""
        with self.cond:
            if self.stop is not None:
                raise self.stop
            self.waiting[k] = request
            self._pass(k)
            while self.turn != k:
                self.turns[k].wait()
            result = self.results.pop(k, None)
            if self.stop is not None:
                raise self.stop
        if isinstance(result, BaseException):
            raise result
        return result

    def leave(self, k):
        """Member ``k``'s fit has ended: the rounds go on without it."""
        with self.cond:
            self._tick()
            self.active.discard(k)
            self.waiting.pop(k, None)
            self.results.pop(k, None)
            self._pass(k)

    def halt(self, exc):
        """Every member raises ``exc`` at its next turn."""
        with self.cond:
            if self.stop is None:
                self.stop = exc
            self._wake()

    def _pass(self, k):
        """The turn after member ``k``'s: the next member that has not handed its batch;
        None when all have (the round is due)."""
        ready = sorted(self.active - set(self.waiting))
        later = [j for j in ready if j > k]
        self.turn = (later or ready or [None])[0]
        self._wake()

    def _wake(self):
        """Wake whoever's turn it is: a member, or the group's round (``turn`` None)."""
        (self.cond if self.turn is None else self.turns[self.turn]).notify()

    def _tick(self):
        """Share the CPU seconds since the last tick among the members training (called
        as one leaves: the members training change only then)."""
        now = time.process_time()
        if self.active:
            share = (now - self.clock) / len(self.active)
            for k in self.active:
                self.seconds[k] += share
        self.clock = now

    def cpu_seconds(self, k):
        """Member ``k``'s CPU seconds so far: an even share of the group's while it trains."""
        with self.cond:
            self._tick()
            return self.seconds[k]

    def run(self):
        """Make the rounds until every member has left (in the calling thread)."""
        while True:
            with self.cond:
                while self.active and self.turn is not None:
                    self.cond.wait(0.5)
                if not self.active:
                    return
                requests = dict(self.waiting)
                self.waiting.clear()
            if self.stop is None:
                try:
                    results = _stacked_steps(requests, self.bases, self.module_keys)
                except Exception as exc:  # noqa: BLE001 -- each fit raises it, as its step would
                    results = dict.fromkeys(requests, exc)
            else:
                results = {}
            with self.cond:
                self.results.update(results)
                self.turn = min(self.active)
                self._wake()


def _config(module):
    """What, beside its tensors, decides what ``module``'s forward computes."""
    return repr([(name, type(m).__name__, sorted(
        (key, repr(value)) for key, value in vars(m).items()
        if not key.startswith("_") and not isinstance(value, (torch.Tensor, torch.nn.Module))))
        for name, m in module.named_modules()])


def _module_key(module):
    """The module's class, public settings and tensors' shapes: modules alike in these
    compute one function of their weights and inputs."""
    tensors = [(name, tuple(t.shape), t.dtype, str(t.device))
               for name, t in [*module.named_parameters(), *module.named_buffers()]]
    return type(module), _config(module), tuple(tensors)


def _key(module_key, X, kwargs):
    inputs = [(name, None if value is None else tuple(value.shape))
              for name, value in sorted(kwargs.items())]
    return module_key, tuple(X.shape), str(X.device), tuple(inputs)


def _stacked_steps(requests, bases, module_keys):
    """``{k: (net, X, y, forward kwargs)}`` -> ``{k: {"loss", "y_pred"}}``: one stacked
    forward per part (same module and batch shape), one backward for all."""
    parts = {}
    for k, (net, X, _, kwargs) in requests.items():
        if k not in module_keys:  # a fit's module is built once, in its fit
            module_keys[k] = _module_key(net.module_)
        parts.setdefault(_key(module_keys[k], X, kwargs), []).append(k)
    results, losses = {}, []
    with torch.enable_grad():
        for key, members in parts.items():
            modules = [requests[k][0].module_ for k in members]
            base = bases.get(key)
            if base is None:
                base = bases[key] = copy.deepcopy(modules[0]).to("meta")
            params = {name: torch.stack([dict(m.named_parameters())[name] for m in modules])
                      for name, _ in modules[0].named_parameters()}
            buffers = {name: torch.stack([dict(m.named_buffers())[name] for m in modules])
                       for name, _ in modules[0].named_buffers()}
            X = torch.stack([requests[k][1] for k in members])
            names = sorted(requests[members[0]][3])
            inputs = [None if requests[members[0]][3][n] is None
                      else torch.stack([requests[k][3][n] for k in members]) for n in names]

            def forward(p, b, x, *values, base=base, names=names):
                return functional_call(base, (p, b), (x,), dict(zip(names, values)))

            dims = (0, 0, 0, *[None if v is None else 0 for v in inputs])
            y_pred = vmap(forward, in_dims=dims)(params, buffers, X, *inputs)
            for a, k in enumerate(members):
                net, Xk, yk, _ = requests[k]
                with net.device_scope():
                    loss = net.get_loss(y_pred[a], yk, X=Xk, training=True)
                losses.append(loss)
                results[k] = {"loss": loss, "y_pred": y_pred[a]}
        torch.autograd.backward(losses)
    return results
