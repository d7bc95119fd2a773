"""The fits of a run: which models, how they train, and one search per data set.

Experiments ask for :class:`Fit` s (a model, its width, a sequence length);
the run fits each distinct one once per seed, so experiments that need the
same model share it. All fits on one training set (one seed, one T) go into
one ``GridSearchCV`` over a one-step pipeline whose step is the estimator
(scikit-learn's idiom for comparing models), costliest first so the workers
stay busy: train on the training set, score on a validation set (the one
predefined fold), ``refit=False``. Its scorer measures everything the
experiments read off a fitted model: validation and held-out loss and R^2
at T, held-out R^2 at every length of the dense grid (transformers), the
alignment record (transformers) and the fit's CPU time.

Losses are squared errors summed over the d coordinates (``selection_loss``);
R^2 is scikit-learn's ``r2_score`` averaged over the d outputs.
"""

import math
import time
import warnings
from dataclasses import asdict, dataclass

import numpy as np
from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV, PredefinedSplit
from sklearn.pipeline import Pipeline
from skorch.callbacks import Callback

from ..callbacks import AlignmentRecorder, trace_steps
from ..estimators import SparseTokenFCN, SparseTokenTransformer
from ._data import task

#: what the alignment record holds at each point
TRACE_KEYS = ("sequences_seen", "alignment", "w_scale")


@dataclass(frozen=True)
class Model:
    """A kind of model a run can fit: what it is called, how it is built and trained.

    Parameters
    ----------
    name : str
        How every table row and legend names it; ``{n_pe_draws}`` is filled
        in from the configuration.
    family : {"fcn", "transformer"}
        ``SparseTokenFCN`` (width: ``hidden_width``) or
        ``SparseTokenTransformer`` (width: ``pe_dim``).
    training : str
        The configuration's :class:`Training` field it trains with.
    params : tuple of (str, value)
        Fixed estimator parameters, e.g. ``(("positional_encoding", "fixed"),)``.
    ensemble : bool
        Averages the configuration's ``n_pe_draws`` positional draws
        (otherwise one draw, the paper's model).
    """

    name: str
    family: str
    training: str
    params: tuple = ()
    ensemble: bool = False


#: the models experiments can ask for, by key; an experiment that needs
#: another (an encoding, say) adds it here from its own module
MODELS = {
    "fcn": Model("FCN", "fcn", "fcn_training"),
    "paper": Model("transformer, paper's model (1 positional draw)", "transformer",
                   "paper_training"),
    "ensemble": Model("transformer, {n_pe_draws}-draw ensemble (package extension)",
                      "transformer", "ensemble_training", ensemble=True),
    "fixed": Model("transformer, fixed PE (paper's baseline)", "transformer",
                   "paper_training", params=(("positional_encoding", "fixed"),)),
}


def model_name(model, config):
    """What a model is, as every table row and legend names it."""
    return MODELS[model].name.format(n_pe_draws=config.n_pe_draws)


def training(model, config):
    """The :class:`Training` of ``model``."""
    return getattr(config, MODELS[model].training)


def width_parameter(model):
    """``hidden_width`` or ``pe_dim``: what the width of a ``model`` fit sets."""
    return "hidden_width" if MODELS[model].family == "fcn" else "pe_dim"


def describe_models(config, models=None):
    """``{model key: {"name", "training"}}``: what each model is and how it trains."""
    return {key: {"name": model_name(key, config), "training": asdict(training(key, config))}
            for key in (models or MODELS)}


