"""host.sgl_kernel's rtl backend (host.k6_rtl: K6 on its Verilator model) against the golden
backend, bit for bit: random and directed K6 calls of ``sim.reject_sample.generators`` and
the edge cases (one-node trees, chains, argmax ties, zero batch, non-power-of-two n and V, a
zero-probability token, both keyword spellings, int32 and int64); refused input writes
nothing. One build (n <= 16, S <= 8, V <= 4096) serves every test of the make-test tier."""

import re

import numpy as np
import pytest

from host import k6_rtl, sgl_kernel
from sim.reject_sample.call import Call
from sim.reject_sample.generators import (
    directed_calls,
    random_call,
    random_probs,
    random_tree,
    tree_from_children,
)

TREE = ("candidates", "retrive_index", "retrive_next_token", "retrive_next_sibling")
OUTPUTS = ("predicts", "accept_index", "accept_token_num", "draft_probs")


@pytest.fixture(scope="module")
def k6():
    """The one Verilated K6 build of this module (built on first use, then cached)."""
    return k6_rtl.model(16, 8, 4096)


def arguments(call, *, dtype=np.int64, spelling="retrive", fill=-5):
    """The keyword arguments of ``call`` (a ``sim.reject_sample.call.Call``) as SGLang passes
    them: outputs pre-filled with ``fill`` (``predicts`` with SGLang's spare element), tree
    arrays of ``dtype`` spelled ``spelling``."""
    b, n = call.candidates.shape
    args = {"predicts": np.full(b * n + 1, fill, np.int32),
            "accept_index": np.full((b, call.steps), fill, np.int32),
            "accept_token_num": np.full(b, fill, np.int32)}
    for name in TREE:
        args[name.replace("retrive", spelling)] = getattr(call, name).astype(dtype)
    if call.mode == "greedy":
        args["target_predict"] = call.target_predict.reshape(b, n).astype(dtype)
    else:
        args.update(uniform_samples=call.uniform_samples,
                    uniform_samples_for_final_sampling=call.final_coins,
                    target_probs=call.target_probs,
                    draft_probs=np.full(call.target_probs.shape, np.nan, np.float32),
                    threshold_single=call.threshold_single, threshold_acc=call.threshold_acc)
    return args


def op_of(args):
    name = "verify_tree_greedy" if "target_predict" in args else \
        "tree_speculative_sampling_target_only"
    return getattr(sgl_kernel, name)


def copied(args):
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in args.items()}


def run_both(args) -> dict:
    """The op on both backends (on copies of ``args``); asserts every output equal bit for
    bit and returns the rtl run's arguments."""
    op = op_of(args)
    want, got = copied(args), copied(args)
    with np.errstate(all="ignore"):  # rows of infinities overflow the golden's sums: meant
        op(**want, backend="golden")
    op(**got, backend="rtl")
    for name in OUTPUTS:
        if name in args:
            assert got[name].dtype == want[name].dtype
            assert got[name].tobytes() == want[name].tobytes(), name
    return got


def sampling_call(rng, *, b=2, n=8, s=4, vocab=37, probs=None, children=None):
    """A sampling call with random trees (or one ``children`` tree), coins and rows (each
    with 0.6 on one token), every node's first child drafting its likeliest token."""
    links = [tree_from_children(n, children) if children is not None else random_tree(rng, n)
             for _ in range(b)]
    nxt, sib = (np.array([link[i] for link in links], np.int64) for i in (0, 1))
    if probs is None:
        probs = random_probs(rng, (b, n, vocab), kind="smooth") * np.float32(0.4)
        rows = probs.reshape(b * n, vocab)
        rows[np.arange(b * n), rng.integers(0, vocab, b * n)] += np.float32(0.6)
    candidates = rng.integers(0, probs.shape[-1], (b, n))
    for req, node in zip(*np.nonzero(nxt >= 0), strict=True):
        candidates[req, nxt[req, node]] = probs[req, node].argmax()
    return Call("test", "sampling", candidates, np.arange(b * n).reshape(b, n), nxt, sib, s,
                target_probs=probs, uniform_samples=rng.random((b, n), dtype=np.float32),
                final_coins=rng.random(b, dtype=np.float32))


# --- the build -------------------------------------------------------------------------------


