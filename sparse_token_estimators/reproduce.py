"""Reproduce the claims of Wang, Wei, Hsu & Lee (ICML 2024) with the package's estimators.

Four experiments, each a function returning plain rows (lists of dicts) so
that tables, plots, the results file and the tests all read the same numbers:

- ``width_separation``: held-out loss of both estimators against width, from
  ``GridSearchCV`` over ``hidden_width`` and ``pe_dim`` (the transformer's
  width is d + d_p, the FCN's is m);
- ``length_generalisation``: stochastic vs fixed positional encoding, trained
  at T and scored at T, 2T, 4T, 8T; the same fits record the alignment of W
  with the identity over the epochs (``alignment`` rows);
- ``width_scaling``: for several T, the smallest FCN width and the smallest
  ``pe_dim`` that reach a target held-out R^2, against T d and q log T.

Every estimator is built with its defaults; only the widths under study, the
task sizes and ``random_state`` / ``device`` are set here. ``run`` does all of
it and judges each claim; ``report.write_outputs`` writes the results file,
tables, figures and summary.
The task is the q-sparse averaging of Sanford, Hsu & Telgarsky (NeurIPS 2023).
"""

import platform
import sys
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import sklearn
import skorch
import torch
from joblib import Parallel, delayed
from sklearn.metrics import make_scorer, r2_score
from sklearn.model_selection import GridSearchCV, PredefinedSplit
from sklearn.pipeline import Pipeline

from .callbacks import AlignmentRecorder
from .datasets import make_sparse_selection
from .estimators import SparseTokenFCN, SparseTokenTransformer
from .report import THRESHOLDS, assess_claims
from .theory import (
    fcn_lower_bound,
    fcn_width_threshold,
    selection_loss,
    transformer_pe_scale,
    uniform_attention_loss,
    zero_predictor_loss,
)


@dataclass(frozen=True)
class ReproductionConfig:
    """Sizes of one reproduction run; ``QUICK`` and ``PAPER`` are the presets.

    The width grids follow the task sizes, so changing ``seq_len`` or
    ``token_dim`` keeps every grid around the theory's thresholds.

    Parameters
    ----------
    seq_len, token_dim, n_selected : int
        The task: T tokens of dimension d, q of them averaged.
    n_samples, n_test : int
        Training and held-out sequences (the held-out set is the one test
        fold of the searches).
    pe_dims : tuple of int
        Transformer ``pe_dim`` values (width d + pe_dim).
    fcn_span : (float, float)
        The FCN's ``hidden_width`` grid: the powers of two between these
        multiples of T d, plus the transformer's widths (at T = seq_len).
    length_pe_dim : int
        ``pe_dim`` of the length-generalisation and alignment fits.
    length_factors : tuple of int
        Test lengths as multiples of ``seq_len``.
    scaling_factors : tuple of float
        Sequence lengths of the width-scaling law as multiples of ``seq_len``;
        the training set grows in proportion, as the FCN's input does.
    target_r2 : float
        Held-out R^2 a width must reach in the scaling law.
    seed : int
        Seeds the data and every estimator.
    device : str
        Passed to the estimators ("auto", "cpu", "cuda").
    n_jobs : int or None
        Parallel fits in the searches (joblib; -1: all cores).
    """

    seq_len: int = 10
    token_dim: int = 8
    n_selected: int = 3
    n_samples: int = 20000
    n_test: int = 4000
    pe_dims: tuple = (4, 8, 16, 32, 64)
    fcn_span: tuple = (0.25, 8.0)
    length_pe_dim: int = 128
    length_factors: tuple = (1, 2, 4, 8)
    scaling_factors: tuple = (0.5, 1.0, 1.5)
    target_r2: float = 0.8
    seed: int = 0
    device: str = "auto"
    n_jobs: int = -1

    def scaling_seq_lens(self):
        """The T of the scaling law (each above n_selected)."""
        return sorted({max(self.n_selected + 1, round(f * self.seq_len))
                       for f in self.scaling_factors})

    def fcn_widths(self, seq_len=None):
        """FCN widths: powers of two within a factor fcn_span of T d, and the
        transformer's widths when seq_len is the configured one."""
        threshold = (seq_len or self.seq_len) * self.token_dim
        low, high = threshold * self.fcn_span[0], threshold * self.fcn_span[1]
        widths = {2 ** k for k in range(1, 20) if low <= 2 ** k <= high}
        if seq_len in (None, self.seq_len):
            widths |= set(self.transformer_widths())
        return sorted(widths)

    def transformer_widths(self):
        return [self.token_dim + p for p in self.pe_dims]


