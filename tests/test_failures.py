"""The estimators' last silent failures and raw messages (issue 30), one test each.

Silent failures now raise or warn, naming what happened and the fix, and a
failed call leaves the estimator as it was; messages name the argument or the
file and the fix. Also: the temporary files of killed writes are removed at
the next save or load, the encoder's attention weights, predictions that do
not depend on the batch size, and finishing a planned run after a resume.
"""

import json
import re
import warnings

import numpy as np
import pytest
import torch
from _tmpfs import fill, small_tmpfs
from _weights import assert_same_weights, weights
from numpy.testing import assert_array_equal
from sklearn.exceptions import FitFailedWarning
from skorch.callbacks import Checkpoint as SkorchCheckpoint

from sparse_token_estimators import (
    FlattenTokens,
    SparseSelectionStream,
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenSSM,
    SparseTokenTransformer,
    TrainingDivergedError,
    make_sparse_selection,
)
from sparse_token_estimators._files import remove_stale_temporaries
from sparse_token_estimators.callbacks import DivergenceCheck
from sparse_token_estimators.checkpoints import Checkpoint, LoadInitState
from sparse_token_estimators.exceptions import CheckpointWarning, NonFinitePredictionWarning
from sparse_token_estimators.model_selection import search_on_stream

X, Y = make_sparse_selection(200, 6, 2, 2, random_state=1)


def fcn(**params):
    return SparseTokenFCN(**{"hidden_width": 8, "max_epochs": 1, "random_state": 0,
                             "device": "cpu", **params})


@pytest.fixture
def fitted():
    return fcn().fit(X, Y)


# -- 1. a loss that explodes but stays finite --------------------------------------


def test_a_finite_explosion_of_the_loss_stops_the_fit_and_changes_nothing():
    est = SparseTokenRNN(hidden_size=8, max_epochs=3, optimizer=torch.optim.SGD, lr=1e3,
                         random_state=0, device="cpu")
    with pytest.raises(TrainingDivergedError,
                       match=r"the training loss exploded to .*more than max_loss_ratio=1000 "
                             r"times the loss the fit started from .* in epoch 2 \(lr=1000.0, "
                             r"optimizer=SGD\)\. Lower lr \(e\.g\. lr=100\)") as info:
        est.fit(X, Y)
    assert not est.initialized_  # as before the call
    assert len(info.value.history) == 2  # the losses up to the explosion, all finite
    assert all(np.isfinite(info.value.history[:, "batches", :, "train_loss"][1]))


def test_a_finite_explosion_leaves_a_fitted_estimator_as_it_was(fitted):
    before = weights(fitted)
    fitted.set_params(optimizer=torch.optim.SGD, lr=1e3, max_epochs=4, warm_start=True)
    with pytest.raises(TrainingDivergedError, match="exploded"):
        fitted.fit(X, Y)
    assert_same_weights(before, fitted)
    assert len(fitted.history_) == 1


def test_the_explosion_check_can_be_turned_off_and_checks_its_ratio():
    est = SparseTokenRNN(hidden_size=8, max_epochs=3, optimizer=torch.optim.SGD, lr=1e3,
                         random_state=0, device="cpu",
                         callbacks__divergence_check__max_loss_ratio=None)
    assert len(est.fit(X, Y).history_) == 3
    with pytest.raises(ValueError, match=r"max_loss_ratio must be a number > 1 or None; got "
                                         r"0\.5"):
        DivergenceCheck(max_loss_ratio=0.5).initialize()


def test_healthy_training_is_not_taken_for_an_explosion():
    # a fit that drives the loss far down, then continues: far below, never above
    est = fcn(hidden_width=32, max_epochs=20, lr=0.01).fit(X, Y)
    losses = est.history_[:, "train_loss"]
    assert losses[-1] < losses[0] / 2
    est.partial_fit(X, Y)


# -- 2. predict returning non-finite values ------------------------------------------


