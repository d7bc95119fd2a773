"""Positional encodings: the vectors p_i in R^{d_p} that carry position i.

Each encoding is a small module, built as ``cls(pe_dim, max_seq_len)`` and
listed by name in :data:`ENCODINGS`. It turns the shape ``(K, B, T)`` of a
request (K draws for each of B sequences of length T) into positional
vectors of shape ``(K or 1, B or 1, T, pe_dim)``, a size-1 axis being
broadcast. Random encodings split that in two, so that a compiled forward
pass sees no random number generator: ``draw(shape, generator=...)`` makes
the random input (cheap, outside the compiled graph) and
``forward(shape, noise)`` turns it into the vectors (inside it). At
prediction their draws are keyed by each sequence (:func:`sequence_keys`,
:func:`keyed_words`: counter-based SplitMix64, in ``_hashing``).

| name | p_i | lengths | source |
|---|---|---|---|
| "stochastic" | fresh random unit vectors for every sequence | any | Wang et al. 2024 |
| "fixed" | one table of random unit vectors drawn at init | <= max_seq_len | Wang et al. 2024 |
| "sinusoidal" | sin / cos of i at geometric frequencies, unit norm | any | Vaswani et al. 2017 |
| "learned" | a trainable table | <= max_seq_len | Gehring et al. 2017 |
| "randomized" | rows at sorted random positions of the table | <= max_seq_len | Ruoss et al. 2023 |
"""

import math
import struct

import torch
from torch import nn

from ._hashing import GOLDEN, keyed_words, mix64, sequence_keys

__all__ = ["random_words", "sign_vectors", "random_unit_vectors", "mix64", "sequence_keys",
           "keyed_words", "StochasticPositionalEncoding", "FixedPositionalEncoding",
           "SinusoidalPositionalEncoding", "LearnedPositionalEncoding",
           "RandomizedPositionalEncoding", "ENCODINGS"]

_SIGN_MASK = -(2**31)  # the sign bit of an int32 / float32


