"""The one catalogue of models a run can fit (``MODELS``, declared here and nowhere else),
and :class:`Fit`: one model to fit per seed."""

import time
from dataclasses import asdict, dataclass, replace

from skorch.callbacks import Callback

from .._group import group_cpu_seconds
from ..architectures import CELLS, ENCODER_ENCODINGS
from ..callbacks import AlignmentRecorder, StepBudget
from ..estimators import (
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenSSM,
    SparseTokenTransformer,
)


@dataclass(frozen=True)
class Model:
    """A kind of model a run can fit: what it is called, how it is built and trained.

    Parameters
    ----------
    name : str
        How every table row and legend names it (``{n_pe_draws}`` filled in).
    family : {"fcn", "transformer", "encoder", "rnn", "ssm"}
        The estimator, and so the width parameter (``WIDTH_PARAMETERS``).
    training : str
        The configuration's :class:`Training` field it trains with.
    params : tuple of (str, value)
        Fixed estimator parameters, e.g. ``(("positional_encoding", "fixed"),)``.
    ensemble : bool
        Averages ``n_pe_draws`` positional draws (otherwise one, the paper's).
    cost : float
        Its cost per sequence relative to the cost model's.
    layout : {"indicator", "query"}
        The layout of its data (``make_sparse_selection(..., layout=...)``).
    """

    name: str
    family: str
    training: str
    params: tuple = ()
    ensemble: bool = False
    cost: float = 1.0
    layout: str = "indicator"


def _encoding(name, encoding, training="paper_training", **kwargs):
    return Model(name, "transformer", training, params=(("positional_encoding", encoding),),
                 **kwargs)


#: how the architectures' names call each encoding of the encoder
ENCODING_NAMES = {**{e: f"{e} PE" for e in ENCODER_ENCODINGS}, "none": "no PE", "rope": "RoPE"}
#: the encoder beyond the paper: one block, one head (any d_model, an even one with rotary
#: positions or the sinusoidal encoding: ``_bracket.width_multiple``)
ENCODER_PARAMS = (("n_heads", 1), ("n_layers", 1))

#: the state size N of the catalogue's Mamba (its default, and Mamba's): each block
#: carries 2 x d_model x N numbers along the sequence
SSM_STATE = 16

#: the CPU time of scoring a sequence (a forward pass) over that of a training step on
#: it, by family (``Fit.cost``; others: ``SCORE_SHARE[None]``), from the records of the
#: quick run and the held-out quick run of 2026-12-05: 1.01 and 0.96 for the paper's
#: model, whose forward draws and attends as its step does; 0.31-0.37 for the encoder,
#: the recurrent nets and Mamba, whose backward costs twice their forward
SCORE_SHARE = {"transformer": 1.0, None: 1 / 3}

#: every model a run can fit, by key
MODELS = {
    "fcn": Model("FCN", "fcn", "fcn_training"),
    "paper": Model("transformer, paper's model (1 positional draw)", "transformer",
                   "paper_training"),
    "ensemble": Model("transformer, {n_pe_draws}-draw ensemble (package extension)",
                      "transformer", "ensemble_training", ensemble=True),
    "fixed": _encoding("transformer, fixed PE (paper's baseline)", "fixed"),
    # the critical-width searches train on the population with their own
    # steps (checked by doubling them): the same models, another training
    "paper_scaling": Model("transformer, paper's model (1 positional draw; scaling-law "
                           "training)", "transformer", "scaling_training"),
    "fcn_tightness": Model("FCN (tightness training)", "fcn", "tightness_training"),
    # the architectures experiment
    **{f"encoder_{e}": Model(f"transformer encoder, {ENCODING_NAMES[e]} (beyond the paper)",
                             "encoder", "architecture_training",
                             params=(("positional_encoding", e), *ENCODER_PARAMS))
       for e in ENCODER_ENCODINGS},
    **{cell: Model(f"{cell.upper()} (beyond the paper)", "rnn", "architecture_training",
                   params=(("cell", cell),)) for cell in CELLS},
    # the selective state-space model: width d_model, Mamba's default state size
    "mamba": Model("Mamba SSM (beyond the paper)", "ssm", "architecture_training",
                   params=(("d_state", SSM_STATE),)),
    # the encodings experiment
    "sinusoidal": _encoding("transformer, sinusoidal PE (Vaswani et al.; extension)",
                            "sinusoidal", cost=1.2),
    "learned": _encoding("transformer, learned PE (extension)", "learned", cost=1.7),
    "randomized": _encoding("transformer, randomized PE, 1 draw (Ruoss et al.; extension)",
                            "randomized", cost=1.6),
    "randomized_ensemble": _encoding(
        "transformer, randomized PE, {n_pe_draws}-draw ensemble (package extension)",
        "randomized", "ensemble_training", ensemble=True, cost=1.2),
}


def _query(model, name):
    """``model`` in the query layout, trained as the architectures are."""
    return replace(model, name=name, training="architecture_training", layout="query")


