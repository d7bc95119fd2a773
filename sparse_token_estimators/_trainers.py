"""The name of how a group of fits trains, ``trainer``: its values and their one check.

Free of torch, so that the command line checks ``--trainer`` before it imports torch.
``fit_group`` (``_group``), ``critical_width`` and the reproduction's
configuration all check it here.
"""

__all__ = ["TRAINERS", "check_trainer"]

#: how ``fit_group`` trains (its ``trainer``; ``critical_width``'s and the reproduction's)
TRAINERS = ("exact", "fused")


def check_trainer(trainer):
    """``trainer``, checked: "exact" or "fused" (else a ``ValueError`` saying what each is).

    Examples
    --------
    >>> check_trainer("fused")
    'fused'
    """
    if not isinstance(trainer, str) or trainer not in TRAINERS:
        raise ValueError(
            f"trainer must be 'exact' (every fit alone, one after another: each its lone "
            f"fit, bit for bit; the default) or 'fused' (the fits of an estimator that "
            f"declares a fused_trainer, e.g. the paper's model, as one stacked model, equal "
            f"to lone fits to float rounding); got {trainer!r}.")
    return trainer
