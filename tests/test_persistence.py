"""Saving, loading and skorch's training controls: the README's routes, each one a test.

- Weights record what made them and are refused, each difference named and nothing
  changed, by an estimator of another encoding, size, output_map or class; files
  without that record (0.1.0) load when they fit. A load is all or nothing.
- (tests/test_files.py: unreadable files, the wrong format, a full or read-only disk.)

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
from conftest import ESTIMATORS
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
from sparse_token_estimators import (
    SparseTokenFCN,
    SparseTokenTransformer,
    checkpoints,
    make_sparse_selection,
)
from sparse_token_estimators.estimators import _persistence

X, Y = make_sparse_selection(240, 6, 3, n_selected=2, random_state=0)
X_TEST, _ = make_sparse_selection(50, 6, 3, n_selected=2, random_state=1)
X_LONG, _ = make_sparse_selection(50, 15, 3, n_selected=2, random_state=2)

# name -> (catalogue name (tests/conftest.py), this file's parameters: 16 wide, so
# that pe_dim=8 is another model; the package's batch size). The sizes are
# given when rebuilding, learned when fitting.
TRAINING = dict(max_epochs=3, batch_size=256)
MODELS = {
    "stochastic": ("transformer", dict(pe_dim=16, n_pe_draws=3, **TRAINING)),
    "fixed": ("transformer-fixed", dict(pe_dim=16, **TRAINING)),
    "fcn": ("fcn", dict(hidden_width=16, **TRAINING)),
}
#: where the package under test lives, for the new process to import the same one
PACKAGE_ROOT = os.path.dirname(os.path.dirname(sparse_token_estimators.__file__))
SIZES = {"stochastic": dict(token_dim=3), "fixed": dict(token_dim=3),
         "fcn": dict(seq_len=6, token_dim=3)}


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def model(name):
    """The estimator class and constructor parameters (but random_state) of ``name``."""
    catalogue_name, params = MODELS[name]
    Estimator, own = ESTIMATORS[catalogue_name]
    return Estimator, {**own, **params}


def make(name, **kwargs):
    Estimator, params = model(name)
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
    for name in MODELS:
        Estimator, params = model(name)
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


@pytest.mark.parametrize("Checkpoint", [Checkpoint, checkpoints.Checkpoint],
                         ids=["skorch", "ours"])
@pytest.mark.parametrize("name", list(MODELS))
def test_checkpoint_with_a_validation_split_loads_into_a_new_estimator(name, Checkpoint,
                                                                       tmp_path):
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


def test_our_checkpoint_with_load_best_restores_the_best_epoch(tmp_path):
    record = RecordWeights()
    cp = checkpoints.Checkpoint(dirname=str(tmp_path), monitor="fake_best", load_best=True)
    est = make("fcn", max_epochs=4, callbacks=[FakeScore(), BestOf("fake"), cp,
                                               ("record", record)]).fit(X, Y)
    assert len(record.per_epoch) == 4
    # as skorch's: the best epoch's weights, optimizer and history (two epochs)
    assert est.history_[:, "event_cp"] == [True, True]
    assert_same_weights(weights(est), record.per_epoch[1])


class BestOf(Callback):
    """Records ``<key>_best`` as skorch's scoring callbacks do."""

    def __init__(self, key):
        self.key = key

    def on_epoch_end(self, net, **kwargs):
        values = net.history[:, self.key]
        net.history.record(self.key + "_best", values[-1] == min(values))


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


# -- weights that say what made them ----------------------------------------------------

