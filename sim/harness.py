"""Amaranth -> Verilog -> Verilator -> cocotb, with one cached model per parameter set.

``build_model`` elaborates a component to Verilog and builds its Verilator model under
``build/sim/<name>-<hash>/``, where the hash covers the Verilog text, the tool versions and
the wave-dump option: the same parameters reuse the model, any change to the hardware builds a
new one. ``run_testbench`` runs cocotb tests (all of a module, or the named ones: one test per
testbench phase) against a model, passes them a JSON configuration, checks the cocotb results
file (a failing run, or one that ran other than the named tests, raises ``SimulationError``)
and returns the summary the tests wrote. ``COCOTB_TESTS_RUN`` counts the cocotb tests that
really ran in this process (``make test`` prints it).
"""

import contextlib
import fcntl
import hashlib
import importlib.metadata
import itertools
import json
import os
import re
import shutil
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import verilog

__all__ = ["REPO_ROOT", "BUILD_ROOT", "SimulationError", "VerilatorModel", "build_lock",
           "build_model", "run_testbench", "CONFIG_ENV", "COCOTB_TESTS_RUN"]

#: The repository's root directory: the one constant every tool derives its paths from.
REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_ROOT = REPO_ROOT / "build" / "sim"
CONFIG_ENV = "EAGLE_SIM_CONFIG"
# -fno-inline keeps every Verilog module a C++ class of its own: Amaranth writes a module per
# component instance, and a kernel with 64 multipliers inlined into one class was 142 MB of
# C++ (about an hour of g++ here); kept apart it is 41 MB, 7 minutes, and simulates faster.
# --output-groups 4 concatenates Verilator's hundreds of small .cpp files into four units per
# kind: each file re-read a 78 MB precompiled header (the cocotb dataflow model's make: 177 ->
# 141 CPU s; the engine library's: sim/verilated.py).
VERILATOR_ARGS = ("-Wno-fatal", "-O3", "--x-assign", "fast", "--x-initial", "fast",
                  "-fno-inline", "--output-groups", "4")
#: Variables of the C++ compile (Verilator's makefile): the fast path (the model's eval) at
#: -O1 instead of Verilator's -Os, about half the g++ time of a model at the same simulation
#: speed (measured on the engine: sim/verilated.py); the slow path (construction, initial
#: values) stays at its -O0, the runtime library at its -Os. They change no behaviour, so they
#: are not part of a model's cache key.
MAKE_OPTIONS: tuple[str, ...] = ("OPT_FAST=-O1",)

_run_counter = itertools.count()

#: Cocotb tests that ran (passed or failed) in this process, per test module.
COCOTB_TESTS_RUN: dict[str, int] = {}


class SimulationError(RuntimeError):
    """A Verilator build failed, or a cocotb run failed, crashed or ran no test."""


@dataclass(frozen=True)
class VerilatorModel:
    """A built Verilator model: its HDL top name, build directory and whether it traces."""

    toplevel: str
    build_dir: Path
    waves: bool


def _tool_versions() -> str:
    return ",".join(f"{pkg}={importlib.metadata.version(pkg)}"
                    for pkg in ("amaranth", "cocotb", "verilator"))


def _put_venv_tools_on_path() -> None:
    # `verilator` (the wrapper written by `python -m sim.toolchain`) lives beside this Python.
    scripts = sysconfig.get_path("scripts")
    if scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")


