"""What the API reference lists: one section per public module, every public name.

``docs/conf.py`` writes ``docs/api.rst`` from ``SECTIONS`` before each build,
so a name added to a module (or to its ``__all__``) appears in the reference
without editing any page. A module's public names are its ``__all__`` when it
has one, else the classes and functions it defines whose names do not start
with ``_``, and the module-level data it documents with a ``#:`` comment.
A new public module needs a section here; ``tests/test_docs.py`` says which.

Module-level data (``QUICK``, ``ENCODINGS``, ...) is described by the ``#:``
comment above its assignment, wherever in the package it is assigned (a
package's ``__all__`` may export it from a private module): ``data_doc``
finds it, and ``conf.py`` shows it on the name's page.
"""

import importlib
import inspect
import pkgutil
import re

#: (module, title, what it is for), in the order of the page
SECTIONS = [
    ("sparse_token_estimators", "Data, estimators and preprocessing",
     "The task's generator, the estimators (the paper's transformer and fully-connected "
     "net; a transformer encoder, recurrent nets and a selective state-space model beyond "
     "it) and the transformer that "
     "lets any "
     "scikit-learn regressor try the task; everything a user imports from the top "
     "level."),
    ("sparse_token_estimators.theory", "Theory",
     "Bounds, reference losses and diagnostics of the paper as functions. Losses are "
     "summed over the d coordinates of the output and averaged over samples."),
    ("sparse_token_estimators.callbacks", "Callbacks",
     "skorch callbacks that record the paper's diagnostics into ``history_``."),
    ("sparse_token_estimators.model_selection", "Searches on a stream, critical widths",
     "A parameter search whose candidates train on a ``SparseSelectionStream`` and are "
     "scored on a fixed validation set: the route where scikit-learn's searches, which "
     "split by index, cannot go; and the search of a model's critical width by the "
     "reproduction's protocol."),
    ("sparse_token_estimators.checkpoints", "Checkpoints",
     "skorch's checkpoint callbacks, made safe: an epoch's files are written "
     "atomically and loaded together (a manifest written last), and a failed save warns."),
    ("sparse_token_estimators.exceptions", "Warnings and errors",
     "The package's own warning and exception classes."),
    ("sparse_token_estimators.distributed", "Distributed searches",
     "Run scikit-learn searches on a Dask cluster (the ``distributed`` extra)."),
    ("sparse_token_estimators.reproduce", "Reproduction",
     "The reproduction behind ``python -m sparse_token_estimators``: the "
     "configuration and its presets, ``run`` (every experiment over several seeds), "
     "the verdicts on the claims, the results file, tables, figures and summary, and "
     "the progress display."),
    ("sparse_token_estimators.modules", "Torch modules",
     "The ``torch.nn.Module`` classes the estimators wrap; they know nothing of "
     "scikit-learn and can be trained with any PyTorch loop."),
    ("sparse_token_estimators.architectures", "More architectures (torch modules)",
     "A standard transformer encoder and recurrent nets, the modules of "
     ":class:`~sparse_token_estimators.SparseTokenEncoder` and "
     ":class:`~sparse_token_estimators.SparseTokenRNN`: beyond the paper's "
     "two models, for comparing architectures on the same task."),
    ("sparse_token_estimators.ssm", "Selective state-space model (torch modules)",
     "Mamba (a stack of ``mambapy`` blocks, the ``ssm`` extra), the module of "
     ":class:`~sparse_token_estimators.SparseTokenSSM`; the fused selective scan its "
     "blocks run (a loop in place with a hand-written backward, several times faster "
     "on a CPU than ``mambapy``'s parallel scan); and the selective scan written as its "
     "recurrence, which the tests check both scans against."),
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


#: descriptions of exported data that has no ``#:`` comment in its source yet
#: (the ``#:`` comment is the place: move each there and drop it from here)
#: Descriptions of data objects whose module has no ``#:`` comment for them,
#: by their full name (none at present: every documented constant has one).
EXTRA_DATA_DOCS = {}

_ASSIGNMENT = re.compile(r"^([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)")


def _doc_comments(module):
    """``{name: text}`` of the ``#:`` comments above module-level assignments."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return {}
    docs, comment = {}, []
    for line in source.splitlines():
        if line.startswith("#:"):
            comment.append(line[2:].strip())
            continue
        match = _ASSIGNMENT.match(line)
        if match and comment:
            docs[match.group(1)] = " ".join(comment)
        comment = []
    return docs


def data_doc(module_name, name):
    """The description of module-level data ``module_name.name``, or "".

    The ``#:`` comment above its assignment in ``module_name`` or, for a
    package, in the submodule that assigns the same object; else
    ``EXTRA_DATA_DOCS``.
    """
    module = importlib.import_module(module_name)
    text = _doc_comments(module).get(name)
    if text is None and hasattr(module, "__path__"):
        obj = getattr(module, name)
        for info in pkgutil.walk_packages(module.__path__, module_name + "."):
            submodule = importlib.import_module(info.name)
            if getattr(submodule, name, None) is obj:
                text = _doc_comments(submodule).get(name)
                if text is not None:
                    break
    return text or EXTRA_DATA_DOCS.get(f"{module_name}.{name}", "")


def _documented_data(module_name):
    """Module-level names with a ``#:`` doc comment."""
    return set(_doc_comments(importlib.import_module(module_name)))


def public_names(module_name, *, data=True):
    """The names the reference documents for ``module_name``, in source order.

    ``data=False`` leaves out the documented module-level data of a module
    without ``__all__``.
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