def test_predict_warns_of_non_finite_outputs_and_score_refuses_them(fitted):
    with torch.no_grad():
        fitted.module_.net[-1].weight.fill_(1e38)
    X_big = X.copy()
    X_big[..., :-1] = 3e38
    with pytest.warns(NonFinitePredictionWarning,
                      match=r"SparseTokenFCN\.predict\(X\) returned 400 non-finite value\(s\) "
                            r"\(inf or NaN\) of 400: .*Scale X as the training data was scaled"):
        y_pred = fitted.predict(X_big)
    assert not np.isfinite(y_pred).any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # score raises, and does not also warn
        with pytest.raises(ValueError, match=r"non-finite value.*No R\^2 can be computed"):
            fitted.score(X_big, Y)


# -- 3. skorch's own Checkpoint on a target it cannot write ---------------------------


def test_skorchs_checkpoint_that_cannot_save_warns_and_records_no_event(tmp_path):
    (tmp_path / "params.pt").mkdir()  # the weights' target is a directory: no save works
    est = fcn(max_epochs=2, callbacks=[SkorchCheckpoint(monitor=None, dirname=str(tmp_path))])
    with pytest.warns(CheckpointWarning,
                      match=r"Callback 'Checkpoint' \(skorch's Checkpoint\) could not save "
                            r"epoch \d: .*params\.pt.*'event_cp' is recorded False.*Use "
                            r"sparse_token_estimators\.checkpoints\.Checkpoint"):
        est.fit(X, Y)
    assert est.history_[:, "event_cp"] == [False, False]


def test_skorchs_checkpoint_on_a_full_disk_warns(tmp_path):
    with small_tmpfs(tmp_path / "disk") as disk:
        fill(disk)
        est = fcn(callbacks=[SkorchCheckpoint(monitor=None, dirname=str(disk))])
        with pytest.warns(CheckpointWarning, match="file system is full"):
            est.fit(X, Y)
        assert est.history_[:, "event_cp"] == [False]


def test_save_params_outside_a_fit_raises_without_a_warning(fitted, tmp_path):
    (tmp_path / "w.pt").mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(IsADirectoryError, match="it is a directory"):
            fitted.save_params(f_params=str(tmp_path / "w.pt"))


# -- 4. set_params routing checked against the optimizer set in the same call --------


def test_routed_values_are_checked_against_the_optimizer_set_in_the_same_call(fitted):
    fitted.set_params(optimizer=torch.optim.SGD, optimizer__momentum=0.9, warm_start=True)
    fitted.fit(X, Y)
    assert isinstance(fitted.optimizer_, torch.optim.SGD)
    assert fitted.optimizer_.param_groups[0]["momentum"] == 0.9
    with pytest.raises(ValueError, match=r"optimizer__betas=\(0\.9, 0\.99\) are refused by "
                                         r"optimizer=SGD: .*'betas'"):
        fitted.set_params(optimizer=torch.optim.SGD, optimizer__betas=(0.9, 0.99))


# -- 5. an unknown module__ argument ----------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda: SparseTokenEncoder(d_model=8, max_epochs=1, device="cpu"),
    lambda: fcn(),
])
def test_an_unknown_module_argument_is_refused_naming_it_and_what_the_module_takes(make):
    est = make().fit(X, Y)
    before = weights(est)
    est.set_params(module__dropout=0.1)
    with pytest.raises(TypeError, match=r"module__dropout=0\.1: \w+ takes no argument "
                                        r"'dropout'\. The estimator passes .*token_dim.* itself"
                                        r".*Construct the estimator without module__dropout"):
        est.fit(X, Y)
    assert_same_weights(before, est)
    with pytest.raises(TypeError, match="module__dropout"):
        make().set_params(module__dropout=0.1).initialize()


# -- 6. damaged or edited weights files ---------------------------------------------------


def _edit_safetensors(path, edit):
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    meta = json.loads(header["__metadata__"]["sparse_token_estimators"])
    text = edit(meta)
    header["__metadata__"]["sparse_token_estimators"] = (
        text if isinstance(text, str) else json.dumps(meta))
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + data[8 + size:])


def _truncate(path):
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    path.write_bytes(data[:8 + size + 10])


def _set(key, value):
    def edit(meta):
        meta[key] = value
    return edit


def _widen(meta):
    meta["params"]["hidden_width"] = 16


