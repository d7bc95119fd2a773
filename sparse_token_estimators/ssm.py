"""A selective state-space model (Mamba) for the task, and a plain selective scan.

Torch modules only (they know nothing of scikit-learn), beside the
transformers and recurrent nets of ``modules`` and ``architectures``.

- :class:`SelectiveSSM`: Mamba (Gu & Dao, 2023) reading the sequence
  position by position: tokens and indicator projected to ``d_model``, then
  ``n_layers`` Mamba blocks of the ``mambapy`` package (pure PyTorch; the
  optional extra ``[ssm]``), a final RMS norm and a linear map of the last
  position's vector to R^d, as
  :class:`~sparse_token_estimators.architectures.RecurrentNet` reads out
  its last hidden state.
- :func:`selective_scan_fused`: the selective scan the blocks run (by
  default; ``SelectiveSSM(..., scan="mambapy")`` runs ``mambapy``'s parallel
  scan instead): a loop over the positions on buffers updated in place, with
  a hand-written backward, several times faster on a CPU than ``mambapy``'s
  parallel scan. It is set on our blocks only (an instance attribute);
  ``mambapy`` itself is left as it is.
- :func:`selective_scan_reference`: the selective scan written as the
  recurrence it is, one step per position; the tests check both scans
  against it and against each other (outputs and gradients, to 1e-10 in
  float64), and the whole model with either scan.

What "selective" means: the step size Delta_t, the input map B_t and the
output map C_t are functions of the input at position t, so the state can
keep or let pass each token according to its content (here: its indicator).
Each block carries ``expand * d_model x d_state`` numbers along the sequence
(the scan's state h_t; ``expand`` is 2 by default) and the last
``d_conv - 1`` inputs of its short convolution.
"""

import importlib
import numbers

import torch
from torch import nn

#: how to get the optional dependency, said wherever it is missing
INSTALL_HINT = ("pip install 'sparse-token-estimators[ssm]' (or: pip install mambapy), "
                "the pure-PyTorch Mamba the state-space model is built on")


def require_mambapy():
    """``mambapy.mamba``, or an ImportError that says how to install it.

    Returns
    -------
    module : module
        ``mambapy.mamba`` (its ``Mamba``, ``MambaConfig``, ``RMSNorm``).

    Raises
    ------
    ImportError
        When ``mambapy`` is not installed, saying how to install it.

    Examples
    --------
    >>> require_mambapy().__name__
    'mambapy.mamba'
    """
    try:
        return importlib.import_module("mambapy.mamba")
    except ImportError as exc:
        raise ImportError(
            f"The selective state-space model needs the mambapy package: {INSTALL_HINT}."
        ) from exc


def selective_scan_reference(x, delta, A, B, C, D):
    """The selective scan, one position at a time: the recurrence Mamba computes.

    h_t = exp(Delta_t A) * h_{t-1} + Delta_t B_t x_t (h_0 = 0), and
    y_t = C_t . h_t + D * x_t, for every channel e of x (A, D per channel;
    Delta per channel and position; B, C per position, shared by the
    channels). The signature of ``mambapy``'s ``MambaBlock.selective_scan``,
    so that the tests can swap one for the other.

    Parameters
    ----------
    x : Tensor of shape (batch, T, E)
        The input of the scan (E = expand * d_model channels).
    delta : Tensor of shape (batch, T, E)
        The step sizes Delta_t (positive).
    A : Tensor of shape (E, N)
        The state matrix, diagonal per channel (negative).
    B, C : Tensor of shape (batch, T, N)
        The input and output maps at every position.
    D : Tensor of shape (E,)
        The skip connection.

    Returns
    -------
    y : Tensor of shape (batch, T, E)

    Examples
    --------
    >>> import torch
    >>> x = torch.ones(1, 3, 1)
    >>> y = selective_scan_reference(x, torch.ones(1, 3, 1), -torch.ones(1, 1),
    ...                              torch.ones(1, 3, 1), torch.ones(1, 3, 1), torch.zeros(1))
    >>> [round(v, 4) for v in y.flatten().tolist()]  # h_t = e^-1 h_{t-1} + 1
    [1.0, 1.3679, 1.5032]
    """
    batch, T, E = x.shape
    h = x.new_zeros(batch, E, A.shape[1])  # (batch, E, N)
    ys = []
    for t in range(T):
        step = delta[:, t, :, None]  # (batch, E, 1)
        h = torch.exp(step * A) * h + step * B[:, t, None, :] * x[:, t, :, None]  # (batch, E, N)
        ys.append((h * C[:, t, None, :]).sum(-1) + D * x[:, t])  # (batch, E)
    return torch.stack(ys, dim=1)  # (batch, T, E)


