"""The searches of a run go side by side, none waiting on another: their paths unchanged."""

import pytest

from sparse_token_estimators._critical_width import search_steps
from sparse_token_estimators.reproduce import SMOKE
from sparse_token_estimators.reproduce._bracket import protocol_search
from sparse_token_estimators.reproduce._dispatch import SimulatedExecutor
from sparse_token_estimators.reproduce._models import Fit
from sparse_token_estimators.reproduce._progress import Progress
from sparse_token_estimators.reproduce._run import run_searches


def score(fit):
    """A made-up validation R^2 that rises with the width, crossing 0.8 at 3 x seq_len
    at the best rate (0.03 of SMOKE's grid; 0.01 scores a tenth less)."""
    return min(1.0, fit.width / (3.75 * fit.seq_len)) - (0.1 if fit.lr == 0.01 else 0.0)


class Searching:
    """An experiment whose search brackets the width of ``score`` at ``seq_len``."""

    def __init__(self, name, seq_len, start=1, fail_after=None):
        self.name, self.seq_len, self.start, self.fail_after = name, seq_len, start, fail_after
        self.rounds = 0

    def search(self, config):
        search = search_steps(self.start, target=0.8, stop=1024, factor=2.0, refine=2 ** 0.5)
        rounds = protocol_search(
            config, search,
            lambda w, lr, times: Fit("fcn", w, self.seq_len, "population", n_train=8 * times,
                                     lr=lr),
            config.lr_grid("fcn"))
        request = next(rounds)
        try:
            while True:
                self.rounds += 1
                if self.fail_after is not None and self.rounds > self.fail_after:
                    raise RuntimeError(f"{self.name} failed")
                request = rounds.send((yield request))
        except StopIteration as stop:
            return stop.value


class NoSearch:
    name = "nothing"

    def search(self, config):
        return None


class Runner:
    """A fake job: the records of its members made up by ``score``; ``calls`` lists each
    job's fits (``fail``: every job raises KeyboardInterrupt)."""

    def __init__(self, fail=False):
        self.calls, self.items, self.fail = [], [], fail

    def __call__(self, config, members):
        self.calls.append([f for f, _, _ in members])
        self.items += [(f, s) for f, s, _ in members]
        if self.fail:
            raise KeyboardInterrupt
        return [(f, s, {"val_r2": score(f)}) for f, s, _ in members]


def run(experiments, runner, executor=None):
    records, used_by = {}, {}
    found = run_searches(SMOKE, experiments, records, used_by, Progress(0, enabled=False),
                         executor=executor, job=runner)
    return found, records, used_by


def simulated(n_workers, slow=()):
    """A virtual clock of ``n_workers`` workers: a job lasts 1 s, 1000 s if it holds a fit
    at a ``seq_len`` of ``slow``; ``submitted`` lists ``(time, fits)`` of every job."""
    pool = SimulatedExecutor(n_workers, lambda config, members: 1000.0 if any(
        f.seq_len in slow for f, _, _ in members) else 1.0)
    pool.submitted = []
    duration = pool.duration

    def noted(config, members):
        pool.submitted.append((pool.now, [f for f, _, _ in members]))
        return duration(config, members)

    pool.duration = noted
    return pool


def test_searches_find_what_they_find_alone_side_by_side():
    alone, time_alone = {}, {}
    for T in (4, 8, 16):
        pool = simulated(64)
        alone[T] = run([Searching(f"at {T}", T)], Runner(), pool)[0][f"at {T}"]
        time_alone[T] = pool.now
    runner, pool = Runner(), simulated(64)
    together = [Searching(f"at {T}", T) for T in (4, 8, 16)]
    found, records, used_by = run([NoSearch(), *together], runner, pool)
    for experiment in together:
        assert found[experiment.name] == alone[experiment.seq_len]
        assert found[experiment.name]["status"] == "found"
        assert set(found[experiment.name]["chosen_lr"].values()) == {0.03}
    assert "nothing" not in found
    # side by side on enough workers: as long as the longest alone, not their sum
    assert pool.now == max(time_alone.values()) < sum(time_alone.values())
    made = [f for fits in runner.calls for f in fits]
    assert set(used_by) == set(made)
    assert set(records) == {(f, s) for f in used_by for s in SMOKE.seeds()}


