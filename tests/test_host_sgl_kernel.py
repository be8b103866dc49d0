"""host.sgl_kernel: sgl-kernel's speculative ops called as SGLang calls them (positional, both
keyword spellings, int32 and int64, an uninitialised or absent ``draft_probs``), compared
with direct calls of the goldens on the same inputs (floats by bit pattern)."""

import numpy as np
import pytest
from test_golden_reject_sample import make_case

import golden
from host import sgl_kernel
from host.arrays import host_array

SAMPLING_INPUTS = ("candidates", "retrive_index", "retrive_next_token", "retrive_next_sibling",
                   "uniform_samples", "uniform_samples_for_final_sampling", "target_probs")
TREE_OUTPUTS = ("predicts", "accept_index", "accept_token_num")


# --- cases -------------------------------------------------------------------------------------


def sampling_case(seed, b=3, n=6, s=4, vocab=8):
    """Inputs and pre-filled outputs as SGLang's EagleVerifyInput allocates them (``predicts``
    with its spare element), no ``draft_probs``."""
    case = make_case(np.random.default_rng(seed), b, n, s, vocab)
    del case["draft_probs"]
    case["predicts"] = np.full(b * n + 1, -1, np.int32)
    # the root's first child drafts the root row's likeliest token, so drafts get accepted
    first = case["retrive_next_token"][:, 0]
    case["candidates"][np.arange(b), first] = case["target_probs"][:, 0].argmax(axis=1)
    return case


def copy_case(case):
    return {k: v.copy() for k, v in case.items()}


def golden_sampling(case, threshold_single=1.0, threshold_acc=1.0):
    """The golden run on copies: ``(outputs, draft_probs)``."""
    ref = copy_case(case)
    draft = np.zeros_like(ref["target_probs"])
    golden.tree_speculative_sampling_target_only(
        *(ref[k] for k in TREE_OUTPUTS), *(ref[k] for k in SAMPLING_INPUTS), draft,
        threshold_single, threshold_acc, True)
    return ref, draft


