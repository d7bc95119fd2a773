"""The argument checks of the critical-width search, all run before any fit.

Each check raises with what was wrong and what to pass instead, so that a
search that cannot be run stops at once rather than after hours of fits
(or, worse, returns a measurement made of failures).
"""

import math
import numbers

from .architectures import encoder_width_multiple

#: the widest width a search evaluates when its ``stop`` is None: a cap, so
#: that a target no width reaches ends the search ("> stop") instead of
#: growing the width without bound
MAX_WIDTH = 2 ** 20


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_bracket_args(start, *, target, stop, floor, factor, refine, fall_tol, check_steps,
                       multiple):
    """Check the bracketing search's arguments; return ``stop`` (the cap when None)."""
    if not _is_int(start) or start < 1:
        raise ValueError(f"start must be a positive int; got {start!r}.")
    if not _is_real(target) or not math.isfinite(target):
        raise ValueError(f"target must be a finite number (a score, e.g. 0.8); got {target!r}.")
    for name, value in (("factor", factor), ("refine", refine)):
        if not _is_real(value) or not math.isfinite(value) or not value > 1:
            raise ValueError(f"{name} must be a finite number > 1 (e.g. {name}=2.0); got "
                             f"{value!r}.")
    if fall_tol is not None and (not _is_real(fall_tol) or not math.isfinite(fall_tol)
                                 or fall_tol < 0):
        raise ValueError(f"fall_tol must be None or a finite number >= 0 (how far a score may "
                         f"fall while the width grows, e.g. 0.05); got {fall_tol!r}.")
    if not isinstance(check_steps, bool):
        raise ValueError(f"check_steps must be True or False; got {check_steps!r}.")
    if not _is_int(multiple) or multiple < 1:
        raise ValueError(f"multiple must be a positive int; got {multiple!r}.")
    if stop is None:
        if start > MAX_WIDTH:
            raise ValueError(f"start={start} is above the cap of a search without a stop "
                             f"({MAX_WIDTH}); pass stop >= start.")
        stop, capped = multiple * (MAX_WIDTH // multiple), True
    else:
        capped = False
        if not _is_int(stop) or stop < start:
            raise ValueError(f"stop must be None or an int >= start={start}; got {stop!r}.")
    if floor is not None and (not _is_int(floor) or not 1 <= floor <= start):
        raise ValueError(f"floor must be None or an int in 1..start={start}; got {floor!r}.")
    off = {name: value for name, value in (("start", start), ("stop", stop), ("floor", floor))
           if value is not None and value % multiple and not (name == "stop" and capped)}
    if off:
        raise ValueError(f"with multiple={multiple} every width is a multiple of it; got "
                         + ", ".join(f"{k}={v}" for k, v in off.items())
                         + f": use multiples of {multiple}.")
    return int(stop)


def check_lr_grid(lr_grid):
    """At least 3 distinct finite positive rates spanning at least 10x; sorted floats."""
    try:
        rates = sorted(float(lr) for lr in lr_grid if not isinstance(lr, (bool, str)))
        complete = len(rates) == len(lr_grid)
    except TypeError:
        rates, complete = None, False
    if (not complete or len(rates) < 3 or not all(math.isfinite(r) and r > 0 for r in rates)
            or len(set(rates)) < 3):
        raise ValueError(
            f"lr_grid must hold at least 3 distinct finite positive learning rates spanning "
            f"at least 10x (the protocol's grid); got {lr_grid!r}. E.g. lr_grid=[0.003, "
            "0.01, 0.03]."
        )
    if rates[-1] / rates[0] < 10 * (1 - 1e-9):
        raise ValueError(
            f"lr_grid must span at least 10x (largest / smallest); got {rates} "
            f"({rates[-1] / rates[0]:.3g}x). Widen it, e.g. [{rates[0]:g}, "
            f"{math.sqrt(10) * rates[0]:.3g}, {10 * rates[0]:g}]."
        )
    return rates


def check_seeds(seeds):
    """A non-empty sequence of distinct ints; a list of ints."""
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise ValueError(f"seeds must be a sequence of ints, e.g. seeds=(0, 1, 2) (or "
                         f"seeds=range(3)); got {seeds!r}.")
    seeds = list(seeds)
    bad = [s for s in seeds if not _is_int(s)]
    if bad or not seeds or len(set(seeds)) < len(seeds):
        why = (f"{bad[0]!r} is not an int" if bad else "it is empty" if not seeds
               else "a seed repeats")
        raise ValueError(f"seeds must hold distinct ints, e.g. seeds=(0, 1, 2); got {seeds!r} "
                         f"({why}).")
    return [int(s) for s in seeds]


def check_error_score(error_score):
    """'raise' or a number, as in scikit-learn's searches."""
    if isinstance(error_score, str) and error_score == "raise":
        return
    if _is_real(error_score):
        return
    raise ValueError(
        f"error_score must be 'raise' or a number (e.g. np.nan, the default); got "
        f"{error_score!r}. It is the score of a fit that fails."
    )


def check_estimator(estimator, param, *, lr_param, steps_param, seed_param):
    """The estimator's parameters, once the four names are checked against them.

    Returns
    -------
    params : dict
        ``estimator.get_params()``.
    seed_param : str or None
        ``seed_param``, or None when the estimator lacks it (each fit then
        seeds torch).
    """
    if isinstance(estimator, type):
        raise TypeError(
            f"estimator must be an estimator instance, not the class {estimator.__name__}: "
            f"pass {estimator.__name__}() (with its parameters, e.g. max_epochs=...); the "
            "search clones it for every fit.")
    if not all(callable(getattr(estimator, name, None))
               for name in ("get_params", "set_params", "fit")):
        raise TypeError(
            f"estimator must be a scikit-learn estimator (with get_params, set_params and fit), "
            f"e.g. SparseTokenTransformer() or a skorch net; got {type(estimator).__name__}."
        )
    names = {"param": param, "lr_param": lr_param, "steps_param": steps_param}
    for name, value in (*names.items(), ("seed_param", seed_param)):
        if not isinstance(value, str) and not (name == "seed_param" and value is None):
            raise ValueError(f"{name} must be a parameter name (a str); got {value!r}.")
    labels = {}
    for name, value in (*names.items(), ("seed_param", seed_param)):
        if value is not None:
            labels.setdefault(value, []).append(f"{name}={value!r}")
    clash = [" and ".join(group) for group in labels.values() if len(group) > 1]
    if clash:
        raise ValueError(
            "param, lr_param, steps_param and seed_param must be four different parameters "
            f"(the width, the rate, the steps and the seed); {'; '.join(clash)} name the "
            "same one, which the search would overwrite."
        )
    params = estimator.get_params()
    kind = type(estimator).__name__
    if param not in params and "__" in param:
        raise ValueError(
            f"{kind} has no parameter {param!r}: a skorch net lists a module's argument only "
            f"when it is set in its constructor. Set it there, e.g. {kind}(..., "
            f"{param}=4), then pass param={param!r}."
        )
    for value in names.values():
        if value not in params:
            raise ValueError(
                f"{kind} has no parameter {value!r}; pass the name of its width (param), rate "
                "(lr_param) and steps (steps_param) parameters."
            )
    width = params[param]
    if width is not None and not _is_int(width):
        raise ValueError(
            f"param={param!r} must be an int parameter of {kind} (a width); it is "
            f"{width!r}. Pass the name of its width, e.g. 'pe_dim' or 'hidden_width'."
        )
    steps = params[steps_param]
    if not _is_int(steps) or steps < 1:
        raise ValueError(f"{steps_param}={steps!r} must be a positive int to be doubled.")
    return params, (seed_param if seed_param in params else None)


def check_n_jobs(n_jobs):
    """None or a non-zero int, as joblib takes it."""
    if n_jobs is None or (_is_int(n_jobs) and n_jobs != 0):
        return
    raise ValueError(f"n_jobs must be None or a non-zero int (as in joblib: 1 fits one at a "
                     f"time, 2 two at once, -1 on every core); got {n_jobs!r}.")


def check_device(params, kind):
    """The estimator's ``device`` (where it has one) is one this machine has: refused
    now rather than by every fit of the search."""
    if "device" not in params:
        return
    from ._device import resolve_device

    try:
        resolve_device(params["device"])
    except ValueError as exc:
        raise ValueError(f"{kind}'s {exc} Set it with estimator.set_params(device=...) "
                         "before the search; no fit ran.") from None


def check_width_multiple(params, param, multiple, kind, *, start, stop, floor):
    """An encoder's ``d_model`` must split into heads (of even size with rotary positions,
    and be even with the sinusoidal encoding): :func:`encoder_width_multiple`."""
    if param != "d_model" or not _is_int(params.get("n_heads")):
        return
    encoding = params.get("positional_encoding")
    needed = encoder_width_multiple(params["n_heads"], encoding)
    only_start = stop == start and floor in (None, start)  # a single width
    if (start if only_start else multiple) % needed:
        why = {"rope": f"rotary positions rotate pairs of channels in each of its n_heads="
                       f"{params['n_heads']} heads",
               "sinusoidal": f"each of its n_heads={params['n_heads']} heads gets d_model / "
                             f"n_heads channels, and the sinusoidal encoding pairs a sin and "
                             f"a cos per frequency"}.get(
            encoding, f"each of its n_heads={params['n_heads']} heads gets d_model / n_heads "
                      f"channels")
        raise ValueError(
            f"{kind}'s d_model must be a multiple of {needed} ({why}); the search would try "
            f"other widths, whose fits fail. Pass multiple={needed}, with start, stop and "
            f"floor multiples of {needed}."
        )


def check_search_again(search_again):
    if not isinstance(search_again, bool):
        raise ValueError(f"search_again must be True or False (search again with twice the "
                         f"steps where a wider width fails); got {search_again!r}.")