def test_a_search_goes_on_while_another_searchs_slow_fit_runs():
    """No round barrier: the fast search's later rounds are dispatched (and it ends) while
    the slow search's first fits still run."""
    pool = simulated(64, slow=(16,))
    found, _, _ = run([Searching("slow", 16), Searching("fast", 4)], Runner(), pool)
    fast = [t for t, fits in pool.submitted if fits[0].seq_len == 4]
    assert len(set(fast)) > 2 and max(fast) < 1000.0  # several rounds before the slow fit ends
    assert found["fast"]["status"] == found["slow"]["status"] == "found"


def test_jobs_go_costliest_first_and_a_group_splits_where_a_worker_would_idle():
    from sparse_token_estimators.reproduce._dispatch import split_jobs

    cheap = {(Fit("fcn", 4, 4, lr=lr), s): 0 for lr in (0.01, 0.03) for s in (0, 1)}
    costly = {(Fit("fcn", 4096, 64, "population", n_train=10**5, lr=0.01), 0): 0}
    jobs = split_jobs(SMOKE, {**cheap, **costly}, 2)
    assert [len(job) for job in jobs] == [1, 4]  # two groups for two workers
    assert jobs[0][0][0].width == 4096
    jobs = split_jobs(SMOKE, {**cheap, **costly}, 4)  # fewer groups than free workers
    assert [len(job) for job in jobs] == [1, 1, 1, 1] and jobs[0][0][0].width == 4096


def test_a_fit_two_searches_ask_for_is_made_once_and_named_in_experiment_order():
    runner = Runner()
    found, _, used_by = run([Searching("second", 8), Searching("first", 8)], runner)
    assert len(runner.items) == len(set(runner.items))
    assert all(used_by[f] == ["second", "first"] for f, _ in runner.items)
    assert found["first"] == found["second"]


def test_a_fit_already_made_is_not_made_again():
    runner = Runner()
    first = Fit("fcn", 1, 8, "population", n_train=8, lr=0.03)
    records = {(first, s): {"val_r2": score(first)} for s in SMOKE.seeds()}
    used_by = {first: ["planned"]}
    run_searches(SMOKE, [Searching("s", 8)], records, used_by, Progress(0, enabled=False),
                 job=runner)
    assert first not in [f for fits in runner.calls for f in fits]
    assert used_by[first] == ["planned", "s"]


def test_a_failing_search_is_raised():
    with pytest.raises(RuntimeError, match="bad failed"):
        run([Searching("ok", 16), Searching("bad", 4, fail_after=2)], Runner())


def test_an_error_while_fitting_is_raised_at_once():
    runner = Runner(fail=True)
    with pytest.raises(KeyboardInterrupt):
        run([Searching("a", 4), Searching("b", 8)], runner)
    assert len(runner.calls) == 1


def test_the_protocol_fits_every_rate_then_the_chosen_one_with_twice_the_steps():
    # val R^2 crossing 0.8 at width 12 at rate 0.03; 0.01 diverges (NaN) at every width
    def record(fit):
        if fit.lr == 0.01:
            return {"val_r2": float("nan")}
        return {"val_r2": (0.9 if fit.width >= 12 else 0.5) - (0.2 if fit.lr != 0.03 else 0)}

    made = []
    rounds = protocol_search(
        SMOKE, search_steps(8, target=0.8, stop=64),
        lambda w, lr, times: Fit("fcn", w, 4, "population", n_train=8 * times, lr=lr),
        (0.003, 0.01, 0.03))
    fits = next(rounds)
    try:
        while True:
            made.append(fits)
            fits = rounds.send({(f, s): record(f) for f in fits for s in SMOKE.seeds()})
    except StopIteration as stop:
        found = stop.value
    assert found["status"] == "found" and found["bracket"] == (11, 13)  # holds 12
    assert set(found["chosen_lr"].values()) == {0.03}  # never the NaN rate
    assert all(set(v.values()) == {0.03} for v in found["chosen_lr_per_seed"].values())
    once = [f for fits in made for f in fits if f.n_train == 8]
    twice = [f for fits in made for f in fits if f.n_train == 16]
    assert {f.lr for f in once} == {0.003, 0.01, 0.03}
    assert len(once) == 3 * len(found["scores"])  # every rate at every width
    # the steps check: both bracketing widths, at their chosen rate only
    lower, upper = found["bracket"]
    assert sorted((f.width, f.lr) for f in twice) == [(lower, 0.03), (upper, 0.03)]


