"""host.sgl_sampling: sgl-kernel's sampling ops and EAGLE helpers called as SGLang calls them
(positional, keywords, both ``retrive_``/``retrieve_`` spellings, int32 and int64, scalar or
per-row parameters, ``[bs, 1]`` columns, the older ``uniform_samples`` form), compared with
direct calls of the goldens on the same inputs (floats by bit pattern)."""

import numpy as np
import pytest

import golden
from host import sgl_kernel, sgl_sampling
from tests.test_golden_sampling import ROW, TREE_INPUTS, TREE_OUTPUTS, links, random_rows, tree_case

F32 = np.float32


def bits(array):
    array = np.asarray(array)
    assert array.dtype == F32
    return array.view(np.uint32).tolist()


def rows(seed=0, count=5, vocab=16):
    probs = random_rows(np.random.default_rng(seed), count, vocab, "ties")
    probs[-1] = random_rows(np.random.default_rng(seed + 1), 1, vocab, "smooth")
    return probs


def golden_renorm(op, probs, arr, val):
    out = np.empty_like(probs)
    op(probs, out, arr, val)
    return out


# --- top_k_renorm_prob(s) / top_p_renorm_prob(s) ------------------------------------------------


@pytest.mark.parametrize("name", ["top_k_renorm_prob", "top_k_renorm_probs"])
@pytest.mark.parametrize("form", ["positional", "keyword"])
@pytest.mark.parametrize("top_k", ["scalar", "int32", "int64", "column"])
def test_top_k_renorm_equals_golden(name, form, top_k):
    probs = rows(1)
    ks = np.array([1, 2, 3, 16, 1 << 30])
    arg = {"scalar": 3, "int32": ks.astype(np.int32), "int64": ks,
           "column": ks.reshape(-1, 1)}[top_k]
    op = getattr(sgl_sampling, name)
    before = probs.copy()
    got = op(probs, arg) if form == "positional" else op(probs=probs, top_k=arg)
    ref = golden_renorm(golden.top_k_renorm_probs, probs, None if top_k == "scalar"
                        else ks.astype(np.int32), 3)
    assert isinstance(got, np.ndarray) and bits(got) == bits(ref)
    assert bits(probs) == bits(before)  # a new array; the input is not touched


@pytest.mark.parametrize("name", ["top_p_renorm_prob", "top_p_renorm_probs"])
@pytest.mark.parametrize("form", ["positional", "keyword"])
@pytest.mark.parametrize("top_p", ["scalar", "float32", "column"])
def test_top_p_renorm_equals_golden(name, form, top_p):
    probs = rows(2)
    ps = np.array([0.1, 0.5, 0.9, 1.0, 1e-30], F32)
    arg = {"scalar": 0.7, "float32": ps, "column": ps.reshape(-1, 1)}[top_p]
    op = getattr(sgl_sampling, name)
    got = op(probs, arg) if form == "positional" else op(probs=probs, top_p=arg)
    ref = golden_renorm(golden.top_p_renorm_probs, probs, None if top_p == "scalar" else ps,
                        0.7)
    assert bits(got) == bits(ref)


def test_sglang_verify_chain_top_k_all_leaves_probs_bit_for_bit():
    # EagleVerifyInput: top_k_renorm_prob(probs, repeat_interleave(top_ks, n)) with SGLang's
    # TOP_K_ALL = 1 << 30 for requests without top-k, then top_p_renorm_prob if any p < 1
    probs = rows(3)
    top_ks = np.repeat(np.array([1 << 30, 2], np.int32), [4, 1])
    top_ps = np.ones(5, F32)
    out = sgl_sampling.top_p_renorm_prob(sgl_sampling.top_k_renorm_prob(probs, top_ks), top_ps)
    assert bits(out[:4]) == bits(probs[:4])
    assert np.count_nonzero(out[4]) == 2 and abs(float(out[4].sum()) - 1) < 1e-6


