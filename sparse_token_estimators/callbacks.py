"""skorch callbacks: the paper's diagnostics into ``history_``, a budget of steps,
and the two training checks every estimator installs by default."""

import math

import torch
from skorch.callbacks import BatchScoring, Callback, EpochScoring, LRScheduler

from ._layout import check_int
from .theory import identity_alignment


def trace_steps(steps_per_doubling, max_step):
    """Training steps at which :class:`AlignmentRecorder` records its trace.

    Step 0 (before the first update) and the steps round(2^(k / steps_per_doubling))
    up to ``max_step``: log-spaced, so the first epoch, where W leaves 0, is
    recorded densely and a long run adds only a few points per doubling.

    Parameters
    ----------
    steps_per_doubling : int
        Points per doubling of the number of steps.
    max_step : int
        Last step to consider.

    Returns
    -------
    steps : list of int
        Increasing, starting at 0.

    Examples
    --------
    >>> trace_steps(2, 40)
    [0, 1, 2, 3, 4, 6, 8, 11, 16, 23, 32]
    """
    steps = [0]
    while (step := _next_step(steps[-1], steps_per_doubling)) <= max_step:
        steps.append(step)
    return steps


def _next_step(step, steps_per_doubling):
    """The first round(2^(k / steps_per_doubling)) after ``step``."""
    k = math.floor(steps_per_doubling * math.log2(max(step, 1)))
    while round(2 ** (k / steps_per_doubling)) <= step:
        k += 1
    return round(2 ** (k / steps_per_doubling))


class AlignmentRecorder(Callback):
    """Record the alignment of the key-query matrix W with the identity.

    After every epoch, writes ``identity_alignment(module_.W)``, the cosine
    similarity <W, I> / (||W||_F sqrt(d_p)) of Wang, Wei, Hsu & Lee (ICML
    2024), into ``history_`` under ``key``, and the scale <W, I> / d_p (the c
    of W ~ c I; a larger c makes the attention sharper on longer sequences)
    under ``scale_key``.

    With ``trace_key`` it also records the alignment against the number of
    training sequences seen, from the start: at step 0 (before the first
    update, W as initialised, 0 for the attention model), after the training
    steps of :func:`trace_steps` (log-spaced: dense in the first epoch) and
    at the end of every epoch. Each epoch's row of ``history_`` gets under
    ``trace_key`` the list of its records, dicts with ``step``,
    ``sequences_seen``, ``alignment`` and ``w_scale``; the first epoch's list
    begins with step 0. Training that continues (``warm_start``,
    ``partial_fit``) continues the count.

    Parameters
    ----------
    key : str, default="alignment"
        History column of the per-epoch alignment.
    scale_key : str or None, default="w_scale"
        History column of the scale; None records no scale.
    param : str, default="W"
        Name of the square matrix parameter on ``module_``.
    trace_key : str or None, default="alignment_trace"
        History column of the records within epochs; None records none.
    steps_per_doubling : int, default=2
        Density of those records (see :func:`trace_steps`).

    Examples
    --------
    >>> from sparse_token_estimators import SparseTokenTransformer, make_sparse_selection
    >>> X, y = make_sparse_selection(500, seq_len=8, token_dim=4, random_state=0)
    >>> est = SparseTokenTransformer(pe_dim=16, max_epochs=3, batch_size=100, random_state=0,
    ...                              callbacks=[AlignmentRecorder()]).fit(X, y)
    >>> len(est.history_[:, "alignment"])
    3
    >>> first = est.history_[0, "alignment_trace"]
    >>> [(r["step"], r["sequences_seen"]) for r in first]
    [(0, 0), (1, 100), (2, 200), (3, 300), (4, 400), (5, 500)]
    >>> first[0]["alignment"]  # W starts at 0
    0.0
    """

    # State between calls ends in "_": skorch takes every other attribute of a
    # callback for a parameter (get_params, clone).
    def __init__(self, key="alignment", scale_key="w_scale", param="W",
                 trace_key="alignment_trace", steps_per_doubling=2):
        self.key = key
        self.scale_key = scale_key
        self.param = param
        self.trace_key = trace_key
        self.steps_per_doubling = steps_per_doubling

    def _matrix(self, net):
        return getattr(net.module_, self.param).detach()

    def _measure(self, net):
        W = self._matrix(net)
        return {"alignment": identity_alignment(W), "w_scale": float(W.diagonal().mean())}

    def _record(self, net, step, seen):
        return {"step": step, "sequences_seen": seen, **self._measure(net)}

    def on_train_begin(self, net, X=None, y=None, **kwargs):
        W = getattr(net.module_, self.param, None)
        if W is None or W.ndim != 2 or W.shape[0] != W.shape[1]:
            raise ValueError(
                f"AlignmentRecorder needs a square matrix module_.{self.param}; "
                f"{type(net.module_).__name__} has none. Use it with "
                "SparseTokenTransformer, or pass param= the name of the matrix."
            )
        if self.trace_key is None:
            return
        last = self._last_record(net)
        if last is None:  # a fresh start: record W before any update
            self.step_, self.seen_ = 0, 0
            self.pending_ = [self._record(net, 0, 0)]
        else:  # training continues: so does the count
            self.step_, self.seen_ = last["step"], last["sequences_seen"]
            self.pending_ = []
        self.next_ = _next_step(self.step_, self.steps_per_doubling)

    def _last_record(self, net):
        for row in reversed(net.history):
            if row.get(self.trace_key):
                return row[self.trace_key][-1]
        return None

    def on_batch_end(self, net, batch=None, training=False, **kwargs):
        if not training or self.trace_key is None:
            return
        self.step_ += 1
        self.seen_ += len(batch[0])
        if self.step_ >= self.next_:
            self.pending_.append(self._record(net, self.step_, self.seen_))
            self.next_ = _next_step(self.step_, self.steps_per_doubling)

    def on_epoch_end(self, net, **kwargs):
        measured = self._measure(net)
        net.history.record(self.key, measured["alignment"])
        if self.scale_key is not None:
            net.history.record(self.scale_key, measured["w_scale"])
        if self.trace_key is not None:
            if not self.pending_ or self.pending_[-1]["step"] != self.step_:
                self.pending_.append({"step": self.step_, "sequences_seen": self.seen_,
                                      **measured})
            net.history.record(self.trace_key, self.pending_)
            self.pending_ = []