def test_every_width_an_encoders_search_tries_is_one_the_encoder_accepts():
    """The quick run once stopped on d_model=11 for the sinusoidal encoder (it pairs a sin
    and a cos per frequency): a search brackets only widths its model can be built at."""
    from sparse_token_estimators.architectures import check_encoder_sizes
    from sparse_token_estimators.reproduce._bracket import protocol_searches
    from sparse_token_estimators.reproduce._models import MODELS

    keys = [key for key, spec in MODELS.items() if spec.family == "encoder"]
    searches = protocol_searches(SMOKE, (8,), keys, n_train=lambda T: 8,
                                 start=lambda key, T, before: 5, stop=lambda key, T: 63,
                                 floor=lambda key, T: 3)
    tried, records = set(), None
    try:
        while True:
            fits = searches.send(records)
            tried |= {(f.model, f.width) for f in fits}
            records = {(f, s): {"val_r2": min(1.0, f.width / 13.0)}
                       for f in fits for s in SMOKE.seeds()}
    except StopIteration as end:
        found = end.value
    assert {model for model, _ in tried} == set(keys)
    for model, width in tried:
        params = dict(MODELS[model].params)
        check_encoder_sizes(width, params["n_heads"], params["positional_encoding"])
    assert any(width % 2 for model, width in tried if model == "encoder_none")
    for key in ("encoder_sinusoidal", "encoder_rope"):
        assert found[8][key]["width"] % 2 == 0


def test_a_non_monotone_search_is_searched_again_with_every_rate_at_twice_the_steps():
    """The fourth set's first rule in the reproduction: the search again fits every rate at
    twice the sequences (and steps), its steps check the chosen rate at four times; the
    section's row records both searches, the points and the summary each search's steps."""
    from sparse_token_estimators.reproduce._bracket import critical_section, protocol_searches

    def val_r2(fit):
        # 64 sequences (1x): pe_dim 16 to 19 pass, wider fail; 128 and more: monotone from 12
        passes = fit.width >= 12 if fit.n_train >= 128 else 16 <= fit.width < 20
        return (0.9 if passes else 0.1) - (0.0 if fit.learning_rate(SMOKE) == 0.03 else 0.05)

    searches = protocol_searches(SMOKE, (8,), ["paper_scaling"], n_train=lambda T: 64,
                                 start=lambda key, T, before: 4, stop=lambda key, T: 64,
                                 floor=lambda key, T: 2, again=True)
    made, records, every = [], None, {}
    try:
        while True:
            fits = searches.send(records)
            made += fits
            records = {(f, s): {"val_r2": val_r2(f), "model_name": "paper's model",
                                "width": f.width, "n_train": f.n_train, "test_r2": val_r2(f),
                                "test_loss": 1.0, "test_loss_se": 0.0, "fit_cpu_s": 0.0}
                       for f in fits for s in SMOKE.seeds()}
            every.update(records)
    except StopIteration as end:
        found = end.value
    outcome = found[8]["paper_scaling"]
    assert outcome["status"] == "found" and outcome["width"] == 13
    assert [s["status"] for s in outcome["searches"]] == ["non-monotone", "found"]
    by_n = {n: {(f.width, f.learning_rate(SMOKE)) for f in made if f.n_train == n}
            for n in (64, 128, 256)}
    rates = set(SMOKE.lr_grid("transformer"))
    assert {lr for _, lr in by_n[128]} == rates  # the search again: every rate
    assert by_n[256] == {(11, 0.03), (13, 0.03)}  # its steps check: the chosen rate, 4x
    section = critical_section(SMOKE, found, every, "pe_dim", lambda row: {}, again=True)
    row = section["critical"][0]
    assert section["protocol"] == "fourth set"
    assert (row["star"], row["steps_multiplier"], row["searched_again"]) == (13, 2, True)
    assert (row["first_status"], row["first_star"]) == ("non-monotone", 16)
    assert row["settled"] and row["upper_bound"] == 13
    assert row["test_r2_mean"] == pytest.approx(0.9)  # at 2x, the search that found 13
    assert {p["steps_multiplier"] for p in section["points"]} == {1, 2, 4}
    assert all(p["steps_check"] == (p["steps_multiplier"] == 4) for p in section["points"])
    assert {s["steps_multiplier"] for s in section["summary"]} == {1, 2}
    # each seed on the 2x fits (on the 1x fits it would be 16)
    assert {p["star"] for p in section["critical_per_seed"]} == {13}