@pytest.mark.parametrize(("call", "match"), [
    (lambda p: sgl_sampling.top_k_renorm_probs(p.astype(np.float64), 2),
     "`probs` must be float32"),
    (lambda p: sgl_sampling.top_k_renorm_probs(p[None], 2), r"`probs` must be float32 \[batch"),
    (lambda p: sgl_sampling.top_k_renorm_probs(p, np.array([1, 2])),
     "`top_k` must hold one value per row"),
    (lambda p: sgl_sampling.top_k_renorm_probs(p, np.full(5, 1 << 40)),
     "`top_k` holds values outside int32"),
    (lambda p: sgl_sampling.top_k_renorm_probs(p, 2.0), "`top_k` must be an integer or"),
    (lambda p: sgl_sampling.top_k_renorm_probs(p, True), "`top_k` must be an integer or"),
    (lambda p: sgl_sampling.top_p_renorm_probs(p, np.full(5, 0.5)), "`top_p` must be float32"),
    (lambda p: sgl_sampling.top_p_renorm_probs(p, 1.5), "`top_p` must be between 0.0 and 1.0"),
    (lambda p: sgl_sampling.top_p_renorm_probs(p, float("nan")), "`top_p` must be a finite"),
    (lambda p: sgl_sampling.top_p_renorm_probs(p, np.full(5, -0.5, F32)),
     "`top_p` values must be between 0 and 1"),
    (lambda p: sgl_sampling.top_p_renorm_probs(p.tolist(), 0.5),
     "`probs` must be a numpy array, a torch tensor"),
])
def test_renorm_refusals_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call(rows(4))


# --- top_k_top_p_sampling_from_probs -----------------------------------------------------------


def golden_samples(probs, coins, k_arr, k, p_arr, p, order, indices=None):
    batch = probs.shape[0] if indices is None else len(indices)
    out = np.full(batch, -1, np.int32)
    golden.top_k_top_p_sampling_from_probs(probs, out, indices, k_arr, k, p_arr, p, True,
                                           np.asarray(coins, F32), filter_apply_order=order)
    return out


@pytest.mark.parametrize("order", ["top_k_first", "joint"])
@pytest.mark.parametrize("form", ["positional", "keyword"])
def test_sampling_equals_golden(order, form):
    probs = rows(5)
    coins = np.random.default_rng(5).random(5, dtype=F32)
    ks, ps = np.array([1, 2, 5, 16, 0], np.int64), np.array([0.3, 0.5, 1.0, 0.9, 0.2], F32)
    if form == "positional":
        got = sgl_sampling.top_k_top_p_sampling_from_probs(probs, ks, ps, None, order, True,
                                                           None, False, uniform_samples=coins)
    else:
        got = sgl_sampling.top_k_top_p_sampling_from_probs(
            probs=probs, top_k=ks.reshape(-1, 1), top_p=ps[:, None], filter_apply_order=order,
            uniform_samples=coins[:, None], check_nan=True)
    ref = golden_samples(probs, coins, ks.astype(np.int32), 0, ps, 0.0, order)
    assert got.dtype == np.int32 and got.tolist() == ref.tolist()


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_sampling_indices(dtype):
    probs = rows(6, count=3)
    indices = np.array([2, 0, 2, 1], dtype)
    coins = np.array([0.1, 0.5, 0.9, 0.99], F32)
    got = sgl_sampling.top_k_top_p_sampling_from_probs(probs, 2, 0.8, indices,
                                                       uniform_samples=coins)
    ref = golden_samples(probs, coins, None, 2, None, 0.8, "top_k_first",
                         indices.astype(np.int64))
    assert got.tolist() == ref.tolist() and got[0] != got[2]


def test_sampling_numpy_generator_draws_one_float32_coin_per_row():
    probs = rows(7)
    got = sgl_sampling.top_k_top_p_sampling_from_probs(probs, 3, 0.9,
                                                       generator=np.random.default_rng(42))
    again = sgl_sampling.top_k_top_p_sampling_from_probs(probs, 3, 0.9,
                                                         generator=np.random.default_rng(42))
    coins = np.random.default_rng(42).random(5, dtype=F32)
    ref = golden_samples(probs, coins, None, 3, None, 0.9, "top_k_first")
    assert got.tolist() == again.tolist() == ref.tolist()


def test_sampling_without_coins_or_generator_samples_kept_tokens():
    probs = np.repeat(ROW[None], 50, axis=0)
    got = sgl_sampling.top_k_top_p_sampling_from_probs(probs, 2, 1.0)
    assert set(got.tolist()) <= {1, 2}


