"""Bad input at the host and the command line (docs/host.md, "Bad input"): each row of the
table has a test here. Every refused call raises a clear error naming the argument and leaves
the engine as it was: every slot's state, ``req_to_token``, the coin generator, the KV slot
allocator and the host's round (:func:`assert_refused`); a refused ``draft_round`` is rolled
back although its ``begin_round`` had run. The interleaving of random bad calls with good
rounds is ``tests/test_host_hostile_property.py``."""

import subprocess
import sys

import numpy as np
import pytest

import host
from golden import DraftSample
from golden.engine import Engine as GoldenEngine
from golden.engine import Status
from host.__main__ import main
from host.decode import decode_context_len
from sim.harness import REPO_ROOT

V = 32
TREE = host.TREES["small"]
CONFIG = TREE.round_config(batch_size=2)
ROUNDS = 30  # the most rounds one engine of these tests runs (its table's row length)
CONTEXT = decode_context_len(CONFIG, ROUNDS)
BIG = 1 << 31  # the first value past the card's int32


# --- engines and their state ------------------------------------------------------------------


def new_engine(backend="golden", **kwargs):
    """An Engine on the small tree, 2 slots, V = 32, seeded coins and KV slots."""
    return host.Engine(CONFIG, vocab_size=V, backend=backend, context_len=CONTEXT, seed=5,
                       **kwargs)


MODELS = host.BigramModels(V, seed=2, agreement=0.7)
SAMPLER = MODELS.sampler(CONFIG.node_top_k)
ROOTS = np.array([3, 17], np.int64)


def engine_state(engine) -> dict:
    """What a call must not change: each slot's state (through the backend, so the host's
    command log is not touched), the table, the coin generator, the KV allocator, the host's
    slot lengths and round."""
    slots = []
    for slot in range(CONFIG.batch_size):
        state = engine.backend.read_state(slot).completion.outputs["state"]
        count = state.cumu_count
        slots.append((state.phase, state.seq_len, state.req_pool_index, count,
                      {name: row[:count].tobytes() if name not in ("sort_scores", "work_scores")
                       else row.tobytes() for name, row in state.tree.items()}))
    r = engine._round
    return {"slots": slots, "table": engine.req_to_token.tobytes(),
            "rng": repr(engine.rng.bit_generator.state), "kv": engine.kv_slots.mark(),
            "seq_lens": engine.seq_lens.tobytes(),
            "round": None if r is None else (r.phase, r.cumu_count, r.slots.tobytes(),
                                             r.seq_lens.tobytes())}


def assert_refused(engine, call, error=ValueError, match=None):
    """``call`` raises ``error`` (matching ``match``) and changes nothing."""
    before, round_ = engine_state(engine), engine._round
    with pytest.raises(error, match=match):
        call()
    assert engine_state(engine) == before
    assert engine._round is round_


def drafted(engine, rounds=0):
    """``engine`` after ``rounds`` good rounds and one more draft_round."""
    good_rounds(engine, rounds)
    engine.draft_round(SAMPLER, ROOTS)
    return engine


def built(engine, rounds=0):
    """``engine`` after ``rounds`` good rounds, one more draft_round and build_verify."""
    drafted(engine, rounds).build_verify()
    return engine


def verify_settings(engine, **changes):
    """A good verify's arguments for the built round (sampled, coins from the seed)."""
    tree = engine._round.tree
    return {"target_logits": MODELS.verify_logits(tree),
            "temperatures": np.ones(2, np.float32), **changes}


def good_rounds(engine, rounds):
    """``rounds`` sampled rounds of the two requests; their results."""
    return [engine.round(SAMPLER, ROOTS, MODELS.verify_logits, np.ones(2, np.float32))
            for _ in range(rounds)]


def round_tokens(result) -> list:
    """What a round committed, per request."""
    return [list(map(int, tokens)) for tokens in result.verify.accepted_tokens()]


# --- the verify's arguments and its coins --------------------------------------------------------