#: what a record holds about when and where it was made, not what the fit gave
TIMES = ("fit_s", "fit_cpu_s", "score_s", "started_at", "ended_at", "worker", "invocation",
         "n_workers", "r2_by_length", "trace")


def _numbers(record):
    return {k: repr(v) for k, v in record.items() if k not in TIMES}


@pytest.mark.slow
def test_records_are_those_of_the_round_runner_whatever_the_dispatch():
    """SMOKE over 3 seeds: the run on 2 worker processes, no round barrier, gives every
    record bit for bit as the round runner (``run_fits``: one joblib call for them all),
    and the same records and searches' outcomes as in this process, one job at a time."""
    from dataclasses import replace

    from sparse_token_estimators.reproduce._dispatch import (
        SerialExecutor,
        dispatch,
        process_executor,
    )
    from sparse_token_estimators.reproduce._fits import _pools, run_fits
    from sparse_token_estimators.reproduce._run import planned_fits, selected

    config = replace(SMOKE, n_seeds=3, n_jobs=2)

    def run(executor, n_workers):
        records, used_by = {}, planned_fits(config)
        found = dispatch(config, list(used_by), selected(config), records, used_by,
                         Progress(0, enabled=False), executor=executor, n_workers=n_workers,
                         pools=_pools(used_by))
        return found, records

    found, pooled = run(process_executor(2), 2)
    found_serial, serial = run(SerialExecutor(), 1)
    assert set(pooled) == set(serial) and len(pooled) > 200
    assert repr(found) == repr(found_serial)
    rounds = run_fits(config, {fit for fit, _ in pooled}, Progress(0, enabled=False))
    for key, record in pooled.items():
        assert _numbers(record) == _numbers(rounds[key]) == _numbers(serial[key])
    assert all(r["ended_at"] >= r["started_at"] for r in pooled.values())
    assert len({r["worker"] for r in pooled.values()}) == 2


def _first_request_and_widths(side_by_side, lens):
    from sparse_token_estimators.reproduce._bracket import protocol_searches

    searches = protocol_searches(SMOKE, lens, ["fcn"], n_train=lambda T: 8,
                                 start=lambda key, T, before: 4, stop=lambda key, T: 64,
                                 floor=lambda key, T: 2, side_by_side=side_by_side)
    first, records = None, None
    try:
        while True:
            fits = searches.send(records)
            first = first or {f.seq_len for f in fits}
            records = {(f, s): {"val_r2": 0.9 if f.width >= 2 * f.seq_len else 0.5}
                       for f in fits for s in SMOKE.seeds()}
    except StopIteration as end:
        return first, {T: end.value[T]["fcn"]["width"] for T in lens}


def test_searches_whose_start_reads_no_earlier_T_ask_for_every_T_at_once():
    """``side_by_side``: every T's first round is in the first request (the FCN's
    tightness, the scaling law); a chain asks for the next T only when the one before
    has ended. Each T's search finds the same width either way."""
    lens = (3, 4, 6)
    chain_first, chain_widths = _first_request_and_widths(False, lens)
    first, widths = _first_request_and_widths(True, lens)
    assert chain_first == {3} and first == set(lens)
    assert widths == chain_widths
    assert all(2 * T <= widths[T] < 3 * T for T in lens)  # the crossing at 2 T, bracketed
