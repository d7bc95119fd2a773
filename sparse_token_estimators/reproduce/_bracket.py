"""The reproduction's critical-width searches: the protocol of the second to fourth sets.

Every critical width of a run (the paper's model's pe_dim*, the FCN's m*,
each architecture's smallest width) is found by the bracketing search of
:func:`~sparse_token_estimators.model_selection.critical_width` (its
generator :func:`~sparse_token_estimators._critical_width.search_steps`):
a width's score is the best, over its model family's learning-rate grid
(``ReproductionConfig.lr_grids``), of the validation R^2 averaged over the
seeds; the crossing is confirmed at the next width, a falling score is
reported, and both bracketing widths (the widest, past the stop) are
refitted with twice the steps at their chosen rate, at every T. Under the
third set's recipe each fit's rate decays to 0 by a cosine over its steps
(the grid gives the peak rates; the doubled fits decay over twice the steps);
the recipe is the trainings' ``lr_schedule``, and :func:`critical_section`
records it and the set it belongs to. Under the fourth set (the third's recipe
and two rules: :func:`fourth_set`), the scaling law's and the FCN's searches
are searched again at a T with twice the steps where a width fails although a
narrower one passed (``search_steps(search_again=True)``); each row records the
steps its search used (``steps_multiplier``), the first search where there
were two, and whether the steps check settled its width.
:func:`protocol_searches` turns those searches into rounds of
:class:`~._models.Fit` (a rate per fit) whose records come back from the
run's one runner; the rest of this module makes the tables of what they found.
"""

import math
from collections import namedtuple
from dataclasses import replace
from functools import partial

import numpy as np

from .._width_search import _passes, search_steps
from ..architectures import encoder_width_multiple
from ._experiment import find, fmt, markdown_table, seeds_text, summarise
from ._models import MODELS, Fit, model_name, model_seeds, training

#: the mean validation R^2 a critical width reaches (``_verdicts.THRESHOLDS``)
TARGET_R2 = 0.8
#: bisect until the bracket is within this factor (verdict 4: sqrt(2) or finer)
REFINE = 2 ** 0.5


def _best(means):
    """The rate of the best finite mean (None if none) and that mean (NaN if none)."""
    finite = {lr: m for lr, m in means.items() if not math.isnan(m)}
    if not finite:
        return None, math.nan
    best = max(finite, key=finite.get)
    return best, finite[best]


