"""The reproduction's critical-width searches: the protocol of the second and third sets.

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
records it and the set it belongs to.
:func:`protocol_searches` turns those searches into rounds of
:class:`~._models.Fit` (a rate per fit) whose records come back from the
run's one runner; the rest of this module makes the tables of what they found.
"""

import math
from collections import namedtuple
from dataclasses import replace
from functools import partial

import numpy as np

from .._critical_width import search_steps
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


def protocol_search(config, search, make_fit, rates):
    """Generator: the requests of one search (``search_steps(...)``) as rounds of fits;
    returns what the search returned, with ``chosen_lr`` (width -> rate),
    ``chosen_lr_per_seed`` (width -> {seed: that seed's best rate}) and ``fits``
    (``(width, lr, times, fit)`` of every fit it asked for).

    A request ``(width, 1)`` is fitted at every rate of ``rates``
    (``make_fit(width, lr, 1)``) and scored by the best mean validation R^2 over
    the seeds (the fits' own, ``Fit.seeds``); ``(width, 2)`` at the rate chosen there, with
    twice the steps."""
    chosen, per_seed, made = {}, {}, []
    request = next(search)
    while True:
        width, times = request
        asked = rates if times == 1 else [chosen[width]] if chosen.get(width) is not None \
            else []
        fits = {lr: make_fit(width, lr, times) for lr in asked}
        made += [(width, lr, times, f) for lr, f in fits.items()]
        records = yield list(fits.values())
        best, score = _best({lr: float(np.mean([records[f, s]["val_r2"]
                                                for s in f.seeds(config)]))
                             for lr, f in fits.items()})
        if times == 1:
            chosen[width] = best
            # one model per search: its fits share their seeds
            seeds = sorted({s for f in fits.values() for s in f.seeds(config)})
            per_seed[width] = {s: _best({lr: records[f, s]["val_r2"]
                                         for lr, f in fits.items()})[0] for s in seeds}
        try:
            request = search.send(score)
        except StopIteration as end:
            return {**end.value, "chosen_lr": chosen, "chosen_lr_per_seed": per_seed,
                    "fits": made}


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


def lockstep(searches):
    """Generator: the search generators ``{name: generator}`` side by side, their rounds
    merged in a :class:`Round`; sent the records of every fit of the round, each search
    receives them; sent :class:`Answers`, only the searches named, each its own. Returns
    ``{name: what it returned}`` in the order of ``searches``."""
    pending, done = {}, {}

    def step(name, value):
        try:
            pending[name] = searches[name].send(value)
        except StopIteration as end:
            done[name] = end.value
            pending.pop(name, None)

    for name in searches:
        step(name, None)
    while pending:
        answer = yield Round(dict(pending))
        if isinstance(answer, Answers):
            for name in [n for n in answer if n in pending]:
                step(name, answer[name])
        else:
            for name in list(pending):
                step(name, answer)
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


def protocol_searches(config, lens, keys, *, n_train, start, stop, floor):
    """Generator: for each model of ``keys`` (keys of ``MODELS``), one :func:`protocol_search`
    at each T of ``lens`` in increasing order (:func:`search_chain`), the models side by
    side (:func:`lockstep`: a model goes on to its next T as soon as its own search there
    ends), at the rates of each model's family, training on ``n_train(T)`` fresh sequences
    every epoch (:func:`population_fit`).

    ``start(key, T, outcome at the T before or None)``, ``stop(key, T)``,
    ``floor(key, T)``: the search's first, widest and narrowest width (each taken to a
    multiple of :func:`width_multiple`). Returns ``{T: {key: outcome}}``, each outcome
    with its ``stop``.
    """
    chains = {key: search_chain(config, lens, key, n_train=n_train, start=start, stop=stop,
                                floor=floor) for key in keys}
    done = yield from lockstep(chains)
    return {T: {key: done[key][T] for key in keys} for T in lens}


