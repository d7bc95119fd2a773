"""The fused step of ``fit_group(..., mode="fused")``: a group of the paper's models as one.

The G models' key-query matrices W are stacked into one (G, d_p, d_p) tensor;
each model's ``module_.W`` is a view of its slice, so callbacks read its
current weights. A round runs one batched forward, one backward and one
vectorised Adam step for the group, in place of G of each: the per-operation
overhead that bounds such small models is paid once. Each model keeps its own
data and its own positional draws (``draw_noise`` from its own generator, in
the order of its lone fit), its own rate (read from its optimizer every
step), its own Adam state. The results equal the lone fits' to float
rounding, not bit for bit (batched kernels round differently).

A model that leaves the group (diverged, stopped by a callback) is masked:
its loss is left out of the sum, never multiplied by 0, and its rate is 0 from
then on, so its weights and Adam state stay as they were.

What this module calls on each estimator and module: ``module_``,
``torch_rng_``, ``optimizer_``, ``layout``; the module's ``draw_noise``,
``_positional_vectors`` and ``_split``.
"""

import inspect
import math

import torch

from .estimators import SparseTokenTransformer
from .modules import SparseTokenAttention
from .positional import StochasticPositionalEncoding


def fusable(nets):
    """Whether ``nets`` (built, not yet trained) can train fused: all the package's paper's
    model, as they are, with plain Adam, no output map, no trainable positions, no
    callback that reads gradients, and one layout and encoding."""
    default_module = inspect.signature(SparseTokenTransformer).parameters["module"].default
    first = nets[0]
    for net in nets:
        if not hasattr(net, "module_"):
            return False
        optimizer = net.optimizer_
        options = optimizer.defaults
        if not (type(net) is SparseTokenTransformer and net.module is default_module
                and type(net.module_) is SparseTokenAttention
                and type(optimizer) is torch.optim.Adam and len(optimizer.param_groups) == 1
                and not any(options.get(k) for k in ("weight_decay", "amsgrad", "maximize",
                                                     "differentiable", "capturable"))
                and net.module_.value is None
                and not any(True for _ in net.module_.positions.parameters())
                and isinstance(net.criterion_, torch.nn.MSELoss)
                and net.criterion_.reduction == "mean" and not net.compile
                and not any(type(cb).on_grad_computed is not _BASE_GRAD
                            for _, cb in net.callbacks_)
                and (net.layout, net.positional_encoding, net.pe_dim, net.n_pe_draws,
                     str(net.module_.W.device)) == (first.layout, first.positional_encoding,
                                                    first.pe_dim, first.n_pe_draws,
                                                    str(first.module_.W.device))
                and options["betas"] == first.optimizer_.defaults["betas"]
                and options["eps"] == first.optimizer_.defaults["eps"]):
            return False
    return True


def _base_grad():
    from skorch.callbacks import Callback
    return Callback.on_grad_computed


_BASE_GRAD = _base_grad()


