"""The simulation targets behind ``make sim KERNEL=<name>``: each a DUT plus its testbench.

A target is an instance of ``SimTarget`` (or of a subclass that overrides what its kernel needs)
declared in ``TARGETS`` of a package ``sim/<kernel>/``. The target owns the one path from
build parameters to a result:

* ``make_dut(**parameters)``: the component at the target's ``parameters``, updated;
* ``model(parameters)``: its Verilator model, built once per parameter set. The Verilog top
  module is always called like the target (one rule); the model cache is keyed by the Verilog
  text, so every parameter set gets its own model;
* ``run(parameters, tests=..., case=..., overrides=...)``: the cocotb tests of the testbench
  on that model (a plain run: the tests of ``phases``; a case replay: ``case_tests`` on the
  parameters ``case_parameters`` derives from the case file, parsed before anything is built);
* ``measure(point)``: the cycle budget of a benchmark contract point (``make report``): the
  ``measurement`` test on the parameters ``measure_parameters(point)`` chooses.
"""

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

from . import harness

__all__ = ["SimTarget", "UnknownTargetError", "discover_targets", "run_target", "target",
           "NotMeasured", "port_bytes", "DEFAULT_SEED", "contract_spec",
           "draft_round_node_count", "verify_tree_size", "check_limits"]

DEFAULT_SEED = 1


class NotMeasured(Exception):
    """Raised by ``SimTarget.measure`` for a contract point the kernel cannot run (the
    message, e.g. "N = 100 needs `sort_width` 128", goes into the cycle budget sheet)."""


class SimTarget:
    """A cocotb testbench and the DUT it runs on.

    Parameters
    ----------
    name : str
        What ``make sim KERNEL=`` takes; also the Verilog top-module name of its models.
    description : str
        One line for listings.
    component : callable or str
        ``component(**parameters)`` returns the DUT (a ``wiring.Component``); a string
        ``"package.module:Name"`` names it and is imported when first used (listing the
        targets imports no hardware).
    testbench : str or None
        Module of the cocotb tests (default ``sim.<name>.tb``).
    parameters : dict
        The DUT's build parameters of ``make sim`` (passed to the testbench as
        ``config["parameters"]`` with every run, so that it rebuilds the same layouts).
    config : dict
        Default testbench configuration (overridable per run), over ``STRESS`` (the random
        idle and back-pressure probabilities of the stress phases).
    phases : tuple of str
        The cocotb tests of a plain run, one per phase (empty: every test of the module);
        by default the convention of the kernel testbenches: ``figures`` (no idle or
        back-pressure), ``directed``, ``random`` (random idle and back-pressure).
    figures_tests : tuple of str
        The cocotb tests of the short run behind ``python -m hw.build``'s latency and
        initiation-interval figures (their summary's ``latency_cycles`` and
        ``initiation_interval``); empty: ``phases``.
    figures_config : dict
        Configuration overrides for that run; empty: the default ``config``.
    case_tests : tuple of str
        The cocotb tests of a case replay (``CASE=``), by default ``case``; empty: the target
        takes no case files.

    Subclasses override ``case_parameters`` (build parameters a case file needs) and
    ``measure_parameters`` (the cycle budget), or ``measure`` itself.
    """

    STRESS = {"idle": 0.3, "backpressure": 0.3}

    def __init__(self, name: str, description: str, *, component: Callable,
                 testbench: str | None = None,
                 parameters: dict | None = None, config: dict | None = None,
                 phases: tuple[str, ...] = ("figures", "directed", "random"),
                 figures_tests: tuple[str, ...] = ("figures",),
                 figures_config: dict | None = None, case_tests: tuple[str, ...] = ("case",)):
        self.name = name
        self.description = description
        self.component = component
        self.testbench = testbench or f"sim.{name}.tb"
        self.parameters = dict(parameters or {})
        self.config = {**self.STRESS, **(config or {})}
        self.phases = tuple(phases)
        self.figures_tests = tuple(figures_tests) or self.phases
        self.figures_config = dict(figures_config or {})
        self.case_tests = tuple(case_tests)

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"

    @property
    def takes_case(self) -> bool:
        """Whether the testbench replays case files (``CASE=``)."""
        return bool(self.case_tests)

    @property
    def has_measure(self) -> bool:
        """Whether the target measures benchmark contract points (``make report``)."""
        return type(self).measure_parameters is not SimTarget.measure_parameters or \
            type(self).measure is not SimTarget.measure

    def make_dut(self, **parameters):
        """The DUT at ``self.parameters`` updated by ``parameters``."""
        component = self.component
        if isinstance(component, str):
            module, _, attribute = component.partition(":")
            component = getattr(importlib.import_module(module), attribute)
        return component(**{**self.parameters, **parameters})

    def model(self, parameters: dict | None = None, *, waves: bool = False,
              log=print) -> harness.VerilatorModel:
        """Build (or reuse) the Verilator model of ``make_dut(**parameters)``."""
        return harness.build_model(self.make_dut(**(parameters or {})), name=self.name,
                                   waves=waves, log=log)

    def model_built(self, parameters: dict | None = None) -> bool:
        """Whether the (non-tracing) model of these parameters is in the cache already."""
        text = harness.elaborate(self.make_dut(**(parameters or {})), name=self.name)
        return (harness.model_directory(text, name=self.name, waves=False)
                / "model.stamp").exists()

    def case_parameters(self, case: Path, parameters: dict) -> dict:
        """The build parameters that replay ``case``: ``parameters`` (the run's), changed
        where the case needs more (a larger table, another ``node_top_k``, ...).

        Parses the file and raises ``ValueError`` naming file, line and tensor for a malformed
        one (``golden.cases``), before anything is built. The default takes ``parameters`` as they
        are; a target with case files overrides it.
        """
        return parameters

    def run(self, parameters: dict | None = None, *, overrides: dict | None = None,
            seed: int | None = None, case: str | Path | None = None,
            tests: tuple[str, ...] | None = None, waves: bool = False,
            log_file: Path | None = None, log=print) -> dict:
        """Build (or reuse) the model and run testbench tests on it; returns the summary.

        Parameters
        ----------
        parameters : dict or None
            Build parameters to change from ``self.parameters``.
        overrides : dict or None
            Testbench configuration entries to change (e.g. fewer vectors in unit tests).
        seed : int or None
            Seed of the random vectors (``DEFAULT_SEED`` when None).
        case : path or None
            Case file to replay (runs ``case_tests`` on ``case_parameters``).
        tests : tuple of str or None
            The cocotb tests to run; None: ``case_tests`` with a case, else ``phases``.
        waves : bool
            Dump an FST trace (uses a separately built, tracing model).
        log_file : Path or None
            Simulator output destination (``None``: the console).
        """
        parameters = {**self.parameters, **(parameters or {})}
        config = {**self.config, **(overrides or {})}
        if case is not None:
            if not self.takes_case:
                raise ValueError(f"simulation target {self.name!r} does not replay case files")
            case = Path(case).resolve()
            if not case.is_file():
                raise FileNotFoundError(f"case file {case} does not exist")
            parameters = self.case_parameters(case, parameters)
            config["case"] = str(case)
            tests = self.case_tests if tests is None else tests
        config["parameters"] = parameters
        if not tests:
            tests = self.phases or None
        model = self.model(parameters, waves=waves, log=log)
        return harness.run_testbench(model, self.testbench, config,
                                     seed=DEFAULT_SEED if seed is None else seed, tests=tests,
                                     log_file=log_file)

    def measure_parameters(self, point: dict) -> tuple[dict, dict]:
        """``(parameters, spec)`` of a benchmark contract point: the build parameters its
        measurement runs on and the testbench's ``config["measure"]``. Raises
        ``NotMeasured`` for a point outside the kernel's range."""
        raise NotMeasured(f"simulation target {self.name!r} has no measurement")

    def measure(self, point: dict, *, seed: int, log_file: Path | None = None) -> dict:
        """The cycle budget of one benchmark contract point (``make report``).

        Runs the testbench's ``measurement`` test with ``config["measure"]`` on the model of
        ``measure_parameters(point)`` and returns its ``measurement``: ``cycles``,
        ``bytes_in``, ``bytes_out``, ``operations`` (optionally ``initiation_interval``,
        ``invocations``, ``ports``, ``notes``); docs/contributing.md.
        """
        parameters, spec = self.measure_parameters(point)
        summary = self.run(parameters, overrides={"measure": spec}, seed=seed,
                           tests=("measurement",), log_file=log_file)
        return summary["measurement"]


