import copy
import logging
import math
import pickle
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters
from torch.utils.flop_counter import FlopCounterMode

from sparse_token_estimators import SparseTokenTransformer, make_sparse_selection
from sparse_token_estimators.modules import FullyConnectedNet, SparseTokenAttention
from sparse_token_estimators.positional import (
    ENCODINGS,
    StochasticPositionalEncoding,
    random_unit_vectors,
)
from sparse_token_estimators.theory import best_case_r2

NAMES = list(ENCODINGS)


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
    """Stochastic encoding that keeps its last vectors, to replay them in a reference."""

    def forward(self, shape, noise):
        self.last = super().forward(shape, noise)
        return self.last


# -- the attention module ---------------------------------------------------------


@pytest.mark.parametrize("encoding", NAMES)
def test_attention_shapes_and_zero_initialised_W(encoding):
    X, _ = _data(n=5, seq_len=10, token_dim=4)
    module = SparseTokenAttention(4, pe_dim=12, positional_encoding=encoding, max_seq_len=16)
    assert module.W.shape == (12, 12)
    assert torch.count_nonzero(module.W) == 0
    trained = ["W", "positions.table"] if encoding == "learned" else ["W"]
    assert [name for name, _ in module.named_parameters()] == trained
    for mode in (module.train, module.eval):
        mode()
        attention = module.attention(X)
        assert attention.shape == (5, 10)
        # W = 0: uniform attention, the output is the mean of all tokens
        torch.testing.assert_close(attention, torch.full((5, 10), 0.1))
        torch.testing.assert_close(module(X), X[..., :-1].mean(1))


def test_unknown_encoding_raises():
    names = "'stochastic', 'fixed', 'sinusoidal', 'learned', 'randomized'; got 'rope'"
    with pytest.raises(ValueError, match=f"positional_encoding must be one of {names}"):
        SparseTokenAttention(4, positional_encoding="rope")


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


def test_eval_attention_averages_every_sequences_own_draws():
    X, _ = _data(n=6, seq_len=9)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=8, n_pe_draws=3, eval_seed=11))
    module.eval()
    P = module._eval_positions(X)  # (K, B, T, d_p): the draws eval mode uses
    assert P.shape == (3, 6, 9, 8)
    torch.testing.assert_close(P.norm(dim=-1), torch.ones(3, 6, 9))
    expected = torch.stack([_naive_attention(P[k], X[..., -1], module.W)
                            for k in range(3)]).mean(0)
    torch.testing.assert_close(module.attention(X), expected)


@pytest.mark.parametrize("encoding", ["stochastic", "randomized"])
def test_two_sequences_of_one_batch_get_different_draws(encoding):
    X, _ = _data(n=2, seq_len=9)
    module = SparseTokenAttention(4, pe_dim=8, positional_encoding=encoding, max_seq_len=32,
                                  n_pe_draws=2).eval()
    P = module._eval_positions(X)  # (2, 2, 9, 8)
    assert not torch.equal(P[:, 0], P[:, 1])  # the two sequences
    assert not torch.equal(P[0], P[1])  # the two draws of each
    # a sequence's draws are its own: the same alone as in the batch
    assert torch.equal(module._eval_positions(X[1:]), P[:, 1:])
    # identical tokens, another subset: other draws
    other = X[:1].clone()
    other[0, :, -1] = other[0, :, -1].flip(0)
    assert not torch.equal(module._eval_positions(other)[:, 0], P[:, 0])


def test_eval_draws_are_fresh_signs_per_sequence():
    # Over many sequences, the eval-mode draws are independent fair signs
    # +-1/sqrt(d_p): coordinate means near 0, products of two positions near 0.
    X, _ = _data(n=4000, seq_len=4)
    module = SparseTokenAttention(4, pe_dim=8).eval()
    P = module._eval_positions(X)[0].sign()  # (B, T, d_p) of +-1
    assert module._eval_positions(X).abs().unique().tolist() == [np.float32(8 ** -0.5)]
    assert P.mean(0).abs().max() < 5 / math.sqrt(4000)  # 5 sigma
    crossing = (P[:, 0] * P[:, 1]).mean(0)
    assert crossing.abs().max() < 5 / math.sqrt(4000)


