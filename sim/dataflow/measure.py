"""The engine's cycle-budget measurement (``EngineTarget.measure``, ``make report``) on the
in-process Verilated model (``sim.verilated``): one Python step per clock, without cocotb or a
simulator process, which makes the large points (B = 128, V = 128,256: millions of clocks of
logits rows) measurable in minutes.

``measure_point(parameters, spec, seed=...)`` runs ``Scenario.contract_round`` at
``spec["point"]`` once per memory read latency of ``spec["latencies"]`` (a fresh card memory
and a reset model each time) and returns the first latency's measurement record
(``boards/schemas/measurement.schema.json``), the others' cycles under ``at_latency``. Every
command is checked as the testbench checks it (``sim/dataflow/tb.py``): its completion, the
frontier records and the whole ``req_to_token`` table against the golden (``check_step``), the
ports' counters against the runs the command needs (``check_port_counters``), the memory
servers' beats against the counters, and no burst in flight at its completion. The clocks are
counted as the testbench counts them: from the clock the command is offered to the clock its
completion is taken, with one idle clock before every command.
"""

from hw.dataflow.engine import EngineParams
from hw.kernels.tree_verify import V80_BUILD, TreeVerifyParams
from sim.payload import layout_fields, pack
from sim.tree_verify.schedule import call_cycles

from .memory import CardMemory
from .rounds import (
    COMPLETION_FIELDS,
    Scenario,
    check_port_counters,
    check_step,
    port_counters,
    work_clocks,
)

__all__ = ["OUTPUT_PORTS", "measure_point"]

#: The engine's ports that carry data out (the others are read ports).
OUTPUT_PORTS = ("result_write", "mask_write", "table_write")


class _Engine:
    """The Verilated engine with a fresh card memory answering every port after ``latency``
    clocks, and a ``Scenario`` on that memory: ``run(steps)`` drives and checks commands."""

    def __init__(self, model, params, spec, latency, seed):
        self.model, self.params = model, params
        self.memory = CardMemory(spec["memory_bytes"], seed=seed, latency=(latency, latency),
                                 stall=0.0)
        self.scenario = Scenario.for_contract(params, self.memory, spec["point"], seed=seed,
                                              context_len=spec["context_len"])
        self.ports = self.memory.engine_ports(model, params, front="clocked")
        self.latency = latency
        self._unused = {name: 0 for name, _, _ in layout_fields(params.command_layout)}
        self._completion = layout_fields(params.completion_layout)
        model.set("command__valid", 0)
        model.set("completion__ready", 0)
        for endpoint in self.ports:
            endpoint.drive()
        model.reset()
        model.set("config", pack(params.config_layout, 1, **self.scenario.config)[0])
        model.eval()
        self.cycles = 0
        self.by_kind = {}  # command name -> cycles

    def counters(self) -> dict:
        return port_counters(self.model.get("counters"), self.params.port_names)

    def run(self, steps) -> int:
        """Drive ``steps`` one command at a time and check each; return the commands run."""
        count = 0
        for step in steps:
            before = self.counters()
            served = [endpoint.server.beats for endpoint in self.ports]
            cycles, fields = self._command(step)
            check_step(step, fields, self.scenario.host)
            after = self.counters()
            check_port_counters(step, self.scenario.host, before, after)
            for endpoint, name, beats in zip(self.ports, self.params.port_names, served,
                                             strict=True):
                counted = after[name]["beats"] - before[name]["beats"]
                assert endpoint.server.beats - beats == counted, \
                    f"{step.name} (tag {step.command['tag']}): the memory served " \
                    f"{endpoint.server.beats - beats} beats on {name}, the counters say " \
                    f"{counted}"
            self.cycles += cycles
            self.by_kind[step.name] = self.by_kind.get(step.name, 0) + cycles
            count += 1
        return count

    def _command(self, step) -> tuple[int, dict]:
        """One command: an idle clock, then the command offered until its completion is
        taken; the clocks from the offer to the completion (both counted) and its fields."""
        model, ports = self.model, self.ports
        model.set("command__valid", 0)
        model.set("completion__ready", 0)
        model.tick()
        model.set("command__payload", pack(self.params.command_layout, 1,
                                           **{**self._unused, **step.command})[0])
        model.set("command__valid", 1)
        model.set("completion__ready", 1)
        offered = True
        timeout = 2 * work_clocks(self.params, step.name, latency=self.latency,
                                  stalled=False) + 2000
        cycles, done = 0, False
        while not done:
            if cycles == timeout:
                raise TimeoutError(f"{step.name} (tag {step.command['tag']}): no completion "
                                   f"within {timeout} clocks")
            cycles += 1
            for endpoint in ports:
                endpoint.drive()
            model.eval()
            taken = offered and model.get("command__ready")
            done = model.get("completion__valid")
            if done:
                payload = model.get("completion__payload")
                fields = {name: payload >> offset & ((1 << width) - 1)
                          for name, offset, width in self._completion
                          if name in COMPLETION_FIELDS}
            for endpoint in ports:
                endpoint.sample()
            model.tick()
            if taken:
                model.set("command__valid", 0)
                offered = False
        busy = [endpoint.name for endpoint in ports if not endpoint.done]
        assert not busy, f"{step.name}: completed with bursts in flight on {', '.join(busy)}"
        return cycles, fields


