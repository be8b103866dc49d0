"""The layering of docs/contributing.md: the hardware imports nothing from the layers above it
(``boards``, ``sim``, ``host``, ``flow``, and the test and bench code), and hardware files stay
small enough to have one job.

Every module under ``hw/`` is parsed (not imported: a second or so for all of them) and every
import it names is checked, wherever it stands (module level, in a function, under
``TYPE_CHECKING``), ``importlib.import_module("...")`` and ``__import__("...")`` with a literal
name included. The three entry points ``hw/build.py``, ``hw/report.py`` and ``hw/synth.py``
are the one exception: each starts ``flow``'s command of the same name and may import
``flow`` (only ``flow``)."""

import ast
from pathlib import Path

import pytest

from sim.harness import REPO_ROOT

#: Top-level packages ``hw`` must not import: the layers above it.
UPWARD = ("boards", "sim", "host", "flow", "tests", "bench", "cocotb")
#: ``python -m hw.<name>`` entry points: three-line shims into ``flow.<name>``.
ENTRY_POINTS = {"hw/build.py": "flow", "hw/report.py": "flow", "hw/synth.py": "flow"}

HARDWARE = sorted((REPO_ROOT / "hw").glob("**/*.py"))


def _literal_import(node: ast.Call) -> str | None:
    """The module of ``importlib.import_module("m")`` / ``import_module("m")`` /
    ``__import__("m")`` with a literal first argument, else None."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name in ("import_module", "__import__") and node.args \
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def imported_modules(source: str, filename: str = "<source>") -> set[str]:
    """Every absolute module name ``source`` imports (relative imports stay inside ``hw``)."""
    found = set()
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Call) and (module := _literal_import(node)):
            found.add(module)
    return found


def upward_imports(path: Path, source: str | None = None) -> list[str]:
    """The imports of the ``hw`` module ``path`` that reach above ``hw`` (sorted)."""
    source = path.read_text() if source is None else source
    allowed = ENTRY_POINTS.get(path.relative_to(REPO_ROOT).as_posix())
    return sorted(module for module in imported_modules(source, str(path))
                  if module.split(".")[0] in UPWARD and module.split(".")[0] != allowed)


def test_hardware_files_exist():
    assert len(HARDWARE) > 10
    assert {path.relative_to(REPO_ROOT).as_posix() for path in HARDWARE} >= set(ENTRY_POINTS)


@pytest.mark.parametrize("path", HARDWARE, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_hardware_imports_nothing_above_it(path):
    upward = upward_imports(path)
    assert not upward, f"{path.relative_to(REPO_ROOT)} imports {upward}"


@pytest.mark.parametrize("line", [
    "from boards.vitis import KernelInterface",
    "import boards",
    "def f():\n    from sim.harness import REPO_ROOT",
    "import host.rtl as rtl",
    "from flow import build",
    "if TYPE_CHECKING:\n    from boards.alveo import Board",
    "import importlib\nimportlib.import_module('boards.slash')",
    "__import__('sim')",
])
def test_every_kind_of_upward_import_is_caught(line):
    path = REPO_ROOT / "hw" / "lib" / "axi.py"
    assert upward_imports(path, line), line


def test_the_entry_points_may_import_flow_only():
    path = REPO_ROOT / "hw" / "build.py"
    assert upward_imports(path, "from flow.build import main") == []
    assert upward_imports(path, "from boards import board") == ["boards"]
    assert upward_imports(REPO_ROOT / "hw" / "dataflow" / "vitis_top.py",
                          "from flow.build import main") == ["flow.build"]


@pytest.mark.parametrize("path", HARDWARE, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_hardware_files_are_at_most_800_lines(path):
    assert len(path.read_text().splitlines()) <= 800


DATAFLOW = sorted((REPO_ROOT / "hw" / "dataflow").glob("*.py"))


@pytest.mark.parametrize("path", DATAFLOW, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_engine_files_are_at_most_500_lines(path):
    """Issue 31: the engine's files, one component or one job each, stay readable."""
    assert len(path.read_text().splitlines()) <= 500


def namespaces_of_locals(source: str, filename: str = "<source>") -> list[str]:
    """Where ``source`` names ``SimpleNamespace`` or calls ``locals()`` / ``vars()`` without an
    argument: ``"line: what"`` each."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        name = node.id if isinstance(node, ast.Name) else \
            node.attr if isinstance(node, ast.Attribute) else \
            node.name if isinstance(node, ast.alias) else None
        if name == "SimpleNamespace":
            found.append(f"{node.lineno}: SimpleNamespace")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("locals", "vars") \
                and not node.args:
            found.append(f"{node.lineno}: {node.func.id}()")
    return found


@pytest.mark.parametrize("path", HARDWARE, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_hardware_shares_no_namespace_of_locals(path):
    """Issue 31: what a command reaches is named in a signature or a declared record, never
    a namespace of whatever locals a function had."""
    assert namespaces_of_locals(path.read_text(), str(path)) == []


@pytest.mark.parametrize("source", [
    "from types import SimpleNamespace", "import types\nc = types.SimpleNamespace(a=1)",
    "c = dict(locals())", "v = vars()"])
def test_every_namespace_of_locals_is_caught(source):
    assert namespaces_of_locals(source) != []
