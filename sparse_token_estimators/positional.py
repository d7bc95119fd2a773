"""Positional encodings: near-orthogonal random unit vectors in R^{d_p}.

Both encodings return a tensor of shape ``(B, seq_len, pe_dim)`` where ``B``
is the batch size or 1 (one set of vectors broadcast over the batch).
"""

import torch
from torch import nn


def random_unit_vectors(*shape, generator=None, device=None):
    """Gaussian vectors normalised to unit length along the last axis.

    In high dimension they are near-orthogonal: |<p_i, p_j>| ~ 1/sqrt(pe_dim).
    """
    p = torch.randn(*shape, generator=generator, device=device)
    return p / p.norm(dim=-1, keepdim=True)


class StochasticPositionalEncoding(nn.Module):
    """Fresh positional vectors for every sequence; any ``seq_len`` works.

    Parameters
    ----------
    pe_dim : int
        Dimension d_p of the positional vectors.

    Examples
    --------
    >>> import torch
    >>> pe = StochasticPositionalEncoding(16)
    >>> pe(4, 10, generator=torch.Generator().manual_seed(0)).shape
    torch.Size([4, 10, 16])
    """

    def __init__(self, pe_dim):
        super().__init__()
        self.pe_dim = pe_dim

    def forward(self, batch_size, seq_len, *, generator=None, device=None):
        return random_unit_vectors(
            batch_size, seq_len, self.pe_dim, generator=generator, device=device
        )  # (B, T, d_p)


class FixedPositionalEncoding(nn.Module):
    """One table of ``max_seq_len`` positional vectors, drawn once at init.

    Positions beyond the training length are defined but were never trained
    on: this is the baseline that fails to generalise to longer sequences.

    Parameters
    ----------
    pe_dim : int
        Dimension d_p of the positional vectors.
    max_seq_len : int
        Number of positions in the table; longer sequences raise ValueError.

    Examples
    --------
    >>> pe = FixedPositionalEncoding(16, max_seq_len=32)
    >>> pe(4, 10).shape  # one table, broadcast over the batch
    torch.Size([1, 10, 16])
    """

    def __init__(self, pe_dim, max_seq_len):
        super().__init__()
        self.pe_dim = pe_dim
        self.max_seq_len = max_seq_len
        self.register_buffer("table", random_unit_vectors(max_seq_len, pe_dim))

    def forward(self, batch_size, seq_len, *, generator=None, device=None):
        if seq_len > self.max_seq_len:
            raise ValueError(
                f"seq_len {seq_len} exceeds max_seq_len={self.max_seq_len} of "
                "the fixed positional encoding; refit with a larger "
                "max_seq_len or use positional_encoding='stochastic'."
            )
        return self.table[:seq_len].unsqueeze(0)  # (1, T, d_p)
