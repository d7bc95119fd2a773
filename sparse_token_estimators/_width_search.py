"""The bracketing search of the critical width, on scores alone (no fits).

The protocol of :func:`~sparse_token_estimators.model_selection.critical_width`
(``_critical_width``): grow the width geometrically from ``start``
until a width passes, bisect in log space down to a ratio <= ``refine``,
confirm the crossing at the next width, stop on a score that falls while the
search grows, and refit the bracketing widths with twice the steps.

:func:`bracket_critical_width` is the search on a score function alone,
:func:`search_steps` the same search as a generator of fit requests and
:func:`run_searches` several of them in lock-step (one round of fits for
all: what the reproduction's searches over T need).
"""

import math
from typing import NamedTuple

from ._search_args import check_bracket_args, check_search_again

#: what a search can end with
STATUSES = ("found", "at start", "> stop", "unresolved", "non-monotone")
#: how many times its steps a non-monotone search is searched again with (the fourth set
#: of the reproduction's verdicts: a width failing where a narrower one passed)
AGAIN = 2


def _passes(score, target):
    return score is not None and not math.isnan(score) and score >= target


class Request(NamedTuple):
    """A fit a search asks for (what :func:`search_steps` yields).

    ``width`` at ``steps_multiplier`` times the estimator's steps; ``check``:
    the steps check of a width already scored (its chosen rate only), else a
    width's score (every rate of the grid).
    """

    width: int
    steps_multiplier: int
    check: bool = False


def times(multiplier):
    """``"twice the steps"`` and the like: a multiple of the estimator's steps in words."""
    return {2: "twice the steps", 4: "four times the steps"}.get(multiplier,
                                                                  f"{multiplier}x the steps")


def falls_after_passing(scores, target):
    """Whether a width fails ``target`` although a narrower one of the same search passed
    (``scores``: width -> score): what the fourth set's first rule searches again.

    Examples
    --------
    >>> falls_after_passing({8: 0.5, 16: 0.81, 23: 0.79}, 0.8)
    True
    >>> falls_after_passing({8: 0.5, 16: 0.79, 23: 0.81}, 0.8)
    False
    """
    passed = False
    for width in sorted(scores):
        if _passes(scores[width], target):
            passed = True
        elif passed:
            return True
    return False


def _settle(found, target):
    """``settled`` and ``upper_bound`` of a search's result (see
    :class:`~sparse_token_estimators.model_selection.CriticalWidth`)."""
    status, width = found["status"], found["width"]
    if status in ("found", "at start"):
        return True, width
    if status == "> stop":
        return True, None
    lower, doubled = found["bracket"][0], found["doubled_scores"]
    unsettled = (status == "unresolved" and width is not None and lower is not None
                 and _passes(doubled.get(lower), target) and _passes(doubled.get(width), target))
    return False, width if unsettled else None


