"""A standard transformer encoder (beyond the paper) as an estimator."""

import torch
from skorch.dataset import unpack_data
from skorch.utils import to_numpy, to_tensor

from ..architectures import TransformerEncoder, check_encoder_sizes
from ..positional import ENCODINGS
from . import _checks, _rules
from ._base import _SparseTokenRegressor, training_lock

__all__ = ["SparseTokenEncoder"]


class SparseTokenEncoder(_SparseTokenRegressor):
    """A standard transformer encoder for sparse token selection (beyond the paper).

    A scikit-learn regressor (a skorch ``NeuralNetRegressor``) wrapping
    :class:`~sparse_token_estimators.architectures.TransformerEncoder`, the
    transformer people train, beside the paper's simplified one
    (:class:`SparseTokenTransformer`): tokens and indicator are projected to
    ``d_model``; ``n_layers`` pre-norm blocks of multi-head softmax
    self-attention (trainable queries, keys, values and output projection)
    and an MLP, with residuals and layer norm; then attention pooling with a
    learned query gives one vector per sequence, mapped linearly to R^d.
    Its width is ``d_model``. :meth:`predict_attention` returns the pooling
    query's weights over the positions, in the shape of
    :meth:`SparseTokenTransformer.predict_attention`.

    Parameters
    ----------
    module : torch module class, default=TransformerEncoder
        Built with ``token_dim`` and the parameters below.
    token_dim : int or None, default=None
        Token dimension d. None: learned from ``X`` at a fresh ``fit``; given,
        ``initialize()`` builds the module without data (to load weights).
    d_model : int, default=32
        Width of every position's vector.
    n_heads : int, default=2
        Attention heads; must divide ``d_model``.
    n_layers : int, default=1
        Transformer blocks before the pooling (0: pooling on the input
        projection alone).
    positional_encoding : {"none", "rope", "stochastic", "fixed", "sinusoidal", \
"learned", "randomized"}, default="none"
        "none": no position at all. The task averages the selected tokens in
        any order and the indicator channel names them, so attention can
        select by content; without a position the model also takes any
        length. "rope": rotary positions on the queries and keys of every
        block (Su et al., 2021); any length. The other five are the
        package's (``positional.ENCODINGS``, as for
        :class:`SparseTokenTransformer`), vectors of dimension ``d_model``
        added to the input projection; "fixed", "learned" and "randomized"
        take at most ``max_seq_len`` positions. The random ones draw afresh
        for every sequence in training and, at prediction, give every
        sequence its own draw, derived from the sequence itself and a seed
        (``eval_seed``) fixed at fit and kept in the module's ``state_dict``:
        a prediction depends on its own sequence only, whatever the batch.
    max_seq_len : int, default=256
        Positions of the table encodings; unused by the others.
    layout : {"indicator", "query"}, default="indicator"
        The layout of ``X`` (``make_sparse_selection(..., layout=...)``):
        "indicator", the subset as a 0/1 last channel of the token rows;
        "query", the subset as ``n_selected`` rows [0_d, i_j] of 1-based
        positions after the tokens, so that content alone cannot select.
        Structural: recorded in saved weights, which load only into an
        estimator of the same layout.
        In the query layout a query row [0_d, i_j] enters as a query flag with the
        position i_j: p_{i_j} added (absolute encodings), the angle of i_j (RoPE), or
        nothing ("none": symmetric in the token rows, it cannot select).
    n_selected : int or None, default=None
        Query layout only: the number q of query rows, which says where the
        tokens end (T = rows - q). None: learned at a fresh ``fit`` from the
        first sample (its rows with a nonzero last channel; every sample is
        then checked against it), as ``token_dim`` is; given, ``initialize()``
        builds the module without data. Unused in the indicator layout.
    random_state : int, RandomState or None, default=None
        Seeds the initial weights, the training draws, the shuffling and the
        seed of the prediction draws: the same int gives the same fitted model.
    optimizer, lr, max_epochs, batch_size, train_split, verbose, **kwargs
        As in :class:`skorch.NeuralNetRegressor`; defaults Adam, lr=0.003,
        batch_size=256, 20 epochs.
    device : str, default="auto"
        "auto" (a GPU when present), "cpu", "cuda" or "cuda:N".
    lr_schedule : {"constant", "cosine"}, default="constant"
        Adam's rate throughout a fit: ``lr`` at every step, or ``lr`` decayed to
        0 by a cosine over the fit's steps, stepped per batch
        (:class:`~sparse_token_estimators.callbacks.CosineSchedule`).

    Attributes
    ----------
    module_ : TransformerEncoder
        The fitted module.
    n_features_in_ : int
        token_dim + 1, the last axis of ``X``.
    token_dim_ : int
        Token dimension d the module was built with.
    seq_len_ : int or None
        Sequence length T of the data first trained on (it fixes nothing
        unless the encoding has a table); None after ``initialize()``.
    history_ : skorch.History
        Per-epoch training record.

    Notes
    -----
    As for :class:`SparseTokenTransformer`: a changed structural parameter
    (``d_model``, ``n_heads``, ``n_layers``, ``positional_encoding``,
    ``max_seq_len``, ``token_dim``, ``module``, ``module__*``) makes a fitted
    estimator read as unfitted until it is refit or the value is set back.
    Saved weights load into ``SparseTokenEncoder(..., token_dim=d).initialize()``.

    Examples
    --------
    >>> from sparse_token_estimators import make_sparse_selection, SparseTokenEncoder
    >>> X, y = make_sparse_selection(1000, seq_len=10, token_dim=4, random_state=0)
    >>> est = SparseTokenEncoder(d_model=16, max_epochs=3, random_state=0).fit(X, y)
    >>> est.predict(X[:3]).shape
    (3, 4)
    >>> X_long, _ = make_sparse_selection(5, seq_len=40, token_dim=4, random_state=1)
    >>> est.predict(X_long).shape
    (5, 4)
    """

    _parameter_rules = _rules.ENCODER
    _module_params = ("d_model", "n_heads", "n_layers", "positional_encoding", "max_seq_len")
    _forward_args_supplied = ("noise",)
    _predict_block = 64

    def __init__(self, module=TransformerEncoder, *, token_dim=None, d_model=32, n_heads=2,
                 n_layers=1, positional_encoding="none", max_seq_len=256,
                 layout="indicator", n_selected=None, random_state=None,
                 optimizer=torch.optim.Adam, lr=0.003, max_epochs=20, batch_size=256,
                 train_split=None, verbose=0, device="auto",
                 lr_schedule="constant", **kwargs):
        super().__init__(
            module, token_dim=token_dim, layout=layout, n_selected=n_selected,
            random_state=random_state, optimizer=optimizer,
            lr=lr, max_epochs=max_epochs, batch_size=batch_size, train_split=train_split,
            verbose=verbose, device=device, lr_schedule=lr_schedule, **kwargs,
        )
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.positional_encoding = positional_encoding
        self.max_seq_len = max_seq_len

    def _check_sizes(self):
        check_encoder_sizes(self.d_model, self.n_heads, self.positional_encoding)

    def _check_seq_len(self, seq_len, *, fitting):
        encoding = ENCODINGS.get(self.positional_encoding)
        if encoding is not None and not encoding.takes_any_length and seq_len > self.max_seq_len:
            raise ValueError(
                f"X has seq_len {seq_len} but the {self.positional_encoding} "
                f"positional encoding has only max_seq_len={self.max_seq_len} "
                f"positions. Refit with max_seq_len >= {seq_len}, or use "
                "positional_encoding='none' or 'rope', which take any length."
            )

    def _module_kwargs(self):
        return {**super()._module_kwargs(), "token_dim": self.token_dim_,
                "eval_seed": self._seeds_[2], "layout": self.layout,
                "n_selected": self.n_selected_}

    def infer(self, x, **fit_params):
        # As SparseTokenTransformer: the positional draws are made here, from
        # the estimator's generator in training. At prediction the forward
        # runs in padded blocks of a fixed size (``_in_blocks``) and every
        # block gets the keys of its own sequences (``draw_noise``: one per
        # sequence, a hash of it and of eval_seed), so a sequence's positions
        # do not depend on its batch.
        with self.device_scope():
            x = to_tensor(x, device=self.device)
        module = self.module_
        if module.training or not isinstance(x, torch.Tensor):
            generator = self.torch_rng_ if module.training else None
            return super().infer(x, noise=module.draw_noise(x, generator=generator),
                                 **fit_params)
        forward = super(_SparseTokenRegressor, self).infer
        return self._in_blocks(
            x, lambda chunk: forward(chunk, noise=module.draw_noise(chunk), **fit_params))

    def predict_attention(self, X):
        """The pooling query's attention weights over the positions; each row sums to 1.

        The same method name and shape as
        :meth:`SparseTokenTransformer.predict_attention`: for each sequence,
        the weights with which the learned query of the attention pooling
        averages the T positions (after the blocks), averaged over the
        ``n_heads`` heads. A model that solved the task puts them on the
        selected positions. The blocks' own self-attention (T x T per head
        and layer) is not returned. As ``predict``: it writes nothing to
        the estimator, and runs in blocks of a fixed size, so a sequence's
        weights do not depend on ``batch_size``.

        Parameters
        ----------
        X : array-like of shape (n_samples, seq_len, token_dim + 1)
            Tokens and the selection indicator.

        Returns
        -------
        attention : ndarray of shape (n_samples, seq_len), float32

        Examples
        --------
        >>> from sparse_token_estimators import make_sparse_selection, SparseTokenEncoder
        >>> X, y = make_sparse_selection(500, seq_len=10, token_dim=4, random_state=0)
        >>> est = SparseTokenEncoder(d_model=16, max_epochs=2, random_state=0).fit(X, y)
        >>> est.predict_attention(X[:3]).shape
        (3, 10)
        """
        with training_lock(self).reading(), self.device_scope(), torch.no_grad():
            X = _checks.check_X(self, X)
            self.module_.eval()
            weights = [self._in_blocks(to_tensor(unpack_data(batch)[0], self.device),
                                       self.module_.attention)
                       for batch in self.get_iterator(self.get_dataset(X), training=False)]
        return to_numpy(torch.cat(weights))
