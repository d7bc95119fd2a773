"""The configuration of a run: task sizes, seeds, grids and how each model trains.

One frozen dataclass holds every number a run depends on; ``QUICK``,
``PAPER`` and ``SMOKE`` are the presets, and the derived grids (FCN widths,
the dense length grid, the T of the scaling law) follow the task sizes, so
changing ``seq_len`` or ``token_dim`` keeps every grid around the theory's
thresholds.
"""

import dataclasses
import math
from dataclasses import dataclass, replace

import numpy as np

from .._trainers import check_trainer

#: the architectures the query layout can search: the keys of ``_models.QUERY_MODELS``
#: (the catalogue's ``query_<key>``), listed here free of torch so that the command line
#: checks its arguments before torch is imported (a test keeps both the same)
QUERY_MODELS = ("paper", "encoder_stochastic", "encoder_fixed", "encoder_sinusoidal",
                "encoder_learned", "encoder_randomized", "encoder_rope", "encoder_none",
                "gru", "lstm", "rnn", "mamba", "fcn")


@dataclass(frozen=True)
class Training:
    """How one kind of model is trained: Adam at ``lr`` for ``max_epochs``.

    Parameters
    ----------
    lr : float
        Adam's learning rate.
    max_epochs : int
        Passes over the training set.
    batch_size : int, default=256
        Sequences per step.
    lr_ref_width : int, default=0
        0: ``lr`` at every width; otherwise a fit of width w uses
        ``lr * sqrt(lr_ref_width / w)`` (the paper's model at a fixed ``lr``
        trains worse as ``pe_dim`` grows; docs/reproduction.rst).
    lr_schedule : {"constant", "cosine"}, default="constant"
        The estimators' ``lr_schedule``: Adam at its rate throughout, or the
        rate decayed to 0 by a cosine over the fit's steps (the recipe of the
        third set of verdicts for every critical-width search).

    Examples
    --------
    >>> Training(lr=0.005, max_epochs=30).batch_size
    256
    >>> Training(lr=0.02, max_epochs=20, lr_ref_width=32).lr_at(128)
    0.01
    """

    lr: float
    max_epochs: int
    batch_size: int = 256
    lr_ref_width: int = 0
    lr_schedule: str = "constant"

    def lr_at(self, width):
        """The learning rate of a fit of ``width`` (``lr`` unless ``lr_ref_width``)."""
        if not self.lr_ref_width:
            return self.lr
        return self.lr * math.sqrt(self.lr_ref_width / width)

    def steps(self, n_train):
        """Optimizer steps of a fit on ``n_train`` sequences."""
        return math.ceil(n_train / self.batch_size) * self.max_epochs