def _one_search(start, *, target, stop, floor, factor, refine, fall_tol, check_steps,
                multiple, base):
    """One bracketing search at ``base`` times the steps (its steps check: twice that)."""
    m = multiple
    again = times(2 * base)
    at = "" if base == 1 else f" with {times(base)}"

    def near(x):  # the nearest allowed width
        return m * round(x / m)

    scores, doubled = {}, {}

    def score(width):
        if width not in scores:
            scores[width] = float((yield Request(width, base)))
        return scores[width]

    def twice(width):
        doubled[width] = float((yield Request(width, 2 * base, True)))
        return doubled[width]

    def done(width, bracket, status, reason):
        return {"width": width, "bracket": bracket, "status": status, "reason": reason,
                "scores": dict(sorted(scores.items())), "doubled_scores": dict(doubled),
                "steps_multiplier": base}

    lower = upper = None
    width, best = start, -math.inf
    while True:  # grow
        s = yield from score(width)
        if _passes(s, target):
            upper = width
            break
        if fall_tol is not None and not math.isnan(s) and s < best - fall_tol:
            widest = max(w for w in scores if scores[w] == best)
            return done(None, (width, None), "non-monotone",
                        f"the score falls as the width grows{at}: {best:.4g} at {widest}, "
                        f"{s:.4g} at {width}; the search stopped there")
        best = max(best, s) if not math.isnan(s) else best
        lower = width
        if width >= stop:
            break
        width = min(max(width + m, near(width * factor)), stop)
    if upper is None:  # beyond the stop
        if not check_steps:
            return done(None, (lower, None), "> stop",
                        f"no width up to {lower} reaches {target}{at} (steps not checked)")
        widest = yield from twice(lower)
        if _passes(widest, target):
            return done(None, (lower, None), "unresolved",
                        f"no width up to {lower} reaches {target}{at}, but {lower} does with "
                        f"{again} ({widest:.4g}): more steps would decide")
        return done(None, (lower, None), "> stop",
                    f"no width up to {lower} reaches {target}{at}, nor {lower} with {again} "
                    f"({widest:.4g})")
    while lower is None and floor is not None and upper > floor:  # shrink: start passes
        smaller = max(floor, min(upper - m, near(upper / factor)))
        if _passes((yield from score(smaller)), target):
            upper = smaller
        else:
            lower = smaller
    while lower is not None and upper / lower > refine and upper - lower > m:  # bisect
        mid = min(max(near(math.sqrt(lower * upper)), lower + m), upper - m)
        if _passes((yield from score(mid)), target):
            upper = mid
        else:
            lower = mid
    # confirm at the next width: no wider evaluated width may fail
    above = [w for w in scores if w > upper]
    if not above:
        nxt = max(upper + m, near(upper * refine))
        if nxt <= stop:
            yield from score(nxt)
            above = [nxt]
    failing = [w for w in scores if w > upper and not _passes(scores[w], target)]
    if failing:
        return done(upper, (lower, upper), "non-monotone",
                    f"{upper} reaches {target}{at} ({scores[upper]:.4g}) but the wider "
                    f"{min(failing)} does not ({scores[min(failing)]:.4g})")
    status = "at start" if lower is None else "found"
    confirmed = f", confirmed at {min(above)}" if above else ", not confirmed (at the stop)"
    reason = (f"{upper} already reaches {target}{at}"
              + (" (the floor)" if floor is not None and upper == floor else "")
              if lower is None else
              f"the crossing lies in ({lower}, {upper}]{at}") + confirmed
    if not check_steps:
        return done(upper, (lower, upper), status, reason + " (steps not checked)")
    for w in (lower, upper):
        if w is not None:
            yield from twice(w)
    moved = []
    if lower is not None and _passes(doubled[lower], target):
        moved.append(f"{lower} reaches {target} with {again} ({doubled[lower]:.4g})")
    if not _passes(doubled[upper], target):
        moved.append(f"{upper} falls below {target} with {again} ({doubled[upper]:.4g})")
    if moved:
        return done(upper, (lower, upper), "unresolved",
                    "the bracket moves under the steps check: " + "; ".join(moved))
    return done(upper, (lower, upper), status, reason + f"; unmoved by {again}")


def search_steps(start, *, target, stop=None, floor=None, factor=2.0, refine=2 ** 0.5,
                 fall_tol=0.05, check_steps=True, multiple=1, search_again=False):
    """The bracketing search as a generator: it yields the fits it needs, one at a time.

    Each ``yield`` gives a :class:`Request` ``(width, steps_multiplier,
    check)`` and takes its score (``generator.send(score)``); the
    generator's return value (``StopIteration.value``) is the result of
    :func:`bracket_critical_width`. Several searches (one per sequence
    length, say) can so be driven in lock-step, their requests of a round
    fitted together (:func:`run_searches`).

    Parameters
    ----------
    start, target, stop, floor, factor, refine, fall_tol, check_steps, multiple, search_again
        As in :func:`bracket_critical_width`.

    Examples
    --------
    >>> steps = search_steps(4, target=0.5)
    >>> request = next(steps)
    >>> request
    Request(width=4, steps_multiplier=1, check=False)
    """
    stop = check_bracket_args(start, target=target, stop=stop, floor=floor, factor=factor,
                              refine=refine, fall_tol=fall_tol, check_steps=check_steps,
                              multiple=multiple)
    check_search_again(search_again)
    args = dict(target=target, stop=stop, floor=floor, factor=factor, refine=refine,
                fall_tol=fall_tol, check_steps=check_steps, multiple=multiple)
    searches = [(yield from _one_search(start, base=1, **args))]
    found = searches[0]
    if search_again and falls_after_passing(found["scores"], target):
        searches.append((yield from _one_search(start, base=AGAIN, **args)))
        found = {**searches[-1], "reason": (
            f"searched again with {times(AGAIN)} (the first search is non-monotone: "
            f"{searches[0]['reason']}): {searches[-1]['reason']}"
            + (f"; non-monotone again with {times(AGAIN)}: unresolved"
               if falls_after_passing(searches[-1]["scores"], target) else ""))}
    settled, bound = _settle(found, target)
    return {**found, "settled": settled, "upper_bound": bound,
            "widths": {s["steps_multiplier"]: s["width"] for s in searches},
            "searches": searches}


