"""``python -m sim.parity``: the P0 parity matrix ``reports/p0_parity_matrix.md`` (``make report``).

One row per case and P0 kernel (the ops ``host.cost_draft_tree`` names P0, docs/host.md, plus
the two kernels the engine runs for them: K7's active-slot compaction and the fused K5+K6
verify). The cases:

* the CUDA captures and case files of ``golden/captures`` (and of ``../shared/goldens``, the
  originals: a file there with the same bytes as one in ``golden/captures`` shares its row, any
  other gets a row of its own; a file no kernel replays is a failing row);
* each kernel's example case file (``sim/<kernel>/example_case.txt``);
* each kernel's directed vectors (``directed_calls``/``directed_cases``/``directed_batches`` of
  its sim package, at the build of ``make sim KERNEL=<kernel>``).

Columns: *golden*, the golden model's outputs on the case equal the file's ``expected_*``
tensors bit for bit (float32 by bit pattern; for directed vectors the golden is the reference,
so the column says so); *RTL*, the kernel's hardware simulated in this run on Amaranth's
simulator (the runners of the unit tests, ``sim/<kernel>/pysim.py``) equals the golden bit for
bit, on the build ``make sim KERNEL=<kernel> [CASE=<file>]`` uses (``SimTarget.parameters``,
``case_parameters``). A row passes when no column fails.

The report is written after every row has run; the exit status is 1 when a row fails, 2 for a
name that is no kernel or case of the matrix. ``--kernel``/``--case`` select rows (each row's
command reruns it); a selection prints its table and writes a file only with ``--out``.
"""

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from golden.cases import CAPTURES_DIR

from .harness import REPO_ROOT
from .targets import DEFAULT_SEED, discover_targets

__all__ = ["KERNELS", "CAPTURE_KERNELS", "SHARED_GOLDENS", "REPORT", "Check", "Row", "rows",
           "run_rows", "render", "main"]

REPORT = REPO_ROOT / "reports" / "p0_parity_matrix.md"
#: The originals of the CUDA captures (golden/captures holds copies).
SHARED_GOLDENS = REPO_ROOT.parent / "shared" / "goldens"
COMMAND = "python -m sim.parity"


@dataclass(frozen=True)
class Check:
    """One column of a row: ``ok`` True (pass), False (fail) or None (not applicable)."""

    ok: bool | None
    detail: str

    @property
    def cell(self) -> str:
        word = {True: "pass", False: "**FAIL**", None: "n/a"}[self.ok]
        return f"{word}: {self.detail}" if self.detail else word


def _failure(error: Exception) -> Check:
    """A failing column naming ``error`` (its first line)."""
    lines = str(error).strip().splitlines() or [""]
    if len(lines) > 1 and lines[0].endswith(":"):  # "call name:" then the differences
        lines[:2] = [f"{lines[0]} {lines[1]}"]
    more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
    return Check(False, f"{type(error).__name__}: {lines[0][:300]}{more}")


def _checked(function: Callable[[], str | None]) -> Check:
    """Run ``function`` (its detail, or None for "not applicable"); any exception fails."""
    try:
        detail = function()
    except Exception as error:  # noqa: BLE001 -- whatever went wrong fails the column
        return _failure(error)
    return Check(None, "no expected_* tensors") if detail is None else Check(True, detail)


def _no_problems(problems) -> None:
    if problems:
        raise AssertionError("\n".join(problems))


def _golden_matches(want: dict, file_expected: dict) -> str:
    """Raise naming the ``expected_*`` tensors the golden's outputs differ from (integers
    or float32 bit patterns); the detail of a passing golden column."""
    from .bench import golden_matches_case

    differing = golden_matches_case(want, file_expected)
    _no_problems([f"golden differs from expected_{name}" for name in differing])
    return f"{len(file_expected)} expected tensors bit-exact" if file_expected else None