@contextlib.contextmanager
def _environment(**variables):
    """``os.environ`` with ``variables`` set, as it was again afterwards."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def elaborate(component, *, name: str) -> str:
    """Verilog text of ``component`` with top module ``name`` (ports ``clk``, ``rst``, ...)."""
    return verilog.convert(component, name=name, emit_src=False)


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


@contextlib.contextmanager
def build_lock(directory: Path, *, log=print):
    """Hold the build lock of the cache directory ``directory`` (an exclusive ``flock`` on
    ``<directory>.lock`` beside it) for the ``with`` block.

    Two processes that build the same model at once (two ``make`` runs, ``pytest -n``) would
    otherwise write the same files: the second waits here (saying so through ``log`` once)
    until the first has finished, then finds the finished model. The lock file stays (an
    empty file; removing it while a process waits would let a third one in); the lock goes
    with its holder, also when that process dies.
    """
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f"{directory.name}.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another process building {_shown(directory)}")
            started = time.monotonic()
            fcntl.flock(handle, fcntl.LOCK_EX)
            log(f"... it finished after {time.monotonic() - started:.0f} s of waiting")
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def model_directory(verilog_text: str, *, name: str, waves: bool) -> Path:
    """Cache directory of a model: keyed by the Verilog, the tool versions and tracing."""
    key = hashlib.sha256(f"{_tool_versions()}|waves={waves}|{VERILATOR_ARGS}\n{verilog_text}"
                         .encode())
    return BUILD_ROOT / f"{name}-{key.hexdigest()[:16]}"


def build_model(component, *, name: str, waves: bool = False, log=print) -> VerilatorModel:
    """Build (or reuse) the Verilator model of ``component``.

    Parameters
    ----------
    component : wiring.Component
        The design under test; its Verilog text keys the cache.
    name : str
        Top module name, also the prefix of the build directory.
    waves : bool
        Build with FST tracing (a separate model: tracing slows simulation down).
    log : callable
        Progress messages (``print`` by default).
    """
    text = elaborate(component, name=name)
    build_dir = model_directory(text, name=name, waves=waves)
    model = VerilatorModel(toplevel=name, build_dir=build_dir, waves=waves)
    if (build_dir / "model.stamp").exists():
        return model
    with build_lock(build_dir, log=log):
        if not (build_dir / "model.stamp").exists():  # not built while this one waited
            _build_cocotb_model(text, model, log)
    return model


def _build_cocotb_model(text: str, model: VerilatorModel, log) -> None:
    """Verilate and compile ``text`` into ``model.build_dir`` (under the build lock)."""
    from cocotb_tools.runner import get_runner

    name, build_dir, waves = model.toplevel, model.build_dir, model.waves
    _put_venv_tools_on_path()
    if build_dir.exists():
        shutil.rmtree(build_dir)  # a half-finished earlier build
    build_dir.mkdir(parents=True)
    source = build_dir / f"{name}.v"
    source.write_text(text)
    log(f"building Verilator model {name} in {build_dir.relative_to(REPO_ROOT)} "
        "(once per parameter set)")
    runner = get_runner("verilator")
    try:
        # cocotb's runner calls make itself: the options reach it (and its sub-makes) as
        # command-line variables in MAKEFLAGS
        with _environment(MAKEFLAGS=" ".join((os.environ.get("MAKEFLAGS", ""), *MAKE_OPTIONS))):
            runner.build(
                sources=[source],
                hdl_toplevel=name,
                build_dir=build_dir,
                build_args=[*VERILATOR_ARGS, *(["--trace-fst"] if waves else [])],
                waves=waves,
                log_file=build_dir / "build.log",
            )
    except (Exception, SystemExit) as error:
        raise SimulationError(f"Verilator build of {name} failed ({error}); "
                              f"see {build_dir / 'build.log'}") from error
    (build_dir / "model.stamp").write_text("ok\n")


def run_testbench(model: VerilatorModel, test_module: str, config: dict, *, seed: int,
                  tests: tuple[str, ...] | None = None, log_file: Path | None = None) -> dict:
    """Run cocotb tests of ``test_module`` on ``model``; return the testbench's summary.

    Parameters
    ----------
    model : VerilatorModel
        From ``build_model``.
    test_module : str
        Importable module holding ``@cocotb.test`` coroutines.
    config : dict
        JSON-serialisable settings for the testbench (read with ``sim.cocotb_tb.config()``).
    seed : int
        cocotb's random seed; the testbench also finds it in its configuration.
    tests : tuple of str or None
        Names of the cocotb tests to run (exact names, the runner's test filter; they run in
        the module's order); None: every test of the module. Each named test must run: a
        name the module lacks is an error.
    log_file : Path or None
        Where the simulator's output goes (``None``: the console).

    Raises
    ------
    SimulationError
        If the simulator fails, no test ran, or any test failed.
    """
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner

    run_dir = model.build_dir / "runs" / f"{os.getpid()}-{next(_run_counter)}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    summary_path = run_dir / "summary.json"
    config_path = run_dir / "config.json"
    config_path.write_text(json.dumps({**config, "seed": seed,
                                       "summary_path": str(summary_path)}, indent=1))
    results = run_dir / "results.xml"

    runner = get_runner("verilator")
    try:
        runner.test(
            test_module=test_module,
            hdl_toplevel=model.toplevel,
            hdl_toplevel_lang="verilog",
            build_dir=model.build_dir,
            test_dir=run_dir,
            seed=seed,
            extra_env={CONFIG_ENV: str(config_path)},
            results_xml=str(results),
            test_filter=(None if tests is None
                         else r"\.(" + "|".join(map(re.escape, tests)) + ")$"),
            waves=model.waves,
            log_file=log_file,
        )
    except SystemExit as error:  # cocotb exits on failure when it runs under pytest
        exit_code = error.code
    else:
        exit_code = 0
    try:
        total, failed = get_results(results)
    except RuntimeError as error:
        raise SimulationError(f"{test_module} on {model.toplevel} left no results "
                              f"(simulator exit code {exit_code}): {error}") from error
    COCOTB_TESTS_RUN[test_module] = COCOTB_TESTS_RUN.get(test_module, 0) + total
    if total == 0:
        raise SimulationError(f"{test_module} ran no test on {model.toplevel}")
    if tests is not None and total != len(tests):
        raise SimulationError(f"{test_module} ran {total} cocotb tests on {model.toplevel}, "
                              f"not the {len(tests)} named ({', '.join(tests)})")
    if failed:
        raise SimulationError(f"{failed} of {total} cocotb tests of {test_module} failed on "
                              f"{model.toplevel}; logs and results in {run_dir}")
    if exit_code:
        raise SimulationError(f"simulator exited with {exit_code} on {model.toplevel}")
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    if model.waves:
        summary["waves"] = str(run_dir / "dump.fst")
    return summary