# (saved with, loaded into, the differences the refusal names)
MISMATCHES = {
    "encoding": (dict(positional_encoding="stochastic"), dict(positional_encoding="sinusoidal"),
                 ["positional_encoding: saved 'stochastic', this estimator 'sinusoidal'"]),
    "stochastic-into-fixed": (dict(), dict(positional_encoding="fixed", max_seq_len=16),
                              ["positional_encoding: saved 'stochastic', this estimator 'fixed'",
                               "max_seq_len: saved 256, this estimator 16"]),
    "fixed-into-randomized": (dict(positional_encoding="fixed", max_seq_len=16),
                              dict(positional_encoding="randomized", max_seq_len=16),
                              ["positional_encoding: saved 'fixed', this estimator "
                               "'randomized'"]),
    "pe_dim": (dict(pe_dim=32), dict(pe_dim=16), ["pe_dim: saved 32, this estimator 16"]),
    "output_map": (dict(output_map=True), dict(),
                   ["output_map: saved True, this estimator False"]),
    "token_dim": (dict(), dict(token_dim=4), ["token_dim: saved 3, this estimator 4"]),
}


def _transformer(**kwargs):
    return SparseTokenTransformer(**{"pe_dim": 16, "n_pe_draws": 2, "max_epochs": 1,
                                     "random_state": 0, **kwargs})


def _state(est):
    """What a failed call must leave as it was."""
    return (weights(est), est.predict(X_TEST), est.history_.to_list(),
            {k: v for k, v in est.optimizer_.state_dict()["state"].items()})


def _assert_unchanged(est, before):
    after = _state(est)
    assert_same_weights(after[0], before[0])
    assert_array_equal(after[1], before[1])
    assert after[2] == before[2]
    assert str(after[3]) == str(before[3])


@pytest.mark.parametrize("safetensors", [False, True], ids=["torch", "safetensors"])
@pytest.mark.parametrize("case", list(MISMATCHES))
def test_weights_of_another_model_are_refused_naming_each_difference(case, safetensors,
                                                                     tmp_path):
    saved_with, loaded_into, differences = MISMATCHES[case]
    source = _transformer(**saved_with).fit(X, Y)
    files = dict(f_params=tmp_path / "w", f_history=tmp_path / "h.json")
    if not safetensors:
        files["f_optimizer"] = tmp_path / "o.pt"
    source.save_params(**files, use_safetensors=safetensors)
    X_in = X_TEST if loaded_into.get("token_dim", 3) == 3 else None
    target = _transformer(**{"max_epochs": 2, **loaded_into})
    if X_in is None:  # another token_dim: a target fitted on its own data
        Xt, yt = make_sparse_selection(40, 6, 4, 2, random_state=3)
        target.fit(Xt, yt)
        before = weights(target), target.predict(Xt), target.history_.to_list()
    else:
        target.fit(X, Y)
        before = _state(target)
    with pytest.raises(ValueError) as info:
        target.load_params(**files, use_safetensors=safetensors)
    message = str(info.value)
    assert f"f_params '{tmp_path / 'w'}'" in message
    for difference in differences:
        assert difference in message
    fix = ", ".join(line.split(":")[0] + "=" + line.split("saved ")[1].split(",")[0]
                    for line in differences)
    assert "Nothing was loaded" in message and "set_params(" in message
    assert all(part in message for part in fix.split(", "))
    if X_in is None:
        assert_same_weights(weights(target), before[0])
        assert_array_equal(target.predict(Xt), before[1])
        assert target.history_.to_list() == before[2]
    else:
        _assert_unchanged(target, before)


def test_the_fix_the_refusal_names_works(tmp_path):
    source = _transformer(pe_dim=32, positional_encoding="fixed", max_seq_len=16).fit(X, Y)
    source.save_params(f_params=tmp_path / "w.pt")
    target = _transformer(token_dim=3).initialize()
    with pytest.raises(ValueError, match=r"Construct SparseTokenTransformer\(max_seq_len=16, "
                       r"pe_dim=32, positional_encoding='fixed'\)"):
        target.load_params(f_params=tmp_path / "w.pt")
    target.set_params(pe_dim=32, positional_encoding="fixed", max_seq_len=16)
    target.load_params(f_params=tmp_path / "w.pt")
    assert_array_equal(target.predict(X_TEST), source.predict(X_TEST))


