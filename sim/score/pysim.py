"""The K1 parts on Amaranth's own simulator (unit tests; no Verilator build).

Every run goes through ``sim.amaranth_tb.run_streams`` (random idle on the inputs,
back-pressure on the outputs). What a part needs beside its streams sits in a small harness
around it (``Harness``): constants on its plain inputs (``hidden_size``, ``table_size``), token
ids held back until the table is loaded, a ``MemoryModel`` answering a gather's read port (in
order, random stalls on both sides, so random latency), and ``Stamp``, which adds the clock
count to each transfer of a stream (latency and II figures). ``run_pipeline``,
``run_remap``, ``run_gather`` and ``run_kernel`` send batches (``sim.score.vectors``) and
return the decoded outputs, which the tests compare with the golden; ``run_case`` replays a
case file.
"""

import random

import numpy as np
from amaranth.hdl import Module, Shape, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from sim.amaranth_tb import run_streams
from sim.payload import pack

from .vectors import (
    case_batch,
    compare,
    decode_hidden,
    decode_results,
    decode_tokens,
    golden_of_case,
    hidden_words,
    request_words,
    token_words,
)

__all__ = ["MemoryModel", "Stamp", "Harness", "run_pipeline", "run_remap", "run_gather",
           "run_kernel", "run_case"]


class MemoryModel(wiring.Component):
    """A memory read port's far side: word addresses in on ``address``, ``words[address]``
    out on ``data`` in address order. Each clock the address side refuses and the data side
    holds back with probability ``stall`` (a fixed pseudo-random pattern of ``seed``), so a
    word comes back 1 or more clocks after its address."""

    def __init__(self, words, *, address_width: int, word_width: int, stall: float = 0.0,
                 seed: int = 0):
        self._words = [int(word) for word in words] or [0]
        self._word_width = word_width
        rng = random.Random(seed)
        self._stalls = [int(rng.random() < stall) | int(rng.random() < stall) << 1
                        for _ in range(256)]
        super().__init__({"address": In(stream.Signature(address_width)),
                          "data": Out(stream.Signature(word_width))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.memory = memory = Memory(shape=self._word_width,
                                              depth=len(self._words), init=self._words)
        m.submodules.stalls = stalls = Memory(shape=2, depth=256, init=self._stalls)
        m.submodules.fifo = fifo = SyncFIFO(width=self._word_width, depth=8)
        read = memory.read_port(domain="comb")
        clock = Signal(8)
        stall = stalls.read_port(domain="comb")
        offering = Signal()
        m.d.sync += clock.eq(clock + 1)
        m.d.comb += [
            stall.addr.eq(clock),
            read.addr.eq(self.address.payload),
            self.address.ready.eq(fifo.w_rdy & ~stall.data[0]),
            fifo.w_en.eq(self.address.valid & self.address.ready),
            fifo.w_data.eq(read.data),
            self.data.valid.eq(fifo.r_rdy & (offering | ~stall.data[1])),
            self.data.payload.eq(fifo.r_data),
            fifo.r_en.eq(self.data.valid & self.data.ready),
        ]
        m.d.sync += offering.eq(self.data.valid & ~self.data.ready)
        return m


class Stamp(wiring.Component):
    """A stream passed through unchanged, its payload extended by the clock count of the
    transfer: ``o.payload = {item, cycle}`` (clocks since the simulation started)."""

    def __init__(self, shape):
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(data.StructLayout({"item": shape,
                                                         "cycle": unsigned(32)}))),
        })

    def elaborate(self, platform):
        m = Module()
        cycle = Signal(32)
        m.d.sync += cycle.eq(cycle + 1)
        m.d.comb += [
            self.o.valid.eq(self.i.valid),
            self.i.ready.eq(self.o.ready),
            self.o.payload.item.eq(self.i.payload),
            self.o.payload.cycle.eq(cycle),
        ]
        return m


class Harness(wiring.Component):
    """``part`` with the logic ``build(m)`` adds around it (constants on its plain inputs, a
    memory, gates); no ports of its own: the tests drive the part's streams, or free streams
    ``build`` connects."""

    def __init__(self, part, build):
        self.part = part
        self._build = build
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.part = self.part
        self._build(m)
        return m


