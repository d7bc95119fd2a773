"""SparseSelectionStream: fresh samples of the task, drawn on the device.

The samples follow make_sparse_selection's distribution; seeding is
reproducible; the estimators fit on a stream with the same loop as on
arrays, with fresh samples every epoch; and a population fit learns.
"""

import functools
import math
import pickle

import numpy as np
import pytest
import torch
from conftest import make_estimator
from numpy.testing import assert_array_equal
from skorch.callbacks import Callback
from skorch.dataset import ValidSplit
from torch.utils.data import DataLoader

from sparse_token_estimators import (
    SparseSelectionStream,
    SparseTokenFCN,
    SparseTokenTransformer,
    datasets,
    make_sparse_selection,
)
from sparse_token_estimators import _device as device_module
from sparse_token_estimators._batching import TensorBatches

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def stream(seq_len=8, token_dim=3, n_selected=2, n_samples=100, **kwargs):
    return SparseSelectionStream(seq_len, token_dim, n_selected, n_samples=n_samples,
                                 **{"random_state": 0, "device": "cpu", **kwargs})


def epoch(s, batch_size=4096, **kwargs):
    """One epoch as two host arrays."""
    batches = list(s.batches(batch_size, **kwargs))
    return (torch.cat([X for X, _ in batches]).numpy(),
            torch.cat([y for _, y in batches]).numpy())


# -- the samples -------------------------------------------------------------------


def test_shapes_dtypes_and_batches():
    s = stream(n_samples=70)
    assert len(s) == 70
    batches = list(s.batches(32))
    assert [len(X) for X, _ in batches] == [32, 32, 6]
    assert [len(X) for X, _ in s.batches(32, drop_last=True)] == [32, 32]
    for X, y in batches:
        assert X.dtype == y.dtype == torch.float32
        assert X.shape[1:] == (8, 4) and y.shape[1:] == (3,)
        assert X.device.type == y.device.type == "cpu"
    samples = list(iter(s))  # the IterableDataset protocol: one sample at a time
    assert len(samples) == 70 and samples[0][0].shape == (8, 4)


@pytest.mark.parametrize("seq_len, n_selected", [(10, 1), (10, 3), (10, 7), (10, 10), (1, 1)])
def test_exactly_q_ones_and_y_the_mean_of_the_selected(seq_len, n_selected):
    X, y = epoch(stream(seq_len, 3, n_selected, n_samples=500))
    indicator = X[..., -1]
    assert set(np.unique(indicator)) <= {0.0, 1.0}
    assert (indicator.sum(axis=1) == n_selected).all()
    tokens = X[..., :-1].astype(np.float64)
    expected = (tokens * indicator[..., None]).sum(axis=1) / n_selected
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_moments_match_the_generator():
    # One large fixed draw; bounds of 5 standard errors (failure odds ~1e-6).
    n, T, d, q = 20000, 10, 3, 3
    X, y = epoch(stream(T, d, q, n_samples=n))
    tokens = X[..., :-1].reshape(-1, d)
    se = 1 / math.sqrt(len(tokens))
    assert np.abs(tokens.mean(axis=0)).max() < 5 * se
    assert np.abs(tokens.var(axis=0) - 1).max() < 5 * math.sqrt(2) * se
    assert np.abs(np.corrcoef(tokens.T) - np.eye(d)).max() < 5 * se
    counts = X[..., -1].sum(axis=0)  # each position selected with probability q / T
    p = q / T
    assert np.abs(counts - n * p).max() < 5 * math.sqrt(n * p * (1 - p))
    # Var(y_j) = 1 / q, as for make_sparse_selection's y
    _, y_ref = make_sparse_selection(n, T, d, q, random_state=0)
    np.testing.assert_allclose(y.var(axis=0), 1 / q, rtol=0.05)
    np.testing.assert_allclose(y.var(axis=0), y_ref.var(axis=0), rtol=0.08)


@pytest.mark.parametrize("n_selected", [1, 2, 3, 4, 5])
def test_every_subset_is_equally_likely(n_selected):
    n, T = 60000, 6
    X, _ = epoch(stream(T, 1, n_selected, n_samples=n), batch_size=8192)
    codes = (X[..., -1] @ (2 ** np.arange(T))).astype(int)
    values, counts = np.unique(codes, return_counts=True)
    n_subsets = math.comb(T, n_selected)
    assert len(values) == n_subsets
    p = 1 / n_subsets
    assert np.abs(counts - n * p).max() < 5 * np.sqrt(n * p * (1 - p))