class _SelectiveScan(torch.autograd.Function):
    """The selective scan with a hand-written backward, for the CPU (fine on CUDA).

    Time-major (T, batch, E, N) buffers, contiguous: the forward builds
    exp(Delta A) and Delta B x once, then runs the recurrence in place, one
    fused multiply-add per position into the states, which it keeps for the
    backward. The backward runs the state's gradient through the positions
    in reverse, in place as well, then forms every input's gradient with
    whole-tensor products. Two (T, batch, E, N) tensors are kept between
    forward and backward, and two more live during the backward; ``mambapy``'s
    parallel scan keeps several and copies them, and autograd of a
    step-by-step loop builds a full-size tensor per step.
    """

    @staticmethod
    def forward(ctx, x, delta, A, B, C, D):
        dtype = torch.promote_types(torch.promote_types(x.dtype, delta.dtype),
                                    torch.promote_types(A.dtype, B.dtype))
        dtype = torch.promote_types(torch.promote_types(dtype, C.dtype), D.dtype)
        ctx.dtypes = tuple(t.dtype for t in (x, delta, A, B, C, D))

        def time_major(t):  # (batch, T, k) -> contiguous (T, batch, k)
            return t.to(dtype).transpose(0, 1).contiguous()

        x_, delta_, B_, C_ = (time_major(t) for t in (x, delta, B, C))
        A_, D_ = A.to(dtype).contiguous(), D.to(dtype)
        dA = torch.mul(delta_[..., None], A_).exp_()  # exp(Delta_t A): (T, batch, E, N)
        H = (delta_ * x_)[..., None] * B_[:, :, None, :]  # u_t = Delta_t B_t x_t, then h_t
        for t in range(1, H.shape[0]):
            H[t].addcmul_(dA[t], H[t - 1])  # h_t = exp(Delta_t A) h_{t-1} + u_t, in place
        y = _sum_last(H * C_[:, :, None, :])  # sum_n h_t C_t: (T, batch, E)
        y.addcmul_(D_, x_)
        ctx.save_for_backward(x_, delta_, A_, B_, C_, D_, dA, H)
        return y.transpose(0, 1)  # (batch, T, E)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y):
        x_, delta_, A_, B_, C_, D_, dA, H = ctx.saved_tensors
        gy = grad_y.to(x_.dtype).transpose(0, 1).contiguous()  # (T, batch, E)
        need = ctx.needs_input_grad
        grads = [None] * 6
        if need[5]:  # D: sum over batch and positions of gy * x
            grads[5] = (gy * x_).sum((0, 1))
        if need[4]:  # C_t: sum over channels of gy_t h_t, a (1, E) @ (E, N) product
            grads[4] = torch.matmul(gy[:, :, None, :], H).squeeze(-2)  # (T, batch, N)
        if need[0] or need[1] or need[2] or need[3]:
            # the state's gradient, positions in reverse:
            # g_t = gy_t C_t + exp(Delta_{t+1} A) g_{t+1}, in place
            G = gy[..., None] * C_[:, :, None, :]  # (T, batch, E, N)
            for t in range(G.shape[0] - 2, -1, -1):
                G[t].addcmul_(dA[t + 1], G[t + 1])
            # u_t = Delta_t x_t B_t, and g_t is u_t's gradient
            work = torch.empty_like(G)  # room for the products summed over the state
            if need[0] or need[1]:  # (Delta x)_t's: sum_n g_t B_t
                g_dx = _sum_last(torch.mul(G, B_[:, :, None, :], out=work))  # (T, batch, E)
            if need[3]:  # B_t's: sum over channels of g_t Delta_t x_t
                grads[3] = torch.matmul((delta_ * x_)[:, :, None, :], G).squeeze(-2)
            if need[0]:
                grads[0] = g_dx * delta_ + gy * D_
            if need[1] or need[2]:
                # exp(Delta_t A)'s gradient is g_t h_{t-1} (none at t = 0, where
                # h_{-1} = 0); times exp(Delta_t A), the gradient of Delta_t A
                S = G[1:].mul_(H[:-1]).mul_(dA[1:])  # G is spent: in place, (T - 1, batch, E, N)
                if need[2]:  # A's: sum over positions and batch of that times Delta_t
                    grads[2] = torch.mul(S, delta_[1:, :, :, None], out=work[1:]).sum((0, 1))
                if need[1]:  # Delta_t's: sum_n of that times A, and through Delta_t x_t
                    g_delta = g_dx * x_
                    g_delta[1:] += _sum_last(S.mul_(A_))
                    grads[1] = g_delta
        for i in (0, 1, 3, 4):
            if grads[i] is not None:
                grads[i] = grads[i].transpose(0, 1)  # back to (batch, T, k)
        return tuple(None if g is None else g.to(dt) for g, dt in zip(grads, ctx.dtypes))


