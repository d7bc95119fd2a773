"""The theory of sparse token selection as functions: bounds, reference losses, diagnostics.

Losses are in the task's unit: the squared error summed over the d
coordinates of the output, averaged over samples (``selection_loss``). The
bound and the width scales are those of Wang, Wei, Hsu & Lee, "Transformers
Provably Learn Sparse Token Selection While Fully-Connected Nets Cannot"
(ICML 2024, arXiv:2406.06893), for the q-sparse averaging task of Sanford,
Hsu & Telgarsky, "Representational Strengths and Limitations of
Transformers" (NeurIPS 2023, arXiv:2306.02896).
"""

import functools
import math
import numbers
from typing import NamedTuple

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


class BestCase(NamedTuple):
    """The best case W = c I of the one-layer transformer: its R^2, standard error and c."""

    #: mean R^2 over the positional draws (the population R^2 at this c)
    r2: float
    #: standard error of ``r2`` from the Monte Carlo
    stderr: float
    #: the scale c of W = c I (the best one found, or the one given)
    c: float


def _popcount(words):
    """Number of set bits of every uint64 in ``words``."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0
        return np.bitwise_count(words)
    return _BYTE_BITS[words[..., None].view(np.uint8)].sum(axis=-1, dtype=np.int64)


_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)


def _range_masks(start, stop, n_words):
    """uint64 words whose bits start .. stop - 1 are set (bit k of word w is 64 w + k)."""
    base = 64 * np.arange(n_words)
    low = np.clip(start[..., None] - base, 0, 64).astype(np.uint64)  # (..., W)
    high = np.clip(stop[..., None] - base, 0, 64).astype(np.uint64)

    def below(k):  # the k lowest bits, k in 0 .. 64
        full = np.uint64(2**64 - 1)
        return np.where(k >= 64, full, (np.uint64(1) << np.minimum(k, 63)) - np.uint64(1))

    return below(high) ^ below(low)


def _selected_overlaps(rng, n_draws, n_pe_draws, seq_len, n_selected, pe_dim):
    """u_i = <p_i, z> for every position, z = sum_{j in S} p_j, S the first q positions.

    The positional vectors are the package's: independent random signs
    +-1/sqrt(d_p) (``positional.random_unit_vectors``). The q selected
    vectors are drawn coordinate by coordinate. For a position outside S,
    <p_i, z> = (1/d_p) sum_k sign_k |Z_k| with Z = d_p^{1/2} z and
    independent signs: with the coordinates grouped by |Z_k| = v (n_v of
    them), it is (1/d_p) sum_v v (2 B_v - n_v), B_v the number of positive
    signs of the group. One random bit per coordinate, as in the module,
    counted by group with bit masks: the same distribution as the product.
    """
    shape = (n_draws, n_pe_draws)
    signs = rng.integers(0, 2, size=(*shape, n_selected, pe_dim), dtype=np.int8) * 2 - 1
    total = signs.sum(axis=-2, dtype=np.int64)  # (n, K, d_p): d_p^{1/2} z
    inside = (signs * total[..., None, :]).sum(axis=-1) / pe_dim  # (n, K, q): 1 + crosstalk
    # |Z_k| has the parity of q, and a group with v = 0 adds nothing
    values = np.arange(n_selected % 2 or 2, n_selected + 1, 2)
    counts = (np.abs(total)[..., None] == values).sum(axis=-2)  # (n, K, V): n_v
    stops = counts.cumsum(axis=-1)  # group v holds bits stops[v] - n_v .. stops[v] - 1
    n_words = -(-pe_dim // 64)
    masks = _range_masks(stops - counts, stops, n_words)  # (n, K, V, W)
    n_outside = seq_len - n_selected
    outside = np.zeros((*shape, n_outside))
    offset = (counts @ values)[..., None]  # (n, K, 1): sum_v v n_v
    for start in range(0, n_outside, 256):  # blocks of positions: bounded memory
        size = min(256, n_outside - start)
        bits = rng.integers(0, 2**64, size=(*shape, size, 1, n_words), dtype=np.uint64,
                            endpoint=False)  # (n, K, P, 1, W): a sign per coordinate
        heads = _popcount(bits & masks[:, :, None]).sum(axis=-1, dtype=np.int64)  # (n, K, P, V)
        outside[..., start:start + size] = 2 * (heads @ values) - offset
    return np.concatenate([inside, outside / pe_dim], axis=-1)  # (n, K, T)


def _losses(overlaps, c, n_selected):
    """Per-draw sum_i (a_i - 1{i in S}/q)^2 at W = c I, the attention averaged over K."""
    scores = c * overlaps  # (n, K, T)
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    attention = weights.mean(axis=1)  # (n, T)
    attention[:, :n_selected] -= 1 / n_selected
    return (attention ** 2).sum(axis=-1)  # (n,)


def _golden_section(f, low, high, tol):
    """The minimiser of a unimodal ``f`` on [low, high], to within ``tol`` (log scale)."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = math.log(low), math.log(high)
    x1, x2 = b - ratio * (b - a), a + ratio * (b - a)
    f1, f2 = f(math.exp(x1)), f(math.exp(x2))
    while b - a > tol:
        if f1 <= f2:
            b, x2, f2 = x2, x1, f1
            x1 = b - ratio * (b - a)
            f1 = f(math.exp(x1))
        else:
            a, x1, f1 = x1, x2, f2
            x2 = a + ratio * (b - a)
            f2 = f(math.exp(x2))
    return math.exp((a + b) / 2)