def _indexed_floyd(rng, n_samples, seq_len, n_selected, device):
    """Floyd's subset draw as first written (indexing ``taken[rows, t]``): the reference."""
    n_drawn = min(n_selected, seq_len - n_selected)
    rows = torch.arange(n_samples, device=device)
    taken = torch.zeros(n_samples, seq_len, dtype=torch.bool, device=device)
    for j in range(seq_len - n_drawn, seq_len):
        t = torch.randint(j + 1, (n_samples,), generator=rng, device=device)
        t = torch.where(taken[rows, t], j, t)
        taken[rows, t] = True
    return taken if n_drawn == n_selected else ~taken


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
@pytest.mark.parametrize("seq_len, n_selected", [(20, 3), (20, 10), (20, 17), (80, 3),
                                                 (6, 6), (1, 1), (2, 1)])
def test_subset_draw_is_the_indexed_floyd_number_for_number(device, seq_len, n_selected):
    # The gather / scatter_ form (a speed-up) draws the same subsets from the
    # same generator state and leaves the generator where the reference does:
    # a stream's samples for a given seed are unchanged by it.
    ours, reference = (torch.Generator(device).manual_seed(7) for _ in range(2))
    for n in (1, 257, 3000):
        got = datasets._uniform_subsets_on(ours, n, seq_len, n_selected, device)
        expected = _indexed_floyd(reference, n, seq_len, n_selected, device)
        assert got.dtype == torch.bool and got.shape == (n, seq_len)
        assert torch.equal(got, expected)
    assert torch.equal(ours.get_state(), reference.get_state())


# -- seeding --------------------------------------------------------------------------


def test_an_int_seed_repeats_and_another_seed_differs():
    a, b = epoch(stream(), 32), epoch(stream(), 32)
    assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], epoch(stream(random_state=1), 32)[0])


def test_the_generator_brings_fresh_samples_every_epoch_reproducibly():
    s = stream()
    g = torch.Generator().manual_seed(0)
    first, second = epoch(s, 32, generator=g), epoch(s, 32, generator=g)
    assert not np.array_equal(first[0], second[0])  # each epoch is new
    g = torch.Generator().manual_seed(0)
    assert_array_equal(epoch(s, 32, generator=g)[0], first[0])  # and repeatable
    assert_array_equal(epoch(s, 32, generator=g)[0], second[0])
    g_other = torch.Generator().manual_seed(1)
    assert not np.array_equal(epoch(s, 32, generator=g_other)[0], first[0])


def test_random_state_instances_are_consumed_and_none_is_fresh():
    for make in (np.random.RandomState, np.random.default_rng):
        s = stream(random_state=make(0))
        first, second = epoch(s)[0], epoch(s)[0]
        assert not np.array_equal(first, second)
        assert_array_equal(epoch(stream(random_state=make(0)))[0], first)
    s = stream(random_state=None)
    assert not np.array_equal(epoch(s)[0], epoch(s)[0])


def test_one_host_draw_per_epoch_whatever_the_batches(monkeypatch):
    # The seed is made on the host once per epoch; the batches are drawn on
    # the device from a generator there.
    calls = []
    as_generator = datasets._as_generator
    monkeypatch.setattr(datasets, "_as_generator",
                        lambda rs: calls.append(1) or as_generator(rs))
    batches = list(stream(n_samples=1000).batches(10))
    assert len(batches) == 100 and len(calls) == 1


@cuda
def test_drawn_on_the_gpu():
    s = stream(device="cuda", n_samples=300)
    X, y = next(iter(s.batches(128, generator=torch.Generator("cuda").manual_seed(0))))
    assert X.is_cuda and y.is_cuda
    assert (X[..., -1].sum(1) == 2).all()
    est = SparseTokenFCN(hidden_width=8, max_epochs=2, device="cuda", random_state=0).fit(s)
    assert next(est.module_.parameters()).is_cuda


def test_pickles_and_has_a_readable_repr():
    s = stream(n_samples=50)
    assert repr(s) == ("SparseSelectionStream(seq_len=8, token_dim=3, n_selected=2, "
                       "n_samples=50, random_state=0, device='cpu')")
    assert_array_equal(epoch(pickle.loads(pickle.dumps(s)))[0], epoch(s)[0])


