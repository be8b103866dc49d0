"""``python -m sim.dataflow.profile``: where the engine's clocks go in one round, state by state.

Runs the cycle budget's round (``Scenario.contract_round``: ``begin_round``, the depths at full
width, ``build_verify``, ``verify`` at temperature 1) of a tree of ``benchmarks/contract.toml``
on the measurement's build (``EngineTarget.measure_parameters``, the vocabulary cut to the
round's ``V`` so that Amaranth's simulator can hold it) with every memory port answering after
``L`` clocks, checks every completion against the golden, and prints, for every FSM of the
engine and its kernels, the clocks the round spent in each state (states of fewer than three
clocks left out). The sequencer's line splits the round by command. Amaranth's simulator: a
round at B = 8 takes a few minutes.
"""

import argparse
import sys
import tomllib
from collections import Counter

from amaranth.hdl import Fragment
from amaranth.sim import Simulator

from hw.dataflow.engine import EngineParams, PersistentEngine
from hw.lib.stream import stream_get, stream_put

from ..harness import REPO_ROOT
from . import TARGET
from .memory import CardMemory
from .rounds import Scenario, check_step, completion_fields

__all__ = ["fsm_states", "profile", "main"]

CONTRACT = REPO_ROOT / "benchmarks" / "contract.toml"


def fsm_states(fragment) -> dict:
    """``{path: state signal}`` of every FSM in an elaborated ``fragment``: the signals driven
    in it whose name ends in ``_state`` and that carry a decoder (Amaranth names an FSM's state
    signal ``<name>_state`` and gives it the state names). Reads Amaranth's fragment tree,
    which it does not document: a profiling aid, not part of the design."""
    found = {}

    def walk(fragment, path):
        for statements in fragment.statements.values():
            for statement in statements:
                for signal in statement._lhs_signals():
                    if signal.name.endswith("_state") and signal.decoder is not None:
                        found[f"{'/'.join(path)}:{signal.name}"] = signal
        for sub, name, _ in fragment.subfragments:
            walk(sub, [*path, str(name)])

    walk(fragment, [])
    return dict(sorted(found.items()))


def _trees() -> dict:
    """The contract's trees by id."""
    return {entry["id"]: entry for entry in tomllib.loads(CONTRACT.read_text())["trees"]}


def _point(tree: str, batch: int, vocab: int) -> dict:
    trees = _trees()
    if tree not in trees:
        raise ValueError(f"unknown tree `{tree}` (benchmarks/contract.toml: {sorted(trees)})")
    return {**trees[tree], "batch": batch, "vocab": vocab}


def profile(tree: str = "serving", *, batch: int = 1, latency: int = 64, vocab: int = 1024,
            seed: int = 1) -> dict:
    """``{fsm: Counter(state name -> clocks)}`` over one contract round (see the module)."""
    point = _point(tree, batch, vocab)
    parameters, config = TARGET.measure_parameters(point)
    parameters["max_vocab_size"] = 1 << (vocab - 1).bit_length()
    params = EngineParams(**parameters)
    dut = PersistentEngine(**parameters)
    fragment = Fragment.get(dut, None)
    states = fsm_states(fragment)
    memory = CardMemory(1 << 24, seed=seed, latency=(latency, latency))
    case = Scenario.for_contract(params, memory, point, seed=seed,
                                 context_len=config["context_len"])
    clocks = {name: Counter() for name in states}
    running = [False]

    async def bench(ctx):
        ctx.set(dut.config, case.config)
        for step in case.contract_round(point, seq_len=config["seq_len"]):
            running[0] = True
            await stream_put(ctx, dut.command, step.command)
            completion = await stream_get(ctx, dut.completion)
            check_step(step, completion_fields(completion), case.host)
        running[0] = False

    async def sample(ctx):
        async for _ in ctx.tick():
            if running[0]:
                for name, signal in states.items():
                    clocks[name][signal.decoder(ctx.get(signal))] += 1

    simulator = Simulator(fragment)
    simulator.add_clock(1e-8)
    simulator.add_testbench(bench)
    for server in (*memory.serve_engine(dut, params), sample):
        simulator.add_testbench(server, background=True)
    simulator.run()
    return clocks


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.dataflow.profile",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", default="serving", choices=sorted(_trees()))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--latency", type=int, default=64, help="memory read latency (clocks)")
    parser.add_argument("--vocab", type=int, default=1024)
    args = parser.parse_args(argv)
    if args.batch < 1:  # (the measurement's build grows its slots to a batch past 8)
        parser.error(f"argument --batch: at least 1, not {args.batch}")
    if args.latency < 1 or args.vocab < 2:
        parser.error("--latency must be at least 1 and --vocab at least 2")
    clocks = profile(args.tree, batch=args.batch, latency=args.latency, vocab=args.vocab)
    print(f"{args.tree} tree, B = {args.batch}, V = {args.vocab}, memory latency "
          f"{args.latency}: clocks per state over one round")
    for name, counter in clocks.items():
        busy = [(state, count) for state, count in counter.most_common()
                if count > 2 and not state.startswith("IDLE")]
        print(f"{name}: " + (", ".join(f"{state.split('/')[0]} {count:,}"
                                       for state, count in busy) or "idle"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
