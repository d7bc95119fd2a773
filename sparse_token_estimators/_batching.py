"""A skorch ``iterator_train`` / ``iterator_valid`` that slices tensors.

skorch's default ``DataLoader`` fetches and collates one sample at a time,
which for models this small costs more than the model itself. The estimators
put ``X`` and ``y`` on the device once per fit (``get_dataset``); this
iterator then yields batches as tensor slices, in the same order as
``DataLoader`` with the same ``batch_size``, ``shuffle`` and ``drop_last``.
"""

import torch
from torch.utils.data import DataLoader, Subset, TensorDataset


def _tensors_of(dataset):
    """The tensors behind a (Subset of a) TensorDataset, or None."""
    if isinstance(dataset, TensorDataset):
        return dataset.tensors
    if isinstance(dataset, Subset):
        inner = _tensors_of(dataset.dataset)
        if inner is not None:
            index = torch.as_tensor(dataset.indices, device=inner[0].device)
            return tuple(t[index] for t in inner)
    return None


class TensorBatches:
    """Iterate over ``(X_batch, y_batch)`` slices of a tensor dataset.

    Parameters
    ----------
    dataset : TensorDataset or Subset of one
        One or two tensors (X, and y where known) sharing the first axis. Any
        other dataset falls back to ``torch.utils.data.DataLoader``.
    batch_size : int
        Samples per batch.
    shuffle : bool, default=False
        Draw a new permutation every epoch.
    generator : torch.Generator or None
        Source of the permutation; the estimators pass one seeded from their
        ``random_state``.
    drop_last : bool, default=False
        Drop the last incomplete batch.

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
        self.tensors = _tensors_of(dataset)

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        if self.tensors is None:
            yield from DataLoader(
                self.dataset, batch_size=self.batch_size, shuffle=self.shuffle,
                generator=self.generator, drop_last=self.drop_last, **self.loader_kwargs,
            )
            return
        X, y = self.tensors if len(self.tensors) == 2 else (self.tensors[0], None)
        n = X.shape[0]
        order = None
        if self.shuffle:
            device = self.generator.device if self.generator is not None else X.device
            order = torch.randperm(n, generator=self.generator, device=device).to(X.device)
        stop = n - n % self.batch_size if self.drop_last else n
        for start in range(0, stop, self.batch_size):
            if order is None:
                index = slice(start, start + self.batch_size)
            else:
                index = order[start:start + self.batch_size]
            yield X[index], (None if y is None else y[index])