def test_weights_of_another_estimator_class_name_the_class_to_construct(tmp_path):
    fcn = make("fcn").fit(X, Y)
    fcn.save_params(f_params=tmp_path / "w.safetensors", use_safetensors=True)
    target = make("stochastic", **SIZES["stochastic"]).initialize()
    before = weights(target)
    with pytest.raises(ValueError, match=r"estimator: saved SparseTokenFCN, this is a "
                       r"SparseTokenTransformer\n.*Construct SparseTokenFCN\(hidden_width=16, "
                       r"n_hidden_layers=1, seq_len=6, token_dim=3\)"):
        target.load_params(f_params=tmp_path / "w.safetensors", use_safetensors=True)
    assert_same_weights(weights(target), before)


def test_both_formats_record_the_model_and_stay_plain_state_dicts(tmp_path):
    est = make("stochastic").fit(X, Y)
    est.save_params(f_params=tmp_path / "w.pt")
    est.save_params(f_params=tmp_path / "w.safetensors", use_safetensors=True)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "w.safetensors"), framework="pt") as f:
        from_safetensors = json.loads(f.metadata()["sparse_token_estimators"])
    state = torch.load(tmp_path / "w.pt", weights_only=True)
    from_torch = json.loads(state._metadata[""]["sparse_token_estimators"])
    assert from_torch == from_safetensors
    assert from_torch["format"] == 1 and from_torch["estimator"] == "SparseTokenTransformer"
    assert from_torch["params"] == {
        "module": "sparse_token_estimators.modules.SparseTokenAttention", "token_dim": 3,
        "pe_dim": 16, "positional_encoding": "stochastic", "max_seq_len": 256,
        "output_map": False, "layout": "indicator"}
    assert from_torch["recorded"] == {"n_pe_draws": 3, "seq_len": 6}
    # still a plain state_dict: any torch code loads it into the module
    module = make("stochastic", **SIZES["stochastic"]).initialize().module_
    module.load_state_dict(state)
    fcn_meta = _persistence.weights_metadata(make("fcn").fit(X, Y))["params"]
    assert {k: fcn_meta[k] for k in ("seq_len", "token_dim", "hidden_width",
                                     "n_hidden_layers")} == dict(seq_len=6, token_dim=3,
                                                                 hidden_width=16,
                                                                 n_hidden_layers=1)


def _as_written_by_0_1_0(est, path, safetensors):
    """Weights without metadata, as save_params wrote them before."""
    state = {k: v.clone() for k, v in est.module_.state_dict().items()}
    if safetensors:
        from safetensors.torch import save_file

        save_file(state, str(path))
    else:
        torch.save(state, path)


@pytest.mark.parametrize("safetensors", [False, True], ids=["torch", "safetensors"])
def test_weights_without_metadata_load_when_they_fit_and_are_refused_when_not(safetensors,
                                                                             tmp_path):
    stochastic = make("stochastic").fit(X, Y)
    _as_written_by_0_1_0(stochastic, tmp_path / "old", safetensors)
    same = make("stochastic", **SIZES["stochastic"]).initialize()
    same.load_params(f_params=tmp_path / "old", use_safetensors=safetensors)
    assert_array_equal(same.predict(X_LONG), stochastic.predict(X_LONG))
    fixed = make("fixed").fit(X, Y)
    before = _state(fixed)
    with pytest.raises(ValueError, match=r"missing keys \['positions.table'\].*records no "
                       r"parameters.*Nothing was loaded"):
        fixed.load_params(f_params=tmp_path / "old", use_safetensors=safetensors)
    _assert_unchanged(fixed, before)
    wider = make("stochastic", pe_dim=8).fit(X, Y)
    with pytest.raises(ValueError, match=r"shapes differ \(W: saved \(16, 16\), this module "
                       r"\(8, 8\)\)"):
        wider.load_params(f_params=tmp_path / "old", use_safetensors=safetensors)


# -- all or nothing -------------------------------------------------------------------


