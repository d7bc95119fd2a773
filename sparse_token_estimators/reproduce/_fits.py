"""The fits of a run: which models, how they train, and how each kind is run.

Experiments ask for :class:`Fit` s (a model, its width, a sequence length,
and what it trains on); the run fits each distinct one once per seed, so
experiments that need the same model share it. Three kinds of fit, three
runners, each a scikit-learn idiom whose fits joblib runs (and the progress
display counts one by one):

- on a fixed training set (the default): all such fits on one training set
  (one seed, one T) go into one ``GridSearchCV`` over a one-step pipeline
  whose step is the estimator (scikit-learn's idiom for comparing models),
  costliest first so the workers stay busy: train on the training set,
  score on a validation set (the one predefined fold), ``refit=False``;
- on the population (``data="population"``): ``fit`` on a
  ``SparseSelectionStream`` of as many fresh sequences every epoch; a
  stream cannot be split, so these go to scikit-learn's ``Parallel``
  directly, all seeds of one T together;
- on training sets of several sizes with a budget of optimisation steps
  (``n_train`` and ``max_steps``): one ``learning_curve`` per model, T and
  seed, on nested subsets of one pool of sequences.

The first two are scored by one scorer that measures everything the
experiments read off a fitted model: validation and held-out loss and R^2
at T, held-out R^2 at every length of the dense grid (transformers), the
alignment record (transformers) and the fit's CPU time. A learning curve
scores R^2 on the training subset and on the held-out set.

Losses are squared errors summed over the d coordinates (``selection_loss``);
R^2 is scikit-learn's ``r2_score`` averaged over the d outputs.
"""

import math
import time
import warnings
from dataclasses import asdict, dataclass

import numpy as np
from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV, PredefinedSplit, learning_curve
from sklearn.pipeline import Pipeline
from sklearn.utils.parallel import Parallel, delayed
from skorch.callbacks import Callback