# -- the kernels: what replays a case file, what runs the directed vectors ----------------------
#
# ``replay(path, parameters)`` returns two thunks, (golden, rtl), run in that order (the RTL
# check compares with the golden outputs the first one computed); ``directed(parameters)``
# returns the RTL thunk of the directed vectors. Each thunk returns its column's detail and
# raises on a difference.


def _score_replay(path, parameters):
    from hw.kernels.score import ScoreKernel

    from .score.pysim import run_kernel
    from .score.vectors import case_batch, compare, golden_of_case

    batch, expected, table = case_batch(path)
    table = np.zeros(1, np.int64) if table is None else table
    kernel = ScoreKernel(**{key: value for key, value in parameters.items() if key != "probes"})

    def golden():
        golden_of_case(batch, expected, table, sort_width=kernel.sort_width)
        return f"{len(expected)} expected tensors bit-exact"

    def rtl():
        _no_problems(compare(batch, *run_kernel(kernel, batch, table)))
        return f"{batch.b} requests, tokens and gathered rows (H = {batch.h}) bit-exact"

    return golden, rtl


def _score_directed(parameters):
    from hw.kernels.score import ScoreSortPipeline

    from .score.pysim import run_pipeline
    from .score.vectors import compare, directed_batches, golden_outputs

    def rtl():
        batches = directed_batches(np.random.default_rng(DEFAULT_SEED),
                                   k=parameters["node_top_k"], w_max=parameters["max_tree_width"],
                                   count_width=parameters["count_width"], hot_size=1)
        for batch in batches:
            golden_outputs(batch, np.zeros(1, np.int64), sort_width=parameters["sort_width"])
        pipeline = ScoreSortPipeline(**{key: parameters[key] for key in (
            "node_top_k", "max_tree_width", "sort_width", "count_width", "stages_per_register")})
        results, _ = run_pipeline(pipeline, batches)
        at, problems = 0, []
        for batch in batches:
            problems += compare(batch, {name: value[at:at + batch.b]
                                        for name, value in results.items()})
            at += batch.b
        _no_problems(problems)
        return (f"{len(batches)} batches ({at} requests) bit-exact (the score + sort path; "
                "token remap and gather: the capture row)")

    return rtl


def _update_rtl(p, groups, golden) -> str:
    """``groups`` of ``(slot, state, request)`` through ``UpdateCumuDraftState`` in one
    simulation: per group the states loaded, the requests back to back, the slots dumped and
    compared with ``golden`` (the states after, in order) and the done records checked."""
    from .update_state.host import check_request, compare_states
    from .update_state.pysim import run_steps

    steps = []
    for group in groups:
        steps += [("load", slot, state) for slot, state, _ in group]
        steps.append(("requests", [(slot, request) for slot, _, request in group]))
        steps += [("dump", slot) for slot, _, _ in group]
    results, wanted = iter(run_steps(p, steps)), iter(golden)
    problems = []
    for group in groups:
        for _ in group:
            next(results)  # a load
        records, _ = next(results)
        for (slot, _, request), record in zip(group, records, strict=True):
            want = {"slot": slot, "dropped": check_request(p, request), "framing_error": 0,
                    "refused": 0}
            if record != want:
                problems.append(f"slot {slot}: done record {record}, expected {want}")
        for slot, _, _ in group:
            problems += compare_states(next(results), next(wanted), context=f"slot {slot}: ")
    _no_problems(problems)
    return f"{sum(map(len, groups))} requests, every state buffer dumped, bit-exact"


def _update_replay(path, parameters):
    from .update_state.host import compare_states, golden_apply, params_from
    from .update_state.vectors import read_update_case

    p = params_from(parameters)
    _, states, requests, expected = read_update_case(path)
    golden_states = []

    def golden():
        golden_states.extend(golden_apply(p, state, request)[0]
                             for state, request in zip(states, requests, strict=True))
        if expected is None:
            return None
        _no_problems([line for slot, (state, want) in enumerate(zip(golden_states, expected,
                                                                    strict=True))
                      for line in compare_states(state, want, context=f"slot {slot}: ")])
        return f"{len(expected)} requests x {len(expected[0])} state buffers bit-exact"

    def rtl():
        group = [(slot, state, request)
                 for slot, (state, request) in enumerate(zip(states, requests, strict=True))]
        return _update_rtl(p, [group], golden_states)

    return golden, rtl