@pytest.mark.parametrize("coins_shape", ["rounds", "flat"])
def test_sampling_older_form_returns_samples_and_success(coins_shape):
    # sgl-kernel's older op: (probs, uniform_samples [rounds, batch], top_k, top_p, order, ...)
    probs = rows(8)
    coins = np.random.default_rng(8).random((32, 5), dtype=F32)
    arg = coins if coins_shape == "rounds" else coins[0].copy()
    ks, ps = np.full(5, 3, np.int32), np.full(5, 0.8, F32)
    samples, success = sgl_sampling.top_k_top_p_sampling_from_probs(probs, arg, ks, ps,
                                                                    filter_apply_order="joint")
    ref = golden_samples(probs, coins[0], ks, 0, ps, 0.0, "joint")
    assert samples.tolist() == ref.tolist()
    assert success.dtype == np.bool_ and success.tolist() == [True] * 5
    samples, _ = sgl_sampling.top_k_top_p_sampling_from_probs(probs, arg, ks, ps, "joint", True,
                                                              False)
    assert samples.tolist() == ref.tolist()


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"uniform_samples": np.zeros(5, F32), "generator": np.random.default_rng(0)}, ValueError,
     "give `uniform_samples` or `generator`, not both"),
    ({"generator": 7}, ValueError, "`generator` must be None, a numpy.random.Generator"),
    ({"uniform_samples": np.zeros(4, F32)}, ValueError, r"`uniform_samples` must be float32 \[5"),
    ({"uniform_samples": np.zeros(5)}, ValueError, "`uniform_samples` must be float32"),
    ({"indices": np.zeros((1, 5), np.int32)}, ValueError, "`indices` must be 1-D"),
    ({"check_nan": "yes"}, ValueError, "`check_nan` must be a bool"),
    ({"filter_apply_order": "top_p_first"}, ValueError, "`filter_apply_order` must be one of"),
])
def test_sampling_refusals(kwargs, error, match):
    with pytest.raises(error, match=match):
        sgl_sampling.top_k_top_p_sampling_from_probs(rows(9), 2, 0.5, **kwargs)


def test_sampling_older_form_argument_errors():
    probs, coins = rows(9), np.zeros(5, F32)
    with pytest.raises(TypeError, match="multiple values for `top_p`"):
        sgl_sampling.top_k_top_p_sampling_from_probs(probs, coins, 2, 0.5, top_p=0.5)
    with pytest.raises(TypeError, match="at most 7 positional arguments"):
        sgl_sampling.top_k_top_p_sampling_from_probs(probs, coins, 2, 0.5, "joint", True,
                                                     False, None)


# --- tree_speculative_sampling_target_only_rejmask ---------------------------------------------


def rejmask_case(seed, fan_out=4):
    return tree_case(np.random.default_rng(seed), 3, 9, 5, 12, fan_out)


def golden_rejmask(case, *thresholds):
    ref = {k: v.copy() for k, v in case.items()}
    golden.tree_speculative_sampling_target_only_rejmask(
        *(ref[k] for k in TREE_OUTPUTS), *(ref[k] for k in TREE_INPUTS), *thresholds)
    return ref


def respelled(case):
    return {k.replace("retrive_", "retrieve_"): v for k, v in case.items()}


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("form", ["positional", "retrive", "retrieve"])
def test_rejmask_equals_golden(dtype, form):
    case = rejmask_case(1)
    ref = golden_rejmask(case, 0.9, 0.7)
    got = {k: v.astype(dtype) if v.dtype.kind == "i" else v.copy() for k, v in case.items()}
    if form == "positional":
        sgl_sampling.tree_speculative_sampling_target_only_rejmask(
            *(got[k] for k in TREE_OUTPUTS), *(got[k] for k in TREE_INPUTS), 0.9, 0.7, True)
    else:
        sgl_sampling.tree_speculative_sampling_target_only_rejmask(
            **(got if form == "retrive" else respelled(got)), threshold_single=0.9,
            threshold_acc=0.7, deterministic=True)
    for name in TREE_OUTPUTS:
        assert got[name].dtype == dtype and got[name].tolist() == ref[name].tolist()
    assert (ref["accept_token_num"] > 0).any()


@pytest.mark.parametrize("fan_out", [1, 2, 4])
def test_rejmask_equals_the_draft_probs_drop_in(fan_out):
    case = rejmask_case(fan_out + 10, fan_out)
    mask, tree = ({k: v.copy() for k, v in case.items()} for _ in range(2))
    sgl_sampling.tree_speculative_sampling_target_only_rejmask(**mask)
    sgl_kernel.tree_speculative_sampling_target_only(**tree)  # draft_probs left out
    for name in TREE_OUTPUTS:
        assert mask[name].tolist() == tree[name].tolist()


