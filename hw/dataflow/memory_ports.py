"""The engine's memory master ports: 32-bit word streams over AXI4-style read and write ports
(``hw.lib.axi``), and the per-port counters.

Every array the engine exchanges with card memory is a run of 32-bit little-endian words
(docs/engine.md, "Memory formats"). ``WordReader`` turns ``count`` words from a byte address
into a stream of words; ``WordWriter`` turns a stream of words into writes from a byte
address. The reader covers a run with INCR bursts of up to ``max_burst`` beats aligned to
``max_burst``-beat blocks (the first runs to the next block boundary), so none crosses a 4 KiB
boundary; it issues them as fast as the port takes them, and any number may be in flight (the
slave answers in order and may stall either channel). The writer issues a one-beat burst per
whole beat as the beats come: a write burst's length must be known before its data, and a
one-beat burst never leaves the bus waiting for data that an aborted command will not send.
A run's first and last beats carry only the words that belong to it (the writer's byte
strobes say which), so a run may start at any word. Both take a run's ``address`` and
``count`` into registers with ``start`` and begin it a clock later.

``PortCounters`` counts, per port, the data beats and bytes that crossed it and the cycles it
was busy or stalled: the figures of the engine's byte accounting.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from hw.lib.axi import Burst, read_port_signature, write_port_signature
from hw.lib.packer import Packer, group_layout
from hw.lib.params import check_int, check_power_of_two, index_bits

# ``read_port_signature`` and ``write_port_signature`` are hw.lib.axi's, named here too for
# the modules that import them from here (hw.dataflow.engine, sim.dataflow.memory).
__all__ = ["read_port_signature", "write_port_signature", "WordReader", "WordWriter",
           "ReadShare", "PortCounters", "COUNTER_BITS", "READ_BURST",
           "reader_control_signature", "writer_control_signature"]

#: Beats a ``WordWriter`` holds whose address or data the slave has not taken.
WRITE_AHEAD = 4
#: Width of every port counter (2**48 bytes at 300 MHz is about nine days of traffic).
COUNTER_BITS = 48

#: Most beats of a ``WordReader`` burst (the default; AXI4's 4 KiB boundary caps it).
READ_BURST = 16

_BOUNDARY = 4096  # AXI4: no burst crosses a 4 KiB address boundary


class _Countdown:
    """A down counter with its ``!= 0`` and ``== 1`` tests kept in registers beside it: they
    gate the ports' handshakes, and the counters are up to 17 bits wide."""

    def __init__(self, limit: int, *, name: str):
        self.value = Signal(range(limit + 1), name=name)
        self.nonzero = Signal(name=f"{name}_nonzero")
        self.last = Signal(name=f"{name}_last")  # value == 1

    def load(self, m: Module, value):
        m.d.sync += [self.value.eq(value), self.nonzero.eq(value != 0), self.last.eq(value == 1)]

    def decrement(self, m: Module, by=1):
        if isinstance(by, int) and by == 1:
            m.d.sync += [self.value.eq(self.value - 1), self.nonzero.eq(~self.last),
                         self.last.eq(self.value == 2)]
        else:
            m.d.sync += [self.value.eq(self.value - by), self.nonzero.eq(self.value != by),
                         self.last.eq(self.value == by + 1)]


class _RunStart:
    """A run's ``address`` and ``count`` in registers from the clock of ``start``; the port's
    counters load from them in the next clock, while ``pending`` is high. The engine computes
    both from its command in the clock of ``start`` (products, sums, a state's choice), so the
    counters and their flags are a clock away from that logic: the run starts one clock later."""

    def __init__(self, m: Module, port, lanes: int):
        lane_bits = max(1, (lanes - 1).bit_length())
        self.pending = Signal()
        self.address = Signal.like(port.address, name="run_address")
        self.count = Signal.like(port.count, name="run_count")
        self.first_lane = self.address[2:2 + lane_bits] if lanes > 1 else 0
        m.d.sync += self.pending.eq(port.start)
        with m.If(port.start):
            m.d.sync += [self.address.eq(port.address), self.count.eq(port.count)]


def reader_control_signature(address_width: int, max_words: int, lanes: int
                             ) -> wiring.Signature:
    """A ``WordReader`` run as its user (a command) drives it: ``start``, ``address``,
    ``count`` out; the ``words`` and ``group`` streams, ``busy`` and ``can_start`` in."""
    return wiring.Signature({"start": Out(1), "address": Out(address_width),
                             "count": Out(range(max_words + 1)),
                             "words": In(stream.Signature(32)),
                             "group": In(stream.Signature(group_layout(32, lanes))),
                             "busy": In(1), "can_start": In(1)})


