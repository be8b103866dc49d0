"""Property: bad calls change nothing. Hypothesis interleaves random bad calls (of every row
of docs/host.md's "Bad input" table that reaches an engine) with good rounds on one engine;
a twin engine runs the good rounds only. Every good call's result, and after every round
every slot's state, ``req_to_token``, the coin generator and the KV allocator, must be the
twin's bit for bit. The golden backend runs 8 examples of 25 rounds (200 rounds) in
``make test``; the rtl backend (the Verilated engine, whose rollback resets the model and
replays the live rounds) runs in the slow tier."""

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_host_hostile import (
    BIG,
    CONFIG,
    MODELS,
    ROUNDS,
    SAMPLER,
    V,
    answer,
    engine_state,
    new_engine,
)

import host

ROUNDS_PER_EXAMPLE = 25
GOLDEN_EXAMPLES = 8
RTL_EXAMPLES = 8
assert ROUNDS_PER_EXAMPLE <= ROUNDS  # the engines' tables are sized for ROUNDS


def _masked(array):
    return np.ma.masked_array(array, mask=np.zeros(array.shape, bool))


# Bad calls, by the point of a round where they are tried. Each takes (engine, n) with n the
# built tree's size (0 before build_verify) and must raise.
ANYTIME = {
    "sampler nan at depth 2": lambda e, n: e.draft_round(answer("nan", 2), ROOTS_OF[e]),
    "sampler token >= V at depth 1": lambda e, n: e.draft_round(answer("token >= V", 1),
                                                                ROOTS_OF[e]),
    "sampler shape at depth 3": lambda e, n: e.draft_round(answer("shape", 3), ROOTS_OF[e]),
    "sampler raises at depth 2": lambda e, n: e.draft_round(answer("raises", 2), ROOTS_OF[e]),
    "masked roots": lambda e, n: e.draft_round(SAMPLER, _masked(ROOTS_OF[e])),
    "kv id 2**31": lambda e, n: e.draft_round(
        SAMPLER, ROOTS_OF[e], draft_cache_locs=np.full((2, CONFIG.max_input_size + 1), BIG)),
    "read_state 1.5": lambda e, n: e.read_state(1.5),
    "read_state '0'": lambda e, n: e.read_state("0"),
    "round with top_p 1.5": lambda e, n: e.round(
        SAMPLER, ROOTS_OF[e], MODELS.verify_logits, np.ones(2, np.float32),
        top_p=np.full(2, 1.5, np.float32)),
}
DRAFTED = {
    "build_verify mode 7": lambda e, n: e.build_verify(7),
    "build_verify kv id 2**31": lambda e, n: e.build_verify(
        verify_cache_locs=np.full(2 * e.verify_size(), BIG)),
    "verify before build": lambda e, n: e.verify(np.zeros((2, 1, V), np.float32),
                                                 np.ones(2, np.float32)),
}
BUILT = {
    "verify top_p 1.5": lambda e, n: e.verify(
        LOGITS_OF[e], np.ones(2, np.float32), top_p=np.full(2, 1.5, np.float32)),
    "verify nan temperature": lambda e, n: e.verify(
        LOGITS_OF[e], np.array([np.nan, 1], np.float32)),
    "verify masked nan coin": lambda e, n: e.verify(
        LOGITS_OF[e], np.ones(2, np.float32),
        uniform_samples=np.ma.masked_invalid(np.full((2, n), np.nan, np.float32)),
        uniform_samples_for_final_sampling=np.full(2, 0.5, np.float32)),
    "verify top_k int64": lambda e, n: e.verify(LOGITS_OF[e], np.ones(2, np.float32),
                                                top_k=np.full(2, 3, np.int64)),
    "verify seeds 2**32": lambda e, n: e.verify(LOGITS_OF[e], np.ones(2, np.float32),
                                                seeds=np.full(2, 1 << 32, np.int64)),
    "build_verify twice": lambda e, n: e.build_verify(),
}
ROOTS_OF, LOGITS_OF = {}, {}  # the round's roots and verify logits, per engine

# A good round's settings: greedy or sampled, top-k, top-p, LFSR coins (seeds from the
# engine's generator), or host coins drawn by the engine.
GOOD = st.fixed_dictionaries({
    "temperature": st.sampled_from([0.0, 0.7, 1.0]),
    "top_k": st.sampled_from([0, 3]),
    "top_p": st.sampled_from([1.0, 0.8]),
    "lfsr": st.booleans(),
    "mask_mode": st.sampled_from([0, 1, 2]),
})
ROUND = st.fixed_dictionaries({
    "good": GOOD,
    "anytime": st.lists(st.sampled_from(sorted(ANYTIME)), max_size=2),
    "drafted": st.lists(st.sampled_from(sorted(DRAFTED)), max_size=2),
    "built": st.lists(st.sampled_from(sorted(BUILT)), max_size=2),
})
PLAN = st.lists(ROUND, min_size=ROUNDS_PER_EXAMPLE, max_size=ROUNDS_PER_EXAMPLE)