def test_eval_draw_is_unbiased_for_the_best_case():
    # W = c I, one draw per sequence: the mean over sequences is the best
    # case of the theory (fresh draws per sequence), within the combined SE.
    seq_len, n_selected, pe_dim, n = 16, 3, 30, 20000
    best = best_case_r2(seq_len, n_selected, pe_dim)
    X, y = make_sparse_selection(n, seq_len, 8, n_selected, random_state=7)
    module = SparseTokenAttention(8, pe_dim=pe_dim, n_pe_draws=1, eval_seed=3).eval()
    with torch.no_grad():
        module.W.copy_(best.c * torch.eye(pe_dim))
        out = module(torch.as_tensor(X)).double().numpy()
    losses = n_selected * ((out - y) ** 2).mean(axis=1)
    se = losses.std(ddof=1) / math.sqrt(n)
    assert abs(1 - losses.mean() - best.r2) < 3 * math.hypot(se, best.stderr)


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


@pytest.mark.parametrize("encoding", NAMES)
def test_attention_rows_sum_to_one(encoding):
    X, _ = _data(n=8, seq_len=12)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=8, positional_encoding=encoding,
                                                 n_pe_draws=2), scale=5.0)
    for mode in (module.train, module.eval):
        mode()
        attention = module.attention(X)
        assert (attention >= 0).all()
        torch.testing.assert_close(attention.sum(1), torch.ones(8))


@pytest.mark.parametrize("encoding", NAMES)
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


@pytest.mark.parametrize("encoding", ["stochastic", "randomized"])
def test_eval_seed_changes_random_predictions(encoding):
    X, _ = _data(n=4)
    a = _with_random_W(SparseTokenAttention(4, pe_dim=8, positional_encoding=encoding,
                                            eval_seed=0)).eval()
    b = _with_random_W(SparseTokenAttention(4, pe_dim=8, positional_encoding=encoding,
                                            eval_seed=1)).eval()
    assert not torch.allclose(a(X), b(X))


@pytest.mark.parametrize("encoding", NAMES)
def test_module_takes_any_length_or_up_to_its_table(encoding):
    module = SparseTokenAttention(4, pe_dim=8, positional_encoding=encoding, max_seq_len=12)
    for mode in (module.train, module.eval):
        mode()
        for seq_len in (3, 12):
            assert module(_data(n=2, seq_len=seq_len)[0]).shape == (2, 4)
        if ENCODINGS[encoding].takes_any_length:
            assert module(_data(n=2, seq_len=50)[0]).shape == (2, 4)
        else:
            with pytest.raises(ValueError, match=f"seq_len 13 exceeds max_seq_len=12 of the "
                                                 f"{encoding} positional encoding"):
                module(_data(n=2, seq_len=13)[0])


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


# -- the random input (draw_noise) and the prediction state ---------------------------


@pytest.mark.parametrize("encoding", NAMES)
def test_drawn_noise_gives_what_forward_draws_itself(encoding):
    X, _ = _data(n=6, seq_len=9)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=8, positional_encoding=encoding,
                                                 max_seq_len=16, n_pe_draws=2)).train()
    noise = module.draw_noise(X, generator=torch.Generator().manual_seed(0))
    assert (noise is None) == (not ENCODINGS[encoding].random)
    expected = module(X, generator=torch.Generator().manual_seed(0))
    assert torch.equal(module(X, noise=noise), expected)
    module.eval()
    noise = module.draw_noise(X)
    if noise is not None:  # one key per sequence, its own whatever the batch
        assert noise.shape == (6,) and noise.dtype == torch.int64
        assert torch.equal(module.draw_noise(X[:2]), noise[:2])
        assert len(noise.unique()) == 6
    assert torch.equal(module(X, noise=noise), module(X))


