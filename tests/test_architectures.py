"""The torch modules of ``architectures``: shapes, lengths, encodings, what they compute."""

import math

import pytest
import torch
import torch.nn.functional as F

from sparse_token_estimators import make_sparse_selection
from sparse_token_estimators.architectures import (
    CELLS,
    ENCODER_ENCODINGS,
    AttentionPooling,
    RecurrentNet,
    Rotary,
    SelfAttention,
    TransformerEncoder,
    check_encoder_sizes,
    input_scale,
)
from sparse_token_estimators.positional import ENCODINGS, sequence_keys

TABLES = [name for name in ENCODINGS if not ENCODINGS[name].takes_any_length]
ANY_LENGTH = [name for name in ENCODER_ENCODINGS if name not in TABLES]


def _data(n=16, seq_len=10, token_dim=4, n_selected=3, seed=0):
    X, y = make_sparse_selection(n, seq_len, token_dim, n_selected, random_state=seed)
    return torch.as_tensor(X), torch.as_tensor(y)


def _encoder(encoding="none", **kwargs):
    torch.manual_seed(0)
    return TransformerEncoder(4, **{"d_model": 16, "n_heads": 2, "n_layers": 2,
                                    "positional_encoding": encoding, "max_seq_len": 32,
                                    **kwargs})


# -- the encoder ------------------------------------------------------------------


def test_the_encodings_are_the_packages_five_plus_rope_and_none():
    assert ENCODER_ENCODINGS == (*ENCODINGS, "rope", "none")


@pytest.mark.parametrize("encoding", ENCODER_ENCODINGS)
@pytest.mark.parametrize("training", [True, False])
def test_encoder_shapes_at_several_lengths(encoding, training):
    net = _encoder(encoding).train(training)
    for seq_len in (1, 7, 32):
        X, _ = _data(n=5, seq_len=seq_len, n_selected=1)
        out = net(X, noise=net.draw_noise(X, generator=torch.Generator().manual_seed(0)))
        assert out.shape == (5, 4) and torch.isfinite(out).all()


@pytest.mark.parametrize("encoding", ANY_LENGTH)
def test_encoder_takes_any_length_where_its_encoding_does(encoding):
    X, _ = _data(n=3, seq_len=200, n_selected=3)
    assert _encoder(encoding, max_seq_len=8).eval()(X).shape == (3, 4)


@pytest.mark.parametrize("encoding", TABLES)
def test_table_encodings_refuse_lengths_beyond_their_table(encoding):
    X, _ = _data(n=3, seq_len=33)
    with pytest.raises(ValueError, match="exceeds max_seq_len=32"):
        _encoder(encoding).eval()(X)


@pytest.mark.parametrize("encoding", ["none", "rope"])
def test_without_added_positions_the_encoder_ignores_the_order_of_the_tokens(encoding):
    # Attention pooling over unmasked blocks is permutation invariant, and
    # rotary positions are relative; "none" has no position at all. The task
    # averages the selected tokens in any order, so either may solve it.
    X, _ = _data(n=6, seq_len=9)
    order = torch.randperm(9, generator=torch.Generator().manual_seed(0))
    net = _encoder(encoding).eval()
    same = torch.allclose(net(X[:, order]), net(X), atol=1e-5)
    assert same == (encoding == "none")


RANDOM = [name for name in ENCODINGS if ENCODINGS[name].random]


def test_the_random_encodings_are_stochastic_and_randomized():
    assert RANDOM == ["stochastic", "randomized"]


@pytest.mark.parametrize("encoding", RANDOM)
def test_random_encodings_predict_from_a_seeded_draw(encoding):
    X, _ = _data(n=6, seq_len=10)
    net = _encoder(encoding).eval()
    # a prediction depends on its own sequence only, and on eval_seed
    assert torch.allclose(net(X)[:2], net(X[:2]), atol=1e-6)
    assert torch.equal(net(X, noise=net.draw_noise(X)), net(X))
    other = _encoder(encoding, eval_seed=1).eval()
    other.load_state_dict(net.state_dict())  # the seed is part of the weights
    assert torch.equal(other(X), net(X))
    assert int(other.eval_seed) == 0
    # training draws are fresh for every call
    net.train()
    assert not torch.allclose(net(X), net(X))


