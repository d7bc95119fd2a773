"""The bracketing search: the smallest integer width whose score reaches a target.

Grow the width geometrically from ``start`` until the score reaches the
target, then bisect in log space between the last failing and the first
passing width until their ratio is at most ``refine`` (the score is assumed
to rise with the width; no width is evaluated twice). :class:`BracketSearch`
is ask/tell; :func:`lockstep` runs several in one round; the experiments'
critical-width searches (:func:`critical_searches`) are generators of fits
on top of them, whose rounds the run merges.
"""

import math
from dataclasses import dataclass

import numpy as np

from ._experiment import find, summarise
from ._models import model_name


@dataclass(frozen=True)
class Bracket:
    """The outcome of a bracketing search.

    Attributes
    ----------
    width, upper : int or None
        The smallest evaluated width whose score reaches the target (None:
        status "beyond stop").
    lower : int or None
        The largest failing width below it (the crossing is in (lower,
        width]); None with status "at start"; the widest fitted with status
        "beyond stop".
    evaluated : tuple of (int, float)
        Every evaluated width and its score, in increasing width.
    status : {"found", "beyond stop", "at start"}
        Bracketed to within ``refine``; no width up to ``stop`` reaches the
        target; the smallest width allowed passes.
    """

    width: int | None
    lower: int | None
    upper: int | None
    evaluated: tuple
    status: str

    @property
    def ratio(self):
        """upper / lower: how tightly the crossing is bracketed (inf if not)."""
        if self.lower is None or self.upper is None:
            return math.inf
        return self.upper / self.lower


