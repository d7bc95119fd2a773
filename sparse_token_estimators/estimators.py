"""scikit-learn estimators for sparse token selection, built on skorch.

``SparseTokenTransformer`` and ``SparseTokenFCN`` are ``NeuralNetRegressor``
subclasses: every skorch feature (callbacks, ``history_``, ``warm_start``,
``partial_fit``, ``optimizer``, ``lr``, checkpoints, ...) works, and the widths
are top-level parameters that ``GridSearchCV`` searches by name. They add only
what the task needs: input checks against the data layout, every parameter
checked before training (the rules live in ``_params``), sizes learned at
``fit`` unless given, seeding from ``random_state``, ``device="auto"``, a data
path that puts the data on the device once per fit and slices batches from it
(or draws them there, from a ``SparseSelectionStream``), and ``set_params``
that never leaves a fitted-looking model whose module no longer matches.
"""

import math
from contextlib import contextmanager

import numpy as np
import torch
from sklearn.exceptions import NotFittedError
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted
from skorch import NeuralNet, NeuralNetRegressor
from skorch.dataset import ValidSplit, unpack_data
from skorch.utils import is_dataset, to_numpy, to_tensor
from torch.utils.data import TensorDataset

from . import _params
from ._batching import TensorBatches
from ._device import _generator_on, resolve_device
from ._layout import check_target, check_tokens
from ._persistence import PersistenceMixin
from .datasets import SparseSelectionStream
from .modules import FullyConnectedNet, SparseTokenAttention
from .positional import ENCODINGS


class TrainingDivergedError(RuntimeError):
    """Training made the loss or the weights NaN or infinite.

    Raised by ``fit`` and ``partial_fit``; the estimator is left unfitted.

    Examples
    --------
    >>> import torch
    >>> from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
    >>> X, y = make_sparse_selection(64, seq_len=5, token_dim=2, random_state=0)
    >>> est = SparseTokenFCN(hidden_width=8, lr=1e30, optimizer=torch.optim.SGD,
    ...                      batch_size=16, random_state=0)
    >>> try:
    ...     est.fit(X, y)
    ... except TrainingDivergedError:
    ...     print("diverged; fitted:", est.initialized_)
    diverged; fitted: False
    """


class _NoTrainingStep(Exception):
    """An epoch of the training loop ran without one optimisation step."""


