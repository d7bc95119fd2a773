"""The data contract shared by the generator, the estimators and the modules.

An input ``X`` has shape ``(n_samples, seq_len, token_dim + 1)``: the first
``token_dim`` channels of every position hold the token, the last channel holds
the selection indicator (1.0 for the q selected positions, 0.0 otherwise). The
target ``y`` has shape ``(n_samples, token_dim)``. Keeping the subset inside
``X`` means the layout does not fix ``seq_len``: one fitted transformer can be
evaluated on longer sequences.

Everything that knows this layout lives here.
"""

import numbers

import numpy as np
import torch
from sklearn.utils import check_array

#: index of the selection-indicator channel on the last axis of ``X``
INDICATOR = -1

LAYOUT = "(n_samples, seq_len, token_dim + 1)"


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


def check_tokens(X, *, token_dim=None):
    """Validate ``X`` against the layout and return it as float32.

    Parameters
    ----------
    X : array-like of shape (n_samples, seq_len, token_dim + 1)
        Tokens with the selection indicator as the last channel. Lists,
        integer and float64 arrays are accepted and cast to float32.
    token_dim : int or None
        The token dimension the caller expects (the one seen in ``fit``); None
        accepts any.

    Returns
    -------
    X : ndarray of shape (n_samples, seq_len, token_dim + 1), float32
        C-contiguous (a copy only where ``X`` was not already).
    """
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
    # Checked as given, before the cast: float64 values such as 1 + 1e-9 or
    # 1e-50 would round to 1.0 or 0.0. One strided pass; the checks below
    # then run on contiguous memory.
    indicator = np.ascontiguousarray(split_tokens(original)[1])
    if not np.all((indicator == 0) | (indicator == 1)):
        bad = np.unique(indicator[(indicator != 0) & (indicator != 1)])[:5]
        raise ValueError(
            "The last channel of X is the selection indicator and must hold "
            f"only 0.0 and 1.0; found {bad.tolist()}. Append the indicator as "
            "the last channel (see make_sparse_selection)."
        )
    empty = np.flatnonzero(indicator.sum(axis=1) == 0)
    if empty.size:
        raise ValueError(
            f"{empty.size} sample(s) of X select no token (e.g. sample "
            f"{empty[0]}); every sequence needs at least one position whose "
            "indicator is 1.0. Set the indicator of the selected positions, or "
            "drop those samples."
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
