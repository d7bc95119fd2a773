"""Architectures compared by critical width: one call, a tidy table, one figure.

:func:`compare_critical_widths` runs :func:`critical_width` for each estimator
at each T with the reproduction's recipe (its third set: the peak rates of a
grid, the rate decayed to 0 by a cosine over each fit's steps, training on
fresh sequences every epoch, the steps check at every T) and returns one row
per (estimator, T). :func:`plot_critical_widths` draws width against T per
estimator on log-log axes with each fitted slope.
"""

import math
import numbers

import numpy as np
from sklearn.base import clone

from ._critical_width import critical_width
from .datasets import SparseSelectionStream, make_sparse_selection

#: the statuses whose width is a measurement the slope is fitted on: "found", and
#: "at start" with a floor (the crossing at the floor or below)
RESOLVED = ("found", "at start")
#: the columns of the table, in order
COLUMNS = ("estimator", "param", "seq_len", "width", "status", "lower", "upper", "lr",
           "val_score", "slope", "n_fits", "reason")


def width_param(estimator):
    """The width parameter of one of the package's estimators (None for another).

    Examples
    --------
    >>> from sparse_token_estimators import SparseTokenEncoder
    >>> width_param(SparseTokenEncoder())
    'd_model'
    """
    from .estimators import (
        SparseTokenEncoder,
        SparseTokenFCN,
        SparseTokenRNN,
        SparseTokenSSM,
        SparseTokenTransformer,
    )

    for cls, param in ((SparseTokenTransformer, "pe_dim"), (SparseTokenFCN, "hidden_width"),
                       (SparseTokenEncoder, "d_model"), (SparseTokenRNN, "hidden_size"),
                       (SparseTokenSSM, "d_model")):
        if isinstance(estimator, cls):
            return param
    return None


def _width_multiple(estimator, param):
    if param == "d_model" and hasattr(estimator, "positional_encoding"):
        from .architectures import encoder_width_multiple

        return encoder_width_multiple(estimator.n_heads, estimator.positional_encoding)
    return 1


def _round_up(width, multiple):
    return None if width is None else multiple * math.ceil(width / multiple)


def _named(estimators):
    """``{name: (estimator, param)}`` from a dict or a list, each checked."""
    if isinstance(estimators, dict):
        items = list(estimators.items())
    elif isinstance(estimators, (list, tuple)):
        items = [(type(e[0] if isinstance(e, tuple) else e).__name__, e) for e in estimators]
    else:
        raise TypeError("estimators must be a dict {name: estimator or (estimator, param)} or "
                        f"a list of estimators; got {type(estimators).__name__}.")
    if not items:
        raise ValueError("estimators is empty: give at least one estimator to compare.")
    named = {}
    for name, value in items:
        estimator, param = value if isinstance(value, tuple) else (value, width_param(value))
        if param is None:
            raise ValueError(
                f"estimators[{name!r}] is a {type(estimator).__name__}, whose width parameter "
                "is not known: pass it as (estimator, 'param'), e.g. "
                "(NeuralNetRegressor(MyModule, module__width=4), 'module__width').")
        if name in named:
            raise ValueError(f"estimators names {name!r} twice: give them distinct names "
                             "(a dict {name: estimator}).")
        named[name] = (estimator, param)
    return named


def _check_seq_lens(seq_lens):
    if (not isinstance(seq_lens, (list, tuple, np.ndarray)) or len(seq_lens) == 0
            or not all(isinstance(t, numbers.Integral) and t >= 2 for t in seq_lens)
            or len(set(seq_lens)) != len(seq_lens)):
        raise ValueError(f"seq_lens must be distinct ints >= 2, e.g. (4, 8, 16); got "
                         f"{seq_lens!r}.")
    return sorted(int(t) for t in seq_lens)


def slope(seq_lens, widths):
    """The least-squares slope of log width against log T (nan with fewer than 2 T).

    Examples
    --------
    >>> round(slope([4, 8, 16], [8, 16, 32]), 3)
    1.0
    """
    if len(set(seq_lens)) < 2:
        return math.nan
    return float(np.polyfit(np.log(seq_lens), np.log(widths), 1)[0])


