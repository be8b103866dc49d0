"""K1 ``draft_tree_layer_score_index_gen_op`` (docs/kernels.md §2) in hardware.

Three independent datapaths and one top:

* ``ScoreSortPipeline``: per request, ``N = W*K`` float32 multiplies (step 1), the padded
  §1 bitonic network on ``sort_width`` lanes (step 3) and the index arithmetic of step 4
  (``cache_topk_indices``, ``parent_indices_in_layer``). One request per beat, a new request
  every clock, fixed latency.
* ``HotTokenRemap``: step 2, token ids through the ``hot_token_id`` table held in on-chip
  memory, ``remap_lanes`` ids per clock.
* ``hw.kernels.gather.HiddenStateGather``: the ``output_hidden_states`` row copies of step 4
  (the only place where hidden-state bytes move).
* ``ScoreKernel``: the K1 component: the three above, with the parents of each result forked
  to the gather (when ``hidden_size != 0``).

``synthesis_configuration()`` returns the K1 component in the configuration of the shared CUDA
capture (K = 8, W <= 8, 64 lanes) with Alveo-sized memory ports.
"""

import numpy as np
from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.lib.bitonic import BitonicSorter, bitonic_stages, delay
from hw.lib.float32 import Float32Multiply
from hw.lib.stream import RegisterSlice, packet_layout, stalling_handshake

from .gather import HiddenStateGather

__all__ = ["SORT_PAD", "MAX_NODE_TOP_K", "SORT_WIDTHS", "ScoreSortPipeline", "HotTokenRemap",
           "ScoreKernel", "synthesis_configuration"]

SORT_PAD = 0xD01502F9  # -1e10f, the value of the lanes N .. sort_width-1 (§1)
MAX_NODE_TOP_K = 16
SORT_WIDTHS = (64, 128)