#: the seeds a fit takes (scikit-learn's ``random_state``): 0 to 2**32 - 1
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class ReproductionConfig:
    """Every number of one reproduction run; ``QUICK`` and ``PAPER`` are the presets.

    Parameters
    ----------
    seq_len, token_dim, n_selected : int
        The task: T tokens of dimension d, q of them averaged.
    n_samples : int
        Training sequences at T = ``seq_len`` (in proportion to T elsewhere).
    n_test, n_length_test : int
        Validation and, apart, held-out sequences at each T; held-out
        sequences at each length of the dense length grid.
    n_seeds, seed : int
        Seeds ``seed, seed + 1, ...``; each draws its own data and models.
    pe_dims, ensemble_pe_dims : tuple of int
        ``pe_dim`` grids of the paper's model (one positional draw) and of
        the package's extension (``n_pe_draws`` draws).
    n_pe_draws, length_pe_dim : int
        The extension's positional draws; ``pe_dim`` of the
        length-generalisation and alignment fits.
    paper_training, ensemble_training, fcn_training : Training
        How the paper's model (and the fixed-PE baseline), the extension and
        the FCN train.
    fcn_span : (float, float)
        FCN widths: the powers of two between these multiples of T d (and at
        T = ``seq_len`` the transformer widths below T d).
    length_factors, n_lengths : tuple of int, int
        Named test lengths, multiples of ``seq_len``, including 1 and 4; the
        largest ends the dense length grid of ``n_lengths`` points from q.
    scaling_lens, scaling_training, scaling_n_train : tuple, Training, int
        The T of the transformer's scaling law (verdict 4; those not above
        q dropped), its training and fresh sequences per epoch.
    scaling_more_steps : tuple of (int, int)
        ``(T, k)`` pairs: from that T on, k times ``scaling_n_train``
        sequences per epoch, and so k times the steps (the last pair whose T
        is at most the fit's; ``scaling_n_train_at``).
    scaling_pe_start, scaling_pe_floor, scaling_pe_stop : int
        The narrowest first ``pe_dim`` of a search (each T's starts from the
        best case's pe_dim there, or from this where wider:
        ``_width_scaling.search_start``), and the smallest and largest it may fit.
    tightness_lens, tightness_training, tightness_samples : tuple, Training, int
        The T of the FCN's tightness on the population (verdict 5), its
        training and fresh sequences per epoch at T = 8 (in proportion to T).
    scaling_check_len, tightness_check_len : int or None
        The T where the two widths around the crossing are refitted with
        twice the sequences (and steps); None: no check (inconclusive).
    trace_steps_per_doubling : int
        Points of the alignment record per doubling of the steps.
    population_pe_dims : tuple of int
        ``pe_dim`` grid of the population experiment (d + pe_dim below T d).
    randomized_ensemble : bool
        Also fit the randomized encoding's ensemble in the encodings
        experiment (off in the presets: it costs as much as the others).
    sample_factors, sample_sizes, sample_fcn_sizes : tuple
        The T of the sample-complexity curves (multiples of ``seq_len``), the
        training-set sizes of the transformers' and of the FCN's curves.
    sample_pe_dim, sample_fcn_factor : int, float
        In the learning curves, both transformers' ``pe_dim``; the FCN's
        width is the smallest power of two >= ``sample_fcn_factor`` T d.
    sample_budget, sample_target_r2 : int, float
        Every learning-curve fit takes the steps its model's training takes
        on ``sample_budget`` sequences; the held-out R^2 whose smallest
        training-set size is reported.
    architecture_training, architecture_n_train, architecture_width : Training, int, int
        How the architectures beyond the paper train (on the population,
        fresh sequences per epoch) and their width scored per length.
    query_n_train : int
        Fresh sequences per epoch of the query layout's width searches, at
        every T (with ``architecture_training``'s batch and epochs).
    architecture_lens : tuple of int or None
        The T of their width searches; None: ``seq_len`` alone.
    query_lens, query_searched : tuple of int, tuple of str
        The T of the width searches in the query layout (verdict 7) and the
        architectures searched there, by key ("paper", "encoder_<encoding>",
        "gru", "lstm", "rnn", "mamba", "fcn"). Verdict 7 needs every recurrent
        or state-space net of the catalogue and the FCN: the search adds those
        not named here. The encoder without positional encoding
        is fitted at ``architecture_width`` at each T (a sanity check: it
        cannot select); every model there that takes other lengths is scored
        per length.
    architecture_width_stop, query_width_stop : int
        The widest ``d_model`` / ``hidden_size`` searched in each layout (at
        most 4 T d); in the query layout the FCN's widths go up to 4 T d and
        the paper's model's ``pe_dim`` to ``scaling_pe_stop``.
    architecture_n_seeds : int or None
        The seeds of the architectures experiment (every fit trained with
        ``architecture_training``: its searches in both layouts, its lengths,
        its sanity and fixed-width fits, and so verdict 7): the first
        ``architecture_n_seeds`` seeds of the run (all of them where
        ``n_seeds`` is not larger); None: every seed. Its fits are the run's
        costliest: ``QUICK`` takes 1 of its 2 seeds to keep within its budget
        (the summary says so). The other experiments use every seed.
    lr_grids : tuple of (str, tuple of float)
        The learning rates of every critical-width search, per model family
        ("transformer", "fcn", "encoder", "rnn"; "ssm", Mamba, optional: the
        recurrent nets' rates when absent), the same at every width and T: a
        width's score is the best mean validation R^2 over its family's rates
        (peak rates where the training's ``lr_schedule`` is "cosine"); the
        verdicts need at least 3 rates spanning 10x.
    experiments : tuple of str or None
        The experiments to run, by name; None: all.
    judge_architectures : bool
        Whether verdict 7 is judged on this run's architectures experiment; False (the
        quick scale's small slice): its claim reads "judged at the paper scale", the
        slice shown as indicative. It changes no record (an execution field).
    rival_more_steps : int
        Where not 0, each rival of verdict 7 is also fitted at the query layout's smallest
        T at twice the best positional encoder's width there, at every rate of its
        family, with this many times the steps: reported beside verdict 7, not judged
        (how far its failure is one of the run's steps; ``PAPER``: 4). It adds fits and
        changes none (an execution field).
    device : str
        Passed to the estimators ("auto", "cpu", "cuda").
    n_jobs : int or None
        Parallel fits (joblib; -1: all cores).
    trainer : {"exact", "fused"}
        How the fits of a group (one model and width, every rate and seed)
        train: "exact", each its lone fit, one after another; "fused", side
        by side (``fit_group``) where the estimator declares a
        ``fused_trainer`` (the paper's model: one stacked model, its records
        equal to float rounding and named ``"trainer": "fused"``; the other
        families train exactly). The records of the two never mix:
        "fused" is part of the configuration a run's records are kept under.

    Examples
    --------
    >>> config = ReproductionConfig(seq_len=10, token_dim=8, n_selected=3)
    >>> config.seeds(), config.n_train(20)
    ([0, 1, 2], 40000)
    """

    seq_len: int = 10
    token_dim: int = 8
    n_selected: int = 3
    n_samples: int = 20_000
    n_test: int = 4000
    n_length_test: int = 1000
    n_seeds: int = 3
    seed: int = 0
    pe_dims: tuple = (4, 8, 16, 32, 64, 128, 256)
    ensemble_pe_dims: tuple = (16, 64, 256)
    n_pe_draws: int = 8
    length_pe_dim: int = 256
    paper_training: Training = Training(lr=0.005, max_epochs=15, batch_size=128)
    ensemble_training: Training = Training(lr=0.02, max_epochs=10)
    fcn_training: Training = Training(lr=0.003, max_epochs=30)
    fcn_span: tuple = (0.5, 4.0)
    length_factors: tuple = (1, 2, 4, 8)
    n_lengths: int = 40
    scaling_lens: tuple = (8, 16, 32, 64, 128)
    scaling_training: Training = Training(lr=0.02, max_epochs=10, batch_size=32, lr_ref_width=32,
                                          lr_schedule="cosine")
    scaling_n_train: int = 2048
    scaling_more_steps: tuple = ((64, 2),)
    scaling_pe_start: int = 4
    scaling_pe_floor: int = 2
    scaling_pe_stop: int = 1024
    scaling_check_len: int = 32
    tightness_lens: tuple = (4, 8, 16)
    tightness_training: Training = Training(lr=0.01, max_epochs=30, lr_schedule="cosine")
    tightness_samples: int = 8192
    tightness_check_len: int = 8
    trace_steps_per_doubling: int = 2
    population_pe_dims: tuple = (8, 16, 32)
    randomized_ensemble: bool = False
    sample_factors: tuple = (0.5, 1.0)
    sample_sizes: tuple = (2, 16)
    sample_fcn_sizes: tuple = (512, 2048, 8192, 32768)
    sample_pe_dim: int = 128
    sample_fcn_factor: float = 2.0
    sample_budget: int = 8192
    sample_target_r2: float = 0.9
    architecture_training: Training = Training(lr=0.01, max_epochs=10, batch_size=64,
                                               lr_schedule="cosine")
    architecture_n_train: int = 2048
    query_n_train: int = 8192
    architecture_width: int = 32
    architecture_lens: tuple = None
    architecture_width_stop: int = 64
    query_lens: tuple = (8, 16, 32, 64)
    query_searched: tuple = ("encoder_rope", "encoder_sinusoidal", "gru", "lstm", "rnn", "mamba",
                             "fcn")
    query_width_stop: int = 32
    architecture_n_seeds: int = None
    lr_grids: tuple = (("transformer", (0.003, 0.01, 0.03)), ("fcn", (0.003, 0.01, 0.03)),
                       ("encoder", (0.003, 0.01, 0.03)), ("rnn", (0.003, 0.01, 0.03)))
    experiments: tuple = None
    judge_architectures: bool = True
    rival_more_steps: int = 0
    device: str = "auto"
    n_jobs: int = -1
    trainer: str = "exact"

    def __post_init__(self):  # values a run would fail on late (in a worker, after minutes)
        check_trainer(self.trainer)
        if not {1, 4} <= set(self.length_factors):
            raise ValueError(
                f"length_factors={self.length_factors!r} must include 1 and 4: the length "
                "claim is judged at T and 4T; add them, e.g. (1, 2, 4, 8).")
        T, q = self.seq_len, self.n_selected
        if not 1 <= q < T:
            raise ValueError(
                f"n_selected must be between 1 and seq_len - 1; got n_selected={q} with "
                f"seq_len={T}: with every token selected (q = T) there is nothing to select, "
                "and the FCN bound's (T - q) vanishes. Use a smaller n_selected or a larger "
                "seq_len.")
        if not 0 <= self.seed <= self.seed + self.n_seeds - 1 <= MAX_SEED:
            raise ValueError(
                f"seed must be between 0 and 2**32 - 1 = {MAX_SEED} for every seed of the run "
                f"(seed to seed + n_seeds - 1); got seed={self.seed} with "
                f"n_seeds={self.n_seeds}.")
        grids = dict(self.lr_grids)
        missing = sorted({"transformer", "fcn", "encoder", "rnn"} - set(grids))
        bad = {k: v for k, v in grids.items()
               if not v or any(isinstance(lr, bool) or not isinstance(lr, (int, float))
                               or not lr > 0 for lr in v)}
        if missing or bad or len(grids) != len(self.lr_grids):
            raise ValueError(
                f"lr_grids must give each model family (transformer, fcn, encoder, rnn) once "
                f"a tuple of positive learning rates; got {self.lr_grids!r}"
                + (f" (missing {missing})" if missing else "")
                + (f" (not positive rates: {sorted(bad)})" if bad else "") + ".")
        unknown = sorted(set(self.query_searched) - set(QUERY_MODELS))
        if unknown or len(set(self.query_searched)) != len(self.query_searched):
            raise ValueError(
                f"query_searched must name each architecture once, from {list(QUERY_MODELS)}; "
                f"got {self.query_searched!r}" + (f" (unknown: {unknown})" if unknown else "")
                + ".")
        trainings = [f.name for f in dataclasses.fields(self) if f.type is Training]
        bad = [name for name in trainings
               if getattr(self, name).lr_schedule not in ("constant", "cosine")]
        if bad:
            raise ValueError(f"the lr_schedule of {', '.join(bad)} must be 'constant' or "
                             "'cosine'.")
        if any(len(pair) != 2 or int(pair[1]) < 1 for pair in self.scaling_more_steps):
            raise ValueError(f"scaling_more_steps must be (T, k) pairs with k >= 1; got "
                             f"{self.scaling_more_steps!r}.")
        k = self.architecture_n_seeds
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(
                f"architecture_n_seeds must be None (every seed of the run) or a whole number "
                f"of seeds >= 1 (the architectures experiment then uses the first ones); got "
                f"{k!r}.")
        if self.n_jobs == 0:
            raise ValueError("n_jobs must be a non-zero integer or None (-1: all cores, "
                             "n >= 1: n parallel fits); got 0.")

    @classmethod
    def from_dict(cls, fields):
        """The configuration a results file records (``results["config"]``, the
        fields as ``dataclasses.asdict`` or JSON gives them back).

        Examples
        --------
        >>> from dataclasses import asdict
        >>> ReproductionConfig.from_dict(asdict(SMOKE)) == SMOKE
        True
        """
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - set(known))
        if unknown:
            raise ValueError(f"a reproduction configuration has no field {unknown}; "
                             f"its fields are {sorted(known)}.")
        values = {}
        for name, value in fields.items():
            kind = known[name].type
            if kind is Training and isinstance(value, dict):
                value = Training(**value)
            elif name == "lr_grids" and isinstance(value, list):
                value = tuple((family, tuple(rates)) for family, rates in value)
            elif name == "scaling_more_steps" and isinstance(value, list):
                value = tuple(tuple(pair) for pair in value)
            elif kind is tuple and isinstance(value, list):
                value = tuple(value)
            values[name] = value
        return cls(**values)

    def lr_grid(self, family):
        """The learning rates a critical-width search of ``family`` tries at every width.

        Examples
        --------
        >>> QUICK.lr_grid("transformer")
        (0.003, 0.01, 0.03)
        >>> QUICK.lr_grid("ssm") == QUICK.lr_grid("rnn")  # unless lr_grids gives "ssm"
        True
        """
        grids = dict(self.lr_grids)
        return grids.get(family, grids["rnn"]) if family == "ssm" else grids[family]

    def seeds(self):
        """The seeds of the run."""
        return [self.seed + k for k in range(self.n_seeds)]

    def architecture_seeds(self):
        """The seeds of the architectures experiment: the first ``architecture_n_seeds``
        of the run's (all of them if None or not fewer than ``n_seeds``).

        Examples
        --------
        >>> QUICK.seeds(), QUICK.architecture_seeds(), PAPER.architecture_seeds()
        ([0, 1], [0], [0, 1, 2])
        >>> replace(QUICK, n_seeds=1).architecture_seeds()
        [0]
        """
        return self.seeds()[:self.architecture_n_seeds]

    def n_train(self, seq_len):
        """Training sequences at ``seq_len``: n_samples at T, in proportion elsewhere."""
        return max(1, round(self.n_samples * seq_len / self.seq_len))

    def _above_q(self, lens):
        return sorted({T for T in lens if T > self.n_selected})

    def scaling_seq_lens(self):
        """The T of the transformer's scaling law (each above n_selected)."""
        return self._above_q(self.scaling_lens)

    def scaling_n_train_at(self, seq_len):
        """Fresh sequences per epoch of the scaling law's fits at ``seq_len``.

        Examples
        --------
        >>> [QUICK.scaling_n_train_at(T) for T in (32, 64, 128)]
        [2048, 4096, 4096]
        >>> [QUICK.scaling_training.steps(QUICK.scaling_n_train_at(T)) for T in (32, 64, 128)]
        [640, 1280, 1280]
        """
        factor = 1
        for start, k in sorted(self.scaling_more_steps):
            if seq_len >= start:
                factor = k
        return factor * self.scaling_n_train

    def tightness_seq_lens(self):
        """The T of the FCN's tightness on the population (each above n_selected)."""
        return self._above_q(self.tightness_lens)

    def tightness_n_train(self, seq_len):
        """Fresh sequences per epoch of the FCN's tightness fits at ``seq_len``."""
        return max(1, round(self.tightness_samples * seq_len / 8))

    def architecture_seq_lens(self):
        """The T of the architectures' width searches (each above n_selected)."""
        return [self.seq_len] if self.architecture_lens is None \
            else self._above_q(self.architecture_lens)

    def query_seq_lens(self):
        """The T of the width searches in the query layout (each above n_selected)."""
        return self._above_q(self.query_lens)

    def sample_seq_lens(self):
        """The T of the sample-complexity curves (each above n_selected)."""
        return sorted({max(self.n_selected + 1, round(f * self.seq_len))
                       for f in self.sample_factors})

    def sample_fcn_width(self, seq_len):
        """The FCN's width in the learning curves at ``seq_len``."""
        return 2 ** math.ceil(math.log2(self.sample_fcn_factor * seq_len * self.token_dim))

    def fcn_widths(self, seq_len=None):
        """FCN widths: powers of two within ``fcn_span`` times T d, and at
        T = seq_len the transformer widths below T d."""
        seq_len = seq_len or self.seq_len
        threshold = seq_len * self.token_dim
        low, high = threshold * self.fcn_span[0], threshold * self.fcn_span[1]
        widths = {2 ** k for k in range(1, 20) if low <= 2 ** k <= high}
        if seq_len == self.seq_len:  # the widths d + pe_dim of the transformers fitted there
            widths |= {self.token_dim + p for p in (*self.pe_dims, *self.ensemble_pe_dims)
                       if self.token_dim + p < threshold}
        return sorted(widths)

    def max_length(self):
        return self.seq_len * max(self.length_factors)

    def length_grid(self):
        """Test lengths: ``n_lengths`` points from q to the largest named length,
        and every named length. Shorter sequences cannot hold q selected tokens."""
        low, high = self.n_selected, self.max_length()
        grid = np.unique(np.round(np.linspace(low, high, min(self.n_lengths, high - low + 1))))
        named = [f * self.seq_len for f in self.length_factors]
        return sorted({int(L) for L in grid} | set(named))


