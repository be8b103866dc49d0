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

from hw.dataflow.engine import EngineParams, counter_layout
from hw.kernels.tree_verify import V80_BUILD, TreeVerifyParams
from sim.bench import KernelBench, write_summary
from sim.cocotb_tb import reset
from sim.payload import layout_fields, pack
from sim.tree_verify.schedule import call_cycles

from .cases import read_case
from .memory import CardMemory
from .rounds import Scenario, check_port_counters, check_step


class BenchParams(EngineParams):
    """``EngineParams`` with the stream ports ``KernelBench`` drives."""

    @property
    def ports(self) -> dict:
        return {"command": self.command_layout, "completion": self.completion_layout}


def _counters(dut, ports) -> dict:
    """Port -> its counters (``counter_layout`` fields) as they stand (``ports``: the
    ``port_names``, in counter order)."""
    value = dut.counters.value.to_unsigned()
    size = counter_layout.size
    return {port: {name: value >> (index * size + offset) & ((1 << width) - 1)
                   for name, offset, width in layout_fields(counter_layout)}
            for index, port in enumerate(ports)}


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
        port = dict(port_bits=p.port_bits, address_width=p.address_width)
        self.ports = {"read": self.memory.cocotb_read(bench.dut, "read", **port)}
        for name in p.port_names[1:]:
            if name.startswith("logits"):
                self.ports[name] = self.memory.cocotb_read(
                    bench.dut, f"logits__{name[len('logits'):]}", port_bits=p.logit_port_bits,
                    address_width=p.verify.address_width)
            else:
                self.ports[name] = self.memory.cocotb_write(bench.dut, name, **port)
        _config_port(bench.dut).value = pack(p.config_layout, 1, **self.scenario.config)[0]
        # the command fields a command leaves out are zero
        self._unused = {name: 0 for name, _, _ in layout_fields(p.command_layout)}
        self.commands = self.cycles = 0
        self.by_kind = {}  # command name -> [count, cycles]

    def _work(self, step) -> int:
        """Clocks a command takes without stalls, generously (the timeout's base)."""
        p = self.params
        v, seq = p.max_verify_num, p.max_seq_len
        words = -(-p.max_vocab_size * 32 // p.logit_port_bits)  # a logits row, at most
        per_request = {
            "begin_round": p.argument_words + 2 * v + 3 * p.kv_slots + 40,
            "draft_depth": 12 * p.max_candidates + 4 * v + 400,
            "build_verify": v * (seq + v) // 4 + 2 * seq + 8 * v + 200,
            "verify": v * (8 * words + 200) + 200 * words + 600,
        }.get(step.name, 6 * p.max_node_count + 4 * v + 200)  # read_state: one slot
        stalled = 1 + 4 * int(self.memory.stall > 0)
        return (200 + p.max_batch * per_request) * stalled + 4 * self.memory.latency[1]

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
                                      {"completion": 1}, work=self._work(step), idle=idle,
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


_INPUT_PORTS = ("read",)  # and the logits ports
_OUTPUT_PORTS = ("result_write", "mask_write", "table_write")


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one draft round and its verify step (``config["measure"]``:
    ``point``, ``seq_len``, ``context_len``, ``memory_bytes``, ``latencies``), docs/engine.md.

    The round (``contract_round``) runs once per memory read latency of ``latencies``, the
    DUT reset in between; the record is the first latency's (``memory_latency``), the others'
    cycles go to ``at_latency``. Every latency must move the same bytes on every port.
    """
    bench = await KernelBench.start(dut, BenchParams)
    spec = bench.cfg["measure"]
    bench.cfg["memory_bytes"] = spec["memory_bytes"]
    latencies = spec["latencies"]
    records = []
    for index, latency in enumerate(latencies):
        if index:
            await reset(dut)
        records.append(await _contract_round(bench, spec, latency))
        bench.log(f"measurement at memory latency {latency}: {records[-1]}")
    record = records[0]
    for latency, other in zip(latencies[1:], records[1:], strict=True):
        assert other["ports"] == record["ports"], \
            f"the round moved other bytes at memory latency {latency} ({other['ports']}) " \
            f"than at {latencies[0]} ({record['ports']})"
    record["memory_latency"] = latencies[0]
    record["at_latency"] = {str(latency): {"cycles": other["cycles"], "commands": {
        name: entry["cycles"] for name, entry in other["commands"].items()}}
        for latency, other in zip(latencies[1:], records[1:], strict=True)}
    others = "; ".join(f"{other['cycles']:,} cycles at memory latency {latency}"
                       for latency, other in zip(latencies[1:], records[1:], strict=True))
    record["notes"] += f" ({others})" if others else ""
    write_summary(vectors=sum(r.pop("commands_run") for r in records),
                  cycles=record["cycles"], measurement=record)


async def _contract_round(bench, spec, latency) -> dict:
    """One ``Scenario.contract_round`` at ``spec["point"]`` on a fresh card memory whose
    channels all answer after ``latency`` clocks: the measurement record.

    ``begin_round``, ``depth`` draft depths at the forced width ``tree_width``,
    ``build_verify`` (bit-packed mask), ``verify`` (temperature 1, EAGLE-like bfloat16
    logits), command after command without idle or back-pressure; each command checked
    against the golden and its port counters against its runs, as in the other phases.
    ``cycles``: the sum over the commands of command accepted to completion taken, with the
    fused verify's share (its clocks in the engine, checked equal to its schedule formula on
    the simulated build) replaced by the formula's for the V80 build (``V80_BUILD``: 32 ports
    x 512 bits, 1,024 lanes) on the same walks, as ``sim/tree_verify``'s measurement reports
    it; the simulated figures under ``simulated``. Bytes from the port counters (the V80 build
    reads the same rows), in all and per command (``commands``).
    """
    dut, point = bench.dut, spec["point"]
    engine = Engine(bench, latency=(latency, latency), stall=0.0, seed=bench.seed,
                    bad_commands=0.0, vocab_size=point["vocab"],
                    pool_rows=max(12, point["batch"]), context_len=spec["context_len"])
    names = engine.params.port_names
    before = _counters(dut, names)
    steps = []
    by_command = {}  # command -> {"count", "ports": port -> bytes}

    def kept(sequence):
        last = before
        for step in sequence:
            steps.append(step)
            yield step  # (resumed once the command has completed)
            now = _counters(dut, names)
            entry = by_command.setdefault(step.name, {"count": 0, "ports": dict.fromkeys(
                names, 0)})
            entry["count"] += 1
            for name in names:
                entry["ports"][name] += now[name]["bytes"] - last[name]["bytes"]
            last = now

    commands = await engine.run(kept(engine.scenario.contract_round(point,
                                                                  seq_len=spec["seq_len"])))
    after = _counters(dut, names)
    ports = {name: after[name]["bytes"] - before[name]["bytes"] for name in names}
    inputs = [name for name in names if name not in _OUTPUT_PORTS]
    run = steps[-1].run
    per_command = {name: cycles for name, (_, cycles) in engine.by_kind.items()}
    # The fused verify's clocks (its requests' command to last result: the logits ports'
    # busy cycles) must be its schedule formula's on the simulated build; the V80 build's
    # verify (V80_BUILD, 1,024 lanes) replaces them by the formula's on the same walks.
    fused = after["logits0"]["busy_cycles"] - before["logits0"]["busy_cycles"]
    # (CardMemory's latency L is the formula's L + 1: its first beat comes a clock later.)
    call, traces = run["fused_call"], run["traces"]
    formula = call_cycles(engine.params.verify, call, traces, latency=latency + 1)
    assert fused == sum(formula), \
        f"the fused verify ran {fused} clocks, its schedule formula says {formula}"
    v80 = call_cycles(TreeVerifyParams(**V80_BUILD), call, traces, latency=latency + 1)
    simulated = dict(per_command)
    per_command["verify"] += sum(v80) - fused
    for name, entry in by_command.items():
        entry["cycles"] = per_command[name]
    return {
        "cycles": engine.cycles - fused + sum(v80),
        "bytes_in": sum(ports[name] for name in inputs),
        "bytes_out": sum(ports[name] for name in _OUTPUT_PORTS),
        "operations": 0,
        "invocations": point["batch"],
        "ports": ports,
        "commands": by_command,
        "rows_read": run["rows_read"],
        "commands_run": commands,
        "source": (f"simulated, with the fused verify's {fused} clocks on the simulated "
                   f"build ({engine.params.logit_ports} x {engine.params.logit_port_bits}-bit "
                   f"ports, bfloat16) replaced by its schedule formula for the V80 build "
                   f"(V80_BUILD, 1,024 lanes): {record_list(v80)} per request"),
        "simulated": {"cycles": engine.cycles, "cycles_per_command": simulated,
                      "fused_verify": formula},
        "notes": (f"one round at B={point['batch']}, K={point['node_top_k']}, "
                  f"W={point['tree_width']}, {point['depth']} depths, verify_num "
                  f"{point['verify_num']} (n={run['n']}), V={point['vocab']}, seq_len "
                  f"{spec['seq_len']}: {commands} commands, cycles by command {per_command} "
                  f"(the verify's fused part by the V80 build's schedule formula); the verify "
                  f"read {run['rows_read']} logits rows (bfloat16), accepted "
                  f"{record_list(run['accept_length'])}; every memory channel answering after "
                  f"{latency} clocks"),
    }


def record_list(values) -> str:
    return ", ".join(str(int(x)) for x in values)
