"""``python -m sim.dataflow.profile``: the FSMs it finds and its argument checks (the profile of
a whole round takes minutes on Amaranth's simulator; it is run by hand)."""

import pytest
from amaranth.hdl import Elaboratable, Fragment, Module, Signal

from sim.dataflow.profile import fsm_states, main


class _TwoMachines(Elaboratable):
    def __init__(self):
        self.go = Signal()

    def elaborate(self, platform):
        m = Module()
        inner = Module()
        with inner.FSM(name="inner"):
            with inner.State("A"):
                inner.next = "B"
            with inner.State("B"):
                inner.next = "A"
        m.submodules.child = inner
        with m.FSM(name="outer"):
            with m.State("WAIT"):
                with m.If(self.go):
                    m.next = "RUN"
            with m.State("RUN"):
                m.next = "WAIT"
        return m


def test_fsm_states_finds_every_fsm_with_its_state_names():
    states = fsm_states(Fragment.get(_TwoMachines(), None))
    assert sorted(states) == [":outer_state", "child:inner_state"]
    assert states[":outer_state"].decoder(1).startswith("RUN")


@pytest.mark.parametrize("argv", [["--batch", "0"], ["--latency", "0"], ["--vocab", "1"],
                                  ["--tree", "nope"]])
def test_arguments_out_of_range_are_refused(argv):
    with pytest.raises(SystemExit):
        main(argv)