# -- bad arguments: the generator's messages --------------------------------------------

BAD = [dict(n_samples=0), dict(n_samples=-3), dict(n_samples=2.5), dict(n_samples=None),
       dict(seq_len=0), dict(seq_len=True), dict(token_dim=0), dict(token_dim=[2]),
       dict(n_selected=0), dict(n_selected=6), dict(random_state="seed"),
       dict(random_state=1.5)]


@pytest.mark.parametrize("bad", BAD, ids=[f"{k}={v!r}" for b in BAD for k, v in b.items()])
def test_bad_arguments_get_the_generators_errors(bad):
    args = dict(n_samples=4, seq_len=5, token_dim=2, n_selected=2, random_state=0)
    args.update(bad)
    with pytest.raises((ValueError, TypeError)) as expected:
        make_sparse_selection(**args)
    with pytest.raises(type(expected.value)) as got:
        SparseSelectionStream(args.pop("seq_len"), args.pop("token_dim"),
                              args.pop("n_selected"), **args)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("device, match", [
    ("tpu", "device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"),
    pytest.param("cuda", "no CUDA GPU is available", marks=pytest.mark.skipif(
        torch.cuda.is_available(), reason="needs a machine without a GPU")),
])
def test_bad_device_is_refused_at_construction(device, match):
    with pytest.raises(ValueError, match=match):
        stream(device=device)


def test_bad_batch_size_is_refused():
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1; got 0"):
        next(stream().batches(0))


# -- TensorBatches and the estimators ---------------------------------------------------


def test_tensor_batches_yields_the_streams_batches():
    s = stream(n_samples=70)
    batches = TensorBatches(s, batch_size=32, shuffle=True,
                            generator=torch.Generator().manual_seed(3))
    assert len(batches) == 3
    expected = epoch(s, 32, generator=torch.Generator().manual_seed(3))[0]
    assert_array_equal(torch.cat([X for X, _ in batches]).numpy(), expected)


class RecordFirstBatch(Callback):
    def initialize(self):
        self.first = []
        return self

    def on_batch_begin(self, net, batch=None, training=False, **kwargs):
        if training and len(net.history[-1, "batches"]) == 1:  # skorch opened it
            self.first.append(batch[0].clone())


#: the catalogue's paper estimators (tests/conftest.py), with this file's training settings
MAKERS = {name: functools.partial(make_estimator, name, max_epochs=2, batch_size=64)
          for name in ("transformer", "fcn")}


@pytest.mark.parametrize("name", list(MAKERS))
def test_fit_on_a_stream_is_a_fit_like_any_other(name):
    record = RecordFirstBatch()
    est = MAKERS[name](callbacks=[("record", record)]).fit(stream(n_samples=200))
    assert (est.token_dim_, est.seq_len_, est.n_features_in_) == (3, 8, 4)
    assert est.history_[:, "train_batch_count"] == [4, 4]  # 64 + 64 + 64 + 8
    assert len(record.first) == 2
    assert not torch.equal(record.first[0], record.first[1])  # fresh samples every epoch
    X, y = make_sparse_selection(50, 8, 3, 2, random_state=5)
    assert est.predict(X).shape == y.shape and np.isfinite(est.score(X, y))


@pytest.mark.parametrize("name", list(MAKERS))
def test_same_seeds_same_model_and_continuing_draws_fresh_samples(name):
    def weights(est):
        return [p.detach().clone() for p in est.module_.parameters()]

    a = MAKERS[name]().fit(stream(n_samples=200))
    b = MAKERS[name]().fit(stream(n_samples=200))
    assert all(torch.equal(p, q) for p, q in zip(weights(a), weights(b)))
    for other in (MAKERS[name](random_state=1).fit(stream(n_samples=200)),
                  MAKERS[name]().fit(stream(n_samples=200, random_state=1))):
        assert not all(torch.equal(p, q) for p, q in zip(weights(a), weights(other)))
    # two one-epoch partial fits are one two-epoch fit, with fresh samples each
    record = RecordFirstBatch()
    c = MAKERS[name](max_epochs=1, callbacks=[("record", record)])
    c.partial_fit(stream(n_samples=200)).partial_fit(stream(n_samples=200))
    assert all(torch.equal(p, q) for p, q in zip(weights(a), weights(c)))
    assert not torch.equal(record.first[0], record.first[1])