class StepBudget(Callback):
    """Stop training after ``max_steps`` optimisation steps.

    A fit on n sequences in batches of B takes ceil(n / B) steps per epoch,
    so with ``max_epochs`` fixed a small training set also gets a short
    optimisation. To compare training-set sizes at equal optimisation (a
    learning curve, say), give every fit the same budget of steps and a
    ``max_epochs`` high enough for the smallest set to use it up: training
    stops after exactly ``max_steps`` steps (or at ``max_epochs``, whichever
    comes first). The stop is skorch's clean one, a ``KeyboardInterrupt``
    that ``fit`` catches (as ``EarlyStopping`` does): ``on_train_end``
    runs and the fitted model is the one after the last step.

    When the budget runs out at the end of an epoch, that epoch ends as
    usual (its scores are recorded; callbacks listed after this one miss
    its ``on_epoch_end``, as with ``EarlyStopping``). When it runs out
    inside an epoch, training stops before the next batch: the last row of
    ``history_`` then holds that epoch's batches but no epoch-level scores
    (no ``train_loss``). Sets of ``B * 2**k`` sequences with a budget that
    is a power of two end every fit on a whole epoch. The steps taken are
    recorded in ``history_`` under ``key`` at the end of training; each
    ``fit`` (or ``partial_fit``) has its own budget.

    Parameters
    ----------
    max_steps : int
        Optimisation steps (training batches) per fit, >= 1.
    key : str or None, default="train_steps"
        History column of the steps taken (in the last row); None records
        nothing.

    Examples
    --------
    >>> from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
    >>> X, y = make_sparse_selection(512, seq_len=6, token_dim=2, random_state=0)
    >>> fits = {n: SparseTokenFCN(hidden_width=8, batch_size=64, max_epochs=100,
    ...                           callbacks=[StepBudget(32)], random_state=0)
    ...            .fit(X[:n], y[:n]) for n in (128, 512)}
    >>> [(n, len(est.history_), est.history_[-1, "train_steps"]) for n, est in fits.items()]
    [(128, 16, 32), (512, 4, 32)]
    """

    def __init__(self, max_steps, key="train_steps"):
        self.max_steps = max_steps
        self.key = key

    def initialize(self):
        check_int(self.max_steps, "max_steps")
        return self

    def on_train_begin(self, net, **kwargs):
        self.steps_ = 0

    def on_batch_begin(self, net, batch=None, training=False, **kwargs):
        if training and self.steps_ >= self.max_steps:
            # skorch opened a record for this batch, which will not run
            net.history[-1]["batches"].pop()
            raise KeyboardInterrupt

    def on_batch_end(self, net, batch=None, training=False, **kwargs):
        if training:
            self.steps_ += 1

    def on_epoch_end(self, net, **kwargs):
        if self.steps_ >= self.max_steps:
            raise KeyboardInterrupt

    def on_train_end(self, net, **kwargs):
        if self.key is not None:
            net.history.record(self.key, self.steps_)


