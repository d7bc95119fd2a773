"""Training faults: divergence, interruption, pickling, continued training."""

import copy
import pickle
import warnings

import joblib
import numpy as np
import pytest
import torch
from _weights import assert_same_weights, weights
from numpy.testing import assert_array_equal
from sklearn.exceptions import FitFailedWarning, NotFittedError
from sklearn.model_selection import GridSearchCV
from skorch.callbacks import Callback

from sparse_token_estimators import (
    SparseSelectionStream,
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenSSM,
    SparseTokenTransformer,
    TrainingDivergedError,
    make_sparse_selection,
)

X, Y = make_sparse_selection(48, 5, 2, n_selected=2, random_state=0)
MAKERS = {
    "transformer": lambda **kw: SparseTokenTransformer(
        **{"pe_dim": 8, "n_pe_draws": 2, "max_epochs": 2, "batch_size": 16,
           "random_state": 0, **kw}),
    "fcn": lambda **kw: SparseTokenFCN(
        **{"hidden_width": 16, "max_epochs": 2, "batch_size": 16, "random_state": 0, **kw}),
    # the architectures beyond the paper's two (issue 23); the stochastic
    # encoding so that the training draws' generator is part of the state
    "encoder": lambda **kw: SparseTokenEncoder(
        **{"d_model": 8, "positional_encoding": "stochastic", "max_epochs": 2,
           "batch_size": 16, "random_state": 0, **kw}),
    "rnn": lambda **kw: SparseTokenRNN(
        **{"cell": "lstm", "hidden_size": 8, "max_epochs": 2, "batch_size": 16,
           "random_state": 0, **kw}),
    "ssm": lambda **kw: SparseTokenSSM(
        **{"d_model": 8, "d_state": 4, "max_epochs": 2, "batch_size": 16,
           "random_state": 0, **kw}),
}


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)




# -- divergence ---------------------------------------------------------------

# An absurd learning rate: the first step sends the weights to ~1e29 and the
# next loss overflows. The transformer without its output map cannot diverge
# (its prediction is an average of tokens), so it is tested with the map.
DIVERGING = {
    "fcn": lambda: MAKERS["fcn"](lr=1e30, optimizer=torch.optim.SGD, max_epochs=3),
    "transformer-output_map": lambda: MAKERS["transformer"](
        lr=1e30, optimizer=torch.optim.SGD, output_map=True, max_epochs=3),
}


@pytest.mark.parametrize("name", list(DIVERGING))
def test_divergence_stops_training_with_a_clear_error(name):
    est = DIVERGING[name]()
    with pytest.raises(TrainingDivergedError) as info:
        est.fit(X, Y)
    message = str(info.value)
    assert "Training diverged: the training loss became" in message
    assert "lr=1e+30, optimizer=SGD" in message  # what happened, with what
    assert "Lower lr (e.g. lr=1e+29)" in message  # what to change
    # No model that predicts NaN is left behind: the estimator is as before
    # the call, unfitted ...
    assert not est.initialized_
    with pytest.raises(NotFittedError):
        est.predict(X)
    # ... stopped at once (epoch 1 of 3), the diverged history on the error ...
    assert len(info.value.history) == 1
    assert not np.isfinite(info.value.history[-1, "batches", -1, "train_loss"])
    # ... and usable: with a sane lr it fits again.
    assert est.get_params()["lr"] == 1e30
    est.set_params(lr=0.01).fit(X, Y)
    assert np.isfinite(est.predict(X)).all()


class PoisonLastStep(Callback):
    """Breaks the weights after the last step, where no loss would show it."""

    def on_batch_end(self, net, training=False, **kwargs):
        last = len(net.history) == net.max_epochs and len(net.history[-1, "batches"]) == 3
        if training and last:
            with torch.no_grad():
                next(net.module_.parameters()).fill_(float("inf"))


@pytest.mark.parametrize("name", list(MAKERS))
def test_weights_broken_by_the_last_step_are_caught(name):
    est = MAKERS[name](callbacks=[("poison", PoisonLastStep())])
    with pytest.raises(TrainingDivergedError,
                       match="the weights became NaN or infinite in epoch 2"):
        est.fit(X, Y)
    with pytest.raises(NotFittedError):
        est.predict(X)