def test_training_draw_is_one_seeded_call_for_the_whole_batch():
    # The split into draw_noise and forward keeps the draws of before: all
    # K * B * T * d_p signs from one call on the generator.
    X, _ = _data(n=6, seq_len=9)
    module = SparseTokenAttention(4, pe_dim=8, n_pe_draws=3).train()
    module.positions = _RecordingEncoding(8)
    module(X, noise=module.draw_noise(X, generator=torch.Generator().manual_seed(4)))
    expected = random_unit_vectors(3 * 6, 9, 8, generator=torch.Generator().manual_seed(4))
    assert torch.equal(module.positions.last, expected.view(3, 6, 9, 8))


def test_eval_seed_is_an_int64_buffer_in_the_state_dict():
    module = SparseTokenAttention(4, pe_dim=8, eval_seed=2**40)
    state = module.state_dict()
    assert list(state) == ["W", "eval_seed"]
    assert state["eval_seed"].dtype == torch.int64 and state["eval_seed"].shape == ()
    assert int(state["eval_seed"]) == 2**40


@pytest.mark.parametrize("encoding", ["stochastic", "randomized"])
def test_loaded_state_predicts_bit_for_bit_whatever_the_new_seed(encoding):
    kwargs = dict(pe_dim=8, positional_encoding=encoding, max_seq_len=64, n_pe_draws=4)
    saved = _with_random_W(SparseTokenAttention(4, eval_seed=3, **kwargs), scale=3.0).eval()
    new = SparseTokenAttention(4, eval_seed=8, **kwargs).eval()
    lengths = (10, 40)  # the training length and another
    for seq_len in lengths:
        new(_data(seq_len=seq_len)[0])  # draws (and keeps) its own eval positions
    new.load_state_dict(saved.state_dict())
    for seq_len in lengths:
        X, _ = _data(seq_len=seq_len)
        assert torch.equal(new(X), saved(X))
        assert torch.equal(new.attention(X), saved.attention(X))


def test_n_pe_draws_may_change_on_a_built_module():
    X, _ = _data(n=8)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=8, n_pe_draws=1, eval_seed=5)).eval()
    one = module(X)
    module.n_pe_draws = 4
    built_with_four = SparseTokenAttention(4, pe_dim=8, n_pe_draws=4, eval_seed=5).eval()
    built_with_four.load_state_dict(module.state_dict())
    assert torch.equal(module(X), built_with_four(X))
    assert not torch.equal(module(X), one)


def _broadcast_attention(module, X):
    """The eval-mode formula with every draw in memory at once, (K, B, T, d_p)."""
    P = module._eval_positions(X)  # (K, B, T, d_p), or (1, B, T, d_p) broadcast
    z = torch.matmul(X[..., -1].unsqueeze(1), P)  # (K, B, 1, d_p)
    scores = (P @ (z @ module.W.T).transpose(-1, -2)).squeeze(-1)  # (K, B, T)
    return torch.softmax(scores, dim=-1).mean(0)


@pytest.mark.parametrize("encoding", NAMES)
def test_blocked_eval_attention_matches_the_broadcast_formula(encoding):
    # 150 sequences: three blocks of the products, the last one padded
    X, _ = _data(n=150, seq_len=12)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=16, positional_encoding=encoding,
                                                 n_pe_draws=3), scale=2.0).eval()
    torch.testing.assert_close(module.attention(X), _broadcast_attention(module, X))


def test_eval_draws_in_small_blocks_give_the_whole_blocks_numbers(monkeypatch):
    # At long T a block holds one sequence and one draw at a time; the
    # numbers are those of the same formula.
    X, _ = _data(n=5, seq_len=40)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=16, n_pe_draws=3)).eval()
    whole = module.attention(X)
    monkeypatch.setattr("sparse_token_estimators.modules._DRAW_BLOCK", 40 * 16)
    torch.testing.assert_close(module.attention(X), whole)


