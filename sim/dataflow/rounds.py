"""Seeded command sequences for the engine, run on the golden engine step by step, and the
comparison of the hardware's results with the golden's.

``Scenario`` draws rounds (a batch of random slots, request rows, sequence lengths, roots and
KV slots, then depths of a synthetic draft model's top-K until a stop rule, sometimes with a
forced width) and bad commands between them; each ``Step`` carries the golden's completion
and the expected memory effects, which ``check_step`` compares bit for bit with what the
hardware produced.
"""

import random
from dataclasses import dataclass, field

import numpy as np

from golden.engine import Engine, EngineConfig, Status

from .host import STOP_REASONS, EngineHost

__all__ = ["Scenario", "Step", "check_step", "engine_config"]


def engine_config(params, vocab_size, cost_per_node=0.0) -> EngineConfig:
    """The golden engine's configuration of a hardware build."""
    return EngineConfig(
        node_top_k=params.node_top_k, max_tree_width=params.max_tree_width,
        max_depths=params.max_depths, max_verify_num=params.max_verify_num,
        max_node_count=params.max_node_count, max_input_size=params.max_input_size,
        vocab_size=vocab_size, max_batch=params.max_batch, sort_width=params.sort_width,
        cost_per_node=cost_per_node)


@dataclass
class Step:
    """One command: its payload, the golden's completion and what to compare."""

    name: str
    command: dict
    status: Status
    next_tree_width: int = 0
    stop_reason: str = ""
    frontier: dict = field(default_factory=dict)  # golden outputs (drafting went on)
    input_count: int = 0  # the frontier's input count before the depth
    req_to_token: np.ndarray | None = None