STREAM_MISUSE = {
    "y-given": (dict(), dict(y=np.zeros((200, 3))), r"y must be None when X is a "
                r"SparseSelectionStream.*Call fit\(stream\)"),
    "valid-split": (dict(train_split=ValidSplit(5)), dict(),
                    r"train_split=ValidSplit.* cannot split a stream of fresh samples.*"
                    r"train_split=None"),
    "dataloader": (dict(iterator_train=DataLoader), dict(),
                   r"iterator_train=.*DataLoader.* cannot draw a stream's fresh batches"),
    "token_dim-given": (dict(token_dim=4), dict(),
                        r"the stream has token_dim 3, but \w+ was given token_dim=4\. Set "
                        r"token_dim=None"),
}


@pytest.mark.parametrize("name", list(MAKERS))
@pytest.mark.parametrize("case", list(STREAM_MISUSE))
def test_what_cannot_work_with_a_stream_says_what_to_do(name, case):
    params, fit_kwargs, pattern = STREAM_MISUSE[case]
    est = MAKERS[name](**params)
    for method in ("fit", "partial_fit"):
        with pytest.raises(ValueError, match=pattern):
            getattr(est, method)(stream(n_samples=200), **fit_kwargs)
        assert not hasattr(est, "module_")


def test_stream_on_another_device_is_refused(monkeypatch):
    monkeypatch.setattr(device_module, "same_device", lambda a, b: False)
    with pytest.raises(ValueError, match=r"The stream draws on 'cpu' .* but SparseTokenFCN "
                                         r"trains on 'auto' .*every batch would be copied"):
        MAKERS["fcn"](device="auto").fit(stream())


@pytest.mark.parametrize("name", list(MAKERS))
def test_predict_and_score_on_a_stream_say_to_draw_held_out_data(name):
    est = MAKERS[name]().fit(stream(n_samples=100))
    for call in (est.predict, lambda s: est.score(s, None)):
        with pytest.raises(TypeError, match=r"A SparseSelectionStream is for training.*"
                                            r"make_sparse_selection"):
            call(stream())


def test_continuing_on_another_stream_is_checked():
    fcn = MAKERS["fcn"]().fit(stream(n_samples=100))
    with pytest.raises(ValueError, match="seq_len 9, but this SparseTokenFCN was fitted on "
                                         "seq_len 8"):
        fcn.partial_fit(stream(seq_len=9))
    with pytest.raises(ValueError, match="The stream has token_dim 2, but the estimator was "
                                         "fitted with token_dim 3"):
        fcn.partial_fit(stream(token_dim=2))
    fixed = MAKERS["transformer"](positional_encoding="fixed", max_seq_len=6)
    with pytest.raises(ValueError, match="seq_len 8 but the fixed positional encoding has only "
                                         "max_seq_len=6"):
        fixed.fit(stream())
    # the transformer continues on other lengths, as with arrays
    est = MAKERS["transformer"]().fit(stream(n_samples=100))
    est.partial_fit(stream(seq_len=12, n_samples=100))
    assert len(est.history_) == 4 and est.seq_len_ == 8


# -- a population fit learns ------------------------------------------------------------


def test_population_fits_learn():
    X_test, y_test = make_sparse_selection(2000, 10, 4, 2, random_state=1)
    population = SparseSelectionStream(10, 4, 2, n_samples=3000, random_state=0, device="cpu")
    transformer = SparseTokenTransformer(pe_dim=32, lr=0.05, max_epochs=5,
                                         random_state=0).fit(population)
    assert transformer.score(X_test, y_test) > 0.8  # 0.90 when measured
    fcn = SparseTokenFCN(hidden_width=256, max_epochs=10, random_state=0).fit(population)
    losses = fcn.history_[:, "train_loss"]
    assert losses[-1] < 0.8 * losses[0]
    assert fcn.score(X_test, y_test) > 0.3  # 0.45 when measured; a fixed-sample fit 0.41


def test_readme_quickstart_stream_line():
    # the README's line at a tenth of its size (2000 sequences, 2 epochs)
    population = SparseSelectionStream(20, 8, 3, n_samples=2000)
    est = SparseTokenFCN(hidden_width=32, max_epochs=2).fit(population)
    assert (est.seq_len_, est.token_dim_) == (20, 8) and len(est.history_) == 2