@pytest.mark.parametrize("encoding, pe_dim", [(name, 16) for name in NAMES]
                         + [("stochastic", 7), ("stochastic", 30), ("randomized", 30)])
def test_eval_predictions_do_not_depend_on_the_batch_bit_for_bit(encoding, pe_dim):
    X, _ = _data(n=300, seq_len=15)
    module = _with_random_W(SparseTokenAttention(4, pe_dim=pe_dim, positional_encoding=encoding,
                                                 n_pe_draws=4), scale=3.0).eval()
    with torch.no_grad():
        whole = module(X)
        for batch_size in (1, 7, 64, 256):  # 1, 7 and 256 as issue 31 asks
            parts = torch.cat([module(X[i:i + batch_size]) for i in range(0, 300, batch_size)])
            assert torch.equal(parts, whole), batch_size


def test_estimator_predictions_at_batch_size_7_and_256_are_identical(tiny_task):
    X, y = tiny_task
    est = SparseTokenTransformer(pe_dim=16, max_epochs=2, device="cpu", random_state=0)
    est.fit(X, y)
    X_test, _ = make_sparse_selection(300, 25, 4, 2, random_state=3)
    at_256 = est.predict(X_test)
    assert np.array_equal(est.set_params(batch_size=7).predict(X_test), at_256)


def test_eval_mode_keeps_no_draws_on_the_module():
    X, _ = _data(n=4, seq_len=30)
    module = SparseTokenAttention(4, pe_dim=16, n_pe_draws=8).eval()
    before = set(vars(module)), len(pickle.dumps(module))
    module(X)
    assert (set(vars(module)), len(pickle.dumps(module))) == before


def _in_threads(predict, inputs, n_threads=4, repeats=25):
    """``predict`` on every input, ``repeats`` times, from ``n_threads`` threads at once."""
    with ThreadPoolExecutor(n_threads) as pool:
        jobs = [pool.submit(lambda x=x: predict(x)) for _ in range(repeats) for x in inputs]
        return [job.result() for job in jobs]


def test_module_predicts_from_several_threads_as_sequentially():
    module = _with_random_W(SparseTokenAttention(4, pe_dim=16, n_pe_draws=4)).eval()
    inputs = [_data(n=5, seq_len=T, seed=T)[0] for T in (21, 6)]  # two lengths
    with torch.no_grad():
        expected = [module(x) for x in inputs]
        results = _in_threads(module, inputs)
    for i, out in enumerate(results):
        assert torch.equal(out, expected[i % 2])


def test_estimator_predicts_from_several_threads_as_sequentially(tiny_task):
    est = SparseTokenTransformer(pe_dim=16, n_pe_draws=4, max_epochs=1, device="cpu",
                                 random_state=0).fit(*tiny_task)
    inputs = [make_sparse_selection(5, T, 4, 2, random_state=T)[0] for T in (21, 6)]
    expected = [est.predict(x) for x in inputs]
    params = est.get_params(deep=False)
    for i, out in enumerate(_in_threads(est.predict, inputs)):
        assert np.array_equal(out, expected[i % 2])
    assert est.get_params(deep=False) == params


def test_a_fitted_estimator_pickles_to_the_same_size_after_a_long_predict(tiny_task):
    est = SparseTokenTransformer(pe_dim=16, max_epochs=1, device="cpu",
                                 random_state=0).fit(*tiny_task)
    size = len(pickle.dumps(est))
    est.predict(make_sparse_selection(2, 5000, 4, 2, random_state=0)[0])
    assert len(pickle.dumps(est)) == size


# -- torch.compile ----------------------------------------------------------------