def _query_data(n=6, seq_len=10, n_selected=3, seed=0):
    X, _ = make_sparse_selection(n, seq_len, 4, n_selected, random_state=seed, layout="query")
    return torch.as_tensor(X)


@pytest.mark.parametrize("layout", ["indicator", "query"])
@pytest.mark.parametrize("encoding", RANDOM)
def test_eval_noise_is_one_key_per_sequence_and_training_noise_a_fresh_draw(encoding, layout):
    kwargs = {"layout": "query", "n_selected": 3} if layout == "query" else {}
    X = _query_data() if layout == "query" else _data(n=6, seq_len=10)[0]
    net = _encoder(encoding, eval_seed=7, **kwargs).eval()
    keys = net.draw_noise(X)
    # the whole input is keyed, query rows included
    assert keys.shape == (6,) and keys.dtype == torch.int64
    assert torch.equal(keys, sequence_keys(X, 7))
    net.train()
    noise = net.draw_noise(X, generator=torch.Generator().manual_seed(0))
    if encoding == "randomized":
        assert noise.shape == (1, 6, 10)  # the token rows' positions
    else:
        assert noise.numel() == 6 * 10 * 16 // 32  # the words of (1, B, T, C) signs


@pytest.mark.parametrize("layout", ["indicator", "query"])
@pytest.mark.parametrize("encoding", RANDOM)
def test_every_sequence_gets_its_own_eval_positions_whatever_its_batch(encoding, layout):
    kwargs = {"layout": "query", "n_selected": 3} if layout == "query" else {}
    X = _query_data() if layout == "query" else _data(n=6, seq_len=10)[0]
    X = torch.cat([X, X[:1]])  # row 6 repeats row 0
    tokens = X[:, :10]  # the token rows (all the rows in the indicator layout)
    net = _encoder(encoding, **kwargs).eval()
    with torch.no_grad():
        P = net._positional_vectors(tokens, net.draw_noise(X))
        assert P.shape == (7, 10, 16)
        expected = net.positions.keyed_vectors(sequence_keys(X, 0), range(1), 10)[0]
        assert torch.equal(P, expected)
        # two different sequences, different positions; the same one, the same
        assert not torch.equal(P[0], P[1])
        assert all(not torch.equal(P[i], P[j]) for i in range(6) for j in range(i))
        assert torch.equal(P[0], P[6])
        # a sequence's positions are its own, in any batch and at any place in it
        for i in (1, 4):
            alone = net._positional_vectors(tokens[i:i + 1], net.draw_noise(X[i:i + 1]))
            assert torch.equal(alone[0], P[i])
        flipped = net._positional_vectors(tokens.flip(0), net.draw_noise(X.flip(0)))
        assert torch.equal(flipped, P.flip(0))
        # another eval_seed, other positions and other predictions
        other = _encoder(encoding, eval_seed=1, **kwargs).eval()
        other.load_state_dict({**net.state_dict(), "eval_seed": torch.tensor(1)})
        assert not torch.equal(other._positional_vectors(tokens, other.draw_noise(X)), P)
        assert not torch.allclose(other(X), net(X))


@pytest.mark.parametrize("encoding", RANDOM)
def test_the_encoder_keeps_no_state_between_predictions(encoding):
    net = _encoder(encoding).eval()
    before = dict(vars(net))
    X, _ = _data(n=6, seq_len=10)
    X_long, _ = _data(n=3, seq_len=20)
    with torch.no_grad():
        first = net(X)
        net(X_long)  # another length in between
        assert torch.equal(net(X), first)
    assert vars(net).keys() == before.keys()
    assert all(vars(net)[key] is value for key, value in before.items())
    assert not hasattr(net, "_eval_noise")


