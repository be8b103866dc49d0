"""The engine's commands as a host issues them: argument records into card memory, command
payloads, and the frontier records read back as ``golden.engine`` outputs (the memory formats
of docs/engine.md)."""

import numpy as np

from hw.dataflow.engine import EngineParams, Opcode, StopReason

__all__ = ["EngineHost", "STOP_REASONS"]

#: ``completion.stop_reason`` -> the golden's ``stop_reason`` string.
STOP_REASONS = {StopReason.NONE: "", StopReason.WIDTH_ZERO: "width_zero",
                StopReason.DEPTHS: "depths", StopReason.NODE_BUDGET: "node_budget",
                StopReason.INPUT_BUDGET: "input_budget"}


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
        self.table_address = memory.allocate("req_to_token", rows * context)
        memory.write_words(self.table_address, req_to_token.reshape(-1))
        p = params
        self.arguments = memory.allocate("arguments", p.max_batch * p.argument_words)
        self.probas = memory.allocate("probas", p.max_batch * p.max_candidates)
        self.tokens = memory.allocate("tokens", p.max_batch * p.max_candidates)
        self.frontier = memory.allocate("frontier",
                                        p.max_batch * p.max_tree_width * p.frontier_words)
        self._tag = 0

    def config(self, vocab_size, cost_per_node=0.0):
        """The ``config`` port's value."""
        rows, context = self.table_shape
        return {"req_to_token": self.table_address, "pool_rows": rows, "context_len": context,
                "vocab_size": vocab_size,
                "cost_per_node": int(np.float32(cost_per_node).view(np.uint32))}

    def _command(self, opcode, **fields):
        self._tag = (self._tag + 1) & 0xFFFF
        return {"opcode": opcode, "tag": self._tag, **fields}

    def begin_round(self, slots, root_tokens, seq_lens, req_pool_indices, draft_cache_locs, *,
                    verify_num, depths):
        """Write the argument records; return the command."""
        b = len(slots)
        records = np.column_stack([slots, root_tokens, seq_lens, req_pool_indices,
                                   draft_cache_locs]).astype(np.int64) if b else \
            np.zeros((0, self.params.argument_words), np.int64)
        self.memory.write_words(self.arguments, records.reshape(-1))
        return self._command(Opcode.BEGIN_ROUND, batch_size=b, verify_num=verify_num,
                             depths=depths, address0=self.arguments)

    def draft_depth(self, probas, tokens, *, width=None):
        """Write the draft model's top-K; return the command."""
        self.memory.write_words(self.probas, np.asarray(probas, np.float32).view(np.uint32)
                                .reshape(-1))
        self.memory.write_words(self.tokens, np.asarray(tokens).reshape(-1))
        return self._command(Opcode.DRAFT_DEPTH, width=0 if width is None else width,
                             width_given=width is not None, address0=self.probas,
                             address1=self.tokens, address2=self.frontier)

    def frontier_outputs(self, batch_size, width, input_count):
        """The frontier records of the last ``draft_depth`` as the golden's outputs."""
        p = self.params
        count = batch_size * width
        words = self.memory.read_words(self.frontier, count * p.frontier_words) \
            .reshape(batch_size, width, p.frontier_words)
        columns = input_count + width - 1
        mask_bits = words[:, :, 5:].astype(np.uint32)
        mask = np.zeros((batch_size, width, columns), np.bool_)
        for column in range(columns):
            mask[:, :, column] = (mask_bits[:, :, column // 32] >> (column % 32)) & 1
        return {"tokens": words[:, :, 0], "parent_indices": words[:, :, 1],
                "node_ids": words[:, :, 2], "positions": words[:, :, 3],
                "kv_slots": words[:, :, 4], "tree_mask": mask}

    def req_to_token(self):
        """The table as it stands in memory."""
        rows, context = self.table_shape
        return self.memory.read_words(self.table_address, rows * context).reshape(rows, context)
