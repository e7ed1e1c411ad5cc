"""The shape of the code, checked on every run (docs/architecture.md says why).

- no import cycle among first-party modules, lazy imports included, and no first-party
  private name used across modules (``tests/import_graph.py`` walks the imports with ``ast``);
- every pyiceberg private sits in ``spark_jobs/warehouse/_pyiceberg.py`` and every Airflow
  private in ``kafkalog_pipeline/_airflow.py`` (a private name imported, read, overridden or
  reached with ``getattr``, or a library module's attribute replaced);
- Kafka's wire format (big-endian fixed-width fields) is read only under ``kafkalog/``;
- no module of product code is over 700 lines;
- pyiceberg's commit exceptions are named only in ``spark_jobs/warehouse/`` (whose one
  commit mechanism, ``commits``, turns them into the warehouse's own errors);
- no test or doc names a path of the build machines;
- every check of the audit is in ``spark_jobs/audit/registry.py`` (its families' hooks called
  only from ``audit/families.py``);
- no test module imports another (shared builders are helper modules, imported as
  ``tests.<module>``; nothing is put on ``sys.path``), and an unmarked test that starts Spark,
  Airflow or a browser is caught (tests/pipeline_guard.py).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest

from tests import import_graph

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("kafkalog", "spark_jobs", "kafkalog_pipeline", "expectations", "plugins", "dags",
           "demo")
#: the one module each library's private names may be used in
QUARANTINE = {
    "pyiceberg": REPO / "spark_jobs" / "warehouse" / "_pyiceberg.py",
    "airflow": REPO / "kafkalog_pipeline" / "_airflow.py",
}
MAX_LINES = 700


def product_files() -> list[Path]:
    return sorted(p for root in PRODUCT if (REPO / root).is_dir()
                  for p in (REPO / root).rglob("*.py") if "build" not in p.parts)


def test_no_import_cycle():
    assert import_graph.cycles(import_graph.edges()) == []


def test_no_private_name_used_across_modules():
    assert import_graph.private_imports() == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@cache
def _library_privates(module: str) -> frozenset[str]:
    """The private names a library module defines (functions, classes, assignments)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return frozenset()
    tree = ast.parse(Path(spec.origin).read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id == "self":
            out.add(node.attr)
    return frozenset(n for n in out if _private(n))


def _own_names(tree, library_names: set[str]) -> set[str]:
    """Names a module defines itself: functions and classes, names and attributes it
    assigns, methods of its classes that do not derive from the library's (a method of a
    library class's subclass named like the library's private overrides it)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.ClassDef):
            out.add(node.name)
            if _derives_from(node, library_names):
                out.difference_update(f.name for f in node.body
                                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            out.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
    return out


def _derives_from(node: ast.ClassDef, library_names: set[str]) -> bool:
    def root(expr):
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        return expr.id if isinstance(expr, ast.Name) else None
    return any(root(b) in library_names for b in node.bases)


def library_private_uses(path: Path, library: str) -> list[str]:
    """A library's private names a file uses: imported (``from lib.x import _y``, a module
    path with a private part) or read as an attribute the file does not define itself
    while it imports a module of the library that defines it."""
    tree = ast.parse(path.read_text(), str(path))
    imported, bound, modules, out = set(), set(), set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == library or node.module.startswith(library + ".")):
            imported.add(node.module)
            bound.update(alias.asname or alias.name for alias in node.names)
            for alias in node.names:
                if _private(alias.name) or any(map(_private, node.module.split("."))):
                    out.append(f"{node.lineno}: from {node.module} import {alias.name}")
                else:
                    sub = f"{node.module}.{alias.name}"
                    try:
                        if importlib.util.find_spec(sub) is not None:
                            imported.add(sub)
                            modules.add(alias.asname or alias.name)
                    except (ImportError, ValueError):
                        pass
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == library or alias.name.startswith(library + "."):
                    imported.add(alias.name)
                    bound.add(alias.asname or alias.name.split(".")[0])
                    modules.add(alias.asname or alias.name.split(".")[0])
                    if any(map(_private, alias.name.split("."))):
                        out.append(f"{node.lineno}: import {alias.name}")
    theirs = frozenset().union(*(_library_privates(m) for m in imported)) if imported else ()
    own = _own_names(tree, bound)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in theirs and node.attr not in own:
            out.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) > 1 and \
                isinstance(node.args[1], ast.Constant) and node.args[1].value in theirs:
            out.append(f"{node.lineno}: {node.func.id} {node.args[1].value}")
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id in modules:
            out.append(f"{node.lineno}: replaces {node.value.id}.{node.attr}")
        elif isinstance(node, ast.ClassDef) and _derives_from(node, bound):
            out += [f"{f.lineno}: overrides {f.name}" for f in node.body
                    if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and f.name in theirs]
            out += [f"{a.lineno}: self.{a.attr}" for a in ast.walk(node)
                    if isinstance(a, ast.Attribute) and a.attr in theirs and a.attr in own
                    and isinstance(a.value, ast.Name) and a.value.id == "self"]
    return out


@pytest.mark.parametrize("library", sorted(QUARANTINE))
def test_library_privates_live_in_one_module(library):
    pytest.importorskip(library)
    found = {}
    for path in product_files():
        if path == QUARANTINE[library]:
            continue
        uses = library_private_uses(path, library)
        if uses:
            found[str(path.relative_to(REPO))] = uses
    assert found == {}, f"{library} privates outside {QUARANTINE[library].relative_to(REPO)}"


def test_the_private_use_check_catches_what_it_is_for(tmp_path):
    pytest.importorskip("pyiceberg")
    sample = tmp_path / "sample.py"
    sample.write_text("from pyiceberg.table import Transaction\n"
                      "class Mine(Transaction):\n"
                      "    def _apply(self, updates, requirements=()):\n"
                      "        return self._table._do_commit(updates, requirements)\n")
    assert sorted(library_private_uses(sample, "pyiceberg")) == [
        "3: overrides _apply", "4: ._do_commit", "4: ._table"]
    sample.write_text("from pyiceberg.table import Transaction\n"
                      "class Ours:\n"
                      "    def _apply(self):\n"
                      "        return self._apply()\n")
    assert library_private_uses(sample, "pyiceberg") == []
    sample.write_text("from pyiceberg import table\n"
                      "table.Transaction = object\n"
                      "getattr(table, '_do_commit')\n")
    assert library_private_uses(sample, "pyiceberg") == ["2: replaces table.Transaction",
                                                         "3: getattr _do_commit"]


def test_the_quarantine_modules_exist_and_use_the_privates():
    """The check above would pass vacuously if the quarantine were empty or missing."""
    for library, path in QUARANTINE.items():
        assert path.exists(), path
        assert "_" in path.read_text() and library in path.read_text()


#: reading a big-endian fixed-width field: what Kafka's wire format is made of
WIRE_READS = re.compile(r"""int\.from_bytes\(.*["']big["']|struct\.(?:unpack(?:_from)?|Struct)"""
                        r"""\(\s*["'][>!]""")


def test_kafkas_wire_format_is_read_only_in_kafkalog():
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
             for p in product_files() if p.parts[len(REPO.parts)] != "kafkalog"
             for n, line in enumerate(p.read_text().splitlines(), 1) if WIRE_READS.search(line)]
    assert found == []