def test_sizes_that_do_not_fit_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="d_model=30 must be a multiple of n_heads=4.*d_model=32"):
        check_encoder_sizes(30, 4, "none")
    with pytest.raises(ValueError, match="d_model / n_heads must be even.*d_model=24"):
        TransformerEncoder(4, d_model=12, n_heads=4, positional_encoding="rope")
    with pytest.raises(ValueError, match="d_model must be even.*d_model=10"):
        TransformerEncoder(4, d_model=9, n_heads=1, positional_encoding="sinusoidal")
    with pytest.raises(ValueError, match="positional_encoding must be one of.*'rope', 'none'"):
        TransformerEncoder(4, positional_encoding="alibi")


def test_self_attention_is_the_softmax_formula():
    torch.manual_seed(0)
    attn = SelfAttention(8, n_heads=2)
    x = torch.randn(3, 5, 8)
    q, k, v = attn.c_attn(x).split(8, dim=2)
    heads = []
    for h in range(2):
        cols = slice(4 * h, 4 * h + 4)
        scores = q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(4)  # (B, T, T)
        heads.append(torch.softmax(scores, dim=-1) @ v[..., cols])
    expected = attn.c_proj(torch.cat(heads, dim=-1))
    assert torch.allclose(attn(x), expected, atol=1e-5)


def test_pooling_attends_with_its_learned_query():
    torch.manual_seed(0)
    pool = AttentionPooling(8, n_heads=1)
    x = torch.randn(3, 5, 8)
    k, v = pool.c_kv(x).split(8, dim=2)
    weights = torch.softmax(k @ pool.query / math.sqrt(8), dim=-1)  # (B, T)
    expected = pool.c_proj((weights.unsqueeze(-1) * v).sum(1))
    assert torch.allclose(pool(x), expected, atol=1e-5)


def test_rotary_scores_depend_on_the_offset_only():
    rotary = Rotary(8)
    q, k = torch.randn(1, 1, 1, 8).expand(1, 1, 12, 8), torch.randn(1, 1, 1, 8).expand(1, 1, 12, 8)
    scores = rotary(q) @ rotary(k).transpose(-1, -2)  # (1, 1, 12, 12)
    offsets = [torch.diagonal(scores[0, 0], offset=o) for o in (0, 3, -2)]
    assert all(torch.allclose(d, d[0].expand_as(d), atol=1e-5) for d in offsets)
    assert torch.allclose(rotary(q).norm(dim=-1), q.norm(dim=-1), atol=1e-5)  # a rotation


def test_encoder_without_blocks_is_pooling_on_the_input_projection():
    net = _encoder(n_layers=0).eval()
    X, _ = _data(n=4)
    assert len(net.blocks) == 0
    assert torch.allclose(net(X), net.head(net.pool(net.ln_f(net.embed(X)))))


# -- the recurrent net ------------------------------------------------------------


@pytest.mark.parametrize("cell", list(CELLS))
def test_recurrent_net_reads_any_length_and_returns_d(cell):
    torch.manual_seed(0)
    net = RecurrentNet(4, cell=cell, hidden_size=8, n_layers=2)
    assert isinstance(net.rnn, CELLS[cell]) and net.rnn.num_layers == 2
    for seq_len in (1, 10, 100):
        X, _ = _data(n=3, seq_len=seq_len, n_selected=1)
        assert net(X).shape == (3, 4)


@pytest.mark.parametrize("cell", list(CELLS))
def test_recurrent_net_reads_the_last_state(cell):
    torch.manual_seed(0)
    net = RecurrentNet(4, cell=cell, hidden_size=8)
    X, _ = _data(n=3, seq_len=6)
    outputs, _ = net.rnn(X)  # (B, T, H): the state after every token
    assert torch.allclose(net(X), net.head(outputs[:, -1]), atol=1e-6)
    # the order of the tokens matters to a recurrent net
    assert not torch.allclose(net(X.flip(1)), net(X))