class BracketSearch:
    """One search, step by step: ``pending()`` widths to evaluate, ``tell`` their scores.

    Parameters
    ----------
    start : int
        The first width evaluated (>= 1).
    target : float
        A width passes when its score is >= ``target`` (NaN fails).
    stop, floor : int, optional
        The largest width it may evaluate; when ``start`` passes, the
        smallest it shrinks to (None: no limit; report "at start" at once).
    factor : float, default=2.0
        Growth (and shrink) factor of the first phase, > 1.
    refine : float, default=sqrt(2)
        Bisect until upper / lower <= ``refine`` (> 1).

    Examples
    --------
    >>> search = BracketSearch(4, target=0.5)
    >>> while not search.done:
    ...     widths = search.pending()
    ...     search.tell(widths, [1.0 if w >= 23 else 0.0 for w in widths])
    >>> result = search.result()
    >>> result.status, result.lower, result.width  # the crossing is in (19, 23]
    ('found', 19, 23)
    """

    def __init__(self, start, *, target, stop=None, floor=None, factor=2.0,
                 refine=2 ** 0.5):
        for name, value in (("start", start), ("stop", stop), ("floor", floor)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{name} must be a positive int or None; got {value!r}.")
        if stop is not None and stop < start:
            raise ValueError(f"stop={stop} must be at least start={start}.")
        if floor is not None and floor > start:
            raise ValueError(f"floor={floor} must be at most start={start}.")
        for name, value in (("factor", factor), ("refine", refine)):
            if not value > 1:
                raise ValueError(f"{name} must be > 1; got {value!r}.")
        self.start, self.target, self.stop, self.floor = start, target, stop, floor
        self.factor, self.refine = factor, refine
        self.scores = {}

    def _passes(self, width):
        score = self.scores[width]
        return score is not None and not math.isnan(score) and score >= self.target

    def _bounds(self):
        """(largest failing width below the smallest passing one, smallest passing)."""
        passing = [w for w in self.scores if self._passes(w)]
        upper = min(passing) if passing else None
        failing = [w for w in self.scores if not self._passes(w)
                   and (upper is None or w < upper)]
        return (max(failing) if failing else None), upper

    def _next(self):
        """The next width to evaluate, or None when the search is over."""
        if not self.scores:
            return self.start
        lower, upper = self._bounds()
        if upper is None:  # growing: nothing passes yet
            if self.stop is not None and lower >= self.stop:
                return None
            nxt = max(lower + 1, round(lower * self.factor))
            return nxt if self.stop is None else min(nxt, self.stop)
        if lower is None:  # shrinking: the smallest evaluated width passes
            if self.floor is None or upper <= self.floor:
                return None
            return max(self.floor, min(upper - 1, round(upper / self.factor)))
        if upper / lower <= self.refine or upper - lower <= 1:
            return None
        mid = round(math.sqrt(lower * upper))
        return min(max(mid, lower + 1), upper - 1)

    @property
    def done(self):
        """Whether the search needs no more evaluations."""
        return self._next() is None

    def pending(self):
        """The widths to evaluate in the next round (empty when done)."""
        nxt = self._next()
        return [] if nxt is None else [nxt]

    def tell(self, widths, scores):
        """Record the scores of ``widths``."""
        scores = list(scores)
        if len(scores) != len(widths):
            raise ValueError(f"got {len(scores)} scores for {len(widths)} widths.")
        for w, s in zip(widths, scores):
            self.scores[int(w)] = float(s)

    def result(self):
        """The :class:`Bracket` found so far (final once ``done``)."""
        lower, upper = self._bounds()
        evaluated = tuple(sorted(self.scores.items()))
        if upper is None:
            return Bracket(None, lower, None, evaluated, "beyond stop")
        if lower is None:
            return Bracket(upper, None, upper, evaluated, "at start")
        return Bracket(upper, lower, upper, evaluated, "found")


def lockstep(searches):
    """Several searches in lock-step, as an ask/tell generator.

    Yields the pending ``[(key, width), ...]`` of every unfinished search in
    a round and receives their scores (``send``); returns ``{key: Bracket}``.

    Examples
    --------
    >>> crossing = {"a": 10, "b": 40}
    >>> rounds = lockstep({k: BracketSearch(8, target=1.0, refine=1.01) for k in crossing})
    >>> jobs = next(rounds)
    >>> try:
    ...     while True:
    ...         jobs = rounds.send([float(w >= crossing[k]) for k, w in jobs])
    ... except StopIteration as stop:
    ...     found = stop.value
    >>> found["a"].width, found["b"].width
    (10, 40)
    """
    while True:
        jobs = [(key, w) for key, search in searches.items() for w in search.pending()]
        if not jobs:
            return {key: search.result() for key, search in searches.items()}
        scores = list((yield jobs))
        if len(scores) != len(jobs):
            raise ValueError(f"evaluate returned {len(scores)} scores for {len(jobs)} widths.")
        for key, search in searches.items():
            own = [(w, s) for (k, w), s in zip(jobs, scores) if k == key]
            if own:
                search.tell([w for w, _ in own], [s for _, s in own])


# The experiments' critical-width searches: generators that yield the fits of a
# round and receive their records ``{(fit, seed): record}``; their path depends
# only on those.

#: the mean validation R^2 a critical width reaches (``_verdicts.THRESHOLDS``)
TARGET_R2 = 0.8
#: bisect until the bracket is within this factor (verdict 4: sqrt(2) or finer)
REFINE = 2 ** 0.5


def mean_score(records, fits, seeds, key="val_r2"):
    """Mean over the seeds of ``key`` of each fit's records."""
    return [float(np.mean([records[f, s][key] for s in seeds])) for f in fits]


def fit_rounds(config, searches, make_fit):
    """Generator: ``searches`` (``{key: BracketSearch}``) in lock-step, each round as
    fits. ``make_fit(key, width)``; returns ``{key: Bracket}``."""
    rounds = lockstep(searches)
    try:
        jobs = next(rounds)
        while True:
            fits = [make_fit(key, w) for key, w in jobs]
            records = yield fits
            jobs = rounds.send(mean_score(records, fits, config.seeds()))
    except StopIteration as stop:
        return stop.value


def sequential_searches(config, lens, make_fit, start, *, floor, stop):
    """Generator: one search per T, in increasing T; ``make_fit(T, width)``,
    ``start(T, previous Bracket or None)``, limits ``floor(T)``, ``stop(T)``.
    Returns ``{T: Bracket}``."""
    found, previous = {}, None
    for T in lens:
        first = min(max(start(T, previous), floor(T)), stop(T))
        search = BracketSearch(first, target=TARGET_R2, stop=stop(T), floor=floor(T),
                               factor=2.0, refine=REFINE)
        found[T] = previous = (yield from fit_rounds(
            config, {T: search}, lambda _, w, T=T: make_fit(T, w)))[T]
    return found


def doubling_check(config, bracket, make_fit):
    """Generator: refit the bracket's two widths with twice the sequences
    (``make_fit(width)``); returns None if not bracketed."""
    if bracket is None or bracket.status != "found":
        return None
    fits = [make_fit(bracket.lower), make_fit(bracket.upper)]
    lower, upper = mean_score((yield fits), fits, config.seeds())
    return {"lower": bracket.lower, "upper": bracket.upper,
            "lower_r2": lower, "upper_r2": upper,
            "unchanged": bool(lower < TARGET_R2 <= upper)}


def critical_searches(config, lens, make_fit, start, *, floor, stop, check_len):
    """Generator: :func:`sequential_searches`, then the doubling check at
    ``check_len`` (``make_fit(T, width, factor=2)``); returns ``(brackets, check)``."""
    found = yield from sequential_searches(config, lens, make_fit, start, floor=floor,
                                           stop=stop)
    check = None
    if check_len in found:
        check = yield from doubling_check(config, found[check_len],
                                          lambda w: make_fit(check_len, w, factor=2))
    return found, check


def per_seed_minimum(points, seeds, target=TARGET_R2):
    """``{seed: smallest evaluated width whose own val R^2 reaches target}`` (None if none)."""
    return {s: min((p["value"] for p in points if p["seed"] == s and p["val_r2"] >= target),
                   default=None) for s in seeds}


def collect_points(config, records, brackets, make_fit, parameter):
    """Per-seed rows of every evaluated width and their mean over seeds."""
    points = []
    for T, bracket in brackets.items():
        for w, _ in bracket.evaluated:
            fit = make_fit(T, w)
            for seed in config.seeds():
                r = records[fit, seed]
                points.append({"seq_len": T, "parameter": parameter, "value": w,
                               "width": r["width"], "seed": seed, "n_train": r["n_train"],
                               "val_r2": r["val_r2"], "test_r2": r["test_r2"],
                               "test_loss": r["test_loss"], "fit_cpu_s": r["fit_cpu_s"]})
    return points, summarise(points, ["seq_len", "parameter", "value"],
                             ["val_r2", "test_r2", "test_loss"])


def per_seed_rows(points, brackets, seeds):
    """``[{"seq_len", "seed", "star"}]``: each seed's own critical width at each T."""
    rows = []
    for T in brackets:
        own = per_seed_minimum([p for p in points if p["seq_len"] == T], seeds)
        rows += [{"seq_len": T, "seed": s, "star": w} for s, w in own.items()]
    return rows


def critical_rows(config, brackets, summary, extra):
    """One row per T: the critical width found, its bracket and held-out R^2."""
    rows = []
    for T, b in brackets.items():
        at = find(summary, seq_len=T, value=b.width)
        rows.append({"seq_len": T, "star": b.width, "lower": b.lower, "status": b.status,
                     "ratio": b.ratio if math.isfinite(b.ratio) else None,
                     "evaluated": [w for w, _ in b.evaluated],
                     "val_r2_mean": at["val_r2_mean"] if at else None,
                     "test_r2_mean": at["test_r2_mean"] if at else None,
                     "test_r2_sd": at["test_r2_sd"] if at else None,
                     "td": T * config.token_dim, **extra(T)})
    return rows


def bracket_text(row):
    """A critical row's bracket as a table shows it: ``(lower, star]``, "-" where none."""
    return f"({row['lower'] or '-'}, {row['star'] or '-'}]"


def r2_text(row):
    """A critical row's held-out R^2 at its width: ``mean ± sd``, "-" where none."""
    if row["test_r2_mean"] is None:
        return "-"
    return f"{row['test_r2_mean']:.3f} ± {row['test_r2_sd']:.3f}"


def critical_section(config, records, found, make_fit, parameter, model, extra, check):
    """A critical-width experiment's section: every fitted point and its mean over seeds,
    a row per T (with ``extra(T)``), each seed's own width, and the doubling check
    (with ``check``: its T and sequences)."""
    brackets, checked = found
    points, summary = collect_points(config, records, brackets, make_fit, parameter)
    return {"target_r2": TARGET_R2, "refine": REFINE, "model": model,
            "model_name": model_name(model, config), "points": points, "summary": summary,
            "critical": critical_rows(config, brackets, summary, extra),
            "critical_per_seed": per_seed_rows(points, brackets, config.seeds()),
            "check": None if checked is None else {**check, **checked}}


def check_line(check, lower, upper, star):
    """The doubling check in words: ``lower``/``upper`` name its widths (``"pe_dim 4"``)."""
    return (f"Check at T={check['seq_len']} with {check['n_train']} sequences every epoch "
            f"(twice the steps): mean validation R^2 {check['lower_r2']:.3f} at {lower}, "
            f"{check['upper_r2']:.3f} at {upper}: {star} "
            + ("unchanged." if check["unchanged"] else "CHANGED (the steps set it)."))
