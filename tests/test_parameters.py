"""Parameters of a fitted estimator: sizes, and what set_params does to the fit.

Every parameter is in exactly one group (``estimators._rules.GROUPS``), pinned here:
structural ones make a fitted estimator read as unfitted until it is refit
(or the value is set back), applied ones reach the fitted module at its next
use, settings keep the fit. None of them zeroes the weights.
"""

import copy
import functools

import numpy as np
import pytest
import torch
from _weights import assert_same_weights, weights
from conftest import make_estimator
from numpy.testing import assert_array_equal
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted
from skorch.callbacks import Callback
from skorch.dataset import Dataset, ValidSplit
from torch.utils.data import DataLoader

from sparse_token_estimators import (
    SparseTokenFCN,
    SparseTokenTransformer,
    make_sparse_selection,
)
from sparse_token_estimators import _device as device_module
from sparse_token_estimators.estimators import _rules
from sparse_token_estimators.modules import FullyConnectedNet, SparseTokenAttention

X, Y = make_sparse_selection(96, 6, 3, n_selected=2, random_state=0)
X_TEST, Y_TEST = make_sparse_selection(40, 6, 3, n_selected=2, random_state=1)

#: the catalogue's paper estimators (tests/conftest.py), with this file's training settings
MAKERS = {name: functools.partial(make_estimator, name, max_epochs=2, batch_size=32)
          for name in ("transformer", "fcn")}


@pytest.fixture(scope="module")
def fitted_models():
    torch.set_num_threads(1)
    return {name: make().fit(X, Y) for name, make in MAKERS.items()}


@pytest.fixture
def fitted(request, fitted_models):
    """A private copy of a fitted estimator (``fitted[name]``)."""
    return {name: copy.deepcopy(est) for name, est in fitted_models.items()}




# -- the groups ---------------------------------------------------------------------

# The pin: every constructor parameter of both estimators, by what a change does.
GROUPS = {
    "structural": {"module", "token_dim", "seq_len", "layout", "n_selected", "pe_dim",
                   "positional_encoding",
                   "max_seq_len", "output_map", "hidden_width", "n_hidden_layers"},
    "applied": {"n_pe_draws", "device", "compile"},
    "setting": {"criterion", "optimizer", "lr", "max_epochs", "batch_size",
                "iterator_train", "iterator_valid", "iterator_train__shuffle", "dataset",
                "train_split", "callbacks", "predict_nonlinearity", "warm_start", "verbose",
                "use_caching", "torch_load_kwargs", "random_state", "lr_schedule"},
}


@pytest.mark.parametrize("name", list(MAKERS))
def test_every_parameter_is_in_exactly_one_group(name, fitted_models):
    groups = [g for members in GROUPS.values() for g in members]
    assert len(groups) == len(set(groups))  # the pin itself has no overlap
    expected = {param: group for group, members in GROUPS.items() for param in members}
    unfitted = MAKERS[name]()
    fitted = fitted_models[name]
    routed = {"module__pe_dim": 4, "compile__backend": "eager", "criterion__reduction": "sum",
              "optimizer__momentum": 0.9, "iterator_valid__drop_last": False}
    for est in (unfitted, fitted, MAKERS[name](**routed)):
        for param in est.get_params(deep=True):
            if param.startswith("_"):
                continue  # skorch's own bookkeeping, which its get_params lists
            group = _rules.group_of(param)  # KeyError: a parameter no rule covers
            if param in expected:
                assert group == expected[param], param
            else:  # a routed prefix__name parameter goes with its prefix
                assert "__" in param, f"{param} is not pinned in GROUPS"
                prefix = param.split("__", 1)[0]
                assert group == expected.get(prefix, _rules.PREFIX_GROUPS[prefix]), param
        plain = {p for p in est.get_params(deep=False) if not p.startswith("_")} - set(routed)
        assert plain <= set(expected), plain - set(expected)
    with pytest.raises(KeyError):
        _rules.group_of("a_new_parameter")


# -- structural parameters -------------------------------------------------------------


class OtherAttention(SparseTokenAttention):
    pass


class OtherNet(FullyConnectedNet):
    pass


