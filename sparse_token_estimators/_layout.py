"""The data contract shared by the generator, the estimators and the modules.

An input ``X`` has shape ``(n_samples, seq_len, token_dim + 1)``: the first
``token_dim`` channels of every position hold the token, the last channel holds
the selection indicator (1.0 for the q selected positions, 0.0 otherwise). The
target ``y`` has shape ``(n_samples, token_dim)``. Keeping the subset inside
``X`` means the layout does not fix ``seq_len``: one fitted transformer can be
evaluated on longer sequences.

The query layout (``layout="query"``) gives the subset by position instead:
``X`` has shape ``(n_samples, seq_len + n_selected, token_dim + 1)``, rows
0 .. T-1 the tokens ``[x_i, 0]``, rows T .. T+q-1 the query ``[0_d, i_j]``
with i_j the 1-based position of the j-th selected token, ascending. Content
alone cannot select there: a model must match positions.

Everything that knows this layout lives here.
"""

import numbers

import numpy as np
import torch
from sklearn.utils import check_array

#: index of the selection-indicator channel on the last axis of ``X``
INDICATOR = -1

LAYOUT = "(n_samples, seq_len, token_dim + 1)"

#: the two layouts of ``X`` (``layout=`` of the generator, the stream, the estimators)
LAYOUTS = ("indicator", "query")

QUERY_LAYOUT = "(n_samples, seq_len + n_selected, token_dim + 1)"


def split_tokens(X):
    """Split ``X`` into ``(tokens, indicator)``; works for numpy and torch."""
    return X[..., :INDICATOR], X[..., INDICATOR]


