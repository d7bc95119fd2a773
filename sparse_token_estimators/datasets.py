"""The sparse token selection task (q-sparse averaging): a generator of arrays
and a stream of fresh samples drawn on the device."""

import numbers
import os

import numpy as np
import torch
from torch.utils.data import IterableDataset

from ._device import resolve_device
from ._layout import check_int, check_layout, indicator_as_query

#: values per block of tokens drawn at once (256 KiB of float32)
_BLOCK_VALUES = 1 << 16


def _check_random_state(random_state):
    """Raise unless ``random_state`` is None, an int, a RandomState or a Generator."""
    kinds = (numbers.Integral, np.integer, np.random.Generator, np.random.RandomState)
    if random_state is not None and (isinstance(random_state, bool)
                                     or not isinstance(random_state, kinds)):
        raise TypeError(
            "random_state must be None, an int, a numpy RandomState or a numpy "
            f"Generator; got {random_state!r}."
        )
    if isinstance(random_state, (numbers.Integral, np.integer)) and random_state < 0:
        raise ValueError(
            f"random_state must be a non-negative int (a seed); got {random_state}. "
            f"Use a seed >= 0, e.g. random_state={abs(int(random_state))}."
        )
    return random_state


def _as_generator(random_state):
    """Turn a scikit-learn style ``random_state`` into a numpy ``Generator``.

    ``Generator`` draws float32 normals several times faster than the legacy
    ``RandomState``; a ``RandomState`` passed in still drives the draw (it is
    consumed for a seed), as in scikit-learn.
    """
    _check_random_state(random_state)
    if random_state is None or isinstance(random_state, (numbers.Integral, np.integer)):
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.Generator):
        return random_state
    return np.random.default_rng(random_state.randint(np.iinfo(np.int32).max))


def _memory(device=None):
    """Bytes of memory on ``device`` (the host's RAM for the CPU); None if unknown."""
    if device is not None and torch.device(device).type == "cuda":
        return torch.cuda.get_device_properties(torch.device(device)).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def _size(n_bytes):
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n_bytes < 1024 or unit == "PiB":
            return f"{n_bytes:.3g} {unit}" if unit != "bytes" else f"{n_bytes} bytes"
        n_bytes /= 1024


def _check_fits_memory(n_bytes, what, fix, device=None):
    """Refuse, before anything is allocated, an array larger than the memory there is."""
    available = _memory(device)
    if available is not None and n_bytes > available:
        where = "the GPU's" if device is not None and "cuda" in str(device) else "this machine's"
        raise MemoryError(
            f"{what} would need {_size(n_bytes)}, more than {where} {_size(available)} of "
            f"memory. {fix}"
        )


def _check_task(n_samples, seq_len, token_dim, n_selected):
    """The task's sizes as ints, or an error naming the argument and the fix."""
    n_samples = check_int(n_samples, "n_samples")
    seq_len = check_int(seq_len, "seq_len")
    token_dim = check_int(token_dim, "token_dim")
    n_selected = check_int(n_selected, "n_selected")
    if n_selected > seq_len:
        raise ValueError(
            f"n_selected must be between 1 and seq_len={seq_len}; got "
            f"{n_selected}. Select fewer tokens or use longer sequences."
        )
    return n_samples, seq_len, token_dim, n_selected


