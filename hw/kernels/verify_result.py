"""K7 ``update_verify_result`` (docs/kernels.md §9) in hardware.

After K6 has walked every request's verify tree, the kernel commits the result: accept
lengths after the finish check (EOS or length limit), the verified ids in one compact list
(exclusive prefix sum of the accept lengths over the batch), the ``req_to_token`` writes of
the accepted KV slots, the eviction mask of the other draft nodes, the next root and the
``finished`` flag of every request (the input of ``hw.kernels.active_slots``). Bit-exact with
``golden.update_verify_result``.

One call is one ``cmd`` beat (``batch_size``, ``num_draft_tokens`` n,
``num_speculative_tokens`` S, ``eos_token_id``), then per request ``b`` (ascending) the ``n``
node records of the request on ``nodes`` (``predicts`` and ``out_cache_loc`` at flat ids
``b*n .. b*n+n-1``) and one ``request`` beat (K6's ``accept_index`` row and
``accept_token_num``, the request's ``req_pool_indices``, ``seq_lens``, ``max_seq_lens``). The
kernel answers with ``accept_length`` beats on ``commit`` and one beat on ``result``.

Datapath (two stages on different requests: ``n + 1`` clocks a request once the pipeline is
full, while ``accept_length + 3 <= n + 1``):

* **Ingest** (one node per clock): the request's node records go to a double-banked node
  memory, addressed by position ``flat id - b*n``.
* **Walk** (one accepted token per clock): for ``j = 0 .. accept_token_num`` the position of
  ``accept_index[b, j]`` is read from the node memory; the token ``t_j = predicts[...]`` is
  written out with its ``verified_id`` index (``offset_b + j``, ``offset_b`` the running
  exclusive prefix sum of the accept lengths) and its ``req_to_token`` write
  ``[req_pool_index, seq_len + j] = out_cache_loc[...]``; the walk stops after the first token
  that is ``eos_token_id`` (when >= 0) or brings the length to ``max_seq_len``
  (``seq_len + j + 1 >= max_seq_len``), which finishes the request. For the 300 MHz rule
  (docs/timing.md) the walk decides on registers only: the positions are computed when the
  request beat arrives and shift down one a token, the EOS compare is made at ingest (one
  flag a node in a LUT-RAM of its own, read a token ahead), and the length-limit and
  last-token flags are registered a token ahead. The accepted positions
  are collected in a bitmap; the ``result`` beat carries ``accept_length``, ``next_root``
  (the last token), ``finished``, the new ``seq_len``, ``offset_b`` and ``evict`` (every
  position of the request not accepted, the truncated ones included).

Inputs outside the golden's contract (accepted ids that are not the request's own, repeats,
``seq_len >= max_seq_len``) give unspecified results but never stall the kernel.
"""

from dataclasses import asdict, dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory

from hw.lib.component import KernelComponent
from hw.lib.params import ParameterRecord, index_bits, parameter
from hw.lib.stream import RegisterSlice, packet_layout

__all__ = ["VerifyResultParams", "VerifyResult", "is_eos_token", "reaches_length_limit",
           "request_finishes", "synthesis_parameters", "synthesis_configuration"]


def is_eos_token(token, eos_token_id):
    """Whether ``token`` finishes a request as its EOS token (combinational):
    ``eos_token_id`` is >= 0 and ``token`` equals it."""
    return (eos_token_id >= 0) & (token == eos_token_id)


def reaches_length_limit(length, max_seq_len):
    """Whether a request whose length is ``length`` with its newest token finishes on the
    length limit (combinational): ``length`` reaches ``max_seq_len``."""
    return length >= max_seq_len


def request_finishes(token, eos_token_id, length, max_seq_len):
    """Whether a request finishes on ``token`` (combinational): it is ``eos_token_id``
    (when that is >= 0), or the request's length with it, ``length``, reaches
    ``max_seq_len``. The kernel evaluates the two halves at different clocks
    (:func:`is_eos_token` at ingest, :func:`reaches_length_limit` one token ahead)."""
    return is_eos_token(token, eos_token_id) | reaches_length_limit(length, max_seq_len)


