"""Size of the estimator layer: lines, skorch methods overridden, private names touched.

Counts, for the package under ``--root`` (default: this checkout), the files of
the estimator layer (the ``sparse_token_estimators/estimators/`` package when
there is one, and the modules beside it that the estimators are made of):

- lines, total and of code (not blank, not a comment, not a docstring);
- the skorch methods the public estimators override (named): attributes of a
  skorch or scikit-learn class in an estimator's MRO that a class of this package
  redefines (the ``set_*_request`` methods scikit-learn generates aside);
- the private names of skorch and scikit-learn the layer touches (named): an
  attribute ``x._name`` or a string ``"_name"`` that names a private attribute
  of skorch's or scikit-learn's classes, and imports from their private modules
  (skorch's hook ``_default_callbacks`` aside, see ``HOOKS``).

Compare two commits by checking one out elsewhere, e.g.
``git worktree add /tmp/before ffa7587`` then
``python benchmarks/estimator_layer.py --root /tmp/before``. Writes JSON with
``--json PATH``. ``tests/test_estimator_layer.py`` asserts that no private name is
touched.
"""

import argparse
import ast
import io
import json
import subprocess
import sys
import tokenize
from pathlib import Path

#: skorch's private names that are its extension points, as its own subclasses use them
HOOKS = {"_default_callbacks": "the default callbacks (skorch's get_params reads this property "
                               "itself; its own NeuralNetClassifier overrides it)"}
#: the modules of the estimator layer, beside the package (those that exist are counted)
LAYER_FILES = ("_base.py", "_checks.py", "_params.py", "_fitted.py", "_persistence.py",
               "_files.py", "_device.py", "_batching.py", "_layout.py", "estimators.py",
               "_more_estimators.py", "_ssm_estimator.py", "callbacks.py", "checkpoints.py")


def package_files(root):
    """Every Python file of the package under ``root`` (what the private-name guard reads)."""
    return sorted((Path(root) / "sparse_token_estimators").rglob("*.py"))


def layer_files(root):
    """The estimator layer's files under ``root`` (a checkout of the repository)."""
    package = Path(root) / "sparse_token_estimators"
    files = [package / name for name in LAYER_FILES if (package / name).is_file()]
    if (package / "estimators").is_dir():
        files += sorted((package / "estimators").glob("*.py"))
    return files


def count_lines(path):
    """``(total, code)`` lines of one Python file."""
    source = Path(path).read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value,
                                                                            str):
            docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    code = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                              tokenize.DEDENT, tokenize.ENDMARKER):
            code.update(line for line in range(token.start[0], token.end[0] + 1)
                        if line not in docstrings)
    return len(source.splitlines()), len(code)


#: the most lines a file of the package, and a function (its decorators and docstring
#: included), may have
MAX_FILE_LINES, MAX_FUNCTION_LINES = 600, 120


def oversized(files, max_file=MAX_FILE_LINES, max_function=MAX_FUNCTION_LINES):
    """``{"file.py": lines}`` and ``{"file.py:function": lines}`` over the limits."""
    long_files, long_functions = {}, {}
    for path in files:
        source = Path(path).read_text()
        if len(source.splitlines()) > max_file:
            long_files[Path(path).name] = len(source.splitlines())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - first + 1 > max_function:
                    long_functions[f"{Path(path).name}:{node.name}"] = node.end_lineno - first + 1
    return long_files, long_functions


def _library_private_names():
    """Private attribute names of skorch's and scikit-learn's classes the layer could touch."""
    import sklearn.base
    import torch
    from skorch import NeuralNetRegressor
    from skorch.callbacks import Checkpoint, EpochScoring, LoadInitState, TrainEndCheckpoint

    names = set()
    for cls in (NeuralNetRegressor, sklearn.base.BaseEstimator, Checkpoint, LoadInitState,
                TrainEndCheckpoint, EpochScoring):
        for klass in cls.__mro__:
            if klass.__module__.split(".")[0] in ("skorch", "sklearn"):
                names.update(vars(klass))
    names.update(vars(NeuralNetRegressor(torch.nn.Linear)))  # set by __init__
    names.add("prefixes_")  # skorch's bookkeeping of components, swapped only in __dict__
    # torch's: a module's, an optimizer's, a tensor's, a generator's, a data loader's
    for obj in (torch.nn.Linear(1, 1), torch.optim.Adam(torch.nn.Linear(1, 1).parameters()),
                torch.zeros(1), torch.Generator(),
                torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(1)))):
        for klass in type(obj).__mro__:
            if klass.__module__.split(".")[0] == "torch":
                names.update(vars(klass))
        names.update(getattr(obj, "__dict__", {}))
    return {name for name in names if name not in HOOKS and name not in NAMEDTUPLE
            and ((name.startswith("_") and not name.endswith("__")) or name == "prefixes_")}


