"""The ``rtl`` backend: the Verilated ``hw.dataflow.engine.PersistentEngine`` run in process
(docs/host.md, "The rtl backend").

:class:`RtlBackend` builds (once per parameter set, cached under ``build/verilated/``) the
engine's Verilator model as a shared library (``sim.verilated``), keeps the card memory
(``sim.dataflow.memory.CardMemory``, served to the engine's ports by its clocked front end)
with the ``req_to_token`` table in it, and runs each command as a host would: the argument
records and arrays into memory (``sim.dataflow.host.EngineHost``), the command on the
``command`` stream, clocks until the ``completion``, the records the engine wrote decoded into
the golden's :class:`golden.engine.Completion`. It reports each command's ``cycles`` (command
accepted to completion taken, both clocks counted) and ``bytes`` (the ``bytes`` counters of
every memory port, summed, their change over the command).
"""

import sys
from dataclasses import dataclass

import numpy as np

from golden.engine import Completion, EngineConfig, Phase, SlotState, Status
from sim.dataflow.verilated import verilated_library

from .backend import Backend, CommandResult
from .checks import check_integer

__all__ = ["RtlBackend", "engine_parameters"]

# The build's fixed choices: the small, fast ports of sim/dataflow's PARAMETERS (64-bit memory
# ports, two 64-bit logits ports of float32), 32-bit addresses (a card memory up to 4 GiB).
PORT_BITS = 64
LOGIT_PORT_BITS = 64
ADDRESS_WIDTH = 32

# The golden's output dtypes (the hardware's words are decoded as int64).
_VERIFY_DTYPES = {"predicts": np.int32, "accept_index": np.int32,
                  "accept_token_num": np.int32, "accept_length": np.int32,
                  "verified_id": np.int32, "next_root": np.int64, "evict_mask": np.bool_,
                  "finished": np.bool_, "seq_lens": np.int64, "active_slots": np.int64,
                  "active_inverse": np.int64, "nan_flags": np.bool_}
_NODE_ROWS = {"cumu_tokens": -1, "cumu_scores": 0.0, "cumu_deltas": -1, "prev_indexs": -1,
              "next_indexs": -1, "side_indexs": -1}
_INT32 = (-(1 << 31), (1 << 31) - 1)


def _power_of_two(value: int, least: int) -> int:
    return max(least, 1 << max(0, int(value) - 1).bit_length())


def engine_parameters(config: EngineConfig, *, pool_rows: int, context_len: int) -> dict:
    """The ``EngineParams`` of the hardware build for ``config``: the round's shape as the
    golden engine's (K, width cap, depths, ``MAXV``, ``MAXN``, ``MI``, sort width), and
    capacities the host cannot tell apart, rounded up to powers of two so that nearby
    configurations share a build: ``max_batch`` (at least 4), ``max_pool_rows`` (at least
    16), ``max_seq_len`` (at least 4096, at least ``context_len``), ``max_vocab_size`` (at
    least 4096); 64-bit memory ports, two 64-bit logits ports of float32 logits, 32-bit
    addresses."""
    return dict(
        node_top_k=config.node_top_k, max_tree_width=config.max_tree_width,
        max_depths=config.max_depths, max_verify_num=config.max_verify_num,
        max_node_count=config.max_node_count, max_input_size=config.max_input_size,
        sort_width=config.sort_width,
        max_batch=_power_of_two(config.max_batch, 4),
        max_pool_rows=_power_of_two(pool_rows, 16),
        max_seq_len=_power_of_two(context_len, 4096),
        max_vocab_size=_power_of_two(config.vocab_size, 4096),
        address_width=ADDRESS_WIDTH, port_bits=PORT_BITS, logit_ports=2,
        logit_port_bits=LOGIT_PORT_BITS, logit_format="float32")


@dataclass
class _Round:
    """What the backend keeps of the round in flight to decode the engine's records."""

    batch: int = 0
    input_count: int = 1  # draft inputs so far, the root included
    depths_run: int = 0
    verify_size: int = 0


