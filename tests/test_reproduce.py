"""The reproduction's pipeline end to end at the SMOKE size (seconds), and its command line.

The numbers of a SMOKE run support nothing; what is checked here is that every
step runs, every number is where the tables, the results file and the figures
say, seeds are repeatable, and the command line does what it says. The logic of
each verdict is tested on constructed results in test_verdicts.py.
"""

import csv
import json
import math
import os
import re
import sys
from dataclasses import replace

import pytest

from sparse_token_estimators import __main__ as cli
from sparse_token_estimators import make_sparse_selection, reproduce
from sparse_token_estimators.positional import ENCODINGS
from sparse_token_estimators.reproduce import SMOKE
from sparse_token_estimators.reproduce._encodings import entries
from sparse_token_estimators.reproduce._experiment import find
from sparse_token_estimators.reproduce._models import Fit, training, width_parameter
from sparse_token_estimators.reproduce._population import population_grid
from sparse_token_estimators.reproduce._registry import EXPERIMENTS
from sparse_token_estimators.reproduce._report import fit_seconds, timing_rows
from sparse_token_estimators.reproduce._run import planned_fits


@pytest.fixture
def results(smoke_results):
    return smoke_results


def test_every_fit_is_made_once_per_seed(results):
    planned = planned_fits(SMOKE)
    seeds = {}
    for r in results["fits"]:
        fit = Fit(r["model"], r[width_parameter(r["model"])], r["seq_len"], r["data"],
                  r["n_train"], r["max_steps"])
        seeds.setdefault((fit, r["lr"]), []).append(r["seed"])
    # each fit made for each of its seeds, once (the architectures experiment's for its
    # seeds alone); the planned fits among them, and the searches'
    assert all(sorted(s) == fit.seeds(SMOKE) for (fit, _), s in seeds.items())
    made = set(seeds)
    for fit in planned:
        assert (replace(fit, n_train=fit.training_size(SMOKE)), fit.learning_rate(SMOKE)) \
            in made
    searched = [r for r in results["fits"] if set(r["used_by"]) & {"width_scaling"}]
    assert searched and len({r["lr"] for r in searched}) == len(SMOKE.lr_grid("transformer"))
    assert {r["seed"] for r in results["fits"]} == set(SMOKE.seeds())
    # experiments share fits: the length fits are width-separation fits too
    shared = [r for r in results["fits"] if len(r["used_by"]) > 1]
    assert any({"width_separation", "length_generalisation", "alignment"}
               <= set(r["used_by"]) for r in shared)


def test_claims_name_the_model_and_count_seeds(results):
    claims = {c["claim"]: c for c in results["claims"]}
    assert list(claims) == ["width separation", "length generalisation", "alignment",
                            "transformer width scaling", "FCN tightness",
                            "width separation on the population", "query-layout separation"]
    for c in claims.values():
        # verdict 7 on the architectures experiment's seeds alone (architecture_n_seeds)
        n = len(SMOKE.architecture_seeds()) if c["claim"] == "query-layout separation" \
            else SMOKE.n_seeds
        assert c["n_seeds"] == n and 0 <= c["seeds_supporting"] <= c["n_seeds"]
        if c["claim"] not in ("FCN tightness", "transformer width scaling",
                              "query-layout separation"):
            assert c["model"] == "transformer, paper's model (1 positional draw)"
    assert claims["transformer width scaling"]["model"].startswith(
        "transformer, paper's model (1 positional draw")
    assert claims["FCN tightness"]["model"].startswith("FCN")
    assert "beyond the paper" in claims["query-layout separation"]["model"]
    assert claims["alignment"]["sanity_checks"][0]["passed"]  # starts at W = 0


def test_paper_model_is_one_draw_and_the_ensemble_is_named_an_extension(results):
    models = results["models"]
    assert "1 positional draw" in models["paper"]["name"]
    assert "package extension" in models["ensemble"]["name"]
    assert models["paper"]["training"] == {"lr": 0.01, "max_epochs": 2, "batch_size": 16,
                                           "lr_ref_width": 0, "lr_schedule": "constant"}
    for section in ("width_separation", "length_generalisation", "alignment"):
        for row in results[section]["rows"]:
            assert row["model_name"] == models[row["model"]]["name"]


