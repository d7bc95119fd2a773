"""The rules of every constructor parameter: what each accepts, the fix, what a change does.

- **What a parameter accepts**: the kinds (``Count(1)``, ``NONE``, ``OneOf("a",
  "b")``, ...) that an estimator class lists per parameter in ``_parameter_rules``
  (as scikit-learn's ``_parameter_constraints``; ``SKORCH`` and ``COMMON`` are
  every estimator's), checked by :func:`validate` with scikit-learn's wording
  ("The 'batch_size' parameter of SparseTokenFCN must be ... Got 0 instead.")
  and the fix from ``HINTS``, the one place a parameter's fix is written.
- **What changing a parameter does to a fitted estimator** (:func:`group_of`,
  derived from what the class declares):
  "structural" parameters make the fitted module no longer match (the estimator
  reads as unfitted until it is refit, or the value is set back); "applied" ones
  are applied to the fitted module at its next use; "settings" are read where they
  are used and keep the fit.
"""

import numbers

import numpy as np
import torch
from skorch.callbacks import Callback

from ..exceptions import InvalidParameterError


class Kind:
    """One kind of value a parameter accepts: a test and how to say it."""

    def __init__(self, test, text):
        self.test, self.text = test, text

    def accepts(self, value):
        try:
            return bool(self.test(value))
        except (TypeError, ValueError, RuntimeError):
            return False

    def __str__(self):
        return self.text


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def Count(left):
    """An integer >= ``left`` (bools are ints to Python, never sizes here)."""
    return Kind(lambda v: _is_int(v) and v >= left, f"an int in the range [{left}, inf)")


def OneOf(*values):
    """One of ``values`` (strings, or ints such as batch_size's -1)."""
    kind = "a str" if all(isinstance(v, str) for v in values) else "an int"
    shown = ", ".join(repr(v) for v in values)
    return Kind(lambda v: type(v) in {type(x) for x in values} and v in values,
                f"{kind} among {{{shown}}}")


def _is_device(value):
    if isinstance(value, str) and value == "auto":
        return True
    return isinstance(value, (str, torch.device)) and torch.device(value).type in ("cpu", "cuda")


def _is_callback(cb):
    return isinstance(cb, Callback) or (isinstance(cb, type) and issubclass(cb, Callback))


def _is_callback_list(value):
    return isinstance(value, list) and all(
        (len(item) == 2 and isinstance(item[0], str) and (item[1] is None
                                                           or _is_callback(item[1])))
        if isinstance(item, (tuple, list)) else _is_callback(item) for item in value)


NONE = Kind(lambda v: v is None, "None")
BOOLEAN = Kind(lambda v: isinstance(v, (bool, np.bool_)), "an instance of 'bool'")
CALLABLE = Kind(callable, "a callable")
DICT = Kind(lambda v: isinstance(v, dict), "an instance of 'dict'")
NON_NEGATIVE = Kind(lambda v: isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))
                    and 0 <= v < np.inf, "a float in the range [0, inf)")
RANDOM_STATE = Kind(lambda v: v is None or isinstance(v, np.random.RandomState)
                    or (_is_int(v) and 0 <= v <= 2**32 - 1),
                    "an int in the range [0, 4294967295], an instance of 'RandomState' or None")
VERBOSE = Kind(lambda v: isinstance(v, (bool, np.bool_)) or (_is_int(v) and v >= 0),
               "an int in the range [0, inf) or an instance of 'bool'")
DEVICE = Kind(_is_device, "'auto', 'cpu', 'cuda', 'cuda:N' or a torch.device of those")
CALLBACKS = Kind(_is_callback_list, "a list of skorch callbacks or (name, callback) pairs")
POSITIVE = [Count(1)]

#: skorch's constructor parameters, as every estimator takes them
SKORCH = {
    "module": [CALLABLE],
    "criterion": [CALLABLE],
    "optimizer": [CALLABLE],
    "lr": [NON_NEGATIVE],
    "max_epochs": POSITIVE,
    "batch_size": [Count(1), OneOf(-1)],
    "iterator_train": [CALLABLE],
    "iterator_valid": [CALLABLE],
    "iterator_train__shuffle": [BOOLEAN],
    "dataset": [CALLABLE],
    "train_split": [NONE, CALLABLE],
    "callbacks": [NONE, OneOf("disable"), CALLBACKS],
    "predict_nonlinearity": [NONE, OneOf("auto"), CALLABLE],
    "warm_start": [BOOLEAN],
    "verbose": [VERBOSE],
    "device": [NONE, DEVICE],
    "compile": [BOOLEAN],
    "use_caching": [OneOf("auto"), BOOLEAN],
    "torch_load_kwargs": [NONE, DICT],
}

