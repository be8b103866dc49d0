"""The engine's commands as a host issues them: argument records into card memory, command
payloads, the frontier records read back as ``golden.engine`` outputs (the memory formats of
docs/engine.md, packed and unpacked with ``hw.dataflow.records``), and the runs of words each
memory port moves for a command (what its ``PortCounters`` must count)."""

import numbers

import numpy as np

from golden.engine import Status
from hw.dataflow.engine import EngineParams, Opcode, StopReason
from hw.dataflow.records import ARGUMENT, FRONTIER, NODE, REQUEST, RESULT, STATE, TREE

__all__ = ["EngineHost", "STOP_REASONS", "run_beats", "card_regions", "card_memory_bytes",
           "logits_words", "row_pitch", "descriptor_words", "record_words",
           "completion_record"]

def descriptor_words(params: EngineParams, command: dict) -> list[int]:
    """``command`` (fields of ``params.command_layout``; those left out are 0) as the 32-bit
    words of a command-ring descriptor (``hw.dataflow.ring``: little-endian, padded)."""
    from hw.dataflow.ring import payload_words
    from sim.payload import layout_fields, pack

    fields = {name: 0 for name, _, _ in layout_fields(params.command_layout)}
    payload = pack(params.command_layout, 1, **{**fields, **command})[0]
    return [payload >> (32 * k) & 0xFFFF_FFFF for k in range(payload_words(
        params.command_layout))]


def record_words(params: EngineParams) -> int:
    """Words of a completion-ring record: the completion, then its sequence number."""
    from hw.dataflow.ring import payload_words

    return payload_words(params.completion_layout) + 1


def completion_record(params: EngineParams, raw) -> tuple[dict, int]:
    """A completion-ring record (``record_words`` unsigned words) as the completion's fields
    and its sequence number."""
    from sim.payload import layout_fields

    value = sum(int(word) << (32 * k) for k, word in enumerate(raw[:-1]))
    return ({name: value >> offset & ((1 << width) - 1)
             for name, offset, width in layout_fields(params.completion_layout)},
            int(raw[-1]))


#: ``completion.stop_reason`` -> the golden's ``stop_reason`` string.
STOP_REASONS = {StopReason.NONE: "", StopReason.WIDTH_ZERO: "width_zero",
                StopReason.DEPTHS: "depths", StopReason.NODE_BUDGET: "node_budget",
                StopReason.INPUT_BUDGET: "input_budget"}


