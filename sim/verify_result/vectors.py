"""Calls of the K7 kernel (``hw.kernels.verify_result.VerifyResult``), their golden results
and the translation to and from the kernel's streams.

The K6 outputs a call starts from are produced by the golden chain: trees grown by the golden
draft round (K1..K3, ``sim.tree_mask.vectors.grown_call``) or written by hand, the K4 golden
(``fused_tree_mask_operator``) for the verify trees, and the K6 golden greedy verify
(``verify_tree_greedy``) with a target that follows a draft child with a chosen probability.
``expected`` runs ``golden.update_verify_result``; ``decode`` applies the kernel's ``commit``
writes to copies of the initial ``verified_id`` and ``req_to_token`` buffers and reads the
``result`` beats, so ``check`` compares whole tensors (sentinels included).
``python -m sim.verify_result.vectors`` rewrites the example case file
``sim/verify_result/example_case.txt`` (``make sim KERNEL=verify_result CASE=<file>``).
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from golden.cases import read_case, write_case
from golden.reject_sample import verify_tree_greedy
from golden.verify_result import update_verify_result
from sim.tree_mask.vectors import expected as tree_expected
from sim.tree_mask.vectors import grown_call, manual_call

__all__ = ["Call", "OUTPUT_NAMES", "SENTINEL", "expected", "command", "node_fields",
           "request_fields", "decode", "check", "greedy_call", "random_call", "directed_calls",
           "perf_call", "verify_step_call", "call_from_case", "example_case",
           "write_example_case", "write_case_file", "EXAMPLE_CASE"]

I32, I64 = np.int32, np.int64
SENTINEL = -777
# The golden's in/out and output tensors, in its ABI order.
OUTPUT_NAMES = ("seq_lens", "req_to_token", "accept_length", "verified_id", "next_root",
                "evict_mask", "finished")


@dataclass
class Call:
    """One ``update_verify_result`` call (K6 outputs, request state, scalars, initial
    buffers). ``want`` (optional) is a property of the golden result the vector was made for,
    e.g. ``{"finished": [...]}``, checked by ``expected``."""

    name: str
    accept_index: np.ndarray  # i32 [B, S]
    accept_token_num: np.ndarray  # i32 [B]
    predicts: np.ndarray  # i32 [B*n]
    out_cache_loc: np.ndarray  # i64 [B*n]
    req_pool_indices: np.ndarray  # i64 [B]
    max_seq_lens: np.ndarray  # i64 [B]
    n: int
    s: int
    max_context_len: int
    eos_token_id: int
    seq_lens: np.ndarray  # i64 [B], before the call
    req_to_token: np.ndarray  # i64 [P, C], before the call
    want: dict = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens)


def initial_outputs(call: Call) -> dict:
    """The buffers the golden writes, as the caller hands them over (sentinels)."""
    b = call.batch_size
    return {
        "seq_lens": call.seq_lens.copy(),
        "req_to_token": call.req_to_token.copy(),
        "accept_length": np.full(b, SENTINEL, I32),
        "verified_id": np.full(b * call.s, SENTINEL, I32),
        "next_root": np.full(b, SENTINEL, I64),
        "evict_mask": np.zeros(b * call.n, np.bool_),
        "finished": np.zeros(b, np.bool_),
    }


def expected(call: Call) -> dict:
    """Golden outputs of ``call`` (``golden.update_verify_result``)."""
    out = initial_outputs(call)
    update_verify_result(call.accept_index, call.accept_token_num, call.predicts,
                         call.out_cache_loc, call.req_pool_indices, call.max_seq_lens,
                         call.batch_size, call.n, call.s, call.max_context_len,
                         call.eos_token_id, *out.values())
    for name, value in call.want.items():
        assert np.array_equal(out[name], value), (
            f"{call.name}: the vector was made for golden {name} = {list(value)}, "
            f"the golden gives {out[name].tolist()}")
    return out


# --- kernel streams -------------------------------------------------------------------------


def command(call: Call) -> dict:
    return {"batch_size": call.batch_size, "num_draft_tokens": call.n,
            "num_speculative_tokens": call.s, "eos_token_id": call.eos_token_id}


def node_fields(call: Call) -> dict:
    position = np.tile(np.arange(call.n), call.batch_size)
    return {"predict": call.predicts[:call.batch_size * call.n].astype(I64),
            "cache_loc": call.out_cache_loc, "first": position == 0,
            "last": position == call.n - 1}


def request_fields(call: Call, flat_bits: int, max_s: int) -> dict:
    mask = (1 << flat_bits) - 1
    rows = []
    for b in range(call.batch_size):
        word = 0
        for j in range(call.s):
            word |= (int(call.accept_index[b, j]) & mask) << (j * flat_bits)
        rows.append(word)
    return {"accept_token_num": call.accept_token_num.astype(I64),
            "accept_index": np.array(rows, dtype=object),
            "req_pool_index": call.req_pool_indices, "seq_len": call.seq_lens,
            "max_seq_len": call.max_seq_lens}


def decode(call: Call, commit: dict, result: dict) -> dict:
    """The golden's tensors rebuilt from the kernel's ``commit`` writes (applied to copies of
    the initial buffers) and ``result`` beats; checks markers and ``verified_offset``."""
    b_count, n = call.batch_size, call.n
    out = initial_outputs(call)
    assert len(result["accept_length"]) == b_count, \
        f"{call.name}: {len(result['accept_length'])} result beats, expected {b_count}"
    lengths = result["accept_length"].astype(I64)
    assert len(commit["verified_id"]) == int(lengths.sum()), (
        f"{call.name}: {len(commit['verified_id'])} commit beats, the result beats "
        f"announce {int(lengths.sum())}")
    starts = (np.cumsum(lengths) - lengths).astype(I64)  # exclusive prefix sum
    assert np.array_equal(result["verified_offset"].astype(I64), starts), \
        f"{call.name}: verified_offset {result['verified_offset'].tolist()}"
    for b in range(b_count):
        span = slice(int(starts[b]), int(starts[b] + lengths[b]))
        assert commit["first"][span].tolist() == [1] + [0] * (int(lengths[b]) - 1), \
            f"{call.name}: request {b}: commit `first` markers"
        assert commit["last"][span].tolist() == [0] * (int(lengths[b]) - 1) + [1], \
            f"{call.name}: request {b}: commit `last` markers"
    for index, token in zip(commit["verified_index"], commit["verified_id"], strict=True):
        out["verified_id"][int(index)] = token
    for row, column, loc in zip(commit["req_row"], commit["req_column"], commit["kv_loc"],
                                strict=True):
        out["req_to_token"][int(row), int(column)] = int(loc)
    out["accept_length"][:] = lengths
    out["next_root"][:] = result["next_root"]
    out["finished"][:] = result["finished"].astype(np.bool_)
    out["seq_lens"][:] = result["seq_len"]
    for b in range(b_count):
        bits = int(result["evict"][b])
        out["evict_mask"][b * n:(b + 1) * n] = [(bits >> i) & 1 for i in range(n)]
        assert bits >> n == 0, f"{call.name}: request {b}: evict bits set past n = {n}"
    return out


def check(call: Call, commit: dict, result: dict) -> None:
    """Compare the kernel's outputs for ``call`` with the golden (whole tensors)."""
    got, want = decode(call, commit, result), expected(call)
    for name in OUTPUT_NAMES:
        if not np.array_equal(got[name], want[name]):
            g, w = np.asarray(got[name]).reshape(-1), np.asarray(want[name]).reshape(-1)
            diff = np.flatnonzero(g != w)
            raise AssertionError(
                f"{call.name}: `{name}` differs from the golden at {diff.size} of {w.size} "
                f"elements, first at flat index {diff[:6].tolist()}: got "
                f"{g[diff[:6]].tolist()}, expected {w[diff[:6]].tolist()}")


