"""A skorch ``iterator_train`` / ``iterator_valid`` that slices tensors.

skorch's default ``DataLoader`` fetches and collates one sample at a time,
which for models this small costs more than the model itself. The estimators
put ``X`` and ``y`` on the device once per fit (``get_dataset``); this
iterator then yields batches as tensor slices, in the same order as
``DataLoader`` with the same ``batch_size``, ``shuffle``, ``generator`` and
``drop_last``, without a per-sample Python call or a host-device copy.
"""

import torch
from torch.utils.data import DataLoader, Subset, TensorDataset

from .datasets import SparseSelectionStream

#: DataLoader arguments that change which samples form a batch, or how they
#: are combined; given any of them, the iterator hands over to DataLoader.
_LOADER_ONLY = frozenset({"sampler", "batch_sampler", "collate_fn"})


def _rows_of(dataset):
    """``(tensors, rows)`` behind a TensorDataset or a (nested) Subset of one.

    ``rows`` indexes the first axis of the tensors (None: all of them, in
    order); the data itself is never copied. None for any other dataset.
    """
    if isinstance(dataset, TensorDataset):
        return dataset.tensors, None
    if isinstance(dataset, Subset):
        inner = _rows_of(dataset.dataset)
        if inner is not None:
            tensors, rows = inner
            index = torch.as_tensor(dataset.indices, dtype=torch.long,
                                    device=tensors[0].device)
            return tensors, index if rows is None else rows[index]
    return None


class TensorBatches:
    """Iterate over ``(X_batch, y_batch)`` slices of a tensor dataset.

    Parameters
    ----------
    dataset : TensorDataset, Subset of one, or SparseSelectionStream
        One or two tensors (X, and y where known) sharing the first axis;
        batches are ``(X_batch, y_batch or None)``. A
        :class:`~sparse_token_estimators.SparseSelectionStream` yields its
        fresh batches (``shuffle`` has nothing to do there). Any other
        dataset falls back to ``torch.utils.data.DataLoader``.
    batch_size : int
        Samples per batch.
    shuffle : bool, default=False
        Draw a new permutation every epoch, as ``DataLoader`` does: with
        the same ``generator`` state both give the same batches.
    generator : torch.Generator or None
        Source of the permutation (the global generator when None); the
        estimators pass one seeded from their ``random_state``. A CUDA
        generator draws the permutation on the GPU. A stream draws one
        number from it per epoch (see ``SparseSelectionStream.batches``).
    drop_last : bool, default=False
        Drop the last incomplete batch.
    **loader_kwargs
        Other ``DataLoader`` arguments. ``sampler``, ``batch_sampler`` and
        ``collate_fn`` hand the iteration over to ``DataLoader``; the rest
        (``num_workers``, ``pin_memory``, ...) have nothing to do when the
        data already sits on the device in one tensor, and are ignored.

    Examples
    --------
    >>> import torch
    >>> from torch.utils.data import TensorDataset
    >>> batches = TensorBatches(TensorDataset(torch.arange(5.)), batch_size=2)
    >>> [xb.tolist() for xb, _ in batches]
    [[0.0, 1.0], [2.0, 3.0], [4.0]]
    """

    def __init__(self, dataset, batch_size=128, shuffle=False, generator=None,
                 drop_last=False, **loader_kwargs):
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.generator = generator
        self.drop_last = drop_last
        self.loader_kwargs = loader_kwargs

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        if isinstance(self.dataset, SparseSelectionStream):
            yield from self.dataset.batches(self.batch_size, generator=self.generator,
                                            drop_last=self.drop_last)
            return
        source = None if _LOADER_ONLY & self.loader_kwargs.keys() else _rows_of(self.dataset)
        if source is None or len(source[0]) > 2:
            yield from DataLoader(
                self.dataset, batch_size=self.batch_size, shuffle=self.shuffle,
                generator=self.generator, drop_last=self.drop_last, **self.loader_kwargs,
            )
            return
        tensors, rows = source
        n = len(self.dataset)
        order = self._order(n)
        if order is not None:
            order = order.to(tensors[0].device)
            rows = order if rows is None else rows[order]
        stop = n - n % self.batch_size if self.drop_last else n
        for start in range(0, stop, self.batch_size):
            if rows is None:  # in order: views, no copy
                batch = [t[start:start + self.batch_size] for t in tensors]
            else:  # index_select gathers rows several times faster than t[index]
                index = rows[start:start + self.batch_size]
                batch = [t.index_select(0, index) for t in tensors]
            yield (batch[0], batch[1] if len(batch) == 2 else None)
        if self.shuffle and self.generator is not None:
            # RandomSampler ends every epoch with a permutation it never uses.
            torch.randperm(n, generator=self.generator, device=self.generator.device)

    def _order(self, n):
        """This epoch's permutation (None: in order), drawn as DataLoader draws it.

        Every epoch DataLoader first draws a seed for its workers from the
        generator, then RandomSampler draws the permutation (from a fresh
        generator seeded from the global one when none is given); drawing the
        same numbers keeps the two in step, epoch after epoch, so that
        swapping in ``iterator_train=DataLoader`` trains on the same batches.
        """
        generator = self.generator
        if generator is not None:
            torch.empty((), dtype=torch.int64, device=generator.device).random_(
                generator=generator)
        if not self.shuffle:
            return None
        if generator is None:
            torch.empty((), dtype=torch.int64).random_()
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
            generator = torch.Generator().manual_seed(seed)
        return torch.randperm(n, generator=generator, device=generator.device)