def contract_spec(point: dict) -> dict:
    """The tree and vocabulary of a benchmark contract point, the ``config["measure"]`` of the
    verify-side kernels (each grows the point's draft-round trees itself)."""
    return {key: point[key] for key in ("batch", "node_top_k", "tree_width", "depth",
                                        "verify_num", "vocab")}


def draft_round_node_count(node_top_k: int, tree_width: int, depth: int) -> int:
    """``cumu_count`` after a full-width draft round: the root, ``K`` nodes at depth 1, then
    ``W * K`` per further depth (``1 + K + (depth - 1) * W * K``)."""
    return 1 + node_top_k + (depth - 1) * tree_width * node_top_k


def verify_tree_size(point: dict) -> tuple[int, int]:
    """``(n, S)`` of a contract point's verify step: the verify set of its full-width draft
    round (``min(verify_num, cumu_count)`` nodes) and ``S = depth + 1`` accepted tokens."""
    nodes = draft_round_node_count(point["node_top_k"], point["tree_width"], point["depth"])
    return min(point["verify_num"], nodes), point["depth"] + 1


def check_limits(parameters: dict, limits: dict[str, tuple[int, str]]) -> None:
    """Raise ``NotMeasured`` for the first ``name: (value, parameter)`` whose value exceeds
    ``parameters[parameter]`` ("n = 80 exceeds `max_nodes` 64")."""
    for name, (value, parameter) in limits.items():
        if value > parameters[parameter]:
            raise NotMeasured(f"{name} = {value} exceeds `{parameter}` {parameters[parameter]}")


def discover_targets() -> dict[str, SimTarget]:
    """Every target declared by a subpackage of ``sim`` (its module attribute ``TARGETS``).

    A kernel's simulation files live in ``sim/<kernel>/``; declaring ``TARGETS`` in its
    ``__init__`` is all it takes to appear in ``make sim``, ``make check`` and the reports.
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


def run_target(name: str, **options) -> dict:
    """``target(name).run(**options)``: the target's model at its default parameters (or a
    case's), its testbench; the summary (see ``SimTarget.run``)."""
    return target(name).run(**options)


def port_bytes(transfers: int, payload_bits: int) -> int:
    """Bytes that ``transfers`` beats of a ``payload_bits``-wide port move: every beat counts
    whole bytes (``ceil(payload_bits / 8)``), the convention of the cycle budget sheet."""
    return transfers * ((payload_bits + 7) // 8)