#: the public methods of a namedtuple (its fields' names start with "_" to stay apart)
NAMEDTUPLE = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}
#: the libraries whose private names the package must not touch
LIBRARIES = ("skorch", "sklearn", "torch")


def _defined(tree):
    """The names a file defines: functions, classes, assigned names and attributes."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _modules(tree):
    """The names a file binds to modules it imports (``from . import _state``)."""
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}


def foreign_private_attributes(files):
    """``{name: [file:line, ...]}``: an object's private attribute ``x._name`` read in a
    file that does not define ``_name`` (``self``/``cls``, a module's own functions and a
    namedtuple's methods aside); and private keyword names passed to a call."""
    found = {}
    for path in files:
        tree = ast.parse(Path(path).read_text())
        defined, modules = _defined(tree), _modules(tree)
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.endswith("__") and node.attr not in NAMEDTUPLE \
                    and node.attr not in defined:
                base = node.value
                if not (isinstance(base, ast.Name) and (base.id in ("self", "cls")
                                                         or base.id in modules)):
                    name = node.attr
            elif isinstance(node, ast.keyword) and node.arg and node.arg.startswith("_"):
                name = node.arg
            if name is not None:
                found.setdefault(name, []).append(f"{Path(path).name}:{node.lineno}")
    return found


def private_names(files):
    """``{name: [file:line, ...]}`` of skorch's, scikit-learn's and torch's private names
    touched: attributes, strings naming them, private modules imported."""
    library = _library_private_names()
    found = {}
    for path in files:
        tree = ast.parse(Path(path).read_text())
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute) and node.attr in library \
                    and node.attr != "prefixes_":
                name = node.attr
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value in library:
                name = node.value
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in LIBRARIES and node.attr.startswith("_") \
                    and not node.attr.endswith("__"):
                name = f"{node.value.id}.{node.attr}"
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                    LIBRARIES):
                if any(part.startswith("_") for part in node.module.split(".")):
                    name = node.module
                elif any(alias.name.startswith("_") for alias in node.names):
                    name = node.module + "." + next(alias.name for alias in node.names
                                                    if alias.name.startswith("_"))
            if name is not None:
                found.setdefault(name, []).append(f"{Path(path).name}:{node.lineno}")
    return found


def overridden_methods(root):
    """The skorch methods the public estimators override, by a fresh interpreter on ``root``."""
    script = (
        "import sys, json, inspect; sys.path.insert(0, sys.argv[1]);"
        "import sparse_token_estimators as s;"
        "names = set(); SKIP = {'__init__', '__doc__', '__module__', '__dict__',"
        " '__weakref__', '__annotations__'};"
        "ests = [s.SparseTokenTransformer, s.SparseTokenFCN, s.SparseTokenEncoder,"
        " s.SparseTokenRNN];"
        "[names.update(n for k in e.__mro__ if k.__module__.startswith('sparse_token')"
        " for n in vars(k) if n not in SKIP and (not n.endswith('_request')"
        " or inspect.isfunction(vars(k)[n]))"
        " and any(n in vars(b) for b in e.__mro__"
        " if b.__module__.split('.')[0] in ('skorch', 'sklearn'))) for e in ests];"
        "print(json.dumps(sorted(names)))"
    )
    out = subprocess.run([sys.executable, "-c", script, str(root)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def measure(root):
    """Every figure of the module docstring, as a dict."""
    files = layer_files(root)
    lines = {str(path.relative_to(root)): count_lines(path) for path in files}
    overridden = overridden_methods(root)
    private = private_names(files)
    return {
        "files": len(files),
        "lines_total": sum(total for total, _ in lines.values()),
        "lines_code": sum(code for _, code in lines.values()),
        "per_file": {name: {"total": total, "code": code}
                     for name, (total, code) in lines.items()},
        "overridden": overridden,
        "private_names": private,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                   help="a checkout of the repository (default: this one)")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args(argv)
    result = measure(args.root.resolve())
    print(f"{'file':<52} {'lines':>6} {'code':>6}")
    for name, counts in result["per_file"].items():
        print(f"{name:<52} {counts['total']:>6} {counts['code']:>6}")
    print(f"{'total (' + str(result['files']) + ' files)':<52} {result['lines_total']:>6} "
          f"{result['lines_code']:>6}")
    print(f"skorch methods overridden ({len(result['overridden'])}): "
          + ", ".join(result["overridden"]))
    private = result["private_names"]
    print(f"private names of skorch / scikit-learn touched ({len(private)}): "
          + (", ".join(f"{name} ({len(where)}x)" for name, where in sorted(private.items()))
             or "none"))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
