"""compare_critical_widths: critical_width per estimator and T, one table, one figure."""

import math

import pytest
from sklearn.base import BaseEstimator

from sparse_token_estimators import (
    SparseSelectionStream,
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenTransformer,
    _compare_widths,
    compare_critical_widths,
    critical_width,
    make_sparse_selection,
)
from sparse_token_estimators.model_selection import plot_critical_widths

TINY = dict(token_dim=2, n_selected=2, n_train=128, n_val=128, target=0.3, start=4, stop=8,
            check_steps=False, random_state=3)


@pytest.fixture(scope="module")
def table():
    pytest.importorskip("pandas")
    estimators = {"FCN": SparseTokenFCN(max_epochs=2, device="cpu"),
                  "paper": SparseTokenTransformer(n_pe_draws=1, max_epochs=2, device="cpu")}
    return compare_critical_widths(estimators, [6, 4], **TINY)


def test_one_row_per_estimator_and_length_each_critical_widths_result(table):
    assert list(table.columns) == list(_compare_widths.COLUMNS)
    assert list(zip(table["estimator"], table["seq_len"])) == [
        ("FCN", 4), ("paper", 4), ("FCN", 6), ("paper", 6)]
    assert list(table["param"]) == ["hidden_width", "pe_dim"] * 2
    # the row of (FCN, 6) is critical_width's answer on the same data and recipe
    # (the second T: its stream seeded random_state + 2, its validation set + 3)
    stream = SparseSelectionStream(6, 2, 2, n_samples=128, random_state=5, layout="query",
                                   device="cpu")
    validation = make_sparse_selection(128, 6, 2, 2, layout="query", random_state=6)
    est = SparseTokenFCN(max_epochs=2, device="cpu", layout="query", lr_schedule="cosine")
    alone = critical_width(est, "hidden_width", stream, lr_grid=[0.003, 0.01, 0.03],
                           target=0.3, start=4, stop=8, seeds=(0,), validation=validation,
                           check_steps=False)
    row = table[(table["estimator"] == "FCN") & (table["seq_len"] == 6)].iloc[0]
    assert row["status"] == alone.status and row["n_fits"] == len(alone.table)
    assert (None if row["width"] is None or row["width"] is _compare_widths._missing()
            else int(row["width"])) == alone.width
    assert row["lower"] == alone.bracket[0] or alone.bracket[0] is None


def test_the_slope_is_fitted_over_the_resolved_lengths():
    assert _compare_widths.slope([4, 8, 16], [8, 16, 32]) == pytest.approx(1.0)
    assert _compare_widths.slope([4, 8, 16], [6, 6, 6]) == pytest.approx(0.0)
    assert math.isnan(_compare_widths.slope([8], [10]))


def test_the_figure_marks_the_unresolved_and_the_searches_beyond_their_stop():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    rows = [
        {"estimator": "A", "seq_len": 4, "width": 4, "status": "found", "lower": 2,
         "upper": 4, "slope": 1.0},
        {"estimator": "A", "seq_len": 8, "width": 8, "status": "found", "lower": 4,
         "upper": 8, "slope": 1.0},
        {"estimator": "A", "seq_len": 16, "width": 12, "status": "unresolved", "lower": 8,
         "upper": 12, "slope": 1.0},
        {"estimator": "B", "seq_len": 4, "width": None, "status": "> stop", "lower": 32,
         "upper": None, "slope": math.nan},
    ]
    ax = plot_critical_widths(rows)
    assert ax.get_xscale() == ax.get_yscale() == "log"
    # each estimator's markers are set a little apart in T (by less than 3%)
    lines = {(line.get_marker(), line.get_markerfacecolor() == "none"):
             [[round(x), y] for x, y in line.get_xydata().tolist()]
             for line in ax.get_lines() if line.get_xydata().size}
    assert lines[("o", False)] == [[4, 4], [8, 8]]  # A's widths found
    assert lines[("o", True)] == [[16, 12]]  # A's unresolved T
    assert lines[("^", True)] == [[4, 32]]  # B beyond its stop, drawn at the stop
    assert "A (slope 1.00)" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_without_pandas_a_list_of_dicts(monkeypatch):
    monkeypatch.setattr(_compare_widths, "_pandas", lambda: None)  # as if not installed
    rows = compare_critical_widths([SparseTokenFCN(max_epochs=1, device="cpu")], [4],
                                   **{**TINY, "stop": 4})
    assert isinstance(rows, list) and rows[0]["estimator"] == "SparseTokenFCN"
    assert set(rows[0]) == set(_compare_widths.COLUMNS)


def test_an_encoders_widths_are_multiples_of_what_its_heads_need():
    assert _compare_widths.width_param(SparseTokenEncoder()) == "d_model"
    rope = SparseTokenEncoder(positional_encoding="rope")
    assert _compare_widths._width_multiple(rope, "d_model") == 4
    assert _compare_widths._round_up(6, 4) == 8


@pytest.mark.parametrize("estimators, seq_lens, match", [
    ({"x": BaseEstimator()}, [4], "width parameter is not known"),
    ({}, [4], "estimators is empty"),
    ("FCN", [4], "estimators must be a dict"),
    ({"FCN": SparseTokenFCN()}, [4, 4], "seq_lens must be distinct ints"),
    ({"FCN": SparseTokenFCN()}, [1], "seq_lens must be distinct ints"),
])
def test_bad_input_is_refused_before_any_fit(estimators, seq_lens, match):
    with pytest.raises((ValueError, TypeError), match=match):
        compare_critical_widths(estimators, seq_lens)
