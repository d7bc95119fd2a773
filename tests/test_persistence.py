"""Saving, loading and skorch's training controls: the README's routes, each one a test.

- A fresh process rebuilds either estimator from its constructor parameters
  (with another random_state) plus a weights file, pickle-based or
  safetensors, and predicts bit for bit, at the training length and others.
- Checkpoint with a validation split, load_params(checkpoint=...) into a new
  estimator, TrainEndCheckpoint, EarlyStopping(load_best=True), LRScheduler,
  verbose=1's table.
"""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from _weights import assert_same_weights, weights
from numpy.testing import assert_array_equal
from skorch.callbacks import (
    Callback,
    Checkpoint,
    EarlyStopping,
    LRScheduler,
    TrainEndCheckpoint,
)
from skorch.dataset import ValidSplit
from torch.optim.lr_scheduler import StepLR

import sparse_token_estimators
from sparse_token_estimators import SparseTokenFCN, SparseTokenTransformer, make_sparse_selection

X, Y = make_sparse_selection(240, 6, 3, n_selected=2, random_state=0)
X_TEST, _ = make_sparse_selection(50, 6, 3, n_selected=2, random_state=1)
X_LONG, _ = make_sparse_selection(50, 15, 3, n_selected=2, random_state=2)

# name -> (estimator class, constructor parameters); the sizes are given when
# rebuilding, learned when fitting
MODELS = {
    "stochastic": (SparseTokenTransformer, dict(pe_dim=16, n_pe_draws=3, max_epochs=3)),
    "fixed": (SparseTokenTransformer, dict(pe_dim=16, positional_encoding="fixed",
                                           max_seq_len=16, max_epochs=3)),
    "fcn": (SparseTokenFCN, dict(hidden_width=16, max_epochs=3)),
}
#: where the package under test lives, for the new process to import the same one
PACKAGE_ROOT = os.path.dirname(os.path.dirname(sparse_token_estimators.__file__))
SIZES = {"stochastic": dict(token_dim=3), "fixed": dict(token_dim=3),
         "fcn": dict(seq_len=6, token_dim=3)}


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def make(name, **kwargs):
    Estimator, params = MODELS[name]
    return Estimator(**{**params, "random_state": 0, **kwargs})




# -- a new process, another random_state, the same predictions ------------------------

REBUILD = textwrap.dedent("""
    import json, sys
    import numpy as np, torch
    torch.set_num_threads(1)
    import sparse_token_estimators as ste
    jobs = json.load(open(sys.argv[1]))
    out = {}
    for job in jobs:
        Estimator = getattr(ste, job["estimator"])
        est = Estimator(**job["params"], random_state=123).initialize()
        out[job["name"] + "-seed"] = int(est.module_.state_dict().get(
            "eval_seed", torch.tensor(-1)))
        est.load_params(f_params=job["weights"], use_safetensors=job["safetensors"])
        for name, path in job["inputs"].items():
            out[job["name"] + "-" + name] = est.predict(np.load(path))
    np.savez(sys.argv[2], **out)
""")


