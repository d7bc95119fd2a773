import itertools
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import mean_squared_error

from sparse_token_estimators import make_sparse_selection
from sparse_token_estimators.modules import SparseTokenAttention
from sparse_token_estimators.theory import (
    best_case_r2,
    fcn_critical_width,
    fcn_lower_bound,
    fcn_width_threshold,
    identity_alignment,
    pe_dim_best,
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


def _expected_gram(T, d, q):
    """E_S[M_S^T M_S] by enumerating every q-subset S (y = M_S x, x in R^{T d})."""
    gram = np.zeros((T * d, T * d))
    subsets = list(itertools.combinations(range(T), q))
    for S in subsets:
        s = np.zeros(T)
        s[list(S)] = 1.0
        M = np.kron(s[None, :], np.eye(d)) / q  # (d, T d): token t, coordinate k at t d + k
        gram += M.T @ M
    return gram / len(subsets)


@pytest.mark.parametrize("T, d, q", [(4, 2, 1), (5, 3, 2), (6, 2, 3), (4, 3, 4)])
def test_width_aware_bound_is_the_sum_of_the_smallest_eigenvalues(T, d, q):
    eigenvalues = np.sort(np.linalg.eigvalsh(_expected_gram(T, d, q)))
    # A (x) I_d: 1/T d times, (T - q) / (T q (T - 1)) the other (T - 1) d times
    small = (T - q) / (T * q * (T - 1))
    assert eigenvalues == pytest.approx(np.sort([1 / T] * d + [small] * ((T - 1) * d)))
    for m in range(1, T * d + 3):
        expected = eigenvalues[:max(T * d - m, 0)].sum()
        assert fcn_lower_bound(T, q, token_dim=d, width=m) == pytest.approx(expected, abs=1e-12)
    # the paper's bound is the case m = T d - 1; all eigenvalues sum to d / q
    paper = fcn_lower_bound(T, q)
    assert fcn_lower_bound(T, q, token_dim=d, width=T * d - 1) == pytest.approx(paper)
    assert eigenvalues.sum() == pytest.approx(zero_predictor_loss(d, q))


@pytest.mark.parametrize("m", [1, 3, 8, 14, 20])
def test_width_aware_bound_is_reached_by_the_best_linear_bottleneck(m):
    # The best predictor that sees the tokens through a rank-m projection P
    # is M_S P x, P onto the top-m eigenvectors of E_S[M_S^T M_S]; its loss,
    # by Monte Carlo on the task's data, is the bound.
    T, d, q = 6, 3, 2
    eigenvalues, vectors = np.linalg.eigh(_expected_gram(T, d, q))
    top = vectors[:, np.argsort(eigenvalues)[::-1][:m]]  # (T d, m)
    X, y = make_sparse_selection(100_000, T, d, q, random_state=0)
    x = X[..., :d].reshape(len(X), T * d).astype(np.float64)  # flattened tokens
    selected = X[..., d].astype(np.float64)  # (n, T)
    projected = ((x @ top) @ top.T).reshape(len(X), T, d)
    prediction = np.einsum("nt,ntk->nk", selected, projected) / q  # M_S P x
    bound = fcn_lower_bound(T, q, token_dim=d, width=m)
    assert selection_loss(y, prediction) == pytest.approx(bound, rel=0.02, abs=2e-3)
    # a worse bottleneck (the bottom eigenvectors) loses more
    if m < T * d - d:
        bottom = vectors[:, np.argsort(eigenvalues)[:m]]
        worse = np.einsum("nt,ntk->nk", selected,
                          ((x @ bottom) @ bottom.T).reshape(len(X), T, d)) / q
        assert selection_loss(y, worse) > bound + 0.01


def test_width_aware_bound_shape():
    T, d, q = 10, 8, 3
    values = [fcn_lower_bound(T, q, token_dim=d, width=m) for m in range(1, T * d + 5)]
    assert all(a >= b for a, b in zip(values, values[1:]))  # falls with width ...
    assert values[T * d - 1:] == [0.0] * 5  # ... to 0 from m = T d on
    # each unit of width removes one eigenvalue: (T - q) / (T q (T - 1)) from
    # d to T d, the larger 1/T below d (values[k] is the bound at width k + 1)
    assert values[d - 1] - values[d] == pytest.approx((T - q) / (T * q * (T - 1)))
    assert values[d - 2] - values[d - 1] == pytest.approx(1 / T)
    # R^2 ceilings of the example: widths 16, 24, 40 at T=10, d=8, q=3
    ceilings = [1 - fcn_lower_bound(T, q, token_dim=d, width=m) / zero_predictor_loss(d, q)
                for m in (16, 24, 40)]
    assert ceilings == pytest.approx([0.378, 0.456, 0.611], abs=1e-3)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"width": 16}, ValueError, "got width but not token_dim"),
    ({"token_dim": 8}, ValueError, "got token_dim but not width"),
    ({"token_dim": 8, "width": -1}, ValueError, "width must be an integer >= 0"),
    ({"token_dim": 8, "width": 16.0}, TypeError, "width must be an integer"),
])
def test_width_aware_bound_rejects_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        fcn_lower_bound(10, 3, **kwargs)


