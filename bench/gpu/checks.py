"""The device ops against the project's goldens, on the same inputs.

Integer outputs and decisions are compared exactly; probabilities against the float64
reference ``golden.tree_verify.reference_probabilities`` within :data:`PROB_RTOL` (relative)
plus :data:`PROB_ATOL`. A check returns a :class:`Check` (op, passed, what was compared); the
bench prints them and writes them into the CSV's header.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PROB_RTOL", "PROB_ATOL", "Check", "exact", "probabilities"]

#: Tolerance of a float32 probability against the float64 reference: relative ...
PROB_RTOL = 1e-5
#: ... plus absolute (probabilities below it are all but zero).
PROB_ATOL = 1e-9


@dataclass
class Check:
    """One op's comparison with its golden: ``passed`` and a one-line ``detail``."""

    op: str
    passed: bool
    detail: str

    def line(self) -> str:
        """``op: PASS|FAIL detail``."""
        return f"{self.op}: {'PASS' if self.passed else 'FAIL'} {self.detail}"


def exact(op: str, golden: dict[str, np.ndarray], device: dict[str, np.ndarray],
          what: str = "") -> Check:
    """Every array of ``golden`` equal to ``device``'s (same shape, every element; floats by
    bit pattern)."""
    wrong = []
    for name, expected in golden.items():
        got = np.asarray(device[name])
        expected = np.asarray(expected)
        if expected.dtype.kind == "f":
            same = got.shape == expected.shape and np.array_equal(
                got.view(np.uint32 if got.itemsize == 4 else np.uint16),
                expected.view(np.uint32 if expected.itemsize == 4 else np.uint16))
        else:
            same = got.shape == expected.shape and np.array_equal(got.astype(np.int64),
                                                                 expected.astype(np.int64))
        if not same:
            count = int((got.reshape(-1) != expected.reshape(-1)).sum()) \
                if got.size == expected.size else -1
            wrong.append(f"{name} ({count} elements differ)")
    compared = ", ".join(golden)
    detail = f"bit-exact {compared}{' ' + what if what else ''}" if not wrong else \
        f"differs: {'; '.join(wrong)}{' ' + what if what else ''}"
    return Check(op, not wrong, detail)


def probabilities(op: str, reference: np.ndarray, device: np.ndarray, rows: str) -> Check:
    """``device`` float32 rows against float64 ``reference`` rows within the tolerance."""
    error = np.abs(device.astype(np.float64) - reference)
    bound = PROB_RTOL * reference + PROB_ATOL
    worst = float((error / np.maximum(reference, PROB_ATOL)).max()) if error.size else 0.0
    passed = bool((error <= bound).all())
    return Check(op, passed, f"{rows}: |p - p64| <= {PROB_RTOL:g} p64 + {PROB_ATOL:g} "
                             f"{'holds' if passed else 'broken'} (worst relative {worst:.2e})")