#: the scales c the best-case search starts from: a log grid, then golden section
_C_GRID = np.geomspace(0.25, 64.0, 13)


@functools.lru_cache(maxsize=4096)
def _best_case(seq_len, n_selected, pe_dim, n_pe_draws, n_draws, seed, c):
    # Two independent sets of draws: c is chosen on the first and the R^2
    # measured on the second, so that the R^2 is not biased up by the choice.
    rng = np.random.default_rng([seed, seq_len, n_selected, pe_dim, n_pe_draws])
    args = (n_draws, n_pe_draws, seq_len, n_selected, pe_dim)
    if c is None:
        tuning = _selected_overlaps(rng, *args)
        mean_loss = [float(_losses(tuning, grid_c, n_selected).mean()) for grid_c in _C_GRID]
        best = int(np.argmin(mean_loss))
        low, high = _C_GRID[max(best - 1, 0)], _C_GRID[min(best + 1, len(_C_GRID) - 1)]
        c = _golden_section(lambda x: float(_losses(tuning, x, n_selected).mean()),
                            low, high, tol=5e-3)
    else:
        rng = np.random.default_rng([seed, seq_len, n_selected, pe_dim, n_pe_draws, 1])
    losses = n_selected * _losses(_selected_overlaps(rng, *args), c, n_selected)  # 1 - R^2
    return BestCase(float(1 - losses.mean()), float(losses.std(ddof=1) / math.sqrt(n_draws)),
                    float(c))


def _check_best_case_args(seq_len, n_selected, n_pe_draws, n_draws, random_state):
    seq_len, n_selected = _check_sizes(seq_len, n_selected)
    n_pe_draws = check_int(n_pe_draws, "n_pe_draws")
    n_draws = check_int(n_draws, "n_draws", minimum=2)
    if isinstance(random_state, bool) or not isinstance(random_state, numbers.Integral) \
            or random_state < 0:
        raise TypeError(
            f"random_state must be a non-negative int (the result is cached on it); got "
            f"{random_state!r}."
        )
    return seq_len, n_selected, n_pe_draws, n_draws, int(random_state)