def test_the_wire_format_pattern_catches_what_it_is_for():
    assert WIRE_READS.search('int.from_bytes(raw[0:8], "big", signed=True)')
    assert WIRE_READS.search("struct.unpack_from('>qi', data, 0)")
    assert not WIRE_READS.search('struct.Struct("<qqB")')  # our own little-endian framing


def test_no_product_module_is_over_700_lines():
    long = {str(p.relative_to(REPO)): n for p in product_files()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


#: pyiceberg's answers to a commit: only the warehouse's commit mechanism reads them
COMMIT_EXCEPTIONS = re.compile(r"\bCommit(?:Failed|StateUnknown)Exception\b")
WAREHOUSE = REPO / "spark_jobs" / "warehouse"


def test_pyicebergs_commit_exceptions_only_in_the_warehouse():
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
             for p in product_files() if WAREHOUSE not in p.parents
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if COMMIT_EXCEPTIONS.search(line)]
    assert found == []
    # the pattern finds what it is for, and the warehouse has the one place that uses it
    assert COMMIT_EXCEPTIONS.search("from pyiceberg.exceptions import CommitFailedException")
    assert COMMIT_EXCEPTIONS.search("except exceptions.CommitStateUnknownException:")
    assert not COMMIT_EXCEPTIONS.search("except CommitFailed as err:")  # ours
    assert COMMIT_EXCEPTIONS.search((WAREHOUSE / "commits.py").read_text())


#: the build machines' corpus folders, which a user's clone does not have
MACHINE_PATHS = re.compile(r"(?<![\w.])/(?:work|shared)/|\.\./shared/corpus")


def test_no_test_or_doc_names_a_path_of_the_build_machine():
    here = Path(__file__).resolve()
    files = [*(REPO / "tests").rglob("*.py"), *(REPO / "docs").rglob("*.md"),
             REPO / "README.md", *(REPO / "tests" / "data").rglob("README*")]
    found = [f"{p.relative_to(REPO)}:{n}" for p in files if p != here and p.is_file()
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if MACHINE_PATHS.search(line)]
    assert found == []


TESTS = REPO / "tests"


def test_no_test_module_imports_another():
    """No test module imports another (``test_*.py``, whatever the spelling: ``tests.x.test_y``,
    ``from tests.x import test_y``, the bare ``test_y`` of a path hack): builders that several
    modules use live in helper modules, imported as ``tests.<module>`` (tests/conftest.py)."""
    assert importers_of_test_modules(TESTS) == []


def importers_of_test_modules(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        if "data" in path.relative_to(root).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for name in names:
                leaf = name.split(".")[-1]
                if leaf.startswith("test_") and (name.startswith("tests.") or "." not in name):
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno}: imports {name}")
    return out


