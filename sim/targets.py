"""The simulation targets behind ``make sim KERNEL=<name>``: each a DUT plus its testbench."""

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .harness import build_model, run_testbench

__all__ = ["SimTarget", "UnknownTargetError", "discover_targets", "run_target", "target",
           "NotMeasured", "port_bytes"]

DEFAULT_SEED = 1


@dataclass(frozen=True)
class SimTarget:
    """A cocotb testbench and the DUT it runs on.

    Attributes
    ----------
    name : str
        What ``make sim KERNEL=`` takes.
    description : str
        One line for listings.
    make_dut : callable
        Returns the DUT component (the default parameter set).
    testbench : str
        Module of the cocotb tests.
    config : dict
        Default testbench configuration (overridable per run).
    takes_case : bool
        Whether the testbench replays a case file (``CASE=``).
    figures_config : dict
        Configuration overrides for the short run behind ``python -m hw.build``'s latency and
        initiation-interval figures (e.g. fewer vectors); empty: the default ``config``.
    measure : callable or None
        ``measure(point, *, seed, log_file) -> dict``: the cycle budget of one benchmark
        contract point, measured in simulation (``make report``; see docs/contributing.md).
        Returns ``cycles``, ``bytes_in``, ``bytes_out``, ``operations`` (and optionally
        ``initiation_interval``, ``invocations``, ``ports``, ``notes``); raises
        ``NotMeasured`` for a point outside the kernel's parameter range. None: no budget.
    """

    name: str
    description: str
    make_dut: Callable
    testbench: str
    config: dict = field(default_factory=dict)
    takes_case: bool = False
    figures_config: dict = field(default_factory=dict)
    measure: Callable | None = None


def discover_targets() -> dict[str, SimTarget]:
    """Every target declared by a subpackage of ``sim`` (its module attribute ``TARGETS``).

    A kernel's simulation files live in ``sim/<kernel>/``; declaring ``TARGETS`` in its
    ``__init__`` is all it takes to appear in ``make sim``, ``make demo`` and the reports.
    """
    import sim

    found = {}
    for info in sorted(pkgutil.iter_modules(sim.__path__), key=lambda info: info.name):
        if not info.ispkg:
            continue
        for sim_target in getattr(importlib.import_module(f"sim.{info.name}"), "TARGETS", ()):
            if sim_target.name in found:
                raise RuntimeError(f"simulation target {sim_target.name!r} declared twice")
            found[sim_target.name] = sim_target
    return found


class UnknownTargetError(KeyError):
    """``make sim`` was given a name that is not a simulation target."""

    def __str__(self):
        return (f"unknown simulation target {self.args[0]!r}; known targets: "
                + ", ".join(sorted(discover_targets())))


def target(name: str) -> SimTarget:
    """The target called ``name``; raises ``UnknownTargetError`` listing the known ones."""
    try:
        return discover_targets()[name]
    except KeyError:
        raise UnknownTargetError(name) from None


def run_target(name: str, *, seed: int | None = None, waves: bool = False,
               case: str | Path | None = None, overrides: dict | None = None,
               log_file: Path | None = None, log=print) -> dict:
    """Build (or reuse) the target's model, run its testbench, return the summary.

    Parameters
    ----------
    name : str
        Target name (see ``discover_targets``).
    seed : int or None
        Seed of the random vectors (``DEFAULT_SEED`` when None).
    waves : bool
        Dump an FST trace (uses a separately built, tracing model).
    case : path or None
        Case file to replay, for targets that take one.
    overrides : dict or None
        Testbench configuration entries to change (e.g. fewer vectors in unit tests).
    log_file : Path or None
        Simulator output destination (``None``: the console).
    """
    sim_target = target(name)
    config = {**sim_target.config, **(overrides or {})}
    if case is not None:
        if not sim_target.takes_case:
            raise ValueError(f"simulation target {name!r} does not replay case files")
        case = Path(case).resolve()
        if not case.is_file():
            raise FileNotFoundError(f"case file {case} does not exist")
        config["case"] = str(case)
    model = build_model(sim_target.make_dut(), name=name, waves=waves, log=log)
    return run_testbench(model, sim_target.testbench, config,
                         seed=DEFAULT_SEED if seed is None else seed, log_file=log_file)


class NotMeasured(Exception):
    """Raised by ``SimTarget.measure`` for a contract point the kernel cannot run (the
    message, e.g. "N = 100 needs `sort_width` 128", goes into the cycle budget sheet)."""


def port_bytes(transfers: int, payload_bits: int) -> int:
    """Bytes that ``transfers`` beats of a ``payload_bits``-wide port move: every beat counts
    whole bytes (``ceil(payload_bits / 8)``), the convention of the cycle budget sheet.

    In a cocotb testbench: ``port_bytes(len(sink.accepted_at), len(dut.o__payload))``.
    """
    return transfers * ((payload_bits + 7) // 8)
