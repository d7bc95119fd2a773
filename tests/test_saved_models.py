"""Models saved by an earlier version load and predict bit for bit as they did.

The weights, inputs and predictions under ``tests/data/saved_models`` were written
by ``make.py`` there with the code of commit ffa7587 (before the estimator layer
moved into ``sparse_token_estimators/estimators/``).
"""

import json
import os

import numpy as np
import pytest

import sparse_token_estimators

HERE = os.path.join(os.path.dirname(__file__), "data", "saved_models")
with open(os.path.join(HERE, "manifest.json")) as _f:
    MANIFEST = json.load(_f)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_saved_model_predicts_as_when_saved(name):
    entry = MANIFEST[name]
    cls = getattr(sparse_token_estimators, entry["class"])
    est = cls(**entry["params"], random_state=123, device="cpu").initialize()
    est.load_params(f_params=os.path.join(HERE, entry["file"]),
                    use_safetensors=entry["safetensors"])
    X = np.load(os.path.join(HERE, f"{name}_X.npy"))
    expected = np.load(os.path.join(HERE, f"{name}_pred.npy"))
    np.testing.assert_array_equal(est.predict(X), expected)
