"""The fast data path: TensorBatches feeds what skorch's DataLoader would feed.

Also the pieces of the fast path that live elsewhere: seeded shuffling in the
estimators, positional draws made on the data's device, and (on a machine
with a GPU) CPU and GPU agreeing.
"""

import numpy as np
import pytest
import torch
from skorch.callbacks import Callback
from skorch.dataset import Dataset as SkorchDataset
from skorch.dataset import ValidSplit
from torch.utils.data import DataLoader, Subset, TensorDataset

from sparse_token_estimators import (
    SparseTokenFCN,
    SparseTokenTransformer,
    _batching,
    make_sparse_selection,
)
from sparse_token_estimators._batching import TensorBatches
from sparse_token_estimators.modules import SparseTokenAttention
from sparse_token_estimators.positional import random_unit_vectors

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def as_lists(batches):
    """Batches as nested lists, comparable across iterators."""
    return [[None if t is None else t.tolist() for t in batch] for batch in batches]


def epochs(iterator, n_epochs=3):
    return [as_lists(iterator) for _ in range(n_epochs)]


@pytest.fixture
def dataset():
    X = torch.arange(23 * 2 * 3, dtype=torch.float32).reshape(23, 2, 3)
    return TensorDataset(X, -X[:, 0, :2])


@pytest.mark.parametrize("batch_size", [1, 4, 23, 50])
@pytest.mark.parametrize("drop_last", [False, True])
def test_same_batches_as_dataloader_in_order(dataset, batch_size, drop_last):
    ours = TensorBatches(dataset, batch_size=batch_size, drop_last=drop_last)
    loader = DataLoader(dataset, batch_size=batch_size, drop_last=drop_last)
    assert as_lists(ours) == as_lists(loader)
    assert len(ours) == len(loader)


@pytest.mark.parametrize("batch_size", [4, 23])
@pytest.mark.parametrize("drop_last", [False, True])
def test_same_batches_as_dataloader_shuffled_with_same_generator(dataset, batch_size,
                                                                 drop_last):
    # Several epochs: the generators must stay in step, not just start equal.
    kwargs = {"batch_size": batch_size, "shuffle": True, "drop_last": drop_last}
    ours = TensorBatches(dataset, generator=torch.Generator().manual_seed(7), **kwargs)
    loader = DataLoader(dataset, generator=torch.Generator().manual_seed(7), **kwargs)
    assert epochs(ours) == epochs(loader)


def test_same_batches_as_dataloader_shuffled_from_global_seed(dataset):
    torch.manual_seed(3)
    ours = as_lists(TensorBatches(dataset, batch_size=5, shuffle=True))
    torch.manual_seed(3)
    assert ours == as_lists(DataLoader(dataset, batch_size=5, shuffle=True))


def test_shuffling_changes_order_between_epochs(dataset):
    ours = TensorBatches(dataset, batch_size=5, shuffle=True,
                         generator=torch.Generator().manual_seed(0))
    first, second = epochs(ours, 2)
    in_order = as_lists(TensorBatches(dataset, batch_size=5))
    assert first != second and first != in_order
    flat = sorted(row for batch in first for row in batch[1])
    assert flat == sorted(row for batch in in_order for row in batch[1])  # a permutation


@pytest.mark.parametrize("shuffle", [False, True])
def test_subset_sliced_without_dataloader(dataset, shuffle, monkeypatch):
    subset = Subset(dataset, np.array([20, 3, 7, 8, 0, 15, 16]))
    nested = Subset(subset, [6, 0, 2, 5, 1])
    expected = {}
    for name, data in (("subset", subset), ("nested", nested)):
        expected[name] = epochs(DataLoader(data, batch_size=2, shuffle=shuffle,
                                           generator=torch.Generator().manual_seed(1)), 2)

    def no_loader(*args, **kwargs):
        raise AssertionError("a Subset of a TensorDataset must not need a DataLoader")

    monkeypatch.setattr(_batching, "DataLoader", no_loader)
    for name, data in (("subset", subset), ("nested", nested)):
        ours = TensorBatches(data, batch_size=2, shuffle=shuffle,
                             generator=torch.Generator().manual_seed(1))
        assert epochs(ours, 2) == expected[name]


def test_x_only_dataset_gives_none_targets():
    batches = list(TensorBatches(TensorDataset(torch.zeros(5, 2)), batch_size=2))
    assert [xb.shape[0] for xb, _ in batches] == [2, 2, 1]
    assert all(yb is None for _, yb in batches)


def test_other_datasets_fall_back_to_dataloader():
    X = np.arange(30, dtype=np.float32).reshape(10, 3)
    dataset = SkorchDataset(X, X[:, 0])
    ours = TensorBatches(dataset, batch_size=4, shuffle=True,
                         generator=torch.Generator().manual_seed(2))
    loader = DataLoader(dataset, batch_size=4, shuffle=True,
                        generator=torch.Generator().manual_seed(2))
    assert epochs(ours, 2) == epochs(loader, 2)


def test_collate_fn_falls_back_to_dataloader(dataset):
    def first_only(samples):
        return samples[0]

    ours = as_lists(TensorBatches(dataset, batch_size=4, collate_fn=first_only))
    assert ours == as_lists(DataLoader(dataset, batch_size=4, collate_fn=first_only))