def test_per_length_curve_starts_at_q_and_reaches_the_largest_length(results):
    lengths = sorted({r["length"] for r in results["length_generalisation"]["rows"]})
    assert lengths[0] == SMOKE.n_selected and lengths[-1] == SMOKE.max_length()
    assert {SMOKE.seq_len * f for f in SMOKE.length_factors} <= set(lengths)
    per_model = [r for r in results["length_generalisation"]["rows"]
                 if r["model"] == "fixed" and r["length"] == SMOKE.seq_len]
    assert len(per_model) == SMOKE.n_seeds


def test_summaries_are_means_over_the_seed_rows(results):
    section = results["width_separation"]
    row = next(r for r in section["summary"] if r["model"] == "paper")
    values = [r["test_r2"] for r in section["rows"]
              if r["model"] == "paper" and r["width"] == row["width"]]
    assert row["n_seeds"] == len(values) == SMOKE.n_seeds
    assert row["test_r2_mean"] == pytest.approx(sum(values) / len(values))
    assert row["test_r2_min"] == min(values) and row["test_r2_max"] == max(values)


def test_alignment_record_starts_at_w_zero(results):
    rows = [r for r in results["alignment"]["rows"] if r["model"] == "paper"]
    for seed in SMOKE.seeds():
        trace = sorted((r for r in rows if r["seed"] == seed), key=lambda r: r["step"])
        assert (trace[0]["step"], trace[0]["sequences_seen"], trace[0]["alignment"]) \
            == (0, 0, 0.0)
        assert trace[-1]["sequences_seen"] == SMOKE.n_samples * SMOKE.paper_training.max_epochs


def test_width_separation_rows_carry_the_width_aware_bound(results):
    from sparse_token_estimators.theory import fcn_lower_bound

    for row in results["width_separation"]["rows"]:
        assert row["fcn_bound"] == fcn_lower_bound(SMOKE.seq_len, SMOKE.n_selected,
                                                   token_dim=SMOKE.token_dim, width=row["width"])


def test_runs_are_repeatable(results):
    again = reproduce.run(SMOKE, progress=False)

    def scores(res):  # everything but the times
        return [{k: v for k, v in r.items() if k not in (
            "fit_s", "fit_cpu_s", "score_s", "started_at", "ended_at", "worker", "invocation",
            "n_workers")}
                for r in res["fits"]]

    assert scores(again) == scores(results)
    other = reproduce.run(replace(SMOKE, seed=5, n_seeds=1), progress=False)
    assert other["fits"][0]["test_r2"] != results["fits"][0]["test_r2"]