STRUCTURAL = {  # a different valid value for each structural parameter
    "transformer": {"module": OtherAttention, "token_dim": 5, "pe_dim": 4,
                    "positional_encoding": "fixed", "max_seq_len": 64, "output_map": True,
                    "module__pe_dim": 4},
    "fcn": {"module": OtherNet, "token_dim": 5, "seq_len": 7, "hidden_width": 8,
            "n_hidden_layers": 2, "module__hidden_width": 8},
}


@pytest.mark.parametrize("name, param", [(n, p) for n, ps in STRUCTURAL.items() for p in ps])
def test_a_structural_change_unfits_until_set_back(name, param, fitted):
    est = fitted[name]
    module, before, W = est.module_, est.predict(X_TEST), weights(est)
    n_epochs = len(est.history_)
    old = est.get_params()[param] if param in est.get_params() else None
    new = STRUCTURAL[name][param]
    est.set_params(**{param: new})
    # nothing was rebuilt or zeroed, but the estimator no longer reads as fitted
    assert est.module_ is module
    assert_same_weights(weights(est), W)
    assert not est.__sklearn_is_fitted__()
    with pytest.raises(NotFittedError):
        check_is_fitted(est)
    for call in (lambda: est.predict(X_TEST), lambda: est.score(X_TEST, Y_TEST)):
        with pytest.raises(NotFittedError, match=rf"not fitted for its current parameters: "
                                                 rf"{param} .* -> {new!r}.*Call fit"):
            call()
    if "__" not in param:  # set back: the fitted model is there again
        est.set_params(**{param: old})
        assert est.__sklearn_is_fitted__()
        assert_array_equal(est.predict(X_TEST), before)
        assert len(est.history_) == n_epochs


@pytest.mark.parametrize("name, param", [("transformer", "pe_dim"), ("transformer", "output_map"),
                                         ("fcn", "hidden_width"), ("fcn", "n_hidden_layers")])
def test_the_next_fit_after_a_structural_change_starts_afresh(name, param, fitted):
    est = fitted[name].set_params(warm_start=True)
    est.set_params(**{param: STRUCTURAL[name][param]})
    est.fit(X, Y)
    assert len(est.history_) == est.max_epochs  # not continued: a fresh history
    fresh = MAKERS[name](**{param: STRUCTURAL[name][param]}).fit(X, Y)
    assert_same_weights(weights(est), weights(fresh))  # the same model as a fresh fit
    assert est.__sklearn_is_fitted__()


def test_a_changed_size_parameter_unfits_only_when_it_differs(fitted):
    est = fitted["fcn"]  # learned seq_len 6, token_dim 3
    est.set_params(seq_len=6, token_dim=3)  # the sizes it has: still fitted
    assert est.__sklearn_is_fitted__()
    est.set_params(seq_len=None, token_dim=None)
    assert est.__sklearn_is_fitted__()
    est.set_params(seq_len=8)
    with pytest.raises(NotFittedError, match=r"seq_len 6 -> 8.*set seq_len=6 back"):
        est.predict(X_TEST)


# -- applied parameters -----------------------------------------------------------------


def test_n_pe_draws_is_applied_to_the_fitted_module(fitted):
    est = fitted["transformer"]
    W, history = weights(est), est.history_.to_list()
    before = est.predict(X_TEST)
    module = copy.deepcopy(est.module_).eval()
    module.n_pe_draws = 16
    with torch.no_grad():
        expected = module(torch.as_tensor(X_TEST)).numpy()
    est.set_params(n_pe_draws=16)
    after = est.predict(X_TEST)
    assert est.module_.n_pe_draws == 16
    assert not np.allclose(after, before)  # the average over more draws
    assert_same_weights(weights(est), W)
    assert est.history_.to_list() == history
    assert_array_equal(after, expected)
    est.set_params(n_pe_draws=2)
    assert_array_equal(est.predict(X_TEST), before)


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_device_change_keeps_the_fit(name, fitted):
    est = fitted[name]
    W, before, rng = weights(est), est.predict(X_TEST), est.torch_rng_
    est.set_params(device="cpu")  # "auto" is the CPU here: nothing to move
    assert_array_equal(est.predict(X_TEST), before)
    assert est.torch_rng_ is rng
    assert_same_weights(weights(est), W)


