"""Parameter searches on a stream of fresh samples, scored on a fixed validation set.

scikit-learn's searches (``GridSearchCV``, ``RandomizedSearchCV``, ...) split
their data into folds by index. A :class:`~sparse_token_estimators.SparseSelectionStream`
has no sample i to index: it draws new sequences every epoch, so it cannot be
split (indexing it raises a ``TypeError`` that points here). Training on the
population needs no cross-validation either: every candidate trains on the
same stream and is scored on one held-out set drawn with
``make_sparse_selection``. :func:`search_on_stream` does that with
scikit-learn's own parts (``ParameterGrid``, ``clone``, ``check_scoring``)
and joblib, and reports the results in the layout of ``cv_results_``.
"""

import time
import warnings

import numpy as np
from joblib import Parallel, delayed
from sklearn.base import clone
from sklearn.exceptions import FitFailedWarning
from sklearn.metrics import check_scoring
from sklearn.model_selection import ParameterGrid
from sklearn.utils import Bunch

from ._compare_widths import compare_critical_widths, plot_critical_widths
from ._critical_width import CriticalWidth, critical_width
from ._search_args import check_error_score
from .datasets import SparseSelectionStream

__all__ = ["CriticalWidth", "compare_critical_widths", "critical_width", "plot_critical_widths",
           "search_on_stream"]


def _fit_and_score(estimator, params, stream, X_val, y_val, scorer, error_score):
    estimator = clone(estimator).set_params(**params)
    start = time.perf_counter()
    try:
        estimator.fit(stream)
    except Exception as exc:
        if isinstance(error_score, str) and error_score == "raise":
            raise
        fit_time = time.perf_counter() - start
        return None, fit_time, 0.0, error_score, f"{type(exc).__name__}: {exc}"
    fit_time = time.perf_counter() - start
    score = scorer(estimator, X_val, y_val)
    return estimator, fit_time, time.perf_counter() - start - fit_time, score, None


