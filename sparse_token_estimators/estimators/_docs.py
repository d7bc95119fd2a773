"""The numpydoc paragraphs every estimator's Parameters section shares, written once.

An estimator's docstring names a shared paragraph by a line holding only
``{name}`` at the indentation of its parameter lines; :func:`compose` puts the
paragraph there (as skorch's ``get_neural_net_reg_doc`` composes its
regressor's docstring). Lines after the marker, indented one level more,
continue the paragraph with what is the estimator's own. ``infer``'s
Parameters and Returns, which two of its overrides document, are composed
the same way.
"""

import re
import textwrap

PARAMETERS = {
    "layout": '''\
layout : {"indicator", "query"}, default="indicator"
    The layout of ``X`` (``make_sparse_selection(..., layout=...)``):
    "indicator", the subset as a 0/1 last channel of the token rows;
    "query", the subset as ``n_selected`` rows [0_d, i_j] of 1-based
    positions after the tokens, so that content alone cannot select.
    Structural: recorded in saved weights, which load only into an
    estimator of the same layout.''',
    "n_selected": '''\
n_selected : int or None, default=None
    Query layout only: the number q of query rows, which says where the
    tokens end (T = rows - q). None: learned at a fresh ``fit`` from the
    first sample (its rows with a nonzero last channel; every sample is
    then checked against it), as ``token_dim`` is; given, ``initialize()``
    builds the module without data. Unused in the indicator layout.''',
    "infer": '''\
Parameters
----------
x : Tensor of shape (batch, seq_len, token_dim + 1)
**fit_params : dict
    Further keywords of the module's forward.

Returns
-------
y_pred : Tensor of shape (batch, token_dim)''',
    "device": '''\
device : str, default="auto"
    "auto" (a GPU when present), "cpu", "cuda" or "cuda:N".''',
    "lr_schedule": '''\
lr_schedule : {"constant", "cosine"}, default="constant"
    Adam's rate throughout a fit: ``lr`` at every step, or ``lr`` decayed to
    0 by a cosine over the fit's steps, stepped per batch
    (:class:`~sparse_token_estimators.callbacks.CosineSchedule`).''',
}

_MARKER = re.compile(r"^( *)\{(\w+)\}$", re.MULTILINE)


def compose(obj):
    """Class (or method) decorator: ``obj.__doc__`` with every ``{name}`` line replaced by
    its paragraph."""
    obj.__doc__ = _MARKER.sub(
        lambda match: textwrap.indent(PARAMETERS[match[2]], match[1]), obj.__doc__)
    return obj
