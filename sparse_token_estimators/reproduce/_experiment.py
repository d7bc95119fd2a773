"""What every experiment is (:class:`Experiment`), and the tools experiments share."""

import math
from functools import lru_cache
from statistics import mean, stdev

import numpy as np

from ..theory import fcn_lower_bound, pe_dim_best, transformer_pe_scale, zero_predictor_loss
from ._config import ReproductionConfig


class Experiment:
    """Base class of the reproduction's experiments (each imports shared modules only).

    Attributes
    ----------
    name, title : str
        Key of its section in the results and stem of its files; its heading.
    tables : dict
        ``{csv file name: key of its rows in the section}``.
    """

    name = ""
    title = ""

    def fits(self, config):
        """The :class:`~._models.Fit` s it needs (each fitted once per seed, shared)."""
        return []

    def search(self, config):
        """None, or a generator that yields a round's fits, receives their records
        ``{(fit, seed): record}`` and returns what it found (for ``collect``)."""
        return None

    def gating(self, config):
        """The models (keys of ``MODELS``) whose searches other searches of it wait on: the
        run fits theirs first (the order only)."""
        return ()

    def collect(self, config, records, found=None):
        """Its section of the results, from ``records[(fit, seed)]`` and ``found``."""
        raise NotImplementedError

    tables = {}

    def summary(self, results):
        """Markdown lines for summary.md."""
        return []

    def figures(self):
        """``{png file name: draw(results) -> matplotlib Figure}``."""
        return {}


def spread(values):
    """Mean, sample standard deviation, min, max and count of the finite values.

    Examples
    --------
    >>> spread([1.0, 2.0, 3.0, float("nan")])
    {'mean': 2.0, 'sd': 1.0, 'min': 1.0, 'max': 3.0, 'n': 3}
    """
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return {"mean": math.nan, "sd": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    return {"mean": mean(finite), "sd": stdev(finite) if len(finite) > 1 else 0.0,
            "min": min(finite), "max": max(finite), "n": len(finite)}


def summarise(rows, by, values):
    """One row per distinct ``by`` (first-seen order): each value ``v`` as ``v_mean``,
    ``v_sd``, ``v_min``, ``v_max``, and ``n_seeds``.

    Examples
    --------
    >>> rows = [{"model": "fcn", "r2": 0.5}, {"model": "fcn", "r2": 0.7}]
    >>> summarise(rows, ["model"], ["r2"])[0]["r2_mean"]
    0.6
    """
    groups = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in by), []).append(row)
    out = []
    for key, group in groups.items():
        row = dict(zip(by, key))
        for v in values:
            s = spread([r[v] for r in group])
            row.update({f"{v}_mean": s["mean"], f"{v}_sd": s["sd"], f"{v}_min": s["min"],
                        f"{v}_max": s["max"]})
        row["n_seeds"] = len(group)
        out.append(row)
    return out


