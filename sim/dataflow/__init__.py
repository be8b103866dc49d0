"""Simulation target of the persistent engine ``hw.dataflow.engine.PersistentEngine``: ``dataflow``
(`make sim KERNEL=dataflow`).

``host`` lays out a command's argument records and arrays in card memory, builds the command
payloads, decodes the records the engine writes and says which runs of words each memory port moves
for a command (``EngineHost.port_runs``); ``memory`` is the card memory with its port
servers (random latency and stalls; an Amaranth and a cocotb front end on one bookkeeping);
``rounds`` draws seeded rounds with bad commands and runs them on ``golden.engine.Engine``
(``Scenario``, ``check_step``); ``cases`` reads command-sequence case files (``CASE=``);
``tb`` is the cocotb testbench (phases ``figures``, ``random``; ``case``); ``measure`` the
cycle budget's measurement on the in-process Verilated model; ``profile``
(``python -m sim.dataflow.profile``) prints the clocks a contract round spends in each state of
every FSM.
"""

from ..targets import SimTarget, check_limits, contract_spec, draft_round_node_count

__all__ = ["PARAMETERS", "TARGET", "TARGETS", "EngineTarget"]

# The DUT of `make sim KERNEL=dataflow`: the small build of tests/test_dataflow_engine.py (K = 2,
# W <= 2, 4 slots, MI = 6, K1's smallest sorter: 64 lanes) on 64-bit ports (two words a beat,
# so runs start and end mid-beat).
PARAMETERS = {"node_top_k": 2, "max_tree_width": 2, "max_depths": 4, "max_verify_num": 6,
              "max_node_count": 24, "max_input_size": 6, "max_batch": 4, "max_pool_rows": 16,
              "address_width": 20, "port_bits": 64, "max_seq_len": 64, "max_vocab_size": 128,
              "logit_port_bits": 64}


#: The build of the cycle-budget measurement, sized per contract point by
#: ``EngineTarget.measure_parameters``: the fused verify of ``sim/tree_verify``'s measurement
#: (two 256-bit ports of bfloat16 logits), 256-bit memory ports, 8 request slots and 16
#: ``req_to_token`` rows (or the point's batch of each, when larger).
MEASURE_BUILD = {"max_batch": 8, "max_pool_rows": 16, "address_width": 40, "port_bits": 256,
                 "max_seq_len": 1024, "max_vocab_size": 131072, "logit_ports": 2,
                 "logit_port_bits": 256, "logit_format": "bfloat16"}
#: The sequence length of every request of the measurement, and its table's row length.
MEASURE_SEQ_LEN, MEASURE_CONTEXT = 256, 1024
#: The memory read latencies (clocks) the measurement runs its round at: the first is the
#: budget's figure (HBM through the switch at 300 MHz), the others are for comparison.
MEASURE_LATENCIES = (64, 4)


class EngineTarget(SimTarget):
    def measure_parameters(self, point):
        """One draft round and its verify step at a benchmark contract point, at each memory
        latency of ``MEASURE_LATENCIES``, on a build sized for the point (``MEASURE_BUILD``
        with the point's K, W, depths, ``verify_num``,
        its round's node count and ``depth * W`` draft inputs; K1's sorter of 64 lanes, 128
        when ``W * K > 64``)."""
        k, w, depth = point["node_top_k"], point["tree_width"], point["depth"]
        batch = point["batch"]
        parameters = {**MEASURE_BUILD, "max_batch": max(MEASURE_BUILD["max_batch"], batch),
                      "max_pool_rows": max(MEASURE_BUILD["max_pool_rows"], batch),
                      "node_top_k": k, "max_tree_width": w,
                      "max_depths": depth, "max_verify_num": point["verify_num"],
                      "max_node_count": draft_round_node_count(k, w, depth),
                      "max_input_size": depth * w, "sort_width": 64 if w * k <= 64 else 128}
        check_limits(parameters, {"V": (point["vocab"], "max_vocab_size")})
        pitch = -(-point["vocab"] * 2 // 32) * 32
        rows = parameters["max_batch"] * point["verify_num"]
        return parameters, {"point": contract_spec(point), "seq_len": MEASURE_SEQ_LEN,
                            "context_len": MEASURE_CONTEXT,
                            "latencies": list(MEASURE_LATENCIES),
                            "memory_bytes": rows * pitch + (16 << 20)}


    def measure(self, point, *, seed, log_file=None):
        """The cycle budget of one contract point, measured on the in-process Verilated model
        (``sim.dataflow.measure``: the testbench's checks without cocotb, several times
        faster) of ``measure_parameters(point)``; progress goes to ``log_file``."""
        from .measure import measure_point

        parameters, spec = self.measure_parameters(point)
        if log_file is None:
            return measure_point(parameters, spec, seed=seed, log=lambda line: None)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "w") as log:
            return measure_point(parameters, spec, seed=seed,
                                 log=lambda line: print(line, file=log, flush=True))

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
    "persistent engine (begin_round, draft_depth, build_verify, load_tree, verify, "
    "read_state) vs "
    "golden.engine: random rounds with bad commands, memory latency and stalls, port "
    "counters; CASE= command sequences",
    component="hw.dataflow.engine:PersistentEngine",
    parameters=PARAMETERS,
    config={
        "figures_rounds": 40,  # rounds of the unstressed phase
        "random_rounds": 160,  # rounds of the stressed phase
        "figure_latency": 4,  # the fixed memory latency of the figures phase (clocks)
        "latency": [1, 8],  # memory latency range of the stressed phase (clocks)
        "stall": 0.3,  # probability of a stalled memory channel per clock (stressed)
        "bad_commands": 0.2,  # probability of a bad command before each good one
        "load_trees": 0.2,  # share of the stressed rounds that verify a caller's tree
        "vocab_size": 32,  # V of the rounds (a verify reads its logits rows whole)
        "context_len": 48,  # C, words per req_to_token row (room for a round past seq_len)
        "memory_bytes": 1 << 18,
    },
    phases=("figures", "random"),
)

TARGETS = [TARGET]