def check_int(value, name, *, minimum=1):
    """Return ``value`` as an int, or raise a message naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an integer >= {minimum}; got {value!r} "
            f"of type {type(value).__name__}."
        )
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value}.")
    return int(value)


def _as_numeric(value, name, layout):
    """``value`` as a numeric ndarray of its own dtype, or an error naming ``name``."""
    if value is None:
        raise ValueError(f"{name} is required: an array of shape {layout}.")
    if hasattr(value, "detach"):  # a torch tensor: validate a host copy
        value = value.detach().cpu()
        if value.is_floating_point() and value.dtype not in _NUMPY_FLOATS:
            # bfloat16 and the float8 types have no numpy dtype; float32
            # holds each of their values exactly.
            value = value.float()
        value = value.numpy()
    if isinstance(value, np.ndarray) and value.dtype.kind == "O":
        _check_numbers(value, name, layout)
    try:
        return check_array(
            value, dtype="numeric", allow_nd=True, ensure_2d=False,
            ensure_min_samples=0, ensure_all_finite=False, input_name=name,
        )
    except (TypeError, ValueError) as exc:
        # check_array's message names neither the argument nor the layout, and
        # for complex input goes on to print the whole array: keep its first line.
        kind = TypeError if isinstance(exc, TypeError) else ValueError
        reason = str(exc).splitlines()[0]
        raise kind(f"{name} must be a numeric array of shape {layout}: {reason}") from exc


_NUMPY_FLOATS = (torch.float16, torch.float32, torch.float64)


def _check_numbers(array, name, layout):
    # check_array turns an object array into floats with astype, which
    # parses strings ("1.5") as numbers: refuse anything but numbers (None
    # stands for a missing value and is reported as NaN by the finite check).
    for value in array.flat:
        if value is not None and not isinstance(value, (numbers.Real, np.bool_)):
            raise TypeError(
                f"{name} must be a numeric array of shape {layout}; its object "
                f"array holds {value!r} of type {type(value).__name__}. Convert "
                f"it to numbers first ({name}.astype(np.float32) parses numeric "
                "strings)."
            )


def _to_float32(array):
    # contiguous: torch.as_tensor refuses negative strides (e.g. X[::-1])
    with np.errstate(over="ignore"):  # overflow to inf is reported by _check_finite
        return np.ascontiguousarray(array, dtype=np.float32)


def _as_float32(value, name, layout):
    """``value`` as a float32 ndarray, or an error naming ``name`` and its layout."""
    return _to_float32(_as_numeric(value, name, layout))


def _check_finite(array, name, fix):
    # NaN and infinity propagate through a sum, so a finite sum clears the
    # array in one cheap pass (as scikit-learn's own check does); only
    # otherwise (a bad value, or finite values overflowing) look per sample.
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(array.sum()):
            return
    bad = np.flatnonzero(~np.isfinite(array.reshape(len(array), -1)).all(axis=1))
    if bad.size:
        raise ValueError(
            f"{name} contains NaN or infinity in {bad.size} sample(s) (e.g. sample "
            f"{bad[0]}; values beyond the float32 range, about 3.4e38, count as "
            f"infinite). {fix}"
        )


def check_tokens(X, *, token_dim=None, layout="indicator", n_selected=None):
    """Validate ``X`` against the layout and return it as float32.

    Parameters
    ----------
    X : array-like of shape (n_samples, seq_len, token_dim + 1)
        Tokens with the selection indicator as the last channel (in the
        query layout: of shape (n_samples, seq_len + n_selected, token_dim + 1),
        the tokens then the query rows). Lists, integer and float64 arrays
        are accepted and cast to float32.
    token_dim : int or None
        The token dimension the caller expects (the one seen in ``fit``); None
        accepts any.
    layout : {"indicator", "query"}, default="indicator"
        Which rules the rows follow (see the module's docstring).
    n_selected : int or None, default=None
        Query layout only: the number q of query rows at the end of every
        sequence. None takes it from the first sample (its rows with a
        nonzero last channel, see :func:`count_queries`).

    Returns
    -------
    X : ndarray of shape (n_samples, seq_len, token_dim + 1), float32
        C-contiguous (a copy only where ``X`` was not already).
    """
    check_layout(layout)
    table = hasattr(X, "columns") and hasattr(X, "to_numpy")  # a pandas DataFrame
    X = _as_numeric(X, "X", LAYOUT)
    if X.ndim != 3:
        raise ValueError(
            f"X must be a 3-D array of shape {LAYOUT}, as returned by "
            f"make_sparse_selection; got an array of shape {X.shape}. "
            + _reshape_hint(X.shape, token_dim, table)
        )
    if X.shape[0] == 0:
        raise ValueError(
            f"X has 0 samples (shape {X.shape}); pass at least one sequence."
        )
    if X.shape[1] < 1 or X.shape[2] < 2:
        raise ValueError(
            f"X must have shape {LAYOUT} with seq_len >= 1 and token_dim >= 1; "
            f"got shape {X.shape}. The last axis holds the token_dim token "
            "channels followed by the 0/1 selection indicator."
        )
    original = X
    X = _to_float32(X)
    _check_finite(X, "X", "Tokens and indicator must be finite: drop or repair "
                          "those samples.")
    if token_dim is not None and X.shape[2] - 1 != token_dim:
        raise ValueError(
            f"X has token_dim {X.shape[2] - 1} (last axis {X.shape[2]}), but the "
            f"estimator was fitted with token_dim {token_dim} (last axis "
            f"{token_dim + 1}). Pass tokens of the dimension seen in fit."
        )
    if layout == "query":
        _check_query_rows(original, count_queries(original) if n_selected is None
                          else check_int(n_selected, "n_selected"))
        return X
    # Checked as given, before the cast: float64 values such as 1 + 1e-9 or
    # 1e-50 would round to 1.0 or 0.0. One strided pass; the checks below
    # then run on contiguous memory.
    indicator = np.ascontiguousarray(split_tokens(original)[1])
    if not np.all((indicator == 0) | (indicator == 1)):
        bad = np.unique(indicator[(indicator != 0) & (indicator != 1)])[:5]
        if _looks_like_query_rows(indicator):
            raise ValueError(
                "The last channel of X is the selection indicator and must hold "
                f"only 0.0 and 1.0; found {bad.tolist()}, which look like the positions "
                "of query rows [0_d, i_j]: X is in the query layout. Pass "
                "layout='query' to the estimator (n_selected=... optional, learned from "
                "X), or convert X with to_indicator_layout(X)."
            )
        raise ValueError(
            "The last channel of X is the selection indicator and must hold "
            f"only 0.0 and 1.0; found {bad.tolist()}. Append the indicator as "
            "the last channel (see make_sparse_selection)."
        )
    empty = np.flatnonzero(indicator.sum(axis=1) == 0)
    if empty.size:
        # none selects a token: the token rows of query-layout sequences, cut from
        # their query rows [0_d, i_j] (whose last channel names the selection)
        query = (" No sample selects one: if these are the token rows of query-layout "
                 "sequences, pass them with their query rows [0_d, i_j] and layout='query' "
                 "to the estimator, or convert the whole sequences with "
                 "to_indicator_layout(X)." if empty.size == len(indicator) else "")
        raise ValueError(
            f"{empty.size} sample(s) of X select no token (e.g. sample "
            f"{empty[0]}); every sequence needs at least one position whose "
            "indicator is 1.0. Set the indicator of the selected positions, or "
            f"drop those samples.{query}"
        )
    return X


def _reshape_hint(shape, token_dim, table):
    """What to do with an array of ``shape`` that is not 3-D."""
    what = "pandas DataFrame" if table else "array"
    to_array = "X.to_numpy()" if table else "X"
    if len(shape) == 2 and (table or shape[1] > shape[0] or token_dim is not None):
        width = shape[1]
        if token_dim is not None and width % (token_dim + 1) == 0:
            seq_len = width // (token_dim + 1)
            reshape = f"{to_array}.reshape({shape[0]}, {seq_len}, {token_dim + 1})"
        else:
            reshape = f"{to_array}.reshape(n_samples, seq_len, token_dim + 1)"
        flattened = (
            f"A flattened {what} of shape (n_samples, seq_len * (token_dim + 1)), "
            f"one sequence per row with the channels of each position side by side, "
            f"needs {reshape} (see the data layout page of the user guide)"
        )
        if table:
            return flattened + "."
        return (flattened + "; a single sequence of shape (seq_len, token_dim + 1) "
                "needs a leading axis: X[np.newaxis].")
    return "A single sequence needs a leading axis: X[np.newaxis]."


def check_target(y, X):
    """Validate ``y`` against an already checked ``X``; return float32."""
    if y is None:
        raise ValueError(
            "y is required: an array of shape (n_samples, token_dim) holding "
            "the average of the selected tokens."
        )
    y = _as_float32(y, "y", "(n_samples, token_dim)")
    expected = (X.shape[0], X.shape[2] - 1)
    if y.shape != expected:
        hint = " Use y.reshape(-1, 1)." if y.ndim == 1 and expected[1] == 1 else ""
        raise ValueError(
            f"y must have shape (n_samples, token_dim) = {expected} to match X "
            f"of shape {X.shape}; got {y.shape}.{hint}"
        )
    _check_finite(y, "y", "The target is the average of the selected tokens and "
                          "must be finite: drop or repair those samples.")
    return y


# -- the query layout -----------------------------------------------------------------


def _looks_like_query_rows(last):
    """Whether the last channel ``last`` (n, rows) is that of query-layout sequences.

    Every sample ends with the same number q of rows naming 1-based positions of
    the T = rows - q token rows before them, whose last channel is 0.
    """
    q = int(np.count_nonzero(last[0]))
    tokens = last.shape[1] - q
    if q == 0 or tokens < 1:
        return False
    queries = last[:, tokens:]
    return bool(np.all(last[:, :tokens] == 0) and np.all(queries == np.round(queries))
                and np.all((queries >= 1) & (queries <= tokens)))


def has_query_rows(layout):
    """Whether sequences of ``layout`` end with query rows (the query layout).

    The estimators ask this (and :func:`query_rows`, :func:`layout_rules`) rather
    than compare layout names.

    Examples
    --------
    >>> has_query_rows("query"), has_query_rows("indicator")
    (True, False)
    """
    return check_layout(layout) == "query"


def query_rows(layout, n_selected):
    """How many rows of a sequence of ``layout`` are query rows: q, or 0 (indicator)."""
    return (n_selected or 0) if has_query_rows(layout) else 0


def layout_rules(layout, n_selected):
    """:func:`check_tokens`' layout keywords for ``layout`` (none for the indicator layout)."""
    if not has_query_rows(layout):
        return {}
    return {"layout": layout, "n_selected": n_selected}


def check_layout(layout):
    """Return ``layout`` if it is one of ``LAYOUTS``, else raise naming the options."""
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(
            f"layout must be 'indicator' (the subset as a 0/1 channel of the token rows) "
            f"or 'query' (the subset as n_selected rows of positions after the tokens); "
            f"got {layout!r}."
        )
    return layout


def count_queries(X):
    """The number q of query rows of a query-layout ``X``, read from its first sample.

    A token row carries 0 in the last channel and a query row a position
    i_j >= 1, so the rows of sample 0 whose last channel is nonzero are its
    query rows. The estimators learn ``n_selected`` this way when it is None
    (as they learn ``token_dim``); every sample is then checked against it.

    Examples
    --------
    >>> from sparse_token_estimators import make_sparse_selection
    >>> X, _ = make_sparse_selection(2, 10, 4, n_selected=3, layout="query", random_state=0)
    >>> count_queries(X)
    3
    """
    last = np.asarray(X[0])[:, INDICATOR]
    q = int(np.count_nonzero(last))
    if q == 0:
        raise ValueError(
            f"Sample 0 of X has no query row (no row with a nonzero last channel), so "
            f"n_selected cannot be learned from it. In the query layout {QUERY_LAYOUT} "
            "every sequence ends with n_selected rows [0_d, i_j], i_j the 1-based "
            "position of a selected token. Pass n_selected=..., or convert "
            "indicator-layout data with to_query_layout(X)."
        )
    return q


def _where(mask):
    """The first index (tuple of ints) where ``mask`` holds, or None."""
    flat = np.flatnonzero(mask)
    return None if flat.size == 0 else tuple(int(i) for i in np.unravel_index(flat[0],
                                                                                mask.shape))


def _value(v):
    v = v.item() if hasattr(v, "item") else v
    return repr(float(v)) if isinstance(v, float) else repr(v)


def _check_query_rows(X, n_selected):
    """Refuse ``X`` (numeric, 3-D, finite) unless its rows follow the query layout.

    Every rule is one vectorised pass; the first sample and row that breaks
    it is named, with the rule.
    """
    n_rows, q = X.shape[1], n_selected
    seq_len = n_rows - q
    if seq_len < 1:
        raise ValueError(
            f"X has {n_rows} rows per sequence, but the query layout {QUERY_LAYOUT} "
            f"with n_selected={q} needs at least one token row before the {q} query "
            f"rows (seq_len >= 1). Check n_selected, or pass sequences of "
            f"seq_len + {q} rows."
        )
    T = seq_len

    def count(i):  # how many rows of sample i look like query rows
        return int(np.count_nonzero(X[i, :, INDICATOR]))

    bad = _where(X[:, :T, INDICATOR] != 0)
    if bad is not None:
        i, t = bad
        raise ValueError(
            f"X[{i}, {t}, -1] = {_value(X[i, t, -1])} breaks the query layout: rows "
            f"0..{T - 1} are the tokens [x_i, 0] and carry 0.0 in the last channel "
            f"(rows {T}..{n_rows - 1}, the last n_selected={q}, are the query). Sample "
            f"{i} has {count(i)} rows with a nonzero last channel: every sample needs "
            f"n_selected={q} query rows, or pass the n_selected of the data; indicator-"
            "layout data converts with to_query_layout(X)."
        )
    bad = _where(X[:, T:, :INDICATOR] != 0)
    if bad is not None:
        i, j, c = bad
        raise ValueError(
            f"X[{i}, {T + j}, {c}] = {_value(X[i, T + j, c])} breaks the query layout: "
            f"rows {T}..{n_rows - 1} (the last n_selected={q}) are query rows [0_d, i_j], "
            f"whose first token_dim channels are 0.0. Sample {i} has {count(i)} rows "
            f"with a nonzero last channel; pass the n_selected of the data, or put the "
            "query rows after the tokens."
        )
    positions = X[:, T:, INDICATOR]
    bad = _where(positions != np.round(positions))
    if bad is not None:
        i, j = bad
        raise ValueError(
            f"X[{i}, {T + j}, -1] = {_value(positions[i, j])} is not an integer "
            f"position: query rows [0_d, i_j] carry the 1-based position i_j of a "
            f"selected token, an integer in 1..{T}."
        )
    bad = _where((positions < 1) | (positions > T))
    if bad is not None:
        i, j = bad
        raise ValueError(
            f"X[{i}, {T + j}, -1] = {_value(positions[i, j])} is not a position in "
            f"1..{T}: query rows name a token by its 1-based position among the "
            f"seq_len={T} token rows (0-based indices need + 1)."
        )
    bad = _where(np.diff(positions, axis=1) <= 0)
    if bad is not None:
        i, j = bad
        raise ValueError(
            f"X[{i}, {T + j + 1}, -1] = {_value(positions[i, j + 1])} does not exceed "
            f"X[{i}, {T + j}, -1] = {_value(positions[i, j])}: the query's positions must "
            f"be distinct and ascending. Sort each sample's query rows (np.sort on the "
            "positions); a repeated position selects a token once."
        )


def _checked_n_selected(n_selected):
    if n_selected is not None:
        return check_int(n_selected, "n_selected")
    return None


def split_query(X, n_selected=None):
    """Split a query-layout ``X`` into its tokens and the selected positions.

    Parameters
    ----------
    X : array-like of shape (n_samples, seq_len + n_selected, token_dim + 1)
        The query layout: T token rows [x_i, 0], then q query rows [0_d, i_j].
        Checked against its rules.
    n_selected : int or None, default=None
        The number q of query rows; None reads it from the first sample
        (:func:`count_queries`).

    Returns
    -------
    tokens : ndarray of shape (n_samples, seq_len, token_dim), float32
    positions : ndarray of shape (n_samples, n_selected), int64
        The 1-based positions i_j, ascending in each row.

    Examples
    --------
    >>> from sparse_token_estimators import make_sparse_selection, split_query
    >>> X, _, support = make_sparse_selection(
    ...     3, seq_len=10, token_dim=2, n_selected=3, layout="query",
    ...     return_support=True, random_state=0)
    >>> tokens, positions = split_query(X, 3)
    >>> tokens.shape, bool((positions == support + 1).all())
    ((3, 10, 2), True)
    """
    q = _checked_n_selected(n_selected)
    X = check_tokens(X, layout="query", n_selected=q)
    q = count_queries(X) if q is None else q
    T = X.shape[1] - q
    return X[:, :T, :INDICATOR], X[:, T:, INDICATOR].astype(np.int64)


def to_query_layout(X, n_selected=None):
    """Turn indicator-layout ``X`` into the query layout of the same task.

    Parameters
    ----------
    X : array-like of shape (n_samples, seq_len, token_dim + 1)
        The indicator layout; every sample must select the same number of
        tokens.
    n_selected : int or None, default=None
        The number q of selected tokens of every sample; None reads it from
        the first sample.

    Returns
    -------
    X_query : ndarray of shape (n_samples, seq_len + n_selected, token_dim + 1), float32
        The tokens with a 0 last channel, then one row [0_d, i] per selected
        position i (1-based, ascending).

    Examples
    --------
    >>> import numpy as np
    >>> from sparse_token_estimators import (make_sparse_selection, to_indicator_layout,
    ...                                      to_query_layout)
    >>> X, _ = make_sparse_selection(4, seq_len=10, token_dim=2, n_selected=3,
    ...                              random_state=0)
    >>> X_query = to_query_layout(X)
    >>> X_query.shape, bool(np.array_equal(to_indicator_layout(X_query), X))
    ((4, 13, 3), True)
    """
    q = _checked_n_selected(n_selected)
    X = check_tokens(X)
    counts = np.count_nonzero(X[..., INDICATOR], axis=1)
    q = int(counts[0]) if q is None else q
    bad = np.flatnonzero(counts != q)
    if bad.size:
        raise ValueError(
            f"Sample {bad[0]} of X selects {counts[bad[0]]} tokens, but the query layout "
            f"needs the same number in every sample (n_selected={q}): its query has one "
            "row per selected token. Convert samples with equal subsets' sizes together."
        )
    n, T, channels = X.shape
    out = np.zeros((n, T + q, channels), dtype=np.float32)
    out[:, :T, :INDICATOR] = X[..., :INDICATOR]
    # np.nonzero walks the rows in order, the positions of each ascending
    out[:, T:, INDICATOR] = (np.nonzero(X[..., INDICATOR])[1].reshape(n, q) + 1)
    return out


def to_indicator_layout(X, n_selected=None):
    """Turn query-layout ``X`` into the indicator layout of the same task.

    Parameters
    ----------
    X : array-like of shape (n_samples, seq_len + n_selected, token_dim + 1)
        The query layout, checked against its rules.
    n_selected : int or None, default=None
        The number q of query rows; None reads it from the first sample.

    Returns
    -------
    X_indicator : ndarray of shape (n_samples, seq_len, token_dim + 1), float32
        The tokens, the last channel 1.0 at the named positions.

    Examples
    --------
    >>> from sparse_token_estimators import make_sparse_selection, to_indicator_layout
    >>> X_query, _ = make_sparse_selection(4, seq_len=10, token_dim=2, n_selected=3,
    ...                                    layout="query", random_state=0)
    >>> X_query.shape, to_indicator_layout(X_query).shape
    ((4, 13, 3), (4, 10, 3))
    """
    tokens, positions = split_query(X, n_selected)
    n, T, d = tokens.shape
    out = np.zeros((n, T, d + 1), dtype=np.float32)
    out[..., :INDICATOR] = tokens
    np.put_along_axis(out[..., INDICATOR], positions - 1, 1.0, axis=1)
    return out


def query_as_indicator(X, n_selected):
    """``(tokens, indicator)`` of a query-layout tensor, for the modules (no checks).

    The indicator of shape (B, T) is 1.0 at the query's positions: the paper's
    z = sum_j p_{i_j} is then ``indicator @ P``, as in the indicator layout.
    Works at any T (T = rows - n_selected).
    """
    T = X.shape[1] - n_selected
    tokens = X[:, :T, :INDICATOR]  # (B, T, d)
    index = X[:, T:, INDICATOR].long() - 1  # (B, q): 0-based positions
    # zeros shaped as X's rows (not a fresh tensor), out of place: what torch.func.vmap
    # takes (``_fused`` runs the modules stacked)
    indicator = torch.zeros_like(X[:, :T, INDICATOR])
    return tokens, indicator.scatter(1, index, 1.0)  # (B, T, d), (B, T)


def indicator_as_query(X, n_selected):
    """A query-layout tensor from an indicator-layout one (q per row), for the stream."""
    B, T, channels = X.shape
    selected = X[..., INDICATOR] != 0  # (B, T)
    order = torch.arange(T, device=X.device).expand(B, T)
    # the selected positions first, ascending, without a host sync (no nonzero())
    positions = torch.where(selected, order, T).sort(dim=1).values[:, :n_selected]  # (B, q)
    query = torch.zeros(B, n_selected, channels, dtype=X.dtype, device=X.device)
    query[..., INDICATOR] = positions.to(X.dtype) + 1
    tokens = torch.cat([X[..., :INDICATOR], torch.zeros_like(X[..., INDICATOR:])], dim=-1)
    return torch.cat([tokens, query], dim=1)  # (B, T + q, d + 1)