from .._more_estimators import SparseTokenEncoder, SparseTokenRNN
from ..callbacks import AlignmentRecorder, StepBudget, trace_steps
from ..datasets import SparseSelectionStream
from ..estimators import SparseTokenFCN, SparseTokenTransformer
from ._data import stream_seed, task
from ._records import active_store

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
    family : {"fcn", "transformer", "encoder", "rnn"}
        ``SparseTokenFCN`` (width: ``hidden_width``),
        ``SparseTokenTransformer`` (width: ``pe_dim``), and beyond the
        paper ``SparseTokenEncoder`` (width: ``d_model``) or
        ``SparseTokenRNN`` (width: ``hidden_size``).
    training : str
        The configuration's :class:`Training` field it trains with.
    params : tuple of (str, value)
        Fixed estimator parameters, e.g. ``(("positional_encoding", "fixed"),)``.
    ensemble : bool
        Averages the configuration's ``n_pe_draws`` positional draws
        (otherwise one draw, the paper's model).
    cost : float
        Its cost per sequence relative to the cost model's (measured: a
        learned table's gradient, the randomized encoding's top-k).
    """

    name: str
    family: str
    training: str
    params: tuple = ()
    ensemble: bool = False
    cost: float = 1.0


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
    # the critical-width searches train on the population with their own
    # steps (checked by doubling them): the same models, another training
    "paper_scaling": Model("transformer, paper's model (1 positional draw; scaling-law "
                           "training)", "transformer", "scaling_training"),
    "fcn_tightness": Model("FCN (tightness training)", "fcn", "tightness_training"),
}


def model_name(model, config):
    """What a model is, as every table row and legend names it."""
    return MODELS[model].name.format(n_pe_draws=config.n_pe_draws)


def training(model, config):
    """The :class:`Training` of ``model``."""
    return getattr(config, MODELS[model].training)


#: family -> the estimator parameter a fit's width sets
WIDTH_PARAMETERS = {"fcn": "hidden_width", "transformer": "pe_dim", "encoder": "d_model",
                    "rnn": "hidden_size"}


def width_parameter(model):
    """``hidden_width``, ``pe_dim``, ...: what the width of a ``model`` fit sets."""
    return WIDTH_PARAMETERS[MODELS[model].family]


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
        table, the paper's baseline); and those experiments add.
    width : int
        ``hidden_width`` of the FCN, ``pe_dim`` of a transformer.
    seq_len : int
        Training length T.
    data : {"sample", "population"}, default="sample"
        "sample": a fixed training set, the same in every epoch;
        "population": a ``SparseSelectionStream``, fresh sequences every
        epoch (the population loss of the paper's theory).
    n_train : int, default=0
        Training sequences (per epoch, for the population); 0: the
        configuration's ``n_train(seq_len)``.
    max_steps : int, default=0
        0: the model's training (``max_epochs`` epochs). Otherwise exactly
        this many optimisation steps, whatever ``n_train`` (a
        :class:`~sparse_token_estimators.callbacks.StepBudget`, with
        ``max_epochs`` high enough to use it up): fits of different sizes
        then differ in data, not in optimisation. Such fits are made in a
        ``learning_curve``, one per model, width, T and seed.
    """

    model: str
    width: int
    seq_len: int
    data: str = "sample"
    n_train: int = 0
    max_steps: int = 0

    def model_width(self, config):
        """The width the theory compares: d + pe_dim for the paper's transformer, the
        width parameter itself for the others (m for the FCN)."""
        return config.token_dim + self.width if MODELS[self.model].family == "transformer" \
            else self.width

    def training_size(self, config):
        """Training sequences of the fit (per epoch, for the population)."""
        return self.n_train or config.n_train(self.seq_len)

    def _draws(self, config):
        return config.n_pe_draws if MODELS[self.model].ensemble else 1

    def estimator(self, config, seed):
        """The unfitted estimator of this fit for ``seed``."""
        spec, train = MODELS[self.model], training(self.model, config)
        # A budget of steps: one step per epoch at the least, so that the
        # smallest training set (a single batch) still uses up the budget.
        epochs, budget = (self.max_steps, [StepBudget(self.max_steps)]) if self.max_steps \
            else (train.max_epochs, [])
        common = {"lr": train.lr_at(self.width), "max_epochs": epochs,
                  "batch_size": train.batch_size, "random_state": seed,
                  "device": config.device, **dict(spec.params)}
        if self.max_steps:
            # skorch's PrintLog tabulates every epoch even when silent: a fifth
            # of a fit whose small training set makes an epoch of one step
            common["callbacks__print_log"] = None
        if spec.family == "fcn":
            return SparseTokenFCN(hidden_width=self.width, callbacks=[*budget, _FitClock()],
                                  **common)
        if spec.family == "encoder":
            return SparseTokenEncoder(d_model=self.width,
                                      max_seq_len=max(*config.length_grid(), self.seq_len),
                                      callbacks=[*budget, _FitClock()], **common)
        if spec.family == "rnn":
            return SparseTokenRNN(hidden_size=self.width, callbacks=[*budget, _FitClock()],
                                  **common)
        # the learning curves read no alignment: no record to keep
        recorder = [] if self.max_steps else [
            AlignmentRecorder(steps_per_doubling=config.trace_steps_per_doubling)]
        return SparseTokenTransformer(
            pe_dim=self.width, n_pe_draws=self._draws(config),
            max_seq_len=max(config.length_grid()), callbacks=[*recorder, *budget, _FitClock()],
            **common,
        )

    def sequences(self, config):
        """Sequences the fit's optimisation processes (steps times batch)."""
        train, n = training(self.model, config), self.training_size(config)
        if self.max_steps:
            return self.max_steps * min(n, train.batch_size)
        return n * train.max_epochs

    def cost(self, config):
        """Estimated CPU seconds of the fit (for ordering and the time left).

        Per sequence processed, measured on one CPU thread: about
        3 + 0.005 T pe_dim microseconds per positional draw for a
        transformer, 2 + 1e-4 T (d + 1) m for the FCN; drawing the
        population's sequences adds about a tenth, some encodings more
        (``Model.cost``); half a second per fit of
        set-up and scoring. A learning curve's fit adds 0.5 ms per step
        (the per-step work that long fits spread over large batches) and a
        third of a training step's cost per sequence it scores (its
        training subset and the held-out set).
        """
        T, family = self.seq_len, MODELS[self.model].family
        if family == "fcn":
            micro = 2 + 1e-4 * T * (config.token_dim + 1) * self.width
        elif family == "encoder":  # guessed from bench_fit.py's rows, not fitted
            micro = 20 + 0.3 * T * self.width
        elif family == "rnn":
            micro = 10 + 0.15 * T * self.width
        else:
            micro = 3 + 0.005 * self._draws(config) * T * self.width
        micro *= MODELS[self.model].cost * (1.1 if self.data == "population" else 1.0)
        if not self.max_steps:
            return 0.5 + 1e-6 * micro * self.sequences(config)
        scored = (self.training_size(config) + config.n_test) / 3
        return 0.5 + 5e-4 * self.max_steps + 1e-6 * micro * (self.sequences(config) + scored)


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
        # the architectures beyond the paper's: any length, scored at the named ones
        any_length = transformer or isinstance(model, (SparseTokenEncoder, SparseTokenRNN))
        for L in self.lengths:
            r2 = math.nan
            if any_length and (dense or L in named):
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


