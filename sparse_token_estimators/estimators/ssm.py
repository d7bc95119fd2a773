"""The selective state-space model (Mamba, beyond the paper) as an estimator.

Its module (``..ssm.SelectiveSSM``) needs the optional extra ``[ssm]``
(``mambapy``); without it the constructor says how to install it.
"""

import torch

from ..ssm import SelectiveSSM, require_mambapy
from . import _docs, _rules
from ._base import _SparseTokenRegressor

__all__ = ["SparseTokenSSM"]


@_docs.compose
class SparseTokenSSM(_SparseTokenRegressor):
    """A selective state-space model (Mamba) for sparse token selection (beyond the paper).

    A scikit-learn regressor (a skorch ``NeuralNetRegressor``) wrapping
    :class:`~sparse_token_estimators.ssm.SelectiveSSM`: tokens and indicator
    are projected to ``d_model``; ``n_layers`` Mamba blocks (Gu & Dao,
    2023; the pure-PyTorch ``mambapy``) read the sequence position by
    position through a selective scan whose step size Delta, input map B and
    output map C depend on the input at each position, so the state can take
    in a selected token and let the others pass; a linear map of the last
    position's vector is the prediction, as :class:`SparseTokenRNN` reads its
    last hidden state. Its width is ``d_model``; each block carries
    ``2 * d_model * d_state`` numbers along the sequence (the scan's state,
    two channels per width unit). It takes any length but has seen only the
    training one. It has no attention, so no ``predict_attention``.
    Its blocks run the package's fused selective scan
    (:func:`~sparse_token_estimators.ssm.selective_scan_fused`, several times
    faster on a CPU, checked against ``mambapy``'s parallel scan and the
    plain recurrence); ``module__scan="mambapy"`` runs ``mambapy``'s own.

    Needs the optional extra: ``pip install 'sparse-token-estimators[ssm]'``
    (the ``mambapy`` package); without it the constructor raises an
    ``ImportError`` that says so.

    Parameters
    ----------
    module : torch module class, default=SelectiveSSM
        Built with ``token_dim`` and the parameters below.
    token_dim : int or None, default=None
        Token dimension d; None: learned from ``X`` at a fresh ``fit``.
    d_model : int, default=32
        Width of every position's vector.
    d_state : int, default=16
        State size N of the scan of every channel.
    n_layers : int, default=1
        Stacked Mamba blocks.
    {layout}
        In the query layout it reads the token rows, then the query rows, in order.
    {n_selected}
    random_state : int, RandomState or None, default=None
        Seeds the initial weights and the shuffling.
    optimizer, lr, max_epochs, batch_size, train_split, verbose, **kwargs
        As in :class:`skorch.NeuralNetRegressor`; defaults Adam, lr=0.003,
        batch_size=256, 30 epochs.
    {device}
    {lr_schedule}

    Attributes
    ----------
    module_ : SelectiveSSM
        The fitted module.
    n_features_in_ : int
        token_dim + 1, the last axis of ``X``.
    token_dim_ : int
        Token dimension d the module was built with.
    seq_len_ : int or None
        Sequence length T of the data first trained on; None after
        ``initialize()``.
    history_ : skorch.History
        Per-epoch training record.

    Notes
    -----
    A changed ``d_model``, ``d_state``, ``n_layers``, ``token_dim``,
    ``module`` or ``module__*`` (e.g. ``module__expand``, ``module__d_conv``)
    makes a fitted estimator read as unfitted until it is refit or the value
    is set back. Saved weights load into
    ``SparseTokenSSM(..., token_dim=d).initialize()``.

    Examples
    --------
    >>> from sparse_token_estimators import make_sparse_selection, SparseTokenSSM
    >>> X, y = make_sparse_selection(1000, seq_len=10, token_dim=4, random_state=0)
    >>> est = SparseTokenSSM(d_model=16, d_state=4, max_epochs=3, random_state=0).fit(X, y)
    >>> est.predict(X[:3]).shape
    (3, 4)
    """

    _parameter_rules = {
        **_SparseTokenRegressor._parameter_rules,
        "d_model": _rules.POSITIVE,
        "d_state": _rules.POSITIVE,
        "n_layers": _rules.POSITIVE,
    }
    _module_params = ("d_model", "d_state", "n_layers")
    _predict_block = 64

    def __init__(self, module=SelectiveSSM, *, token_dim=None, d_model=32, d_state=16,
                 n_layers=1, layout="indicator", n_selected=None,
                 random_state=None, optimizer=torch.optim.Adam, lr=0.003,
                 max_epochs=30, batch_size=256, train_split=None, verbose=0, device="auto",
                 lr_schedule="constant", **kwargs):
        require_mambapy()  # say how to install the extra now, not at the first fit
        super().__init__(
            module, token_dim=token_dim, layout=layout, n_selected=n_selected,
            random_state=random_state, optimizer=optimizer,
            lr=lr, max_epochs=max_epochs, batch_size=batch_size, train_split=train_split,
            verbose=verbose, device=device, lr_schedule=lr_schedule, **kwargs,
        )
        self.d_model = d_model
        self.d_state = d_state
        self.n_layers = n_layers

    def _module_kwargs(self):
        return {**super()._module_kwargs(), "token_dim": self.token_dim_}

    @property
    def predict_attention(self):
        # absent (hasattr is False), with the reason, rather than a generic AttributeError
        raise AttributeError(
            "SparseTokenSSM has no predict_attention: a state-space model has no attention "
            "weights over the positions (it reads the sequence into one state). "
            "SparseTokenTransformer and SparseTokenEncoder offer predict_attention."
        )
