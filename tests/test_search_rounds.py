"""The searches of a run go side by side: their rounds merged, their paths unchanged."""

import threading

import pytest

from sparse_token_estimators.reproduce import SMOKE, _run
from sparse_token_estimators.reproduce._bracket import BracketSearch, run_brackets
from sparse_token_estimators.reproduce._fits import Fit
from sparse_token_estimators.reproduce._progress import Progress


def score(fit):
    """A made-up validation R^2 that rises with the width, crossing 0.8 at 3 x seq_len."""
    return min(1.0, fit.width / (3.75 * fit.seq_len))


class Searching:
    """An experiment whose search brackets the width of ``score`` at ``seq_len``."""

    def __init__(self, name, seq_len, start=1, fail_after=None):
        self.name, self.seq_len, self.start, self.fail_after = name, seq_len, start, fail_after
        self.found, self.rounds = None, 0

    def fit(self, width):
        return Fit("fcn", width, self.seq_len, "population", n_train=8)

    def search(self, config, fit_round):
        def evaluate(widths):
            self.rounds += 1
            if self.fail_after is not None and self.rounds > self.fail_after:
                raise RuntimeError(f"{self.name} failed")
            fits = [self.fit(w) for _, w in widths]
            records = fit_round(fits)
            return [sum(records[f, s]["val_r2"] for s in config.seeds()) / config.n_seeds
                    for f in fits]

        search = BracketSearch(self.start, target=0.8, stop=1024, factor=2.0, refine=2 ** 0.5)
        self.found = run_brackets(evaluate, {self.seq_len: search})[self.seq_len]


class NoSearch:
    name = "nothing"

    def search(self, config, fit_round):
        pass


@pytest.fixture
def calls(monkeypatch):
    """Each run_fits call's fits; the records are made up by ``score``."""
    made = []

    def fake_run_fits(config, fits, progress):
        assert threading.current_thread() is threading.main_thread()
        made.append(list(fits))
        return {(f, s): {"val_r2": score(f)} for f in fits for s in config.seeds()}

    monkeypatch.setattr(_run, "run_fits", fake_run_fits)
    return made


def run(experiments):
    records, used_by = {}, {}
    _run._searches(SMOKE, experiments, records, used_by, Progress(0, enabled=False))
    return records, used_by


def test_searches_find_what_they_find_alone_in_fewer_rounds(calls):
    alone = {}
    for T in (4, 8, 16):
        experiment = Searching(f"at {T}", T)
        run([experiment])
        alone[T] = experiment.found
    n_alone = len(calls)
    calls.clear()
    together = [Searching(f"at {T}", T) for T in (4, 8, 16)]
    records, used_by = run([NoSearch(), *together])
    for experiment in together:
        assert experiment.found == alone[experiment.seq_len]
        assert experiment.found.status == "found"
    # one round holds the fits of every search still running
    assert len(calls) == max(e.rounds for e in together) < n_alone
    assert {f.seq_len for f in calls[0]} == {4, 8, 16}
    assert all(len(set(fits)) == len(fits) for fits in calls)
    assert set(used_by) == {f for fits in calls for f in fits}
    assert set(records) == {(f, s) for f in used_by for s in SMOKE.seeds()}


def test_a_fit_two_searches_ask_for_is_made_once_and_named_in_experiment_order(calls):
    first, second = Searching("first", 8), Searching("second", 8)
    _, used_by = run([second, first])
    made = [f for fits in calls for f in fits]
    assert len(made) == len(set(made))
    assert all(used_by[f] == ["second", "first"] for f in made)
    assert first.found == second.found


def test_a_failing_search_stops_the_others_and_is_raised(calls):
    ok, bad = Searching("ok", 16), Searching("bad", 4, fail_after=2)
    with pytest.raises(RuntimeError, match="bad failed"):
        run([ok, bad])
    assert ok.found is None  # stopped, not left waiting
    assert not [t for t in threading.enumerate() if t.name.startswith("search:")]


def test_an_error_while_fitting_releases_every_search(monkeypatch):
    def broken(config, fits, progress):
        raise KeyboardInterrupt

    monkeypatch.setattr(_run, "run_fits", broken)
    searches = [Searching("a", 4), Searching("b", 8)]
    with pytest.raises(KeyboardInterrupt):
        run(searches)
    assert all(s.found is None for s in searches)
    assert not [t for t in threading.enumerate() if t.name.startswith("search:")]
