"""Where a command's clocks go, counted at the engine's memory ports (docs/vitis.md, "Counters
a host reads").

``CommandCounters`` counts, over every clock a command is in the engine (from the clock its
command is taken to the clock its completion is taken, both counted), which of three causes
the clock belongs to. Each clock has exactly one cause, so the three add up to the commands'
clocks:

* ``backpressure_cycles``: the memory refuses something the engine offers (an address on any
  ``ar``/``aw`` channel or a data beat on any ``w`` channel is valid and not ready);
* ``memory_cycles``: otherwise, the engine waits for the memory (a burst is outstanding on
  some port, a read awaiting its data or a write awaiting its response, and no data beat
  crosses any port this clock);
* ``busy_cycles``: the rest, where the engine computes or moves data.

All counters run from reset and wrap at ``COUNTER_BITS``; a host reads them before and after
a command and takes the difference.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.lib.params import check_int

from .memory_ports import COUNTER_BITS

__all__ = ["CommandCounters", "COMMAND_COUNTERS"]

#: The counters of ``CommandCounters``, in the order a host's counter index numbers them.
COMMAND_COUNTERS = ("commands", "cycles", "busy_cycles", "memory_cycles",
                    "backpressure_cycles")

#: Bursts one port may have outstanding, as counted (the engine's ports stay far below).
_OUTSTANDING = 1 << 10


class CommandCounters(wiring.Component):
    """Commands and their clocks by cause (see the module).

    Parameters
    ----------
    ports : int, 1..64
        Memory ports whose outstanding bursts are tracked.

    Members
    -------
    command_taken : In(1)
        The engine takes a command this clock.
    completion_taken : In(1)
        The engine's completion is taken this clock.
    refused : In(1)
        Some ``ar``/``aw`` address or ``w`` beat is valid and not ready this clock.
    beat : In(1)
        Some ``r`` or ``w`` data beat crosses a port this clock.
    issued : In(ports)
        Per port: a burst is requested this clock (``ar`` or ``aw`` handshake).
    retired : In(ports)
        Per port: a burst is done this clock (its ``r`` beat with ``last``, or its ``b``
        response, taken).
    commands, cycles, busy_cycles, memory_cycles, backpressure_cycles : Out(COUNTER_BITS)
        Commands taken, and the clocks of commands (``cycles``) by cause.
    """

    def __init__(self, *, ports: int):
        check_int("ports", ports, 1, 64)
        self._ports = ports
        super().__init__({
            "command_taken": In(1), "completion_taken": In(1), "refused": In(1),
            "beat": In(1), "issued": In(ports), "retired": In(ports),
            **{name: Out(COUNTER_BITS) for name in COMMAND_COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        running = Signal()  # a command is in the engine (after the clock it was taken)
        with m.If(self.command_taken):
            m.d.sync += [running.eq(1), self.commands.eq(self.commands + 1)]
        with m.If(self.completion_taken):
            m.d.sync += running.eq(0)

        waiting = Signal()  # some port has a burst outstanding
        for port in range(self._ports):
            outstanding = Signal(range(_OUTSTANDING), name=f"outstanding{port}")
            m.d.sync += outstanding.eq(outstanding + self.issued[port] - self.retired[port])
            with m.If(outstanding != 0):
                m.d.comb += waiting.eq(1)

        with m.If(running | self.command_taken):
            m.d.sync += self.cycles.eq(self.cycles + 1)
            with m.If(self.refused):
                m.d.sync += self.backpressure_cycles.eq(self.backpressure_cycles + 1)
            with m.Elif(waiting & ~self.beat):
                m.d.sync += self.memory_cycles.eq(self.memory_cycles + 1)
            with m.Else():
                m.d.sync += self.busy_cycles.eq(self.busy_cycles + 1)
        return m
