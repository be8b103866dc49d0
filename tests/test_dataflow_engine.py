"""The engine's draft side (hw/dataflow/engine.py) against golden.engine on random rounds,
in Amaranth's simulator (small build; the Verilator bench is `make sim KERNEL=dataflow`)."""

import numpy as np
import pytest

from hw.dataflow.engine import EngineParams, PersistentEngine
from hw.lib.stream import stream_get, stream_put
from sim.amaranth_tb import simulate
from sim.dataflow.memory import CardMemory
from sim.dataflow.rounds import Scenario, check_step, completion_fields
from sim.tree_verify.schedule import call_cycles

SMALL = dict(node_top_k=2, max_tree_width=2, max_depths=4, max_verify_num=6,
             max_node_count=24, max_input_size=6, max_batch=4, max_pool_rows=16,
             address_width=20, port_bits=64, max_seq_len=64, max_vocab_size=128,
             logit_port_bits=64)


def run_scenario(parameters, *, seed, rounds, stall=0.0, **scenario):
    params = EngineParams(**parameters)
    dut = PersistentEngine(**parameters)
    memory = CardMemory(1 << 18, seed=seed, latency=(1, 6), stall=stall)
    case = Scenario(params, memory, seed=seed, **scenario)
    counts = {"steps": 0}

    async def bench(ctx):
        ctx.set(dut.config, case.config)
        for step in case.steps(rounds):
            await stream_put(ctx, dut.command, step.command)
            completion = await stream_get(ctx, dut.completion)
            check_step(step, completion_fields(completion), case.host)
            counts["steps"] += 1

    simulate(dut, bench, background=memory.serve_engine(dut, params))
    return counts["steps"]


def test_rounds_match_golden():
    """Whole rounds with bad commands between them under memory stalls (the Verilator bench,
    tests/test_kernel_dataflow.py, runs hundreds of rounds)."""
    assert run_scenario(SMALL, seed=2, rounds=2, stall=0.4) >= 8


def test_single_slot_k1_width1():
    """K = 1, W = 1: one slot, a chain of single nodes."""
    parameters = dict(SMALL, node_top_k=1, max_tree_width=1, max_batch=1)
    assert run_scenario(parameters, seed=3, rounds=2) >= 6


def test_contract_round_matches_golden():
    """The measurement's round (`Scenario.contract_round`: forced widths, bit-packed mask,
    bfloat16 EAGLE-like logits) at a small point: bit-exact, some drafts accepted, and the
    fused verify's clocks inside the engine (the logits ports' busy cycles) equal to its
    schedule formula, by which the measurement reports the V80 build."""
    parameters = dict(SMALL, logit_format="bfloat16", max_vocab_size=512)
    params = EngineParams(**parameters)
    dut = PersistentEngine(**parameters)
    memory = CardMemory(1 << 20, seed=1, latency=(4, 4))
    case = Scenario(params, memory, seed=1, vocab_size=300, context_len=100, bad_commands=0)
    point = dict(batch=2, node_top_k=2, tree_width=2, depth=3, verify_num=6,
                 vocab=300)
    logits0 = params.port_names.index("logits0")
    run, fused = {}, []

    async def bench(ctx):
        ctx.set(dut.config, case.config)
        for step in case.contract_round(point, seq_len=20):
            before = ctx.get(dut.counters[logits0].busy_cycles)
            await stream_put(ctx, dut.command, step.command)
            completion = await stream_get(ctx, dut.completion)
            check_step(step, completion_fields(completion), case.host)
            fused.append(ctx.get(dut.counters[logits0].busy_cycles) - before)
            run.update(step.run)

    simulate(dut, bench, background=memory.serve_engine(dut, params))
    assert len(run["accept_length"]) == 2 and sum(run["accept_length"]) > 2
    # CardMemory's latency L is sim.tree_verify's L + 1 (its first beat a clock later)
    formula = call_cycles(params.verify, run["fused_call"], run["traces"], latency=4 + 1)
    assert fused[-1] == sum(formula) > 0 and not any(fused[:-1])


def test_bad_parameters():
    with pytest.raises(ValueError, match="max_tree_width"):
        EngineParams(**dict(SMALL, max_tree_width=3))


@pytest.mark.parametrize("seq_lens", [(0, 5), (0, 0, 9, 0)])
def test_full_mask_rows_of_one_byte(seq_lens):
    """Edge case of the mask bytes: FULL layout, ``n = 1`` (``verify_num`` 1), requests of
    ``seq_len`` 0 (one-byte rows) between longer ones. (The soak's hang, a row width read a
    clock late, needs the next request's row at once under back-pressure; this directed
    case does not reach it, the Verilator soak does.)"""
    params = EngineParams(**SMALL)
    dut = PersistentEngine(**SMALL)
    memory = CardMemory(1 << 18, seed=5, latency=(1, 1))
    case = Scenario(params, memory, seed=5, bad_commands=0)
    b = len(seq_lens)
    rng = case.rng
    args = dict(slots=np.arange(b, dtype=np.int64),
                root_tokens=rng.integers(0, case.vocab, b, dtype=np.int64),
                seq_lens=np.array(seq_lens, np.int64),
                req_pool_indices=np.arange(b, dtype=np.int64),
                draft_cache_locs=rng.integers(0, 1 << 20, (b, params.kv_slots),
                                              dtype=np.int64),
                verify_num=1, depths=1)

    def steps():
        yield case._begin(args)
        yield case._draft(*case._draft_inputs(b, 1), width=None)
        yield case._build(0)

    async def bench(ctx):
        ctx.set(dut.config, case.config)
        for step in steps():
            assert step.status == 0, step.name
            await stream_put(ctx, dut.command, step.command)
            completion = await stream_get(ctx, dut.completion)
            check_step(step, completion_fields(completion), case.host)

    simulate(dut, bench, background=memory.serve_engine(dut, params))


def test_result_records_of_a_deep_predicts_memory():
    """A build whose `predicts` memory needs more address bits than a result record's word
    index (MAXV 40: 160 rows): the records' predicts rows are read a word ahead of the
    header's end (a wrapped index there read another request's first word; found at the
    serving point, B = 8, MAXV 64)."""
    parameters = dict(SMALL, node_top_k=4, max_tree_width=4, max_verify_num=40,
                      max_node_count=64, max_input_size=12)
    assert run_scenario(parameters, seed=4, rounds=3, bad_commands=0.0) >= 12
