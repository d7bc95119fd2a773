"""The base class of the estimators: a ``NeuralNetRegressor`` on skorch's own hooks.

A new estimator subclasses ``_SparseTokenRegressor`` and declares only

- its module: the ``module`` default of its ``__init__`` (a torch module class);
- its parameters: keyword arguments of ``__init__``, stored under their names
  (skorch's and scikit-learn's convention), passed on to ``super().__init__``;
- their rules: ``_parameter_rules``, the base class's and its own (the kinds
  and the fixes are in ``_rules``); what a change does to a fitted estimator
  follows from the declarations below (``_rules.group_of``);
- what the module is built with: ``_module_params`` (parameter names) and
  ``_module_kwargs`` for the fitted sizes; ``_sizes``, the sizes ``initialize()``
  needs without data;
- which lengths it accepts: ``_check_seq_len(seq_len, fitting=...)``.

The checks are plain functions (``_checks``); what a fitted module was built with
and the undo of a failed call are in ``_state``; saving and loading in
``_persistence``; the training checks are callbacks (``..callbacks``), installed
by skorch's ``_default_callbacks`` hook. The base class is made of mixins by
concern: building the module (``_building``), prediction and scoring
(``_predicting``), saving, loading and pickling (``_saving``); the parameters,
the data path, training and ``set_params`` are here. Each skorch method
overridden says why in its first comment line; no other private name of skorch
or scikit-learn is used (``tests/test_estimator_layer.py``).

Training and prediction on one estimator hold its lock (``training_lock``, an
``_lock.EstimatorLock``): a ``predict``, ``score``, pickle or ``save_params`` from
another thread waits for a running ``partial_fit`` to end, or for the callbacks
at an epoch's end (``on_epoch_end``), where it is served with the weights of
that epoch's last step; none sees a half-updated module.
"""

import functools
import inspect
import weakref

import numpy as np
import torch
from sklearn.base import BaseEstimator
from skorch import NeuralNet, NeuralNetRegressor
from skorch.callbacks import Callback, PrintLog
from skorch.utils import is_dataset
from torch.utils.data import TensorDataset

from .._batching import TensorBatches
from .._device import ResolvedDevice, resolved_device
from .._sklearn_callbacks import CallbackMixin, reports_fit
from ..callbacks import (
    CosineSchedule,
    DivergenceCheck,
    EpochStepCheck,
    NoTrainingStepError,
    TrainingDivergedError,
    ValidationSplitCheck,
)
from . import _checks, _persistence, _rules, _state
from ._building import BuildingMixin
from ._lock import training_lock
from ._predicting import PredictionMixin, pad_to_block
from ._saving import PersistenceMixin

__all__ = ["_SparseTokenRegressor", "pad_to_block", "training_lock"]


