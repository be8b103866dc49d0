"""Host side of the K5 testbenches: calls (logits, temperatures, ``n``), the beats that carry
them to ``LogitsToProbas``, the golden's results and their comparison with the kernel's.

A call is a dict: ``logits`` float32 ``[B*n, V]``, ``temperatures`` float32 ``[B]``, ``n``,
``name``. The golden (``golden.logits_to_probas``) gives ``target_probs`` and
``target_predict``; the kernel's are rebuilt from its streams (greedy rows: the one-hot of the
row's ``predict``, as the golden defines them). ``params`` arguments are a
``hw.kernels.logits_to_probas.LogitsToProbasParams``.
"""

from pathlib import Path

import numpy as np

from golden.cases import read_case, write_case
from golden.logits_to_probas import logits_to_probas
from sim.payload import pack, unpack

__all__ = ["make_call", "cmd_words", "logit_words", "expected", "outputs", "compare",
           "check", "work", "beats", "greedy_rows", "random_call", "directed_calls",
           "bf16_round", "call_from_case", "write_case_file", "bit_patterns"]

F32 = np.float32


def make_call(logits, temperatures, n, name):
    logits = np.ascontiguousarray(logits, F32)
    return {"logits": logits.reshape(-1, logits.shape[-1]),
            "temperatures": np.asarray(temperatures, F32).reshape(-1), "n": int(n),
            "name": name}


