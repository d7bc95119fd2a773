"""The base class of the estimators: what every sparse-token regressor shares.

A new estimator subclasses ``_SparseTokenRegressor`` and declares only

- its module: the ``module`` default of its ``__init__`` (a torch module class);
- its parameters: keyword arguments of ``__init__``, stored under their names
  (skorch's and scikit-learn's convention), passed on to ``super().__init__``;
- their rules: ``_parameter_constraints`` (see ``_params``), and their group
  in ``_params.GROUPS`` (what a change does to a fitted estimator);
- what the module is built with: ``_module_params`` (parameter names) and
  ``_module_kwargs`` for the fitted sizes (``token_dim_``, ``seq_len_``);
  ``_sizes``, the sizes ``initialize()`` needs without data;
- which lengths it accepts: ``_check_seq_len(seq_len, fitting=...)``.

Everything else lives here or next door, one concern per module: the checks
run before anything is built (``_checks``), what a fitted module was built
with and what ``set_params`` does to it (``_fitted``), the training checks
(``callbacks``, installed by default), device helpers (``_device``), the data
layout (``_layout``) and the parameter rules (``_params``).

``fit``, ``partial_fit`` and ``initialize`` are transactions: every parameter,
routed value, fit keyword and the data are checked before anything is built;
what can only fail later (a callback, the first step, Ctrl-C before any step)
puts the estimator back as it was before the call.
"""


import threading
import warnings

import numpy as np
import torch
from sklearn.metrics import r2_score
from sklearn.utils import check_random_state
from skorch import NeuralNet, NeuralNetRegressor
from skorch.utils import is_dataset, to_tensor
from torch.utils.data import TensorDataset

from ._batching import TensorBatches
from ._checks import InputChecksMixin
from ._device import ResolvedDevice, resolved_device
from ._fitted import FittedStateMixin
from ._layout import check_target
from ._persistence import FITTING, PersistenceMixin
from .callbacks import (
    CosineSchedule,
    DivergenceCheck,
    EpochStepCheck,
    NoTrainingStepError,
    TrainingDivergedError,
    ValidationSplitCheck,
)
from .exceptions import NonFinitePredictionWarning

#: positions per prediction block (``_SparseTokenRegressor.infer``) at the longest lengths
#: Held while a module is built from the seeded global RNG (``initialize_module``).
#: torch has one default generator per process: two threads building modules at
#: once (a threaded joblib or Dask search) would otherwise interleave their draws
#: and each get weights of neither seed.
_GLOBAL_RNG_LOCK = threading.Lock()

_BLOCK_POSITIONS = 1 << 14



def pad_to_block(x, block):
    """``x`` (n, rows, channels) padded to a multiple of ``block`` sequences.

    The padding repeats the first sequence, valid data in either layout (an
    empty query-layout sequence would name position 0); callers drop the
    outputs of the padding.
    """
    return torch.cat([x, x[:1].expand(-len(x) % block, *x.shape[1:])])

