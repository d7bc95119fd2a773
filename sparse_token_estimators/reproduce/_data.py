"""The seeded data of a run: every set is a function of (seed, length, role).

Held-out sets are drawn again where they are used (in the workers): drawing
them is cheaper than pickling them.
"""

import numpy as np

from ..datasets import make_sparse_selection

#: what a set is for; its own stream of random numbers ("pool": the
#: training sequences a learning curve takes nested subsets of;
#: "population": the seed of a SparseSelectionStream)
ROLES = {"train": 0, "validation": 1, "test": 2, "length": 3, "pool": 4, "population": 5}


def _rng(seed, seq_len, role):
    return np.random.default_rng([seed, seq_len, ROLES[role]])


def task(config, seq_len, n_samples, role, seed, layout="indicator"):
    """``(X, y)`` of the ``role`` set at ``seq_len`` for ``seed``, in ``layout`` (the same
    tokens, subsets and targets in both).

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import SMOKE
    >>> X, y = task(SMOKE, 4, 10, "test", seed=0)
    >>> X.shape, bool((task(SMOKE, 4, 10, "test", seed=0)[0] == X).all())
    ((10, 4, 3), True)
    """
    return make_sparse_selection(
        n_samples, seq_len, config.token_dim, config.n_selected,
        random_state=_rng(seed, seq_len, role), layout=layout,
    )


def stream_seed(seq_len, seed):
    """The ``random_state`` of the population stream at ``seq_len`` for ``seed``.

    Examples
    --------
    >>> stream_seed(10, 0) == stream_seed(10, 0) != stream_seed(10, 1)
    True
    """
    return int(_rng(seed, seq_len, "population").integers(2**31))
