"""The reproduction's architectures experiment (beyond the paper): on the SMOKE run's results."""

import copy
import json

import pytest

from sparse_token_estimators import reproduce
from sparse_token_estimators._critical_width import STATUSES
from sparse_token_estimators.reproduce import SMOKE, ReproductionConfig
from sparse_token_estimators.reproduce._architectures import (
    EXPERIMENT,
    LENGTH_MODELS,
    QUERY_LENGTH_MODELS,
    RIVAL_STOP_FACTOR,
    SANITY,
    SEARCHED,
    encoder_width,
    query_searched,
    recurrent_rivals,
    sentences,
)
from sparse_token_estimators.reproduce._experiment import summarise
from sparse_token_estimators.reproduce._models import MODELS, query_rivals
from sparse_token_estimators.reproduce._registry import EXPERIMENTS


@pytest.fixture
def results(smoke_results):
    return copy.deepcopy(smoke_results)


def test_the_experiment_is_in_the_run(results):
    assert EXPERIMENT in EXPERIMENTS
    section = results["architectures"]
    indicator = [r for r in section["critical"] if r["layout"] == "indicator"]
    assert [r["model"] for r in indicator] == list(SEARCHED)
    query = [r for r in section["critical"] if r["layout"] == "query"]
    # query_searched, and every rival of verdict 7 from the catalogue
    assert sorted((r["model"], r["seq_len"]) for r in query) == sorted(
        (m, T) for m in query_searched(SMOKE) for T in SMOKE.query_seq_lens())
    assert {f"query_{m}" for m in SMOKE.query_searched} | set(query_rivals()) == \
        set(query_searched(SMOKE))
    assert {MODELS[r["model"]].layout for r in query} == {"query"}
    for row in indicator:
        assert row["status"] in STATUSES and row["reason"]
        # the best of the family's rates at every width searched
        assert set(row["chosen_lr"]) == {str(w) for w in row["evaluated"]}
        grid = SMOKE.lr_grid(MODELS[row["model"]].family)
        assert set(row["chosen_lr"].values()) - {None} <= set(grid)
        assert row["evaluated"] == sorted(row["evaluated"]) and row["evaluated"][0] >= 1
        # the search never goes beyond 4 T d
        assert max(row["evaluated"]) <= 4 * SMOKE.seq_len * SMOKE.token_dim
    for row in query:  # each within its stop; the paper's model compares d + pe_dim
        assert max(row["evaluated"]) <= row["stop"]
        assert row["width_offset"] == (SMOKE.token_dim if row["model"] == "query_paper" else 0)
        assert row["best_case_width"] > SMOKE.token_dim
    assert {r["stop"] for r in query if r["model"] == "query_fcn"} == {
        4 * T * SMOKE.token_dim for T in SMOKE.query_seq_lens()}
    named = {f * SMOKE.seq_len for f in SMOKE.length_factors}
    assert {r["model"] for r in section["lengths"]} == {*LENGTH_MODELS, *QUERY_LENGTH_MODELS}
    assert {r["length"] for r in section["lengths"]} == named
    # the experiment's seeds (architecture_n_seeds), not the run's
    assert {r["seed"] for r in section["lengths"]} == set(SMOKE.architecture_seeds())
    # the no-PE encoder of the query layout at every T, every seed: the sanity check
    assert sorted((r["seq_len"], r["seed"]) for r in section["query_sanity"]) == sorted(
        (T, s) for T in SMOKE.query_seq_lens() for s in SMOKE.architecture_seeds())
    assert all(r["ceiling"] == SMOKE.n_selected / r["seq_len"] for r in section["query_sanity"])
    # every fit of the experiment is named in the run's list of fits
    ours = [f for f in results["fits"] if "architectures" in f["used_by"]]
    assert {f["model"] for f in ours} == {*LENGTH_MODELS, *QUERY_LENGTH_MODELS,
                                          *query_searched(SMOKE), SANITY}
    assert all(f["data"] == "population" for f in ours)


def test_summary_and_figure_say_beyond_the_paper(results, tmp_path):
    pytest.importorskip("matplotlib")
    summary = reproduce.summary_markdown(results, figures=False)
    assert f"## {EXPERIMENT.title}" in summary
    assert "Beyond the paper, measured; verdict 7 judges the query layout" in summary
    assert "Indicator layout (" in summary and "Query layout (" in summary
    assert "(query layout; beyond the paper)" in summary
    assert any(claim["claim"] == "query-layout separation" for claim in results["claims"])
    written = {p.name for p in reproduce.write_outputs(results, tmp_path)}
    assert {"architectures.png", "architectures_lengths.png", "architectures_critical.csv",
            "architectures_lengths.csv", "architectures_query_sanity.csv"} <= written


