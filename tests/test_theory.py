import math

import numpy as np
import pytest
import torch
from sklearn.metrics import mean_squared_error

from sparse_token_estimators import make_sparse_selection
from sparse_token_estimators.theory import (
    fcn_lower_bound,
    fcn_width_threshold,
    identity_alignment,
    selection_loss,
    transformer_pe_scale,
    uniform_attention_loss,
    zero_predictor_loss,
)


@pytest.mark.parametrize("T, q, expected", [(20, 3, 17 / 1140), (10, 1, 9 / 90), (5, 5, 0.0)])
def test_fcn_lower_bound_formula(T, q, expected):
    assert fcn_lower_bound(T, q) == pytest.approx(expected)


def test_fcn_lower_bound_is_below_the_trivial_losses():
    # The bound is a floor under any narrow FCN; predicting 0 and uniform
    # attention sit above it for every task size.
    for T in (2, 5, 20, 100):
        for q in range(1, T):
            for d in (1, 8):
                assert fcn_lower_bound(T, q) <= uniform_attention_loss(T, d, q)
                assert uniform_attention_loss(T, d, q) < zero_predictor_loss(d, q)


@pytest.mark.parametrize("args, error", [((1, 1), ValueError), ((5, 6), ValueError),
                                         ((5.0, 2), TypeError), ((5, 0), ValueError)])
def test_fcn_lower_bound_rejects_bad_sizes(args, error):
    with pytest.raises(error):
        fcn_lower_bound(*args)


def test_reference_losses_match_the_data():
    X, y = make_sparse_selection(40000, 12, 4, 3, random_state=0)
    tokens = X[..., :-1]
    zero = selection_loss(y, np.zeros_like(y))
    uniform = selection_loss(y, tokens.mean(axis=1))
    assert zero == pytest.approx(zero_predictor_loss(4, 3), rel=0.03)
    assert uniform == pytest.approx(uniform_attention_loss(12, 4, 3), rel=0.03)


def test_selection_loss_is_mse_times_token_dim():
    rng = np.random.default_rng(0)
    y, pred = rng.normal(size=(50, 6)), rng.normal(size=(50, 6))
    assert selection_loss(y, pred) == pytest.approx(6 * mean_squared_error(y, pred))
    with pytest.raises(ValueError, match="n_samples, token_dim"):
        selection_loss(y, pred[:, :5])


def test_width_scales():
    assert fcn_width_threshold(20, 8) == 160
    assert transformer_pe_scale(20, 3) == pytest.approx(3 * math.log(20))
    with pytest.raises(ValueError, match="n_selected"):
        transformer_pe_scale(3, 4)


def test_identity_alignment():
    assert identity_alignment(2.5 * np.eye(5)) == pytest.approx(1.0)
    assert identity_alignment(-np.eye(5)) == pytest.approx(-1.0)
    assert identity_alignment(np.zeros((3, 3))) == 0.0
    off_diagonal = np.ones((4, 4)) - np.eye(4)
    assert identity_alignment(off_diagonal) == pytest.approx(0.0)
    # scale-free, and torch tensors (with grad) are accepted
    W = torch.randn(6, 6, requires_grad=True)
    assert identity_alignment(W) == pytest.approx(identity_alignment(3 * W.detach().numpy()))
    assert -1 <= identity_alignment(W) <= 1


def test_identity_alignment_rejects_non_square():
    with pytest.raises(ValueError, match="square"):
        identity_alignment(np.ones((2, 3)))