def make_sparse_selection(
    n_samples=1000,
    seq_len=20,
    token_dim=8,
    n_selected=3,
    *,
    return_support=False,
    layout="indicator",
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
    layout : {"indicator", "query"}, default="indicator"
        How ``X`` gives the subset. "indicator": a last channel, 1.0 on the
        selected token rows. "query": after the T token rows ``[x_i, 0]``,
        q rows ``[0_d, i_j]``, i_j the 1-based position of the j-th selected
        token, ascending; content alone cannot select there. The same seed
        gives the same tokens, subsets and targets in both layouts, and the
        indicator layout's numbers do not depend on this parameter.
    random_state : int, RandomState, Generator or None, default=None
        Seed or generator; the same int gives the same data.

    Returns
    -------
    X : ndarray of shape (n_samples, seq_len, token_dim + 1), float32
        ``X[..., :token_dim]`` are the tokens, ``X[..., token_dim]`` is the
        selection indicator (1.0 for selected positions, 0.0 otherwise). In
        the query layout, of shape (n_samples, seq_len + n_selected,
        token_dim + 1): the tokens with 0.0 in the last channel, then the
        query rows.
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
    >>> X_query, y_query = make_sparse_selection(
    ...     4, seq_len=10, token_dim=2, n_selected=3, layout="query", random_state=0)
    >>> X_query.shape, bool((X_query[:, 10:, -1] == support + 1).all())
    ((4, 13, 3), True)
    >>> bool((y_query == y).all())
    True
    """
    n_samples, seq_len, token_dim, n_selected = _check_arguments(
        n_samples, seq_len, token_dim, n_selected, return_support)
    query = check_layout(layout) == "query"
    rng = _as_generator(random_state)
    # The query rows follow the tokens: the same draws fill the same token
    # rows whatever the layout, so one seed makes one task in both.
    n_rows = seq_len + n_selected if query else seq_len
    X = _draw_tokens(rng, n_samples, n_rows, seq_len, token_dim)
    support = _uniform_subsets(rng, n_samples, seq_len, n_selected)
    y = _mark_and_average(X, support, seq_len, query)
    if return_support:
        return X, y, support
    return X, y


def _check_arguments(n_samples, seq_len, token_dim, n_selected, return_support):
    """``make_sparse_selection``'s sizes as ints; refuse a bad argument or too little memory."""
    n_samples, seq_len, token_dim, n_selected = _check_task(
        n_samples, seq_len, token_dim, n_selected)
    if not isinstance(return_support, (bool, np.bool_)):
        raise TypeError(
            f"return_support must be True or False; got {return_support!r} of type "
            f"{type(return_support).__name__}. With True, the positions of the "
            "selected tokens are returned as a third array."
        )
    # X in float32 and the (n, T) mask of the subsets drawn beside it
    _check_fits_memory(
        n_samples * seq_len * (4 * (token_dim + 1) + 1),
        f"make_sparse_selection(n_samples={n_samples}, seq_len={seq_len}, "
        f"token_dim={token_dim})",
        "Lower seq_len or n_samples, or train on a SparseSelectionStream, which draws "
        "batch by batch.")
    return n_samples, seq_len, token_dim, n_selected


def _draw_tokens(rng, n_samples, n_rows, seq_len, token_dim):
    """``X`` of shape (n_samples, n_rows, token_dim + 1), float32: the first ``seq_len``
    rows hold the Gaussian tokens and a cleared last channel; the rest is left unset."""
    X = np.empty((n_samples, n_rows, token_dim + 1), dtype=np.float32)
    # The tokens go straight into X through a small reused buffer: the same
    # stream as one big draw, without a second full-size array to copy. The
    # indicator channel is cleared in the same pass, while the block is in cache.
    block = max(1, _BLOCK_VALUES // (seq_len * token_dim))
    buffer = np.empty((min(block, n_samples), seq_len, token_dim), dtype=np.float32)
    for start in range(0, n_samples, block):
        out = buffer[:min(block, n_samples - start)]
        rng.standard_normal(out=out, dtype=np.float32)
        rows = X[start:start + len(out), :seq_len]
        rows[..., :token_dim] = out
        rows[..., token_dim] = 0.0
    return X


def _mark_and_average(X, support, seq_len, query):
    """Write the selection into ``X`` (indicator channel or query rows); return ``y``."""
    n_samples, n_rows, width = X.shape
    token_dim, n_selected = width - 1, support.shape[1]
    # One row per (sample, position): the selected rows of every sample.
    positions_of = X.reshape(-1, token_dim + 1)
    index = (np.arange(n_samples) * n_rows)[:, np.newaxis] + support
    if query:
        X[:, seq_len:, :token_dim] = 0.0
        X[:, seq_len:, token_dim] = support + 1  # 1-based, ascending
    else:
        positions_of[index, token_dim] = 1.0
    # y: the selected tokens added in position order, then divided by q.
    y = positions_of.take(index[:, 0], axis=0)[:, :token_dim].copy()
    for k in range(1, n_selected):
        y += positions_of.take(index[:, k], axis=0)[:, :token_dim]
    y /= np.float32(n_selected)
    return y


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


class SparseSelectionStream(IterableDataset):
    """Fresh samples of the sparse token selection task, drawn on the device.

    The task's population, as a dataset to fit on: every epoch brings
    ``n_samples`` new sequences, from the distribution of
    :func:`make_sparse_selection` (i.i.d. standard Gaussian tokens in R^d, a
    uniformly random subset of q of the T positions for every sample, the
    indicator as the last channel, y the average of the selected tokens).
    They are drawn batch by batch on ``device`` by torch's generator there:
    nothing is made on the host or copied per batch. The theory of Wang, Wei,
    Hsu & Lee (ICML 2024) is about gradient descent on this population loss.

    Both estimators fit on it with ``y=None``: ``est.fit(stream)`` learns
    token_dim and seq_len from the stream and trains ``max_epochs`` epochs of
    ``n_samples`` fresh sequences each, with the usual training loop,
    callbacks and ``history_``.

    Parameters
    ----------
    seq_len : int
        Sequence length T.
    token_dim : int
        Token dimension d.
    n_selected : int
        Number q of selected tokens, 1 <= q <= T.
    n_samples : int
        Sequences per epoch (``len(stream)``).
    random_state : int, RandomState, Generator or None, default=None
        Seed of the stream. An int gives the same samples for the same
        ``generator`` state (see ``batches``); a RandomState or Generator is
        consumed once per epoch; None draws fresh entropy every epoch.
    device : str, default="auto"
        Where the samples are drawn: "auto" (a GPU when present), "cpu",
        "cuda" or "cuda:N". An estimator fits on a stream drawn on its own
        device.
    layout : {"indicator", "query"}, default="indicator"
        The layout of ``X``, as in :func:`make_sparse_selection`; the same
        seeds draw the same tokens, subsets and targets in both. An
        estimator fits on a stream of its own layout.

    Attributes
    ----------
    seq_len, token_dim, n_selected, n_samples, random_state, device, layout
        The parameters, as given.

    Notes
    -----
    The samples follow the generator's distribution, not its numbers: a
    stream and ``make_sparse_selection`` with one seed draw different data.
    The same seeds give the same samples on the same kind of device and the
    same ``batch_size`` (CPU and CUDA generators differ).

    Examples
    --------
    >>> from sparse_token_estimators import SparseSelectionStream, SparseTokenFCN
    >>> stream = SparseSelectionStream(10, 4, 2, n_samples=256, random_state=0,
    ...                                device="cpu")
    >>> len(stream)
    256
    >>> X, y = next(iter(stream.batches(64)))
    >>> tuple(X.shape), tuple(y.shape), int(X[0, :, -1].sum())
    ((64, 10, 5), (64, 4), 2)
    >>> est = SparseTokenFCN(hidden_width=16, max_epochs=2, random_state=0,
    ...                      device="cpu").fit(stream)
    >>> est.seq_len_, est.token_dim_, len(est.history_)
    (10, 4, 2)
    """

    def __init__(self, seq_len, token_dim, n_selected, *, n_samples, random_state=None,
                 device="auto", layout="indicator"):
        # The generator's checks: the same messages for the same mistakes.
        n_samples, seq_len, token_dim, n_selected = _check_task(
            n_samples, seq_len, token_dim, n_selected)
        self.seq_len = seq_len
        self.token_dim = token_dim
        self.n_selected = n_selected
        self.n_samples = n_samples
        self.random_state = _check_random_state(random_state)
        resolved = resolve_device(device)  # a bad or absent device fails here, not at fit
        self.device = device
        self.layout = check_layout(layout)
        _check_fits_memory(self._batch_bytes(1), f"One sequence of seq_len={seq_len} and "
                           f"token_dim={token_dim}", "Lower seq_len.", resolved)

    def _batch_bytes(self, batch_size):
        # the tokens, the subsets' mask and the concatenated batch, in float32
        return batch_size * self.seq_len * 4 * (2 * (self.token_dim + 1) + 1)

    def __len__(self):
        return self.n_samples

    def __getitem__(self, index):
        # scikit-learn's searches and splitters index their data by sample;
        # torch's Dataset would answer with a bare NotImplementedError.
        raise TypeError(
            f"{type(self).__name__} cannot be indexed or split (got index {index!r}): it "
            "draws fresh samples every epoch, so there is no sample i. GridSearchCV, "
            "cross_validate and train_test_split need arrays: search on the population "
            "with sparse_token_estimators.model_selection.search_on_stream(estimator, "
            "param_grid, stream, X_val, y_val), which scores every candidate on a fixed "
            "validation set from make_sparse_selection, or pass the arrays of "
            "make_sparse_selection to the scikit-learn search."
        )

    def __repr__(self):
        return (f"{type(self).__name__}(seq_len={self.seq_len}, token_dim={self.token_dim}, "
                f"n_selected={self.n_selected}, n_samples={self.n_samples}, "
                f"random_state={self.random_state!r}, device={self.device!r}"
                + (f", layout={self.layout!r})" if self.layout != "indicator" else ")"))

    def batches(self, batch_size, *, generator=None, drop_last=False):
        """Yield one epoch of ``(X, y)`` batches, drawn on the device.

        Parameters
        ----------
        batch_size : int
            Sequences per batch (the last batch may be smaller).
        generator : torch.Generator or None
            One number is drawn from it per epoch and mixed with the stream's
            seed: the estimators pass their training generator, so every
            epoch brings new samples and the same two seeds the same
            samples. None: the stream's seed alone (with an int
            ``random_state``, every call yields the same epoch).
        drop_last : bool, default=False
            Leave out the last incomplete batch.

        Yields
        ------
        X : Tensor of shape (batch, seq_len, token_dim + 1), float32
            (batch, seq_len + n_selected, token_dim + 1) in the query layout.
        y : Tensor of shape (batch, token_dim), float32
        """
        batch_size = check_int(batch_size, "batch_size")
        device = resolve_device(self.device)
        _check_fits_memory(
            self._batch_bytes(min(batch_size, self.n_samples)),
            f"A batch of {min(batch_size, self.n_samples)} sequences of "
            f"seq_len={self.seq_len} and token_dim={self.token_dim}",
            "Lower the estimator's batch_size, or seq_len.", device)
        # Once per epoch, on the host: the seed of this epoch's device generator.
        mix = 0
        if generator is not None:
            mix = int(torch.randint(2**62, (), generator=generator, device=generator.device))
        base = int(_as_generator(self.random_state).integers(2**62))
        words = np.random.SeedSequence([base, mix]).generate_state(2, np.uint32)
        rng = torch.Generator(device=device).manual_seed(int(words[0]) << 32 | int(words[1]))
        n = self.n_samples
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            yield self._draw(min(batch_size, n - start), rng, device)

    def __iter__(self):
        """One epoch, sample by sample (drawn in batches of 4096)."""
        for X, y in self.batches(4096):
            yield from zip(X, y)

    def _draw(self, batch, rng, device):
        T, d, q = self.seq_len, self.token_dim, self.n_selected
        tokens = torch.randn(batch, T, d, generator=rng, device=device)  # (B, T, d)
        selected = _uniform_subsets_on(rng, batch, T, q, device).float()  # (B, T)
        y = (selected.unsqueeze(1) @ tokens).squeeze(1) / q  # (B, d): mean of the selected
        X = torch.cat([tokens, selected.unsqueeze(-1)], dim=-1)  # (B, T, d + 1)
        if self.layout == "query":  # the same draws, the subset as q rows of positions
            X = indicator_as_query(X, q)  # (B, T + q, d + 1)
        return X, y


def _uniform_subsets_on(rng, n_samples, seq_len, n_selected, device):
    """A uniformly random ``n_selected``-subset per row, as a (n, T) bool mask.

    Floyd's algorithm, as in ``_uniform_subsets``, with torch on the device:
    min(q, T - q) draws per row, every subset equally likely. The draws are
    a column (n, 1), so that looking up and marking a position are a
    ``gather`` and a ``scatter_`` along the rows: half the time of indexing
    ``taken[rows, t]`` on the CPU, with the same numbers.
    """
    n_drawn = min(n_selected, seq_len - n_selected)
    taken = torch.zeros(n_samples, seq_len, dtype=torch.bool, device=device)
    for j in range(seq_len - n_drawn, seq_len):
        t = torch.randint(j + 1, (n_samples, 1), generator=rng, device=device)
        t.masked_fill_(taken.gather(1, t), j)
        taken.scatter_(1, t, True)
    return taken if n_drawn == n_selected else ~taken