def _update_directed(parameters):
    from .update_state.host import golden_apply, params_from
    from .update_state.vectors import directed_cases

    def rtl():
        p = params_from(parameters)
        cases = directed_cases(p, seed=DEFAULT_SEED)
        golden = [golden_apply(p, state, request)[0] for _, _, state, request in cases]
        _update_rtl(p, [[(slot, state, request)] for _, slot, state, request in cases], golden)
        return f"{len(cases)} directed cases, each on a freshly loaded slot, bit-exact"

    return rtl


def _work_deltas_replay(path, parameters):
    from .work_deltas.pysim import run_on_amaranth
    from .work_deltas.vectors import call_from_case, expected

    call, file_deltas, file_width = call_from_case(path)

    def golden():
        deltas, width = expected(call)
        in_file = {"work_deltas": None if file_deltas is None else file_deltas.view(np.uint32),
                   "next_tree_width": file_width}
        return _golden_matches({"work_deltas": deltas.view(np.uint32), "next_tree_width": width},
                               {name: np.atleast_1d(value).astype(np.int64)
                                for name, value in in_file.items() if value is not None})

    def rtl():
        run_on_amaranth(parameters, [call])
        return f"{call.batch_size} requests bit-exact"

    return golden, rtl


def _work_deltas_directed(parameters):
    from hw.kernels.work_deltas import WorkDeltasParams

    from .work_deltas.pysim import run_on_amaranth
    from .work_deltas.vectors import directed_calls

    def rtl():
        p = WorkDeltasParams(**parameters)
        calls = directed_calls(p.node_top_k, p.max_verify_num, (1 << p.batch_bits) - 1)
        run_on_amaranth(parameters, calls)
        return _calls_detail(calls)

    return rtl


def _calls_detail(calls) -> str:
    """``N calls (M requests) bit-exact`` (K5's calls are dicts: a request per temperature)."""
    requests = sum(len(call["temperatures"]) if isinstance(call, dict) else call.batch_size
                   for call in calls)
    return f"{len(calls)} calls ({requests} requests) bit-exact"


def _call_replay(kernel: str, *, golden_of: Callable, run: Callable):
    """``replay`` of a kernel whose package reads a case as ``call_from_case(path) ->
    (call, expected_* tensors)``: ``golden_of(call, parameters)`` gives the golden's outputs,
    ``run(parameters, calls)`` the RTL run (raising on a difference from the golden)."""
    def replay(path, parameters):
        from importlib import import_module

        call, file_expected = import_module(f"sim.{kernel}.vectors").call_from_case(path)

        def golden():
            return _golden_matches(golden_of(call, parameters), file_expected)

        def rtl():
            run(parameters, [call])
            return _calls_detail([call])

        return golden, rtl

    return replay


def _amaranth_runner(kernel: str) -> Callable:
    """``run_on_amaranth(parameters, calls)`` of ``sim/<kernel>/pysim.py``."""
    def run(parameters, calls, **options):
        from importlib import import_module

        import_module(f"sim.{kernel}.pysim").run_on_amaranth(parameters, calls, **options)

    return run


def _directed(run: Callable, make_calls: Callable, **options):
    """``directed`` of a kernel whose RTL runner takes ``(parameters, calls)``:
    ``make_calls(parameters)`` gives the directed calls."""
    def directed(parameters):
        def rtl():
            calls = make_calls(parameters)
            run(parameters, calls, **options)
            return _calls_detail(calls)

        return rtl

    return directed


def _tree_mask_golden(call, parameters):
    from .tree_mask.vectors import expected

    return expected(call, parameters["max_verify_num"])


def _tree_mask_calls(parameters):
    from .tree_mask.vectors import directed_calls

    return directed_calls(parameters["max_node_count"], parameters["max_verify_num"],
                          parameters["mask_lanes"])


