"""The base class of the estimators: a ``NeuralNetRegressor`` on skorch's own hooks.

A new estimator subclasses ``_SparseTokenRegressor`` and declares only

- its module: the ``module`` default of its ``__init__`` (a torch module class);
- its parameters: keyword arguments of ``__init__``, stored under their names
  (skorch's and scikit-learn's convention), passed on to ``super().__init__``;
- their rules: ``_parameter_rules`` (from ``_rules``), and their group in
  ``_rules.GROUPS`` (what a change does to a fitted estimator);
- what the module is built with: ``_module_params`` (parameter names) and
  ``_module_kwargs`` for the fitted sizes; ``_sizes``, the sizes ``initialize()``
  needs without data;
- which lengths it accepts: ``_check_seq_len(seq_len, fitting=...)``.

The checks are plain functions (``_checks``); what a fitted module was built with
and the undo of a failed call are in ``_state``; saving and loading in
``_persistence``; the training checks are callbacks (``..callbacks``), installed
by skorch's ``_default_callbacks`` hook. Each skorch method overridden here says why
in its first comment line; no other private name of skorch or scikit-learn is used
(``tests/test_estimator_layer.py``).

Training and prediction on one estimator hold its lock (``training_lock``, an
``_lock.EstimatorLock``): a ``predict``, ``score``, pickle or ``save_params`` from
another thread waits for a running ``partial_fit`` to end, or for the callbacks
at an epoch's end (``on_epoch_end``), where it is served with the weights of
that epoch's last step; none sees a half-updated module.
"""

import inspect
import threading
import warnings
import weakref

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.metrics import r2_score
from sklearn.utils import check_random_state
from skorch import NeuralNet, NeuralNetRegressor
from skorch.utils import is_dataset, to_tensor
from torch.utils.data import TensorDataset

from .. import _layout
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
from ..exceptions import NonFinitePredictionWarning
from . import _checks, _lock, _persistence, _state

#: Held while a module is built from the seeded global RNG (``initialize_module``).
#: torch has one default generator per process: two threads building modules at
#: once (a threaded joblib or Dask search) would otherwise interleave their draws.
_GLOBAL_RNG_LOCK = threading.Lock()
#: positions per prediction block (``infer``) at the longest lengths
_BLOCK_POSITIONS = 1 << 14
#: one lock per estimator (not an attribute: estimators stay picklable and clonable)
_LOCKS = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.Lock()


def training_lock(net):
    """The lock that ``net``'s training (``with``) and its reads (``.reading()``) hold."""
    with _LOCKS_LOCK:
        lock = _LOCKS.get(net)
        if lock is None:
            lock = _LOCKS[net] = _lock.EstimatorLock()
        return lock


def pad_to_block(x, block):
    """``x`` (n, rows, channels) padded to a multiple of ``block`` sequences.

    The padding repeats the first sequence, valid data in either layout (an
    empty query-layout sequence would name position 0); callers drop the
    outputs of the padding.
    """
    return torch.cat([x, x[:1].expand(-len(x) % block, *x.shape[1:])])