def test_build_parameters_round_to_few_builds():
    small = k6_rtl.build_parameters(13, 5, 37)
    assert (small["max_nodes"], small["max_steps"], small["max_vocab_size"]) == (16, 8, 4096)
    assert k6_rtl.build_parameters(1, 1, 1) == small
    assert k6_rtl.build_parameters(16, 8, 4096) == small
    large = k6_rtl.build_parameters(60, 9, 128256)
    assert (large["max_nodes"], large["max_steps"], large["max_vocab_size"]) == \
        (64, 16, 131072)
    for shape, match in (((1025, 8, 8), "n = 1025 positions"), ((8, 257, 8), "S = 257"),
                         ((8, 8, (1 << 31) + 1), "V = 2147483649")):
        with pytest.raises(ValueError, match=match):
            k6_rtl.build_parameters(*shape)
    with pytest.raises(ValueError, match="32-bit word addresses"):
        k6_rtl.build_parameters(1024, 8, 1 << 20, batch=1024)


# --- rtl == golden ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sampling", "greedy"])
def test_random_calls(k6, mode):
    rng = np.random.default_rng(33 if mode == "sampling" else 34)
    accepted = 0
    for index in range(25):
        call = random_call(rng, name=f"random {index}", max_nodes=16, max_steps=8,
                           max_vocab=300, mode=mode)
        got = run_both(arguments(call))
        accepted += int(got["accept_token_num"].sum())
    assert accepted > 10  # the calls accept drafts


def test_directed_calls(k6):
    calls = [call for call in directed_calls(8, 16, 8) if call.mode != "lfsr"]
    assert len(calls) > 20
    for call in calls:
        run_both(arguments(call))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("spelling", ["retrive", "retrieve"])
def test_keywords_and_dtypes(k6, dtype, spelling):
    rng = np.random.default_rng(5)
    call = sampling_call(rng, b=3, n=13, s=5, vocab=101)  # n and V not powers of two
    got = run_both(arguments(call, dtype=dtype, spelling=spelling))
    assert (got["accept_token_num"] > 0).any()
    greedy = random_call(rng, name="greedy", max_nodes=16, mode="greedy", nodes=11, batch=3)
    run_both(arguments(greedy, dtype=dtype, spelling=spelling))


def test_positional_and_without_draft_probs(k6):
    call = sampling_call(np.random.default_rng(6))
    args = arguments(call)
    order = ("predicts", "accept_index", "accept_token_num", *TREE, "uniform_samples",
             "uniform_samples_for_final_sampling", "target_probs")
    want, got = copied(args), copied(args)
    sgl_kernel.tree_speculative_sampling_target_only(*(want[k] for k in order), 0.5, 0.5, True)
    sgl_kernel.tree_speculative_sampling_target_only(*(got[k] for k in order), 0.5, 0.5, True,
                                                     backend="rtl")
    for name in OUTPUTS[:3]:
        assert got[name].tobytes() == want[name].tobytes()


def test_one_node_trees_and_chains(k6):
    rng = np.random.default_rng(7)
    for s in (1, 2, 8):  # n = 1: the root row's residual only
        run_both(arguments(sampling_call(rng, b=3, n=1, s=s, vocab=9)))
    chain = {i: [i + 1] for i in range(15)}  # width 1, n = 16, deeper than S
    probs = np.zeros((2, 16, 50), np.float32)
    probs[:, :, 7] = 1.0  # every node drafts the target's only token: all accepted
    call = sampling_call(rng, b=2, n=16, s=8, probs=probs, children=chain)
    call.candidates[:] = 7
    got = run_both(arguments(call))
    assert got["accept_token_num"].tolist() == [7, 7]


def test_argmax_ties_and_repeated_siblings(k6):
    """Greedy as SGLang calls it: ``target_predict = argmax(logits)`` over rows with ties
    (the first maximum wins), siblings drafting the same token (the first is accepted)."""
    rng = np.random.default_rng(8)
    b, n = 2, 9
    logits = rng.integers(0, 3, (b * n, 6)).astype(np.float32)  # many ties
    target_predict = logits.argmax(axis=-1).reshape(b, n)
    call = sampling_call(rng, b=b, n=n, vocab=6,
                         children={0: [1, 2, 3], 1: [4, 5], 2: [6, 7], 4: [8]})
    call.candidates[:] = [0, 1, 1, 1, 2, 2, 0, 0, 1]
    call.candidates[:, 1:4] = target_predict[:, :1]  # three siblings, the root's argmax
    got = run_both(greedy_arguments(arguments(call), target_predict))
    assert got["accept_index"][:, 1].tolist() == [1, n + 1]  # the first of the three