def _verify_result_golden(call, parameters):
    from .verify_result.vectors import expected

    return expected(call)


def _verify_result_calls(parameters):
    from .verify_result.vectors import directed_calls

    return directed_calls(parameters["max_draft_tokens"], parameters["max_speculative_tokens"])


def _active_slots_golden(call, parameters):
    from .active_slots.vectors import expected

    return expected(call)


def _active_slots_calls(parameters):
    from .active_slots.vectors import directed_calls

    return directed_calls(parameters["max_batch_size"])


def _logits_to_probas_calls(parameters):
    from .logits_to_probas.vectors import directed_calls

    return directed_calls(parameters["lanes"], parameters["max_vocab_size"])


def _reject_sample_run(parameters, calls, **options):
    from hw.kernels.reject_sample import RejectSample

    from .reject_sample.pysim import run_on_amaranth

    run_on_amaranth(RejectSample(**parameters), calls, **options)


def _reject_sample_calls(parameters):
    from .reject_sample.generators import directed_calls

    return directed_calls(parameters["lanes"], parameters["max_nodes"], parameters["max_steps"])


def _tree_verify_run(parameters, calls, **options):
    from hw.kernels.tree_verify import TreeVerify

    from .tree_verify.pysim import run_on_amaranth

    run_on_amaranth(TreeVerify(**parameters), calls, **options)


def _tree_verify_calls(parameters):
    from . import tree_verify
    from .tree_verify.generators import directed_calls

    return directed_calls(max_nodes=parameters["max_nodes"], max_steps=parameters["max_steps"],
                          max_vocab=min(tree_verify.TARGET.config["max_vocab"],
                                        parameters["max_vocab_size"]),
                          logit_format=parameters["logit_format"])


def _tree_verify_replay(path, parameters):
    from .tree_verify.cases import call_from_case
    from .tree_verify.results import expected

    call = call_from_case(path)

    def golden():
        return _golden_matches(expected(call), call.notes.get("expected", {}))

    def rtl():
        # The testbench's `case` phase: memory latency 1..8 clocks.
        _tree_verify_run(parameters, [call], latency=(1, 8))
        return _calls_detail([call])

    return golden, rtl


@dataclass(frozen=True)
class Kernel:
    """A P0 kernel of the matrix: its simulation target, the op it implements, the component
    the RTL runs are on, how a case file replays (None: no case files), how its directed
    vectors run, and its example case file (None: none in its package)."""

    target: str
    op: str
    component: str
    replay: Callable | None
    directed: Callable
    vectors: str
    example: Path | None = None
    directed_component: str | None = None  # where the directed vectors run on a part of it


_SIM = REPO_ROOT / "sim"


def _call_kernel(target: str, op: str, component: str, *, golden_of: Callable,
                 make_calls: Callable) -> Kernel:
    """A kernel whose package has ``vectors.call_from_case``, ``vectors.directed_calls``,
    ``pysim.run_on_amaranth(parameters, calls)`` and ``example_case.txt``."""
    run = _amaranth_runner(target)
    return Kernel(target, op, component, _call_replay(target, golden_of=golden_of, run=run),
                  _directed(run, make_calls), f"sim/{target}/vectors.py: directed_calls",
                  _SIM / target / "example_case.txt")