@pytest.mark.parametrize("name", list(MAKERS))
def test_moving_to_another_device_moves_module_optimizer_and_generator(name, fitted,
                                                                        monkeypatch):
    # The move itself, run on the CPU: every step of it executes (to the CPU),
    # and training continues exactly as without the move.
    est, twin = fitted[name], copy.deepcopy(fitted[name])
    monkeypatch.setattr(device_module, "same_device", lambda a, b: False)
    rng = est.torch_rng_
    est.set_params(device="cpu")
    assert_array_equal(est.predict(X_TEST), twin.predict(X_TEST))
    assert est.torch_rng_ is not rng  # a generator made for the new device
    assert_array_equal(est.torch_rng_.get_state(), rng.get_state())
    monkeypatch.undo()
    est.partial_fit(X, Y)
    twin.partial_fit(X, Y)
    assert_same_weights(weights(est), weights(twin))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", list(MAKERS))
def test_a_fitted_model_moves_between_gpu_and_cpu(name):
    est = MAKERS[name](device="cuda").fit(X, Y)
    on_gpu = est.predict(X_TEST)
    est.set_params(device="cpu")
    np.testing.assert_allclose(est.predict(X_TEST), on_gpu, rtol=1e-4, atol=1e-5)
    assert next(est.module_.parameters()).device.type == "cpu"
    for state in est.optimizer_.state.values():
        assert all(v.device.type == "cpu" for v in state.values() if torch.is_tensor(v)
                   and v.dim() > 0)
    est.partial_fit(X, Y)  # trains on the CPU
    est.set_params(device="cuda")
    assert est.predict(X_TEST).shape == Y_TEST.shape
    assert next(est.module_.parameters()).is_cuda and est.torch_rng_.device.type == "cuda"


@pytest.mark.parametrize("name", list(MAKERS))
def test_compile_on_a_fitted_model_keeps_its_weights(name, fitted):
    # skorch's set_params(compile=True) rebuilds the module with fresh
    # weights; here the fitted module is compiled in place at its next use.
    est = fitted[name]
    W, before, module = weights(est), est.predict(X_TEST), est.module_
    est.set_params(compile=True, compile__backend="eager", compile__dynamic=False)
    assert est.module_ is module and est.__sklearn_is_fitted__()
    np.testing.assert_allclose(est.predict(X_TEST), before, rtol=1e-6, atol=1e-7)
    assert est.module_._compiled_call_impl is not None  # compiled in place
    assert list(est.module_.state_dict()) == list(W)  # the keys of an uncompiled module
    assert_same_weights(weights(est), W)
    est.set_params(compile=False)
    assert_array_equal(est.predict(X_TEST), before)
    assert est.module_._compiled_call_impl is None


# -- settings -----------------------------------------------------------------------------


class Noop(Callback):
    pass


SETTINGS = {  # a different valid value for each setting
    "criterion": torch.nn.L1Loss, "optimizer": torch.optim.SGD, "lr": 0.5, "max_epochs": 3,
    "batch_size": 7, "iterator_train": DataLoader, "iterator_valid": DataLoader,
    "iterator_train__shuffle": False, "dataset": Dataset, "train_split": ValidSplit(3),
    "callbacks": [Noop()], "warm_start": True, "verbose": 1, "use_caching": False,
    "torch_load_kwargs": {"weights_only": True}, "random_state": 99,
    "predict_nonlinearity": torch.tanh, "criterion__reduction": "sum",
    "optimizer__weight_decay": 0.1,
}


@pytest.mark.parametrize("name, param", [(n, p) for n in MAKERS for p in SETTINGS])
def test_a_setting_keeps_the_fit(name, param, fitted, capsys):
    est = fitted[name]
    W, before, n_epochs, module = weights(est), est.predict(X_TEST), len(est.history_), est.module_
    est.set_params(**{param: SETTINGS[param]})
    assert est.__sklearn_is_fitted__() and est.module_ is module
    after = est.predict(X_TEST)
    if param == "predict_nonlinearity":  # read by predict
        np.testing.assert_allclose(after, np.tanh(before), rtol=1e-6)
    else:
        np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-7)
    assert_same_weights(weights(est), W)
    assert len(est.history_) == n_epochs


