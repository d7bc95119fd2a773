"""scikit-learn estimators for sparse token selection, built on skorch.

``SparseTokenTransformer`` and ``SparseTokenFCN`` are ``NeuralNetRegressor``
subclasses: every skorch feature (callbacks, ``history_``, ``warm_start``,
``partial_fit``, ``optimizer``, ``lr``, ...) works, and the widths are
top-level parameters that ``GridSearchCV`` searches by name. They add only
what the task needs: input checks against the data layout, sizes learned at
``fit``, seeding from ``random_state``, ``device="auto"``, and a data path that
puts the data on the device once per fit and slices batches from it.
"""

import math
import numbers
from contextlib import contextmanager

import numpy as np
import torch
from skorch import NeuralNetRegressor
from skorch.dataset import unpack_data
from skorch.utils import is_dataset, to_numpy, to_tensor
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted
from torch.utils.data import TensorDataset

from ._batching import TensorBatches
from ._device import resolve_device
from ._layout import check_int, check_target, check_tokens
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


class _SparseTokenRegressor(NeuralNetRegressor):
    """What both estimators share; subclasses say which module to build."""

    #: constructor parameters forwarded to the module
    _module_params = ()

    def __init__(self, module, *, random_state=None, optimizer=torch.optim.Adam,
                 lr=0.01, max_epochs=30, batch_size=256, iterator_train=TensorBatches,
                 iterator_valid=TensorBatches, train_split=None, verbose=0,
                 device="auto", **kwargs):
        kwargs.setdefault("iterator_train__shuffle", True)
        super().__init__(
            module, optimizer=optimizer, lr=lr, max_epochs=max_epochs,
            batch_size=batch_size, iterator_train=iterator_train,
            iterator_valid=iterator_valid, train_split=train_split,
            verbose=verbose, device=device, **kwargs,
        )
        self.random_state = random_state

    # -- scikit-learn conventions -------------------------------------------------

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        tags.input_tags.two_d_array = False
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = False
        return tags

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

    # -- sizes and checks -----------------------------------------------------

    def _check_params(self):
        """Validate constructor parameters; called before any training."""
        if isinstance(self.lr, bool) or not isinstance(self.lr, numbers.Real):
            raise TypeError(f"lr (the learning rate) must be a number; got {self.lr!r}.")
        if not (math.isfinite(self.lr) and self.lr >= 0):
            raise ValueError(f"lr (the learning rate) must be finite and >= 0; got {self.lr}.")
        try:
            check_random_state(self.random_state)
        except ValueError as exc:
            raise ValueError(
                "random_state must be None, an int in [0, 2**32 - 1] or a numpy "
                f"RandomState; got {self.random_state!r}."
            ) from exc
        resolve_device(self.device)  # a bad or absent device fails here, not mid-fit

    def _check_X(self, X, *, fitting=False):
        if not fitting:
            check_is_fitted(self)
        X = check_tokens(X, token_dim=None if fitting else self.token_dim_)
        self._check_seq_len(X.shape[1], fitting=fitting)
        return X

    def _check_seq_len(self, seq_len, *, fitting):
        """Raise if this estimator cannot take sequences of ``seq_len``."""

    def _set_sizes(self, X):
        self.n_features_in_ = X.shape[-1]
        self.token_dim_ = X.shape[-1] - 1
        self.seq_len_ = X.shape[1]

    def _module_kwargs(self):
        return {name: getattr(self, name) for name in self._module_params}

    # -- initialisation ---------------------------------------------------------

    def initialize(self):
        if not hasattr(self, "token_dim_"):
            raise ValueError(
                f"{type(self).__name__} learns token_dim and seq_len from the "
                "data: call fit(X, y) rather than initialize()."
            )
        self._check_params()
        rng = check_random_state(self.random_state)
        self._seeds_ = rng.randint(np.iinfo(np.int32).max, size=3).tolist()
        with self._device_scope():
            super().initialize()
            self.torch_rng_ = torch.Generator(device=self.device).manual_seed(self._seeds_[1])
        return self

    def initialize_module(self):
        kwargs = {**self._module_kwargs(), **self.get_params_for("module")}
        # Seed the module's initial weights without touching the global RNG.
        # The module is built on the CPU; torch.manual_seed would also reseed
        # (and, before CUDA starts, record a stack trace for) every GPU.
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(self._seeds_[0])
            self.module_ = self.initialized_instance(self.module, kwargs)
        return self

    def set_params(self, **params):
        super().set_params(**params)
        if self.initialized_ and set(params) & set(self._module_params):
            # As skorch does for module__ parameters: a changed width gives a
            # fresh module, so the next fit honours it even with warm_start.
            self.initialize()
        return self

    # -- data path ----------------------------------------------------------------

    def get_dataset(self, X, y=None):
        if is_dataset(X):
            return super().get_dataset(X, y)
        # Converted and moved once per fit / predict; batches are slices.
        # np.require copies the read-only memory maps joblib hands to workers
        # (GridSearchCV with n_jobs), which torch warns about.
        tensors = [torch.as_tensor(np.require(X, np.float32, "W")).to(self.device)]
        if y is not None:
            tensors.append(torch.as_tensor(np.require(y, np.float32, "W")).to(self.device))
        return TensorDataset(*tensors)

    def get_iterator(self, dataset, training=False):
        iterator = super().get_iterator(dataset, training=training)
        if training and isinstance(iterator, TensorBatches) and iterator.generator is None:
            iterator.generator = self.torch_rng_  # shuffling follows random_state
        return iterator

    def _set_training(self, training=True):
        # skorch sets the mode before every batch, and nn.Module.train walks
        # the whole module tree each time: a few percent of a small model's
        # step. Walk it only when the mode changes.
        modules = (getattr(self, name + "_") for name in self._modules + self._criteria)
        if any(getattr(module, "training", training) != training for module in modules):
            super()._set_training(training)

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
        # Forget the broken weights, back to skorch's uninitialized state: the
        # estimator is unfitted (predict raises NotFittedError) rather than a
        # model that predicts NaN, and set_params / fit work as on a new one;
        # history_ keeps the losses that led here.
        for name in self._modules + self._criteria + self._optimizers:
            self.__dict__.pop(name + "_", None)
        self.virtual_params_ = {}
        self.initialized_ = False
        optimizer = getattr(self.optimizer, "__name__", self.optimizer)
        raise TrainingDivergedError(
            f"Training diverged: {what} in epoch {len(self.history)} (lr={self.lr}, "
            f"optimizer={optimizer}). Lower lr (e.g. lr={self.lr / 10:g}), or rescale "
            "X and y if their values are very large, and fit again. The estimator "
            "was reset to unfitted; history_ keeps the losses up to the divergence."
        )

    # -- public API -------------------------------------------------------------

    def fit(self, X, y, **fit_params):
        """Fit on ``X`` of shape (n_samples, seq_len, token_dim + 1) and ``y``.

        Re-initialises the module unless ``warm_start`` is True; token_dim and
        the training seq_len are learned from ``X``.
        """
        X, y = self._check_training_data(X, y, continues=self._continues())
        return super().fit(X, y, **fit_params)

    def partial_fit(self, X, y, classes=None, **fit_params):
        """Continue training on ``X``, ``y`` (initialising on the first call)."""
        # skorch's fit initialises, then calls partial_fit with the data fit
        # has just checked, marking the call with _routing_method="fit": check
        # once per call the user makes. (Without the mark, as in a skorch that
        # does not pass it, the data is merely checked twice.)
        if fit_params.get("_routing_method") != "fit":
            X, y = self._check_training_data(X, y, continues=self.initialized_)
        with self._device_scope():
            return super().partial_fit(X, y, classes=classes, **fit_params)

    def _check_training_data(self, X, y, *, continues):
        """Validate ``X``, ``y`` for training; learn the sizes on a fresh start."""
        X = check_tokens(X, token_dim=self.token_dim_ if continues else None)
        y = check_target(y, X)
        if continues:
            self._check_seq_len(X.shape[1], fitting=False)
        else:
            self._check_params()
            self._check_seq_len(X.shape[1], fitting=True)
            self._set_sizes(X)
        return X, y

    def _continues(self):
        return self.warm_start and self.initialized_

    def forward_iter(self, X, training=False, device="cpu"):
        with self._device_scope():
            yield from super().forward_iter(X, training=training, device=device)

    def predict(self, X):
        """Predict the average of the selected tokens, shape (n_samples, token_dim)."""
        return to_numpy(self.forward(self._check_X(X)))

    @property
    def predict_proba(self):
        # skorch defines predict_proba on every net; a regressor has none.
        raise AttributeError(f"{type(self).__name__} is a regressor: use predict.")

    def score(self, X, y, sample_weight=None):
        """R^2 of ``predict(X)`` against ``y``, averaged over the token_dim outputs."""
        X = self._check_X(X)
        y = check_target(y, X)
        return super().score(X, y, sample_weight=sample_weight)

    def load_params(self, *args, **kwargs):
        with self._device_scope():
            return super().load_params(*args, **kwargs)

    # -- pickling ---------------------------------------------------------------

    def __getstate__(self):
        state = super().__getstate__()
        rng = state.pop("torch_rng_", None)
        if rng is not None:
            state["_torch_rng_state_"] = (rng.device.type, rng.get_state())
        return state

    def __setstate__(self, state):
        requested = state["device"]
        state["device"] = resolve_device(requested) if requested == "auto" else requested
        rng_state = state.pop("_torch_rng_state_", None)
        super().__setstate__(state)
        if requested == "auto":
            self.__dict__["device"] = "auto"
        if rng_state is not None:
            device = resolve_device(self.device)
            rng = torch.Generator(device=device)
            kind, saved = rng_state
            if kind == rng.device.type:
                rng.set_state(saved)
            else:  # CPU and CUDA generators have different states
                rng.manual_seed(int(saved.sum()))
            self.torch_rng_ = rng


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
        Built with ``token_dim`` from the data and the parameters below.
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
        Token dimension d seen in fit.
    seq_len_ : int
        Sequence length T seen in fit.
    history_ : skorch.History
        Per-epoch training record.

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

    _module_params = ("pe_dim", "positional_encoding", "max_seq_len", "n_pe_draws",
                      "output_map")

    def __init__(self, module=SparseTokenAttention, *, pe_dim=64,
                 positional_encoding="stochastic", max_seq_len=256, n_pe_draws=8,
                 output_map=False, random_state=None, optimizer=torch.optim.Adam,
                 lr=0.02, max_epochs=15, batch_size=256, train_split=None, verbose=0,
                 device="auto", **kwargs):
        super().__init__(
            module, random_state=random_state, optimizer=optimizer, lr=lr,
            max_epochs=max_epochs, batch_size=batch_size, train_split=train_split,
            verbose=verbose, device=device, **kwargs,
        )
        self.pe_dim = pe_dim
        self.positional_encoding = positional_encoding
        self.max_seq_len = max_seq_len
        self.n_pe_draws = n_pe_draws
        self.output_map = output_map

    def _check_params(self):
        super()._check_params()
        check_int(self.pe_dim, "pe_dim")
        check_int(self.max_seq_len, "max_seq_len")
        check_int(self.n_pe_draws, "n_pe_draws")
        if self.positional_encoding not in ENCODINGS:
            names = ", ".join(repr(name) for name in ENCODINGS)
            raise ValueError(
                f"positional_encoding must be one of {names}; got "
                f"{self.positional_encoding!r}."
            )

    def _check_seq_len(self, seq_len, *, fitting):
        encoding = ENCODINGS[self.positional_encoding]
        if not encoding.takes_any_length and seq_len > self.max_seq_len:
            raise ValueError(
                f"X has seq_len {seq_len} but the {self.positional_encoding} "
                f"positional encoding has only max_seq_len={self.max_seq_len} "
                f"positions. Refit with max_seq_len >= {seq_len}, or use positional_encoding='stochastic', "
                "which takes any length."
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
        Built with ``seq_len`` and ``token_dim`` from the data and the
        parameters below.
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
        Token dimension d seen in fit.
    seq_len_ : int
        Sequence length T seen in fit; the only one ``predict`` accepts.
    history_ : skorch.History
        Per-epoch training record.

    Examples
    --------
    >>> from sparse_token_estimators import make_sparse_selection, SparseTokenFCN
    >>> X, y = make_sparse_selection(500, seq_len=10, token_dim=4, random_state=0)
    >>> est = SparseTokenFCN(hidden_width=64, max_epochs=2, random_state=0).fit(X, y)
    >>> est.predict(X[:3]).shape
    (3, 4)
    """

    _module_params = ("hidden_width", "n_hidden_layers")

    def __init__(self, module=FullyConnectedNet, *, hidden_width=256, n_hidden_layers=1,
                 random_state=None, optimizer=torch.optim.Adam, lr=0.003,
                 max_epochs=30, batch_size=256, train_split=None, verbose=0,
                 device="auto", **kwargs):
        super().__init__(
            module, random_state=random_state, optimizer=optimizer, lr=lr,
            max_epochs=max_epochs, batch_size=batch_size, train_split=train_split,
            verbose=verbose, device=device, **kwargs,
        )
        self.hidden_width = hidden_width
        self.n_hidden_layers = n_hidden_layers

    def _check_params(self):
        super()._check_params()
        check_int(self.hidden_width, "hidden_width")
        check_int(self.n_hidden_layers, "n_hidden_layers")

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
