import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from sparse_token_estimators import make_sparse_selection
from sparse_token_estimators.modules import FullyConnectedNet, SparseTokenAttention
from sparse_token_estimators.positional import (
    FixedPositionalEncoding,
    StochasticPositionalEncoding,
    random_unit_vectors,
)


def _data(n=16, seq_len=10, token_dim=4, n_selected=3, seed=0):
    X, y = make_sparse_selection(n, seq_len, token_dim, n_selected, random_state=seed)
    return torch.as_tensor(X), torch.as_tensor(y)


def _with_random_W(module, seed=0, scale=1.0):
    with torch.no_grad():
        module.W.copy_(scale * torch.randn(module.W.shape,
                                           generator=torch.Generator().manual_seed(seed)))
    return module


def _naive_attention(P, indicator, W):
    """The paper's formula, one sequence at a time: softmax_i(p_i^T W z)."""
    rows = []
    for p, s in zip(P, indicator):  # p: (T, d_p), s: (T,)
        z = (s[:, None] * p).sum(0)  # sum of the selected positional vectors
        scores = torch.stack([p_i @ W @ z for p_i in p])
        rows.append(torch.softmax(scores, dim=0))
    return torch.stack(rows)  # (B, T)


class _RecordingEncoding(StochasticPositionalEncoding):
    """Stochastic encoding that keeps its last draw, to replay it in a reference."""

    def forward(self, *args, **kwargs):
        self.last = super().forward(*args, **kwargs)
        return self.last


# -- positional encodings ---------------------------------------------------------


def test_positional_vectors_are_unit_norm_and_near_orthogonal():
    P = random_unit_vectors(20, 512, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(P.norm(dim=-1), torch.ones(20))
    off_diagonal = (P @ P.T - torch.eye(20)).abs().max()
    assert off_diagonal < 5 / 512 ** 0.5


def test_stochastic_encoding_draws_afresh_and_follows_the_generator():
    pe = StochasticPositionalEncoding(8)
    a = pe(2, 5, generator=torch.Generator().manual_seed(0))
    b = pe(2, 5, generator=torch.Generator().manual_seed(0))
    assert a.shape == (2, 5, 8)
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a[0], a[1])  # every sequence gets its own vectors


def test_fixed_encoding_is_one_table_and_raises_past_max_seq_len():
    pe = FixedPositionalEncoding(8, max_seq_len=6)
    torch.testing.assert_close(pe(3, 4), pe.table[:4].unsqueeze(0))
    assert pe(3, 6).shape == (1, 6, 8)
    with pytest.raises(ValueError, match="seq_len 7 exceeds max_seq_len=6"):
        pe(3, 7)


# -- the attention module ---------------------------------------------------------


@pytest.mark.parametrize("encoding", ["stochastic", "fixed"])
def test_attention_shapes_and_zero_initialised_W(encoding):
    X, _ = _data(n=5, seq_len=10, token_dim=4)
    module = SparseTokenAttention(4, pe_dim=12, positional_encoding=encoding, max_seq_len=16)
    assert module.W.shape == (12, 12)
    assert torch.count_nonzero(module.W) == 0
    assert [name for name, _ in module.named_parameters()] == ["W"]
    for mode in (module.train, module.eval):
        mode()
        attention = module.attention(X)
        assert attention.shape == (5, 10)
        # W = 0: uniform attention, the output is the mean of all tokens
        torch.testing.assert_close(attention, torch.full((5, 10), 0.1))
        torch.testing.assert_close(module(X), X[..., :-1].mean(1))


def test_unknown_encoding_raises():
    with pytest.raises(ValueError, match="positional_encoding must be one of 'stochastic', 'fixed'"):
        SparseTokenAttention(4, positional_encoding="sinusoidal")