def _gate(m, source, sink, open_) -> None:
    """Pass the free stream ``source`` on to ``sink`` while ``open_`` holds."""
    m.d.comb += [sink.valid.eq(source.valid & open_), sink.payload.eq(source.payload),
                 source.ready.eq(sink.ready & open_)]


def _table_loaded(m, table_port, size: int):
    """High once ``size`` writes went through ``table_port``."""
    written = Signal(range(size + 1))
    loaded = written == size
    with m.If(table_port.valid & table_port.ready & ~loaded):
        m.d.sync += written.eq(written + 1)
    return loaded


def _connect_memory(m, address, data_port, words, *, stall: float, seed: int) -> None:
    """A ``MemoryModel`` of ``words`` answering the read port ``address`` / ``data_port``."""
    memory = MemoryModel(words, address_width=len(address.payload),
                         word_width=Shape.cast(data_port.payload.shape()).width, stall=stall,
                         seed=seed)
    m.submodules.memory = memory
    wiring.connect(m, address, memory.address)
    m.d.comb += [data_port.valid.eq(memory.data.valid),
                 data_port.payload.eq(memory.data.payload),
                 memory.data.ready.eq(data_port.ready)]


def _consts(layout, words) -> list:
    return [data.Const(layout, word) for word in words]


def _bits(items) -> list[int]:
    return [item if isinstance(item, int) else item.as_bits() for item in items]


def _budget(work: int, idle: float, backpressure: float) -> int:
    return int(work / (1 - max(idle, backpressure)) ** 2) * 4 + 1000


def _table_writes(params, table) -> list:
    return _consts(params.table_layout, pack(params.table_layout, len(table),
                                             address=np.arange(len(table)), value=table))


def run_pipeline(pipeline, batches, *, idle=0.0, backpressure=0.0, seed=0):
    """``batches`` back to back through ``ScoreSortPipeline``; returns the decoded results
    (``vectors.decode_results``) and the clock of every result transfer."""
    params = pipeline.params
    stamp = Stamp(params.result_layout)

    def build(m):
        m.submodules.stamp = stamp
        wiring.connect(m, pipeline.o, stamp.i)

    words = [w for batch in batches for w in request_words(params, batch)]
    (stamped,) = run_streams(
        Harness(pipeline, build), [(pipeline.i, _consts(params.request_layout, words))],
        [(stamp.o, len(words))], idle=idle, backpressure=backpressure, seed=seed,
        max_cycles=_budget(len(words) + params.latency, idle, backpressure))
    results = decode_results(params, [item.item.as_bits() for item in stamped])
    return results, [int(item.cycle) for item in stamped]


def run_remap(remap, batches, table, *, idle=0.0, backpressure=0.0, seed=0) -> np.ndarray:
    """``table`` loaded, then the token ids of ``batches`` through ``HotTokenRemap`` with
    ``table_size = len(table)``; returns the remapped ids (whole beats)."""
    params = remap.params
    tokens = stream.Signature(params.token_layout).create()

    def build(m):
        m.d.comb += remap.table_size.eq(len(table))
        _gate(m, tokens, remap.i, _table_loaded(m, remap.table, len(table)))

    words = [w for batch in batches for w in token_words(params, batch)]
    (received,) = run_streams(
        Harness(remap, build), [(remap.table, _table_writes(params, table)),
                                (tokens, _consts(params.token_layout, words))],
        [(remap.o, len(words))], idle=idle, backpressure=backpressure, seed=seed,
        max_cycles=_budget(len(table) + len(words), idle, backpressure))
    return decode_tokens(params, _bits(received), len(words) * params.remap_lanes)


