"""K1 ``draft_tree_layer_score_index_gen_op`` (docs/kernels.md §2) in hardware: ``ScoreKernel``.

The kernel joins three datapaths, each in its own module: ``score_sort.ScoreSortPipeline``
(score, sort, index arithmetic), ``token_remap.HotTokenRemap`` (the ``hot_token_id`` table)
and ``gather.HiddenStateGather`` (the ``output_hidden_states`` row copies). ``ScoreParams``
holds the validated build parameters and every port layout; ``synthesis_parameters()`` /
``synthesis_configuration()`` are the configuration of the synthesis report. Design notes and
figures: docs/decisions.md, "K1 hardware".
"""

from dataclasses import asdict, dataclass, fields
from functools import cached_property

import numpy as np
from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.component import KernelComponent
from hw.lib.params import ParameterError, check_power_of_two
from hw.lib.stream import RegisterSlice

from .gather import GatherParams, HiddenStateGather
from .score_sort import ScoreSortParams, ScoreSortPipeline
from .token_remap import HotTokenRemap, TokenRemapParams

__all__ = ["ScoreParams", "ScoreKernel", "synthesis_parameters", "synthesis_configuration"]


@dataclass(frozen=True)
class ScoreParams(ScoreSortParams):
    """Validated build parameters of :class:`ScoreKernel` and its port layouts (testbenches
    and the host read layouts here without building the component): those of the score path
    (``ScoreSortParams``, its fields and figures inherited), then of the token remap and the
    hidden-state gather.

    Parameters
    ----------
    node_top_k, max_tree_width, sort_width, count_width, stages_per_register
        Of the score path: ``hw.kernels.score_sort.ScoreSortParams``.
    hot_vocab_size, remap_lanes, token_width
        Of the token remap: ``hw.kernels.token_remap.TokenRemapParams``.
    element_width : int
        Bits of a hidden-state element: 32 (float32) or 16 (float16/bfloat16).
    hidden_lanes : int
        Hidden-state elements per memory word and per ``hidden`` beat (power of two).
    max_hidden_size : int
        Largest ``H``.
    address_width : int
        Bits of the gather's row numbers and word addresses.
    """

    hot_vocab_size: int = 32768
    remap_lanes: int = 8
    token_width: int = 32
    element_width: int = 32
    hidden_lanes: int = 8
    max_hidden_size: int = 8192
    address_width: int = 32

    def check(self):
        # The parts check their parameters, in this order (the gather calls `hidden_lanes`
        # `lanes`, so that one is checked here under the kernel's name).
        super().check()
        _ = self.remap
        check_power_of_two("hidden_lanes", self.hidden_lanes, 1, None)
        _ = self.gather

    @cached_property
    def sort(self) -> ScoreSortParams:
        """The score path's parameters."""
        return ScoreSortParams(**{field.name: getattr(self, field.name)
                                  for field in fields(ScoreSortParams)})

    @cached_property
    def remap(self) -> TokenRemapParams:
        """The token remap's parameters."""
        return TokenRemapParams(hot_vocab_size=self.hot_vocab_size,
                                remap_lanes=self.remap_lanes, token_width=self.token_width)

    @cached_property
    def gather(self) -> GatherParams:
        """The hidden-state gather's parameters."""
        return GatherParams(element_width=self.element_width, lanes=self.hidden_lanes,
                            max_hidden_size=self.max_hidden_size,
                            address_width=self.address_width)

    @property
    def score_latency(self) -> int:
        """Latency of the score path: the pipeline's (``latency``) + 1 (the output register
        slice)."""
        return self.latency + 1

    token_layout = property(lambda self: self.remap.token_layout)
    remapped_layout = property(lambda self: self.remap.remapped_layout)
    table_layout = property(lambda self: self.remap.table_layout)
    hidden_word_layout = property(lambda self: self.gather.word_layout)
    hidden_layout = property(lambda self: self.gather.output_layout)

    @property
    def ports(self) -> dict:
        """Stream port name -> payload layout (``hidden_read_address`` carries a bare
        ``address_width``-bit integer, described as a one-field layout)."""
        return {"requests": self.request_layout, "results": self.result_layout,
                "tokens": self.token_layout, "remapped_tokens": self.remapped_layout,
                "hot_table": self.table_layout,
                "hidden_read_address": self.gather.address_layout,
                "hidden_read_data": self.hidden_word_layout, "hidden": self.hidden_layout}

    def words_per_row(self, hidden_size: int) -> int:
        """``ceil(H / hidden_lanes)``: memory words (and ``hidden`` beats) per row."""
        return self.gather.words_per_row(hidden_size)

    def check_call(self, *, batch_size, node_top_k, tree_width, cumu_count, hidden_size=0,
                   use_hot_token_id=False, topk_tokens_sampling=None, hot_token_id=None):
        """Refuse (``ParameterError``, a ``ValueError``) a K1 call this kernel cannot run
        exactly.

        The host API calls this before sending anything: beyond the golden's own checks
        (docs/kernels.md §2), the hardware needs ``node_top_k`` equal to its ``K``,
        ``tree_width <= max_tree_width``, ``cumu_count + N <= 2**count_width`` (cache indices
        must not wrap), ``hidden_size <= max_hidden_size``, every row address of
        ``input_hidden_states`` within ``address_width`` bits and, with the remap, token ids
        and table entries within ``token_width`` signed bits and at most ``hot_vocab_size``
        table entries.
        """
        if node_top_k != self.node_top_k:
            raise ParameterError("node_top_k", f"`node_top_k` must be {self.node_top_k} "
                                               f"(this kernel's K), not {node_top_k}")
        if not 1 <= tree_width <= self.max_tree_width:
            raise ParameterError("tree_width", f"`tree_width` must be between 1 and "
                                               f"{self.max_tree_width}, not {tree_width}")
        n = tree_width * node_top_k
        if batch_size < 0:
            raise ParameterError("batch_size",
                                 f"`batch_size` must be non-negative, not {batch_size}")
        if not 0 <= cumu_count <= 2 ** self.count_width - n:
            raise ParameterError("cumu_count", f"`cumu_count` must be between 0 and "
                                               f"2**{self.count_width} - N = "
                                               f"{2 ** self.count_width - n}, not {cumu_count}")
        if not 0 <= hidden_size <= self.max_hidden_size:
            raise ParameterError("hidden_size", f"`hidden_size` must be between 0 and "
                                                f"{self.max_hidden_size}, not {hidden_size}")
        words = self.words_per_row(hidden_size)
        if batch_size * tree_width * words > 2 ** self.address_width:
            raise ParameterError(
                "input_hidden_states", f"`input_hidden_states` needs "
                f"{batch_size * tree_width * words} words, more than {self.address_width} "
                "address bits reach")
        if use_hot_token_id:
            low, high = -(2 ** (self.token_width - 1)), 2 ** (self.token_width - 1) - 1
            for name, values in (("topk_tokens_sampling", topk_tokens_sampling),
                                 ("hot_token_id", hot_token_id)):
                values = np.asarray(values)
                if values.size and (values.min() < low or values.max() > high):
                    raise ParameterError(name, f"`{name}` must hold {self.token_width}-bit "
                                               f"signed integers ({low} .. {high})")
            if np.asarray(hot_token_id).size > self.hot_vocab_size:
                raise ParameterError(
                    "hot_token_id", f"`hot_token_id` must have at most {self.hot_vocab_size} "
                    f"entries, not {np.asarray(hot_token_id).size}")