def run_searches(evaluate, searches):
    """Drive several :func:`search_steps` generators in lock-step.

    Parameters
    ----------
    evaluate : callable
        ``evaluate([(key, width, steps_multiplier), ...]) -> [score, ...]``:
        one request of every unfinished search per round (fit them together).
    searches : dict
        ``{key: search_steps(...)}``.

    Returns
    -------
    results : dict
        ``{key: result}``, each as :func:`bracket_critical_width` returns.

    Examples
    --------
    >>> crossing = {"a": 10, "b": 40}
    >>> found = run_searches(
    ...     lambda jobs: [float(w >= crossing[k]) for k, w, _ in jobs],
    ...     {k: search_steps(8, target=0.5) for k in crossing})
    >>> found["a"]["bracket"], found["b"]["bracket"]
    ((8, 11), (32, 45))
    """
    results, pending = {}, {}
    for key, steps in searches.items():
        try:
            pending[key] = (steps, next(steps))
        except StopIteration as end:
            results[key] = end.value
    while pending:
        jobs = [(key, request.width, request.steps_multiplier)
                for key, (_, request) in pending.items()]
        scores = list(evaluate(jobs))
        if len(scores) != len(jobs):
            raise ValueError(f"evaluate returned {len(scores)} scores for {len(jobs)} fits.")
        for (key, _, _), score in zip(jobs, scores):
            steps = pending[key][0]
            try:
                pending[key] = (steps, steps.send(score))
            except StopIteration as end:
                results[key] = end.value
                del pending[key]
    return results


def bracket_critical_width(evaluate, start, *, target, stop=None, floor=None, factor=2.0,
                           refine=2 ** 0.5, fall_tol=0.05, check_steps=True, multiple=1,
                           search_again=False):
    """The bracketing search with its confirmations, on a score function alone.

    Grow the width by ``factor`` from ``start`` until a width's score
    reaches ``target``, then bisect in log space down to a ratio <=
    ``refine``; confirm the crossing at the next width; while growing, a
    score more than ``fall_tol`` below the best so far stops the search
    ("non-monotone"); the steps check refits the bracketing widths (or, past
    the stop, the widest) with twice the steps. With ``search_again``, a
    search in which a width fails although a narrower one passed is searched
    again from ``start`` with twice the steps (its steps check: four times),
    and that search's result is the answer.

    Parameters
    ----------
    evaluate : callable
        ``evaluate(width, steps_multiplier) -> score``; multiplier 1 is the
        search, 2 the steps check (called only for the bracketing widths,
        after their multiplier-1 score); a search again asks for 2 and 4.
        NaN fails.
    start : int
        First width.
    target : float
    stop : int or None, default=None
        Widest width the search may evaluate (the confirmation included);
        None: 2**20, a cap so that a target no width reaches ends the
        search ("> stop").
    floor : int or None, default=None
        When ``start`` already passes, shrink by ``factor`` down to this
        width until one fails (then bisect); None: report "at start" at once.
    factor : float, default=2.0
        Growth factor (finite, > 1).
    refine : float, default=sqrt(2)
        Bisect until upper / lower <= ``refine`` (or neighbouring integers);
        the confirmation width is ``max(upper + 1, round(upper * refine))``.
    fall_tol : float or None, default=0.05
        While growing, a score more than this (>= 0) below the best so far
        stops the search as "non-monotone"; None: never.
    check_steps : bool, default=True
        Run the steps check (multiplier 2).
    multiple : int, default=1
        Every width evaluated is a multiple of it (``start``, ``stop`` and
        ``floor`` too, or a ``ValueError``): e.g. 2 for an encoder with
        rotary positions, whose ``d_model`` per head must be even. Each step
        goes to the nearest multiple, and bisection ends at neighbouring
        multiples.
    search_again : bool, default=False
        Search again with twice the steps where a width fails although a
        narrower one passed (the fourth set of the reproduction's verdicts;
        :func:`~sparse_token_estimators.model_selection.critical_width` does
        it by default). Non-monotone again: the status stays "non-monotone".

    Returns
    -------
    found : dict
        ``width``, ``bracket``, ``status``, ``reason``, ``scores`` (width ->
        score at the search's steps), ``doubled_scores`` (width -> score with
        twice those), ``steps_multiplier`` (the search's steps: 1, or 2 when
        searched again), ``settled``, ``upper_bound`` and ``widths`` (as in
        :class:`~sparse_token_estimators.model_selection.CriticalWidth`),
        ``searches`` (each search's own ``width``, ``bracket``, ``status``,
        ``reason``, ``scores``, ``doubled_scores`` and ``steps_multiplier``:
        one, or two when searched again).

    Examples
    --------
    >>> found = bracket_critical_width(lambda w, m: float(w >= 23), 4, target=0.5)
    >>> found["status"], found["bracket"]
    ('found', (19, 23))
    """
    steps = search_steps(start, target=target, stop=stop, floor=floor, factor=factor,
                         refine=refine, fall_tol=fall_tol, check_steps=check_steps,
                         multiple=multiple, search_again=search_again)
    return run_searches(lambda jobs: [evaluate(w, m) for _, w, m in jobs], {None: steps})[None]


def drive(search, evaluate):
    """Run one :func:`search_steps` generator, ``evaluate(request) -> score``; its result."""
    request = next(search)
    while True:
        try:
            request = search.send(evaluate(request))
        except StopIteration as end:
            return end.value