class CosineSchedule(Callback):
    """Decay Adam's rate to 0 by a cosine over the fit's steps, when ``lr_schedule="cosine"``.

    Installed by default in every estimator (as ``"lr_schedule"``); it reads
    the estimator's ``lr_schedule`` parameter at every fit and does nothing
    when it is ``"constant"`` (the default). With ``"cosine"``, the rate of
    the k-th training batch of a fit (k = 0, 1, ..., n - 1) is
    ``base * (1 + cos(pi k / n)) / 2`` for each parameter group's rate
    ``base`` (``lr``), with n the fit's total steps: ``max_epochs`` times the
    batches of an epoch (a stream's too), or a :class:`StepBudget`'s
    ``max_steps`` when that is smaller. The rate after the last step is 0
    (the schedule of ``torch.optim.lr_scheduler.CosineAnnealingLR`` with
    ``T_max=n``, stepped per batch). The rate of each batch is recorded in
    ``history_`` under ``"event_lr"`` (as skorch's ``LRScheduler`` does);
    at the end of training the rates are set back to ``base``, so that a
    later ``partial_fit`` starts its own cosine from the full rate. A fit
    that loads a checkpoint as it begins (``checkpoints.LoadInitState``)
    goes on from the training steps of the loaded epochs, as skorch's
    ``LRScheduler`` does: killed and resumed with
    ``LoadInitState(cp, max_epochs=...)``, a run gets the rates of the
    uninterrupted one. Beside skorch's ``LRScheduler`` (which would set the
    rates too) ``"cosine"`` is refused at fit, naming both.

    Examples
    --------
    >>> from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
    >>> X, y = make_sparse_selection(64, seq_len=5, token_dim=2, random_state=0)
    >>> est = SparseTokenFCN(hidden_width=8, lr=0.01, lr_schedule="cosine", batch_size=16,
    ...                      max_epochs=2, random_state=0).fit(X, y)
    >>> [round(lr, 5) for lr in est.history_[:, "batches", :, "event_lr"][0]]
    [0.01, 0.00962, 0.00854, 0.00691]
    """

    def on_train_begin(self, net, **kwargs):
        self.active_ = getattr(net, "lr_schedule", "constant") == "cosine"
        self.total_, self.step_ = None, 0
        self.epochs_before_ = len(net.history)
        if self.active_:
            others = [name for name, cb in net.callbacks_
                      if isinstance(cb, LRScheduler) and cb is not self]
            if others:
                raise ValueError(
                    f"lr_schedule='cosine' and the callback {others[0]!r} (skorch's "
                    "LRScheduler) would both set the learning rate of every step, and "
                    "history_'s event_lr would record rates that were not used. Use one: "
                    "lr_schedule='constant' (the default) to schedule with the callback, or "
                    f"remove {others[0]!r} from callbacks to use the cosine.")
            self.base_lrs_ = [group["lr"] for group in net.optimizer_.param_groups]

    def on_epoch_begin(self, net, dataset_train=None, **kwargs):
        if not self.active_ or self.total_ is not None:
            return
        self.total_ = net.max_epochs * len(net.get_iterator(dataset_train, training=True))
        budgets = [cb.max_steps for _, cb in net.callbacks_ if isinstance(cb, StepBudget)]
        self.total_ = max(1, min([self.total_, *budgets]))
        if len(net.history) - 1 != self.epochs_before_:
            # a history loaded as training began (LoadInitState): go on from the steps of
            # its epochs, as skorch's LRScheduler does, rather than from the top
            self.step_ = sum(1 for row in net.history[:-1] for batch in row["batches"]
                             if "train_loss" in batch)

    def on_batch_begin(self, net, training=False, **kwargs):
        if not (training and self.active_):
            return
        factor = (1 + math.cos(math.pi * min(self.step_, self.total_) / self.total_)) / 2
        for group, base in zip(net.optimizer_.param_groups, self.base_lrs_):
            group["lr"] = base * factor
        net.history.record_batch("event_lr", self.base_lrs_[0] * factor)

    def on_batch_end(self, net, training=False, **kwargs):
        if training and self.active_:
            self.step_ += 1

    def on_train_end(self, net, **kwargs):
        if self.active_:
            for group, base in zip(net.optimizer_.param_groups, self.base_lrs_):
                group["lr"] = base


# -- the checks installed by default (the estimators' get_default_callbacks) ------