def test_zero_probability_token_is_never_accepted(k6):
    rng = np.random.default_rng(9)
    call = sampling_call(rng, b=1, n=4, s=3, vocab=16, children={0: [1, 2, 3]})
    call.target_probs[0, 0, 5] = 0.0
    call.candidates[0, 1:] = [5, 5, 6]
    call.uniform_samples[:] = 0.0  # coin 0 <= prob_acc 0 would accept without q > 0
    args = {**arguments(call), "threshold_single": 0.0}
    got = run_both(args)
    assert got["accept_index"][0, 1] == 3  # both drafts of token 5 rejected, 6 accepted
    assert got["draft_probs"][0, 0, 5] == 0.0


def greedy_arguments(args, target_predict):
    """``args`` of a sampling call turned into ``verify_tree_greedy``'s."""
    kept = ("predicts", "accept_index", "accept_token_num", *TREE)
    return {**{k: v for k, v in args.items() if k in kept}, "target_predict": target_predict}


def test_zero_batch_writes_nothing():
    args = arguments(sampling_call(np.random.default_rng(10), b=0, n=4))
    for case in (args, greedy_arguments(args, np.zeros((0, 4), np.int64))):
        got = run_both(case)
        assert got["predicts"].tolist() == [-5]  # the spare element only, untouched


# --- refused input ---------------------------------------------------------------------------


def assert_refused(args, error, match):
    """The rtl backend refuses ``args`` with ``error`` and leaves every output unchanged."""
    before = copied(args)
    with pytest.raises(error, match=match):
        op_of(args)(**args, backend="rtl")
    for name in OUTPUTS:
        if name in args:
            assert args[name].tobytes() == before[name].tobytes(), name


def test_sibling_cycle_found_by_the_hardware_writes_nothing(k6):
    call = sampling_call(np.random.default_rng(11), b=2, n=6, children={0: [1, 2], 2: [3]})
    call.retrive_next_sibling[1, 2] = 1  # request 1: siblings 1 -> 2 -> 1 -> ...
    call.target_probs[1, 0] = 0.0  # every draft at its root rejected: the walk goes on
    args = arguments(call)
    with pytest.raises(ValueError, match="request 1 has a cycle") as refused:
        sgl_kernel.tree_speculative_sampling_target_only(**copied(args))
    assert_refused(args, ValueError, re.escape(str(refused.value)))
    no_match = np.full((2, 6), 10**6, np.int64)  # greedy: every draft rejected
    assert_refused(greedy_arguments(args, no_match), ValueError, "request 1 has a cycle")


def test_bad_input_is_refused_before_the_hardware():
    args = arguments(sampling_call(np.random.default_rng(12)))
    nan = copied(args)
    nan["target_probs"][0, 0, 0] = np.nan
    assert_refused(nan, ValueError, "must not contain NaN")
    assert_refused({**copied(args), "threshold_acc": 1.5}, ValueError, "`threshold_acc`")
    assert_refused({**copied(args), "deterministic": 1}, ValueError, "`deterministic`")
    outside = copied(args)
    outside["candidates"][0, 1] = 37
    assert_refused(outside, ValueError, "`candidates`")
    assert_refused({**copied(args), "accept_index": np.full((2, 300), -1, np.int32)},
                   ValueError, "S = 300 columns")


def test_ops_without_hardware_say_why():
    with pytest.raises(NotImplementedError, match="only from its own draft round"):
        sgl_kernel.build_tree_kernel_efficient(*([None] * 12), backend="rtl")
    with pytest.raises(NotImplementedError, match="caller's tree mask"):
        sgl_kernel.reconstruct_indices_from_tree_mask(*([None] * 8), backend="rtl")
    with pytest.raises(NotImplementedError, match="no segment_packbits kernel"):
        sgl_kernel.segment_packbits(*([None] * 5), backend="rtl")
    with pytest.raises(ValueError, match="`backend` must be one of golden, rtl"):
        sgl_kernel.verify_tree_greedy(*([None] * 8), backend="card")


