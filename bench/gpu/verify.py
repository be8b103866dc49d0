"""``python -m bench.gpu verify``: the verify side at every point, checked and timed.

Per point: the inputs (``bench.gpu.verify_inputs``), every op run once on fresh buffers and
compared with its golden (``golden.tree_verify``, ``golden.reject_sample``,
``golden.tree_mask``), then every op and chain timed eager and (on a GPU) as a CUDA graph
(``bench.gpu.timing``), with the launch costs once per run. Writes the raw CSV (one row per
run, the checks in its header) and the summary (:func:`render_summary`, which
``python -m bench.gpu summary`` can also rebuild from the CSV alone).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from golden.reject_sample import tree_speculative_sampling_target_only, verify_tree_greedy
from golden.tree_mask import build_tree_kernel_efficient
from golden.tree_verify import reference_probabilities, tree_speculative_sampling_from_logits

from .checks import Check, exact, probabilities
from .csvio import MAX_COV, medians, op_sections, read_csv
from .engine import engine_round
from .runner import run_side, time_ops
from .timing import Timer
from .verify_inputs import VerifyInputs, verify_inputs
from .verify_ops import TOP_K, TOP_P, VerifyOps

__all__ = ["golden_walk", "prepare_point", "check_point", "run_verify", "render_summary"]

_OUTPUTS = ("predicts", "accept_index", "accept_token_num")


def _host(out: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {name: tensor.cpu().numpy() for name, tensor in out.items()}


def _fresh_numpy(inputs: VerifyInputs) -> dict[str, np.ndarray]:
    b, n, s = inputs.batch, inputs.nodes, inputs.call.steps
    return {"predicts": np.full(b * n, -1, np.int32),
            "accept_index": np.full((b, s), -1, np.int32),
            "accept_token_num": np.zeros(b, np.int32)}


def _tree_args(call):
    return (call.candidates, call.retrive_index, call.retrive_next_token,
            call.retrive_next_sibling)


def golden_walk(inputs: VerifyInputs) -> tuple[dict[str, np.ndarray], list[list[int]], int]:
    """The engine's golden (``tree_speculative_sampling_from_logits``) on the point: its
    outputs, the rows each request read and the number of children decided."""
    call, out, rows, traces = inputs.call, _fresh_numpy(inputs), [], []
    tree_speculative_sampling_from_logits(
        *out.values(), *_tree_args(call), call.uniform_samples,
        call.uniform_samples_for_final_sampling, call.target_logits, call.temperatures,
        rows_read=rows, traces=traces)
    return out, rows, sum(len(t["decisions"]) for t in traces)


def _visited_flat_rows(inputs: VerifyInputs, rows: list[list[int]]) -> list[int]:
    return [b * inputs.nodes + r for b, request in enumerate(rows) for r in request]


def _check_probabilities(ops: VerifyOps, flat_rows: list[int]) -> list[Check]:
    call = ops.inputs.call
    logits = call.target_logits.reshape(-1, ops.v)
    temps = np.repeat(call.temperatures, ops.n)
    label = f"{len(flat_rows)} visited rows"
    from .verify_ops import top_k_renorm, top_p_renorm

    checks = []
    for name, device, top_k, top_p in (
            ("softmax", ops.probs, 0, 1.0),
            ("top_k_renorm", top_k_renorm(ops.probs, TOP_K), TOP_K, 1.0),
            ("top_p_renorm", top_p_renorm(ops.probs, TOP_P), 0, TOP_P)):
        got = device[flat_rows].cpu().numpy()
        ref = np.stack([reference_probabilities(logits[r], float(temps[r]), top_k, top_p)
                        for r in flat_rows])
        checks.append(probabilities(name, ref, got, label))
    return checks


def _check_sampling(ops: VerifyOps) -> Check:
    call = ops.inputs.call
    probs = ops.probs.cpu().numpy().reshape(ops.b, ops.n, ops.v)
    golden, golden_draft = _fresh_numpy(ops.inputs), np.zeros_like(probs)
    tree_speculative_sampling_target_only(*golden.values(), *_tree_args(call),
                                          call.uniform_samples,
                                          call.uniform_samples_for_final_sampling, probs,
                                          golden_draft)
    out, draft = ops.fresh_outputs(), ops.draft_zero()
    ops.tree_sampling(ops.probs, draft, out)
    device = {**_host(out), "draft_probs": draft.cpu().numpy().reshape(probs.shape)}
    return exact("tree_sampling", {**golden, "draft_probs": golden_draft}, device,
                 "vs golden tree_speculative_sampling_target_only on the device's probs")


def _check_greedy(ops: VerifyOps) -> list[Check]:
    call = ops.inputs.call
    argmax = call.target_logits.reshape(-1, ops.v).argmax(axis=1).astype(np.int64)
    device_argmax = ops.argmax()
    checks = [exact("argmax", {"target_predict": argmax},
                    {"target_predict": device_argmax.cpu().numpy()}, "vs numpy argmax")]
    golden = _fresh_numpy(ops.inputs)
    verify_tree_greedy(*golden.values(), *_tree_args(call), argmax)
    out = ops.fresh_outputs()
    ops.greedy(device_argmax, out)
    checks.append(exact("verify_tree_greedy", golden, _host(out), "vs golden"))
    return checks


def _check_build_tree(ops: VerifyOps) -> Check:
    tree, n = ops.inputs.tree, ops.n
    out = ops.fresh_tree_outputs()
    golden = {name: tensor.cpu().numpy().copy() for name, tensor in out.items()}
    build_tree_kernel_efficient(tree.parent_list, tree.selected_index, tree.verified_seq_len,
                                *golden.values(), tree.topk, tree.depth, n, tree.mode)
    ops.build_tree(out)
    device = _host(out)
    if tree.mode != 2:
        golden["tree_mask"] = golden["tree_mask"].astype(np.uint8)
        device["tree_mask"] = device["tree_mask"].astype(np.uint8)
    return exact("build_tree", golden, device,
                 f"vs golden build_tree_kernel_efficient (mode {tree.mode})")


def check_point(ops: VerifyOps, golden: dict[str, np.ndarray],
                rows: list[list[int]]) -> list[Check]:
    """Every verify op of the point against its golden (see the module)."""
    checks = _check_probabilities(ops, _visited_flat_rows(ops.inputs, rows))
    checks.append(_check_sampling(ops))
    checks += _check_greedy(ops)
    checks.append(_check_build_tree(ops))
    out = ops.fresh_outputs()
    ops.visited_rows(out)
    checks.append(exact("visited_rows", golden, _host(out),
                        "vs golden tree_speculative_sampling_from_logits (fixed-point "
                        "probabilities; a coin within 1e-6 of a threshold may differ)"))
    return checks


def prepare_point(point: dict, seed: int):
    """The host side of a point (a worker process may run it): the inputs and the engine's
    golden walk on them."""
    inputs = verify_inputs(point, seed)
    return (inputs, *golden_walk(inputs))


def _point(prepared, timer: Timer, env: dict) -> tuple[list[Check], list[dict]]:
    """Check every op of a prepared point, then time the ops and the chains."""
    inputs, golden, read, decisions = prepared
    ops = VerifyOps(inputs, timer.device)
    checks = check_point(ops, golden, read)
    op_list = ops.ops(sum(len(r) for r in read), decisions)
    chains = ops.chains({op.name: op.bytes for op in op_list})
    rows = time_ops(timer, inputs.point["id"], env,
                    [(op.name, op.fn, op.bytes) for op in op_list + chains])
    return checks, rows


def run_verify(points: list[dict], timer: Timer, seed: int, csv_path: Path, md_path: Path,
               command: str, *, workers: int = 0, log=print) -> bool:
    """Check and time every point; write the CSV and the summary (``bench.gpu.runner``).
    Returns whether every check passed."""
    return run_side("verify", points, timer, seed, csv_path, md_path, command, prepare_point,
                    lambda prepared, env: _point(prepared, timer, env), render_summary,
                    workers=workers, log=log)


# --- the summary -----------------------------------------------------------------------------


def _cell(figure: dict | None) -> str:
    if figure is None:
        return "—"
    mark = "" if figure["gate"] == "ok" else " (CoV miss)"
    rerun = f" r{figure['attempts']}" if figure["attempts"] > 1 else ""
    return f"{figure['us']:.1f}{mark}{rerun}"


def _engine_cells(budget: dict, point: str) -> list[str]:
    engine = engine_round(budget, point)
    if engine is None:
        return ["not measured"] * 3
    met = engine.met_clock_mhz
    return [f"{engine.verify:,}", f"{engine.us(engine.verify):.1f}",
            f"{engine.us(engine.verify, met):.1f} ({met} MHz)" if met else "no verdict"]


VERIFY_COLUMNS = ("sglang_chain", "sglang_chain_renorm", "greedy_chain", "visited_rows")


def render_summary(csv_path: Path, budget: dict) -> str:
    """``h100_verify_summary.md`` from the raw CSV and the cycle budget."""
    rows = read_csv(csv_path)
    figures = medians(rows)
    device = rows[0]["device"] if rows else "none"
    points = sorted({r["point"] for r in rows if r["point"] != "-"},
                    key=lambda p: [int(x[1:]) if x[1:].isdigit() else x for x in p.split("-")])
    lines = ["# Verify side on the GPU: SGLang's chain, the visited-rows kernel, the engine",
             "", f"Generated by `python -m bench.gpu verify` from `{csv_path.name}` (one row "
             f"per run) and `reports/cycle_budget.json`. Device: **{device}**.", ""]
    if device == "cpu-validation":
        lines += ["**CPU validation run: these are not GPU figures.** The kernels ran under "
                  "`TRITON_INTERPRET=1` at small sizes to check them against the goldens; "
                  "the timing code ran with a wall-clock timer. The H100 figures come from "
                  "`bench/gpu/run_on_device.sh`.", ""]
    lines += ["Median µs per call over the kept runs (eager / CUDA graph); `rN`: met the "
              f"{MAX_COV:.0%} CoV gate on attempt N; engine: the `verify` command's cycles "
              "from the budget's `dataflow` row at 300 MHz and at the clock the V80 netlist "
              "meets.", ""]
    header = ["point"] + [f"{op} eager / graph" for op in VERIFY_COLUMNS] + [
        "engine verify cycles", "engine µs @300", "engine µs @met"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for point in points:
        cells = [point]
        for op in VERIFY_COLUMNS:
            eager = figures.get((point, op, "eager"))
            graph = figures.get((point, op, "graph"))
            cells.append(f"{_cell(eager)} / {_cell(graph)}")
        cells += _engine_cells(budget, point)
        lines.append("| " + " | ".join(cells) + " |")
    lines += op_sections(figures, csv_path)
    lines += ["", "Reproduce: `python -m bench.gpu verify` (all points; `--points serving-b8` "
              "for some), or `bash bench/gpu/run_on_device.sh` for the whole H100 run.", ""]
    return "\n".join(lines)
