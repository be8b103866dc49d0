"""Pass 1 of the fused verify (docs/tree_verify.md) on one memory read port: read a chunk of a
row into the port's bank in AXI4 bursts and find the chunk's maximum logit on the way.

``RowLoader`` issues the bursts that cover ``words`` port words from a byte address (at most
``max_burst`` beats each, none crossing a 4 KiB boundary), writes beat ``k`` into bank word
``k`` and folds every beat into a running maximum through a pipelined compare tree, one beat
per clock. ``merge_peaks`` combines the loaders of the ``read_ports`` chunks of a row.

Order of logits: a total order on non-NaN float32 with ``-0.0 == +0.0``; NaN counts as
``-inf`` (and is flagged); among equal maxima the lowest token index wins, as numpy's
``argmax`` of ``where(isnan(x), -inf, x)``. The reported peak is the value at that index
(a zero peak keeps the sign of its first occurrence).
"""

import math
from typing import NamedTuple

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.lib.axi import Burst, read_port_signature
from hw.lib.float32 import float32_fields
from hw.lib.params import check_choice, check_int, check_power_of_two
from hw.lib.pipeline import count_leading_zeros, data_stage, stage

__all__ = ["RowLoader", "Peak", "merge_peaks", "merge_latency", "row_split",
           "drive_row_addresses"]

NEG_INF = 0xFF80_0000
_KEY_NEG_INF = 0x0080_0000  # order key of -inf, the least key of any logit
_BOUNDARY = 4096  # AXI4: no burst crosses a 4 KiB address boundary
_ALWAYS = Const(1)  # enable of the pipeline registers: with r.ready high nothing stalls


def _order_key(bits, valid):
    """``(key, negative_zero)`` of a float32 bit pattern: ``key`` is ``2**31 + x`` for ``x``
    the signed magnitude (one adder, no zero test: both zeros give ``2**31``), so it orders
    logits as an unsigned integer; NaN has the key of ``-inf``; an invalid lane has key 0,
    below every logit. ``negative_zero`` restores the sign of a zero."""
    fields = float32_fields(bits)
    sign = fields.sign
    key = (Cat(fields.magnitude ^ sign.replicate(31), ~sign) + sign)[:32]
    key = Mux(valid & ~fields.is_nan, key, Mux(valid, _KEY_NEG_INF, 0))
    return key, valid & fields.is_zero & sign


def _key_to_float(key, negative_zero):
    """The float32 bit pattern of an order key (``-inf`` for key 0)."""
    negative = Cat((-key)[:31], Const(1, 1))
    return Mux(key == 0, NEG_INF, Mux(key[31], Cat(key[:31], negative_zero), negative))


def _better(later, earlier):
    """Whether the candidate ``later`` (higher token indices) beats ``earlier``: strictly
    greater only, so ties keep the lower index."""
    return later.key > earlier.key


class _Candidate(NamedTuple):
    """An entry of a compare tree: its order key (``_order_key``), the sign of a zero, and
    where it is (a lane, an offset in the bank or a token index)."""

    key: Value
    negative_zero: Value
    place: Value


class _Beat(NamedTuple):
    """A read beat accepted into the bank: ``valid``, its ``data``."""

    valid: Value
    data: Value


class Peak(NamedTuple):
    """A row's (or a chunk's) maximum: the ``peak`` logit's bits, its ``peak_index``,
    ``has_valid`` (a logit of the row was seen) and ``nan`` (one was NaN)."""

    peak: Value
    peak_index: Value
    has_valid: Value
    nan: Value


def _register(m, candidate, name):
    return _Candidate(*(data_stage(m, _ALWAYS, value, name=f"{name}_{field}")
                        for field, value in zip(_Candidate._fields, candidate, strict=True)))