QUICK = ReproductionConfig()
PAPER = ReproductionConfig(
    seq_len=20, n_samples=100_000, n_test=10_000,
    pe_dims=(2, 4, 8, 12, 16, 24, 32, 48, 64, 128, 256), fcn_span=(0.125, 16.0),
    scaling_factors=(0.25, 0.5, 1.0, 2.0), target_r2=0.85,
)
SCALES = {"quick": QUICK, "paper": PAPER}
#: seconds on a CPU, for the examples in the docstrings: exercises every step
#: of a run, too small to support any claim
SMOKE = ReproductionConfig(
    seq_len=4, token_dim=2, n_selected=2, n_samples=64, n_test=32, pe_dims=(2,),
    fcn_span=(1.0, 2.0), length_pe_dim=8, length_factors=(1, 4),
    scaling_factors=(0.5, 1.0), n_jobs=1, device="cpu",
)

class Progress:
    """Counts fits on stderr: a tqdm bar when tqdm is installed, else plain lines.

    Examples
    --------
    >>> progress = Progress(total=3, enabled=False)  # enabled=True draws it
    >>> progress.stage("width separation"); progress.advance(3); progress.close()
    >>> progress.done
    3
    """

    def __init__(self, total, enabled=True):
        self.total, self.done, self.enabled = total, 0, enabled
        self._bar = None
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=total, unit="fit", file=sys.stderr)

    def stage(self, text):
        if self._bar is not None:
            self._bar.set_description(text)
        elif self.enabled:
            print(f"[{self.done:>3}/{self.total}] {text} ...", file=sys.stderr, flush=True)

    def advance(self, n):
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def close(self):
        if self._bar is not None:
            self._bar.close()


# -- data and searches ------------------------------------------------------------------


def _task(config, seq_len, n_samples, role):
    """The training (``role="train"``) or held-out set at ``seq_len``, seeded.

    Every experiment that needs the set of a given length and role gets the
    same one (the searches and the length experiment share their data).
    """
    role_id = {"train": 0, "test": 1}[role]
    return make_sparse_selection(
        n_samples, seq_len, config.token_dim, config.n_selected,
        random_state=np.random.default_rng([config.seed, seq_len, role_id]),
    )


def _n_train(config, seq_len):
    """Training set size at ``seq_len``: n_samples at T, in proportion to T elsewhere."""
    return max(1, round(config.n_samples * seq_len / config.seq_len))


def _compare_widths(config, seq_len, fcn_widths, progress, label):
    """Held-out loss and R^2 of both estimators over their widths at one T.

    One ``GridSearchCV`` covers both: a one-step pipeline whose ``model`` step
    is the searched estimator (scikit-learn's idiom for comparing models), so
    all fits share the workers; the costliest come first to balance them.
    One predefined fold: train on the training set, score on the held-out
    set. ``refit=False``: only the scores are wanted.
    """
    common = {"random_state": config.seed, "device": config.device}
    X, y = _task(config, seq_len, _n_train(config, seq_len), "train")
    X_test, y_test = _task(config, seq_len, config.n_test, "test")
    grid = [
        {"model": [SparseTokenTransformer(**common)],
         "model__pe_dim": sorted(config.pe_dims, reverse=True)},
        {"model": [SparseTokenFCN(**common)],
         "model__hidden_width": sorted(fcn_widths, reverse=True)},
    ]
    search = GridSearchCV(
        Pipeline([("model", SparseTokenFCN(**common))]), grid,
        cv=PredefinedSplit(np.r_[np.full(len(X), -1), np.zeros(len(X_test), dtype=int)]),
        scoring={"loss": make_scorer(selection_loss, greater_is_better=False), "r2": "r2"},
        refit=False, return_train_score=True, n_jobs=config.n_jobs,
    )
    n_fits = len(config.pe_dims) + len(fcn_widths)
    progress.stage(f"{label}: {n_fits} fits")
    search.fit(np.concatenate([X, X_test]), np.concatenate([y, y_test]))
    progress.advance(n_fits)

    res, rows = search.cv_results_, []
    for i, params in enumerate(res["params"]):
        if isinstance(params["model"], SparseTokenFCN):
            model, param, width = "fcn", "hidden_width", params["model__hidden_width"]
        else:
            model, param = "transformer", "pe_dim"
            width = config.token_dim + params["model__pe_dim"]
        rows.append({
            "model": model, "width": int(width), param: int(params[f"model__{param}"]),
            "test_loss": float(-res["mean_test_loss"][i]),
            "test_r2": float(res["mean_test_r2"][i]),
            "train_loss": float(-res["mean_train_loss"][i]),
            "train_r2": float(res["mean_train_r2"][i]),
            "fit_time_s": float(res["mean_fit_time"][i]),
        })
    return sorted(rows, key=lambda r: (r["model"], r["width"]))


# -- the experiments ----------------------------------------------------------------