def protocol_search(config, search, make_fit, rates, on_no_width=None):
    """Generator: the requests of one search (``search_steps(...)``) as rounds of fits;
    returns what the search returned, with ``chosen_lr`` (width -> rate),
    ``chosen_lr_per_seed`` (width -> {seed: that seed's best rate}), both of the search
    that gave the result and in each of its ``searches`` too, and ``fits`` (``(width, lr,
    times, check, fit)`` of every fit it asked for).

    A request ``(width, times)`` is fitted at every rate of ``rates``
    (``make_fit(width, lr, times)``) and scored by the best mean validation R^2 over
    the seeds (the fits' own, ``Fit.seeds``); a steps check ``(width, 2 times, True)`` at
    the rate chosen there, with twice the steps.

    ``on_no_width()``: called once, where the search is known to find no width before it
    ends: a steps check is asked for while no width has reached the target (the check of
    the widest width past the stop; it can make the search "unresolved", never give it a
    width, and no search again follows a search in which no width passed)."""
    chosen, per_seed, made = {}, {}, []  # chosen and per_seed by the search's own steps
    passed = False
    request = next(search)
    while True:
        width, times, check = request
        if check and not passed and on_no_width is not None:
            on_no_width()
            on_no_width = None
        own = chosen.setdefault(times // 2 if check else times, {})
        asked = rates if not check else [own[width]] if own.get(width) is not None else []
        fits = {lr: make_fit(width, lr, times) for lr in asked}
        made += [(width, lr, times, check, f) for lr, f in fits.items()]
        records = yield list(fits.values())
        best, score = _best({lr: float(np.mean([records[f, s]["val_r2"]
                                                for s in f.seeds(config)]))
                             for lr, f in fits.items()})
        if not check:
            passed |= _passes(score, TARGET_R2)
            own[width] = best
            # one model per search: its fits share their seeds
            seeds = sorted({s for f in fits.values() for s in f.seeds(config)})
            per_seed.setdefault(times, {})[width] = {
                s: _best({lr: records[f, s]["val_r2"] for lr, f in fits.items()})[0]
                for s in seeds}
        try:
            request = search.send(score)
        except StopIteration as end:
            searches = [{**s, "chosen_lr": chosen.get(s["steps_multiplier"], {}),
                         "chosen_lr_per_seed": per_seed.get(s["steps_multiplier"], {})}
                        for s in end.value["searches"]]
            return {**end.value, "searches": searches, "chosen_lr": searches[-1]["chosen_lr"],
                    "chosen_lr_per_seed": searches[-1]["chosen_lr_per_seed"], "fits": made}


class Round(list):
    """The fits several searches ask for side by side: a list of them all (what a runner
    that fits a round at once needs), each search's own request in ``branches``
    (``{name: list of fits, or a Round}``), for a runner that answers each search as
    soon as its own fits return (:class:`Answers`)."""

    def __init__(self, branches):
        super().__init__(f for request in branches.values() for f in request)
        self.branches = branches


class Answers(dict):
    """The records of some branches of a :class:`Round` only, ``{name: records, or the
    Answers of a nested Round}``: the branches not named wait, their fits still running."""


class _Wait:
    """The request of a search that waits on another (:data:`WAIT`)."""

    def __repr__(self):
        return "WAIT"


#: what a search driven by :func:`lockstep` yields while it waits on another search of the
#: same lockstep (it asks for no fit): it is sent None after each step of the others, until
#: it yields a request
WAIT = _Wait()


def lockstep(searches):
    """Generator: the search generators ``{name: generator}`` side by side, their rounds
    merged in a :class:`Round`; sent the records of every fit of the round, each search
    receives them; sent :class:`Answers`, only the searches named, each its own. A search
    that yields :data:`WAIT` is left out of the rounds and sent None after each step of the
    others, until it asks for fits; where every search waits, the lockstep yields
    :data:`WAIT` itself. A lockstep inside another (a search yielding a :class:`Round`) is
    polled with Answers naming none of its searches. Returns ``{name: what it returned}``
    in the order of ``searches``.

    Examples
    --------
    >>> found = {}
    >>> def first():
    ...     records = yield ["fit a"]
    ...     found["a"] = records
    >>> def second():
    ...     while "a" not in found:  # its request depends on the first search's result
    ...         yield WAIT
    ...     yield ["fit b"]
    >>> steps = lockstep({"a": first(), "b": second()})
    >>> next(steps).branches
    {'a': ['fit a']}
    >>> steps.send(Answers(a={"fit a": 0.9})).branches
    {'b': ['fit b']}
    """
    pending, done = {}, {}

    def step(name, value):
        try:
            pending[name] = searches[name].send(value)
        except StopIteration as end:
            done[name] = end.value
            pending.pop(name, None)

    def wake():
        """Poll the lockstep searches inside (sent Answers naming none of theirs, each
        polls its own waiting searches), then step the waiting searches until none of them
        changes (a search starts, never ends, on a poll: it cannot wake another)."""
        for name in [n for n, request in pending.items() if isinstance(request, Round)]:
            step(name, Answers())
        changed = True
        while changed:
            changed = False
            for name in [n for n, request in pending.items() if request is WAIT]:
                step(name, None)
                changed |= pending.get(name) is not WAIT

    for name in searches:
        step(name, None)
    wake()
    while pending:
        active = {n: request for n, request in pending.items() if request is not WAIT}
        if not active:  # each waits on a search outside: the lockstep around this polls it
            yield WAIT
            wake()
            continue
        answer = yield Round(active)
        if isinstance(answer, Answers):
            for name in [n for n in answer if n in active]:
                step(name, answer[name])
        else:
            for name in active:
                step(name, answer)
        wake()
    return {name: done[name] for name in searches}


def width_multiple(model):
    """What every width the search of ``model`` (a key of ``MODELS``) evaluates is a
    multiple of: :func:`~sparse_token_estimators.architectures.encoder_width_multiple` for
    an encoder (2 with rotary positions or the sinusoidal encoding, at one head), else 1."""
    spec = MODELS[model]
    if spec.family != "encoder":
        return 1
    params = dict(spec.params)
    return encoder_width_multiple(params["n_heads"], params.get("positional_encoding"))


def protocol_searches(config, lens, keys, *, n_train, start, stop, floor, again=False,
                      early=False, side_by_side=False):
    """Generator: for each model of ``keys`` (keys of ``MODELS``), one :func:`protocol_search`
    at each T of ``lens`` in increasing order (:func:`search_chain`), the models side by
    side (:func:`lockstep`: a model goes on to its next T as soon as its own search there
    ends), at the rates of each model's family, training on ``n_train(T)`` fresh sequences
    every epoch (:func:`population_fit`).

    ``start(key, T, outcome at the T before or None)``, ``stop(key, T)``,
    ``floor(key, T)``: the search's first, widest and narrowest width (each taken to a
    multiple of :func:`width_multiple`). ``again``: the fourth set's first rule, a
    search in which a width fails although a narrower one passed is searched again at that
    T with twice the steps (``search_steps(search_again=True)``). ``early``: ``start``
    reads only the width found at the T before (:func:`search_chain`). ``side_by_side``:
    ``start`` reads nothing of the T before (it is sent None): every T is searched at
    once. Returns ``{T: {key: outcome}}``, each outcome with its ``stop``.
    """
    chains = {key: search_chain(config, lens, key, n_train=n_train, start=start, stop=stop,
                                floor=floor, again=again, early=early,
                                side_by_side=side_by_side)
              for key in keys}
    done = yield from lockstep(chains)
    return {T: {key: done[key][T] for key in keys} for T in lens}


def search_chain(config, lens, key, *, n_train, start, stop, floor, again=False,
                 ready=None, outcomes=None, early=False, side_by_side=False):
    """Generator: the searches of one model ``key`` at each T of ``lens`` in increasing
    order, each starting from ``start(key, T, the outcome at the T before)``; returns
    ``{T: outcome}`` (:func:`protocol_searches`).

    ``ready(key, T)``: whether the search at T may start (its ``start`` and ``stop`` read
    other searches' outcomes there); until then the chain yields :data:`WAIT` (driven by
    :func:`lockstep`). ``outcomes``: a dict ``{T: {key: outcome}}`` into which each
    outcome is written as soon as its search ends, for the others' ``ready``. ``early``:
    ``start`` reads only the width of the outcome at the T before (None: none found); the
    search at T then starts as soon as the one before is known to find no width
    (``protocol_search``'s ``on_no_width``: while its steps check runs), with
    ``{"width": None}`` as the outcome before. Every search asks for the same fits as
    one after another: only when they are asked for changes. ``side_by_side``: ``start``
    reads nothing of the T before (it is sent None), and every T is searched at once, its
    rounds beside the others' (:func:`lockstep`): the same fits, asked for sooner, so
    that a run's workers are not left waiting on one T's rounds after another's."""
    found, known = {}, {}  # known: T -> what start reads of the outcome there
    m = width_multiple(key)

    def at(T, before):
        while (ready is not None and not ready(key, T)) or (before is not None
                                                            and before not in known):
            yield WAIT
        top, bottom = stop(key, T) // m * m, -(-floor(key, T) // m) * m
        first = min(max(start(key, T, known.get(before)), bottom), top) // m * m
        search = search_steps(first, target=TARGET_R2, stop=top, floor=bottom,
                              factor=2.0, refine=REFINE, multiple=m, search_again=again)
        outcome = yield from protocol_search(
            config, search, partial(population_fit, config, key, T, n_train(T)),
            config.lr_grid(MODELS[key].family),
            on_no_width=partial(known.__setitem__, T, {"width": None}) if early else None)
        found[T] = known[T] = {**outcome, "stop": top}
        if outcomes is not None:
            outcomes.setdefault(T, {})[key] = found[T]

    befores = [None] * len(lens) if side_by_side else [None, *lens[:-1]]
    if early or side_by_side:
        yield from lockstep({T: at(T, before) for T, before in zip(lens, befores)})
    else:
        for T, before in zip(lens, befores):
            yield from at(T, before)
    return {T: found[T] for T in lens}


def population_fit(config, model, T, n_train, width, lr, times):
    """A critical-width fit: ``model`` at ``width`` on the population at T, at rate ``lr``,
    ``times`` times ``n_train`` fresh sequences every epoch (twice: twice the steps).

    A rate that is the model's own training's at that width is left implicit
    (``lr=0``): the fit is then the same as one an experiment plans, and made once."""
    fit = Fit(model, width, T, "population", n_train=times * n_train)
    return fit if fit.learning_rate(config) == lr else replace(fit, lr=lr)


#: what a point of a search copies from its fit's record, after its own items
POINT_RECORD = ("n_train", "val_r2", "test_r2", "test_loss", "test_loss_se", "fit_cpu_s")


def collect_points(config, records, found, parameter):
    """Every fit of the searches (``found``: :func:`protocol_searches`'s ``{T: {key:
    outcome}}``), a row per (T, key, width, rate, steps, seed; ``steps_check``: a fit of
    the steps check), and the mean over seeds at each width's chosen rate at each
    search's own steps (``steps_multiplier`` 1, and 2 where searched again)."""
    points = []
    for T, outcomes in found.items():
        for model, o in outcomes.items():
            chosen_at = {s["steps_multiplier"]: s["chosen_lr"] for s in o["searches"]}
            # the rows in increasing width, those with more steps last
            for w, lr, times, check, fit in sorted(o["fits"], key=lambda f: (f[2], f[0])):
                for seed in fit.seeds(config):
                    r = records[fit, seed]
                    points.append({"model": model, "model_name": r["model_name"],
                                   "key": model, "seq_len": T,
                                   "parameter": parameter, "value": w, "width": r["width"],
                                   "lr": lr, "steps_multiplier": times,
                                   "chosen": check or lr == chosen_at[times].get(w),
                                   "seed": seed, **{k: r[k] for k in POINT_RECORD},
                                   "steps_check": check})
    chosen = [p for p in points if p["chosen"] and not p["steps_check"]]
    return points, summarise(chosen, ["key", "model", "seq_len", "parameter", "value", "lr",
                                      "steps_multiplier"], ["val_r2", "test_r2", "test_loss"])


def per_seed_rows(config, points, found):
    """``[{"key", "seq_len", "seed", "star"}]``: each seed's own critical width at each T
    (the smallest width at which its own best rate reaches the target, at the steps of
    the search that gave the T's width; None if none)."""
    rows = []
    for T, outcomes in found.items():
        for key, o in outcomes.items():
            own = [p for p in points if p["seq_len"] == T and p["key"] == key
                   and p["steps_multiplier"] == o["steps_multiplier"] and not p["steps_check"]]
            for s in model_seeds(key, config):
                best = {}
                for p in own:
                    if p["seed"] == s and not math.isnan(p["val_r2"]):
                        best[p["value"]] = max(best.get(p["value"], -math.inf), p["val_r2"])
                star = min((w for w, r2 in best.items() if r2 >= TARGET_R2), default=None)
                rows.append({"key": key, "model": key,
                             "model_name": model_name(key, config), "seq_len": T,
                             "seed": s, "star": star})
    return rows


def _by_width(values):
    """``{width: value}`` in increasing width, keyed by strings (as JSON keeps them)."""
    return {str(w): v for w, v in sorted(values.items())}


def _first_search(o):
    """The first search of an outcome searched again with twice the steps (the fourth set's
    first rule), as ``first_*`` items of its row; None where it was not."""
    first = o["searches"][0] if len(o["searches"]) > 1 else None
    items = {"status": "status", "star": "width", "reason": "reason"}
    return {**{f"first_{k}": first[v] if first else None for k, v in items.items()},
            "first_lower": first["bracket"][0] if first else None,
            "first_scores": _by_width(first["scores"]) if first else None,
            "first_chosen_lr": _by_width(first["chosen_lr"]) if first else None}


def critical_rows(config, found, summary, extra):
    """One row per (T, key): the critical width found, its bracket, status and reason,
    the chosen rates, the steps check, the held-out R^2 at the chosen rate, the steps
    of the search that found it (``steps_multiplier``), whether the steps check settled
    it (``settled``, ``upper_bound``), the first search where it was searched again
    (``searched_again``, ``first_*``) and what ``extra(row)`` adds."""
    rows = []
    for T, outcomes in found.items():
        for key, o in outcomes.items():
            lower, upper = o["bracket"]
            star, times = o["width"], o["steps_multiplier"]
            at = find(summary, key=key, seq_len=T, value=star, steps_multiplier=times) \
                if star else None
            row = {
                "key": key, "model": key,
                "model_name": model_name(key, config), "seq_len": T,
                "star": star, "lower": lower, "status": o["status"], "reason": o["reason"],
                "stop": o.get("stop"),
                "ratio": upper / lower if lower and upper else None,
                "evaluated": sorted(o["scores"]), "scores": _by_width(o["scores"]),
                "doubled_scores": _by_width(o["doubled_scores"]),
                "chosen_lr": _by_width(o["chosen_lr"]),
                "chosen_lr_per_seed": {w: {str(s): lr for s, lr in v.items()} for w, v
                                       in _by_width(o["chosen_lr_per_seed"]).items()},
                "lr_at_star": o["chosen_lr"].get(star) if star else None,
                **{k: at[k] if at else None for k in ("val_r2_mean", "test_r2_mean",
                                                      "test_r2_sd")},
                "td": T * config.token_dim, "steps_multiplier": times,
                "settled": o["settled"], "upper_bound": o["upper_bound"],
                "searched_again": len(o["searches"]) > 1, **_first_search(o)}
            rows.append({**row, **extra(row)})
    return rows


def star_text(row, offset=0):
    """A critical row's width as a table shows it: the width, "> stop", or "-"."""
    if row["star"]:
        return str(offset + row["star"])
    if row["status"] == "> stop":
        return f"> {offset + row['lower']}"
    return "-"


def search_text(row):
    """A critical row's search as a table shows it: its status; under the fourth set's
    second rule (rows with ``bound_met``: verdicts 4 and 5) an unsettled width as
    "unsettled, bound met", or unresolved with the bound not met; and where the first rule
    searched it again, with how many times the steps and how the first search ended."""
    text = row["status"]
    if row.get("bound_met") is not None:
        text = ("unsettled, bound met" if row["bound_met"] else
                "unresolved (unsettled, bound not met)")
    if row.get("searched_again"):
        text += (f" (searched again with {row['steps_multiplier']}x the steps; the first "
                 f"search {row['first_status']})")
    return text


def _check_text(row):
    """The steps check's mean validation R^2 at each width refitted, "-" where none; the
    multiple of the configured steps it used where not 2 (a search again: 4x)."""
    text = ", ".join(f"{w}: {v:.3f}" for w, v in row["doubled_scores"].items()) or "-"
    times = row.get("steps_multiplier", 1)
    return text if times == 1 or text == "-" else f"({2 * times}x) {text}"


def bracket_text(row):
    """A critical row's bracket: ``(lower, star]``, "-" where none."""
    return f"({row['lower'] or '-'}, {row['star'] or '-'}]"


#: a column of a critical-width table: its header, the text of a row's cell, "l" or "r"
Column = namedtuple("Column", "header cell align", defaults=("r",))

#: the columns of every critical-width table, by name; the headers of "width", "rate"
#: and "rates" are each table's own (:func:`critical_table`); "-" where there is none
COLUMNS = {
    "T": Column("T", lambda r: str(r["seq_len"])),
    "width": Column(None, lambda r: star_text(r, r.get("width_offset", 0))),
    "bracket": Column("bracket", bracket_text),
    "search": Column("search", lambda r: search_text(r), "l"),
    "held-out R^2": Column("held-out R^2", lambda r: "-" if r["test_r2_mean"] is None
                           else f"{r['test_r2_mean']:.3f} ± {r['test_r2_sd']:.3f}"),
    "rate": Column(None, lambda r: fmt(r["lr_at_star"], "g")),
    # the mean validation R^2 with twice the search's steps at each width refitted
    "2x steps": Column("2x steps (val R^2)", lambda r: _check_text(r), "l"),
    "rates": Column(None, lambda r: ", ".join(
        f"{w}: {fmt(lr, 'g')}" for w, lr in r["chosen_lr"].items()), "l"),
}


def critical_table(rows, columns, *, width, rate, rates):
    """Lines of a Markdown table of critical rows: ``columns`` are names of
    :data:`COLUMNS` or an experiment's own :class:`Column`; ``width``, ``rate`` and
    ``rates`` head the width found, the rate at it and the rate chosen at each width."""
    headers = {"width": width, "rate": rate, "rates": rates}
    columns = [COLUMNS[c]._replace(header=headers.get(c, COLUMNS[c].header))
               if isinstance(c, str) else c for c in columns]
    return markdown_table([c.header for c in columns],
                          [[c.cell(r) for c in columns] for r in rows],
                          [c.align for c in columns])


def reason_lines(rows, named=False):
    """``At T=..: reason.`` for each row whose search did not end "found" (``named``:
    ``<model name> at T=..``)."""
    return [f"{r['model_name'] + ' at' if named else 'At'} T={r['seq_len']}: {r['reason']}."
            for r in rows if r["status"] != "found" or r.get("searched_again")]


#: how a summary says each ``lr_schedule`` of a search's fits
SCHEDULE_TEXT = {"constant": "Adam at a constant rate",
                 "cosine": "Adam, each rate a peak decayed to 0 by a cosine over the fit's steps"}


def schedule_text(section):
    """The rate schedule of a critical-width section's fits, in words."""
    return SCHEDULE_TEXT.get(section.get("lr_schedule", "constant"), section.get("lr_schedule"))


def steps_text(section):
    """The steps of a critical-width section's searches at each T (before the steps check),
    and where a T was searched again with twice the steps, its first search's."""
    rows = [r for r in section["critical"] if r.get("steps") is not None]
    if not rows:  # results that record the steps per T apart, or one number for all
        if section.get("steps_per_T"):
            return ", ".join(f"{v} at T={T}" for T, v in section["steps_per_T"].items())
        if "steps" not in section:
            return "not recorded"
        return f"{section['steps']} at every T ({section['n_train']} sequences per epoch)"
    return ", ".join(
        f"{r['steps']} at T={r['seq_len']}" + (
            f" (searched again with twice the steps; the first search {r['first_steps']}, "
            f"{r['first_status']})" if r.get("searched_again") else "") for r in rows)


def again_text(section):
    """The fourth set's first rule in words, for a section whose searches followed it."""
    if section.get("protocol") != "fourth set":
        return ""
    return ("; where a width fails although a narrower one passed, that T is searched "
            "again with twice the steps (its steps check with four times), both searches "
            "reported (fourth set)")


def scoring_text(section, n_seeds):
    """How a width's score reaches the target, for a single-model summary."""
    rates = ", ".join(f"{lr:g}" for lr in section["lr_grid"])
    return (f"(mean over {seeds_text(n_seeds)}, at the best of the learning rates {rates}, "
            f"{schedule_text(section)}) reaches {section['target_r2']}")


def fourth_set(training):
    """Whether the searches of ``training`` (a :class:`~._config.Training`) follow the
    fourth set's rules (a search in which a width fails although a narrower one passed is
    searched again with twice the steps; verdicts 4 and 5 count an unsettled width whose
    bound is met): under the third set's recipe, the rate decayed by a cosine, to which
    the fourth set adds them."""
    return training.lr_schedule == "cosine"


def critical_section(config, found, records, parameter, extra, again=False):
    """A critical-width experiment's section: every fit, the mean over seeds at each
    width's chosen rate, a row per (T, key) with ``extra(row)``, each seed's own width,
    the rate grids and the set of verdicts whose protocol the searches followed
    (``again``: searched again where non-monotone, the fourth set's first rule)."""
    points, summary = collect_points(config, records, found, parameter)
    keys = {k for outcomes in found.values() for k in outcomes}
    schedules = {training(m, config).lr_schedule for m in keys} or {"constant"}
    schedule = schedules.pop() if len(schedules) == 1 else "mixed"
    # the third set's recipe decays every rate (the fourth adds its rules to it); a
    # constant rate is the second's
    protocol = "second set" if schedule != "cosine" else "fourth set" if again else "third set"
    return {"target_r2": TARGET_R2, "refine": REFINE, "protocol": protocol,
            "lr_grids": {MODELS[m].family: list(config.lr_grid(MODELS[m].family))
                         for m in sorted(keys)},
            "lr_schedule": schedule,
            "points": points, "summary": summary,
            "critical": critical_rows(config, found, summary, extra),
            "critical_per_seed": per_seed_rows(config, points, found)}
