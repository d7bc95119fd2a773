"""Positional encodings: near-orthogonal random unit vectors in R^{d_p}.

Both encodings return a tensor of shape ``(B, seq_len, pe_dim)`` where ``B``
is the batch size or 1 (one set of vectors broadcast over the batch).
"""

import math

import torch
from torch import nn

_SIGN_MASK = -(2**31)  # the sign bit of an int32 / float32


def random_unit_vectors(*shape, generator=None, device=None):
    """Random sign vectors scaled to unit length along the last axis.

    Every coordinate is +1/sqrt(pe_dim) or -1/sqrt(pe_dim) with equal
    probability, independently: the vectors have norm exactly 1 and, like
    Gaussian vectors normalised to the sphere, are near-orthogonal in high
    dimension, with <p_i, p_j> of mean 0 and variance 1/pe_dim for i != j.
    This is the project's convention for the positional vectors p_i of Wang,
    Wei, Hsu & Lee (ICML 2024), whose analysis asks only for near-orthogonal
    unit vectors: a draw costs one random bit per coordinate instead of a
    Gaussian sample and a normalisation, several times cheaper, and a
    side-by-side fit (``benchmarks/bench_positional.py --quality``) learns the
    task as well as with normalised Gaussian vectors.

    Parameters
    ----------
    *shape : int
        Output shape; the last axis is pe_dim.
    generator : torch.Generator or None
        Source of the random bits (the global generator when None); it must
        live on ``device``.
    device : torch.device, str or None
        Where the vectors are drawn; they never pass through the host.

    Returns
    -------
    P : Tensor of shape ``shape``, float32

    Examples
    --------
    >>> import torch
    >>> P = random_unit_vectors(3, 64, generator=torch.Generator().manual_seed(0))
    >>> P.shape, bool(torch.allclose(P.norm(dim=-1), torch.ones(3)))
    (torch.Size([3, 64]), True)
    """
    size = math.prod(shape)
    magnitude = torch.tensor(1 / math.sqrt(shape[-1]), dtype=torch.float32)
    words = torch.randint(
        _SIGN_MASK, -_SIGN_MASK, (-(-size // 32), 1), dtype=torch.int32,
        generator=generator, device=device,
    )  # 32 random signs per word
    # Shifting by 31, 30, ..., 0 moves each bit of a word into the sign bit;
    # made on the device, so that nothing is copied from the host.
    shifts = torch.arange(31, -1, -1, dtype=torch.int32, device=words.device)
    # Write the float32 bit patterns directly: a random sign bit over the
    # bits of the magnitude. Three integer passes instead of a Gaussian draw.
    bits = (words << shifts).bitwise_and_(_SIGN_MASK)  # (words, 32)
    bits.bitwise_or_(int(magnitude.view(torch.int32)))
    return bits.view(-1)[:size].view(torch.float32).view(shape)


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

    #: whether any sequence length works (no table to run out of)
    takes_any_length = True

    def __init__(self, pe_dim, max_seq_len=None):
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

    takes_any_length = False

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


#: ``positional_encoding`` name -> encoding class: the one list of the encodings
#: the module builds and the estimators accept
ENCODINGS = {
    "stochastic": StochasticPositionalEncoding,
    "fixed": FixedPositionalEncoding,
}
