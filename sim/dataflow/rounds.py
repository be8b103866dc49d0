"""Seeded command sequences for the engine, run on the golden engine step by step, and the
comparison of the hardware's results with the golden's.

``Scenario`` draws rounds (a batch of random slots, request rows, sequence lengths, roots and
KV slots, then depths of a synthetic draft model's top-K until a stop rule or an early build,
sometimes with a forced width, then ``build_verify`` in a random mask layout) and bad
commands between them; each ``Step`` carries the golden's completion
and the expected memory effects, which ``check_step`` compares bit for bit with what the
hardware produced; ``check_port_counters`` checks the memory ports' counters against the runs
the command moves (``EngineHost.port_runs``). ``Scenario.replay`` runs a case file's sequence
(``sim.dataflow.cases``) the same way.
"""

import random
from dataclasses import dataclass, field

import numpy as np

from golden.engine import Engine, EngineConfig, Status
from hw.dataflow.engine import counter_layout
from sim.payload import layout_fields
from sim.tree_verify.call import Call, to_bfloat16
from sim.tree_verify.results import expected

from .host import STOP_REASONS, EngineHost, run_beats

__all__ = ["Scenario", "Step", "budget_widths", "caller_tree", "check_step",
           "completion_fields", "check_port_counters", "engine_config", "port_counters",
           "work_clocks"]


def caller_tree(rng, batch, n, vocab) -> dict:
    """A random verify tree per request as SGLang's ``build_tree_kernel_efficient`` links it
    (``load_tree``'s arguments but the KV slots): node ``i > 0`` under a random earlier node,
    a parent's ``retrive_next_token`` its last child, each child's ``retrive_next_sibling``
    the child before it; ``retrive_index`` the flat positions, random tokens."""
    shape = (batch, n)
    tree = {"draft_tokens": rng.integers(0, vocab, batch * n, dtype=np.int64),
            "retrive_index": np.arange(batch * n, dtype=np.int64).reshape(shape),
            "retrive_next_token": np.full(shape, -1, np.int64),
            "retrive_next_sibling": np.full(shape, -1, np.int64)}
    for b in range(batch):
        for i in range(1, n):
            parent = int(rng.integers(0, i))
            tree["retrive_next_sibling"][b, i] = tree["retrive_next_token"][b, parent]
            tree["retrive_next_token"][b, parent] = i
    return tree


def engine_config(params, vocab_size, cost_per_node=0.0) -> EngineConfig:
    """The golden engine's configuration of a hardware build."""
    return EngineConfig(
        node_top_k=params.node_top_k, max_tree_width=params.max_tree_width,
        max_depths=params.max_depths, max_verify_num=params.max_verify_num,
        max_node_count=params.max_node_count, max_input_size=params.max_input_size,
        vocab_size=vocab_size, max_batch=params.max_batch, sort_width=params.sort_width,
        cost_per_node=cost_per_node)


