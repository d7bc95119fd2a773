"""The theory of sparse token selection as functions: bounds, reference losses, diagnostics.

Losses are in the task's unit: the squared error summed over the d
coordinates of the output, averaged over samples (``selection_loss``). The
bound and the width scales are those of Wang, Wei, Hsu & Lee, "Transformers
Provably Learn Sparse Token Selection While Fully-Connected Nets Cannot"
(ICML 2024, arXiv:2406.06893), for the q-sparse averaging task of Sanford,
Hsu & Telgarsky, "Representational Strengths and Limitations of
Transformers" (NeurIPS 2023, arXiv:2306.02896).
"""

import math

import numpy as np

from ._layout import check_int


def _check_sizes(seq_len, n_selected):
    seq_len = check_int(seq_len, "seq_len")
    n_selected = check_int(n_selected, "n_selected")
    if n_selected > seq_len:
        raise ValueError(
            f"n_selected must be between 1 and seq_len={seq_len}; got {n_selected}."
        )
    return seq_len, n_selected


def selection_loss(y_true, y_pred):
    """Squared error summed over the token_dim outputs, averaged over samples.

    The loss in which the paper states its bound and in which the reference
    losses below are expressed (scikit-learn's ``mean_squared_error`` divides
    it by token_dim). Use ``make_scorer(selection_loss,
    greater_is_better=False)`` in a search.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples, token_dim)

    Returns
    -------
    loss : float

    Examples
    --------
    >>> selection_loss([[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 1.0]])
    1.0
    """
    y_true = np.asarray(y_true, dtype=np.float64)
    y_pred = np.asarray(y_pred, dtype=np.float64)
    if y_true.shape != y_pred.shape or y_true.ndim != 2:
        raise ValueError(
            "y_true and y_pred must both have shape (n_samples, token_dim); got "
            f"{y_true.shape} and {y_pred.shape}."
        )
    return float(((y_true - y_pred) ** 2).sum(axis=1).mean())


def fcn_lower_bound(seq_len, n_selected, token_dim=None, width=None):
    """Lower bound on the loss of any fully-connected net of first-layer width m.

    Without ``width``: the bound of Wang, Wei, Hsu & Lee (ICML 2024) for
    every fully-connected net on the flattened input whose first layer has
    width m <= T d - 1, expected loss (summed over the d coordinates) at least
    (T - q) / (T q (T - 1)), with T = ``seq_len``, q = ``n_selected``; it
    does not depend on d. With ``token_dim`` (d) and ``width`` (m): the same
    argument carried to every width, which is the project's tighter form::

        m >= T d       : 0
        d <= m <= T d  : (T d - m) (T - q) / (T q (T - 1))
        m < d          : (T - 1) d (T - q) / (T q (T - 1)) + (d - m) / T

    Derivation. Write the tokens as one vector x in R^{T d} and the selection
    indicator as s; then y = M_S x with M_S = (s^T kron I_d) / q. The first
    layer sees x only through U x with rank(U) <= m (s enters apart), so any
    net predicts a function of (P x, S), P the projection onto the row space
    of U. As x ~ N(0, I) is independent of S, the best such function is
    E[y | P x, S] = M_S P x, with loss tr((I - P) E_S[M_S^T M_S]).
    E_S[M_S^T M_S] = A kron I_d with A = E[s s^T] / q^2 =
    (T - q) / (T q (T - 1)) I + (q - 1) / (q T (T - 1)) 1 1^T, whose
    eigenvalues are 1/T (on the all-ones vector) and
    (T - q) / (T q (T - 1)) (multiplicity T - 1). Over projections P of rank
    m, tr((I - P) (A kron I_d)) is smallest when P keeps the top m
    eigenvectors (Ky Fan), which leaves the sum of the T d - m smallest
    eigenvalues: the formula above. The paper's theorem is the case
    m = T d - 1 (one eigenvalue left); the sum at every width is the same
    argument, not a result stated in the paper. At m = 0 it is d / q, the
    loss of predicting 0. The task is the q-sparse averaging of Sanford, Hsu
    & Telgarsky (NeurIPS 2023).

    Parameters
    ----------
    seq_len : int
        Sequence length T >= 2.
    n_selected : int
        Number q of selected tokens, 1 <= q <= T.
    token_dim : int, optional
        Token dimension d; required with ``width``.
    width : int, optional
        First-layer width m >= 0 of the net; required with ``token_dim``.
        None: the paper's bound (width T d - 1). At m = 0 the net sees
        nothing of the tokens: d / q, the loss of predicting 0.

    Returns
    -------
    bound : float
        Loss summed over the d coordinates; ``1 - bound / (d / q)`` is the
        highest R^2 such a net can reach.

    Examples
    --------
    >>> round(fcn_lower_bound(20, 3), 5)  # the paper's bound, any width below T d
    0.01491
    >>> round(fcn_lower_bound(10, 3, token_dim=8, width=16), 4)  # width 16 < T d = 80
    1.6593
    >>> fcn_lower_bound(10, 3, token_dim=8, width=80)
    0.0
    >>> round(fcn_lower_bound(7, 2, token_dim=3, width=0), 4)  # d / q
    1.5
    """
    seq_len, n_selected = _check_sizes(seq_len, n_selected)
    if seq_len < 2:
        raise ValueError(f"seq_len must be at least 2 for the bound; got {seq_len}.")
    smallest = (seq_len - n_selected) / (seq_len * n_selected * (seq_len - 1))
    if token_dim is None and width is None:
        return smallest
    if token_dim is None or width is None:
        given, missing = ("width", "token_dim") if token_dim is None else ("token_dim", "width")
        raise ValueError(
            f"fcn_lower_bound got {given} but not {missing}: the width-aware bound "
            "needs both token_dim and width; pass neither for the paper's bound "
            "(width T d - 1)."
        )
    token_dim = check_int(token_dim, "token_dim")
    width = check_int(width, "width", minimum=0)
    total = seq_len * token_dim
    if width >= total:
        return 0.0
    if width >= token_dim:
        return (total - width) * smallest
    return (total - token_dim) * smallest + (token_dim - width) / seq_len


