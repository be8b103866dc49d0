# amaranth: UnusedElaboratable=no
"""hw/dataflow/proba_fetch.py on its own: a depth's probabilities fetched from card memory into
the banks (the first request's into ``probas`` as they arrive), then requests' loaded in any
order, against the words in memory, under random memory latency and stalls, with runs that
start and end mid-beat."""

import random

import pytest

from hw.dataflow.engine import EngineParams
from hw.dataflow.proba_fetch import ProbaFetch
from sim.amaranth_tb import simulate
from sim.dataflow import PARAMETERS
from sim.dataflow.memory import CardMemory

# 64-bit ports (2 words a beat), N = 4; 256-bit ports (8 words a beat), N = 12, 5 slots
BUILDS = {
    "narrow": PARAMETERS,
    "wide": {**PARAMETERS, "port_bits": 256, "node_top_k": 4, "max_tree_width": 3,
             "max_batch": 5, "max_node_count": 40, "max_input_size": 12},
}


async def _until_low(ctx, signal, limit=2000):
    for _ in range(limit):
        await ctx.tick()
        if not ctx.get(signal):
            return
    raise TimeoutError(f"{signal.name} stayed high for {limit} clocks")


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fetched_requests_load_their_own_words(build, seed):
    params = EngineParams(**BUILDS[build])
    rng = random.Random(seed)
    lanes = params.port_bits // 32
    memory = CardMemory(1 << 16, seed=seed, latency=(1, 12), stall=0.3)
    dut = ProbaFetch(params)
    fetches = []  # (batch, n, words) of each fetch
    for _ in range(3):
        batch = rng.randint(1, params.max_batch)
        n = rng.randint(1, params.max_candidates)
        words = [rng.getrandbits(32) for _ in range(batch * n)]
        skip = rng.randrange(lanes)  # the run starts mid-beat
        address = memory.allocate(f"probas{len(fetches)}", skip + len(words)) + 4 * skip
        memory.write_words(address, words)
        fetches.append((address, batch, n, words))

    async def bench(ctx):
        for address, batch, n, words in fetches:
            ctx.set(dut.address, address)
            ctx.set(dut.count, len(words))
            ctx.set(dut.first_count, n)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            assert ctx.get(dut.fetching)
            await _until_low(ctx, dut.fetching)
            assert list(ctx.get(dut.probas))[:n] == words[:n], "the first request, as it came"
            for request in rng.sample(range(batch), batch):
                ctx.set(dut.load_at, request * n)
                ctx.set(dut.load_count, n)
                ctx.set(dut.load, 1)
                await ctx.tick()
                ctx.set(dut.load, 0)
                await _until_low(ctx, dut.loading)
                assert list(ctx.get(dut.probas))[:n] == words[request * n:(request + 1) * n], \
                    f"request {request} of {batch} (n = {n})"

    simulate(dut, bench, background=[memory.serve_read(dut.port, params.port_bits)])
