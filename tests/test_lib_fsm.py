# amaranth: UnusedElaboratable=no
"""``hw.lib.fsm.OneHotFSM`` against Amaranth's ``m.FSM``: the same machine written both ways
follows the same states clock for clock on random inputs (last ``next`` wins, no ``next``
stays, a ``next`` to the state itself masks an earlier exit), its flags stay one-hot, and it
refuses misuse (nested states, a `next` outside a state, a state without a block)."""

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from hw.lib.fsm import OneHotFSM

STATES = ["A", "B", "C", "D"]


def describe(m, fsm, c, count):
    """Four states; ``c`` the conditions, ``count`` a register written in two states."""
    with fsm.State("A"):
        with m.If(c[0]):
            fsm.next = "B"
        with m.If(c[1]):  # overlaps the one above: the later one wins
            fsm.next = "C"
    with fsm.State("B"):
        m.d.sync += count.eq(count + 1)
        with m.If(c[2]):
            fsm.next = "D"
        with m.Elif(c[3]):
            fsm.next = "A"
    with fsm.State("C"):
        m.d.sync += count.eq(count + 3)
        with m.If(c[0]):
            fsm.next = "A"
        with m.If(c[1] & c[2]):  # a stay that masks the exit above
            fsm.next = "C"
    with fsm.State("D"):
        fsm.next = "A"  # unconditionally, then maybe elsewhere
        with m.If(c[3]):
            fsm.next = "B"


class _Machine(wiring.Component):
    """``describe``'s machine as ``OneHotFSM`` (``one_hot``) or as ``m.FSM``; ``flags`` are the
    states' decodes."""

    c: In(4)
    state: Out(2)
    count: Out(8)
    flags: Out(4)

    def __init__(self, *, one_hot: bool):
        self._one_hot = one_hot
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        count = Signal(8)
        if self._one_hot:
            with OneHotFSM(m, init="A", name="s") as fsm:
                describe(m, fsm, self.c, count)
        else:
            with m.FSM(init="A") as fsm:
                describe(m, _AmaranthSpelling(m), self.c, count)
        for index, name in enumerate(STATES):
            with m.If(fsm.ongoing(name)):
                m.d.comb += self.state.eq(index)
            m.d.comb += self.flags[index].eq(fsm.ongoing(name))
        m.d.comb += self.count.eq(count)
        return m


class _AmaranthSpelling:
    """``describe``'s ``fsm.State``/``fsm.next`` on ``m.State``/``m.next``."""

    def __init__(self, m):
        self._m = m

    def State(self, name):  # noqa: N802
        return self._m.State(name)

    @property
    def next(self):
        raise AttributeError

    @next.setter
    def next(self, target):
        self._m.next = target


def trace(design, inputs):
    seen = []
    sim = Simulator(design)
    sim.add_clock(1e-6)

    async def bench(ctx):
        for value in inputs:
            ctx.set(design.c, value)
            await ctx.tick()
            seen.append((ctx.get(design.state), ctx.get(design.count), ctx.get(design.flags)))

    sim.add_testbench(bench)
    sim.run()
    return seen


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_hot_follows_amaranths_fsm(seed):
    rng = random.Random(seed)
    inputs = [rng.randrange(16) for _ in range(400)]
    reference = trace(_Machine(one_hot=False), inputs)
    one_hot = trace(_Machine(one_hot=True), inputs)
    assert one_hot == reference
    assert all(flags == 1 << state for state, _, flags in one_hot)
    assert len({state for state, _, _ in reference}) == len(STATES)  # every state visited


def test_refuses_misuse():
    m = Module()
    with pytest.raises(SyntaxError, match="outside a state"):
        with OneHotFSM(m, init="A") as fsm:
            fsm.next = "A"
    with pytest.raises(SyntaxError, match="inside state"):
        with OneHotFSM(m, init="A") as fsm, fsm.State("A"), fsm.State("B"):
            pass
    with pytest.raises(SyntaxError, match="without a `State` block: B"):
        with OneHotFSM(m, init="A") as fsm, fsm.State("A"):
            fsm.next = "B"
    with pytest.raises(SyntaxError, match="initial state 'X'"):
        with OneHotFSM(m, init="X") as fsm, fsm.State("A"):
            pass
    with OneHotFSM(m, init="A") as fsm, fsm.State("A"):
        pass
    with pytest.raises(SyntaxError, match="no state 'B'"):  # a flag nothing would drive
        fsm.ongoing("B")
    with pytest.raises(SyntaxError, match="written twice"):
        with OneHotFSM(m, init="A") as fsm:
            with fsm.State("A"):
                pass
            with fsm.State("A"):
                pass