def set_lengths(results, values):
    section = results["architectures"]
    T = SMOKE.seq_len
    for row in section["lengths"]:
        row["r2"] = values.get(row["model"], 0.0) if row["length"] > T else 0.95
    section["lengths_summary"] = summarise(section["lengths"], ["model", "model_name",
                                                                "layout", "length"], ["r2"])


def test_sentences_follow_the_numbers(results):
    section = results["architectures"]
    critical = {r["model"]: r for r in section["critical"]}
    critical["encoder_none"].update(star=12, status="found", test_r2_mean=0.91)
    critical["gru"].update(star=None, status="> stop", evaluated=[4, 8, 16, 32])
    set_lengths(results, {"encoder_none": 0.9, "encoder_rope": 0.85, "lstm": 0.2,
                          "encoder_learned": 0.1, "query_encoder_rope": 0.7})
    text = sentences(results)
    assert text[0] == ("encoder, no PE (indicator layout): smallest width reaching R^2 0.8: "
                       f"12 at T={SMOKE.seq_len} (d = 2; not below T d at each).")
    assert f"GRU (indicator layout): not reached at T={SMOKE.seq_len} up to width 32 " \
           "(> stop)." in text
    stays = next(s for s in text if s.startswith("At width"))
    assert "no PE" in stays and "RoPE" in stays and "LSTM" not in stays
    ranges = next(s for s in text if s.startswith("Across the encoder's encodings (indicator"))
    assert "from 0.000" in ranges and "to 0.900 (transformer encoder, no PE" in ranges
    ranges = next(s for s in text if s.startswith("Across the encoder's encodings (query"))
    assert "to 0.700 (transformer encoder, RoPE (query layout" in ranges


@pytest.fixture(scope="module")
def several_lengths():
    """The experiment alone at three T (as the paper preset searches the scaling law's T)."""
    config = reproduce.with_sizes(SMOKE, experiments=("architectures",),
                                  architecture_lens=(3, 4, 6), architecture_width_stop=12,
                                  query_searched=("encoder_rope",))
    return config, reproduce.run(config, progress=False)


def test_widths_are_searched_at_every_length(several_lengths):
    config, results = several_lengths
    assert config.architecture_seq_lens() == [3, 4, 6]
    section = results["architectures"]
    critical = [r for r in section["critical"] if r["layout"] == "indicator"]
    assert sorted((r["model"], r["seq_len"]) for r in critical) == sorted(
        (m, T) for m in SEARCHED for T in (3, 4, 6))
    for row in critical:
        T = row["seq_len"]
        assert row["td"] == T * SMOKE.token_dim
        assert row["stop"] == min(12, 4 * T * SMOKE.token_dim)
        assert max(row["evaluated"]) <= row["stop"]
    # each T's search starts where the T before found its width (or at its floor)
    for model in SEARCHED:
        rows = sorted((r for r in critical if r["model"] == model), key=lambda r: r["seq_len"])
        for before, after in zip(rows, rows[1:]):
            if before["star"]:
                assert min(before["star"], after["stop"]) in after["evaluated"]
    # every point of the searches is a record of its own T
    assert {p["seq_len"] for p in section["points"]} == {3, 4, 6}
    assert {p["layout"] for p in section["points"]} == {"indicator", "query"}
    fitted = {(f["model"], f["seq_len"],
               f.get("hidden_size") or f.get("d_model") or f.get("hidden_width"))
              for f in results["fits"] if "architectures" in f["used_by"]}
    assert {(p["model"], p["seq_len"], p["width"]) for p in section["points"]} <= fitted


def test_several_lengths_in_summary_and_figure(several_lengths, tmp_path):
    pytest.importorskip("matplotlib")
    config, results = several_lengths
    summary = reproduce.summary_markdown(results, figures=False)
    section = summary.split(f"## {EXPERIMENT.title}")[1].split("\n## ")[0]
    # a row per T in the widths' table
    assert [T for T in (3, 4, 6) if f"| GRU (beyond the paper) | {T} | " in section] == [3, 4, 6]
    text = sentences(results)
    assert text[0].startswith("encoder, no PE (indicator layout): ")
    assert all("T=3" in s for s in text[:4])
    written = {p.name for p in reproduce.write_outputs(results, tmp_path)}
    assert "architectures.png" in written