class TrainingDivergedError(RuntimeError):
    """Training made the loss or the weights NaN or infinite.

    Raised by ``fit`` and ``partial_fit`` (from :class:`DivergenceCheck`). As
    with any failed call, the estimator is left as it was before it (unfitted
    if it was); the error's ``history`` attribute keeps the diverged fit's
    losses up to the divergence.

    Examples
    --------
    >>> import torch
    >>> from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
    >>> X, y = make_sparse_selection(64, seq_len=5, token_dim=2, random_state=0)
    >>> est = SparseTokenFCN(hidden_width=8, lr=1e30, optimizer=torch.optim.SGD,
    ...                      batch_size=16, random_state=0)
    >>> try:
    ...     est.fit(X, y)
    ... except TrainingDivergedError as error:
    ...     print("diverged in epoch", len(error.history), "; fitted:", est.initialized_)
    diverged in epoch 1 ; fitted: False
    """


class NoTrainingStepError(ValueError):
    """An epoch of training ran without one optimisation step (raised by
    :class:`EpochStepCheck`; ``fit`` adds what became of the estimator)."""


class DivergenceCheck(Callback):
    """Stop training with :class:`TrainingDivergedError` when it diverges.

    Two signs of divergence are checked:

    - after every training batch, the loss must be finite, and at the end
      of training the weights too (the last step can break them with no
      loss left to show it);
    - at the end of every epoch from the second on, the epoch's training
      loss must not exceed ``max_loss_ratio`` times the reference loss,
      the larger of the first recorded epoch's training loss and the loss
      of its first batch (the untrained model's loss, in the criterion's
      own units, so a criterion of any scale or reduction is compared with
      itself). Healthy training lowers the loss from where it started; a
      whole epoch averaging a thousand times worse than the untrained model
      is an explosion that stays finite (too large an ``lr``), whose model
      predicts worse than a constant. The reference is the history's first
      epoch, so training that continues (``warm_start``, ``partial_fit``)
      is compared with the model as it began.

    Installed by default in every estimator (as ``"divergence_check"``);
    ``callbacks="disable"`` removes it with the rest, and
    ``callbacks__divergence_check__max_loss_ratio=None`` turns the second
    check off.

    Parameters
    ----------
    max_loss_ratio : float or None, default=1e3
        The largest epoch loss allowed, as a multiple of the reference loss;
        None checks finiteness only.

    Examples
    --------
    >>> from sparse_token_estimators import SparseTokenFCN
    >>> type(dict(SparseTokenFCN().get_default_callbacks())["divergence_check"]).__name__
    'DivergenceCheck'
    """

    def __init__(self, max_loss_ratio=1e3):
        self.max_loss_ratio = max_loss_ratio

    def initialize(self):
        ratio = self.max_loss_ratio
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float))
                                  or not ratio > 1):
            raise ValueError(
                f"DivergenceCheck's max_loss_ratio must be a number > 1 or None; got "
                f"{ratio!r}. Pass e.g. callbacks__divergence_check__max_loss_ratio=1e4, or "
                "None to check only that the loss stays finite."
            )
        return self

    def on_batch_end(self, net, batch=None, training=False, **kwargs):
        if training and not math.isfinite(loss := net.history[-1, "batches", -1, "train_loss"]):
            self._diverged(net, f"the training loss became {loss}")

    def on_epoch_end(self, net, **kwargs):
        if self.max_loss_ratio is None or len(net.history) < 2:
            return
        # skorch's train_loss column is written after this callback runs:
        # the epoch's loss from its batches, weighted by their sizes as skorch does
        batches = [b for b in net.history[-1]["batches"] if "train_loss" in b]
        sizes = [b.get("train_batch_size", 1) for b in batches]
        loss = (sum(b["train_loss"] * n for b, n in zip(batches, sizes)) / sum(sizes)
                if batches and sum(sizes) else None)
        reference = _reference_loss(net.history)
        if loss is None or reference is None or reference <= 0:
            return
        if loss > self.max_loss_ratio * reference:
            self._diverged(
                net, f"the training loss exploded to {loss:.3g}, more than "
                f"max_loss_ratio={self.max_loss_ratio:g} times the loss the fit started "
                f"from ({reference:.3g}, epoch 1)")

    def on_train_end(self, net, **kwargs):
        if not all(torch.isfinite(p).all() for p in net.module_.parameters()):
            self._diverged(net, "the weights became NaN or infinite")

    @staticmethod
    def _diverged(net, what):
        optimizer = getattr(net.optimizer, "__name__", net.optimizer)
        raise TrainingDivergedError(
            f"Training diverged: {what} in epoch {len(net.history)} (lr={net.lr}, "
            f"optimizer={optimizer}). Lower lr (e.g. lr={net.lr / 10:g}), or rescale "
            "X and y if their values are very large, and fit again. The estimator "
            "is as it was before this call; this error's history attribute keeps "
            "the losses up to the divergence."
        )