@dataclass(frozen=True)
class VerifyResultParams(ParameterRecord):
    """Validated build parameters of :class:`VerifyResult` (see there) and the port layouts
    they give (testbenches and the host read layouts here without building the component)."""

    max_draft_tokens: int = parameter(
        64, "Largest ``num_draft_tokens`` n (verify-tree size incl. the root): the node memory "
            "depth and the width of ``evict``.", hi=1024)
    max_speculative_tokens: int = parameter(
        16, "Largest ``num_speculative_tokens`` S (width of K6's ``accept_index``).", hi=64)
    max_batch_size: int = parameter(
        256, "Sets the width of ``batch_size`` (``max_batch_size.bit_length()`` bits), of the "
             "flat ids (``b*n + i``) and of the ``verified_id`` index.")
    token_width: int = parameter(
        32, "Token width (``predicts``, ``verified_id``, ``next_root``, ``eos_token_id``), "
            "signed (32: SGLang's int32).", lo=2, hi=64)
    loc_width: int = parameter(
        32, "KV-slot width (``out_cache_loc``, ``req_to_token`` values).", hi=64)
    seq_len_width: int = parameter(
        32, "Width of ``seq_lens`` and ``max_seq_lens`` (``req_to_token`` columns).", hi=63)
    pool_index_width: int = parameter(
        16, "Width of ``req_pool_indices`` (``req_to_token`` rows).", hi=63)

    @property
    def flat_bits(self):
        """Width of a flat node id ``b*n + i``."""
        return index_bits(self.max_batch_size * self.max_draft_tokens)

    @property
    def cmd_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "batch_size": unsigned(self.max_batch_size.bit_length()),
            "num_draft_tokens": unsigned(self.max_draft_tokens.bit_length()),
            "num_speculative_tokens": unsigned(self.max_speculative_tokens.bit_length()),
            "eos_token_id": signed(self.token_width),
        })

    @property
    def node_layout(self) -> data.StructLayout:
        return packet_layout({"predict": signed(self.token_width),
                              "cache_loc": unsigned(self.loc_width)})

    @property
    def request_layout(self) -> data.StructLayout:
        s = self.max_speculative_tokens
        return data.StructLayout({
            "accept_token_num": unsigned(index_bits(s)),
            "accept_index": data.ArrayLayout(unsigned(self.flat_bits), s),
            "req_pool_index": unsigned(self.pool_index_width),
            "seq_len": unsigned(self.seq_len_width),
            "max_seq_len": unsigned(self.seq_len_width),
        })

    @property
    def commit_layout(self) -> data.StructLayout:
        return packet_layout({
            "verified_index": unsigned(index_bits(self.max_batch_size
                                                  * self.max_speculative_tokens)),
            "verified_id": signed(self.token_width),
            "req_row": unsigned(self.pool_index_width),
            "req_column": unsigned(self.seq_len_width),
            "kv_loc": unsigned(self.loc_width),
        })

    @property
    def result_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "accept_length": unsigned(self.max_speculative_tokens.bit_length()),
            "next_root": signed(self.token_width),
            "finished": 1,
            "seq_len": unsigned(self.seq_len_width),
            "verified_offset": unsigned(index_bits(self.max_batch_size
                                                   * self.max_speculative_tokens)),
            "evict": unsigned(self.max_draft_tokens),
        })

    @property
    def ports(self) -> dict:
        """Port name -> payload layout."""
        return {"cmd": self.cmd_layout, "nodes": self.node_layout,
                "request": self.request_layout, "commit": self.commit_layout,
                "result": self.result_layout}