# --- vectors --------------------------------------------------------------------------------


def _children(tree, b, node):
    kids, c = [], int(tree["retrive_next_token"][b, node])
    while c != -1:
        kids.append(c)
        c = int(tree["retrive_next_sibling"][b, c])
    return kids


def greedy_call(name, tree_call, *, s, rng, follow=0.7, eos="random", context=None,
                limit="random", want=None):
    """K7 inputs from a K4 tree call: the golden K4 builds the verify trees (``n`` = the
    call's verify-set size), a target that picks a draft child's token with probability
    ``follow`` (else a token no child has) drives the golden greedy K6, which writes
    ``accept_index``, ``accept_token_num`` and ``predicts``.

    ``eos``: "random" (an accepted token a third of the time, else -1), "none" (-1), or an
    int. ``limit``: "random" (a third of the requests get a length limit within reach),
    "none" (``max_seq_lens = max_context_len``), or an array of ``max_seq_lens - seq_lens``.
    """
    maxv = max(1, tree_call.verify_num)
    n = tree_call.n(maxv)
    tree = tree_expected(tree_call, maxv)
    b_count = tree_call.batch_size
    candidates = tree["draft_tokens"].reshape(b_count, n)
    target = np.zeros((b_count, n), I64)
    for b in range(b_count):
        for i in range(n):
            kids = _children(tree, b, i)
            if kids and rng.random() < follow:
                target[b, i] = candidates[b, kids[int(rng.integers(len(kids)))]]
            else:
                target[b, i] = 40000 + int(rng.integers(0, 1000))  # no draft token
    predicts = np.full(b_count * n, -1, I32)
    accept_index = np.full((b_count, s), -1, I32)
    accept_num = np.zeros(b_count, I32)
    verify_tree_greedy(predicts, accept_index, accept_num, candidates, tree["retrive_index"],
                       tree["retrive_next_token"], tree["retrive_next_sibling"], target)

    context = context or int(rng.integers(s + 8, 4096))
    seq_lens = rng.integers(0, context - s - 1, b_count).astype(I64)
    if isinstance(limit, str) and limit == "none":
        max_lens = np.full(b_count, context, I64)
    elif isinstance(limit, str):
        near = rng.random(b_count) < 1 / 3
        max_lens = np.where(near, seq_lens + rng.integers(1, s + 1, b_count), context)
    else:
        max_lens = seq_lens + np.asarray(limit, I64)
    max_lens = np.minimum(max_lens, context).astype(I64)
    if isinstance(eos, str) and eos == "random":
        if rng.random() < 1 / 3:
            b = int(rng.integers(b_count))
            j = int(rng.integers(int(accept_num[b]) + 1))
            eos = int(predicts[accept_index[b, j]])
        else:
            eos = -1
    elif isinstance(eos, str):
        eos = -1
    pool_rows = b_count + int(rng.integers(0, 4))
    return Call(name, accept_index, accept_num, predicts,
                rng.choice(1 << 24, b_count * n, replace=False).astype(I64),
                rng.permutation(pool_rows)[:b_count].astype(I64), max_lens, n, s, context,
                int(eos), seq_lens,
                rng.integers(-(1 << 40), 1 << 40, (pool_rows, context)).astype(I64),
                want or {})