@pytest.mark.parametrize("damage, width, message", [
    (_truncate, 8, r"could not be read as a safetensors file \(SafetensorError: .*\): it is "
                   r"damaged or truncated"),
    (lambda p: _edit_safetensors(p, lambda meta: "{not json"), 8,
     r"has metadata under 'sparse_token_estimators' that is not JSON"),
    (lambda p: _edit_safetensors(p, _set("format", "1")), 8,
     r"whose \"format\" is '1', not the integer save_params writes"),
    (lambda p: _edit_safetensors(p, _widen), 16,
     r"its metadata records the parameters of this estimator, but its weights do not fit.*"
     r"The metadata was edited or the weights were replaced"),
])
def test_a_damaged_or_edited_weights_file_is_named_and_nothing_changes(
        fitted, tmp_path, damage, width, message):
    path = tmp_path / "w.safetensors"
    fitted.save_params(f_params=str(path), use_safetensors=True)
    damage(path)
    new = fcn(hidden_width=width, seq_len=6, token_dim=2).initialize()
    before = weights(new)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*" + message + ".*Nothing "
                                         "was loaded; the estimator is unchanged"):
        new.load_params(f_params=str(path), use_safetensors=True)
    assert_same_weights(before, new)


# -- 7. search_on_stream: an empty grid, a failing candidate -------------------------------


STREAM = SparseSelectionStream(6, 2, 2, n_samples=64, random_state=0, device="cpu")


def test_an_empty_grid_is_refused():
    with pytest.raises(ValueError, match=r"param_grid=\[\] has no candidate to fit"):
        search_on_stream(fcn(), [], STREAM, X, Y)


def test_a_failing_candidate_scores_error_score_and_the_others_are_kept():
    with pytest.warns(FitFailedWarning, match=r"1 of 3 candidates failed to fit and were "
                                              r"scored error_score=nan \(\{'lr': -1\.0\}: "):
        result = search_on_stream(fcn(), {"lr": [0.01, -1.0, 0.02]}, STREAM, X, Y)
    scores = result.cv_results_["mean_test_score"]
    assert np.isnan(scores[1]) and np.isfinite(scores[[0, 2]]).all()
    assert result.cv_results_["rank_test_score"][1] == 3
    assert result.best_params_["lr"] != -1.0
    with pytest.warns(FitFailedWarning):
        zero = search_on_stream(fcn(), {"lr": [0.01, -1.0]}, STREAM, X, Y, error_score=0.0)
    assert zero.cv_results_["mean_test_score"][1] == 0.0


def test_error_score_raise_and_every_candidate_failing_raise():
    with pytest.raises(ValueError, match="The 'lr' parameter"):
        search_on_stream(fcn(), {"lr": [0.01, -1.0]}, STREAM, X, Y, error_score="raise")
    with pytest.raises(ValueError, match="All 2 candidates of search_on_stream failed"):
        search_on_stream(fcn(), {"lr": [-2.0, -1.0]}, STREAM, X, Y)
    with pytest.raises(ValueError, match="error_score must be 'raise' or a number"):
        search_on_stream(fcn(), {"lr": [0.01]}, STREAM, X, Y, error_score="nan")


# -- 8. sizes beyond memory --------------------------------------------------------------


def test_a_length_beyond_memory_is_refused_before_anything_is_allocated():
    with pytest.raises(MemoryError, match=r"make_sparse_selection\(n_samples=10, "
                                          r"seq_len=1099511627776, token_dim=2\) would need "
                                          r"130 TiB, more than this machine's .* Lower seq_len"):
        make_sparse_selection(10, 2**40, 2, 2)
    with pytest.raises(MemoryError, match=r"One sequence of seq_len=1099511627776 and "
                                          r"token_dim=2 would need 28 TiB.*Lower seq_len"):
        SparseSelectionStream(2**40, 2, 2, n_samples=10, device="cpu")
    stream = SparseSelectionStream(2**20, 2, 2, n_samples=2**30, device="cpu")
    with pytest.raises(MemoryError, match=r"A batch of 1073741824 sequences of "
                                          r"seq_len=1048576.*Lower the estimator's batch_size"):
        next(stream.batches(2**30))


# -- 9. a flattened table, and the way back ----------------------------------------------


