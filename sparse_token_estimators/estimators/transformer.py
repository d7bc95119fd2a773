"""The paper's one-layer transformer (Wang, Wei, Hsu & Lee, ICML 2024) as an estimator."""

import torch
from skorch.dataset import unpack_data
from skorch.utils import to_numpy, to_tensor

from .._fused import StackedTrainer
from ..modules import SparseTokenAttention
from ..positional import ENCODINGS
from . import _checks, _docs, _rules
from ._base import _SparseTokenRegressor, training_lock

__all__ = ["SparseTokenTransformer"]


def _training_draws(net, x):
    """The forward's keywords for a training batch ``x``: its positional draws, from the
    estimator's own generator (what ``infer`` passes in training)."""
    return {"noise": net.module_.draw_noise(x, generator=net.torch_rng_)}


@_docs.compose
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
          scaled to unit norm; any length. Its rows span only a few
          dimensions at short lengths, so it learns the task only partly
          (measured in the user guide, "Positional encodings");
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
        sharp on longer sequences, so more draws generalise further in length,
        at a training cost that grows with the draws (measured in the user
        guide, "Positional encodings"). At prediction every sequence gets
        draws of its own, derived from a seed fixed at fit (kept in the
        module's ``state_dict``) and from the sequence itself, so a
        prediction depends only on its own sequence and on the weights.
        The deterministic encodings ignore it: all their draws would be the
        same.
    output_map : bool, default=False
        Add a trainable linear map after the attention (off in the paper).
        Without it the prediction is a convex combination of the tokens (the
        attention weights are positive and sum to 1), so it cannot rescale
        or shift them: a target on another scale than the tokens' averages,
        such as the standardised y of
        ``TransformedTargetRegressor(SparseTokenTransformer(),
        transformer=StandardScaler())``, is out of its reach, and such a
        meta-estimator scores lower than the model on y as it is. Use
        ``output_map=True`` with a transformed target (the map learns the
        rescaling), or leave y untransformed.
    {layout}
        In the query layout the query is z = sum_j p_{i_j} over the positions the
        query rows name, at any length (the tokens are all rows but the last q).
    {n_selected}
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
    {device}
    {lr_schedule}

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
    with a module that no longer matches (``_rules.group_of``). A structural
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

    _parameter_rules = {
        **_SparseTokenRegressor._parameter_rules,
        "pe_dim": _rules.POSITIVE,
        "positional_encoding": [_rules.OneOf(*ENCODINGS)],
        "max_seq_len": _rules.POSITIVE,
        "n_pe_draws": _rules.POSITIVE,
        "output_map": [_rules.BOOLEAN],
    }
    _module_params = ("pe_dim", "positional_encoding", "max_seq_len", "n_pe_draws",
                      "output_map")
    _module_attributes = ("n_pe_draws",)
    _forward_args_supplied = ("noise",)
    #: trains side by side under ``fit_group(..., trainer="fused")``: its module's own
    #: forward on the group's stacked weights, each fit's positional draws its own
    fused_trainer = StackedTrainer(forward_kwargs=_training_draws)

    def __init__(self, module=SparseTokenAttention, *, token_dim=None, pe_dim=64,
                 positional_encoding="stochastic", max_seq_len=256, n_pe_draws=8,
                 output_map=False, layout="indicator", n_selected=None,
                 random_state=None, optimizer=torch.optim.Adam,
                 lr=0.02, max_epochs=15, batch_size=256, train_split=None, verbose=0,
                 device="auto", lr_schedule="constant", **kwargs):
        super().__init__(
            module, token_dim=token_dim, layout=layout, n_selected=n_selected,
            random_state=random_state, optimizer=optimizer,
            lr=lr, max_epochs=max_epochs, batch_size=batch_size, train_split=train_split,
            verbose=verbose, device=device, lr_schedule=lr_schedule, **kwargs,
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
                "eval_seed": self._seeds_[2], "layout": self.layout,
                "n_selected": self.n_selected_}

    @_docs.compose
    def infer(self, x, **fit_params):
        """The module's forward on a batch, with the positional draws made here.

        The draws are made eagerly and handed to the module: with
        ``compile=True`` the compiled forward then holds no random number
        generator and no graph break (``SparseTokenAttention.draw_noise``).

        {infer}
        """
        with self.device_scope():
            x = to_tensor(x, device=self.device)
        generator = self.torch_rng_ if self.module_.training else None
        noise = self.module_.draw_noise(x, generator=generator)
        return super().infer(x, noise=noise, **fit_params)

    def predict_attention(self, X):
        """Attention weights of every position; each row sums to 1.

        With a random encoding they are averaged over ``n_pe_draws`` draws,
        as in ``predict``. Like ``predict``, it writes nothing to the
        estimator.

        Parameters
        ----------
        X : array-like of shape (n_samples, seq_len, token_dim + 1)
            Tokens and the selection indicator.

        Returns
        -------
        attention : ndarray of shape (n_samples, seq_len), float32
        """
        # skorch's iterator: batch_size=-1 is one batch of everything, as in predict
        with training_lock(self).reading(), self.device_scope(), torch.no_grad():
            X = _checks.check_X(self, X)
            self.module_.eval()
            batches = self.get_iterator(self.get_dataset(X), training=False)
            attention = [self.module_.attention(to_tensor(unpack_data(b)[0], self.device))
                         for b in batches]
        return to_numpy(torch.cat(attention))