class _SparseTokenRegressor(PersistenceMixin, InputChecksMixin, FittedStateMixin,
                            NeuralNetRegressor):
    """What both estimators share; subclasses say which module to build."""

    #: constructor parameters forwarded to the module
    _module_params = ()
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

    # -- scikit-learn and skorch conventions --------------------------------------

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        tags.input_tags.two_d_array = False
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = False
        return tags

    def get_params(self, deep=True, **kwargs):
        """Get the parameters, ``device`` as given (e.g. "auto", not what it resolves to).

        Parameters
        ----------
        deep : bool, default=True
            Also return the parameters of sub-objects (skorch's callbacks).

        Returns
        -------
        params : dict
            Parameter names mapped to their values.
        """
        params = super().get_params(deep=deep, **kwargs)
        params["device"] = self.__dict__["device"]
        return params

    @property
    def _default_callbacks(self):
        # skorch's get_default_callbacks returns this, and its get_params reads
        # this private property directly: overriding the public method alone
        # would leave the checks out of get_params before fit
        return [("validation_split_check", ValidationSplitCheck()),
                ("epoch_step_check", EpochStepCheck()),
                ("divergence_check", DivergenceCheck()),
                ("lr_schedule", CosineSchedule()),
                *super()._default_callbacks]

    def _device_scope(self):
        # skorch reads ``self.device`` and does not know "auto": within this
        # scope (this thread only, nothing written to self) it reads resolved
        return resolved_device(self)

    # -- building -----------------------------------------------------------------

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
        self._check_params()
        sizes = self._sizes_from_params()
        with self._transaction(), self._device_scope():
            self._initialize(sizes)
            self._set_training(False)  # so that predict writes nothing, not even the mode
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
        if self.layout != "query":
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

    def _initialize(self, sizes):
        """Build module, criterion, optimizer, callbacks and history for ``sizes``."""
        rng = check_random_state(self.random_state)
        self._seeds_ = rng.randint(np.iinfo(np.int32).max, size=3).tolist()
        self.token_dim_, self.seq_len_ = sizes[:2]
        # the query rows' count (query layout; None in the indicator layout)
        self.n_selected_ = sizes[2] if len(sizes) > 2 else None
        self.n_features_in_ = self.token_dim_ + 1
        super().initialize()
        self.torch_rng_ = torch.Generator(device=self.device).manual_seed(self._seeds_[1])
        self._record_build()
        return self

    def _module_kwargs(self):
        return {name: getattr(self, name) for name in self._module_params}

    def initialize_module(self):
        """Build ``module_`` from the parameters and the fitted sizes, seeded.

        Returns
        -------
        self : estimator
        """
        kwargs = {**self._module_kwargs(), **self.get_params_for("module")}
        # Seed the module's initial weights without touching the global RNG.
        # The module is built on the CPU; torch.manual_seed would also reseed
        # (and, before CUDA starts, record a stack trace for) every GPU.
        # The lock makes this safe from threads: the global generator is shared.
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
        if self.compile:
            module.compile(**self.get_params_for("compile"))
        return module

    # -- data path ----------------------------------------------------------------

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
        if is_dataset(X):
            return super().get_dataset(X, y)
        # np.require copies the read-only memory maps joblib hands to workers
        # (GridSearchCV with n_jobs), which torch warns about.
        X = torch.as_tensor(np.require(X, np.float32, "W")).to(self.device)
        if y is not None:
            return TensorDataset(X, torch.as_tensor(np.require(y, np.float32, "W")).to(self.device))
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
        iterator = super().get_iterator(dataset, training=training)
        if training and isinstance(iterator, TensorBatches) and iterator.generator is None:
            iterator.generator = self.torch_rng_  # shuffling and streams follow random_state
        return iterator

    def _set_training(self, training=True):
        # skorch sets the mode before every batch and has no public hook for it;
        # nn.Module.train walks the whole module tree each time, a cost that
        # counts in a small model's step: walk it only when the mode changes.
        modules = (getattr(self, name + "_") for name in self._modules + self._criteria)
        if any(getattr(module, "training", training) != training for module in modules):
            super()._set_training(training)

    # -- training -----------------------------------------------------------------

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
        return self._train(X, y, True, "partial_fit", fit_params)

    def _train(self, X, y, warm, routing_method, fit_params):
        self._check_params()
        self._check_fit_params(fit_params, routing_method)
        continues = warm and self._is_current()
        X, y, sizes = self._check_training_data(X, y, continues=continues)
        first = len(self.history) if continues else 0  # a fresh fit starts a new history
        with self._transaction() as transaction:
            try:
                fitting = FITTING.set(True)
                try:
                    with self._device_scope():
                        self._fit_steps(X, y, continues, sizes, routing_method, fit_params)
                finally:
                    FITTING.reset(fitting)
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
            self._set_training(False)  # so that predict writes nothing, not even the mode
        return self

    def _fit_steps(self, X, y, continues, sizes, routing_method, fit_params):
        """Build or continue, then skorch's training loop (in the device scope)."""
        if continues:
            self._apply_to_fitted()
            self._rebuild_changed_components()
            if self.seq_len_ is None:  # initialised without data: the first length trained on
                self.seq_len_ = sizes[1]
        else:
            self._initialize(sizes)
        super().partial_fit(X, y, _routing_method=routing_method, **fit_params)

    def _steps_since(self, first):
        """Optimisation steps recorded in ``history_`` from epoch ``first`` on."""
        return sum(1 for row in self.history[first:] for batch in row["batches"]
                   if "train_loss" in batch)

    # -- prediction: reads the estimator, writes nothing to it --------------------

    def predict(self, X):
        """Predict the average of the selected tokens.

        Safe to call from several threads on one fitted estimator: it writes
        nothing to the estimator. A sequence's prediction depends on that
        sequence and the weights only, not on the batch it is in: on the CPU
        bit for bit whatever ``batch_size`` (the paper's model runs its
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
        X = self._check_X(X)
        y_pred = self._predict_checked(X)
        problem = _non_finite(self, y_pred, X)
        if problem:
            warnings.warn(f"{problem} The predictions are returned as they are.",
                          NonFinitePredictionWarning, stacklevel=2)
        return y_pred

    def _predict_checked(self, X):
        with self._device_scope():
            # skorch's prediction loop (this class hides predict_proba itself)
            return NeuralNet.predict_proba(self, X).astype(np.float64)

    def infer(self, x, **fit_params):
        """The module's forward on a batch; at prediction, in blocks of a fixed size.

        With ``_predict_block`` set (the encoder, the RNN and the FCN), an
        eval-mode batch is padded with copies of its first sequence to a multiple of that
        many (fewer for sequences longer than 256 positions: as many as make
        16384 positions) and run block by block. Every forward call at one
        length then has the same shape whatever ``batch_size``: matrix
        kernels round differently at different shapes, and a prediction
        must depend on its own sequence only (on the CPU: bit for bit across
        batch sizes; tested). Training batches run as they come.

        Parameters
        ----------
        x : Tensor of shape (batch, seq_len, token_dim + 1)
        **fit_params : dict
            Further keywords of the module's forward.

        Returns
        -------
        y_pred : Tensor of shape (batch, token_dim)
        """
        x = to_tensor(x, device=self.device)
        if self._predict_block is None or self.module_.training or not isinstance(x, torch.Tensor):
            return super().infer(x, **fit_params)
        forward = super(_SparseTokenRegressor, self).infer
        return self._in_blocks(x, lambda chunk: forward(chunk, **fit_params))

    def _in_blocks(self, x, forward):
        """``forward`` over ``x`` in eval mode, in blocks of ``_block_for`` sequences.

        ``x`` is padded (``pad_to_block``) so that every call has one shape
        whatever the batch; the padding's outputs are dropped.
        """
        block = self._block_for(x.shape[1])
        outputs = [forward(chunk) for chunk in pad_to_block(x, block).split(block)]
        return torch.cat(outputs)[:len(x)]

    def _block_for(self, seq_len):
        # fewer sequences per block when they are long, so that a block costs
        # about what a batch of 64 short ones does; it depends on the length
        # only, never on the batch
        return max(1, min(self._predict_block, _BLOCK_POSITIONS // seq_len))

    def forward_iter(self, X, training=False, device="cpu"):
        """skorch's ``forward_iter``, with ``device="auto"`` resolved (for ``forward``).

        Parameters
        ----------
        X : array-like or Dataset
        training : bool, default=False
        device : str, default="cpu"
            Where the outputs are put.

        Yields
        ------
        y_pred : Tensor of shape (batch, token_dim)
        """
        with self._device_scope():
            yield from super().forward_iter(X, training=training, device=device)

    @property
    def predict_proba(self):
        # skorch defines predict_proba on every net; a regressor has none.
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
        X = self._check_X(X)
        y = check_target(y, X)
        y_pred = self._predict_checked(X)
        problem = _non_finite(self, y_pred, X)
        if problem:
            raise ValueError(f"{problem} No R^2 can be computed.")
        return r2_score(y, y_pred, sample_weight=sample_weight)


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