def _reference_loss(history):
    """The larger of the first epoch's training loss and its first batch's; None if none."""
    first = history[0]
    losses = [first.get("train_loss")]
    losses += [batch.get("train_loss") for batch in first.get("batches", [])[:1]]
    losses = [loss for loss in losses if isinstance(loss, (int, float)) and math.isfinite(loss)]
    return max(losses) if losses else None


class EpochStepCheck(Callback):
    """Refuse an epoch that took no optimisation step, saying why.

    An epoch without a batch (``drop_last`` with too few sequences, an empty
    training split, an iterator used up) would otherwise return a model that
    never trained. Raises :class:`NoTrainingStepError` at the end of such an
    epoch, before its scores are computed. Installed by default in both
    estimators (as ``"epoch_step_check"``).

    Examples
    --------
    >>> from sparse_token_estimators import SparseTokenFCN
    >>> type(dict(SparseTokenFCN().get_default_callbacks())["epoch_step_check"]).__name__
    'EpochStepCheck'
    """

    def on_epoch_end(self, net, dataset_train=None, **kwargs):
        if net.history[-1].get("train_batch_count", 1) == 0:
            raise NoTrainingStepError(self._why(net, dataset_train))

    @staticmethod
    def _why(net, dataset):
        head = (f"Epoch {len(net.history)} took no optimisation step: iterator_train "
                "yielded no batch")
        batch_size = net.batch_size
        drop_last = net.get_params_for("iterator_train").get("drop_last", False)
        try:
            n = len(dataset)
        except TypeError:
            n = None
        if n == 0:
            return f"{head}, as the training data is empty (check train_split)."
        if n is not None and drop_last and n < batch_size:
            return (f"{head}: from {n} training sequences in batches of "
                    f"batch_size={batch_size} with drop_last=True, the only batch is "
                    f"incomplete and dropped. Lower batch_size to at most {n}, or set "
                    "iterator_train__drop_last=False.")
        return (f"{head} (from {n} training sequences). Check iterator_train: it must "
                "yield batches in every epoch (a generator used up in one epoch "
                "yields nothing in the next).")


class ValidationSplitCheck(Callback):
    """Refuse, before the first epoch, callbacks that need a validation split there is none of.

    The estimators default to ``train_split=None`` (scikit-learn's searches do
    the splitting), so no ``valid_loss`` is recorded. skorch's
    ``EarlyStopping()`` (monitor "valid_loss"), ``Checkpoint()`` (monitor
    "valid_loss_best"), any callback whose ``monitor`` is a "valid..." score,
    and ``EpochScoring`` / ``BatchScoring`` with ``on_train=False`` would fail
    or record nothing after the first epoch; this check names the two ways
    out instead. Installed by default in both estimators (as
    ``"validation_split_check"``).

    Examples
    --------
    >>> from skorch.callbacks import EarlyStopping
    >>> from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
    >>> X, y = make_sparse_selection(64, seq_len=5, token_dim=2, random_state=0)
    >>> try:
    ...     SparseTokenFCN(callbacks=[EarlyStopping()]).fit(X, y)
    ... except ValueError as exc:
    ...     print(str(exc)[:60])
    Callback 'EarlyStopping' monitors 'valid_loss', a validation
    """

    def on_train_begin(self, net, **kwargs):
        if net.train_split is not None:
            return
        for name, cb in net.callbacks_:
            monitor = getattr(cb, "monitor", None)
            scores_valid = isinstance(cb, (EpochScoring, BatchScoring)) and not cb.on_train
            if scores_valid:
                raise ValueError(
                    f"Callback {name!r} scores on the validation data (on_train=False), "
                    "but train_split=None holds out none, so it would record nothing. "
                    "Pass train_split=skorch.dataset.ValidSplit(5) (holds out 20%), or "
                    f"score the training data with {type(cb).__name__}(..., on_train=True)."
                )
            if isinstance(monitor, str) and monitor.startswith("valid"):
                train = "train_loss_best" if monitor.endswith("_best") else "train_loss"
                raise ValueError(
                    f"Callback {name!r} monitors {monitor!r}, a validation score, but "
                    "train_split=None holds out no validation data, so there would be "
                    f"no {monitor!r} after the first epoch. Pass "
                    "train_split=skorch.dataset.ValidSplit(5) (holds out 20%), or "
                    f"monitor={train!r} to monitor the training loss."
                )
