"""The first-party import graph, read with ``ast`` (no module is imported): every ``import``
and ``from ... import`` at any depth (a function's lazy import included), relative ones
resolved.

    .venv/bin/python tests/import_graph.py            # cycles and private names, one a line

A module is a dotted name (``spark_jobs.decode.planning``; a package is its ``__init__``);
the plugin package ``plugins/kafkalog_quality`` is ``kafkalog_quality`` and a DAG file
``dags/<name>.py`` is ``dags.<name>``, as Airflow puts them on ``sys.path``. ``from p import
n`` depends on ``p.n`` where that is a module, else on ``p``.

A *private* name starts with one underscore (dunder names are not private). Importing a
private module is fine within the package that holds it (``spark_jobs.warehouse`` importing
``spark_jobs.warehouse._pyiceberg``), a private name of another module never
(``from .checks import _sql``), and neither is ``module._name`` on an imported first-party
module.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: where the product's first-party code lives: (folder, dotted prefix of its modules)
ROOTS = (
    (REPO / "kafkalog", "kafkalog"),
    (REPO / "spark_jobs", "spark_jobs"),
    (REPO / "kafkalog_pipeline", "kafkalog_pipeline"),
    (REPO / "expectations", "expectations"),
    (REPO / "demo", "demo"),
    (REPO / "plugins" / "kafkalog_quality", "kafkalog_quality"),
    (REPO / "plugins", ""),  # kafkalog_quality_plugin.py
    (REPO / "dags", "dags"),
)


@dataclass(frozen=True)
class Edge:
    source: str  # the importing module
    target: str  # the module it depends on
    name: str | None  # the name imported from it (None: the module itself)
    line: int
    lazy: bool  # inside a function or class body


def modules() -> dict[str, Path]:
    """Every first-party module, dotted name -> file."""
    out: dict[str, Path] = {}
    for folder, prefix in ROOTS:
        if not folder.is_dir():
            continue
        files = folder.glob("*.py") if prefix in ("", "dags") else folder.rglob("*.py")
        for path in sorted(files):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join(([prefix] if prefix else []) + parts)
            if name:
                out.setdefault(name, path)
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(module: str, path: Path, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".") if _is_package(path) else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def edges(known: dict[str, Path] | None = None) -> list[Edge]:
    """Every first-party import edge."""
    known = known or modules()
    out = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        for node, lazy in _imports(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _first_party(alias.name, known)
                    if target:
                        out.append(Edge(module, target, None, node.lineno, lazy))
            else:
                base = _resolve(module, path, node.level, node.module)
                for alias in node.names:
                    sub = f"{base}.{alias.name}" if base else alias.name
                    if sub in known or _compiled(sub, known):
                        out.append(Edge(module, sub, None, node.lineno, lazy))
                    elif _first_party(base, known) == base:
                        out.append(Edge(module, base, alias.name, node.lineno, lazy))
    return out


def _compiled(name: str, known: dict[str, Path]) -> bool:
    """Whether ``name`` is a compiled module of a first-party package (a ``.pyx`` beside
    the package's files: ``kafkalog._speedups``)."""
    package, _, leaf = name.rpartition(".")
    path = known.get(package)
    return path is not None and _is_package(path) and (path.parent / f"{leaf}.pyx").exists()


def _imports(tree):
    def walk(node, lazy):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, lazy
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                ast.ClassDef, ast.Lambda))
            yield from walk(child, inner)
    yield from walk(tree, False)


def _first_party(name: str, known: dict[str, Path]) -> str | None:
    """The longest first-party module ``name`` is or is inside of, else None."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in known:
            return candidate
    return None


def cycles(all_edges: list[Edge]) -> list[list[str]]:
    """The import cycles: strongly connected sets of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for e in all_edges:
        if e.source != e.target:
            graph.setdefault(e.source, set()).add(e.target)
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _package(module: str, path: Path) -> str:
    return module if _is_package(path) else module.rpartition(".")[0]


def private_imports(known: dict[str, Path] | None = None) -> list[str]:
    """Private first-party names used across modules, ``"source:line: what"`` each."""
    known = known or modules()
    out = []
    for e in edges(known):
        if e.name is not None and _private(e.name):
            out.append(f"{e.source}:{e.line}: imports {e.name} from {e.target}")
            continue
        private_parts = [p for p in e.target.split(".") if _private(p)]
        if e.name is None and private_parts:
            holder = e.target.rpartition(".")[0]
            inside = e.source == holder or e.source.startswith(holder + ".")
            if not inside:
                out.append(f"{e.source}:{e.line}: imports the private module {e.target}")
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        bound = _module_names(module, path, tree, known)
        package = _package(module, path)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)
                    and isinstance(node.value, ast.Name) and node.value.id in bound):
                continue
            target = bound[node.value.id]
            sub = f"{target}.{node.attr}"
            if target == module or (sub in known and sub.startswith(package + ".")):
                continue  # its own name, or a private module of its own package
            out.append(f"{module}:{node.lineno}: uses {node.value.id}.{node.attr} of {target}")
    return sorted(set(out))


def _module_names(module: str, path: Path, tree, known) -> dict[str, str]:
    """Local names bound to first-party modules by the file's imports."""
    out = {}
    for node, _ in _imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    out[alias.asname or alias.name.split(".")[0]] = alias.name \
                        if alias.asname else alias.name.split(".")[0]
        else:
            base = _resolve(module, path, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                if sub in known:
                    out[alias.asname or alias.name] = sub
    return {k: v for k, v in out.items() if v in known}


def main() -> int:
    known = modules()
    found = cycles(edges(known))
    for group in found:
        print("cycle: " + " <-> ".join(group))
    private = private_imports(known)
    for line in private:
        print("private: " + line)
    return 1 if found or private else 0


if __name__ == "__main__":
    sys.exit(main())