class RtlBackend(Backend):
    """The Verilated persistent engine behind :class:`host.Backend`.

    Parameters
    ----------
    config : golden.engine.EngineConfig
        The golden engine's configuration; the hardware build follows from it
        (:func:`engine_parameters`), ``vocab_size`` and ``cost_per_node`` go to the
        engine's ``config`` port.
    req_to_token : ndarray i64 [P, C]
        The table's initial contents, copied into the card memory (int32 words: every entry
        must fit 32 bits). :attr:`req_to_token` reads it back after each command.
    hot_token_id : None
        Must be None: the hardware build has no draft-to-target vocabulary map
        (``ValueError`` otherwise).
    memory_latency : int
        Clocks from a memory request to its answer (every port, fixed, no stalls).
    watchdog_cycles : int
        The engine's watchdog bound (``config.watchdog_cycles``; 0: the build's,
        ``EngineParams.watchdog_cycles``): a command cut off by it completes with
        ``Status.WATCHDOG``, reported as such.
    timeout_cycles : int or None
        Clocks a command may take before ``RuntimeError`` (a hung engine whose watchdog did
        not complete it either); None: the watchdog's bound and 1,024 clocks more.
    log : callable or None
        Progress messages of the Verilator build (None: standard error); a cached build
        says nothing.
    """

    name = "rtl"

    def __init__(self, config: EngineConfig, req_to_token: np.ndarray, *, hot_token_id=None,
                 memory_latency: int = 4, watchdog_cycles: int = 0,
                 timeout_cycles: int | None = None, log=None):
        from hw.dataflow.engine import EngineParams

        if hot_token_id is not None:
            raise ValueError("`hot_token_id`: the rtl backend's engine build has no "
                             "draft-to-target vocabulary map; use backend='golden'")
        if not isinstance(config, EngineConfig):
            raise ValueError(f"`config` must be a golden.engine.EngineConfig, not "
                             f"{type(config).__name__}")
        check_integer("watchdog_cycles", watchdog_cycles, 0, (1 << 32) - 1)  # a config word
        check_integer("memory_latency", memory_latency, 0, 1 << 16)
        table = np.asarray(req_to_token)
        if table.ndim != 2 or table.dtype.kind not in "iu":
            raise ValueError("`req_to_token` must be an integer array [pool rows, context]")
        if table.size and (table.min() < _INT32[0] or table.max() > _INT32[1]):
            raise ValueError("`req_to_token` entries must fit int32 (the engine's table)")
        rows, context = table.shape
        self.config = config
        parameters = engine_parameters(config, pool_rows=rows, context_len=context)
        self.params = EngineParams(**parameters)
        self._memory_latency = memory_latency
        self._open(parameters, table.shape, log if log is not None else _stderr)
        self._watchdog_cycles = watchdog_cycles
        self.timeout_cycles = (watchdog_cycles or self.params.watchdog_cycles) + 1024 \
            if timeout_cycles is None else timeout_cycles
        self._rounds = []  # the commands that made the state of the slots: see ``restore``
        self._replaying = False
        self._before = None  # the table before the last begin_round
        self._start(table.astype(np.int64))

    def _open(self, parameters: dict, table_shape, log) -> None:
        """The hardware: the engine's model of the build ``parameters`` (built or found)."""
        from sim.verilated import Model

        self.library = verilated_library("engine", tuple(sorted(parameters.items())), log)
        self.model = Model(self.library)

    def _start(self, table: np.ndarray):
        """A fresh card memory holding ``table``, the model reset and configured."""
        from hw.dataflow.engine import counter_layout
        from sim.dataflow.host import EngineHost, card_memory_bytes
        from sim.dataflow.memory import CardMemory
        from sim.payload import layout_fields, pack

        model, params, config = self.model, self.params, self.config
        rows, context = table.shape
        latency = self._memory_latency
        self.memory = CardMemory(card_memory_bytes(params, rows, context, config.vocab_size),
                                 latency=(latency, latency), stall=0.0)
        self.host = EngineHost(params, self.memory, table)
        self.ports = self.memory.engine_ports(model, params, front="clocked")
        self._command_fields = {name: 0 for name, _, _ in layout_fields(params.command_layout)}
        self._completion = layout_fields(params.completion_layout)
        self._pack = lambda **fields: pack(params.command_layout, 1, **fields)[0]
        size = counter_layout.size
        self._bytes_field = [(index * size + offset, width)
                             for index in range(len(params.port_names))
                             for name, offset, width in layout_fields(counter_layout)
                             if name == "bytes"]
        model.set("command__valid", 0)
        model.set("completion__ready", 0)
        for port in self.ports:
            port.drive()
        model.reset()
        model.set("config", pack(params.config_layout, 1, **self.host.config(
            config.vocab_size, config.cost_per_node, self._watchdog_cycles))[0])
        model.eval()
        self._round = _Round()
        self._table = self.host.req_to_token()

    # --- the Backend interface -----------------------------------------------------------------

    @property
    def req_to_token(self) -> np.ndarray:
        return self._table

    def snapshot(self):
        """The last round's number and its commands so far, and the table (rounds no slot's
        state depends on any more are forgotten first)."""
        self._forget_rounds()
        last = self._rounds[-1] if self._rounds else {"number": -1, "commands": []}
        return last["number"], len(last["commands"]), self._table.copy()

    def restore(self, snapshot) -> None:
        """The hardware has no command that writes a slot's state, so the model is reset and
        the commands that made the snapshot's state run again: from the oldest round that is
        still some slot's last (no slot's state depends on earlier ones), on a card memory
        holding the table as it was when that round began; the replay's table is then checked
        against the snapshot's. Exact (the engine is deterministic); it costs the replayed
        rounds' clocks (usually one round's). Only the latest snapshot can be restored."""
        number, commands, table = snapshot
        kept = [record for record in self._rounds if record["number"] <= number]
        if kept and kept[-1]["number"] != number:
            raise RuntimeError("rtl backend: the snapshot's rounds were forgotten")
        if kept:
            kept[-1] = {**kept[-1], "commands": kept[-1]["commands"][:commands]}
        self._start(kept[0]["table"] if kept else table)
        self._replaying = True
        try:
            for record in kept:
                for name, args, kwargs in record["commands"]:
                    getattr(self, name)(*args, **kwargs)
        finally:
            self._replaying = False
        self._rounds = kept
        if not np.array_equal(self._table, table):
            raise RuntimeError("rtl backend: the replayed commands left a different "
                               "req_to_token than the snapshot's")

    def _record(self, name, result: CommandResult, *args, **kwargs) -> CommandResult:
        """Keep a command that changed the engine's state (for :meth:`restore`)."""
        if self._replaying or not result.completion.ok:
            return result
        copies = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
        kept = {k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v
                for k, v in kwargs.items()}
        if name == "begin_round":
            number = self._rounds[-1]["number"] + 1 if self._rounds else 0
            self._rounds.append({"number": number, "slots": {int(s) for s in args[0]},
                                 "table": self._before, "commands": []})
        self._rounds[-1]["commands"].append((name, copies, kept))
        return result

    def _forget_rounds(self):
        """Drop the rounds older than the oldest that is some slot's last."""
        last = {}
        for index, record in enumerate(self._rounds):
            for slot in record["slots"]:
                last[slot] = index
        del self._rounds[:min(last.values(), default=0)]

    def begin_round(self, slots, root_tokens, seq_lens, req_pool_indices, draft_cache_locs, *,
                    verify_num, depths) -> CommandResult:
        self._before = self._table.copy()
        return self._record("begin_round", self._begin_round(
            slots, root_tokens, seq_lens, req_pool_indices, draft_cache_locs,
            verify_num=verify_num, depths=depths), slots, root_tokens, seq_lens,
            req_pool_indices, draft_cache_locs, verify_num=verify_num, depths=depths)

    def draft_depth(self, probas, tokens, *, width=None) -> CommandResult:
        return self._record("draft_depth", self._draft_depth(probas, tokens, width=width),
                            probas, tokens, width=width)

    def build_verify(self, tree_mask_mode, verify_cache_locs) -> CommandResult:
        return self._record("build_verify", self._build_verify(
            tree_mask_mode, verify_cache_locs), tree_mask_mode, verify_cache_locs)

    def load_tree(self, draft_tokens, retrive_index, retrive_next_token, retrive_next_sibling,
                  verify_cache_locs, *, num_speculative_tokens) -> CommandResult:
        args = (draft_tokens, retrive_index, retrive_next_token, retrive_next_sibling,
                verify_cache_locs)
        return self._record("load_tree", self._load_tree(
            *args, num_speculative_tokens=num_speculative_tokens), *args,
            num_speculative_tokens=num_speculative_tokens)

    def verify(self, target_logits, temperatures, max_seq_lens, **settings) -> CommandResult:
        return self._record("verify", self._verify(
            target_logits, temperatures, max_seq_lens, **settings), target_logits,
            temperatures, max_seq_lens, **settings)

    def _begin_round(self, slots, root_tokens, seq_lens, req_pool_indices, draft_cache_locs, *,
                     verify_num, depths) -> CommandResult:
        command = self.host.begin_round(
            np.asarray(slots), np.asarray(root_tokens), np.asarray(seq_lens),
            np.asarray(req_pool_indices), np.asarray(draft_cache_locs),
            verify_num=int(verify_num),
            depths=self.config.max_depths if depths is None else int(depths))
        done, cycles, data = self._run("begin_round", command)
        outputs = {}
        if done["status"] == Status.OK:
            self._round = _Round(batch=len(slots))
            outputs = {"batch_size": len(slots)}
        return self._result("begin_round", done, outputs, cycles, data)

    def _draft_depth(self, probas, tokens, *, width=None) -> CommandResult:
        command = self.host.draft_depth(probas, tokens, width=width)
        done, cycles, data = self._run("draft_depth", command)
        outputs = {}
        if done["status"] == Status.OK:
            r = self._round
            r.depths_run += 1
            b, next_width = r.batch, int(done["next_tree_width"])
            from sim.dataflow.host import STOP_REASONS
            stop = STOP_REASONS[done["stop_reason"]]
            outputs = {"next_tree_width": next_width, "stop_reason": stop}
            if stop or b == 0:
                empty = np.zeros((b, 0), np.int64)
                outputs.update(tokens=empty, parent_indices=empty, node_ids=empty,
                               positions=empty, tree_mask=np.zeros((b, 0, 0), np.bool_),
                               kv_slots=empty)
            else:
                outputs.update(self.host.frontier_outputs(b, next_width, r.input_count))
                r.input_count += next_width
        return self._result("draft_depth", done, outputs, cycles, data)

    def _build_verify(self, tree_mask_mode, verify_cache_locs) -> CommandResult:
        command = self.host.build_verify(tree_mask_mode, verify_cache_locs)
        done, cycles, data = self._run("build_verify", command)
        outputs = {}
        if done["status"] == Status.OK:
            r = self._round
            r.verify_size = n = int(done["verify_size"])
            outputs = self.host.verify_outputs(r.batch, n, int(tree_mask_mode))
        return self._result("build_verify", done, outputs, cycles, data)

    def _load_tree(self, *tree, num_speculative_tokens) -> CommandResult:
        command = self.host.load_tree(*(np.asarray(array) for array in tree),
                                      num_speculative_tokens=num_speculative_tokens)
        done, cycles, data = self._run("load_tree", command)
        outputs = {}
        if done["status"] == Status.OK:
            r = self._round
            r.verify_size = n = int(done["verify_size"])
            r.depths_run = int(num_speculative_tokens) - 1
            outputs = {"n": n}
        return self._result("load_tree", done, outputs, cycles, data)

    def _verify(self, target_logits, temperatures, max_seq_lens, **settings) -> CommandResult:
        command = self.host.verify(target_logits, temperatures, max_seq_lens, **settings)
        done, cycles, data = self._run("verify", command)
        outputs = {}
        if done["status"] == Status.OK:
            r = self._round
            b, steps = r.batch, r.depths_run + 1
            head = self.host.run_outputs(b, r.verify_size, steps, 0)
            got = self.host.run_outputs(b, r.verify_size, steps, int(head["accept_length"].sum()))
            outputs = {name: np.asarray(got[name]).astype(dtype)
                       for name, dtype in _VERIFY_DTYPES.items()}
            outputs["active_count"] = np.array([done["active_count"]], np.int64)
            outputs["rows_read"] = int(done["rows_read"])
            self._round = _Round()
        return self._result("verify", done, outputs, cycles, data)

    def read_state(self, slot) -> CommandResult:
        command = self.host.read_state(int(slot))
        done, cycles, data = self._run("read_state", command)
        outputs = {}
        if done["status"] == Status.OK:
            got = self.host.state_outputs()
            count, maxn = got["cumu_count"], self.params.max_node_count
            tree = {}
            for name, fill in _NODE_ROWS.items():
                values = np.asarray(got["tree"][name], np.int64)
                if isinstance(fill, float):
                    row = np.zeros(maxn, np.float32)
                    row[:count] = values.astype(np.uint32).view(np.float32)
                else:
                    row = np.full(maxn, fill, np.int64)
                    row[:count] = values
                tree[name] = row
            for name in ("sort_scores", "work_scores"):
                tree[name] = np.asarray(got["tree"][name], np.int64).astype(np.uint32) \
                    .view(np.float32)
            outputs = {"state": SlotState(Phase(got["phase"]), got["seq_len"],
                                          got["req_pool_index"], count, tree)}
        return self._result("read_state", done, outputs, cycles, data)

    # --- running a command ---------------------------------------------------------------------

    def _result(self, name, done, outputs, cycles, data) -> CommandResult:
        status = Status(done["status"])
        message = "" if status == Status.OK else f"the engine refused {name} ({status.name})"
        if status == Status.WATCHDOG:
            message = (f"the engine's watchdog cut {name} off after {cycles} clocks "
                       f"(WATCHDOG): the round in flight is abandoned")
            self._round = _Round()
        return CommandResult(Completion(name, status, message, outputs if status == Status.OK
                                        else {}), cycles=cycles, bytes=data)

    def _bytes(self) -> int:
        """The ``bytes`` counters of every port, summed, as they stand."""
        counters = self.model.get("counters")
        return sum(counters >> offset & ((1 << width) - 1)
                   for offset, width in self._bytes_field)

    def _run(self, name, command) -> tuple[dict, int, int]:
        """Send ``command``, clock until its completion; return the completion's fields, the
        clocks from the command's acceptance to the completion's (both counted) and the
        bytes the ports moved."""
        model, ports = self.model, self.ports
        before = self._bytes()
        model.set("command__payload", self._pack(**{**self._command_fields, **command}))
        model.set("command__valid", 1)
        model.set("completion__ready", 1)
        accepted = None
        fields = None
        for cycle in range(self.timeout_cycles):
            for port in ports:
                port.drive()
            model.eval()
            if accepted is None and model.get("command__ready"):
                accepted = cycle
            done = accepted is not None and model.get("completion__valid")
            if done:
                payload = model.get("completion__payload")
                fields = {field: payload >> offset & ((1 << width) - 1)
                          for field, offset, width in self._completion}
            for port in ports:
                port.sample()
            model.tick()
            if accepted == cycle:
                model.set("command__valid", 0)
            if done:
                break
        else:
            raise RuntimeError(f"rtl backend: {name} did not complete within "
                               f"{self.timeout_cycles} clocks")
        model.set("completion__ready", 0)
        for port in ports:
            port.drive()
        model.eval()
        busy = [port.name for port in ports if not port.done]
        if busy and fields["status"] != Status.WATCHDOG:  # (a cut-off command's ports hang)
            raise RuntimeError(f"rtl backend: {name} completed with memory bursts in flight "
                               f"on {', '.join(busy)}")
        if fields["tag"] != command["tag"]:
            raise RuntimeError(f"rtl backend: completion tag {fields['tag']} for {name}, sent "
                               f"{command['tag']}")
        self._table = self.host.req_to_token()
        return fields, cycle - accepted + 1, self._bytes() - before


def _stderr(message):
    """The default build log: standard error (a build is announced; a cached one is not)."""
    print(f"host rtl backend: {message}", file=sys.stderr)