@pytest.mark.parametrize("warm_start", [True, False])
def test_divergence_of_a_fitted_model_leaves_it_as_it_was(warm_start):
    est = MAKERS["fcn"](warm_start=warm_start, optimizer=torch.optim.SGD).fit(X, Y)
    before, n_epochs = est.predict(X), len(est.history_)
    weights = {k: v.clone() for k, v in est.module_.state_dict().items()}
    est.set_params(lr=1e30)
    with pytest.raises(TrainingDivergedError) as info:
        est.fit(X, Y)
    assert np.array_equal(est.predict(X), before)  # bit for bit
    assert all(torch.equal(weights[k], v) for k, v in est.module_.state_dict().items())
    assert len(est.history_) == n_epochs
    assert not np.isfinite(info.value.history[-1, "batches", -1, "train_loss"])
    est.set_params(lr=0.01).partial_fit(X, Y)
    assert np.isfinite(est.predict(X)).all()


def test_search_survives_a_diverging_candidate():
    # A long search must not die on one bad candidate: scikit-learn records
    # error_score for it and refits the best one.
    search = GridSearchCV(
        MAKERS["fcn"](optimizer=torch.optim.SGD),
        {"lr": [1e30, 0.01]}, cv=2, error_score=np.nan,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search.fit(X, Y)
    assert any(issubclass(w.category, FitFailedWarning) for w in caught)
    assert np.isnan(search.cv_results_["mean_test_score"][0])
    assert search.best_params_ == {"lr": 0.01}
    assert np.isfinite(search.predict(X)).all()


# -- interruption ---------------------------------------------------------------


class Interrupt(Callback):
    """Raises KeyboardInterrupt (Ctrl-C) after ``epochs`` epochs and ``batches`` batches."""

    def __init__(self, epochs, batches=None):
        self.epochs = epochs
        self.batches = batches

    def on_batch_end(self, net, training=False, **kwargs):
        if self.batches is not None and len(net.history) == self.epochs + 1 \
                and len(net.history[-1, "batches"]) == self.batches:
            raise KeyboardInterrupt

    def on_epoch_end(self, net, **kwargs):
        if self.batches is None and len(net.history) == self.epochs:
            raise KeyboardInterrupt


@pytest.mark.parametrize("name", list(MAKERS))
def test_interrupt_between_epochs_keeps_the_trained_epochs(name):
    est = MAKERS[name](max_epochs=5, callbacks=[("stop", Interrupt(epochs=2))])
    assert est.fit(X, Y) is est  # skorch catches the KeyboardInterrupt
    assert len(est.history_) == 2
    # exactly the model of a 2-epoch fit: usable as is
    two = MAKERS[name](max_epochs=2).fit(X, Y)
    assert_same_weights(est, two)
    assert_array_equal(est.predict(X), two.predict(X))


@pytest.mark.parametrize("name", list(MAKERS))
def test_interrupt_mid_epoch_leaves_a_usable_estimator(name):
    est = MAKERS[name](max_epochs=3, callbacks=[("stop", Interrupt(epochs=1, batches=1))])
    est.fit(X, Y)
    assert len(est.history_) == 2 and len(est.history_[-1, "batches"]) == 1
    assert np.isfinite(est.predict(X)).all()
    est.set_params(callbacks=[]).partial_fit(X, Y)  # continue where it stopped
    assert len(est.history_) == 5
    assert np.isfinite(est.predict(X)).all()


# -- pickling (the CPU half; tests/test_gpu.py has the GPU half) ----------------


PICKLED = {**MAKERS, "fixed": lambda: MAKERS["transformer"](positional_encoding="fixed",
                                                             max_seq_len=8)}


@pytest.mark.parametrize("name", list(PICKLED))
@pytest.mark.parametrize("dump, load", [(pickle.dumps, pickle.loads),
                                        (None, None)], ids=["pickle", "joblib"])
def test_fitted_model_round_trips_with_identical_predictions(name, dump, load, tmp_path):
    est = PICKLED[name]().fit(X, Y)
    if dump is None:
        joblib.dump(est, tmp_path / "model.joblib")
        loaded = joblib.load(tmp_path / "model.joblib")
    else:
        loaded = load(dump(est))
    assert loaded.get_params()["device"] == "auto"
    assert_same_weights(loaded, est)
    assert_array_equal(loaded.predict(X), est.predict(X))
    if hasattr(est, "predict_attention"):
        assert_array_equal(loaded.predict_attention(X), est.predict_attention(X))
    # the training generator travels too: both continue the same way
    assert_array_equal(loaded.partial_fit(X, Y).predict(X), est.partial_fit(X, Y).predict(X))


def test_unfitted_model_pickles():
    loaded = pickle.loads(pickle.dumps(MAKERS["transformer"]()))
    assert not loaded.initialized_
    assert_array_equal(loaded.fit(X, Y).predict(X), MAKERS["transformer"]().fit(X, Y).predict(X))


# -- continued training -------------------------------------------------------


@pytest.mark.parametrize("name", list(MAKERS))
def test_warm_start_continues_instead_of_restarting(name):
    warm = MAKERS[name](max_epochs=1, warm_start=True)
    module = warm.fit(X, Y).module_
    warm.fit(X, Y)
    assert warm.module_ is module and len(warm.history_) == 2
    # two warm fits of one epoch are one fit of two epochs, step for step
    assert_same_weights(warm, MAKERS[name](max_epochs=2).fit(X, Y))
    # without warm_start, fit restarts: two fits are one fit
    cold = MAKERS[name](max_epochs=1)
    cold.fit(X, Y)
    cold.fit(X, Y)
    assert len(cold.history_) == 1
    assert_same_weights(cold, MAKERS[name](max_epochs=1).fit(X, Y))


@pytest.mark.parametrize("name", list(MAKERS))
def test_partial_fit_continues_and_the_loss_keeps_falling(name):
    est = MAKERS[name](max_epochs=1)
    losses = [est.partial_fit(X, Y).history_[-1, "train_loss"] for _ in range(4)]
    assert len(est.history_) == 4
    assert losses[-1] < losses[0]
    assert_same_weights(est, MAKERS[name](max_epochs=4).fit(X, Y))


def test_continuing_with_another_token_dim_is_refused_and_harmless():
    est = MAKERS["transformer"](warm_start=True).fit(X, Y)
    before, n_epochs = weights(est), len(est.history_)
    X3, y3 = make_sparse_selection(16, 5, 3, 2, random_state=1)
    for call in (est.fit, est.partial_fit):
        with pytest.raises(ValueError, match="fitted with token_dim 2"):
            call(X3, y3)
    assert len(est.history_) == n_epochs
    assert all(torch.equal(before[k], v) for k, v in weights(est).items())


def test_transformer_continues_on_longer_sequences():
    # The stochastic encoding takes any length, also when training continues.
    est = MAKERS["transformer"]().fit(X, Y)
    X_long, y_long = make_sparse_selection(48, 10, 2, 2, random_state=1)
    est.partial_fit(X_long, y_long)
    assert len(est.history_) == 4 and est.seq_len_ == 5
    assert np.isfinite(est.predict(X_long)).all()


# -- a failing call changes nothing (issue 19, point 1) -------------------------


def state(est):
    """What a failed call must leave as it was: weights, optimizer state,
    history, fitted state, predictions."""
    fitted = "module_" in vars(est)
    return {
        "initialized": est.initialized_,
        "weights": weights(est) if fitted else None,
        "optimizer": copy.deepcopy(est.optimizer_.state_dict()) if fitted else None,
        "history": copy.deepcopy(list(est.history_ or [])),
        "params": est.get_params(deep=False),
        "predictions": est.predict(X) if fitted else None,
        "rng": est.torch_rng_.get_state() if fitted else None,
    }


def assert_same_state(before, after):
    assert before["initialized"] == after["initialized"]
    assert before["history"] == after["history"]
    assert before["params"].keys() == after["params"].keys()
    for key, value in before["params"].items():
        assert value is after["params"][key] or value == after["params"][key], key
    if before["weights"] is None:
        assert after["weights"] is None
        return
    assert_same_weights(before["weights"], after["weights"])
    assert_same_weights(flatten(before["optimizer"]), flatten(after["optimizer"]))
    assert_array_equal(before["predictions"], after["predictions"])  # bit for bit
    assert torch.equal(before["rng"], after["rng"])


def flatten(optimizer_state):
    return {f"{i}.{k}": v for i, s in optimizer_state["state"].items() for k, v in s.items()}


class RaiseInFirstBatch(Callback):
    def on_batch_end(self, net, training=False, **kwargs):
        raise RuntimeError("a callback's bug")


class InterruptFirstBatch(Callback):
    """Ctrl-C as the first batch begins: before any optimisation step."""

    def on_batch_begin(self, net, training=False, **kwargs):
        raise KeyboardInterrupt


class FailingInitialize(Callback):
    def initialize(self):
        raise RuntimeError("cannot initialize")


def bad_stream():
    # refused at construction (tests/test_stream.py); here one changed after it
    stream = SparseSelectionStream(5, 2, 2, n_samples=32, random_state=0)
    stream.random_state = -1
    return stream


# (what to set first, the call, the exception, its message)
FAILING_CALLS = {
    "sample_weight": ({}, lambda est: est.fit(X, Y, sample_weight=np.ones(len(X))),
                      TypeError, r"does not support sample_weight.*np\.repeat"),
    "unknown-fit-keyword": ({}, lambda est: est.fit(X, Y, dropout=0.5),
                            TypeError, r"dropout.*forward does not take"),
    "callback-raises": ({"callbacks": [RaiseInFirstBatch()]}, lambda est: est.fit(X, Y),
                        RuntimeError, "a callback's bug"),
    "callback-raises-partial_fit": ({"callbacks": [RaiseInFirstBatch()]},
                                    lambda est: est.partial_fit(X, Y),
                                    RuntimeError, "a callback's bug"),
    "ctrl-c-before-first-step": ({"callbacks": [InterruptFirstBatch()]},
                                 lambda est: est.fit(X, Y),
                                 KeyboardInterrupt, "before its first optimisation step"),
    "ctrl-c-partial_fit": ({"callbacks": [InterruptFirstBatch()]},
                           lambda est: est.partial_fit(X, Y),
                           KeyboardInterrupt, "before its first optimisation step"),
    "stream-random_state": ({}, lambda est: est.fit(bad_stream()),
                            ValueError, r"stream's random_state=-1"),
    "initialize-fails": ({"callbacks": [FailingInitialize()]}, lambda est: est.initialize(),
                         RuntimeError, "cannot initialize"),
    "iterator-keyword": ({"iterator_train__bogus": 1}, lambda est: est.fit(X, Y),
                         ValueError, r"iterator_train__bogus=1 are refused by "
                                     r"iterator_train=TensorBatches.*argument .bogus."),
}


@pytest.mark.parametrize("name", list(MAKERS))
@pytest.mark.parametrize("case", list(FAILING_CALLS))
def test_a_failing_call_leaves_a_fitted_estimator_as_it_was(name, case):
    setting, call, error, pattern = FAILING_CALLS[case]
    est = MAKERS[name]().fit(X, Y)
    est.set_params(**setting)
    before = state(est)
    with pytest.raises(error, match=pattern):
        call(est)
    assert_same_state(before, state(est))
    # and it still trains: the failure left no half-state behind
    est.set_params(**{key: [] if key == "callbacks" else None for key in setting}
                   if "callbacks" in setting else {})
    if "iterator_train__bogus" in setting:
        del est.iterator_train__bogus
    assert np.isfinite(est.partial_fit(X, Y).predict(X)).all()


@pytest.mark.parametrize("name", list(MAKERS))
@pytest.mark.parametrize("case", ["callback-raises", "ctrl-c-before-first-step",
                                  "sample_weight", "stream-random_state"])
def test_a_failing_fit_leaves_an_unfitted_estimator_unfitted(name, case):
    setting, call, error, pattern = FAILING_CALLS[case]
    est = MAKERS[name](**setting)
    with pytest.raises(error, match=pattern):
        call(est)
    assert not est.initialized_ and "module_" not in vars(est) and est.history_ is None
    with pytest.raises(NotFittedError):
        est.predict(X)


@pytest.mark.parametrize("name", list(MAKERS))
def test_bad_routed_values_are_refused_before_anything_is_built(name):
    cases = {
        "criterion__reduction": ("bogus", r"criterion__reduction='bogus' is refused by "
                                          r"criterion=MSELoss.*not a valid value"),
        "optimizer__momentum": (-1, r"optimizer__momentum=-1 is refused by optimizer=SGD"),
    }
    for param, (value, pattern) in cases.items():
        est = MAKERS[name](optimizer=torch.optim.SGD, **{param: value})
        for method in (est.fit, est.partial_fit):
            with pytest.raises(ValueError, match=pattern):
                method(X, Y)
            assert "module_" not in vars(est)
        # on a fitted estimator set_params refuses them and changes nothing
        fitted = MAKERS[name](optimizer=torch.optim.SGD).fit(X, Y)
        before = state(fitted)
        with pytest.raises(ValueError, match=pattern):
            fitted.set_params(**{param: value})
        assert_same_state(before, state(fitted))
        assert fitted.optimizer_.param_groups[0]["momentum"] == 0
