import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import Ridge
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline

from sparse_token_estimators import FlattenTokens, make_sparse_selection


def test_flattens_position_major(tiny_task):
    X, _ = tiny_task
    flat = FlattenTokens().fit_transform(X)
    assert flat.shape == (200, 10 * 5) and flat.dtype == np.float32
    # position t occupies columns t * (d + 1) ... t * (d + 1) + d, indicator last
    np.testing.assert_array_equal(flat[:, 2 * 5:3 * 5], X[:, 2])
    np.testing.assert_array_equal(flat.reshape(X.shape), X)


def test_feature_names_follow_the_columns(tiny_task):
    names = FlattenTokens().fit(tiny_task[0]).get_feature_names_out()
    assert len(names) == 50
    assert names[:6] == ["t0_x0", "t0_x1", "t0_x2", "t0_x3", "t0_selected", "t1_x0"]
    assert names[-1] == "t9_selected"


@pytest.mark.parametrize("as_tensor", [False, True])
def test_transform_returns_a_new_array_not_a_view_of_X(tiny_task, as_tensor):
    import torch

    X = tiny_task[0].copy()
    given = torch.as_tensor(X) if as_tensor else X  # a CPU tensor shares X's memory
    flat = FlattenTokens().fit(X).transform(given)
    flat[:] = 7.0
    np.testing.assert_array_equal(X, tiny_task[0])


def test_other_dtypes_and_lists_are_accepted(tiny_task):
    X, _ = tiny_task
    flatten = FlattenTokens().fit(X.tolist())
    out = flatten.transform(X.astype(np.float64))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, X.reshape(200, -1))


def test_pipeline_with_ridge(task, test_task):
    X, y = task
    pipe = make_pipeline(FlattenTokens(), Ridge()).fit(X, y)
    assert pipe.predict(test_task[0]).shape == (500, 4)
    # A linear model of the flattened input cannot select tokens: the best
    # one predicts the mean of all tokens, R^2 = q / T = 0.2, far below what
    # attention reaches.
    assert 0.1 < pipe.score(*test_task) < 0.3
    assert np.isfinite(cross_val_score(make_pipeline(FlattenTokens(), Ridge()), X, y, cv=2)).all()


def test_clone_and_parameters():
    flatten = FlattenTokens()
    # the layout only says which rules X follows (both flatten the same way)
    assert flatten.get_params() == {"layout": "indicator", "n_selected": None}
    assert isinstance(clone(flatten), FlattenTokens)


def test_transform_before_fit(tiny_task):
    with pytest.raises(NotFittedError):
        FlattenTokens().transform(tiny_task[0])


def test_other_length_or_token_dim_at_transform(tiny_task):
    flatten = FlattenTokens().fit(tiny_task[0])
    X_long, _ = make_sparse_selection(5, 12, 4, 2, random_state=0)
    with pytest.raises(ValueError, match="seq_len 12 but FlattenTokens was fitted on seq_len 10"):
        flatten.transform(X_long)
    X_wide, _ = make_sparse_selection(5, 10, 3, 2, random_state=0)
    with pytest.raises(ValueError, match="token_dim 3 .* fitted with token_dim 4"):
        flatten.transform(X_wide)


@pytest.mark.parametrize("make_bad, match", [
    (lambda X: X.reshape(len(X), -1), "X must be a 3-D array"),
    (lambda X: np.where(np.isclose(X, X[0, 0, 0]), np.nan, X), "NaN"),
    (lambda X: X * 2, "only 0.0 and 1.0"),
])
def test_bad_input(make_bad, match):
    X, _ = make_sparse_selection(5, 10, 4, 2, random_state=0)
    with pytest.raises(ValueError, match=match):
        FlattenTokens().fit(make_bad(X))
    with pytest.raises(ValueError, match=match):
        FlattenTokens().fit(X).transform(make_bad(X))


def test_declares_three_dimensional_input():
    tags = FlattenTokens().__sklearn_tags__()
    assert tags.input_tags.three_d_array and not tags.input_tags.two_d_array