def test_recurrent_net_refuses_an_unknown_cell():
    with pytest.raises(ValueError, match="cell must be one of 'gru', 'lstm', 'rnn'; got 'tcn'"):
        RecurrentNet(4, cell="tcn")


# -- the input scale of the positional vectors --------------------------------------

ABSOLUTE = list(ENCODINGS)


def test_an_embedded_token_row_has_the_expected_norm_of_a_scaled_positional_vector():
    # E||W [x; 0] + b||^2 = d_model / 3 at torch's initialisation, whatever d
    for token_dim in (2, 8, 32):
        torch.manual_seed(token_dim)
        norms = []
        for _ in range(40):  # 40 initialisations, 256 token rows each
            net = TransformerEncoder(token_dim, d_model=64, n_heads=1, n_layers=0)
            x = torch.cat([torch.randn(256, token_dim), torch.zeros(256, 1)], dim=1)
            with torch.no_grad():
                norms.append((net.embed(x) ** 2).sum(1).mean())
        assert float(torch.stack(norms).mean()) == pytest.approx(64 / 3, rel=0.05)
    assert input_scale(64) == pytest.approx(math.sqrt(64 / 3))


@pytest.mark.parametrize("layout", ["indicator", "query"])
@pytest.mark.parametrize("encoding", ABSOLUTE)
def test_every_positional_vector_enters_at_the_scale_of_the_token_embedding(encoding, layout):
    net = _encoder(encoding, n_layers=0, layout=layout, n_selected=3)
    net.ln_f = torch.nn.Identity()  # the rows as they enter, before any norm
    assert float(net.pe_scale) == pytest.approx(input_scale(16))
    X, _ = make_sparse_selection(8, 10, 4, 3, random_state=0, layout=layout)
    X = torch.as_tensor(X)
    net.train()
    noise = net.draw_noise(X, torch.Generator().manual_seed(0))
    with torch.no_grad():
        rows = net._encode(X, noise)
        flags = X.clone()
        if layout == "query":  # a query row enters as the flag [0_d, 1]
            flags[:, 10:] = 0.0
            flags[:, 10:, -1] = 1.0
        added = rows - net.embed(flags)
    # unit-norm p_i (p_{i_j} on the query rows) times sqrt(d_model / 3)
    assert torch.allclose(added.norm(dim=-1), torch.full(added.shape[:2], input_scale(16)),
                          rtol=1e-4)


@pytest.mark.parametrize("encoding", ["rope", "none"])
def test_rope_and_no_encoding_have_no_scale_and_add_nothing(encoding):
    net = _encoder(encoding)
    assert "pe_scale" not in net.state_dict()
    X, _ = _data()
    rows = _encoder(encoding, n_layers=0).eval()
    rows.ln_f = torch.nn.Identity()
    with torch.no_grad():
        assert torch.equal(rows._encode(X, None), rows.embed(X))


def test_weights_saved_before_the_scale_load_at_the_scale_they_were_trained_at():
    import pickle

    net = _encoder("sinusoidal").eval()
    old = {k: v for k, v in net.state_dict().items() if k != "pe_scale"}
    loaded = _encoder("sinusoidal").eval()
    loaded.load_state_dict(old)
    assert float(loaded.pe_scale) == 1.0  # recorded: the old model, as it predicted
    X, _ = _data()
    with torch.no_grad():
        net.pe_scale.fill_(1.0)
        assert torch.equal(loaded(X), net(X))
    # a module pickled before the scale had no such buffer
    del loaded._buffers["pe_scale"]
    assert float(pickle.loads(pickle.dumps(loaded)).pe_scale) == 1.0


# -- learning -----------------------------------------------------------------------


