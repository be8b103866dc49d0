"""The fused verify's row loader (``hw.kernels.tree_verify_loader``) on Amaranth's simulator,
against an AXI-style read slave model and numpy: bursts, bank contents, maximum, merge."""


import numpy as np
import pytest
from amaranth.hdl import Module

from hw.kernels.tree_verify_loader import RowLoader, merge_latency, merge_peaks
from hw.lib.params import ParameterError, ParameterTypeError
from sim.tree_verify.pysim import ReadSlave, simulate_with_slaves

NEG_INF = 0xFF80_0000
NANS = {32: [0x7FC0_0000, 0xFFC0_0000, 0x7F80_0001, 0xFFFF_FFFF],
        16: [0x7FC0, 0xFFC0, 0x7F81, 0xFFFF]}
GARBAGE = {32: NANS[32] + [0x7F80_0000, 0x7F7F_FFFF, 0x7F00_0000],
           16: NANS[16] + [0x7F80, 0x7F7F, 0x7F00]}
STYLES = ("normal", "ties", "zeros", "neg_inf", "raw", "extreme")


def loader_params(port_bits, logit_bits, **overrides):
    return {"port_bits": port_bits, "logit_bits": logit_bits, "depth": 48,
            "address_width": 32, "max_burst": 16, "token_width": 20, **overrides}


# -- the row in memory and its numpy reference ----------------------------------------------

def random_lanes(rng, count, logit_bits, style):
    """``count`` logits of one style as memory bit patterns (uint32, or uint16 for bfloat16),
    with NaN lanes sprinkled in."""
    if style == "raw":
        return rng.integers(0, 1 << logit_bits, count, dtype=np.uint64).astype(np.uint32)
    if style == "normal":
        x = rng.normal(0, 10, count)
    elif style == "ties":
        x = rng.choice([-1.0, 0.0, -0.0, 2.5, 2.5, -np.inf], count)
    elif style == "zeros":
        x = rng.choice([0.0, -0.0, -np.inf], count)
    elif style == "neg_inf":
        x = np.full(count, -np.inf)
    else:
        x = rng.choice([3e38, -3e38, np.inf, -np.inf, 1e-45, -1e-45, 0.0], count)
    bits = x.astype(np.float32).view(np.uint32)
    if logit_bits == 16:
        bits = bits >> 16
    nan = rng.random(count) < 0.05
    bits[nan] = rng.choice(NANS[logit_bits], int(nan.sum()))
    return bits.astype(np.uint32)


def widen(lanes, logit_bits):
    """Memory patterns to float32 values."""
    bits = lanes.astype(np.uint32) << (32 - logit_bits)
    return bits.view(np.float32)


def reference(lanes, logit_bits, first_token, vocab):
    """``(peak, peak_index, has_valid, nan)`` of a chunk's lanes from numpy."""
    count = int(np.clip(vocab - first_token, 0, lanes.size))
    if count == 0:
        return NEG_INF, None, 0, 0
    x = widen(lanes[:count], logit_bits)
    clean = np.where(np.isnan(x), np.float32(-np.inf), x)
    best = int(np.argmax(clean))
    return int(clean[best:best + 1].view(np.uint32)[0]), first_token + best, 1, \
        int(np.isnan(x).any())