def card_regions(params: EngineParams, rows: int, context: int) -> dict[str, int]:
    """The arrays :class:`EngineHost` places in card memory, in order: name -> 32-bit words
    (the ``target_logits`` rows come after them, :func:`logits_words`)."""
    p = params
    b, v = p.max_batch, p.max_verify_num
    return {
        "req_to_token": rows * context,
        "arguments": b * p.argument_words,
        "probas": b * p.max_candidates,
        "tokens": b * p.max_candidates,
        "frontier": b * p.max_tree_width * p.frontier_words,
        "verify_cache_locs": b * v,
        "verify_tree": b * v * p.tree_words,
        "tree_mask": -(-b * v * (context + v) // 4),
        "indptrs": 3 * (b + 1),
        "kv_indices": b * (context + v),
        "verify_requests": b * (p.verify_request_words + v),
        "verify_results": b * (p.verify_result_words + p.max_steps + v + -(-v // 32)),
        "verified_id": b * p.max_steps,
        "state": _state_words(p, p.max_node_count),
    }


def row_pitch(params: EngineParams, vocab_size: int) -> int:
    """Bytes between two ``target_logits`` rows: whole logits-port words."""
    port_bytes = params.logit_port_bits // 8
    element = 2 if params.logit_format == "bfloat16" else 4
    return -(-vocab_size * element // port_bytes) * port_bytes


def logits_words(params: EngineParams, vocab_size: int) -> int:
    """Words of the ``target_logits`` rows: ``max_batch * max_verify_num`` rows of
    :func:`row_pitch` bytes."""
    return params.max_batch * params.max_verify_num * row_pitch(params, vocab_size) // 4


def card_memory_bytes(params: EngineParams, rows: int, context: int, vocab_size: int) -> int:
    """Bytes of card memory :class:`EngineHost` needs: every region of :func:`card_regions`
    and the logits rows, each at its alignment (the memory's 64 bytes, a logits-port word)."""
    port_bytes = params.logit_port_bits // 8
    end = 0
    for words in card_regions(params, rows, context).values():
        end = -(-end // 64) * 64 + 4 * max(words, 1)
    end = -(-end // port_bytes) * port_bytes
    return end + 4 * logits_words(params, vocab_size)


class EngineHost:
    """Lays out one command's memory and decodes its results.

    Parameters
    ----------
    params : EngineParams
    memory : sim.dataflow.memory.CardMemory
    req_to_token : ndarray [P, C]
        The table's initial contents (int32 words at ``table_address``).
    """

    def __init__(self, params: EngineParams, memory, req_to_token):
        self.params = params
        self.memory = memory
        rows, context = req_to_token.shape
        self.table_shape = (rows, context)
        regions = card_regions(params, rows, context)
        address = {name: memory.allocate(name, words) for name, words in regions.items()}
        self.table_address = address["req_to_token"]
        memory.write_words(self.table_address, req_to_token.reshape(-1))
        self.arguments, self.probas, self.tokens = (
            address[name] for name in ("arguments", "probas", "tokens"))
        self.frontier, self.verify_locs, self.tree, self.mask = (
            address[name] for name in ("frontier", "verify_cache_locs", "verify_tree",
                                       "tree_mask"))
        self.indptrs, self.kv_indices, self.verify_requests = (
            address[name] for name in ("indptrs", "kv_indices", "verify_requests"))
        self.verify_results, self.verified_ids, self.state = (
            address[name] for name in ("verify_results", "verified_id", "state"))
        self.logits = None  # allocated by the first verify (its size follows V)
        self._tag = 0
        self._layouts = {}  # tag -> the runs of the command, by the stage that moves them
        self._round = None  # the requests of the last begin_round that passed (port_runs)
        self._verify_size = 0  # n of the last build_verify that passed (port_runs)

    def config(self, vocab_size, cost_per_node=0.0, watchdog_cycles=0):
        """The ``config`` port's value (``watchdog_cycles`` 0: the build's bound)."""
        rows, context = self.table_shape
        return {"req_to_token": self.table_address, "pool_rows": rows, "context_len": context,
                "vocab_size": vocab_size,
                "cost_per_node": int(np.float32(cost_per_node).view(np.uint32)),
                "watchdog_cycles": watchdog_cycles}

    def _command(self, opcode, **fields):
        self._tag = (self._tag + 1) & 0xFFFF
        return {"opcode": opcode, "tag": self._tag, **fields}

    def begin_round(self, slots, root_tokens, seq_lens, req_pool_indices, draft_cache_locs, *,
                    verify_num, depths):
        """Write the argument records; return the command."""
        b = len(slots)
        records = ARGUMENT.pack(b, slot=slots, root_token=root_tokens, seq_len=seq_lens,
                                req_pool_index=req_pool_indices,
                                tails={"kv_slots": draft_cache_locs})
        self.memory.write_words(self.arguments, records.reshape(-1))
        command = self._command(Opcode.BEGIN_ROUND, batch_size=b, verify_num=verify_num,
                                depths=depths, address0=self.arguments)
        p, context = self.params, self.table_shape[1]
        self._layouts[command["tag"]] = dict(
            records=[(self.arguments, b * p.argument_words)] if b <= p.max_batch else [],
            rows=[(self.table_address + 4 * int(pool) * context, int(seq))
                  for pool, seq in zip(req_pool_indices, seq_lens, strict=True)])
        return command

    def draft_depth(self, probas, tokens, *, width=None):
        """Write the draft model's top-K; return the command."""
        self.memory.write_words(self.probas, np.asarray(probas, np.float32).view(np.uint32)
                                .reshape(-1))
        self.memory.write_words(self.tokens, np.asarray(tokens).reshape(-1))
        command = self._command(Opcode.DRAFT_DEPTH, width=0 if width is None else width,
                                width_given=width is not None, address0=self.probas,
                                address1=self.tokens, address2=self.frontier)
        b, n = np.shape(probas) if np.ndim(probas) == 2 else (0, 0)
        self._layouts[command["tag"]] = dict(
            tokens=[(self.tokens, b * n)], probas=[(self.probas, b * n)], batch=b)
        return command

    def port_runs(self, step):
        """The runs ``(byte address, words)`` each port of ``params.port_names`` moves for
        ``step`` (a ``sim.dataflow.rounds.Step`` of a command this host built), from the
        golden's outcome; call it for every command, in order (it follows the round).

        * ``begin_round``: its argument records in (unless ``batch_size`` exceeds
          ``max_batch``: refused unread); once every check passed, each request's ``MI + 1``
          KV slots into its ``req_to_token`` row from ``seq_len``.
        * ``draft_depth``: nothing when refused for its phase or width; else every token in
          (checked before anything is written) and every probability beside them; when the
          tokens are good the next frontier's records out unless drafting stopped.
        * ``build_verify``: nothing when refused; else the verify KV slots and each request's
          ``req_to_token`` prefix (``seq_len`` words, for ``kv_indices``) in, the tree
          records, the three indptrs and ``kv_indices`` out on ``result_write``, the mask
          bytes (whole words) on ``mask_write``, the verify slots into each row from
          ``seq_len``.
        * ``load_tree``: nothing when refused for its phase, ``n`` or ``S``; else the verify
          KV slots and the tree records in (all, checked before the round changes).
        * ``verify``: nothing when refused for its phase; else the request records in (all,
          checked before anything is written); when they are good the result records and
          ``verified_id`` out, each request's accepted KV slots into its row, and
          ``rows_read`` logits rows on the ``logits`` ports (under the key ``logits``, their
          words in all: the rows are spread over the ports).
        * ``read_state``: nothing when refused; else the state record out on
          ``result_write`` (header, ``cumu_count`` node rows, the score rows).
        """
        p, command, status = self.params, step.command, step.status
        runs = {port: [] for port in p.port_names if not port.startswith("logits")}
        ok = status == Status.OK
        layout = self._layouts.get(command["tag"], {})
        opcode = command["opcode"]
        if opcode == Opcode.BEGIN_ROUND:
            runs["read"] = list(layout["records"])
            if ok:
                self._round = layout["rows"]
                runs["table_write"] = [(row + 4 * seq, p.kv_slots) for row, seq in self._round]
        elif opcode == Opcode.DRAFT_DEPTH and status in (Status.OK, Status.BAD_ARGUMENT):
            # the probabilities are read beside the tokens, before their check
            runs["read"] = list(layout["tokens"]) + list(layout["probas"])
            if ok and not step.stop_reason:
                runs["result_write"] = [(self.frontier, layout["batch"]
                                         * step.next_tree_width * p.frontier_words)]
        elif opcode == Opcode.BUILD_VERIFY and ok:
            n, rows = step.verify["n"], self._round
            self._verify_size = n
            runs["read"] = [(self.verify_locs, len(rows) * n), *rows]
            runs["result_write"] = [(self.tree, len(rows) * n * p.tree_words),
                                    (self.indptrs, 3 * (len(rows) + 1)),
                                    (self.kv_indices, int(step.verify["kv_indptr"][-1]))]
            runs["mask_write"] = [(self.mask, -(-int(step.verify["mask_indptr"][-1]) // 4))]
            runs["table_write"] = [(row + 4 * seq, n) for row, seq in rows]
        elif opcode == Opcode.LOAD_TREE and status in (Status.OK, Status.BAD_ARGUMENT):
            runs["read"] = list(layout["reads"])
            if ok:
                self._verify_size = layout["n"]
        elif opcode == Opcode.VERIFY and status in (Status.OK, Status.BAD_ARGUMENT):
            n, rows = self._verify_size, self._round
            runs["read"] = [(self.verify_requests, len(rows) * (p.verify_request_words + n))]
            if ok:
                run = step.run
                words = p.verify_result_words + run["steps"] + n + -(-n // 32)
                runs["result_write"] = [(self.verify_results, len(rows) * words),
                                        (self.verified_ids, len(run["verified_id"]))]
                runs["table_write"] = [(row + 4 * seq, int(accepted)) for (row, seq), accepted
                                       in zip(rows, run["accept_length"], strict=True)]
                runs["logits"] = [(self.logits, run["rows_read"] * command["row_pitch"] // 4)]
        elif opcode == Opcode.READ_STATE and ok:
            runs["result_write"] = [(self.state, _state_words(p, int(step.state.cumu_count)))]
        return runs

    def build_verify(self, tree_mask_mode, verify_cache_locs):
        """Write the verify forward's KV slots; return the command."""
        self.memory.write_words(self.verify_locs, np.asarray(verify_cache_locs).reshape(-1))
        return self._command(Opcode.BUILD_VERIFY, tree_mask_mode=tree_mask_mode,
                             address0=self.verify_locs, address1=self.tree,
                             address2=self.mask, address3=self.indptrs,
                             address4=self.kv_indices)

    def load_tree(self, draft_tokens, retrive_index, retrive_next_token, retrive_next_sibling,
                  verify_cache_locs, *, num_speculative_tokens):
        """Write a caller's tree records (``records.TREE``, ``position`` 0) and the verify
        forward's KV slots; return the ``load_tree`` command (arguments as
        ``golden.engine.Engine.load_tree``). A tree larger than the build's regions is not
        written (the engine refuses its ``n`` or batch before reading)."""
        p = self.params
        b, n = np.shape(retrive_index)
        fits = 1 <= n <= p.max_verify_num and b <= p.max_batch
        if fits:
            records = TREE.pack(b * n, retrive_index=np.reshape(retrive_index, -1),
                                retrive_next_token=np.reshape(retrive_next_token, -1),
                                retrive_next_sibling=np.reshape(retrive_next_sibling, -1),
                                position=0, draft_token=np.reshape(draft_tokens, -1))
            self.memory.write_words(self.tree, records.reshape(-1))
            self.memory.write_words(self.verify_locs, np.asarray(verify_cache_locs).reshape(-1))
        steps = num_speculative_tokens
        depths = int(steps) - 1 if isinstance(steps, numbers.Integral) and not isinstance(
            steps, bool) and 1 <= steps <= 256 else 0  # (0: refused, as the golden does)
        command = self._command(Opcode.LOAD_TREE, verify_num=n, depths=depths,
                                address0=self.tree, address1=self.verify_locs)
        checked = fits and 1 <= depths <= p.max_depths
        self._layouts[command["tag"]] = dict(
            reads=[(self.verify_locs, b * n), (self.tree, b * n * p.tree_words)] if checked
            else [], n=n)
        return command

    def row_pitch(self, vocab_size):
        """Bytes between two ``target_logits`` rows (:func:`row_pitch`)."""
        return row_pitch(self.params, vocab_size)

    def verify(self, target_logits, temperatures, max_seq_lens, *, eos_token_id=-1,
               uniform_samples=None, uniform_samples_for_final_sampling=None, seeds=None,
               threshold_single=1.0, threshold_acc=1.0, top_k=None, top_p=None):
        """Write the logits rows and the request records; return the command (arguments as
        ``golden.engine.Engine.verify``)."""
        p = self.params
        b, n, vocab = target_logits.shape
        pitch = self.row_pitch(vocab)
        if self.logits is None:
            self.logits = self.memory.allocate("target_logits", logits_words(p, vocab),
                                               align=p.logit_port_bits // 8)
        rows = np.asarray(target_logits, np.float32).reshape(b * n, vocab).view(np.uint32)
        if p.logit_format == "bfloat16":  # the top halves (exact for bfloat16 values)
            rows = (rows >> 16).astype("<u2")
        for row, values in enumerate(rows):
            self.memory.write_bytes(self.logits + row * pitch, values.astype(
                values.dtype.newbyteorder("<")).view(np.uint8))
        lfsr = seeds is not None
        draw = (np.asarray(seeds, np.int64) if lfsr
                else _f32_bits(uniform_samples_for_final_sampling))
        coins = np.zeros((b, n), np.uint32) if lfsr else _f32_bits(uniform_samples).reshape(b, n)
        records = REQUEST.pack(
            b, temperature=_f32_bits(temperatures), top_k=0 if top_k is None else top_k,
            top_p=_f32_bits(np.ones(b) if top_p is None else top_p), seed_or_final_coin=draw,
            max_seq_len=max_seq_lens, tails={"coins": coins})
        self.memory.write_words(self.verify_requests, records.reshape(-1))
        return self._command(
            Opcode.VERIFY, lfsr=lfsr, eos_token_id=eos_token_id,
            threshold_single=int(_f32_bits(threshold_single)),
            threshold_acc=int(_f32_bits(threshold_acc)),
            row_pitch=pitch, address0=self.verify_requests, address1=self.logits,
            address2=self.verify_results, address3=self.verified_ids)

    def run_outputs(self, batch_size, n, steps, verified_count):
        """The arrays of the last ``verify`` as the golden's outputs."""
        tails = {"accept_index": steps, "predicts": n, "evict_mask": -(-n // 32)}
        stride = RESULT.size + sum(tails.values())
        r = RESULT.unpack(self.memory.read_words(self.verify_results, batch_size * stride)
                          .reshape(batch_size, stride), **tails)
        return {
            "predicts": r["predicts"].reshape(-1), "accept_index": r["accept_index"],
            "accept_token_num": r["accept_token_num"], "accept_length": r["accept_length"],
            "verified_id": self.memory.read_words(self.verified_ids, verified_count),
            "next_root": r["next_root"], "evict_mask": _bits(r["evict_mask"], n).reshape(-1),
            "finished": r["finished"] != 0, "seq_lens": r["seq_len"],
            "active_slots": r["active_slot"], "active_inverse": r["active_inverse"],
            "nan_flags": r["nan_flag"] != 0, "rows_read": int(r["rows_read"].sum()),
        }

    def read_state(self, slot):
        """The ``read_state`` command of ``slot``."""
        return self._command(Opcode.READ_STATE, slot=slot, address0=self.state)

    def state_outputs(self):
        """The state record of the last ``read_state``: ``phase``, ``seq_len``,
        ``req_pool_index``, ``cumu_count`` and the ``tree`` rows (nodes: the valid prefix;
        scores as float32 bit patterns)."""
        p = self.params
        count = int(self.memory.read_words(self.state, STATE.size)[STATE.word("cumu_count")])
        tails = {"nodes": NODE.size * count, "sort_scores": p.max_verify_num,
                 "work_scores": p.max_verify_num + p.node_top_k}
        state = STATE.unpack(self.memory.read_words(self.state, _state_words(p, count)),
                             **tails)
        nodes = NODE.unpack(state["nodes"].reshape(count, NODE.size))
        return {"phase": int(state["phase"]), "seq_len": int(state["seq_len"]),
                "req_pool_index": int(state["req_pool_index"]), "cumu_count": count,
                "tree": {"cumu_tokens": nodes["token"], "cumu_scores": _word_bits(nodes["score"]),
                         "cumu_deltas": nodes["delta"], "prev_indexs": nodes["prev"],
                         "next_indexs": nodes["next"], "side_indexs": nodes["side"],
                         "sort_scores": _word_bits(state["sort_scores"]),
                         "work_scores": _word_bits(state["work_scores"])}}

    def verify_outputs(self, batch_size, n, tree_mask_mode):
        """The arrays of the last ``build_verify`` as the golden's outputs."""
        p = self.params
        tree = TREE.unpack(self.memory.read_words(self.tree, batch_size * n * p.tree_words)
                           .reshape(batch_size, n, p.tree_words))
        indptrs = self.memory.read_words(self.indptrs, 3 * (batch_size + 1)) \
            .reshape(3, batch_size + 1)
        mask_bytes = int(indptrs[2, -1])
        mask = self.memory.read_bytes(self.mask, mask_bytes)
        return {
            "n": n, "retrive_index": tree["retrive_index"],
            "retrive_next_token": tree["retrive_next_token"],
            "retrive_next_sibling": tree["retrive_next_sibling"],
            "positions": tree["position"].reshape(-1),
            "draft_tokens": tree["draft_token"].reshape(-1),
            "tree_mask": mask if tree_mask_mode == 2 else mask.astype(np.bool_),
            "qo_indptr": indptrs[0], "kv_indptr": indptrs[1], "mask_indptr": indptrs[2],
            "kv_indices": self.memory.read_words(self.kv_indices, int(indptrs[1, -1])),
        }

    def frontier_outputs(self, batch_size, width, input_count):
        """The frontier records of the last ``draft_depth`` as the golden's outputs."""
        p = self.params
        count = batch_size * width
        records = FRONTIER.unpack(
            self.memory.read_words(self.frontier, count * p.frontier_words)
            .reshape(batch_size, width, p.frontier_words), mask=p.mask_words)
        return {"tokens": records["token"], "parent_indices": records["parent_index"],
                "node_ids": records["node_id"], "positions": records["position"],
                "kv_slots": records["kv_slot"],
                "tree_mask": _bits(records["mask"], input_count + width - 1)}

    def req_to_token(self):
        """The table as it stands in memory."""
        rows, context = self.table_shape
        return self.memory.read_words(self.table_address, rows * context).reshape(rows, context)


def run_beats(runs, port_bits: int) -> int:
    """Data beats a ``WordReader``/``WordWriter`` of ``port_bits`` moves for ``runs`` (``(byte
    address, words)``): a run covers the port words from its first word's to its last's."""
    lanes = port_bits // 32
    return sum(-(-(address // 4 % lanes + words) // lanes) for address, words in runs if words)


def _state_words(params: EngineParams, cumu_count: int) -> int:
    """Words of a ``read_state`` record with ``cumu_count`` node records."""
    return STATE.size + NODE.size * cumu_count + 2 * params.max_verify_num + params.node_top_k


def _bits(words, count: int) -> np.ndarray:
    """Bits ``0 .. count - 1`` of rows of 32-bit words (``[..., words]``; bit ``i`` at bit
    ``i % 32`` of word ``i // 32``) as ``bool [..., count]``."""
    words = np.asarray(words, np.int64) & 0xFFFF_FFFF
    index = np.arange(count)
    return ((words[..., index // 32] >> (index % 32)) & 1).astype(np.bool_)


def _f32_bits(values) -> np.ndarray:
    """float32 bit patterns of ``values``."""
    return np.asarray(values, np.float32).view(np.uint32)


def _word_bits(values) -> np.ndarray:
    """Memory words (read sign-extended) as their unsigned 32 bits."""
    return np.asarray(values, np.int64) & 0xFFFF_FFFF
