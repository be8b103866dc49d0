"""Issue 39's sweep on the Verilated engine (slow tier; tests/test_dataflow_budgets.py runs
the same kind of rounds on Amaranth's simulator in ``make test``): ``host.Engine`` rounds on
sizes that are not powers of two whose tree fills the node budget exactly or stops one node
short, on the rtl and golden backends — the draft round, every slot's ``read_state``,
``build_verify`` and ``verify`` equal bit for bit. Each configuration is its own Verilator
build (minutes each, cached under build/verilated/)."""

import numpy as np
import pytest

import host
from golden import DraftRoundConfig, synthetic_sampler
from sim.dataflow.rounds import budget_widths
from tests.test_host_rtl import assert_same
from tests.test_host_rtl_15_depths import _verify_and_read_back

pytestmark = pytest.mark.slow

VOCAB = 300

# (id, config, node count of the round: max_node_count or max_node_count - 1)
SWEEP = [
    ("K3-W2-N44-MI13-V11-B3-short",
     DraftRoundConfig(batch_size=3, node_top_k=3, max_tree_width=2, depths=8, verify_num=11,
                      max_verify_num=11, max_node_count=44, max_input_size=13, hidden_size=0),
     43),
    ("K4-W3-N49-MI11-V9-B3-full",
     DraftRoundConfig(batch_size=3, node_top_k=4, max_tree_width=3, depths=6, verify_num=9,
                      max_verify_num=9, max_node_count=49, max_input_size=11, hidden_size=0),
     49),
    ("K5-W5-N57-MI12-V13-B5-short",
     DraftRoundConfig(batch_size=5, node_top_k=5, max_tree_width=5, depths=4, verify_num=13,
                      max_verify_num=13, max_node_count=57, max_input_size=12, hidden_size=0),
     56),
]


@pytest.mark.parametrize("config, count", [case[1:] for case in SWEEP],
                         ids=[case[0] for case in SWEEP])
def test_budget_round_equals_golden(config, count):
    widths = budget_widths(count, node_top_k=config.node_top_k,
                           max_tree_width=config.max_tree_width, depths=config.depths,
                           max_input_size=config.max_input_size)
    widths.append(config.max_tree_width)  # the depth after the last meets the budget
    roots = np.arange(config.batch_size, dtype=np.int64) * 7 + 1
    engines, results = {}, {}
    for backend in ("rtl", "golden"):
        engine = engines[backend] = host.Engine(config, vocab_size=VOCAB, backend=backend,
                                                context_len=96, seed=39)
        results[backend] = engine.draft_round(synthetic_sampler(39, VOCAB, config.node_top_k),
                                              roots, widths=widths)
    assert_same(results["rtl"], results["golden"], "draft_round")
    assert results["golden"].cumu_count == count
    assert results["golden"].stop_reason in ("node_budget", "depths")
    _verify_and_read_back(engines, config, VOCAB)
