"""cocotb testbench: the engine (``hw.dataflow.engine.PersistentEngine``) against
``golden.engine.Engine``.

Configuration: ``parameters`` (the DUT's), ``seed``, ``figures_rounds`` and ``random_rounds``
(rounds of the two phases), ``latency`` (``[lo, hi]`` memory latency of the stressed phase)
and ``stall`` (probability of a stalled memory channel per clock), ``idle``/``backpressure``
(the command and completion streams of the stressed phase), ``bad_commands`` (probability of
a bad command before each good one), ``memory_bytes``, ``case`` (the ``case`` test).

Every command is a ``Step`` of ``sim.dataflow.rounds.Scenario`` (seeded rounds with bad
commands, run on the golden engine): the host writes its arguments into the card memory, the
command goes in, and its completion (tag, status, next width, stop reason), the frontier
records and the whole ``req_to_token`` table are compared with the golden's (``check_step``);
the three ports' counters must have moved exactly the beats of the runs the command needs
(``check_port_counters``), the memory servers must have served the same beats, and the
engine must go idle (no burst left in flight) before its completion.

Tests (phases): ``figures`` (``figures_rounds`` rounds, memory answering after a fixed
``figure_latency`` clocks, no stall, idle or back-pressure; mean cycles per command),
``random`` (``random_rounds`` rounds under random memory latency and stalls on every channel,
random idle on ``command`` and back-pressure on ``completion``), ``case`` (a command-sequence
case file, ``sim.dataflow.cases``).
"""

import json

import cocotb

from hw.dataflow.engine import EngineParams
from sim.bench import KernelBench, write_summary
from sim.payload import layout_fields, pack

from .cases import read_case
from .memory import CardMemory
from .rounds import Scenario, check_port_counters, check_step, port_counters, work_clocks


class BenchParams(EngineParams):
    """``EngineParams`` with the stream ports ``KernelBench`` drives."""

    @property
    def ports(self) -> dict:
        return {"command": self.command_layout, "completion": self.completion_layout}


def _counters(dut, ports) -> dict:
    """Port -> its counters as they stand (``ports``: the ``port_names``, in counter order)."""
    return port_counters(dut.counters.value.to_unsigned(), ports)


def _config_port(dut):
    """The ``config`` input (``config`` is a Verilog keyword: Amaranth escapes the name)."""
    for name in ("config", "\\config ", "\\config"):
        try:
            return dut[name]
        except (AttributeError, KeyError):
            continue
    raise AttributeError("the model has no `config` port")


class Engine:
    """The DUT on a ``KernelBench``, its card memory (``CardMemory``: latency, stalls) served
    on its three ports, and a ``Scenario`` over that memory."""

    def __init__(self, bench, *, latency, stall, seed, **scenario):
        self.bench, self.params = bench, bench.params
        p = self.params
        self.memory = CardMemory(bench.cfg["memory_bytes"], seed=seed, latency=latency,
                                 stall=stall)
        self.scenario = Scenario(p, self.memory, seed=seed, **scenario)
        self.ports = dict(zip(p.port_names, self.memory.engine_ports(bench.dut, p,
                                                                     front="cocotb"),
                              strict=True))
        _config_port(bench.dut).value = pack(p.config_layout, 1, **self.scenario.config)[0]
        # the command fields a command leaves out are zero
        self._unused = {name: 0 for name, _, _ in layout_fields(p.command_layout)}
        self.commands = self.cycles = 0
        self.by_kind = {}  # command name -> [count, cycles]

    async def run(self, steps, *, idle=0.0, backpressure=0.0) -> int:
        """Drive ``steps`` one command at a time and check each; return the commands run."""
        bench, host = self.bench, self.scenario.host
        start = self.commands
        for step in steps:
            before = _counters(bench.dut, self.params.port_names)
            served = {name: port.server.beats for name, port in self.ports.items()}
            command = {**self._unused, **step.command}
            try:
                run = await bench.run({"command": bench.pack("command", 1, **command)},
                                      {"completion": 1}, work=work_clocks(
                                          self.params, step.name,
                                          latency=self.memory.latency[1],
                                          stalled=self.memory.stall > 0), idle=idle,
                                      backpressure=backpressure,
                                      endpoints=self.ports.values())
            except TimeoutError as error:
                state = getattr(bench.dut, "sequencer_state", None)
                raise TimeoutError(
                    f"{error}: {step.name} (tag {step.command['tag']}, golden status "
                    f"{step.status.name}, command {self.commands} of the run, command "
                    f"{command}); sequencer state code "
                    f"{None if state is None else int(state.value)}") from error
            fields = bench.unpack("completion", run.items["completion"])
            check_step(step, {name: int(values[0]) for name, values in fields.items()}, host)
            after = _counters(bench.dut, self.params.port_names)
            check_port_counters(step, host, before, after)
            for name, port in self.ports.items():
                counted = after[name]["beats"] - before[name]["beats"]
                assert port.server.beats - served[name] == counted, \
                    f"{step.name} (tag {step.command['tag']}): the memory served " \
                    f"{port.server.beats - served[name]} beats on {name}, the counters say " \
                    f"{counted}"
            self.commands += 1
            self.cycles += run.cycles
            count = self.by_kind.setdefault(step.name, [0, 0])
            count[0] += 1
            count[1] += run.cycles
        return self.commands - start

    def figures(self) -> dict:
        """Mean clocks per command of each kind (command accepted to completion taken)."""
        return {f"cycles per {name}": round(cycles / count, 1)
                for name, (count, cycles) in sorted(self.by_kind.items())}