def assert_bits(actual, expected):
    """Same dtype, shape and bit pattern."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert actual.tobytes() == expected.tobytes()


def assert_outputs(got, ref, names=TREE_OUTPUTS):
    for name in names:
        assert_bits(got[name], ref[name])


def respelled(case):
    """The case's tree arrays under SGLang's ``retrieve_*`` names."""
    return {k.replace("retrive_", "retrieve_"): v for k, v in case.items()}


# --- tree_speculative_sampling_target_only ------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_sampling_positional_equals_golden(seed):
    case = sampling_case(seed)
    ref, ref_draft = golden_sampling(case, 0.05, 0.5)
    default, _ = golden_sampling(case)
    draft = np.zeros_like(case["target_probs"])
    sgl_kernel.tree_speculative_sampling_target_only(
        *(case[k] for k in TREE_OUTPUTS), *(case[k] for k in SAMPLING_INPUTS), draft, 0.05, 0.5,
        True)
    assert_outputs(case, ref)
    assert_bits(draft, ref_draft)
    assert (ref["accept_token_num"] > 0).any()  # the case accepts drafts
    assert ref["accept_index"].tolist() != default["accept_index"].tolist()  # thresholds used


@pytest.mark.parametrize("spelling", ["retrive", "retrieve"])
def test_sampling_keywords_both_spellings(spelling):
    case = sampling_case(7)
    ref, ref_draft = golden_sampling(case)
    kwargs = case if spelling == "retrive" else respelled(case)
    draft = np.zeros_like(case["target_probs"])
    sgl_kernel.tree_speculative_sampling_target_only(**kwargs, draft_probs=draft,
                                                     threshold_single=1.0, threshold_acc=1.0,
                                                     deterministic=True)
    assert_outputs(case, ref)
    assert_bits(draft, ref_draft)


def test_sampling_int32_tree_arrays():
    case = sampling_case(3)
    ref, ref_draft = golden_sampling(case)
    narrow = {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in case.items()}
    draft = np.zeros_like(case["target_probs"])
    sgl_kernel.tree_speculative_sampling_target_only(**respelled(narrow), draft_probs=draft)
    assert_outputs(narrow, ref)
    assert_bits(draft, ref_draft)


def test_sampling_int64_outputs_are_written_back():
    case = sampling_case(5)
    ref, _ = golden_sampling(case)
    wide = copy_case(case)
    for name in TREE_OUTPUTS:
        wide[name] = wide[name].astype(np.int64)
    sgl_kernel.tree_speculative_sampling_target_only(**wide)
    for name in TREE_OUTPUTS:
        assert wide[name].dtype == np.int64
        assert wide[name].tolist() == ref[name].tolist()


def test_sampling_uninitialised_draft_probs():
    case = sampling_case(11)
    ref, ref_draft = golden_sampling(case)
    draft = np.full_like(case["target_probs"], np.nan)  # what torch.empty_like may hold
    sgl_kernel.tree_speculative_sampling_target_only(
        *(case[k] for k in TREE_OUTPUTS), *(case[k] for k in SAMPLING_INPUTS), draft)
    assert_outputs(case, ref)
    assert_bits(draft, ref_draft)
    assert (ref_draft != 0).any()  # rejected drafts were recorded


def test_sampling_variant_without_draft_probs():
    # sgl-kernel's newer op: thresholds right after target_probs
    case = sampling_case(2)
    ref, _ = golden_sampling(case, 0.2, 0.5)
    default, _ = golden_sampling(case)
    sgl_kernel.tree_speculative_sampling_target_only(
        *(case[k] for k in TREE_OUTPUTS), *(case[k] for k in SAMPLING_INPUTS), 0.2, 0.5, True)
    assert_outputs(case, ref)
    assert ref["accept_index"].tolist() != default["accept_index"].tolist()  # thresholds used


def test_sampling_flat_target_probs_and_one_spare_predict():
    case = sampling_case(4)
    ref, ref_draft = golden_sampling(case)
    b, n, vocab = case["target_probs"].shape
    flat = copy_case(case)
    flat["target_probs"] = flat["target_probs"].reshape(b * n, vocab)
    draft = np.zeros((b * n, vocab), np.float32)
    sgl_kernel.tree_speculative_sampling_target_only(**flat, draft_probs=draft)
    assert_outputs(flat, ref)
    assert_bits(draft, ref_draft.reshape(b * n, vocab))


def test_both_spellings_at_once_is_a_type_error():
    case = sampling_case(0)
    with pytest.raises(TypeError, match="both `retrive_index` and `retrieve_index`"):
        sgl_kernel.tree_speculative_sampling_target_only(
            **case, retrieve_index=case["retrive_index"])


def test_bad_input_writes_nothing():
    case = sampling_case(1)
    case["retrive_next_sibling"][0, 1] = 1  # a sibling cycle ...
    case["retrive_next_sibling"][0, 2] = 1  # ... the walk cannot end
    case["retrive_next_token"][0, 0] = 1
    case["target_probs"][0, 0] = 0.0  # every draft at the root rejected: the walk goes on
    outs = {name: case[name].astype(np.int64) for name in TREE_OUTPUTS}  # via working copies
    before = {name: v.copy() for name, v in outs.items()}
    draft = np.full_like(case["target_probs"], 3.0)
    with pytest.raises(ValueError, match="cycle"):
        sgl_kernel.tree_speculative_sampling_target_only(
            **{**case, **outs}, draft_probs=draft)
    for name, value in outs.items():
        assert value.tolist() == before[name].tolist()
    assert (draft == 3.0).all()


def test_refused_arrays_name_the_argument():
    case = sampling_case(1)
    with pytest.raises(ValueError, match="`target_probs` must be float32"):
        sgl_kernel.tree_speculative_sampling_target_only(
            **{**case, "target_probs": case["target_probs"].astype(np.float64)})
    with pytest.raises(ValueError, match="`candidates` must be a plain numpy array"):
        sgl_kernel.tree_speculative_sampling_target_only(
            **{**case, "candidates": np.ma.masked_array(case["candidates"])})
    with pytest.raises(ValueError, match="`candidates` must be a numpy array, a torch tensor"):
        sgl_kernel.tree_speculative_sampling_target_only(
            **{**case, "candidates": case["candidates"].tolist()})
    with pytest.raises(ValueError, match="`retrive_index` must be an integer"):
        sgl_kernel.tree_speculative_sampling_target_only(
            **{**case, "retrive_index": case["retrive_index"].astype(object)})


# --- verify_tree_greedy -------------------------------------------------------------------------


def greedy_case(seed, dtype=np.int64):
    case = sampling_case(seed, vocab=4)
    for name in SAMPLING_INPUTS[4:]:
        del case[name]
    rng = np.random.default_rng(seed + 100)
    case["target_predict"] = rng.integers(0, 4, case["candidates"].size).astype(dtype)
    b, n = case["candidates"].shape
    first = case["candidates"][np.arange(b), case["retrive_next_token"][:, 0]]
    case["target_predict"][np.arange(b) * n] = first  # the root's first child is accepted
    for name in ("candidates", "retrive_index", "retrive_next_token", "retrive_next_sibling"):
        case[name] = case[name].astype(dtype)
    return case


def golden_greedy(case):
    ref = {k: v.astype(np.int64) if v.dtype == np.int32 and k not in TREE_OUTPUTS else v.copy()
           for k, v in case.items()}
    golden.verify_tree_greedy(**ref)
    return ref


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("form", ["positional", "retrive", "retrieve"])
def test_greedy_equals_golden(dtype, form):
    case = greedy_case(21, dtype)
    ref = golden_greedy(case)
    if form == "positional":
        sgl_kernel.verify_tree_greedy(*case.values())
    else:
        sgl_kernel.verify_tree_greedy(**(case if form == "retrive" else respelled(case)))
    assert_outputs(case, ref)
    assert (ref["accept_token_num"] > 0).any()


# --- build_tree_kernel_efficient ----------------------------------------------------------------

# topk 2, depth 3: flat 0,1 under the root; 2..5 under flat 0,1; 6..9 under flat 3,4.
PARENT_LIST = [[-1, 0, 1, 3, 4], [-1, 0, 1, 3, 4]]
SELECTED = [[0, 1, 3, 7], [0, 1, 2, 3]]
SEQ_LENS = [3, 1]


def tree_buffers(mode, n=5, dtype=np.int64):
    """The outputs as SGLang allocates them (mask pre-filled, links -1)."""
    bs = len(SEQ_LENS)
    if mode == 2:
        mask = np.zeros(bs * n, np.uint8)
    else:
        size = n * sum(SEQ_LENS) + bs * n * n if mode == 0 else bs * n * n
        mask = np.ones(size, bool)
    return {"tree_mask": mask, "positions": np.empty(bs * n, dtype),
            "retrive_index": np.full((bs, n), -1, dtype),
            "retrive_next_token": np.full((bs, n), -1, dtype),
            "retrive_next_sibling": np.full((bs, n), -1, dtype)}


def tree_inputs(dtype):
    return {"parent_list": np.array(PARENT_LIST, dtype),
            "selected_index": np.array(SELECTED, dtype),
            "verified_seq_len": np.array(SEQ_LENS, dtype)}


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("form", ["positional", "retrive", "retrieve"])
def test_build_tree_equals_golden(mode, dtype, form):
    ref = tree_buffers(mode)
    golden.build_tree_kernel_efficient(*tree_inputs(np.int64).values(), *ref.values(), 2, 3, 5,
                                       mode)
    got = tree_buffers(mode, dtype=dtype)
    inputs = tree_inputs(dtype)
    if form == "positional":
        sgl_kernel.build_tree_kernel_efficient(*inputs.values(), *got.values(), 2, 3, 5,
                                               golden.TreeMaskMode(mode))
    else:
        outs = got if form == "retrive" else respelled(got)
        sgl_kernel.build_tree_kernel_efficient(**inputs, **outs, topk=2, depth=3,
                                               draft_token_num=5, tree_mask_mode=mode)
    for name, value in ref.items():
        assert got[name].dtype == (value.dtype if name == "tree_mask" else dtype)
        assert got[name].tolist() == value.tolist()
    # request 0: positions 1, 2 under the root, 3 under 1, 4 under 3 (hand-worked)
    assert got["retrive_next_token"][0].tolist() == [1, 3, -1, 4, -1]
    assert got["positions"][:5].tolist() == [3, 4, 4, 5, 6]


# --- reconstruct_indices_from_tree_mask ---------------------------------------------------------


def cuda_reconstruct(mask, seq_lens, n):
    """sgl-kernel's reconstructIndicesFromTreeMask loop, literally (one thread per position)."""
    bs = len(seq_lens)
    tree = mask.reshape(bs, n, n)
    pos, ridx = np.zeros(bs * n, np.int64), np.zeros((bs, n), np.int64)
    nxt, sib = np.full((bs, n), -1, np.int64), np.full((bs, n), -1, np.int64)
    for b in range(bs):
        for t in range(n):
            depth, parent = 0, -1
            for i in range(t - 1, -1, -1):
                if tree[b, t, i]:
                    depth += 1
                    parent = i if parent == -1 else parent
            ridx[b, t], pos[b * n + t] = b * n + t, depth + seq_lens[b]
            nxt[b, t] = next((i for i in range(t + 1, n) if tree[b, i, t]), -1)
            if parent != -1:
                sib[b, t] = next((i for i in range(t + 1, n) if tree[b, i, parent]
                                  and not tree[b, i, parent + 1:i].any()), -1)
    return {"positions": pos, "retrive_index": ridx, "retrive_next_token": nxt,
            "retrive_next_sibling": sib}