class VerifyResult(KernelComponent):
    """K7 ``update_verify_result``: accept lengths, verified ids, KV writes and evictions,
    next roots and finished flags.

    Parameters: the fields of :class:`VerifyResultParams`.

    Members
    -------
    cmd : In(stream.Signature(cmd_layout))
        One beat per call: ``batch_size``, ``num_draft_tokens`` (1..MAXD; 0 is read as 1),
        ``num_speculative_tokens`` (1..MAXS, only for the range of ``accept_token_num``),
        ``eos_token_id`` (negative: no EOS check). Taken between calls only.
    nodes : In(stream.Signature(node_layout))
        Per request, ``n`` records in flat-id order: ``predict`` (``predicts``) and
        ``cache_loc`` (``out_cache_loc``). ``first``/``last`` are not checked.
    request : In(stream.Signature(request_layout))
        One beat per request: ``accept_token_num`` (0..S-1), ``accept_index`` (the row of K6's
        ``accept_index``, flat ids; entries past ``accept_token_num`` are not read),
        ``req_pool_index``, ``seq_len``, ``max_seq_len``.
    commit : Out(stream.Signature(commit_layout))
        One beat per accepted token ``j``: ``verified_index`` (``offset_b + j``) and
        ``verified_id`` (write ``verified_id[verified_index]``), ``req_row``, ``req_column``
        (``seq_len + j``) and ``kv_loc`` (write ``req_to_token[req_row, req_column] =
        kv_loc``); ``first`` on ``j = 0``, ``last`` on ``j = accept_length - 1``.
    result : Out(stream.Signature(result_layout))
        One beat per request: ``accept_length``, ``next_root``, ``finished``, ``seq_len`` (the
        new length), ``verified_offset`` (``offset_b``), ``evict`` (bit ``i`` =
        ``evict_mask[b*n + i]``, bits ``>= n`` zero).
    """

    Params = VerifyResultParams
    OUTPUTS = ("commit", "result")

    def elaborate(self, platform):
        m = Module()
        params = self._params
        maxd, maxs = params.max_draft_tokens, params.max_speculative_tokens
        pos_bits = index_bits(maxd)
        batch_bits = params.max_batch_size.bit_length()
        flat_bits = params.flat_bits
        offset_bits = index_bits(params.max_batch_size * maxs)

        node_shape = data.StructLayout({"predict": signed(params.token_width),
                                        "cache_loc": unsigned(params.loc_width)})
        m.submodules.node_mem = node_mem = Memory(shape=node_shape, depth=2 << pos_bits,
                                                  init=[])
        node_write = node_mem.write_port()
        node_read = node_mem.read_port(domain="comb")
        # Whether each node is the EOS token, computed at ingest (read a token ahead).
        m.submodules.eos_mem = eos_mem = Memory(shape=1, depth=2 << pos_bits, init=[])
        eos_write = eos_mem.write_port()
        eos_read = eos_mem.read_port(domain="comb")

        # --- call parameters and stage 1: ingest ------------------------------------------
        command = self.cmd.payload
        n_new = Mux(command.num_draft_tokens == 0, 1,
                    Mux(command.num_draft_tokens > maxd, maxd, command.num_draft_tokens))
        call_n = Signal(range(maxd + 1))
        call_last = Signal(range(maxd))  # n - 1
        call_last_request = Signal(batch_bits)  # batch_size - 1
        call_valid = Signal(maxd)  # bit i: i < n
        call_eos = Signal(signed(params.token_width))
        s1_position = Signal(range(maxd + 1))
        s1_request = Signal(batch_bits)
        s1_base = Signal(flat_bits + 1)  # b * n
        bank = Signal()
        ingesting = Signal()
        s1_hold = Signal()
        s2_idle = Signal()
        handoff = s1_hold & s2_idle

        beat = self.nodes.valid & self.nodes.ready
        m.d.comb += [
            self.nodes.ready.eq(ingesting),
            node_write.addr.eq(Cat(s1_position[:pos_bits], bank)),
            node_write.data.predict.eq(self.nodes.payload.predict),
            node_write.data.cache_loc.eq(self.nodes.payload.cache_loc),
            node_write.en.eq(beat),
        ]
        # The EOS flag is written a clock after its node (the compare is a stage of its own),
        # still before the walk's first read of the bank (in REQUEST, after the hand-over).
        m.d.sync += [
            eos_write.addr.eq(node_write.addr),
            eos_write.data.eq(is_eos_token(self.nodes.payload.predict, call_eos)),
            eos_write.en.eq(beat),
        ]
        with m.FSM(name="ingest"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += [call_last_request.eq(command.batch_size - 1),
                                 call_n.eq(n_new), call_last.eq(n_new - 1),
                                 call_valid.eq(Cat((command.num_draft_tokens > i) | (i == 0)
                                                   for i in range(maxd))),
                                 call_eos.eq(command.eos_token_id), s1_position.eq(0),
                                 s1_request.eq(0), s1_base.eq(0)]
                    with m.If(command.batch_size != 0):
                        m.next = "INGEST"
            with m.State("INGEST"):
                m.d.comb += ingesting.eq(1)
                with m.If(beat):
                    m.d.sync += s1_position.eq(s1_position + 1)
                    with m.If(s1_position == call_last):
                        m.next = "HOLD"
            with m.State("HOLD"):
                m.d.comb += s1_hold.eq(1)
                with m.If(handoff):
                    m.d.sync += [bank.eq(~bank), s1_position.eq(0),
                                 s1_request.eq(s1_request + 1), s1_base.eq(s1_base + call_n)]
                    with m.If(s1_request == call_last_request):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "INGEST"

        # --- stage 2: walk ------------------------------------------------------------------
        # Everything the walk decides on is a register or one LUT-RAM read away: the
        # positions of the accepted ids are computed when the request beat arrives and shift
        # down one a token; whether the next token is EOS (a flag stored at ingest), ends the
        # request on the length limit or is the last accepted one is registered a token
        # ahead.
        s2_bank = Signal()
        s2_valid = Signal(maxd)  # the request's positions: bit i = i < n
        s2_base = Signal(flat_bits + 1)
        offset = Signal(offset_bits + 1)  # exclusive prefix sum of accept lengths
        positions = [Signal(pos_bits, name=f"position{j}") for j in range(maxs)]
        left = Signal(range(maxs))  # accept_token_num - step
        final = Signal()  # step == accept_token_num
        pool = Signal(params.pool_index_width)
        seq = Signal(params.seq_len_width)
        max_seq = Signal(params.seq_len_width)
        next_length = Signal(range((1 << params.seq_len_width) + maxs + 2))  # seq + step + 2
        limit = Signal()  # reaches_length_limit(seq + step + 1, max_seq)
        eos = Signal()  # is_eos_token(token at step, eos_token_id)
        requesting = Signal()
        step = Signal(range(maxs + 1))
        accepted = Signal(maxd)
        length = Signal(range(maxs + 1))
        root = Signal(signed(params.token_width))
        finished = Signal()

        position = positions[0]
        m.d.comb += node_read.addr.eq(Cat(position, s2_bank))
        token = node_read.data.predict
        column = seq + step
        ends_here = eos | limit
        request = self.request.payload
        first_position = (request.accept_index[0] - s2_base)[:pos_bits]
        next_position = positions[1] if maxs > 1 else position
        m.d.comb += eos_read.addr.eq(Cat(Mux(requesting, first_position, next_position),
                                         s2_bank))
        last_token = ends_here | final

        m.submodules.commit_slice = commit_slice = RegisterSlice(params.commit_layout)
        wiring.connect(m, commit_slice.o, wiring.flipped(self.commit))
        m.submodules.result_slice = result_slice = RegisterSlice(params.result_layout)
        wiring.connect(m, result_slice.o, wiring.flipped(self.result))
        walking = Signal()
        reporting = Signal()
        out = commit_slice.i.payload
        m.d.comb += [
            commit_slice.i.valid.eq(walking),
            out.verified_index.eq(offset + step),
            out.verified_id.eq(token),
            out.req_row.eq(pool),
            out.req_column.eq(column),
            out.kv_loc.eq(node_read.data.cache_loc),
            out.first.eq(step == 0),
            out.last.eq(last_token),
        ]
        report = result_slice.i.payload
        m.d.comb += [
            result_slice.i.valid.eq(reporting),
            report.accept_length.eq(length),
            report.next_root.eq(root),
            report.finished.eq(finished),
            report.seq_len.eq(seq + length),
            report.verified_offset.eq(offset),
            report.evict.eq(~accepted & s2_valid),
        ]

        with m.FSM(name="walk"):
            with m.State("IDLE"):
                m.d.comb += s2_idle.eq(1)
                with m.If(handoff):
                    m.d.sync += [s2_bank.eq(bank),
                                 s2_valid.eq(call_valid),
                                 s2_base.eq(s1_base)]
                    with m.If(s1_request == 0):
                        m.d.sync += offset.eq(0)
                    m.next = "REQUEST"
            with m.State("REQUEST"):
                m.d.comb += [self.request.ready.eq(1), requesting.eq(1)]
                with m.If(self.request.valid):
                    m.d.sync += [left.eq(request.accept_token_num),
                                 final.eq(request.accept_token_num == 0),
                                 pool.eq(request.req_pool_index),
                                 seq.eq(request.seq_len), max_seq.eq(request.max_seq_len),
                                 next_length.eq(request.seq_len + 2),
                                 limit.eq(reaches_length_limit(request.seq_len + 1,
                                                               request.max_seq_len)),
                                 eos.eq(eos_read.data), step.eq(0), accepted.eq(0),
                                 walking.eq(1)]
                    m.d.sync += [positions[j].eq((request.accept_index[j] - s2_base)[:pos_bits])
                                 for j in range(maxs)]
                    m.next = "WALK"
            with m.State("WALK"):
                with m.If(commit_slice.i.ready):
                    m.d.sync += [step.eq(step + 1),
                                 accepted.eq(accepted | (Const(1, maxd) << position)),
                                 left.eq(left - 1), final.eq(left == 1),
                                 next_length.eq(next_length + 1),
                                 limit.eq(reaches_length_limit(next_length, max_seq)),
                                 eos.eq(eos_read.data)]
                    m.d.sync += [positions[j].eq(positions[j + 1]) for j in range(maxs - 1)]
                    with m.If(last_token):
                        m.d.sync += [walking.eq(0), reporting.eq(1), length.eq(step + 1),
                                     root.eq(token), finished.eq(ends_here)]
                        m.next = "REPORT"
            with m.State("REPORT"):
                with m.If(result_slice.i.ready):
                    m.d.sync += [reporting.eq(0), offset.eq(offset + length)]
                    m.next = "IDLE"
        return m


def synthesis_parameters(**overrides) -> VerifyResultParams:
    """K7 for the synthesis report: verify trees of up to 64 nodes (``verify_num=64``), up
    to 16 accepted tokens, batches of up to 256, 32-bit tokens, KV slots and lengths."""
    parameters = {"max_draft_tokens": 64, "max_speculative_tokens": 16,
                  "max_batch_size": 256, "token_width": 32, "loc_width": 32,
                  "seq_len_width": 32, "pool_index_width": 16}
    return VerifyResultParams(**{**parameters, **overrides})


def synthesis_configuration(**overrides) -> VerifyResult:
    """K7 at ``synthesis_parameters(**overrides)``."""
    return VerifyResult(**asdict(synthesis_parameters(**overrides)))