def _import_the_compiler():
    with warnings.catch_warnings():  # torch's import of its compiler warns (torch.jit)
        warnings.simplefilter("ignore", DeprecationWarning)
        import torch._inductor.compile_fx  # noqa: F401


def _loss(module, X, y, noise):
    return ((module(X, noise=noise) - y) ** 2).sum(1).mean()


@pytest.mark.parametrize("backend", ["eager", pytest.param("aot_eager", marks=pytest.mark.slow),
                                     pytest.param("inductor", marks=pytest.mark.slow)])
@pytest.mark.parametrize("encoding", NAMES)
def test_compiled_training_step_is_one_graph(encoding, backend):
    # fullgraph=True raises on any graph break; the random draw is made
    # outside and passed in as noise, as the estimator's infer does.
    _import_the_compiler()
    torch._dynamo.reset()
    kwargs = dict(pe_dim=8, positional_encoding=encoding, max_seq_len=16, n_pe_draws=2)
    eager = SparseTokenAttention(4, **kwargs)
    compiled = copy.deepcopy(eager)
    loss = torch.compile(_loss, fullgraph=True, backend=backend)
    # SGD: a step in proportion to the gradient keeps rounding differences at
    # rounding level (Adam's first step is lr * sign(gradient) on every entry).
    optimizers = [torch.optim.SGD(m.parameters(), lr=1.0) for m in (eager, compiled)]
    generator = torch.Generator().manual_seed(0)
    for step in range(3):
        X, y = _data(n=16, seq_len=10, seed=step)
        noise = eager.draw_noise(X, generator=generator)
        for module, optimizer, fn in zip((eager, compiled), optimizers, (_loss, loss)):
            optimizer.zero_grad()
            fn(module, X, y, noise).backward()
            optimizer.step()
    torch.testing.assert_close(compiled.W, eager.W)
    assert eager.W.abs().sum() > 0
    forward = torch.compile(compiled, fullgraph=True, backend=backend).eval()
    for seq_len in (10, 13):
        X, _ = _data(n=16, seq_len=seq_len)
        torch.testing.assert_close(forward(X, noise=compiled.draw_noise(X)), eager.eval()(X))


