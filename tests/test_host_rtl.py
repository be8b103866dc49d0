"""host.Engine on the rtl backend (the Verilated hw/dataflow engine, in process) and on the
card backend (its Vitis kernel, Verilated, driven through registers and rings) against the
golden backend: the same commands give the same completions, bit for bit, over many rounds;
every command reports its cycles and bytes.

One small engine build (the contract's small tree, K = 4, W = 4, three depths, verify_num 8,
on 64-bit ports) is shared by every test of the file (cached under build/verilated/: built
once per parameter set)."""

import dataclasses

import numpy as np
import pytest

import host
from golden import synthetic_sampler

V = 32
TREE = host.TREES["small"]
CONFIG = TREE.round_config(batch_size=2)
CONTEXT = 512


def same_bits(a, b) -> bool:
    """Equal dtype, shape and bytes."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def assert_same(got, expected, where=""):
    """Two results (dataclasses of arrays and ints, nested) equal bit for bit."""
    if dataclasses.is_dataclass(got):
        assert type(got) is type(expected), where
        for field in dataclasses.fields(got):
            assert_same(getattr(got, field.name), getattr(expected, field.name),
                        f"{where}.{field.name}")
    elif isinstance(got, np.ndarray) or isinstance(expected, np.ndarray):
        assert same_bits(got, expected), f"{where}:\n{got}\ngolden\n{expected}"
    elif isinstance(got, list | tuple):
        assert len(got) == len(expected), where
        for index, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
            assert_same(mine, theirs, f"{where}[{index}]")
    elif isinstance(got, dict):
        assert got.keys() == expected.keys(), where
        for key in got:
            assert_same(got[key], expected[key], f"{where}[{key!r}]")
    else:
        assert got == expected, f"{where}: {got!r}, golden {expected!r}"


@pytest.fixture(scope="module", params=["rtl", "card"])
def rtl_engines(request):
    """A factory of Engines on the one shared build, on the rtl backend (the engine's
    command stream) and on the card backend (its Vitis kernel's registers and rings); the
    first call builds the model or finds it in the cache."""
    def make(config=CONFIG, **kwargs):
        return host.Engine(config, vocab_size=V, backend=request.param, context_len=CONTEXT,
                           **kwargs)
    make()
    return make


def golden_engine(config=CONFIG, **kwargs):
    return host.Engine(config, vocab_size=V, backend="golden", context_len=CONTEXT, **kwargs)


def test_rounds_equal_golden_bit_for_bit(rtl_engines):
    """60 rounds of decoding on both backends with the same seeds: every array of every
    round (draft tree, depth records, verify tree in all three mask layouts, verify result),
    the token stream and the req_to_token table equal; the rtl backend measures every
    command. Sampling settings vary: temperatures, greedy, top-k, top-p, LFSR coins, forced
    widths, one or two requests."""
    rtl, golden = rtl_engines(seed=5), golden_engine(seed=5)
    models = host.BigramModels(V, seed=5, agreement=0.6)
    sampler = models.sampler(TREE.node_top_k)
    rng = np.random.default_rng(5)
    roots = rng.integers(0, V, 2).astype(np.int64)
    streams = {"rtl": [[], []], "golden": [[], []]}
    for index in range(60):
        slots = np.array({5: [1], 6: [0]}.get(index % 7, [0, 1]), np.int64)
        b = len(slots)
        settings = {"temperatures": np.where(rng.random(b) < 0.3, 0.0,
                                             rng.uniform(0.5, 1.5, b)).astype(np.float32)}
        if index % 4 == 1:
            settings["top_k"] = rng.integers(0, 6, b).astype(np.int32)
        if index % 5 == 2:
            settings["top_p"] = rng.uniform(0.5, 1.0, b).astype(np.float32)
        if index % 3 == 0:
            settings["seeds"] = rng.integers(0, 1 << 32, b, dtype=np.int64)
        widths = [[4, 4], [2, 0], [1, 3], None][index % 4] if index % 6 == 3 else None
        mode = index % 3
        results = {}
        for name, engine in (("rtl", rtl), ("golden", golden)):
            results[name] = engine.round(sampler, roots[slots], models.verify_logits,
                                         tree_mask_mode=mode, widths=widths, slots=slots,
                                         **settings)
        got, expected = results["rtl"], results["golden"]
        assert_same(got.draft, expected.draft, f"round {index} draft")
        assert_same(got.tree, expected.tree, f"round {index} tree")
        assert_same(got.verify, expected.verify, f"round {index} verify")
        assert [(c.command, c.status) for c in got.commands] == \
            [(c.command, c.status) for c in expected.commands]
        assert all(isinstance(c.cycles, int) and c.cycles > 0 and isinstance(c.bytes, int)
                   and c.bytes > 0 for c in got.commands), got.commands
        assert expected.cycles is None and got.cycles > 0 and got.bytes > 0
        assert same_bits(rtl.req_to_token, golden.req_to_token), f"round {index} req_to_token"
        assert same_bits(rtl.seq_lens, golden.seq_lens)
        for name, result in results.items():
            for slot, tokens in zip(slots, result.verify.accepted_tokens(), strict=True):
                streams[name][slot] += tokens.tolist()
        roots[slots] = got.verify.next_root
    assert streams["rtl"] == streams["golden"]
    assert sum(map(len, streams["rtl"])) >= 60
    for slot in range(CONFIG.batch_size):
        assert_same_state(rtl.read_state(slot), golden.read_state(slot), f"read_state({slot})")


def assert_same_state(got, expected, where):
    """A ``read_state`` result: the header, the valid node prefix of the tree rows and the
    score rows bit for bit (rows past ``cumu_count`` are the backend's to leave)."""
    for name in ("phase", "seq_len", "req_pool_index", "cumu_count"):
        assert getattr(got, name) == getattr(expected, name), f"{where}.{name}"
    count = expected.cumu_count
    assert got.tree.keys() == expected.tree.keys()
    for name, row in expected.tree.items():
        keep = slice(None) if name in ("sort_scores", "work_scores") else slice(count)
        assert same_bits(got.tree[name][keep], row[keep]), f"{where}.tree[{name!r}]"


def test_decode_equals_golden(rtl_engines):
    """``host.decode`` (the command line's loop) gives the same tokens and figures on both
    backends, the rtl one with cycles and bytes per round."""
    runs = {}
    for name, engine in (("rtl", rtl_engines(seed=9)), ("golden", golden_engine(seed=9))):
        models = host.BigramModels(V, seed=9, agreement=0.7)
        runs[name] = host.decode(engine, models, [3, 11], 12, temperature=0.8)
    assert runs["rtl"].tokens == runs["golden"].tokens
    rtl, golden = runs["rtl"].metrics.summary(300.0), runs["golden"].metrics.summary(300.0)
    assert golden["cycles_per_round"] is None and golden["bytes_per_round"] is None
    assert rtl["cycles_per_round"] > 0 and rtl["bytes_per_round"] > 0
    assert {k: v for k, v in rtl.items() if "cycles" not in k and "bytes" not in k
            and not k.startswith("us_")} == \
        {k: v for k, v in golden.items() if "cycles" not in k and "bytes" not in k
         and not k.startswith("us_")}


@pytest.mark.parametrize("widths", [[4, 4], [2, 0], [1, 3], [], [0], [3]])
def test_draft_round_with_forced_widths_equals_golden(rtl_engines, widths):
    rng = np.random.default_rng(len(widths))
    roots = rng.integers(0, V, 2).astype(np.int64)
    results = []
    for engine in (rtl_engines(), golden_engine()):
        sampler = synthetic_sampler(3, V, CONFIG.node_top_k)
        results.append(engine.draft_round(sampler, roots, widths=widths))
    assert_same(results[0], results[1], f"widths {widths}")


def test_refused_commands_match_golden(rtl_engines):
    """Out-of-order commands the engine itself refuses (sent straight to the backends)."""
    table = np.full((2, CONTEXT), -1, np.int64)
    config = host.engine_config(CONFIG, V)
    rtl = host.RtlBackend(config, table.copy())
    golden = host.GoldenBackend(config, table.copy())
    for backend in (rtl, golden):
        assert backend.build_verify(2, np.zeros(0, np.int64)).completion.status.name \
            == "BAD_PHASE"
    statuses = [backend.draft_depth(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.int64),
                                    width=None).completion.status for backend in (rtl, golden)]
    assert statuses[0] == statuses[1]
    result = rtl.read_state(1)
    assert result.cycles > 0 and result.bytes > 0
    assert result.completion.outputs["state"].req_pool_index == \
        golden.read_state(1).completion.outputs["state"].req_pool_index


def test_a_hot_token_map_is_refused():
    hot = np.arange(16, dtype=np.int64)
    with pytest.raises(ValueError, match="hot_token_id"):
        host.Engine(CONFIG, vocab_size=V, backend="rtl", hot_token_id=hot)


def test_a_table_beyond_int32_is_refused():
    table = np.full((2, CONTEXT), 1 << 40, np.int64)
    with pytest.raises(ValueError, match="req_to_token"):
        host.RtlBackend(host.engine_config(CONFIG, V), table)


@pytest.mark.parametrize("bound", [-1, 1 << 32, 2.5, "5000"])
def test_a_bad_watchdog_bound_is_refused(bound):
    table = np.full((2, CONTEXT), -1, np.int64)
    with pytest.raises(ValueError, match="watchdog_cycles"):
        host.RtlBackend(host.engine_config(CONFIG, V), table, watchdog_cycles=bound)


def test_a_hung_memory_is_a_watchdog_error():
    """A command whose memory never answers (every channel stalled) completes with
    ``WATCHDOG`` after the configured bound, reported as such; the round in flight ends where
    its last command left it (``golden.engine.Engine.abandon_round``) and the engine serves
    the next round as the golden does."""
    from golden.engine import Engine, Status

    config = host.engine_config(CONFIG, V)
    table = np.full((CONFIG.batch_size, CONTEXT), -1, np.int64)
    rtl = host.RtlBackend(config, table.copy(), watchdog_cycles=5000)
    golden = Engine(config, table.copy())
    k = CONFIG.node_top_k
    begin = dict(slots=np.array([0, 1]), root_tokens=np.array([3, 7]),
                 seq_lens=np.array([10, 20]), req_pool_indices=np.array([0, 1]),
                 draft_cache_locs=np.arange(2 * (CONFIG.max_input_size + 1)).reshape(2, -1),
                 verify_num=CONFIG.verify_num, depths=None)
    probas = np.tile(np.linspace(0.5, 0.1, k, dtype=np.float32), (2, 1))
    tokens = np.tile(np.arange(k, dtype=np.int64), (2, 1))
    assert rtl.begin_round(**begin).completion.ok and golden.begin_round(**begin).ok
    rtl.memory.stall = 1.0  # no channel of any port moves
    hung = rtl.draft_depth(probas, tokens)
    rtl.memory.stall = 0.0
    assert hung.completion.status == Status.WATCHDOG
    assert "watchdog" in hung.completion.message and hung.cycles >= 5000
    golden.abandon_round()
    for slot in range(CONFIG.batch_size):
        assert_same_state(rtl.read_state(slot).completion.outputs["state"],
                          golden.read_state(slot).outputs["state"], f"read_state({slot})")
    locs = np.arange(2 * CONFIG.verify_num)
    assert rtl.build_verify(0, locs).completion.status == Status.BAD_PHASE
    assert rtl.begin_round(**begin).completion.ok and golden.begin_round(**begin).ok
    assert rtl.draft_depth(probas, tokens).completion.ok and golden.draft_depth(probas, tokens).ok
    assert_same_state(rtl.read_state(1).completion.outputs["state"],
                      golden.read_state(1).outputs["state"], "the next round")