def test_forward_matches_naive_reference_fixed_encoding():
    X, _ = _data(n=6, seq_len=9)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=8, positional_encoding="fixed",
                                                 max_seq_len=12)).eval()
    P = module.positions.table[:9].expand(6, 9, 8)
    expected = _naive_attention(P, X[..., -1], module.W)
    torch.testing.assert_close(module.attention(X), expected)
    torch.testing.assert_close(module(X), (expected[..., None] * X[..., :-1]).sum(1))


def test_forward_matches_naive_reference_stochastic_training():
    X, _ = _data(n=6, seq_len=9)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=8, n_pe_draws=1)).train()
    module.positions = _RecordingEncoding(8)
    out = module(X, generator=torch.Generator().manual_seed(0))
    P = module.positions.last.reshape(6, 9, 8)
    expected = _naive_attention(P, X[..., -1], module.W)
    torch.testing.assert_close(out, (expected[..., None] * X[..., :-1]).sum(1))


def test_eval_attention_averages_draws_seeded_from_eval_seed():
    X, _ = _data(n=6, seq_len=9)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=8, n_pe_draws=3, eval_seed=11))
    module.eval()
    encoding = StochasticPositionalEncoding(8)
    draws = [encoding(1, 9, generator=torch.Generator().manual_seed(11 + k))[0] for k in range(3)]
    expected = torch.stack([_naive_attention(P.expand(6, 9, 8), X[..., -1], module.W)
                            for P in draws]).mean(0)
    torch.testing.assert_close(module.attention(X), expected)


def test_W_z_is_computed_before_the_product_with_the_positions():
    # One (T, d_p) x (d_p, d_p) product per sequence costs 2 B T d_p^2 flops; with
    # W z first the whole forward pass costs about 2 B (d_p^2 + 2 T d_p).
    batch, seq_len, pe_dim = 16, 64, 64
    X, _ = _data(n=batch, seq_len=seq_len)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=pe_dim, n_pe_draws=1)).train()
    with FlopCounterMode(display=False) as counter:
        module(X, generator=torch.Generator().manual_seed(0))
    assert counter.get_total_flops() < batch * seq_len * pe_dim * pe_dim


def test_large_multiple_of_identity_selects_the_tokens_exactly():
    # Orthonormal positions: p_i^T (c I) z = c for selected i and 0 otherwise,
    # so the softmax puts 1/q on each selected token as c grows.
    X, y = _data(n=50, seq_len=10, n_selected=3)
    module = SparseTokenAttention(4, pe_dim=16, positional_encoding="fixed", max_seq_len=16)
    with torch.no_grad():
        module.positions.table.copy_(torch.eye(16))
        module.W.copy_(30 * torch.eye(16))
    attention = module.eval().attention(X)
    torch.testing.assert_close(attention, X[..., -1] / 3)
    torch.testing.assert_close(module(X), y)


def test_large_multiple_of_identity_selects_the_tokens_with_random_positions():
    X, y = _data(n=200, seq_len=10, n_selected=3)
    module = SparseTokenAttention(4, pe_dim=1024, n_pe_draws=16).eval()
    with torch.no_grad():
        module.W.copy_(10 * torch.eye(1024))
    attention = module.attention(X).detach().numpy()
    selected = X[..., -1].numpy() == 1
    assert np.abs(attention[selected] - 1 / 3).max() < 0.15  # crosstalk between p_i
    assert abs(attention[selected].mean() - 1 / 3) < 1e-3
    assert attention[~selected].max() < 1e-3
    loss = ((module(X) - y) ** 2).sum(1).mean().item()
    assert loss < 0.05 * 4 / 3  # R^2 > 0.95


@pytest.mark.parametrize("encoding", ["stochastic", "fixed"])
def test_attention_rows_sum_to_one(encoding):
    X, _ = _data(n=8, seq_len=12)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=8, positional_encoding=encoding,
                                                 n_pe_draws=2), scale=5.0)
    for mode in (module.train, module.eval):
        mode()
        attention = module.attention(X)
        assert (attention >= 0).all()
        torch.testing.assert_close(attention.sum(1), torch.ones(8))


