"""skorch callbacks that record the paper's diagnostics into ``history_``."""

from skorch.callbacks import Callback

from .theory import identity_alignment


class AlignmentRecorder(Callback):
    """Record the alignment of the key-query matrix W with the identity each epoch.

    After every epoch, writes ``identity_alignment(module_.W)``, the cosine
    similarity <W, I> / (||W||_F sqrt(d_p)) of Wang, Wei, Hsu & Lee (ICML
    2024), into ``history_`` under ``key``, and the scale <W, I> / d_p (the c
    of W ~ c I; a larger c makes the attention sharper on longer sequences)
    under ``scale_key``.

    Parameters
    ----------
    key : str, default="alignment"
        History column of the alignment.
    scale_key : str or None, default="w_scale"
        History column of the scale; None records no scale.
    param : str, default="W"
        Name of the square matrix parameter on ``module_``.

    Examples
    --------
    >>> from sparse_token_estimators import SparseTokenTransformer, make_sparse_selection
    >>> X, y = make_sparse_selection(500, seq_len=8, token_dim=4, random_state=0)
    >>> est = SparseTokenTransformer(pe_dim=16, max_epochs=3, random_state=0,
    ...                              callbacks=[AlignmentRecorder()]).fit(X, y)
    >>> len(est.history_[:, "alignment"])
    3
    """

    def __init__(self, key="alignment", scale_key="w_scale", param="W"):
        self.key = key
        self.scale_key = scale_key
        self.param = param

    def on_train_begin(self, net, X=None, y=None, **kwargs):
        W = getattr(net.module_, self.param, None)
        if W is None or W.ndim != 2 or W.shape[0] != W.shape[1]:
            raise ValueError(
                f"AlignmentRecorder needs a square matrix module_.{self.param}; "
                f"{type(net.module_).__name__} has none. Use it with "
                "SparseTokenTransformer, or pass param= the name of the matrix."
            )

    def on_epoch_end(self, net, **kwargs):
        W = getattr(net.module_, self.param).detach()
        net.history.record(self.key, identity_alignment(W))
        if self.scale_key is not None:
            net.history.record(self.scale_key, float(W.diagonal().mean()))
