"""The bracketing search on synthetic monotone scores: exact widths and brackets."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_token_estimators.reproduce._bracket import BracketSearch, lockstep


def run_brackets(evaluate, searches):
    """Drive ``lockstep(searches)`` to its end, one call of ``evaluate`` per round."""
    rounds = lockstep(searches)
    try:
        jobs = next(rounds)
        while True:
            jobs = rounds.send(evaluate(jobs))
    except StopIteration as stop:
        return stop.value


def bracket_crossing(evaluate, start, **kwargs):
    """One search, ``evaluate(widths) -> scores``."""
    search = BracketSearch(start, **kwargs)
    return run_brackets(lambda jobs: evaluate([w for _, w in jobs]), {None: search})[None]


def step(crossing):
    """Score 1 from ``crossing`` on, 0 below: the crossing is exactly known."""
    calls = []

    def evaluate(widths):
        calls.append(list(widths))
        return [1.0 if w >= crossing else 0.0 for w in widths]

    evaluate.calls = calls
    return evaluate


def test_grows_then_bisects_to_the_refinement():
    evaluate = step(23)
    r = bracket_crossing(evaluate, 4, target=0.5)
    assert r.status == "found"
    assert (r.lower, r.upper, r.width) == (19, 23, 23)
    assert [w for w, _ in r.evaluated] == [4, 8, 16, 19, 23, 32]
    assert r.ratio <= math.sqrt(2)
    # one width a round: growth 4, 8, 16, 32, then bisection 23, 19
    assert evaluate.calls == [[4], [8], [16], [32], [23], [19]]


def test_fine_refinement_finds_the_exact_integer_crossing():
    r = bracket_crossing(step(37), 4, target=0.5, refine=1.001)
    assert (r.lower, r.width) == (36, 37)


def test_continuous_score_is_bracketed_around_its_crossing():
    # score w / 100 reaches 0.3 at w = 30: the bracket holds it
    r = bracket_crossing(lambda ws: [w / 100 for w in ws], 4, target=0.3)
    assert r.lower < 30 <= r.width and r.width / r.lower <= math.sqrt(2)


def test_beyond_stop_evaluates_stop_and_reports_none():
    r = bracket_crossing(step(1000), 4, target=0.5, stop=20)
    assert r.status == "beyond stop" and r.width is None and r.upper is None
    assert [w for w, _ in r.evaluated] == [4, 8, 16, 20]
    assert r.lower == 20 and r.ratio == math.inf


def test_stop_reached_on_the_last_growth_step_is_found():
    r = bracket_crossing(step(20), 4, target=0.5, stop=20)
    assert r.status == "found" and r.width == 20 and r.lower == 16


def test_at_start_without_floor():
    evaluate = step(2)
    r = bracket_crossing(evaluate, 4, target=0.5)
    assert (r.status, r.width, r.lower) == ("at start", 4, None)
    assert evaluate.calls == [[4]]


def test_floor_follows_a_passing_start_downwards():
    r = bracket_crossing(step(5), 32, target=0.5, floor=1)
    assert r.status == "found" and r.lower < 5 <= r.width and r.ratio <= math.sqrt(2)
    r = bracket_crossing(step(1), 32, target=0.5, floor=2)
    assert (r.status, r.width) == ("at start", 2)


def test_nan_scores_fail():
    r = bracket_crossing(lambda ws: [math.nan if w < 8 else 1.0 for w in ws], 2, target=0.5)
    assert r.status == "found" and (r.lower, r.width) == (6, 8)


def test_no_width_is_evaluated_twice_and_widths_are_integers():
    evaluate = step(3)
    r = bracket_crossing(evaluate, 1, target=0.5, factor=1.5, refine=1.01)
    flat = [w for call in evaluate.calls for w in call]
    assert len(flat) == len(set(flat)) and all(isinstance(w, int) for w in flat)
    assert (r.lower, r.width) == (2, 3)


@settings(max_examples=60, deadline=None)
@given(crossing=st.integers(1, 5000), start=st.integers(1, 64),
       refine=st.sampled_from([1.01, 2 ** 0.25, 2 ** 0.5, 2.0]))
def test_bracket_always_holds_the_crossing(crossing, start, refine):
    r = bracket_crossing(step(crossing), start, target=0.5, refine=refine, floor=1)
    assert r.width is not None
    if r.status == "at start":
        assert r.width == 1 == crossing
    else:
        assert r.lower < crossing <= r.width
        assert r.width / r.lower <= refine or r.width - r.lower == 1


def test_lock_step_searches_share_rounds():
    crossings = {"a": 10, "b": 40, "c": 3}
    rounds = []

    def evaluate(jobs):
        rounds.append(jobs)
        return [float(w >= crossings[k]) for k, w in jobs]

    found = run_brackets(evaluate, {k: BracketSearch(8, target=1.0, refine=1.01)
                                    for k in crossings})
    assert {k: b.width for k, b in found.items()} == {"a": 10, "b": 40, "c": 8}
    assert found["c"].status == "at start"
    assert rounds[0] == [("a", 8), ("b", 8), ("c", 8)]
    # each round evaluates every unfinished search once
    assert all(len({k for k, _ in jobs}) == len(jobs) for jobs in rounds)
    solo = bracket_crossing(step(40), 8, target=1.0, refine=1.01)
    assert len(rounds) == len(solo.evaluated)


@pytest.mark.parametrize("kwargs, match", [
    ({"start": 0}, "start"), ({"start": 2.5}, "start"), ({"stop": 2}, "stop"),
    ({"floor": 9}, "floor"), ({"factor": 1.0}, "factor"), ({"refine": 0.5}, "refine"),
])
def test_bad_arguments_are_refused(kwargs, match):
    args = {"start": 4, "target": 0.5, **kwargs}
    with pytest.raises(ValueError, match=match):
        BracketSearch(args.pop("start"), **args)


def test_score_count_must_match():
    with pytest.raises(ValueError, match="scores"):
        bracket_crossing(lambda ws: [], 4, target=0.5)
