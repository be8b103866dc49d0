"""Stream wrapper around one ``hw.lib.float32`` core: the DUT of the float32 testbenches."""

from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.float32 import Float32Add, Float32Compare, Float32Multiply
from hw.lib.stream import stalling_handshake

__all__ = ["Float32OpStream", "OPERAND_LAYOUT", "RESULT_LAYOUTS"]

OPERAND_LAYOUT = data.StructLayout({"a": 32, "b": 32, "subtract": 1})
RESULT_LAYOUTS = {
    "mul": data.StructLayout({"result": 32}),
    "add": data.StructLayout({"result": 32}),
    "cmp": data.StructLayout({"less": 1, "equal": 1, "greater": 1}),
}
_CORES = {"mul": Float32Multiply, "add": Float32Add, "cmp": Float32Compare}


class Float32OpStream(wiring.Component):
    """One float32 core between an operand stream and a result stream.

    Parameters
    ----------
    operation : str
        ``"mul"`` (``Float32Multiply``), ``"add"`` (``Float32Add``; the operand's ``subtract``
        bit selects ``a - b``) or ``"cmp"`` (``Float32Compare``).

    Members
    -------
    i : In(stream.Signature(OPERAND_LAYOUT))
        Operand pairs ``{a, b, subtract}``.
    o : Out(stream.Signature(RESULT_LAYOUTS[operation]))
        ``{result}``, or ``{less, equal, greater}`` for ``cmp``, in operand order.
    """

    def __init__(self, operation: str):
        if operation not in _CORES:
            raise ValueError(f"`operation` must be one of {sorted(_CORES)}, not {operation!r}")
        self._operation = operation
        super().__init__({
            "i": In(stream.Signature(OPERAND_LAYOUT)),
            "o": Out(stream.Signature(RESULT_LAYOUTS[operation])),
        })

    @property
    def operation(self):
        return self._operation

    @property
    def latency(self):
        return _CORES[self._operation].latency

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = _CORES[self._operation]()
        m.d.comb += [
            core.en.eq(stalling_handshake(m, latency=core.latency, source=self.i, sink=self.o)),
            core.a.eq(self.i.payload.a),
            core.b.eq(self.i.payload.b),
        ]
        if self._operation == "add":
            m.d.comb += core.subtract.eq(self.i.payload.subtract)
        if self._operation == "cmp":
            m.d.comb += [self.o.payload.less.eq(core.lt), self.o.payload.equal.eq(core.eq),
                         self.o.payload.greater.eq(core.gt)]
        else:
            m.d.comb += self.o.payload.result.eq(core.result)
        return m