def _bad(engine, names, table, n, log):
    """Try each bad call of ``names``; each must raise (and is counted)."""
    for name in names:
        with pytest.raises((ValueError, RuntimeError, host.EngineError)):
            table[name](engine, n)
        log[name] = log.get(name, 0) + 1


def _good_round(engine, good, roots, bad=None, log=None):
    """One good round (with the bad calls of ``bad`` between its steps); its outputs."""
    ROOTS_OF[engine] = roots
    if bad:
        _bad(engine, bad["anytime"], ANYTIME, 0, log)
    draft = engine.draft_round(SAMPLER, roots)
    if bad:
        _bad(engine, bad["drafted"], DRAFTED, 0, log)
    tree = engine.build_verify(good["mask_mode"])
    LOGITS_OF[engine] = logits = MODELS.verify_logits(tree)
    if bad:
        _bad(engine, bad["built"], BUILT, tree.n, log)
    settings_ = {"temperatures": np.full(2, good["temperature"], np.float32)}
    if good["top_k"]:
        settings_["top_k"] = np.full(2, good["top_k"], np.int32)
    if good["top_p"] < 1:
        settings_["top_p"] = np.full(2, good["top_p"], np.float32)
    if good["lfsr"]:
        settings_["seeds"] = engine.rng.integers(0, 1 << 32, 2, dtype=np.int64)
    result = engine.verify(logits, **settings_)
    return draft, tree, result


def _same(a, b, where):
    """Two result dataclasses (or arrays, lists, scalars) equal bit for bit."""
    if hasattr(a, "__dataclass_fields__"):
        for name in a.__dataclass_fields__:
            if name != "commands":
                _same(getattr(a, name), getattr(b, name), f"{where}.{name}")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), where
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def run_plan(plan, backend, log):
    """The plan on a dirty engine (with its bad calls) and a clean twin; compared after
    every round. Returns the rounds run."""
    dirty, clean = new_engine(backend), new_engine(backend)
    roots = {dirty: np.array([3, 17], np.int64), clean: np.array([3, 17], np.int64)}
    for number, step in enumerate(plan):
        got = _good_round(dirty, step["good"], roots[dirty], step, log)
        want = _good_round(clean, step["good"], roots[clean])
        _same(got, want, f"round {number}")
        assert engine_state(dirty) == engine_state(clean), f"round {number}"
        for engine, (_, _, result) in ((dirty, got), (clean, want)):
            roots[engine] = result.next_root.astype(np.int64)
    return len(plan)


COUNT = {"golden": 0, "rtl": 0}
LOG = {"golden": {}, "rtl": {}}


@settings(max_examples=GOLDEN_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(PLAN)
def _golden_property(plan):
    COUNT["golden"] += run_plan(plan, "golden", LOG["golden"])


def test_bad_calls_change_nothing_on_the_golden_backend():
    """At least 200 good rounds with random bad calls among them, every bad call tried."""
    COUNT["golden"], LOG["golden"] = 0, {}
    _golden_property()
    print(f"golden: {COUNT['golden']} rounds, {sum(LOG['golden'].values())} bad calls")
    assert COUNT["golden"] >= 200
    assert set(LOG["golden"]) == set(ANYTIME) | set(DRAFTED) | set(BUILT)


@settings(max_examples=RTL_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(PLAN)
def _rtl_property(plan):
    COUNT["rtl"] += run_plan(plan, "rtl", LOG["rtl"])


@pytest.mark.slow
def test_bad_calls_change_nothing_on_the_rtl_backend():
    """The same property on the Verilated engine (its first build takes minutes)."""
    new_engine("rtl")  # build (or find) the model before the clock starts
    COUNT["rtl"], LOG["rtl"] = 0, {}
    start = time.monotonic()
    _rtl_property()
    print(f"rtl: {COUNT['rtl']} rounds, {sum(LOG['rtl'].values())} bad calls in "
          f"{time.monotonic() - start:.0f} s")
    assert COUNT["rtl"] >= RTL_EXAMPLES * ROUNDS_PER_EXAMPLE