#: every estimator's own parameters
COMMON = {
    "random_state": [RANDOM_STATE],
    "token_dim": [NONE, Count(1)],
    "layout": [OneOf("indicator", "query")],
    "n_selected": [NONE, Count(1)],
    "lr_schedule": [OneOf("constant", "cosine")],
}

#: what prediction reads: checked by predict, score and predict_attention too
PREDICTION = ("batch_size", "iterator_valid", "dataset", "predict_nonlinearity",
              "device", "compile", "n_pe_draws")


# -- the fix for each parameter ---------------------------------------------------


def _train_split_hint(value):
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 < value < 1:
        return (f"For a validation fraction, pass train_split="
                f"skorch.dataset.ValidSplit({value}).")
    return ("Pass None (no internal validation, the default) or a splitter such as "
            "skorch.dataset.ValidSplit(5) (holds out 20%) or ValidSplit(0.2).")


def _class_hint(name, example, kind):
    def hint(value):
        text = f"Pass the {kind} class, e.g. {name}={example}"
        if isinstance(value, str):
            text += f", not a string ({value!r})"
        return text + f"; its arguments go in {name}__<argument>=value."
    return hint


HINTS = {
    "module": "Pass the torch module class; its arguments go in module__<argument>=value.",
    "criterion": _class_hint("criterion", "torch.nn.MSELoss", "loss"),
    "optimizer": _class_hint("optimizer", "torch.optim.Adam", "optimizer"),
    "lr": "It is the learning rate: a finite number >= 0, e.g. lr=0.01.",
    "max_epochs": ("It is the number of passes over the training data, at least 1 "
                   "(0 would return a model that never trained), e.g. max_epochs=15."),
    "batch_size": ("It is the number of sequences per optimisation step, e.g. "
                   "batch_size=256; -1 takes all of them as one batch."),
    "iterator_train": ("Pass a callable (dataset, **kwargs) -> batches, such as the "
                       "default TensorBatches or torch.utils.data.DataLoader."),
    "iterator_valid": ("Pass a callable (dataset, **kwargs) -> batches, such as the "
                       "default TensorBatches or torch.utils.data.DataLoader."),
    "iterator_train__shuffle": "Pass True (reshuffle every epoch, the default) or False.",
    "dataset": "Pass a callable such as skorch.dataset.Dataset (the default).",
    "train_split": _train_split_hint,
    "callbacks": ("Pass a list, e.g. callbacks=[EarlyStopping(monitor='train_loss')] "
                  "or callbacks=[('stop', EarlyStopping())]; None for none."),
    "predict_nonlinearity": ("Pass 'auto' or None (for a regressor both mean no "
                             "nonlinearity) or a callable applied to the predictions."),
    "warm_start": ("Pass True (the next fit continues from the fitted model) or False "
                   "(it starts afresh, the default)."),
    "verbose": "Pass 0 (silent, the default) or 1 (a table of the losses per epoch).",
    "device": "Pass 'auto' (a GPU when present, the default), 'cpu', 'cuda' or 'cuda:N'.",
    "compile": ("Pass True to compile the module with torch.compile, or False; its "
                "arguments go in compile__<argument>=value (e.g. compile__backend='eager')."),
    "use_caching": "Pass 'auto' (the default), True or False.",
    "torch_load_kwargs": "Pass None or a dict of torch.load arguments.",
    "random_state": "Pass an int seed (e.g. random_state=0), a numpy RandomState or None.",
    "token_dim": ("It is the token dimension d: None learns it from X at fit; an int "
                  "fixes it, so that initialize() builds the module without data."),
    "seq_len": ("It is the sequence length T: None learns it from X at fit; an int "
                "fixes it, so that initialize() builds the module without data."),
    "layout": ("Pass 'indicator' (the subset as a 0/1 last channel of the token rows, the "
               "default) or 'query' (the subset as n_selected rows [0_d, i_j] of 1-based "
               "positions after the tokens), the layout of make_sparse_selection's X."),
    "n_selected": ("It is the number q of query rows at the end of every sequence in the "
                   "query layout: None learns it from X at fit; an int fixes it (unused "
                   "in the indicator layout)."),
    "lr_schedule": ("Pass 'constant' (Adam at lr throughout, the default) or 'cosine' (lr "
                    "decayed to 0 by a cosine over the fit's steps, stepped per batch)."),
    "pe_dim": "It is the positional-encoding dimension d_p, e.g. pe_dim=64.",
    "positional_encoding": ("'stochastic' draws fresh positions for every sequence and "
                            "predicts at any length."),
    "max_seq_len": "It is the number of positions a table encoding holds, e.g. max_seq_len=256.",
    "n_pe_draws": "It is the number of positional draws averaged over, e.g. n_pe_draws=8.",
    "output_map": "Pass True (a trainable map after the attention) or False (the paper's model).",
    "hidden_width": "It is the width m of every hidden layer, e.g. hidden_width=256.",
    "n_hidden_layers": "It is the number of hidden layers, e.g. n_hidden_layers=1.",
    "d_model": ("It is the width of the encoder or the state-space model, the size of every "
                "position's vector, e.g. d_model=32."),
    "n_heads": "It is the number of attention heads; it must divide d_model, e.g. n_heads=2.",
    "n_layers": ("It is the number of layers (transformer blocks, recurrent layers), "
                 "e.g. n_layers=1."),
    "cell": "Pass 'gru', 'lstm' or 'rnn' (a tanh RNN).",
    "hidden_size": "It is the width of the recurrent state, e.g. hidden_size=32.",
    "d_state": "It is the state size N of every channel's selective scan, e.g. d_state=16.",
}