class RecordBatches(Callback):
    """Keeps the targets of every training batch, and the shuffling state."""

    def initialize(self):
        self.seen = []
        self.generator_state = None
        return self

    def on_train_begin(self, net, **kwargs):
        self.generator_state = net.torch_rng_.get_state()

    def on_batch_begin(self, net, batch=None, training=False, **kwargs):
        if training:
            self.seen.append(batch[1][:, 0].tolist())


def training_batches(random_state, **params):
    X, y = make_sparse_selection(40, seq_len=4, token_dim=2, random_state=0)
    record = RecordBatches()
    SparseTokenFCN(hidden_width=4, max_epochs=2, batch_size=16, callbacks=[record],
                   random_state=random_state, device="cpu", **params).fit(X, y)
    return record


def test_estimator_shuffling_is_seeded_by_random_state():
    first = training_batches(0).seen
    assert training_batches(0).seen == first
    assert training_batches(1).seen != first
    assert sorted(sum(first[:3], [])) == sorted(sum(first[3:], []))  # two epochs
    assert first[:3] != first[3:]


def test_estimator_fast_path_feeds_what_dataloader_feeds():
    fast = training_batches(0)
    generator = torch.Generator()
    generator.set_state(fast.generator_state)
    slow = training_batches(0, iterator_train=DataLoader, iterator_train__generator=generator)
    assert fast.seen == slow.seen


def test_estimator_with_valid_split_uses_subsets():
    X, y = make_sparse_selection(60, seq_len=4, token_dim=2, random_state=0)
    est = SparseTokenTransformer(pe_dim=8, max_epochs=2, train_split=ValidSplit(4),
                                 random_state=0, device="cpu").fit(X, y)
    assert np.isfinite(est.history[:, "valid_loss"]).all()
    assert est.history[-1, "batches", -1, "valid_batch_size"] == 15


def test_positional_draws_are_made_where_asked():
    generator = torch.Generator().manual_seed(0)
    P = random_unit_vectors(3, 5, 16, generator=generator, device="cpu")
    assert P.device.type == "cpu" and P.dtype == torch.float32
    assert torch.allclose(P.norm(dim=-1), torch.ones(3, 5))
    assert P.abs().unique().tolist() == [0.25]  # +-1/sqrt(pe_dim)
    assert 0.3 < (P > 0).float().mean() < 0.7


def test_eval_draws_are_reused_without_changing_predictions():
    torch.manual_seed(0)
    module = SparseTokenAttention(token_dim=2, pe_dim=8, n_pe_draws=3, eval_seed=5).eval()
    module.W.data = torch.randn(8, 8)  # W = 0 would attend uniformly whatever the draws
    fresh = SparseTokenAttention(token_dim=2, pe_dim=8, n_pe_draws=3, eval_seed=5).eval()
    fresh.load_state_dict(module.state_dict())
    X = torch.as_tensor(make_sparse_selection(6, 4, 2, random_state=0)[0])
    X_long = torch.as_tensor(make_sparse_selection(6, 7, 2, random_state=0)[0])
    with torch.no_grad():
        first = module.attention(X)
        assert not torch.allclose(first, torch.full_like(first, 1 / 4))
        module.attention(X_long)  # another length in between
        assert torch.equal(module.attention(X), first)
        assert torch.equal(fresh.attention(X), first)
        assert torch.equal(module.attention(X[:2]), first[:2])  # shared by the batch


@cuda
def test_cuda_batches_and_positions_stay_on_the_device():
    X = torch.randn(50, 4, 3, device="cuda")
    generator = torch.Generator(device="cuda").manual_seed(0)
    batches = list(TensorBatches(TensorDataset(X, X[:, 0]), batch_size=16, shuffle=True,
                                 generator=generator))
    assert all(xb.is_cuda and yb.is_cuda for xb, yb in batches)
    assert random_unit_vectors(8, 4, 16, generator=generator, device="cuda").is_cuda


@cuda
@pytest.mark.parametrize("model", ["transformer", "fcn"])
def test_cuda_and_cpu_predictions_agree(model):
    X, y = make_sparse_selection(300, seq_len=6, token_dim=3, random_state=0)
    X_long, _ = make_sparse_selection(20, seq_len=12, token_dim=3, random_state=1)
    if model == "transformer":
        est = SparseTokenTransformer(pe_dim=16, max_epochs=2, random_state=0, device="cuda")
    else:
        est = SparseTokenFCN(hidden_width=16, max_epochs=2, random_state=0, device="cuda")
    est.fit(X, y)
    assert next(est.module_.parameters()).is_cuda
    on_gpu = est.predict(X)
    est.module_.to("cpu")
    est.set_params(device="cpu")
    np.testing.assert_allclose(est.predict(X), on_gpu, rtol=1e-4, atol=1e-5)
    if model == "transformer":
        est.set_params(device="cuda")
        est.module_.to("cuda")
        on_gpu_long = est.predict(X_long)
        est.module_.to("cpu")
        est.set_params(device="cpu")
        np.testing.assert_allclose(est.predict(X_long), on_gpu_long, rtol=1e-4, atol=1e-5)