def _tree(rng, maxd, *, batch, verify_num=None, k=None):
    k = k or int(rng.integers(1, 7))
    verify_num = verify_num or int(rng.integers(1, maxd + 1))
    return grown_call("tree", seed=int(rng.integers(1 << 30)), batch=batch, k=k,
                      width=int(rng.integers(1, k + 1)), depths=int(rng.integers(2, 10)),
                      maxn=256, verify_num=min(verify_num, maxd), mode=1)


def random_call(rng: np.random.Generator, maxd: int, maxs: int) -> Call:
    """A random call: 1..6 requests of a draft-round tree, random n <= MAXD, S <= MAXS,
    follow probability, EOS and length limits."""
    s = int(rng.integers(1, maxs + 1))
    tree = _tree(rng, maxd, batch=int(rng.integers(1, 7)))
    return greedy_call(f"random S={s}", tree, s=s, rng=rng,
                       follow=float(rng.choice([0.3, 0.7, 0.95, 1.0])))


def _repeat(tree_call, seq_lens):
    """The one-request ``tree_call`` repeated for ``len(seq_lens)`` requests, request b's
    tokens shifted by ``50000 * b`` so that no two requests share a token."""
    count = len(seq_lens)
    arrays = [np.repeat(a, count, axis=0) for a in tree_call.tree()]
    arrays[0] = arrays[0] + 50000 * np.arange(count, dtype=I64)[:, None]
    return type(tree_call)(tree_call.name, *arrays, np.asarray(seq_lens, I64),
                           tree_call.cumu_count, tree_call.verify_num, 1)