def search_chain(config, lens, key, *, n_train, start, stop, floor):
    """Generator: the searches of one model ``key`` at each T of ``lens`` in increasing
    order, each starting from ``start(key, T, the outcome at the T before)``; returns
    ``{T: outcome}`` (:func:`protocol_searches`)."""
    found, previous = {}, None
    m = width_multiple(key)
    for T in lens:
        top, bottom = stop(key, T) // m * m, -(-floor(key, T) // m) * m
        first = min(max(start(key, T, previous), bottom), top) // m * m
        search = search_steps(first, target=TARGET_R2, stop=top, floor=bottom,
                              factor=2.0, refine=REFINE, multiple=m)
        outcome = yield from protocol_search(
            config, search, partial(population_fit, config, key, T, n_train(T)),
            config.lr_grid(MODELS[key].family))
        found[T] = previous = {**outcome, "stop": top}
    return found


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
    outcome}}``), a row per (T, key, width, rate, steps, seed), and the mean over seeds
    at each width's chosen rate (1x steps)."""
    points = []
    for T, outcomes in found.items():
        for model, o in outcomes.items():
            # the rows in increasing width, those with twice the steps last
            for w, lr, times, fit in sorted(o["fits"], key=lambda f: (f[2], f[0])):
                for seed in fit.seeds(config):
                    r = records[fit, seed]
                    points.append({"model": model, "model_name": r["model_name"],
                                   "key": model, "seq_len": T,
                                   "parameter": parameter, "value": w, "width": r["width"],
                                   "lr": lr, "steps_multiplier": times,
                                   "chosen": lr == o["chosen_lr"].get(w), "seed": seed,
                                   **{k: r[k] for k in POINT_RECORD}})
    chosen = [p for p in points if p["chosen"] and p["steps_multiplier"] == 1]
    return points, summarise(chosen, ["key", "model", "seq_len", "parameter", "value", "lr"],
                             ["val_r2", "test_r2", "test_loss"])


def per_seed_rows(config, points, found):
    """``[{"key", "seq_len", "seed", "star"}]``: each seed's own critical width at each T
    (the smallest width at which its own best rate reaches the target; None if none)."""
    rows = []
    for T, outcomes in found.items():
        for key in outcomes:
            own = [p for p in points if p["seq_len"] == T and p["key"] == key
                   and p["steps_multiplier"] == 1]
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


def critical_rows(config, found, summary, extra):
    """One row per (T, key): the critical width found, its bracket, status and reason,
    the chosen rates, the steps check, the held-out R^2 at the chosen rate and what
    ``extra(row)`` adds."""
    rows = []
    for T, outcomes in found.items():
        for key, o in outcomes.items():
            lower, upper = o["bracket"]
            star = o["width"]
            at = find(summary, key=key, seq_len=T, value=star) if star else None
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
                "td": T * config.token_dim}
            rows.append({**row, **extra(row)})
    return rows


def star_text(row, offset=0):
    """A critical row's width as a table shows it: the width, "> stop", or "-"."""
    if row["star"]:
        return str(offset + row["star"])
    if row["status"] == "> stop":
        return f"> {offset + row['lower']}"
    return "-"


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
    "search": Column("search", lambda r: r["status"], "l"),
    "held-out R^2": Column("held-out R^2", lambda r: "-" if r["test_r2_mean"] is None
                           else f"{r['test_r2_mean']:.3f} ± {r['test_r2_sd']:.3f}"),
    "rate": Column(None, lambda r: fmt(r["lr_at_star"], "g")),
    # the mean validation R^2 with twice the steps at each width refitted
    "2x steps": Column("2x steps (val R^2)", lambda r: ", ".join(
        f"{w}: {v:.3f}" for w, v in r["doubled_scores"].items()) or "-", "l"),
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
            for r in rows if r["status"] != "found"]


#: how a summary says each ``lr_schedule`` of a search's fits
SCHEDULE_TEXT = {"constant": "Adam at a constant rate",
                 "cosine": "Adam, each rate a peak decayed to 0 by a cosine over the fit's steps"}


def schedule_text(section):
    """The rate schedule of a critical-width section's fits, in words."""
    return SCHEDULE_TEXT.get(section.get("lr_schedule", "constant"), section.get("lr_schedule"))


def scoring_text(section, n_seeds):
    """How a width's score reaches the target, for a single-model summary."""
    rates = ", ".join(f"{lr:g}" for lr in section["lr_grid"])
    return (f"(mean over {seeds_text(n_seeds)}, at the best of the learning rates {rates}, "
            f"{schedule_text(section)}) reaches {section['target_r2']}")


def critical_section(config, found, records, parameter, extra):
    """A critical-width experiment's section: every fit, the mean over seeds at each
    width's chosen rate, a row per (T, key) with ``extra(row)``, each seed's own width,
    and the rate grids."""
    points, summary = collect_points(config, records, found, parameter)
    keys = {k for outcomes in found.values() for k in outcomes}
    schedules = {training(m, config).lr_schedule for m in keys} or {"constant"}
    schedule = schedules.pop() if len(schedules) == 1 else "mixed"
    return {"target_r2": TARGET_R2, "refine": REFINE,
            # the third set's recipe decays every rate; a constant rate is the second's
            "protocol": "third set" if schedule == "cosine" else "second set",
            "lr_grids": {MODELS[m].family: list(config.lr_grid(MODELS[m].family))
                         for m in sorted(keys)},
            "lr_schedule": schedule,
            "points": points, "summary": summary,
            "critical": critical_rows(config, found, summary, extra),
            "critical_per_seed": per_seed_rows(config, points, found)}