def test_a_flattened_table_is_told_its_exact_reshape_and_the_way_back():
    X10, _ = make_sparse_selection(500, 10, 4, 2, random_state=0)
    flat = X10.reshape(500, 50)
    with pytest.raises(ValueError, match=re.escape(
            "got an array of shape (500, 50). A flattened array of shape (n_samples, "
            "seq_len * (token_dim + 1)), one sequence per row")) as info:
        SparseTokenFCN(seq_len=10, token_dim=4).fit(flat, np.zeros((500, 4)))
    assert "needs X.reshape(500, 10, 5)" in str(info.value)
    assert "inverse_transform" in str(info.value) and "np.newaxis" not in str(info.value)
    flatten = FlattenTokens().fit(X10)
    assert_array_equal(flatten.inverse_transform(flatten.transform(X10)), X10)
    with pytest.raises(ValueError, match=r"inverse_transform takes a 2-D table of shape "
                                         r"\(n_samples, 50\).*got shape \(500, 49\)"):
        flatten.inverse_transform(flat[:, :49])


def test_a_single_sequence_is_told_to_add_a_leading_axis(fitted):
    with pytest.raises(ValueError, match=r"It looks like a single sequence of shape \(seq_len, "
                                         r"token_dim \+ 1\) needs a leading axis: "
                                         r"X\[np\.newaxis\]"):
        fitted.predict(X[0])


# -- 10. sequences of different lengths --------------------------------------------------


def test_sequences_of_different_lengths_are_told_to_predict_each_length_separately(fitted):
    with pytest.raises(ValueError, match=r"a list of 2 sequences of different lengths "
                                         r"\(4, 6\)\. Predict each length separately"):
        fitted.predict([X[0], X[1][:4]])


# -- 11. load_params returns the estimator ------------------------------------------------


def test_initialize_then_load_params_chains(fitted, tmp_path):
    fitted.save_params(f_params=str(tmp_path / "w.pt"))
    new = fcn(seq_len=6, token_dim=2).initialize().load_params(f_params=str(tmp_path / "w.pt"))
    assert isinstance(new, SparseTokenFCN)
    assert_array_equal(new.predict(X), fitted.predict(X))
    assert new.load_params() is new  # nothing to load


# -- the temporary files of killed writes ----------------------------------------------------


LEFTOVERS = [".params.pt.1a2b3c4d.tmp", ".criterion.pt.staged.deadbeef.tmp"]
KEPT = ["params.pt.staged", ".notes.tmp", "mine.0123abcd.tmp", ".x.pt.12345.tmp"]


def _litter(directory):
    for name in LEFTOVERS + KEPT:
        (directory / name).write_bytes(b"partial")


def _names(directory):
    return sorted(p.name for p in directory.iterdir())


def test_a_save_removes_the_temporary_files_of_killed_writes_and_nothing_else(fitted, tmp_path):
    _litter(tmp_path)
    fitted.save_params(f_params=str(tmp_path / "params.pt"))
    assert _names(tmp_path) == sorted(KEPT + ["params.pt"])


def test_a_load_removes_them_too(fitted, tmp_path):
    fitted.save_params(f_params=str(tmp_path / "params.pt"))
    _litter(tmp_path)
    fcn(seq_len=6, token_dim=2).initialize().load_params(f_params=str(tmp_path / "params.pt"))
    assert _names(tmp_path) == sorted(KEPT + ["params.pt"])


def test_a_checkpoint_save_and_load_remove_them(tmp_path):
    cp = Checkpoint(monitor=None, dirname=str(tmp_path))
    _litter(tmp_path)
    fcn(callbacks=[cp]).fit(X, Y)
    assert not set(LEFTOVERS) & set(_names(tmp_path))
    _litter(tmp_path)
    fcn(seq_len=6, token_dim=2).load_params(checkpoint=cp)
    assert not set(LEFTOVERS) & set(_names(tmp_path))
    assert set(KEPT) <= set(_names(tmp_path))


def test_a_temporary_file_a_live_write_holds_is_left_alone(tmp_path):
    import fcntl

    live = tmp_path / LEFTOVERS[0]
    live.write_bytes(b"being written")
    with open(live, "rb") as writer:
        fcntl.flock(writer, fcntl.LOCK_EX)  # what a write in progress holds
        assert remove_stale_temporaries(str(tmp_path)) == []
        assert live.exists()
    assert remove_stale_temporaries(str(tmp_path)) == [LEFTOVERS[0]]


