"""K3 ``calculate_work_deltas`` and the width policy in hardware (docs/kernels.md §5).

One call of the kernel is one ``cmd`` beat (``batch_size``, ``cumu_count``, ``verify_num``,
``cost_per_node``), then the ``work_scores`` row prefix of each of the ``B`` requests on
``scores`` (``ws0`` values of ``A`` then the ``K`` values of ``C``, ``lanes`` floats per beat),
then ``K + 1`` beats on ``deltas``: ``work_deltas[0..K]`` and the next width ``W'``. The result
is bit-exact with ``golden.calculate_work_deltas`` and ``golden.width_policy``: every ``+``/``-``
is one ``Float32Add`` in the order of §5, the threshold ``float32(cost_per_node) *
float32(B)`` one ``Float32Multiply``.

Datapath (details and figures: docs/decisions.md, "K3 hardware"): a capture window of the
``2K`` row entries the walk can read (``A[ws0-K .. ws0-1]`` and ``C``), a walker issuing one
gain per clock to the *gain* adder, the running sums of up to seven requests (``PHASES``: the
adder's latency and its operand register) interleaved on the *chain* adder (one phase slot per
pipeline stage), the per-``w`` accumulation on the *accumulate* adder in ascending ``b``, then
the policy's marginals on the gain adder. Every adder's operands are registered (the 300 MHz
rule of docs/timing.md). Throughput: ``max(ceil((ws0 + K) / lanes), K, 7)`` clocks per
request plus at most 6 clocks of phase alignment; calls are processed one after the other.
"""

from dataclasses import asdict, dataclass

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data
from amaranth.lib.memory import Memory

from hw.lib.component import KernelComponent
from hw.lib.float32 import (
    Float32Add,
    Float32Multiply,
    float32_fields,
    float32_less_equal,
    float32_order_key,
)
from hw.lib.params import ParameterRecord, parameter
from hw.lib.pipeline import count_leading_zeros, stage
from hw.lib.stream import packet_layout

__all__ = ["WorkDeltasParams", "WorkDeltas", "MAX_NODE_TOP_K", "MAX_LANES", "MAX_BATCH_SIZE",
           "G_BUFFERS", "uint_to_float32", "synthesis_parameters", "synthesis_configuration"]

MAX_NODE_TOP_K = 16
MAX_LANES = 16
# float32(B) is computed exactly by the hardware only below 2**24.
MAX_BATCH_SIZE = (1 << 24) - 1
# Gain vectors in flight between the walker and the chain adder (walk, wait, chain).
G_BUFFERS = 16
# Every adder's operands are registered (the operand selection and the adder's first stage do
# not fit one clock together): an operation takes the operand register and the adder.
ADD_LATENCY = 1 + Float32Add.latency
# Chain-adder phase slots: one request per pipeline stage, operand register included.
PHASES = ADD_LATENCY


def _widen_to_24(value: Value) -> Value:
    value = Value.cast(value)
    if len(value) > 24:
        raise ValueError(f"`value` must be at most 24 bits wide, not {len(value)}")
    return Cat(value, Const(0, 24 - len(value)))


def leading_zeros_24(value: Value) -> Value:
    """The leading zeros of ``value`` widened to 24 bits (``uint_to_float32``'s first half)."""
    return count_leading_zeros(_widen_to_24(value))


def uint_to_float32(value: Value, leading_zeros: Value | None = None) -> Value:
    """Bit pattern of the float32 equal to the unsigned integer ``value`` (combinational).

    Exact for ``value < 2**24`` (the width of ``value`` must be at most 24 bits).
    ``leading_zeros``, when given, is ``leading_zeros_24(value)`` computed (and registered)
    beforehand, which leaves only the shift.
    """
    wide = _widen_to_24(value)
    if leading_zeros is None:
        leading_zeros = leading_zeros_24(value)
    normalised = (wide << leading_zeros)[:24]
    exponent = (127 + 23 - leading_zeros)[:8]
    return Mux(wide == 0, 0, Cat(normalised[:23], exponent, Const(0, 1)))