class _SparseTokenRegressor(BuildingMixin, PredictionMixin, PersistenceMixin, CallbackMixin,
                            NeuralNetRegressor):
    """What every estimator shares; subclasses say which module to build.

    Building (``_building``), prediction (``_predicting``) and saving, loading and
    pickling (``_saving``) are mixins of their own; here: the parameters, the data
    path, training and ``set_params``.
    """

    #: what each constructor parameter accepts (as scikit-learn's
    #: ``_parameter_constraints``); a subclass adds its own to these
    _parameter_rules = {**_rules.SKORCH, **_rules.COMMON}
    #: constructor parameters forwarded to the module (structural, ``_rules.group_of``)
    _module_params = ()
    #: applied parameters that are attributes of the module (set on the fitted one)
    _module_attributes = ()
    #: the sizes the module is built with; each is a parameter (None: learned)
    _sizes = ("token_dim",)
    #: arguments of the module's forward that the estimator itself passes
    _forward_args_supplied = ()
    #: sequences per forward call at prediction (``infer``); None: as batched
    _predict_block = None

    device = ResolvedDevice()

    def __init__(self, module, *, token_dim=None, random_state=None,
                 optimizer=torch.optim.Adam, lr=0.01, max_epochs=30, batch_size=256,
                 iterator_train=TensorBatches, iterator_valid=TensorBatches,
                 train_split=None, verbose=0, device="auto", layout="indicator",
                 n_selected=None, lr_schedule="constant", **kwargs):
        kwargs.setdefault("iterator_train__shuffle", True)
        super().__init__(
            module, optimizer=optimizer, lr=lr, max_epochs=max_epochs,
            batch_size=batch_size, iterator_train=iterator_train,
            iterator_valid=iterator_valid, train_split=train_split,
            verbose=verbose, device=device, **kwargs,
        )
        self.token_dim = token_dim
        self.random_state = random_state
        self.layout = layout
        self.n_selected = n_selected
        self.lr_schedule = lr_schedule

    # -- what a subclass may add ---------------------------------------------------

    def _check_seq_len(self, seq_len, *, fitting):
        """Raise if this estimator cannot take sequences of ``seq_len``."""

    def _check_sizes(self):
        """Raise if sizes given as parameters do not fit together (before any build)."""

    def _module_kwargs(self):
        return {name: getattr(self, name) for name in self._module_params}

    # -- scikit-learn's and skorch's conventions -----------------------------------

    def __sklearn_tags__(self):
        # 3-D X, 2-D y: scikit-learn's checks need to know
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        tags.input_tags.two_d_array = False
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = False
        return tags

    # scikit-learn's printer, in pipelines and searches too (skorch's lists the module)
    __repr__ = BaseEstimator.__repr__

    def get_params(self, deep=True, **kwargs):
        # skorch's lists every attribute not ending in "_": not its bookkeeping (a
        # leading "_": _params_to_validate, scikit-learn's callbacks); with deep=False
        # (clone, scikit-learn's repr) not skorch's parameters left at their defaults
        params = {name: value for name, value in super().get_params(deep=deep, **kwargs).items()
                  if not name.startswith("_")}
        if deep:
            return params
        own, defaults = inspect.signature(type(self).__init__).parameters, _defaults(type(self))
        return {name: value for name, value in params.items() if name in own
                or not _state._same(defaults.get(name, _UNSET), value)}

    @property
    def _default_callbacks(self):
        # skorch's hook for default callbacks (its get_params reads this property
        # itself, so get_default_callbacks alone would hide their parameters)
        return [("validation_split_check", ValidationSplitCheck()),
                ("epoch_step_check", EpochStepCheck()),
                ("divergence_check", DivergenceCheck()),
                ("lr_schedule", CosineSchedule()),
                *[(name, _SilentPrintLog() if type(cb) is PrintLog else cb)
                  for name, cb in super()._default_callbacks]]

    def device_scope(self):
        """Within the block (this thread only), ``self.device`` reads "auto" resolved.

        skorch reads ``self.device`` wherever it places a tensor and does not know
        "auto"; nothing is written to the estimator.
        """
        return resolved_device(self)

    # -- data path -----------------------------------------------------------------

    def get_dataset(self, X, y=None):
        """Tensors on the device, once per fit or predict (batches are slices of them).

        Parameters
        ----------
        X : ndarray of shape (n_samples, seq_len, token_dim + 1), or a Dataset
            Checked input (a Dataset, e.g. skorch's validation split, passes as is).
        y : ndarray of shape (n_samples, token_dim) or None

        Returns
        -------
        dataset : torch.utils.data.Dataset
        """
        # tensors moved once, not a Dataset indexed sample by sample
        if is_dataset(X):
            return super().get_dataset(X, y)
        with self.device_scope():  # also when skorch's forward calls it, outside ours
            # np.require copies the read-only memory maps joblib hands to workers
            # (GridSearchCV with n_jobs), which torch warns about.
            X = torch.as_tensor(np.require(X, np.float32, "W")).to(self.device)
            if y is not None:
                y = torch.as_tensor(np.require(y, np.float32, "W")).to(self.device)
                return TensorDataset(X, y)
        if not (isinstance(self.iterator_valid, type)
                and issubclass(self.iterator_valid, TensorBatches)):
            # another iterator (a DataLoader) wants (X, y) pairs: skorch's dataset
            return super().get_dataset(X)
        return TensorDataset(X)

    def get_iterator(self, dataset, training=False):
        """skorch's iterator; a training ``TensorBatches`` gets the seeded generator.

        Parameters
        ----------
        dataset : torch.utils.data.Dataset or SparseSelectionStream
        training : bool, default=False

        Returns
        -------
        iterator : iterable of batches
        """
        # shuffling and streams follow random_state
        iterator = super().get_iterator(dataset, training=training)
        if training and isinstance(iterator, TensorBatches) and iterator.generator is None:
            iterator.generator = self.torch_rng_
        return iterator

    # -- training ------------------------------------------------------------------

    def fit(self, X, y=None, **fit_params):
        """Fit on ``X`` and ``y``, or on a stream of fresh samples.

        Builds a fresh module unless ``warm_start`` is True and the fitted one
        matches the parameters; sizes left as None are learned from ``X``.
        Every parameter, routed value (``criterion__*``, ``optimizer__*``,
        ``iterator_*__*``), fit keyword and the data are checked first. If
        the call fails (an error, a callback raising, Ctrl-C before any
        optimisation step), the estimator is left exactly as it was before
        it: same weights, optimizer state, history and fitted state. Ctrl-C
        after some steps keeps the epochs trained so far, as in skorch. A
        diverging fit raises :class:`TrainingDivergedError`, the estimator
        as it was before the call (the error's ``history`` keeps the losses).

        Parameters
        ----------
        X : array-like of shape (n_samples, seq_len, token_dim + 1), or SparseSelectionStream
            Tokens and the selection indicator (the last channel). A
            :class:`~sparse_token_estimators.SparseSelectionStream` (with
            ``y=None``) trains every epoch on fresh samples.
        y : array-like of shape (n_samples, token_dim) or None
            The average of the selected tokens; None with a stream.
        **fit_params : dict
            Keyword arguments of the module's ``forward`` (the package's
            modules take none). ``sample_weight`` is not supported.

        Returns
        -------
        self : estimator
            This estimator, fitted.
        """
        # sizes are learned from X before anything is built (braindecode's route)
        return self._train(X, y, self.warm_start, "fit", fit_params)

    def partial_fit(self, X, y=None, classes=None, **fit_params):
        """Continue training for ``max_epochs`` epochs; build the module first if needed.

        A transaction, as ``fit``: a call that fails leaves the estimator as
        it was before it.

        Parameters
        ----------
        X : array-like of shape (n_samples, seq_len, token_dim + 1), or SparseSelectionStream
            As in ``fit``; ``token_dim`` must be the fitted one.
        y : array-like of shape (n_samples, token_dim) or None
            As in ``fit``.
        classes : None
            Unused; scikit-learn's signature.
        **fit_params : dict
            As in ``fit``.

        Returns
        -------
        self : estimator
            This estimator, trained further.
        """
        # checks and sizes first, and the undo of a failed call
        return self._train(X, y, True, "partial_fit", fit_params)

    def _prepare_training(self, X, y, warm, routing_method, fit_params, transaction=None):
        """Everything ``fit`` does before skorch's training loop; returns the checked data.

        Checks the parameters, fit keywords and data; then builds the module
        (sizes from the data, seeded: ``_seeds_``, ``torch_rng_``) or, when
        ``warm`` and the fitted module matches, applies the changed settings to
        it. Call it inside ``_state.Transaction(self)`` (a failed call then changes
        nothing); one made with ``in_place=False`` is told here when training continues.
        """
        _checks.check_params(self)
        _checks.check_fit_params(self, fit_params, routing_method)
        continues = warm and _state.is_current(self)
        X, y, sizes = _checks.check_training_data(self, X, y, continues=continues)
        with self.device_scope():
            if continues:
                if transaction is not None:
                    transaction.keep_in_place()  # a fresh fit builds anew: nothing to copy
                _state.apply_to_fitted(self)
                _state.rebuild_changed_components(self)
                if self.seq_len_ is None:  # built without data: the first length trained on
                    self.seq_len_ = sizes[1]
            else:
                self._build(sizes)
        return X, y, continues

    @reports_fit  # a task of scikit-learn's callbacks, each epoch a sub-task
    def _train(self, X, y, warm, routing_method, fit_params):
        with training_lock(self), _state.Transaction(self, in_place=False) as transaction:
            X, y, continues = self._prepare_training(X, y, warm, routing_method, fit_params,
                                                     transaction)
            first = len(self.history) if continues else 0  # a fresh fit starts a new history
            _HOOKS[self] = (None, {})  # the callbacks' hooks, looked up once for this call
            try:
                with _persistence.fitting(), self.device_scope():
                    self._skorch_training(X, y, routing_method, fit_params)
            except TrainingDivergedError as exc:
                # a failed call changes nothing: the diverged losses travel on the error
                exc.history = self.history_
                raise
            except NoTrainingStepError as exc:
                self.history.pop()  # the empty epoch
                if self._steps_since(first):
                    transaction.commit()
                    raise NoTrainingStepError(
                        f"{exc} The estimator keeps its model as trained before this epoch."
                    ) from None
                transaction.rollback()
                state = ("keeps its model as before this call" if self.initialized_
                         else "was reset to unfitted, as before this call")
                raise NoTrainingStepError(f"{exc} The estimator {state}.") from None
            finally:
                _HOOKS.pop(self, None)
            if not self._steps_since(first):
                # skorch swallows a Ctrl-C; before any step there is nothing to keep
                raise KeyboardInterrupt(
                    f"{type(self).__name__}.{routing_method} was interrupted before its "
                    "first optimisation step; the estimator is as it was before the call.")
            self.module_.eval()  # so that predict writes nothing, not even the mode
        return self

    def _skorch_training(self, X, y, routing_method, fit_params):
        """skorch's training (the module built): its ``partial_fit`` or its ``fit``'s.

        skorch's ``fit`` is its ``partial_fit`` with the metadata routed as for
        ``fit``: the steps of ``partial_fit`` around ``fit_loop``, whose routing
        is ``fit``'s by default.
        """
        if routing_method == "partial_fit":
            NeuralNet.partial_fit(self, X, y, **fit_params)
            return
        self.notify("on_train_begin", X=X, y=y)
        try:
            self.fit_loop(X, y, **fit_params)
        except KeyboardInterrupt:
            pass  # as skorch's partial_fit: the model is kept as trained so far
        self.notify("on_train_end", X=X, y=y)

    def _steps_since(self, first):
        """Optimisation steps recorded in ``history_`` from epoch ``first`` on."""
        return sum(1 for row in self.history[first:] for batch in row["batches"]
                   if "train_loss" in batch)

    def set_params(self, **params):
        """Set parameters; nothing that is fitted is rebuilt or lost here.

        On a fitted estimator skorch's own ``set_params`` rebuilds the module
        (fresh weights) for ``module__*`` and ``compile``, and the criterion
        and optimizer for ``criterion__*``. Here every parameter is recorded,
        so that ``get_params``, ``clone`` and the next ``fit`` see it:

        - a structural change (``module__*``, the sizes and widths) makes the
          estimator read as unfitted until the next ``fit`` (or until the value
          is set back): ``predict`` raises ``NotFittedError`` naming the change;
        - an applied one (``n_pe_draws``, ``device``, ``compile``) is applied
          to the fitted module here, weights kept;
        - settings are read where they are used (a changed criterion or
          callback list is rebuilt when training continues); ``lr`` and
          ``optimizer__*`` also reach the live optimizer at once, and
          ``callbacks__*`` the live callbacks, as in skorch.

        On a fitted estimator the values of ``optimizer__*`` and
        ``criterion__*`` are checked first (on a scratch optimizer or
        criterion), so that a bad value is refused here and reaches neither
        the live optimizer nor ``get_params``. Other values are checked, as
        in scikit-learn, when they are used (``fit``, ``predict``).

        Parameters
        ----------
        **params : dict
            Parameter names (``name`` or routed ``prefix__name``) and values.

        Returns
        -------
        self : estimator
            This estimator.
        """
        # skorch would rebuild a fitted module (fresh weights) for module__* and compile
        if self.initialized_:
            routed = {k: v for k, v in params.items()
                      if k.startswith(("optimizer__", "criterion__"))}
            if routed:  # against the optimizer and criterion this call sets, if it sets them
                _checks.check_components(self, {**routed, **{
                    k: v for k, v in params.items() if k in ("optimizer", "criterion", "lr")}})
        deferred = {key: value for key, value in params.items() if _deferred(key)}
        super().set_params(**{k: v for k, v in params.items() if k not in deferred})
        for key, value in deferred.items():
            setattr(self, key, value)
        if self.initialized_:
            for key, value in params.items():
                if key.startswith("optimizer__"):
                    # skorch gives these to the live optimizer only; record them too,
                    # so that get_params, clone and the next fit see them
                    self.__dict__[key] = value
        if "module_" in self.__dict__ and _state.applicable(self):
            _state.apply_to_fitted(self)
        return self

    def notify(self, method_name, **cb_kwargs):
        # skorch calls every callback's hook at every batch, most of them Callback's
        # no-ops: the net's own hook runs, then the callbacks that define this one
        getattr(self, method_name)(self, **cb_kwargs)
        hooks = _hooks(self, method_name)
        if method_name != "on_epoch_end":
            for hook in hooks:
                hook(self, **cb_kwargs)
            return
        # at an epoch's end other threads' reads may go ahead (a callback's helper thread)
        with training_lock(self).paused():
            for hook in hooks:
                hook(self, **cb_kwargs)


