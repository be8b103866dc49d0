"""Host side of the K1 testbenches: batches, golden results, payload packing and unpacking.

A ``Batch`` is one K1 call (``B`` requests sharing ``K``, ``W``, ``cumu_count``,
``use_hot_token_id`` and ``H``). ``golden_outputs`` runs the golden op on it (the expected
values always come from there); ``request_words``, ``token_words`` and ``hidden_words`` pack
it into the payload integers of the ``ScoreKernel`` ports; ``decode_*`` turn what the RTL
sent back into arrays shaped as the ABI's outputs; ``compare`` lists the differences bit for
bit. The generators make the directed and random batches of the testbench and unit tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from amaranth.hdl import Shape

from golden import draft_tree_layer_score_index_gen_op
from golden.cases import read_case, write_case
from sim.payload import pack, unpack

__all__ = ["Batch", "golden_outputs", "request_words", "token_words", "hidden_words",
           "decode_results", "decode_tokens", "decode_hidden", "compare", "random_batch",
           "directed_batches", "hot_table", "case_batch", "golden_of_case", "write_case_file",
           "words_per_row",
           "SPEC_TIE_EXAMPLES", "OUTPUTS"]

OUTPUTS = ("curr_layer_scores", "sort_layer_scores", "sort_layer_indices",
           "cache_topk_indices", "parent_indices_in_layer")

# docs/kernels.md §1: scores -> the spec's index order (ties in network order).
SPEC_TIE_EXAMPLES = (
    ([0.5, 0.5, 0.7, 0.5], [2, 0, 3, 1]),
    ([.1, .3, .3, .1, .3, .1, .3, .1], [1, 2, 4, 6, 7, 5, 3, 0]),
)


@dataclass
class Batch:
    """One K1 call: inputs in ABI shapes, plus the golden outputs once computed."""

    k: int
    w: int
    cumu: int
    use_hot: bool
    probas: np.ndarray            # float32 [B, N]
    parents: np.ndarray           # float32 [B, W] (last_layer_scores)
    tokens: np.ndarray            # int64 [B, N]
    hidden: np.ndarray            # [B, W, H] float32 or uint16 (bits); H may be 0
    name: str = ""
    expected: dict = field(default_factory=dict)
    spec_indices: list | None = None  # the spec's literal index order (tie examples)

    @property
    def b(self):
        return self.probas.shape[0]

    @property
    def n(self):
        return self.w * self.k

    @property
    def h(self):
        return self.hidden.shape[2]

    def with_hidden(self, hidden: np.ndarray, name: str | None = None) -> Batch:
        """The same call with other hidden states (golden outputs to be recomputed)."""
        return Batch(self.k, self.w, self.cumu, self.use_hot, self.probas, self.parents,
                     self.tokens, hidden, name or self.name, spec_indices=self.spec_indices)


def golden_outputs(batch: Batch, hot: np.ndarray, *, sort_width: int = 64) -> dict:
    """Run the golden op (in-place ABI) on fresh output arrays; store and return them."""
    b, n, k, h = batch.b, batch.n, batch.k, batch.h
    out = {
        "curr_layer_scores": np.zeros((b, n), np.float32),
        "sort_layer_scores": np.zeros((b, n), np.float32),
        "sort_layer_indices": np.zeros((b, n), np.int64),
        "cache_topk_indices": np.zeros((b, k), np.int64),
        "parent_indices_in_layer": np.zeros((b, k), np.int64),
        "output_hidden_states": np.zeros((b, k, h), batch.hidden.dtype),
    }
    tokens = batch.tokens.copy()
    draft_tree_layer_score_index_gen_op(
        batch.probas, tokens, batch.parents, out["curr_layer_scores"],
        out["sort_layer_scores"], out["sort_layer_indices"], out["cache_topk_indices"],
        out["parent_indices_in_layer"], batch.hidden, out["output_hidden_states"], hot,
        b, k, batch.w, batch.cumu, batch.use_hot, sort_width=sort_width)
    out["topk_tokens_sampling"] = tokens
    batch.expected = out
    return out


def _join(values, width: int) -> int:
    """Lanes (non-negative ints below 2**width) -> one integer, lane 0 in the low bits."""
    word = 0
    for lane, value in enumerate(values):
        word |= (int(value) & ((1 << width) - 1)) << (width * lane)
    return word


def _split(word: int, width: int, count: int, *, signed: bool = False) -> list[int]:
    mask = (1 << width) - 1
    values = [(int(word) >> (width * lane)) & mask for lane in range(count)]
    if signed:
        values = [v - (1 << width) if v >> (width - 1) else v for v in values]
    return values


def request_words(kernel, batch: Batch) -> list[int]:
    """One ``requests`` payload per request of ``batch`` (a packet: first/last marks)."""
    b, n_max, w_max = batch.b, kernel.max_candidates, kernel.max_tree_width
    if b == 0:
        return []
    probas = np.zeros((b, n_max), np.uint32)
    probas[:, :batch.n] = batch.probas.view(np.uint32)
    parents = np.zeros((b, w_max), np.uint32)
    parents[:, :batch.w] = batch.parents.view(np.uint32)
    return pack(kernel.request_layout, b,
                probas=[_join(row, 32) for row in probas],
                parent_scores=[_join(row, 32) for row in parents],
                tree_width=batch.w, cumu_count=batch.cumu,
                first=(np.arange(b) == 0).astype(int), last=(np.arange(b) == b - 1).astype(int))


def token_words(kernel, batch: Batch) -> list[int]:
    """The ``B*N`` token ids in beats of ``remap_lanes`` (last beat padded with zeros)."""
    lanes, width = kernel.remap_lanes, kernel.token_width
    flat = batch.tokens.reshape(-1)
    beats = -(-flat.size // lanes)
    if beats == 0:
        return []
    padded = np.zeros(beats * lanes, np.int64)
    padded[:flat.size] = flat
    return pack(kernel.token_layout, beats,
                tokens=[_join(padded[i * lanes:(i + 1) * lanes], width) for i in range(beats)],
                enable=int(batch.use_hot),
                first=(np.arange(beats) == 0).astype(int),
                last=(np.arange(beats) == beats - 1).astype(int))


def words_per_row(hidden_size: int, lanes: int) -> int:
    return -(-hidden_size // lanes)


def hidden_words(hidden: np.ndarray, lanes: int, element_width: int) -> list[int]:
    """Memory image of ``input_hidden_states`` [B, W, H]: ``ceil(H/lanes)`` words per row."""
    bits_type = np.uint32 if element_width == 32 else np.uint16
    rows = hidden.reshape(-1, hidden.shape[-1]).view(bits_type)
    per_row = words_per_row(hidden.shape[-1], lanes)
    padded = np.zeros((rows.shape[0], per_row * lanes), bits_type)
    padded[:, :rows.shape[1]] = rows
    return [_join(padded[r, i * lanes:(i + 1) * lanes], element_width)
            for r in range(rows.shape[0]) for i in range(per_row)]


def decode_results(kernel, words) -> dict:
    """``results`` payloads -> per-request arrays of every field (``N_max``/``K`` lanes)."""
    fields = unpack(kernel.result_layout, words)
    n_max, k = kernel.max_candidates, kernel.node_top_k
    index_width = (kernel.sort_width - 1).bit_length()
    parent_width = Shape.cast(kernel.result_layout["parents"].shape.elem_shape).width
    out = {
        "curr": np.array([_split(v, 32, n_max) for v in fields["curr"]], np.uint32),
        "scores": np.array([_split(v, 32, n_max) for v in fields["scores"]], np.uint32),
        "indices": np.array([_split(v, index_width, n_max) for v in fields["indices"]],
                            np.int64),
        "cache": np.array([_split(v, kernel.count_width, k) for v in fields["cache"]],
                          np.int64),
        "parents": np.array([_split(v, parent_width, k) for v in fields["parents"]],
                            np.int64),
    }
    for name in ("tree_width", "first", "last"):
        out[name] = fields[name].astype(np.int64)
    for name in ("curr", "scores", "indices"):
        out[name] = out[name].reshape(len(words), n_max)
    for name in ("cache", "parents"):
        out[name] = out[name].reshape(len(words), k)
    return out


def decode_tokens(kernel, words, count: int) -> np.ndarray:
    """``remapped_tokens`` payloads -> the first ``count`` ids (int64)."""
    fields = unpack(kernel.remapped_layout, words)
    ids = [v for word in fields["tokens"]
           for v in _split(word, kernel.token_width, kernel.remap_lanes, signed=True)]
    return np.array(ids[:count], np.int64)


def decode_hidden(words, *, lanes: int, element_width: int, b: int, k: int, h: int):
    """Gather output data words -> ``output_hidden_states`` bits [B, K, H]."""
    bits_type = np.uint32 if element_width == 32 else np.uint16
    per_row = words_per_row(h, lanes)
    flat = np.array([v for word in words for v in _split(word, element_width, lanes)],
                    bits_type)
    return flat.reshape(b, k, per_row * lanes)[:, :, :h]


def _bits(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    if array.dtype == np.float32:
        return array.view(np.uint32)
    if array.dtype == np.float16:
        return array.view(np.uint16)
    return array


def compare(batch: Batch, results: dict | None = None, tokens: np.ndarray | None = None,
            hidden: np.ndarray | None = None) -> list[str]:
    """Differences between RTL outputs of ``batch`` and its golden outputs (bit patterns).

    ``results`` is ``decode_results`` of the batch's requests, ``tokens`` the remapped ids
    (``B*N``), ``hidden`` the gathered rows [B, K, H]. Returns one line per mismatching
    tensor (empty when everything is equal).
    """
    expected = batch.expected
    n = batch.n
    problems = []

    def check(name, actual, wanted):
        actual, wanted = _bits(actual), _bits(wanted)
        if actual.shape != wanted.shape or not np.array_equal(actual, wanted):
            bad = (np.argwhere(actual != wanted)[:4].tolist()
                   if actual.shape == wanted.shape else "shape")
            problems.append(f"{batch.name}: {name} differs at {bad}; RTL "
                            f"{actual.reshape(-1)[:16]} golden {wanted.reshape(-1)[:16]}")

    if results is not None:
        check("curr_layer_scores", results["curr"][:, :n],
              expected["curr_layer_scores"].view(np.uint32))
        check("sort_layer_scores", results["scores"][:, :n],
              expected["sort_layer_scores"].view(np.uint32))
        check("sort_layer_indices", results["indices"][:, :n], expected["sort_layer_indices"])
        check("cache_topk_indices", results["cache"], expected["cache_topk_indices"])
        check("parent_indices_in_layer", results["parents"],
              expected["parent_indices_in_layer"])
        check("tree_width", results["tree_width"], np.full(batch.b, batch.w, np.int64))
        if batch.spec_indices is not None:
            check("sort_layer_indices (spec example)", results["indices"][:, :n],
                  np.array([batch.spec_indices] * batch.b, np.int64))
    if tokens is not None:
        check("topk_tokens_sampling", tokens,
              expected["topk_tokens_sampling"].reshape(-1))
    if hidden is not None:
        check("output_hidden_states", hidden, expected["output_hidden_states"])
    return problems


# ----------------------------------------------------------------------------------------
# Generators.

def hot_table(rng, size: int, token_width: int = 32) -> np.ndarray:
    """A ``hot_token_id`` table of ``size`` ids, its first and last entries the int extremes."""
    low, high = -(2 ** (token_width - 1)), 2 ** (token_width - 1) - 1
    table = rng.integers(0, min(high, 10 ** 6), size=size, dtype=np.int64)
    table[0] = high
    if size > 1:
        table[-1] = low
    return table


def _tokens(rng, b, n, hot_size, token_width, edges: bool):
    low, high = -(2 ** (token_width - 1)), 2 ** (token_width - 1) - 1
    tokens = rng.integers(-3, hot_size + 3, size=(b, n), dtype=np.int64)
    if edges:
        choices = np.array([0, 1, hot_size - 1, hot_size, hot_size + 1, -1, low, high],
                           np.int64)
        mask = rng.random((b, n)) < 0.5
        tokens[mask] = rng.choice(choices, size=int(mask.sum()))
    return tokens


def _scores(rng, style: str, shape) -> np.ndarray:
    """float32 probabilities (or wider score values) of one style."""
    if style == "uniform":
        return rng.random(shape, dtype=np.float32)
    if style == "ties":  # few distinct values, +0.0 and -0.0 among them
        values = np.array([0.0, -0.0, 0.125, 0.25, 0.5, 0.5, 0.75, 1.0], np.float32)
        return rng.choice(values, size=shape)
    if style == "zeros":
        return rng.choice(np.array([0.0, -0.0], np.float32), size=shape)
    if style == "subnormal":
        bits = rng.integers(1, 0x0080_0000, size=shape, dtype=np.uint32)
        bits[rng.random(shape) < 0.1] = 0
        return bits.view(np.float32)
    if style == "wild":  # any sign, exponents 2^-126 .. 2^13, subnormals: |product| < 1e10
        sign = rng.integers(0, 2, size=shape, dtype=np.uint32) << np.uint32(31)
        exponent = rng.integers(0, 141, size=shape, dtype=np.uint32) << np.uint32(23)
        fraction = rng.integers(0, 1 << 23, size=shape, dtype=np.uint32)
        return (sign | exponent | fraction).view(np.float32)
    raise ValueError(style)


def random_batch(rng, *, k: int, w: int, b: int, h: int = 0, style: str = "uniform",
                 cumu: int = 0, use_hot: bool = False, hot_size: int = 1,
                 token_width: int = 32, hidden_dtype=np.float32, edges: bool = False,
                 name: str = "") -> Batch:
    """A batch of ``b`` requests with probabilities/parent scores of ``style``."""
    n = w * k
    probas = _scores(rng, style, (b, n))
    parent_style = {"subnormal": "uniform", "zeros": "ties"}.get(style, style)
    parents = _scores(rng, parent_style, (b, w))
    if style == "subnormal":  # some parent scores scale subnormals up or down
        parents[rng.random((b, w)) < 0.3] = np.float32(2.0 ** 20)
        parents[rng.random((b, w)) < 0.2] = np.float32(1.0)
    bits_type = np.uint32 if np.dtype(hidden_dtype).itemsize == 4 else np.uint16
    hidden = rng.integers(0, np.iinfo(bits_type).max, size=(b, w, h), dtype=bits_type,
                          endpoint=True).view(hidden_dtype)
    tokens = _tokens(rng, b, n, hot_size, token_width, edges)
    return Batch(k, w, cumu, use_hot, probas, parents, tokens, hidden,
                 name or f"{style} B={b} W={w} cumu={cumu} hot={int(use_hot)}")


def directed_batches(rng, *, k: int, w_max: int, count_width: int, hot_size: int,
                     token_width: int = 32, b: int = 3) -> list[Batch]:
    """Directed cases: the spec's tie examples (where N fits), every W with each score style,
    cumu_count at its edges, token ids at the table edges with the remap on and off, B = 0."""
    batches = []
    for scores, order in SPEC_TIE_EXAMPLES:
        n = len(scores)
        if n % k == 0 and n // k <= w_max:
            w = n // k
            batch = Batch(k, w, 0, False, np.array([scores] * 2, np.float32),
                          np.ones((2, w), np.float32), np.zeros((2, n), np.int64),
                          np.zeros((2, w, 0), np.float32), f"spec tie example N={n}",
                          spec_indices=order)
            batches.append(batch)
    styles = ("ties", "zeros", "subnormal", "wild", "uniform")
    for w in range(1, w_max + 1):
        n = w * k
        cumu_edges = tuple(min(c, 2 ** count_width - n) for c in
                           (0, 1, 2 ** 31 - 1, 2 ** count_width - n))
        for index, style in enumerate(styles):
            batches.append(random_batch(
                rng, k=k, w=w, b=b, style=style, cumu=cumu_edges[(w + index) % 4],
                use_hot=bool((w + index) % 2), hot_size=hot_size, token_width=token_width,
                edges=True))
    batches.append(random_batch(rng, k=k, w=w_max, b=0, name="B=0 (no-op)"))
    return batches


def _shaped(case, name: str, values: np.ndarray, shape: tuple) -> np.ndarray:
    """``values`` of tensor ``name`` reshaped to ``shape``, or ``ValueError`` naming the
    file and line when the count does not fit."""
    if values.size != int(np.prod(shape)):
        raise ValueError(f"{case.where(name)}: tensor {name!r} has {values.size} values, "
                         f"which is not of shape {tuple(shape)} (B, W, K and H of the case)")
    return values.reshape(shape)


def case_batch(path) -> tuple[Batch, dict, np.ndarray | None]:
    """A case file as a batch, the tensors it expects and its own ``hot_token_id`` (if any).

    Score captures give ``meta B K W H cumu_count``; other case files (``write_case_file``)
    name the scalars (``batch_size``, ``node_top_k``, ``tree_width``, ``hidden_size``,
    ``cumu_count``, ``use_hot_token_id``). Tokens, the table and the hidden states are
    optional lines. A malformed file raises ``ValueError`` naming it (and the line, for the
    format errors of ``golden.cases.read_case``).
    """
    case = read_case(path)
    names = set(case)
    try:
        if "batch_size" in names:
            b, k, w = (case.scalar(x) for x in ("batch_size", "node_top_k", "tree_width"))
            cumu = case.scalar("cumu_count")
            h = case.scalar("hidden_size") if "hidden_size" in names else None
        elif len(case.meta) >= 5:
            b, k, w, h, cumu = case.meta[:5]
        else:
            raise ValueError(f"{case.path}: no `meta B K W H cumu_count` line and no "
                             "`batch_size` scalar: not a K1 case file")
        if min(b, k, w) < 0 or (h or 0) < 0:
            raise ValueError(f"{case.path}: negative B, K, W or H")
        n = w * k
        use_hot = (bool(case.scalar("use_hot_token_id")) if "use_hot_token_id" in names
                   else False)
        tokens = (_shaped(case, "topk_tokens_sampling", case.i64("topk_tokens_sampling"),
                          (b, n))
                  if "topk_tokens_sampling" in names else np.zeros((b, n), np.int64))
        case_hot = case.i64("hot_token_id") if "hot_token_id" in names else None
        if "input_hidden_states" in names:
            values = case.f32("input_hidden_states")
            if h is None:
                h = values.size // max(1, b * w)
            hidden = _shaped(case, "input_hidden_states", values, (b, w, h))
        else:
            hidden = np.zeros((b, w, 0), np.float32)
        batch = Batch(k, w, cumu, use_hot,
                      _shaped(case, "topk_probas_sampling", case.f32("topk_probas_sampling"),
                              (b, n)),
                      _shaped(case, "last_layer_scores", case.f32("last_layer_scores"),
                              (b, w)),
                      tokens, hidden, f"case {case.path.name}")
    except KeyError as error:  # a missing tensor
        raise ValueError(error.args[0]) from None
    expected = {}
    for name in names:
        if not name.startswith("expected_"):
            continue
        tensor = name[len("expected_"):]
        floating = tensor in ("curr_layer_scores", "sort_layer_scores",
                              "output_hidden_states")
        expected[tensor] = case.f32(name) if floating else case.i64(name)
    return batch, expected, case_hot


def golden_of_case(batch: Batch, expected: dict, table: np.ndarray, *,
                   sort_width: int = 64) -> dict:
    """The golden outputs of a case's batch (``case_batch``) with ``table``, after checking
    them against the case's expected tensors bit for bit (``AssertionError`` naming the
    first that differs)."""
    golden = golden_outputs(batch, table, sort_width=sort_width)
    if "output_tokens" in expected:
        golden["output_tokens"] = np.take_along_axis(
            golden["topk_tokens_sampling"], golden["sort_layer_indices"][:, :batch.k], 1)
    for name, wanted in expected.items():
        got = golden[name].reshape(-1)
        same = (np.array_equal(got.view(np.uint32), wanted.view(np.uint32))
                if got.dtype == np.float32 else np.array_equal(got, wanted))
        assert same, f"golden differs from {batch.name} in {name}"
    return golden


def write_case_file(batch: Batch, hot: np.ndarray | None, path, *,
                    sort_width: int = 64) -> None:
    """Write ``batch`` (float32 hidden states), its table and its golden results (the
    network of ``sort_width`` lanes) as a case file that ``case_batch`` reads."""
    expected = golden_outputs(batch, np.zeros(1, np.int64) if hot is None else hot,
                              sort_width=sort_width)
    tensors = {"batch_size": batch.b, "node_top_k": batch.k, "tree_width": batch.w,
               "hidden_size": batch.h, "cumu_count": batch.cumu,
               "use_hot_token_id": int(batch.use_hot),
               "topk_probas_sampling": batch.probas, "last_layer_scores": batch.parents,
               "topk_tokens_sampling": batch.tokens}
    if hot is not None:
        tensors["hot_token_id"] = hot
    if batch.h:
        tensors["input_hidden_states"] = batch.hidden
    outputs = [name for name in (*OUTPUTS, "output_hidden_states", "topk_tokens_sampling")
               if name != "output_hidden_states" or batch.h]
    write_case(path, tensors, expected={name: expected[name] for name in outputs},
               header=f"K1 case {batch.name}: B={batch.b} K={batch.k} W={batch.w} "
                      f"H={batch.h}, golden results")
