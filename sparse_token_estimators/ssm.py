"""A selective state-space model (Mamba) for the task, and a plain selective scan.

Torch modules only (they know nothing of scikit-learn), beside the
transformers and recurrent nets of ``modules`` and ``architectures``.

- :class:`SelectiveSSM`: Mamba (Gu & Dao, 2023) reading the sequence
  position by position: tokens and indicator projected to ``d_model``, then
  ``n_layers`` Mamba blocks of the ``mambapy`` package (pure PyTorch, a
  parallel scan; the optional extra ``[ssm]``), a final RMS norm and a
  linear map of the last position's vector to R^d, as
  :class:`~sparse_token_estimators.architectures.RecurrentNet` reads out
  its last hidden state.
- :func:`selective_scan_reference`: the selective scan written as the
  recurrence it is, one step per position; the tests check ``mambapy``'s
  parallel scan against it (outputs and gradients).

What "selective" means: the step size Delta_t, the input map B_t and the
output map C_t are functions of the input at position t, so the state can
keep or let pass each token according to its content (here: its indicator).
Each block carries ``expand * d_model x d_state`` numbers along the sequence
(the scan's state h_t; ``expand`` is 2 by default) and the last
``d_conv - 1`` inputs of its short convolution.
"""

import importlib

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

    Examples
    --------
    >>> import torch
    >>> net = SelectiveSSM(token_dim=4, d_model=16, d_state=4)
    >>> net(torch.zeros(8, 10, 5)).shape, net(torch.zeros(8, 40, 5)).shape
    (torch.Size([8, 4]), torch.Size([8, 4]))
    """

    def __init__(self, token_dim, d_model=32, d_state=16, n_layers=1, d_conv=4, expand=2):
        super().__init__()
        mamba = require_mambapy()
        self.embed = nn.Linear(token_dim + 1, d_model)
        self.mamba = mamba.Mamba(mamba.MambaConfig(
            d_model=d_model, n_layers=n_layers, d_state=d_state, d_conv=d_conv,
            expand_factor=expand))
        self.norm = mamba.RMSNorm(d_model)
        self.head = nn.Linear(d_model, token_dim)

    def forward(self, X):
        """Predict from ``X`` of shape (B, T, d + 1) (or (B, T + q, d + 1)); returns (B, d)."""
        h = self.mamba(self.embed(X))  # (B, T, C)
        return self.head(self.norm(h[:, -1]))  # (B, C) -> (B, d)


__all__ = ["INSTALL_HINT", "SelectiveSSM", "require_mambapy", "selective_scan_reference"]
