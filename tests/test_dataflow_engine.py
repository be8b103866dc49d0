"""The engine's draft side (hw/dataflow/engine.py) against golden.engine on random rounds,
in Amaranth's simulator (small build; the Verilator bench is `make sim KERNEL=dataflow`)."""

import pytest

from hw.dataflow.engine import DraftEngine, EngineParams
from hw.lib.stream import stream_get, stream_put
from sim.amaranth_tb import simulate
from sim.dataflow.memory import CardMemory
from sim.dataflow.rounds import Scenario, check_step

SMALL = dict(node_top_k=2, max_tree_width=2, max_depths=4, max_verify_num=6,
             max_node_count=24, max_input_size=6, max_batch=4, max_pool_rows=16,
             address_width=20, port_bits=64, max_seq_len=64, max_vocab_size=128,
             logit_port_bits=64)


def run_scenario(parameters, *, seed, rounds, stall=0.0, **scenario):
    params = EngineParams(**parameters)
    dut = DraftEngine(**parameters)
    memory = CardMemory(1 << 18, seed=seed, latency=(1, 6), stall=stall)
    case = Scenario(params, memory, seed=seed, **scenario)
    counts = {"steps": 0}

    async def bench(ctx):
        ctx.set(dut.config, case.config)
        for step in case.steps(rounds):
            await stream_put(ctx, dut.command, step.command)
            completion = await stream_get(ctx, dut.completion)
            check_step(step, {name: getattr(completion, name) for name in (
                "tag", "status", "next_tree_width", "stop_reason", "verify_size", "active_count",
                "rows_read")}, case.host)
            counts["steps"] += 1

    simulate(dut, bench, background=[memory.serve_read(dut.read, params.port_bits),
                                     memory.serve_write(dut.result_write, params.port_bits),
                                     memory.serve_write(dut.mask_write, params.port_bits),
                                     memory.serve_write(dut.table_write, params.port_bits),
                                     *(memory.serve_read(port, params.logit_port_bits)
                                       for port in dut.logits)])
    return counts["steps"]


def test_rounds_match_golden():
    """Whole rounds with bad commands between them under memory stalls (the Verilator bench,
    tests/test_kernel_dataflow.py, runs hundreds of rounds)."""
    assert run_scenario(SMALL, seed=2, rounds=2, stall=0.4) >= 8


def test_single_slot_k1_width1():
    """K = 1, W = 1: one slot, a chain of single nodes."""
    parameters = dict(SMALL, node_top_k=1, max_tree_width=1, max_batch=1)
    assert run_scenario(parameters, seed=3, rounds=2) >= 6


def test_bad_parameters():
    with pytest.raises(ValueError, match="max_tree_width"):
        EngineParams(**dict(SMALL, max_tree_width=3))
