"""No import cycle between the repository's own modules, read from their source (nothing is imported).

The graph: one node per module under ``airflow_provider_s3ch/``, ``bench/``, ``tests/`` and ``example_dags/``;
an edge for each import that can run: the module's top level, its class bodies, its ``if``/``try``/``with``/``for``
blocks, and the bodies of its functions (an import inside a function that goes back to its importer is a circle
too, only a later one). Not counted: imports under ``if TYPE_CHECKING:`` (never at run time) and under ``if
__name__ == "__main__":`` (the module then runs as ``__main__``, another module). ``import a.b.c`` and ``from a.b
import c`` point at the deepest of ``a.b.c``, ``a.b``, ``a`` that
is one of the repository's modules (the packages above it are imported first, but a package that is
still being initialised is already in ``sys.modules``: no cycle through it unless a name is taken from it,
and ``from a import name`` does point at ``a``). A folder without ``__init__.py`` (``example_dags/``, the test
DAG folders) is a ``sys.path`` root of its own, as Airflow's DAG folder is.

``python tests/unit/test_no_import_cycles.py [--import-time | --every-import] [PATH...]`` prints the cycles it
finds (default: the whole set, as the test counts; ``--import-time``: the imports that run when a module is
imported, not those inside functions; ``--every-import``: those under ``TYPE_CHECKING`` too).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("airflow_provider_s3ch", "bench", "tests", "example_dags")


def _module_name(path: Path) -> tuple[Path, str]:
    """(the sys.path root the file is imported from, its dotted name under that root)."""
    parts = [path.stem] if path.name != "__init__.py" else []
    folder = path.parent
    while (folder / "__init__.py").exists():
        parts.insert(0, folder.name)
        folder = folder.parent
    return folder, ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_main_guard(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _run_imports(body: Iterable[ast.stmt], *, in_functions: bool = True) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements among ``body`` that can run: when the module is imported, and (``in_functions``)
    when one of its functions is called; never those under ``TYPE_CHECKING`` or the ``__main__`` guard."""

    def inner(statements: Iterable[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
        return _run_imports(statements, in_functions=in_functions)

    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if in_functions:
                yield from inner(node.body)
        elif isinstance(node, ast.If):
            if not (_is_type_checking(node.test) or _is_main_guard(node.test)):
                yield from inner(node.body)
            yield from inner(node.orelse)
        elif isinstance(node, (ast.ClassDef, ast.With, ast.AsyncWith)):  # a class body runs at import
            yield from inner(node.body)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            yield from inner(node.body)
            yield from inner(node.orelse)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            yield from inner(node.body)  # type: ignore[attr-defined]
            for handler in node.handlers:  # type: ignore[attr-defined]
                yield from inner(handler.body)
            yield from inner(node.orelse)  # type: ignore[attr-defined]
            yield from inner(node.finalbody)  # type: ignore[attr-defined]
        elif type(node).__name__ == "Match":
            for case in node.cases:  # type: ignore[attr-defined]
                yield from inner(case.body)


def import_graph(files: Iterable[Path], *, in_functions: bool = True, every_import: bool = False
                 ) -> dict[str, set[str]]:
    """Module -> the repository's modules it imports (:func:`_run_imports`; ``in_functions=False``: at import
    time only; ``every_import``: anywhere in it, under ``TYPE_CHECKING`` too). A module is named by its dotted
    name, prefixed with its sys.path root where that is not the repository's root (``example_dags:example_x``)."""
    modules: dict[tuple[Path, str], Path] = {}
    for path in files:
        modules[_module_name(path)] = path

    def label(root: Path, name: str) -> str:
        return name if root == ROOT else f"{root.relative_to(ROOT)}:{name}"

    def resolve(root: Path, dotted: str) -> str | None:
        """The deepest of ``dotted`` and its parents that is a module, in the importer's root or the repo's."""
        parts = dotted.split(".")
        for where in dict.fromkeys((root, ROOT)):
            for n in range(len(parts), 0, -1):
                if (where, ".".join(parts[:n])) in modules:
                    return label(where, ".".join(parts[:n]))
        return None

    graph: dict[str, set[str]] = {}
    for (root, name), path in modules.items():
        me = label(root, name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        tree = ast.parse(path.read_text(), filename=str(path))
        statements = (
            [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
            if every_import
            else _run_imports(tree.body, in_functions=in_functions)
        )
        for node in statements:
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".") if package else []
                    anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
            for target in targets:
                found = resolve(root, target)
                if found is not None:
                    edges.add(found)
        graph[me] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, for the message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    return component


def _files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _report(graph: dict[str, set[str]]) -> str:
    return "\n".join(" -> ".join(one_cycle(graph, c)) + f"   (component: {', '.join(c)})" for c in cycles(graph))


def test_the_checker_finds_a_cycle_and_counts_what_can_run(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"], ["e"]]
    assert one_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    tree = ast.parse(
        "import x\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import skipped_tc\nelse:\n    import y\n"
        "if __name__ == '__main__':\n    import skipped_main\n"
        "def f():\n    import in_fn\n    if TYPE_CHECKING:\n        import skipped_tc_fn\n"
        "class C:\n    import z\n    def m(self):\n        import in_method\n"
        "try:\n    import w\nexcept ImportError:\n    import v\n"
    )

    def names(**kwargs: bool) -> set[str]:
        return {a.name for n in _run_imports(tree.body, **kwargs) if isinstance(n, ast.Import) for a in n.names}

    assert names() == {"x", "y", "z", "w", "v", "in_fn", "in_method"}
    assert names(in_functions=False) == {"x", "y", "z", "w", "v"}


def test_bench_has_no_import_cycle_not_even_through_imports_inside_functions() -> None:
    """bench/run.py imports the sections; they share bench/common.py and never import bench/run.py (the circle
    they once made went through imports inside functions)."""
    graph = import_graph(_files("bench"))
    assert "bench.run" in graph and "bench.common" in graph
    assert [m for m, edges in graph.items() if "bench.run" in edges] == []
    assert cycles(graph) == [], _report(graph)


def test_the_repository_has_no_import_cycle_counting_imports_inside_functions() -> None:
    graph = import_graph(_files(*PACKAGES))
    assert len(graph) > 50 and "airflow_provider_s3ch" in graph
    # the seam to Airflow sits below the provider's errors (they take Airflow's exceptions from it)
    assert "airflow_provider_s3ch.compat" in graph["airflow_provider_s3ch.errors"]
    assert "airflow_provider_s3ch.errors" not in graph["airflow_provider_s3ch.compat"]
    assert cycles(graph) == [], _report(graph)


if __name__ == "__main__":
    every, import_time = "--every-import" in sys.argv, "--import-time" in sys.argv
    paths = [a for a in sys.argv[1:] if not a.startswith("--")] or PACKAGES
    graph = import_graph(_files(*paths), in_functions=not import_time, every_import=every)
    mode = "every import" if every else "import time" if import_time else "imports that can run"
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} edges ({mode})")
    print(_report(graph) or "no import cycle")