class RowLoader(wiring.Component):
    """One read port's row loader: a chunk of port words into the bank, and its maximum.

    Parameters
    ----------
    port_bits : int, 64..1024, a power of two
        Data bits per beat (one bank word).
    logit_bits : int, 32 or 16
        32: float32 logits; 16: bfloat16 logits, widened to float32 by ``<< 16``.
    depth : int, at least 1
        Bank words (the longest chunk).
    address_width : int, 16..64
        Bits of byte addresses.
    max_burst : int, 1..256, a power of two
        Most beats per burst.
    token_width : int, 2..32
        Bits of token indices.

    Attributes
    ----------
    port_logits : int
        Logits per beat.
    burst_words : int
        ``min(max_burst, 4096 / port_bytes)``: bursts after the first start on a multiple of
        this many words.
    start_latency : int
        Clocks from ``start`` to the first ``ar.valid``: 2.
    done_latency : int
        Clocks from the last ``r`` beat's acceptance to ``done``: ``4 + log2(port_logits)``
        (input register, keys, one registered compare level per tree level, fold, results).

    Members
    -------
    port : Out(read_port_signature(address_width, port_bits))
        The read port: ``ar`` bursts out (``length`` = beats - 1), ``r`` beats in. ``r.ready``
        is always high: every beat requested has its bank word waiting.
    start : In(1)
        Load a chunk (a one-clock pulse while ``busy`` is low).
    address : In(address_width)
        Byte address of the chunk's word 0 (a multiple of ``port_bits / 8``), with ``start``.
    words : In(range(depth + 1))
        Words to read, with ``start``; 0 gives ``done`` on the next clock.
    first_token : In(token_width)
        Token index of lane 0 of word 0, with ``start``.
    vocab : In(token_width + 1)
        Lanes whose token index (``first_token + word * port_logits + lane``) is at least
        this are not part of the row and are ignored; with ``start``.
    busy : Out(1)
        High from the clock after ``start`` (``words > 0``) until ``done`` rises.
    done : Out(1)
        One-clock pulse when every word is in the bank and folded into the results; the
        results hold until the next ``start``.
    peak : Out(32)
        Float32 bits of the chunk's largest valid logit (NaN read as ``-inf``); ``-inf`` when
        none is valid.
    peak_index : Out(token_width)
        Lowest token index holding a value equal to ``peak`` (when ``has_valid``).
    has_valid : Out(1)
        Whether the chunk has a valid lane.
    nan : Out(1)
        Whether a valid lane holds a NaN.
    read_addr : In(range(depth))
        Bank read address for the later passes.
    read_data : Out(port_bits)
        The bank word at ``read_addr`` one clock earlier, as it came from memory.
    beats : Out(48)
        ``r`` beats accepted since reset.
    """

    start_latency = 2

    @staticmethod
    def _checked(*, port_bits, logit_bits, depth, address_width, max_burst, token_width):
        return {
            "port_bits": check_power_of_two("port_bits", port_bits, 64, 1024),
            "logit_bits": check_choice("logit_bits", logit_bits, (32, 16)),
            "depth": check_int("depth", depth, 1),
            "address_width": check_int("address_width", address_width, 16, 64),
            "max_burst": check_power_of_two("max_burst", max_burst, 1, 256),
            "token_width": check_int("token_width", token_width, 2, 32),
        }

    def __new__(cls, *, src_loc_at=0, **parameters):
        # Validate before the object exists: Amaranth reports a component whose constructor
        # raised as "created but never used".
        cls._checked(**parameters)
        return super().__new__(cls, src_loc_at=src_loc_at + 1)

    def __init__(self, **parameters):
        self.__dict__.update(self._checked(**parameters))
        depth, token_width = self.depth, self.token_width
        self.port_logits = self.port_bits // self.logit_bits
        self.burst_words = min(self.max_burst, _BOUNDARY // (self.port_bits // 8))
        self.done_latency = 4 + self._lane_bits
        super().__init__({
            "port": Out(read_port_signature(self.address_width, self.port_bits)),
            "start": In(1),
            "address": In(self.address_width),
            "words": In(range(depth + 1)),
            "first_token": In(token_width),
            "vocab": In(token_width + 1),
            "busy": Out(1),
            "done": Out(1),
            "peak": Out(32, init=NEG_INF),
            "peak_index": Out(token_width),
            "has_valid": Out(1),
            "nan": Out(1),
            "read_addr": In(range(depth)),
            "read_data": Out(self.port_bits),
            "beats": Out(48),
        })

    @property
    def _lane_bits(self):
        return self.port_logits.bit_length() - 1

    def elaborate(self, platform):
        m = Module()
        self._requests(m)
        beat = self._bank(m)
        self._maximum(m, beat)
        return m

    def _requests(self, m):
        """The AR side: one burst per clock that ``ar`` accepts until the chunk is requested.
        The first burst runs to the next multiple of ``burst_words`` words, the others start
        on one, so every burst stays within ``max_burst`` beats and one 4 KiB page."""
        ar = self.port.ar
        word_shift = (self.port_bits // 8).bit_length() - 1
        block_shift = word_shift + self.burst_words.bit_length() - 1
        address = Signal(self.address_width)
        left = Signal(range(self.depth + 1))  # words not yet requested
        room = Signal(range(self.burst_words + 1))  # words to the next block boundary
        length = Mux(left < room, left, room)
        with m.If(self.start):
            m.d.sync += [address.eq(self.address), left.eq(self.words),
                         room.eq(self.burst_words - self.address[word_shift:block_shift])]
        with m.Elif(~ar.valid | ar.ready):
            m.d.sync += ar.valid.eq(left != 0)
            with m.If(left != 0):
                m.d.sync += [
                    ar.payload.address.eq(address),
                    ar.payload.length.eq(length - 1),
                    ar.payload.burst.eq(Burst.INCR),
                    left.eq(left - length),
                    # Where the next burst starts, if there is one.
                    address.eq(Cat(Const(0, block_shift), address[block_shift:] + 1)),
                    room.eq(self.burst_words),
                ]

    def _bank(self, m):
        """The bank, its write and read ports and the beat counters; returns the accepted
        beat (``valid``, ``data``)."""
        r = self.port.r
        bank = Memory(shape=self.port_bits, depth=self.depth, init=[])
        m.submodules.bank = bank
        write, read = bank.write_port(), bank.read_port()
        index = Signal(range(self.depth))
        m.d.comb += [
            r.ready.eq(1),
            write.addr.eq(index), write.data.eq(r.payload.data), write.en.eq(r.valid),
            read.addr.eq(self.read_addr), self.read_data.eq(read.data),
        ]
        with m.If(r.valid):
            m.d.sync += [index.eq(index + 1), self.beats.eq(self.beats + 1)]
        with m.If(self.start):
            m.d.sync += index.eq(0)
        return _Beat(valid=r.valid, data=r.payload.data)

    def _maximum(self, m, beat):
        """The running maximum: input register, keys, compare tree, fold, results."""
        lanes, lane_bits, token_width = self.port_logits, self._lane_bits, self.token_width

        # Lanes still in the row: ``whole`` words and then ``tail`` lanes. ``full`` (``whole``
        # is not 0) is a register of its own, set on the clock after ``start`` (no beat
        # arrives before the third).
        whole = Signal(token_width + 1 - lane_bits)
        tail = Signal(lane_bits)
        full = Signal()
        in_row_lanes = self.vocab - self.first_token  # signed
        prepare = Signal()
        m.d.sync += prepare.eq(self.start)
        with m.If(self.start):
            m.d.sync += Cat(tail, whole).eq(Mux(in_row_lanes < 0, 0, in_row_lanes))
        with m.Elif(prepare):
            m.d.sync += full.eq(whole != 0)
        with m.Elif(beat.valid):
            with m.If(full):
                m.d.sync += [whole.eq(whole - 1), full.eq(whole != 1)]
            with m.Else():
                m.d.sync += tail.eq(0)
        in_row = Cat(full | (lane < tail) for lane in range(lanes))

        s0_data = data_stage(m, _ALWAYS, beat.data, name="s0_data")
        s0_lanes = data_stage(m, _ALWAYS, Mux(beat.valid, in_row, 0), name="s0_lanes")
        s0_beat = stage(m, _ALWAYS, beat.valid, name="s0_beat")

        candidates, nans = [], []
        for lane in range(lanes):
            raw = s0_data[lane * self.logit_bits:(lane + 1) * self.logit_bits]
            bits = raw if self.logit_bits == 32 else Cat(Const(0, 16), raw)
            key, negative_zero = _order_key(bits, s0_lanes[lane])
            candidates.append(_register(m, _Candidate(
                key=key, negative_zero=negative_zero, place=Const(0, 0)), f"s1_lane{lane}"))
            nans.append(s0_lanes[lane] & float32_fields(bits).is_nan)
        s1_nan = data_stage(m, _ALWAYS, Cat(nans), name="s1_nan")
        beat_flag = stage(m, _ALWAYS, s0_beat, name="s1_beat")

        # One registered compare level per stage; the winner's lane index gains a bit a level.
        for level in range(lane_bits):
            pairs = zip(candidates[0::2], candidates[1::2], strict=True)
            candidates = []
            for position, (left, right) in enumerate(pairs):
                right_wins = _better(right, left)
                candidates.append(_register(m, _Candidate(
                    key=Mux(right_wins, right.key, left.key),
                    negative_zero=Mux(right_wins, right.negative_zero, left.negative_zero),
                    place=Cat(Mux(right_wins, right.place, left.place), right_wins)),
                    f"t{level}_{position}"))
            beat_flag = stage(m, _ALWAYS, beat_flag, name=f"t{level}_beat")
        (word_best,) = candidates

        # The fold: the running best over the words so far, a word counter for its index.
        best = _Candidate(key=Signal(32), negative_zero=Signal(),
                          place=Signal(range(self.depth * lanes)))  # offset in the bank
        nan = Signal()
        word = Signal(range(self.depth + 1))
        last_word = Signal(range(self.depth))
        first_token = Signal(token_width)
        finish = Signal()
        m.d.sync += finish.eq(0)
        with m.If(self.start):
            m.d.sync += [best.key.eq(0), best.negative_zero.eq(0), nan.eq(0), word.eq(0),
                         last_word.eq(self.words - 1), first_token.eq(self.first_token)]
        with m.Else():
            with m.If(s1_nan.any()):
                m.d.sync += nan.eq(1)
            with m.If(beat_flag):
                m.d.sync += [word.eq(word + 1), finish.eq(word == last_word)]
                with m.If(_better(word_best, best)):
                    m.d.sync += [best.key.eq(word_best.key),
                                 best.negative_zero.eq(word_best.negative_zero),
                                 best.place.eq(Cat(word_best.place, word))]

        # Results, registered with ``done``; a chunk of no words finishes at once.
        m.d.sync += self.done.eq(0)
        with m.If(self.start):
            with m.If(self.words == 0):
                m.d.sync += [self.done.eq(1), self.peak.eq(NEG_INF), self.peak_index.eq(0),
                             self.has_valid.eq(0), self.nan.eq(0)]
            with m.Else():
                m.d.sync += self.busy.eq(1)
        with m.Elif(finish):
            m.d.sync += [
                self.busy.eq(0), self.done.eq(1),
                self.peak.eq(_key_to_float(best.key, best.negative_zero)),
                self.peak_index.eq(first_token + best.place),
                self.has_valid.eq(best.key != 0), self.nan.eq(nan),
            ]


def merge_latency(count: int) -> int:
    """Clocks from the loaders' results to :func:`merge_peaks`' outputs:
    ``ceil(log2(count)) + 2`` (a key stage, the compare levels, the decode stage)."""
    return math.ceil(math.log2(count)) + 2


def merge_peaks(m, chunks, *, name="merge"):
    """Combine the results of the loaders of one row's chunks (port order: port 0 holds the
    lowest token indices) into the row's.

    Parameters
    ----------
    m : Module
        Module the logic goes into (domain ``sync``).
    chunks : sequence
        Objects with ``peak``, ``peak_index``, ``has_valid`` and ``nan`` (``RowLoader``\\ s),
        all of one ``token_width``.
    name : str
        Prefix of the registers.

    Returns a :class:`Peak` of ``peak``, ``peak_index``, ``has_valid`` and ``nan`` (as the
    loaders define them, over the whole row), ``merge_latency(len(chunks))`` clocks behind
    the inputs: a registered pipeline, so the inputs must hold that long (a loader's results
    hold from ``done`` to its next ``start``).
    """
    if not chunks:
        raise ValueError("`chunks` must name at least one loader")
    candidates = []
    for position, chunk in enumerate(chunks):
        key, negative_zero = _order_key(chunk.peak, chunk.has_valid)
        candidates.append(_register(m, _Candidate(
            key=key, negative_zero=negative_zero, place=chunk.peak_index),
            f"{name}_in{position}"))
    nan = data_stage(m, _ALWAYS, Cat(chunk.nan for chunk in chunks).any(), name=f"{name}_in_nan")
    level = 0
    while len(candidates) > 1:
        merged = []
        for position in range(0, len(candidates), 2):
            pair = candidates[position:position + 2]
            if len(pair) == 1:
                merged.append(_register(m, pair[0], f"{name}_l{level}_{position // 2}"))
                continue
            left, right = pair
            right_wins = _better(right, left)
            merged.append(_register(m, _Candidate(*(
                Mux(right_wins, right_field, left_field)
                for left_field, right_field in zip(left, right, strict=True))),
                f"{name}_l{level}_{position // 2}"))
        candidates = merged
        nan = data_stage(m, _ALWAYS, nan, name=f"{name}_l{level}_nan")
        level += 1
    (best,) = candidates
    return Peak(
        peak=data_stage(m, _ALWAYS, _key_to_float(best.key, best.negative_zero),
                        name=f"{name}_peak"),
        peak_index=data_stage(m, _ALWAYS, best.place, name=f"{name}_peak_index"),
        has_valid=data_stage(m, _ALWAYS, best.key != 0, name=f"{name}_has_valid"),
        nan=data_stage(m, _ALWAYS, nan, name=f"{name}_nan"),
    )


def row_split(m: Module, p, row_words: Value) -> tuple[Signal, Signal, Signal]:
    """How a row of ``row_words`` port words splits over ``p.read_ports`` loaders: each reads
    ``chunk = 2**chunk_log2`` words from word ``port * chunk``, ``chunk_log2 =
    ceil(log2(ceil(row_words / ports)))`` (0 for a row beyond the banks). Free-running
    registers two and three clocks behind ``row_words`` (a request constant: ROW, their first
    use, comes at least 7 clocks after it is set). Returns ``(chunk_log2, chunk, chunk_mask)``
    (``chunk_mask = chunk - 1``)."""
    top = p.bank_words.bit_length() - 1  # chunk_log2 at most log2(bank_words)
    per_port_m1 = Signal(range(p.max_row_words + 1))  # ceil(row_words / ports) - 1
    m.d.sync += per_port_m1.eq((row_words - 1) >> (p.read_ports.bit_length() - 1))
    # chunk_log2 = bit_length(per_port_m1): a leading-zero count, no priority chain over
    # the candidates (8 LUT levels).
    chunk_log2 = Signal(range(top + 2))
    bits = len(per_port_m1)
    m.d.sync += chunk_log2.eq(Mux((per_port_m1 >> top) != 0, 0,
                                  bits - count_leading_zeros(per_port_m1)))
    chunk = Signal(range(p.bank_words + 1))
    chunk_mask = Signal(range(max(p.bank_words, 2)))
    m.d.sync += [chunk.eq(Const(1, chunk.shape()) << chunk_log2),
                 chunk_mask.eq((Const(1, chunk.shape()) << chunk_log2) - 1)]
    return chunk_log2, chunk, chunk_mask


def drive_row_addresses(m: Module, p, loaders, *, req, row, row_words, chunk_log2, chunk,
                        lane_bits: int):
    """Each loader's address, words and first token for row ``row`` (``req.row_address +
    row * req.row_pitch``, port ``k`` from word ``k * chunk``). All registers: the request's
    settle before ROW (``row_split``); the row's offset and addresses follow ``row`` two
    clocks later, and ROW comes at least two clocks after ``row`` changes (ACCEPT ->
    ACCEPT_NODE -> ACCEPT_DATA -> ROW)."""
    row_offset = Signal(p.address_width)
    m.d.sync += row_offset.eq(row * req.row_pitch)
    for port, loader in enumerate(loaders):
        first_word = Signal(range(p.read_ports * p.bank_words + 1), name=f"first_word{port}")
        port_base = Signal(p.address_width, name=f"port_base{port}")
        address = Signal(p.address_width, name=f"row_address{port}")
        words = Signal.like(loader.words, name=f"port_words{port}")
        rest = row_words - first_word
        m.d.sync += [
            first_word.eq(Const(port) << chunk_log2),
            port_base.eq(req.row_address + first_word * p.port_bytes),
            address.eq(port_base + row_offset),
            words.eq(Mux(row_words <= first_word, 0, Mux(rest > chunk, chunk, rest))),
        ]
        m.d.comb += [
            loader.address.eq(address), loader.words.eq(words),
            loader.first_token.eq(first_word << lane_bits),
            loader.vocab.eq(req.vocab_size),
        ]