def _delay(m, value, cycles, *, name):
    """``value`` delayed by ``cycles`` always-enabled registers (a pipeline's shadow tag)."""
    for index in range(cycles):
        value = stage(m, Const(1), value, name=f"{name}_d{index + 1}")
    return value


def _ordered_less(a_key: Value, a_nan: Value, b_key: Value, b_nan: Value) -> Value:
    """``float32_less(a, b)`` from the operands' ``float32_order_key`` and NaN flags."""
    return ~a_nan & ~b_nan & (a_key < b_key)


def _advance(m, entries):
    """Every register of ``entries`` takes the next one's value (a queue moving to the front;
    the last keeps its own unless overridden)."""
    m.d.sync += [dst.eq(src) for dst, src in zip(entries[:-1], entries[1:], strict=True)]


@dataclass(frozen=True)
class WorkDeltasParams(ParameterRecord):
    """Validated build parameters of :class:`WorkDeltas` and the port layouts they give
    (testbenches read the layouts here without building the component)."""

    node_top_k: int = parameter(
        8, "``K``, new nodes per request: the length of ``C`` and of ``work_deltas - 1``.",
        hi=MAX_NODE_TOP_K)
    max_verify_num: int = parameter(64, "``MAXV``: ``verify_num`` is clamped to ``1..MAXV``.")
    lanes: int = parameter(8, "float32 scores per ``scores`` beat (8 = a 256-bit beat).",
                           hi=MAX_LANES)
    max_batch_size: int = parameter(
        256, "Sets the width of ``batch_size`` (``max_batch_size.bit_length()`` bits, every "
             "value of that width is accepted).", hi=MAX_BATCH_SIZE)

    @property
    def batch_bits(self) -> int:
        """Width of ``batch_size``."""
        return self.max_batch_size.bit_length()

    @property
    def cmd_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "batch_size": unsigned(self.batch_bits),
            "cumu_count": unsigned(32),
            "verify_num": signed(32),
            "cost_per_node": unsigned(32),
        })

    @property
    def scores_layout(self) -> data.StructLayout:
        return packet_layout({"scores": data.ArrayLayout(unsigned(32), self.lanes)})

    @property
    def output_layout(self) -> data.StructLayout:
        return packet_layout({"work_delta": unsigned(32),
                              "next_width": range(self.node_top_k + 1)})

    @property
    def ports(self) -> dict:
        """Port name -> payload layout."""
        return {"cmd": self.cmd_layout, "scores": self.scores_layout,
                "deltas": self.output_layout}