@pytest.mark.parametrize(("changes", "match"), [
    ({"top_p": np.full(2, 1.5, np.float32)}, "`top_p` values must be at most 1"),
    ({"top_k": np.full(2, 3, np.int64)}, "`top_k` must be int32"),
    ({"temperatures": np.array([1.0, np.nan], np.float32)}, "`temperatures` must be finite"),
    ({"threshold_acc": 2.0}, "`threshold_acc` must be a number between 0 and 1"),
    ({"eos_token_id": V}, "`eos_token_id` must be between -1 and"),
    ({"max_seq_lens": np.full(2, BIG, np.int64)}, "`max_seq_lens` values must be between"),
])
def test_a_refused_verify_draws_no_coins(changes, match):
    """Row "verify setting out of range": the coins are drawn after every check, so the
    refused call changes nothing and the next rounds equal a twin's that never saw it."""
    engine, twin = built(new_engine()), built(new_engine())
    assert_refused(engine, lambda: engine.verify(**verify_settings(engine, **changes)),
                   match=match)
    for one in (engine, twin):
        one.verify(**verify_settings(one))
    assert [round_tokens(r) for r in good_rounds(engine, 3)] == \
        [round_tokens(r) for r in good_rounds(twin, 3)]


def test_a_masked_coin_is_refused():
    """Row "masked array": a masked NaN coin is not used as a coin."""
    engine = built(new_engine())
    n = engine.verify_size()
    coins = np.ma.masked_invalid(np.array([[np.nan] + [0.5] * (n - 1)] * 2, np.float32))
    assert_refused(engine, lambda: engine.verify(**verify_settings(
        engine, uniform_samples=coins,
        uniform_samples_for_final_sampling=np.full(2, 0.5, np.float32))),
        match="`uniform_samples` must be a plain numpy array")


def test_object_arrays_are_refused():
    """Row "object dtype": an array of Python ints is not an int64 array."""
    engine = new_engine()
    assert_refused(engine, lambda: engine.draft_round(SAMPLER, ROOTS.astype(object)),
                   match="`root_tokens` must be int64")


@pytest.mark.parametrize("backend", ["golden", pytest.param("rtl", marks=pytest.mark.slow)])
def test_a_zero_coin_never_commits_a_zero_probability_token(backend):
    """Row "coin exactly 0.0": every draft token's logit is ``-inf`` (probability 0) and every
    coin 0.0; SGLang's ``0 <= 0`` would accept the first child, the engine accepts none and
    the bonus token has a finite logit."""
    engine = built(new_engine(backend))
    tree = engine._round.tree
    n = tree.n
    logits = np.array(MODELS.verify_logits(tree))
    candidates = tree.draft_tokens.reshape(2, n)
    for b in range(2):
        for row in range(n):
            logits[b, row, candidates[b, 1:]] = -np.inf
    result = engine.verify(logits, np.ones(2, np.float32),
                           uniform_samples=np.zeros((2, n), np.float32),
                           uniform_samples_for_final_sampling=np.zeros(2, np.float32))
    assert result.accept_token_num.tolist() == [0, 0]
    for b, tokens in enumerate(result.accepted_tokens()):
        assert len(tokens) == 1 and np.isfinite(logits[b, 0, tokens[0]])


# --- draft_round: a bad sampler answer rolls the round back ---------------------------------------


def answer(kind, depth):
    """A sampler that answers like the good one except, at ``depth``, with ``kind``."""
    def sample(d, frontier):
        good = SAMPLER(d, frontier)
        if d != depth:
            return good
        if kind == "raises":
            raise RuntimeError("the draft model failed")
        probas, tokens = good.probas.copy(), good.tokens.copy()
        if kind == "nan":
            probas[0, 0] = np.nan
        elif kind == "negative":
            probas[-1, -1] = -0.25
        elif kind == "token >= V":
            tokens[0, -1] = V
        elif kind == "shape":
            probas, tokens = probas[:, :-1], tokens[:, :-1]
        elif kind == "not a DraftSample":
            return (probas, tokens)
        return DraftSample(probas=probas, tokens=tokens, hidden_states=good.hidden_states)
    return sample


