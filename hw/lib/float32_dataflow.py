"""Float32 operation sequences in hardware, written like the numpy golden they replicate.

Two builders turn a straight-line sequence of float32 operations (every ``+``, ``-``, ``*`` one
``Float32Add``/``Float32Multiply``, rounded to nearest even) into hardware:

* :class:`Float32Dataflow`, fully pipelined: one core per operation and delay lines inserted
  automatically so that every operation sees operands of the same input item ("delay
  balancing"). One item per clock, a fixed latency (:attr:`Float32Dataflow.latency`), and a
  clock enable for the whole pipeline.
* :class:`Float32Sequencer`, sequential: one adder and one multiplier shared by every
  operation of one or more small programs (per-row or per-request constants), one operation at
  a time, results in registers. Slow (``latency + 2`` clocks per operation) and small.

Both accept float32 bit-pattern constants (Python ints) as operands and integer side logic
(``comb`` / ``fn`` steps) for the non-float parts (bit fields, ROM look-ups, masks).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value

from .float32 import Float32Add, Float32Multiply
from .pipeline import stage

__all__ = ["Node", "Float32Dataflow", "Float32Sequencer"]


class Node:
    """A value of a :class:`Float32Dataflow`: ``value`` valid at pipeline ``time`` (clocks
    after the inputs), or at every time when ``time`` is None (constants and values that are
    held stable while items are in flight)."""

    __slots__ = ("value", "time", "_chain")

    def __init__(self, value, time):
        self.value = Value.cast(value)
        self.time = time
        self._chain = [self.value]


class Float32Dataflow:
    """Builder of a pipelined float32 dataflow graph with automatic delay balancing.

    Parameters
    ----------
    m : Module
        Module the cores and registers are added to.
    en : Value
        Clock enable of the whole pipeline.
    name : str
        Prefix of submodule and register names.

    Operands are :class:`Node` s, or ints (float32 bit patterns, constants). ``add``/``sub``/
    ``mul`` return the rounded result ``Float32Add.latency`` / ``Float32Multiply.latency``
    clocks after the later operand; ``comb`` registers an integer function of its operands one
    clock after the later one; ``at`` reads a node delayed to a later time (delay lines are
    shared between readers).
    """

    def __init__(self, m: Module | None, en: Value, *, name: str):
        # m = None: a dry run that only tracks times and counts operations (no hardware).
        self._m = m
        self._en = en
        self._name = name
        self._count = 0
        self.adds = 0
        self.multiplies = 0

    def _fresh(self, kind):
        self._count += 1
        return f"{self._name}_{kind}{self._count}"

    def input(self, value) -> Node:
        """An input of the pipeline (time 0)."""
        return Node(value, 0)

    def static(self, value) -> Node:
        """A value held stable while items are in flight (per-row constants)."""
        return Node(value, None)

    def _node(self, operand) -> Node:
        if isinstance(operand, Node):
            return operand
        return Node(Const(operand, 32), None)

    def at(self, node, time: int) -> Value:
        """``node``'s value delayed to ``time`` (at least its own time)."""
        node = self._node(node)
        if node.time is None or self._m is None:
            return node.value
        if time < node.time:
            raise ValueError(f"cannot read a value of time {node.time} at time {time}")
        while len(node._chain) <= time - node.time:
            previous = node._chain[-1]
            node._chain.append(stage(self._m, self._en, previous, name=self._fresh("d")))
        return node._chain[time - node.time]

    @staticmethod
    def _time(*nodes) -> int:
        times = [node.time for node in nodes if node.time is not None]
        return max(times, default=0)

    def _binary(self, core, a, b, *, subtract=None):
        a, b = self._node(a), self._node(b)
        time = self._time(a, b)
        if self._m is None:
            return Node(Signal(32), time + core.latency)
        self._m.submodules[self._fresh("add" if subtract is not None else "mul")] = core
        self._m.d.comb += [core.en.eq(self._en), core.a.eq(self.at(a, time)),
                           core.b.eq(self.at(b, time))]
        if subtract is not None:
            self._m.d.comb += core.subtract.eq(subtract)
        return Node(core.result, time + core.latency)

    def add(self, a, b) -> Node:
        """``a + b`` (one rounding)."""
        self.adds += 1
        return self._binary(self._core(Float32Add), a, b, subtract=0)

    def sub(self, a, b) -> Node:
        """``a - b`` (one rounding)."""
        self.adds += 1
        return self._binary(self._core(Float32Add), a, b, subtract=1)

    def mul(self, a, b) -> Node:
        """``a * b`` (one rounding)."""
        self.multiplies += 1
        return self._binary(self._core(Float32Multiply), a, b)

    def _core(self, cls):
        # A dry run needs only the latency: the class stands in for an instance.
        return cls if self._m is None else cls()

    def comb(self, function, *operands, name: str = "c") -> Node:
        """``function(*values)`` (any Amaranth expression), registered: one clock after the
        latest operand."""
        nodes = [self._node(operand) for operand in operands]
        time = self._time(*nodes)
        value = Value.cast(function(*(self.at(node, time) for node in nodes)))
        if self._m is None:
            return Node(value, time + 1)
        return Node(stage(self._m, self._en, value, name=self._fresh(name)), time + 1)

    def align(self, *operands) -> tuple[int, list[Value]]:
        """``(time, values)``: every operand delayed to the latest one's time."""
        nodes = [self._node(operand) for operand in operands]
        time = self._time(*nodes)
        return time, [self.at(node, time) for node in nodes]


