"""The engine's command set: opcodes, completion codes, stop reasons and the round's phases
(docs/engine.md, "Commands and completions"), shared by the engine and its state modules."""

import enum

from amaranth.hdl import Mux

__all__ = ["Opcode", "Status", "StopReason", "Phase", "ROOT_SCORE_BITS", "ONE_BITS",
           "clamp_verify_num", "unit_interval"]

#: 1.001f, the root's score (``golden.draft_round.ROOT_SCORE``).
ROOT_SCORE_BITS = 0x3F80_20C5
#: 1.0f, the frontier score of the root at depth 1.
ONE_BITS = 0x3F80_0000


class Opcode(enum.IntEnum):
    """``command.opcode``."""

    BEGIN_ROUND = 1
    DRAFT_DEPTH = 2
    BUILD_VERIFY = 3
    VERIFY = 4
    READ_STATE = 5
    LOAD_TREE = 6


class Status(enum.IntEnum):
    """``completion.status``: the codes of ``golden.engine.Status``."""

    OK = 0
    BAD_SLOT = 1
    BAD_WIDTH = 2
    BAD_PHASE = 3
    NODE_BUDGET = 4
    BAD_ARGUMENT = 5
    WATCHDOG = 6


class StopReason(enum.IntEnum):
    """``completion.stop_reason`` of ``draft_depth`` (``golden.draft_round`` stop rules)."""

    NONE = 0
    WIDTH_ZERO = 1
    DEPTHS = 2
    NODE_BUDGET = 3
    INPUT_BUDGET = 4


class Phase(enum.IntEnum):
    """Where the round in flight stands (``golden.engine.Phase``)."""

    IDLE = 0
    DRAFTING = 1
    DRAFTED = 2
    BUILT = 3


def clamp_verify_num(value, max_verify_num):
    """``verify_num`` into ``1 .. max_verify_num`` (``golden.update_state.clamp_verify_num``)."""
    return Mux(value < 1, 1, Mux(value > max_verify_num, max_verify_num, value))


def unit_interval(bits):
    """Whether float32 ``bits`` is a number in [0, 1] (-0.0 included, NaN not)."""
    return (bits[:31] <= ONE_BITS) & (~bits[31] | (bits[:31] == 0))
