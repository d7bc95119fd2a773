"""The reproduction's architectures experiment (beyond the paper): on the SMOKE run's results."""

import copy

import pytest

from sparse_token_estimators import reproduce
from sparse_token_estimators.reproduce import SMOKE
from sparse_token_estimators.reproduce._architectures import (
    EXPERIMENT,
    LENGTH_MODELS,
    SEARCHED,
    sentences,
)
from sparse_token_estimators.reproduce._experiment import summarise
from sparse_token_estimators.reproduce._registry import EXPERIMENTS


@pytest.fixture
def results(smoke_results):
    return copy.deepcopy(smoke_results)


def test_the_experiment_is_in_the_run(results):
    assert EXPERIMENT in EXPERIMENTS
    section = results["architectures"]
    assert [r["model"] for r in section["critical"]] == list(SEARCHED)
    for row in section["critical"]:
        assert row["status"] in ("found", "beyond stop", "at start")
        assert row["evaluated"] == sorted(row["evaluated"]) and row["evaluated"][0] >= 1
        # the search never goes beyond 4 T d
        assert max(row["evaluated"]) <= 4 * SMOKE.seq_len * SMOKE.token_dim
    named = {f * SMOKE.seq_len for f in SMOKE.length_factors}
    assert {r["model"] for r in section["lengths"]} == set(LENGTH_MODELS)
    assert {r["length"] for r in section["lengths"]} == named
    assert {r["seed"] for r in section["lengths"]} == set(SMOKE.seeds())
    # every fit of the experiment is named in the run's list of fits
    ours = [f for f in results["fits"] if "architectures" in f["used_by"]]
    assert {f["model"] for f in ours} == set(LENGTH_MODELS)
    assert all(f["data"] == "population" for f in ours)


def test_summary_and_figure_say_beyond_the_paper(results, tmp_path):
    pytest.importorskip("matplotlib")
    summary = reproduce.summary_markdown(results, figures=False)
    assert f"## {EXPERIMENT.title}" in summary
    assert "Beyond the paper, measured, no verdict" in summary
    assert all(claim["claim"] != "architectures" for claim in results["claims"])
    written = {p.name for p in reproduce.write_outputs(results, tmp_path)}
    assert {"architectures.png", "architectures_critical.csv",
            "architectures_lengths.csv"} <= written


def set_lengths(results, values):
    section = results["architectures"]
    T = SMOKE.seq_len
    for row in section["lengths"]:
        row["r2"] = values.get(row["model"], 0.0) if row["length"] > T else 0.95
    section["lengths_summary"] = summarise(section["lengths"], ["model", "model_name",
                                                                "length"], ["r2"])


def test_sentences_follow_the_numbers(results):
    section = results["architectures"]
    critical = {r["model"]: r for r in section["critical"]}
    critical["encoder_none"].update(star=12, test_r2_mean=0.91)
    critical["gru"].update(star=None, evaluated=[4, 8, 16, 32])
    set_lengths(results, {"encoder_none": 0.9, "encoder_rope": 0.85, "lstm": 0.2,
                          "encoder_learned": 0.1})
    text = sentences(results)
    assert "The encoder without positional encoding reaches R^2 0.8 at width 12" in text[0]
    assert "The GRU does not reach R^2 0.8 at any width up to 32." in text
    stays = next(s for s in text if s.startswith("At width"))
    assert "no PE" in stays and "RoPE" in stays and "LSTM" not in stays
    ranges = next(s for s in text if s.startswith("Across the encoder's encodings"))
    assert "from 0.000" in ranges and "to 0.900 (transformer encoder, no PE" in ranges
