"""The package's modules import one another without a cycle.

Every ``import`` and ``from ... import`` of every module of the package, at
any depth (inside functions too), relative or absolute, read from the source
with ``ast``: a cycle means that no module of it can be understood, changed or
tested without the others.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = "sparse_token_estimators"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE


def module_name(path):
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules():
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def imports(name, path, known):
    """The package's modules that module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module
            # ``from . import _x`` imports the module _x; ``from ._x import f``, _x
            targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known
                       else origin for alias in node.names]
        else:
            continue
        out |= {t for t in targets if t in known and t != name}
    return out


def find_cycle(graph):
    """One cycle of ``graph`` (``{node: set of nodes}``) as a list of nodes, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def graph():
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_relative_and_function_level_imports_are_read():
    edges = graph()
    # a module-level relative import, and one inside a function
    assert f"{PACKAGE}.reproduce._config" in edges[f"{PACKAGE}.reproduce"]
    assert f"{PACKAGE}.reproduce._records" in edges[f"{PACKAGE}.__main__"]
    assert f"{PACKAGE}._device" in edges[f"{PACKAGE}.__main__"]  # imported in a function


@pytest.mark.parametrize("graph_, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": set()}, None),
])
def test_the_check_finds_cycles(graph_, cycle):
    assert find_cycle(graph_) == cycle


def test_experiments_import_no_other_experiment():
    from sparse_token_estimators.reproduce._registry import EXPERIMENTS

    names = {f"{PACKAGE}.reproduce._{e.name}" for e in EXPERIMENTS}
    edges = graph()
    for name in names:
        assert not edges[name] & names, f"{name} imports {edges[name] & names}"