def _check_int(name, value, low, high=None):
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (
            high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ValueError(f"`{name}` must be {bound}, not {value!r}")


def _check_score_parameters(node_top_k, max_tree_width, sort_width, count_width):
    _check_int("node_top_k", node_top_k, 1, MAX_NODE_TOP_K)
    if sort_width not in SORT_WIDTHS:
        raise ValueError(f"`sort_width` must be 64 or 128, not {sort_width!r}")
    _check_int("max_tree_width", max_tree_width, 1, None)
    if max_tree_width > node_top_k:
        raise ValueError("`max_tree_width` must be between 1 and `node_top_k`, "
                         f"not {max_tree_width}")
    if max_tree_width * node_top_k > sort_width:
        raise ValueError(f"`max_tree_width * node_top_k` must be at most `sort_width` "
                         f"({sort_width}), not {max_tree_width * node_top_k}")
    _check_int("count_width", count_width, 8, 63)


class ScoreSortPipeline(wiring.Component):
    """Score, sort and index arithmetic of K1, one request per beat, one beat per clock.

    Per request (one beat of ``i``), with ``N = tree_width * K`` and lanes ``t = w*K + k``:

    1. ``curr[t] = probas[t] * parent_scores[t div K]``: ``N_max = max_tree_width * K``
       ``Float32Multiply`` cores in parallel (lane ``t`` always multiplies by parent score
       ``t div K``; the runtime ``tree_width`` only decides which lanes are valid).
    2. The §1 network on ``sort_width`` lanes (``hw.lib.bitonic.BitonicSorter``): lanes
       ``0..N-1`` hold ``curr``, every other lane the pad -1e10 (0xD01502F9), payload = lane
       index; all lanes take part, so the order is the spec's, ties included.
    3. For the ``K`` best: ``cache[k] = cumu_count + index[k]`` (modulo ``2**count_width``)
       and ``parents[k] = index[k] div K`` (a constant table).

    The pipeline is ``Float32Multiply.latency`` (4) + ``BitonicSorter.latency`` (21 for 64
    lanes, 28 for 128, with one register per stage) + 1 clocks deep, driven by
    ``stalling_handshake``: a request enters every clock unless ``o`` stalls, which freezes
    the whole pipeline.

    Lanes ``N .. N_max-1`` of the result hold the pad in ``curr`` and ``scores`` and the pad
    lanes' indices (``>= N``) in ``indices``: the host reads the first ``N``. A result index
    ``>= N`` among the first ``N`` means a score at or below the pad (or NaN), which the host
    API refuses beforehand, as the golden does.

    Parameters
    ----------
    node_top_k : int
        ``K``, 1..16.
    max_tree_width : int
        Largest runtime ``W``, 1..K, with ``max_tree_width * K <= sort_width``.
    sort_width : int
        Lanes of the network, 64 or 128 (§1 and its extension).
    count_width : int
        Bits of ``cumu_count`` and of ``cache`` (8..63). The host must refuse
        ``cumu_count + N > 2**count_width`` (a cache index would wrap).
    stages_per_register : int
        Network stages between pipeline registers (default 1).
    multiplier : callable or None
        ``multiplier(lane)`` returns the multiply core of a lane: a component with the members
        and the ``latency`` of ``Float32Multiply`` (the default). The Verilator models pass a
        factory that instantiates one shared module definition of the core (otherwise the
        Verilog holds 64 copies of it, 150 kB each, and elaboration takes about a minute).

    Attributes
    ----------
    request_layout, result_layout : data.StructLayout
        Payloads of ``i`` and ``o`` (below).
    latency : int
        Clocks from a request to its result when not stalled.

    Members
    -------
    i : In(stream.Signature(request_layout))
        ``probas`` (``N_max`` float32 bit patterns, lanes ``>= N`` ignored),
        ``parent_scores`` (``max_tree_width`` float32, ``last_layer_scores[b]``),
        ``tree_width`` (``W``, 1 .. max_tree_width), ``cumu_count`` (``count_width`` bits,
        unsigned), ``first``/``last`` (a batch is a packet; not interpreted here).
    o : Out(stream.Signature(result_layout))
        ``curr`` and ``scores`` (``N_max`` float32), ``indices`` (``N_max`` lane indices,
        ``log2(sort_width)`` bits), ``cache`` (``K`` x ``count_width`` bits), ``parents``
        (``K`` x ``parent_width`` bits), ``tree_width``, ``first``, ``last`` passed through.
    """

    def __init__(self, *, node_top_k: int, max_tree_width: int, sort_width: int = 64,
                 count_width: int = 32, stages_per_register: int = 1, multiplier=None,
                 src_loc_at: int = 0):
        _check_score_parameters(node_top_k, max_tree_width, sort_width, count_width)
        stage_count = len(bitonic_stages(sort_width))
        _check_int("stages_per_register", stages_per_register, 1, stage_count)
        self._multiplier = multiplier or (lambda lane: Float32Multiply())
        self._k = node_top_k
        self._max_tree_width = max_tree_width
        self._sort_width = sort_width
        self._count_width = count_width
        self._sort_latency = -(-stage_count // stages_per_register)
        self._stages_per_register = stages_per_register
        n_max = self.max_candidates
        self._request_layout = packet_layout({
            "probas": data.ArrayLayout(32, n_max),
            "parent_scores": data.ArrayLayout(32, max_tree_width),
            "tree_width": range(max_tree_width + 1),
            "cumu_count": count_width,
        })
        self._result_layout = packet_layout({
            "curr": data.ArrayLayout(32, n_max),
            "scores": data.ArrayLayout(32, n_max),
            "indices": data.ArrayLayout(self.index_width, n_max),
            "cache": data.ArrayLayout(count_width, node_top_k),
            "parents": data.ArrayLayout(self.parent_width, node_top_k),
            "tree_width": range(max_tree_width + 1),
        })
        super().__init__({
            "i": In(stream.Signature(self._request_layout)),
            "o": Out(stream.Signature(self._result_layout)),
        }, src_loc_at=src_loc_at)

    @property
    def node_top_k(self):
        return self._k

    @property
    def max_tree_width(self):
        return self._max_tree_width

    @property
    def sort_width(self):
        return self._sort_width

    @property
    def count_width(self):
        return self._count_width

    @property
    def stages_per_register(self):
        return self._stages_per_register

    @property
    def max_candidates(self):
        """``N_max = max_tree_width * node_top_k``: lanes of ``probas``, ``curr``, ``scores``."""
        return self._max_tree_width * self._k

    @property
    def index_width(self):
        """Bits of a sorted index: ``log2(sort_width)``."""
        return (self._sort_width - 1).bit_length()

    @property
    def parent_width(self):
        """Bits of a parent index (``index div K`` over every lane)."""
        return max(1, ((self._sort_width - 1) // self._k).bit_length())

    @property
    def request_layout(self):
        return self._request_layout

    @property
    def result_layout(self):
        return self._result_layout

    @property
    def latency(self):
        return Float32Multiply.latency + self._sort_latency + 1

    def elaborate(self, platform):
        m = Module()
        k, n_max, width = self._k, self.max_candidates, self._sort_width
        request = self.i.payload
        en = stalling_handshake(m, latency=self.latency, source=self.i, sink=self.o)

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
            width=width, payload_width=self.index_width,
            stages_per_register=self._stages_per_register)
        m.d.comb += sorter.en.eq(en)
        for lane in range(width):
            m.d.comb += [
                sorter.keys[lane].eq(curr[lane] if lane < n_max else SORT_PAD),
                sorter.payloads[lane].eq(lane),
            ]
        sideband = Cat(request.cumu_count, request.tree_width, request.first, request.last)
        sideband = delay(m, en, sideband, mul_latency + sorter.latency, name="sideband")
        cumu_count = sideband[:self._count_width]
        rest = sideband[self._count_width:]
        curr_s = delay(m, en, Cat(*curr), sorter.latency, name="curr")

        # Step 4: index arithmetic, then the output register (one wide register, fields in
        # the order of `result_layout`).
        parent_of = Array(Const(lane // k, self.parent_width) for lane in range(width))
        indices = [sorter.sorted_payloads[t] for t in range(n_max)]
        result = Cat(
            curr_s,
            *(sorter.sorted_keys[t] for t in range(n_max)),
            *indices,
            *((cumu_count + indices[j])[:self._count_width] for j in range(k)),
            *(parent_of[indices[j]] for j in range(k)),
            rest,
        )
        assert len(result) == self._result_layout.size
        m.d.comb += self.o.payload.eq(delay(m, en, result, 1, name="result"))
        return m


class HotTokenRemap(wiring.Component):
    """Step 2 of K1: ``token = hot_token_id[token]`` for ids in ``[0, table_size)``.

    The table lives in an ``amaranth.lib.memory.Memory`` (``hot_vocab_size`` entries of
    ``token_width`` bits) with one write port, loaded through ``table``, and one read port per
    lane (vendor tools replicate block RAMs for more than two). ``table_size`` is the runtime
    ``V_hot`` (at most ``hot_vocab_size``). Ids are signed ``token_width``-bit integers; an id
    outside ``[0, table_size)``, or any id of a beat whose ``enable`` is low
    (``use_hot_token_id`` false), passes unchanged.

    Tokens are not tied to requests: a batch's ``B*N`` ids (row-major, the ABI order) travel
    as ``ceil(B*N / remap_lanes)`` beats of ``remap_lanes`` ids; the lanes of the last beat
    past the end are don't-care (remapped like any other id, the host drops them). One beat
    per clock, latency 2 clocks. A table write accepted in the same clock as a token beat, or
    earlier, is seen by its lookups (transparent read ports).

    Parameters
    ----------
    hot_vocab_size : int
        Table capacity: the largest ``V_hot`` (>= 1).
    remap_lanes : int
        Ids looked up per clock (>= 1), i.e. read ports.
    token_width : int
        Bits of a token id and a table entry, signed (2..64). The host refuses ids or table
        entries outside that range.

    Attributes
    ----------
    latency : int
        2.

    Members
    -------
    table_size : In(range(hot_vocab_size + 1))
        ``V_hot``, static while tokens are in flight.
    table : In(stream.Signature(table_layout))
        ``{address, value}``: ``hot_token_id[address] = value``; always ready.
    i : In(stream.Signature(token_layout))
        ``{tokens: remap_lanes x signed(token_width), enable, first, last}``.
    o : Out(stream.Signature(remapped_layout))
        ``{tokens, first, last}``, same order.
    """

    latency = 2

    def __init__(self, *, hot_vocab_size: int = 32768, remap_lanes: int = 8,
                 token_width: int = 32, src_loc_at: int = 0):
        _check_int("hot_vocab_size", hot_vocab_size, 1)
        _check_int("remap_lanes", remap_lanes, 1)
        _check_int("token_width", token_width, 2, 64)
        self._hot_vocab_size = hot_vocab_size
        self._remap_lanes = remap_lanes
        self._token_width = token_width
        tokens = data.ArrayLayout(signed(token_width), remap_lanes)
        self._table_layout = data.StructLayout({
            "address": range(hot_vocab_size), "value": signed(token_width)})
        self._token_layout = packet_layout({"tokens": tokens, "enable": 1})
        self._remapped_layout = packet_layout({"tokens": tokens})
        super().__init__({
            "table_size": In(range(hot_vocab_size + 1)),
            "table": In(stream.Signature(self._table_layout)),
            "i": In(stream.Signature(self._token_layout)),
            "o": Out(stream.Signature(self._remapped_layout)),
        }, src_loc_at=src_loc_at)

    @property
    def hot_vocab_size(self):
        return self._hot_vocab_size

    @property
    def remap_lanes(self):
        return self._remap_lanes

    @property
    def token_width(self):
        return self._token_width

    @property
    def table_layout(self):
        return self._table_layout

    @property
    def token_layout(self):
        return self._token_layout

    @property
    def remapped_layout(self):
        return self._remapped_layout

    def elaborate(self, platform):
        m = Module()
        size = self._hot_vocab_size
        m.submodules.table = table = Memory(shape=signed(self._token_width), depth=size,
                                            init=[])
        write = table.write_port()
        m.d.comb += [
            self.table.ready.eq(1),
            write.en.eq(self.table.valid),
            write.addr.eq(self.table.payload.address),
            write.data.eq(self.table.payload.value),
        ]
        en = stalling_handshake(m, latency=self.latency, source=self.i, sink=self.o)
        beat = self.i.payload
        for lane in range(self._remap_lanes):
            token = beat.tokens[lane]
            read = table.read_port(transparent_for=(write,))
            m.d.comb += [read.en.eq(en), read.addr.eq(token[:len(read.addr)])]
            hit = delay(m, en, beat.enable & (token >= 0) & (token < self.table_size), 1,
                        name=f"hit{lane}")
            token_1 = delay(m, en, token, 1, name=f"token{lane}")
            m.d.comb += self.o.payload.tokens[lane].eq(
                delay(m, en, Mux(hit, read.data, token_1), 1, name=f"remapped{lane}"))
        m.d.comb += Cat(self.o.payload.first, self.o.payload.last).eq(
            delay(m, en, Cat(beat.first, beat.last), self.latency, name="marks"))
        return m


class ScoreKernel(wiring.Component):
    """K1 ``draft_tree_layer_score_index_gen_op``: score + sort, token remap, hidden gather.

    * ``requests`` -> ``ScoreSortPipeline`` -> register slice -> ``results`` (one beat per
      request, II = 1, latency ``score_latency`` = pipeline + 1).
    * ``tokens`` -> ``HotTokenRemap`` (table loaded through ``hot_table``) ->
      ``remapped_tokens`` (``remap_lanes`` ids per clock).
    * When ``hidden_size != 0`` each result is also forked to a serialiser that sends the
      ``K`` source rows ``b*W + parents[k]`` (``b`` counted from the packet's ``first`` beat,
      ``W`` its ``tree_width``) to ``HiddenStateGather``, which reads them on
      ``hidden_read_address``/``hidden_read_data`` and streams ``output_hidden_states`` on
      ``hidden`` (request order, child order, ``ceil(H / hidden_lanes)`` beats per child).
      The gather then paces the score path (``K * ceil(H / hidden_lanes)`` clocks per request
      with a one-word-per-clock memory); with ``hidden_size = 0`` no row is sent and the score
      path runs at one request per clock (a dataflow top that forwards the parent index
      instead uses ``ScoreSortPipeline`` on its own).

    Requests of one batch form a packet (``first`` on ``b = 0``); with the gather in use,
    batches must not overlap in flight (the gather's row numbers restart at every ``first``)
    and ``hidden_size`` changes only while idle.

    Parameters
    ----------
    node_top_k, max_tree_width, sort_width, count_width, stages_per_register, multiplier
        Of ``ScoreSortPipeline``.
    hot_vocab_size, remap_lanes, token_width
        Of ``HotTokenRemap``.
    element_width : int
        Bits of a hidden-state element: 32 (float32) or 16 (float16/bfloat16).
    hidden_lanes : int
        Hidden-state elements per memory word and per ``hidden`` beat (power of two).
    max_hidden_size : int
        Largest ``H``.
    address_width : int
        Bits of the gather's row numbers and word addresses.

    Attributes
    ----------
    score_latency : int
        Latency of the score path: ``ScoreSortPipeline.latency`` + 1 (the output slice, which
        keeps the pipeline enable free of combinational paths from the ports).
    request_layout, result_layout, token_layout, remapped_layout, table_layout,
    hidden_word_layout, hidden_layout : data layouts of the ports.

    Members
    -------
    requests : In(stream.Signature(request_layout))
    results : Out(stream.Signature(result_layout))
    tokens : In(stream.Signature(token_layout))
    remapped_tokens : Out(stream.Signature(remapped_layout))
    hot_table : In(stream.Signature(table_layout))
    hot_table_size : In(range(hot_vocab_size + 1))
        ``V_hot`` (entries of ``hot_token_id`` in use), static while tokens are in flight.
    hidden_size : In(range(max_hidden_size + 1))
        ``H`` (0: no gather), static while busy.
    hidden_read_address : Out(stream.Signature(address_width))
    hidden_read_data : In(stream.Signature(hidden_word_layout))
    hidden : Out(stream.Signature(hidden_layout))
    """

    def __init__(self, *, node_top_k: int = 8, max_tree_width: int = 8, sort_width: int = 64,
                 count_width: int = 32, stages_per_register: int = 1,
                 hot_vocab_size: int = 32768, remap_lanes: int = 8, token_width: int = 32,
                 element_width: int = 32, hidden_lanes: int = 8, max_hidden_size: int = 8192,
                 address_width: int = 32, multiplier=None, src_loc_at: int = 0):
        # The parts are built here for their checks and layouts; an unused kernel's parts are
        # reported (UnusedElaboratable) where the kernel was created.
        self._score = ScoreSortPipeline(node_top_k=node_top_k, max_tree_width=max_tree_width,
                                        sort_width=sort_width, count_width=count_width,
                                        stages_per_register=stages_per_register,
                                        multiplier=multiplier, src_loc_at=src_loc_at + 1)
        self._remap = HotTokenRemap(hot_vocab_size=hot_vocab_size, remap_lanes=remap_lanes,
                                    token_width=token_width, src_loc_at=src_loc_at + 1)
        self._gather = HiddenStateGather(element_width=element_width, lanes=hidden_lanes,
                                         max_hidden_size=max_hidden_size,
                                         address_width=address_width,
                                         src_loc_at=src_loc_at + 1)
        super().__init__({
            "requests": In(stream.Signature(self.request_layout)),
            "results": Out(stream.Signature(self.result_layout)),
            "tokens": In(stream.Signature(self.token_layout)),
            "remapped_tokens": Out(stream.Signature(self.remapped_layout)),
            "hot_table": In(stream.Signature(self.table_layout)),
            "hot_table_size": In(range(hot_vocab_size + 1)),
            "hidden_size": In(range(max_hidden_size + 1)),
            "hidden_read_address": Out(stream.Signature(address_width)),
            "hidden_read_data": In(stream.Signature(self.hidden_word_layout)),
            "hidden": Out(stream.Signature(self.hidden_layout)),
        }, src_loc_at=src_loc_at)

    # Parameters.
    node_top_k = property(lambda self: self._score.node_top_k)
    max_tree_width = property(lambda self: self._score.max_tree_width)
    sort_width = property(lambda self: self._score.sort_width)
    count_width = property(lambda self: self._score.count_width)
    stages_per_register = property(lambda self: self._score.stages_per_register)
    hot_vocab_size = property(lambda self: self._remap.hot_vocab_size)
    remap_lanes = property(lambda self: self._remap.remap_lanes)
    token_width = property(lambda self: self._remap.token_width)
    element_width = property(lambda self: self._gather.element_width)
    hidden_lanes = property(lambda self: self._gather.lanes)
    max_hidden_size = property(lambda self: self._gather.max_hidden_size)
    address_width = property(lambda self: self._gather.address_width)

    # Derived figures and layouts.
    max_candidates = property(lambda self: self._score.max_candidates)
    score_latency = property(lambda self: self._score.latency + 1)  # + the output slice
    request_layout = property(lambda self: self._score.request_layout)
    result_layout = property(lambda self: self._score.result_layout)
    token_layout = property(lambda self: self._remap.token_layout)
    remapped_layout = property(lambda self: self._remap.remapped_layout)
    table_layout = property(lambda self: self._remap.table_layout)
    hidden_word_layout = property(lambda self: self._gather.word_layout)
    hidden_layout = property(lambda self: self._gather.output_layout)

    def check_call(self, *, batch_size, node_top_k, tree_width, cumu_count, hidden_size=0,
                   use_hot_token_id=False, topk_tokens_sampling=None, hot_token_id=None):
        """Refuse (``ValueError``) a K1 call this instance cannot run exactly.

        The host API calls this before sending anything: beyond the golden's own checks
        (docs/kernels.md §2), the hardware needs ``node_top_k`` equal to its ``K``,
        ``tree_width <= max_tree_width``, ``cumu_count + N <= 2**count_width`` (cache indices
        must not wrap), ``hidden_size <= max_hidden_size``, every row address of
        ``input_hidden_states`` within ``address_width`` bits and, with the remap, token ids
        and table entries within ``token_width`` signed bits and at most ``hot_vocab_size``
        table entries.
        """
        if node_top_k != self.node_top_k:
            raise ValueError(f"`node_top_k` must be {self.node_top_k} (this kernel's K), "
                             f"not {node_top_k}")
        if not 1 <= tree_width <= self.max_tree_width:
            raise ValueError(f"`tree_width` must be between 1 and {self.max_tree_width}, "
                             f"not {tree_width}")
        n = tree_width * node_top_k
        if batch_size < 0:
            raise ValueError(f"`batch_size` must be non-negative, not {batch_size}")
        if not 0 <= cumu_count <= 2 ** self.count_width - n:
            raise ValueError(f"`cumu_count` must be between 0 and 2**{self.count_width} - N = "
                             f"{2 ** self.count_width - n}, not {cumu_count}")
        if not 0 <= hidden_size <= self.max_hidden_size:
            raise ValueError(f"`hidden_size` must be between 0 and {self.max_hidden_size}, "
                             f"not {hidden_size}")
        words = self._gather.words_per_row(hidden_size)
        if batch_size * tree_width * words > 2 ** self.address_width:
            raise ValueError(f"`input_hidden_states` needs {batch_size * tree_width * words} "
                             f"words, more than {self.address_width} address bits reach")
        if use_hot_token_id:
            low, high = -(2 ** (self.token_width - 1)), 2 ** (self.token_width - 1) - 1
            for name, values in (("topk_tokens_sampling", topk_tokens_sampling),
                                 ("hot_token_id", hot_token_id)):
                values = np.asarray(values)
                if values.size and (values.min() < low or values.max() > high):
                    raise ValueError(f"`{name}` must hold {self.token_width}-bit signed "
                                     f"integers ({low} .. {high})")
            if np.asarray(hot_token_id).size > self.hot_vocab_size:
                raise ValueError(f"`hot_token_id` must have at most {self.hot_vocab_size} "
                                 f"entries, not {np.asarray(hot_token_id).size}")

    def elaborate(self, platform):
        m = Module()
        m.submodules.score = score = self._score
        m.submodules.remap = remap = self._remap
        m.submodules.gather = gather = self._gather
        k = self.node_top_k

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


def synthesis_configuration(**overrides) -> ScoreKernel:
    """K1 for the synthesis report: the capture's configuration (K = 8, W <= 8, 64 lanes),
    a 32,000-entry hot-token table read 8 ids per clock, and a 256-bit hidden-state port of
    16 bfloat16 lanes (H up to 8192)."""
    parameters = {"node_top_k": 8, "max_tree_width": 8, "sort_width": 64, "count_width": 32,
                  "hot_vocab_size": 32000, "remap_lanes": 8, "token_width": 32,
                  "element_width": 16, "hidden_lanes": 16, "max_hidden_size": 8192,
                  "address_width": 32}
    return ScoreKernel(**{**parameters, **overrides}, src_loc_at=1)  # located at the caller