@pytest.mark.parametrize("T, q, d", [(7, 2, 3), (10, 3, 8), (4, 4, 2)])
def test_width_aware_bound_at_width_zero_is_the_loss_of_predicting_zero(T, q, d):
    # the net sees nothing of the tokens: d / q, as the docstring says
    assert fcn_lower_bound(T, q, token_dim=d, width=0) == pytest.approx(
        zero_predictor_loss(d, q))


@pytest.mark.parametrize("T, q, d", [(4, 2, 2), (8, 3, 8), (10, 3, 8), (32, 3, 8)])
@pytest.mark.parametrize("r2", [0.0, 0.5, 0.8, 0.95, 1.0])
def test_critical_width_is_the_first_width_whose_ceiling_reaches_r2(T, q, d, r2):
    def ceiling(m):
        return 1 - fcn_lower_bound(T, q, token_dim=d, width=m) / zero_predictor_loss(d, q)

    m = fcn_critical_width(T, q, d, r2)
    assert ceiling(m) >= r2 - 1e-12
    assert m == 0 or ceiling(m - 1) < r2 - 1e-12


def test_critical_width_refuses_r2_above_one():
    with pytest.raises(ValueError, match="r2 must be at most 1"):
        fcn_critical_width(10, 3, 8, 1.5)


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
    # (seeded; 3 * W in float64, so that float32 rounding of the product
    # cannot move an alignment near 0 past a relative tolerance)
    generator = torch.Generator().manual_seed(0)
    W = (torch.eye(6) + torch.randn(6, 6, generator=generator)).requires_grad_()
    tripled = 3 * W.detach().numpy().astype(np.float64)
    assert identity_alignment(W) == pytest.approx(identity_alignment(tripled))
    assert -1 <= identity_alignment(W) <= 1


def test_identity_alignment_rejects_non_square():
    with pytest.raises(ValueError, match="square"):
        identity_alignment(np.ones((2, 3)))


# -- the best case W = c I ------------------------------------------------------------


def _module_r2(seq_len, n_selected, pe_dim, c, n_samples, seed, token_dim=8):
    """R^2 of the module itself at W = c I, fresh draws per sequence; with its SE.

    The module in training mode draws every sequence's positions afresh from
    the generator. The R^2 is taken against the population variance 1/q per
    coordinate, as the theory's is.
    """
    X, y = make_sparse_selection(n_samples, seq_len, token_dim, n_selected, random_state=seed)
    module = SparseTokenAttention(token_dim, pe_dim=pe_dim, n_pe_draws=1).train()
    with torch.no_grad():
        module.W.copy_(c * torch.eye(pe_dim))
        out = module(torch.as_tensor(X), generator=torch.Generator().manual_seed(seed))
    losses = n_selected * ((out.double().numpy() - y) ** 2).mean(axis=1)  # 1 - R^2 per sequence
    return 1 - losses.mean(), losses.std(ddof=1) / math.sqrt(n_samples)