def run_gather(gather, hidden_size: int, rows, words, *, idle=0.0, backpressure=0.0,
               seed=0) -> list[int]:
    """Row numbers ``rows`` through ``HiddenStateGather`` with ``hidden_size`` and a
    ``MemoryModel`` of ``words`` (stalling with probability ``backpressure``); returns the
    ``o`` payloads (data and first/last marks) as integers."""
    def build(m):
        m.d.comb += gather.hidden_size.eq(hidden_size)
        _connect_memory(m, gather.read_address, gather.read_data, words, stall=backpressure,
                        seed=seed + 7)

    beats = len(rows) * gather.words_per_row(hidden_size)
    (received,) = run_streams(
        Harness(gather, build), [(gather.rows, [int(r) for r in rows])],
        [(gather.o, beats)], idle=idle, backpressure=backpressure, seed=seed,
        max_cycles=_budget(2 * beats + len(rows), idle, backpressure))
    return _bits(received)


def run_kernel(kernel, batch, table, *, idle=0.0, backpressure=0.0, seed=0):
    """One batch through ``ScoreKernel``: ``table`` loaded first (``hot_table_size =
    len(table)``), then requests and token ids; with ``batch.h`` the kernel gathers from a
    ``MemoryModel`` of ``batch.hidden`` (stalling with probability ``backpressure``).
    Returns the decoded results, remapped ids and gathered rows (None without ``batch.h``).
    """
    params = kernel.params
    tokens = stream.Signature(params.token_layout).create()
    words = hidden_words(batch.hidden, params.hidden_lanes, params.element_width)

    def build(m):
        m.d.comb += [kernel.hidden_size.eq(batch.h), kernel.hot_table_size.eq(len(table))]
        _gate(m, tokens, kernel.tokens, _table_loaded(m, kernel.hot_table, len(table)))
        _connect_memory(m, kernel.hidden_read_address, kernel.hidden_read_data, words,
                        stall=backpressure, seed=seed + 7)

    requests = request_words(params, batch)
    token_beats = token_words(params, batch)
    beats = batch.b * batch.k * params.words_per_row(batch.h)
    results, remapped, hidden = run_streams(
        Harness(kernel, build),
        [(kernel.hot_table, _table_writes(params, table)),
         (tokens, _consts(params.token_layout, token_beats)),
         (kernel.requests, _consts(params.request_layout, requests))],
        [(kernel.results, len(requests)), (kernel.remapped_tokens, len(token_beats)),
         (kernel.hidden, beats)], idle=idle, backpressure=backpressure, seed=seed,
        max_cycles=_budget(len(table) + len(requests) + len(token_beats) + 2 * beats
                           + params.score_latency, idle, backpressure))
    mask = (1 << (params.hidden_lanes * params.element_width)) - 1
    return (decode_results(params, _bits(results)),
            decode_tokens(params, _bits(remapped), batch.b * batch.n),
            decode_hidden([word & mask for word in _bits(hidden)], lanes=params.hidden_lanes,
                          element_width=params.element_width, b=batch.b, k=batch.k,
                          h=batch.h) if batch.h else None)


def run_case(path, parameters: dict, *, idle=0.0, backpressure=0.0, seed=0) -> int:
    """A case file through the golden and ``ScoreKernel`` at a target's build ``parameters``
    (``probes`` ignored; e.g. ``case_parameters``' result) with the case's own table (else
    one entry): golden == the file's expected tensors, RTL == golden. Returns the number of
    expected tensors."""
    from hw.kernels.score import ScoreKernel

    batch, expected, table = case_batch(path)
    table = np.zeros(1, np.int64) if table is None else table
    kernel = ScoreKernel(**{key: value for key, value in parameters.items()
                            if key != "probes"})
    kernel.check_call(batch_size=batch.b, node_top_k=batch.k, tree_width=batch.w,
                      cumu_count=batch.cumu, hidden_size=batch.h,
                      use_hot_token_id=batch.use_hot, topk_tokens_sampling=batch.tokens,
                      hot_token_id=table)
    golden_of_case(batch, expected, table, sort_width=kernel.sort_width)
    results, ids, hidden = run_kernel(kernel, batch, table, idle=idle,
                                      backpressure=backpressure, seed=seed)
    problems = compare(batch, results, ids, hidden)
    assert not problems, "RTL differs from the golden op:\n" + "\n".join(problems)
    return len(expected)