#: the query layout (``layout="query"``): the same architectures, the subset given as q
#: rows of positions after the tokens (keys ``query_<key>``)
QUERY_MODELS = ("paper", *(f"encoder_{e}" for e in ENCODER_ENCODINGS), *CELLS, "mamba", "fcn")
MODELS.update({f"query_{key}": _query(
    MODELS[key], MODELS[key].name.replace(" (beyond the paper)", "").replace(
        " (1 positional draw)", ", 1 positional draw") + " (query layout; beyond the paper)")
    for key in QUERY_MODELS})

#: the families that attend: every other model of the query layout is a rival of the
#: encoder in verdict 7 (the recurrent and state-space nets, and the FCN)
ATTENTION_FAMILIES = ("transformer", "encoder")


def query_rivals():
    """The query layout's rivals of the encoder (verdict 7), by catalogue key: every
    model of the query layout whose family does not attend, the FCN last.

    Examples
    --------
    >>> query_rivals()
    ('query_gru', 'query_lstm', 'query_rnn', 'query_mamba', 'query_fcn')
    """
    rivals = [key for key, spec in MODELS.items()
              if spec.layout == "query" and spec.family not in ATTENTION_FAMILIES]
    return tuple(sorted(rivals, key=lambda key: MODELS[key].family == "fcn"))


#: family -> the estimator parameter a fit's width sets
WIDTH_PARAMETERS = {"fcn": "hidden_width", "transformer": "pe_dim", "encoder": "d_model",
                    "rnn": "hidden_size", "ssm": "d_model"}


def model_name(model, config):
    """What a model is, as every table row and legend names it."""
    return MODELS[model].name.format(n_pe_draws=config.n_pe_draws)


def training(model, config):
    """The :class:`Training` of ``model``."""
    return getattr(config, MODELS[model].training)


def model_seeds(model, config):
    """The seeds ``model`` is fitted and read for: the architectures experiment's
    (``config.architecture_seeds()``) for a model trained with ``architecture_training``,
    every seed of the run for the others.

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import QUICK
    >>> model_seeds("paper", QUICK), model_seeds("query_gru", QUICK)
    ([0, 1], [0])
    """
    return config.architecture_seeds() if MODELS[model].training == "architecture_training" \
        else config.seeds()


def width_parameter(model):
    """``hidden_width``, ``pe_dim``, ...: what the width of a ``model`` fit sets."""
    return WIDTH_PARAMETERS[MODELS[model].family]


def describe_models(config, models=None, searched=()):
    """``{model key: {"name", "training"}}``: what each model is and how it trains; the
    models of ``searched`` (fitted by a critical-width search) also give their
    ``lr_grid``, the rates the search tries at every width."""
    out = {}
    for key in (models or MODELS):
        out[key] = {"name": model_name(key, config), "training": asdict(training(key, config))}
        if key in searched:
            out[key]["lr_grid"] = list(config.lr_grid(MODELS[key].family))
    return out


class FitClock(Callback):
    """Record the fit's CPU time as ``fit_cpu_s`` in ``history_`` (on a shared machine,
    wall-clock time also counts the others' work); trained in a group (``fit_group``),
    the CPU time the group attributes to it."""

    def on_train_begin(self, net, **kwargs):
        self.start_ = time.process_time()

    def on_train_end(self, net, **kwargs):
        net.history.record("fit_cpu_s", group_cpu_seconds(net, time.process_time() - self.start_))