@pytest.mark.parametrize("encoding", ["stochastic", "fixed"])
def test_eval_predictions_are_per_sample_deterministic(encoding):
    X, _ = _data(n=20, seq_len=10)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=8, positional_encoding=encoding,
                                                 n_pe_draws=3)).eval()
    out = module(X)
    torch.testing.assert_close(module(X), out)  # repeatable
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(module(X[perm]), out[perm])  # order does not matter
    torch.testing.assert_close(module(X[:3]), out[:3])  # nor the other samples
    torch.testing.assert_close(module(X[7:8]), out[7:8])


def test_training_draws_differ_per_sequence_and_follow_the_generator():
    X, _ = _data(n=1, seq_len=10)
    X = X.expand(4, 10, 5)  # the same sequence four times
    module = _with_random_W(SparseTokenAttention(4, pe_dim=8, n_pe_draws=1)).train()
    out = module(X, generator=torch.Generator().manual_seed(0))
    assert not torch.allclose(out[0], out[1])  # fresh positions for every sequence
    torch.testing.assert_close(module(X, generator=torch.Generator().manual_seed(0)), out)


def test_eval_seed_changes_stochastic_predictions():
    X, _ = _data(n=4)
    a = _with_random_W(SparseTokenAttention(4, pe_dim=8, eval_seed=0)).eval()
    b = _with_random_W(SparseTokenAttention(4, pe_dim=8, eval_seed=1)).eval()
    assert not torch.allclose(a(X), b(X))


def test_stochastic_module_takes_any_length_fixed_up_to_its_table():
    stochastic = SparseTokenAttention(4, pe_dim=8).eval()
    fixed = SparseTokenAttention(4, pe_dim=8, positional_encoding="fixed", max_seq_len=12)
    for seq_len in (3, 12, 50):
        assert stochastic(_data(n=2, seq_len=seq_len)[0]).shape == (2, 4)
    assert fixed(_data(n=2, seq_len=12)[0]).shape == (2, 4)
    with pytest.raises(ValueError, match="max_seq_len=12"):
        fixed(_data(n=2, seq_len=13)[0])


def test_output_map_starts_at_identity_and_is_trainable():
    X, _ = _data(n=4)
    plain = SparseTokenAttention(4, pe_dim=8).eval()
    mapped = SparseTokenAttention(4, pe_dim=8, output_map=True).eval()
    torch.testing.assert_close(mapped(X), plain(X))
    assert sum(p.numel() for p in mapped.parameters()) == 8 * 8 + 4 * 4


def test_gradient_reaches_W():
    X, y = _data(n=32)
    module = SparseTokenAttention(4, pe_dim=8).train()
    ((module(X, generator=torch.Generator().manual_seed(0)) - y) ** 2).sum().backward()
    assert module.W.grad is not None and module.W.grad.abs().sum() > 0


# -- the fully-connected net ------------------------------------------------------


def test_fcn_shapes_layers_and_input_width():
    X, _ = _data(n=7, seq_len=10, token_dim=4)
    net = FullyConnectedNet(seq_len=10, token_dim=4, hidden_width=32, n_hidden_layers=2)
    assert net(X).shape == (7, 4)
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert [(lin.in_features, lin.out_features) for lin in linears] == [
        (10 * 5, 32), (32, 32), (32, 4)]  # tokens and indicator both enter


def test_fcn_sees_the_indicator():
    X, _ = _data(n=7)
    net = FullyConnectedNet(seq_len=10, token_dim=4, hidden_width=32)
    moved = X.clone()
    moved[..., -1] = moved[..., -1].roll(1, dims=1)
    assert not torch.allclose(net(X), net(moved))


def test_fcn_rejects_another_length():
    net = FullyConnectedNet(seq_len=10, token_dim=4, hidden_width=8)
    with pytest.raises(ValueError, match="built for seq_len=10; got sequences of length 12"):
        net(_data(n=2, seq_len=12)[0])