@dataclass(frozen=True, order=True)
class Fit:
    """One model the run fits, once per seed.

    Parameters
    ----------
    model : str
        A key of ``MODELS``: "fcn"; "paper" (the transformer with one
        stochastic positional draw); "ensemble" (``n_pe_draws`` draws
        averaged, the package's extension); "fixed" (a fixed positional
        table, the paper's baseline).
    width : int
        ``hidden_width`` of the FCN, ``pe_dim`` of a transformer.
    seq_len : int
        Training length T.
    """

    model: str
    width: int
    seq_len: int

    def model_width(self, config):
        """The width the theory compares: m for the FCN, d + pe_dim for a transformer."""
        return self.width if MODELS[self.model].family == "fcn" \
            else config.token_dim + self.width

    def _draws(self, config):
        return config.n_pe_draws if MODELS[self.model].ensemble else 1

    def estimator(self, config, seed):
        """The unfitted estimator of this fit for ``seed``."""
        spec, train = MODELS[self.model], training(self.model, config)
        common = {"lr": train.lr, "max_epochs": train.max_epochs,
                  "batch_size": train.batch_size, "random_state": seed,
                  "device": config.device, **dict(spec.params)}
        if spec.family == "fcn":
            return SparseTokenFCN(hidden_width=self.width, callbacks=[_FitClock()], **common)
        recorder = AlignmentRecorder(steps_per_doubling=config.trace_steps_per_doubling)
        return SparseTokenTransformer(
            pe_dim=self.width, n_pe_draws=self._draws(config),
            max_seq_len=max(config.length_grid()), callbacks=[recorder, _FitClock()],
            **common,
        )

    def cost(self, config):
        """Estimated CPU seconds of the fit (for ordering and the time left).

        Per sequence and epoch, measured on one CPU thread: about
        3 + 0.005 T pe_dim microseconds per positional draw for a
        transformer, 2 + 1e-4 T (d + 1) m for the FCN; and half a second per
        fit of set-up and scoring.
        """
        train = training(self.model, config)
        T = self.seq_len
        if MODELS[self.model].family == "fcn":
            micro = 2 + 1e-4 * T * (config.token_dim + 1) * self.width
        else:
            micro = 3 + 0.005 * self._draws(config) * T * self.width
        return 0.5 + 1e-6 * micro * config.n_train(T) * train.max_epochs


class _FitClock(Callback):
    """Record the fit's CPU time (this process) as ``fit_cpu_s`` in ``history_``.

    On a machine shared with other work, CPU time measures the fit's own
    cost, where wall-clock time also counts the others.
    """

    def on_train_begin(self, net, **kwargs):
        self.start_ = time.process_time()

    def on_train_end(self, net, **kwargs):
        net.history.record("fit_cpu_s", time.process_time() - self.start_)


class _Evaluate:
    """The searches' scorer: every number the experiments read off one fit.

    Called as ``scorer(pipeline, X_validation, y_validation)``; returns a
    dict of floats (NaN where a number does not apply to the model, e.g.
    the FCN at other lengths). The held-out sets are drawn here from the
    seed, the same in every worker.
    """

    def __init__(self, config, seq_len, seed, lengths, steps):
        self.config, self.seq_len, self.seed = config, seq_len, seed
        self.lengths, self.steps = lengths, steps

    def __call__(self, pipeline, X, y):
        model = pipeline[-1]
        scores = {}
        for prefix, (X_, y_) in (("val", (X, y)), ("test", task(
                self.config, self.seq_len, self.config.n_test, "test", self.seed))):
            pred = model.predict(X_)
            per_sample = ((np.asarray(y_, np.float64) - pred) ** 2).sum(axis=1)
            scores[f"{prefix}_loss"] = float(per_sample.mean())
            scores[f"{prefix}_r2"] = float(r2_score(y_, pred))
        scores["test_loss_se"] = float(per_sample.std(ddof=1) / math.sqrt(len(per_sample)))
        history = model.history_
        # skorch records the mean over the last epoch's batches of the
        # per-coordinate MSE; times d: summed over the coordinates
        scores["train_loss"] = float(history[-1, "train_loss"]) * self.config.token_dim
        scores["fit_cpu_s"] = float(history[-1, "fit_cpu_s"])
        transformer = isinstance(model, SparseTokenTransformer)
        # the dense grid where the per-length curve is drawn, the named
        # lengths for the other pe_dims: drawing and predicting 40 lengths
        # costs an 8-draw ensemble as much as a third of its fit
        named = {f * self.config.seq_len for f in self.config.length_factors}
        dense = transformer and model.pe_dim == self.config.length_pe_dim
        for L in self.lengths:
            r2 = math.nan
            if transformer and (dense or L in named):
                X_L, y_L = task(self.config, L, self.config.n_length_test, "length", self.seed)
                r2 = float(r2_score(y_L, model.predict(X_L)))
            scores[f"r2@{L}"] = r2
        trace = {}
        if transformer:
            trace = {r["step"]: r for epoch in history[:, "alignment_trace"] for r in epoch}
        for step in self.steps:
            record = trace.get(step, {})
            for key in TRACE_KEYS:
                scores[f"{key}@{step}"] = float(record.get(key, math.nan))
        last = trace[max(trace)] if trace else {}
        for key in TRACE_KEYS:
            scores[f"{key}@end"] = float(last.get(key, math.nan))
        return scores