class FusedStep:
    """The stacked weights and Adam state of a group of paper's models."""

    def __init__(self, nets):
        # nets: {key: estimator}; the keys name the models in every round
        self.keys = list(nets)
        self.nets = [nets[k] for k in self.keys]
        self.slot = {k: g for g, k in enumerate(self.keys)}
        self.W = torch.stack([net.module_.W.detach() for net in self.nets]).requires_grad_()
        for g, net in enumerate(self.nets):
            net.module_.W.data = self.W.data[g]  # a view: callbacks read the current W
        self.exp_avg = torch.zeros_like(self.W)
        self.exp_avg_sq = torch.zeros_like(self.W)
        self.steps = torch.zeros(len(nets), dtype=torch.float64)
        self.beta1, self.beta2 = nets[0].optimizer_.defaults["betas"]
        self.eps = nets[0].optimizer_.defaults["eps"]

    def __call__(self, batches):
        """``{key: (X, y)}`` of the models still training -> ``{key: loss}`` (0-d tensors)
        after one step of each (one stacked step per batch shape: a group's last batches
        may differ)."""
        shapes = {}
        for k, (X, _) in batches.items():
            shapes.setdefault(tuple(X.shape), {})[self.slot[k]] = batches[k]
        losses = {}
        for part in shapes.values():
            losses.update(self._step(part))
        return {k: losses[self.slot[k]] for k in batches}

    def _step(self, batches):
        """``{slot: (X, y)}`` of one shape -> ``{slot: loss}``."""
        active = sorted(batches)
        modules = [self.nets[g].module_ for g in active]
        xs = [batches[g][0] for g in active]
        ys = torch.stack([batches[g][1] for g in active])  # (A, B, d)
        P = self._positions(modules, xs, active)  # (A, K or 1, B or 1, T, d_p)
        splits = [m._split(x) for m, x in zip(modules, xs)]
        tokens = torch.stack([t for t, _ in splits])  # (A, B, T, d)
        indicator = torch.stack([s for _, s in splits])  # (A, B, T)
        index = torch.tensor(active, device=self.W.device)
        W = self.W.index_select(0, index)  # (A, d_p, d_p)
        z = torch.matmul(indicator.unsqueeze(1).unsqueeze(-2), P)  # (A, K, B, 1, d_p)
        Wz = z @ W.transpose(-1, -2)[:, None, None]  # (A, K, B, 1, d_p)
        scores = (P @ Wz.transpose(-1, -2)).squeeze(-1)  # (A, K, B, T)
        attention = torch.softmax(scores, dim=-1).mean(1)  # (A, B, T)
        out = torch.matmul(attention.unsqueeze(-2), tokens).squeeze(-2)  # (A, B, d)
        losses = ((out - ys) ** 2).mean(dim=(1, 2))  # (A,): each model's MSELoss
        self.W.grad = None
        losses.sum().backward()
        self._adam(index)
        return dict(zip(active, losses.detach().unbind()))

    def _positions(self, modules, xs, active):
        """Every model's positional vectors, from its own draws, stacked."""
        noises = [m.draw_noise(x, generator=self.nets[g].torch_rng_)
                  for m, x, g in zip(modules, xs, active)]
        first, x = modules[0], xs[0]
        shape = (first.n_pe_draws, len(x), first._seq_len(x))
        if (isinstance(first.positions, StochasticPositionalEncoding)
                and math.prod(shape) * first.positions.pe_dim % 32 == 0
                and all(len(other) == len(x) for other in xs)):
            # the random words of each model, end to end, expanded at once: a model's
            # words fill whole words (the test above), so each gets its own vectors
            P = first.positions((len(xs) * shape[0], *shape[1:]), torch.cat(noises))
            return P.view(len(xs), *shape, -1)
        return torch.stack([m._positional_vectors(len(x), m._seq_len(x), noise)
                            for m, x, noise in zip(modules, xs, noises)])

    def _adam(self, index):
        """Adam on the active models' slices (torch's formula, a rate per model)."""
        with torch.no_grad():
            lr = torch.tensor([self.nets[g].optimizer_.param_groups[0]["lr"]
                               for g in index.tolist()], dtype=self.W.dtype,
                              device=self.W.device)[:, None, None]
            grad = self.W.grad.index_select(0, index)
            self.steps[index.cpu()] += 1
            step = self.steps[index.cpu()].to(self.W.device)[:, None, None]
            exp_avg = self.exp_avg.index_select(0, index).lerp_(grad, 1 - self.beta1)
            exp_avg_sq = self.exp_avg_sq.index_select(0, index).mul_(self.beta2).addcmul_(
                grad, grad, value=1 - self.beta2)
            bias1 = 1 - self.beta1 ** step
            bias2_sqrt = (1 - self.beta2 ** step).sqrt()
            denom = (exp_avg_sq.sqrt() / bias2_sqrt.to(self.W.dtype)).add_(self.eps)
            update = exp_avg / denom * (lr / bias1.to(self.W.dtype))
            self.exp_avg.index_copy_(0, index, exp_avg)
            self.exp_avg_sq.index_copy_(0, index, exp_avg_sq)
            self.W.data.index_copy_(0, index, self.W.data.index_select(0, index) - update)

    def finish(self):
        """Give every model its own weights and Adam state back, as a lone fit leaves them."""
        for g, net in enumerate(self.nets):
            W = net.module_.W
            W.data = self.W.data[g].clone()
            W.grad = None
            if self.steps[g]:
                net.optimizer_.state[W] = {
                    "step": torch.tensor(float(self.steps[g])),
                    "exp_avg": self.exp_avg[g].clone(), "exp_avg_sq": self.exp_avg_sq[g].clone()}
