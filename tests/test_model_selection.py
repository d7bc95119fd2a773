import re

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV, cross_validate, train_test_split

from sparse_token_estimators import (
    SparseSelectionStream,
    SparseTokenFCN,
    SparseTokenTransformer,
    make_sparse_selection,
)
from sparse_token_estimators.model_selection import search_on_stream

SIZES = dict(seq_len=8, token_dim=3, n_selected=2)


def _stream():
    return SparseSelectionStream(*SIZES.values(), n_samples=384, random_state=0, device="cpu")


def _estimator():
    return SparseTokenTransformer(pe_dim=8, n_pe_draws=1, max_epochs=2, batch_size=64,
                                  device="cpu", random_state=0)


VALIDATION = make_sparse_selection(150, *SIZES.values(), random_state=1)
ROUTE = re.escape("search_on_stream(estimator, param_grid, stream, X_val, y_val)")


@pytest.mark.parametrize("split", [
    lambda stream: GridSearchCV(_estimator(), {"lr": [0.01, 0.1]}, cv=2).fit(stream),
    lambda stream: cross_validate(_estimator(), stream, cv=2),
    lambda stream: train_test_split(stream),
], ids=["GridSearchCV", "cross_validate", "train_test_split"])
def test_splitting_a_stream_names_the_route(split):
    with pytest.raises(TypeError, match=r"SparseSelectionStream cannot be indexed or split.*"
                                        rf"no sample i.*{ROUTE}"):
        split(_stream())


def test_each_candidate_is_the_estimator_fitted_on_the_stream_and_scored():
    grid = {"lr": [0.003, 0.03], "pe_dim": [4, 8]}
    result = search_on_stream(_estimator(), grid, _stream(), *VALIDATION)
    table = result.cv_results_
    assert [p for p in table["params"]] == [
        {"lr": 0.003, "pe_dim": 4}, {"lr": 0.003, "pe_dim": 8},
        {"lr": 0.03, "pe_dim": 4}, {"lr": 0.03, "pe_dim": 8}]
    for params, score in zip(table["params"], table["mean_test_score"]):
        alone = _estimator().set_params(**params).fit(_stream())
        assert alone.score(*VALIDATION) == score
    assert list(table["param_lr"]) == [0.003, 0.003, 0.03, 0.03]
    np.testing.assert_array_equal(table["split0_test_score"], table["mean_test_score"])
    assert (table["std_test_score"] == 0).all() and (table["mean_fit_time"] > 0).all()
    best = int(np.argmax(table["mean_test_score"]))
    assert result.best_index_ == best and table["rank_test_score"][best] == 1
    assert sorted(table["rank_test_score"]) == [1, 2, 3, 4]
    assert result.best_params_ == table["params"][best]
    assert result.best_score_ == result.best_estimator_.score(*VALIDATION)
    assert result.best_estimator_.get_params()["lr"] == result.best_params_["lr"]


def test_parallel_search_gives_the_sequential_results():
    grid = [{"lr": [0.01, 0.05]}, {"max_epochs": [1]}]  # a list of grids, as GridSearchCV's
    one = search_on_stream(_estimator(), grid, _stream(), *VALIDATION)
    two = search_on_stream(_estimator(), grid, _stream(), *VALIDATION, n_jobs=2)
    np.testing.assert_array_equal(one.cv_results_["mean_test_score"],
                                  two.cv_results_["mean_test_score"])
    assert one.cv_results_["param_lr"].mask.tolist() == [False, False, True]


def test_a_scorer_by_name_and_another_estimator():
    est = SparseTokenFCN(hidden_width=8, max_epochs=1, batch_size=64, device="cpu",
                         random_state=0)
    result = search_on_stream(est, {"hidden_width": [4, 16]}, _stream(), *VALIDATION,
                              scoring="neg_mean_squared_error")
    assert (result.cv_results_["mean_test_score"] < 0).all()
    assert result.best_score_ == max(result.cv_results_["mean_test_score"])


def test_arrays_are_sent_to_scikit_learns_search():
    X, y = VALIDATION
    with pytest.raises(TypeError, match=r"stream must be a SparseSelectionStream; got ndarray"
                                        r".*GridSearchCV\(estimator, param_grid\)\.fit\(X, y\)"):
        search_on_stream(_estimator(), {"lr": [0.01]}, X, X, y)