def bf16_round(x):
    """float32 values truncated to bfloat16 (the top 16 bits): what a bf16 input carries."""
    bits = np.asarray(x, F32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(F32)


def cmd_words(params, call) -> list[int]:
    """The ``cmd`` beats of a call, one per request."""
    vocab = call["logits"].shape[1]
    temps = call["temperatures"].view(np.uint32)
    return pack(params.cmd_layout, temps.size, temperature=temps, vocab_size=vocab,
                num_rows=call["n"])


def logit_words(params, call) -> list[int]:
    """Every row's beats, rows in order (``lanes`` elements per beat, zero padded)."""
    rows, vocab = call["logits"].shape
    lanes = params.lanes
    words = -(-vocab // lanes)
    padded = np.zeros((rows, words * lanes), F32)
    padded[:, :vocab] = call["logits"]
    bits = padded.view(np.uint32).astype(np.uint64)
    width = 32
    if params.input_format == "bfloat16":
        bits = bits >> np.uint64(16)
        width = 16
    bits = bits.reshape(rows * words, lanes)
    data = [0] * (rows * words)
    for lane in range(lanes):
        column = bits[:, lane].tolist()
        for index, value in enumerate(column):
            data[index] |= int(value) << (width * lane)
    first = np.tile(np.arange(words) == 0, rows)
    last = np.tile(np.arange(words) == words - 1, rows)
    layout = params.logits_layout
    spec = {name: (field.offset, field.width) for name, field in layout}
    offset = spec["data"][0]
    return [(d << offset) | (int(f) << spec["first"][0]) | (int(la) << spec["last"][0])
            for d, f, la in zip(data, first, last, strict=True)]


def expected(call, input_format="float32"):
    logits = call["logits"]
    if input_format == "bfloat16":
        logits = bf16_round(logits)
    with np.errstate(all="ignore"):
        return logits_to_probas(logits, call["temperatures"], call["n"])


def greedy_rows(call):
    from golden.logits_to_probas import GREEDY_TEMPERATURE

    return np.repeat(call["temperatures"] < GREEDY_TEMPERATURE, call["n"])


def work(params, call) -> int:
    """Clocks a call takes without idle or back-pressure, generously (a timeout's base)."""
    rows, vocab = call["logits"].shape
    words = -(-vocab // params.lanes)
    sampling = int((~greedy_rows(call)).sum())
    return rows * (words + 40) + sampling * (2 * words + 900) + 800


def beats(params, call) -> dict[str, int]:
    """Output port -> beats a call yields (``predict``: one per row; ``probs``: a packet of
    ``ceil(V / lanes)`` beats per sampling row)."""
    rows, vocab = call["logits"].shape
    words = -(-vocab // params.lanes)
    return {"probs": int((~greedy_rows(call)).sum()) * words, "predict": rows}


def outputs(params, call, probs_words, predict_words):
    """``(target_probs, target_predict, problems)`` rebuilt from the kernel's streams."""
    rows, vocab = call["logits"].shape
    lanes = params.lanes
    words = -(-vocab // lanes)
    problems = []
    predict = unpack(params.predict_layout, predict_words)
    if len(predict_words) != rows:
        problems.append(f"{len(predict_words)} predict beats, {rows} rows")
        return None, None, problems
    tokens = predict["token"].astype(np.int64)
    n = call["n"]
    want_first = (np.arange(rows) % n) == 0
    want_last = (np.arange(rows) % n) == n - 1
    if not (np.array_equal(predict["first"] == 1, want_first)
            and np.array_equal(predict["last"] == 1, want_last)):
        problems.append("predict first/last markers wrong")
    greedy = greedy_rows(call)
    sampling = int((~greedy).sum())
    if len(probs_words) != sampling * words:
        problems.append(f"{len(probs_words)} probs beats, {sampling * words} expected")
        return None, tokens, problems
    fields = unpack(params.probs_layout, probs_words)
    if sampling and not (np.array_equal(fields["first"] == 1, np.tile(np.arange(words) == 0,
                                                                        sampling))
                         and np.array_equal(fields["last"] == 1,
                                            np.tile(np.arange(words) == words - 1, sampling))):
        problems.append("probs first/last markers wrong")
    data = fields["data"]
    lanes_bits = np.zeros((len(probs_words), lanes), np.uint32)
    for lane in range(lanes):
        lanes_bits[:, lane] = [(int(w) >> (32 * lane)) & 0xFFFF_FFFF for w in data]
    flat = lanes_bits.reshape(sampling, words * lanes)
    if (flat[:, vocab:] != 0).any():
        problems.append("lanes past V are not +0.0")
    probs = np.zeros((rows, vocab), np.uint32)
    probs[np.flatnonzero(~greedy)] = flat[:, :vocab]
    one = np.uint32(0x3F80_0000)
    for r in np.flatnonzero(greedy):
        probs[r, tokens[r]] = one
    return probs.view(F32), tokens, problems


def compare(call, got_probs, got_predict, want, problems=()) -> list[str]:
    problems = list(problems)
    want_probs, want_predict = want
    name = call["name"]
    if got_predict is not None and not np.array_equal(got_predict, want_predict):
        bad = np.flatnonzero(got_predict != want_predict)
        problems.append(f"predict differs in {bad.size} rows, first row {bad[0]}: "
                        f"{got_predict[bad[0]]} != {want_predict[bad[0]]}")
    if got_probs is not None:
        got, wanted = got_probs.view(np.uint32), want_probs.view(np.uint32)
        if not np.array_equal(got, wanted):
            bad = np.argwhere(got != wanted)
            r, j = bad[0]
            problems.append(f"probs differ at {len(bad)} elements, first [{r}, {j}]: "
                            f"{got[r, j]:#010x} != {wanted[r, j]:#010x} "
                            f"(logit {call['logits'][r, j]!r})")
    return [f"{name}: {p}" for p in problems]


def check(params, call, probs_words, predict_words) -> None:
    """Raise ``AssertionError`` listing every difference between the kernel's streams for
    ``call`` and the golden's results (at ``params.input_format``)."""
    got_probs, got_predict, problems = outputs(params, call, probs_words, predict_words)
    problems = compare(call, got_probs, got_predict, expected(call, params.input_format),
                       problems)
    assert not problems, "\n".join(problems)


# --- calls -----------------------------------------------------------------------------------


def random_temperature(rng):
    kind = rng.integers(0, 6)
    if kind == 0:
        return F32(0.0)
    if kind == 1:
        return F32(rng.choice([1e-6, np.nextafter(F32(1e-6), F32(0)), 2e-6, 1e-5]))
    if kind == 2:
        return F32(1.0)
    return F32(np.exp(rng.uniform(np.log(0.01), np.log(10.0))))


def random_row(rng, vocab):
    kind = rng.integers(0, 6)
    if kind == 0:
        row = rng.normal(0, 3, vocab)
    elif kind == 1:
        row = rng.normal(0, 30, vocab)
    elif kind == 2:
        row = rng.integers(-3, 3, vocab).astype(float)  # many ties
    elif kind == 3:
        row = rng.uniform(-1e4, 1e4, vocab)
    elif kind == 4:
        row = rng.normal(0, 1e-3, vocab) + rng.normal(0, 50)
    else:
        row = rng.standard_cauchy(vocab) * 10
    row = row.astype(F32)
    if rng.random() < 0.3:
        row[rng.random(vocab) < 0.2] = -np.inf
    return row


def random_call(rng, *, name, lanes, max_vocab, max_requests=3, max_n=3):
    choices = [1, lanes, lanes + 1, max(1, lanes - 1), int(rng.integers(1, max_vocab + 1))]
    vocab = int(min(max_vocab, rng.choice(choices)))
    batch = int(rng.integers(1, max_requests + 1))
    n = int(rng.integers(1, max_n + 1))
    logits = np.stack([random_row(rng, vocab) for _ in range(batch * n)])
    temps = np.array([random_temperature(rng) for _ in range(batch)], F32)
    return make_call(logits, temps, n, name)


def directed_calls(lanes, max_vocab):
    """Directed cases (see the testbench docstring)."""
    rng = np.random.default_rng(12345)
    vocab = min(max_vocab, 37)
    calls = []
    row = rng.normal(0, 2, vocab).astype(F32)
    tied = row.copy()
    tied[[3 % vocab, 7 % vocab, vocab - 1]] = row.max() + 1
    calls.append(make_call(np.stack([tied, tied]), [1.0, 0.0], 1, "ties in the max"))
    some_inf = row.copy()
    some_inf[::3] = -np.inf
    calls.append(make_call(some_inf[None], [0.7], 1, "-inf entries"))
    all_inf = np.full((2, vocab), -np.inf, F32)
    calls.append(make_call(all_inf, [1.0, 0.0], 1, "all -inf rows"))
    huge = rng.uniform(-3e38, 3e38, vocab).astype(F32)
    huge[0] = -3.4e38
    huge[1] = 3.4e38
    calls.append(make_call(np.stack([huge, huge * F32(1e-30), huge]), [1.0, 1e-6, 1e6], 1,
                           "huge logit range"))
    below = np.nextafter(F32(1e-6), F32(0))
    calls.append(make_call(np.stack([row] * 4), [0.0, 1e-6, below, 1e-5], 1,
                           "temperature boundary"))
    temps = np.array([0.01, 0.1, 0.5, 1.0, 2.0, 10.0], F32)
    calls.append(make_call(np.stack([row] * 6), temps, 1, "temperatures 0.01..10"))
    for v in sorted({1, lanes, lanes + 1, max(1, lanes - 1), 2 * lanes + 1}):
        if v <= max_vocab:
            x = rng.normal(0, 4, (4, v)).astype(F32)
            calls.append(make_call(x, [0.8, 0.0], 2, f"V = {v}"))
    subnormal = np.zeros(vocab, F32)
    subnormal[:5] = np.array([1e-45, 2e-45, -1e-45, 0.0, -0.0], F32)
    calls.append(make_call(np.stack([subnormal, -np.abs(row) * 1e3]), [1e-6, 1e-6], 1,
                           "tiny logits, cold and hot"))
    many = rng.normal(0, 3, (6, vocab)).astype(F32)
    calls.append(make_call(many, [1.0, 0.0, 0.3], 2, "requests back to back"))
    return calls


# --- case files ------------------------------------------------------------------------------


def write_case_file(path, call, *, header="K5 logits_to_probas case"):
    """A K5 case: ``meta B n V``, ``logits``, ``temperatures``, the golden's
    ``expected_target_probs``/``expected_target_predict``."""
    probs, predict = expected(call)
    rows, vocab = call["logits"].shape
    write_case(path, {"meta": np.array([rows // call["n"], call["n"], vocab], np.int64),
                      "logits": call["logits"], "temperatures": call["temperatures"]},
               expected={"target_probs": probs, "target_predict": predict}, header=header)


def call_from_case(path):
    """The call of a case file (``write_case_file``), with its ``expected_*`` tensors (those
    present) in ``call["expected"]``. A malformed file raises ``ValueError`` naming the file
    and line."""
    case = read_case(path)
    lines = {}
    for number, line in enumerate(Path(case.path).read_text().splitlines(), start=1):
        if line.split():
            lines.setdefault(line.split()[0], number)

    def fail(name, message):
        raise ValueError(f"{case.path}:{lines.get(name, 1)}: {message}")

    if len(case.meta) != 3 or min(case.meta) < 1:
        fail("meta", f"meta must be `B n V` (three counts, each at least 1), not {case.meta}")
    batch, n, vocab = case.meta
    sizes = {"logits": batch * n * vocab, "temperatures": batch,
             "expected_target_probs": batch * n * vocab, "expected_target_predict": batch * n}
    for name, size in sizes.items():
        if name not in case:
            if not name.startswith("expected_"):
                fail("meta", f"tensor {name!r} is missing")
            continue
        if len(case[name]) != size:
            fail(name, f"tensor {name!r} has {len(case[name])} values, meta B n V = "
                       f"{batch} {n} {vocab} needs {size}")
    logits = case.f32("logits").reshape(batch * n, vocab)
    call = make_call(logits, case.f32("temperatures"), n, f"case {path}")
    call["expected"] = {}
    if "expected_target_probs" in case:
        call["expected"]["expected_target_probs"] = \
            case.f32("expected_target_probs").reshape(batch * n, vocab)
    if "expected_target_predict" in case:
        call["expected"]["expected_target_predict"] = case.i64("expected_target_predict")
    return call


def bit_patterns(tensors: dict) -> dict:
    """Name -> flat int64 array of each tensor, float32 ones by bit pattern (what
    ``sim.bench.golden_matches_case`` compares)."""
    return {name: (values.view(np.uint32) if values.dtype == F32 else values)
            .reshape(-1).astype(np.int64) for name, values in tensors.items()}