def measure_point(parameters: dict, spec: dict, *, seed: int, log=print) -> dict:
    """The measurement record of one contract point (see the module): ``parameters`` the
    build, ``spec`` the ``measure_parameters`` configuration (``point``, ``seq_len``,
    ``context_len``, ``memory_bytes``, ``latencies``)."""
    from sim.verilated import Model

    from .verilated import verilated_library

    params = EngineParams(**parameters)
    model = Model(verilated_library("engine", tuple(sorted(parameters.items())), log))
    try:
        records = []
        for latency in spec["latencies"]:
            records.append(_contract_round(_Engine(model, params, spec, latency, seed), spec))
            log(f"memory latency {latency}: {records[-1]['cycles']:,} cycles, "
                f"{records[-1]['bytes_in'] + records[-1]['bytes_out']:,} bytes")
    finally:
        model.close()
    latencies = spec["latencies"]
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
    return record


def _contract_round(engine: _Engine, spec: dict) -> dict:
    """One ``Scenario.contract_round`` at ``spec["point"]`` on ``engine``: the measurement
    record.

    ``begin_round``, ``depth`` draft depths at the forced width ``tree_width``,
    ``build_verify`` (bit-packed mask), ``verify`` (temperature 1, EAGLE-like bfloat16
    logits), command after command without idle or back-pressure. ``cycles``: the sum over
    the commands, with the fused verify's share (its clocks in the engine, checked equal to
    its schedule formula on the simulated build) replaced by the formula's for the V80 build
    (``V80_BUILD``: 32 ports x 512 bits, 1,024 lanes) on the same walks, as
    ``sim/tree_verify``'s measurement reports it; the simulated figures under ``simulated``.
    Bytes from the port counters (the V80 build reads the same rows), in all and per command
    (``commands``).
    """
    point, params, latency = spec["point"], engine.params, engine.latency
    names = params.port_names
    before = engine.counters()
    steps = []
    by_command = {}  # command -> {"count", "ports": port -> bytes}

    def kept(sequence):
        last = before
        for step in sequence:
            steps.append(step)
            yield step  # (resumed once the command has completed)
            now = engine.counters()
            entry = by_command.setdefault(step.name, {"count": 0, "ports": dict.fromkeys(
                names, 0)})
            entry["count"] += 1
            for name in names:
                entry["ports"][name] += now[name]["bytes"] - last[name]["bytes"]
            last = now

    commands = engine.run(kept(engine.scenario.contract_round(point, seq_len=spec["seq_len"])))
    after = engine.counters()
    ports = {name: after[name]["bytes"] - before[name]["bytes"] for name in names}
    run = steps[-1].run
    per_command = dict(engine.by_kind)
    # The fused verify's clocks (its requests' command to last result: the logits ports'
    # busy cycles) must be its schedule formula's on the simulated build; the V80 build's
    # verify (V80_BUILD, 1,024 lanes) replaces them by the formula's on the same walks.
    fused = after["logits0"]["busy_cycles"] - before["logits0"]["busy_cycles"]
    # (CardMemory's latency L is the formula's L + 1: its first beat comes a clock later.)
    call, traces = run["fused_call"], run["traces"]
    formula = call_cycles(params.verify, call, traces, latency=latency + 1)
    assert fused == sum(formula), \
        f"the fused verify ran {fused} clocks, its schedule formula says {formula}"
    v80 = call_cycles(TreeVerifyParams(**V80_BUILD), call, traces, latency=latency + 1)
    simulated = dict(per_command)
    per_command["verify"] += sum(v80) - fused
    for name, entry in by_command.items():
        entry["cycles"] = per_command[name]
    return {
        "cycles": engine.cycles - fused + sum(v80),
        "bytes_in": sum(ports[name] for name in names if name not in OUTPUT_PORTS),
        "bytes_out": sum(ports[name] for name in OUTPUT_PORTS),
        "operations": 0,
        "invocations": point["batch"],
        "ports": ports,
        "commands": by_command,
        "rows_read": run["rows_read"],
        "source": (f"simulated, with the fused verify's {fused} clocks on the simulated "
                   f"build ({params.logit_ports} x {params.logit_port_bits}-bit ports, "
                   f"bfloat16) replaced by its schedule formula for the V80 build "
                   f"(V80_BUILD, 1,024 lanes): {_listed(v80)} per request"),
        "simulated": {"cycles": engine.cycles, "cycles_per_command": simulated,
                      "fused_verify": formula},
        "notes": (f"one round at B={point['batch']}, K={point['node_top_k']}, "
                  f"W={point['tree_width']}, {point['depth']} depths, verify_num "
                  f"{point['verify_num']} (n={run['n']}), V={point['vocab']}, seq_len "
                  f"{spec['seq_len']}: {commands} commands, cycles by command {per_command} "
                  f"(the verify's fused part by the V80 build's schedule formula); the verify "
                  f"read {run['rows_read']} logits rows (bfloat16), accepted "
                  f"{_listed(run['accept_length'])}; every memory channel answering after "
                  f"{latency} clocks"),
    }


def _listed(values) -> str:
    return ", ".join(str(int(x)) for x in values)
