"""``python -m bench.gpu draft``: the draft side at every point, checked and timed.

Per point: the golden draft round and the device round (``bench.gpu.draft_round``); the
device round run once from ``begin_round`` and every depth's K1, K2 and K3 outputs compared
with the golden's depth records (bit-exact: scores by bit pattern, indices, tokens, the fp16
hidden rows, mask rows, ``work_deltas``), then the final cumulative tree. Timed eager and as
CUDA graphs: each kernel at each depth (``score_d1``, ``update_state_d1``,
``work_deltas_d1``, ...), each whole depth with its glue (``depth_d1``) and the whole round
(``draft_round``: ``begin_round`` and every depth, one graph per round).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .checks import Check, exact
from .csvio import MAX_COV, medians, op_sections, read_csv
from .draft_round import DeviceRound, draft_inputs
from .engine import engine_round
from .runner import run_side, time_ops
from .timing import Timer

__all__ = ["check_round", "op_bytes", "run_draft", "render_summary"]

_K1 = {"curr": "curr_layer_scores", "sorted_s": "sort_layer_scores",
       "sorted_i": "sort_layer_indices", "tokens": "topk_tokens",
       "cache": "cache_topk_indices", "parents": "parent_indices_in_layer"}
_STATE = ("cumu_tokens", "cumu_scores", "cumu_deltas", "prev_indexs", "next_indexs",
          "side_indexs", "sort_scores", "work_scores")


def _host(tensor: torch.Tensor) -> np.ndarray:
    return tensor.cpu().numpy()


def _check_depth(device: DeviceRound, d: int) -> list[Check]:
    """Depth ``d``: run it and compare K1, K2 and K3 with the golden's record."""
    rec, out = device.records[d], device.depth_out[d]
    device.depth(d)
    tag = f"depth {rec.depth}"
    k1 = {golden: getattr(rec, golden) for golden in _K1.values()}
    k1["output_hidden_states"] = rec.output_hidden_states.astype(np.float16)
    got = {_K1[name]: _host(out[name]) for name in _K1}
    got["output_hidden_states"] = _host(out["hidden"])
    state = device.state
    k2 = {"output_scores": rec.output_scores, "output_tokens": rec.output_tokens,
          "output_tree_mask": rec.output_tree_mask}
    return [exact(f"score_d{rec.depth}", k1, got, f"vs golden K1 ({tag}, fp16 hidden, "
                                                   "hot_token_id remap)"),
            exact(f"update_state_d{rec.depth}", k2, {name: _host(state[name]) for name in k2},
                  f"vs golden K2 ({tag})"),
            exact(f"work_deltas_d{rec.depth}", {"work_deltas": rec.work_deltas},
                  {"work_deltas": _host(out["deltas"])}, f"vs golden K3 ({tag})")]


def check_round(device: DeviceRound) -> list[Check]:
    """The device round from ``begin_round``, depth by depth, then its final state, against
    the golden round."""
    device.begin_round()
    checks = []
    for d in range(len(device.records)):
        checks += _check_depth(device, d)
    result = device.inputs.result
    checks.append(exact("draft_round", {name: getattr(result, name) for name in _STATE},
                        {name: _host(device.state[name]) for name in _STATE},
                        "final cumulative tree, sort_scores, work_scores vs golden round"))
    return checks


def op_bytes(device: DeviceRound, d: int) -> dict[str, int]:
    """Bytes per call of depth ``d``'s kernels, from tensor sizes (what each reads and
    writes): K1 the candidates, scores, tokens (remap read and write, table lookups) and the
    K hidden rows read and written; K2 its inputs, the appends, outputs, the mask rows copied
    and the best lists; K3 every request's best list and the K outputs."""
    cfg, rec = device.cfg, device.records[d]
    b, k, h = cfg.batch_size, cfg.node_top_k, cfg.hidden_size
    n, w = rec.tree_width * k, rec.tree_width
    v = min(max(cfg.verify_num, 1), cfg.max_verify_num)
    ws0, ws1 = min(v, rec.cumu_count), min(v, rec.cumu_count + n)
    mask_cols = max(rec.input_count - 1, 0)
    k1 = b * (n * (4 + 8 * 3) + w * 4 + n * (4 + 4 + 8) + k * 8 * 2 + k * h * 2 * 2)
    k2 = b * (n * (4 + 8 + 4 + 8) + k * 8 + w * 8 + 2 * k * mask_cols
              + n * (8 * 5 + 4) + k * (4 + 8) + (ws0 + k) * 4 + ws0 * 4 + ws1 * 4)
    k3 = b * (ws0 + k) * 4 + (k + 1) * 4
    return {"score": k1, "update_state": k2, "work_deltas": k3}