def test_several_lengths_sentences_follow_the_numbers(several_lengths):
    _, results = several_lengths
    results = copy.deepcopy(results)
    for row in results["architectures"]["critical"]:
        if row["model"] == "gru":
            row.update(star=None, status="> stop", evaluated=[1, 2, 4, 8, 12]) \
                if row["seq_len"] == 6 else row.update(star=2, status="found")
    text = next(s for s in sentences(results) if s.startswith("GRU"))
    assert text == ("GRU (indicator layout): smallest width reaching R^2 0.8: 2 at T=3, 2 at "
                    "T=4 (d = 2; below T d at each); not reached at T=6 up to width 12 (> stop).")


def test_the_widths_figure_names_the_lengths_it_spans(several_lengths):
    pytest.importorskip("matplotlib")
    from sparse_token_estimators.reproduce._architectures_plots import plot_architectures

    _, results = several_lengths
    title = plot_architectures(results)._suptitle.get_text()
    assert "T=3..6, d=2, q=2" in title and "T=4," not in title


def _unresolved_at_stop(results, model, T):
    """``results`` with ``model``'s search at ``T`` reaching the target at its stop, 12,
    only with twice the steps (star None, "unresolved"), and that row."""
    results = copy.deepcopy(results)
    row = next(r for r in results["architectures"]["critical"]
               if r["model"] == model and r["seq_len"] == T)
    row.update(star=None, status="unresolved", evaluated=[1, 2, 4, 8, 12],
               doubled_scores={"12": 0.9})
    return results, row


def test_the_widths_figure_circles_a_search_unresolved_at_its_stop(several_lengths):
    pytest.importorskip("matplotlib")
    from sparse_token_estimators.reproduce._architectures_plots import plot_architectures

    def circles(fig):  # open circles drawn at the widest width fitted, 12
        return [c for ax in fig.axes for c in ax.collections
                if len(c.get_offsets()) == 1 and c.get_offsets()[0][1] == 12
                and not c.get_facecolors().size]

    results, row = _unresolved_at_stop(several_lengths[1], "gru", 6)
    assert len(circles(plot_architectures(results))) == 1  # on the "not reached" triangle
    row.update(status="> stop")
    assert circles(plot_architectures(results)) == []


def test_the_widths_bars_name_a_search_unresolved_at_its_stop(results):
    pytest.importorskip("matplotlib")
    from sparse_token_estimators.reproduce._architectures_plots import plot_architectures

    def label(results):
        return next(t.get_text() for ax in plot_architectures(results).axes
                    for t in ax.get_xticklabels() if t.get_text().startswith("GRU"))

    results, row = _unresolved_at_stop(results, "gru", SMOKE.seq_len)
    assert label(results).endswith("\nunresolved at 12")
    row.update(status="> stop")
    assert label(results).endswith("\nnone up to 12")


def test_the_widths_bars_mark_a_width_found_but_unresolved(results):
    pytest.importorskip("matplotlib")
    from sparse_token_estimators.reproduce._architectures_plots import plot_architectures

    def gru_bar(results):  # the GRU's tick label and its bar's hatch
        ax = next(ax for ax in plot_architectures(results).axes
                  if any(t.get_text().startswith("GRU") for t in ax.get_xticklabels()))
        i, text = next((i, t.get_text()) for i, t in enumerate(ax.get_xticklabels())
                       if t.get_text().startswith("GRU"))
        return text, ax.patches[i].get_hatch()

    results = copy.deepcopy(results)
    row = next(r for r in results["architectures"]["critical"]
               if r["model"] == "gru" and r["seq_len"] == SMOKE.seq_len)
    row.update(star=8, status="unresolved", evaluated=[1, 2, 4, 8, 12],
               doubled_scores={"8": 0.7})
    text, hatch = gru_bar(results)
    assert text.endswith("\n8, unresolved") and hatch == "//"
    row.update(status="found")
    text, hatch = gru_bar(results)
    assert text.endswith("\n8") and not hatch


# -- the third set: the rivals' stop, their fixed-width R^2, the recipe -------------------


def test_the_rivals_are_searched_up_to_four_times_the_best_encoder(results):
    section = results["architectures"]
    query = {(r["model"], r["seq_len"]): r for r in section["critical"]
             if r["layout"] == "query"}
    for T in SMOKE.query_seq_lens():
        outcomes = {m: {"status": r["status"], "width": r["star"],
                        "doubled_scores": {int(w): v for w, v in r["doubled_scores"].items()}}
                    for (m, t), r in query.items() if t == T}
        width = encoder_width(outcomes) or 0
        for model in recurrent_rivals(SMOKE):
            row = query[model, T]
            four_td = 4 * T * SMOKE.token_dim
            assert row["stop"] == max(min(SMOKE.query_width_stop, four_td),
                                      RIVAL_STOP_FACTOR * width)
            assert max(row["evaluated"]) <= row["stop"]
    assert section["protocol"] == "third set" and section["lr_schedule"] == "cosine"
    assert section["query_n_train"] == SMOKE.query_n_train