class ScoreKernel(KernelComponent):
    """K1 ``draft_tree_layer_score_index_gen_op``: score + sort, token remap, hidden gather.

    * ``requests`` -> ``ScoreSortPipeline`` -> register slice -> ``results``: one beat per
      request, II = 1, latency ``score_latency``.
    * ``tokens`` -> ``HotTokenRemap`` (table loaded through ``hot_table``) ->
      ``remapped_tokens``, ``remap_lanes`` ids per clock.
    * When ``hidden_size != 0`` each result is also forked to a serialiser that sends the
      ``K`` source rows ``b*W + parents[k]`` (``b`` counted from the packet's ``first`` beat)
      to ``HiddenStateGather``, which reads them on ``hidden_read_address`` /
      ``hidden_read_data`` and streams ``output_hidden_states`` on ``hidden`` (request order,
      child order, ``ceil(H / hidden_lanes)`` beats per child); the gather then paces the
      score path. With ``hidden_size = 0`` nothing is gathered.

    Requests of one batch form a packet (``first`` on ``b = 0``); with the gather in use,
    batches must not overlap in flight, and ``hidden_size`` / ``hot_table_size`` change only
    while idle. The host checks a call with ``check_call`` first.

    Parameters
    ----------
    node_top_k, max_tree_width, sort_width, count_width, stages_per_register, hot_vocab_size,
    remap_lanes, token_width, element_width, hidden_lanes, max_hidden_size, address_width
        See :class:`ScoreParams`.
    multiplier : callable or None
        Of ``ScoreSortPipeline``.

    Members
    -------
    requests : In(stream.Signature(params.request_layout))
    results : Out(stream.Signature(params.result_layout))
    tokens : In(stream.Signature(params.token_layout))
    remapped_tokens : Out(stream.Signature(params.remapped_layout))
    hot_table : In(stream.Signature(params.table_layout))
    hot_table_size : In(range(hot_vocab_size + 1))
        ``V_hot`` (entries of ``hot_token_id`` in use), static while tokens are in flight.
    hidden_size : In(range(max_hidden_size + 1))
        ``H`` (0: no gather), static while busy.
    hidden_read_address : Out(stream.Signature(address_width))
    hidden_read_data : In(stream.Signature(params.hidden_word_layout))
    hidden : Out(stream.Signature(params.hidden_layout))
    """

    Params = ScoreParams

    def __init__(self, *, multiplier=None, src_loc_at: int = 0, **parameters):
        self._multiplier = multiplier
        super().__init__(src_loc_at=src_loc_at + 1, **parameters)

    def members(self, params) -> dict:
        # Not `params.ports` in order: two static inputs, and a bare-integer address stream.
        return {
            "requests": In(stream.Signature(params.request_layout)),
            "results": Out(stream.Signature(params.result_layout)),
            "tokens": In(stream.Signature(params.token_layout)),
            "remapped_tokens": Out(stream.Signature(params.remapped_layout)),
            "hot_table": In(stream.Signature(params.table_layout)),
            "hot_table_size": In(range(params.hot_vocab_size + 1)),
            "hidden_size": In(range(params.max_hidden_size + 1)),
            "hidden_read_address": Out(stream.Signature(params.address_width)),
            "hidden_read_data": In(stream.Signature(params.hidden_word_layout)),
            "hidden": Out(stream.Signature(params.hidden_layout)),
        }

    def check_call(self, **call):
        """``params.check_call(**call)``: refuse a call this kernel cannot run exactly."""
        self._params.check_call(**call)

    def elaborate(self, platform):
        m = Module()
        params = self._params
        m.submodules.score = score = ScoreSortPipeline(**asdict(params.sort),
                                                       multiplier=self._multiplier)
        m.submodules.remap = remap = HotTokenRemap(**asdict(params.remap))
        m.submodules.gather = gather = HiddenStateGather(**asdict(params.gather))
        k = params.node_top_k

        wiring.connect(m, wiring.flipped(self.requests), score.i)
        wiring.connect(m, wiring.flipped(self.tokens), remap.i)
        wiring.connect(m, remap.o, wiring.flipped(self.remapped_tokens))
        wiring.connect(m, wiring.flipped(self.hot_table), remap.table)
        wiring.connect(m, gather.read_address, wiring.flipped(self.hidden_read_address))
        wiring.connect(m, wiring.flipped(self.hidden_read_data), gather.read_data)
        wiring.connect(m, gather.o, wiring.flipped(self.hidden))
        m.d.comb += [gather.hidden_size.eq(self.hidden_size),
                     remap.table_size.eq(self.hot_table_size)]

        # Fork each result into two register slices, `results` and (when gathering) the
        # row serialiser's; the result leaves the pipeline once both branches have taken it.
        # The slices' `ready` are registers, so the pipeline enable depends on no port.
        result = score.o
        m.submodules.results_slice = results_slice = RegisterSlice(self.result_layout)
        wiring.connect(m, results_slice.o, wiring.flipped(self.results))
        rows_layout = data.StructLayout({
            "parents": data.ArrayLayout(score.parent_width, k),
            "tree_width": range(self.max_tree_width + 1),
            "first": 1,
        })
        m.submodules.rows_slice = rows_slice = RegisterSlice(rows_layout)
        want_rows = self.hidden_size != 0
        results_done = Signal()
        rows_done = Signal()
        m.d.comb += [
            results_slice.i.valid.eq(result.valid & ~results_done),
            results_slice.i.payload.eq(result.payload),
            rows_slice.i.valid.eq(result.valid & want_rows & ~rows_done),
            rows_slice.i.payload.parents.eq(result.payload.parents),
            rows_slice.i.payload.tree_width.eq(result.payload.tree_width),
            rows_slice.i.payload.first.eq(result.payload.first),
            result.ready.eq((results_done | results_slice.i.ready)
                            & (~want_rows | rows_done | rows_slice.i.ready)),
        ]
        with m.If(result.valid & result.ready):
            m.d.sync += [results_done.eq(0), rows_done.eq(0)]
        with m.Elif(result.valid):
            with m.If(results_slice.i.ready):
                m.d.sync += results_done.eq(1)
            with m.If(rows_slice.i.valid & rows_slice.i.ready):
                m.d.sync += rows_done.eq(1)

        # Serialiser: K source rows per result, row = b*W + parent, no bubble between results.
        busy = Signal()
        child = Signal(range(k))
        parents = Signal(data.ArrayLayout(score.parent_width, k))
        row_base = Signal(self.address_width)
        next_base = Signal(self.address_width)
        last_child = child == k - 1
        parent = parents[0] if k == 1 else Array(parents[j] for j in range(k))[child]
        taken = rows_slice.o
        m.d.comb += [
            taken.ready.eq(~busy | (gather.rows.ready & last_child)),
            gather.rows.valid.eq(busy),
            gather.rows.payload.eq(row_base + parent),
        ]
        with m.If(taken.valid & taken.ready):
            base = Mux(taken.payload.first, 0, next_base)
            m.d.sync += [
                busy.eq(1),
                child.eq(0),
                parents.eq(taken.payload.parents),
                row_base.eq(base),
                next_base.eq(base + taken.payload.tree_width),
            ]
        with m.Elif(gather.rows.valid & gather.rows.ready):
            with m.If(last_child):
                m.d.sync += busy.eq(0)
            with m.Else():
                m.d.sync += child.eq(child + 1)
        return m


def synthesis_parameters(**overrides) -> ScoreParams:
    """The parameters of the synthesis report: the capture's configuration (K = 8, W <= 8,
    64 lanes), a 32,000-entry hot-token table read 8 ids per clock, and a 256-bit hidden-state
    port of 16 bfloat16 lanes (H up to 8192)."""
    parameters = {"node_top_k": 8, "max_tree_width": 8, "sort_width": 64, "count_width": 32,
                  "hot_vocab_size": 32000, "remap_lanes": 8, "token_width": 32,
                  "element_width": 16, "hidden_lanes": 16, "max_hidden_size": 8192,
                  "address_width": 32}
    return ScoreParams(**{**parameters, **overrides})


def synthesis_configuration(**overrides) -> ScoreKernel:
    """The K1 kernel at ``synthesis_parameters(**overrides)``."""
    return ScoreKernel(**asdict(synthesis_parameters(**overrides)),
                       src_loc_at=1)  # located at the caller