def _train(net, X, y, *, epochs, lr=0.003, batch_size=128):
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    for _ in range(epochs):
        order = torch.randperm(len(X), generator=generator)
        for start in range(0, len(X), batch_size):
            index = order[start:start + batch_size]
            loss = F.mse_loss(net(X[index]), y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return net.eval()


def _r2(net, X, y):
    with torch.no_grad():
        loss = ((net(X) - y) ** 2).sum(1).mean()
    return 1 - float(loss) / (y.shape[1] / 3)  # d / q: the loss of predicting 0


def test_encoder_without_positions_learns_the_task_and_its_longer_lengths():
    torch.set_num_threads(1)
    X, y = _data(n=3000, seq_len=8, token_dim=4, n_selected=3, seed=0)
    X_test, y_test = _data(n=500, seq_len=8, token_dim=4, n_selected=3, seed=1)
    X_long, y_long = _data(n=500, seq_len=32, token_dim=4, n_selected=3, seed=2)
    torch.manual_seed(0)
    net = _train(TransformerEncoder(4, d_model=16, n_heads=2, n_layers=0), X, y, epochs=6)
    assert _r2(net, X_test, y_test) > 0.9
    assert _r2(net, X_long, y_long) > 0.8


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ENCODER_ENCODINGS)
def test_encoder_with_blocks_learns_the_task_with_every_encoding(encoding):
    torch.set_num_threads(1)
    X, y = _data(n=8000, seq_len=10, token_dim=4, n_selected=3, seed=0)
    X_test, y_test = _data(n=1000, seq_len=10, token_dim=4, n_selected=3, seed=1)
    net = _train(_encoder(encoding), X, y, epochs=10)
    assert _r2(net, X_test, y_test) > 0.7


@pytest.mark.slow
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_recurrent_net_of_a_few_d_learns_the_task(cell):
    torch.set_num_threads(1)
    X, y = _data(n=8000, seq_len=10, token_dim=4, n_selected=3, seed=0)
    X_test, y_test = _data(n=1000, seq_len=10, token_dim=4, n_selected=3, seed=1)
    torch.manual_seed(0)
    net = _train(RecurrentNet(4, cell=cell, hidden_size=32), X, y, epochs=15)
    assert _r2(net, X_test, y_test) > 0.9


def _query_r2(encoding):
    from sparse_token_estimators import SparseSelectionStream, SparseTokenEncoder

    # the quick preset's encoder in the query layout: width 32, one block, one head, T = 10,
    # d = 8, q = 3, 1,280 steps of 64 fresh sequences, rate 0.01 decayed by a cosine
    est = SparseTokenEncoder(d_model=32, n_heads=1, n_layers=1, positional_encoding=encoding,
                             layout="query", n_selected=3, lr=0.01, lr_schedule="cosine",
                             batch_size=64, max_epochs=10, random_state=0, device="cpu")
    est.fit(SparseSelectionStream(10, 8, 3, n_samples=8192, random_state=1, layout="query"))
    X, y = make_sparse_selection(2000, 10, 8, 3, random_state=99, layout="query")
    return est.score(X, y)


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ABSOLUTE)
def test_a_query_row_finds_its_token_with_every_absolute_encoding(encoding):
    # ~10 s each on one core. Measured (held-out R^2, seed 0): fixed, learned,
    # sinusoidal 1.000, randomized 0.996, stochastic 0.943; with the same training at
    # the old scale (p_i at norm 1): sinusoidal 0.292, stochastic 0.289, randomized
    # 0.290 (q / T = 0.3, no better than no encoding), fixed and learned 1.000. What the
    # random encodings need beyond the scale is sequences: stochastic at the scale 0.963
    # with a constant rate (0.943 cosine), but 0.273 after 640 steps of 64 (41k sequences,
    # as the 1,280 steps of 32 where it stayed at 0.26), and 0.287 at a peak rate of 0.03
    torch.set_num_threads(1)
    assert _query_r2(encoding) >= 0.9