def writer_control_signature(address_width: int, max_words: int, group_words: int = 0
                             ) -> wiring.Signature:
    """A ``WordWriter`` run as its user (a command) drives it: ``start``, ``address``,
    ``count`` and the ``words`` stream out, ``busy`` and ``can_start`` in; with
    ``group_words`` (the writer's) also its ``group`` stream out."""
    members = {"start": Out(1), "address": Out(address_width),
               "count": Out(range(max_words + 1)), "words": Out(stream.Signature(32)),
               "busy": In(1), "can_start": In(1)}
    if group_words:
        members["group"] = Out(stream.Signature(group_layout(32, group_words)))
    return wiring.Signature(members)


def _check_port(address_width, port_bits):
    check_int("address_width", address_width, 16, 64)
    check_power_of_two("port_bits", port_bits, 32, 1024)


class WordReader(wiring.Component):
    """Read runs of 32-bit words from memory and stream them out, one word per clock.

    Runs follow one another without waiting for memory: a run may start once the one before
    has issued all its bursts (and fewer than ``runs`` wait behind the one whose words are
    streaming out), so its memory latency passes while the words before it stream out. The
    words leave run after run, in the order the runs started; a user that starts a run before
    the one before has ended counts its words (a ``group`` never holds words of two runs).

    Parameters
    ----------
    address_width : int, 16..64
        Bits of byte addresses.
    port_bits : int, 32..1024, a power of two
        Data bits per beat.
    max_words : int, at least 1
        Longest run.
    max_burst : int, a power of two, 1 .. 4096 / (port_bits / 8)
        Most beats per burst.
    runs : int, at least 1
        Most runs waiting behind the one whose words are streaming out.

    Members
    -------
    port : Out(read_port_signature(address_width, port_bits))
    start : In(1)
        Begin a run (a one-clock pulse while ``can_start`` is high).
    address : In(address_width)
        Byte address of the run's first word (a multiple of 4), with ``start``.
    count : In(range(max_words + 1))
        Words in the run, with ``start`` (0: nothing is read).
    words : Out(stream.Signature(32))
        The run's words in address order, one a transfer.
    group : Out(stream.Signature(group_layout(32, port_bits // 32)))
        The same words, the rest of a beat a transfer (the first beat's from the run's first
        word; ``count`` of them, from index 0). A consumer takes ``words`` or ``group``, never
        both in one clock.
    busy : Out(1)
        High from the clock after ``start`` until the last word of every run has left.
    can_start : Out(1)
        A run may start: every burst of the runs before is issued and fewer than ``runs``
        wait. A user that starts runs only while ``busy`` is low has one run at a time.
    """

    def __init__(self, *, address_width=32, port_bits=256, max_words=1024,
                 max_burst=READ_BURST, runs=1):
        _check_port(address_width, port_bits)
        self._address_width = address_width
        self._lanes = port_bits // 32
        self._max_words = check_int("max_words", max_words, 1)
        self._max_burst = check_power_of_two("max_burst", max_burst, 1,
                                             _BOUNDARY // (port_bits // 8))
        self._runs = check_int("runs", runs, 1)
        super().__init__({
            "port": Out(read_port_signature(address_width, port_bits)),
            "start": In(1),
            "address": In(address_width),
            "count": In(range(max_words + 1)),
            "words": Out(stream.Signature(32)),
            "group": Out(stream.Signature(group_layout(32, self._lanes))),
            "busy": Out(1),
            "can_start": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        port_bytes = lanes * 4
        lane_bits = max(1, (lanes - 1).bit_length())
        ar, r = self.port.ar, self.port.r

        beats_left = _Countdown(self._max_words + 1, name="beats_left")  # beats not requested
        # the run streaming out: its words not yet out, its beats not yet received
        words_left = _Countdown(self._max_words, name="words_left")
        beats_due = _Countdown(self._max_words + 1, name="beats_due")
        lane = Signal(lane_bits)
        beat = Signal(32 * lanes, reset_less=True)
        beat_valid = Signal()

        # The burst offered: to the next `max_burst`-beat block boundary, or the run's rest.
        block = self._max_burst
        size_bits = port_bytes.bit_length() - 1
        room = Signal(range(block + 1))
        burst = Signal(range(block + 1))
        m.d.comb += room.eq(block - (ar.payload.address[size_bits:size_bits + block.bit_length()
                                                         - 1] if block > 1 else 0))
        m.d.comb += burst.eq(Mux(beats_left.value < room, beats_left.value, room))

        # A run's bursts are issued from the clock after its start; its words stream out once
        # the runs before it have left (`queued` holds the runs in between).
        run = _RunStart(m, self, lanes)
        run_layout = data.StructLayout({"first_lane": lane_bits,
                                        "count": range(self._max_words + 1),
                                        "beats": range(self._max_words + 2)})
        m.submodules.queued = queued = SyncFIFO(width=run_layout.size, depth=self._runs)
        head = data.View(run_layout, queued.r_data)
        entry = Signal(run_layout)
        run_beats = Mux(run.count == 0, 0, (run.first_lane + run.count + lanes - 1) // lanes)
        m.d.comb += [entry.first_lane.eq(run.first_lane), entry.count.eq(run.count),
                     entry.beats.eq(run_beats)]
        m.d.comb += [ar.valid.eq(beats_left.nonzero), ar.payload.length.eq(burst - 1),
                     ar.payload.burst.eq(Burst.INCR), queued.w_data.eq(entry),
                     queued.w_en.eq(run.pending),
                     self.busy.eq(run.pending | queued.r_rdy | words_left.nonzero),
                     self.can_start.eq(~run.pending & ~beats_left.nonzero & queued.w_rdy)]
        with m.If(ar.valid & ar.ready):
            m.d.sync += ar.payload.address.eq(ar.payload.address + (burst << size_bits))
            beats_left.decrement(m, burst)

        word_lanes = [beat[32 * i:32 * (i + 1)] for i in range(lanes)]
        m.d.comb += [self.words.valid.eq(beat_valid),
                     self.words.payload.eq(Cat(word_lanes).word_select(lane, 32)
                                           if lanes > 1 else beat)]
        taken = self.words.valid & self.words.ready
        # the beat's words from `lane` on, moved to index 0
        rest = Signal(range(lanes + 1))
        m.d.comb += [rest.eq(lanes - lane), self.group.valid.eq(beat_valid),
                     self.group.payload.count.eq(Mux(words_left.value < rest,
                                                     words_left.value, rest))]
        for index in range(lanes):
            m.d.comb += self.group.payload.data[index].eq(
                (beat >> (32 * index)).word_select(lane, 32) if lanes > 1 else beat)
        group_taken = self.group.valid & self.group.ready
        beat_done = (taken & ((lane == lanes - 1) | words_left.last)) | group_taken
        m.d.comb += r.ready.eq((~beat_valid | beat_done) & beats_due.nonzero)
        with m.If(taken):
            m.d.sync += lane.eq(lane + 1)
            words_left.decrement(m)
        with m.If(group_taken):
            words_left.decrement(m, self.group.payload.count)
        with m.If(beat_done):
            m.d.sync += [beat_valid.eq(0), lane.eq(0)]
        with m.If(r.valid & r.ready):
            m.d.sync += [beat.eq(r.payload.data), beat_valid.eq(1)]
            beats_due.decrement(m)

        with m.If(run.pending):
            m.d.sync += ar.payload.address.eq(run.address & ~(port_bytes - 1))
            beats_left.load(m, run_beats)
        # the next run streams out once the one before has left
        m.d.comb += queued.r_en.eq(~words_left.nonzero & ~beat_valid)
        with m.If(queued.r_en & queued.r_rdy):
            m.d.sync += lane.eq(head.first_lane)
            words_left.load(m, head.count)
            beats_due.load(m, head.beats)
        return m


class WordWriter(wiring.Component):
    """Write a stream of 32-bit words to a run of memory words.

    The words go through a ``hw.lib.packer.Packer`` into whole beats, so a producer may hand
    over up to ``group_words`` words a clock (``group``) and the port takes a beat a clock.

    Parameters
    ----------
    address_width, port_bits, max_words
        As :class:`WordReader`.
    group_words : int, at least 1
        Most words of a ``group`` transfer.

    Members
    -------
    port : Out(write_port_signature(address_width, port_bits))
    start : In(1)
        Begin a run (a one-clock pulse while ``can_start`` is high).
    address : In(address_width)
        Byte address of the run's first word (a multiple of 4), with ``start``.
    count : In(range(max_words + 1))
        Words in the run, with ``start``.
    words : In(stream.Signature(32))
        The run's words in address order, one a transfer (taken only during a run).
    group : In(stream.Signature(group_layout(32, group_words)))
        The run's words, ``count`` a transfer (from index 0). A producer offers ``words`` or
        ``group``, never both in one clock, and never more words than the run has left.
    busy : Out(1)
        High from the clock after ``start`` until every burst of every run has its response.
    can_start : Out(1)
        A run may start: the one before has handed all its beats to the port. Its bursts may
        still await their responses, so runs follow one another without a memory latency
        between them; ``busy`` says when all have landed.
    errors : Out(1)
        Sticky: a response other than OKAY was received (cleared by ``start``: one that
        arrives after a ``start`` for the run before counts for the new run).
    """

    def __init__(self, *, address_width=32, port_bits=256, max_words=1024, group_words=1):
        _check_port(address_width, port_bits)
        self._lanes = port_bits // 32
        self._max_words = check_int("max_words", max_words, 1)
        self._group_words = check_int("group_words", group_words, 1)
        super().__init__({
            "port": Out(write_port_signature(address_width, port_bits)),
            "start": In(1),
            "address": In(address_width),
            "count": In(range(max_words + 1)),
            "words": In(stream.Signature(32)),
            "group": In(stream.Signature(group_layout(32, group_words))),
            "busy": Out(1),
            "can_start": Out(1),
            "errors": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        port_bytes = lanes * 4
        aw, w, b = self.port.aw, self.port.w, self.port.b
        m.submodules.packer = packer = Packer(unit_bits=32, in_units=self._group_words,
                                              out_units=lanes)

        words_left = _Countdown(self._max_words, name="words_left")  # words not yet taken
        responses_left = Signal(range(self._max_words + 2))  # bursts without a response
        address = Signal.like(aw.payload.address)  # the next beat's
        run = _RunStart(m, self, lanes)
        # A beat's address and its data wait in queues of their own: the next beats' addresses
        # go out while a beat's data waits for the slave (which may take a burst's data only
        # after its address).
        m.submodules.addresses = addresses = SyncFIFO(width=len(address), depth=WRITE_AHEAD)
        m.submodules.beats = beats = SyncFIFO(width=33 * lanes, depth=WRITE_AHEAD)
        strobe = beats.r_data[32 * lanes:]

        m.d.comb += [aw.valid.eq(addresses.r_rdy), aw.payload.address.eq(addresses.r_data),
                     addresses.r_en.eq(aw.ready), w.valid.eq(beats.r_rdy),
                     beats.r_en.eq(w.ready), aw.payload.length.eq(0),
                     aw.payload.burst.eq(Burst.INCR),
                     w.payload.data.eq(beats.r_data[:32 * lanes]), w.payload.last.eq(1),
                     w.payload.strobe.eq(Cat(strobe[k].replicate(4) for k in range(lanes))),
                     b.ready.eq(1),
                     self.busy.eq(run.pending | words_left.nonzero | ~packer.empty
                                  | (responses_left != 0)),
                     self.can_start.eq(~run.pending & ~words_left.nonzero & packer.empty)]
        responded = b.valid & b.ready
        with m.If(responded):
            with m.If(b.payload.resp != 0):
                m.d.sync += self.errors.eq(1)

        # The run's words into the packer, one or a group a transfer.
        accepting = packer.i.ready & words_left.nonzero
        m.d.comb += [self.words.ready.eq(accepting), self.group.ready.eq(accepting),
                     packer.i.valid.eq((self.words.valid | self.group.valid) & accepting)]
        with m.If(self.group.valid):
            m.d.comb += packer.i.payload.eq(self.group.payload)
        with m.Else():
            m.d.comb += [packer.i.payload.data[0].eq(self.words.payload),
                         packer.i.payload.count.eq(1)]
        with m.If(packer.i.valid):
            words_left.decrement(m, packer.i.payload.count)

        # Whole beats out of the packer (the run's last one flushed) onto both channels.
        sent = Signal()
        m.d.comb += [packer.flush.eq(~words_left.nonzero & ~run.pending),
                     packer.o.ready.eq(addresses.w_rdy & beats.w_rdy),
                     sent.eq(packer.o.valid & packer.o.ready),
                     addresses.w_data.eq(address), addresses.w_en.eq(sent),
                     beats.w_data.eq(Cat(packer.o.payload.data, packer.enables)),
                     beats.w_en.eq(sent)]
        with m.If(sent):
            m.d.sync += address.eq(address + port_bytes)
        m.d.sync += responses_left.eq(responses_left + sent - responded)

        with m.If(self.start):
            m.d.sync += self.errors.eq(0)
        m.d.comb += [packer.start.eq(run.pending), packer.offset.eq(run.first_lane)]
        with m.If(run.pending):
            m.d.sync += address.eq(run.address & ~(port_bytes - 1))
            words_left.load(m, run.count)
        return m


class ReadShare(wiring.Component):
    """Several read masters on one read port: their bursts in turn (the lowest-numbered master
    that asks first), the data back to the master that asked.

    The slave answers a port's bursts in order, so a FIFO of which master each burst came from
    routes the data beats back (an entry leaves with a burst's ``last`` beat); it bounds the
    bursts in flight to ``outstanding``.

    Parameters
    ----------
    address_width, port_bits
        As :class:`WordReader`.
    masters : int, at least 2
    outstanding : int, a power of two
        Most bursts in flight.

    Members
    -------
    port : Out(read_port_signature(address_width, port_bits))
    masters : In(read_port_signature(address_width, port_bits)).array(masters)
    """

    def __init__(self, *, address_width=32, port_bits=256, masters=2, outstanding=128):
        _check_port(address_width, port_bits)
        self._masters = check_int("masters", masters, 2)
        self._outstanding = check_power_of_two("outstanding", outstanding, 2, 4096)
        signature = read_port_signature(address_width, port_bits)
        super().__init__({"port": Out(signature), "masters": In(signature).array(masters)})

    def elaborate(self, platform):
        m = Module()
        ar, r = self.port.ar, self.port.r
        m.submodules.owners = owners = SyncFIFOBuffered(
            width=index_bits(self._masters), depth=self._outstanding)
        # requests: the first master that asks, while the FIFO has room
        chosen = Signal(range(self._masters))
        for index in reversed(range(self._masters)):
            with m.If(self.masters[index].ar.valid):
                m.d.comb += chosen.eq(index)
        asking = Cat(master.ar.valid for master in self.masters).any()
        m.d.comb += [ar.valid.eq(asking & owners.w_rdy), owners.w_data.eq(chosen),
                     owners.w_en.eq(ar.valid & ar.ready)]
        with m.Switch(chosen):
            for index, master in enumerate(self.masters):
                with m.Case(index):
                    m.d.comb += [ar.payload.eq(master.ar.payload),
                                 master.ar.ready.eq(ar.ready & owners.w_rdy)]
        # answers: to the owner of the oldest burst in flight
        for index, master in enumerate(self.masters):
            mine = owners.r_rdy & (owners.r_data == index)
            m.d.comb += [master.r.payload.eq(r.payload), master.r.valid.eq(r.valid & mine)]
            with m.If(mine):
                m.d.comb += r.ready.eq(master.r.ready)
        m.d.comb += owners.r_en.eq(r.valid & r.ready & r.payload.last)
        return m


class PortCounters(wiring.Component):
    """Traffic counters of one memory port (free-running from reset, ``COUNTER_BITS`` wide).

    Parameters
    ----------
    port_bits : int, 32..1024, a power of two
        Data bits per beat of the port counted.

    Members
    -------
    beat : In(1)
        A data beat crosses the port this clock (``r`` or ``w`` handshake).
    busy : In(1)
        The port has a run in progress this clock.
    beats : Out(COUNTER_BITS)
        Data beats so far.
    bytes : Out(COUNTER_BITS)
        ``beats * port_bits / 8``: every beat moves a whole port word.
    busy_cycles : Out(COUNTER_BITS)
        Clocks with a run in progress.
    stall_cycles : Out(COUNTER_BITS)
        Busy clocks without a data beat (waiting for memory, or memory waiting for the engine).
    """

    def __init__(self, *, port_bits=256):
        check_power_of_two("port_bits", port_bits, 32, 1024)
        self._port_bytes = port_bits // 8
        super().__init__({
            "beat": In(1), "busy": In(1),
            "beats": Out(COUNTER_BITS), "bytes": Out(COUNTER_BITS),
            "busy_cycles": Out(COUNTER_BITS), "stall_cycles": Out(COUNTER_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        with m.If(self.beat):
            m.d.sync += [self.beats.eq(self.beats + 1),
                         self.bytes.eq(self.bytes + self._port_bytes)]
        with m.If(self.busy):
            m.d.sync += self.busy_cycles.eq(self.busy_cycles + 1)
            with m.If(~self.beat):
                m.d.sync += self.stall_cycles.eq(self.stall_cycles + 1)
        return m
