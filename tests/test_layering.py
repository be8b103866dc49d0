"""The layering of docs/contributing.md: the hardware imports nothing from the simulation or
flow layers, and hardware files stay small enough to have one job."""

import ast
from pathlib import Path

import pytest

from sim.harness import REPO_ROOT

HARDWARE = sorted(path for folder in ("hw/lib", "hw/kernels", "hw/dataflow")
                  for path in (REPO_ROOT / folder).glob("**/*.py"))


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_hardware_files_exist():
    assert len(HARDWARE) > 10


@pytest.mark.parametrize("path", HARDWARE, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_hardware_imports_no_simulation_or_flow_module(path):
    upward = sorted(module for module in _imported_modules(path)
                    if module.split(".")[0] in ("sim", "flow", "host", "cocotb"))
    assert not upward, f"{path.relative_to(REPO_ROOT)} imports {upward}"


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "hw").glob("**/*.py")),
                         ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_hardware_files_are_at_most_800_lines(path):
    assert len(path.read_text().splitlines()) <= 800