def _same(a, b):
    """``a == b`` for parameter values of any kind (arrays, classes, objects)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an array's elementwise ==, or a type that refuses ==
        return False


def _same_device(a, b):
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device()
    return (current if a.index is None else a.index) == (current if b.index is None else b.index)


_UNSET = "(unset)"

class _SparseTokenRegressor(PersistenceMixin, NeuralNetRegressor):
    """What both estimators share; subclasses say which module to build."""

    #: constructor parameters forwarded to the module
    _module_params = ()
    #: the sizes the module is built with; each is a parameter (None: learned)
    _sizes = ("token_dim",)
    #: "applied" parameters that are attributes of the module, set on the fitted one
    _module_attributes = ()

    def __init__(self, module, *, token_dim=None, random_state=None,
                 optimizer=torch.optim.Adam, lr=0.01, max_epochs=30, batch_size=256,
                 iterator_train=TensorBatches, iterator_valid=TensorBatches,
                 train_split=None, verbose=0, device="auto", **kwargs):
        kwargs.setdefault("iterator_train__shuffle", True)
        super().__init__(
            module, optimizer=optimizer, lr=lr, max_epochs=max_epochs,
            batch_size=batch_size, iterator_train=iterator_train,
            iterator_valid=iterator_valid, train_split=train_split,
            verbose=verbose, device=device, **kwargs,
        )
        self.token_dim = token_dim
        self.random_state = random_state

    # -- scikit-learn conventions -------------------------------------------------

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        tags.input_tags.two_d_array = False
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = False
        return tags

    def __sklearn_is_fitted__(self):
        # skorch: fitted once a module exists. Here also: built with the
        # current structural parameters.
        return super().__sklearn_is_fitted__() and not self._structure_changes()

    # -- devices ------------------------------------------------------------------

    @contextmanager
    def _device_scope(self):
        # skorch reads ``self.device`` in many places and does not know "auto";
        # resolve it for the duration of a call and give the parameter back
        # unchanged, so that clone / get_params still see what the user set.
        requested = self.__dict__["device"]
        self.__dict__["device"] = resolve_device(requested)
        try:
            yield
        finally:
            self.__dict__["device"] = requested

    # -- parameters -------------------------------------------------------------

    def _check_params(self, names=None):
        """Validate the parameters (all, or those in ``names``) before they are used.

        The rules are ``_parameter_constraints`` (from ``_params``), checked
        by scikit-learn's own parameter validation; skorch's check of routed
        ``prefix__name`` arguments runs here too, before anything is built.
        """
        params = self.get_params(deep=False)
        if names is not None:
            params = {name: params[name] for name in names if name in params}
        _params.validate(self._parameter_constraints, params, type(self).__name__)
        if names is None:
            self._check_routed_names()
        if "device" in params:
            resolve_device(self.device)  # an absent GPU is a fact of the machine

    def _check_routed_names(self):
        # skorch's check of prefix__name arguments, before anything is built:
        # skorch learns the component prefixes (module, criterion, optimizer)
        # as it builds them, so name them for the check.
        had = "prefixes_" in self.__dict__
        saved = self.__dict__.get("prefixes_")
        components = ["module", "criterion", "optimizer"]
        self.__dict__["prefixes_"] = [*self.prefixes_, *(c for c in components
                                                         if c not in self.prefixes_)]
        try:
            super()._validate_params()
        finally:
            if had:
                self.__dict__["prefixes_"] = saved
            else:
                del self.__dict__["prefixes_"]

    def _structure(self):
        return {name: value for name, value in self.get_params(deep=False).items()
                if _params.is_structural(name)}

    def _components(self):
        """What the criterion and optimizer were built from."""
        return {name: value for name, value in self.get_params(deep=False).items()
                if name in ("criterion", "optimizer") or name.startswith("criterion__")}

    def _structure_changes(self):
        """``(name, built with, now)`` for each structural change since the build."""
        built = self.__dict__.get("_built_with_")
        if built is None or "module_" not in self.__dict__:
            return []
        built, now = built["structure"], self._structure()
        changes = []
        for name in sorted(set(built) | set(now)):
            if name in ("token_dim", "seq_len"):
                # None learns the size: only a given size can differ from the fitted one
                fitted = self.__dict__.get(name + "_")
                if now.get(name) is not None and now[name] != fitted:
                    changes.append((name, fitted, now[name]))
            elif not _same(built.get(name, _UNSET), now.get(name, _UNSET)):
                changes.append((name, built.get(name, _UNSET), now.get(name, _UNSET)))
        return changes

    def _is_current(self):
        """Whether there is a module to continue from, built as the parameters say."""
        return self.initialized_ and "module_" in self.__dict__ and not self._structure_changes()

    def _check_fitted(self):
        changes = self._structure_changes()
        if changes:
            what = "; ".join(f"{name} {old!r} -> {new!r}" for name, old, new in changes)
            name, old, _ = changes[0]
            raise NotFittedError(
                f"This {type(self).__name__} is not fitted for its current parameters: "
                f"{what} since its module was built. Call fit to train a model with the "
                f"new parameters, or set {name}={old!r} back to use the fitted one."
            )
        check_is_fitted(self)

    def set_params(self, **params):
        """Set parameters; nothing that is fitted is rebuilt or lost here.

        On a fitted estimator skorch's own ``set_params`` rebuilds the module
        (fresh weights) for ``module__*`` and ``compile``, the criterion and
        optimizer for ``criterion__*``, and the callbacks for ``callbacks``
        (and refuses ``iterator_train__*``). Here those are only recorded,
        like every other parameter: a structural change (``_params.GROUPS``)
        makes the estimator read as unfitted until the next ``fit`` (or until
        the value is set back); an applied one (``n_pe_draws``, ``device``,
        ``compile``) reaches the fitted module at its next use; settings are
        read where they are used (a changed criterion, optimizer or callback
        list is rebuilt when training continues). ``lr`` and
        ``optimizer__*`` still reach the live optimizer at once, and
        ``callbacks__*`` the live callbacks, as in skorch.
        """
        deferred = {key: value for key, value in params.items()
                    if key == "callbacks" or self._is_deferred(key)}
        super().set_params(**{k: v for k, v in params.items() if k not in deferred})
        for key, value in deferred.items():
            setattr(self, key, value)
            if "__" in key:  # skorch checks routed names when training starts
                self._params_to_validate.add(key)
        return self

    def _is_deferred(self, key):
        # skorch's "special" parameters: those it would act on by rebuilding
        if self._is_virtual_param(key) or key.startswith("callbacks"):
            return False
        return "__" in key or any(key.startswith(prefix) for prefix in self.prefixes_)

    # -- building -----------------------------------------------------------------

    def initialize(self):
        """Build the module from the parameters alone, without data.

        Needs the sizes as parameters (``token_dim``, and for the FCN
        ``seq_len``), or a previous fit that learned them. This is skorch's
        route for loading weights: ``Estimator(..., token_dim=8).initialize()
        .load_params(f_params="weights.pt")``. Returns self.
        """
        self._check_params()
        return self._initialize(self._sizes_from_params())

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
        return sizes["token_dim"], sizes["seq_len"]

    def _initialize(self, sizes):
        """Build module, criterion, optimizer, callbacks and history for ``sizes``."""
        rng = check_random_state(self.random_state)
        self._seeds_ = rng.randint(np.iinfo(np.int32).max, size=3).tolist()
        self.token_dim_, self.seq_len_ = sizes
        self.n_features_in_ = self.token_dim_ + 1
        with self._device_scope():
            super().initialize()
            self.torch_rng_ = torch.Generator(device=self.device).manual_seed(self._seeds_[1])
        self._built_with_ = {
            "structure": self._structure(), "components": self._components(),
            "compile": self.get_params_for("compile") if self.compile else None,
            "callbacks": self.callbacks,
        }
        return self

    def _module_kwargs(self):
        return {name: getattr(self, name) for name in self._module_params}

    def initialize_module(self):
        kwargs = {**self._module_kwargs(), **self.get_params_for("module")}
        # Seed the module's initial weights without touching the global RNG.
        # The module is built on the CPU; torch.manual_seed would also reseed
        # (and, before CUDA starts, record a stack trace for) every GPU.
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(self._seeds_[0])
            self.module_ = self.initialized_instance(self.module, kwargs)
        return self

    def torch_compile(self, module, name):
        # In place (nn.Module.compile) rather than skorch's wrapper object:
        # module_ stays the module itself, with the state_dict keys of an
        # uncompiled one (weights load whatever either side's compile), and
        # compile can be switched on and off on a fitted model.
        if self.compile:
            module.compile(**self.get_params_for("compile"))
        return module

    # -- applying parameters to a fitted model ------------------------------------

    def _apply_to_fitted(self):
        """Bring the fitted model in line with the "applied" parameters.

        Called (in the device scope) before a prediction and before a
        continued fit: ``device`` moves the module, optimizer state and
        training generator; module attributes (``n_pe_draws``) are set;
        ``compile`` compiles or un-compiles the module in place.
        """
        self._move_to_device()
        for name in self._module_attributes:
            if getattr(self.module_, name) != getattr(self, name):
                setattr(self.module_, name, getattr(self, name))
        wanted = self.get_params_for("compile") if self.compile else None
        for name in self._modules + self._criteria:
            module = getattr(self, name + "_", None)
            if not isinstance(module, torch.nn.Module):
                continue
            # nn.Module.compile keeps the compiled call here; unpickling drops it
            compiled = getattr(module, "_compiled_call_impl", None) is not None
            if wanted is None and compiled:
                module._compiled_call_impl = None
            elif wanted is not None and (not compiled or wanted != self._built_with_["compile"]):
                module.compile(**wanted)
        self._built_with_["compile"] = wanted

    def _move_to_device(self):
        if self.device is None:  # skorch's "leave the tensors where they are"
            return
        tensors = [*self.module_.parameters(), *self.module_.buffers()]
        if not tensors or _same_device(tensors[0].device, self.device):
            return
        for name in self._modules + self._criteria:
            component = getattr(self, name + "_", None)
            if isinstance(component, torch.nn.Module):
                component.to(self.device)  # in place: the optimizer keeps its parameters
        for name in self._optimizers:
            optimizer = getattr(self, name + "_", None)
            if optimizer is not None:  # loading casts its state to the parameters' device
                optimizer.load_state_dict(optimizer.state_dict())
        rng = self.torch_rng_
        self.torch_rng_ = _generator_on(rng.device.type, rng.get_state(), self.device)

    def _rebuild_changed_components(self):
        # warm_start / partial_fit keep skorch's criterion, optimizer and
        # callbacks; those whose parameters changed are rebuilt, so that the
        # setting is honoured (the weights stay; a rebuilt optimizer's state
        # starts afresh).
        built = self._built_with_
        if not all(_same(value, built["components"].get(name, _UNSET))
                   for name, value in self._components().items()):
            self._initialize_criterion()
            self._initialize_optimizer()
            built["components"] = self._components()
        if self.callbacks is not built["callbacks"]:
            self._initialize_callbacks()
            built["callbacks"] = self.callbacks

    def _forget_module(self):
        # Back to skorch's uninitialized state: the estimator is unfitted
        # (predict raises NotFittedError), and set_params / fit work as on a
        # new one; history_ is kept.
        for name in self._modules + self._criteria + self._optimizers:
            self.__dict__.pop(name + "_", None)
        self.virtual_params_ = {}
        self.initialized_ = False

    # -- data path ----------------------------------------------------------------

    def get_dataset(self, X, y=None):
        if is_dataset(X):
            return super().get_dataset(X, y)
        # Converted and moved once per fit / predict; batches are slices.
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
        iterator = super().get_iterator(dataset, training=training)
        if training and isinstance(iterator, TensorBatches) and iterator.generator is None:
            iterator.generator = self.torch_rng_  # shuffling and streams follow random_state
        return iterator

    def _set_training(self, training=True):
        # skorch sets the mode before every batch, and nn.Module.train walks
        # the whole module tree each time: a few percent of a small model's
        # step. Walk it only when the mode changes.
        modules = (getattr(self, name + "_") for name in self._modules + self._criteria)
        if any(getattr(module, "training", training) != training for module in modules):
            super()._set_training(training)

    def run_single_epoch(self, iterator, training, prefix, step_fn, **fit_params):
        super().run_single_epoch(iterator, training, prefix, step_fn, **fit_params)
        if training and self.history[-1, "train_batch_count"] == 0:
            raise _NoTrainingStep(self._why_no_batch(iterator))

    def _why_no_batch(self, iterator):
        epoch = len(self.history)
        head = f"Epoch {epoch} took no optimisation step: iterator_train yielded no batch"
        dataset = getattr(iterator, "dataset", None)
        batch_size = getattr(iterator, "batch_size", None)
        try:
            n = len(dataset)
        except TypeError:
            n = None
        if n == 0:
            return f"{head}, as the training data is empty (check train_split)."
        if n is not None and getattr(iterator, "drop_last", False) and n < batch_size:
            return (f"{head}: from {n} training sequences in batches of "
                    f"batch_size={batch_size} with drop_last=True, the only batch is "
                    f"incomplete and dropped. Lower batch_size to at most {n}, or set "
                    "iterator_train__drop_last=False.")
        return (f"{head} (from {n} training sequences). Check iterator_train: it must "
                "yield batches in every epoch (a generator used up in one epoch "
                "yields nothing in the next).")

    def on_batch_end(self, net, batch=None, training=False, **kwargs):
        super().on_batch_end(net, batch=batch, training=training, **kwargs)
        if training and not math.isfinite(loss := self.history[-1, "batches", -1, "train_loss"]):
            self._diverged(f"the training loss became {loss}")

    def on_train_end(self, net, **kwargs):
        super().on_train_end(net, **kwargs)
        # The last optimizer step can break the weights with no loss left to show it.
        if not all(torch.isfinite(p).all() for p in self.module_.parameters()):
            self._diverged("the weights became NaN or infinite")

    def _diverged(self, what):
        # Forget the broken weights rather than keep a model that predicts
        # NaN; history_ keeps the losses that led here.
        self._forget_module()
        optimizer = getattr(self.optimizer, "__name__", self.optimizer)
        raise TrainingDivergedError(
            f"Training diverged: {what} in epoch {len(self.history)} (lr={self.lr}, "
            f"optimizer={optimizer}). Lower lr (e.g. lr={self.lr / 10:g}), or rescale "
            "X and y if their values are very large, and fit again. The estimator "
            "was reset to unfitted; history_ keeps the losses up to the divergence."
        )

    # -- training -----------------------------------------------------------------

    def fit(self, X, y=None, **fit_params):
        """Fit on ``X`` of shape (n_samples, seq_len, token_dim + 1) and ``y``.

        ``X`` may also be a :class:`~sparse_token_estimators.SparseSelectionStream`
        (with ``y=None``): every epoch then trains on fresh samples. Builds a
        fresh module unless ``warm_start`` is True and the fitted one matches
        the parameters; sizes left as None are learned from ``X``. Every
        parameter is checked first; a fit that would take no optimisation
        step raises instead of returning an untrained model.
        """
        return self._train(X, y, self.warm_start, "fit", fit_params)

    def partial_fit(self, X, y=None, classes=None, **fit_params):
        """Continue training on ``X``, ``y`` (or a stream); build the module first if needed."""
        return self._train(X, y, True, "partial_fit", fit_params)

    def _train(self, X, y, warm, routing_method, fit_params):
        self._check_params()
        continues = warm and self._is_current()
        X, y, sizes = self._check_training_data(X, y, continues=continues)
        with self._device_scope():
            if continues:
                self._apply_to_fitted()
                self._rebuild_changed_components()
                if self.seq_len_ is None:  # initialised without data: the first length trained on
                    self.seq_len_ = sizes[1]
            else:
                self._initialize(sizes)
            n_epochs = len(self.history)
            try:
                super().partial_fit(X, y, _routing_method=routing_method, **fit_params)
            except _NoTrainingStep as exc:
                self.history.pop()  # the empty epoch
                trained = continues or len(self.history) > n_epochs
                if not trained:
                    self._forget_module()
                state = ("The estimator keeps its model as trained before this epoch."
                         if trained else "The estimator was reset to unfitted.")
                raise ValueError(f"{exc} {state}") from None
        return self

    def _check_training_data(self, X, y, *, continues):
        """Validate the training data against the parameters; return it and its sizes."""
        if isinstance(X, SparseSelectionStream):
            self._check_stream(X, y)
            token_dim, seq_len, where = X.token_dim, X.seq_len, "the stream"
            if continues and token_dim != self.token_dim_:
                raise ValueError(
                    f"The stream has token_dim {token_dim}, but the estimator was "
                    f"fitted with token_dim {self.token_dim_}. Continue on a stream "
                    "with the token_dim seen in fit."
                )
        else:
            X = check_tokens(X, token_dim=self.token_dim_ if continues else None)
            y = check_target(y, X)
            token_dim, seq_len, where = X.shape[2] - 1, X.shape[1], f"X of shape {X.shape}"
        if continues:
            self._check_seq_len(seq_len, fitting=False)
        else:
            for name, value in (("token_dim", token_dim), ("seq_len", seq_len)):
                given = getattr(self, name, None)
                if given is not None and given != value:
                    raise ValueError(
                        f"{where} has {name} {value}, but {type(self).__name__} was "
                        f"given {name}={given}. Set {name}=None to learn it from the "
                        f"data, or pass data with {name} {given}."
                    )
            self._check_seq_len(seq_len, fitting=True)
        return X, y, (token_dim, seq_len)

    def _check_stream(self, stream, y):
        if y is not None:
            raise ValueError(
                "y must be None when X is a SparseSelectionStream: the stream draws "
                "the targets with the sequences. Call fit(stream)."
            )
        if isinstance(self.train_split, ValidSplit):
            raise ValueError(
                f"train_split={type(self.train_split).__name__}(...) splits a fixed "
                "dataset and cannot "
                "split a stream of fresh samples. Use train_split=None, and score the "
                "fitted estimator on held-out data from make_sparse_selection."
            )
        if not (isinstance(self.iterator_train, type)
                and issubclass(self.iterator_train, TensorBatches)):
            raise ValueError(
                f"iterator_train={self.iterator_train!r} cannot draw a stream's "
                "fresh batches; fit on a SparseSelectionStream with the default "
                "iterator_train=TensorBatches."
            )
        ours = resolve_device(self.device)
        if ours is not None and not _same_device(resolve_device(stream.device), ours):
            raise ValueError(
                f"The stream draws on {stream.device!r} ({resolve_device(stream.device)}) "
                f"but {type(self).__name__} trains on {self.device!r} ({ours}): every "
                f"batch would be copied. Make the stream with device={self.device!r}."
            )

    def _check_seq_len(self, seq_len, *, fitting):
        """Raise if this estimator cannot take sequences of ``seq_len``."""

    # -- prediction ---------------------------------------------------------------

    def _check_X(self, X):
        """Check that the estimator is fitted and ``X`` fits it; return ``X``."""
        if isinstance(X, SparseSelectionStream):
            raise TypeError(
                "A SparseSelectionStream is for training; predict and score take an "
                "array X of shape (n_samples, seq_len, token_dim + 1). Draw held-out "
                "data with make_sparse_selection(n_samples, seq_len, token_dim, "
                "n_selected, random_state=...)."
            )
        self._check_fitted()
        self._check_params(_params.PREDICTION)
        X = check_tokens(X, token_dim=self.token_dim_)
        self._check_seq_len(X.shape[1], fitting=False)
        return X

    def forward_iter(self, X, training=False, device="cpu"):
        with self._device_scope():
            yield from super().forward_iter(X, training=training, device=device)

    def predict(self, X):
        """Predict the average of the selected tokens, shape (n_samples, token_dim).

        Returns float64, as scikit-learn regressors do; the module computes
        in float32.
        """
        X = self._check_X(X)
        with self._device_scope():
            self._apply_to_fitted()
            # skorch's prediction loop (this class hides predict_proba itself)
            return NeuralNet.predict_proba(self, X).astype(np.float64)

    @property
    def predict_proba(self):
        # skorch defines predict_proba on every net; a regressor has none.
        raise AttributeError(f"{type(self).__name__} is a regressor: use predict.")

    def score(self, X, y, sample_weight=None):
        """R^2 of ``predict(X)`` against ``y``, averaged over the token_dim outputs."""
        X = self._check_X(X)
        y = check_target(y, X)
        return super().score(X, y, sample_weight=sample_weight)


class SparseTokenTransformer(_SparseTokenRegressor):
    """One-layer transformer for sparse token selection (Wang et al., ICML 2024).

    A scikit-learn regressor (a skorch ``NeuralNetRegressor``) wrapping
    :class:`~sparse_token_estimators.modules.SparseTokenAttention`: positions
    carry random near-orthogonal vectors p_i in R^{d_p}, the selected subset S
    forms the query z = sum_{i in S} p_i, position i scores p_i^T W z with one
    trainable d_p x d_p matrix W (initialised at zero), and the prediction is
    the attention-weighted average of the tokens. The width is d + d_p, with
    d_p = ``pe_dim``; the theory needs d_p of order q log T. With the
    stochastic encoding the fitted model predicts at any sequence length.

    Parameters
    ----------
    module : torch module class, default=SparseTokenAttention
        Built with ``token_dim`` and the parameters below.
    token_dim : int or None, default=None
        Token dimension d. None: learned from ``X`` at a fresh ``fit``. Given:
        ``initialize()`` builds the module without data (to load weights, see
        the Notes), and ``fit`` refuses ``X`` of another token_dim.
    pe_dim : int, default=64
        Positional-encoding dimension d_p.
    positional_encoding : {"stochastic", "fixed", "sinusoidal", "learned", \
"randomized"}, default="stochastic"
        Where the positional vectors p_i come from (``positional.ENCODINGS``;
        only the p_i change, not the model):

        - "stochastic": fresh random unit vectors for every sequence, any
          length at predict time (the paper's);
        - "fixed": one table of ``max_seq_len`` random unit vectors drawn at
          init (the paper's baseline);
        - "sinusoidal": the sin / cos table of Vaswani et al. (2017), rows
          scaled to unit norm; any length. At T=20 its rows span only about
          10 dimensions, so it learns the task only partly (held-out R^2
          0.47 at T=20, d=8, q=3, where the others reach 0.97-1.0; README);
        - "learned": a trainable table of ``max_seq_len`` rows, starting at
          random unit vectors;
        - "randomized": Ruoss et al. (ACL 2023): each sequence takes the rows
          of a random unit-vector table at a sorted random subset of
          ``max_seq_len`` positions, in training and, as in their code, at
          prediction.
    max_seq_len : int, default=256
        Number of positions of the table encodings ("fixed", "learned",
        "randomized"): the longest sequence they accept. Unused by the others.
    n_pe_draws : int, default=8
        The attention is averaged over this many positional draws (random
        encodings: "stochastic", "randomized"), in training and at
        prediction; averaging lowers the random part of the error (1 is the
        paper's model). It also lets the learned W ~ c I grow larger before
        crosstalk makes a larger c worse, and a larger c keeps the attention
        sharp on longer sequences: trained at T=10 with pe_dim=128, held-out
        R^2 at 4T is 0.91 with 4 draws and 0.94 with 8, for 1.6x the training
        time. At prediction the draws come from a seed fixed at fit and kept
        in the module's ``state_dict``, so a prediction depends only on its
        own sequence and on the weights. The deterministic encodings ignore
        it: all their draws would be the same.
    output_map : bool, default=False
        Add a trainable linear map after the attention (off in the paper).
    random_state : int, RandomState or None, default=None
        Seeds the initial weights, the training positional draws, the shuffling
        and the prediction draws: the same int gives the same fitted model.
    optimizer, lr, max_epochs, batch_size, train_split, verbose, **kwargs
        As in :class:`skorch.NeuralNetRegressor`. The defaults (Adam, lr=0.02,
        batch_size=256, 15 epochs) bring W to its best scale within 15 epochs
        of about 20000 sequences; with far fewer sequences, raise
        ``max_epochs``. A larger lr learns faster but leaves W less aligned
        with the identity. ``train_split=None``: no internal validation split
        (scikit-learn's searches do the splitting).
    device : str, default="auto"
        "auto" (a GPU when present), "cpu", "cuda" or "cuda:N".

    Attributes
    ----------
    module_ : SparseTokenAttention
        The fitted module; ``module_.W`` is the learned key-query matrix.
    n_features_in_ : int
        token_dim + 1, the last axis of ``X``.
    token_dim_ : int
        Token dimension d the module was built with.
    seq_len_ : int or None
        Sequence length T of the data the module was first trained on (it
        fixes nothing: the stochastic encoding predicts at any length). None
        for a module built by ``initialize()`` without data and not trained
        since; the first ``partial_fit`` or warm-started ``fit`` sets it.
    history_ : skorch.History
        Per-epoch training record.

    Notes
    -----
    Changing a parameter of a fitted estimator never leaves it predicting
    with a module that no longer matches (``_params.GROUPS``). A structural
    parameter (``pe_dim``, ``positional_encoding``, ``max_seq_len``,
    ``output_map``, ``token_dim``, ``module``, ``module__*``) makes it read as
    unfitted: ``predict`` raises ``NotFittedError`` naming the change, the
    next ``fit`` or ``partial_fit`` starts afresh even with
    ``warm_start=True``, and setting the value back restores the fitted
    model. ``n_pe_draws``, ``device`` and ``compile`` are applied to the
    fitted module at its next use (``device`` moves it, with the optimizer
    state). Every other parameter is a setting that keeps the fit.

    To rebuild a fitted model elsewhere, save its weights
    (``est.save_params(f_params="w.safetensors", use_safetensors=True)``) and
    load them into an estimator built from the same constructor parameters,
    with ``token_dim`` given: ``SparseTokenTransformer(pe_dim=..., token_dim=d)
    .initialize().load_params(f_params="w.safetensors", use_safetensors=True)``.
    The prediction-time positional draws are seeded by a buffer of the module,
    so the loaded model predicts bit for bit as the saved one, whatever its
    ``random_state``.

    Examples
    --------
    >>> from sparse_token_estimators import make_sparse_selection, SparseTokenTransformer
    >>> X, y = make_sparse_selection(2000, seq_len=10, token_dim=4, random_state=0)
    >>> est = SparseTokenTransformer(pe_dim=32, max_epochs=5, random_state=0).fit(X, y)
    >>> est.predict(X[:3]).shape
    (3, 4)
    >>> X_long, _ = make_sparse_selection(5, seq_len=40, token_dim=4, random_state=1)
    >>> est.predict_attention(X_long).shape
    (5, 40)
    """

    _parameter_constraints = _params.TRANSFORMER
    _module_params = ("pe_dim", "positional_encoding", "max_seq_len", "n_pe_draws",
                      "output_map")
    _module_attributes = ("n_pe_draws",)

    def __init__(self, module=SparseTokenAttention, *, token_dim=None, pe_dim=64,
                 positional_encoding="stochastic", max_seq_len=256, n_pe_draws=8,
                 output_map=False, random_state=None, optimizer=torch.optim.Adam,
                 lr=0.02, max_epochs=15, batch_size=256, train_split=None, verbose=0,
                 device="auto", **kwargs):
        super().__init__(
            module, token_dim=token_dim, random_state=random_state, optimizer=optimizer,
            lr=lr, max_epochs=max_epochs, batch_size=batch_size, train_split=train_split,
            verbose=verbose, device=device, **kwargs,
        )
        self.pe_dim = pe_dim
        self.positional_encoding = positional_encoding
        self.max_seq_len = max_seq_len
        self.n_pe_draws = n_pe_draws
        self.output_map = output_map

    def _check_seq_len(self, seq_len, *, fitting):
        encoding = ENCODINGS[self.positional_encoding]
        if not encoding.takes_any_length and seq_len > self.max_seq_len:
            raise ValueError(
                f"X has seq_len {seq_len} but the {self.positional_encoding} "
                f"positional encoding has only max_seq_len={self.max_seq_len} "
                f"positions. Refit with max_seq_len >= {seq_len}, or use "
                "positional_encoding='stochastic', which takes any length."
            )

    def _module_kwargs(self):
        return {**super()._module_kwargs(), "token_dim": self.token_dim_,
                "eval_seed": self._seeds_[2]}

    def infer(self, x, **fit_params):
        # The positional draws are made here, eagerly, and handed to the
        # module: with compile=True the compiled forward then holds no random
        # number generator and no graph break (SparseTokenAttention.draw_noise).
        x = to_tensor(x, device=self.device)
        generator = self.torch_rng_ if self.module_.training else None
        noise = self.module_.draw_noise(x, generator=generator)
        return super().infer(x, noise=noise, **fit_params)

    def predict_attention(self, X):
        """Attention weights, shape (n_samples, seq_len); each row sums to 1.

        With the stochastic encoding they are averaged over ``n_pe_draws``
        draws, as in ``predict``.
        """
        X = self._check_X(X)
        with self._device_scope():
            self._apply_to_fitted()
            self.module_.eval()
            batches = TensorBatches(self.get_dataset(X), batch_size=self.batch_size)
            with torch.no_grad():
                attention = [self.module_.attention(unpack_data(b)[0]) for b in batches]
        return to_numpy(torch.cat(attention))


class SparseTokenFCN(_SparseTokenRegressor):
    """Fully-connected ReLU network for sparse token selection.

    A scikit-learn regressor (a skorch ``NeuralNetRegressor``) wrapping
    :class:`~sparse_token_estimators.modules.FullyConnectedNet`: the flattened
    (T * (d + 1)) input, tokens and indicator together, goes through
    ``n_hidden_layers`` hidden layers of width m = ``hidden_width`` to a linear
    output in R^d. Wang, Wei, Hsu & Lee (ICML 2024) show that with first-layer
    width m <= T d - 1 every such net has expected loss at least
    (T - q) / (T q (T - 1)); it needs width of order T d. It has no notion of
    position and accepts only the sequence length it was fitted on.

    Parameters
    ----------
    module : torch module class, default=FullyConnectedNet
        Built with ``seq_len``, ``token_dim`` and the parameters below.
    seq_len : int or None, default=None
        Sequence length T, the only one the net accepts. None: learned from
        ``X`` at a fresh ``fit``. Given (with ``token_dim``): ``initialize()``
        builds the module without data, e.g. to load saved weights.
    token_dim : int or None, default=None
        Token dimension d; None: learned from ``X`` at a fresh ``fit``.
    hidden_width : int, default=256
        Width m of every hidden layer.
    n_hidden_layers : int, default=1
        Number of hidden layers.
    random_state : int, RandomState or None, default=None
        Seeds the initial weights and the shuffling.
    optimizer, lr, max_epochs, batch_size, train_split, verbose, **kwargs
        As in :class:`skorch.NeuralNetRegressor`. The defaults are Adam,
        lr=0.003, batch_size=256 and 30 epochs: within 30 epochs narrow nets
        get further with lr=0.003 than with 0.001, and a net near width T d
        is still improving at the end.
    device : str, default="auto"
        "auto" (a GPU when present), "cpu", "cuda" or "cuda:N".

    Attributes
    ----------
    module_ : FullyConnectedNet
        The fitted module.
    n_features_in_ : int
        token_dim + 1, the last axis of ``X``.
    token_dim_ : int
        Token dimension d the module was built with.
    seq_len_ : int
        Sequence length T the module was built with; the only one
        ``predict`` accepts.
    history_ : skorch.History
        Per-epoch training record.

    Notes
    -----
    As for :class:`SparseTokenTransformer`: a changed structural parameter
    (``hidden_width``, ``n_hidden_layers``, ``seq_len``, ``token_dim``,
    ``module``, ``module__*``) makes a fitted estimator read as unfitted
    until it is refit or the value is set back; ``device`` and ``compile``
    are applied to the fitted module; the rest keep the fit. Saved weights
    load into ``SparseTokenFCN(hidden_width=..., seq_len=T, token_dim=d)
    .initialize()``.

    Examples
    --------
    >>> from sparse_token_estimators import make_sparse_selection, SparseTokenFCN
    >>> X, y = make_sparse_selection(500, seq_len=10, token_dim=4, random_state=0)
    >>> est = SparseTokenFCN(hidden_width=64, max_epochs=2, random_state=0).fit(X, y)
    >>> est.predict(X[:3]).shape
    (3, 4)
    """

    _parameter_constraints = _params.FCN
    _module_params = ("hidden_width", "n_hidden_layers")
    _sizes = ("seq_len", "token_dim")

    def __init__(self, module=FullyConnectedNet, *, seq_len=None, token_dim=None,
                 hidden_width=256, n_hidden_layers=1, random_state=None,
                 optimizer=torch.optim.Adam, lr=0.003, max_epochs=30, batch_size=256,
                 train_split=None, verbose=0, device="auto", **kwargs):
        super().__init__(
            module, token_dim=token_dim, random_state=random_state, optimizer=optimizer,
            lr=lr, max_epochs=max_epochs, batch_size=batch_size, train_split=train_split,
            verbose=verbose, device=device, **kwargs,
        )
        self.seq_len = seq_len
        self.hidden_width = hidden_width
        self.n_hidden_layers = n_hidden_layers

    def _check_seq_len(self, seq_len, *, fitting):
        if not fitting and seq_len != self.seq_len_:
            raise ValueError(
                f"X has seq_len {seq_len}, but this SparseTokenFCN was fitted on "
                f"seq_len {self.seq_len_}: a fully-connected net has one input "
                "unit per position and no notion of length, so it only accepts "
                "the length it was fitted on. Use SparseTokenTransformer for "
                "other lengths."
            )

    def _module_kwargs(self):
        return {**super()._module_kwargs(), "seq_len": self.seq_len_,
                "token_dim": self.token_dim_}
