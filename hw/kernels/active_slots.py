"""Active-slot compaction (docs/kernels.md §9, second half of K7) in hardware.

Finished requests leave the batch: the survivors keep their order, ``active_slots[i]`` is the
old batch row of new row ``i`` and ``active_inverse[b]`` the new row of old row ``b`` (-1 if
it finished), ``active_count`` the number of survivors — a stable stream compaction, the
exclusive prefix sum of ``not finished``. Bit-exact with ``golden.compact_active_slots``.
Later stages iterate over ``active_slots[0 .. active_count-1]`` only, so they spend no cycles
on finished requests.

One call is one ``cmd`` beat (``batch_size`` B), then B beats on ``finished`` (K7's
``finished`` in batch order, e.g. straight from ``VerifyResult.result``). For each row ``b``,
in the clock it arrives, ``inverse`` carries ``active_inverse[b]`` and, if ``b`` survives,
``slots`` carries ``active_slots[count] = b`` (``count`` = survivors so far); after the last row
``slots`` carries the ``B - active_count`` tail entries (-1) and ``count`` the
``active_count``. A call takes ``B + (B - active_count) + 2`` clocks without back-pressure.
"""

from dataclasses import asdict, dataclass

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring

from hw.lib.component import KernelComponent
from hw.lib.params import ParameterRecord, parameter
from hw.lib.stream import RegisterSlice, packet_layout

__all__ = ["ActiveSlotsParams", "ActiveSlots", "synthesis_parameters",
           "synthesis_configuration"]


@dataclass(frozen=True)
class ActiveSlotsParams(ParameterRecord):
    """Validated build parameters of :class:`ActiveSlots` and the port layouts they give
    (testbenches and the host read layouts here without building the component)."""

    max_batch_size: int = parameter(
        256, "Largest ``batch_size``: sets the width of ``batch_size`` "
             "(``max_batch_size.bit_length()`` bits, every value of that width is accepted) and "
             "of the row indices.")

    @property
    def batch_bits(self) -> int:
        return self.max_batch_size.bit_length()

    @property
    def cmd_layout(self) -> data.StructLayout:
        return data.StructLayout({"batch_size": unsigned(self.batch_bits)})

    @property
    def finished_layout(self) -> data.StructLayout:
        return packet_layout({"finished": 1})

    @property
    def inverse_layout(self) -> data.StructLayout:
        return packet_layout({"active_inverse": signed(self.batch_bits + 1)})

    @property
    def slot_layout(self) -> data.StructLayout:
        return packet_layout({"active_slot": signed(self.batch_bits + 1)})

    @property
    def count_layout(self) -> data.StructLayout:
        return data.StructLayout({"active_count": unsigned(self.batch_bits)})

    @property
    def ports(self) -> dict:
        """Port name -> payload layout."""
        return {"cmd": self.cmd_layout, "finished": self.finished_layout,
                "inverse": self.inverse_layout, "slots": self.slot_layout,
                "count": self.count_layout}


class ActiveSlots(KernelComponent):
    """Stable compaction of the unfinished batch rows.

    Parameters: the fields of :class:`ActiveSlotsParams`.

    Members
    -------
    cmd : In(stream.Signature(cmd_layout))
        One beat per call: ``batch_size``. Taken between calls only.
    finished : In(stream.Signature(finished_layout))
        ``batch_size`` beats per call: ``finished`` of row ``b``, ascending ``b``.
        ``first``/``last`` are not checked.
    inverse : Out(stream.Signature(inverse_layout))
        ``batch_size`` beats: ``active_inverse[b]`` (-1: finished); ``first`` on ``b = 0``,
        ``last`` on ``b = B - 1``.
    slots : Out(stream.Signature(slot_layout))
        ``batch_size`` beats: ``active_slots[i]`` for ``i = 0 .. B-1`` (-1 for
        ``i >= active_count``); ``first`` on ``i = 0``, ``last`` on ``i = B - 1``.
    count : Out(stream.Signature(count_layout))
        One beat per call (also for ``B = 0``): ``active_count``.
    """

    Params = ActiveSlotsParams
    OUTPUTS = ("inverse", "slots", "count")

    def elaborate(self, platform):
        m = Module()
        params = self._params
        bits = params.batch_bits
        m.submodules.inverse_slice = inverse_slice = RegisterSlice(params.inverse_layout)
        m.submodules.slot_slice = slot_slice = RegisterSlice(params.slot_layout)
        m.submodules.count_slice = count_slice = RegisterSlice(params.count_layout)
        wiring.connect(m, inverse_slice.o, wiring.flipped(self.inverse))
        wiring.connect(m, slot_slice.o, wiring.flipped(self.slots))
        wiring.connect(m, count_slice.o, wiring.flipped(self.count))

        batch = Signal(bits)
        row = Signal(bits)  # b of the next `finished` beat
        survivors = Signal(bits)  # active_count so far
        tail = Signal(bits)  # next active_slots index of the tail

        alive = ~self.finished.payload.finished
        with m.FSM(name="compact"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += [batch.eq(self.cmd.payload.batch_size), row.eq(0),
                                 survivors.eq(0)]
                    with m.If(self.cmd.payload.batch_size == 0):
                        m.next = "COUNT"
                    with m.Else():
                        m.next = "SCAN"
            with m.State("SCAN"):
                # A row goes through when both of its outputs can take it.
                can_take = inverse_slice.i.ready & (slot_slice.i.ready | ~alive)
                m.d.comb += [
                    self.finished.ready.eq(can_take),
                    inverse_slice.i.valid.eq(self.finished.valid & can_take),
                    inverse_slice.i.payload.active_inverse.eq(Mux(alive, survivors, -1)),
                    inverse_slice.i.payload.first.eq(row == 0),
                    inverse_slice.i.payload.last.eq(row == batch - 1),
                    slot_slice.i.valid.eq(self.finished.valid & can_take & alive),
                    slot_slice.i.payload.active_slot.eq(row),
                    slot_slice.i.payload.first.eq(survivors == 0),
                    slot_slice.i.payload.last.eq(survivors == batch - 1),
                ]
                with m.If(self.finished.valid & can_take):
                    m.d.sync += [row.eq(row + 1), survivors.eq(survivors + alive)]
                    with m.If(row == batch - 1):
                        m.d.sync += tail.eq(survivors + alive)
                        with m.If(survivors + alive == batch):
                            m.next = "COUNT"
                        with m.Else():
                            m.next = "TAIL"
            with m.State("TAIL"):
                m.d.comb += [
                    slot_slice.i.valid.eq(1),
                    slot_slice.i.payload.active_slot.eq(-1),
                    slot_slice.i.payload.first.eq(tail == 0),
                    slot_slice.i.payload.last.eq(tail == batch - 1),
                ]
                with m.If(slot_slice.i.ready):
                    m.d.sync += tail.eq(tail + 1)
                    with m.If(tail == batch - 1):
                        m.next = "COUNT"
            with m.State("COUNT"):
                m.d.comb += [count_slice.i.valid.eq(1),
                             count_slice.i.payload.active_count.eq(survivors)]
                with m.If(count_slice.i.ready):
                    m.next = "IDLE"
        return m


def synthesis_parameters(**overrides) -> ActiveSlotsParams:
    """The parameters of the synthesis report: batches of up to 256 requests."""
    return ActiveSlotsParams(**{"max_batch_size": 256, **overrides})


def synthesis_configuration(**overrides) -> ActiveSlots:
    """The compaction at ``synthesis_parameters(**overrides)``."""
    return ActiveSlots(**asdict(synthesis_parameters(**overrides)))