def _sum_last(t):
    """``t.sum(-1)`` for a contiguous ``t``, as one matrix-vector product (faster on a CPU
    for the scan's short last axis, d_state)."""
    return t.view(-1, t.shape[-1]).mv(t.new_ones(t.shape[-1])).view(t.shape[:-1])


def selective_scan_fused(x, delta, A, B, C, D):
    """The selective scan with a hand-written backward: the one :class:`SelectiveSSM` runs.

    The same function as :func:`selective_scan_reference` and ``mambapy``'s
    ``MambaBlock.selective_scan`` (same signature, same outputs and
    gradients: the tests check it against both, to 1e-10 in float64), run as
    a loop over the positions on time-major buffers updated in place, with
    the gradient's recurrence written out rather than left to autograd.
    On one CPU thread an Adam step of ``SelectiveSSM`` at batch 64,
    ``d_model`` 32, ``d_state`` 16 and 67 positions takes about a fifth of
    its time with ``mambapy``'s parallel scan (whose (batch, T, E, N)
    intermediates and their copies are what cost there); on a GPU it runs
    as it is, one small kernel per position each way. Not twice
    differentiable.

    Parameters
    ----------
    x : Tensor of shape (batch, T, E)
        The input of the scan (E = expand * d_model channels).
    delta : Tensor of shape (batch, T, E)
        The step sizes Delta_t (positive).
    A : Tensor of shape (E, N)
        The state matrix, diagonal per channel (negative).
    B, C : Tensor of shape (batch, T, N)
        The input and output maps at every position.
    D : Tensor of shape (E,)
        The skip connection.

    Returns
    -------
    y : Tensor of shape (batch, T, E)
        In the promoted dtype of the inputs; the gradients come back in each
        input's own dtype.

    Examples
    --------
    >>> import torch
    >>> x = torch.ones(1, 3, 1)
    >>> y = selective_scan_fused(x, torch.ones(1, 3, 1), -torch.ones(1, 1),
    ...                          torch.ones(1, 3, 1), torch.ones(1, 3, 1), torch.zeros(1))
    >>> [round(v, 4) for v in y.flatten().tolist()]  # as selective_scan_reference's
    [1.0, 1.3679, 1.5032]
    """
    return _SelectiveScan.apply(x, delta, A, B, C, D)


#: the scans :class:`SelectiveSSM` can run (``scan=``)
SCANS = ("fused", "mambapy")


