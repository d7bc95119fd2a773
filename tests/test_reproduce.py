"""A reduced reproduction: the direction of each claim, at sizes that run in seconds.

The issue's thresholds (R^2 >= 0.93 at T, ...) need the --quick sizes; here
each claim is checked as an inequality between the two sides it compares.
"""

import csv
import json
import math
import sys

import pytest

from sparse_token_estimators import __main__ as cli
from sparse_token_estimators import report, reproduce
from sparse_token_estimators.reproduce import ReproductionConfig

TINY = ReproductionConfig(
    seq_len=8, token_dim=4, n_selected=2, n_samples=3000, n_test=500, pe_dims=(8,),
    fcn_span=(0.25, 4.0), length_pe_dim=32, length_factors=(1, 4),
    scaling_factors=(0.5, 1.0), target_r2=0.6, n_jobs=1, device="cpu",
)
# Smaller still, for the plumbing (files, CLI, Dask): numbers do not matter there.
PLUMBING = ReproductionConfig(
    seq_len=4, token_dim=2, n_selected=2, n_samples=200, n_test=50, pe_dims=(2,),
    fcn_span=(1.0, 2.0), length_pe_dim=8, length_factors=(1, 2), scaling_factors=(1.0,),
    n_jobs=1, device="cpu",
)


@pytest.fixture(scope="module")
def results():
    return reproduce.run(TINY, progress=False)


def _r2(rows, **match):
    return next(r["test_r2"] for r in rows if all(r[k] == v for k, v in match.items()))


def test_width_separation_direction(results):
    rows = results["width_separation"]
    threshold = results["theory"]["fcn_width_threshold"]
    width = TINY.token_dim + TINY.pe_dims[0]  # the transformer's width, below T*d
    assert width < threshold
    assert _r2(rows, model="transformer", width=width) > _r2(rows, model="fcn", width=width) + 0.3
    fcn = sorted((r["width"], r["test_r2"]) for r in rows if r["model"] == "fcn")
    assert fcn[-1][0] >= 4 * threshold and fcn[-1][1] > fcn[0][1] + 0.3


def test_length_generalisation_direction(results):
    rows = results["length_generalisation"]
    assert _r2(rows, encoding="fixed", factor=1) > 0.9  # fixed fits at T ...
    # ... but only the stochastic encoding carries over to 4T
    assert _r2(rows, encoding="stochastic", factor=4) > _r2(rows, encoding="fixed", factor=4) + 0.2
    assert {r["seq_len"] for r in rows} == {TINY.seq_len, 4 * TINY.seq_len}


def test_alignment_direction(results):
    stochastic = [r["alignment"] for r in results["alignment"] if r["encoding"] == "stochastic"]
    fixed = [r["alignment"] for r in results["alignment"] if r["encoding"] == "fixed"]
    assert stochastic[-1] > stochastic[0] and stochastic[-1] > 0.9
    assert stochastic[-1] > fixed[-1] + 0.3


def test_width_scaling_direction(results):
    minimal = results["width_scaling"]["minimal"]
    fcn = {r["seq_len"]: r["minimal_width"] or math.inf for r in minimal if r["model"] == "fcn"}
    pe = {r["seq_len"]: r["minimal_width"] for r in minimal if r["model"] == "transformer"}
    assert sorted(fcn) == [4, 8]
    assert fcn[8] > fcn[4]  # the FCN needs more width as T grows
    assert all(TINY.token_dim + pe[T] < fcn[T] for T in fcn)  # the transformer less
    # T = seq_len reuses the width-separation fits instead of refitting
    points = [r for r in results["width_scaling"]["points"] if r["seq_len"] == TINY.seq_len]
    assert len(points) == len(results["width_separation"])


def test_claims_follow_the_thresholds(results):
    claims = {c["claim"]: c for c in results["claims"]}
    assert list(claims) == ["width separation", "length generalisation", "alignment",
                            "width scaling"]
    assert claims["alignment"]["supported"] and claims["width scaling"]["supported"]
    strict = dict(report.THRESHOLDS, alignment_final=1.01)
    assert not {c["claim"]: c for c in report.assess_claims(results, strict)}[
        "alignment"]["supported"]


def test_runs_are_repeatable():
    def scores():  # everything but the fit times
        return [{k: v for k, v in row.items() if k != "fit_time_s"}
                for row in reproduce.width_separation(PLUMBING)]

    assert scores() == scores()


def test_outputs_hold_every_plotted_number(results, tmp_path):
    pytest.importorskip("matplotlib")
    written = report.write_outputs(results, tmp_path)
    names = {p.name for p in written}
    assert {"results.json", "summary.md", "width_separation.png", "length_generalisation.png",
            "alignment.png", "width_scaling.png", "width_separation.csv"} <= names
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["width_separation"] == results["width_separation"]
    with open(tmp_path / "length_generalisation.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(results["length_generalisation"])
    summary = (tmp_path / "summary.md").read_text()
    for claim in results["claims"]:
        assert claim["claim"] in summary
    assert "![alignment](alignment.png)" in summary


def test_cli_writes_outputs(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(reproduce.SCALES, "quick", PLUMBING)
    assert cli.main(["--quick", "--out", str(tmp_path), "--no-plots", "--no-progress",
                     "--seed", "3", "--n-samples", "150"]) == 0
    out = capsys.readouterr().out
    assert "length generalisation:" in out and str(tmp_path) in out
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["config"]["seed"] == 3 and saved["config"]["n_samples"] == 150
    assert not (tmp_path / "alignment.png").exists()


def test_cli_sends_the_searches_to_dask(monkeypatch, tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setitem(reproduce.SCALES, "quick", PLUMBING)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        assert cli.main(["--out", str(tmp_path), "--no-plots", "--no-progress",
                         "--n-jobs", "-1", "--scheduler", cluster.scheduler_address]) == 0
        assert "running the searches on <Client" in capsys.readouterr().err
    assert (tmp_path / "summary.md").exists()


def test_cli_explains_missing_extras(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(SystemExit, match=r"sparse-token-estimators\[plots\]"):
        cli.main(["--out", str(tmp_path)])
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    with pytest.raises(SystemExit, match=r"sparse-token-estimators\[distributed\]"):
        cli.main(["--out", str(tmp_path), "--no-plots", "--scheduler", "tcp://nowhere:1"])


def test_plotting_explains_missing_matplotlib(monkeypatch, results):
    from sparse_token_estimators import plotting

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install 'sparse-token-estimators\[plots\]'"):
        plotting.plot_alignment(results)


@pytest.mark.parametrize("argv, message", [
    (["--scale", "huge"], "invalid choice"),
    (["--n-selected", "12", "--seq-len", "10"], "n_selected must be between 1 and seq_len"),
    (["--n-samples", "0"], "n_samples must be an integer >= 1"),
    (["--device", "tpu"], "device must be"),
])
def test_cli_refuses_bad_arguments_before_any_fit(argv, message, capsys):
    with pytest.raises(SystemExit):
        cli.main(argv + ["--no-plots"])
    assert message in capsys.readouterr().err


def test_progress_without_tqdm_prints_lines(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    progress = reproduce.Progress(5)
    progress.stage("width separation")
    progress.advance(2)
    progress.stage("alignment")
    progress.close()
    err = capsys.readouterr().err
    assert "[  0/5] width separation" in err and "[  2/5] alignment" in err