def test_settings_are_honoured_when_training_continues(fitted):
    # warm_start / partial_fit keep skorch's criterion, optimizer and
    # callbacks; a changed one is rebuilt for the continued training.
    seen = []

    class Record(Callback):
        def on_epoch_end(self, net, **kwargs):
            seen.append(len(net.history))

    est = fitted["fcn"]
    W = weights(est)
    est.set_params(optimizer=torch.optim.SGD, criterion=torch.nn.L1Loss, callbacks=[Record()])
    est.partial_fit(X, Y)
    assert isinstance(est.optimizer_, torch.optim.SGD)
    assert isinstance(est.criterion_, torch.nn.L1Loss)
    assert seen == [3, 4]  # the new callback ran, on the continued history
    assert not all(torch.equal(a, b) for a, b in zip(W.values(), weights(est).values()))
    optimizer = est.optimizer_
    est.partial_fit(X, Y)
    assert est.optimizer_ is optimizer  # unchanged settings: nothing rebuilt


def test_skorch_prefix_parameters_can_be_set_on_a_fitted_model(fitted):
    # skorch's own set_params refuses iterator_train__* on an initialized
    # net ("Something went wrong"); here it is a setting like the others.
    est = fitted["fcn"]
    est.set_params(iterator_train__shuffle=False, iterator_valid__drop_last=False)
    assert est.__sklearn_is_fitted__()
    est.partial_fit(X, Y)
    assert len(est.history_) == 4  # two epochs more


# -- sizes as parameters ---------------------------------------------------------------------


def test_initialize_builds_the_module_without_data():
    est = SparseTokenTransformer(pe_dim=8, token_dim=3, max_epochs=1,
                                 random_state=0).initialize()
    assert est.module_.W.shape == (8, 8)
    assert (est.token_dim_, est.n_features_in_, est.seq_len_) == (3, 4, None)
    assert est.predict(X_TEST).shape == Y_TEST.shape  # untrained (W = 0), but defined
    est.partial_fit(X, Y)  # the first training sets the training length
    assert est.seq_len_ == 6 and len(est.history_) == 1
    fcn = SparseTokenFCN(hidden_width=8, seq_len=6, token_dim=3).initialize()
    assert (fcn.token_dim_, fcn.seq_len_, fcn.n_features_in_) == (3, 6, 4)
    assert fcn.module_.net[1].in_features == 6 * 4


def test_initialize_after_a_fit_keeps_the_learned_sizes(fitted):
    est = fitted["fcn"]
    est.initialize()
    assert (est.token_dim_, est.seq_len_) == (3, 6)
    assert len(est.history_) == 0  # a fresh module, as in skorch


@pytest.mark.parametrize("make, param, given", [
    (lambda: SparseTokenTransformer(token_dim=2, max_epochs=1), "token_dim", 2),
    (lambda: SparseTokenFCN(token_dim=4, max_epochs=1), "token_dim", 4),
    (lambda: SparseTokenFCN(seq_len=5, max_epochs=1), "seq_len", 5),
])
def test_given_sizes_are_checked_against_X(make, param, given):
    est = make()
    actual = 3 if param == "token_dim" else 6
    with pytest.raises(ValueError, match=rf"X of shape \(96, 6, 4\) has {param} {actual}, but "
                                         rf"\w+ was given {param}={given}\. Set {param}=None to "
                                         rf"learn it from the data"):
        est.fit(X, Y)
    assert not hasattr(est, "module_")
    est.set_params(**{param: actual}).fit(X, Y)  # matching sizes fit
    assert getattr(est, param + "_") == actual


def test_fitted_sizes_are_attributes_and_given_ones_parameters():
    est = SparseTokenFCN(hidden_width=8, max_epochs=1).fit(X, Y)
    assert est.get_params()["seq_len"] is None and est.get_params()["token_dim"] is None
    assert (est.seq_len_, est.token_dim_) == (6, 3)