def test_an_optimizer_state_that_does_not_fit_leaves_the_weights_unloaded(tmp_path):
    sgd = make("stochastic", optimizer=torch.optim.SGD, optimizer__momentum=0.9).fit(X, Y)
    sgd.save_params(f_params=tmp_path / "w.pt", f_optimizer=tmp_path / "o.pt")
    adam = make("stochastic").fit(X_LONG[:40], Y[:40])
    before = _state(adam)
    with pytest.raises(ValueError, match=r"f_optimizer '.*o.pt' into this Adam: its settings"):
        adam.load_params(f_params=tmp_path / "w.pt", f_optimizer=tmp_path / "o.pt")
    _assert_unchanged(adam, before)


def test_a_failure_while_applying_puts_everything_back(tmp_path, monkeypatch):
    source = make("fcn", random_state=1).fit(X, Y)
    source.save_params(f_params=tmp_path / "w.pt", f_optimizer=tmp_path / "o.pt",
                       f_history=tmp_path / "h.json")
    target = make("fcn", max_epochs=2).fit(X, Y)
    before = _state(target)

    def broken(state):
        raise RuntimeError("disk went away")

    monkeypatch.setattr(target.optimizer_, "load_state_dict", broken)
    with pytest.raises(RuntimeError, match="disk went away"):
        target.load_params(f_params=tmp_path / "w.pt", f_optimizer=tmp_path / "o.pt",
                           f_history=tmp_path / "h.json")
    monkeypatch.undo()
    _assert_unchanged(target, before)  # the weights, loaded first, were put back


def test_a_failed_load_into_a_changed_estimator_keeps_its_fitted_module(tmp_path):
    other = make("stochastic", pe_dim=8).fit(X, Y)
    other.save_params(f_params=tmp_path / "w8.pt")
    est = make("stochastic").fit(X, Y)
    before = _state(est)
    est.set_params(pe_dim=32)  # reads as unfitted; a load rebuilds the module first
    with pytest.raises(ValueError, match="pe_dim: saved 8, this estimator 32"):
        est.load_params(f_params=tmp_path / "w8.pt")
    _assert_unchanged(est.set_params(pe_dim=16), before)
    est.set_params(pe_dim=8).load_params(f_params=tmp_path / "w8.pt")
    assert_array_equal(est.predict(X_TEST), other.predict(X_TEST))


def test_metadata_this_package_did_not_write_is_refused(tmp_path):
    est = make("fcn").fit(X, Y)
    state = est.module_.state_dict()
    state._metadata[""]["sparse_token_estimators"] = json.dumps({"format": 1})
    torch.save(state, tmp_path / "w.pt")
    before = weights(est)
    with pytest.raises(ValueError, match="metadata under 'sparse_token_estimators' that this "
                       "package did not write"):
        est.load_params(f_params=tmp_path / "w.pt")
    assert_same_weights(weights(est), before)


@pytest.mark.parametrize("metadata", [True, False])
def test_encoder_weights_saved_before_the_input_scale_load_at_their_old_scale(tmp_path, metadata):
    from sparse_token_estimators import SparseTokenEncoder

    est = SparseTokenEncoder(d_model=8, n_heads=1, positional_encoding="sinusoidal",
                             max_epochs=2, random_state=0).fit(X, Y)
    path = tmp_path / "weights.pt"
    est.save_params(f_params=path)
    # the file as the encoder before the input scale wrote it: no pe_scale
    state = torch.load(path)
    del state["pe_scale"]
    if not metadata:  # a plain dict has no _metadata: a file of 0.1.0 or skorch
        state = dict(state)
    torch.save(state, path)
    loaded = SparseTokenEncoder(d_model=8, n_heads=1, positional_encoding="sinusoidal",
                                token_dim=3).initialize().load_params(f_params=path)
    assert float(loaded.module_.pe_scale) == 1.0  # the scale it was trained at, recorded
    est.module_.pe_scale.fill_(1.0)
    assert_array_equal(loaded.predict(X_TEST), est.predict(X_TEST))
