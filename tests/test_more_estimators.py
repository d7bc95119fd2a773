"""SparseTokenEncoder, SparseTokenRNN and SparseTokenSSM: parameters, saving, searches.

scikit-learn's checks run on them in ``tests/test_common.py``; bad input and
bad parameters in ``tests/test_bad_input.py``, with the paper's two.
"""

import copy
import json
import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from conftest import ESTIMATORS, make_estimator, make_task
from numpy.testing import assert_array_equal
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV

import sparse_token_estimators
from sparse_token_estimators import (
    SparseTokenEncoder,
    SparseTokenRNN,
    SparseTokenSSM,
    make_sparse_selection,
)
from sparse_token_estimators.architectures import RecurrentNet, TransformerEncoder
from sparse_token_estimators.estimators import _rules
from sparse_token_estimators.ssm import SelectiveSSM

N, D = 12, 2
TASK = make_task(N, seq_len=5, token_dim=D)


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


# -- bad input and bad parameters: tests/test_bad_input.py runs every check on these too


def test_any_length_where_the_encoding_allows():
    X_long, _ = make_task(N, seq_len=20, token_dim=D, random_state=1)
    for name in ("encoder", "rnn", "ssm"):
        assert make_estimator(name).fit(*TASK).predict(X_long).shape == (N, D)


GROUPS = {"d_model": "structural", "n_heads": "structural", "n_layers": "structural",
          "positional_encoding": "structural", "max_seq_len": "structural",
          "cell": "structural", "hidden_size": "structural", "d_state": "structural"}


@pytest.mark.parametrize("est_name, param, value", [
    ("encoder", "d_model", 16), ("encoder", "n_heads", 4), ("encoder", "n_layers", 2),
    ("encoder", "positional_encoding", "rope"), ("rnn", "cell", "lstm"),
    ("rnn", "hidden_size", 4), ("rnn", "n_layers", 2), ("ssm", "d_model", 4),
    ("ssm", "d_state", 8), ("ssm", "n_layers", 2)])
def test_a_structural_change_unfits_until_set_back(est_name, param, value):
    assert _rules.group_of(param, make_estimator(est_name)) == GROUPS[param]
    X_OK, Y_OK = TASK
    est = make_estimator(est_name).fit(X_OK, Y_OK)
    before, good = est.predict(X_OK), est.get_params()[param]
    est.set_params(**{param: value})
    with pytest.raises(NotFittedError, match=f"{param} {good!r} -> {value!r}"):
        est.predict(X_OK)
    est.set_params(**{param: good})
    assert_array_equal(est.predict(X_OK), before)
    est.set_params(**{param: value}).fit(X_OK, Y_OK)  # the next fit builds the new module
    assert est.predict(X_OK).shape == Y_OK.shape


# -- saving and loading -------------------------------------------------------------------

X, Y = make_sparse_selection(240, 6, 3, n_selected=2, random_state=0)
X_TEST, _ = make_sparse_selection(50, 6, 3, n_selected=2, random_state=1)
X_LONG, _ = make_sparse_selection(50, 24, 3, n_selected=2, random_state=2)
#: catalogue name -> its parameters here (the sizes are given when rebuilding, learned
#: when fitting; random_state at each use)
SAVED = {name: {**ESTIMATORS[name][1], **params, "max_epochs": 2, "batch_size": 64}
         for name, params in {"encoder-stochastic": {}, "encoder-rope": dict(n_layers=2),
                              "rnn-lstm": {}, "ssm": dict(n_layers=2)}.items()}


def saved_model(name):
    return ESTIMATORS[name][0], SAVED[name]


REBUILD = textwrap.dedent("""
    import json, sys
    import numpy as np, torch
    torch.set_num_threads(1)
    import sparse_token_estimators as ste
    out = {}
    for job in json.load(open(sys.argv[1])):
        est = getattr(ste, job["estimator"])(**job["params"], token_dim=3, random_state=123)
        est.initialize().load_params(f_params=job["weights"], use_safetensors=job["safetensors"])
        for name, path in job["inputs"].items():
            out[job["name"] + "-" + name] = est.predict(np.load(path))
    np.savez(sys.argv[2], **out)
""")