#: The P0 kernels in the order of a round: K1 to K7, the fused K5+K6 verify after K6.
KERNELS = {kernel.target: kernel for kernel in (
    Kernel("score", "K1 draft_tree_layer_score_index_gen_op", "ScoreKernel", _score_replay,
           _score_directed, "sim/score/vectors.py: directed_batches",
           directed_component="ScoreSortPipeline (of ScoreKernel)"),
    Kernel("update_state", "K2 update_cumu_draft_state", "UpdateCumuDraftState",
           _update_replay, _update_directed, "sim/update_state/vectors.py: directed_cases"),
    Kernel("work_deltas", "K3 calculate_work_deltas + width policy", "WorkDeltas",
           _work_deltas_replay, _work_deltas_directed,
           "sim/work_deltas/vectors.py: directed_calls"),
    _call_kernel("tree_mask", "K4 fused_tree_mask_operator", "TreeMask",
                 golden_of=_tree_mask_golden, make_calls=_tree_mask_calls),
    Kernel("logits_to_probas", "K5 convert_logits_to_probas", "LogitsToProbas", None,
           _directed(_amaranth_runner("logits_to_probas"), _logits_to_probas_calls),
           "sim/logits_to_probas/vectors.py: directed_calls"),
    Kernel("reject_sample", "K6 draft_tree_reject_sample (+ verify_tree_greedy)",
           "RejectSample", None,
           # The testbench's `directed` phase: memory latency 1..4 clocks.
           _directed(_reject_sample_run, _reject_sample_calls, latency=(1, 4)),
           "sim/reject_sample/generators.py: directed_calls"),
    Kernel("tree_verify", "K5+K6 fused verify (tree_speculative_sampling_from_logits)",
           "TreeVerify", _tree_verify_replay, _directed(_tree_verify_run, _tree_verify_calls),
           "sim/tree_verify/generators.py: directed_calls",
           _SIM / "tree_verify" / "example_case.txt"),
    _call_kernel("verify_result", "K7 update_verify_result", "VerifyResult",
                 golden_of=_verify_result_golden, make_calls=_verify_result_calls),
    _call_kernel("active_slots", "K7 active-slot compaction", "ActiveSlots",
                 golden_of=_active_slots_golden, make_calls=_active_slots_calls),
)}

#: The kernel that replays each file of ``golden/captures`` / ``../shared/goldens`` (by stem),
#: and what the file is.
CAPTURE_KERNELS = {
    "cost_draft_tree_score_case": ("score", "CUDA capture"),
    "cost_draft_tree_update_case": ("update_state", "CUDA capture"),
    "work_deltas_example_case": ("work_deltas", "case file"),
}


# -- rows ----------------------------------------------------------------------------------------

@dataclass
class Row:
    """One row of the matrix: ``case`` (the ``--case`` name, unique per kernel), what it is,
    the files it reads (``sources``, shown relative to the repository), and after ``run`` the
    two columns, the hardware build and the seconds it took."""

    kernel: str
    case: str
    kind: str
    sources: list[str]
    path: Path | None = None  # the case file replayed (None: directed vectors)
    golden: Check | None = None
    rtl: Check | None = None
    build: str = ""
    seconds: float = 0.0
    problem: str = ""  # set when the row cannot run at all (e.g. a file no kernel replays)

    @property
    def ok(self) -> bool:
        return self.golden is not None and self.rtl is not None and \
            False not in (self.golden.ok, self.rtl.ok) and (self.golden.ok or self.rtl.ok)

    @property
    def command(self) -> str:
        return f"{COMMAND} --kernel {self.kernel} --case {self.case}"


def _shown(path: Path) -> str:
    path = Path(os.path.abspath(path))
    if path.is_relative_to(REPO_ROOT):
        return str(path.relative_to(REPO_ROOT))
    if path.is_relative_to(REPO_ROOT.parent):
        return "../" + str(path.relative_to(REPO_ROOT.parent))
    return str(path)


def _capture_files(captures: Path, shared: Path) -> list[tuple[str, Path, list[str]]]:
    """``(stem, path, sources)`` per distinct capture file: the ``*.txt`` of ``captures``,
    then those of ``shared`` whose bytes no file of ``captures`` has (``sources`` names every
    copy)."""
    found: dict[bytes, tuple[str, Path, list[str]]] = {}
    for folder in (captures, shared):
        for path in sorted(folder.glob("*.txt")) if folder.is_dir() else ():
            entry = found.setdefault(path.read_bytes(), (path.stem, path, []))
            entry[2].append(_shown(path))
    return list(found.values())


