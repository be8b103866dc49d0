"""Score, sort and index arithmetic of K1 (docs/kernels.md §2 steps 1, 3 and 4).

``ScoreSortPipeline`` takes one request per beat and returns one result per beat, a request
every clock at a fixed latency; ``ScoreSortParams`` holds its validated build parameters and
port layouts. Design notes: docs/decisions.md, "K1 hardware".
"""

from dataclasses import dataclass
from functools import cached_property

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data

from hw.lib.bitonic import BitonicSorter, bitonic_stages, delay
from hw.lib.component import KernelComponent
from hw.lib.float32 import Float32Multiply
from hw.lib.params import ParameterError, ParameterRecord, parameter
from hw.lib.stream import packet_layout, stalling_handshake

__all__ = ["SORT_PAD", "MAX_NODE_TOP_K", "SORT_WIDTHS", "ScoreSortParams", "ScoreSortPipeline"]

SORT_PAD = 0xD01502F9  # -1e10f, the value of the lanes N .. sort_width-1 (§1)
MAX_NODE_TOP_K = 16
SORT_WIDTHS = (64, 128)


@dataclass(frozen=True)
class ScoreSortParams(ParameterRecord):
    """Validated build parameters of :class:`ScoreSortPipeline` and its port layouts."""

    node_top_k: int = parameter(8, "``K``.", hi=MAX_NODE_TOP_K)
    max_tree_width: int = parameter(
        8, "Largest runtime ``W``, with ``max_tree_width * K <= sort_width``.", hi="node_top_k")
    sort_width: int = parameter(64, "Lanes of the network (§1 and its extension).",
                                choices=SORT_WIDTHS)
    count_width: int = parameter(
        32, "Bits of ``cumu_count`` and of ``cache``. The host must refuse "
            "``cumu_count + N > 2**count_width`` (a cache index would wrap).", lo=8, hi=63)
    stages_per_register: int = parameter(
        1, "Network stages between pipeline registers.", hi="stage_count")

    def check(self):
        width, k = self.max_tree_width, self.node_top_k
        if width * k > self.sort_width:
            raise ParameterError(
                "max_tree_width", f"`max_tree_width * node_top_k` must be at most `sort_width` "
                f"({self.sort_width}), not {width * k}")

    @property
    def stage_count(self) -> int:
        """Compare-exchange stages of the network (21 for 64 lanes, 28 for 128)."""
        return len(bitonic_stages(self.sort_width))

    @property
    def sort_latency(self) -> int:
        """Clocks of the network: its input register and one per ``stages_per_register``
        stages (``BitonicSorter.latency``)."""
        return 1 + -(-self.stage_count // self.stages_per_register)

    @property
    def latency(self) -> int:
        """Clocks from a request to its result when not stalled: multiply + network + 1."""
        return Float32Multiply.latency + self.sort_latency + 1

    @property
    def max_candidates(self) -> int:
        """``N_max = max_tree_width * node_top_k``: lanes of ``probas``, ``curr``, ``scores``."""
        return self.max_tree_width * self.node_top_k

    @property
    def index_width(self) -> int:
        """Bits of a sorted index: ``log2(sort_width)``."""
        return (self.sort_width - 1).bit_length()

    @property
    def parent_width(self) -> int:
        """Bits of a parent index (``index div K`` over every lane)."""
        return max(1, ((self.sort_width - 1) // self.node_top_k).bit_length())

    @cached_property
    def request_layout(self) -> data.StructLayout:
        """``i``: ``probas`` (``N_max`` float32 bit patterns, lanes ``>= N`` ignored),
        ``parent_scores`` (``max_tree_width`` float32), ``tree_width``, ``cumu_count``
        (unsigned), ``first``/``last`` (a batch is a packet; not interpreted here)."""
        return packet_layout({
            "probas": data.ArrayLayout(32, self.max_candidates),
            "parent_scores": data.ArrayLayout(32, self.max_tree_width),
            "tree_width": range(self.max_tree_width + 1),
            "cumu_count": self.count_width,
        })

    @cached_property
    def result_layout(self) -> data.StructLayout:
        """``o``: ``curr`` and ``scores`` (``N_max`` float32), ``indices`` (``N_max`` lane
        indices), ``cache`` and ``parents`` (``K`` lanes), ``tree_width``, ``first``,
        ``last``."""
        n_max, k = self.max_candidates, self.node_top_k
        return packet_layout({
            "curr": data.ArrayLayout(32, n_max),
            "scores": data.ArrayLayout(32, n_max),
            "indices": data.ArrayLayout(self.index_width, n_max),
            "cache": data.ArrayLayout(self.count_width, k),
            "parents": data.ArrayLayout(self.parent_width, k),
            "tree_width": range(self.max_tree_width + 1),
        })

    @property
    def ports(self) -> dict:
        """Port name -> payload layout."""
        return {"i": self.request_layout, "o": self.result_layout}


class ScoreSortPipeline(KernelComponent):
    """Score, sort and index arithmetic of K1, one request per beat, one beat per clock.

    Per request, with ``N = tree_width * K`` and lanes ``t = w*K + k``:

    1. ``curr[t] = probas[t] * parent_scores[t div K]``: ``N_max`` ``Float32Multiply`` cores
       (the runtime ``tree_width`` only decides which lanes are valid).
    2. The §1 network on ``sort_width`` lanes (``hw.lib.bitonic.BitonicSorter``): lanes
       ``0..N-1`` hold ``curr``, every other lane the pad -1e10 (``SORT_PAD``), payload = lane
       index; all lanes take part, so the order is the spec's, ties included.
    3. For the ``K`` best: ``cache[k] = cumu_count + index[k]`` (modulo ``2**count_width``)
       and ``parents[k] = index[k] div K``.

    ``latency`` clocks deep, driven by ``stalling_handshake``: a request enters every clock
    unless ``o`` stalls, which freezes the whole pipeline. Lanes ``N .. N_max-1`` of a result
    hold the pad (and the pad lanes' indices): the host reads the first ``N``.

    Parameters
    ----------
    node_top_k, max_tree_width, sort_width, count_width, stages_per_register
        The fields of :class:`ScoreSortParams`.
    multiplier : callable or None
        ``multiplier(lane)`` returns the multiply core of a lane: a component with the members
        and the ``latency`` of ``Float32Multiply`` (the default). The Verilator models pass a
        factory that makes the lanes share one module definition (``sim.score.dut``).

    Members
    -------
    i : In(stream.Signature(params.request_layout))
    o : Out(stream.Signature(params.result_layout))
    """

    Params = ScoreSortParams
    OUTPUTS = ("o",)

    def __init__(self, *, multiplier=None, src_loc_at: int = 0, **parameters):
        self._multiplier = multiplier or (lambda lane: Float32Multiply())
        super().__init__(src_loc_at=src_loc_at + 1, **parameters)

    def elaborate(self, platform):
        m = Module()
        params = self._params
        k, n_max, width = params.node_top_k, params.max_candidates, params.sort_width
        request = self.i.payload
        en = stalling_handshake(m, latency=params.latency, source=self.i, sink=self.o)

        # Step 1: N_max multiplies; lanes at or above N become pads.
        count = Signal(range(n_max + 1))
        m.d.comb += count.eq(request.tree_width * k)
        lane_valid = Cat(*(count > t for t in range(n_max)))
        products = []
        for t in range(n_max):
            m.submodules[f"mul{t}"] = mul = self._multiplier(t)
            assert mul.latency == Float32Multiply.latency
            m.d.comb += [mul.en.eq(en), mul.a.eq(request.probas[t]),
                         mul.b.eq(request.parent_scores[t // k])]
            products.append(mul.result)
        mul_latency = Float32Multiply.latency
        valid_m = delay(m, en, lane_valid, mul_latency, name="lane_valid")
        curr = [Mux(valid_m[t], products[t], SORT_PAD) for t in range(n_max)]

        # Step 3: the padded network.
        m.submodules.sorter = sorter = BitonicSorter(
            width=width, payload_width=params.index_width,
            stages_per_register=params.stages_per_register)
        m.d.comb += sorter.en.eq(en)
        for lane in range(width):
            m.d.comb += [
                sorter.keys[lane].eq(curr[lane] if lane < n_max else SORT_PAD),
                sorter.payloads[lane].eq(lane),
            ]
        sideband = Cat(request.cumu_count, request.tree_width, request.first, request.last)
        sideband = delay(m, en, sideband, mul_latency + sorter.latency, name="sideband")
        cumu_count = sideband[:params.count_width]
        rest = sideband[params.count_width:]
        curr_s = delay(m, en, Cat(*curr), sorter.latency, name="curr")

        # Step 4: index arithmetic, then the output register (one wide register, fields in
        # the order of `result_layout`).
        parent_of = Array(Const(lane // k, params.parent_width) for lane in range(width))
        indices = [sorter.sorted_payloads[t] for t in range(n_max)]
        result = Cat(
            curr_s,
            *(sorter.sorted_keys[t] for t in range(n_max)),
            *indices,
            *((cumu_count + indices[j])[:params.count_width] for j in range(k)),
            *(parent_of[indices[j]] for j in range(k)),
            rest,
        )
        assert len(result) == params.result_layout.size
        m.d.comb += self.o.payload.eq(delay(m, en, result, 1, name="result"))
        return m