def width_separation(config, progress=None):
    """Held-out loss of the FCN and the transformer against width (claim 1).

    The FCN is fitted at every transformer width d + pe_dim (equal widths)
    and at powers of two around T d.
    """
    progress = progress or Progress(0, enabled=False)
    return _compare_widths(config, config.seq_len, config.fcn_widths(), progress,
                           f"width separation (T={config.seq_len})")


def _fit_encoding(config, encoding, X, y):
    est = SparseTokenTransformer(
        pe_dim=config.length_pe_dim, positional_encoding=encoding,
        max_seq_len=config.seq_len * max(config.length_factors),
        random_state=config.seed, device=config.device,
        callbacks=[AlignmentRecorder()],
    )
    return est.fit(X, y)


def length_generalisation(config, progress=None):
    """Stochastic vs fixed encoding at T, 2T, 4T, 8T (claim 2) and alignment (claim 3).

    Returns
    -------
    length_rows : list of dict
        Held-out loss and R^2 per encoding and test length.
    alignment_rows : list of dict
        Per encoding and epoch: alignment of W with the identity, the scale
        <W, I> / d_p and the training loss (skorch's mean over coordinates).
    """
    progress = progress or Progress(0, enabled=False)
    X, y = _task(config, config.seq_len, config.n_samples, "train")
    encodings = ("stochastic", "fixed")
    progress.stage(f"length generalisation: pe_dim={config.length_pe_dim}, 2 encodings")
    n_jobs = 1 if config.n_jobs in (None, 1) else len(encodings)
    fitted = Parallel(n_jobs=n_jobs)(
        delayed(_fit_encoding)(config, enc, X, y) for enc in encodings
    )
    progress.advance(len(encodings))

    tests = {factor: _task(config, factor * config.seq_len, config.n_test, "test")
             for factor in config.length_factors}
    length_rows, alignment_rows = [], []
    for encoding, est in zip(encodings, fitted):
        for factor, (X_test, y_test) in tests.items():
            seq_len = factor * config.seq_len
            length_rows.append({
                "encoding": encoding, "factor": factor, "seq_len": seq_len,
                "test_loss": selection_loss(y_test, est.predict(X_test)),
                "test_r2": float(est.score(X_test, y_test)),
            })
        for epoch in est.history_:
            alignment_rows.append({
                "encoding": encoding, "epoch": epoch["epoch"],
                "alignment": epoch["alignment"], "w_scale": epoch["w_scale"],
                "train_loss": epoch["train_loss"],
            })
    return length_rows, alignment_rows


def _width_of(estimator, token_dim):
    """(model, width parameter, its value, width) of a searched estimator."""
    if isinstance(estimator, SparseTokenFCN):
        return "fcn", "hidden_width", estimator.hidden_width, estimator.hidden_width
    return "transformer", "pe_dim", estimator.pe_dim, token_dim + estimator.pe_dim


def _fit_and_score(estimator, X, y, X_test, y_test):
    model, param, value, width = _width_of(estimator, X.shape[-1] - 1)
    start = time.perf_counter()
    estimator.fit(X, y)
    fit_time = time.perf_counter() - start
    pred, pred_train = estimator.predict(X_test), estimator.predict(X)
    return {
        "model": model, "width": width, param: value,
        "test_loss": selection_loss(y_test, pred),
        "test_r2": float(r2_score(y_test, pred)),
        "train_loss": selection_loss(y, pred_train),
        "train_r2": float(r2_score(y, pred_train)),
        "fit_time_s": fit_time,
    }


def _smallest_widths(config, seq_len, progress):
    """Fit each model at growing widths until one reaches ``target_r2``.

    Each round fits the next width of every unfinished model side by side.
    Wider fits cost more, so fitting two widths of one model at once to save
    a round would mostly pay for a fit the search does not need.
    """
    common = {"random_state": config.seed, "device": config.device}
    X, y = _task(config, seq_len, _n_train(config, seq_len), "train")
    X_test, y_test = _task(config, seq_len, config.n_test, "test")
    pending = {
        "fcn": [SparseTokenFCN(hidden_width=w, **common) for w in config.fcn_widths(seq_len)],
        "transformer": [SparseTokenTransformer(pe_dim=p, **common)
                        for p in sorted(config.pe_dims)],
    }
    rows = []
    while any(pending.values()):
        batch = [queue.pop(0) for queue in pending.values() if queue]
        progress.stage(f"width scaling (T={seq_len}): " + ", ".join(
            "{0} {1}={2}".format(*_width_of(est, config.token_dim)) for est in batch))
        # Even a single fit goes to a worker: it runs there with one thread.
        done = Parallel(n_jobs=config.n_jobs)(
            delayed(_fit_and_score)(est, X, y, X_test, y_test) for est in batch
        )
        progress.advance(len(batch))
        for row in done:
            rows.append(row)
            if row["test_r2"] >= config.target_r2 and pending[row["model"]]:
                progress.advance(len(pending[row["model"]]))  # skipped: wider still
                pending[row["model"]] = []
    return sorted(rows, key=lambda r: (r["model"], r["width"]))


