"""Models saved by an earlier version load bit for bit and predict as they did.

The weights, inputs and predictions under ``tests/data/saved_models`` were written
by ``make.py`` there with the code of commit ffa7587 (before the estimator layer
moved into ``sparse_token_estimators/estimators/``), on one machine.

The weights are compared bit for bit: loading copies them, whatever the CPU. The
predictions are computed here, by this CPU's kernels, which round float32
arithmetic differently from those of the machine that wrote them (measured on
another x86 machine: at most 3.0e-8 apart, 5.5e-7 relative), and differently
with another number of threads. They are compared within float32's rounding:
``rtol=1e-6`` (about 8 units in the last place) plus ``atol=1e-7`` for the values
near 0 (every stored prediction is at least 0.005 in magnitude; a selection's
output is at most about 1). A model that loads wrongly (another weight, another
position table, another layout) is off by far more than that.
"""

import json
import os

import numpy as np
import pytest
import torch

import sparse_token_estimators

HERE = os.path.join(os.path.dirname(__file__), "data", "saved_models")
with open(os.path.join(HERE, "manifest.json")) as _f:
    MANIFEST = json.load(_f)

#: float32 rounding, on another CPU or another number of threads (see above)
RTOL, ATOL = 1e-6, 1e-7


def _stored_weights(entry):
    path = os.path.join(HERE, entry["file"])
    if entry["safetensors"]:
        from safetensors.torch import load_file

        return load_file(path)
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_saved_model_loads_bit_for_bit_and_predicts_as_when_saved(name):
    entry = MANIFEST[name]
    cls = getattr(sparse_token_estimators, entry["class"])
    est = cls(**entry["params"], random_state=123, device="cpu").initialize()
    est.load_params(f_params=os.path.join(HERE, entry["file"]),
                    use_safetensors=entry["safetensors"])
    stored, loaded = _stored_weights(entry), est.module_.state_dict()
    # a buffer added since (the encoder's pe_scale: 1.0 for a model saved before it)
    assert set(loaded) - set(stored) <= {"pe_scale"} and set(stored) <= set(loaded)
    for key, value in stored.items():
        assert loaded[key].dtype == value.dtype and torch.equal(loaded[key], value), key
    X = np.load(os.path.join(HERE, f"{name}_X.npy"))
    expected = np.load(os.path.join(HERE, f"{name}_pred.npy"))
    predicted = est.predict(X)
    assert predicted.shape == expected.shape
    np.testing.assert_allclose(predicted, expected, rtol=RTOL, atol=ATOL)


def test_the_tolerance_catches_a_model_that_loads_wrongly():
    """The tolerance is no blanket: one weight moved by a float32 step is caught."""
    entry = MANIFEST["fcn"]
    est = sparse_token_estimators.SparseTokenFCN(
        **entry["params"], random_state=123, device="cpu").initialize()
    est.load_params(f_params=os.path.join(HERE, entry["file"]))
    with torch.no_grad():
        first = next(est.module_.parameters())
        first.view(-1)[0] += 1e-3
    X = np.load(os.path.join(HERE, "fcn_X.npy"))
    expected = np.load(os.path.join(HERE, "fcn_pred.npy"))
    assert not np.allclose(est.predict(X), expected, rtol=RTOL, atol=ATOL)