def compare_critical_widths(estimators, seq_lens, *, token_dim=4, n_selected=2,
                            layout="query", n_train=2048, n_val=1024, lr_grid=(0.003, 0.01, 0.03),
                            lr_schedule="cosine", target=0.8, start=4, stop=64, floor=None,
                            seeds=(0,), check_steps=True, random_state=0, n_jobs=None,
                            callbacks=None, verbose=0, plot=False, ax=None):
    """The critical width of each estimator at each T, in one table (and one figure).

    Runs :func:`~sparse_token_estimators.critical_width` for every estimator
    and every T (``seq_len``) with the reproduction's recipe (the
    documentation's reproduction page, third set): each width is fitted at
    every peak rate of ``lr_grid`` with the rate decayed to 0 by a cosine over
    the fit's steps (``lr_schedule``), training on ``n_train`` fresh sequences
    every epoch (a :class:`SparseSelectionStream`), scored on a fixed
    validation set of ``n_val`` sequences; a width's score is its best mean
    validation R^2 over the rates; the bracketing widths are refitted with
    twice the epochs (the steps check). The data are the task of Wang, Wei,
    Hsu & Lee (ICML 2024): T = ``seq_len`` tokens of dimension d =
    ``token_dim``, q = ``n_selected`` of them averaged, in ``layout``.

    Parameters
    ----------
    estimators : dict or list
        ``{name: estimator}`` (or ``{name: (estimator, param)}``), or a list
        of estimators (named by class). The package's estimators know their
        width parameter (``pe_dim``, ``hidden_width``, ``d_model`` of the
        encoder and of the SSM, ``hidden_size``); an encoder's widths are
        multiples of what its heads need. Each is cloned with ``layout`` and
        ``lr_schedule`` set; its ``max_epochs`` is the base steps.
    seq_lens : sequence of int
        The T, each >= 2.
    token_dim, n_selected : int, default=4, 2
        d and q.
    layout : {"query", "indicator"}, default="query"
        Where the subset is given (the query layout makes a model match
        positions).
    n_train, n_val : int, default=2048, 1024
        Fresh training sequences per epoch; validation sequences.
    lr_grid : sequence of float, default=(0.003, 0.01, 0.03)
        Peak rates: at least 3 spanning at least 10x.
    lr_schedule : {"cosine", "constant"}, default="cosine"
    target, start, stop, floor, seeds, check_steps, n_jobs, verbose
        As in :func:`~sparse_token_estimators.critical_width` (``start``,
        ``stop`` and ``floor`` rounded up to an encoder's multiple).
    random_state : int, default=0
        Seeds the data: each T its own training stream and validation set.
    callbacks : callback or list, default=None
        scikit-learn's callbacks (scikit-learn >= 1.9), passed to each
        ``critical_width``.
    plot : bool, default=False
        Also draw :func:`plot_critical_widths` (matplotlib), on ``ax`` if given.
    ax : matplotlib Axes or None, default=None

    Returns
    -------
    table : pandas.DataFrame, or list of dict without pandas
        One row per (estimator, T), columns ``COLUMNS``: ``width`` (the
        crossing, None when none), ``status`` (as ``critical_width``'s),
        ``lower`` / ``upper`` (the bracket: the crossing lies in (lower,
        upper]), ``lr`` (the chosen peak rate at ``width``), ``val_score``
        (its best mean validation R^2), ``slope`` (the estimator's log-log
        slope of width against T over its rows with a status in
        ``RESOLVED``; nan with fewer than 2), ``n_fits`` and ``reason``.

    Examples
    --------
    >>> from sparse_token_estimators import SparseTokenFCN, compare_critical_widths
    >>> table = compare_critical_widths({"FCN": SparseTokenFCN(max_epochs=2, device="cpu")},
    ...                                 [4, 6], token_dim=2, n_train=256, n_val=256,
    ...                                 target=0.3, start=4, stop=8, check_steps=False)
    >>> list(table["seq_len"]), list(table.columns[:5])
    ([4, 6], ['estimator', 'param', 'seq_len', 'width', 'status'])
    """
    named = _named(estimators)
    seq_lens = _check_seq_lens(seq_lens)
    rows = []
    for t_index, T in enumerate(seq_lens):
        seed = None if random_state is None else random_state + 2 * t_index
        stream = SparseSelectionStream(T, token_dim, n_selected, n_samples=n_train,
                                       random_state=seed, layout=layout, device="cpu")
        validation = make_sparse_selection(n_val, T, token_dim, n_selected, layout=layout,
                                           random_state=None if seed is None else seed + 1)
        for name, (estimator, param) in named.items():
            est = clone(estimator)
            own = est.get_params(deep=True)
            est.set_params(**{key: value for key, value in
                              (("layout", layout), ("lr_schedule", lr_schedule)) if key in own})
            multiple = _width_multiple(est, param)
            if verbose > 0:
                print(f"compare_critical_widths: {name}, T = {T}", flush=True)
            result = critical_width(
                est, param, stream, lr_grid=list(lr_grid), target=target,
                start=_round_up(start, multiple), stop=_round_up(stop, multiple),
                floor=_round_up(floor, multiple), seeds=seeds, validation=validation,
                check_steps=check_steps, multiple=multiple, n_jobs=n_jobs, verbose=verbose,
                callbacks=callbacks)
            lower, upper = result.bracket
            rows.append({
                "estimator": name, "param": param, "seq_len": T, "width": result.width,
                "status": result.status, "lower": lower, "upper": upper,
                "lr": result.chosen_lr.get(result.width),
                "val_score": result.scores.get(result.width, math.nan),
                "slope": math.nan, "n_fits": len(result.table), "reason": result.reason})
    for name in named:
        mine = [row for row in rows if row["estimator"] == name and row["status"] in RESOLVED]
        fitted = slope([row["seq_len"] for row in mine], [row["width"] for row in mine])
        for row in rows:
            if row["estimator"] == name:
                row["slope"] = fitted
    table = _as_table(rows)
    if plot or ax is not None:
        plot_critical_widths(table, ax=ax)
    return table


