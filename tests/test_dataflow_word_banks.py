# amaranth: UnusedElaboratable=no
"""hw/dataflow/word_banks.py: groups of words in, a word a clock out."""

import random

import pytest

from hw.dataflow.word_banks import WordBanks
from hw.lib.params import ParameterError
from sim.amaranth_tb import simulate


@pytest.mark.parametrize("depth,lanes", [(20, 1), (37, 2), (64, 8), (29, 4)])
def test_groups_written_words_read(depth, lanes):
    rng = random.Random(depth * lanes)
    dut = WordBanks(depth=depth, lanes=lanes)
    model = [None] * depth

    async def bench(ctx):
        for _ in range(60):
            at = rng.randrange(depth)
            count = rng.randint(0, min(lanes, depth - at))
            words = [rng.getrandbits(32) for _ in range(count)]
            ctx.set(dut.write_at, at)
            ctx.set(dut.write, {"data": words + [0] * (lanes - count), "count": count})
            ctx.set(dut.write_en, rng.random() < 0.8)
            enabled = ctx.get(dut.write_en)
            await ctx.tick()
            if enabled:
                model[at:at + count] = words
        ctx.set(dut.write_en, 0)
        for index in range(depth):
            ctx.set(dut.read_at, index)
            await ctx.tick()
            group = list(ctx.get(dut.read_group))
            assert ctx.get(dut.read_data) == group[0]
            for k in range(min(lanes, depth - index)):  # lanes consecutive words
                if model[index + k] is not None:
                    assert group[k] == model[index + k], (index, k)

    simulate(dut, bench)


@pytest.mark.parametrize("arguments,name", [(dict(depth=0, lanes=2), "depth"),
                                            (dict(depth=8, lanes=3), "lanes"),
                                            (dict(depth=8, lanes=64), "lanes")])
def test_bad_parameters_are_named(arguments, name):
    with pytest.raises(ParameterError, match=f"`{name}`"):
        WordBanks(**arguments)