def test_encoder_width_is_the_narrowest_found_or_bounded():
    found = {"status": "found", "width": 12, "doubled_scores": {}}
    bounded = {"status": "unresolved", "width": 8, "doubled_scores": {8: 0.85}}
    moved = {"status": "unresolved", "width": 6, "doubled_scores": {6: 0.7}}
    beyond = {"status": "> stop", "width": None, "doubled_scores": {}}
    assert encoder_width({"query_encoder_rope": found, "query_encoder_sinusoidal": bounded,
                          "query_gru": {"status": "found", "width": 2}}) == 8
    assert encoder_width({"query_encoder_rope": moved, "query_encoder_sinusoidal": beyond}) \
        is None
    assert encoder_width({"query_encoder_none": found}) is None


def test_each_recurrent_rival_is_scored_at_one_width_at_every_t(results):
    section = results["architectures"]
    rows = section["query_fixed_width"]
    first = min(SMOKE.query_seq_lens())
    stops = {r["model"]: r["stop"] for r in section["critical"]
             if r["layout"] == "query" and r["seq_len"] == first}
    assert {(r["model"], r["seq_len"]) for r in rows} == {
        (m, T) for m in recurrent_rivals(SMOKE) for T in SMOKE.query_seq_lens()}
    assert all(r["width"] == stops[r["model"]] for r in rows)
    assert all(r["ceiling"] == SMOKE.n_selected / r["seq_len"] for r in rows)
    assert len(rows) == len(SMOKE.architecture_seeds()) * len(
        section["query_fixed_width_summary"])
    summary = reproduce.summary_markdown(results, figures=False)
    assert "each recurrent net at one fixed width" in summary
    assert "What verdict 7 shows, and what it does not" in summary


def test_every_fit_records_its_schedule(results):
    fits = results["fits"]
    schedules = {(f["model"], f["lr_schedule"]) for f in fits}
    assert ("paper", "constant") in schedules and ("fcn", "constant") in schedules
    assert ("query_gru", "cosine") in schedules and ("fcn_tightness", "cosine") in schedules
    assert ("paper_scaling", "cosine") in schedules


def test_the_experiment_takes_the_first_architecture_n_seeds_seeds(results):
    # SMOKE: 2 seeds, the architectures experiment on the first alone (as QUICK's 2 of 3)
    assert SMOKE.architecture_seeds() == [SMOKE.seed] and SMOKE.n_seeds == 2
    ours = [f for f in results["fits"] if "architectures" in f["used_by"]]
    others = [f for f in results["fits"] if "architectures" not in f["used_by"]]
    assert ours and others
    assert {f["seed"] for f in ours} == set(SMOKE.architecture_seeds())
    assert {f["seed"] for f in others} == set(SMOKE.seeds())
    # no fit of the experiment is another's: each trains with architecture_training
    assert all(MODELS[f["model"]].training == "architecture_training" for f in ours)
    assert all(MODELS[f["model"]].training != "architecture_training" for f in others)
    section = results["architectures"]
    assert section["seeds"] == SMOKE.architecture_seeds()
    for rows in ("points", "critical_per_seed", "lengths", "query_sanity", "query_fixed_width"):
        assert {r["seed"] for r in section[rows]} == set(SMOKE.architecture_seeds()), rows
    claim = next(c for c in results["claims"] if c["claim"] == "query-layout separation")
    assert claim["n_seeds"] == 1 and "uses 1 seed of the run's 2" in claim["note"]
    summary = reproduce.summary_markdown(results, figures=False)
    said = ("The architectures experiment uses 1 seed of the run's 2 (seed 0; "
            "architecture_n_seeds=1): its fits are the run's costliest")
    # in the run's paragraph, the experiment's section and verdict 7's note
    assert summary.count(said) == 3
    assert "| **inconclusive** (mean of 1 seed) |" in summary or \
        "| supported (mean of 1 seed) |" in summary or \
        "| **not supported** (mean of 1 seed) |" in summary


