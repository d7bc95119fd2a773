"""What the API reference lists: one section per public module, every public name.

``docs/conf.py`` writes ``docs/api.rst`` from ``SECTIONS`` before each build,
so a name added to a module (or to its ``__all__``) appears in the reference
without editing any page. A module's public names are its ``__all__`` when it
has one, else the classes and functions it defines whose names do not start
with ``_``, and the module-level data it documents with a ``#:`` comment.
A new public module needs a section here; ``tests/test_docs.py`` says which.
"""

import importlib
import inspect

#: (module, title, what it is for), in the order of the page
SECTIONS = [
    ("sparse_token_estimators", "Data, estimators and preprocessing",
     "The task's generator, the two estimators and the transformer that lets any "
     "scikit-learn regressor try the task; everything a user imports from the top "
     "level."),
    ("sparse_token_estimators.theory", "Theory",
     "Bounds, reference losses and diagnostics of the paper as functions. Losses are "
     "summed over the d coordinates of the output and averaged over samples."),
    ("sparse_token_estimators.callbacks", "Callbacks",
     "skorch callbacks that record the paper's diagnostics into ``history_``."),
    ("sparse_token_estimators.distributed", "Distributed searches",
     "Run scikit-learn searches on a Dask cluster (the ``distributed`` extra)."),
    ("sparse_token_estimators.reproduce", "Reproduction",
     "The experiments behind ``python -m sparse_token_estimators``, as functions "
     "that return plain rows."),
    ("sparse_token_estimators.report", "Reproduction report",
     "Verdicts on the claims, and the tables, results file and summary of a run."),
    ("sparse_token_estimators.plotting", "Reproduction figures",
     "The figures of a run (the ``plots`` extra: matplotlib)."),
    ("sparse_token_estimators.modules", "Torch modules",
     "The ``torch.nn.Module`` classes the estimators wrap; they know nothing of "
     "scikit-learn and can be trained with any PyTorch loop."),
    ("sparse_token_estimators.positional", "Positional encodings",
     "Where the transformer's position vectors p_i come from."),
]

_KINDS = [("Classes", "class"), ("Functions", "function"), ("Exceptions", "exception"),
          ("Data", "data")]


def _kind(obj):
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if inspect.isfunction(obj):
        return "function"
    return "data"


def _documented_data(module_name):
    """Module-level names with a ``#:`` doc comment."""
    from sphinx.pycode import ModuleAnalyzer  # only the docs build needs Sphinx

    return {name for (scope, name) in ModuleAnalyzer.for_module(module_name).find_attr_docs()
            if scope == ""}


def public_names(module_name, *, data=True):
    """The names the reference documents for ``module_name``, in source order.

    ``data=False`` leaves out the documented module-level data (and needs no
    Sphinx).
    """
    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        return list(module.__all__)
    documented_data = _documented_data(module_name) if data else set()
    names = []
    for name, obj in vars(module).items():
        if name.startswith("_"):
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if getattr(obj, "__module__", "").startswith(module_name):
                names.append(name)
        elif name in documented_data:
            names.append(name)
    return names


def api_page():
    """The reStructuredText of ``docs/api.rst``."""
    lines = [
        ".. This file is written by docs/conf.py from docs/api_reference.py: edit those.",
        "",
        "API reference",
        "=============",
        "",
        "Every public name of the package, by module. The estimators are skorch",
        "``NeuralNetRegressor`` subclasses: what they inherit from skorch (callbacks,",
        "``history_``, ``save_params`` ...) is documented by skorch.",
        "",
    ]
    for module_name, title, intro in SECTIONS:
        module = importlib.import_module(module_name)
        lines += [title, "-" * len(title), "", f".. module:: {module_name}", "",
                  f"``{module_name}``: {intro}", ""]
        by_kind = {}
        for name in public_names(module_name):
            by_kind.setdefault(_kind(getattr(module, name)), []).append(name)
        for heading, kind in _KINDS:
            if kind not in by_kind:
                continue
            lines += [f".. rubric:: {heading}", "", ".. autosummary::",
                      "   :toctree: generated/", "   :nosignatures:", ""]
            lines += [f"   {name}" for name in by_kind[kind]]
            lines.append("")
    return "\n".join(lines)