@pytest.mark.parametrize(("kind", "error", "match"), [
    ("nan", ValueError, "`DraftSample.probas` must be finite"),
    ("negative", ValueError, "`DraftSample.probas` values must be at least 0"),
    ("token >= V", ValueError, "`DraftSample.tokens` holds token 32"),
    ("shape", ValueError, "`DraftSample.probas` must be float32"),
    ("not a DraftSample", ValueError, "the sampler must return a DraftSample"),
    ("raises", RuntimeError, "the draft model failed"),
])
@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("before", ["verified", "built"])
def test_a_bad_sampler_answer_rolls_the_round_back(kind, error, match, depth, before):
    """Row "bad sampler answer": at depth 1 or 3 (after begin_round and two draft_depths),
    after a verified round or a built one; the slots, the table, the KV ids, the generator
    and the host's round are as before, and the round in flight (if built) still verifies as
    it would have."""
    engine, twin = new_engine(), new_engine()
    for one in (engine, twin):
        good_rounds(one, 2)
        if before == "built":
            built(one)
    assert_refused(engine, lambda: engine.draft_round(answer(kind, depth), ROOTS),
                   error=error, match=match)
    if before == "built":
        got, want = (one.verify(**verify_settings(one)) for one in (engine, twin))
        assert got.accept_length.tolist() == want.accept_length.tolist()
        assert got.predicts.tolist() == want.predicts.tolist()
    assert [round_tokens(r) for r in good_rounds(engine, 2)] == \
        [round_tokens(r) for r in good_rounds(twin, 2)]
    assert engine.req_to_token.tobytes() == twin.req_to_token.tobytes()


def test_a_refused_round_changes_nothing():
    """Row "round with a bad verify setting": ``round`` is all or nothing, its draft and
    build are undone."""
    engine = new_engine()
    good_rounds(engine, 1)
    assert_refused(engine, lambda: engine.round(
        SAMPLER, ROOTS, MODELS.verify_logits, np.ones(2, np.float32),
        top_p=np.full(2, 1.5, np.float32)), match="`top_p`")


def test_a_refused_build_verify_gives_its_kv_ids_back():
    """Row "build_verify argument": nothing taken from the KV allocator, the round still
    drafted."""
    engine = drafted(new_engine())
    assert_refused(engine, lambda: engine.build_verify(7), match="`tree_mask_mode` must be")
    assert_refused(engine, lambda: engine.build_verify(np.array([1, 2])),
                   match="`tree_mask_mode` must be")
    n = engine.verify_size()
    locs = np.arange(2 * n, dtype=np.int64)
    locs[-1] = BIG
    assert_refused(engine, lambda: engine.build_verify(verify_cache_locs=locs),
                   match="`verify_cache_locs` values must be between 0 and 2147483647")
    engine.build_verify()


# --- values past the card's int32 ----------------------------------------------------------------


def test_kv_ids_past_int32_are_refused():
    """Row "KV slot id >= 2**31": the card's table holds int32; the rtl backend would store
    the id modulo 2**32 and disagree with the golden."""
    engine = new_engine()
    locs = np.zeros((2, CONFIG.max_input_size + 1), np.int64)
    locs[1, 2] = BIG
    assert_refused(engine, lambda: engine.draft_round(SAMPLER, ROOTS, draft_cache_locs=locs),
                   match="`draft_cache_locs` values must be between 0 and 2147483647")
    with pytest.raises(ValueError, match="`pool_size` must be between 1 and 2147483648"):
        host.KVSlots(BIG + 1)


