"""``reports/fpga_vs_h100_summary.md``: the whole round on the GPU against the engine.

Built by ``python -m bench.gpu summary`` (``make report`` runs it) from whatever GPU CSVs exist
(``reports/h100_verify_raw.csv``, ``reports/h100_draft_raw.csv``; ``cpu-validation`` rows are
never used) and the cycle budget (``reports/cycle_budget.json``). Every figure names its
source: a CSV op (median of its runs), a budget row, a stated assumption (:data:`LINKS`) or a
cited publication (:data:`PUBLISHED`). A GPU figure that was not measured is written
``MISSING`` and listed at the top; an engine figure the budget lacks (B = 32, 128) is
``not measured``. Needs neither torch nor a GPU.

The round: draft (``begin_round`` + every depth), the verify-tree build and the verify.
GPU, SGLang's chain: ``draft_round`` + ``build_tree`` + ``sglang_chain`` (CUDA graphs); the
best GPU variant: ``draft_round`` + ``build_tree`` + ``visited_rows``. Engine: the budget's
``dataflow`` cycles at 300 MHz and at the clock the netlist meets, in two scenarios for where
the target logits and the draft top-K live: (a) in the card's memory, (b) on the GPU, moved
over PCIe (:func:`pcie_us`): per depth the draft top-K in and the frontier out, the verify
tree out, every visited logits row in (each row a dependent transfer) and the results out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .csvio import medians, read_csv
from .engine import engine_round, load_budget
from .points import gpu_points

__all__ = ["LINKS", "PUBLISHED", "Link", "pcie_transfers", "pcie_us", "render", "write_summary"]


@dataclass(frozen=True)
class Link:
    """A host link: name, raw and assumed effective bandwidth (GB/s), and the latency of one
    dependent transfer (µs)."""

    name: str
    raw_gbps: float
    effective_gbps: float
    latency_us: float


#: The links of scenario (b). Raw: PCIe Gen4 16 GT/s and Gen5 32 GT/s per lane, 128b/130b
#: coding; both give about 31.5 GB/s per direction. Effective bandwidth (80 % of raw, DMA and
#: TLP overheads) and the 1 µs per dependent transfer (a DMA round trip issued after the
#: previous one completes) are this report's assumptions, not measurements.
LINKS = (Link("PCIe Gen4 x16", 31.5, 25.2, 1.0), Link("PCIe Gen5 x8", 31.5, 25.2, 1.0))

#: Published figures the ITL table uses (with their source).
PUBLISHED = {
    "source": "https://docs.sglang.io/advanced_features/speculative_decoding.html",
    "what": "SGLang, LLaMA-3.1-8B-Instruct (Llama 3 vocabulary, V = 128,256), MT-bench, "
            "1x H100, batch 1 (the page's 'Performance Highlights')",
    "baseline_tps": 158.34, "eagle2_tps": 244.10, "eagle3_tps": 373.25,
    "tau_source": "EAGLE-2 (Li et al. 2024, arXiv:2406.16858): about 4 to 5.5 tokens per "
                  "round on LLaMA3-Instruct / MT-bench (as reports/end_to_end.md cites)",
    "tau": 4.0,
}

_SIDES = {"verify": "h100_verify_raw.csv", "draft": "h100_draft_raw.csv"}
_SGLANG = (("draft", "draft_round"), ("verify", "build_tree"), ("verify", "sglang_chain"))
_BEST = (("draft", "draft_round"), ("verify", "build_tree"), ("verify", "visited_rows"))


def _figures(reports: Path) -> tuple[dict, dict[str, str]]:
    """``(side, point, op, mode) -> median µs`` of the GPU rows, and per side the CSV's state
    (``present``, ``absent``, or ``CPU validation only``)."""
    figures, state = {}, {}
    for side, name in _SIDES.items():
        path = reports / name
        if not path.exists():
            state[side] = "absent"
            continue
        rows = read_csv(path, gpu_only=True)
        state[side] = "present" if rows else "CPU validation only (no GPU rows)"
        figures.update({(side, *key): fig["us"] for key, fig in medians(rows).items()})
    return figures, state


def _round(figures: dict, point: str, parts, mode: str = "graph") -> float | None:
    values = [figures.get((side, point, op, mode)) for side, op in parts]
    return None if any(v is None for v in values) else sum(values)


def pcie_transfers(budget: dict, point: str) -> tuple[int, int] | None:
    """``(dependent transfers, bytes)`` of scenario (b) at ``point`` from the budget's engine
    row: per depth the draft top-K in (``draft_depth`` reads) and the frontier out (its
    result writes), the verify tree out (``build_verify`` result and mask writes), each
    visited logits row in (``rows_read``, bytes from the verify's logits ports) and the results
    out (the verify's result writes); None when the budget has no engine row there."""
    for row in budget["rows"]:
        if row["kernel"] == "dataflow" and row["point"] == point and row.get("commands"):
            c = row["commands"]
            depths = c["draft_depth"]["count"]
            draft = c["draft_depth"]["ports"]
            build = c["build_verify"]["ports"]
            verify = c["verify"]["ports"]
            nbytes = (draft["read"] + draft["result_write"] + build["result_write"]
                      + build["mask_write"] + verify["logits0"] + verify["logits1"]
                      + verify["result_write"])
            return 2 * depths + 1 + row["rows_read"] + 1, nbytes
    return None


def pcie_us(transfers: int, nbytes: int, link: Link) -> float:
    """Time of ``transfers`` dependent transfers moving ``nbytes`` over ``link`` (µs)."""
    return transfers * link.latency_us + nbytes / (link.effective_gbps * 1e3)


def _us(value: float | None, missing: str = "MISSING") -> str:
    return missing if value is None else f"{value:,.1f}"


def _verdict(gpu: float | None, engine: float | None) -> str:
    if gpu is None or engine is None:
        return "—"
    return (f"engine {gpu / engine:.2f}x faster" if engine < gpu
            else f"GPU {engine / gpu:.2f}x faster")


def _missing(figures: dict, state: dict, points: list[str]) -> list[str]:
    lines = []
    for side, name in _SIDES.items():
        if state[side] != "present":
            lines.append(f"- `reports/{name}`: {state[side]} — every {side}-side GPU figure "
                         "is MISSING.")
    ops = sorted({(side, op) for side, op in _SGLANG + _BEST if state[side] == "present"})
    for side, op in ops:
        absent = [p for p in points if (side, p, op, "graph") not in figures]
        if absent:
            lines.append(f"- `{op}` (graph) has no row at {len(absent)} points: "
                         f"{', '.join(absent)}")
    return lines


def _round_table(figures: dict, budget: dict, points: list[str]) -> list[str]:
    header = ["point", "GPU SGLang round", "GPU best round", "engine cycles",
              "(a) engine @300", "(a) engine @met", "(b) transfers / bytes",
              f"(b) engine + {LINKS[0].name} @300", "(b) @met", "(a) @met vs SGLang round",
              "(b) @met vs best GPU round"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 3) + "---|---|"]
    for point in points:
        engine = engine_round(budget, point)
        sglang, best = _round(figures, point, _SGLANG), _round(figures, point, _BEST)
        a300 = engine.us(engine.total) if engine else None
        amet = engine.us(engine.total, engine.met_clock_mhz) if engine else None
        link = pcie_transfers(budget, point)
        xfer = pcie_us(*link, LINKS[0]) if link else None
        b300 = a300 + xfer if engine and link else None
        bmet = amet + xfer if engine and link and amet is not None else None
        cells = [point, _us(sglang), _us(best),
                 f"{engine.total:,}" if engine else "not measured",
                 _us(a300, "not measured"), _us(amet, "not measured"),
                 f"{link[0]} / {link[1]:,}" if link else "not measured",
                 _us(b300, "not measured"), _us(bmet, "not measured"),
                 _verdict(sglang, amet), _verdict(best, bmet)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


_GPU_PARTS = (("verify", "softmax"), ("verify", "draft_probs_zero"),
              ("verify", "tree_sampling"), ("verify", "build_tree"))


def _gpu_top(figures: dict, point: str) -> str:
    """The two largest parts of the GPU's SGLang round at ``point`` (graph mode): the verify
    chain's ops and each draft kernel summed over the depths."""
    parts = {op: figures[(side, point, op, "graph")] for side, op in _GPU_PARTS
             if (side, point, op, "graph") in figures}
    for (side, p, op, mode), us in figures.items():
        if side == "draft" and p == point and mode == "graph" and "_d" in op \
                and not op.startswith("depth_"):
            kernel = op.rsplit("_d", 1)[0]
            parts[kernel] = parts.get(kernel, 0.0) + us
    if not parts:
        return "MISSING"
    top = sorted(parts.items(), key=lambda item: -item[1])[:2]
    return "; ".join(f"{op} {us:,.1f} µs" for op, us in top)


def _bottlenecks(figures: dict, budget: dict, points: list[str]) -> list[str]:
    lines = ["| point | engine's largest command | second | GPU's two largest parts (graph) |",
             "|---|---|---|---|"]
    for point in points:
        engine = engine_round(budget, point)
        if engine is None:
            continue
        parts = sorted({"draft_depth": engine.draft_depth, "build_verify": engine.build_verify,
                        "verify": engine.verify, "begin_round": engine.begin_round}.items(),
                       key=lambda item: -item[1])
        lines.append(f"| {point} | {parts[0][0]} {parts[0][1]:,} cycles "
                     f"({parts[0][1] / engine.total:.0%}) | {parts[1][0]} {parts[1][1]:,} "
                     f"({parts[1][1] / engine.total:.0%}) | {_gpu_top(figures, point)} |")
    return lines


def _itl_table(figures: dict, budget: dict) -> list[str]:
    p, tau = PUBLISHED, PUBLISHED["tau"]
    itl_b1 = 1e6 / p["eagle2_tps"]
    lines = ["| B | point | published ITL (µs/token) | GPU control path / round (SGLang, graph) "
             "| engine / round (a) @met | engine + PCIe / round (b) @met | ITL with the engine "
             "(a) | ITL with the engine (b) |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for batch in (1, 8, 32, 128):
        point = f"serving-b{batch}-v128256"
        engine = engine_round(budget, point)
        gpu = _round(figures, point, _SGLANG)
        amet = engine.us(engine.total, engine.met_clock_mhz) if engine else None
        link = pcie_transfers(budget, point)
        bmet = amet + pcie_us(*link, LINKS[0]) if amet is not None and link else None
        published = itl_b1 if batch == 1 else None
        cells = [str(batch), point,
                 f"{itl_b1:,.0f}" if published else "not in the cited source",
                 _us(gpu), _us(amet, "not measured"), _us(bmet, "not measured")]
        for engine_us in (amet, bmet):
            if published is None or gpu is None or engine_us is None:
                cells.append("—")
            else:
                itl = published - (gpu - engine_us) / tau
                cells.append(f"{itl:,.0f} ({(itl - published) / published:+.1%})")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(reports: Path) -> str:
    """The summary's Markdown (see the module)."""
    budget = load_budget(reports / "cycle_budget.json")
    figures, state = _figures(reports)
    points = [p["id"] for p in gpu_points()]
    missing = _missing(figures, state, points)
    p = PUBLISHED
    lines = [
        "# FPGA engine vs H100: the whole round, where the logits live, inter-token latency",
        "",
        "Generated by `python -m bench.gpu summary` (`make report`) from "
        f"`reports/{_SIDES['draft']}` ({state['draft']}), `reports/{_SIDES['verify']}` "
        f"({state['verify']}) and `reports/cycle_budget.json`. GPU figures are medians of a CSV "
        "op's runs in CUDA-graph mode (µs); `cpu-validation` rows are never used.", "",
        "## Missing GPU figures", ""]
    lines += missing or ["- none: every GPU figure below comes from an H100 CSV row."]
    lines += ["", "The bench that measures them is ready: `bash bench/gpu/run_on_device.sh` on an "
              "H100 writes both CSVs (`python -m bench.gpu verify`, `python -m bench.gpu "
              "draft`), then `make report` (or `python -m bench.gpu summary`) rebuilds this "
              "page.", "",
              "## Sources of every figure", "",
              "- GPU SGLang round = `draft_round` (h100_draft_raw.csv) + `build_tree` + "
              "`sglang_chain` (h100_verify_raw.csv), graph mode, at the point. GPU best round: "
              "`visited_rows` in place of `sglang_chain`.",
              "- Engine: `reports/cycle_budget.json`, kernel `dataflow` (phase `round`): "
              "cycles = begin_round + draft_depth + build_verify + verify; µs at the contract's "
              "300 MHz and at the row's `proxy_clock_mhz` (the clock the V80 netlist meets, "
              "docs/timing.md).",
              "- (b) transfers and bytes: the same row's command ports (per depth the draft "
              "top-K read and the frontier written, `build_verify`'s result and mask writes, "
              "the verify's logits ports and result writes) and `rows_read`; one dependent "
              "transfer per depth and direction, per visited row, and one each for the verify "
              "tree and the results.", "",
              "| link | raw GB/s | effective GB/s (assumed) | µs per dependent transfer "
              "(assumed) |", "|---|---:|---:|---:|"]
    lines += [f"| {link.name} | {link.raw_gbps} | {link.effective_gbps} | {link.latency_us} |"
              for link in LINKS]
    lines += ["", "Both links have the same raw bandwidth (16 lanes at 16 GT/s, or 8 at 32 "
              "GT/s), so scenario (b) is one column for both.", "",
              "## The whole round per point", ""]
    lines += _round_table(figures, budget, points)
    lines += ["", "## Inter-token latency", "",
              f"Model pair: {p['what']}; SGLang + EAGLE-2 {p['eagle2_tps']} tokens/s, so "
              f"{1e6 / p['eagle2_tps']:,.0f} µs per token (without speculation "
              f"{p['baseline_tps']} tokens/s, {1e6 / p['baseline_tps']:,.0f} µs; EAGLE-3 "
              f"{p['eagle3_tps']}). Source: {p['source']}. Tokens per round τ = {p['tau']} "
              f"({p['tau_source']}; the low end, where the control path weighs most per "
              "token). Tree: the contract's `serving` tree at V = 128,256.", "",
              "ITL with the engine = published ITL − (GPU control path − engine) / τ: the "
              "target and draft forwards are unchanged, only the control kernels move. The "
              "cited source gives batch 1 only; at larger batches no forward time is cited, so "
              "no ITL is stated there.", ""]
    lines += _itl_table(figures, budget)
    lines += ["", "## Where the cycles go", "",
              "The engine's two largest commands per point (the budget's `dataflow` row) and the "
              "GPU's two largest parts of SGLang's round (the CSVs).", ""]
    lines += _bottlenecks(figures, budget, points)
    lines.append("")
    return "\n".join(lines)


def write_summary(reports: Path, out: Path) -> Path:
    """Write :func:`render` of ``reports`` to ``out``; returns ``out``."""
    out.write_text(render(reports))
    return out

