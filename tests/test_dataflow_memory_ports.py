# amaranth: UnusedElaboratable=no
"""The engine's memory ports (hw/dataflow/memory_ports.py) on the card-memory model."""

import random

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring

from hw.dataflow.memory_ports import PortCounters, ReadShare, WordReader, WordWriter
from hw.lib.params import ParameterError
from sim.amaranth_tb import simulate
from sim.dataflow.memory import CardMemory


def _beats(address, count, lanes):
    """Port words covering ``count`` words from byte ``address``."""
    return -(-(address % (4 * lanes) + 4 * count) // (4 * lanes)) if count else 0


def _bench(port_bits, group_words=1):
    m = Module()
    m.submodules.reader = reader = WordReader(address_width=20, port_bits=port_bits,
                                              max_words=40)
    m.submodules.writer = writer = WordWriter(address_width=20, port_bits=port_bits,
                                              max_words=40, group_words=group_words)
    m.submodules.read_counters = read_counters = PortCounters(port_bits=port_bits)
    m.submodules.write_counters = write_counters = PortCounters(port_bits=port_bits)
    m.d.comb += [read_counters.beat.eq(reader.port.r.valid & reader.port.r.ready),
                 read_counters.busy.eq(reader.busy),
                 write_counters.beat.eq(writer.port.w.valid & writer.port.w.ready),
                 write_counters.busy.eq(writer.busy)]
    return m, reader, writer, read_counters, write_counters


@pytest.mark.parametrize("port_bits,stall,groups", [
    (32, 0.0, False), (128, 0.3, False), (256, 0.0, False), (256, 0.5, False),
    (32, 0.3, True), (64, 0.0, True), (128, 0.3, True), (256, 0.0, True), (256, 0.5, True)])
def test_runs_round_trip_under_stalls(port_bits, stall, groups):
    """Runs from the reader into the writer, a word a transfer or (``groups``) the rest of a
    beat a transfer, under random memory latency, stalls and back-pressure."""
    lanes = port_bits // 32
    m, reader, writer, read_counters, write_counters = _bench(port_bits, lanes if groups else 1)
    memory = CardMemory(1 << 12, seed=port_bits, latency=(0, 6), stall=stall)
    rng = random.Random(port_bits + int(stall * 10))
    source = np.array([rng.getrandbits(32) for _ in range(256)], np.int64)
    memory.write_words(0, source)
    runs = [(rng.randrange(0, 200), rng.randrange(0, 41)) for _ in range(12)] + [(3, 1), (8, 0)]
    expected_beats = 0

    async def bench(ctx):
        nonlocal expected_beats
        for first, count in runs:
            target = 2048 + 4 * rng.randrange(0, 200)
            before = memory.data.copy()
            for unit, address in ((reader, 4 * first), (writer, target)):
                ctx.set(unit.start, 1)
                ctx.set(unit.address, address)
                ctx.set(unit.count, count)
            await ctx.tick()
            ctx.set(reader.start, 0)
            ctx.set(writer.start, 0)
            got = []
            while ctx.get(reader.busy) or ctx.get(writer.busy):
                # the reader's words go straight into the writer, with random back-pressure
                take = rng.random() > stall
                source_port, sink_port = ((reader.group, writer.group) if groups
                                          else (reader.words, writer.words))
                valid = ctx.get(source_port.valid)
                payload = ctx.get(source_port.payload)
                ctx.set(sink_port.valid, valid and take)
                ctx.set(sink_port.payload, payload)
                ctx.set(source_port.ready, take and ctx.get(sink_port.ready))
                if valid and take and ctx.get(sink_port.ready):
                    got += (list(payload.data)[:payload.count] if groups else [payload])
                await ctx.tick()
            for port in (writer.words, writer.group):
                ctx.set(port.valid, 0)
            for port in (reader.words, reader.group):
                ctx.set(port.ready, 0)
            assert got == [int(v) for v in source[first:first + count]]
            expected = before.copy()
            expected[target:target + 4 * count] = source[first:first + count] \
                .astype("<u4").view(np.uint8)
            assert np.array_equal(memory.data, expected), (first, count, target)
            expected_beats += _beats(4 * first, count, lanes) + _beats(target, count, lanes)
        assert ctx.get(read_counters.beats) + ctx.get(write_counters.beats) == expected_beats
        assert ctx.get(read_counters.bytes) == ctx.get(read_counters.beats) * port_bits // 8
        assert ctx.get(writer.errors) == 0

    simulate(m, bench, background=[memory.serve_read(reader.port, port_bits),
                                   memory.serve_write(writer.port, port_bits)])


@pytest.mark.parametrize("count", [0, 1, 9])
def test_busy_from_the_clock_after_start(count):
    """Each port says it is busy in the clock after ``start`` (the engine's states wait on
    ``busy`` alone), and stays busy until its run is done."""
    m, reader, writer, _, _ = _bench(128)
    memory = CardMemory(1 << 12, seed=count, latency=(0, 3))
    words = list(range(100, 100 + count))
    memory.write_words(64, np.array(words, np.int64))

    async def bench(ctx):
        for unit, address in ((reader, 64), (writer, 2048 + 8)):
            assert not ctx.get(unit.busy)
            ctx.set(unit.start, 1)
            ctx.set(unit.address, address)
            ctx.set(unit.count, count)
            await ctx.tick()
            ctx.set(unit.start, 0)
            assert ctx.get(unit.busy)
            got = []
            while ctx.get(unit.busy):
                if unit is reader:
                    ctx.set(reader.words.ready, 1)
                    if ctx.get(reader.words.valid):
                        got.append(ctx.get(reader.words.payload))
                else:
                    ctx.set(writer.words.valid, len(got) < count)
                    ctx.set(writer.words.payload, words[len(got)] if len(got) < count else 0)
                    if len(got) < count and ctx.get(writer.words.ready):
                        got.append(words[len(got)])
                await ctx.tick()
            ctx.set(writer.words.valid, 0)
            assert got == words
        assert memory.read_words(2048 + 8, count).tolist() == words

    simulate(m, bench, background=[memory.serve_read(reader.port, 128),
                                   memory.serve_write(writer.port, 128)])


def _queued_runs(port_bits, *, one_at_a_time, latency, stall, seed):
    """Read 10 runs with a reader that queues three, each started as soon as ``can_start``
    allows (``one_at_a_time``: and ``busy`` is low), the words taken a group at a time under
    random back-pressure (``stall``). Returns the runs, the groups taken (a list of word
    lists), the memory and the clocks."""
    reader = WordReader(address_width=20, port_bits=port_bits, max_words=40, runs=3)
    memory = CardMemory(1 << 12, seed=seed, latency=latency)
    rng = random.Random(seed)
    memory.write_words(0, np.array([rng.getrandbits(32) for _ in range(256)], np.int64))
    runs = [(rng.randrange(0, 200), rng.randrange(0, 41)) for _ in range(8)] + [(5, 0), (9, 3)]
    groups, clocks = [], [0]

    async def starter(ctx):
        for first, count in runs:
            while not ctx.get(reader.can_start) or (one_at_a_time and ctx.get(reader.busy)):
                await ctx.tick()
            ctx.set(reader.start, 1)
            ctx.set(reader.address, 4 * first)
            ctx.set(reader.count, count)
            await ctx.tick()
            ctx.set(reader.start, 0)

    async def consumer(ctx):
        total = sum(count for _, count in runs)
        while sum(map(len, groups)) < total or ctx.get(reader.busy):
            ready = rng.random() >= stall
            ctx.set(reader.group.ready, ready)
            if ready and ctx.get(reader.group.valid):
                group = ctx.get(reader.group.payload)
                groups.append([group.data[k] for k in range(group.count)])
            await ctx.tick()
            clocks[0] += 1

    simulate(reader, starter, consumer, background=[memory.serve_read(reader.port, port_bits)])
    return runs, groups, memory, clocks[0]


@pytest.mark.parametrize("port_bits,stall", [(32, 0.0), (64, 0.3), (256, 0.0), (256, 0.5)])
def test_reader_queues_runs(port_bits, stall):
    """Runs started while the words of the runs before still stream out leave in the order
    they started, every word once, no group holding words of two runs; at a fixed latency of
    16 clocks they take fewer clocks than one run at a time."""
    runs, groups, memory, queued = _queued_runs(port_bits, one_at_a_time=False,
                                                latency=(16, 16), stall=stall, seed=port_bits)
    words = iter(word for group in groups for word in group)
    for first, count in runs:
        expected = memory.read_words(4 * first, count) & 0xFFFF_FFFF
        assert [next(words) for _ in range(count)] == expected.tolist()
    assert next(words, None) is None
    boundaries, total = set(), 0
    for _, count in runs:
        total += count
        boundaries.add(total)
    total = 0
    for group in groups:  # a group ends at or before the end of the run it starts in
        end = min(boundary for boundary in boundaries if boundary > total)
        assert total + len(group) <= end
        total += len(group)
    *_, one_at_a_time = _queued_runs(port_bits, one_at_a_time=True, latency=(16, 16),
                                     stall=stall, seed=port_bits)
    assert queued < one_at_a_time


@pytest.mark.parametrize("port_bits,stall", [(64, 0.0), (64, 0.4), (256, 0.2)])
def test_writer_takes_groups_wider_than_a_beat(port_bits, stall):
    """Groups of 1..5 words (a tree record a transfer) into runs from unaligned addresses:
    the memory holds exactly the run's words, nothing around them changes."""
    m = Module()
    m.submodules.writer = writer = WordWriter(address_width=20, port_bits=port_bits,
                                              max_words=40, group_words=5)
    memory = CardMemory(1 << 12, seed=port_bits, latency=(0, 6), stall=stall)
    rng = random.Random(port_bits + int(stall * 10))

    async def bench(ctx):
        for _ in range(8):
            target = 4 * rng.randrange(0, 300)
            words = [rng.getrandbits(32) for _ in range(rng.randrange(0, 41))]
            before = memory.data.copy()
            ctx.set(writer.start, 1)
            ctx.set(writer.address, target)
            ctx.set(writer.count, len(words))
            await ctx.tick()
            ctx.set(writer.start, 0)
            sent = 0
            while ctx.get(writer.busy):
                size = min(len(words) - sent, rng.randint(1, 5))
                offer = size > 0 and rng.random() >= stall
                ctx.set(writer.group.valid, offer)
                ctx.set(writer.group.payload, {"data": words[sent:sent + size] + [0] * (5 - size),
                                               "count": size})
                if offer and ctx.get(writer.group.ready):
                    sent += size
                await ctx.tick()
            ctx.set(writer.group.valid, 0)
            assert sent == len(words)
            expected = before.copy()
            expected[target:target + 4 * len(words)] = np.array(words, "<u4").view(np.uint8)
            assert np.array_equal(memory.data, expected), (target, len(words))

    simulate(m, bench, background=[memory.serve_write(writer.port, port_bits)])


@pytest.mark.parametrize("port_bits,stall,outstanding", [(64, 0.0, 4), (64, 0.4, 128),
                                                         (256, 0.3, 16)])
def test_two_readers_share_a_port(port_bits, stall, outstanding):
    """Two readers' runs at once through ``ReadShare``: each gets exactly its own words, in
    order, under random latency, memory stalls and back-pressure."""
    m = Module()
    share = m.submodules.share = ReadShare(address_width=20, port_bits=port_bits,
                                           outstanding=outstanding)
    readers = []
    for index in range(2):
        reader = WordReader(address_width=20, port_bits=port_bits, max_words=40)
        m.submodules[f"reader{index}"] = reader
        wiring.connect(m, reader.port, share.masters[index])
        readers.append(reader)
    memory = CardMemory(1 << 12, seed=port_bits, latency=(0, 8), stall=stall)
    rng = random.Random(port_bits + outstanding)
    source = np.array([rng.getrandbits(32) for _ in range(1024)], np.int64)
    memory.write_words(0, source)

    async def bench(ctx):
        for _ in range(10):
            runs = [(rng.randrange(0, 900), rng.randrange(0, 41)) for _ in readers]
            for reader, (first, count) in zip(readers, runs, strict=True):
                ctx.set(reader.start, 1)
                ctx.set(reader.address, 4 * first)
                ctx.set(reader.count, count)
            await ctx.tick()
            got = [[], []]
            for reader in readers:
                ctx.set(reader.start, 0)
            while any(ctx.get(reader.busy) for reader in readers):
                for index, reader in enumerate(readers):
                    take = rng.random() >= stall
                    ctx.set(reader.words.ready, take)
                    if take and ctx.get(reader.words.valid):
                        got[index].append(ctx.get(reader.words.payload))
                await ctx.tick()
            for index, (first, count) in enumerate(runs):
                assert got[index] == [int(v) for v in source[first:first + count]], index

    simulate(m, bench, background=[memory.serve_read(share.port, port_bits)])


@pytest.mark.parametrize("port_bits,max_burst", [(32, 1), (32, 16), (64, 4), (256, 16),
                                                (1024, 32)])
def test_reader_bursts_stay_in_their_blocks(port_bits, max_burst):
    """A run across a 4 KiB boundary: the reader covers exactly its beats, in order, with
    bursts of at most ``max_burst`` beats, each within one ``max_burst``-beat block (so
    within one 4 KiB page: the card memory checks that too), the fewest such bursts."""
    port_bytes = port_bits // 8
    m = Module()
    m.submodules.reader = reader = WordReader(address_width=20, port_bits=port_bits,
                                              max_words=2048, max_burst=max_burst)
    memory = CardMemory(1 << 14, seed=max_burst, latency=(0, 4), stall=0.2)
    rng = random.Random(port_bits * max_burst)
    source = np.array([rng.getrandbits(32) for _ in range(4096)], np.int64)
    memory.write_words(0, source)
    first, count = 1024 - 3 * (port_bytes // 4) - 1, 700  # words; crosses byte 4096
    bursts = []

    async def bench(ctx):
        ctx.set(reader.start, 1)
        ctx.set(reader.address, 4 * first)
        ctx.set(reader.count, count)
        await ctx.tick()
        ctx.set(reader.start, 0)
        ctx.set(reader.words.ready, 1)
        got = []
        while ctx.get(reader.busy):
            _, _, valid, word, ar_valid, ar_ready, ar = await ctx.tick().sample(
                reader.words.valid, reader.words.payload, reader.port.ar.valid,
                reader.port.ar.ready, reader.port.ar.payload)
            if valid:
                got.append(word)
            if ar_valid and ar_ready:
                bursts.append((ar.address, ar.length + 1))
        assert got == [int(v) for v in source[first:first + count]]

    simulate(m, bench, background=[memory.serve_read(reader.port, port_bits)])
    start = 4 * first // port_bytes
    end = -(-(4 * first + 4 * count) // port_bytes)  # beats [start, end)
    beat = start
    for address, beats in bursts:
        assert address == beat * port_bytes and 1 <= beats <= max_burst
        assert beat // max_burst == (beat + beats - 1) // max_burst, (address, beats)
        beat += beats
    assert beat == end
    blocks = (end - 1) // max_burst - start // max_burst + 1
    assert len(bursts) == blocks


@pytest.mark.parametrize("make,name", [
    (lambda: WordReader(port_bits=256, max_burst=256), "max_burst"),
    (lambda: WordReader(max_burst=3), "max_burst"),
    (lambda: WordReader(runs=0), "runs"),
    (lambda: ReadShare(masters=1), "masters"),
    (lambda: ReadShare(outstanding=6), "outstanding"),
    (lambda: WordWriter(group_words=0), "group_words")])
def test_bad_parameters_are_named(make, name):
    with pytest.raises(ParameterError, match=f"`{name}`"):
        make()