def test_token_ids_and_lengths_past_int32_are_refused():
    """Row "token id, sequence length past int32"."""
    engine = new_engine()
    assert_refused(engine, lambda: engine.draft_round(SAMPLER, np.array([0, BIG], np.int64)),
                   match="`root_tokens` holds token 2147483648")
    assert_refused(engine, lambda: engine.draft_round(
        SAMPLER, ROOTS, seq_lens=np.array([0, BIG], np.int64)),
        match="`seq_lens` values must be between 0 and 2147483647")
    table = np.full((2, CONTEXT), -1, np.int64)
    table[0, 0] = BIG
    with pytest.raises(ValueError, match="`req_to_token` values must be between"):
        host.Engine(CONFIG, vocab_size=V, req_to_token=table)


# --- the Engine's own arguments and read_state ---------------------------------------------------


@pytest.mark.parametrize(("arguments", "match"), [
    ({"seed": 1.5}, "`seed` must be an integer, not 1.5"),
    ({"seed": "abc"}, "`seed` must be an integer, not 'abc'"),
    ({"seed": -1}, "`seed` must be at least 0"),
    ({"kv_slots": "x"}, "`kv_slots` must be a host.KVSlots or None, not str"),
    ({"context_len": 10**12}, "`context_len` must be between"),
    ({"context_len": 64.0}, "`context_len` must be an integer"),
    ({"vocab_size": 1 << 40}, "`vocab_size` must be between"),
])
def test_engine_arguments(arguments, match):
    """Row "Engine argument": a ValueError naming it, before anything is allocated."""
    with pytest.raises(ValueError, match=match):
        host.Engine(CONFIG, **{"vocab_size": V, **arguments})


@pytest.mark.parametrize("slot", [1.5, "0", None, True, np.float64(1.0)])
def test_read_state_takes_integers_only(slot):
    """Row "read_state slot": the host and the golden engine refuse a float, a string,
    None, a bool (the golden read slot 1 for 1.5 and slot 0 for "0")."""
    engine = drafted(new_engine())
    assert_refused(engine, lambda: engine.read_state(slot), match="`slot` must be an integer")
    golden = GoldenEngine(engine.engine_config, np.full((2, CONTEXT), -1, np.int64))
    with pytest.raises(ValueError, match="`slot` must be an integer"):
        golden.read_state(slot)
    assert golden.read_state(np.int64(1)).ok
    assert golden.read_state(2).status == Status.BAD_SLOT


# --- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(("arguments", "option"), [
    (["--temperature", "nan"], "--temperature"),
    (["--temperature", "-1"], "--temperature"),
    (["--temperature", "inf"], "--temperature"),
    (["--top-p", "-0.5"], "--top-p"),
    (["--top-p", "1.5"], "--top-p"),
    (["--top-k", "10000000000"], "--top-k"),
    (["--top-k", "-3"], "--top-k"),
    (["--vocab", "200000"], "--vocab"),
    (["--vocab", "x"], "--vocab"),
    (["--tree", "eagle2", "--vocab", "8"], "--vocab"),
    (["--rounds", "0"], "--rounds"),
    (["--batch", "-2"], "--batch"),
    (["--agreement", "nan"], "--agreement"),
    (["--seed", "1.5"], "--seed"),
    (["--json", "/no/such/folder/run.json"], "--json"),
])
def test_the_command_line_refuses_bad_options(capsys, arguments, option):
    """Row "command-line option": exit status 2 and one line naming the option, before the
    run (no progress bar, no summary)."""
    status = main([*arguments, "--rounds", "2"] if "--rounds" not in arguments else arguments)
    out = capsys.readouterr()
    assert status == 2
    assert out.out == ""
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "Traceback" not in out.err


def test_the_json_path_is_checked_before_the_run(tmp_path):
    """``--json`` to a folder or a missing folder fails in well under the run's time, from a
    real ``python -m host`` (no traceback)."""
    for path in (tmp_path, tmp_path / "missing" / "run.json"):
        done = subprocess.run([sys.executable, "-m", "host", "--rounds", "100000", "--json",
                               str(path)], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2 and "--json" in done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""