class Float32Sequencer:
    """Straight-line float32 programs run one operation at a time on one shared adder and one
    shared multiplier.

    Build programs with :meth:`program` (returns its entry point) and the operation methods,
    then call :meth:`elaborate` once. Operands are register names (strs), float32 constants
    (ints) or Amaranth values (read on the operation's first clock). ``add``/``sub``/``mul``
    take ``latency + 2`` clocks: the operands are first registered (an operand register in
    front of the shared cores, so that the selection by program counter and the cores' first
    stage are separate register-to-register paths), then the core runs, then the result is
    written. ``fn`` (integer side logic: a function returning a list of statements, executed
    on one clock) takes one clock. A program runs when ``start(name)`` is asserted while
    :attr:`busy` is low; ``busy`` is high until its last operation has written its result.
    """

    def __init__(self, *, name: str = "seq"):
        self._name = name
        self._ops = []  # (kind, dst, a, b) / ("fn", function)
        self._entries = {}
        self._ends = {}
        self._current = None
        self.regs = {}
        self.busy = Signal(name=f"{name}_busy")
        self._starts = {}

    def program(self, name: str):
        """Begin program ``name``: the operations that follow belong to it."""
        if self._current is not None:
            self._ends[self._current] = len(self._ops)
        self._current = name
        self._entries[name] = len(self._ops)
        self._starts[name] = Signal(name=f"{self._name}_start_{name}")

    def start(self, name: str) -> Signal:
        """The start strobe of program ``name``."""
        return self._starts[name]

    def reg(self, name: str) -> Signal:
        """The 32-bit register ``name`` (created on first use)."""
        if name not in self.regs:
            self.regs[name] = Signal(32, name=f"{self._name}_{name}")
        return self.regs[name]

    def _op(self, kind, dst, a, b):
        self.reg(dst)
        for operand in (a, b):
            if isinstance(operand, str):
                self.reg(operand)
        self._ops.append((kind, dst, a, b))
        return dst

    def add(self, dst, a, b):
        return self._op("add", dst, a, b)

    def sub(self, dst, a, b):
        return self._op("sub", dst, a, b)

    def mul(self, dst, a, b):
        return self._op("mul", dst, a, b)

    def fn(self, function):
        """One clock of integer logic: ``function()`` returns the statements to execute."""
        self._ops.append(("fn", function))

    def _value(self, operand):
        if isinstance(operand, str):
            return self.regs[operand]
        if isinstance(operand, int):
            return Const(operand, 32)
        return Value.cast(operand)

    def operations(self, name: str) -> int:
        """Number of float32 operations of program ``name``."""
        end = self._ends.get(name, len(self._ops))
        return sum(op[0] != "fn" for op in self._ops[self._entries[name]:end])

    def cycles(self, name: str) -> int:
        """Clocks program ``name`` takes from its start strobe to ``busy`` low (``busy`` falls
        with its last result)."""
        end = self._ends.get(name, len(self._ops))
        total = 0
        for op in self._ops[self._entries[name]:end]:
            if op[0] == "fn":
                total += 1
            else:
                total += (Float32Multiply.latency if op[0] == "mul" else Float32Add.latency) + 2
        return total

    def elaborate(self, m: Module) -> None:
        if self._current is not None:
            self._ends[self._current] = len(self._ops)
        adder, multiplier = Float32Add(), Float32Multiply()
        m.submodules[f"{self._name}_add"] = adder
        m.submodules[f"{self._name}_mul"] = multiplier
        count = len(self._ops)

        # Every distinct operand (register, constant, value) is one source. What the control
        # needs of an operation (its operands as one-hot source selections, subtract, the
        # clock its result leaves the core, whether it is an `fn` step or its program's last
        # operation) is a constant per operation: it is loaded into registers with the
        # program counter, so that no path decodes the program counter on its way to the
        # operand registers or the control (a wide decode there broke the 300 MHz rule).
        sources, numbers = [], {}

        def number(operand):
            key = (type(operand).__name__, operand if isinstance(operand, (str, int))
                   else id(operand))
            if key not in numbers:
                numbers[key] = len(sources)
                sources.append(self._value(operand))
            return numbers[key]

        lasts = {end - 1 for end in self._ends.values()}
        decoded = []
        for index, op in enumerate(self._ops):
            fields = {"is_fn": op[0] == "fn", "last": index in lasts}
            if op[0] != "fn":
                core = Float32Multiply if op[0] == "mul" else Float32Add
                fields.update(select_a=1 << number(op[2]), select_b=1 << number(op[3]),
                              subtract=op[0] == "sub", limit=core.latency + 1)
            decoded.append(fields)
        limit_max = max(Float32Add.latency, Float32Multiply.latency) + 1
        control = {"is_fn": Signal(name=f"{self._name}_is_fn"),
                   "last": Signal(name=f"{self._name}_last"),
                   "select_a": Signal(len(sources), name=f"{self._name}_select_a"),
                   "select_b": Signal(len(sources), name=f"{self._name}_select_b"),
                   "subtract": Signal(name=f"{self._name}_subtract"),
                   "limit": Signal(range(limit_max + 1), name=f"{self._name}_limit")}
        operand_a = Signal(32, name=f"{self._name}_operand_a")
        operand_b = Signal(32, name=f"{self._name}_operand_b")

        def select(one_hot):
            # An AND-OR multiplexer: shallower than a binary-coded one over this many sources.
            terms = [Mux(one_hot[i], source, 0) for i, source in enumerate(sources)]
            return Cat(*(Cat(*(term[bit] for term in terms)).any() for bit in range(32)))

        if sources:
            m.d.sync += [operand_a.eq(select(control["select_a"])),
                         operand_b.eq(select(control["select_b"]))]
        m.d.comb += [adder.a.eq(operand_a), adder.b.eq(operand_b),
                     adder.subtract.eq(control["subtract"]),
                     multiplier.a.eq(operand_a), multiplier.b.eq(operand_b)]

        pc = Signal(range(count + 1), name=f"{self._name}_pc")
        wait = Signal(range(limit_max + 1), name=f"{self._name}_wait")

        def load(fields):
            return [control[name].eq(fields.get(name, 0)) for name in control]

        # `ahead` = the control fields of the operation after the program counter's.
        ahead = {name: Signal.like(signal, name=f"{self._name}_ahead_{name}")
                 for name, signal in control.items()}
        with m.Switch(pc):
            for index, fields in enumerate(decoded[1:]):
                with m.Case(index):
                    m.d.comb += [ahead[name].eq(fields.get(name, 0)) for name in control]
        advance = self.busy & (control["is_fn"] | (wait == control["limit"]))
        with m.If(~self.busy):
            for name, strobe in self._starts.items():
                with m.If(strobe):
                    entry = self._entries[name]
                    m.d.sync += [self.busy.eq(1), pc.eq(entry), wait.eq(0),
                                 *load(decoded[entry])]
        with m.Elif(advance):
            # One step per operation; a program ends with its last operation's result.
            m.d.sync += [pc.eq(pc + 1), wait.eq(0), self.busy.eq(~control["last"]),
                         *(control[name].eq(ahead[name]) for name in control)]
        with m.Else():
            m.d.sync += wait.eq(wait + 1)
        with m.If(advance):
            with m.Switch(pc):
                for index, op in enumerate(self._ops):
                    with m.Case(index):
                        if op[0] == "fn":
                            m.d.sync += op[1]()
                        else:
                            core = multiplier if op[0] == "mul" else adder
                            # wait 0: operands registered; 1: the core's first stage; the
                            # result leaves the core `latency` clocks later.
                            m.d.sync += self.regs[op[1]].eq(core.result)