def test_a_new_process_rebuilds_each_model_from_parameters_and_weights(tmp_path):
    np.save(tmp_path / "X_test.npy", X_TEST)
    np.save(tmp_path / "X_long.npy", X_LONG)
    jobs, expected = [], {}
    for name, (Estimator, params) in MODELS.items():
        est = make(name).fit(X, Y)  # sizes learned from X
        inputs = {"T": str(tmp_path / "X_test.npy")}
        if name != "fcn":  # the transformers also at another length
            inputs["4T"] = str(tmp_path / "X_long.npy")
        for safetensors in (False, True):
            path = tmp_path / f"{name}.{'safetensors' if safetensors else 'pt'}"
            est.save_params(f_params=str(path), use_safetensors=safetensors)
            job_name = f"{name}-{'safetensors' if safetensors else 'pickle'}"
            jobs.append({"name": job_name, "estimator": Estimator.__name__,
                         "params": {**params, **SIZES[name]}, "weights": str(path),
                         "safetensors": safetensors, "inputs": inputs})
            expected[job_name] = est
            expected[job_name + "-inputs"] = {"T": X_TEST, "4T": X_LONG}
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    subprocess.run([sys.executable, "-c", REBUILD, str(tmp_path / "jobs.json"),
                    str(tmp_path / "out.npz")], check=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": PACKAGE_ROOT})
    out = np.load(tmp_path / "out.npz")
    for job in jobs:
        est = expected[job["name"]]
        if job["estimator"] == "SparseTokenTransformer":
            # the new estimator's own draws differ: only the loaded buffer makes them agree
            assert int(out[job["name"] + "-seed"]) != int(est.module_.eval_seed)
        for length in job["inputs"]:
            X_in = expected[job["name"] + "-inputs"][length]
            assert_array_equal(out[f"{job['name']}-{length}"], est.predict(X_in),
                               err_msg=f"{job['name']} at {length}")


def test_the_prediction_seed_is_in_the_saved_state():
    est = make("stochastic").fit(X, Y)
    state = est.module_.state_dict()
    assert state["eval_seed"].dtype == torch.int64 and state["eval_seed"].dim() == 0
    other = make("stochastic", random_state=5, **SIZES["stochastic"]).initialize()
    other.module_.load_state_dict(state)
    assert_array_equal(other.predict(X_LONG), est.predict(X_LONG))


def test_readme_save_and_load_routes(tmp_path):
    # README "Saving and loading": weights from someone else -> safetensors.
    est = SparseTokenTransformer(pe_dim=16, max_epochs=2, random_state=0).fit(X, Y)
    est.save_params(f_params=tmp_path / "weights.safetensors", use_safetensors=True)
    new = SparseTokenTransformer(pe_dim=16, token_dim=3).initialize()
    new.load_params(f_params=tmp_path / "weights.safetensors", use_safetensors=True)
    assert_array_equal(new.predict(X_LONG), est.predict(X_LONG))
    # your own files: weights, optimizer state and history, to continue training
    est.save_params(f_params=tmp_path / "w.pt", f_optimizer=tmp_path / "opt.pt",
                    f_history=tmp_path / "history.json")
    new = SparseTokenTransformer(pe_dim=16, token_dim=3, max_epochs=2).initialize()
    new.load_params(f_params=tmp_path / "w.pt", f_optimizer=tmp_path / "opt.pt",
                    f_history=tmp_path / "history.json")
    assert len(new.history_) == 2
    saved_state = est.optimizer_.state_dict()["state"]
    assert new.optimizer_.state_dict()["state"].keys() == saved_state.keys()
    new.partial_fit(X, Y)
    assert len(new.history_) == 4
    # the whole estimator: pickle (only for files you trust)
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(est))
    assert_array_equal(pickle.loads((tmp_path / "model.pkl").read_bytes()).predict(X_TEST),
                       est.predict(X_TEST))


def _as_pickled_by_0_1_0(state):
    # 0.1.0 wrote no format number, and had no token_dim / seq_len parameters
    for key in ("_pickle_format_", "token_dim", "seq_len"):
        state.pop(key, None)
    return state


def test_a_fitted_pickle_of_0_1_0_is_refused_with_what_to_do():
    X, y = make_sparse_selection(64, 6, 3, 2, random_state=0)
    est = SparseTokenTransformer(pe_dim=8, max_epochs=1, random_state=0).fit(X, y)
    state = _as_pickled_by_0_1_0(est.__getstate__())
    with pytest.raises(ValueError, match=r"pickled fitted by sparse_token_estimators "
                       r"0\.1\.0.*Refit it.*random_state"):
        SparseTokenTransformer.__new__(SparseTokenTransformer).__setstate__(state)


def test_an_unfitted_pickle_of_0_1_0_takes_the_new_parameters_defaults():
    state = _as_pickled_by_0_1_0(SparseTokenFCN(hidden_width=8).__getstate__())
    est = SparseTokenFCN.__new__(SparseTokenFCN)
    est.__setstate__(state)
    params = est.get_params()
    assert params["token_dim"] is None and params["seq_len"] is None
    assert params["hidden_width"] == 8
    X, y = make_sparse_selection(64, 6, 3, 2, random_state=0)
    assert est.set_params(max_epochs=1).fit(X, y).predict(X).shape == (64, 3)


def test_safetensors_refuses_what_is_not_a_tensor(tmp_path):
    est = make("fcn").fit(X, Y)
    with pytest.raises(ValueError, match="Safetensors can only store tensors"):
        est.save_params(f_optimizer=tmp_path / "opt.safetensors", use_safetensors=True)


@pytest.mark.parametrize("name", [pytest.param("stochastic", marks=pytest.mark.slow), "fcn"])
def test_a_compiled_model_pickles_and_shares_weights_with_an_eager_one(name, tmp_path):
    compiled = make(name, compile=True, compile__backend="eager").fit(X, Y)
    eager = make(name).fit(X, Y)
    np.testing.assert_allclose(compiled.predict(X_TEST), eager.predict(X_TEST),
                               rtol=1e-5, atol=1e-6)
    loaded = pickle.loads(pickle.dumps(compiled))
    assert_array_equal(loaded.predict(X_TEST), compiled.predict(X_TEST))
    assert loaded.module_._compiled_call_impl is not None  # compiled again at first use
    compiled.save_params(f_params=tmp_path / "w.pt")  # same keys as an eager module
    fresh = make(name, **SIZES[name]).initialize()
    fresh.load_params(f_params=tmp_path / "w.pt")
    assert_array_equal(fresh.predict(X_TEST), compiled.predict(X_TEST))