def fcn_critical_width(seq_len, n_selected, token_dim, r2):
    """The narrowest first-layer width at which the FCN bound allows R^2 ``r2``.

    The smallest m with ``1 - fcn_lower_bound(T, q, token_dim=d, width=m) /
    (d / q) >= r2``: no fully-connected net narrower than this reaches
    ``r2`` on the population, however trained (about r2 T d for q << T).
    0 when ``r2 <= 0``; T d when ``r2 = 1``.

    Parameters
    ----------
    seq_len, n_selected, token_dim : int
        T, q and d.
    r2 : float
        The R^2 to reach, at most 1.

    Returns
    -------
    width : int

    Examples
    --------
    >>> fcn_critical_width(10, 3, 8, 0.8)
    60
    >>> fcn_critical_width(10, 3, 8, 0.0), fcn_critical_width(10, 3, 8, 1.0)
    (0, 80)
    """
    seq_len, n_selected = _check_sizes(seq_len, n_selected)
    token_dim = check_int(token_dim, "token_dim")
    if not r2 <= 1:
        raise ValueError(f"r2 must be at most 1; got {r2!r}.")
    zero = zero_predictor_loss(token_dim, n_selected)
    total = seq_len * token_dim
    # the bound falls with m: the first width whose ceiling reaches r2
    return next(m for m in range(total + 1)
                if 1 - fcn_lower_bound(seq_len, n_selected, token_dim=token_dim,
                                       width=m) / zero >= r2 - 1e-12)


def zero_predictor_loss(token_dim, n_selected):
    """Loss d / q of predicting 0, the total variance of the target.

    With standard Gaussian tokens each coordinate of y = (1/q) sum_{i in S} x_i
    has variance 1/q, so R^2 = 1 - loss / (d / q) (Wang et al., ICML 2024;
    Sanford et al., NeurIPS 2023).

    Parameters
    ----------
    token_dim : int
        Token dimension d.
    n_selected : int
        Number q of selected tokens.

    Returns
    -------
    loss : float

    Examples
    --------
    >>> zero_predictor_loss(8, 4)
    2.0
    """
    return check_int(token_dim, "token_dim") / check_int(n_selected, "n_selected")


def uniform_attention_loss(seq_len, token_dim, n_selected):
    """Loss d (1/q - 1/T) of averaging all T tokens with equal weights.

    This is what the attention model predicts at its zero initialisation
    (W = 0), before it has learned which tokens are selected (Wang et al.,
    ICML 2024; task of Sanford et al., NeurIPS 2023).

    Parameters
    ----------
    seq_len : int
        Sequence length T.
    token_dim : int
        Token dimension d.
    n_selected : int
        Number q of selected tokens, 1 <= q <= T.

    Returns
    -------
    loss : float

    Examples
    --------
    >>> uniform_attention_loss(10, 4, 2)
    1.6
    """
    seq_len, n_selected = _check_sizes(seq_len, n_selected)
    return check_int(token_dim, "token_dim") * (1 / n_selected - 1 / seq_len)


def fcn_width_threshold(seq_len, token_dim):
    """First-layer width T d below which the FCN lower bound applies.

    Examples
    --------
    >>> fcn_width_threshold(20, 8)
    160
    """
    return check_int(seq_len, "seq_len") * check_int(token_dim, "token_dim")


def transformer_pe_scale(seq_len, n_selected):
    """The positional dimension q log T the transformer's theory asks for.

    Wang et al. (ICML 2024) show a one-layer transformer of width
    d + O(q log T) learns the task; this is the scale without its constant.

    Examples
    --------
    >>> round(transformer_pe_scale(20, 3), 2)
    8.99
    """
    seq_len, n_selected = _check_sizes(seq_len, n_selected)
    return n_selected * math.log(seq_len)


def identity_alignment(W):
    """Cosine similarity of a matrix with the identity, <W, I> / (||W||_F sqrt(d_p)).

    The diagnostic of Wang et al. (ICML 2024): the key-query matrix W of the
    attention model that solves the task is c I with c large, so a learned W
    whose alignment approaches 1 has found the solution's direction. The
    alignment of the zero matrix (the initialisation) is taken as 0.

    Parameters
    ----------
    W : array-like or torch.Tensor of shape (d_p, d_p)

    Returns
    -------
    alignment : float in [-1, 1]

    Examples
    --------
    >>> import numpy as np
    >>> identity_alignment(3 * np.eye(4))
    1.0
    >>> identity_alignment(np.ones((4, 4)))
    0.5
    """
    if hasattr(W, "detach"):
        W = W.detach().cpu().numpy()
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"W must be a square matrix; got shape {W.shape}.")
    norm = np.linalg.norm(W)
    if norm == 0:
        return 0.0
    return float(np.trace(W) / (norm * math.sqrt(W.shape[0])))