@pytest.mark.parametrize("seq_len, pe_dim", [(8, 16), (16, 30), (32, 64)])
def test_best_case_agrees_with_a_monte_carlo_of_the_module(seq_len, pe_dim):
    best = best_case_r2(seq_len, 3, pe_dim)
    r2, se = _module_r2(seq_len, 3, pe_dim, best.c, n_samples=20000, seed=seq_len)
    # three combined standard errors: a test that fails by chance 3 times in 1000
    assert abs(r2 - best.r2) < 3 * math.hypot(se, best.stderr), (r2, se, best)
    # and at a c away from the best one, which the best case beats
    off = best_case_r2(seq_len, 3, pe_dim, c=2 * best.c)
    r2_off, se_off = _module_r2(seq_len, 3, pe_dim, off.c, n_samples=20000, seed=seq_len + 1)
    assert abs(r2_off - off.r2) < 3 * math.hypot(se_off, off.stderr)
    assert off.r2 < best.r2


def test_best_case_at_c_zero_is_uniform_attention():
    # W = 0: a_i = 1/T for every draw, R^2 = q / T exactly
    best = best_case_r2(10, 3, 8, c=0.0)
    assert best.r2 == pytest.approx(0.3) and best.stderr == pytest.approx(0, abs=1e-12)


def test_best_case_rises_with_pe_dim_and_more_draws_help():
    r2 = [best_case_r2(16, 3, pe_dim).r2 for pe_dim in (8, 16, 32, 64)]
    assert r2 == sorted(r2) and r2[0] > 3 / 16
    # averaging the attention over draws (n_pe_draws) lowers the random part
    assert best_case_r2(16, 3, 16, n_pe_draws=4).r2 > best_case_r2(16, 3, 16).r2


def test_pe_dim_best_matches_the_audit_at_T16():
    # the audit's independent computation (issue 31): 30 at T = 16, q = 3
    assert abs(pe_dim_best(16, 3) - 30) <= 1
    found = pe_dim_best(16, 3)
    assert best_case_r2(16, 3, found).r2 >= 0.8 > best_case_r2(16, 3, found - 1).r2


def test_pe_dim_best_grows_with_T_and_the_target():
    assert pe_dim_best(8, 3) < pe_dim_best(16, 3) < pe_dim_best(32, 3)
    assert pe_dim_best(16, 3, target=0.5) < pe_dim_best(16, 3)


def test_best_case_is_seeded_and_cached():
    assert best_case_r2(12, 2, 10, random_state=1) == best_case_r2(12, 2, 10, random_state=1)
    assert best_case_r2(12, 2, 10, random_state=1) != best_case_r2(12, 2, 10, random_state=2)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(seq_len=4, n_selected=5, pe_dim=8), ValueError, "n_selected must be between"),
    (dict(seq_len=4, n_selected=2, pe_dim=0), ValueError, "pe_dim must be an integer"),
    (dict(seq_len=4, n_selected=2, pe_dim=8, c=float("nan")), ValueError, "c must be a finite"),
    (dict(seq_len=4, n_selected=2, pe_dim=8, random_state=None), TypeError, "random_state"),
    (dict(seq_len=4, n_selected=2, pe_dim=8, n_draws=1), ValueError, "n_draws"),
])
def test_best_case_rejects_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        best_case_r2(**kwargs)


def test_pe_dim_best_rejects_a_target_of_one_and_gives_up_at_its_limit():
    with pytest.raises(ValueError, match="target must be a number below 1"):
        pe_dim_best(8, 3, target=1.0)
    with pytest.raises(ValueError, match="raise max_pe_dim"):
        pe_dim_best(64, 3, max_pe_dim=8)