def test_a_tree_no_build_takes_is_refused():
    n = 1025  # the golden takes it; no K6 build does
    chain = np.append(np.arange(1, n), -1)[None]
    args = {"predicts": np.full(n, -1, np.int32), "accept_index": np.full((1, 4), -1, np.int32),
            "accept_token_num": np.full(1, -1, np.int32),
            "candidates": np.zeros((1, n), np.int64), "retrive_index": np.arange(n)[None],
            "retrive_next_token": chain, "retrive_next_sibling": np.full((1, n), -1),
            "target_predict": np.zeros((1, n), np.int64)}
    assert_refused(args, ValueError, "n = 1025 positions.*backend='golden'")
    sgl_kernel.verify_tree_greedy(**args)
    assert args["accept_index"].tolist() == [[0, 1, 2, 3]]


# --- the slow tier ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_build_at_a_large_vocabulary():
    """n = 60, V = 32,000 (an EAGLE-2 tree of a Llama-2 vocabulary): the n <= 64, S <= 8,
    V <= 32768 build."""
    rng = np.random.default_rng(13)
    call = sampling_call(rng, b=2, n=60, s=6, vocab=32000)
    got = run_both(arguments(call))
    assert k6_rtl.model(60, 6, 32000).params.max_vocab_size == 32768
    assert got["accept_index"][:, 0].tolist() == [0, 60]


@pytest.mark.slow
def test_torch_cpu_tensors(k6):
    torch = pytest.importorskip("torch")
    call = sampling_call(np.random.default_rng(14), b=3, n=10, s=5)
    args = arguments(call)
    want = copied(args)
    sgl_kernel.tree_speculative_sampling_target_only(**want)
    tensors = {k: torch.from_numpy(v.copy()) if isinstance(v, np.ndarray) else v
               for k, v in args.items()}
    sgl_kernel.tree_speculative_sampling_target_only(**tensors, backend="rtl")
    for name in OUTPUTS:
        assert tensors[name].numpy().tobytes() == want[name].tobytes()



def test_greedy_calls_take_a_loaded_build_of_any_vocabulary(k6, monkeypatch):
    """A greedy call reads no rows: a loaded build of its n and S serves at any V."""
    small = dict(k6_rtl.build_parameters(16, 8, 1))
    wide = tuple(sorted({**small, "max_vocab_size": 1 << 20}.items()))
    monkeypatch.setattr(k6_rtl, "_MODELS", {wide: k6})  # only a V <= 2**20 build loaded
    monkeypatch.setattr(k6_rtl, "K6Model", None)  # a new build would fail
    assert k6_rtl.model(9, 5, 1, any_vocab=True) is k6
    greedy = random_call(np.random.default_rng(15), name="greedy", mode="greedy", nodes=9,
                         max_steps=5)
    run_both(arguments(greedy))
    with pytest.raises(TypeError):
        k6_rtl.model(9, 5, 1)  # without any_vocab: the V <= 4096 build, not loaded


def test_rejmask_runs_on_the_hardware(k6):
    """``tree_speculative_sampling_target_only_rejmask`` on K6 (a zero scratch
    ``draft_probs``): the golden's outputs bit for bit on trees of fan-out <= 4, and the
    golden's refusal of a wider tree before the hardware."""
    from tests.test_golden_sampling import links
    from tests.test_host_sgl_sampling import golden_rejmask, rejmask_case

    for seed in range(3):
        case = rejmask_case(seed)
        expected = golden_rejmask(case, 0.9, 0.7)
        got = copied(case)
        sgl_kernel.tree_speculative_sampling_target_only_rejmask(**got, threshold_single=0.9,
                                                                 threshold_acc=0.7,
                                                                 backend="rtl")
        for name in ("predicts", "accept_index", "accept_token_num"):
            assert np.array_equal(got[name], expected[name]), (seed, name)
    wide = rejmask_case(3)
    wide["retrive_next_token"][1], wide["retrive_next_sibling"][1] = links(
        {0: [1, 2, 3, 4, 5], 5: [6]}, 9)
    before = copied(wide)
    with pytest.raises(ValueError, match="children"):
        sgl_kernel.tree_speculative_sampling_target_only_rejmask(**wide, backend="rtl")
    for name, value in before.items():
        assert np.array_equal(wide[name], value, equal_nan=True), name