class _SparseTokenRegressor(CallbackMixin, NeuralNetRegressor):
    """What every estimator shares; subclasses say which module to build."""

    #: constructor parameters forwarded to the module
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

    def __sklearn_is_fitted__(self):
        # skorch: fitted once a module exists; here also built with the current parameters
        return super().__sklearn_is_fitted__() and not _state.structure_changes(self)

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
                *super()._default_callbacks]

    def device_scope(self):
        """Within the block (this thread only), ``self.device`` reads "auto" resolved.

        skorch reads ``self.device`` wherever it places a tensor and does not know
        "auto"; nothing is written to the estimator.
        """
        return resolved_device(self)

    # -- building ------------------------------------------------------------------

    def initialize(self):
        """Build the module from the parameters alone, without data.

        Needs the sizes as parameters (``token_dim``, and for the FCN
        ``seq_len``), or a previous fit that learned them. This is skorch's
        route for loading weights: ``Estimator(..., token_dim=8).initialize()
        .load_params(f_params="weights.pt")``. A call that fails leaves the
        estimator as it was.

        Returns
        -------
        self : estimator
            This estimator, with a freshly built (untrained) module.
        """
        # the sizes come from the parameters (braindecode's route), not from data
        _checks.check_params(self)
        sizes = self._sizes_from_params()
        with _state.Transaction(self), self.device_scope():
            self._build(sizes)
            self.module_.eval()  # so that predict writes nothing, not even the mode
        return self

    def _sizes_from_params(self):
        sizes = {name: getattr(self, name, None) for name in ("token_dim", "seq_len")}
        for name, value in sizes.items():
            if value is None:  # re-initialising keeps the sizes a fit learned
                sizes[name] = self.__dict__.get(name + "_")
        missing = [name for name in self._sizes if sizes[name] is None]
        if missing:
            given = ", ".join(f"{name}=..." for name in missing)
            raise ValueError(
                f"{type(self).__name__}.initialize() builds the module from the "
                f"parameters, without data, and {' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} None (learned from X at fit). "
                f"Pass {given} to the constructor or set_params (e.g. "
                f"{type(self).__name__}({', '.join(f'{n}=8' for n in missing)})"
                ".initialize()), or call fit(X, y)."
            )
        return sizes["token_dim"], sizes["seq_len"], self._n_selected_from_params()

    def _n_selected_from_params(self):
        # The query layout's q says where the tokens end (T = rows - q): a size
        # the module needs, as token_dim; the indicator layout has none.
        if not _layout.has_query_rows(self.layout):
            return None
        n_selected = self.n_selected
        if n_selected is None:
            n_selected = self.__dict__.get("n_selected_")
        if n_selected is None:
            raise ValueError(
                f"{type(self).__name__}.initialize() builds the module without data, and "
                "in the query layout it needs n_selected, the number q of query rows "
                "after the tokens (learned from X at fit when None). Pass n_selected=... "
                f"(e.g. {type(self).__name__}(layout='query', n_selected=3, ...)."
                "initialize()), or call fit(X, y)."
            )
        return n_selected

    def _build(self, sizes):
        """Seed, record the sizes, and build everything with skorch's ``initialize``."""
        rng = check_random_state(self.random_state)
        self._seeds_ = rng.randint(np.iinfo(np.int32).max, size=3).tolist()
        self.token_dim_, self.seq_len_, self.n_selected_ = sizes
        self.n_features_in_ = self.token_dim_ + 1
        super().initialize()
        self.torch_rng_ = torch.Generator(device=self.device).manual_seed(self._seeds_[1])
        _state.record_build(self)
        return self

    def initialize_module(self):
        """Build ``module_`` from the parameters and the fitted sizes, seeded.

        Returns
        -------
        self : estimator
        """
        # the module's arguments are the top-level parameters plus the fitted sizes
        kwargs = {**self._module_kwargs(), **self.get_params_for("module")}
        # Seeded without touching the global RNG: the module is built on the CPU;
        # torch.manual_seed would also reseed every GPU. The lock makes this
        # safe from threads: the global generator is shared.
        with _GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(self._seeds_[0])
            self.module_ = self.initialized_instance(self.module, kwargs)
        return self

    def torch_compile(self, module, name):
        """Compile ``module`` in place when ``compile=True``; return it.

        In place (``nn.Module.compile``) rather than skorch's wrapper object:
        ``module_`` stays the module itself, with the ``state_dict`` keys of an
        uncompiled one (weights load whatever either side's ``compile``), and
        compile can be switched on and off on a fitted model.

        Parameters
        ----------
        module : torch.nn.Module
            The module (or criterion) just built.
        name : str
            Its name (``"module"``, ``"criterion"``).

        Returns
        -------
        module : torch.nn.Module
            The same object.
        """
        # skorch wraps the module in another object: its state_dict keys would change
        if self.compile:
            module.compile(**self.get_params_for("compile"))
        return module

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

    def _prepare_training(self, X, y, warm, routing_method, fit_params):
        """Everything ``fit`` does before skorch's training loop; returns the checked data.

        Checks the parameters, fit keywords and data; then builds the module
        (sizes from the data, seeded: ``_seeds_``, ``torch_rng_``) or, when
        ``warm`` and the fitted module matches, applies the changed settings to
        it. Call it inside ``_state.Transaction(self)`` (a failed call then changes nothing).
        """
        _checks.check_params(self)
        _checks.check_fit_params(self, fit_params, routing_method)
        continues = warm and _state.is_current(self)
        X, y, sizes = _checks.check_training_data(self, X, y, continues=continues)
        with self.device_scope():
            if continues:
                _state.apply_to_fitted(self)
                _state.rebuild_changed_components(self)
                if self.seq_len_ is None:  # built without data: the first length trained on
                    self.seq_len_ = sizes[1]
            else:
                self._build(sizes)
        return X, y, continues

    @reports_fit  # a task of scikit-learn's callbacks, each epoch a sub-task
    def _train(self, X, y, warm, routing_method, fit_params):
        with training_lock(self), _state.Transaction(self) as transaction:
            X, y, continues = self._prepare_training(X, y, warm, routing_method, fit_params)
            first = len(self.history) if continues else 0  # a fresh fit starts a new history
            try:
                with _persistence.fitting(), self.device_scope():
                    NeuralNet.partial_fit(self, X, y, _routing_method=routing_method,
                                          **fit_params)
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
            if not self._steps_since(first):
                # skorch swallows a Ctrl-C; before any step there is nothing to keep
                raise KeyboardInterrupt(
                    f"{type(self).__name__}.{routing_method} was interrupted before its "
                    "first optimisation step; the estimator is as it was before the call.")
            self.module_.eval()  # so that predict writes nothing, not even the mode
        return self

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

    # -- prediction: reads the estimator, writes nothing to it ---------------------

    def predict(self, X):
        """Predict the average of the selected tokens.

        Safe to call from several threads on one fitted estimator, also while
        another thread trains it (``partial_fit``): training and prediction hold
        the estimator's lock, so a prediction sees the weights between two
        training calls, or at the end of an epoch (while the fit runs its
        ``on_epoch_end`` callbacks: a thread such a callback starts and joins
        is served, not blocked), never half-updated ones. A sequence's prediction depends
        on that sequence and the weights only, not on the batch it is in: on the
        CPU bit for bit whatever ``batch_size`` (the paper's model runs its
        products in blocks of a fixed size; the encoder, the RNN and the FCN
        run their forward in blocks of a fixed size, ``infer``); on a GPU,
        where kernels may be chosen by the batch, up to float32 rounding.

        Parameters
        ----------
        X : array-like of shape (n_samples, seq_len, token_dim + 1)
            Tokens and the selection indicator. (A torch Dataset of such
            sequences is accepted too: skorch's scoring callbacks pass one.)

        Returns
        -------
        y_pred : ndarray of shape (n_samples, token_dim), float64
            As scikit-learn regressors return; the module computes in float32.

        Warns
        -----
        NonFinitePredictionWarning
            When some predictions are inf or NaN (the outputs overflow float32,
            e.g. on X far beyond the range trained on); ``score`` raises instead.
        """
        # checked input, float64 output, a warning on non-finite values
        with training_lock(self).reading():
            X = _checks.check_X(self, X)
            y_pred = self._predict_checked(X)
        problem = _non_finite(self, y_pred, X)
        if problem:
            warnings.warn(f"{problem} The predictions are returned as they are.",
                          NonFinitePredictionWarning, stacklevel=2)
        return y_pred

    def _predict_checked(self, X):
        with self.device_scope():
            # skorch's prediction loop (this class hides predict_proba itself)
            return NeuralNet.predict_proba(self, X).astype(np.float64)

    def infer(self, x, **fit_params):
        """The module's forward on a batch; at prediction, in blocks of a fixed size.

        With ``_predict_block`` set (the encoder, the RNN and the FCN), an
        eval-mode batch is padded with copies of its first sequence to a
        multiple of that many (fewer for sequences longer than 256 positions: as
        many as make 16384 positions) and run block by block. Every forward call
        at one length then has the same shape whatever ``batch_size``: matrix
        kernels round differently at different shapes, and a prediction must
        depend on its own sequence only. Training batches run as they come.

        Parameters
        ----------
        x : Tensor of shape (batch, seq_len, token_dim + 1)
        **fit_params : dict
            Further keywords of the module's forward.

        Returns
        -------
        y_pred : Tensor of shape (batch, token_dim)
        """
        # a prediction must not depend on the batch it is in
        with self.device_scope():  # also when skorch's forward calls it, outside ours
            x = to_tensor(x, device=self.device)
            if (self._predict_block is None or self.module_.training
                    or not isinstance(x, torch.Tensor)):
                return super().infer(x, **fit_params)
            return self._in_blocks(x, lambda chunk: super(_SparseTokenRegressor, self).infer(
                chunk, **fit_params))

    def _in_blocks(self, x, forward):
        """``forward`` over ``x`` in eval mode, in padded blocks of ``_block_for`` sequences."""
        block = self._block_for(x.shape[1])
        outputs = [forward(chunk) for chunk in pad_to_block(x, block).split(block)]
        return torch.cat(outputs)[:len(x)]

    def _block_for(self, seq_len):
        # fewer sequences per block when they are long, so that a block costs
        # about what a batch of 64 short ones does; it depends on the length only
        return max(1, min(self._predict_block, _BLOCK_POSITIONS // seq_len))

    @property
    def predict_proba(self):
        # skorch defines predict_proba on every net; a regressor has none
        raise AttributeError(f"{type(self).__name__} is a regressor: use predict.")

    def score(self, X, y, sample_weight=None):
        """R^2 of ``predict(X)`` against ``y``, averaged over the token_dim outputs.

        Parameters
        ----------
        X : array-like of shape (n_samples, seq_len, token_dim + 1)
            Tokens and the selection indicator.
        y : array-like of shape (n_samples, token_dim)
            The true averages of the selected tokens.
        sample_weight : array-like of shape (n_samples,) or None, default=None
            Weights of the samples in the R^2.

        Returns
        -------
        score : float
            1 is a perfect prediction, 0 that of the mean of ``y``.
        """
        # y checked against X, and no R^2 of non-finite predictions
        with training_lock(self).reading():
            X = _checks.check_X(self, X)
            y = _layout.check_target(y, X)
            y_pred = self._predict_checked(X)
        problem = _non_finite(self, y_pred, X)
        if problem:
            raise ValueError(f"{problem} No R^2 can be computed.")
        return r2_score(y, y_pred, sample_weight=sample_weight)

    def set_fit_request(self, **kwargs):
        """Refuse ``sample_weight``: ``fit`` does not take it (scikit-learn's routing).

        Parameters
        ----------
        **kwargs : dict
            Metadata names and whether ``fit`` requests them, as in scikit-learn.

        Returns
        -------
        self : estimator
        """
        _refuse_sample_weight_request(self, "fit", kwargs)
        return super().set_fit_request(**kwargs)

    def set_partial_fit_request(self, **kwargs):
        """Refuse ``sample_weight``, as ``set_fit_request`` does (``partial_fit`` takes none).

        Parameters
        ----------
        **kwargs : dict
            Metadata names and whether ``partial_fit`` requests them, as in scikit-learn.

        Returns
        -------
        self : estimator
        """
        _refuse_sample_weight_request(self, "partial_fit", kwargs)
        return super().set_partial_fit_request(**kwargs)

    # -- saving, loading, pickling -------------------------------------------------

    def state_files(self, files, use_safetensors=False):
        """``{f_key: bytes}``: what ``save_params(**files)`` writes, serialised in memory.

        Parameters
        ----------
        files : iterable of str
            The ``f_`` keys to serialise (``f_params``, ``f_optimizer``, ...).
        use_safetensors : bool, default=False

        Returns
        -------
        data : dict
        """
        return _persistence.state_files(self, files, use_safetensors)

    def save_params(self, f_params=None, f_optimizer=None, f_criterion=None, f_history=None,
                    use_safetensors=False, **kwargs):
        """Save the weights, optimizer, criterion and history, each file atomically.

        As skorch's ``save_params``, and: the weights file records what made
        it (the estimator class, its structural parameters and sizes, a
        format version), so that ``load_params`` can refuse weights of
        another model; each file is written to a temporary file beside it,
        fsynced and moved over the target only once every file of the call
        is written, so a crash or a full disk leaves the old files; a failed
        write raises an ``OSError`` naming the path and the cause.

        Parameters
        ----------
        f_params : str, path or file-like, default=None
            Where the module's weights go (torch's format, or safetensors with
            ``use_safetensors=True``); None saves none.
        f_optimizer, f_criterion : str, path or file-like, default=None
            Where the optimizer's or the criterion's state goes (torch's
            format only); None saves none.
        f_history : str, path or file-like, default=None
            Where the training history goes, as JSON; None saves none.
        use_safetensors : bool, default=False
            Write the weights as safetensors (tensors only, loading runs no
            code); needs the ``safetensors`` extra.
        **kwargs
            ``f_<name>`` for any other module, criterion or optimizer of the
            net, as skorch's ``save_params`` takes them.

        Returns
        -------
        None
        """
        # metadata with the weights, atomic writes
        with training_lock(self).reading():  # the weights of one step, never half-updated
            _persistence.save(self, dict(f_params=f_params, f_optimizer=f_optimizer,
                                         f_criterion=f_criterion, f_history=f_history,
                                         **kwargs), use_safetensors)

    def load_params(self, f_params=None, f_optimizer=None, f_criterion=None, f_history=None,
                    checkpoint=None, use_safetensors=False, **kwargs):
        """Load weights, optimizer, criterion and history: all of them, or nothing.

        As skorch's ``load_params``, and: every file is read and checked
        before anything changes, weights whose recorded parameters differ
        from this estimator's are refused with each difference and the fix
        named (weights saved without a record, by skorch or an earlier
        release, are checked by their keys and shapes), and if applying fails
        the estimator is put back as it was. ``checkpoint`` may be a
        :class:`~sparse_token_estimators.checkpoints.Checkpoint` or
        ``TrainEndCheckpoint`` (its manifest names the files of one epoch, in
        the format they were saved in) or skorch's own ``Checkpoint``. If a
        structural parameter changed since the module was built, the module
        is rebuilt from the current parameters first.

        Parameters
        ----------
        f_params : str, path or file-like, default=None
            The weights to load (as saved by ``save_params``); None loads none.
        f_optimizer, f_criterion : str, path or file-like, default=None
            The optimizer's or the criterion's state to load; None loads none.
        f_history : str, path or file-like, default=None
            The training history (JSON) to load; None loads none.
        checkpoint : Checkpoint, TrainEndCheckpoint or None, default=None
            Load the files a checkpoint callback saved instead of naming them.
        use_safetensors : bool, default=False
            Read the weights as safetensors.
        **kwargs
            ``f_<name>`` for any other module, criterion or optimizer of the
            net, as skorch's ``load_params`` takes them.

        Returns
        -------
        self : estimator
            This estimator, so that ``Est(...).initialize().load_params(...)``
            chains (skorch's ``load_params`` returns None).
        """
        # all files checked before anything changes; metadata checked against parameters
        with training_lock(self):
            return _persistence.load(
                self, dict(f_params=f_params, f_optimizer=f_optimizer, f_criterion=f_criterion,
                           f_history=f_history, **kwargs), checkpoint, use_safetensors)

    def __getstate__(self):
        # the training generator is not picklable as such; under the lock, as predict
        with training_lock(self).reading():
            return _persistence.pickled(super().__getstate__())

    def notify(self, method_name, **cb_kwargs):
        # at an epoch's end other threads' reads may go ahead (a callback's helper thread)
        if method_name != "on_epoch_end":
            return super().notify(method_name, **cb_kwargs)
        with training_lock(self).paused():
            return super().notify(method_name, **cb_kwargs)

    def __setstate__(self, state):
        # "auto" device and older pickles
        _persistence.unpickle(self, state, super().__setstate__)


_UNSET = object()


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


def _non_finite(net, y_pred, X):
    """What is wrong with predictions that are not all finite, and the fix; "" if none."""
    bad = ~np.isfinite(y_pred)
    if not bad.any():
        return ""
    largest = f" (largest |X| {float(np.abs(X).max()):.3g})" if isinstance(X, np.ndarray) else ""
    return (f"{type(net).__name__}.predict(X) returned {int(bad.sum())} non-finite value(s) "
            f"(inf or NaN) of {y_pred.size}: the model's outputs overflow float32 on this "
            f"X{largest}. Scale X as the training data was scaled, or refit on data of this "
            "range.")


def _refuse_sample_weight_request(net, method, requests):
    # the training methods refuse sample_weight: requesting it would only fail later,
    # inside a search
    if requests.get("sample_weight") not in (None, False):
        raise TypeError(
            f"{type(net).__name__}.{method} does not support sample_weight (every "
            "sequence is weighted equally), so it cannot be requested: "
            f"set_{method}_request(sample_weight=True) would route weights that {method} "
            "refuses. To weight sequences, repeat or resample them; "
            "score(X, y, sample_weight=...) does take weights "
            "(set_score_request(sample_weight=True)).")
