"""Fits trained side by side as one stacked model (``fit_group(..., trainer="fused")``).

An estimator class that can train so declares it with a class attribute
``fused_trainer``, a :class:`StackedTrainer`; ``fit_group`` and
``critical_width`` ask the estimator for it (:func:`trainer_of`), never a list
of classes. Each fit still runs its own plain ``fit`` (its own checks,
transaction, seeded weights, data, shuffling and positional draws, callbacks,
``history_``, in its own thread): only skorch's ``train_step`` is replaced, on
the instance and for the call. That step hands its batch to the group; when
every fit still training has handed one, the group runs its modules' own
``forward`` and each model's loss (the estimator's ``get_loss``) once,
vectorised over the stacked weights (``torch.func.functional_call`` under
``torch.func.vmap``, as in PyTorch's model-ensembling tutorial), one backward
pass of their sum, and one Adam step over the stacked weights with each
model's own rate and settings, read from its own optimizer at every step (so
a schedule setting its rate applies): torch's ``Adam``, written once for a
rate per model.

The stacked weights and Adam state persist from step to step (:class:`_Stack`):
while a fit trains, its module's parameters and buffers are views of its row
(anything reading them, a callback, a checkpoint, reads its current weights);
when it ends they are its own tensors again and its Adam state is written into
its own optimizer, so that training it on alone goes on as after its lone fit.
Models whose modules differ (class, shapes, public settings) are stacked apart;
batches that differ in shape run in separate stacked passes of one round.

The results equal the lone fits' to float rounding, not bit for bit: the
batched kernels round differently (tested to 1e-5). A fit that ends (its
steps done, a callback's stop, a divergence) leaves the group; the others go
on. What it pays: ``benchmarks/bench_critical_width_group.py`` (a search of the
paper's model at the reproduction's T) and ``benchmarks/bench_group.py`` (per
family). It is refused, and the fit trains alone (:meth:`StackedTrainer.accepts`),
for another optimizer than torch's Adam, an Adam setting beside ``lr``,
``betas``, ``eps`` and ``weight_decay``, and a callback on the gradients
(``on_grad_computed``).
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

    #: the optimizer settings the stacked Adam takes (per model); any other is refused
    ADAM_SETTINGS = ("lr", "betas", "eps", "weight_decay")

    def __init__(self, forward_kwargs=None):
        self.forward_kwargs = forward_kwargs

    def accepts(self, net):
        """Whether ``net`` (not yet fitted) trains fused: its class's own module, not
        compiled (a user's module may not run under ``vmap``), torch's Adam with no
        setting beside ``ADAM_SETTINGS`` (the stacked Adam's), and no callback that
        reads or changes the gradients (``on_grad_computed``: the stacked step keeps
        them on the group's stacked weights)."""
        import inspect

        from skorch.callbacks import Callback

        default = inspect.signature(type(net)).parameters.get("module")
        if (default is None or net.module is not default.default
                or getattr(net, "compile", False) or net.optimizer is not torch.optim.Adam):
            return False
        settings = [key[len("optimizer__"):] for key in net.get_params(deep=False)
                    if key.startswith("optimizer__")]
        if any(key not in self.ADAM_SETTINGS for key in settings):
            return False
        callbacks = [*net.get_default_callbacks(), *(net.callbacks or [])]
        for callback in callbacks:
            callback = callback[1] if isinstance(callback, tuple) else callback
            kind = callback if isinstance(callback, type) else type(callback)
            if getattr(kind, "on_grad_computed", None) is not Callback.on_grad_computed:
                return False
        return True

    def train_step(self, group, k, net):
        """The ``train_step`` of member ``k`` of ``group`` (skorch's signature): its batch
        goes to the group's stacked step, which also makes its Adam step."""

        def step(batch, **fit_params):
            for module in (net.module_, net.criterion_):
                if not module.training:  # what skorch's own step sets before its forward
                    module.train()
            Xi, yi = unpack_data(batch)
            Xi = to_tensor(Xi, device=net.device)  # as skorch's infer (within the fit)
            yi = to_tensor(yi, device=net.device)  # as skorch's get_loss
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
        self.stacks = _Stacks()  # the members' stacked weights and Adam state

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
            self.stacks.release(k)  # its weights and Adam state its own again
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
                    results = self.stacks.step(requests)
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


def _key(X, kwargs):
    inputs = [(name, None if value is None else tuple(value.shape))
              for name, value in sorted(kwargs.items())]
    return tuple(X.shape), str(X.device), tuple(inputs)


class _Stack:
    """The weights and Adam state of the members whose modules are alike, stacked.

    Each member's module keeps its parameters and buffers as views of its row of
    the stacked tensors while it trains (so that whatever reads them, a callback,
    a checkpoint, the divergence check, reads its current weights), and its own
    copies again when it leaves (:meth:`release`), with its Adam state written
    into its own optimizer.
    """

    def __init__(self, requests, members):
        self.members = list(members)
        self.row = {k: i for i, k in enumerate(self.members)}
        self.nets = {k: requests[k][0] for k in self.members}
        self.modules = {k: net.module_ for k, net in self.nets.items()}
        self.optimizers = {k: net.optimizer_ for k, net in self.nets.items()}
        first = self.modules[self.members[0]]
        self.base = copy.deepcopy(first).to("meta")  # its skeleton, for functional_call
        with torch.no_grad():
            self.params = {name: torch.stack([dict(m.named_parameters())[name].detach()
                                              for m in self.modules.values()]).requires_grad_()
                           for name, _ in first.named_parameters()}
            self.buffers = {name: torch.stack([dict(m.named_buffers())[name]
                                               for m in self.modules.values()])
                            for name, _ in first.named_buffers()}
            self.exp_avg, self.exp_avg_sq, steps = {}, {}, []
            for k in self.members:
                params = dict(self.modules[k].named_parameters())
                state = [self.optimizers[k].state.get(params[name], {}) for name in self.params]
                steps.append(float(state[0].get("step", 0)) if state else 0.0)
                for name, st in zip(self.params, state):
                    for store, key in ((self.exp_avg, "exp_avg"), (self.exp_avg_sq, "exp_avg_sq")):
                        store.setdefault(name, []).append(
                            st[key] if key in st else torch.zeros_like(params[name]))
            self.exp_avg = {n: torch.stack(v) for n, v in self.exp_avg.items()}
            self.exp_avg_sq = {n: torch.stack(v) for n, v in self.exp_avg_sq.items()}
            self.steps = torch.tensor(steps, dtype=torch.float64)
        for k, module in self.modules.items():  # each module's tensors: views of its row
            i = self.row[k]
            for name, p in module.named_parameters():
                p.data = self.params[name].data[i]
            for name, b in module.named_buffers():
                b.data = self.buffers[name][i]

    def release(self, k):
        """Member ``k`` leaves: its module's tensors and its Adam state its own again."""
        i = self.row.pop(k, None)
        if i is None:
            return
        module, optimizer = self.modules.pop(k), self.optimizers.pop(k)
        self.nets.pop(k)
        with torch.no_grad():
            for name, p in module.named_parameters():
                p.data = p.data.clone()
                if self.steps[i] > 0:  # Adam's state of the parameter, as its own step keeps it
                    optimizer.state[p] = {"step": torch.tensor(float(self.steps[i])),
                                          "exp_avg": self.exp_avg[name][i].clone(),
                                          "exp_avg_sq": self.exp_avg_sq[name][i].clone()}
            for b in module.buffers():
                b.data = b.data.clone()

    def forward(self, members, requests):
        """The stacked forward and losses of ``members`` (one batch shape) of this stack."""
        rows = [self.row[k] for k in members]
        if rows == list(range(len(self.members))):
            params, buffers = self.params, self.buffers
        else:
            index = torch.tensor(rows)
            params = {n: p.index_select(0, index) for n, p in self.params.items()}
            buffers = {n: b.index_select(0, index) for n, b in self.buffers.items()}
        first = requests[members[0]]
        names = sorted(first[3])
        inputs = [None if first[3][n] is None
                  else torch.stack([requests[k][3][n] for k in members]) for n in names]
        X = torch.stack([requests[k][1] for k in members])
        y = torch.stack([requests[k][2] for k in members])

        net = first[0]  # each member's loss by the first's get_loss (their criteria alike)

        def step(p, b, x, yt, *values, base=self.base, names=names):
            y_pred = functional_call(base, (p, b), (x,), dict(zip(names, values)))
            return y_pred, net.get_loss(y_pred, yt, X=x, training=True)

        dims = (0, 0, 0, 0, *[None if v is None else 0 for v in inputs])
        with net.device_scope():
            return vmap(step, in_dims=dims)(params, buffers, X, y, *inputs)

    def adam(self, members, grads):
        """One Adam step of ``members``' rows (torch's ``Adam``, single-tensor form, with
        each member's own rate and settings as its optimizer's first group holds them)."""
        rows = [self.row[k] for k in members]
        full = rows == list(range(len(self.members)))
        groups = [self.optimizers[k].param_groups[0] for k in members]
        dtype = next(iter(self.params.values())).dtype
        with torch.no_grad():
            index = torch.tensor(rows)
            steps = self.steps.index_select(0, index) + 1
            self.steps.index_copy_(0, index, steps)
            lr, b1, b2, eps, wd = torch.tensor(
                [[g["lr"] for g in groups], *zip(*[g["betas"] for g in groups]),
                 [g["eps"] for g in groups], [g["weight_decay"] for g in groups]],
                dtype=torch.float64)
            # the step's scalars, in double as torch's Adam makes them, then one per row
            scalars = torch.stack([lr / (1 - b1 ** steps), (1 - b2 ** steps).sqrt(), 1 - b1,
                                   b2, 1 - b2, eps, wd]).to(dtype)
            decay = bool((wd != 0).any())
            for name, param in self.params.items():
                step_size, bias2_sqrt, one_b1, beta2, one_b2, epsilon, weight_decay = (
                    scalars.view(7, -1, *(1,) * (param.dim() - 1)))
                grad = grads[name] if full else grads[name].index_select(0, index)
                p = param if full else param.index_select(0, index)
                m = self.exp_avg[name] if full else self.exp_avg[name].index_select(0, index)
                v = (self.exp_avg_sq[name] if full
                     else self.exp_avg_sq[name].index_select(0, index))
                if decay:
                    grad = grad + weight_decay * p
                m.lerp_(grad, one_b1)
                v.mul_(beta2).add_(one_b2 * grad * grad)
                denom = (v.sqrt() / bias2_sqrt).add_(epsilon)
                p.sub_(step_size * m / denom)
                if not full:
                    param.index_copy_(0, index, p)
                    self.exp_avg[name].index_copy_(0, index, m)
                    self.exp_avg_sq[name].index_copy_(0, index, v)


class _Stacks:
    """Every stack of a group: the members' weights and Adam state, persistent over steps."""

    def __init__(self):
        self.of = {}  # member -> its _Stack

    def release(self, k):
        stack = self.of.pop(k, None)
        if stack is not None:
            stack.release(k)

    def step(self, requests):
        """``{k: (net, X, y, forward kwargs)}`` -> ``{k: {"loss", "y_pred"}}``: one stacked
        forward per part (a stack and a batch shape), one backward for all, then one
        Adam step per stack."""
        new = {}
        for k, (net, *_) in requests.items():
            if k not in self.of:  # a fit's module is built in its fit, before its first step
                key = (_module_key(net.module_), _module_key(net.criterion_))
                new.setdefault(key, []).append(k)
        for members in new.values():
            stack = _Stack(requests, members)
            self.of.update(dict.fromkeys(members, stack))
        parts = {}
        for k, (_, X, _, kwargs) in requests.items():
            parts.setdefault((id(self.of[k]), _key(X, kwargs)), []).append(k)
        results, total, stacks = {}, 0, {}
        with torch.enable_grad():
            for members in parts.values():
                stack = self.of[members[0]]
                stacks.setdefault(id(stack), (stack, []))[1].extend(members)
                y_pred, losses = stack.forward(members, requests)
                total = total + losses.sum()
                for a, k in enumerate(members):
                    results[k] = {"loss": losses[a].detach(), "y_pred": y_pred[a].detach()}
            leaves = [p for stack, _ in stacks.values() for p in stack.params.values()]
            grads = iter(torch.autograd.grad(total, leaves))
        for stack, members in stacks.values():
            stack.adam(members, {name: next(grads) for name in stack.params})
        return results