@contextmanager
def _compile_reports():
    """What torch.compile reports: log records, warnings, graph breaks.

    Dynamo and inductor log through their own loggers, which do not
    propagate to the root logger (so neither ``caplog`` nor the warnings
    module sees them); a handler on each collects what they log at WARNING
    and above. Some graph breaks come as Python warnings instead, and every
    one is counted in dynamo's ``graph_break`` counter.
    """
    _import_the_compiler()
    torch._dynamo.reset()
    counters.clear()
    reports = {"log": [], "warnings": [], "graph_breaks": counters["graph_break"]}
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: reports["log"].append(f"{record.name}: {record.getMessage()}")
    loggers = [logging.getLogger(name) for name in ("torch._dynamo", "torch._inductor")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield reports
        reports["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def _transformer(encoding, **kwargs):
    return SparseTokenTransformer(pe_dim=8, positional_encoding=encoding, max_seq_len=32,
                                  n_pe_draws=2, max_epochs=2, batch_size=64, random_state=0,
                                  device="cpu", **kwargs)


@pytest.fixture(scope="module", params=[
    *[("eager", name) for name in ("stochastic", "randomized")],
    *[pytest.param(("inductor", name), marks=pytest.mark.slow) for name in NAMES],
], ids=lambda param: "-".join(param))
def compiled_fit(request):
    """A fit with skorch's compile=True, with what the compiler reported."""
    backend, encoding = request.param
    X, y = make_sparse_selection(200, 8, 3, 2, random_state=0)  # a ragged last batch
    tests = [make_sparse_selection(50, seq_len, 3, 2, random_state=seq_len)[0]
             for seq_len in (8, 24)]
    with _compile_reports() as reports:
        est = _transformer(encoding, compile=True, compile__backend=backend).fit(X, y)
        predictions = [est.predict(X_test) for X_test in tests]
    return {"est": est, "reports": reports, "X": X, "y": y, "tests": tests,
            "predictions": predictions, "encoding": encoding}


def _is_compiled(module):
    # the estimators compile in place (nn.Module.compile): module_ stays the
    # module itself, with its compiled call kept on it
    return getattr(module, "_compiled_call_impl", None) is not None


def test_compiled_fit_reports_no_graph_break_and_no_warning(compiled_fit):
    assert _is_compiled(compiled_fit["est"].module_)
    reports = compiled_fit["reports"]
    assert reports["log"] == []
    assert reports["warnings"] == []
    assert dict(reports["graph_breaks"]) == {}


def test_compiled_fit_predicts_as_the_eager_fit(compiled_fit):
    # Predictions, not W: with the sinusoidal table, Adam's first steps turn
    # rounding-level gradients on W's entries that pair near-constant
    # coordinates (low frequencies) into full steps; those entries shift all
    # scores alike, which the softmax ignores.
    eager = _transformer(compiled_fit["encoding"]).fit(compiled_fit["X"], compiled_fit["y"])
    for X_test, predicted in zip(compiled_fit["tests"], compiled_fit["predictions"]):
        np.testing.assert_allclose(predicted, eager.predict(X_test), rtol=1e-4, atol=1e-5)


def test_compiled_model_pickles_and_loads(compiled_fit):
    # Unpickling drops the compiled call (torch does not pickle it); the
    # estimator compiles the module again at its next use.
    loaded = pickle.loads(pickle.dumps(compiled_fit["est"]))
    for X_test, predicted in zip(compiled_fit["tests"], compiled_fit["predictions"]):
        np.testing.assert_array_equal(loaded.predict(X_test), predicted)
    assert _is_compiled(loaded.module_)
    loaded.partial_fit(compiled_fit["X"], compiled_fit["y"])  # and trains on


def test_weights_saved_from_a_compiled_fit_load_without_compile(compiled_fit, tmp_path):
    # Compiled in place, the module keeps the state_dict keys of an
    # uncompiled one (no '_orig_mod.' prefix): the weights load either way.
    compiled_fit["est"].save_params(f_params=tmp_path / "weights.pt")
    plain = _transformer(compiled_fit["encoding"], token_dim=3).initialize()
    plain.load_params(f_params=tmp_path / "weights.pt")
    for X_test, predicted in zip(compiled_fit["tests"], compiled_fit["predictions"]):
        np.testing.assert_allclose(plain.predict(X_test), predicted, rtol=1e-4, atol=1e-5)


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


@pytest.mark.parametrize("seq_len, pe_dim, n_draws", [(20000, 256, 8), (100, 16, 8), (40, 64, 1)])
def test_eval_draws_are_made_in_blocks_of_bounded_size(monkeypatch, seq_len, pe_dim, n_draws):
    # The memory of a prediction does not grow with the batch: every block of
    # draws holds at most _DRAW_BLOCK coordinates (or one sequence's one draw
    # where that alone is larger), at T = 20000 and pe_dim 256 as at small T.
    from sparse_token_estimators import modules

    module = SparseTokenAttention(2, pe_dim=pe_dim, n_pe_draws=n_draws).eval()
    sizes = []

    def record(keys, draws, length):
        sizes.append(len(keys) * len(draws) * length * pe_dim)
        return torch.zeros(len(draws), len(keys), length, pe_dim)

    monkeypatch.setattr(module.positions, "keyed_vectors", record)
    batch = 3 if seq_len > 1000 else 200
    X = torch.zeros(batch, seq_len, 3)
    X[:, :3, -1] = 1.0
    with torch.no_grad():
        module(X)
    assert max(sizes) <= max(modules._DRAW_BLOCK, seq_len * pe_dim)
    assert sum(sizes) >= batch * n_draws * seq_len * pe_dim  # every sequence and draw