def _record(fit, config, seed, results, i, lengths, steps):
    """One fit's numbers, out of a search's ``cv_results_``."""
    def score(key):
        return float(results[f"split0_test_{key}"][i])

    record = {
        "model": fit.model, "model_name": model_name(fit.model, config),
        "width": fit.model_width(config), width_parameter(fit.model): fit.width,
        "seq_len": fit.seq_len, "n_train": config.n_train(fit.seq_len), "seed": seed,
        **{key: score(key) for key in ("val_loss", "val_r2", "test_loss", "test_r2",
                                        "test_loss_se", "train_loss", "fit_cpu_s")},
        "fit_s": float(results["mean_fit_time"][i]),
        "score_s": float(results["mean_score_time"][i]),
        "r2_by_length": {L: score(f"r2@{L}") for L in lengths},
        "trace": [],
    }
    if MODELS[fit.model].family == "transformer":
        for step in steps:
            point = {"step": step, **{key: score(f"{key}@{step}") for key in TRACE_KEYS}}
            if not math.isnan(point["alignment"]):
                record["trace"].append(point)
        end = {key: score(f"{key}@end") for key in TRACE_KEYS}
        if end["sequences_seen"] > record["trace"][-1]["sequences_seen"]:
            steps_done = training(fit.model, config).steps(config.n_train(fit.seq_len))
            record["trace"].append({"step": steps_done, **end})
    return record


def run_fits(config, fits, progress):
    """Fit every distinct ``Fit`` for every seed; one record per fit and seed.

    Parameters
    ----------
    config : ReproductionConfig
    fits : iterable of Fit
        Duplicates are fitted once.
    progress : Progress
        Advanced as each fit finishes (the caller counts joblib's tasks).

    Returns
    -------
    records : dict
        ``(fit, seed) -> record`` (see ``_record``).
    """
    fits = sorted(set(fits))
    records = {}
    for seq_len in sorted({f.seq_len for f in fits}):
        # lengths are multiples of the configured T: only its fits are scored there
        lengths = config.length_grid() if seq_len == config.seq_len else []
        group = sorted((f for f in fits if f.seq_len == seq_len),
                       key=lambda f: -f.cost(config))
        max_steps = max((training(f.model, config).steps(config.n_train(seq_len))
                         for f in group if MODELS[f.model].family == "transformer"), default=0)
        steps = trace_steps(config.trace_steps_per_doubling, max_steps) if max_steps else []
        for seed in config.seeds():
            progress.stage(f"T={seq_len}, seed {seed}", n_fits=len(group),
                           cost=sum(f.cost(config) for f in group))
            results = _search(config, seq_len, seed, group, lengths, steps)
            for i, fit in enumerate(group):
                records[fit, seed] = _record(fit, config, seed, results, i, lengths, steps)
    return records


def _search(config, seq_len, seed, group, lengths, steps):
    X, y = task(config, seq_len, config.n_train(seq_len), "train", seed)
    X_val, y_val = task(config, seq_len, config.n_test, "validation", seed)
    search = GridSearchCV(
        Pipeline([("model", group[0].estimator(config, seed))]),
        [{"model": [fit.estimator(config, seed)]} for fit in group],
        scoring=_Evaluate(config, seq_len, seed, lengths, steps),
        cv=PredefinedSplit(np.r_[np.full(len(X), -1), np.zeros(len(X_val), dtype=int)]),
        refit=False, error_score="raise", n_jobs=config.n_jobs,
    )
    with warnings.catch_warnings():
        # NaN marks the numbers that do not apply to a model (the FCN at
        # other lengths, its alignment); scikit-learn warns about each.
        warnings.filterwarnings("ignore", message="One or more of the test scores are "
                                "non-finite", category=UserWarning)
        search.fit(np.concatenate([X, X_val]), np.concatenate([y, y_val]))
    return search.cv_results_
