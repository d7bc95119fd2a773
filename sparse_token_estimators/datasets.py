"""The sparse token selection task (q-sparse averaging) as a dataset generator."""

import numbers

import numpy as np

from ._layout import check_int

#: values per block of tokens drawn at once (256 KiB of float32)
_BLOCK_VALUES = 1 << 16


def _as_generator(random_state):
    """Turn a scikit-learn style ``random_state`` into a numpy ``Generator``.

    ``Generator`` draws float32 normals several times faster than the legacy
    ``RandomState``; a ``RandomState`` passed in still drives the draw (it is
    consumed for a seed), as in scikit-learn.
    """
    if random_state is None or isinstance(random_state, (numbers.Integral, np.integer)):
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(np.iinfo(np.int32).max))
    raise TypeError(
        "random_state must be None, an int, a numpy RandomState or a numpy "
        f"Generator; got {random_state!r}."
    )


def make_sparse_selection(
    n_samples=1000,
    seq_len=20,
    token_dim=8,
    n_selected=3,
    *,
    return_support=False,
    random_state=None,
):
    """Generate the sparse token selection task: average q of T tokens.

    Each sample is a sequence of ``seq_len`` (T) i.i.d. standard Gaussian
    tokens in R^d (d = ``token_dim``) and a subset S of ``n_selected`` (q)
    positions drawn uniformly, afresh for every sample. The target is the
    average of the selected tokens, y = (1/q) sum_{i in S} x_i. This is the
    q-sparse averaging task of Sanford, Hsu & Telgarsky (NeurIPS 2023,
    arXiv:2306.02896) with one output per sequence, as studied by Wang, Wei,
    Hsu & Lee, "Transformers Provably Learn Sparse Token Selection While
    Fully-Connected Nets Cannot" (ICML 2024, arXiv:2406.06893).

    Parameters
    ----------
    n_samples : int, default=1000
        Number of sequences.
    seq_len : int, default=20
        Sequence length T.
    token_dim : int, default=8
        Token dimension d.
    n_selected : int, default=3
        Number q of selected tokens, 1 <= q <= T.
    return_support : bool, default=False
        If True, also return the selected positions.
    random_state : int, RandomState, Generator or None, default=None
        Seed or generator; the same int gives the same data.

    Returns
    -------
    X : ndarray of shape (n_samples, seq_len, token_dim + 1), float32
        ``X[..., :token_dim]`` are the tokens, ``X[..., token_dim]`` is the
        selection indicator (1.0 for selected positions, 0.0 otherwise).
    y : ndarray of shape (n_samples, token_dim), float32
        The average of the selected tokens.
    support : ndarray of shape (n_samples, n_selected), int64
        The selected positions of each sample, sorted. Only returned if
        ``return_support`` is True.

    Examples
    --------
    >>> from sparse_token_estimators import make_sparse_selection
    >>> X, y, support = make_sparse_selection(
    ...     4, seq_len=10, token_dim=2, n_selected=3, return_support=True,
    ...     random_state=0)
    >>> X.shape, y.shape, support.shape
    ((4, 10, 3), (4, 2), (4, 3))
    >>> bool((X[..., -1].sum(axis=1) == 3).all())
    True
    """
    n_samples = check_int(n_samples, "n_samples")
    seq_len = check_int(seq_len, "seq_len")
    token_dim = check_int(token_dim, "token_dim")
    n_selected = check_int(n_selected, "n_selected")
    if n_selected > seq_len:
        raise ValueError(
            f"n_selected must be between 1 and seq_len={seq_len}; got "
            f"{n_selected}. Select fewer tokens or use longer sequences."
        )
    rng = _as_generator(random_state)

    X = np.empty((n_samples, seq_len, token_dim + 1), dtype=np.float32)
    # The tokens go straight into X through a small reused buffer: the same
    # stream as one big draw, without a second full-size array to copy. The
    # indicator channel is cleared in the same pass, while the block is in cache.
    block = max(1, _BLOCK_VALUES // (seq_len * token_dim))
    buffer = np.empty((min(block, n_samples), seq_len, token_dim), dtype=np.float32)
    for start in range(0, n_samples, block):
        out = buffer[:min(block, n_samples - start)]
        rng.standard_normal(out=out, dtype=np.float32)
        rows = X[start:start + len(out)]
        rows[..., :token_dim] = out
        rows[..., token_dim] = 0.0
    support = _uniform_subsets(rng, n_samples, seq_len, n_selected)
    # One row per (sample, position): the selected rows of every sample.
    positions_of = X.reshape(-1, token_dim + 1)
    index = (np.arange(n_samples) * seq_len)[:, np.newaxis] + support
    positions_of[index, token_dim] = 1.0
    # y: the selected tokens added in position order, then divided by q.
    y = positions_of.take(index[:, 0], axis=0)[:, :token_dim].copy()
    for k in range(1, n_selected):
        y += positions_of.take(index[:, k], axis=0)[:, :token_dim]
    y /= np.float32(n_selected)
    if return_support:
        return X, y, support
    return X, y


def _uniform_subsets(rng, n_samples, seq_len, n_selected):
    """A uniformly random ``n_selected``-subset of ``range(seq_len)`` per row.

    Returns the positions, shape (n_samples, n_selected), ascending in each
    row. Robert Floyd's algorithm, vectorised over the rows: for j = T - m,
    ..., T - 1 draw t uniform in [0, j] and take t, or j if t is already
    taken; that gives every m-subset the same probability with m draws and no
    per-row sort of T keys. It draws the smaller of the subset and its
    complement (m = min(q, T - q)).
    """
    n_drawn = min(n_selected, seq_len - n_selected)
    rows = np.arange(n_samples)
    taken = np.zeros((n_samples, seq_len), dtype=bool)
    picks = np.empty((n_samples, n_drawn), dtype=np.int64)
    for i, j in enumerate(range(seq_len - n_drawn, seq_len)):
        t = rng.integers(0, j + 1, size=n_samples)
        t[taken[rows, t]] = j
        taken[rows, t] = True
        picks[:, i] = t
    if n_drawn == n_selected:
        picks.sort(axis=1)
        return picks
    # The draw picked the positions left out: the rest, row by row, ascending.
    return np.nonzero(~taken)[1].reshape(n_samples, n_selected)