def _describe(fit, config, seed):
    """What every record of ``fit`` starts with: the model and its training."""
    return {
        "model": fit.model, "model_name": model_name(fit.model, config),
        "width": fit.model_width(config), width_parameter(fit.model): fit.width,
        "seq_len": fit.seq_len, "data": fit.data, "n_train": fit.training_size(config),
        "max_steps": fit.max_steps, "seed": seed,
    }


def _record(fit, config, seed, score, fit_s, score_s, lengths, steps):
    """One fit's numbers, from ``score(key)`` of ``_Evaluate``'s keys."""
    record = {
        **_describe(fit, config, seed),
        **{key: score(key) for key in ("val_loss", "val_r2", "test_loss", "test_r2",
                                        "test_loss_se", "train_loss", "fit_cpu_s")},
        "fit_s": fit_s, "score_s": score_s,
        "r2_by_length": {L: score(f"r2@{L}") for L in lengths},
        "trace": [],
    }
    if MODELS[fit.model].family == "transformer":
        for step in steps:
            point = {"step": step, **{key: score(f"{key}@{step}") for key in TRACE_KEYS}}
            if not math.isnan(point["alignment"]):
                record["trace"].append(point)
        end = {key: score(f"{key}@end") for key in TRACE_KEYS}
        if record["trace"] and end["sequences_seen"] > record["trace"][-1]["sequences_seen"]:
            steps_done = training(fit.model, config).steps(fit.training_size(config))
            record["trace"].append({"step": steps_done, **end})
    return record


def run_fits(config, fits, progress, store=None):
    """Fit every distinct ``Fit`` for every seed; one record per fit and seed.

    Parameters
    ----------
    config : ReproductionConfig
    fits : iterable of Fit
        Duplicates are fitted once.
    progress : Progress
        Advanced as each fit finishes (the caller counts joblib's tasks);
        fits read back from ``store`` count as done (``Progress.resume``).
    store : RecordStore or None, default=None
        Where finished fits are saved and read back (None: the store of the
        enclosing ``_records.recording`` block, which ``run`` opens, if
        any): a fit whose record ``store`` holds (same ``Fit``, seed and
        configuration) is not fitted again. Records are saved as their fits
        finish: one search's fits (one training set: one T and seed)
        together when the search returns (``GridSearchCV`` returns nothing
        before), a learning curve's when it returns, each population fit on
        its own.

    Returns
    -------
    records : dict
        ``(fit, seed) -> record`` (see ``_record``; for the fits of a
        learning curve, ``_learning_curve``).
    """
    fits = sorted(set(fits))
    records = {}
    store = store if store is not None else active_store()

    def to_fit(jobs, text):
        """The ``(fit, seed)`` of ``jobs`` not in ``store``; the others are read back."""
        todo, resumed = [], []
        for fit, seed in jobs:
            record = None if store is None else store.get(config, fit, seed)
            if record is None:
                todo.append((fit, seed))
            else:
                records[fit, seed] = record
                resumed.append(fit)
        if resumed:
            progress.resume(len(resumed), sum(f.cost(config) for f in resumed), text)
        return todo

    def keep(new):
        for (fit, seed), record in new.items():
            records[fit, seed] = record
            if store is not None:
                store.put(config, fit, seed, record)

    for seq_len in sorted({f.seq_len for f in fits}):
        at_T = [f for f in fits if f.seq_len == seq_len]
        # lengths are multiples of the configured T: only its fits are scored there
        lengths = config.length_grid() if seq_len == config.seq_len else []
        searched = [f for f in at_T if f.data == "sample" and not f.max_steps]
        population = [f for f in at_T if f.data == "population" and not f.max_steps]
        curves = [f for f in at_T if f.max_steps]
        transformers = [f for f in searched + population
                        if MODELS[f.model].family == "transformer"]
        max_steps = max((training(f.model, config).steps(f.training_size(config))
                         for f in transformers), default=0)
        steps = trace_steps(config.trace_steps_per_doubling, max_steps) if max_steps else []
        if searched:
            if len({f.training_size(config) for f in searched}) > 1:
                raise ValueError("fits on a fixed sample of another size than n_train(T) "
                                 "need max_steps (a learning curve)")
            for seed in config.seeds():
                text = f"T={seq_len}, seed {seed}"
                group = sorted((f for f, _ in to_fit([(f, seed) for f in searched], text)),
                               key=lambda f: -f.cost(config))
                if not group:
                    continue
                progress.stage(text, n_fits=len(group), cost=sum(f.cost(config) for f in group))
                results = _search(config, seq_len, seed, group, lengths, steps)
                new = {}
                for i, fit in enumerate(group):
                    def score(key, i=i, results=results):
                        return float(results[f"split0_test_{key}"][i])

                    new[fit, seed] = _record(
                        fit, config, seed, score, float(results["mean_fit_time"][i]),
                        float(results["mean_score_time"][i]), lengths, steps)
                keep(new)
        if population:
            jobs = to_fit([(f, seed) for f in population for seed in config.seeds()],
                          f"T={seq_len}, population")
            if jobs:
                _run_population(config, seq_len, jobs, lengths, steps, progress, keep)
        for key in sorted({(f.model, f.width, f.data, f.max_steps) for f in curves}):
            group = sorted((f for f in curves if (f.model, f.width, f.data, f.max_steps)
                            == key), key=lambda f: f.n_train)
            for seed in config.seeds():
                text = (f"T={seq_len}, learning curve of {model_name(key[0], config)}"
                        f", seed {seed}")
                todo = [f for f, _ in to_fit([(f, seed) for f in group], text)]
                if not todo:
                    continue
                progress.stage(text, n_fits=len(todo), cost=sum(f.cost(config) for f in todo))
                keep(_learning_curve(config, todo, seed, pool=group[-1].n_train))
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