def test_load_params_after_a_structural_change_loads_into_the_new_model(tmp_path, fitted):
    small = MAKERS["transformer"](pe_dim=4).fit(X, Y)
    small.save_params(f_params=tmp_path / "w.pt")
    est = fitted["transformer"]  # pe_dim 8
    est.set_params(pe_dim=4).load_params(f_params=tmp_path / "w.pt")
    assert est.__sklearn_is_fitted__() and est.module_.W.shape == (4, 4)
    assert_array_equal(est.predict(X_TEST), small.predict(X_TEST))


def test_routed_values_set_on_a_fitted_model_are_recorded_and_used(fitted):
    # skorch gives optimizer__* only to the live optimizer: get_params, clone,
    # the next fit and GridSearchCV ran without it (issue 19, point 6).
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV

    est = fitted["fcn"].set_params(optimizer=torch.optim.SGD)
    est.partial_fit(X, Y)  # the SGD optimizer is built
    est.set_params(optimizer__momentum=0.9, criterion__reduction="sum")
    assert est.optimizer_.param_groups[0]["momentum"] == 0.9  # reaches the live one
    assert est.get_params()["optimizer__momentum"] == 0.9
    assert est.get_params()["criterion__reduction"] == "sum"
    copy_ = clone(est)
    assert copy_.get_params()["optimizer__momentum"] == 0.9
    assert copy_.fit(X, Y).optimizer_.param_groups[0]["momentum"] == 0.9
    assert copy_.criterion_.reduction == "sum"
    est.fit(X, Y)  # a fresh fit builds its optimizer with it
    assert est.optimizer_.param_groups[0]["momentum"] == 0.9
    search = GridSearchCV(est, {"lr": [0.01]}, cv=2).fit(X, Y)
    assert search.best_estimator_.optimizer_.param_groups[0]["momentum"] == 0.9
    # an invalid value is refused as at fit, and changes nothing
    with pytest.raises(ValueError, match=r"optimizer__momentum=-1 is refused by "
                                         r"optimizer=SGD: Invalid momentum value"):
        est.set_params(optimizer__momentum=-1)
    assert est.get_params()["optimizer__momentum"] == 0.9
    assert est.optimizer_.param_groups[0]["momentum"] == 0.9


# -- module__<size> and the top-level parameters; the repr -----------------------------


@pytest.mark.parametrize("name, param, value", [("transformer", "pe_dim", 4),
                                                ("fcn", "hidden_width", 8)])
def test_a_module_size_contradicting_the_top_level_parameter_is_refused(name, param, value,
                                                                        fitted):
    # the top-level parameter is the one source of the module's size: a
    # module__<size> that contradicts it is refused by the next fit, naming it
    est = fitted[name]
    W, history = weights(est), len(est.history_)
    est.set_params(**{f"module__{param}": value})
    with pytest.raises(ValueError, match=rf"module__{param}={value} contradicts {param}="
                                         rf"{getattr(est, param)}.*Set {param}={value}"):
        est.fit(X, Y)
    assert_same_weights(weights(est), W)
    assert len(est.history_) == history
    fresh = MAKERS[name](**{f"module__{param}": value})
    with pytest.raises(ValueError, match=rf"contradicts {param}="):
        fresh.fit(X, Y)
    assert not hasattr(fresh, "module_")
    # kept equal, it is accepted and builds the same model
    same = MAKERS[name](**{param: value, f"module__{param}": value}).fit(X, Y)
    assert_same_weights(weights(same), weights(MAKERS[name](**{param: value}).fit(X, Y)))


def test_the_repr_shows_the_parameters_set_as_scikit_learn_does():
    assert repr(SparseTokenTransformer()) == "SparseTokenTransformer()"
    assert repr(SparseTokenTransformer(pe_dim=8)) == "SparseTokenTransformer(pe_dim=8)"
    assert (repr(SparseTokenFCN(lr=0.01, hidden_width=16, iterator_train__shuffle=False))
            == "SparseTokenFCN(hidden_width=16, iterator_train__shuffle=False, lr=0.01)")
    est = SparseTokenTransformer(pe_dim=8).fit(X, Y)  # fitted: the same, no module listing
    assert repr(est) == "SparseTokenTransformer(pe_dim=8)"
