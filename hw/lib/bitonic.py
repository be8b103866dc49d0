"""The padded bitonic top-k network of docs/kernels.md §1 as a fully pipelined sorter.

``bitonic_stages`` generates the compare-exchange stages in the spec's order (the same list as
``golden.sort.sort_network_stages``; a test checks they are equal). ``BitonicSorter`` builds
one compare-exchange per pair of every stage, with a pipeline register after every
``stages_per_register`` stages, so it accepts a new set of lanes every clock. ``delay`` is a
clock-enabled delay line for data that travels beside a pipeline.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .float32 import float32_fields, float32_order_key

__all__ = ["bitonic_stages", "BitonicSorter", "delay", "LANE_FLAGS"]

# A lane word: {float32 order key (32 bits), -0.0 flag, ordered (not NaN) flag, payload}.
LANE_FLAGS = 2


def bitonic_stages(width: int) -> list[list[tuple[int, int, bool]]]:
    """Compare-exchange stages of the §1 network on ``width`` lanes, in execution order.

    Parameters
    ----------
    width : int
        Number of lanes, a power of two >= 2 (the spec uses 64 and 128).

    Each stage is a list of ``width // 2`` disjoint pairs ``(i, j, descending)``, ``i < j``,
    listed by ``tid``: the pair swaps iff ``s[i] < s[j]`` when descending, ``s[i] > s[j]``
    otherwise. ``log2(width) * (log2(width) + 1) / 2`` stages in all (21 for 64 lanes).
    """
    if not isinstance(width, int) or width < 2 or width & (width - 1):
        raise ValueError(f"`width` must be a power of two >= 2, not {width!r}")
    stages = []
    size = 2
    while size <= width:
        stride = size // 2
        while stride >= 1:
            pairs = []
            for tid in range(width // 2):
                i = (tid // stride) * (2 * stride) + (tid % stride)
                pairs.append((i, i + stride, (i & size) == 0))
            stages.append(pairs)
            stride //= 2
        size *= 2
    return stages


def delay(m: Module, en: Value, value, cycles: int, *, name: str) -> Value:
    """``value`` delayed by ``cycles`` clock-enabled registers (``value`` itself for 0).

    The registers have no reset (``reset_less``), so vendor tools may map the line to shift
    register primitives (SRL); use it for data, not for valid bits.
    """
    value = Value.cast(value)
    for index in range(cycles):
        register = Signal(value.shape(), name=f"{name}_d{index + 1}", reset_less=True)
        with m.If(en):
            m.d.sync += register.eq(value)
        value = register
    return value


class BitonicSorter(wiring.Component):
    """Fully pipelined §1 sort network: float32 keys, descending, strict compares.

    Every pair of every stage of ``bitonic_stages(width)`` is one compare-exchange with the
    semantics of ``float32_less`` (IEEE-754: ``+0.0 == -0.0`` never swap, NaN never swaps); the
    payload of a lane moves with its key. Implementation: each key is turned once, at the
    input, into its ``float32_order_key`` plus a -0.0 flag and an "ordered" (not NaN) flag; a
    compare is then one signed comparison of order keys with both ordered flags set (exactly
    ``float32_less``), and
    the bit pattern (sign of zero and NaN payload included) is rebuilt at the output.

    A pipeline register follows the input conversion and every ``stages_per_register``
    stages (and the last stage), so one set of lanes enters per clock and leaves ``latency``
    clocks later; ``en`` low freezes
    the whole pipeline (drive it from ``hw.lib.stream.stalling_handshake``). The order of the
    outputs, ties included, is exactly the spec's (lane padding is the caller's business: feed
    the pad -1e10 to unused lanes).

    Parameters
    ----------
    width : int
        Lanes, a power of two >= 2 (64 or 128 for the spec).
    payload_width : int
        Bits of the payload carried with each key (e.g. the lane index), >= 1.
    stages_per_register : int
        Compare-exchange stages between pipeline registers, 1 .. number of stages (default 1:
        a register after every stage).

    Attributes
    ----------
    stages : list
        ``bitonic_stages(width)``.
    latency : int
        Clocks from input to output: ``1 + ceil(len(stages) / stages_per_register)``.

    Members
    -------
    en : In(1)
        Clock enable of the whole pipeline (init 1).
    keys : In(ArrayLayout(32, width))
        float32 bit patterns, lane order.
    payloads : In(ArrayLayout(payload_width, width))
        Payload of each lane.
    sorted_keys : Out(ArrayLayout(32, width))
        The keys after the last stage: descending for non-NaN keys.
    sorted_payloads : Out(ArrayLayout(payload_width, width))
        The payloads, moved with their keys.
    """

    def __init__(self, *, width: int = 64, payload_width: int = 7, stages_per_register: int = 1):
        self._stages = bitonic_stages(width)
        if not isinstance(payload_width, int) or payload_width < 1:
            raise ValueError(f"`payload_width` must be a positive integer, not {payload_width!r}")
        if (not isinstance(stages_per_register, int)
                or not 1 <= stages_per_register <= len(self._stages)):
            raise ValueError(f"`stages_per_register` must be between 1 and {len(self._stages)}, "
                             f"not {stages_per_register!r}")
        self._width = width
        self._payload_width = payload_width
        self._stages_per_register = stages_per_register
        keys = data.ArrayLayout(32, width)
        payloads = data.ArrayLayout(payload_width, width)
        super().__init__({
            "en": In(1, init=1),
            "keys": In(keys),
            "payloads": In(payloads),
            "sorted_keys": Out(keys),
            "sorted_payloads": Out(payloads),
        })

    @property
    def width(self):
        return self._width

    @property
    def payload_width(self):
        return self._payload_width

    @property
    def stages_per_register(self):
        return self._stages_per_register

    @property
    def stages(self):
        return [list(stage) for stage in self._stages]

    @property
    def word_width(self):
        """Bits of a lane word inside the network: 32 + 2 flags + payload."""
        return 32 + LANE_FLAGS + self._payload_width

    @property
    def latency(self):
        return 1 + -(-len(self._stages) // self._stages_per_register)

    def elaborate(self, platform):
        m = Module()
        lanes = []
        for lane in range(self._width):
            fields = float32_fields(self.keys[lane])
            lanes.append(Cat(float32_order_key(self.keys[lane]), fields.sign & fields.is_zero,
                             ~fields.is_nan, self.payloads[lane]))
        # The conversion (a negation) has a register of its own: with the first stage's
        # compare behind it, one clock would hold two carry chains in a row.
        lanes = [delay(m, self.en, word, 1, name=f"in_lane{lane}")
                 for lane, word in enumerate(lanes)]

        # Lane words stay separate signals of at most 64 bits (one machine word each in a
        # Verilator model); the swap decision of a pair is computed once.
        last = len(self._stages) - 1
        for number, pairs in enumerate(self._stages):
            lanes = list(lanes)
            for i, j, descending in pairs:
                x, y = (lanes[i], lanes[j]) if descending else (lanes[j], lanes[i])
                swap = Signal(name=f"s{number}_swap_{i}_{j}")
                m.d.comb += swap.eq(x[33] & y[33] & (x[:32].as_signed() < y[:32].as_signed()))
                lanes[i], lanes[j] = Mux(swap, lanes[j], lanes[i]), Mux(swap, lanes[i], lanes[j])
            if (number + 1) % self._stages_per_register == 0 or number == last:
                lanes = [delay(m, self.en, word, 1, name=f"s{number}_lane{lane}")
                         for lane, word in enumerate(lanes)]

        for lane, word in enumerate(lanes):
            order_key, negative_zero = word[:32], word[32]
            negative = order_key[31] | negative_zero
            magnitude = Mux(order_key[31], -order_key.as_signed(), order_key)[:31]
            m.d.comb += [
                self.sorted_keys[lane].eq(Cat(magnitude, negative)),
                self.sorted_payloads[lane].eq(word[32 + LANE_FLAGS:]),
            ]
        return m