def loglog_slope(x, y):
    """Least-squares slope of log y against log x (the exponent of a power law).

    Examples
    --------
    >>> round(loglog_slope([10, 20, 40], [80, 160, 320]), 6)
    1.0
    """
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def fmt(value, spec=".3f"):
    """A number for a table; "-" for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def seeds_text(n):
    """``N seeds`` (``1 seed``)."""
    return f"{n} seed{'s' if n > 1 else ''}"


def architecture_seeds_text(config):
    """What the architectures experiment's seeds are, in words, where they are fewer than
    the run's (``architecture_n_seeds``) and why; "" where it uses every seed.

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import PAPER, QUICK
    >>> print(architecture_seeds_text(QUICK))  # doctest: +NORMALIZE_WHITESPACE
    The architectures experiment uses 1 seed of the run's 2 (seed 0;
    architecture_n_seeds=1): its fits are the run's costliest, and fewer seeds there keep
    the run within its time budget; every other experiment uses both.
    >>> architecture_seeds_text(PAPER)
    ''
    """
    seeds = config.architecture_seeds()
    if len(seeds) == config.n_seeds:
        return ""
    return (f"The architectures experiment uses {seeds_text(len(seeds))} of the run's "
            f"{config.n_seeds} (seed{'s' if len(seeds) > 1 else ''} "
            f"{', '.join(map(str, seeds))}; architecture_n_seeds={config.architecture_n_seeds}): "
            "its fits are the run's costliest, and fewer seeds there keep the run within its "
            "time budget; every other experiment uses "
            + ("both." if config.n_seeds == 2 else f"all {config.n_seeds}."))


def fmt_spread(row, key, spec=".3f"):
    """``mean ± sd`` of ``key`` in a summarised row; one seed has no spread to show.

    Examples
    --------
    >>> fmt_spread({"r2_mean": 0.5, "r2_sd": 0.1, "n_seeds": 3}, "r2")
    '0.500 ± 0.100'
    >>> fmt_spread({"r2_mean": 0.5, "r2_sd": 0.0, "n_seeds": 1}, "r2")
    '0.500 (1 seed)'
    """
    if row is None or math.isnan(row.get(f"{key}_mean", math.nan)):
        return "-"
    if row.get("n_seeds") == 1:
        return f"{row[f'{key}_mean']:{spec}} (1 seed)"
    return f"{row[f'{key}_mean']:{spec}} ± {row[f'{key}_sd']:{spec}}"


def markdown_table(header, rows, align=None):
    """Lines of a Markdown table; ``align`` is one of "l"/"r" per column."""
    align = align or ["r"] * len(header)
    rule = "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"
    return ["| " + " | ".join(header) + " |", rule] + [
        "| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def select(rows, by=None, **match):
    """The rows whose items include ``match``, sorted by the key ``by`` (a name or a
    function) if given.

    Examples
    --------
    >>> select([{"m": "a", "T": 8}, {"m": "b", "T": 4}, {"m": "a", "T": 4}], "T", m="a")
    [{'m': 'a', 'T': 4}, {'m': 'a', 'T': 8}]
    """
    out = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    if by is None:
        return out
    return sorted(out, key=by if callable(by) else lambda r: r[by])


def find(rows, **match):
    """The first row whose items include ``match`` (None if none)."""
    return next(iter(select(rows, **match)), None)


def length_rows(record, seq_len, seed, **fields):
    """A row per length a fit was scored at: ``fields``, the length, its multiple of the
    training length ``seq_len``, the seed and the held-out R^2 there."""
    return [{**fields, "length": L, "factor": L / seq_len, "seed": seed, "r2": r2}
            for L, r2 in record["r2_by_length"].items()]


def beyond_training(record, seq_len):
    """The mean held-out R^2 of a fit over the lengths beyond its training length."""
    return spread([r2 for L, r2 in record["r2_by_length"].items() if L > seq_len])["mean"]


def length_cells(summary, config, **match):
    """``mean ± sd`` of R^2 at each named length (``config.length_factors``) of the
    summarised rows that match."""
    return [fmt_spread(find(summary, length=f * config.seq_len, **match), "r2")
            for f in config.length_factors]


def config_of(results):
    """The :class:`ReproductionConfig` of a results dict (its ``"config"``)."""
    return ReproductionConfig.from_dict(results["config"])


def fcn_bound(config, width):
    """The FCN lower bound at first-layer width ``width`` for the task of ``config``."""
    return fcn_lower_bound(config.seq_len, config.n_selected, token_dim=config.token_dim,
                           width=width)


def bound_at(config, width):
    """``{"fcn_bound", "fcn_r2_ceiling"}``: the FCN lower bound at ``width`` and the R^2 it
    caps an FCN of that width at."""
    bound = fcn_bound(config, width)
    return {"fcn_bound": bound, "fcn_r2_ceiling": 1 - bound / zero_loss(config)}


def zero_loss(config):
    """The loss of predicting 0 (summed over d): R^2 0."""
    return zero_predictor_loss(config.token_dim, config.n_selected)


def judged_widths(config, pe_range=(1.0, 4.0)):
    """Widths d + pe_dim of the paper's grid, q log T <= pe_dim <= 4 q log T, below T d."""
    scale = transformer_pe_scale(config.seq_len, config.n_selected)
    low, high = pe_range
    d = config.token_dim
    return [d + p for p in sorted(config.pe_dims)
            if low * scale <= p <= high * scale and d + p < config.seq_len * d]


@lru_cache(maxsize=None)
def best_case(seq_len, n_selected, target):
    """:func:`~sparse_token_estimators.theory.pe_dim_best` (seconds at large T), computed
    once per run for the experiments that draw it (the scaling law, the architectures)."""
    return pe_dim_best(seq_len, n_selected, target)
