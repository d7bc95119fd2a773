import math

import numpy as np
import pytest

from sparse_token_estimators import make_sparse_selection


def test_shapes_and_dtypes():
    X, y, support = make_sparse_selection(50, 12, 5, 4, return_support=True, random_state=0)
    assert X.shape == (50, 12, 6) and X.dtype == np.float32
    assert y.shape == (50, 5) and y.dtype == np.float32
    assert support.shape == (50, 4) and np.issubdtype(support.dtype, np.integer)


def test_defaults_match_the_documented_signature():
    X, y = make_sparse_selection(random_state=0)
    assert X.shape == (1000, 20, 9) and y.shape == (1000, 8)


def test_without_support_returns_two_arrays():
    assert len(make_sparse_selection(5, random_state=0)) == 2


@pytest.mark.parametrize("seq_len, n_selected", [(10, 1), (10, 3), (10, 10), (1, 1)])
def test_indicator_has_exactly_q_ones_at_the_support(seq_len, n_selected):
    X, _, support = make_sparse_selection(200, seq_len, 3, n_selected, return_support=True,
                                          random_state=0)
    indicator = X[..., -1]
    assert set(np.unique(indicator)) <= {0.0, 1.0}
    assert (indicator.sum(axis=1) == n_selected).all()
    # support is sorted, distinct, in range, and is where the indicator is 1
    assert (np.diff(support, axis=1) > 0).all()
    assert support.min() >= 0 and support.max() < seq_len
    expected = np.zeros_like(indicator)
    np.put_along_axis(expected, support, 1.0, axis=1)
    np.testing.assert_array_equal(indicator, expected)


def test_target_is_the_mean_of_the_selected_tokens():
    X, y, support = make_sparse_selection(100, 15, 4, 3, return_support=True, random_state=3)
    for i in range(len(X)):
        np.testing.assert_allclose(y[i], X[i, support[i], :4].mean(axis=0), rtol=1e-5,
                                   atol=1e-6)
    # the indicator picks the same tokens as the support
    mask = X[..., -1:]
    np.testing.assert_allclose(y, (X[..., :-1] * mask).sum(axis=1) / 3, rtol=1e-5, atol=1e-6)


def test_tokens_are_standard_gaussian_and_subsets_uniform():
    X, y, support = make_sparse_selection(20000, 8, 2, 2, return_support=True, random_state=0)
    tokens = X[..., :-1]
    assert abs(tokens.mean()) < 0.01 and abs(tokens.std() - 1) < 0.01
    # every position is selected with probability q / T
    freq = np.bincount(support.ravel(), minlength=8) / len(support)
    np.testing.assert_allclose(freq, 2 / 8, atol=0.015)
    # Var(y_j) = 1 / q
    np.testing.assert_allclose(y.var(axis=0), 1 / 2, rtol=0.05)


@pytest.mark.parametrize("n_selected", [1, 2, 3, 4, 5])
def test_every_subset_is_equally_likely(n_selected):
    # Not only each position: each of the C(T, q) subsets has probability
    # 1 / C(T, q) (q <= T / 2 draws the subset, q > T / 2 its complement).
    n, T = 60000, 6
    X, _, support = make_sparse_selection(n, T, 1, n_selected, return_support=True,
                                          random_state=3)
    codes = (X[..., -1] @ (2 ** np.arange(T))).astype(int)
    np.testing.assert_array_equal(codes, (2 ** support).sum(axis=1))
    values, counts = np.unique(codes, return_counts=True)
    n_subsets = math.comb(T, n_selected)
    assert len(values) == n_subsets
    p = 1 / n_subsets
    assert np.abs(counts - n * p).max() < 5 * np.sqrt(n * p * (1 - p))


def test_same_seed_same_data_other_seed_other_data():
    a = make_sparse_selection(30, 10, 3, 2, return_support=True, random_state=7)
    b = make_sparse_selection(30, 10, 3, 2, return_support=True, random_state=7)
    c = make_sparse_selection(30, 10, 3, 2, return_support=True, random_state=8)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a[0], c[0])
    assert not np.array_equal(a[2], c[2])


@pytest.mark.parametrize("make_state", [
    lambda: None, lambda: 0, lambda: np.int64(5),
    lambda: np.random.RandomState(0), lambda: np.random.default_rng(0),
])
def test_random_state_kinds_are_accepted(make_state):
    X, y = make_sparse_selection(10, 6, 2, 2, random_state=make_state())
    assert X.shape == (10, 6, 3) and y.shape == (10, 2)


def test_random_state_instances_are_consumed_and_reproducible():
    # an instance advances, so two calls differ; the same seeded instance repeats
    for make in (np.random.RandomState, np.random.default_rng):
        rng = make(0)
        first, second = make_sparse_selection(5, 6, 2, 2, random_state=rng)[0], \
            make_sparse_selection(5, 6, 2, 2, random_state=rng)[0]
        assert not np.array_equal(first, second)
        np.testing.assert_array_equal(first, make_sparse_selection(5, 6, 2, 2,
                                                                   random_state=make(0))[0])


def test_no_global_state_used_with_a_seed():
    np.random.seed(0)
    a = make_sparse_selection(5, 6, 2, 2, random_state=1)[0]
    np.random.seed(1)
    b = make_sparse_selection(5, 6, 2, 2, random_state=1)[0]
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(n_samples=0), ValueError, "n_samples"),
    (dict(n_samples=-3), ValueError, "n_samples"),
    (dict(seq_len=0), ValueError, "seq_len"),
    (dict(token_dim=0), ValueError, "token_dim"),
    (dict(n_selected=0), ValueError, "n_selected"),
    (dict(seq_len=5, n_selected=6), ValueError, "n_selected must be between 1 and seq_len=5"),
    (dict(n_samples=2.5), TypeError, "n_samples must be an integer"),
    (dict(seq_len="20"), TypeError, "seq_len"),
    (dict(n_selected=True), TypeError, "n_selected"),
    (dict(random_state="seed"), TypeError, "random_state"),
])
def test_bad_arguments_raise_naming_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_sparse_selection(**kwargs)


def test_numpy_integer_sizes_are_accepted():
    X, y = make_sparse_selection(np.int32(4), np.int64(6), np.int16(2), np.uint8(3))
    assert X.shape == (4, 6, 3)
