"""The GPU half of the pickling fault: fitted on a GPU, loaded on a CPU-only machine.

Skipped without CUDA; benchmarks/gpu.sh runs it on a GPU machine with
``python -m pytest -q tests/test_gpu.py``. The CPU-only machine is a
subprocess that sees no GPU (``CUDA_VISIBLE_DEVICES=""``).
"""

import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import make_estimator

from sparse_token_estimators import make_sparse_selection

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

MAKERS = {  # from the catalogue (tests/conftest.py)
    "transformer-auto": lambda: make_estimator("transformer", max_epochs=3, batch_size=32),
    "transformer-cuda": lambda: make_estimator("transformer", max_epochs=3, batch_size=32,
                                               device="cuda"),
    "fcn-auto": lambda: make_estimator("fcn", max_epochs=3, batch_size=32),
}

LOAD_ON_CPU = textwrap.dedent("""
    import pickle, sys, warnings
    import numpy as np, torch
    assert not torch.cuda.is_available()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skorch warns when it maps CUDA to CPU
        est = pickle.load(open(sys.argv[1], "rb"))
    X = np.load(sys.argv[2])
    out = {"predict": est.predict(X), "device": np.array(str(est.device)),
           "module_device": np.array(str(next(est.module_.parameters()).device))}
    if hasattr(est, "predict_attention"):
        out["predict_attention"] = est.predict_attention(X)
    est.partial_fit(X, np.zeros((len(X), X.shape[-1] - 1), np.float32))  # trains on CPU
    np.savez(sys.argv[3], **out)
""")


@pytest.mark.parametrize("name", list(MAKERS))
def test_gpu_fitted_model_loads_on_cpu_with_same_predictions(name, tmp_path):
    X, y = make_sparse_selection(256, 8, 3, n_selected=2, random_state=0)
    X_test, _ = make_sparse_selection(64, 8, 3, n_selected=2, random_state=1)
    est = MAKERS[name]().fit(X, y)
    assert next(est.module_.parameters()).is_cuda
    on_gpu = {"predict": est.predict(X_test)}
    if hasattr(est, "predict_attention"):
        on_gpu["predict_attention"] = est.predict_attention(X_test)

    (tmp_path / "model.pkl").write_bytes(pickle.dumps(est))
    np.save(tmp_path / "X.npy", X_test)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run(
        [sys.executable, "-c", LOAD_ON_CPU, str(tmp_path / "model.pkl"),
         str(tmp_path / "X.npy"), str(tmp_path / "out.npz")],
        env=env, check=True, timeout=300,
    )
    on_cpu = np.load(tmp_path / "out.npz")
    assert str(on_cpu["module_device"]) == "cpu"
    expected_device = "auto" if name.endswith("auto") else "cpu"  # skorch maps cuda -> cpu
    assert str(on_cpu["device"]) == expected_device
    for method, values in on_gpu.items():
        # Same weights and, for the transformer, the same CPU-seeded positional
        # draws; only float32 rounding differs between the devices.
        np.testing.assert_allclose(on_cpu[method], values, rtol=1e-4, atol=1e-5,
                                   err_msg=method)