def directed_calls(maxd: int, maxs: int) -> list[Call]:
    """Directed calls: an empty batch, a root-only tree (n = 1, S = 1), accept length 1
    everywhere, maximal accept lengths (chains, the target always follows), nothing finished,
    everything finished (``zero unfinished requests``: by length limit and by EOS on the first
    token), requests finishing in the middle of the batch (by EOS and by length, mid-path and
    on the last token), EOS disabled, and the largest n and S."""
    rng = np.random.default_rng(99)
    calls = []
    s_max = maxs

    empty_tree = _tree(rng, maxd, batch=1)
    empty = greedy_call("batch_size 0", empty_tree, s=s_max, rng=rng)
    b0 = slice(0, 0)
    empty.accept_index, empty.accept_token_num = empty.accept_index[b0], empty.accept_token_num[b0]
    empty.predicts, empty.out_cache_loc = empty.predicts[:0], empty.out_cache_loc[:0]
    empty.req_pool_indices, empty.max_seq_lens = empty.req_pool_indices[b0], \
        empty.max_seq_lens[b0]
    empty.seq_lens = empty.seq_lens[b0]
    calls.append(empty)

    root = manual_call("root", [-1], [1.0], verify_num=1, mode=1)
    root.cumu_tokens = np.array([[7]], I64)
    calls.append(greedy_call("root only: n = 1, S = 1", root, s=1, rng=rng, eos="none",
                             limit="none"))

    calls.append(greedy_call("accept length 1 everywhere", _tree(rng, maxd, batch=4), s=s_max,
                             rng=rng, follow=0.0, eos="none", limit="none",
                             want={"accept_length": [1, 1, 1, 1]}))

    length = min(maxd, s_max + 2)
    chain = manual_call(f"chain of {length}", [-1] + list(range(length - 1)),
                        [1.0] + [0.9 ** j for j in range(1, length)], verify_num=length, mode=1)
    chains = _repeat(chain, [5, 0, 100])
    full = min(s_max, length)
    calls.append(greedy_call("maximal accept length (all accepted)", chains, s=s_max, rng=rng,
                             follow=1.0, eos="none", limit="none",
                             want={"accept_length": [full] * 3,
                                   "finished": [False] * 3}))

    calls.append(greedy_call("nothing finished", _tree(rng, maxd, batch=5), s=s_max, rng=rng,
                             follow=0.8, eos="none", limit="none",
                             want={"finished": [False] * 5}))
    calls.append(greedy_call("all finished by length (limit = seq_len + 1)",
                             _tree(rng, maxd, batch=4), s=s_max, rng=rng, follow=0.9,
                             eos="none", limit=[1, 1, 1, 1],
                             want={"finished": [True] * 4, "accept_length": [1] * 4}))
    everyone = greedy_call("all finished by EOS on the first token", chains, s=s_max, rng=rng,
                           follow=1.0, eos="none", limit="none")
    first_tokens = everyone.predicts[everyone.accept_index[:, 0]]
    everyone.predicts[everyone.accept_index[:, 0]] = first_tokens[0]  # one EOS for all
    everyone.eos_token_id = int(first_tokens[0])
    everyone.want = {"finished": [True] * 3, "accept_length": [1] * 3}
    calls.append(everyone)

    if s_max >= 4 and length >= 4:
        # Five chain requests, each accepting everything: request 1 meets EOS at its third
        # token, request 3 its length limit at the second, request 4 exactly at its last.
        five = _repeat(chain, [3, 9, 0, 4, 7])
        mid = greedy_call("finishing in the middle of the batch", five, s=s_max, rng=rng,
                          follow=1.0, eos="none",
                          limit=[1000, 1000, 1000, 2, full])
        mid.max_seq_lens = np.minimum(mid.max_seq_lens, mid.max_context_len)
        third = mid.accept_index[1, 2]
        mid.eos_token_id = int(mid.predicts[third])
        mid.want = {"finished": [False, True, False, True, True],
                    "accept_length": [full, 3, full, 2, full]}
        calls.append(mid)
        disabled = greedy_call("EOS disabled (negative id)", five, s=s_max, rng=rng,
                               follow=1.0, eos="none", limit="none")
        disabled.eos_token_id = -1 - int(disabled.predicts[disabled.accept_index[0, 1]])
        disabled.want = {"finished": [False] * 5}
        calls.append(disabled)

    big = grown_call("tree", seed=5, batch=3, k=4, width=4, depths=64, maxn=2 * maxd + 40,
                     verify_num=maxd, mode=1)
    calls.append(greedy_call(f"largest n = {big.n(maxd)}, S = {maxs}", big, s=maxs, rng=rng,
                             follow=0.95))
    return calls


def perf_call(*, batch_size: int, verify_num: int, max_node_count: int, s: int,
              seed: int = 2026) -> Call:
    """The throughput call: ``batch_size`` requests whose verify trees (n = ``verify_num``)
    come from 256-node draft-round trees (K = 5, width 5, 11 depths), S accepted tokens at
    most, the target following the draft 90 % of the time."""
    rng = np.random.default_rng(seed)
    tree = grown_call("perf tree", seed=seed, batch=batch_size, k=5, width=5, depths=11,
                      maxn=max_node_count, verify_num=verify_num, mode=1)
    return greedy_call(f"perf B={batch_size} n={tree.n(verify_num)} S={s}", tree, s=s,
                       rng=rng, follow=0.9, eos="none", limit="none")