def random_words(n_bits, *, generator=None, device=None):
    """``ceil(n_bits / 32)`` random int32 words: the raw bits of sign vectors.

    Parameters
    ----------
    n_bits : int
        Number of random bits (signs) wanted.
    generator : torch.Generator or None
        Source of the bits (the global generator when None); it must live
        on ``device``.
    device : torch.device, str or None
        Where the words are drawn.

    Returns
    -------
    words : Tensor of shape ``(ceil(n_bits / 32),)``, int32

    Examples
    --------
    >>> import torch
    >>> random_words(100, generator=torch.Generator().manual_seed(0)).shape
    torch.Size([4])
    """
    return torch.randint(
        _SIGN_MASK, -_SIGN_MASK, (-(-n_bits // 32),), dtype=torch.int32,
        generator=generator, device=device,
    )  # 32 random signs per word


def sign_vectors(words, shape):
    """Expand random words into sign vectors of unit length along the last axis.

    Coordinate 32 w + k of the flattened output is -1/sqrt(pe_dim) where bit
    k of word w is set, +1/sqrt(pe_dim) where it is not. Only tensor
    operations on the words: it traces into a compiled graph.

    Parameters
    ----------
    words : Tensor of shape ``(n,)``, int32
        Random words, at least ``prod(shape) / 32`` of them.
    shape : tuple of int
        Output shape; the last axis is pe_dim.

    Returns
    -------
    P : Tensor of shape ``shape``, float32, on the words' device

    Examples
    --------
    >>> import torch
    >>> P = sign_vectors(torch.tensor([-1, 0], dtype=torch.int32), (4, 16))
    >>> P[:2].tolist() == [[-0.25] * 16] * 2, P[2:].tolist() == [[0.25] * 16] * 2
    (True, True)
    """
    size = math.prod(shape)
    # The float32 bit pattern of the magnitude, as a Python int: no .item()
    # (a graph break when compiled), no host-device copy.
    magnitude = struct.unpack("<i", struct.pack("<f", 1 / math.sqrt(shape[-1])))[0]
    # Shifting by 31, 30, ..., 0 moves each bit of a word into the sign bit;
    # made on the device, so that nothing is copied from the host.
    shifts = torch.arange(31, -1, -1, dtype=torch.int32, device=words.device)
    whole_words = shape[-1] % 32 == 0
    if whole_words:
        # Every vector is pe_dim / 32 whole words: shaping the words first
        # gives the same bits without the slice below, which a compiled graph
        # with dynamic shapes (a ragged last batch) turns into slow indexing.
        words = words.view(*shape[:-1], shape[-1] // 32)  # (..., d_p / 32)
    # Write the float32 bit patterns directly: a random sign bit over the
    # bits of the magnitude. Three integer passes instead of a Gaussian draw.
    bits = (words.unsqueeze(-1) << shifts).bitwise_and_(_SIGN_MASK)  # (..., n, 32)
    bits.bitwise_or_(magnitude)
    if whole_words:
        return bits.view(torch.float32).view(shape)  # (..., d_p / 32, 32) -> shape
    return bits.view(-1)[:size].view(torch.float32).view(shape)  # (n * 32,) -> shape


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
    task as well as with normalised Gaussian vectors. It is
    ``sign_vectors(random_words(prod(shape)), shape)``.

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
    words = random_words(math.prod(shape), generator=generator, device=device)
    return sign_vectors(words, shape)


def _register_golden(encoding):
    # SplitMix64's increment as a tensor, for keyed_words under the compiler;
    # derived, so not part of the state_dict
    encoding.register_buffer("golden", torch.tensor(GOLDEN, dtype=torch.int64),
                             persistent=False)


class _PositionalEncoding(nn.Module):
    """What every encoding shares: sizes, the length check, no randomness.

    Subclasses set ``takes_any_length`` and define ``forward``; random ones
    also set ``random = True`` and define ``draw``.

    Parameters
    ----------
    pe_dim : int
        Dimension d_p of the positional vectors.
    max_seq_len : int
        Number of positions of a table; unused where ``takes_any_length``.
    """

    #: whether any sequence length works (no table to run out of)
    takes_any_length = True
    #: whether ``forward`` consumes random input made by ``draw``
    random = False

    def __init__(self, pe_dim, max_seq_len):
        super().__init__()
        self.pe_dim = pe_dim
        self.max_seq_len = max_seq_len

    def draw(self, shape, *, generator=None, device=None):
        """The random input ``forward`` consumes for ``shape`` (K, B, T); None here."""
        return None

    def keyed_vectors(self, keys, draws, seq_len):
        """Positional vectors of draws ``draws`` for the sequences of ``keys``.

        The prediction-time draws of a random encoding: draw k of the
        sequence of key ``keys[b]`` is a function of (``keys[b]``, k) only
        (:func:`sequence_keys`, :func:`keyed_words`), so that it does not
        depend on the batch. Only random encodings define it.

        Parameters
        ----------
        keys : Tensor of shape (C,), int64
        draws : range
            Draw indices k.
        seq_len : int

        Returns
        -------
        P : Tensor of shape (len(draws), C, seq_len, pe_dim)
        """
        raise NotImplementedError(f"{type(self).__name__} draws nothing.")

    def check_length(self, seq_len):
        """Raise ValueError if ``seq_len`` positions exceed the table."""
        if not self.takes_any_length and seq_len > self.max_seq_len:
            name = next(n for n, cls in ENCODINGS.items() if isinstance(self, cls))
            raise ValueError(
                f"seq_len {seq_len} exceeds max_seq_len={self.max_seq_len} of "
                f"the {name} positional encoding; refit with a larger "
                "max_seq_len or use positional_encoding='stochastic'."
            )


class StochasticPositionalEncoding(_PositionalEncoding):
    """Fresh random unit vectors for every sequence; any ``seq_len`` works.

    The paper's stochastic encoding (Wang, Wei, Hsu & Lee, ICML 2024): every
    sequence, in every draw, gets its own near-orthogonal unit vectors
    (:func:`random_unit_vectors`). The random input is the words behind the
    signs; ``forward`` expands them.

    Parameters
    ----------
    pe_dim : int
        Dimension d_p of the positional vectors.
    max_seq_len : int or None
        Unused: there is no table.

    Examples
    --------
    >>> import torch
    >>> pe = StochasticPositionalEncoding(16)
    >>> noise = pe.draw((2, 4, 10), generator=torch.Generator().manual_seed(0))
    >>> pe((2, 4, 10), noise).shape
    torch.Size([2, 4, 10, 16])
    """

    takes_any_length = True
    random = True

    def __init__(self, pe_dim, max_seq_len=None):
        super().__init__(pe_dim, max_seq_len)
        _register_golden(self)

    def draw(self, shape, *, generator=None, device=None):
        """Random words for positional vectors of ``shape + (pe_dim,)``."""
        return random_words(math.prod(shape) * self.pe_dim, generator=generator,
                            device=device)  # (ceil(K B T d_p / 32),)

    def forward(self, shape, noise):
        return sign_vectors(noise, (*shape, self.pe_dim))  # (K, B, T, d_p)

    def keyed_vectors(self, keys, draws, seq_len):
        """Sign vectors of draws ``draws`` for every key: one random bit per coordinate.

        Coordinate j of position t in draw k comes from bit j % 64 of word
        (k T + t) ceil(d_p / 64) + j // 64 of the key's stream; the bits
        become vectors as in :func:`sign_vectors`.
        """
        n_words = -(-self.pe_dim // 64)  # 64-bit words per vector
        counters = torch.arange(draws.start * seq_len * n_words, draws.stop * seq_len * n_words,
                                dtype=torch.int64, device=keys.device)
        words = keyed_words(keys, counters, self.golden)  # (C, G T W)
        words = words.view(len(keys), len(draws), seq_len, n_words).transpose(0, 1)  # (G, C, T, W)
        halves = words.contiguous().view(torch.int32)  # (G, C, T, 2 W): 32 signs per half
        # As sign_vectors: each bit moved into the sign bit of 1/sqrt(d_p)
        magnitude = struct.unpack("<i", struct.pack("<f", 1 / math.sqrt(self.pe_dim)))[0]
        shifts = torch.arange(31, -1, -1, dtype=torch.int32, device=keys.device)
        bits = (halves.unsqueeze(-1) << shifts).bitwise_and_(_SIGN_MASK)  # (G, C, T, 2 W, 32)
        bits.bitwise_or_(magnitude)
        P = bits.view(torch.float32).flatten(-2)  # (G, C, T, 64 W)
        P = P[..., :self.pe_dim]
        return P  # (G, C, T, d_p)


class FixedPositionalEncoding(_PositionalEncoding):
    """One table of ``max_seq_len`` random unit vectors, drawn once at init.

    The paper's fixed encoding (Wang, Wei, Hsu & Lee, ICML 2024). Positions
    beyond the training length are defined but were never trained on: this
    is the baseline that fails to generalise to longer sequences.

    Parameters
    ----------
    pe_dim : int
        Dimension d_p of the positional vectors.
    max_seq_len : int
        Number of positions in the table; longer sequences raise ValueError.

    Examples
    --------
    >>> pe = FixedPositionalEncoding(16, max_seq_len=32)
    >>> pe((1, 4, 10)).shape  # one table, broadcast over draws and batch
    torch.Size([1, 1, 10, 16])
    """

    takes_any_length = False

    def __init__(self, pe_dim, max_seq_len):
        super().__init__(pe_dim, max_seq_len)
        self.register_buffer("table", random_unit_vectors(max_seq_len, pe_dim))

    def forward(self, shape, noise=None):
        self.check_length(shape[-1])
        return self.table[:shape[-1]].view(1, 1, shape[-1], -1)  # (1, 1, T, d_p)


class SinusoidalPositionalEncoding(_PositionalEncoding):
    """The sin / cos encoding of Vaswani et al. (2017), each row of unit norm.

    "Attention Is All You Need" (NeurIPS 2017, section 3.5): for position
    i = 0, 1, ... and k < pe_dim / 2, coordinate 2k is sin(i / 10000^(2k /
    pe_dim)) and coordinate 2k + 1 the cos of the same angle. Every row then
    has norm sqrt(pe_dim / 2); it is scaled to 1, as the model's other
    encodings are. Deterministic and defined at every position (Vaswani et al.
    chose it hoping it would extrapolate to longer sequences), so any length
    works and ``max_seq_len`` is unused. Unlike random vectors, neighbouring
    positions are far from orthogonal: <p_i, p_j> depends on i - j only and
    is large when i and j are close.

    Parameters
    ----------
    pe_dim : int
        Dimension d_p of the positional vectors; must be even.
    max_seq_len : int or None
        Unused.

    Examples
    --------
    >>> import torch
    >>> P = SinusoidalPositionalEncoding(16)((1, 1, 5))
    >>> P.shape, bool(torch.allclose(P.norm(dim=-1), torch.ones(1, 1, 5)))
    (torch.Size([1, 1, 5, 16]), True)
    """

    takes_any_length = True

    def __init__(self, pe_dim, max_seq_len=None):
        if pe_dim % 2:
            raise ValueError(
                f"The sinusoidal positional encoding pairs a sin and a cos per "
                f"frequency, so pe_dim must be even; got pe_dim={pe_dim}. Use "
                f"pe_dim={pe_dim + 1}."
            )
        super().__init__(pe_dim, max_seq_len)
        # A buffer, so that it follows the module's device and dtype; derived
        # from pe_dim, so not part of the state_dict.
        inv_freq = 10000.0 ** (-torch.arange(0, pe_dim, 2, dtype=torch.float64) / pe_dim)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)

    def forward(self, shape, noise=None):
        seq_len = shape[-1]
        # Angles in float64: the sin of a large position keeps its digits.
        angles = torch.arange(seq_len, dtype=torch.float64, device=self.inv_freq.device)
        angles = angles[:, None] * self.inv_freq.double()  # (T, d_p / 2)
        P = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, d_p / 2, 2)
        P = P.view(seq_len, self.pe_dim) * math.sqrt(2 / self.pe_dim)  # (T, d_p)
        return P.to(self.inv_freq.dtype).view(1, 1, seq_len, self.pe_dim)  # (1, 1, T, d_p)


class LearnedPositionalEncoding(_PositionalEncoding):
    """A trainable table of ``max_seq_len`` positional vectors.

    Learned absolute position embeddings, as in Gehring et al. ("Convolutional
    Sequence to Sequence Learning", ICML 2017) and BERT; Vaswani et al. (2017)
    compare them with the sinusoidal table. The table starts at the fixed
    encoding's random unit vectors and is trained with W. It does not start
    near zero, as embeddings often do: W starts at zero, and scores
    p_i^T W z give neither W nor the table a gradient while both are zero.
    Positions beyond the training length keep their initial vectors.

    Parameters
    ----------
    pe_dim : int
        Dimension d_p of the positional vectors.
    max_seq_len : int
        Number of positions in the table; longer sequences raise ValueError.

    Examples
    --------
    >>> pe = LearnedPositionalEncoding(16, max_seq_len=32)
    >>> pe.table.requires_grad, pe((1, 4, 10)).shape
    (True, torch.Size([1, 1, 10, 16]))
    """

    takes_any_length = False

    def __init__(self, pe_dim, max_seq_len):
        super().__init__(pe_dim, max_seq_len)
        self.table = nn.Parameter(random_unit_vectors(max_seq_len, pe_dim))

    # the fixed encoding's lookup, of a trainable table (not a subclass of it:
    # check_length names an encoding by its class)
    forward = FixedPositionalEncoding.forward


class RandomizedPositionalEncoding(_PositionalEncoding):
    """Sorted random positions out of ``max_seq_len``, looked up in a table.

    Randomized positional encodings of Ruoss et al. ("Randomized Positional
    Encodings Boost Length Generalization of Transformers", ACL 2023): a
    sequence of length T takes the table rows at T positions drawn without
    replacement from 0 .. max_seq_len - 1 and sorted, afresh for every
    sequence and every draw, so that every row is trained, not only the
    first T. The table is the fixed encoding's (random unit vectors drawn at
    init, not trained): "fixed" and "randomized" differ only by the random
    positions. Ruoss et al. randomize several base encodings (sin / cos,
    learned, relative, RoPE, ALiBi); the order of the positions carries no
    information in this model, which sums over them.

    In eval mode every sequence gets ``n_pe_draws`` subsets of its own,
    derived from the module's ``eval_seed`` and the sequence itself
    (:meth:`keyed_vectors`), and the attention is averaged over them; in
    training every sequence draws its own from the generator. How this follows
    Ruoss et al.'s code, and where it departs from it, is in the user guide
    (Positional encodings).

    Parameters
    ----------
    pe_dim : int
        Dimension d_p of the positional vectors.
    max_seq_len : int
        Number of positions to draw from (Ruoss et al.'s ``noise_max_length``,
        2048 in their experiments); longer sequences raise ValueError.

    Examples
    --------
    >>> import torch
    >>> pe = RandomizedPositionalEncoding(16, max_seq_len=64)
    >>> noise = pe.draw((2, 4, 10), generator=torch.Generator().manual_seed(0))
    >>> noise.shape, bool((noise.diff(dim=-1) > 0).all())  # sorted, distinct
    (torch.Size([2, 4, 10]), True)
    >>> pe((2, 4, 10), noise).shape
    torch.Size([2, 4, 10, 16])
    """

    takes_any_length = False
    random = True

    def __init__(self, pe_dim, max_seq_len):
        super().__init__(pe_dim, max_seq_len)
        self.register_buffer("table", random_unit_vectors(max_seq_len, pe_dim))
        _register_golden(self)

    def draw(self, shape, *, generator=None, device=None):
        """Sorted random positions, shape ``shape``, from 0 .. max_seq_len - 1."""
        self.check_length(shape[-1])
        keys = torch.rand(*shape[:-1], self.max_seq_len, generator=generator,
                          device=device)  # (K, B, L)
        # The T smallest of L i.i.d. keys sit at a uniformly random T-subset.
        chosen = keys.topk(shape[-1], dim=-1, largest=False, sorted=False).indices  # (K, B, T)
        return chosen.sort(dim=-1).values  # (K, B, T)

    def forward(self, shape, noise):
        self.check_length(shape[-1])
        return self.table[noise]  # (K, B, T) -> (K, B, T, d_p)

    def keyed_vectors(self, keys, draws, seq_len):
        """Table rows at a sorted random subset of positions, per key and draw.

        The subset of draw k is that of the ``seq_len`` smallest of the
        key's words k L .. k L + L - 1 (L = ``max_seq_len``), as ``draw``
        takes the smallest of L uniform keys.
        """
        self.check_length(seq_len)
        length = self.max_seq_len
        counters = torch.arange(draws.start * length, draws.stop * length,
                                dtype=torch.int64, device=keys.device)
        words = keyed_words(keys, counters, self.golden).view(len(keys), len(draws), length)
        chosen = words.topk(seq_len, dim=-1, largest=False, sorted=False).indices
        positions = chosen.sort(dim=-1).values.transpose(0, 1)  # (G, C, T)
        return self.table[positions]  # (G, C, T, d_p)


#: ``positional_encoding`` name -> encoding class: the one list of the encodings
#: the module builds and the estimators accept
ENCODINGS = {
    "stochastic": StochasticPositionalEncoding,
    "fixed": FixedPositionalEncoding,
    "sinusoidal": SinusoidalPositionalEncoding,
    "learned": LearnedPositionalEncoding,
    "randomized": RandomizedPositionalEncoding,
}