def test_rejmask_int64_outputs_keep_what_it_does_not_write():
    case = rejmask_case(2)
    ref = golden_rejmask(case)
    garbage = 1 << 40  # what an int64 torch.empty may hold; no int32 holds it
    outs = {name: np.full(case[name].shape, garbage, np.int64) for name in TREE_OUTPUTS}
    sgl_sampling.tree_speculative_sampling_target_only_rejmask(**{**case, **outs})
    written = ref["predicts"] != -1
    assert outs["predicts"][written].tolist() == ref["predicts"][written].tolist()
    assert (outs["predicts"][~written] == garbage).all()
    assert outs["accept_token_num"].tolist() == ref["accept_token_num"].tolist()


def test_rejmask_refusals_write_nothing():
    case = rejmask_case(3)
    nxt, sib = links({0: [1, 2, 3, 4, 5], 1: [6, 7, 8]}, 9)
    case["retrive_next_token"][2], case["retrive_next_sibling"][2] = nxt, sib
    outs = {name: case[name].astype(np.int64) for name in TREE_OUTPUTS}
    before = {name: v.copy() for name, v in outs.items()}
    with pytest.raises(ValueError, match="request 2, position 0 has 5 children"):
        sgl_sampling.tree_speculative_sampling_target_only_rejmask(**{**case, **outs})
    with pytest.raises(TypeError, match="both `retrive_index` and `retrieve_index`"):
        sgl_sampling.tree_speculative_sampling_target_only_rejmask(
            **case, retrieve_index=case["retrive_index"])
    with pytest.raises(ValueError, match="`target_probs` must be float32"):
        sgl_sampling.tree_speculative_sampling_target_only_rejmask(
            **{**rejmask_case(4), **outs, "target_probs": case["target_probs"].astype(float)})
    for name, value in outs.items():
        assert value.tolist() == before[name].tolist()


# --- process_accept_index_evict_mask_fused -----------------------------------------------------


def fused_buffers(dtype, capacity=6, fill=-9):
    return {"accept_length": np.full(2, fill, dtype), "verified_id": np.full(capacity, fill, dtype),
            "evict_mask": np.zeros(6, bool),
            "filtered_accept_index": np.full(capacity, fill, dtype),
            "output_size": np.full(1, fill, dtype)}


ACCEPT = [[0, 1, -1], [3, 4, 5]]
PREDICT = [100, 101, 102, 200, 201, 202]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("form", ["positional", "keyword"])
def test_fused_equals_golden(dtype, form):
    index, tokens = np.array(ACCEPT, dtype), np.array(PREDICT, dtype)
    got = fused_buffers(dtype)
    if form == "positional":
        sgl_sampling.process_accept_index_evict_mask_fused(index, tokens, *got.values())
    else:
        sgl_sampling.process_accept_index_evict_mask_fused(accept_index=index, predict=tokens,
                                                           **got)
    ref = fused_buffers(np.int32)
    golden.process_accept_index_evict_mask_fused(np.array(ACCEPT, np.int32),
                                                 np.array(PREDICT, np.int32), *ref.values())
    for name, value in ref.items():
        assert got[name].dtype == (bool if name == "evict_mask" else dtype)
        assert got[name].tolist() == value.tolist()
    assert got["verified_id"].tolist() == [100, 101, 200, 201, 202, -9]  # hand-worked


def test_fused_keeps_the_tail_of_int64_buffers():
    got = fused_buffers(np.int64, capacity=8, fill=1 << 40)
    sgl_sampling.process_accept_index_evict_mask_fused(np.array(ACCEPT), np.array(PREDICT),
                                                       *got.values())
    assert got["filtered_accept_index"].tolist() == [0, 1, 3, 4, 5] + [1 << 40] * 3
    assert got["output_size"].tolist() == [5] and got["accept_length"].tolist() == [1, 2]


def test_fused_refusals_write_nothing():
    got = fused_buffers(np.int64, capacity=4)
    before = {k: v.copy() for k, v in got.items()}
    with pytest.raises(ValueError, match="`verified_id` must hold the 5 accepted entries"):
        sgl_sampling.process_accept_index_evict_mask_fused(np.array(ACCEPT), np.array(PREDICT),
                                                           *got.values())
    with pytest.raises(ValueError, match="`predict` holds values outside int32"):
        sgl_sampling.process_accept_index_evict_mask_fused(
            np.array(ACCEPT), np.array(PREDICT) << 40, *fused_buffers(np.int64).values())
    with pytest.raises(ValueError, match="`evict_mask` must be bool"):
        sgl_sampling.process_accept_index_evict_mask_fused(
            np.array(ACCEPT), np.array(PREDICT),
            **{**fused_buffers(np.int64), "evict_mask": np.zeros(6, np.uint8)})
    for name, value in got.items():
        assert value.tolist() == before[name].tolist()