def _fit_population(config, fit, seed, lengths, steps):
    """Fit ``fit`` on the population and score it as the searches do (in a worker)."""
    stream = SparseSelectionStream(
        fit.seq_len, config.token_dim, config.n_selected, n_samples=fit.training_size(config),
        random_state=stream_seed(fit.seq_len, seed), device=config.device)
    model = fit.estimator(config, seed)
    start = time.perf_counter()
    model.fit(stream)
    fit_s = time.perf_counter() - start
    X_val, y_val = task(config, fit.seq_len, config.n_test, "validation", seed)
    scores = _Evaluate(config, fit.seq_len, seed, lengths, steps)(
        Pipeline([("model", model)]), X_val, y_val)
    return scores, fit_s, time.perf_counter() - start - fit_s


def _run_population(config, seq_len, jobs, lengths, steps, progress, keep):
    """The population fits ``jobs`` (``(fit, seed)``) at ``seq_len``, in one ``Parallel``
    run; ``keep({(fit, seed): record})`` is called as each returns, in order."""
    jobs = sorted(jobs, key=lambda job: -job[0].cost(config))
    progress.stage(f"T={seq_len}, population", n_fits=len(jobs),
                   cost=sum(fit.cost(config) for fit, _ in jobs))
    out = Parallel(n_jobs=config.n_jobs, return_as="generator")(
        delayed(_fit_population)(config, fit, seed, lengths, steps) for fit, seed in jobs)
    for (fit, seed), (scores, fit_s, score_s) in zip(jobs, out):
        keep({(fit, seed): _record(fit, config, seed, scores.__getitem__, fit_s, score_s,
                                   lengths, steps)})


def _learning_curve(config, group, seed, pool=None):
    """Records of the fits of one learning curve: nested subsets of one pool.

    ``group``: fits that differ only in ``n_train``. The pool is the
    largest training set of the curve (``pool`` sequences, by default the
    largest of ``group``: a resumed curve draws the same pool whichever of
    its fits are left); each fit trains on its first ``n_train``
    sequences (``learning_curve`` without shuffling), with the same budget
    of steps, and is scored (R^2) on the pool's subset it trained on and on
    the held-out set of the seed.
    """
    T, sizes = group[0].seq_len, [f.n_train for f in group]
    X, y = task(config, T, pool or max(sizes), "pool", seed)
    X_test, y_test = task(config, T, config.n_test, "test", seed)
    sizes_done, train, test, fit_s, score_s = learning_curve(
        group[0].estimator(config, seed), np.concatenate([X, X_test]),
        np.concatenate([y, y_test]), train_sizes=sizes,
        cv=PredefinedSplit(np.r_[np.full(len(X), -1), np.zeros(len(X_test), dtype=int)]),
        scoring="r2", n_jobs=config.n_jobs, return_times=True, error_score="raise")
    return {(fit, seed): {**_describe(fit, config, seed), "train_r2": float(train[i, 0]),
                          "test_r2": float(test[i, 0]), "fit_s": float(fit_s[i, 0]),
                          "score_s": float(score_s[i, 0]),
                          # learning_curve keeps no fitted model: its time, in the worker
                          "fit_cpu_s": math.nan}
            for i, fit in enumerate(group) if sizes_done[i] == fit.n_train}


# Two experiments add models of their own to MODELS when they are imported. A
# worker process that unpickles a Fit imports only this module (the package
# loads its parts lazily), so they are imported here too: every process knows
# every model.
from . import _architectures, _encodings  # noqa: E402, F401