class Scenario:
    """Rounds of random commands on a golden engine and a host layout.

    Parameters
    ----------
    params : EngineParams
    memory : CardMemory
    seed : int
    vocab_size, pool_rows, context_len : int
        The runtime configuration.
    bad_commands : float
        Probability of a bad command before each good one.
    """

    def __init__(self, params, memory, *, seed, vocab_size=97, pool_rows=12, context_len=48,
                 bad_commands=0.2, cost_per_node=0.0):
        self.params = params
        self.rng = np.random.default_rng(seed)
        self.choice = random.Random(seed)
        self.vocab = vocab_size
        table = self.rng.integers(0, 1 << 20, (pool_rows, context_len), dtype=np.int64)
        self.golden = Engine(engine_config(params, vocab_size, cost_per_node), table.copy())
        self.host = EngineHost(params, memory, table)
        self.config = self.host.config(vocab_size, cost_per_node)
        self.bad_commands = bad_commands
        self._input_count = 1

    # --- commands ---------------------------------------------------------------------------

    def _begin_arguments(self):
        p, rng = self.params, self.rng
        rows, context = self.host.table_shape
        b = int(rng.integers(0, min(p.max_batch, rows) + 1)) if self.choice.random() < 0.1 \
            else int(rng.integers(1, min(p.max_batch, rows) + 1))
        room = max(p.kv_slots, p.max_verify_num)
        return dict(
            slots=rng.permutation(p.max_batch)[:b].astype(np.int64),
            root_tokens=rng.integers(0, self.vocab, b, dtype=np.int64),
            seq_lens=rng.integers(0, context - room + 1, b, dtype=np.int64),
            req_pool_indices=rng.permutation(rows)[:b].astype(np.int64),
            draft_cache_locs=rng.integers(0, 1 << 20, (b, p.kv_slots), dtype=np.int64),
            verify_num=int(rng.integers(1, p.max_verify_num + 3)),
            depths=int(rng.integers(1, p.max_depths + 1)))

    def _bad_begin(self, args):
        """``args`` with one defect (a golden error either way)."""
        p, rows = self.params, self.host.table_shape[0]
        b = len(args["slots"])
        kind = self.choice.choice(["slot_range", "slot_repeat", "root", "pool_range",
                                   "pool_repeat", "seq_len", "depths"])
        args = {name: (value.copy() if isinstance(value, np.ndarray) else value)
                for name, value in args.items()}
        if b == 0 or (b == 1 and kind in ("slot_repeat", "pool_repeat")):
            kind = "depths"
        x = int(self.rng.integers(0, b)) if b else 0
        if kind == "slot_range":
            args["slots"][x] = p.max_batch + int(self.rng.integers(0, 3))
        elif kind == "slot_repeat":
            args["slots"][x] = args["slots"][(x + 1) % b]
        elif kind == "root":
            args["root_tokens"][x] = self.vocab + int(self.rng.integers(0, 5))
        elif kind == "pool_range":
            args["req_pool_indices"][x] = rows + int(self.rng.integers(0, 3))
        elif kind == "pool_repeat":
            args["req_pool_indices"][x] = args["req_pool_indices"][(x + 1) % b]
        elif kind == "seq_len":
            args["seq_lens"][x] = self.host.table_shape[1]
        else:
            args["depths"] = self.choice.choice([0, p.max_depths + 1])
        return args

    def _draft_inputs(self, b, w):
        """A draft model's top-K for ``b`` requests of ``w`` parents: per parent, ``K``
        probabilities in descending order and distinct tokens."""
        k = self.params.node_top_k
        logits = self.rng.standard_normal((b, w, 2 * k)).astype(np.float32) * 2
        probas = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
        probas = -np.sort(-probas, axis=-1)[:, :, :k].astype(np.float32)
        if self.choice.random() < 0.2:  # ties across parents
            probas[:, :, :] = probas[:, :1, :]
        tokens = np.stack([[self.rng.permutation(self.vocab)[:k] for _ in range(w)]
                           for _ in range(b)]) if b else np.zeros((0, w, k), np.int64)
        return probas.reshape(b, w * k), tokens.reshape(b, w * k).astype(np.int64)

    def steps(self, rounds):
        """Yield ``Step`` s: ``rounds`` rounds, each begun and drafted until it stops, with
        bad commands in between."""
        for _ in range(rounds):
            args = self._begin_arguments()
            if self.choice.random() < self.bad_commands:
                yield self._begin(self._bad_begin(args))
            r = self.golden._round
            if (r is None or r.phase.name != "DRAFTING") \
                    and self.choice.random() < self.bad_commands:
                yield self._draft(*self._draft_inputs(0, 1), width=None)  # a phase error
            yield self._begin(args)
            while True:
                r = self.golden._round
                b, w = r.frontier.node_ids.shape
                probas, tokens = self._draft_inputs(b, w)
                width = None
                if self.choice.random() < 0.25:
                    width = int(self.rng.integers(0, self.params.max_tree_width + 1))
                if self.choice.random() < self.bad_commands / 2:
                    yield self._bad_draft(probas, tokens)
                step = self._draft(probas, tokens, width=width)
                yield step
                if step.status != Status.OK or step.stop_reason or b == 0:
                    break
            if self.choice.random() < self.bad_commands:  # drafting is over
                yield self._draft(probas, tokens, width=None)

    def _begin(self, args):
        completion = self.golden.begin_round(**args)
        command = self.host.begin_round(**args)
        if completion.ok:
            self._input_count = 1
        return Step("begin_round", command, completion.status,
                    req_to_token=self.golden.req_to_token.copy())

    def _bad_draft(self, probas, tokens):
        if self.choice.random() < 0.5 and probas.size:
            tokens = tokens.copy()
            tokens.flat[int(self.rng.integers(0, tokens.size))] = self.choice.choice(
                [self.vocab, -1, self.vocab + 7])
            return self._draft(probas, tokens, width=None)
        return self._draft(probas, tokens, width=self.params.max_tree_width + 1)

    def _draft(self, probas, tokens, *, width):
        input_count = self._input_count
        completion = self.golden.draft_depth(probas, tokens, width=width)
        command = self.host.draft_depth(probas, tokens, width=width)
        step = Step("draft_depth", command, completion.status,
                    req_to_token=self.golden.req_to_token.copy())
        if completion.ok:
            out = completion.outputs
            step.next_tree_width = out["next_tree_width"]
            step.stop_reason = out["stop_reason"]
            if not out["stop_reason"] and out["tokens"].shape[0]:
                step.frontier = {name: out[name] for name in (
                    "tokens", "parent_indices", "node_ids", "positions", "kv_slots",
                    "tree_mask")}
                step.input_count = input_count
                self._input_count = input_count + out["next_tree_width"]
        return step


def check_step(step: Step, completion, host: EngineHost):
    """Compare the hardware's completion and memory with the golden's (``AssertionError``
    naming the first difference)."""
    where = f"{step.name} (tag {step.command['tag']})"
    assert completion["tag"] == step.command["tag"], f"{where}: completion out of order"
    assert completion["status"] == step.status, \
        f"{where}: status {completion['status']}, golden {step.status!r}"
    if step.status == Status.OK and step.name == "draft_depth":
        assert completion["next_tree_width"] == step.next_tree_width, \
            f"{where}: next width {completion['next_tree_width']}, golden {step.next_tree_width}"
        assert STOP_REASONS[completion["stop_reason"]] == step.stop_reason, \
            f"{where}: stop {completion['stop_reason']}, golden {step.stop_reason!r}"
        if step.frontier:
            b, w = step.frontier["tokens"].shape
            got = host.frontier_outputs(b, w, step.input_count)
            for name, expected in step.frontier.items():
                assert np.array_equal(got[name], expected), \
                    f"{where}: frontier `{name}`\n{got[name]}\ngolden\n{expected}"
    assert np.array_equal(host.req_to_token(), step.req_to_token), f"{where}: req_to_token"