def width_scaling(config, separation_rows=None, progress=None):
    """The smallest FCN width and ``pe_dim`` reaching ``target_r2``, per T.

    Each model is fitted at growing widths of its grid (``fcn_widths(T)``,
    ``pe_dims``) until one reaches the target; at T = seq_len the
    width-separation fits are reused.

    Parameters
    ----------
    config : ReproductionConfig
    separation_rows : list of dict, optional
        Rows of ``width_separation(config)``; reused for T = seq_len.
    progress : Progress, optional

    Returns
    -------
    point_rows : list of dict
        Every (T, model, width) fitted, with its held-out scores.
    minimal_rows : list of dict
        Per T and model, the smallest width of the grid that reached the
        target (None if none did), beside T d and q log T.
    """
    progress = progress or Progress(0, enabled=False)
    point_rows, minimal_rows = [], []
    for seq_len in config.scaling_seq_lens():
        if seq_len == config.seq_len and separation_rows is not None:
            rows = separation_rows
        else:
            rows = _smallest_widths(config, seq_len, progress)
        point_rows += [{"seq_len": seq_len, "n_train": _n_train(config, seq_len), **r}
                       for r in rows]
        grids = {"fcn": config.fcn_widths(seq_len), "transformer": config.pe_dims}
        for model, param in (("fcn", "hidden_width"), ("transformer", "pe_dim")):
            reached = [r[param] for r in rows
                       if r["model"] == model and r["test_r2"] >= config.target_r2]
            minimal_rows.append({
                "seq_len": seq_len, "model": model, "parameter": param,
                "minimal_width": min(reached) if reached else None,
                "grid_max": max(grids[model]),
                "fcn_width_threshold": fcn_width_threshold(seq_len, config.token_dim),
                "pe_scale": transformer_pe_scale(seq_len, config.n_selected),
            })
    return point_rows, minimal_rows


def _theory_references(config):
    """The theory's numbers for the configured task (losses in the task's unit)."""
    return {
        "fcn_lower_bound": fcn_lower_bound(config.seq_len, config.n_selected),
        "zero_predictor_loss": zero_predictor_loss(config.token_dim, config.n_selected),
        "uniform_attention_loss": uniform_attention_loss(
            config.seq_len, config.token_dim, config.n_selected),
        "fcn_width_threshold": fcn_width_threshold(config.seq_len, config.token_dim),
        "pe_scale": transformer_pe_scale(config.seq_len, config.n_selected),
    }


# -- driver ---------------------------------------------------------------------------


def _n_fits(config):
    """How many fits ``run`` makes (for the progress display)."""
    scaling = [T for T in config.scaling_seq_lens() if T != config.seq_len]
    # the scaling searches stop early; their skipped widths count as done
    return (len(config.fcn_widths()) + len(config.pe_dims) + 2
            + sum(len(config.fcn_widths(T)) + len(config.pe_dims) for T in scaling))


def run(config=QUICK, *, progress=True):
    """Run the four experiments and assess the claims; returns the results dict.

    Parameters
    ----------
    config : ReproductionConfig, default=QUICK
    progress : bool or Progress, default=True
        Show a progress display on stderr.

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import SMOKE, run
    >>> results = run(SMOKE, progress=False)
    >>> [c["claim"] for c in results["claims"]]
    ['width separation', 'length generalisation', 'alignment', 'width scaling']
    """
    if not isinstance(progress, Progress):
        progress = Progress(_n_fits(config), enabled=bool(progress))
    start = time.perf_counter()
    try:
        results = {"config": asdict(config), "theory": _theory_references(config)}
        results["width_separation"] = width_separation(config, progress)
        results["length_generalisation"], results["alignment"] = (
            length_generalisation(config, progress))
        points, minimal = width_scaling(config, results["width_separation"], progress)
        results["width_scaling"] = {"target_r2": config.target_r2, "points": points,
                                    "minimal": minimal}
    finally:
        progress.close()
    results["thresholds"] = dict(THRESHOLDS)
    results["claims"] = assess_claims(results)
    results["elapsed_s"] = time.perf_counter() - start
    results["versions"] = {
        "python": platform.python_version(), "torch": torch.__version__,
        "sklearn": sklearn.__version__, "skorch": skorch.__version__,
        "numpy": np.__version__,
    }
    return results


def with_sizes(config, **sizes):
    """``config`` with the given fields replaced (None values are ignored).

    Examples
    --------
    >>> with_sizes(QUICK, seq_len=20, seed=None).seq_len, QUICK.seq_len
    (20, 10)
    """
    return replace(config, **{k: v for k, v in sizes.items() if v is not None})