def rows(*, captures: Path = CAPTURES_DIR, shared: Path = SHARED_GOLDENS) -> list[Row]:
    """Every row of the matrix (not run), kernels in ``KERNELS`` order."""
    by_kernel: dict[str, list[Row]] = {name: [] for name in KERNELS}
    orphans = []
    for stem, path, sources in _capture_files(captures, shared):
        kernel, kind = CAPTURE_KERNELS.get(stem, (None, "case file"))
        # A file of ../shared/goldens with bytes of its own: named apart from its namesake.
        case = stem if path.parent == captures else f"shared-{stem}"
        row = Row(kernel or "–", case, kind, sources, path)
        if kernel is None:
            row.problem = ("no P0 kernel replays this file: name it in "
                           "sim.parity.CAPTURE_KERNELS")
            orphans.append(row)
        else:
            by_kernel[kernel].append(row)
    for name, kernel in KERNELS.items():
        if kernel.example is not None:
            by_kernel[name].append(Row(name, "example_case", "case file",
                                       [_shown(kernel.example)], kernel.example))
        by_kernel[name].append(Row(name, "directed", "directed vectors", [kernel.vectors]))
    return [row for group in by_kernel.values() for row in group] + orphans


def _build(component: str, parameters: dict, defaults: dict) -> str:
    """The hardware of a row: the component and the build parameters that differ from
    ``make sim``'s."""
    changed = {key: value for key, value in parameters.items() if defaults.get(key) != value}
    what = ", ".join(f"{key}={value}" for key, value in changed.items())
    return f"{component}, make-sim build" + (f" with {what}" if what else "")


def run_row(row: Row, targets: dict) -> Row:
    """Run ``row`` (golden first, then RTL); fills its columns, build and seconds."""
    start = time.monotonic()
    if row.problem:
        row.golden = row.rtl = Check(False, row.problem)
        return row
    kernel, target = KERNELS[row.kernel], targets[row.kernel]
    try:
        if row.path is None:
            parameters = dict(target.parameters)
            golden, rtl = None, kernel.directed(parameters)
        else:
            parameters = target.case_parameters(Path(row.path).resolve(), dict(target.parameters))
            golden, rtl = kernel.replay(row.path, parameters)
    except Exception as error:  # noqa: BLE001 -- a case no build replays fails its row
        row.golden = row.rtl = _failure(error)
        row.seconds = time.monotonic() - start
        return row
    component = kernel.component if golden or not kernel.directed_component \
        else kernel.directed_component
    row.build = _build(component, parameters, target.parameters)
    row.golden = Check(None, "reference") if golden is None else _checked(golden)
    row.rtl = _checked(rtl)
    row.seconds = time.monotonic() - start
    return row


def run_rows(selected: list[Row], *, log=print) -> list[Row]:
    """Run every row of ``selected`` in order, with a progress line per row."""
    targets = discover_targets()
    for index, row in enumerate(selected, 1):
        log(f"[{index}/{len(selected)}] {row.kernel} {row.case} ({row.kind}) ...")
        run_row(row, targets)
        log(f"    {'PASS' if row.ok else 'FAIL'} in {row.seconds:.1f} s: golden "
            f"{row.golden.cell}; RTL {row.rtl.cell}")
    return selected


# -- the report ----------------------------------------------------------------------------------