def validate(rules, params, caller_name):
    """Check ``params`` against ``rules``; raise with scikit-learn's wording and the fix.

    Names without a rule are not checked.

    Raises
    ------
    InvalidParameterError
        Both a ValueError and a TypeError: "The 'batch_size' parameter of
        SparseTokenFCN must be ... Got -5 instead." followed by the fix.

    Examples
    --------
    >>> try:
    ...     validate(SKORCH, {"batch_size": 0}, "SparseTokenFCN")
    ... except ValueError as exc:
    ...     print(str(exc)[:64])
    The 'batch_size' parameter of SparseTokenFCN must be an int in t
    """
    for name, value in params.items():
        kinds = rules.get(name)
        if kinds is None or any(kind.accepts(value) for kind in kinds):
            continue
        texts = [str(kind) for kind in kinds]
        must = texts[0] if len(texts) == 1 else f"{', '.join(texts[:-1])} or {texts[-1]}"
        hint = HINTS.get(name, "")
        hint = hint(value) if callable(hint) else hint
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller_name} must be {must}. Got {value!r} instead. "
            f"{hint}".rstrip())


# -- what a change does to a fitted estimator -------------------------------------

#: the base class's parameters that are not settings; an estimator's own go by
#: what it declares: its ``_sizes`` and ``_module_params`` are structural, its
#: ``_module_attributes`` (module parameters set on a fitted module) applied
BASE_GROUPS = {"module": "structural", "layout": "structural", "n_selected": "structural",
               "device": "applied", "compile": "applied"}
#: a routed ``prefix__name`` goes by its prefix
PREFIX_GROUPS = {
    "module": "structural",
    "compile": "applied",
    **dict.fromkeys(["criterion", "optimizer", "iterator_train", "iterator_valid",
                     "dataset", "callbacks"], "setting"),
}


def group_of(name, estimator):
    """The group of parameter ``name`` of ``estimator`` (a class or an instance).

    "structural", "applied" or "setting", derived from what the class declares
    (``_sizes``, ``_module_params``, ``_module_attributes``, ``_parameter_rules``).
    Raises KeyError for a name no rule covers, so that a new parameter
    cannot go unclassified.

    Examples
    --------
    >>> from sparse_token_estimators import SparseTokenTransformer as Est
    >>> group_of("pe_dim", Est), group_of("n_pe_draws", Est), group_of("lr", Est)
    ('structural', 'applied', 'setting')
    >>> group_of("module__pe_dim", Est), group_of("callbacks__print_log__floatfmt", Est)
    ('structural', 'setting')
    """
    if "__" in name:
        return PREFIX_GROUPS[name.split("__", 1)[0]]
    if name in estimator._module_attributes:
        return "applied"
    if name in estimator._sizes or name in estimator._module_params:
        return "structural"
    if name in BASE_GROUPS:
        return BASE_GROUPS[name]
    if name in estimator._parameter_rules:
        return "setting"
    raise KeyError(name)


def is_structural(name, estimator):
    """Whether changing ``name`` makes ``estimator``'s fitted module no longer match.

    Unlike ``group_of``, a name no rule covers is simply not structural.
    """
    try:
        return group_of(name, estimator) == "structural"
    except KeyError:
        return False
