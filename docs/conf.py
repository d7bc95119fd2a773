"""Sphinx configuration of the sparse_token_estimators documentation.

``make docs`` builds it into ``docs/_build/html`` with warnings as errors. The
build is offline and repeatable: the gallery runs every example in
``examples/`` at the small sizes of ``gallery_conf.EXAMPLE_ARGS``, seeded, on
one torch thread (the same numbers from build to build; only the timings
vary), and fails if an example fails or prints a warning. Links to
other projects' documentation (intersphinx) need the network, so they are off
unless ``DOCS_INTERSPHINX=1``.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

from sphinx.util import logging

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS))  # api_reference, gallery_conf

from api_reference import api_page, data_doc  # noqa: E402

import sparse_token_estimators  # noqa: E402

project = "sparse_token_estimators"
author = "the sparse_token_estimators developers"
copyright = f"2026, {author}"
version = release = sparse_token_estimators.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "myst_parser",
]
if os.environ.get("DOCS_INTERSPHINX") == "1":
    extensions.append("sphinx.ext.intersphinx")
    intersphinx_mapping = {
        "python": ("https://docs.python.org/3", None),
        "numpy": ("https://numpy.org/doc/stable", None),
        "sklearn": ("https://scikit-learn.org/stable", None),
        "skorch": ("https://skorch.readthedocs.io/en/stable", None),
        "torch": ("https://docs.pytorch.org/docs/stable", None),
    }

templates_path = ["_templates"]
exclude_patterns = ["_build", "**.ipynb_checkpoints", "auto_examples/*.ipynb",
                    "auto_examples/*.py", "auto_examples/*.zip"]
source_suffix = {".rst": "restructuredtext"}  # Markdown only where included explicitly
root_doc = "index"

# -- API reference -----------------------------------------------------------------

autosummary_generate = True
autodoc_typehints = "none"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True  # module=SparseTokenAttention, not its repr
# Methods the estimators override only to plumb skorch (infer, get_dataset,
# ...) have no docstring of their own: without this they would show skorch's.
autodoc_inherit_docstrings = False
toc_object_entries_show_parents = "hide"
python_maximum_signature_line_length = 88  # one parameter per line beyond that
numpydoc_show_class_members = False  # the class template lists the members
numpydoc_attributes_as_param_list = True


def _write_if_changed(path, text):
    # Unchanged sources keep their time stamps, so a rebuild rereads nothing.
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


_write_if_changed(DOCS / "api.rst", api_page() + "\n")

# The command line's help, as the installed command prints it, at a fixed width.
(DOCS / "generated").mkdir(exist_ok=True)
_cli_help = subprocess.run(
    [sys.executable, "-m", "sparse_token_estimators", "--help"], check=True,
    capture_output=True, text=True, env={**os.environ, "COLUMNS": "88"},
).stdout
_write_if_changed(DOCS / "generated" / "cli_help.txt", _cli_help)

# -- Gallery -------------------------------------------------------------------------

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"\.py$",  # run every example, not only plot_*.py
    "reset_argv": "gallery_conf.example_argv",
    "within_subsection_order": "gallery_conf.example_order",
    "reset_modules": ("matplotlib", "gallery_conf.one_torch_thread"),
    "doc_module": ("sparse_token_estimators",),
    "backreferences_dir": "generated/backreferences",
    "remove_config_comments": True,
    "min_reported_time": 1,
    "show_memory": False,
    "show_signature": False,
}

# -- HTML ------------------------------------------------------------------------------

html_theme = "pydata_sphinx_theme"
html_title = f"sparse_token_estimators {release}"
html_theme_options = {
    "navbar_align": "left",
    "navbar_persistent": ["search-button"],
    "header_links_before_dropdown": 6,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
# The left sidebar lists a section's pages: only the API reference has them.
# (The examples' code is up to 100 columns wide: their pages want the room.)
html_sidebars = {
    "auto_examples/*": [],
    **{page: [] for page in ("index", "getting_started", "data_layout", "user_guide",
                             "reproduction", "performance", "citing", "changelog")},
}
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_show_sourcelink = False

# -- Checks --------------------------------------------------------------------------

# A warning as Python prints it ("path/to/file.py:12: UserWarning: message"),
# or as the logging module does ("... - WARNING - message", "WARNING:name:...").
_PRINTED_WARNING = re.compile(
    r"^\s*(\S+:\d+: \w*Warning: .*|.* - WARNING - .*|WARNING:.*)$", re.M)


def _examples_print_no_warning(app):
    """Fail the build (a Sphinx warning, an error under -W) for an example whose
    output holds a Python warning: the gallery promises clean output."""
    logger = logging.getLogger(__name__)
    for page in sorted((DOCS / "auto_examples").glob("*.rst")):
        for match in _PRINTED_WARNING.finditer(page.read_text()):
            logger.warning("examples/%s printed a warning: %s",
                           page.with_suffix(".py").name, match.group(0).strip(),
                           location=f"auto_examples/{page.stem}")


# Methods scikit-learn adds to every estimator for metadata routing and
# pandas output: documented by scikit-learn, and their docstrings point into
# scikit-learn's own pages.
_SKLEARN_PLUMBING = re.compile(r"^(set_\w+_request|get_metadata_routing|set_output)$")


def _skip_sklearn_plumbing(app, what, name, obj, skip, options):
    return True if _SKLEARN_PLUMBING.match(name) else None


def _describe_data(app, what, name, obj, options, lines):
    """A data page shows the name's ``#:`` comment, not its value's class docstring
    (``QUICK`` is a ``ReproductionConfig``, whose docstring lists parameters)."""
    if what == "data":
        module_name, _, attr = name.rpartition(".")
        text = data_doc(module_name, attr)
        lines[:] = [text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")]


def setup(app):
    app.connect("autodoc-skip-member", _skip_sklearn_plumbing)
    app.connect("autodoc-process-docstring", _describe_data)
    # after sphinx-gallery (priority 500) has run the examples
    app.connect("builder-inited", _examples_print_no_warning, priority=900)
