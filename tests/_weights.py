"""Comparing fitted weights, for the tests that check a fit was kept or remade."""

import torch


def weights(est):
    """A copy of a fitted estimator's module state (parameters and buffers)."""
    return {k: v.detach().clone() for k, v in est.module_.state_dict().items()}


def assert_same_weights(a, b):
    """Equal states, of two estimators or two results of :func:`weights`."""
    a, b = (x if isinstance(x, dict) else weights(x) for x in (a, b))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