def best_case_r2(seq_len, n_selected, pe_dim, *, c=None, n_pe_draws=1, n_draws=16000,
                 random_state=0):
    """R^2 of the one-layer transformer at W = c I, with fresh positional draws.

    The best case of :class:`~sparse_token_estimators.SparseTokenTransformer`
    (stochastic encoding) at a given ``pe_dim``: no training, W = c I at the
    c that maximises the population R^2 (or at the ``c`` given). The
    positional vectors are the module's own, independent signs
    +-1/sqrt(d_p) drawn afresh for every sequence (``positional``), the
    scores p_i^T W z with z = sum_{i in S} p_i, unscaled, as in the module.

    The attention a does not depend on the tokens, so the R^2 needs only the
    positional draws. With tokens x_i i.i.d. N(0, I_d) and y = (1/q)
    sum_{i in S} x_i, the error of the prediction sum_i a_i x_i is
    sum_i (a_i - 1{i in S}/q) x_i: per coordinate, its mean square is
    E[sum_i (a_i - 1{i in S}/q)^2], and Var(y) = 1/q per coordinate, so::

        R^2 = 1 - q E[sum_i (a_i - 1{i in S}/q)^2]

    over the draws (S is the first q positions: the model is symmetric in the
    positions). It is estimated by Monte Carlo over ``n_draws`` draws; the
    best c is found on a first set of draws (a log grid over 0.25 .. 64,
    then a golden-section search), and the R^2 measured at it on a second,
    independent set, so the choice of c does not bias it. The inner products
    of a position outside S with z are drawn from their exact distribution
    given z (a sum of binomials), so the cost grows with T but not with
    ``pe_dim``. Results are cached on the arguments.

    Parameters
    ----------
    seq_len : int
        Sequence length T.
    n_selected : int
        Number q of selected tokens, 1 <= q <= T.
    pe_dim : int
        Positional dimension d_p.
    c : float or None, default=None
        The scale of W = c I; None: the best one.
    n_pe_draws : int, default=1
        The attention is averaged over this many draws, as the module's
        ``n_pe_draws`` does (1: the paper's model).
    n_draws : int, default=16000
        Monte Carlo draws (sequences) for each set: a standard error of the
        R^2 near 0.8 of about 0.001, a few tenths of a unit of ``pe_dim``
        at small T (4000 draws give about twice that error).
    random_state : int, default=0
        Seed of the draws (an int: the results are cached).

    Returns
    -------
    best : BestCase
        ``(r2, stderr, c)``: the R^2, its Monte Carlo standard error and c.

    See Also
    --------
    pe_dim_best : the smallest ``pe_dim`` whose best case reaches a target.

    Examples
    --------
    >>> best = best_case_r2(16, 3, 30)
    >>> round(best.r2, 2), round(best.c, 1)
    (0.8, 2.9)
    >>> best_case_r2(16, 3, 30, c=0.0).r2 < 0.2  # W = 0: uniform attention, R^2 q / T
    True
    """
    seq_len, n_selected, n_pe_draws, n_draws, seed = _check_best_case_args(
        seq_len, n_selected, n_pe_draws, n_draws, random_state)
    pe_dim = check_int(pe_dim, "pe_dim")
    if c is not None:
        if not (isinstance(c, numbers.Real) and math.isfinite(c)):
            raise ValueError(f"c must be a finite number or None; got {c!r}.")
        c = float(c)
    return _best_case(seq_len, n_selected, pe_dim, n_pe_draws, n_draws, seed, c)


def pe_dim_best(seq_len, n_selected, target=0.8, *, n_pe_draws=1, n_draws=16000,
                random_state=0, max_pe_dim=65536):
    """The smallest ``pe_dim`` at which the best case W = c I reaches R^2 ``target``.

    The reference width of the transformer (verdict 4 of the reproduction's
    second set): computed without training from :func:`best_case_r2`, a function of
    T, q and the target only. The R^2 of the best case rises with
    ``pe_dim``; the search doubles ``pe_dim`` from 1 until the Monte Carlo
    estimate reaches ``target``, then bisects over the integers. Near the
    crossing the estimate carries the Monte Carlo noise of ``n_draws`` draws
    (``best_case_r2(...).stderr``), so neighbouring ``pe_dim`` may come out
    in either order; the result is the smallest passing width found by the
    bisection. A width far from the crossing (4 standard errors) is settled
    on a sixteenth of the draws.

    Parameters
    ----------
    seq_len : int
        Sequence length T.
    n_selected : int
        Number q of selected tokens.
    target : float, default=0.8
        The R^2 to reach, below 1.
    n_pe_draws, n_draws, random_state
        As in :func:`best_case_r2`.
    max_pe_dim : int, default=65536
        Give up (ValueError) beyond this width.

    Returns
    -------
    pe_dim : int

    Examples
    --------
    >>> pe_dim_best(16, 3)
    30
    """
    args = _check_best_case_args(seq_len, n_selected, n_pe_draws, n_draws, random_state)
    if not (isinstance(target, numbers.Real) and target < 1):
        raise ValueError(f"target must be a number below 1; got {target!r}.")
    max_pe_dim = check_int(max_pe_dim, "max_pe_dim")
    seq_len, n_selected, n_pe_draws, n_draws, seed = args

    def passes(pe_dim):
        # A sixteenth of the draws settles a width far from the crossing (4
        # standard errors away); only the others need them all.
        screen = _best_case(seq_len, n_selected, pe_dim, n_pe_draws,
                            max(n_draws // 16, 2), seed, None)
        if abs(screen.r2 - target) > 4 * screen.stderr:
            return screen.r2 >= target
        best = _best_case(seq_len, n_selected, pe_dim, n_pe_draws, n_draws, seed, None)
        return best.r2 >= target

    low, high = 0, 1  # low fails (pe_dim 0 is uniform attention at best), high is tried
    while not passes(high):
        if high >= max_pe_dim:
            raise ValueError(
                f"no pe_dim up to max_pe_dim={max_pe_dim} reaches R^2 {target} at "
                f"seq_len={seq_len}, n_selected={n_selected}; raise max_pe_dim."
            )
        low, high = high, min(2 * high, max_pe_dim)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if passes(mid) else (mid, high)
    return high
