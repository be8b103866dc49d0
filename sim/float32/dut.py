"""Stream wrapper around one float32 core: the DUT of the float32 testbenches.

``Float32OpStream(operation)`` puts ``hw.lib.float32``'s ``Float32Multiply``, ``Float32Add`` or
``Float32Compare``, or ``hw.lib.float32_divide.Float32Divide``, between an operand stream and a
result stream; ``Float32StreamParams`` is its parameter record (the testbench reads the port
layouts there).
"""

from dataclasses import dataclass

from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.float32 import Float32Add, Float32Compare, Float32Multiply
from hw.lib.float32_divide import Float32Divide, divide_latency
from hw.lib.params import check_choice, check_int
from hw.lib.stream import stalling_handshake

__all__ = ["Float32OpStream", "Float32StreamParams", "OPERATIONS", "OPERAND_LAYOUT",
           "RESULT_LAYOUTS"]

OPERAND_LAYOUT = data.StructLayout({"a": 32, "b": 32, "subtract": 1})
RESULT_LAYOUTS = {
    "mul": data.StructLayout({"result": 32}),
    "add": data.StructLayout({"result": 32}),
    "cmp": data.StructLayout({"less": 1, "equal": 1, "greater": 1}),
    "div": data.StructLayout({"result": 32}),
}
OPERATIONS = tuple(RESULT_LAYOUTS)
_CORES = {"mul": Float32Multiply, "add": Float32Add, "cmp": Float32Compare}  # and div


@dataclass(frozen=True)
class Float32StreamParams:
    """Validated parameters of :class:`Float32OpStream`.

    Parameters
    ----------
    operation : str
        ``"mul"`` (``Float32Multiply``), ``"add"`` (``Float32Add``; the operand's ``subtract``
        bit selects ``a - b``), ``"cmp"`` (``Float32Compare``) or ``"div"`` (``Float32Divide``).
    bits_per_stage : int
        ``Float32Divide.bits_per_stage`` (``div`` only; 1..25).
    """

    operation: str = "mul"
    bits_per_stage: int = 1

    def __post_init__(self):
        check_choice("operation", self.operation, OPERATIONS)
        check_int("bits_per_stage", self.bits_per_stage, 1, 25)

    @property
    def latency(self) -> int:
        """Clocks from an operand to its result in the core."""
        if self.operation == "div":
            return divide_latency(self.bits_per_stage)
        return _CORES[self.operation].latency

    @property
    def ports(self) -> dict:
        """Port name -> payload layout."""
        return {"i": OPERAND_LAYOUT, "o": RESULT_LAYOUTS[self.operation]}


class Float32OpStream(wiring.Component):
    """One float32 core between an operand stream and a result stream.

    Parameters
    ----------
    operation, bits_per_stage
        See :class:`Float32StreamParams`.

    Members
    -------
    i : In(stream.Signature(OPERAND_LAYOUT))
        Operand pairs ``{a, b, subtract}``.
    o : Out(stream.Signature(RESULT_LAYOUTS[operation]))
        ``{result}``, or ``{less, equal, greater}`` for ``cmp``, in operand order.
    """

    def __init__(self, operation: str, *, bits_per_stage: int = 1):
        self._params = params = Float32StreamParams(operation, bits_per_stage)
        super().__init__({
            "i": In(stream.Signature(OPERAND_LAYOUT)),
            "o": Out(stream.Signature(RESULT_LAYOUTS[params.operation])),
        })

    params = property(lambda self: self._params)
    operation = property(lambda self: self._params.operation)
    latency = property(lambda self: self._params.latency)

    def elaborate(self, platform):
        m = Module()
        operation = self._params.operation
        m.submodules.core = core = (
            Float32Divide(bits_per_stage=self._params.bits_per_stage) if operation == "div"
            else _CORES[operation]())
        m.d.comb += [
            core.en.eq(stalling_handshake(m, latency=core.latency, source=self.i, sink=self.o)),
            core.a.eq(self.i.payload.a),
            core.b.eq(self.i.payload.b),
        ]
        if operation == "add":
            m.d.comb += core.subtract.eq(self.i.payload.subtract)
        if operation == "cmp":
            m.d.comb += [self.o.payload.less.eq(core.lt), self.o.payload.equal.eq(core.eq),
                         self.o.payload.greater.eq(core.gt)]
        else:
            m.d.comb += self.o.payload.result.eq(core.result)
        return m
