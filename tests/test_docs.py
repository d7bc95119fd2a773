"""The documentation's promises that need no Sphinx to check.

The pages' code runs as shown, the API reference has a section for every
public module, every example has a size for the gallery, and the release
files agree with the package's version. ``make docs`` builds the site itself
(with warnings as errors).
"""

import ast
import doctest
import importlib
import inspect
import json
import pkgutil
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import sparse_token_estimators

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS))

from api_reference import SECTIONS, data_doc, public_names  # noqa: E402
from gallery_conf import EXAMPLE_ARGS  # noqa: E402

PAGES_WITH_CODE = ["data_layout.rst", "user_guide.rst", "critical_width.rst", "query_layout.rst"]


@pytest.mark.parametrize("page", PAGES_WITH_CODE)
def test_page_code_runs_as_shown(page):
    torch.set_num_threads(1)
    result = doctest.testfile(
        str(DOCS / page), module_relative=False, verbose=False, report=True,
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0, f"docs/{page}: {result.failed} example(s) failed (see above)"


def test_every_public_module_has_a_section_in_the_api_reference():
    documented = {module for module, _, _ in SECTIONS}
    top_level = set(sparse_token_estimators.__all__)
    missing = {}
    for info in pkgutil.walk_packages(sparse_token_estimators.__path__,
                                      "sparse_token_estimators."):
        private = any(part.startswith("_") for part in info.name.split(".")[1:])
        if private or info.name in documented:
            continue
        # a module whose public names are all exported at the top level is
        # documented there (datasets, estimators, preprocessing)
        names = set(public_names(info.name, data=False)) - top_level
        if names:
            missing[info.name] = sorted(names)
    assert not missing, (
        "public modules with names the API reference does not list: add a section "
        f"for each to SECTIONS in docs/api_reference.py: {missing}")


def test_api_reference_lists_the_top_level_api_and_names_that_exist():
    assert public_names("sparse_token_estimators") == sparse_token_estimators.__all__
    for module_name, _, _ in SECTIONS:
        module = importlib.import_module(module_name)
        names = public_names(module_name)
        assert names, f"{module_name} has no public name to document"
        for name in names:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                assert inspect.getdoc(obj), f"{module_name}.{name} has no docstring"
            else:  # data: its "#:" comment, wherever the package assigns it
                assert data_doc(module_name, name), (
                    f"{module_name}.{name} has no '#:' comment above its assignment")


def test_api_reference_lists_every_positional_encoding():
    from sparse_token_estimators.positional import ENCODINGS

    names = public_names("sparse_token_estimators.positional")
    assert "ENCODINGS" in names
    assert {cls.__name__ for cls in ENCODINGS.values()} <= set(names)


def test_every_example_has_a_gallery_size_and_a_title():
    examples = sorted((ROOT / "examples").glob("*.py"))
    assert {p.name for p in examples} == set(EXAMPLE_ARGS)
    for path in examples:
        docstring = ast.get_docstring(ast.parse(path.read_text()), clean=False)
        lines = docstring.strip("\n").splitlines()
        # sphinx-gallery's title: a first line, underlined with "=" at least as long
        assert re.fullmatch(r"=+", lines[1]) and len(lines[1]) >= len(lines[0]), path.name
        assert "# %%" in path.read_text(), f"{path.name} has no # %% cells"


def test_readme_has_the_getting_started_part_the_docs_include():
    readme = (ROOT / "README.md").read_text()
    begins = readme.index("<!-- docs: getting started begins -->")
    ends = readme.index("<!-- docs: getting started ends -->")
    assert begins < readme.index("```python", begins) < ends


def test_release_files_agree_with_the_version():
    version = sparse_token_estimators.__version__
    citation = (ROOT / "CITATION.cff").read_text()
    assert re.search(r"^cff-version: 1\.2\.0$", citation, re.M)
    assert re.search(rf"^version: {re.escape(version)}$", citation, re.M)
    for arxiv in ("2406.06893", "2306.02896"):
        assert f"10.48550/arXiv.{arxiv}" in citation
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    assert re.search(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.M)
    assert (ROOT / "LICENSE").read_text().startswith("BSD 3-Clause License")


def _rst_anchors(page):
    """The anchors a page's sections and ``.. _label:`` targets give on GitHub and Sphinx."""
    text = page.read_text()
    lines = text.splitlines()
    titles = [lines[i] for i in range(len(lines) - 1)
              if lines[i].strip() and re.fullmatch(r"([=\-~^*])\1{2,}", lines[i + 1])
              and len(lines[i + 1]) >= len(lines[i].rstrip())]
    labels = re.findall(r"^\.\. _([\w-]+):$", text, re.M)
    slugs = {re.sub(r"[^\w\- ]", "", t.strip().lower()).replace(" ", "-") for t in titles}
    return slugs | set(labels)


def test_every_readme_link_resolves_in_the_repository():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert links, "README.md has no links"
    broken = []
    for link in links:
        if re.match(r"https?://", link):
            continue  # the papers and skorch: outside the repository
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.exists():
            broken.append(f"{link}: no file {path}")
        elif anchor and (target.suffix != ".rst" or anchor not in _rst_anchors(target)):
            broken.append(f"{link}: {path} has no section or label {anchor!r}")
    assert not broken, "README.md links that do not resolve: " + "; ".join(broken)


def test_readme_stays_short_and_installs_from_a_clone():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 10_000, "README.md is over 10,000 characters"
    # not on PyPI: every pip install of the package is from the clone
    assert not re.search(r"pip install ['\"]?sparse-token-estimators", readme)
    assert "make run" in readme and "make test" in readme
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^run:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_make_run_runs_the_first_preset_and_points_to_the_complete_run():
    from sparse_token_estimators import reproduce
    from sparse_token_estimators.__main__ import RUNS, _next_runs, build_parser

    makefile = (ROOT / "Makefile").read_text()
    run = makefile.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert "-m sparse_token_estimators --scale first --out results" in run
    assert build_parser().parse_args([]).scale == "first"  # a bare command: make run's
    assert set(reproduce.FIRST.experiments) == {
        "width_separation", "length_generalisation", "alignment"}
    # the closing lines after `make run` name every other run, the paper scale first
    assert [name for name, _ in RUNS] == list(reproduce.SCALES)
    closing = "\n".join(_next_runs("first"))
    assert closing.index("--scale quick") < closing.index("--scale paper ") < \
        closing.index("--scale architectures-paper")


# -- what the pages say, checked against the code -----------------------------------

PAGES = sorted(DOCS.glob("*.rst")) + [ROOT / "README.md"]


def _python_blocks(page):
    """The ``.. code-block:: python`` blocks of an .rst page, dedented."""
    blocks, lines = [], page.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip() != ".. code-block:: python":
            continue
        body, j = [], i + 1
        while j < len(lines) and (not lines[j].strip() or lines[j].startswith("   ")):
            body.append(lines[j][3:])
            j += 1
        blocks.append("\n".join(body).strip("\n"))
    return blocks


def _undefined_names(source):
    """Names a script reads but neither imports, assigns nor gets from builtins."""
    import builtins

    tree = ast.parse(source)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return sorted({node.id for node in ast.walk(tree)
                   if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
                  - bound)


def test_no_page_speaks_of_two_estimators():
    # the package has four: the paper's two and the encoder and the RNN
    for page in PAGES:
        text = " ".join(page.read_text().split())
        for phrase in ("two scikit-learn estimators", "Both estimators are"):
            assert phrase not in text, f"{page.name} says {phrase!r}"
    guide = (DOCS / "user_guide.rst").read_text()
    for name in sparse_token_estimators.__all__:
        if name.startswith("SparseToken"):
            assert f":class:`{name}`" in guide.split("Searches and cross-validation")[0]


def test_the_user_guide_python_blocks_run_when_saved_as_scripts():
    blocks = _python_blocks(DOCS / "user_guide.rst")
    assert len(blocks) >= 3
    for block in blocks:
        assert not _undefined_names(block), (
            f"a python block of the user guide reads {_undefined_names(block)} without "
            f"defining them, so it fails when saved as a script:\n{block}")
        # Dask starts worker processes that import the script again
        if "dask_backend(" in block:
            assert 'if __name__ == "__main__":' in block, block


def test_the_changing_parameters_table_names_every_structural_parameter():
    from sparse_token_estimators.estimators import _rules as _params

    guide = (DOCS / "user_guide.rst").read_text()
    table = guide.split(".. _changing-a-fitted-estimator:")[1].split("Every value set")[0]
    rows = table.split("   * - ")
    for name in ("SparseTokenTransformer", "SparseTokenFCN", "SparseTokenEncoder",
                 "SparseTokenRNN", "SparseTokenSSM"):
        own = next(row for row in rows if f":class:`{name}`:" in row)
        own = own.split(f":class:`{name}`:", 1)[1].split(";")[0]
        params = getattr(sparse_token_estimators, name)().get_params(deep=False)
        for param in params:
            if "__" in param or not _params.is_structural(
                    param, getattr(sparse_token_estimators, name)):
                continue
            shared = ("token_dim", "module", "layout", "n_selected")  # every estimator's row
            assert f"``{param}``" in own or param in shared, (
                f"the table's row for {name} does not name its structural {param!r}")
    for param in ("token_dim", "module", "module__*", "layout", "n_selected", "device",
                  "compile", "n_pe_draws"):
        assert f"``{param}``" in table


def test_every_reproduction_command_on_the_pages_parses():
    from sparse_token_estimators.__main__ import build_parser

    parser = build_parser()
    found = 0
    for page in PAGES:
        for match in re.finditer(
                r"(?:python\s+-m\s+sparse_token_estimators|sparse-token-reproduce)"
                r"((?:\s+--?[\w-]+(?:\s+(?![#-])[^\s`'):;,]+)?)*)", page.read_text()):
            args = match.group(1).split()
            parser.parse_args(args)  # exits (SystemExit) on an option the CLI refuses
            assert "--quick" not in args, f"{page.name}: say --scale quick, as the README"
            found += 1
    assert found >= 5


def test_getting_started_does_not_point_to_itself():
    readme = (ROOT / "README.md").read_text()
    included = readme.split("<!-- docs: getting started begins -->")[1].split(
        "<!-- docs: getting started ends -->")[0]
    # the getting-started page includes this part: a pointer to that page is to itself
    text = " ".join(included.split()).lower()
    assert "getting-started page" not in text and "getting started" not in text


def test_the_first_run_figure_is_stacked_from_a_first_run(tmp_path):
    import first_run_figure

    matplotlib_image = pytest.importorskip("matplotlib.image")

    # legible where shown: no wider than the figures `make run` writes (1000 px)
    assert matplotlib_image.imread(DOCS / "images" / "first_run.png").shape[1] <= 1000
    run = tmp_path / "results"
    run.mkdir()
    with pytest.raises(SystemExit, match="no finished run"):
        first_run_figure.check_run(run)
    (run / "manifest.json").write_text(json.dumps({"complete": True}))
    (run / "results.json").write_text(json.dumps({"config": {"experiments": None}}))
    with pytest.raises(SystemExit, match="every experiment, not of --scale first"):
        first_run_figure.check_run(run)
    white = np.ones((40, 60, 3), dtype=np.float32)
    white[10:20, 5:50] = 0  # the ink: 10 x 45 pixels
    trimmed = first_run_figure.trimmed(white, margin=2)
    assert trimmed.shape == (14, 49, 3)
    both = first_run_figure.stacked([trimmed, trimmed[:, :30]])
    assert both.shape == (14 + first_run_figure.GAP + 14, 49, 3)


# -- where users look ---------------------------------------------------------------


@pytest.mark.parametrize("page", ["critical_width", "query_layout", "troubleshooting"])
def test_the_guides_are_in_the_contents_and_the_readme(page):
    index = (DOCS / "index.rst").read_text()
    toctree = index.split(".. toctree::")[1].split("\n- ")[0]
    assert re.search(rf"^   (.* <)?{page}>?$", toctree, re.M)
    assert f":doc:`{page}`" in index
    assert f"(docs/{page}.rst)" in (ROOT / "README.md").read_text()


def test_the_critical_width_page_shows_code_a_pandas_table_and_a_plot():
    page = (DOCS / "critical_width.rst").read_text()
    assert ">>> result = critical_width(" in page and "pd.DataFrame(result.table)" in page
    assert ".pivot_table(" in page and "ax.axhline(result.target" in page
    assert ">>> from sparse_token_estimators import (SparseTokenFCN, critical_width," in page


def test_no_page_or_docstring_points_outside_the_repository():
    texts = {path: path.read_text() for path in [*PAGES, ROOT / "CHANGELOG.md",
                                                 *(ROOT / "examples").glob("*.py"),
                                                 *(ROOT / "sparse_token_estimators").rglob("*.py")]}
    for path, text in texts.items():
        for pattern in (r"TASK\.md", r"STYLE\.md", r"REFERENCES\.md", r"\bissue \d+",
                        r"the issue's", r"/work/"):
            assert not re.search(pattern, text), f"{path.name} has {pattern!r}"


def test_help_and_getting_started_state_each_scales_time():
    from sparse_token_estimators.__main__ import build_parser
    from sparse_token_estimators.reproduce import SCALES
    from sparse_token_estimators.reproduce._config import RUN_TIMES

    help_text = " ".join(build_parser().format_help().split())
    table = " ".join((DOCS / "runs_table.txt").read_text().split())
    readme = " ".join((ROOT / "README.md").read_text().split())
    for page in ("getting_started.rst", "reproduction.rst"):
        assert ".. include:: runs_table.txt" in (DOCS / page).read_text()
    for scale, time in RUN_TIMES.items():
        assert f"'{scale}'" in help_text and time in help_text
        assert f"``--scale {scale}``" in table and time in table
        assert f"| `{scale}` |" in readme and time in readme
    assert "on 2 CPU cores" in help_text and "2 CPU cores" in table
    assert set(RUN_TIMES) == set(SCALES)


def test_the_critical_width_example_marks_the_target_and_integer_widths(monkeypatch):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import runpy

    import matplotlib.pyplot as plt

    torch.set_num_threads(1)
    monkeypatch.setattr(sys, "argv", ["critical_width.py", "400"])
    namespace = runpy.run_path(str(ROOT / "examples" / "critical_width.py"))
    result, ax = namespace["result"], namespace["ax"]
    labels = [tick.get_text() for tick in ax.get_xticklabels()]
    assert labels == [str(w) for w in result.scores]  # integers, not 4x10^0
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert f"target R^2 {result.target}" in legend
    if result.width is not None:
        assert f"critical pe_dim {result.width} ({result.status})" in legend
    plt.close("all")