def store(memory, address, lanes, logit_bits, port_bits):
    """Write lanes (a whole number of words) into ``memory`` (byte address -> word)."""
    dtype = np.dtype("<u4" if logit_bits == 32 else "<u2")
    per_word = port_bits // logit_bits
    for word in range(lanes.size // per_word):
        chunk = lanes[word * per_word:(word + 1) * per_word].astype(dtype)
        memory[address + word * port_bits // 8] = int.from_bytes(chunk.tobytes(), "little")


# -- the AXI-style read slave ----------------------------------------------------------------

async def start_chunk(ctx, loader, chunk):
    for name in ("address", "words", "first_token", "vocab"):
        ctx.set(getattr(loader, name), chunk[name])
    ctx.set(loader.start, 1)
    await ctx.tick()
    ctx.set(loader.start, 0)


def results(ctx, source):
    return (ctx.get(source.peak), ctx.get(source.peak_index), ctx.get(source.has_valid),
            ctx.get(source.nan))


def assert_results(got, expected, what):
    peak, index, has_valid, nan = expected
    assert (got[0], got[2], got[3]) == (peak, has_valid, nan), \
        f"{what}: (peak, has_valid, nan) {got[0]:#x}, {got[2]}, {got[3]} != " \
        f"{peak:#x}, {has_valid}, {nan}"
    if has_valid:
        assert got[1] == index, f"{what}: peak_index {got[1]} != {index}"


# -- one loader ------------------------------------------------------------------------------

def random_chunks(rng, params, count):
    """Chunks of assorted sizes, addresses (some bursts would cross 4 KiB), styles, token
    bases and vocabularies (all valid, cut inside a word, none valid)."""
    port_bits, logit_bits, depth = params["port_bits"], params["logit_bits"], params["depth"]
    per_word, port_bytes = port_bits // logit_bits, port_bits // 8
    sizes = [0, 1, depth, min(depth - 1, 2 * params["max_burst"] + 3)] + \
        [int(rng.integers(1, depth + 1)) for _ in range(count - 4)]
    chunks, base = [], 0x1_0000
    for index, words in enumerate(sizes):
        # Start a few words before a 4 KiB boundary every other chunk.
        address = base + (4096 - port_bytes * int(rng.integers(1, 4)) if index % 2 else 0)
        base += 2 * 4096 + 4096 * (depth * port_bytes // 4096)
        lanes = random_lanes(rng, words * per_word, logit_bits, STYLES[index % len(STYLES)])
        first_token = int(rng.integers(0, 1 << 12)) * (per_word if index % 3 else 1)
        cut = [words * per_word, int(rng.integers(0, words * per_word + 1)),
               -int(rng.integers(0, 5))][rng.choice(3, p=[0.4, 0.45, 0.15])]
        vocab = first_token + cut
        if vocab - first_token < lanes.size:  # lanes past the vocabulary: garbage
            tail = max(vocab - first_token, 0)
            lanes[tail:] = rng.choice(GARBAGE[logit_bits], lanes.size - tail)
        chunks.append({"address": address, "words": words, "first_token": first_token,
                       "vocab": max(vocab, 0), "lanes": lanes})
    return chunks


def run_loader(params, chunks, *, latency=(1, 1), idle=0.0, backpressure=0.0, seed=0):
    """Every chunk through one loader; checks results, bank, bursts and ``beats``; returns
    the slave and per chunk its start and done cycles."""
    dut = RowLoader(**params)
    memory = {}
    for chunk in chunks:
        store(memory, chunk["address"], chunk["lanes"], params["logit_bits"],
              params["port_bits"])
    slave = ReadSlave(dut.port, memory.__getitem__, port_bytes=params["port_bits"] // 8,
                      max_burst=params["max_burst"], latency=latency, idle=idle,
                      backpressure=backpressure, seed=seed)
    timings = []

    async def controller(ctx):
        cycle, total = 0, 0
        for number, chunk in enumerate(chunks):
            what = f"chunk {number} ({chunk['words']} words at {chunk['address']:#x})"
            bursts = len(slave.bursts)
            started = cycle
            await start_chunk(ctx, dut, chunk)
            cycle += 1
            while not ctx.get(dut.done):
                assert ctx.get(dut.busy), f"{what}: busy low before done"
                assert cycle - started < 50 * chunk["words"] + 100, f"{what}: no done"
                await ctx.tick()
                cycle += 1
            assert not ctx.get(dut.busy), f"{what}: busy with done"
            timings.append((started, cycle))
            assert_results(results(ctx, dut), reference(
                chunk["lanes"], params["logit_bits"], chunk["first_token"], chunk["vocab"]),
                what)
            covered = chunk["address"]
            for _, address, beats in slave.bursts[bursts:]:
                assert address == covered, f"{what}: burst at {address:#x}, not {covered:#x}"
                covered += beats * params["port_bits"] // 8
            assert covered == chunk["address"] + chunk["words"] * params["port_bits"] // 8
            total += chunk["words"]
            assert ctx.get(dut.beats) == total, f"{what}: beats"
            for word in range(chunk["words"]):
                ctx.set(dut.read_addr, word)
                await ctx.tick()
                cycle += 1
                expected = memory[chunk["address"] + word * params["port_bits"] // 8]
                assert ctx.get(dut.read_data) == expected, f"{what}: bank word {word}"

    simulate_with_slaves(dut, [slave], controller)
    return dut, slave, timings


@pytest.mark.parametrize(("port_bits", "logit_bits", "max_burst", "depth", "seed"), [
    (256, 32, 256, 150, 1),  # bursts up to the 4 KiB page (128 words)
    (256, 16, 4, 40, 2),
    (512, 32, 16, 40, 3),
    (512, 16, 1, 24, 4),     # one beat per burst
])
def test_loader_against_numpy_under_stalls(port_bits, logit_bits, max_burst, depth, seed):
    params = loader_params(port_bits, logit_bits, max_burst=max_burst, depth=depth)
    rng = np.random.default_rng(seed)
    chunks = random_chunks(rng, params, 16)
    _, slave, _ = run_loader(params, chunks, latency=(1, 12), idle=0.3, backpressure=0.3,
                             seed=seed)
    if max_burst > 1:
        assert max(beats for _, _, beats in slave.bursts) == min(max_burst, 32768 // port_bits)


def test_loader_latency_and_throughput():
    params = loader_params(256, 32, max_burst=4, depth=40)
    rng = np.random.default_rng(5)
    chunks = [{"address": 0x2000 + 32 * 3, "words": 37, "first_token": 0, "vocab": 300,
               "lanes": random_lanes(rng, 37 * 8, 32, "normal")}]
    dut, slave, timings = run_loader(params, chunks)
    (started, done), = timings
    ar_cycles = [cycle for cycle, _, _ in slave.bursts]
    assert ar_cycles[0] == started + RowLoader.start_latency
    assert ar_cycles == list(range(ar_cycles[0], ar_cycles[0] + len(ar_cycles)))
    assert [beats for _, _, beats in slave.bursts] == [1] + [4] * 9
    assert slave.beat_cycles == list(range(ar_cycles[0] + 1, ar_cycles[0] + 38))
    assert done == slave.beat_cycles[-1] + dut.done_latency
    assert dut.done_latency == 7


def test_loader_ties_zeros_and_empty_rows():
    """Directed chunks: equal maxima in several words, +0.0 against -0.0 either way round,
    all -inf, NaN only, and a chunk entirely past the vocabulary."""
    params = loader_params(256, 32, max_burst=2, depth=6)
    f32 = lambda values: np.array(values, np.float32).view(np.uint32)  # noqa: E731
    rows = [
        f32([1, 5, 5, 2, 0, 0, 0, 0] + [5] * 8 + [0] * 8),
        f32([-0.0, 0.0] * 4 + [0.0] * 8),
        f32([0.0, -0.0] * 4 + [-0.0] * 8),
        f32([-np.inf] * 16),
        np.array([NANS[32][i % 4] for i in range(16)], np.uint32),
        f32([7.0] * 8),
    ]
    chunks = [{"address": 0x4000 * (i + 1), "words": row.size // 8, "first_token": 16 * i,
               "vocab": 16 * i + (0 if i == 5 else row.size), "lanes": row}
              for i, row in enumerate(rows)]
    run_loader(params, chunks)


# -- several loaders and the merge -----------------------------------------------------------

@pytest.mark.parametrize(("ports", "port_bits", "logit_bits", "seed"), [
    (2, 256, 32, 6), (3, 512, 16, 7), (4, 256, 16, 8),
])
def test_merge_against_numpy_over_the_row(ports, port_bits, logit_bits, seed):
    params = loader_params(port_bits, logit_bits, max_burst=4, depth=12)
    per_word, port_bytes = port_bits // logit_bits, port_bits // 8
    rng = np.random.default_rng(seed)
    m = Module()
    loaders = [RowLoader(**params) for _ in range(ports)]
    for index, loader in enumerate(loaders):
        m.submodules[f"loader{index}"] = loader
    merged = merge_peaks(m, loaders)
    memory, rows = {}, []
    for number in range(6):
        max_vocab = ports * params["depth"] * per_word
        vocab = [1, max_vocab, int(rng.integers(1, max_vocab))][number % 3]
        row_words = -(-vocab // per_word)
        chunk_words = -(-row_words // ports)
        lanes = random_lanes(rng, row_words * per_word, logit_bits, STYLES[number])
        lanes[vocab:] = rng.choice(GARBAGE[logit_bits], lanes.size - vocab)
        address = 0x10_0000 * (number + 1) - port_bytes * int(rng.integers(0, 8))
        store(memory, address, lanes, logit_bits, port_bits)
        rows.append((lanes, vocab, [
            {"address": address + p * chunk_words * port_bytes,
             "words": int(np.clip(row_words - p * chunk_words, 0, chunk_words)),
             "first_token": p * chunk_words * per_word, "vocab": vocab}
            for p in range(ports)]))
    slaves = [ReadSlave(loader.port, memory.__getitem__, port_bytes=port_bits // 8,
                        max_burst=4, latency=(1, 8), idle=0.2, backpressure=0.2,
                        seed=seed * 10 + index)
              for index, loader in enumerate(loaders)]

    async def controller(ctx):
        for number, (lanes, vocab, chunks) in enumerate(rows):
            for loader, chunk in zip(loaders, chunks, strict=True):
                for name, value in chunk.items():
                    ctx.set(getattr(loader, name), value)
                ctx.set(loader.start, 1)
            await ctx.tick()
            finished = [False] * ports
            for loader in loaders:
                ctx.set(loader.start, 0)
            for _ in range(2000):
                finished = [seen or ctx.get(loader.done)
                            for seen, loader in zip(finished, loaders, strict=True)]
                if all(finished):
                    break
                await ctx.tick()
            assert all(finished), f"row {number}: loaders not done"
            await ctx.tick().repeat(merge_latency(ports))
            assert_results(results(ctx, merged), reference(lanes, logit_bits, 0, vocab),
                           f"row {number} ({vocab} tokens)")

    simulate_with_slaves(m, slaves, controller)


def test_merge_latency():
    assert [merge_latency(n) for n in (1, 2, 3, 4, 5, 64)] == [2, 3, 4, 4, 5, 8]
    with pytest.raises(ValueError, match="`chunks` must name at least one loader"):
        merge_peaks(None, [])


# -- parameters --------------------------------------------------------------------------------

@pytest.mark.parametrize(("override", "error", "message"), [
    ({"port_bits": 32}, ParameterError, "`port_bits` must be between 64 and 1024, not 32"),
    ({"port_bits": 384}, ParameterError, "`port_bits` must be a power of two, not 384"),
    ({"logit_bits": 8}, ParameterError, "`logit_bits` must be one of 32, 16, not 8"),
    ({"depth": 0}, ParameterError, "`depth` must be at least 1, not 0"),
    ({"depth": 2.0}, ParameterTypeError, "`depth` must be an integer, not 2.0"),
    ({"address_width": 12}, ParameterError,
     "`address_width` must be between 16 and 64, not 12"),
    ({"max_burst": 512}, ParameterError, "`max_burst` must be between 1 and 256, not 512"),
    ({"max_burst": 6}, ParameterError, "`max_burst` must be a power of two, not 6"),
    ({"token_width": 33}, ParameterError, "`token_width` must be between 2 and 32, not 33"),
])
def test_parameter_errors(override, error, message):
    with pytest.raises(error) as raised:
        RowLoader(**{**loader_params(256, 32), **override})
    assert str(raised.value) == message
    assert raised.value.parameter == next(iter(override))
