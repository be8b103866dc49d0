"""The engine on sizes that are not powers of two, with trees that fill the node budget
exactly or stop one node short of it (issue 39: ``read_state``'s element counter was sized by
``max_node_count`` alone and wrapped before a full tree's score rows, so the command never
completed). Every command of each round (``Scenario.budget_round``: forced widths, the depth
that meets the budget, ``build_verify``, ``verify``, then ``read_state`` of every slot) must
complete and equal ``golden.engine``; a hang would end in the watchdog's ``WATCHDOG``
completion, which the golden never gives.

Amaranth's simulator runs the small builds in ``make test``; the slow tier runs more of them
(``SWEEP_SLOW``, with memory stalls), and tests/test_host_rtl_budgets.py such rounds on
Verilated builds."""

import pytest

from hw.dataflow.engine import EngineParams, PersistentEngine
from hw.lib.stream import stream_get, stream_put
from sim.amaranth_tb import simulate
from sim.dataflow.memory import CardMemory
from sim.dataflow.rounds import Scenario, budget_widths, check_step, completion_fields
from tests.test_dataflow_engine import SMALL


def build(**sizes) -> dict:
    """SMALL with ``sizes`` (the parameters the sweep varies)."""
    return dict(SMALL, **sizes)


# (id, build parameters, batch, node counts of the rounds): each count is max_node_count
# (the budget filled exactly) or max_node_count - 1 (one node short)
SWEEP = [
    ("K2-W2-N23-MI10-V6-B3-full", build(max_node_count=23, max_input_size=10,
                                         max_verify_num=6, max_batch=3, max_depths=7),
     3, (23,)),
    ("K3-W3-N29-MI9-V7-B5-short", build(node_top_k=3, max_tree_width=3, max_node_count=29,
                                         max_input_size=9, max_verify_num=7, max_batch=5,
                                         max_depths=5), 2, (28,)),
    ("K1-W1-N13-MI11-V5-B1-both", build(node_top_k=1, max_tree_width=1, max_node_count=13,
                                         max_input_size=11, max_verify_num=5, max_batch=1,
                                         max_depths=13), 1, (13, 12)),
    ("K4-W3-N49-MI11-V9-B3-full", build(node_top_k=4, max_tree_width=3, max_node_count=49,
                                         max_input_size=11, max_verify_num=9, max_batch=3,
                                         max_depths=6, max_seq_len=80), 3, (49,)),
]

SWEEP_SLOW = [
    ("K3-W2-N43-MI13-V11-B6-short", build(node_top_k=3, max_tree_width=2, max_node_count=44,
                                           max_input_size=13, max_verify_num=11, max_batch=6,
                                           max_depths=9), 6, (43,)),
    ("K4-W4-N229-MI157-V64-B1-full", build(node_top_k=4, max_tree_width=4,
                                            max_node_count=229, max_input_size=157,
                                            max_verify_num=64, max_batch=1, max_depths=15,
                                            max_seq_len=320), 1, (229,)),
    ("K5-W5-N57-MI12-V13-B3-short", build(node_top_k=5, max_tree_width=5, max_node_count=57,
                                           max_input_size=12, max_verify_num=13, max_batch=3,
                                           max_depths=4), 3, (56,)),
]


def run_budget_rounds(parameters, batch, counts, *, seed=39, stall=0.0) -> list[str]:
    """Run a ``budget_round`` per node count on the Amaranth-simulated engine, each command
    checked against the golden; return the commands run."""
    params = EngineParams(**parameters)
    dut = PersistentEngine(**parameters)
    memory = CardMemory(1 << 20, seed=seed, latency=(1, 6), stall=stall)
    room = max(params.kv_slots, params.max_verify_num)
    case = Scenario(params, memory, seed=seed, bad_commands=0, pool_rows=max(batch, 2),
                    context_len=room + 8)
    names = []

    async def bench(ctx):
        ctx.set(dut.config, case.config)
        for count in counts:
            widths = budget_widths(count, **sizes(params))
            for step in case.budget_round(batch, widths, verify_num=params.max_verify_num):
                await stream_put(ctx, dut.command, step.command)
                completion = await stream_get(ctx, dut.completion)
                check_step(step, completion_fields(completion), case.host)
                names.append(step.name)

    simulate(dut, bench, background=memory.serve_engine(dut, params))
    return names


def sizes(params) -> dict:
    """``budget_widths``' sizes of a build."""
    return dict(node_top_k=params.node_top_k, max_tree_width=params.max_tree_width,
                depths=params.max_depths, max_input_size=params.max_input_size)


def _expect_full_rounds(names, counts, batch, parameters):
    """Every round ran to its reads of state: one ``begin_round``, its depths, the build,
    the verify and ``min(batch + 1, max_batch)`` reads per count."""
    reads = min(batch + 1, parameters["max_batch"])
    assert names.count("begin_round") == len(counts)
    assert names.count("verify") == len(counts)
    assert names.count("read_state") == reads * len(counts)


@pytest.mark.parametrize("parameters, batch, counts",
                         [case[1:] for case in SWEEP], ids=[case[0] for case in SWEEP])
def test_budget_rounds_equal_golden(parameters, batch, counts):
    names = run_budget_rounds(parameters, batch, counts)
    _expect_full_rounds(names, counts, batch, parameters)


@pytest.mark.slow
@pytest.mark.parametrize("parameters, batch, counts",
                         [case[1:] for case in SWEEP_SLOW], ids=[case[0] for case in SWEEP_SLOW])
def test_budget_rounds_equal_golden_slow(parameters, batch, counts):
    names = run_budget_rounds(parameters, batch, counts, stall=0.3)
    _expect_full_rounds(names, counts, batch, parameters)


def test_budget_widths():
    """The widths give the tree the count asks for, and refuse what cannot be built."""
    params = EngineParams(**build(node_top_k=4, max_tree_width=4, max_node_count=229,
                                  max_input_size=157, max_verify_num=64, max_depths=15))
    assert budget_widths(229, **sizes(params)) == [4] * 14
    assert budget_widths(5, **sizes(params)) == []
    assert budget_widths(13, **sizes(params)) == [2]
    with pytest.raises(ValueError, match="no tree of 228 nodes"):
        budget_widths(228, **sizes(params))
    with pytest.raises(ValueError, match="needs 16 depths"):
        budget_widths(245, **sizes(params))