class WorkDeltas(KernelComponent):
    """K3 ``calculate_work_deltas`` plus the width policy, bit-exact with the golden.

    Parameters: those of :class:`WorkDeltasParams` (``params``; each is also a read-only
    property).

    Members
    -------
    cmd : In(stream.Signature(cmd_layout))
        One beat per call: ``batch_size`` (unsigned), ``cumu_count`` (unsigned 32 bits, the
        count K2 received), ``verify_num`` (signed 32 bits, clamped to ``1..MAXV``),
        ``cost_per_node`` (float32 bits). Accepted only between calls.
    scores : In(stream.Signature(scores_layout))
        Per request ``b`` (ascending), ``work_scores[b, 0 .. ws0+K-1]`` with
        ``ws0 = min(clamp(verify_num, 1, MAXV), cumu_count)``, ``lanes`` values per beat
        (position ``lanes * beat + lane``), ``ceil((ws0 + K) / lanes)`` beats; lanes past the
        row end are ignored. ``first``/``last`` mark the row's beats but are not checked.
    deltas : Out(stream.Signature(output_layout))
        ``K + 1`` beats per call: ``work_delta`` = ``work_deltas[w]`` (float32 bits) for
        ``w = 0..K``, ``next_width`` = ``W'`` of the width policy on every beat, ``first`` on
        ``w = 0``, ``last`` on ``w = K``.
    """

    Params = WorkDeltasParams
    OUTPUTS = ("deltas",)

    def elaborate(self, platform):
        m = Module()
        p = self._params
        k, maxv, lanes = p.node_top_k, p.max_verify_num, p.lanes
        batch_width = p.batch_bits
        step_bits = max(1, (k - 1).bit_length())  # index of a step inside a gain vector
        gidx_bits = (G_BUFFERS - 1).bit_length()

        m.submodules.gain_add = gain_add = Float32Add()  # g, then the policy's marginals
        m.submodules.chain_add = chain_add = Float32Add()  # D = D + g
        m.submodules.acc_add = acc_add = Float32Add()  # work_deltas[w] += D[w]
        m.submodules.threshold_mul = threshold_mul = Float32Multiply()
        # Distributed RAM: its registered read is a LUT and a flip-flop, where a block RAM's
        # clock-to-out would leave too little of the clock for the chain adder's first stage.
        m.submodules.gains = gains = Memory(shape=unsigned(32), depth=G_BUFFERS << step_bits,
                                            init=[], attrs={"ram_style": "distributed"})
        gain_write = gains.write_port()
        gain_read = gains.read_port(transparent_for=(gain_write,))

        # --- call parameters, latched from `cmd` ------------------------------------------
        batch = Signal(batch_width)
        verify = Signal(range(maxv + 1))  # v
        kept0 = Signal(range(maxv + 1))  # ws0
        row_length = Signal(range(maxv + k + 1))  # ws0 + K
        window_base = Signal(range(-k, maxv + 1))  # row position of window entry 0: ws0 - K
        cumu_count = Signal.like(self.cmd.payload.cumu_count)
        batch_zeros = Signal(5)  # leading_zeros_24(batch)
        cost = Signal(32)
        batch_f32 = Signal(32)
        m.d.comb += [threshold_mul.a.eq(cost), threshold_mul.b.eq(batch_f32)]
        # The multiplier's operands are constant during a call, so its result is the threshold
        # from Float32Multiply.latency clocks after SETUP, long before the policy's compares.
        threshold = threshold_mul.result

        command = self.cmd.payload
        verify_new = Mux(command.verify_num < 1, 1,
                         Mux(command.verify_num > maxv, maxv, command.verify_num))
        kept0_new = Mux(cumu_count < verify, cumu_count, verify)

        # --- accumulators and control -----------------------------------------------------
        sums = [Signal(32, name=f"work_delta{w + 1}") for w in range(k)]  # work_deltas[1..K]
        sums_from_zero = Array([Const(0, 32), *sums])  # work_deltas[0..K]
        rows_taken = Signal(batch_width)
        rows_done = Signal(batch_width)
        policy_step = Signal(range(k + 1))
        next_width = Signal(range(k + 1))
        out_index = Signal(range(k + 1))
        running = Signal()
        policy_issue = Signal()

        # --- capture: row beats into the window -------------------------------------------
        window = [Signal(32, name=f"window{i}") for i in range(2 * k)]
        offset = Signal(range(-(maxv + 2 * k) - lanes, maxv + k + 1))  # window_base - lanes*beat
        remaining = Signal(range(maxv + k + 1))  # row positions not yet received
        window_full = Signal()
        handoff = Signal()
        lane_values = [self.scores.payload.scores[lane] for lane in range(lanes)]
        lane_select_bits = max(1, (lanes - 1).bit_length())

        beat = self.scores.valid & self.scores.ready
        last_beat = remaining <= lanes
        m.d.comb += self.scores.ready.eq(running & (rows_taken < batch)
                                         & (~window_full | handoff))
        with m.If(beat):
            for i in range(2 * k):
                relative = offset + i
                with m.If((relative >= 0) & (relative < lanes)):
                    if lanes == 1:
                        m.d.sync += window[i].eq(lane_values[0])
                    else:
                        m.d.sync += window[i].eq(
                            Array(lane_values)[relative[:lane_select_bits]])
            with m.If(last_beat):
                m.d.sync += [offset.eq(window_base), remaining.eq(row_length),
                             rows_taken.eq(rows_taken + 1)]
            with m.Else():
                m.d.sync += [offset.eq(offset - lanes), remaining.eq(remaining - lanes)]
        with m.If(beat & last_beat):
            m.d.sync += window_full.eq(1)
        with m.Elif(handoff):
            m.d.sync += window_full.eq(0)

        # --- walk: one step w per clock, gains issued to the gain adder --------------------
        walking = Signal()
        walk_step = Signal(range(k + 1))  # j = w - 1
        walk_gidx = Signal(gidx_bits)
        walk_seq = Signal(gidx_bits)
        buffers_used = Signal(range(G_BUFFERS + 1))
        buffer_freed = Signal()

        walk_last = Signal()  # walk_step == k - 1, registered
        walker_free = ~walking | walk_last
        m.d.comb += handoff.eq(window_full & walker_free & (buffers_used < G_BUFFERS))

        # The walk's state is kept so that each step's decision reads registers only: the
        # scores still to enter (C[w-1] first) and the kept ones still displaceable (the
        # smallest, A[a-1] with a = ws0 - d, first) as queues that shift, with their order
        # keys (float32_less's compare without the negation in the loop), and the two
        # conditions on d = ws0 - a as counters: slack = v + d - ws0 - (w-1) (> 0: the
        # entering score takes a free slot) and kept_left = ws0 - d (> 0: one can go).
        fields = {"score": (unsigned(32), lambda value: value),
                  "key": (signed(32), float32_order_key),
                  "nan": (unsigned(1), lambda value: float32_fields(value).is_nan)}
        new, kept = ({name: [Signal(shape, name=f"{queue}_{name}{i}") for i in range(k)]
                      for name, (shape, _) in fields.items()} for queue in ("new", "kept"))
        slack = Signal(range(-k - 1, maxv + k + 1))
        kept_left = Signal(range(maxv + 1))

        new_score, smallest_kept = new["score"][0], kept["score"][0]
        enters_free = slack > 0  # a + (w-1) < v
        displaces = (~enters_free & (kept_left != 0)
                     & _ordered_less(kept["key"][0], kept["nan"][0], new["key"][0], new["nan"][0]))

        with m.If(handoff):
            for queues, scores in ((new, window[k:]), (kept, window[k - 1::-1])):
                for name, (_, view) in fields.items():
                    m.d.sync += [dst.eq(view(score))
                                 for dst, score in zip(queues[name], scores, strict=True)]
            m.d.sync += [walking.eq(1), walk_step.eq(0), walk_last.eq(k == 1),
                         slack.eq(verify - kept0),
                         kept_left.eq(kept0), walk_gidx.eq(walk_seq), walk_seq.eq(walk_seq + 1)]
        with m.Elif(walking):
            m.d.sync += [walk_step.eq(walk_step + 1), walk_last.eq(walk_step + 2 == k),
                         slack.eq(slack + displaces - 1)]
            for entries in new.values():
                _advance(m, entries)
            with m.If(displaces):
                m.d.sync += kept_left.eq(kept_left - 1)
                for entries in kept.values():
                    _advance(m, entries)
            with m.If(walk_last):
                m.d.sync += walking.eq(0)
        m.d.sync += buffers_used.eq(buffers_used + handoff - buffer_freed)

        # Gain adder: walker gains or, after the last request, the policy's marginals.
        gain_a = stage(m, Const(1), Mux(policy_issue, sums_from_zero[policy_step + 1],
                                        Mux(enters_free | displaces, new_score, 0)),
                       name="gain_a")
        gain_b = stage(m, Const(1), Mux(policy_issue, sums_from_zero[policy_step],
                                        Mux(displaces, smallest_kept, 0)),
                       name="gain_b")
        m.d.comb += [gain_add.a.eq(gain_a), gain_add.b.eq(gain_b), gain_add.subtract.eq(1)]
        gain_valid = _delay(m, walking | policy_issue, ADD_LATENCY, name="gain_valid")
        gain_policy = _delay(m, policy_issue, ADD_LATENCY, name="gain_policy")
        gain_step = _delay(m, Mux(policy_issue, policy_step, walk_step), ADD_LATENCY,
                           name="gain_step")
        gain_gidx = _delay(m, walk_gidx, ADD_LATENCY, name="gain_gidx")
        gain_stored = gain_valid & ~gain_policy
        m.d.comb += [gain_write.addr.eq(Cat(gain_step[:step_bits], gain_gidx)),
                     gain_write.data.eq(gain_add.result),
                     gain_write.en.eq(gain_stored)]
        vector_ready = gain_stored & (gain_step == k - 1)

        # --- running sums: PHASES phase slots share the chain adder ------------------------
        # The slots rotate one place per clock, so the current one is always slot 0 (a
        # register, not a multiplexer) and each comes back after PHASES clocks.
        slot_active = [Signal(name=f"slot{p}_active") for p in range(PHASES)]
        slot_gidx = [Signal(gidx_bits, name=f"slot{p}_gidx") for p in range(PHASES)]
        slot_step = [Signal(range(k + 1), name=f"slot{p}_step") for p in range(PHASES)]
        current_active, current_gidx, current_step = slot_active[0], slot_gidx[0], slot_step[0]
        vectors_ready = Signal(range(G_BUFFERS + 1))
        start_gidx = Signal(gidx_bits)
        since_start = Signal(range(PHASES + 1), init=PHASES)  # clocks since the last start
        spaced = Signal(init=1)  # since_start == PHASES, registered
        start = ~current_active & (vectors_ready != 0) & spaced
        # A request frees its gain vector when it reads the last gain (at once when K = 1).
        freed_at_start = start if k == 1 else Const(0)
        m.d.comb += buffer_freed.eq((current_active & (current_step == k - 1)) | freed_at_start)
        m.d.sync += vectors_ready.eq(vectors_ready + vector_ready - start)
        m.d.sync += [since_start.eq(Mux(start, 1, Mux(spaced, PHASES, since_start + 1))),
                     spaced.eq(~start & (spaced | (since_start == PHASES - 1)))]

        # The gain is read a clock ahead, for the slot that is current next (slot 1 now, or a
        # request starting then), so that the block RAM's registered read feeds the operand
        # register directly.
        upcoming_active, upcoming_gidx, upcoming_step = slot_active[1], slot_gidx[1], slot_step[1]
        upcoming_start_gidx = Mux(start, start_gidx + 1, start_gidx)
        m.d.comb += [
            gain_read.addr.eq(Mux(upcoming_active, Cat(upcoming_step[:step_bits], upcoming_gidx),
                                  Cat(Const(0, step_bits), upcoming_start_gidx))),
            chain_add.a.eq(stage(m, Const(1), Mux(current_active, chain_add.result, 0),
                                 name="chain_a")),  # D_0 = +0
            chain_add.b.eq(stage(m, Const(1), gain_read.data, name="chain_b")),
            chain_add.subtract.eq(0),
        ]
        for slot in (slot_active, slot_gidx, slot_step):
            _advance(m, slot)
        last = PHASES - 1  # where the current slot goes
        m.d.sync += [slot_active[last].eq(current_active), slot_gidx[last].eq(current_gidx),
                     slot_step[last].eq(current_step)]
        with m.If(current_active):
            m.d.sync += slot_step[last].eq(current_step + 1)
            with m.If(current_step == k - 1):
                m.d.sync += slot_active[last].eq(0)
        with m.Elif(start if k > 1 else Const(0)):
            m.d.sync += [slot_active[last].eq(1), slot_gidx[last].eq(start_gidx),
                         slot_step[last].eq(1)]
        with m.If(start):
            m.d.sync += start_gidx.eq(start_gidx + 1)
        chain_valid = _delay(m, current_active | start, ADD_LATENCY, name="chain_valid")
        chain_step = _delay(m, Mux(current_active, current_step, 0), ADD_LATENCY,
                            name="chain_step")

        # --- accumulation into work_deltas[1..K] -----------------------------------------
        acc_valid = _delay(m, chain_valid, ADD_LATENCY, name="acc_valid")
        acc_step = _delay(m, chain_step, ADD_LATENCY, name="acc_step")
        bypass = acc_valid & (acc_step == chain_step)
        m.d.comb += [acc_add.a.eq(stage(m, Const(1),
                                        Mux(bypass, acc_add.result, Array(sums)[chain_step]),
                                        name="acc_a")),
                     acc_add.b.eq(stage(m, Const(1), chain_add.result, name="acc_b")),
                     acc_add.subtract.eq(0)]
        with m.If(acc_valid):
            for w in range(k):
                with m.If(acc_step == w):
                    m.d.sync += sums[w].eq(acc_add.result)
            with m.If(acc_step == k - 1):
                m.d.sync += rows_done.eq(rows_done + 1)

        # --- call control ----------------------------------------------------------------
        # The policy's compare of each marginal with the threshold, registered.
        marginal = gain_add.result
        marginal_valid = stage(m, Const(1), gain_valid & gain_policy, name="marginal_valid")
        marginal_taken = stage(m, Const(1), float32_less_equal(threshold, marginal),
                               name="marginal_taken")
        marginal_step = stage(m, Const(1), gain_step, name="marginal_step")
        m.d.comb += [
            self.deltas.payload.work_delta.eq(sums_from_zero[out_index]),
            self.deltas.payload.next_width.eq(next_width),
            self.deltas.payload.first.eq(out_index == 0),
            self.deltas.payload.last.eq(out_index == k),
        ]
        with m.FSM(name="control"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += [
                        batch.eq(command.batch_size),
                        batch_zeros.eq(leading_zeros_24(command.batch_size)),
                        verify.eq(verify_new),
                        cumu_count.eq(command.cumu_count),
                        cost.eq(command.cost_per_node),
                        rows_taken.eq(0),
                        rows_done.eq(0),
                        policy_step.eq(0),
                        next_width.eq(0),
                        out_index.eq(0),
                        *[s.eq(0) for s in sums],
                    ]
                    m.next = "SETUP"
            with m.State("SETUP"):  # what follows from the command, a clock after it
                m.d.sync += [kept0.eq(kept0_new), row_length.eq(kept0_new + k),
                             window_base.eq(kept0_new - k), offset.eq(kept0_new - k),
                             remaining.eq(kept0_new + k),
                             batch_f32.eq(uint_to_float32(batch, batch_zeros))]
                m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += running.eq(1)
                with m.If(rows_done == batch):
                    m.next = "POLICY"
            with m.State("POLICY"):
                with m.If(policy_step != k):
                    m.d.comb += policy_issue.eq(1)
                    m.d.sync += policy_step.eq(policy_step + 1)
                with m.If(marginal_valid):
                    with m.If(marginal_taken):
                        m.d.sync += next_width.eq(marginal_step + 1)
                    with m.If(marginal_step == k - 1):
                        m.next = "OUTPUT"
            with m.State("OUTPUT"):
                m.d.comb += self.deltas.valid.eq(1)
                with m.If(self.deltas.ready):
                    m.d.sync += out_index.eq(out_index + 1)
                    with m.If(out_index == k):
                        m.next = "IDLE"
        return m


def synthesis_parameters(**overrides) -> WorkDeltasParams:
    """The parameters of the synthesis report: ``K = 8``, verify sets of up to 64 nodes,
    256-bit score beats (8 lanes), batches of up to 256 requests (the simulation target's)."""
    return WorkDeltasParams(**{"node_top_k": 8, "max_verify_num": 64, "lanes": 8,
                               "max_batch_size": 256, **overrides})


def synthesis_configuration(**overrides) -> WorkDeltas:
    """K3 at ``synthesis_parameters(**overrides)``."""
    return WorkDeltas(**asdict(synthesis_parameters(**overrides)))
