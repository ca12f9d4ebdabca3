"""The package's layout: the gate's modules import one another without a
cycle (each can be read, and loaded, after the ones it uses), and every
package's ``__init__.py`` only re-exports."""

import ast
import pathlib
import re

import pytest

import flux_epilog_gate

PACKAGE = pathlib.Path(flux_epilog_gate.__file__).parent


def _imports(path):
    """The sibling modules ``path`` imports (``from .x import``, ``from .
    import x``; the package itself as ``__init__``), wherever it does."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                names.add(node.module.split(".")[0])
            else:
                names.update(alias.name for alias in node.names)
                names.add("__init__")
    return names


def _cycle(graph):
    """A cycle of ``graph`` (module -> modules it imports), or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("package", ["gate", "plugin", "jobtap", "client", "dws"])
def test_no_import_cycle_among_a_packages_modules(package):
    directory = PACKAGE / package
    modules = {path.stem: path for path in directory.glob("*.py")}
    graph = {
        name: {m for m in _imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }
    # The package's __init__ re-exports: what a module takes from it is
    # what the modules it re-exports from give.
    init = graph.pop("__init__", set())
    for name, uses in graph.items():
        if "__init__" in uses:
            uses.discard("__init__")
            uses.update(init - {name})
    assert _cycle(graph) is None


@pytest.mark.parametrize(
    "init", sorted(PACKAGE.rglob("__init__.py")), ids=lambda p: str(p.parent.name)
)
def test_a_packages_init_only_reexports(init):
    tree = ast.parse(init.read_text())
    kinds = {
        type(node).__name__
        for node in tree.body
        if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr))
        and not (
            isinstance(node, ast.Assign)
            and all(
                isinstance(t, ast.Name) and t.id in ("__all__", "__version__")
                for t in node.targets
            )
        )
    }
    assert kinds <= set(), f"{init}: {kinds}"


REPO = pathlib.Path(__file__).resolve().parents[1]
DESIGN = REPO / "doc" / "design.md"
SOURCES = REPO / "flux_epilog_gate"


@pytest.mark.parametrize(
    "module",
    sorted(
        path
        for path in [*SOURCES.rglob("*.py"), *SOURCES.rglob("*.c")]
        if path.name != "__init__.py" and not path.name.startswith("_")
    ),
    ids=lambda p: str(p.relative_to(SOURCES)),
)
def test_design_names_every_module(module):
    """doc/design.md's layout is where a newcomer looks for a module."""
    named = re.compile(r"[`/]" + re.escape(module.name) + "`")
    assert named.search(DESIGN.read_text()), f"{module} not in doc/design.md"