# -- skorch's training controls -----------------------------------------------------------


class RecordWeights(Callback):
    """Keeps the weights after every epoch."""

    def initialize(self):
        self.per_epoch = []
        return self

    def on_epoch_end(self, net, **kwargs):
        self.per_epoch.append(weights(net))


@pytest.mark.parametrize("name", list(MODELS))
def test_checkpoint_with_a_validation_split_loads_into_a_new_estimator(name, tmp_path):
    record = RecordWeights()
    cp = Checkpoint(dirname=str(tmp_path / "cp"), monitor="valid_loss_best")
    est = make(name, max_epochs=5, lr=0.2, train_split=ValidSplit(4),
               callbacks=[cp, ("record", record)]).fit(X, Y)
    best = [i for i, saved in enumerate(est.history_[:, "event_cp"]) if saved][-1]
    new = make(name, **SIZES[name])  # the README's route
    new.initialize()
    new.load_params(checkpoint=cp)
    assert_same_weights(weights(new), record.per_epoch[best])
    assert len(new.history_) == 5  # the checkpoint's history comes along


@pytest.mark.parametrize("name", ["stochastic", "fcn"])
def test_train_end_checkpoint(name, tmp_path):
    cp = TrainEndCheckpoint(dirname=str(tmp_path / "end"))
    est = make(name, callbacks=[cp]).fit(X, Y)
    new = make(name, **SIZES[name]).initialize()
    new.load_params(checkpoint=cp.checkpoint_)  # the Checkpoint it wraps
    assert_same_weights(weights(new), weights(est))
    assert_array_equal(new.predict(X_LONG if name != "fcn" else X_TEST),
                       est.predict(X_LONG if name != "fcn" else X_TEST))


class FakeScore(Callback):
    """A monitored score that is best after epoch 2 and worse after."""

    def on_epoch_end(self, net, **kwargs):
        net.history.record("fake", [3.0, 1.0, 2.0, 4.0, 5.0, 6.0][len(net.history) - 1])


@pytest.mark.parametrize("name", ["stochastic", "fcn"])
def test_early_stopping_restores_the_best_weights(name):
    record = RecordWeights()
    stopping = EarlyStopping(monitor="fake", patience=2, load_best=True)
    est = make(name, max_epochs=6, callbacks=[FakeScore(), ("record", record),
                                              ("stop", stopping)]).fit(X, Y)
    assert len(est.history_) == 4  # stopped two epochs after the best
    assert_same_weights(weights(est), record.per_epoch[1])  # epoch 2's weights
    assert not all(torch.equal(a, b) for a, b in
                   zip(record.per_epoch[1].values(), record.per_epoch[-1].values()))


def test_readme_early_stopping_route():
    record = RecordWeights()
    est = SparseTokenTransformer(pe_dim=8, max_epochs=12, train_split=ValidSplit(4),
                                 callbacks=[EarlyStopping(patience=3, load_best=True),
                                            ("record", record)], random_state=0).fit(X, Y)
    best = int(np.argmin(est.history_[:, "valid_loss"]))
    assert_same_weights(weights(est), record.per_epoch[best])


def test_lr_scheduler_halves_the_learning_rate_every_epoch():
    est = SparseTokenFCN(hidden_width=8, lr=0.01, max_epochs=3, random_state=0,
                         callbacks=[LRScheduler(policy=StepLR, step_size=1, gamma=0.5)])
    est.fit(X, Y)
    assert est.history_[:, "event_lr"] == [0.01, 0.005, 0.0025]
    assert est.optimizer_.param_groups[0]["lr"] == pytest.approx(0.00125)


def test_verbose_prints_the_epoch_table(capsys):
    SparseTokenTransformer(pe_dim=8, max_epochs=3, train_split=ValidSplit(4), verbose=1,
                           random_state=0).fit(X, Y)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["epoch", "train_loss", "valid_loss", "dur"]
    assert [line.split()[0] for line in lines[2:]] == ["1", "2", "3"]


def test_readme_training_controls_route(capsys):
    record = RecordWeights()
    est = SparseTokenTransformer(
        train_split=ValidSplit(5),
        callbacks=[EarlyStopping(patience=3, load_best=True),
                   LRScheduler(policy=StepLR, step_size=5, gamma=0.5), ("record", record)],
        verbose=1,
        random_state=0,
    ).fit(X, Y)
    lrs = est.history_[:, "event_lr"]
    assert len(lrs) > 5 and lrs[:6] == [0.02] * 5 + [0.01]  # halved after 5 epochs
    best = int(np.argmin(est.history_[:, "valid_loss"]))
    assert_same_weights(weights(est), record.per_epoch[best])
    assert "valid_loss" in capsys.readouterr().out