def search_on_stream(estimator, param_grid, stream, X_val, y_val, *, scoring=None,
                     n_jobs=None, verbose=0, error_score=np.nan):
    """Fit ``estimator`` on ``stream`` for every candidate of ``param_grid``; score on a set.

    The route for a search when the training data is a
    :class:`~sparse_token_estimators.SparseSelectionStream`, which
    scikit-learn's searches cannot split. Every candidate is a clone of
    ``estimator`` with its parameters set, fitted on the same stream (with the
    estimator's ``random_state`` fixed, every candidate sees the same samples)
    and scored on ``(X_val, y_val)``. The fits run in parallel with joblib, as
    a scikit-learn search's do.

    Parameters
    ----------
    estimator : SparseTokenTransformer or SparseTokenFCN
        The estimator to tune; it is cloned, never fitted itself.
    param_grid : dict or list of dict
        The candidates, as ``GridSearchCV``'s ``param_grid`` (see
        ``sklearn.model_selection.ParameterGrid``).
    stream : SparseSelectionStream
        The training data of every candidate.
    X_val : array-like of shape (n_samples, seq_len, token_dim + 1)
        Held-out sequences, e.g. from ``make_sparse_selection`` with another
        ``random_state``. Its ``seq_len`` may differ from the stream's (to
        tune for length generalisation), as far as the estimator accepts it.
    y_val : array-like of shape (n_samples, token_dim)
        Their targets.
    scoring : str, callable or None, default=None
        As in ``GridSearchCV``; None: the estimator's ``score`` (R^2 averaged
        over the token_dim outputs).
    n_jobs : int or None, default=None
        Fits run at once (joblib; -1: all cores).
    verbose : int, default=0
        joblib's verbosity.
    error_score : "raise" or float, default=np.nan
        As in ``GridSearchCV``: the score of a candidate whose fit raises,
        with a ``FitFailedWarning`` naming the candidates and the errors, so
        that the other candidates' results are kept; "raise" raises the
        first failure instead. If every candidate fails, the search raises.

    Returns
    -------
    result : sklearn.utils.Bunch
        ``cv_results_``: dict of arrays in ``GridSearchCV.cv_results_``'s layout
        for one split (``params``, ``param_<name>``, ``split0_test_score``,
        ``mean_test_score``, ``std_test_score`` (0: one split),
        ``rank_test_score``, ``mean_fit_time``, ``mean_score_time``; a pandas
        ``DataFrame`` takes it as is); ``best_index_``, ``best_params_``,
        ``best_score_``; ``best_estimator_``: the best candidate as fitted in
        the search (a refit on the same stream would train on the same samples).
        A failed candidate has ``error_score`` as its score and ranks last.

    Examples
    --------
    >>> from sparse_token_estimators import (SparseSelectionStream, SparseTokenTransformer,
    ...                                      make_sparse_selection)
    >>> stream = SparseSelectionStream(10, 4, 2, n_samples=512, random_state=0, device="cpu")
    >>> X_val, y_val = make_sparse_selection(200, 10, 4, 2, random_state=1)
    >>> est = SparseTokenTransformer(pe_dim=16, max_epochs=2, device="cpu", random_state=0)
    >>> result = search_on_stream(est, {"lr": [0.01, 0.05]}, stream, X_val, y_val)
    >>> sorted(result.best_params_), result.cv_results_["rank_test_score"].shape
    (['lr'], (2,))
    """
    if not isinstance(stream, SparseSelectionStream):
        raise TypeError(
            f"stream must be a SparseSelectionStream; got {type(stream).__name__}. For "
            "arrays X, y use scikit-learn's GridSearchCV(estimator, param_grid).fit(X, y)."
        )
    check_error_score(error_score)
    candidates = list(ParameterGrid(param_grid))
    if not candidates:
        raise ValueError(
            f"param_grid={param_grid!r} has no candidate to fit. Pass a dict of parameter "
            "names to lists of values, e.g. {'lr': [0.01, 0.05]}, or a non-empty list of "
            "such dicts."
        )
    scorer = check_scoring(estimator, scoring=scoring)
    jobs = Parallel(n_jobs=n_jobs, verbose=verbose)(
        delayed(_fit_and_score)(estimator, params, stream, X_val, y_val, scorer, error_score)
        for params in candidates
    )
    fitted, fit_times, score_times, scores, errors = zip(*jobs)
    failed = [(params, error) for params, error in zip(candidates, errors) if error]
    if len(failed) == len(candidates):
        raise ValueError(
            f"All {len(candidates)} candidates of search_on_stream failed to fit; the first, "
            f"{failed[0][0]!r}: {failed[0][1]} Fix the parameters, or pass "
            "error_score='raise' to see the whole traceback."
        )
    if failed:
        listed = "; ".join(f"{params!r}: {error}" for params, error in failed[:3])
        warnings.warn(
            f"{len(failed)} of {len(candidates)} candidates failed to fit and were scored "
            f"error_score={error_score!r} ({listed}{'; ...' if len(failed) > 3 else ''}). "
            "Their results are kept in cv_results_; pass error_score='raise' to stop at the "
            "first failure.", FitFailedWarning, stacklevel=2)
    scores = np.asarray(scores, dtype=np.float64)
    # Ranks as scikit-learn gives them: 1 is the best, ties share the best
    # rank, a NaN score comes last.
    ranked = np.where(np.isnan(scores), -np.inf, scores)
    ranks = (1 + (ranked[None, :] > ranked[:, None]).sum(axis=1)).astype(np.int32)
    results = {
        "mean_fit_time": np.asarray(fit_times),
        "mean_score_time": np.asarray(score_times),
        "params": candidates,
        "split0_test_score": scores,
        "mean_test_score": scores,
        "std_test_score": np.zeros_like(scores),
        "rank_test_score": ranks,
    }
    for name in sorted({name for params in candidates for name in params}):
        column = np.ma.masked_all(len(candidates), dtype=object)
        for i, params in enumerate(candidates):
            if name in params:
                column[i] = params[name]
        results[f"param_{name}"] = column
    best = int(np.argmin(ranks))
    return Bunch(cv_results_=results, best_index_=best, best_params_=candidates[best],
                 best_score_=float(scores[best]), best_estimator_=fitted[best])