#: the experiments of verdicts 1 to 6 (the paper's claims and the extensions), in the
#: report's order: every experiment but the architectures (``_registry.EXPERIMENTS``,
#: named here free of torch; a test keeps both the same)
CLAIM_EXPERIMENTS = ("width_separation", "length_generalisation", "alignment", "width_scaling",
                     "fcn_tightness", "population", "sample_complexity", "encodings")
#: every experiment, by name
ALL_EXPERIMENTS = (*CLAIM_EXPERIMENTS, "architectures")

#: every experiment over 2 seeds at small sizes (2, not 3: the 10 minutes on 2 cores the
#: scale promises hold only so, measured 2026-12-05), the architectures as a small slice
#: (one seed, the indicator layout at T = 10, the query layout at T = 4 and 8, fewer
#: sequences, widths up to 16): indicative, verdict 7 not judged here
#: (``judge_architectures``)
QUICK = ReproductionConfig(
    n_seeds=2, architecture_n_seeds=1, architecture_n_train=1024, query_n_train=1024,
    architecture_width=16, architecture_width_stop=16, query_width_stop=16, query_lens=(4, 8),
    query_searched=("encoder_rope", "gru", "lstm", "rnn", "mamba", "fcn"),
    judge_architectures=False)
#: T = 20, more samples and a wider pe_dim grid, the scaling law over T = 8 to 256
#: (32x), the FCN's tightness at T = 8, 16, 32, the architectures' widths over
#: T = 8 to 128 in both layouts, the learning curves over T = 5, 10, 20
PAPER = ReproductionConfig(
    seq_len=20, n_samples=50_000, n_test=10_000,
    pe_dims=(4, 8, 16, 32, 64, 128, 256, 512),
    scaling_lens=(8, 16, 32, 64, 128, 256), scaling_n_train=4096, scaling_check_len=64,
    scaling_training=Training(lr=0.02, max_epochs=5, batch_size=32, lr_ref_width=32,
                              lr_schedule="cosine"),
    tightness_lens=(8, 16, 32), tightness_check_len=16,
    architecture_lens=(8, 16, 32, 64, 128),
    query_lens=(8, 16, 32, 64, 128),
    query_searched=("paper", "encoder_rope", "encoder_sinusoidal", "gru", "lstm", "rnn", "mamba",
                    "fcn"),
    population_pe_dims=(8, 16, 32, 64, 128),
    sample_factors=(0.25, 0.5, 1.0), sample_sizes=(2, 8, 32, 128),
    sample_fcn_sizes=(512, 2048, 8192, 32768, 131072, 524288), sample_fcn_factor=4.0,
    sample_budget=32768,
)
#: the paper's three claims (verdicts 1-3) alone, over 3 seeds: the quick run's fits
#: (its 2 seeds, and a third) of the paper's model and the fixed encoding, a pe_dim
#: grid of 5 values over 16x, the FCN at the widths below T d and one power of two, a
#: 2-draw ensemble beside them
FIRST = ReproductionConfig(
    experiments=("width_separation", "length_generalisation", "alignment"),
    pe_dims=(4, 8, 16, 32, 64), ensemble_pe_dims=(256,), n_pe_draws=2, fcn_span=(0.5, 1.0),
)
#: The presets by the name ``--scale`` takes: the paper's claims (verdicts 1 to 6) at the
#: paper's sizes, and the architectures comparison (verdict 7) apart: hours on 2 cores,
#: the same configuration as PAPER (the records of a PAPER run are theirs)
SCALES = {"first": FIRST, "quick": QUICK,
          "paper": replace(PAPER, experiments=CLAIM_EXPERIMENTS),
          "architectures-paper": replace(PAPER, experiments=("architectures",),
                                         rival_more_steps=4)}