def test_outputs_hold_every_plotted_number(results, tmp_path):
    pytest.importorskip("matplotlib")
    written = reproduce.write_outputs(results, tmp_path)
    names = {p.name for p in written}
    assert {"results.json", "summary.md", "width_separation.png", "length_generalisation.png",
            "length_vs_pe_dim.png", "alignment.png", "width_scaling.png", "population.png",
            "critical_widths.png", "fcn_tightness.csv",
            "sample_complexity.png", "encodings.png", "width_separation.csv", "fits.csv",
            "estimation_gap.csv", "sample_complexity_minimal.csv", "encodings.csv"} <= names
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["width_separation"]["rows"] == results["width_separation"]["rows"]
    with open(tmp_path / "length_generalisation.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(results["length_generalisation"]["rows"])
    assert {r["seed"] for r in rows} == {str(s) for s in SMOKE.seeds()}  # per seed
    for path in written:  # every row of every table names its model
        if path.suffix == ".csv":
            with open(path) as fh:
                header = next(csv.reader(fh))
            assert "model" not in header or "model_name" in header, path.name
    summary = (tmp_path / "summary.md").read_text()
    assert f"**{SMOKE.n_seeds} seeds**" in summary
    assert "summed over the d coordinates" in summary  # the unit
    for claim in results["claims"]:
        assert claim["claim"] in summary
    assert "![alignment](alignment.png)" in summary


def test_summary_is_written_again_from_results_json_read_back(results, tmp_path):
    # results.json is strict JSON: a NaN slope is written as null. The summary from the
    # file read back is the one written beside it, the missing slopes in words
    reproduce.write_outputs(results, tmp_path, plots=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    growth = saved["sample_complexity"]["growth"]
    assert any(g["slope"] is None for g in growth)  # SMOKE interpolates n* at no T
    summary = reproduce.summary_markdown(saved, figures=False)
    assert summary == (tmp_path / "summary.md").read_text()
    assert "(no slope: n* was interpolated at fewer than two T)" in summary
    assert not re.search(r"\bnan\b", summary, re.IGNORECASE)


def test_population_and_fixed_sample_fits_side_by_side(results):
    section = results["population"]
    grid = population_grid(SMOKE)
    for model, widths in grid.items():
        for width in widths:
            for data in ("population", "sample"):
                rows = [r for r in section["rows"] if r["model"] == model and r["data"] == data
                        and r[width_parameter(model)] == width]
                assert len(rows) == SMOKE.n_seeds
                assert all(r["n_train"] == SMOKE.n_train(SMOKE.seq_len) for r in rows)
    # the fixed-sample side is the width-separation fit itself (shared)
    fits = {(f["model"], f["width"], f["data"], f["seed"]): f for f in results["fits"]
            if f["seq_len"] == SMOKE.seq_len and not f["max_steps"]}
    for row in section["rows"]:
        used = fits[row["model"], row["width"], row["data"], row["seed"]]["used_by"]
        assert ("width_separation" in used) == (row["data"] == "sample")
    # the estimation gap is the held-out loss on the sample minus on the population
    for gap in section["gaps"]:
        pop, sample = (find(section["rows"], model=gap["model"], width=gap["width"],
                            seed=gap["seed"], data=data) for data in ("population", "sample"))
        assert gap["estimation_gap"] == sample["test_loss"] - pop["test_loss"]
        assert pop["test_loss"] != sample["test_loss"]  # different data, different fits


def test_population_fit_trains_on_fresh_sequences(monkeypatch):
    from sparse_token_estimators.reproduce import _fits

    seen = []
    original = _fits.SparseSelectionStream.batches

    def batches(stream, *args, **kwargs):
        for X, y in original(stream, *args, **kwargs):
            seen.append(X[0, 0, 0].item())
            yield X, y

    monkeypatch.setattr(_fits.SparseSelectionStream, "batches", batches)
    fit = Fit("fcn", 4, SMOKE.seq_len, "population")
    _, _, scores = _fits.fit_job(SMOKE, fit, 0)
    epochs, steps = SMOKE.fcn_training.max_epochs, SMOKE.fcn_training.steps(SMOKE.n_samples)
    assert len(seen) == steps and len(set(seen)) == steps  # every batch is new
    assert math.isfinite(scores["test_loss"]) and epochs == 2


def test_learning_curve_fits_take_the_same_steps_at_every_size(results):
    section = results["sample_complexity"]
    for T in SMOKE.sample_seq_lens():
        for model in ("paper", "ensemble", "fcn"):
            rows = [r for r in section["rows"] if r["model"] == model and r["seq_len"] == T]
            sizes = SMOKE.sample_fcn_sizes if model == "fcn" else SMOKE.sample_sizes
            assert sorted({r["n_train"] for r in rows}) == list(sizes)
            assert {r["steps"] for r in rows} == {training(model, SMOKE).steps(
                SMOKE.sample_budget)}
            assert len(rows) == len(sizes) * SMOKE.n_seeds
            assert all(math.isfinite(r["test_r2"]) for r in rows)
            # R^2 over a training set too small for the statistic is left out, not shown
            for r in rows:
                small = r["n_train"] * SMOKE.token_dim < 200
                assert (r["train_r2"] is None) == small
                assert small or math.isfinite(r["train_r2"])
    assert {(r["model"], r["seq_len"]) for r in section["minimal"]} == {
        (m, T) for m in ("paper", "ensemble", "fcn") for T in SMOKE.sample_seq_lens()}


def test_a_learning_curve_fit_stops_at_its_budget():
    fit = Fit("paper", 4, SMOKE.seq_len, n_train=2, max_steps=5)
    X, y = make_sparse_selection(2, SMOKE.seq_len, SMOKE.token_dim, SMOKE.n_selected,
                                 random_state=0)
    est = fit.estimator(SMOKE, seed=0).fit(X, y)
    assert sum(len(epoch["batches"]) for epoch in est.history_) == 5  # not max_epochs of 2
    big = Fit("fcn", 4, SMOKE.seq_len, n_train=64, max_steps=5).estimator(SMOKE, 0)
    X, y = make_sparse_selection(64, SMOKE.seq_len, SMOKE.token_dim, SMOKE.n_selected,
                                 random_state=0)
    assert sum(len(e["batches"]) for e in big.fit(X, y).history_) == 5


def test_encodings_cover_every_encoding_on_the_length_grid(results):
    section = results["encodings"]
    assert {r["encoding"] for r in section["rows"]} == set(ENCODINGS)
    assert sorted({r["length"] for r in section["rows"]}) == SMOKE.length_grid()
    assert {r["model"] for r in section["rows"]} == {m for _, m in entries(SMOKE)}
    # the stochastic and fixed fits are the length-generalisation ones
    for model in ("paper", "fixed", "ensemble"):
        ours = sorted((r["seed"], r["length"], r["r2"]) for r in section["rows"]
                      if r["model"] == model)
        theirs = sorted((r["seed"], r["length"], r["r2"])
                        for r in results["length_generalisation"]["rows"]
                        if r["model"] == model)
        assert ours == theirs
    without = entries(replace(SMOKE, randomized_ensemble=False))
    assert ("randomized", "randomized_ensemble") not in without and len(without) == 6


def test_summary_reports_the_new_experiments_as_measured(results):
    summary = reproduce.summary_markdown(results, figures=False)
    for title in ("Approximation against estimation", "Sample complexity (measured, beyond "
                  "the paper)", "Positional encodings compared (measured, not judged)"):
        assert f"## {title}" in summary
    assert summary.count("Measured (beyond the paper):") == 1
    for encoding in ENCODINGS:
        assert f"- **{encoding}** (" in summary
    assert "estimation gap" in summary and "StepBudget" in summary


def test_time_per_experiment_counts_shared_and_own_fits(results):
    per_experiment, per_model = timing_rows(results)
    rows = {r["experiment"]: r for r in per_experiment}
    assert list(rows) == [e.name for e in EXPERIMENTS]
    for name, row in rows.items():
        used = [f for f in results["fits"] if name in f["used_by"]]
        own = [f for f in used if f["used_by"] == [name]]
        assert row["fits"] == len(used) and row["shared_fits"] == len(used) - len(own)
        assert row["own_cpu_s"] == pytest.approx(sum(fit_seconds(f) for f in own))
    # nothing else fits learning curves; their time is their workers' wall time
    assert rows["sample_complexity"]["own_cpu_s"] == rows["sample_complexity"]["cpu_s"] > 0
    assert sum(r["fits"] for r in per_model) == len(results["fits"])
    assert {r["data"] for r in per_model} == {"sample", "population",
                                              "sample (learning curve)"}


@pytest.fixture
def smoke_scale(monkeypatch):
    monkeypatch.setitem(reproduce.SCALES, "quick", SMOKE)


def test_cli_writes_outputs(smoke_scale, tmp_path, capsys):
    assert cli.main(["--quick", "--out", str(tmp_path), "--no-plots", "--no-progress",
                     "--seed", "3", "--seeds", "2", "--n-samples", "48"]) == 0
    out = capsys.readouterr().out
    assert "length generalisation:" in out and "of 2 on their own" in out
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["config"]["seed"] == 3 and saved["config"]["n_samples"] == 48
    assert saved["config"]["n_seeds"] == 2
    assert {r["seed"] for r in saved["fits"]} == {3, 4}
    assert not (tmp_path / "alignment.png").exists()


def test_cli_sends_the_searches_to_dask(smoke_scale, tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        assert cli.main(["--out", str(tmp_path), "--no-plots", "--no-progress",
                         "--seeds", "1", "--n-jobs", "-1",
                         "--scheduler", cluster.scheduler_address]) == 0
        assert "running the searches on <Client" in capsys.readouterr().err
    assert (tmp_path / "summary.md").exists()


def test_cli_explains_missing_extras(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(SystemExit, match=r"pip install -e '\.\[plots\]'"):
        cli.main(["--out", str(tmp_path)])
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    with pytest.raises(SystemExit, match=r"pip install -e '\.\[distributed\]'"):
        cli.main(["--out", str(tmp_path), "--no-plots", "--scheduler", "tcp://nowhere:1"])


def test_plotting_explains_missing_matplotlib(monkeypatch, results, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install -e '\.\[plots\]'"):
        reproduce.save_figures(results, tmp_path)


def test_config_refuses_length_factors_without_the_judged_lengths():
    # the length claim reads R^2 at T and 4T: without them it has nothing to judge
    with pytest.raises(ValueError, match="must include 1 and 4"):
        replace(SMOKE, length_factors=(1, 2))
    assert replace(SMOKE, length_factors=(1, 4, 16)).length_factors == (1, 4, 16)


@pytest.mark.parametrize("searched, fragment", [
    (("encoder_rope", "transformer"), "(unknown: ['transformer'])"),
    (("gru", "gru"), "must name each architecture once"),
])
def test_config_refuses_a_query_search_it_cannot_make(searched, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        replace(SMOKE, query_searched=searched)


def test_mamba_is_the_catalogues_state_space_model_searched_by_d_model():
    from sparse_token_estimators import SparseTokenSSM
    from sparse_token_estimators.reproduce._models import MODELS, width_parameter

    est = Fit("query_mamba", 6, 4, "population").estimator(SMOKE, 0)
    assert isinstance(est, SparseTokenSSM) and est.d_model == 6
    assert (MODELS["mamba"].family, width_parameter("query_mamba")) == ("ssm", "d_model")
    # its rates: the recurrent nets' unless lr_grids gives the "ssm" family its own
    assert SMOKE.lr_grid("ssm") == SMOKE.lr_grid("rnn")
    own = replace(SMOKE, lr_grids=(*SMOKE.lr_grids, ("ssm", (0.001, 0.01))))
    assert own.lr_grid("ssm") == (0.001, 0.01) and own.lr_grid("rnn") == SMOKE.lr_grid("rnn")


def test_the_configuration_knows_the_catalogues_query_models():
    # the configuration checks query_searched without importing torch: its list of
    # names is the catalogue's
    from sparse_token_estimators.reproduce import _config, _models

    assert _config.QUERY_MODELS == _models.QUERY_MODELS


def test_a_query_layout_fit_builds_its_estimator_and_data_in_that_layout():
    from sparse_token_estimators.reproduce._data import task

    for model in ("query_paper", "query_encoder_rope", "query_gru", "query_mamba", "query_fcn"):
        est = Fit(model, 4, 4, "population").estimator(SMOKE, 0)
        assert (est.layout, est.n_selected) == ("query", SMOKE.n_selected)
    assert Fit("gru", 4, 4).estimator(SMOKE, 0).layout == "indicator"
    X_q, y_q = task(SMOKE, 4, 5, "test", 0, "query")
    X_i, y_i = task(SMOKE, 4, 5, "test", 0)
    assert X_q.shape == (5, 4 + SMOKE.n_selected, SMOKE.token_dim + 1)
    assert (y_q == y_i).all() and (X_q[:, :4, :-1] == X_i[:, :, :-1]).all()


def test_scaling_training_scales_adams_rate_as_one_over_sqrt_pe_dim():
    train = reproduce.QUICK.scaling_training
    assert train.lr_ref_width
    wide = Fit("paper_scaling", 4 * train.lr_ref_width, 64, "population")
    assert wide.estimator(reproduce.QUICK, 0).lr == pytest.approx(train.lr / 2)
    # the other trainings keep one rate for every width
    assert Fit("paper", 128, 10).estimator(reproduce.QUICK, 0).lr \
        == reproduce.QUICK.paper_training.lr


def test_a_worker_that_imports_only_the_models_knows_every_model():
    # joblib's process workers unpickle a Fit by importing reproduce._models alone;
    # every model is declared there, and importing the experiments changes nothing
    import subprocess

    from sparse_token_estimators.reproduce import _registry  # noqa: F401 - every experiment
    from sparse_token_estimators.reproduce._models import MODELS

    code = ("from sparse_token_estimators.reproduce._models import MODELS; "
            "print(' '.join(MODELS))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.stdout.split() == list(MODELS), done.stderr
    assert "encoder_fixed" in MODELS and "randomized_ensemble" in MODELS


def test_width_separation_at_every_T_of_the_searches(results):
    """The summary's separation table: the transformer's d + pe_dim* at each T of the
    scaling law, the FCN's m* where searched, the bound's width at every T."""
    import copy

    from sparse_token_estimators.reproduce._fcn_tightness import separation_lines
    from sparse_token_estimators.theory import fcn_critical_width

    results = copy.deepcopy(results)
    d, q = SMOKE.token_dim, SMOKE.n_selected
    results["width_scaling"]["critical"] = [
        {"seq_len": 4, "star": 3, "lower": 2, "status": "found"},
        {"seq_len": 8, "star": None, "lower": 8, "status": "> stop"}]
    results["fcn_tightness"]["critical"] = [{"seq_len": 4, "star": 9, "lower": 6,
                                             "status": "found"}]
    lines = separation_lines(results)
    table = [line for line in lines if line.startswith("|")][2:]
    assert table == [
        f"| 4 | {4 * d} | {d + 3} | 9 | {fcn_critical_width(4, q, d, 0.8)} |",
        f"| 8 | {8 * d} | > {d + 8} | not searched | {fcn_critical_width(8, q, d, 0.8)} |"]
    assert "narrowest FCN the bound allows at every T" in " ".join(lines)


def test_a_results_config_is_rebuilt_into_the_run_configuration(results):
    from sparse_token_estimators.reproduce import ReproductionConfig

    saved = json.loads(json.dumps(results["config"]))  # as results.json gives it back
    assert ReproductionConfig.from_dict(saved) == SMOKE
    assert ReproductionConfig.from_dict(results["config"]) == SMOKE
    with pytest.raises(ValueError, match=r"has no field \['colour'\]"):
        ReproductionConfig.from_dict({**saved, "colour": "blue"})


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_config_refuses_an_architecture_n_seeds_that_is_no_count(bad):
    with pytest.raises(ValueError, match="architecture_n_seeds must be None .every seed of "
                                         "the run. or a whole number of seeds >= 1"):
        replace(SMOKE, architecture_n_seeds=bad)


def test_the_architectures_experiment_takes_the_first_seeds_of_the_run():
    from sparse_token_estimators.reproduce import PAPER, QUICK
    from sparse_token_estimators.reproduce._models import MODELS, model_seeds

    # the quick run's slice: 1 of its 2 seeds; the paper scale: every seed
    assert (QUICK.n_seeds, QUICK.architecture_n_seeds, QUICK.architecture_seeds()) == \
        (2, 1, [0])
    assert PAPER.architecture_n_seeds is None and PAPER.architecture_seeds() == [0, 1, 2]
    assert replace(QUICK, seed=7).architecture_seeds() == [7]
    QUICK = replace(QUICK, n_seeds=3, architecture_n_seeds=2)  # noqa: N806 (two of three)
    # never more than the run has: --seeds 1 at the quick scale is one seed everywhere
    assert replace(QUICK, n_seeds=1).architecture_seeds() == [0]
    # every model trained as the architectures are (the query layout's paper's model and
    # FCN too) takes those seeds; every other model, the run's
    for key, spec in MODELS.items():
        expected = [0, 1] if spec.training == "architecture_training" else [0, 1, 2]
        assert model_seeds(key, QUICK) == Fit(key, 4, 10).seeds(QUICK) == expected, key
    assert model_seeds("query_paper", QUICK) == model_seeds("query_fcn", QUICK) == [0, 1]


def test_a_results_file_from_before_architecture_n_seeds_loads_with_every_seed():
    from dataclasses import asdict

    from sparse_token_estimators.reproduce import QUICK, ReproductionConfig
    from sparse_token_estimators.reproduce._records import config_identity

    old = asdict(replace(QUICK, n_seeds=3, architecture_n_seeds=None))
    del old["architecture_n_seeds"]  # as a results.json written before the field holds it
    config = ReproductionConfig.from_dict(json.loads(json.dumps(old)))
    assert config.architecture_n_seeds is None
    assert config.architecture_seeds() == config.seeds() == [0, 1, 2]
    # no record's numbers depend on it (a record is one fit at one seed): a record folder
    # keeps its configuration whatever it says, the folders from before it included
    assert config_identity(QUICK) == config_identity(config) == \
        config_identity(replace(config, architecture_n_seeds=1))
    assert "architecture_n_seeds" not in config_identity(QUICK)