def test_a_new_process_rebuilds_each_model_from_parameters_and_weights(tmp_path):
    inputs = {"T": str(tmp_path / "X_test.npy"), "4T": str(tmp_path / "X_long.npy")}
    np.save(inputs["T"], X_TEST)
    np.save(inputs["4T"], X_LONG)
    jobs, expected = [], {}
    for name in SAVED:
        Estimator, params = saved_model(name)
        est = Estimator(**params, random_state=0).fit(X, Y)
        for safetensors in (False, True):
            path = tmp_path / f"{name}.{'safetensors' if safetensors else 'pt'}"
            est.save_params(f_params=str(path), use_safetensors=safetensors)
            job = f"{name}-{'safetensors' if safetensors else 'pickle'}"
            jobs.append({"name": job, "estimator": Estimator.__name__, "params": params,
                         "weights": str(path), "safetensors": safetensors, "inputs": inputs})
            expected[job] = est
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    root = os.path.dirname(os.path.dirname(sparse_token_estimators.__file__))
    subprocess.run([sys.executable, "-c", REBUILD, str(tmp_path / "jobs.json"),
                    str(tmp_path / "out.npz")], check=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": root})
    out = np.load(tmp_path / "out.npz")
    for job in jobs:
        for length, X_in in (("T", X_TEST), ("4T", X_LONG)):
            assert_array_equal(out[f"{job['name']}-{length}"], expected[job["name"]].predict(X_in),
                               err_msg=f"{job['name']} at {length}")


# Weights name the structural parameters that made them (``estimators._rules.group_of``):
# (estimator, saved with, loaded into, the differences the refusal names)
MISMATCHES = {
    "encoder-d_model": (SparseTokenEncoder, dict(d_model=8), dict(d_model=16),
                        ["d_model: saved 8, this estimator 16"]),
    "encoder-positional_encoding": (SparseTokenEncoder, dict(positional_encoding="none"),
                                    dict(positional_encoding="rope"),
                                    ["positional_encoding: saved 'none', this estimator 'rope'"]),
    "encoder-n_layers": (SparseTokenEncoder, dict(n_layers=1), dict(n_layers=2),
                         ["n_layers: saved 1, this estimator 2"]),
    "encoder-d_model-and-n_heads": (SparseTokenEncoder, dict(d_model=8, n_heads=2),
                                    dict(d_model=12, n_heads=3),
                                    ["d_model: saved 8, this estimator 12",
                                     "n_heads: saved 2, this estimator 3"]),
    "rnn-cell": (SparseTokenRNN, dict(cell="gru"), dict(cell="lstm"),
                 ["cell: saved 'gru', this estimator 'lstm'"]),
    "rnn-hidden_size": (SparseTokenRNN, dict(hidden_size=8), dict(hidden_size=16),
                        ["hidden_size: saved 8, this estimator 16"]),
    "ssm-d_state": (SparseTokenSSM, dict(d_state=4), dict(d_state=8),
                    ["d_state: saved 4, this estimator 8"]),
}


@pytest.mark.parametrize("safetensors", [False, True], ids=["torch", "safetensors"])
@pytest.mark.parametrize("case", list(MISMATCHES))
def test_weights_of_another_model_are_refused_naming_each_difference(case, safetensors,
                                                                     tmp_path):
    Estimator, saved_with, loaded_into, differences = MISMATCHES[case]
    defaults = (dict(d_model=8, max_epochs=1) if Estimator is not SparseTokenRNN
                else dict(hidden_size=8, max_epochs=1))
    source = Estimator(**{**defaults, **saved_with}, random_state=0).fit(X, Y)
    source.save_params(f_params=tmp_path / "w", use_safetensors=safetensors)
    target = Estimator(**{**defaults, **loaded_into}, random_state=1).fit(X, Y)
    before = {k: v.clone() for k, v in target.module_.state_dict().items()}
    prediction = target.predict(X_TEST)
    with pytest.raises(ValueError) as info:
        target.load_params(f_params=tmp_path / "w", use_safetensors=safetensors)
    message = str(info.value)
    for difference in differences:
        assert difference in message
    assert "Nothing was loaded" in message and "set_params(" in message
    after = target.module_.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert_array_equal(target.predict(X_TEST), prediction)
    # the fix it names works: set back, the weights load and predict as saved
    fix = {name: saved_with[name] for name in (line.split(":")[0] for line in differences)}
    target.set_params(**fix).initialize()
    target.load_params(f_params=tmp_path / "w", use_safetensors=safetensors)
    assert_array_equal(target.predict(X_TEST), source.predict(X_TEST))


@pytest.mark.parametrize("name", ["encoder-stochastic", "rnn-lstm", "ssm"])
def test_a_save_that_fails_midway_changes_no_file(name, tmp_path, monkeypatch):
    # the second file (the history) fails after the weights were staged: no
    # file changes, no temporary file is left (``_files.write_files``)
    import errno

    from sparse_token_estimators import _files

    Estimator, params = saved_model(name)
    old = Estimator(**params, random_state=0).fit(X, Y)
    new = Estimator(**params, random_state=1).fit(X, Y)
    files = dict(f_params=tmp_path / "w.pt", f_history=tmp_path / "h.json")
    old.save_params(**files)
    saved = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    write, calls = _files._write_fd, []

    def write_then_fail(fd, data):
        calls.append(len(data))
        if len(calls) == 2:
            write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        write(fd, data)

    monkeypatch.setattr(_files, "_write_fd", write_then_fail)
    with pytest.raises(OSError, match=r"Could not save .*the file system is full.*"
                                      r"the file there \(if any\) is unchanged"):
        new.save_params(**files)
    monkeypatch.undo()
    assert len(calls) == 2
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == saved
    loaded = Estimator(**params, token_dim=3).initialize()
    loaded.load_params(f_params=files["f_params"])
    assert_array_equal(loaded.predict(X_TEST), old.predict(X_TEST))


@pytest.mark.parametrize("name", ["encoder-stochastic", "rnn-lstm", "ssm"])
def test_predict_from_four_threads_is_the_sequential_prediction(name):
    # device "auto", two lengths interleaved: each thread gets exactly the
    # sequential prediction, and predict writes nothing to the estimator
    Estimator, params = saved_model(name)
    est = Estimator(**params, random_state=0).fit(X, Y)
    assert est.get_params()["device"] == "auto"
    params_before, attributes = est.get_params(deep=False), dict(vars(est))
    inputs = [X_TEST, X_LONG] * 8
    sequential = [est.predict(X_in) for X_in in inputs]
    with ThreadPoolExecutor(4) as pool:
        concurrent = list(pool.map(est.predict, inputs))
    for a, b in zip(sequential, concurrent):
        assert_array_equal(a, b)
    assert est.get_params(deep=False) == params_before and est.device == "auto"
    assert not est.module_.training
    assert vars(est).keys() == attributes.keys()
    assert all(vars(est)[key] is value for key, value in attributes.items())


@pytest.mark.parametrize("name", ["fcn", "encoder", "rnn", "ssm"])
def test_initializing_from_eight_threads_gives_each_seed_its_own_weights(name):
    # the sizes initialize needs (the FCN's input also fixes T)
    SIZES = dict(token_dim=3, **({"seq_len": 6} if name == "fcn" else {}))  # noqa: N806
    # torch's global generator is one per process: modules built at once from
    # threads (a threaded joblib or in-process Dask search) must not share draws
    seeds = list(range(48))
    built = [make_estimator(name, random_state=s, **SIZES).initialize() for s in seeds]
    expected = [{k: v.clone() for k, v in est.module_.state_dict().items()} for est in built]
    barrier = threading.Barrier(8)

    def initialize(seed):
        if seed < 8:
            barrier.wait()  # the first eight start together
        est = make_estimator(name, random_state=seed, **SIZES).initialize()
        return est.module_.state_dict()

    with ThreadPoolExecutor(8) as pool:
        for seed, got in zip(seeds, pool.map(initialize, seeds)):
            assert got.keys() == expected[seed].keys()
            for key in got:
                assert torch.equal(got[key], expected[seed][key]), (seed, key)


# -- searches -----------------------------------------------------------------------------


@pytest.mark.parametrize("Estimator, param, module_attr", [
    (SparseTokenEncoder, "d_model", lambda m: m.embed.out_features),
    (SparseTokenRNN, "hidden_size", lambda m: m.rnn.hidden_size),
    (SparseTokenSSM, "d_model", lambda m: m.embed.out_features),
])
def test_grid_search_over_widths_by_top_level_name(Estimator, param, module_attr):
    search = GridSearchCV(Estimator(max_epochs=2, batch_size=32, random_state=0),
                          {param: [4, 8]}, cv=2).fit(X, Y)
    assert [p[param] for p in search.cv_results_["params"]] == [4, 8]
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    best = search.best_estimator_
    assert module_attr(best.module_) == best.get_params()[param]
    assert isinstance(best.module_, (TransformerEncoder, RecurrentNet, SelectiveSSM))


# -- the encoder's prediction-time positions: every sequence its own -----------------------

#: (positional_encoding, layout): the random encodings, in the indicator layout and one in
#: the query layout
RANDOM_CASES = [("stochastic", "indicator"), ("randomized", "indicator"),
                ("randomized", "query")]


def _random_encoder(encoding, layout):
    X_fit, y_fit = make_sparse_selection(240, 6, 3, n_selected=2, random_state=0, layout=layout)
    X_in, _ = make_sparse_selection(150, 6, 3, n_selected=2, random_state=1, layout=layout)
    est = SparseTokenEncoder(d_model=8, max_epochs=1, random_state=0, device="cpu",
                             positional_encoding=encoding, max_seq_len=16, layout=layout)
    return est.fit(X_fit, y_fit), X_in


@pytest.mark.parametrize("encoding, layout", RANDOM_CASES)
def test_encoder_predictions_with_random_positions_do_not_depend_on_the_batch(encoding, layout):
    # per-sequence draws, made block by block (infer): a sequence's prediction is
    # the same at any batch size, at any place in its batch, and from any thread
    est, X_in = _random_encoder(encoding, layout)
    at_256 = est.predict(X_in)
    for batch_size in (1, 7, 256):
        assert_array_equal(est.set_params(batch_size=batch_size).predict(X_in), at_256)
    est.set_params(batch_size=256)
    assert_array_equal(est.predict(X_in[::-1]), at_256[::-1])
    assert_array_equal(est.predict(X_in[3:4]), at_256[3:4])
    inputs = [X_in, X_in[:40], X_in[17:]] * 4
    sequential = [est.predict(X_part) for X_part in inputs]
    assert_array_equal(sequential[1], at_256[:40])
    with ThreadPoolExecutor(4) as pool:
        concurrent = list(pool.map(est.predict, inputs))
    for a, b in zip(sequential, concurrent):
        assert_array_equal(a, b)
    assert not hasattr(est.module_, "_eval_noise")


@pytest.mark.parametrize("encoding, layout", RANDOM_CASES)
def test_encoder_sequences_get_their_own_positions_and_eval_seed_changes_them(encoding,
                                                                              layout):
    est, X_in = _random_encoder(encoding, layout)
    module = est.module_
    X_t = torch.as_tensor(np.concatenate([X_in[:2], X_in[:1]]))  # a, b, a
    tokens = X_t[:, :6]  # the token rows
    with torch.no_grad():
        P = module._positional_vectors(tokens, module.draw_noise(X_t))  # (3, T, C)
    assert P.shape == (3, 6, 8)
    assert not torch.equal(P[0], P[1]) and torch.equal(P[0], P[2])
    # the module's own forward on one sequence is the estimator's prediction of it
    prediction = est.predict(X_in)
    with torch.no_grad():
        alone = module(X_t[1:2], noise=module.draw_noise(X_t[1:2]))
    np.testing.assert_allclose(alone.numpy()[0], prediction[1], rtol=1e-5, atol=1e-6)
    # another eval_seed: other positions, other predictions
    reseeded = copy.deepcopy(est)
    reseeded.module_.eval_seed.fill_(int(module.eval_seed) + 1)
    changed = reseeded.predict(X_in)
    assert not np.allclose(changed, prediction)
    assert_array_equal(est.predict(X_in), prediction)  # the original is untouched
