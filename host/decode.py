"""Tree speculative decoding through ``host.Engine``: rounds of draft, build and verify
over a batch of requests, each request's accepted tokens extending its sequence, with the
metrics of docs/host.md."""

import sys
from dataclasses import dataclass, field

import numpy as np

from .engine import Engine
from .results import RoundResult
from .synthetic import BigramModels

__all__ = ["DecodeRun", "Metrics", "decode", "decode_context_len", "progress_bar"]


@dataclass
class Metrics:
    """Figures accumulated over rounds (docs/host.md, "The summary").

    ``request_rounds`` counts (request, round) pairs; ``tokens`` the committed tokens
    (``accept_length`` summed); ``accepted`` the accepted draft tokens
    (``accept_token_num``); ``reachable`` the verify trees' depths (the most draft tokens a
    request could accept); ``two_or_more`` the request-rounds that committed >= 2 tokens;
    ``verify_positions`` the verify trees' sizes ``n``; ``rows_read`` the logits rows the
    fused verify read; ``bytes``/``cycles`` per round as the backend measured them (``None``
    entries where it does not).
    """

    rounds: int = 0
    request_rounds: int = 0
    tokens: int = 0
    accepted: int = 0
    reachable: int = 0
    two_or_more: int = 0
    verify_positions: int = 0
    rows_read: int = 0
    bytes: list = field(default_factory=list)
    cycles: list = field(default_factory=list)

    def add(self, result: RoundResult):
        """Count one round."""
        v, tree = result.verify, result.tree
        self.rounds += 1
        self.request_rounds += len(v.accept_length)
        self.tokens += int(v.accept_length.sum())
        self.accepted += int(v.accept_token_num.sum())
        self.reachable += int(tree.depths().max(axis=1).sum())
        self.two_or_more += int((v.accept_length >= 2).sum())
        self.verify_positions += tree.n * tree.batch_size
        self.rows_read += v.rows_read
        self.bytes.append(result.bytes)
        self.cycles.append(result.cycles)

    def summary(self, clock_mhz: float | None = None) -> dict:
        """The figures as a dict (``None`` where unmeasured); ``us_per_round`` at
        ``clock_mhz``."""
        def mean(values):
            return None if not values or None in values else float(np.mean(values))

        cycles = mean(self.cycles)
        return {
            "rounds": self.rounds,
            "tokens": self.tokens,
            "mean_accept_length": self.tokens / max(self.request_rounds, 1),
            "acceptance_rate": self.accepted / max(self.reachable, 1),
            "fraction_two_or_more": self.two_or_more / max(self.request_rounds, 1),
            "tokens_per_round": self.tokens / max(self.rounds, 1),
            "verify_positions_per_round": self.verify_positions / max(self.rounds, 1),
            "logits_rows_read_per_round": self.rows_read / max(self.rounds, 1),
            "bytes_per_round": mean(self.bytes),
            "cycles_per_round": cycles,
            "us_per_round": (None if cycles is None or not clock_mhz
                             else cycles / clock_mhz),
        }


@dataclass
class DecodeRun:
    """What :func:`decode` produced: each request's ``prompts`` and generated ``tokens``
    (lists of ints), which requests ``finished``, the :class:`Metrics` and the last round's
    :class:`host.RoundResult`."""

    prompts: list
    tokens: list
    finished: list
    metrics: Metrics
    last_round: RoundResult | None = None


def progress_bar(stream=None, width: int = 30):
    """A plain text progress bar on ``stream`` (default: ``sys.stderr`` at each redraw):
    ``bar(done, total)`` redraws it (a newline at ``done == total``)."""
    def draw(done, total):
        out = stream if stream is not None else sys.stderr
        filled = width * done // max(total, 1)
        out.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} rounds")
        if done >= total:
            out.write("\n")
        out.flush()
    return draw


def decode_context_len(config, rounds: int) -> int:
    """The ``req_to_token`` row length :func:`decode` needs for ``rounds`` rounds of
    ``config`` (a ``golden.DraftRoundConfig``): at most ``depths + 1`` tokens committed per
    round, and the room a round's draft and verify slots take past the sequence."""
    return (config.depths + 1) * rounds + max(config.max_input_size + 1,
                                              config.max_verify_num) + 1


def decode(engine: Engine, models: BigramModels, prompts, rounds: int, *,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, widths=None,
           eos_token_id: int = -1, max_seq_len: int | None = None, tree_mask_mode: int = 2,
           lfsr: bool = False, progress=None, on_round=None) -> DecodeRun:
    """``rounds`` rounds of tree speculative decoding of one request per prompt token
    (``prompts``: ints, at most ``engine.config.batch_size``), request ``b`` in slot ``b``
    starting at sequence length 0 with its prompt token as the root. Each round drafts with
    ``models.sampler`` (the draft model), builds the verify tree, verifies with
    ``models.verify_logits`` (the target model) at ``temperature``/``top_k``/``top_p``
    (coins from the Engine's seed, or with ``lfsr`` from the on-chip generator seeded per
    request from the Engine's seed), and appends each request's committed tokens; requests
    that finish (``eos_token_id``, ``max_seq_len``) leave the batch. ``progress(done,
    total)`` is called after every round, ``on_round(active, result)`` too: the slots that
    ran it (int64) and its :class:`host.RoundResult`."""
    prompts = [int(t) for t in prompts]
    b = len(prompts)
    tokens = [[] for _ in range(b)]
    finished = [False] * b
    roots = np.array(prompts, np.int64)
    engine.seq_lens[:b] = 0
    metrics, last = Metrics(), None
    sampler = models.sampler(engine.config.node_top_k)
    for done in range(1, rounds + 1):
        active = np.array([r for r in range(b) if not finished[r]], np.int64)
        if not len(active):
            break
        count = len(active)
        settings = {"temperatures": np.full(count, temperature, np.float32),
                    "eos_token_id": eos_token_id}
        if top_k:
            settings["top_k"] = np.full(count, top_k, np.int32)
        if top_p < 1.0:
            settings["top_p"] = np.full(count, top_p, np.float32)
        if lfsr:
            settings["seeds"] = engine.rng.integers(0, 1 << 32, count, dtype=np.int64)
        if max_seq_len is not None:
            settings["max_seq_lens"] = np.full(count, max_seq_len, np.int64)
        last = engine.round(sampler, roots[active], models.verify_logits, slots=active,
                            widths=widths, tree_mask_mode=tree_mask_mode, **settings)
        metrics.add(last)
        for request, accepted, ended in zip(active, last.verify.accepted_tokens(),
                                            last.verify.finished, strict=True):
            tokens[request].extend(int(t) for t in accepted)
            finished[request] = bool(ended)
        roots[active] = last.verify.next_root
        if on_round is not None:
            on_round(active, last)
        if progress is not None:
            progress(done, rounds)
    if progress is not None and metrics.rounds < rounds:  # every request finished early
        progress(metrics.rounds, metrics.rounds)
    return DecodeRun(prompts=prompts, tokens=tokens, finished=finished, metrics=metrics,
                     last_round=last)
