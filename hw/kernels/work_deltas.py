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
gain per clock to the *gain* adder, the running sums of up to five requests interleaved on the
*chain* adder (one phase slot per pipeline stage), the per-``w`` accumulation on the
*accumulate* adder in ascending ``b``, then the policy's marginals on the gain adder.
Throughput: ``max(ceil((ws0 + K) / lanes), K, 5)`` clocks per request plus at most 4 clocks
of phase alignment; calls are processed one after the other.
"""

from dataclasses import asdict, dataclass

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data
from amaranth.lib.memory import Memory

from hw.lib.component import KernelComponent
from hw.lib.float32 import Float32Add, Float32Multiply, float32_equal, float32_less
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
# Chain-adder phase slots: one request per pipeline stage of the adder.
PHASES = Float32Add.latency


def uint_to_float32(value: Value) -> Value:
    """Bit pattern of the float32 equal to the unsigned integer ``value`` (combinational).

    Exact for ``value < 2**24`` (the width of ``value`` must be at most 24 bits).
    """
    value = Value.cast(value)
    if len(value) > 24:
        raise ValueError(f"`value` must be at most 24 bits wide, not {len(value)}")
    wide = Cat(value, Const(0, 24 - len(value)))
    leading_zeros = count_leading_zeros(wide)
    normalised = (wide << leading_zeros)[:24]
    exponent = (127 + 23 - leading_zeros)[:8]
    return Mux(wide == 0, 0, Cat(normalised[:23], exponent, Const(0, 1)))


def _delay(m, value, cycles, *, name):
    """``value`` delayed by ``cycles`` always-enabled registers (a pipeline's shadow tag)."""
    for index in range(cycles):
        value = stage(m, Const(1), value, name=f"{name}_d{index + 1}")
    return value


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
        m.submodules.gains = gains = Memory(shape=unsigned(32),
                                            depth=G_BUFFERS << step_bits, init=[])
        gain_write = gains.write_port()
        gain_read = gains.read_port(domain="comb")

        # --- call parameters, latched from `cmd` ------------------------------------------
        batch = Signal(batch_width)
        verify = Signal(range(maxv + 1))  # v
        kept0 = Signal(range(maxv + 1))  # ws0
        row_length = Signal(range(maxv + k + 1))  # ws0 + K
        window_base = Signal(range(-k, maxv + 1))  # row position of window entry 0: ws0 - K
        cost = Signal(32)
        batch_f32 = Signal(32)
        m.d.comb += [threshold_mul.a.eq(cost), threshold_mul.b.eq(batch_f32)]
        # The multiplier's operands are constant during a call, so its result is the threshold
        # from 4 clocks after `cmd`; the policy compares no earlier than 7 clocks after.
        threshold = threshold_mul.result

        command = self.cmd.payload
        verify_new = Mux(command.verify_num < 1, 1,
                         Mux(command.verify_num > maxv, maxv, command.verify_num))
        kept0_new = Mux(command.cumu_count < verify_new, command.cumu_count, verify_new)

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
        walk_window = [Signal(32, name=f"walk_window{i}") for i in range(2 * k)]
        walking = Signal()
        walk_step = Signal(range(k + 1))  # j = w - 1
        walk_displaced = Signal(range(k + 1))  # d = ws0 - a
        walk_gidx = Signal(gidx_bits)
        walk_seq = Signal(gidx_bits)
        buffers_used = Signal(range(G_BUFFERS + 1))
        buffer_freed = Signal()

        walker_free = ~walking | (walk_step == k - 1)
        m.d.comb += handoff.eq(window_full & walker_free & (buffers_used < G_BUFFERS))

        new_score = Array(walk_window[k:])[walk_step]  # C[w-1]
        smallest_kept = Array([walk_window[k - 1 - d] for d in range(k)])[walk_displaced]
        enters_free = (kept0 + walk_step) < (verify + walk_displaced)  # a + (w-1) < v
        displaces = (~enters_free & (walk_displaced < kept0)
                     & float32_less(smallest_kept, new_score))

        with m.If(handoff):
            m.d.sync += [dst.eq(src) for dst, src in zip(walk_window, window, strict=True)]
            m.d.sync += [walking.eq(1), walk_step.eq(0), walk_displaced.eq(0),
                         walk_gidx.eq(walk_seq), walk_seq.eq(walk_seq + 1)]
        with m.Elif(walking):
            m.d.sync += [walk_step.eq(walk_step + 1), walk_displaced.eq(walk_displaced + displaces)]
            with m.If(walk_step == k - 1):
                m.d.sync += walking.eq(0)
        m.d.sync += buffers_used.eq(buffers_used + handoff - buffer_freed)

        # Gain adder: walker gains or, after the last request, the policy's marginals.
        m.d.comb += gain_add.subtract.eq(1)
        with m.If(policy_issue):
            m.d.comb += [gain_add.a.eq(sums_from_zero[policy_step + 1]),
                         gain_add.b.eq(sums_from_zero[policy_step])]
        with m.Else():
            m.d.comb += [gain_add.a.eq(Mux(enters_free | displaces, new_score, 0)),
                         gain_add.b.eq(Mux(displaces, smallest_kept, 0))]
        gain_valid = _delay(m, walking | policy_issue, Float32Add.latency, name="gain_valid")
        gain_policy = _delay(m, policy_issue, Float32Add.latency, name="gain_policy")
        gain_step = _delay(m, Mux(policy_issue, policy_step, walk_step), Float32Add.latency,
                           name="gain_step")
        gain_gidx = _delay(m, walk_gidx, Float32Add.latency, name="gain_gidx")
        gain_stored = gain_valid & ~gain_policy
        m.d.comb += [gain_write.addr.eq(Cat(gain_step[:step_bits], gain_gidx)),
                     gain_write.data.eq(gain_add.result),
                     gain_write.en.eq(gain_stored)]
        vector_ready = gain_stored & (gain_step == k - 1)

        # --- running sums: five phase slots share the chain adder ------------------------
        phase = Signal(range(PHASES))
        m.d.sync += phase.eq(Mux(phase == PHASES - 1, 0, phase + 1))
        slot_active = [Signal(name=f"slot{p}_active") for p in range(PHASES)]
        slot_gidx = [Signal(gidx_bits, name=f"slot{p}_gidx") for p in range(PHASES)]
        slot_step = [Signal(range(k + 1), name=f"slot{p}_step") for p in range(PHASES)]
        current_active = Array(slot_active)[phase]
        current_gidx = Array(slot_gidx)[phase]
        current_step = Array(slot_step)[phase]
        vectors_ready = Signal(range(G_BUFFERS + 1))
        start_gidx = Signal(gidx_bits)
        since_start = Signal(range(PHASES + 1), init=PHASES)  # clocks since the last start
        start = ~current_active & (vectors_ready != 0) & (since_start == PHASES)
        # A request frees its gain vector when it reads the last gain (at once when K = 1).
        freed_at_start = start if k == 1 else Const(0)
        m.d.comb += buffer_freed.eq((current_active & (current_step == k - 1)) | freed_at_start)
        m.d.sync += vectors_ready.eq(vectors_ready + vector_ready - start)
        m.d.sync += since_start.eq(Mux(start, 1, Mux(since_start == PHASES, PHASES,
                                                     since_start + 1)))

        m.d.comb += [
            gain_read.addr.eq(Mux(current_active, Cat(current_step[:step_bits], current_gidx),
                                  Cat(Const(0, step_bits), start_gidx))),
            chain_add.a.eq(Mux(current_active, chain_add.result, 0)),  # D_0 = +0
            chain_add.b.eq(gain_read.data),
            chain_add.subtract.eq(0),
        ]
        for p in range(PHASES):
            with m.If(phase == p):
                with m.If(current_active):
                    m.d.sync += slot_step[p].eq(current_step + 1)
                    with m.If(current_step == k - 1):
                        m.d.sync += slot_active[p].eq(0)
                with m.Elif(start if k > 1 else Const(0)):
                    m.d.sync += [slot_active[p].eq(1), slot_gidx[p].eq(start_gidx),
                                 slot_step[p].eq(1)]
        with m.If(start):
            m.d.sync += start_gidx.eq(start_gidx + 1)
        chain_valid = _delay(m, current_active | start, Float32Add.latency, name="chain_valid")
        chain_step = _delay(m, Mux(current_active, current_step, 0), Float32Add.latency,
                            name="chain_step")

        # --- accumulation into work_deltas[1..K] -----------------------------------------
        acc_valid = _delay(m, chain_valid, Float32Add.latency, name="acc_valid")
        acc_step = _delay(m, chain_step, Float32Add.latency, name="acc_step")
        bypass = acc_valid & (acc_step == chain_step)
        m.d.comb += [acc_add.a.eq(Mux(bypass, acc_add.result, Array(sums)[chain_step])),
                     acc_add.b.eq(chain_add.result),
                     acc_add.subtract.eq(0)]
        with m.If(acc_valid):
            for w in range(k):
                with m.If(acc_step == w):
                    m.d.sync += sums[w].eq(acc_add.result)
            with m.If(acc_step == k - 1):
                m.d.sync += rows_done.eq(rows_done + 1)

        # --- call control ----------------------------------------------------------------
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
                        verify.eq(verify_new),
                        kept0.eq(kept0_new),
                        row_length.eq(kept0_new + k),
                        window_base.eq(kept0_new - k),
                        offset.eq(kept0_new - k),
                        remaining.eq(kept0_new + k),
                        cost.eq(command.cost_per_node),
                        batch_f32.eq(uint_to_float32(command.batch_size)),
                        rows_taken.eq(0),
                        rows_done.eq(0),
                        policy_step.eq(0),
                        next_width.eq(0),
                        out_index.eq(0),
                        *[s.eq(0) for s in sums],
                    ]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += running.eq(1)
                with m.If(rows_done == batch):
                    m.next = "POLICY"
            with m.State("POLICY"):
                with m.If(policy_step != k):
                    m.d.comb += policy_issue.eq(1)
                    m.d.sync += policy_step.eq(policy_step + 1)
                with m.If(gain_valid & gain_policy):
                    marginal = gain_add.result
                    with m.If(float32_less(threshold, marginal)
                              | float32_equal(threshold, marginal)):
                        m.d.sync += next_width.eq(gain_step + 1)
                    with m.If(gain_step == k - 1):
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