def _scenario(cfg) -> dict:
    return {"bad_commands": cfg["bad_commands"], "vocab_size": cfg["vocab_size"],
            "context_len": cfg["context_len"]}


async def _phase(dut, name, settings, scenario=lambda cfg: {}) -> None:
    """A plain-run phase: ``settings(cfg)`` gives its rounds, memory latency and stall and
    the stream stress, ``scenario(cfg)`` more ``Scenario`` settings."""
    bench = await KernelBench.start(dut, BenchParams)
    rounds, latency, stall, stress = settings(bench.cfg)
    engine = Engine(bench, latency=latency, stall=stall, seed=bench.seed,
                    **_scenario(bench.cfg), **scenario(bench.cfg))
    commands = await engine.run(engine.scenario.steps(rounds), **stress)
    figures = engine.figures()
    bench.log(f"{name}: {rounds} rounds, {commands} commands bit-exact with golden.engine, "
              f"port counters exact; {figures}")
    write_summary(vectors=commands, random_vectors=rounds, cycles=engine.cycles,
                  extra={name: f"{rounds} rounds, {commands} commands", **(
                      {f"{key} (unstressed)": value for key, value in figures.items()}
                      if not stress else {})})
    with open(bench.cfg["summary_path"]) as f:  # the rounds of every phase so far
        write_summary(extra={"rounds in all": json.load(f)["random_vectors"]})


@cocotb.test()
async def figures(dut):
    """``figures_rounds`` rounds, the memory answering after ``figure_latency`` clocks, no
    stall, idle or back-pressure."""
    await _phase(dut, "figures", lambda cfg: (cfg["figures_rounds"],
                                              (cfg["figure_latency"],) * 2, 0.0, {}))


@cocotb.test()
async def random(dut):
    """``random_rounds`` rounds under random memory latency and stalls on every channel,
    random idle on ``command`` and back-pressure on ``completion``; a ``load_trees`` share of
    them verify a caller's tree (``load_tree``) instead of ``build_verify``'s."""
    await _phase(dut, "random", lambda cfg: (
        cfg["random_rounds"], tuple(cfg["latency"]), cfg["stall"],
        {"idle": cfg["idle"], "backpressure": cfg["backpressure"]}),
        scenario=lambda cfg: {"load_trees": cfg["load_trees"]})


@cocotb.test()
async def case(dut):
    """The case file's command sequence (``config["case"]``): RTL == golden, command by
    command, under its ``memory`` settings (default: the stressed phase's latency and
    stalls, no idle or back-pressure)."""
    bench = await KernelBench.start(dut, BenchParams)
    case = read_case(bench.cfg["case"])
    memory = {"latency": tuple(bench.cfg["latency"]), "stall": bench.cfg["stall"],
              **case.memory}
    config = {**_scenario(bench.cfg), **case.config}
    engine = Engine(bench, latency=tuple(memory["latency"]), stall=memory["stall"],
                    seed=case.seed, **config)
    commands = await engine.run(engine.scenario.replay(case.entries, where=str(case.path)))
    bench.log(f"case {case.path}: {case.commands} commands and {case.rounds} random rounds "
              f"({commands} commands in all) bit-exact with golden.engine")
    write_summary(vectors=commands, random_vectors=case.rounds, cycles=engine.cycles,
                  extra={"case": str(case.path), "commands": commands,
                         "random rounds": case.rounds})