def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(done: list[Row], *, seconds: float, command: str, load: str = "") -> str:
    """The Markdown report of the rows ``done`` (run), generated by ``command`` in
    ``seconds``."""
    failed = [row for row in done if not row.ok]
    minutes = f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"
    lines = [
        "# P0 parity matrix",
        "",
        f"Generated by `{command}` (`sim/parity.py`; `make report` runs it): {len(done)} rows, "
        f"{len(done) - len(failed)} pass, {len(failed)} fail. Generation took {minutes} wall "
        f"time here{load}: every row ran its golden model and its RTL in that run. "
        "Each row's last column reruns it alone.",
        "",
        "* **golden**: the golden model (`golden/`) on the case's inputs equals the file's "
        "`expected_*` tensors bit for bit (float32 by bit pattern); for directed vectors the "
        "golden is the reference (there is nothing else to compare it with): n/a.",
        "* **RTL**: the kernel's hardware, simulated in this run on Amaranth's simulator by the "
        "runner of its unit tests (`sim/<kernel>/pysim.py`), equals the golden bit for bit "
        "(every output tensor, done records and dumps included). The build is the one of "
        "`make sim KERNEL=<kernel>`, raised where a case needs more (`case_parameters`, as "
        "`make sim KERNEL=<kernel> CASE=<file>` does); the same case files replay under "
        "Verilator with that command.",
        "* **result**: PASS when no column fails. Captures: `golden/captures` holds copies of "
        f"`{_shown(SHARED_GOLDENS)}`; a file there with the same bytes shares the row.",
        "",
        "| kernel | op | case | kind | source | golden == expected | RTL == golden | RTL build "
        "| result | s | reproduce |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | ---: | --- |",
    ]
    for row in done:
        op = KERNELS[row.kernel].op if row.kernel in KERNELS else "–"
        lines.append("| " + " | ".join(_cell(text) for text in (
            f"`{row.kernel}`", op, row.case, row.kind,
            " = ".join(f"`{source}`" for source in row.sources), row.golden.cell, row.rtl.cell,
            row.build or "–", "PASS" if row.ok else "**FAIL**", f"{row.seconds:.1f}",
            f"`{row.command}`")) + " |")
    missing = [name for name, kernel in KERNELS.items()
               if not any(row.kernel == name and row.path is not None for row in done)]
    if missing and len({row.kernel for row in done}) == len(KERNELS):
        lines += ["", "Kernels with no case file in the repository (directed vectors only): "
                  + ", ".join(f"`{name}`" for name in missing) + "."]
    lines += ["", "Not in the matrix: the random vectors (the `random` phases of "
              "`make sim KERNEL=<kernel>` and `make check`, under Verilator with random idle and "
              "back-pressure) and the engine, which runs these kernels behind its commands "
              "(`make sim KERNEL=dataflow [CASE=sim/dataflow/example_case.txt]`)."]
    return "\n".join(lines) + "\n"


def _load() -> str:
    try:
        one, _, _ = os.getloadavg()
    except OSError:
        return ""
    return f" ({os.cpu_count()} CPUs, load average {one:.1f} at the start)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", action="append", metavar="NAME", choices=list(KERNELS),
                        help="only this kernel's rows (repeatable)")
    parser.add_argument("--case", action="append", metavar="NAME",
                        help="only the rows of this case (repeatable; see --list)")
    parser.add_argument("--out", type=Path, help=f"the report (default: {_shown(REPORT)} "
                        "for the whole matrix; a selection writes none without --out)")
    parser.add_argument("--list", action="store_true", help="list the rows and exit")
    return parser


def main(argv=None, *, log=print) -> int:
    args = build_parser().parse_args(argv)
    every = rows()
    selected = [row for row in every
                if (args.kernel is None or row.kernel in args.kernel)
                and (args.case is None or row.case in args.case)]
    if not selected:
        asked = " ".join([*(f"--kernel {name}" for name in args.kernel or ()),
                          *(f"--case {name}" for name in args.case or ())])
        print(f"{COMMAND}: error: no row matches {asked} (see {COMMAND} --list)",
              file=sys.stderr)
        return 2
    if args.list:
        for row in selected:
            log(f"{row.command}    # {row.kind}: {', '.join(row.sources)}")
        return 0
    whole = len(selected) == len(every)
    out = args.out or (REPORT if whole else None)
    command = " ".join([COMMAND, *(argv if argv is not None else sys.argv[1:])])
    load, start = _load(), time.monotonic()
    run_rows(selected, log=log)
    text = render(selected, seconds=time.monotonic() - start, command=command, load=load)
    failed = [row for row in selected if not row.ok]
    if out is None:
        log(text)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        log(f"wrote {_shown(out)}")
    log(f"{len(selected) - len(failed)} of {len(selected)} rows pass"
        + (f"; failing: {', '.join(f'{r.kernel}/{r.case}' for r in failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