class SelectiveSSM(nn.Module):
    """A Mamba stack for sparse token selection, read out at the last position; any length.

    ``h = W_in [x_t; s_t]`` (token and indicator projected to ``d_model``),
    ``n_layers`` residual Mamba blocks (``mambapy``: RMS norm, input
    projection to two branches of ``expand * d_model`` channels, a causal
    depthwise convolution of width ``d_conv``, the selective scan with
    input-dependent Delta, B and C, gating, output projection), a final RMS
    norm, and a linear map of the last position's vector to R^d. Causal:
    the last position is the only one that has read the whole sequence.

    Parameters
    ----------
    token_dim : int
        Token dimension d.
    d_model : int
        Width of every position's vector (the model's width).
    d_state : int
        State size N of every channel's scan.
    n_layers : int
        Mamba blocks (0: the read-out on the input projection alone).
    d_conv : int
        Width of each block's causal convolution.
    expand : int
        Channels of the scan per channel of ``d_model``.
    scan : {"fused", "mambapy"}, default="fused"
        The selective scan every block runs: "fused",
        :func:`selective_scan_fused` (a loop over the positions in place with
        a hand-written backward, several times faster on a CPU); "mambapy",
        ``mambapy``'s own parallel scan. The same function (the tests check
        both against :func:`selective_scan_reference`, and the whole model's
        outputs and gradients with either); the parameters are the same, so
        weights saved with one load into the other.

    Examples
    --------
    >>> import torch
    >>> net = SelectiveSSM(token_dim=4, d_model=16, d_state=4)
    >>> net(torch.zeros(8, 10, 5)).shape, net(torch.zeros(8, 40, 5)).shape
    (torch.Size([8, 4]), torch.Size([8, 4]))
    """

    def __init__(self, token_dim, d_model=32, d_state=16, n_layers=1, d_conv=4, expand=2,
                 scan="fused"):
        super().__init__()
        if scan not in SCANS:
            raise ValueError(f"scan={scan!r} is not a scan SelectiveSSM knows: "
                             f"pass one of {', '.join(map(repr, SCANS))}.")
        for name, value, what in (
                ("d_conv", d_conv, "the width of each block's causal convolution"),
                ("expand", expand, "the scan's channels per channel of d_model")):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(
                    f"{name}={value!r} is not allowed: {name} is {what}, an integer >= 1 "
                    f"(default {4 if name == 'd_conv' else 2}). Pass e.g. {name}=2 (through "
                    f"the estimator: SparseTokenSSM(module__{name}=2)).")
        mamba = require_mambapy()
        self.embed = nn.Linear(token_dim + 1, d_model)
        self.mamba = mamba.Mamba(mamba.MambaConfig(
            d_model=d_model, n_layers=n_layers, d_state=d_state, d_conv=d_conv,
            expand_factor=expand))
        self.norm = mamba.RMSNorm(d_model)
        self.head = nn.Linear(d_model, token_dim)
        self._use_scan(scan)

    def _use_scan(self, scan):
        """Have every block run ``scan`` ("fused": :func:`selective_scan_fused`;
        "mambapy": its own parallel scan). These blocks only: an instance
        attribute shadows ``MambaBlock.selective_scan``, which ``mambapy``'s
        ``ssm`` calls (its ``config.pscan``, on by default, left on; its CUDA
        kernels, off by default, left off); nothing of ``mambapy`` itself
        changes, nor the parameters."""
        self.scan = scan
        for layer in self.mamba.layers:
            mixer = layer.mixer
            mixer.config.pscan = True
            if scan == "fused":
                mixer.selective_scan = selective_scan_fused
            else:
                mixer.__dict__.pop("selective_scan", None)

    def __setstate__(self, state):
        # a model pickled before the fused scan existed: give it the fused scan
        super().__setstate__(state)
        if "scan" not in self.__dict__:
            self._use_scan("fused")

    def forward(self, X):
        """Predict from ``X`` of shape (B, T, d + 1) (or (B, T + q, d + 1)); returns (B, d)."""
        h = self.mamba(self.embed(X))  # (B, T, C)
        return self.head(self.norm(h[:, -1]))  # (B, C) -> (B, d)


__all__ = ["INSTALL_HINT", "SCANS", "SelectiveSSM", "require_mambapy", "selective_scan_fused",
           "selective_scan_reference"]