_UNSET = object()


class _SilentPrintLog(PrintLog):
    """skorch's ``PrintLog``, which builds no table when it would print none.

    skorch's tabulates every epoch's row even with ``verbose=0`` and its sink
    ``print``, where nothing is printed; here that epoch is skipped, and the
    header comes with the first row printed.
    """

    def on_epoch_end(self, net, **kwargs):
        # skorch's tabulates the row even when _sink prints nothing (verbose=0)
        if self.sink is print and not net.verbose:
            return
        super().on_epoch_end(net, **kwargs)


#: the callback hooks of each net while it trains (``_train``): its ``callbacks_`` list
#: and {method name: [bound hooks]}; skorch builds a new list whenever the callbacks
#: change (``initialize_callbacks``, ``set_params(callbacks__name=...)``)
_HOOKS = weakref.WeakKeyDictionary()


def _hooks(net, method_name):
    """The bound ``method_name`` of each of ``net``'s callbacks that defines its own.

    A callback whose class (or instance) leaves skorch's ``Callback`` method,
    a no-op, is left out. Looked up once per callback list and method while
    the net trains (the entry is dropped when its call ends: a callback that
    holds the net must not keep it alive), every time otherwise.
    """
    callbacks = net.callbacks_
    entry = _HOOKS.get(net)
    if entry is not None and entry[0] is not callbacks:
        entry = _HOOKS[net] = (callbacks, {})
    hooks = None if entry is None else entry[1].get(method_name)
    if hooks is None:
        noop = getattr(Callback, method_name, None)
        hooks = [getattr(cb, method_name) for _, cb in callbacks
                 if noop is None or method_name in vars(cb)
                 or getattr(type(cb), method_name, None) is not noop]
        if entry is not None:
            entry[1][method_name] = hooks
    return hooks


@functools.lru_cache(maxsize=None)  # read at every get_params(deep=False): once per class
def _defaults(cls):
    """The defaults of every parameter of ``cls`` (its ``__init__`` first, then skorch's)."""
    defaults = {"iterator_train__shuffle": True}  # the base class's default
    for klass in reversed(cls.__mro__):
        init = vars(klass).get("__init__")
        if init is None or klass is object:
            continue
        defaults.update({name: p.default for name, p in inspect.signature(init).parameters.items()
                         if p.default is not p.empty})
    return defaults


def _deferred(key):
    """Parameters skorch's ``set_params`` would rebuild a fitted module or criterion for."""
    if key == "callbacks":
        return True
    if key == "lr" or key.startswith(("optimizer__", "callbacks")):
        return False
    return "__" in key or key in ("module", "criterion", "optimizer", "iterator_train",
                                  "iterator_valid", "dataset", "compile")