def random_masks(seed, bs, n):
    """``[bs*n*n]`` bool masks of random trees (parents at lower positions)."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((bs, n, n), bool)
    for b in range(bs):
        for i in range(n):
            parent = int(rng.integers(0, i)) if i else None
            rows[b, i] = rows[b, parent] if i else False
            rows[b, i, i] = True
    return rows.reshape(-1)


def garbage_outputs(bs, n, dtype):
    """Outputs holding values the op must overwrite."""
    return {"positions": np.full(bs * n, 99, dtype),
            "retrive_index": np.full((bs, n), 99, dtype),
            "retrive_next_token": np.full((bs, n), 99, dtype),
            "retrive_next_sibling": np.full((bs, n), 99, dtype)}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reconstruct_equals_the_cuda_loop(seed, dtype):
    bs, n = 3, 7
    mask = random_masks(seed, bs, n)
    seq_lens = np.array([5, 0, 12], dtype)
    got = garbage_outputs(bs, n, dtype)
    spelled = got if seed % 2 else respelled(got)
    sgl_kernel.reconstruct_indices_from_tree_mask(
        tree_mask=mask.astype(np.uint8) if seed == 2 else mask, verified_seq_len=seq_lens,
        **spelled, batch_size=bs, draft_token_num=n)
    for name, value in cuda_reconstruct(mask, seq_lens, n).items():
        assert got[name].dtype == dtype
        assert got[name].tolist() == value.tolist()


def test_reconstruct_inverts_build_tree():
    ref = tree_buffers(1)
    golden.build_tree_kernel_efficient(*tree_inputs(np.int64).values(), *ref.values(), 2, 3, 5,
                                       1)
    got = garbage_outputs(2, 5, np.int64)
    sgl_kernel.reconstruct_indices_from_tree_mask(ref["tree_mask"], np.array(SEQ_LENS),
                                                  *got.values(), 2, 5)
    for name, value in got.items():
        assert value.tolist() == ref[name].tolist()


def test_reconstruct_refuses_a_mask_that_is_no_tree():
    chain = np.tril(np.ones((5, 5), bool))
    gap = chain.copy()
    gap[4, 2] = False  # row 4 skips an ancestor: the CUDA kernel would miscount its depth
    rootless = chain.copy()
    rootless[3, :3] = False
    for tree, match in ((gap, "request 1, row 4 is not its tree's ancestor row"),
                        (rootless, "request 1, row 3 has no true column before its own")):
        got = garbage_outputs(2, 5, np.int64)
        with pytest.raises(ValueError, match=match):
            sgl_kernel.reconstruct_indices_from_tree_mask(
                np.concatenate([chain, tree]).reshape(-1), np.zeros(2, np.int64),
                *got.values(), 2, 5)
        assert all((value == 99).all() for value in got.values())


def test_outputs_too_narrow_for_the_values_are_refused_unwritten():
    got = tree_buffers(1, dtype=np.int8)
    got["positions"] = np.full(10, 5, np.int8)
    inputs = {**tree_inputs(np.int64), "verified_seq_len": np.array([3, 126])}
    with pytest.raises(ValueError, match="`positions` received values outside its dtype int8"):
        sgl_kernel.build_tree_kernel_efficient(*inputs.values(), *got.values(), 2, 3, 5, 1)
    assert got["positions"].tolist() == [5] * 10
    assert (got["retrive_next_token"] == -1).all() and got["tree_mask"].all()


def test_strided_outputs_are_written_through():
    ref = tree_buffers(1)
    golden.build_tree_kernel_efficient(*tree_inputs(np.int64).values(), *ref.values(), 2, 3, 5,
                                       1)
    wide = np.full((2, 10), -1, np.int64)
    got = {**tree_buffers(1), "retrive_next_token": wide[:, ::2]}  # a strided view
    sgl_kernel.build_tree_kernel_efficient(*tree_inputs(np.int64).values(), *got.values(), 2,
                                           3, 5, 1)
    assert wide[:, ::2].tolist() == ref["retrive_next_token"].tolist()
    assert (wide[:, 1::2] == -1).all()


# --- segment_packbits ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_segment_packbits(dtype):
    rng = np.random.default_rng(5)
    lengths = [9, 0, 3, 16]
    x = rng.random(sum(lengths)) < 0.5
    x[:9] = [1, 0, 0, 0, 0, 0, 0, 1, 1]  # little-endian: 0b10000001, then 0b1
    ins = np.concatenate([[0], np.cumsum(lengths)]).astype(dtype)
    outs = np.concatenate([[0], np.cumsum([(n + 7) // 8 for n in lengths])]).astype(dtype)
    y = np.full(int(outs[-1]) + 1, 0xAA, np.uint8)  # one spare byte, never written
    sgl_kernel.segment_packbits(x, ins, outs, y, len(lengths))
    assert y[:2].tolist() == [0x81, 0x01]
    for i in range(len(lengths)):
        segment = golden.pack_tree_mask(x[ins[i]:ins[i + 1]])
        assert y[outs[i]:outs[i + 1]].tolist() == segment.tolist()
    assert y[-1] == 0xAA


def test_segment_packbits_refuses_a_short_output_segment():
    y = np.zeros(2, np.uint8)
    with pytest.raises(ValueError, match="segment 0"):
        sgl_kernel.segment_packbits(np.ones(9, bool), np.array([0, 9], np.int32),
                                    np.array([0, 1], np.int32), y, 1)
    assert y.tolist() == [0, 0]


# --- backends and the adapter -------------------------------------------------------------------


def test_rtl_backend_says_what_is_missing():
    case = greedy_case(1)
    with pytest.raises(NotImplementedError, match="only from its own draft round"):
        sgl_kernel.build_tree_kernel_efficient(**tree_inputs(np.int64), **tree_buffers(1),
                                               topk=2, depth=3, draft_token_num=5,
                                               tree_mask_mode=1, backend="rtl")
    with pytest.raises(NotImplementedError, match="no segment_packbits kernel"):
        sgl_kernel.segment_packbits(np.ones(1, bool), np.array([0, 1]), np.array([0, 1]),
                                    np.zeros(1, np.uint8), 1, backend="rtl")
    with pytest.raises(ValueError, match="`backend` must be one of golden, rtl"):
        sgl_kernel.verify_tree_greedy(**case, backend="card")


class Copying:
    """An ``__array__`` object whose array is a new copy each time."""

    def __init__(self, array):
        self.array = array

    def __array__(self, dtype=None, copy=None):
        return self.array.copy()


def test_array_like_inputs_and_copying_outputs():
    case = greedy_case(2)
    ref = golden_greedy(case)
    as_objects = {**case, "candidates": Copying(case["candidates"])}
    sgl_kernel.verify_tree_greedy(**as_objects)
    assert_outputs(case, ref)
    with pytest.raises(ValueError, match="`predicts` is an output, but its __array__"):
        host_array("predicts", Copying(case["predicts"]), writable=True)


# --- torch (slow tier) --------------------------------------------------------------------------


@pytest.mark.slow
def test_torch_cpu_tensors_are_written_in_place():
    torch = pytest.importorskip("torch")
    case = sampling_case(9)
    ref, ref_draft = golden_sampling(case)
    tensors = {k: torch.from_numpy(v.copy()) for k, v in case.items()}
    tensors["candidates"] = tensors["candidates"].to(torch.int32)
    draft = torch.empty_like(tensors["target_probs"]).fill_(float("nan"))
    sgl_kernel.tree_speculative_sampling_target_only(**respelled(tensors), draft_probs=draft)
    for name in TREE_OUTPUTS:
        assert tensors[name].dtype == torch.int32
        assert_bits(tensors[name].numpy(), ref[name])
    assert_bits(draft.numpy(), ref_draft)


@pytest.mark.slow
def test_torch_build_tree_and_greedy():
    torch = pytest.importorskip("torch")
    ref = tree_buffers(2)
    golden.build_tree_kernel_efficient(*tree_inputs(np.int64).values(), *ref.values(), 2, 3, 5,
                                       2)
    got = {k: torch.from_numpy(v) for k, v in tree_buffers(2).items()}
    inputs = {k: torch.from_numpy(v) for k, v in tree_inputs(np.int32).items()}
    sgl_kernel.build_tree_kernel_efficient(**inputs, **respelled(got), topk=2, depth=3,
                                           draft_token_num=5, tree_mask_mode=2)
    for name, value in ref.items():
        assert got[name].numpy().tolist() == value.tolist()
    case = greedy_case(4)
    greedy_ref = golden_greedy(case)
    tensors = {k: torch.from_numpy(v) for k, v in case.items()}
    sgl_kernel.verify_tree_greedy(*tensors.values())
    for name in TREE_OUTPUTS:
        assert tensors[name].numpy().tolist() == greedy_ref[name].tolist()


@pytest.mark.slow
def test_torch_reconstruct_and_segment_packbits():
    torch = pytest.importorskip("torch")
    mask = random_masks(4, 2, 6)
    seq_lens = np.array([2, 9])
    got = {k: torch.from_numpy(v) for k, v in garbage_outputs(2, 6, np.int64).items()}
    sgl_kernel.reconstruct_indices_from_tree_mask(
        torch.from_numpy(mask), torch.from_numpy(seq_lens).to(torch.int32), **respelled(got),
        batch_size=2, draft_token_num=6)
    for name, value in cuda_reconstruct(mask, seq_lens, 6).items():
        assert got[name].numpy().tolist() == value.tolist()
    y = torch.zeros(4, dtype=torch.uint8)
    sgl_kernel.segment_packbits(torch.from_numpy(mask[:18]), torch.tensor([0, 9, 18],
                                dtype=torch.int32), torch.tensor([0, 2, 4], dtype=torch.int32),
                                y, 2)
    expected = [golden.pack_tree_mask(mask[i:i + 9]) for i in (0, 9)]
    assert y.numpy().tolist() == np.concatenate(expected).tolist()


def test_int64_outputs_keep_what_int32_cannot_hold():
    """An int64 output pre-filled with values past int32 (``1 << 40``): the elements the op
    writes get the golden's values, the others keep theirs (not their int32 truncation)."""
    case = greedy_case(5)
    ref = golden_greedy(case)
    fill = 1 << 40
    outputs = {name: np.full(case[name].shape, fill, np.int64) for name in TREE_OUTPUTS}
    sgl_kernel.verify_tree_greedy(**{**case, **outputs})
    for name in TREE_OUTPUTS:
        written = ref[name] != case[name]  # what the golden wrote over the case's fill
        assert np.array_equal(outputs[name][written], ref[name][written]), name
        assert (outputs[name][~written] == fill).all(), name