def budget_widths(node_count, *, node_top_k, max_tree_width, depths, max_input_size
                  ) -> list[int]:
    """The forced widths of a round whose tree ends with ``node_count`` nodes (the widths of
    depth labels 2, 3, ...: :meth:`Scenario.budget_round`, ``host.Engine.draft_round``'s
    ``widths``): the root, its ``K`` children, then ``K`` per frontier node of every later
    depth, so ``node_count - 1`` must be a multiple of ``K``. As wide as ``max_tree_width``
    allows, the rest in the last width; ``ValueError`` when ``depths`` labels or the draft
    inputs (``max_input_size``) cannot hold that tree."""
    k, wide = node_top_k, max_tree_width
    if node_count < 1 + k or (node_count - 1) % k:
        raise ValueError(f"no tree of {node_count} nodes at K = {k}")
    total = (node_count - 1) // k - 1  # frontier nodes after depth 1, summed over depths
    widths = [wide] * (total // wide) + ([total % wide] if total % wide else [])
    if len(widths) + 1 > depths or total > max_input_size:
        raise ValueError(f"a tree of {node_count} nodes needs {len(widths) + 1} depths and "
                         f"{total} draft inputs")
    return widths


@dataclass
class Step:
    """One command: its payload, the golden's completion and what to compare."""

    name: str
    command: dict
    status: Status
    next_tree_width: int = 0
    stop_reason: str = ""
    frontier: dict = field(default_factory=dict)  # golden outputs (drafting went on)
    verify: dict = field(default_factory=dict)  # golden outputs of build_verify
    tree_mask_mode: int = 0
    run: dict = field(default_factory=dict)  # golden outputs of verify
    state: object = None  # golden SlotState of read_state
    input_count: int = 0  # the frontier's input count before the depth
    loaded: int = 0  # n of a load_tree the golden accepted
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
    load_trees : float
        Probability that a round's verify tree is a caller's (``load_tree`` of a random
        tree) instead of ``build_verify``'s.
    """

    def __init__(self, params, memory, *, seed, vocab_size=97, pool_rows=12, context_len=48,
                 bad_commands=0.2, cost_per_node=0.0, load_trees=0.0):
        self.params = params
        self.rng = np.random.default_rng(seed)
        self.choice = random.Random(seed)
        self.vocab = vocab_size
        table = self.rng.integers(0, 1 << 20, (pool_rows, context_len), dtype=np.int64)
        self.golden = Engine(engine_config(params, vocab_size, cost_per_node), table.copy())
        self.host = EngineHost(params, memory, table)
        self.config = self.host.config(vocab_size, cost_per_node)
        self.bad_commands = bad_commands
        self.load_trees = load_trees
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
            step = self._begin(args)
            yield step
            if step.status == Status.OK and self.choice.random() < self.bad_commands:
                yield self._build(0)  # nothing drafted yet: a phase error
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
                if step.status != Status.OK or step.stop_reason or b == 0 \
                        or self.choice.random() < 0.15:  # build before drafting stops
                    break
            if self.choice.random() < self.bad_commands:  # maybe after drafting stopped
                r = self.golden._round
                if r.phase.name == "DRAFTING":  # built early: a depth of the frontier's shape
                    probas, tokens = self._draft_inputs(*r.frontier.node_ids.shape)
                yield self._draft(probas, tokens, width=None)
            if self.load_trees and self.choice.random() < self.load_trees:
                yield from self._load_trees()
            else:
                if self.choice.random() < self.bad_commands:
                    yield self._build(3)  # a bad mask layout
                yield self._build(int(self.rng.integers(0, 3)))
            if self.choice.random() < self.bad_commands:  # built: drafting is a phase error
                yield self._draft(probas, tokens, width=None)
            if self.choice.random() < self.bad_commands:
                yield self._verify(bad=True)  # a NaN temperature or top_p above 1
            yield self._verify()
            if self.choice.random() < self.bad_commands:
                yield self._verify()  # verified: nothing is built any more
            for _ in range(int(self.rng.integers(0, 3))):
                yield self._read_state(int(self.rng.integers(0, self.params.max_batch + 1)))

    def replay(self, entries, *, where=""):
        """Yield the ``Step`` s of a case's sequence (``sim.dataflow.cases.Entry`` s): its
        commands as written, its ``rounds`` entries as ``steps``. A command the golden refuses
        as a host error (an array of the wrong shape) raises ``ValueError`` naming its line."""
        p = self.params
        for entry in entries:
            if entry.kind == "rounds":
                yield from self.steps(entry.arguments["count"])
                continue
            args = dict(entry.arguments)
            try:
                if entry.kind == "begin_round":
                    if not args["draft_cache_locs"].size:
                        args["draft_cache_locs"] = np.zeros((0, p.kv_slots), np.int64)
                    step = self._begin(args)
                elif entry.kind == "build_verify":
                    step = self._build(int(args["tree_mask_mode"]))
                elif entry.kind == "verify":
                    step = self._verify()
                else:
                    r = self.golden._round
                    columns = p.node_top_k * (r.frontier.node_ids.shape[1] if r else 1)
                    probas, tokens = args["probas"], args["tokens"]
                    if not probas.size and not tokens.size:
                        probas = np.zeros((0, columns), np.float32)
                        tokens = np.zeros((0, columns), np.int64)
                    step = self._draft(probas, tokens, width=args.get("width"))
            except ValueError as error:
                raise ValueError(f"{where}:{entry.line}: {entry.kind}: {error}") from error
            yield step

    def _begin(self, args):
        completion = self.golden.begin_round(**args)
        command = self.host.begin_round(**args)
        if completion.ok:
            self._input_count = 1
        return Step("begin_round", command, completion.status,
                    req_to_token=self.golden.req_to_token.copy())

    def _build(self, mode):
        n = self.golden.verify_size()
        b = 0 if self.golden._round is None else len(self.golden._round.slots)
        locs = self.rng.integers(0, 1 << 20, b * n, dtype=np.int64)
        completion = self.golden.build_verify(mode, locs)
        step = Step("build_verify", self.host.build_verify(mode, locs), completion.status,
                    req_to_token=self.golden.req_to_token.copy(), tree_mask_mode=mode)
        if completion.ok:
            step.verify = dict(completion.outputs)
        return step

    def _load_trees(self):
        """``load_tree`` of a random caller's tree, after a bad one (a defect of
        :meth:`_bad_tree`) with probability ``bad_commands``."""
        r = self.golden._round
        b = len(r.slots)
        n = int(self.rng.integers(1, self.params.max_verify_num + 1))
        steps = int(self.rng.integers(2, self.params.max_depths + 2))
        tree = caller_tree(self.rng, b, n, self.vocab)
        if self.choice.random() < self.bad_commands:
            yield self._load(*self._bad_tree(tree, steps))
        yield self._load(tree, steps)

    def _bad_tree(self, tree, steps):
        """``tree`` and ``steps`` with one defect that ``load_tree`` refuses."""
        p, b = self.params, len(tree["retrive_index"])
        n = tree["retrive_index"].shape[1]
        tree = {name: value.copy() for name, value in tree.items()}
        kinds = ["size", "steps"] + (["token", "index", "link", "root", "twice"] if b else [])
        kind = self.choice.choice(kinds)
        x, i = (int(self.rng.integers(0, b)), int(self.rng.integers(0, n))) if b else (0, 0)
        links = self.choice.choice(["retrive_next_token", "retrive_next_sibling"])
        if kind == "size":
            return caller_tree(self.rng, b, self.choice.choice(
                [0, p.max_verify_num + 1]), self.vocab), steps
        if kind == "steps":
            return tree, self.choice.choice([1, p.max_depths + 2])
        if kind == "token":
            tree["draft_tokens"][x * n + i] = self.choice.choice([self.vocab, -1])
        elif kind == "index":
            tree["retrive_index"][x, i] = (x * n + i + 1) % (b * n + 1)
        elif kind == "link":
            tree[links][x, i] = self.choice.choice([n, -2])
        elif kind == "root":
            tree[links][x, i] = 0
        else:  # two links to one node (or n = 1: a link out of range)
            tree[links][x, i] = 1 if n > 1 else n
            tree["retrive_next_sibling" if links == "retrive_next_token"
                 else "retrive_next_token"][x, (i + 1) % n] = 1 if n > 1 else n
        return tree, steps

    def _load(self, tree, steps):
        b, n = tree["retrive_index"].shape
        locs = self.rng.integers(0, 1 << 20, b * n, dtype=np.int64)
        completion = self.golden.load_tree(**tree, verify_cache_locs=locs,
                                           num_speculative_tokens=steps)
        step = Step("load_tree", self.host.load_tree(**tree, verify_cache_locs=locs,
                                                     num_speculative_tokens=steps),
                    completion.status, req_to_token=self.golden.req_to_token.copy())
        if completion.ok:
            step.loaded = completion.outputs["n"]
        return step

    def _verify_arguments(self, b, n):
        """A target model's logits (the draft tokens favoured, so that some are accepted)
        and the sampling settings: greedy and sampling requests, top-k/top-p sometimes, coins
        or LFSR seeds, length limits and an EOS token that finish some requests."""
        rng, vocab = self.rng, self.vocab
        r = self.golden._round
        logits = rng.standard_normal((b, n, vocab)).astype(np.float32)
        if b and r.verify:
            drafts = r.verify["draft_tokens"].reshape(b, n)
            for x in range(b):
                logits[x][:, drafts[x]] += np.float32(rng.uniform(1, 5))
        if self.params.logit_format == "bfloat16":  # what the logits ports can carry
            logits = to_bfloat16(logits)
        temperatures = np.where(rng.random(b) < 0.3, 0,
                                rng.uniform(0.3, 1.5, b)).astype(np.float32)
        args = {"target_logits": logits, "temperatures": temperatures,
                "max_seq_lens": (r.seq_lens + rng.integers(1, r.depths_run + 3, b)
                                 if b else np.zeros(0, np.int64)).astype(np.int64),
                "eos_token_id": int(rng.choice([-1, int(rng.integers(0, vocab))])),
                "threshold_single": float(self.choice.choice([1.0, 0.7])),
                "threshold_acc": float(self.choice.choice([1.0, 0.5]))}
        if self.choice.random() < 0.3:
            args["top_k"] = rng.integers(-1, vocab + 2, b).astype(np.int32)
        if self.choice.random() < 0.3:
            args["top_p"] = rng.uniform(0.2, 1.0, b).astype(np.float32)
        if self.choice.random() < 0.5:
            args["seeds"] = rng.integers(0, 1 << 32, b, dtype=np.int64)
        else:
            args["uniform_samples"] = rng.random((b, n)).astype(np.float32)
            args["uniform_samples_for_final_sampling"] = rng.random(b).astype(np.float32)
        return args

    def _verify(self, bad=False):
        r = self.golden._round
        b = 0 if r is None else len(r.slots)
        n = r.verify["n"] if r is not None and r.verify else 1
        args = self._verify_arguments(b, n)
        if bad and b:
            if self.choice.random() < 0.5:
                args["temperatures"][int(self.rng.integers(0, b))] = np.nan
            else:
                args["top_p"] = np.full(b, 1.5, np.float32)
        steps = r.depths_run + 1 if r is not None else 0
        completion = self.golden.verify(**args)
        step = Step("verify", self.host.verify(**args), completion.status,
                    req_to_token=self.golden.req_to_token.copy())
        if completion.ok:
            step.run = dict(completion.outputs, n=n, steps=steps)
        return step

    def _read_state(self, slot):
        completion = self.golden.read_state(slot)
        step = Step("read_state", self.host.read_state(slot), completion.status,
                    req_to_token=self.golden.req_to_token.copy())
        if completion.ok:
            step.state = completion.outputs["state"]
        return step

    @classmethod
    def for_contract(cls, params, memory, point, *, seed, context_len):
        """A scenario for ``contract_round`` at ``point``: no bad commands, the point's
        vocabulary, and ``req_to_token`` rows for every request of its batch (at least 12)."""
        return cls(params, memory, seed=seed, bad_commands=0.0, vocab_size=point["vocab"],
                   pool_rows=max(12, point["batch"]), context_len=context_len)

    def contract_round(self, point, *, seq_len, head_mass=0.95):
        """Yield the ``Step`` s of one full-width round at a benchmark contract ``point``:
        ``begin_round`` on slots ``0 .. B-1`` (``seq_len`` tokens each), ``depth`` draft depths
        at the forced width ``tree_width``, ``build_verify`` in the bit-packed mask layout and
        ``verify`` at temperature 1 (top-k and top-p off, uniform coins) on EAGLE-like logits
        exact in bfloat16 (``contract_logits``)."""
        p, rng, b = self.params, self.rng, point["batch"]
        yield self._begin(dict(
            slots=np.arange(b, dtype=np.int64),
            root_tokens=rng.integers(0, self.vocab, b, dtype=np.int64),
            seq_lens=np.full(b, seq_len, np.int64), req_pool_indices=np.arange(b, dtype=np.int64),
            draft_cache_locs=rng.integers(0, 1 << 20, (b, p.kv_slots), dtype=np.int64),
            verify_num=point["verify_num"], depths=point["depth"]))
        for _ in range(point["depth"]):
            width = self.golden._round.frontier.node_ids.shape[1]
            yield self._draft(*self._draft_inputs(b, width), width=point["tree_width"])
        yield self._build(2)
        r = self.golden._round
        n = r.verify["n"]
        args = {"target_logits": self.contract_logits(head_mass),
                "temperatures": np.ones(b, np.float32),
                "max_seq_lens": np.full(b, self.host.table_shape[1], np.int64),
                "uniform_samples": rng.random((b, n), dtype=np.float32),
                "uniform_samples_for_final_sampling": rng.random(b, dtype=np.float32)}
        # the fused verify's call, for its schedule formula (sim.tree_verify.schedule)
        call = Call(name="contract_round", mode="sampling", steps=r.depths_run + 1,
                    candidates=r.verify["draft_tokens"].reshape(b, n).astype(np.int64),
                    **{key: r.verify[key].reshape(b, n).astype(np.int64) for key in (
                        "retrive_index", "retrive_next_token", "retrive_next_sibling")},
                    **{key: args[key] for key in (
                        "target_logits", "temperatures", "uniform_samples",
                        "uniform_samples_for_final_sampling")}, logit_format=p.logit_format)
        traces = expected(call)["traces"]
        completion = self.golden.verify(**args)
        step = Step("verify", self.host.verify(**args), completion.status,
                    req_to_token=self.golden.req_to_token.copy())
        step.run = dict(completion.outputs, n=n, steps=call.steps, fused_call=call,
                        traces=traces)
        yield step

    def budget_round(self, batch, widths, *, verify_num, tree_mask_mode=1):
        """Yield the ``Step`` s of one round of forced widths on slots ``0 .. batch-1``:
        ``begin_round`` (every depth label allowed), a ``draft_depth`` per entry of ``widths``
        (the width it forces on the next depth) and one more at the full width (the depth
        that meets a budget, or the depth labels' end), ``build_verify``,
        ``verify`` on random logits and settings, then ``read_state`` of every slot of the
        batch and of one slot the round did not use (if any). With widths from
        :func:`budget_widths` the tree fills the node budget exactly or stops short of it."""
        p, rng = self.params, self.rng
        rows, context = self.host.table_shape
        room = max(p.kv_slots, p.max_verify_num)
        yield self._begin(dict(
            slots=np.arange(batch, dtype=np.int64),
            root_tokens=rng.integers(0, self.vocab, batch, dtype=np.int64),
            seq_lens=rng.integers(0, context - room + 1, batch, dtype=np.int64),
            req_pool_indices=rng.permutation(rows)[:batch].astype(np.int64),
            draft_cache_locs=rng.integers(0, 1 << 20, (batch, p.kv_slots), dtype=np.int64),
            verify_num=verify_num, depths=p.max_depths))
        for width in [*widths, p.max_tree_width]:
            r = self.golden._round
            if r.phase.name != "DRAFTING":
                break
            yield self._draft(*self._draft_inputs(batch, r.frontier.node_ids.shape[1]),
                              width=width)
        yield self._build(tree_mask_mode)
        yield self._verify()
        for slot in range(min(batch + 1, p.max_batch)):
            yield self._read_state(slot)

    def contract_logits(self, head_mass):
        """Target logits for the built verify tree, as ``sim.tree_verify.generators``'
        measurement draws them: every row a noise tail (a rotation of one of four
        ``N(0, 2.5**2)`` rows) plus a head, the tokens of the position's children in their
        order, holding ``head_mass`` of the row's mass; rounded to bfloat16."""
        rng, vocab = self.rng, self.vocab
        r = self.golden._round
        b, n = len(r.slots), r.verify["n"]
        drafts = r.verify["draft_tokens"].reshape(b, n)
        pool = rng.standard_normal((4, vocab), dtype=np.float32) * np.float32(2.5)
        tails = np.concatenate([pool, pool], axis=1)
        tail_mass = np.exp(pool.astype(np.float64)).sum(axis=1)
        logits = np.empty((b, n, vocab), np.float32)
        for x in range(b):
            for i in range(n):
                which, shift = int(rng.integers(0, 4)), int(rng.integers(0, vocab))
                row = logits[x, i]
                row[:] = tails[which, shift:shift + vocab]
                kids, kid = [], int(r.verify["retrive_next_token"][x, i])
                while 0 <= kid < n:
                    kids.append(int(drafts[x, kid]))
                    kid = int(r.verify["retrive_next_sibling"][x, kid])
                head = list(dict.fromkeys(kids))
                if head:
                    share = np.sort(np.exp(rng.standard_normal(len(head)) * 1.5))[::-1]
                    row[head] = np.log(head_mass / (1 - head_mass) * tail_mass[which]
                                       * share / share.sum())
                row[:] = to_bfloat16(row)
        return logits

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


#: The completion's fields ``check_step`` compares.
COMPLETION_FIELDS = ("tag", "status", "next_tree_width", "stop_reason", "verify_size",
                     "active_count", "rows_read")


def port_counters(value: int, ports) -> dict:
    """Port -> its counters (``counter_layout`` fields) in the engine's ``counters`` output
    ``value`` (``ports``: the build's ``port_names``, in counter order)."""
    size = counter_layout.size
    return {port: {name: value >> (index * size + offset) & ((1 << width) - 1)
                   for name, offset, width in layout_fields(counter_layout)}
            for index, port in enumerate(ports)}


def work_clocks(params, name: str, *, latency: int, stalled: bool) -> int:
    """Clocks a command ``name`` takes on build ``params`` without idle or back-pressure,
    generously, with memory answering after up to ``latency`` clocks (``stalled``: with
    random stalls): the base of a bench's time-out."""
    p = params
    v, seq = p.max_verify_num, p.max_seq_len
    words = -(-p.max_vocab_size * 32 // p.logit_port_bits)  # a logits row, at most
    per_request = {
        "begin_round": p.argument_words + 2 * v + 3 * p.kv_slots + 40,
        "draft_depth": 12 * p.max_candidates + 4 * v + 400,
        "build_verify": v * (seq + v) // 4 + 2 * seq + 8 * v + 200,
        "verify": v * (8 * words + 200) + 200 * words + 600,
    }.get(name, 6 * p.max_node_count + 4 * v + 200)  # read_state: one slot
    return (200 + p.max_batch * per_request) * (1 + 4 * int(stalled)) + 4 * latency


def completion_fields(completion) -> dict:
    """A completion (the engine's ``completion`` payload as Amaranth's simulator reads it) as
    the dict ``check_step`` takes."""
    return {name: getattr(completion, name) for name in COMPLETION_FIELDS}


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
    if step.verify:
        assert completion["verify_size"] == step.verify["n"], \
            f"{where}: n {completion['verify_size']}, golden {step.verify['n']}"
        b = len(step.verify["qo_indptr"]) - 1
        got = host.verify_outputs(b, step.verify["n"], step.tree_mask_mode)
        for name, expected in step.verify.items():
            assert np.array_equal(got[name], expected) and (
                np.asarray(got[name]).dtype == np.asarray(expected).dtype or name != "tree_mask"), \
                f"{where}: `{name}`\n{got[name]}\ngolden\n{expected}"
    if step.loaded:
        assert completion["verify_size"] == step.loaded, \
            f"{where}: n {completion['verify_size']}, golden {step.loaded}"
    if step.run:
        run = step.run
        b = len(run["accept_length"])
        assert completion.get("active_count", run["active_count"][0]) == run["active_count"][0], \
            f"{where}: active_count {completion['active_count']}, golden {run['active_count']}"
        assert completion.get("rows_read", run["rows_read"]) == run["rows_read"], \
            f"{where}: rows_read {completion['rows_read']}, golden {run['rows_read']}"
        got = host.run_outputs(b, run["n"], run["steps"], len(run["verified_id"]))
        for name, value in got.items():
            assert np.array_equal(value, run[name]), \
                f"{where}: `{name}`\n{value}\ngolden\n{run[name]}"
    if step.state is not None:
        _check_state(where, step.state, host.state_outputs())
    assert np.array_equal(host.req_to_token(), step.req_to_token), f"{where}: req_to_token"


def _check_state(where, golden, got):
    """A slot's state as ``read_state`` wrote it against the golden's ``SlotState``: the
    header, and the tree's valid node prefix and score rows (bit patterns) when the slot has
    had a round (the hardware leaves nodes past ``cumu_count`` unspecified)."""
    for name in ("phase", "seq_len", "req_pool_index", "cumu_count"):
        assert got[name] == int(getattr(golden, name)), \
            f"{where}: `{name}` {got[name]}, golden {int(getattr(golden, name))}"
    count = golden.cumu_count
    for name, row in golden.tree.items():
        expected = row[:count] if name not in ("sort_scores", "work_scores") else row
        if expected.dtype == np.float32:
            expected = expected.view(np.uint32).astype(np.int64)
        assert np.array_equal(got["tree"][name], expected), \
            f"{where}: `{name}`\n{got['tree'][name]}\ngolden\n{expected}"


def check_port_counters(step: Step, host: EngineHost, before: dict, after: dict):
    """Compare the ports' counters (port -> ``beats``, ``bytes``, ``busy_cycles``,
    ``stall_cycles``) before and after ``step`` with the runs the command moves
    (``EngineHost.port_runs``): per port, the beats of those runs (the ``logits`` ports
    together), a whole port word per beat in bytes, and every busy clock either a beat or a
    stall."""
    p = host.params
    where = f"{step.name} (tag {step.command['tag']})"
    delta = {port: {name: after[port][name] - before[port][name] for name in after[port]}
             for port in after}
    runs = host.port_runs(step)
    logits = [port for port in delta if port.startswith("logits")]
    beats = {port: run_beats(port_runs, p.port_bits) for port, port_runs in runs.items()
             if port != "logits"}
    beats["logits"] = run_beats(runs.get("logits", []), p.logit_port_bits)
    moved = {port: delta[port]["beats"] for port in delta if port not in logits}
    moved["logits"] = sum(delta[port]["beats"] for port in logits)
    for port, count in beats.items():
        assert moved[port] == count, \
            f"{where}: port {port} moved {moved[port]} beats, its runs {runs.get(port)} are {count}"
    for port, counted in delta.items():
        bits = p.logit_port_bits if port in logits else p.port_bits
        assert counted["bytes"] == counted["beats"] * bits // 8, \
            f"{where}: port {port} counted {counted['bytes']} bytes for {counted['beats']} beats"
        assert counted["busy_cycles"] - counted["stall_cycles"] == counted["beats"], \
            f"{where}: port {port} busy {counted['busy_cycles']}, stalled " \
            f"{counted['stall_cycles']} clocks for {counted['beats']} beats"
