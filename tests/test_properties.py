"""Property-based tests of make_sparse_selection over its whole argument range."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sparse_token_estimators import make_sparse_selection

SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def arguments(draw):
    seq_len = draw(st.integers(1, 40))
    return dict(
        n_samples=draw(st.integers(1, 30)),
        seq_len=seq_len,
        token_dim=draw(st.integers(1, 6)),
        n_selected=draw(st.integers(1, seq_len)),
        random_state=draw(st.integers(0, 2**32 - 1)),
    )


EDGES = [  # n_selected = 1, n_selected = seq_len, seq_len = 1, token_dim = 1
    dict(n_samples=5, seq_len=7, token_dim=3, n_selected=1, random_state=0),
    dict(n_samples=5, seq_len=7, token_dim=3, n_selected=7, random_state=0),
    dict(n_samples=5, seq_len=1, token_dim=3, n_selected=1, random_state=0),
    dict(n_samples=5, seq_len=7, token_dim=1, n_selected=3, random_state=0),
    dict(n_samples=1, seq_len=1, token_dim=1, n_selected=1, random_state=0),
]


def with_edges(test):
    for edge in EDGES:
        test = example(edge)(test)
    return test


@SETTINGS
@with_edges
@given(arguments())
def test_shapes_dtypes_and_selection(args):
    X, y, support = make_sparse_selection(**args, return_support=True)
    n, T, d, q = args["n_samples"], args["seq_len"], args["token_dim"], args["n_selected"]
    assert X.shape == (n, T, d + 1) and X.dtype == np.float32
    assert y.shape == (n, d) and y.dtype == np.float32
    assert support.shape == (n, q) and support.dtype == np.int64
    indicator = X[..., -1]
    assert set(np.unique(indicator)) <= {0.0, 1.0}
    assert (indicator.sum(axis=1) == q).all()
    assert np.isfinite(X).all() and np.isfinite(y).all()


@SETTINGS
@with_edges
@given(arguments())
def test_support_matches_indicator(args):
    X, _, support = make_sparse_selection(**args, return_support=True)
    assert (np.diff(support, axis=1) > 0).all()  # sorted, no repeats
    assert support.min() >= 0 and support.max() < args["seq_len"]
    from_support = np.zeros(X.shape[:2], dtype=np.float32)
    np.put_along_axis(from_support, support, 1.0, axis=1)
    np.testing.assert_array_equal(X[..., -1], from_support)


@SETTINGS
@with_edges
@given(arguments())
def test_target_is_mean_of_selected_tokens(args):
    X, y = make_sparse_selection(**args)
    tokens, indicator = X[..., :-1].astype(np.float64), X[..., -1:].astype(np.float64)
    expected = (tokens * indicator).sum(axis=1) / args["n_selected"]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


@SETTINGS
@given(arguments())
def test_seeds_reproduce(args):
    seed = args.pop("random_state")
    first = make_sparse_selection(**args, random_state=seed, return_support=True)
    for again in (
        make_sparse_selection(**args, random_state=seed, return_support=True),
        make_sparse_selection(**args, random_state=np.random.default_rng(seed),
                              return_support=True),
    ):
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b)
    # return_support only adds an output: X and y are the same draw
    X, y = make_sparse_selection(**args, random_state=seed)
    np.testing.assert_array_equal(X, first[0])
    np.testing.assert_array_equal(y, first[1])
    # a RandomState drives the draw too, reproducibly
    a = make_sparse_selection(**args, random_state=np.random.RandomState(seed))
    b = make_sparse_selection(**args, random_state=np.random.RandomState(seed))
    np.testing.assert_array_equal(a[0], b[0])


@SETTINGS
@given(arguments(), st.integers(0, 2**32 - 1))
def test_different_seeds_give_different_tokens(args, other):
    seed = args.pop("random_state")
    if other == seed:
        other += 1
    X_a, _ = make_sparse_selection(**args, random_state=seed)
    X_b, _ = make_sparse_selection(**args, random_state=other)
    assert not np.array_equal(X_a[..., :-1], X_b[..., :-1])


def test_generator_is_consumed():
    # As in scikit-learn: one Generator passed twice gives two different draws.
    rng = np.random.default_rng(0)
    X_a, _ = make_sparse_selection(10, 5, 2, 2, random_state=rng)
    X_b, _ = make_sparse_selection(10, 5, 2, 2, random_state=rng)
    assert not np.array_equal(X_a, X_b)


def test_edge_single_selected_token_is_the_target():
    X, y, support = make_sparse_selection(50, 9, 4, n_selected=1, random_state=0,
                                          return_support=True)
    np.testing.assert_array_equal(y, X[np.arange(50), support[:, 0], :-1])


def test_edge_all_tokens_selected():
    X, y = make_sparse_selection(50, 9, 4, n_selected=9, random_state=0)
    assert (X[..., -1] == 1).all()
    np.testing.assert_allclose(y, X[..., :-1].mean(axis=1), rtol=1e-5, atol=1e-6)


def test_tokens_are_standard_gaussian_and_subsets_uniform():
    # Loose statistical checks on one large fixed draw (failure odds ~1e-6).
    n, T, d, q = 20000, 10, 3, 3
    X, _, support = make_sparse_selection(n, T, d, q, random_state=0, return_support=True)
    tokens = X[..., :-1].reshape(-1, d)
    se = 1 / np.sqrt(len(tokens))
    assert np.abs(tokens.mean(axis=0)).max() < 5 * se
    assert np.abs(tokens.var(axis=0) - 1).max() < 5 * np.sqrt(2) * se
    counts = np.bincount(support.ravel(), minlength=T)  # each position: n q / T
    p = q / T
    assert np.abs(counts - n * p).max() < 5 * np.sqrt(n * p * (1 - p))


@SETTINGS
@given(st.sampled_from(["n_samples", "seq_len", "token_dim", "n_selected"]),
       st.integers(-5, 0))
def test_non_positive_sizes_are_refused(name, value):
    args = dict(n_samples=4, seq_len=5, token_dim=2, n_selected=2)
    with pytest.raises(ValueError, match=f"{name} must be an integer >= 1; got {value}"):
        make_sparse_selection(**{**args, name: value})


@pytest.mark.parametrize("name", ["n_samples", "seq_len", "token_dim", "n_selected"])
@pytest.mark.parametrize("value", [2.0, "3", None, True, np.float64(2)])
def test_non_integer_sizes_are_refused(name, value):
    args = dict(n_samples=4, seq_len=5, token_dim=2, n_selected=2)
    with pytest.raises(TypeError, match=f"{name} must be an integer"):
        make_sparse_selection(**{**args, name: value})


@SETTINGS
@given(st.integers(1, 30), st.integers(1, 10))
def test_more_selected_than_positions_is_refused(seq_len, extra):
    with pytest.raises(ValueError, match=f"n_selected must be between 1 and seq_len={seq_len}"):
        make_sparse_selection(3, seq_len, 2, n_selected=seq_len + extra)


def test_numpy_integers_are_accepted():
    X, y = make_sparse_selection(np.int64(3), np.int32(4), np.uint8(2), np.int16(2))
    assert X.shape == (3, 4, 3) and y.shape == (3, 2)
