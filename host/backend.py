"""Backends: what runs the engine's commands (docs/host.md).

A backend takes the six commands of the persistent engine (docs/kernels.md §11,
docs/engine.md) with the golden engine's arguments and returns a :class:`CommandResult`: the
golden :class:`golden.engine.Completion` of the command plus what the run cost, ``cycles``
and ``bytes`` (``None`` where the backend cannot measure them, as the golden model cannot).
Every backend must give identical completions for identical commands; the host checks every
argument before a command reaches a backend, so a backend never sees a malformed array.

``golden`` is :class:`GoldenBackend` (``golden.engine.Engine``); ``rtl`` is
:class:`host.rtl.RtlBackend`, the Verilated ``hw/dataflow`` engine driven in process.
"""

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from golden.engine import Completion, EngineConfig
from golden.engine import Engine as GoldenEngine

__all__ = ["BACKENDS", "Backend", "CommandResult", "GoldenBackend", "make_backend"]

BACKENDS = ("golden", "rtl", "card")


@dataclass(frozen=True)
class CommandResult:
    """One command's result: the ``completion`` (status, message, outputs by name) and its
    cost, ``cycles`` (engine clocks) and ``bytes`` (moved through the memory ports), each
    ``None`` when the backend does not measure it."""

    completion: Completion
    cycles: int | None = None
    bytes: int | None = None


class Backend(ABC):
    """The engine's command interface. Arguments and outputs are those of
    ``golden.engine.Engine``'s commands of the same name; ``req_to_token`` is the card
    memory's request-to-KV-slot table (int64 ``[P, C]``), readable after every command."""

    name: str = ""

    @property
    @abstractmethod
    def req_to_token(self) -> np.ndarray:
        """The card memory's ``req_to_token`` table as the last command left it."""

    @abstractmethod
    def begin_round(self, slots, root_tokens, seq_lens, req_pool_indices, draft_cache_locs, *,
                    verify_num, depths) -> CommandResult:
        """Start a round (``golden.engine.Engine.begin_round``)."""

    @abstractmethod
    def draft_depth(self, probas, tokens, *, width=None) -> CommandResult:
        """Draft one depth (``golden.engine.Engine.draft_depth``)."""

    @abstractmethod
    def build_verify(self, tree_mask_mode, verify_cache_locs) -> CommandResult:
        """Build the verify tree (``golden.engine.Engine.build_verify``)."""

    @abstractmethod
    def load_tree(self, draft_tokens, retrive_index, retrive_next_token, retrive_next_sibling,
                  verify_cache_locs, *, num_speculative_tokens) -> CommandResult:
        """A caller's verify tree in place of ``build_verify``'s
        (``golden.engine.Engine.load_tree``)."""

    @abstractmethod
    def verify(self, target_logits, temperatures, max_seq_lens, **settings) -> CommandResult:
        """The fused verify and its commit (``golden.engine.Engine.verify``)."""

    @abstractmethod
    def read_state(self, slot) -> CommandResult:
        """A slot's state (``golden.engine.Engine.read_state``). A backend may leave the
        tree rows past ``cumu_count`` unspecified; the host does not read them."""

    @abstractmethod
    def snapshot(self):
        """An opaque record of the engine's state (every slot, the round in flight,
        ``req_to_token``) that :meth:`restore` returns the engine to."""

    @abstractmethod
    def restore(self, snapshot) -> None:
        """Return the engine to the state :meth:`snapshot` recorded (``host.Engine`` rolls a
        failed ``draft_round`` back with it); outputs of later commands are then exactly
        those of an engine that never ran the commands in between."""


class GoldenBackend(Backend):
    """The command-level golden model (``golden.engine.Engine``); no cycles or bytes."""

    name = "golden"

    def __init__(self, config: EngineConfig, req_to_token: np.ndarray, *, hot_token_id=None):
        self._engine = GoldenEngine(config, req_to_token, hot_token_id=hot_token_id)

    @property
    def req_to_token(self) -> np.ndarray:
        return self._engine.req_to_token

    def begin_round(self, slots, root_tokens, seq_lens, req_pool_indices, draft_cache_locs, *,
                    verify_num, depths) -> CommandResult:
        return CommandResult(self._engine.begin_round(
            slots, root_tokens, seq_lens, req_pool_indices, draft_cache_locs,
            verify_num=verify_num, depths=depths))

    def draft_depth(self, probas, tokens, *, width=None) -> CommandResult:
        return CommandResult(self._engine.draft_depth(probas, tokens, width=width))

    def build_verify(self, tree_mask_mode, verify_cache_locs) -> CommandResult:
        return CommandResult(self._engine.build_verify(tree_mask_mode, verify_cache_locs))

    def load_tree(self, draft_tokens, retrive_index, retrive_next_token, retrive_next_sibling,
                  verify_cache_locs, *, num_speculative_tokens) -> CommandResult:
        return CommandResult(self._engine.load_tree(
            draft_tokens, retrive_index, retrive_next_token, retrive_next_sibling,
            verify_cache_locs, num_speculative_tokens=num_speculative_tokens))

    def verify(self, target_logits, temperatures, max_seq_lens, **settings) -> CommandResult:
        return CommandResult(self._engine.verify(target_logits, temperatures, max_seq_lens,
                                                 **settings))

    def read_state(self, slot) -> CommandResult:
        return CommandResult(self._engine.read_state(slot))

    def snapshot(self):
        engine = self._engine
        return copy.deepcopy((engine._slots, engine._round)), engine.req_to_token.copy()

    def restore(self, snapshot) -> None:
        (slots, round_), table = snapshot
        self._engine._slots, self._engine._round = copy.deepcopy((slots, round_))
        self._engine.req_to_token[...] = table


def make_backend(backend, config: EngineConfig, req_to_token: np.ndarray, *,
                 hot_token_id=None) -> Backend:
    """The backend named ``backend`` (one of :data:`BACKENDS`) for the build ``config``, or
    ``backend`` itself when it is already a :class:`Backend`.

    ``"rtl"`` is :class:`host.rtl.RtlBackend` (the Verilated ``hw/dataflow`` engine, built
    once per parameter set; it refuses a ``hot_token_id``), ``"card"``
    :class:`host.card.CardBackend` (the engine's Vitis kernel through its registers and
    rings, on the simulated card: the Verilated kernel with card memory behind its ports).
    Raises ``ValueError`` for an unknown name.
    """
    if isinstance(backend, Backend):
        return backend
    if backend == "golden":
        return GoldenBackend(config, req_to_token, hot_token_id=hot_token_id)
    if backend == "rtl":
        from .rtl import RtlBackend

        return RtlBackend(config, req_to_token, hot_token_id=hot_token_id)
    if backend == "card":
        from .card import CardBackend

        return CardBackend(config, req_to_token, hot_token_id=hot_token_id)
    raise ValueError(f"`backend` must be one of {', '.join(map(repr, BACKENDS))} or a "
                     f"host.Backend, not {backend!r}")
