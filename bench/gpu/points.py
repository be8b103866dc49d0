"""The operating points of the GPU baseline.

Trees, hidden size, seed and clock come from the benchmark contract
(``benchmarks/contract.toml`` through ``flow.report.load_contract``), so the GPU runs on the
trees the cycle budget measured. The batch sizes and vocabularies are the GPU baseline's own
list (:data:`BATCH_SIZES`, :data:`VOCAB_SIZES`): they include the contract's and add B = 32
and 128, which the contract does not list yet (the summary marks the engine's figures there as
not measured). :func:`cpu_validation_points` are the small points a machine without a GPU runs
(the kernels under ``TRITON_INTERPRET=1``).
"""

from flow.report import contract_points, load_contract

__all__ = ["BATCH_SIZES", "VOCAB_SIZES", "CPU_VOCAB", "CPU_BATCHES", "gpu_points",
           "cpu_validation_points", "select_points", "contract_seed"]

#: Batch sizes of the GPU baseline (the contract's and the serving batches 32 and 128).
BATCH_SIZES = (1, 8, 32, 128)
#: Vocabularies (Llama-2 and Llama-3).
VOCAB_SIZES = (32000, 128256)
#: The vocabulary and batch sizes of the CPU validation run (V spans several row blocks of the
#: kernels and ends in a partial one).
CPU_VOCAB = 9000
CPU_BATCHES = (1, 3)


def contract_seed() -> int:
    """The contract's seed (the cycle budget's)."""
    return int(load_contract()["seed"])


def _points(batches, vocabs) -> list[dict]:
    contract = load_contract()
    merged = {**contract, "batch_sizes": list(batches), "vocab_sizes": list(vocabs)}
    return contract_points(merged)


def gpu_points() -> list[dict]:
    """Every point of the GPU baseline: the contract's trees x :data:`BATCH_SIZES` x
    :data:`VOCAB_SIZES`, as ``flow.report.contract_points`` dicts (same ids as the cycle
    budget's, e.g. ``serving-b8-v128256``)."""
    return _points(BATCH_SIZES, sorted(set(VOCAB_SIZES)))


def cpu_validation_points() -> list[dict]:
    """The CPU validation points: every contract tree at :data:`CPU_BATCHES` and
    ``V = CPU_VOCAB`` (ids end in ``-v9000``; never compared with the engine)."""
    return _points(CPU_BATCHES, [CPU_VOCAB])


def select_points(points: list[dict], only: list[str] | None) -> list[dict]:
    """``points`` whose id matches one of ``only`` (a full id or a prefix such as
    ``serving`` or ``serving-b8``); all of them when ``only`` is empty. Raises ``ValueError``
    naming a pattern that matches nothing."""
    if not only:
        return points
    chosen = []
    for pattern in only:
        hits = [p for p in points if p["id"] == pattern or p["id"].startswith(pattern + "-")]
        if not hits:
            ids = ", ".join(p["id"] for p in points)
            raise ValueError(f"no point matches {pattern!r}; the points are {ids}")
        chosen += [p for p in hits if p not in chosen]
    return chosen