def _ops(device: DeviceRound) -> list[tuple[str, object, int]]:
    """(name, call, bytes) of every op timed: per depth the three kernels and the depth, and
    the whole round."""
    ops, total = [], 0
    for d, rec in enumerate(device.records):
        node_ids, scores, mask, count = device.frontier(d)
        sizes = op_bytes(device, d)
        depth_bytes = sum(sizes.values())
        total += depth_bytes
        ops += [(f"score_d{rec.depth}", lambda d=d, s=scores: device.k1(d, s), sizes["score"]),
                (f"update_state_d{rec.depth}",
                 lambda d=d, i=node_ids, m=mask, c=count: device.k2(d, i, m, c),
                 sizes["update_state"]),
                (f"work_deltas_d{rec.depth}", lambda d=d: device.k3(d), sizes["work_deltas"]),
                (f"depth_d{rec.depth}", lambda d=d: device.depth(d), depth_bytes)]
    ops.append(("draft_round", device.run, total))
    return ops


def _point(inputs, timer: Timer, env: dict) -> tuple[list[Check], list[dict]]:
    """Check the device round of a point's golden round depth by depth, then time its ops."""
    device = DeviceRound(inputs, timer.device)
    checks = check_round(device)
    return checks, time_ops(timer, inputs.point["id"], env, _ops(device))


def run_draft(points: list[dict], timer: Timer, seed: int, csv_path: Path, md_path: Path,
              command: str, *, workers: int = 0, log=print) -> bool:
    """Check and time every point; write the CSV and the summary (``bench.gpu.runner``; the
    golden rounds may be prepared in ``workers`` processes). Returns whether every check
    passed."""
    return run_side("draft", points, timer, seed, csv_path, md_path, command, draft_inputs,
                    lambda inputs, env: _point(inputs, timer, env), render_summary,
                    workers=workers, log=log)


# --- the summary -----------------------------------------------------------------------------


def depth_sums(figures: dict, point: str, mode: str) -> dict[str, float] | None:
    """Per kernel, the sum over the depths of its median µs at ``point`` (None if absent)."""
    sums: dict[str, float] = {}
    for (p, op, m), fig in figures.items():
        if p == point and m == mode and "_d" in op and not op.startswith("depth_"):
            kernel = op.rsplit("_d", 1)[0]
            sums[kernel] = sums.get(kernel, 0.0) + fig["us"]
    return sums or None


def render_summary(csv_path: Path, budget: dict) -> str:
    """``h100_draft_summary.md`` from the raw CSV and the cycle budget."""
    rows = read_csv(csv_path)
    figures = medians(rows)
    device = rows[0]["device"] if rows else "none"
    points = list(dict.fromkeys(r["point"] for r in rows if r["point"] != "-"))
    lines = ["# Draft side on the GPU: K1, K2, K3 per depth and the whole round", "",
             f"Generated by `python -m bench.gpu draft` from `{csv_path.name}` (one row per "
             f"run) and `reports/cycle_budget.json`. Device: **{device}**.", ""]
    if device == "cpu-validation":
        lines += ["**CPU validation run: these are not GPU figures.** The kernels ran under "
                  "`TRITON_INTERPRET=1` at small sizes to check them against the goldens.",
                  ""]
    lines += [f"Median µs (CoV gate {MAX_COV:.0%}). Kernels: the sum over the depths of each "
              "kernel's eager time; round: `begin_round` + every depth with its glue, eager "
              "and as one CUDA graph. Engine: `begin_round` + `draft_depth` cycles of the "
              "budget's `dataflow` row, at 300 MHz and at the clock the V80 netlist meets.", "",
              "| point | score (K1) | update_state (K2) | work_deltas (K3) | round eager | "
              "round graph | engine draft cycles | engine µs @300 | engine µs @met |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for point in points:
        sums = depth_sums(figures, point, "eager") or {}
        eager = figures.get((point, "draft_round", "eager"))
        graph = figures.get((point, "draft_round", "graph"))
        engine = engine_round(budget, point)
        cells = [point] + [f"{sums[k]:.1f}" if k in sums else "—"
                           for k in ("score", "update_state", "work_deltas")]
        cells += [f"{eager['us']:.1f}" if eager else "—", f"{graph['us']:.1f}" if graph else "—"]
        if engine:
            met = engine.met_clock_mhz
            cells += [f"{engine.draft:,}", f"{engine.us(engine.draft):.1f}",
                      f"{engine.us(engine.draft, met):.1f} ({met} MHz)" if met else "—"]
        else:
            cells += ["not measured"] * 3
        lines.append("| " + " | ".join(cells) + " |")
    lines += op_sections(figures, csv_path)
    lines += ["", "Reproduce: `python -m bench.gpu draft`, or `bash bench/gpu/run_on_device.sh` "
              "for the whole H100 run.", ""]
    return "\n".join(lines)