def verify_step_call(*, batch: int, node_top_k: int, tree_width: int, depth: int,
                     verify_num: int, vocab: int, seed: int, follow: float = 0.8) -> Call:
    """One verify step at a benchmark contract point (the measurements of K7 and of the
    active-slot compaction): ``batch`` trees grown by the golden draft round with ``K``, width
    cap ``tree_width`` and ``depth`` depths at full width (cost 0: ``1 + K + (depth-1)*W*K``
    nodes), tokens below ``vocab``; their K4 verify trees (``n = min(verify_num, nodes)``);
    ``S = depth + 1`` (the root plus one token per depth); the golden greedy K6 with a target
    that follows a draft child with probability ``follow``; ``greedy_call``'s random EOS and
    length limits (so some requests may finish). Deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    nodes = 1 + node_top_k + (depth - 1) * tree_width * node_top_k
    tree = grown_call(f"verify step tree K={node_top_k} W={tree_width} depth={depth}",
                      seed=seed, batch=batch, k=node_top_k, width=tree_width, depths=depth,
                      maxn=nodes, verify_num=verify_num, mode=1, vocab=vocab)
    if tree.cumu_count != nodes:
        raise AssertionError(f"the draft round stopped at cumu_count {tree.cumu_count} "
                             f"({tree.notes['stop']}), not the full {nodes}")
    return greedy_call(f"verify step B={batch} n={tree.n(verify_num)} S={depth + 1}", tree,
                       s=depth + 1, rng=rng, follow=follow)


# --- case files -----------------------------------------------------------------------------

EXAMPLE_CASE = Path(__file__).resolve().parent / "example_case.txt"
_INPUTS = {"accept_index": I32, "accept_token_num": I32, "predicts": I32,
           "out_cache_loc": I64, "req_pool_indices": I64, "max_seq_lens": I64,
           "seq_lens": I64, "req_to_token": I64}


def call_from_case(path) -> tuple[Call, dict]:
    """Read a case file: the call and its ``expected_*`` tensors (those present, flat)."""
    case = read_case(path)
    b, n, s = (case.scalar(name) for name in ("batch_size", "num_draft_tokens",
                                               "num_speculative_tokens"))
    context = case.scalar("max_context_len")
    arrays = {name: case.i64(name).astype(dtype) for name, dtype in _INPUTS.items()}
    if arrays["req_to_token"].size % context:
        raise ValueError(f"{path}: req_to_token is not a whole number of rows of "
                         f"max_context_len = {context}")
    call = Call(f"case {Path(path).name}", arrays["accept_index"].reshape(b, s),
                arrays["accept_token_num"], arrays["predicts"], arrays["out_cache_loc"],
                arrays["req_pool_indices"], arrays["max_seq_lens"], n, s, context,
                case.scalar("eos_token_id"), arrays["seq_lens"],
                arrays["req_to_token"].reshape(-1, context))
    want = {name: case.i64(f"expected_{name}") for name in OUTPUT_NAMES
            if f"expected_{name}" in case}
    return call, want


def example_case() -> Call:
    """The call of ``sim/verify_result/example_case.txt``: four requests of a draft-round
    tree (K = 3, n = 12, S = 5), one finishing by EOS and one by its length limit."""
    rng = np.random.default_rng(31)
    tree = grown_call("example tree", seed=31, batch=4, k=3, width=3, depths=4, maxn=40,
                      verify_num=12, mode=1)
    call = greedy_call("example", tree, s=5, rng=rng, follow=1.0, eos="none", context=300,
                       limit=[1000, 1000, 2, 1000])
    longest = int(np.argmax(np.where(np.arange(4) == 2, -1, call.accept_token_num)))
    call.eos_token_id = int(call.predicts[call.accept_index[longest, 1]])
    return call


def write_example_case(path=EXAMPLE_CASE) -> None:
    """Write ``example_case()`` with its golden results in the project's case format."""
    write_case_file(example_case(), path)


CASE_HEADER = ("K7 update_verify_result case (golden/verify_result.py)\n"
               "inputs in ABI shapes, flattened; req_to_token is [rows, max_context_len] before "
               "the call;\nexpected_* are the golden's outputs (seq_lens and req_to_token after "
               "the call)\nwritten by `python -m sim.verify_result.vectors`")


def write_case_file(call: Call, path) -> None:
    """Write ``call`` with its golden results in the project's case format (read back by
    ``call_from_case``)."""
    want = expected(call)
    tensors = {name: getattr(call, name) for name in _INPUTS}
    tensors.update({"batch_size": call.batch_size, "num_draft_tokens": call.n,
                    "num_speculative_tokens": call.s, "max_context_len": call.max_context_len,
                    "eos_token_id": call.eos_token_id})
    write_case(path, tensors, expected={name: want[name] for name in OUTPUT_NAMES},
               header=CASE_HEADER)


if __name__ == "__main__":
    write_example_case()
    print(f"wrote {EXAMPLE_CASE}")