#: each run's wall time on 2 CPU cores: the one place the command line, the docs' table
#: (docs/runs_table.txt) and README.md take them from. "measured": from a fresh clone,
#: ``/usr/bin/time``, 2026-12-05, on this project's 2-core CI-like machine (first on idle
#: cores; quick and paper beside other work at nice 19); "estimate": the plan's
#: (``python -m sparse_token_estimators --scale S --plan``, the cost model)
RUN_TIMES = {"first": "1 min 30 s (measured)", "quick": "9 min (measured; 2 seeds)",
             "paper": "44 min (measured)",
             "architectures-paper": "about 4 h (estimate; 31 min on 16 workers)"}
_TINY = Training(lr=0.01, max_epochs=2, batch_size=16)
#: the critical-width searches' recipe (third set): the rate decayed by a cosine
_TINY_COSINE = replace(_TINY, lr_schedule="cosine")
#: seconds on a CPU, for the examples and the tests of the pipeline: exercises
#: every step of a run (the architectures experiment on the first of its 2 seeds, as
#: QUICK's on 1 of 2), too small to support any claim
SMOKE = ReproductionConfig(
    seq_len=4, token_dim=2, n_selected=2, n_samples=64, n_test=32, n_length_test=16,
    n_seeds=2, pe_dims=(2, 4), ensemble_pe_dims=(2,), n_pe_draws=2, length_pe_dim=4,
    paper_training=_TINY, ensemble_training=_TINY, fcn_training=_TINY,
    fcn_span=(1.0, 2.0), length_factors=(1, 4), n_lengths=4,
    scaling_lens=(3, 4, 6), scaling_training=_TINY_COSINE, scaling_n_train=32,
    scaling_more_steps=((6, 2),), scaling_pe_start=2,
    scaling_pe_floor=1, scaling_pe_stop=8, scaling_check_len=4, tightness_lens=(3, 4, 6),
    tightness_training=_TINY_COSINE, tightness_samples=64, tightness_check_len=4,
    population_pe_dims=(2, 4), architecture_training=_TINY_COSINE, architecture_n_train=32,
    query_n_train=32, architecture_n_seeds=1,
    architecture_width=4, query_lens=(3, 4, 6),
    query_searched=("paper", "encoder_rope", "gru", "mamba", "fcn"), randomized_ensemble=True,
    sample_factors=(0.75, 1.0),
    sample_sizes=(2, 8), sample_fcn_sizes=(8, 32), sample_pe_dim=4, sample_fcn_factor=1.0,
    sample_budget=32, n_jobs=1, device="cpu",
    lr_grids=(("transformer", (0.01, 0.03)), ("fcn", (0.01, 0.03)), ("encoder", (0.01, 0.03)),
              ("rnn", (0.01, 0.03))),
)


def with_sizes(config, **sizes):
    """``config`` with the given fields replaced (None values are ignored).

    Examples
    --------
    >>> with_sizes(QUICK, seq_len=20, seed=None).seq_len, QUICK.seq_len
    (20, 10)
    """
    return replace(config, **{k: v for k, v in sizes.items() if v is not None})