def test_the_test_module_rule_catches_what_it_is_for(tmp_path):
    (tmp_path / "tests" / "a").mkdir(parents=True)
    (tmp_path / "tests" / "a" / "test_x.py").write_text(
        "from tests.a.test_y import build\nfrom tests.a import test_z\nimport test_w\n"
        "from tests.segments import batch_v2\ndef f():\n    from test_v import g\n")
    assert importers_of_test_modules(tmp_path / "tests") == [
        "tests/a/test_x.py:1: imports tests.a.test_y",
        "tests/a/test_x.py:2: imports tests.a.test_z",
        "tests/a/test_x.py:3: imports test_w",
        "tests/a/test_x.py:6: imports test_v"]


def test_the_tests_put_nothing_on_sys_path():
    """tests/conftest.py imports the helpers as a package; it adds no folder to sys.path."""
    tree = ast.parse((TESTS / "conftest.py").read_text())
    assert not [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                and n.attr == "path" and getattr(n.value, "id", None) == "sys"]


def test_the_pipeline_guard_catches_what_it_is_for(tmp_path):
    """What tests/conftest.py fails an unmarked test for (tests/pipeline_guard.py): the
    commands of Spark, Airflow and a browser, and a JVM child of the test process."""
    import subprocess
    import sys

    from tests.pipeline_guard import jvm_children, pipeline_command

    assert pipeline_command([".venv/bin/spark-submit", "job.py"]) == "spark-submit"
    assert pipeline_command([sys.executable, "-m", "spark_jobs.decode", "--help"]) == \
        "python -m spark_jobs.decode"
    assert pipeline_command("airflow dags test kafka_segments_nightly") == "airflow"
    assert pipeline_command(["/usr/bin/chromium", "--headless"]) == "chromium"
    for harmless in ([sys.executable, "-m", "kafkalog.cli", "dump"], ["initdb", "-D", "x"],
                     [sys.executable, "-m", "airflow_settings"], "sleep 1"):
        assert pipeline_command(harmless) is None, harmless
    import time

    before = jvm_children()
    # a JVM that stays until it is stopped (java's source launcher, reading stdin): right after
    # the fork the child is not a JVM yet, so it is looked for until it is one
    wait = tmp_path / "Wait.java"
    wait.write_text("class Wait { public static void main(String[] a) throws Exception "
                    "{ System.in.read(); } }")
    java = subprocess.Popen(["java", str(wait)], stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while jvm_children() - before != {java.pid} and time.monotonic() < deadline:
            assert java.poll() is None, "the JVM exited"
            time.sleep(0.05)
        assert jvm_children() - before == {java.pid}
    finally:
        java.kill()
        java.wait()
    assert jvm_children() == before


AUDIT = REPO / "spark_jobs" / "audit"
#: the functions by which a family of checks joins the audit (spark_jobs/audit/families.py)
FAMILY_HOOKS = ("load", "units")


def unregistered_checks(audit: Path) -> list[str]:
    """What of the audit's checks in ``audit`` (a copy of ``spark_jobs/audit/``) is wired
    outside ``registry.py``: an ``observe``/``observe_*`` function no ``Check(...)`` of
    ``registry.py`` names, or a check module's family hook (``load``, ``units``) called from a
    module other than ``families.py``."""
    trees = {p.stem: ast.parse(p.read_text()) for p in sorted(audit.glob("*.py"))}
    registered = set()
    for node in ast.walk(trees.get("registry", ast.Module(body=[], type_ignores=[]))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Check":
            args = [*node.args[3:4], *(k.value for k in node.keywords if k.arg == "observe")]
            registered |= {(a.value.id, a.attr) for a in args
                           if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name)}
    out = []
    hooks = {}
    for mod, tree in trees.items():
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                if (node.name == "observe" or node.name.startswith("observe_")) \
                        and (mod, node.name) not in registered:
                    out.append(f"{mod}.{node.name}: no Check of registry.py names it")
                if node.name in FAMILY_HOOKS and mod not in ("families", "registry"):
                    hooks.setdefault(mod, set()).add(node.name)
    for mod, tree in trees.items():
        if mod == "families":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id != mod and node.attr in hooks.get(node.value.id, ()):
                out.append(f"{mod}:{node.lineno}: calls {node.value.id}.{node.attr} "
                           "(a family's hook: registry.FAMILIES wires it, via families.py)")
    return sorted(out)


def test_every_check_is_in_the_registry():
    assert unregistered_checks(AUDIT) == []


def test_the_registry_rule_catches_what_it_is_for(tmp_path):
    (tmp_path / "registry.py").write_text(
        "from . import crc\nCHECKS = (Check('crc', 'batches', ('x',), crc.observe),)\n")
    (tmp_path / "crc.py").write_text("def observe(run): ...\ndef observe_more(run): ...\n"
                                     "def load(spark): ...\n")
    (tmp_path / "job.py").write_text("from . import crc\ndef audit(): crc.load(None)\n")
    (tmp_path / "families.py").write_text("from . import crc\ndef load_crc(run): crc.load(1)\n")
    assert unregistered_checks(tmp_path) == [
        "crc.observe_more: no Check of registry.py names it",
        "job:2: calls crc.load (a family's hook: registry.FAMILIES wires it, via families.py)"]