# --- backends ------------------------------------------------------------------------------------


CALLS = {
    "top_k_renorm_probs": lambda **kw: sgl_sampling.top_k_renorm_prob(rows(), 2, **kw),
    "top_p_renorm_probs": lambda **kw: sgl_sampling.top_p_renorm_prob(rows(), 0.5, **kw),
    "top_k_top_p_sampling_from_probs":
        lambda **kw: sgl_sampling.top_k_top_p_sampling_from_probs(rows(), 2, 0.5, **kw),
    "tree_speculative_sampling_target_only_rejmask":
        lambda **kw: sgl_sampling.tree_speculative_sampling_target_only_rejmask(
            **rejmask_case(0), **kw),
    "process_accept_index_evict_mask_fused":
        lambda **kw: sgl_sampling.process_accept_index_evict_mask_fused(
            np.array(ACCEPT), np.array(PREDICT), *fused_buffers(np.int32).values(), **kw),
}


@pytest.mark.parametrize("name", sorted(set(CALLS) - {
    "tree_speculative_sampling_target_only_rejmask"}))  # (rtl: tests/test_host_sgl_rtl.py)
def test_backends(name):
    CALLS[name](backend="golden")
    with pytest.raises(NotImplementedError, match=f"{name}\\(backend='rtl'\\) is not "
                                                  "implemented yet: .* use backend='golden'"):
        CALLS[name](backend="rtl")
    assert sgl_sampling.RTL_MISSING[name]
    with pytest.raises(ValueError, match="`backend` must be one of golden, rtl"):
        CALLS[name](backend="card")


# --- torch (slow tier) ---------------------------------------------------------------------------


@pytest.mark.slow
def test_torch_renorm_and_sampling_return_tensors():
    torch = pytest.importorskip("torch")
    probs = rows(11)
    tensor = torch.from_numpy(probs.copy())
    ks = torch.tensor([1, 2, 3, 16, 1 << 30], dtype=torch.int32)
    got = sgl_sampling.top_k_renorm_prob(tensor, ks)
    ref = golden_renorm(golden.top_k_renorm_probs, probs, ks.numpy(), 0)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    assert bits(got.numpy()) == bits(ref)
    got = sgl_sampling.top_p_renorm_prob(tensor, torch.full((5,), 0.5))
    assert bits(got.numpy()) == bits(golden_renorm(golden.top_p_renorm_probs, probs, None, 0.5))
    generator = torch.Generator().manual_seed(3)
    samples = sgl_sampling.top_k_top_p_sampling_from_probs(tensor, ks.long(), 0.9,
                                                           generator=generator)
    coins = torch.rand(5, generator=torch.Generator().manual_seed(3)).numpy()
    assert isinstance(samples, torch.Tensor) and samples.dtype == torch.int32
    assert samples.tolist() == golden_samples(probs, coins, ks.numpy(), 0, None, 0.9,
                                              "top_k_first").tolist()
    samples, success = sgl_sampling.top_k_top_p_sampling_from_probs(
        tensor, torch.from_numpy(coins), ks, torch.full((5,), 0.9), "joint")
    assert success.dtype == torch.bool and bool(success.all())
    assert samples.tolist() == golden_samples(probs, coins, ks.numpy(), 0, None, 0.9,
                                              "joint").tolist()


@pytest.mark.slow
def test_torch_in_place_helpers():
    torch = pytest.importorskip("torch")
    case = rejmask_case(5)
    ref = golden_rejmask(case)
    tensors = {k: torch.from_numpy(v.copy()) for k, v in case.items()}
    tensors["candidates"] = tensors["candidates"].to(torch.int32)
    sgl_sampling.tree_speculative_sampling_target_only_rejmask(**respelled(tensors))
    for name in TREE_OUTPUTS:
        assert tensors[name].dtype == torch.int32
        assert tensors[name].tolist() == ref[name].tolist()
    got = {k: torch.from_numpy(v) for k, v in fused_buffers(np.int32).items()}
    sgl_sampling.process_accept_index_evict_mask_fused(
        torch.tensor(ACCEPT, dtype=torch.int32), torch.tensor(PREDICT, dtype=torch.int32),
        *got.values())
    assert got["verified_id"].tolist()[:5] == [100, 101, 200, 201, 202]
    assert got["evict_mask"].tolist() == [False, False, True, False, False, False]