@dataclass(frozen=True, order=True)
class Fit:
    """One model the run fits, once per seed.

    Parameters
    ----------
    model : str
        A key of ``MODELS``.
    width : int
        The model's width parameter (``hidden_width``, ``pe_dim``, ...).
    seq_len : int
        Training length T.
    data : {"sample", "population"}, default="sample"
        A fixed training set, or fresh sequences every epoch.
    n_train : int, default=0
        Training sequences (per epoch); 0: ``config.n_train(seq_len)``.
    max_steps : int, default=0
        0: ``max_epochs`` epochs; otherwise exactly this many steps (a
        learning curve's fit, on the first ``n_train`` sequences of a pool).
    lr : float, default=0.0
        Adam's rate; 0: the model's training's (``Training.lr_at(width)``).
        A critical-width search sets each rate of its grid.

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import SMOKE
    >>> Fit("paper", 4, 4).model_width(SMOKE), Fit("fcn", 8, 4).training_size(SMOKE)
    (6, 64)
    """

    model: str
    width: int
    seq_len: int
    data: str = "sample"
    n_train: int = 0
    max_steps: int = 0
    lr: float = 0.0

    def seeds(self, config):
        """The seeds the fit is made for (:func:`model_seeds`): every seed of the run, the
        architectures experiment's alone for its models."""
        return model_seeds(self.model, config)

    def learning_rate(self, config):
        """Adam's rate of the fit: ``lr``, or its training's at its width."""
        return self.lr or training(self.model, config).lr_at(self.width)

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
        common = {"lr": self.learning_rate(config), "lr_schedule": train.lr_schedule,
                  "max_epochs": epochs,
                  "batch_size": train.batch_size, "random_state": seed,
                  "device": config.device, **dict(spec.params)}
        if spec.layout == "query":
            common.update(layout="query", n_selected=config.n_selected)
        if self.max_steps:
            # skorch's PrintLog tabulates every epoch even when silent: much of
            # a fit whose small training set makes an epoch of one step
            common["callbacks__print_log"] = None
        callbacks = [*budget, FitClock()]
        if spec.family == "fcn":
            return SparseTokenFCN(hidden_width=self.width, callbacks=callbacks, **common)
        if spec.family == "encoder":
            return SparseTokenEncoder(d_model=self.width,
                                      max_seq_len=max(*config.length_grid(), self.seq_len),
                                      callbacks=callbacks, **common)
        if spec.family == "rnn":
            return SparseTokenRNN(hidden_size=self.width, callbacks=callbacks, **common)
        if spec.family == "ssm":
            return SparseTokenSSM(d_model=self.width, callbacks=callbacks, **common)
        # the learning curves read no alignment: no record to keep
        recorder = [] if self.max_steps else [
            AlignmentRecorder(steps_per_doubling=config.trace_steps_per_doubling)]
        return SparseTokenTransformer(
            pe_dim=self.width, n_pe_draws=self._draws(config),
            max_seq_len=max(*config.length_grid(), self.seq_len),
            callbacks=[*recorder, *callbacks],
            **common,
        )

    def sequences(self, config):
        """Sequences the fit's optimisation processes (steps times batch)."""
        train, n = training(self.model, config), self.training_size(config)
        if self.max_steps:
            return self.max_steps * min(n, train.batch_size)
        return n * train.max_epochs

    def cost(self, config):
        """Estimated CPU seconds of the fit and its scoring (for ordering, the plan and the
        time left): per sequence processed from the model's size, plus set-up.

        Scoring (validation, held-out and, at the run's T, the lengths of
        ``r2_by_length``) counts a forward pass of a sequence as a share of a
        training step's, at its length (``SCORE_SHARE``, by family: calibrated on the
        quick runs of 2026-12-05, whose scoring was 25% of the transformers' fit CPU time,
        unmodelled until then)."""
        micro = self._micro(config, self.seq_len)
        if self.max_steps:
            scored = (self.training_size(config) + config.n_test) / 3
            return 0.5 + 5e-4 * self.max_steps + 1e-6 * micro * (self.sequences(config) + scored)
        share = SCORE_SHARE.get(MODELS[self.model].family, SCORE_SHARE[None])
        scoring = sum(n * self._micro(config, L) for n, L in self.scored(config))
        return 0.5 + 1e-6 * (micro * self.sequences(config) + share * scoring)

    def scored(self, config):
        """``[(sequences, length)]`` a fit's record scores (``_fits._record``): the
        validation and held-out sets at T, and the lengths of ``scored_lengths``."""
        return [(2 * config.n_test, self.seq_len),
                *[(config.n_length_test, L) for L in self.scored_lengths(config)]]

    def scored_lengths(self, config):
        """The lengths at which ``_fits.r2_by_length`` scores the fit: at the run's T, the
        named ones (the dense grid for the indicator layout's transformers at
        ``length_pe_dim``); none for the FCN, a learning curve's fit or another T."""
        family = MODELS[self.model].family
        if self.max_steps or family == "fcn" or self.seq_len != config.seq_len:
            return []
        named = {f * config.seq_len for f in config.length_factors}
        dense = family == "transformer" and self.width == config.length_pe_dim \
            and MODELS[self.model].layout == "indicator"
        return [L for L in config.length_grid() if dense or L in named]

    def _micro(self, config, T):
        """Microseconds of a training step per sequence of length ``T`` (one thread)."""
        family = MODELS[self.model].family
        if family == "fcn":
            micro = 2 + 1e-4 * T * (config.token_dim + 1) * self.width
        elif family == "encoder":
            micro = 20 + 0.3 * T * self.width
        elif family == "rnn":
            micro = 10 + 0.15 * T * self.width
        elif family == "ssm":
            # d_state 16, the fused scan: CPU time of an Adam step of SelectiveSSM at batch
            # 64 (d = 8, q = 3 query rows, one thread) over widths 8 to 256 and T = 8 to 64,
            # fitted to within 30% (the scan's (T, 2 width, 16) state, and the projections'
            # width^2); was 20 + 2.5 T width with mambapy's parallel scan
            micro = 50 + 0.42 * T * self.width + 0.0017 * T * self.width ** 2
        else:
            micro = 3 + 0.005 * self._draws(config) * T * self.width
        return micro * MODELS[self.model].cost * (1.1 if self.data == "population" else 1.0)
