"""The engine's command and completion rings in card memory (docs/engine.md, "Command and
completion rings").

``CommandRing`` reads fixed-size command descriptors from a ring that the host fills and
presents them on a stream; ``CompletionRing`` writes each completion of a stream as a
fixed-size record into a ring that the host drains. A descriptor is its payload layout packed
little-endian into ``ceil(bits / 32)`` 32-bit words (bit ``k`` of the payload is bit
``k % 32`` of word ``k // 32``, the padding bits zero); a completion record is the completion
packed the same way, then one word: the completion's sequence number.

Index protocol (both rings): indices count entries, ``0 .. entries - 1``, and wrap to 0; the
ring is empty when the producer index equals the consumer index and full when advancing the
producer would make them equal (one entry stays empty, so a ring of ``entries`` holds at most
``entries - 1``). The host produces commands (``head``, written through the control registers)
and consumes completions (the completion ring's ``tail``); the hardware consumes commands
(``tail``) and produces completions (``head``). An index advances only once its entry is done
with: the command ring's ``tail`` once the descriptor's words are read (the slot may be
refilled), the completion ring's ``head`` once the record's writes have their responses (the
record is in memory).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.params import ParameterTypeError, check_int, check_power_of_two

from .memory_ports import WordReader, WordWriter, read_port_signature, write_port_signature

__all__ = ["CommandRing", "CompletionRing", "payload_words", "INDEX_BITS"]

#: Bits of every ring index and size (the control registers' 32-bit words).
INDEX_BITS = 32


def payload_words(layout: data.StructLayout) -> int:
    """32-bit words a payload of ``layout`` packs into: ``ceil(layout.size / 32)``."""
    return max(1, -(-layout.size // 32))


def _check(layout, address_width, port_bits):
    if not isinstance(layout, data.StructLayout):
        raise ParameterTypeError("layout", "`layout` must be an amaranth.lib.data.StructLayout, "
                                           f"not {layout!r}")
    check_int("address_width", address_width, 16, 64)
    check_power_of_two("port_bits", port_bits, 32, 1024)
    return layout


def _advance(m, index, offset, entries, step_bytes):
    """Advance ring ``index`` (and its byte ``offset``, ``index * step_bytes``), wrapping."""
    wrap = index + 1 == entries
    m.d.sync += [index.eq(Mux(wrap, 0, index + 1)),
                 offset.eq(Mux(wrap, 0, offset + step_bytes))]


class CommandRing(wiring.Component):
    """Read command descriptors from a ring in card memory onto a stream (see the module).

    While ``enable`` is high and the ring holds a descriptor (``head != tail``, with
    ``entries >= 2`` and ``head < entries``: a ring that breaks these is treated as empty),
    the descriptor at ``tail`` is read through ``port``; ``tail`` advances once its words are
    in, and it waits on ``command`` until taken. One descriptor is read or held at a time.

    Parameters
    ----------
    layout : data.StructLayout
        The descriptor's payload; ``payload_words(layout)`` words per ring entry.
    address_width : int, 16..64
        Bits of byte addresses.
    port_bits : int, 32..1024, a power of two
        Data bits per beat of ``port``.

    Members
    -------
    port : Out(read_port_signature(address_width, port_bits))
        Reads of the descriptors (one-beat bursts, ``WordReader``).
    command : Out(stream.Signature(layout))
        The descriptors, in ring order.
    base : In(address_width)
        Byte address of entry 0 (a multiple of 4).
    entries : In(32)
        Ring size in entries (at least 2).
    head : In(32)
        Producer index (the host's: one past its last descriptor).
    tail : Out(32)
        Consumer index: the next entry to read.
    enable : In(1)
        Read descriptors while high (a read under way finishes regardless).
    clear : In(1)
        Reset ``tail`` to 0 (a pulse while ``busy`` is low).
    pending : Out(1)
        The ring holds a descriptor not read yet (a register: one clock behind ``head`` and
        ``tail``, keeping their 32-bit compares off the read's start).
    busy : Out(1)
        A descriptor is being read or waits on ``command``.
    """

    def __init__(self, layout, *, address_width=32, port_bits=256):
        self._layout = _check(layout, address_width, port_bits)
        self._port_bits = port_bits
        super().__init__({
            "port": Out(read_port_signature(address_width, port_bits)),
            "command": Out(stream.Signature(layout)),
            "base": In(address_width),
            "entries": In(INDEX_BITS),
            "head": In(INDEX_BITS),
            "tail": Out(INDEX_BITS),
            "enable": In(1),
            "clear": In(1),
            "pending": Out(1),
            "busy": Out(1),
        })

    @property
    def descriptor_words(self) -> int:
        return payload_words(self._layout)

    def elaborate(self, platform):
        m = Module()
        words = self.descriptor_words
        m.submodules.reader = reader = WordReader(
            address_width=len(self.base), port_bits=self._port_bits, max_words=words)
        wiring.connect(m, reader.port, wiring.flipped(self.port))

        offset = Signal.like(self.base)  # tail * descriptor bytes
        buffer = Signal(32 * words)
        count = Signal(range(words + 1))
        m.d.sync += self.pending.eq((self.entries >= 2) & (self.head < self.entries)
                                    & (self.head != self.tail))
        with m.FSM(name="ring"):
            with m.State("IDLE"):
                with m.If(self.enable & self.pending):
                    m.d.comb += [reader.start.eq(1), reader.address.eq(self.base + offset),
                                 reader.count.eq(words)]
                    m.d.sync += count.eq(0)
                    m.next = "READ"
            with m.State("READ"):
                m.d.comb += [self.busy.eq(1), reader.words.ready.eq(1)]
                with m.If(reader.words.valid):
                    m.d.sync += [buffer.eq(Cat(buffer[32:], reader.words.payload)),
                                 count.eq(count + 1)]
                    with m.If(count == words - 1):
                        _advance(m, self.tail, offset, self.entries, 4 * words)
                        m.next = "HOLD"
            with m.State("HOLD"):
                m.d.comb += [self.busy.eq(1), self.command.valid.eq(1),
                             self.command.payload.eq(buffer[:self._layout.size])]
                with m.If(self.command.ready):
                    m.next = "IDLE"
        with m.If(self.clear):
            m.d.sync += [self.tail.eq(0), offset.eq(0), self.pending.eq(0)]
        return m


class CompletionRing(wiring.Component):
    """Write the completions of a stream as records into a ring in card memory (see the
    module).

    A completion is taken when the ring has room (advancing ``head`` would not reach
    ``tail``; ``entries >= 2``, ``head`` and ``tail`` below ``entries``): a full ring stalls
    ``completion`` and overwrites nothing. Room is a register, one clock behind ``tail`` (the
    host's moves only free entries) and cleared for two clocks when ``head`` moves (the
    wrapped ``head + 1`` is a register too): after each record two clocks pass before the
    next completion is taken, and the 32-bit adds and compares stay off the completion's
    handshake. Its record (the packed completion, then its
    ``sequence`` number) is written at ``head``; once every write has its response, ``head``
    and ``sequence`` advance and ``event`` pulses.

    Parameters
    ----------
    layout : data.StructLayout
        The completion's payload; a record is ``payload_words(layout) + 1`` words.
    address_width : int, 16..64
        Bits of byte addresses.
    port_bits : int, 32..1024, a power of two
        Data bits per beat of ``port``.

    Members
    -------
    port : Out(write_port_signature(address_width, port_bits))
        Writes of the records (one-beat bursts with byte strobes, ``WordWriter``).
    completion : In(stream.Signature(layout))
        The completions, in order.
    base : In(address_width)
        Byte address of entry 0 (a multiple of 4).
    entries : In(32)
        Ring size in entries (at least 2).
    tail : In(32)
        Consumer index (the host's: the next record it will read).
    head : Out(32)
        Producer index: one past the last record in memory.
    sequence : Out(32)
        Records written since ``clear`` (the last record's sequence number).
    event : Out(1)
        One-clock pulse with each advance of ``head`` (the completion interrupt).
    clear : In(1)
        Reset ``head`` and ``sequence`` to 0 and ``error`` to 0 (a pulse while ``busy`` is
        low).
    busy : Out(1)
        A record is being written.
    error : Out(1)
        Sticky: a write response other than OKAY.
    """

    def __init__(self, layout, *, address_width=32, port_bits=256):
        self._layout = _check(layout, address_width, port_bits)
        self._port_bits = port_bits
        super().__init__({
            "port": Out(write_port_signature(address_width, port_bits)),
            "completion": In(stream.Signature(layout)),
            "base": In(address_width),
            "entries": In(INDEX_BITS),
            "tail": In(INDEX_BITS),
            "head": Out(INDEX_BITS),
            "sequence": Out(INDEX_BITS),
            "event": Out(1),
            "clear": In(1),
            "busy": Out(1),
            "error": Out(1),
        })

    @property
    def record_words(self) -> int:
        return payload_words(self._layout) + 1

    def elaborate(self, platform):
        m = Module()
        words = self.record_words
        m.submodules.writer = writer = WordWriter(
            address_width=len(self.base), port_bits=self._port_bits, max_words=words)
        wiring.connect(m, writer.port, wiring.flipped(self.port))

        offset = Signal.like(self.base)  # head * record bytes
        buffer = Signal(32 * words)
        next_head = Signal.like(self.head)  # head + 1, wrapped: a clock behind head
        settled = Signal()  # head has not moved for a clock, so next_head is current
        room = Signal()
        m.d.sync += [next_head.eq(Mux(self.head + 1 == self.entries, 0, self.head + 1)),
                     settled.eq(1),
                     room.eq(settled & (self.entries >= 2) & (self.head < self.entries)
                             & (self.tail < self.entries) & (next_head != self.tail)),
                     self.event.eq(0)]
        with m.FSM(name="ring"):
            with m.State("IDLE"):
                m.d.comb += self.completion.ready.eq(room)
                with m.If(self.completion.valid & room):
                    padding = Const(0, 32 * (words - 1) - self._layout.size)
                    m.d.sync += buffer.eq(Cat(self.completion.payload.as_value(), padding,
                                              self.sequence + 1))
                    m.d.comb += [writer.start.eq(1), writer.address.eq(self.base + offset),
                                 writer.count.eq(words)]
                    m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += [self.busy.eq(1), writer.words.valid.eq(1),
                             writer.words.payload.eq(buffer[:32])]
                with m.If(writer.words.ready):
                    m.d.sync += buffer.eq(buffer[32:])
                with m.If(~writer.busy):
                    _advance(m, self.head, offset, self.entries, 4 * words)
                    m.d.sync += [self.sequence.eq(self.sequence + 1), self.event.eq(1),
                                 room.eq(0), settled.eq(0)]
                    m.next = "IDLE"
        with m.If(writer.errors):
            m.d.sync += self.error.eq(1)
        with m.If(self.clear):
            m.d.sync += [self.head.eq(0), offset.eq(0), self.sequence.eq(0), self.error.eq(0),
                         room.eq(0), settled.eq(0)]
        return m