def _pandas():
    """pandas, or None where it is not installed."""
    try:
        import pandas
    except ImportError:
        return None
    return pandas


def _as_table(rows):
    pd = _pandas()
    if pd is None:
        return rows
    widths = dict.fromkeys(["width", "lower", "upper"], "Int64")  # None stays missing
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype(widths)


def _rows(table):
    if hasattr(table, "to_dict"):
        return [{key: (None if value is _missing() else value) for key, value in row.items()}
                for row in table.astype(object).to_dict("records")]
    return list(table)


def _missing():
    import pandas as pd

    return pd.NA


def _value(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def plot_critical_widths(table, ax=None):
    """Width against T per estimator, log-log, with each fitted slope.

    A filled marker is a width found (or, "at start", the floor reached);
    an open one a width the protocol could not settle ("unresolved",
    "non-monotone": drawn at the width found, else the widest tried); an
    open triangle up a search that ended beyond its stop (drawn at the
    stop: the width is larger). The dashed line of an estimator is its
    fitted power law, its slope in the legend.

    Parameters
    ----------
    table : pandas.DataFrame or list of dict
        What :func:`compare_critical_widths` returns.
    ax : matplotlib Axes or None, default=None
        Where to draw; None: a new figure.

    Returns
    -------
    ax : matplotlib Axes

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> rows = [{"estimator": "FCN", "seq_len": t, "width": 4 * t, "status": "found",
    ...          "lower": 2 * t, "upper": 4 * t, "slope": 1.0} for t in (4, 8)]
    >>> plot_critical_widths(rows).get_xscale()
    'log'
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    rows = _rows(table)
    names = list(dict.fromkeys(row["estimator"] for row in rows))
    for i, name in enumerate(names):
        color = f"C{i % 10}"
        # each estimator's markers a little apart in T, so that equal widths stay visible
        dodge = 1.04 ** (i - (len(names) - 1) / 2)
        mine = [{**row, "seq_len": row["seq_len"] * dodge}
                for row in rows if row["estimator"] == name]
        done = [r for r in mine if r["status"] in RESOLVED and _value(r["width"]) is not None]
        fitted = _value(mine[0].get("slope"))
        label = name if fitted is None else f"{name} (slope {fitted:.2f})"
        ax.plot([r["seq_len"] for r in done], [r["width"] for r in done], "o", color=color,
                label=label)
        if fitted is not None and len(done) >= 2:
            t = np.array([r["seq_len"] for r in done], float)
            w = np.array([r["width"] for r in done], float)
            b = np.mean(np.log(w)) - fitted * np.mean(np.log(t))
            grid = np.array([min(t), max(t)])
            ax.plot(grid, np.exp(b) * grid ** fitted, "--", color=color, lw=1)
        unsettled = [r for r in mine if r["status"] in ("unresolved", "non-monotone")]
        points = [(r["seq_len"], _value(r["width"]) or _value(r["lower"])) for r in unsettled]
        points = [p for p in points if p[1] is not None]
        if points:
            ax.plot(*zip(*points), "o", mfc="none", color=color)
        beyond = [(r["seq_len"], _value(r["lower"])) for r in mine if r["status"] == "> stop"]
        beyond = [p for p in beyond if p[1] is not None]
        if beyond:
            ax.plot(*zip(*beyond), "^", mfc="none", color=color)
    from matplotlib.lines import Line2D

    ax.set_xscale("log")
    ax.set_yscale("log")
    seq_lens = sorted({row["seq_len"] for row in rows})
    ax.set_xticks(seq_lens)
    ax.set_xticklabels([str(t) for t in seq_lens])
    low, high = ax.get_ylim()
    ticks = [2 ** k for k in range(math.floor(math.log2(max(low, 1))),
                                   math.ceil(math.log2(high)) + 1)]
    ax.set_yticks(ticks)
    ax.set_yticklabels([str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("critical width (R^2 target)")
    handles, labels = ax.get_legend_handles_labels()
    handles += [Line2D([], [], ls="none", marker="o", mfc="none", color="grey"),
                Line2D([], [], ls="none", marker="^", mfc="none", color="grey")]
    labels += ["not settled (steps check)", "> stop (drawn at the stop)"]
    ax.legend(handles, labels, fontsize="small", loc="best")
    return ax
