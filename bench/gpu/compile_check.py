"""``python -m bench.gpu compile``: every Triton kernel of the bench compiled for an H100.

Runs the verify ops and the draft round of the CPU validation points (every contract tree) with
``bench.gpu.launch.compile_only``: each launch is compiled by Triton's real backend for sm_90
(to PTX and a cubin through the wheel's ``ptxas``) instead of run, with the same argument types
and constexprs the GPU run uses (at the GPU points the constexprs depend on the tree only,
except the draft's batch block, which is a power of two of the same kind). Needs no GPU, and
must run without ``TRITON_INTERPRET`` (the interpreter replaces the kernels).
"""

from __future__ import annotations

import os

import torch

from .draft_round import DeviceRound, draft_inputs
from .launch import compile_only
from .points import contract_seed, cpu_validation_points
from .verify_inputs import verify_inputs
from .verify_ops import VerifyOps

__all__ = ["compile_all"]

_TRITON_OPS = ("tree_sampling", "verify_tree_greedy", "build_tree", "visited_rows")


def _verify_launches(point: dict, seed: int) -> None:
    ops = VerifyOps(verify_inputs(point, seed), torch.device("cpu"))
    for op in ops.ops(visited_rows=1, decisions=1):
        if op.name in _TRITON_OPS:
            op.fn()


def _draft_launches(point: dict, seed: int) -> None:
    device = DeviceRound(draft_inputs(point, seed), torch.device("cpu"))
    device.run()


def compile_all(points: list[dict] | None = None) -> dict:
    """Compile every kernel launch of the points (default: the CPU validation points at their
    largest batch) for sm_90; returns ``{(kernel, signature, constexprs): compiled}``."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("unset TRITON_INTERPRET: the interpreter replaces the kernels")
    if points is None:
        largest = max(p["batch"] for p in cpu_validation_points())
        points = [p for p in cpu_validation_points() if p["batch"] == largest]
    seed = contract_seed()
    with compile_only() as compiled:
        for point in points:
            _verify_launches(point, seed)
            _draft_launches(point, seed)
    return compiled


def main() -> int:
    """Compile and print one line per compiled kernel."""
    compiled = compile_all()
    for (name, _, constexprs), kernel in sorted(compiled.items(), key=lambda item: item[0][0]):
        print(f"{name} {dict(constexprs)}: {len(kernel.asm['ptx']):,} bytes of PTX, "
              f"{len(kernel.asm['cubin']):,} bytes of sm_90 cubin")
    print(f"{len(compiled)} kernel specialisations compiled for sm_90")
    return 0
