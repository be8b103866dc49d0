"""The simulation targets behind ``make sim KERNEL=<name>``: each a DUT plus its testbench."""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .harness import build_model, run_testbench

__all__ = ["SimTarget", "TARGETS", "UnknownTargetError", "run_target", "target"]

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
    """

    name: str
    description: str
    make_dut: Callable
    testbench: str
    config: dict = field(default_factory=dict)
    takes_case: bool = False


def _float32_target(operation: str, description: str) -> SimTarget:
    def make_dut():
        from .float32_dut import Float32OpStream

        return Float32OpStream(operation)

    return SimTarget(
        name=f"fp32_{operation}",
        description=description,
        make_dut=make_dut,
        testbench="sim.tb_float32",
        config={"operation": operation, "vectors": 200_000, "idle": 0.25, "backpressure": 0.25},
    )


TARGETS = {t.name: t for t in [
    _float32_target("mul", "float32 multiply core vs numpy (corner pairs + random mix)"),
    _float32_target("add", "float32 add/subtract core vs numpy (corner pairs + random mix)"),
    _float32_target("cmp", "float32 compare core vs numpy (corner pairs + random mix)"),
]}


class UnknownTargetError(KeyError):
    """``make sim`` was given a name that is not a simulation target."""

    def __str__(self):
        return (f"unknown simulation target {self.args[0]!r}; known targets: "
                + ", ".join(sorted(TARGETS)))


def target(name: str) -> SimTarget:
    """The target called ``name``; raises ``UnknownTargetError`` listing the known ones."""
    try:
        return TARGETS[name]
    except KeyError:
        raise UnknownTargetError(name) from None


def run_target(name: str, *, seed: int | None = None, waves: bool = False,
               case: str | Path | None = None, overrides: dict | None = None,
               log_file: Path | None = None, log=print) -> dict:
    """Build (or reuse) the target's model, run its testbench, return the summary.

    Parameters
    ----------
    name : str
        Target name (see ``TARGETS``).
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
