"""K4 mask words to the mask array's bytes (hw/dataflow/mask_bytes.py)."""

import random

import numpy as np
import pytest

from hw.dataflow.mask_bytes import MaskBytes
from sim.amaranth_tb import simulate


@pytest.mark.parametrize("lanes,packed,stall", [(8, False, 0.0), (8, True, 0.3),
                                                (16, False, 0.3), (16, True, 0.0)])
def test_rows_become_bytes(lanes, packed, stall):
    rng = random.Random(lanes * 2 + packed)
    requests = [(rng.randrange(1, 40), rng.randrange(1, 4)) for _ in range(5)]  # (columns, rows)
    words, expected, columns_of_word = [], [], []
    for columns, rows in requests:
        for _ in range(rows):
            row = np.array([rng.random() < 0.5 for _ in range(columns)], np.uint8)
            expected += (np.packbits(row, bitorder="little").tolist() if packed
                         else row.tolist())
            for start in range(0, columns, lanes):
                chunk = row[start:start + lanes]
                words.append({"bits": int(sum(int(v) << k for k, v in enumerate(chunk))),
                              "row_last": int(start + lanes >= columns), "first": 0,
                              "last": 0})
                columns_of_word.append(columns)
    expected += [0] * (-len(expected) % 4)
    dut = MaskBytes(mask_lanes=lanes, max_columns=64)
    got = []

    async def source(ctx):
        ctx.set(dut.packed, packed)
        for word, columns in zip(words, columns_of_word, strict=True):
            while rng.random() < stall:
                await ctx.tick()
            ctx.set(dut.columns, columns)
            ctx.set(dut.mask.valid, 1)
            ctx.set(dut.mask.payload, word)
            await ctx.tick().until(dut.mask.ready)
            ctx.set(dut.mask.valid, 0)
        ctx.set(dut.flush, 1)
        await ctx.tick()
        ctx.set(dut.flush, 0)

    async def sink(ctx):
        while len(got) < len(expected) // 4:
            ready = rng.random() >= stall
            ctx.set(dut.words.ready, ready)
            _, _, valid, value = await ctx.tick().sample(dut.words.valid, dut.words.payload)
            if valid and ready:
                got.append(value)
        for _ in range(20):  # nothing more comes
            ctx.set(dut.words.ready, 1)
            _, _, valid = await ctx.tick().sample(dut.words.valid)
            assert not valid

    simulate(dut, source, sink)
    assert np.array(got, "<u4").view(np.uint8).tolist() == expected
