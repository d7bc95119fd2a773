"""Counter-based random words, keyed by a hash of each sequence (SplitMix64 on tensors).

The prediction-time draws of the random positional encodings
(:mod:`sparse_token_estimators.positional`, whose names these are:
``positional.mix64``, ``positional.sequence_keys``, ``positional.keyed_words``):
a sequence's key hashes its own values and the model's seed, and its draws are
the SplitMix64 stream of that key, so that a prediction does not depend on
the batch. Integer arithmetic on int64 tensors, the same on every device.
"""

import torch


def _as_int64(value):
    """An unsigned 64-bit constant as the int64 of the same bits."""
    return value - 2**64 if value >= 2**63 else value


GOLDEN = _as_int64(0x9E3779B97F4A7C15)  # SplitMix64's increment
_MIX1 = _as_int64(0xBF58476D1CE4E5B9)
_MIX2 = _as_int64(0x94D049BB133111EB)


def _shift_right(x, bits):
    """Logical right shift of int64 bit patterns (torch's >> keeps the sign)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def mix64(x):
    """SplitMix64's finaliser on int64 tensors: a bijection of the 64-bit patterns.

    Integer arithmetic modulo 2^64 (torch's int64 products wrap around), the
    same on every device. ``mix64(key + n * golden)`` for n = 1, 2, ... is
    the SplitMix64 stream of Steele, Lea & Flood ("Fast splittable
    pseudorandom number generators", OOPSLA 2014) seeded at ``key``: a
    counter-based generator, any element of which is computed on its own.

    Parameters
    ----------
    x : Tensor, int64

    Returns
    -------
    mixed : Tensor, int64, of ``x``'s shape

    Examples
    --------
    >>> import torch
    >>> hex(int(mix64(torch.tensor(0x9E3779B97F4A7C15 - 2**64))) % 2**64)  # SplitMix64(0)
    '0xe220a8397b1dcdaf'
    """
    x = (x ^ _shift_right(x, 30)) * _MIX1
    x = (x ^ _shift_right(x, 27)) * _MIX2
    return x ^ _shift_right(x, 31)


#: elements hashed at once by :func:`sequence_keys` (bounds its memory)
_HASH_BLOCK = 1 << 20


def sequence_keys(X, seed):
    """A 64-bit key per sequence: a hash of its float32 values and of ``seed``.

    The key of a sequence depends on its own bits and on ``seed`` only, not
    on the batch it comes in, so draws derived from it make a prediction a
    function of its input; two sequences that differ anywhere get unrelated
    keys. Every value's bit pattern is mixed with its index
    (:func:`mix64`), the mixes are summed modulo 2^64 (an exact sum, the
    same in any order) and mixed again with the seed. Computed by blocks of
    sequences, in bounded memory.

    Parameters
    ----------
    X : Tensor of shape (B, ...), float32
        The sequences (tokens and indicator).
    seed : int
        The model's seed (``eval_seed``).

    Returns
    -------
    keys : Tensor of shape (B,), int64, on ``X``'s device

    Examples
    --------
    >>> import torch
    >>> X = torch.zeros(3, 5, 2)
    >>> X[1, 0, 0] = 1.0
    >>> keys = sequence_keys(X, seed=0)
    >>> bool(keys[0] == keys[2]), bool(keys[0] == keys[1])
    (True, False)
    >>> bool(sequence_keys(X[1:2], seed=0) == keys[1])  # whatever the batch
    True
    """
    flat = X.detach().to(torch.float32).reshape(len(X), -1).contiguous()  # (B, n)
    n_values = flat.shape[1]
    index = torch.arange(n_values, dtype=torch.int64, device=X.device) << 32  # (n,)
    rows = max(1, _HASH_BLOCK // max(n_values, 1))
    sums = []
    for block in flat.split(rows):  # (R, n)
        bits = block.view(torch.int32).to(torch.int64) & 0xFFFFFFFF  # (R, n)
        sums.append(mix64(bits | index).sum(dim=1))  # (R,), modulo 2^64
    if not sums:
        return torch.zeros(0, dtype=torch.int64, device=X.device)
    salt = int(mix64(torch.tensor(_as_int64(int(seed) % 2**64), dtype=torch.int64)))
    return mix64(torch.cat(sums) ^ salt)  # (B,)


def keyed_words(keys, counters, golden=GOLDEN):
    """Random int64 words: the SplitMix64 stream of every key, at positions ``counters``.

    Word n of key k is ``mix64(k + (n + 1) * golden)``, element n of the
    stream of SplitMix64 seeded at k.

    Parameters
    ----------
    keys : Tensor of shape (C,), int64
    counters : Tensor of shape (N,), int64
        Stream positions, the same for every key.
    golden : int or Tensor, default=SplitMix64's increment
        The increment; the encodings pass it as a tensor (a buffer): the
        compiler (inductor) folds an ``arange`` times a constant into index
        arithmetic, whose int64 overflows where the hash's products wrap.

    Returns
    -------
    words : Tensor of shape (C, N), int64

    Examples
    --------
    >>> import torch
    >>> keyed_words(torch.tensor([0, 1]), torch.arange(3)).shape
    torch.Size([2, 3])
    """
    return mix64(keys[:, None] + (counters + 1) * golden)  # (C, N)