# -- attention weights of the encoder; none for the RNN and the FCN -------------------------


def test_the_encoders_attention_is_its_pooling_querys_weights_over_the_positions():
    X10, y10 = make_sparse_selection(500, 10, 4, 2, random_state=0)
    est = SparseTokenEncoder(d_model=16, max_epochs=3, random_state=0, device="cpu")
    est.fit(X10, y10)
    attention = est.predict_attention(X10[:70])
    assert attention.shape == (70, 10) and attention.dtype == np.float32
    np.testing.assert_allclose(attention.sum(axis=1), 1, atol=1e-5)
    # the weights the pooling averages the values with
    module = est.module_
    with torch.no_grad():
        x = module._encode(torch.as_tensor(X10[:70]), None)  # (B, T, C)
        pooled = module.pool.c_proj.weight.new_zeros(0)
        per_head = module.pool.weights(x)  # (B, nh, T)
        _, v = module.pool.c_kv(x).split(16, dim=2)
        v = v.view(70, 10, 2, 8).transpose(1, 2)  # (B, nh, T, hs)
        pooled = module.pool.c_proj((per_head.unsqueeze(2) @ v).reshape(70, 16))
        np.testing.assert_allclose(pooled, module.pool(x), atol=1e-5)
    np.testing.assert_allclose(attention, per_head.mean(1).numpy(), atol=1e-6)
    assert_array_equal(est.set_params(batch_size=1).predict_attention(X10[:70]), attention)


@pytest.mark.parametrize("make, why", [
    (SparseTokenRNN, "a recurrent net has no attention weights"),
    (SparseTokenSSM, "a state-space model has no attention weights"),
    (SparseTokenFCN, "a fully-connected net has no attention weights"),
])
def test_the_rnn_the_ssm_and_the_fcn_have_no_predict_attention_and_say_why(make, why):
    assert not hasattr(make(), "predict_attention")
    with pytest.raises(AttributeError, match=why):
        make().predict_attention  # noqa: B018


# -- predictions that do not depend on the batch size -----------------------------------------


@pytest.mark.parametrize("make", [
    lambda: SparseTokenEncoder(d_model=16, positional_encoding="stochastic"),
    lambda: SparseTokenRNN(cell="lstm", hidden_size=16, n_layers=2),
    lambda: SparseTokenSSM(d_model=16, d_state=4, n_layers=2),
    lambda: SparseTokenFCN(hidden_width=32),
    lambda: SparseTokenTransformer(pe_dim=16),
])
def test_predictions_are_bit_identical_across_batch_sizes_on_the_cpu(make):
    est = make().set_params(max_epochs=2, random_state=0, device="cpu").fit(X, Y)
    X_test, _ = make_sparse_selection(150, 6, 2, 2, random_state=2)
    one = est.set_params(batch_size=1).predict(X_test)
    for batch_size in (7, 64, 100, -1):
        assert_array_equal(est.set_params(batch_size=batch_size).predict(X_test), one)


# -- finishing a planned run after a resume ------------------------------------------------


def test_load_init_state_with_max_epochs_finishes_the_planned_run(tmp_path):
    cp = Checkpoint(monitor=None, dirname=str(tmp_path))

    def run(max_epochs):
        return fcn(max_epochs=max_epochs, batch_size=50,
                   callbacks=[cp, LoadInitState(cp, max_epochs=5)]).fit(X, Y)

    assert len(run(2).history_) == 2  # "killed" after 2 of the 5 planned epochs
    resumed = run(5)
    assert len(resumed.history_) == 5 and cp.saved_epoch() == 5
    assert [len(row["batches"]) for row in resumed.history_] == [4] * 5
    assert int(resumed.optimizer_.state_dict()["state"][0]["step"]) == 5 * 4
    again = run(5)  # the plan is done: nothing more is trained
    assert len(again.history_) == 5
    assert_same_weights(again, resumed)
    with pytest.raises(ValueError, match="LoadInitState's max_epochs must be None or an int"):
        fcn(callbacks=[LoadInitState(cp, max_epochs=0)]).fit(X, Y)
