"""The trees of the benchmark contract points (benchmarks/contract.toml) and the round
configuration the host runs each at."""

from dataclasses import dataclass

from golden.draft_round import DraftRoundConfig

__all__ = ["TREES", "TreePoint"]


@dataclass(frozen=True)
class TreePoint:
    """A contract tree: ``node_top_k`` K, ``tree_width`` W (the widest depth), ``depth``
    depth labels, ``verify_num`` (verify-set size with the root)."""

    name: str
    description: str
    node_top_k: int
    tree_width: int
    depth: int
    verify_num: int

    def round_config(self, batch_size: int, *, hidden_size: int = 0,
                     cost_per_node: float = 0.0) -> DraftRoundConfig:
        """Rounds of this tree for ``batch_size`` request slots, on the build the dataflow
        measurement sizes for the point: ``max_verify_num = verify_num``, the node count of a
        full-width round (``1 + K + (depth - 1) * W * K``), ``depth * W`` draft inputs and a
        sort of 64 lanes (128 when ``W * K > 64``)."""
        k, w = self.node_top_k, self.tree_width
        return DraftRoundConfig(
            batch_size=batch_size, node_top_k=k, max_tree_width=w, depths=self.depth,
            verify_num=self.verify_num, max_verify_num=self.verify_num,
            max_node_count=1 + k + (self.depth - 1) * w * k,
            max_input_size=self.depth * w, hidden_size=hidden_size,
            cost_per_node=cost_per_node, sort_width=64 if w * k <= 64 else 128)

    def static_widths(self) -> list[int]:
        """The full-width static tree: width W at every depth after the first."""
        return [self.tree_width] * (self.depth - 1)


TREES = {point.name: point for point in (
    TreePoint("small", "small: top-k 4, 3 steps, 8 draft tokens", 4, 4, 3, 8),
    TreePoint("serving", "serving: top-k 8, 5 steps, 64 draft tokens", 8, 8, 5, 64),
    TreePoint("eagle2", "paper-faithful EAGLE-2: top-k 10, depth 5, 60 tokens", 10, 10, 5, 60),
)}
