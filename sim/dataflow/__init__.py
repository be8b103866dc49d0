"""Simulation target of the persistent engine ``hw.dataflow.engine.DraftEngine``: ``dataflow``
(`make sim KERNEL=dataflow`).

``host`` lays out a command's argument records and arrays in card memory, builds the command
payloads, decodes the records the engine writes and says which runs of words each memory port moves
for a command (``EngineHost.port_runs``); ``memory`` is the card memory with its port
servers (random latency and stalls; an Amaranth and a cocotb front end on one bookkeeping);
``rounds`` draws seeded rounds with bad commands and runs them on ``golden.engine.Engine``
(``Scenario``, ``check_step``); ``cases`` reads command-sequence case files (``CASE=``);
``tb`` is the cocotb testbench (phases ``figures``, ``random``; ``case``).
"""

from ..targets import SimTarget

__all__ = ["PARAMETERS", "TARGET", "TARGETS", "EngineTarget"]

# The DUT of `make sim KERNEL=dataflow`: the small build of tests/test_dataflow_engine.py (K = 2,
# W <= 2, 4 slots, MI = 6, K1's smallest sorter: 64 lanes) on 64-bit ports (two words a beat,
# so runs start and end mid-beat).
PARAMETERS = {"node_top_k": 2, "max_tree_width": 2, "max_depths": 4, "max_verify_num": 6,
              "max_node_count": 24, "max_input_size": 6, "max_batch": 4, "max_pool_rows": 16,
              "address_width": 20, "port_bits": 64, "max_seq_len": 64, "max_vocab_size": 128,
              "logit_port_bits": 64}


class EngineTarget(SimTarget):
    def case_parameters(self, case, parameters):
        """The build ``parameters`` with the case's ``parameters`` entries (a case may name a
        build of its own). The file is parsed and its sequence run on the golden engine
        first, so that a malformed line or an array of the wrong shape fails with its file and
        line (``ValueError``) before anything is built."""
        from hw.dataflow.engine import EngineParams

        from .cases import read_case
        from .memory import CardMemory
        from .rounds import Scenario

        replay = read_case(case)
        parameters = {**parameters, **replay.parameters}
        scenario = Scenario(EngineParams(**parameters), CardMemory(self.config["memory_bytes"]),
                            seed=replay.seed, **{"bad_commands": self.config["bad_commands"],
                                                 "vocab_size": self.config["vocab_size"],
                                                 **replay.config})
        for _ in scenario.replay(replay.entries, where=str(replay.path)):
            pass
        return parameters


TARGET = EngineTarget(
    "dataflow",
    "persistent engine (begin_round, draft_depth, build_verify, verify, read_state) vs "
    "golden.engine: random rounds with bad commands, memory latency and stalls, port "
    "counters; CASE= command sequences",
    component="hw.dataflow.engine:DraftEngine",
    parameters=PARAMETERS,
    config={
        "figures_rounds": 40,  # rounds of the unstressed phase
        "random_rounds": 160,  # rounds of the stressed phase
        "figure_latency": 4,  # the fixed memory latency of the figures phase (clocks)
        "latency": [1, 8],  # memory latency range of the stressed phase (clocks)
        "stall": 0.3,  # probability of a stalled memory channel per clock (stressed)
        "bad_commands": 0.2,  # probability of a bad command before each good one
        "vocab_size": 32,  # V of the rounds (a verify reads its logits rows whole)
        "memory_bytes": 1 << 18,
    },
    phases=("figures", "random"),
)

TARGETS = [TARGET]