def test_two_architecture_seeds_of_three_end_to_end_from_the_command_line(
        monkeypatch, tmp_path, capsys):
    from dataclasses import replace

    from sparse_token_estimators import __main__ as cli
    from sparse_token_estimators.reproduce import _records

    # the architectures experiment beside one other, at SMOKE's sizes
    config = replace(SMOKE, experiments=("width_separation", "architectures"),
                     architecture_n_seeds=None)
    monkeypatch.setitem(reproduce.SCALES, "quick", config)
    assert cli.main(["--quick", "--out", str(tmp_path), "--no-plots", "--no-progress",
                     "--seeds", "3", "--architecture-seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "query-layout separation: " in out and "of 2 on their own" in out
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["config"]["n_seeds"] == 3 and saved["config"]["architecture_n_seeds"] == 2
    ours = [f for f in saved["fits"] if "architectures" in f["used_by"]]
    assert {f["seed"] for f in ours} == {0, 1}
    assert {f["seed"] for f in saved["fits"] if f not in ours} == {0, 1, 2}
    # the records: one per fit and seed
    run = ReproductionConfig.from_dict(saved["config"])
    assert len(_records.RecordStore(tmp_path, run)) == len(saved["fits"])
    claim = next(c for c in saved["claims"] if c["claim"] == "query-layout separation")
    assert claim["n_seeds"] == 2
    assert all(c["n_seeds"] == 3 for c in saved["claims"] if c is not claim)
    summary = (tmp_path / "summary.md").read_text()
    assert "The architectures experiment uses 2 seeds of the run's 3 (seeds 0, 1; " \
           "architecture_n_seeds=2)" in summary
    assert "validation R^2 (mean over 2 seeds" in summary
    # the same folder with the experiment on every seed: its records are resumed (no
    # record's numbers depend on architecture_n_seeds), the third seed's fitted
    assert cli.main(["--quick", "--out", str(tmp_path), "--no-plots", "--no-progress",
                     "--seeds", "3", "--architecture-seeds", "3"]) == 0
    capsys.readouterr()
    every = json.loads((tmp_path / "results.json").read_text())
    ours = [f for f in every["fits"] if "architectures" in f["used_by"]]
    assert {f["seed"] for f in ours} == {0, 1, 2}
    claim = next(c for c in every["claims"] if c["claim"] == "query-layout separation")
    assert claim["n_seeds"] == 3
    assert "architecture_n_seeds" not in (tmp_path / "summary.md").read_text()
    # the first run's records were read back, the architectures' among them (the folder
    # also keeps those of widths its searches, on the mean over 2 seeds, asked for alone)
    assert len(_records.RecordStore(tmp_path, run)) >= len(every["fits"])
    manifest = json.loads((tmp_path / _records.MANIFEST).read_text())
    others = [f for f in saved["fits"] if "architectures" not in f["used_by"]]
    assert manifest["resumed_fits"] > len(others)


def test_the_widths_figure_keeps_its_legends_inside_it(several_lengths):
    # both layouts with several T: two panels' legends side by side were wider than the
    # figure, and the first was cut at its left edge
    pytest.importorskip("matplotlib")
    from sparse_token_estimators.reproduce._architectures_plots import plot_architectures

    _, results = several_lengths
    results = copy.deepcopy(results)
    for row in results["architectures"]["critical"]:  # the longest labels of the legend
        if row["model"] == "gru" and row["seq_len"] == 6:
            row.update(star=None, status="unresolved", evaluated=[1, 2, 4, 8, 12],
                       doubled_scores={"12": 0.9})
    fig = plot_architectures(results)
    assert all(len({r["seq_len"] for r in results["architectures"]["critical"]
                    if r["layout"] == lay}) > 1 for lay in ("indicator", "query"))
    fig.canvas.draw()
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends
    box = fig.bbox
    for legend in legends:
        extent = legend.get_window_extent()
        assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1, extent
        assert box.y0 - 1 <= extent.y0 and extent.y1 <= box.y1 + 1, extent
    labels = [t.get_text() for legend in legends for t in legend.get_texts()]
    assert len(labels) == len(set(labels)) and "T d" in labels


def test_the_rivals_with_more_steps_are_a_line_of_the_summary_not_judged(results):
    s = results["architectures"]
    assert s["rival_more_steps"] == 0 and s["query_more_steps"] == []  # SMOKE: none
    assert not any("not judged (how far" in line for line in EXPERIMENT.summary(results))
    s["query_more_steps_summary"] = [{
        "model": "query_mamba", "model_name": "Mamba (query layout)", "seq_len": 3,
        "width": 8, "encoder_width": 4, "steps_multiplier": 4, "lr": 0.03,
        "val_r2_mean": 0.93, "test_r2_mean": 0.92, "test_r2_sd": 0.01, "n_seeds": 3,
        "reaches_target": True}]
    line = [x for x in EXPERIMENT.summary(results) if "not judged (how far" in x]
    assert len(line) == 1 and "Mamba 0.930 (0.920 ± 0.010; rate 0.03, reaches the target)" \
        in line[0] and "4 times the steps" in line[0]
