"""Card memory as the engine's ports see it, for the Amaranth simulator and for cocotb.

``CardMemory`` is a little-endian byte array with a bump allocator for named arrays of 32-bit
words (docs/engine.md, "Memory formats"). It answers AXI4-style read and write ports
(``hw.dataflow.memory_ports``) from that array: each burst is answered after a random latency,
in order, and every channel is stalled at random (``ar``/``aw``/``w`` refuse, ``r``/``b``
withhold their next beat; a beat once offered stays offered until it is taken, as AXI asks),
so the engine is tested under memory back-pressure. Accesses outside the array fail the
simulation.

One bookkeeping per port (``ReadServer``, ``WriteServer``: what to offer this clock, what a
clock edge's handshakes do) has two front ends: ``serve_read``/``serve_write`` return
background Amaranth testbenches, ``cocotb_read``/``cocotb_write`` return endpoints for
``sim.bench.KernelBench.run`` (``drive()`` after the falling edge, ``sample(cycle)`` before the
rising one) on a Verilated model's ports ``<port>__ar__valid`` ..., and ``clocked_read``/
``clocked_write`` return the same endpoints for a model Python clocks itself (any object with
``set(name, int)`` and ``get(name) -> int``, such as ``sim.verilated.Model``): per clock,
``drive()`` with the clock low, evaluate, ``sample()``, then the rising edge.
"""

import random
from collections import deque

import numpy as np

from hw.dataflow.memory_ports import read_port_signature, write_port_signature

from ..cocotb_tb import Pin
from ..payload import pack, unpack

__all__ = ["CardMemory", "ClockedReadPort", "ClockedWritePort", "ReadServer",
           "WriteServer", "word_bytes", "bytes_words"]


def word_bytes(values) -> np.ndarray:
    """Integers (taken modulo 2**32) as little-endian 32-bit words: their bytes (uint8)."""
    words = np.asarray(values, np.int64).astype(np.uint64) & 0xFFFF_FFFF
    return words.astype("<u4").view(np.uint8)


def bytes_words(raw, *, signed=True) -> np.ndarray:
    """Little-endian 32-bit words (``raw``: uint8) as int64, sign-extended when ``signed``."""
    words = np.asarray(raw, np.uint8).view("<u4").astype(np.int64)
    return np.where(words >= 1 << 31, words - (1 << 32), words) if signed else words


class CardMemory:
    """A byte-addressed memory of ``size`` bytes.

    Parameters
    ----------
    size : int
        Bytes.
    seed : int
        Seed of the latencies and stalls.
    latency : (int, int)
        Clocks from a burst's request to its first data beat (or to its response), drawn
        uniformly in this inclusive range.
    stall : float
        Probability that a channel refuses or withholds a beat on a clock.
    buffer : writable buffer or None
        Holds the ``size`` bytes (shared with another model of the memory, e.g. the
        ``mmap`` of cocotbext-axi's RAMs); None: a zeroed array of the memory's own.
    """

    def __init__(self, size, *, seed=0, latency=(1, 8), stall=0.0, buffer=None):
        self.data = np.zeros(size, np.uint8) if buffer is None else \
            np.frombuffer(buffer, np.uint8, count=size)
        self._rng = random.Random(seed)
        self.latency = tuple(latency)
        self.stall = stall
        self._next = 0
        self.arrays = {}

    # --- arrays -----------------------------------------------------------------------------

    def allocate(self, name, words, *, align=64):
        """Reserve ``words`` 32-bit words for ``name``; return the byte address."""
        address = -(-self._next // align) * align
        if address + 4 * words > len(self.data):
            raise AssertionError(f"card memory full: {name} needs {4 * words} bytes")
        self._next = address + 4 * max(words, 1)
        self.arrays[name] = (address, words)
        return address

    def write_words(self, address, values):
        """Store ``values`` (integers, taken modulo 2**32) as words from byte ``address``."""
        raw = word_bytes(values)
        self.data[address:address + len(raw)] = raw

    def write_bytes(self, address, values):
        """Store the bytes ``values`` (uint8) from byte ``address``."""
        self.data[address:address + len(values)] = values

    def read_bytes(self, address, count):
        """``count`` bytes (uint8, a copy) from byte ``address``."""
        return self.data[address:address + count].copy()

    def read_words(self, address, count, *, signed=True):
        """``count`` words from byte ``address`` as int64 (sign-extended when ``signed``)."""
        return bytes_words(self.data[address:address + 4 * count], signed=signed)

    # --- the servers' shared randomness and checks --------------------------------------------

    def check_burst(self, address, length, port_bytes):
        """A burst must lie in the memory, start on a port word and (AXI4) not cross a 4 KiB
        boundary."""
        if address % port_bytes or address + port_bytes * length > len(self.data):
            raise AssertionError(f"burst at {address:#x} of {length} beats is outside the "
                                 f"memory or not aligned to {port_bytes} bytes")
        if address % 4096 + port_bytes * length > 4096:
            raise AssertionError(f"burst at {address:#x} of {length} beats crosses a 4 KiB "
                                 "boundary")

    def stalled(self):
        """Whether a channel stalls this clock."""
        return bool(self.stall) and self._rng.random() < self.stall

    def due(self, cycle):
        """The cycle a burst requested at ``cycle`` is answered."""
        return cycle + self._rng.randint(*self.latency)

    # --- Amaranth front ends ----------------------------------------------------------------

    def serve_read(self, port, port_bits, *, hold=None):
        """A background Amaranth testbench answering the read port ``port``; while
        ``hold()`` is true (a callable, None: never) the port takes no request (a hung
        memory)."""
        server = ReadServer(self, port_bits)

        async def serve(ctx):
            ctx.set(port.r.valid, 0)
            while True:
                ar_ready, beat = server.drive()
                ar_ready = ar_ready and not (hold and hold())
                ctx.set(port.ar.ready, ar_ready)
                if beat is not None:
                    ctx.set(port.r.payload, beat)
                ctx.set(port.r.valid, beat is not None)
                _, _, ar_valid, ar, r_ready = await ctx.tick().sample(
                    port.ar.valid, port.ar.payload, port.r.ready)
                server.clock(request=(ar.address, ar.length) if ar_valid and ar_ready else None,
                             taken=beat is not None and bool(r_ready))
        return serve

    def serve_write(self, port, port_bits):
        """A background Amaranth testbench answering the write port ``port`` (byte strobes
        honoured, one OKAY response per burst once its last beat is in)."""
        server = WriteServer(self, port_bits)

        async def serve(ctx):
            ctx.set(port.b.valid, 0)
            ctx.set(port.b.payload, {"resp": 0})
            while True:
                aw_ready, w_ready, respond = server.drive()
                ctx.set(port.aw.ready, aw_ready)
                ctx.set(port.w.ready, w_ready)
                ctx.set(port.b.valid, respond)
                _, _, aw_valid, aw, w_valid, w, b_ready = await ctx.tick().sample(
                    port.aw.valid, port.aw.payload, port.w.valid, port.w.payload, port.b.ready)
                server.clock(
                    request=(aw.address, aw.length) if aw_valid and aw_ready else None,
                    beat=(w.data, w.strobe, w.last) if w_valid and w_ready else None,
                    taken=respond and bool(b_ready))
        return serve

    def serve_engine(self, dut, params) -> list:
        """The background Amaranth testbenches answering every memory port of a
        ``PersistentEngine`` ``dut`` of build ``params``: ``read``, the three writers, the
        ``logits`` ports."""
        return [self.serve_read(dut.read, params.port_bits),
                *(self.serve_write(port, params.port_bits)
                  for port in (dut.result_write, dut.mask_write, dut.table_write)),
                *(self.serve_read(port, params.logit_port_bits) for port in dut.logits)]

    def engine_ports(self, target, params, *, front: str) -> list:
        """Endpoints answering every memory port of a Verilated ``PersistentEngine`` of build
        ``params``, in ``params.port_names`` order: ``front`` ``"clocked"`` (``target`` a
        model the caller clocks, ``sim.verilated.Model``) or ``"cocotb"`` (a cocotb DUT)."""
        read, write = {"clocked": (self.clocked_read, self.clocked_write),
                       "cocotb": (self.cocotb_read, self.cocotb_write)}[front]
        port = dict(port_bits=params.port_bits, address_width=params.address_width)
        logits = dict(port_bits=params.logit_port_bits,
                      address_width=params.verify.address_width)
        return [read(target, f"logits__{name[len('logits'):]}", **logits)
                if name.startswith("logits") else
                read(target, name, **port) if name == "read" else write(target, name, **port)
                for name in params.port_names]

    # --- cocotb front ends --------------------------------------------------------------------

    def cocotb_read(self, dut, prefix, *, port_bits, address_width):
        """A ``KernelBench.run`` endpoint answering the Verilated read port ``prefix``."""
        return CocotbReadPort(ReadServer(self, port_bits), dut, prefix,
                              read_port_signature(address_width, port_bits))

    def cocotb_write(self, dut, prefix, *, port_bits, address_width):
        """A ``KernelBench.run`` endpoint answering the Verilated write port ``prefix``."""
        return CocotbWritePort(WriteServer(self, port_bits), dut, prefix,
                               write_port_signature(address_width, port_bits))


    # --- clocked front ends (a model Python steps itself) ------------------------------------

    def clocked_read(self, model, prefix, *, port_bits, address_width):
        """An endpoint answering the read port ``prefix`` of ``model`` (``set``/``get`` by
        port name, e.g. ``sim.verilated.Model``), stepped by the caller each clock."""
        return ClockedReadPort(ReadServer(self, port_bits), model, prefix,
                               read_port_signature(address_width, port_bits))

    def clocked_write(self, model, prefix, *, port_bits, address_width):
        """An endpoint answering the write port ``prefix`` of ``model``, stepped by the caller
        each clock (byte strobes honoured, one OKAY response per burst)."""
        return ClockedWritePort(WriteServer(self, port_bits), model, prefix,
                                write_port_signature(address_width, port_bits))


class ReadServer:
    """The bookkeeping of one read port: bursts in flight (in order), their latencies, the
    stalls. Per clock, ``drive()`` says what the slave shows, ``clock(...)`` applies the
    handshakes of the clock edge. ``bursts`` and ``beats`` count what was served."""

    def __init__(self, memory, port_bits):
        self.memory = memory
        self.port_bytes = port_bits // 8
        self.pending = deque()  # [due cycle, address, beats left]
        self.cycle = 0
        self.bursts = self.beats = 0
        self._offer = None

    @property
    def idle(self) -> bool:
        return not self.pending

    def drive(self):
        """``(ar_ready, beat)``: this clock's ``ar.ready`` and the ``r`` beat offered (a
        ``data``/``last`` dict, or None with ``r.valid`` low)."""
        ar_ready = not self.memory.stalled()
        if self._offer is None and self.pending and self.pending[0][0] <= self.cycle \
                and not self.memory.stalled():
            _, address, left = self.pending[0]
            data = self.memory.data[address:address + self.port_bytes].tobytes()
            self._offer = {"data": int.from_bytes(data, "little"), "last": int(left == 1)}
        return ar_ready, self._offer

    def clock(self, *, request=None, taken=False):
        """The clock edge: ``request`` = ``(address, length)`` accepted on ``ar`` (or None),
        ``taken``: the offered ``r`` beat was taken."""
        self.cycle += 1
        if taken:
            burst = self.pending[0]
            burst[1] += self.port_bytes
            burst[2] -= 1
            if burst[2] == 0:
                self.pending.popleft()
            self._offer = None
            self.beats += 1
        if request is not None:
            address, length = int(request[0]), int(request[1])
            self.memory.check_burst(address, length + 1, self.port_bytes)
            self.pending.append([self.memory.due(self.cycle), address, length + 1])
            self.bursts += 1


class WriteServer:
    """The bookkeeping of one write port: bursts awaiting data, responses awaiting their
    latency, the stalls (as ``ReadServer``). Strobed bytes go into the memory as each beat
    arrives."""

    def __init__(self, memory, port_bits):
        self.memory = memory
        self.port_bytes = port_bits // 8
        self.pending = deque()  # [address, beats left] awaiting data
        self.responses = deque()  # due cycles
        self.cycle = 0
        self.bursts = self.beats = 0
        self._respond = False

    @property
    def idle(self) -> bool:
        return not self.pending and not self.responses

    def drive(self):
        """``(aw_ready, w_ready, b_valid)`` of this clock (every response is OKAY)."""
        aw_ready = not self.memory.stalled()
        w_ready = bool(self.pending) and not self.memory.stalled()
        if not self._respond and self.responses and self.responses[0] <= self.cycle:
            self._respond = not self.memory.stalled()
        return aw_ready, w_ready, self._respond

    def clock(self, *, request=None, beat=None, taken=False):
        """The clock edge: ``request`` = ``(address, length)`` accepted on ``aw``, ``beat`` =
        ``(data, strobe, last)`` accepted on ``w`` (or None), ``taken``: the response was
        taken."""
        self.cycle += 1
        if taken:
            self.responses.popleft()
            self._respond = False
        if beat is not None:
            data, strobe, last = (int(value) for value in beat)
            address, left = self.pending[0]
            if strobe == (1 << self.port_bytes) - 1:
                self.memory.data[address:address + self.port_bytes] = np.frombuffer(
                    data.to_bytes(self.port_bytes, "little"), np.uint8)
            else:
                for byte in range(self.port_bytes):
                    if strobe >> byte & 1:
                        self.memory.data[address + byte] = (data >> (8 * byte)) & 0xFF
            if (left == 1) != bool(last):
                raise AssertionError(f"write burst at {address:#x}: `last` on the wrong beat")
            self.pending[0] = [address + self.port_bytes, left - 1]
            if left == 1:
                self.pending.popleft()
                self.responses.append(self.memory.due(self.cycle))
            self.beats += 1
        if request is not None:
            address, length = int(request[0]), int(request[1])
            self.memory.check_burst(address, length + 1, self.port_bytes)
            self.pending.append([address, length + 1])
            self.bursts += 1


class _CocotbPort:
    """A server on the Verilated port ``<name>__<channel>__*``: ``channel(c)`` gives the
    ``(valid, ready, payload)`` handles of channel ``c``, ``fields(c)`` its payload now."""

    def __init__(self, server, dut, name, signature):
        self.server, self.name = server, name
        self._dut, self._signature = dut, signature

    def channel(self, channel):
        prefix = f"{self.name}__{channel}"
        return tuple(getattr(self._dut, f"{prefix}__{part}")
                     for part in ("valid", "ready", "payload"))

    def fields(self, channel, payload) -> dict:
        layout = self._signature.members[channel].signature.members["payload"].shape
        return {name: values[0] for name, values
                in unpack(layout, [payload.value.to_unsigned()]).items()}

    @property
    def done(self) -> bool:
        return self.server.idle


class CocotbReadPort(_CocotbPort):
    """A ``ReadServer`` on a Verilated read port ``<name>__ar__*``, ``<name>__r__*``."""

    def __init__(self, server, dut, name, signature):
        super().__init__(server, dut, name, signature)
        self._ar_valid, self._ar_ready, self._ar = self.channel("ar")
        self._r_valid, self._r_ready, self._r = self.channel("r")
        self._r_layout = signature.members["r"].signature.members["payload"].shape
        self._ar_ready_now = False
        self._beat = self._shown = None  # the beat offered, the beat on the payload
        self._ar_ready_pin, self._r_valid_pin = Pin(self._ar_ready), Pin(self._r_valid)

    def drive(self) -> None:
        self._ar_ready_now, self._beat = self.server.drive()
        self._ar_ready_pin.set(int(self._ar_ready_now))
        if self._beat is not None and self._beat is not self._shown:
            self._r.value = pack(self._r_layout, 1, **self._beat)[0]
            self._shown = self._beat
        self._r_valid_pin.set(int(self._beat is not None))

    def sample(self, cycle: int) -> None:
        request = None
        if self._ar_ready_now and self._ar_valid.value:
            ar = self.fields("ar", self._ar)
            request = (ar["address"], ar["length"])
        self.server.clock(request=request,
                          taken=self._beat is not None and bool(self._r_ready.value))


class CocotbWritePort(_CocotbPort):
    """A ``WriteServer`` on a Verilated write port ``<name>__aw__*``, ``__w__*``, ``__b__*``."""

    def __init__(self, server, dut, name, signature):
        super().__init__(server, dut, name, signature)
        self._aw_valid, self._aw_ready, self._aw = self.channel("aw")
        self._w_valid, self._w_ready, self._w = self.channel("w")
        self._b_valid, self._b_ready, b = self.channel("b")
        self._now = (False, False, False)
        b.value = 0
        self._pins = [Pin(handle) for handle in (self._aw_ready, self._w_ready, self._b_valid)]

    def drive(self) -> None:
        self._now = self.server.drive()
        for pin, value in zip(self._pins, self._now, strict=True):
            pin.set(int(value))

    def sample(self, cycle: int) -> None:
        aw_ready, w_ready, respond = self._now
        request = beat = None
        if aw_ready and self._aw_valid.value:
            aw = self.fields("aw", self._aw)
            request = (aw["address"], aw["length"])
        if w_ready and self._w_valid.value:
            w = self.fields("w", self._w)
            beat = (w["data"], w["strobe"], w["last"])
        self.server.clock(request=request, beat=beat,
                          taken=respond and bool(self._b_ready.value))


def _fields(signature, channel):
    """``(name, offset, mask)`` of the payload fields of ``channel`` of a port signature."""
    layout = signature.members[channel].signature.members["payload"].shape
    return [(name, field.offset, (1 << field.width) - 1) for name, field in layout]


class _ClockedPort:
    """A server on the ports ``<name>__<channel>__{valid,ready,payload}`` of a model that the
    caller clocks: per clock, ``drive()`` (the clock low), the model's evaluation,
    ``sample()`` (the handshakes of the coming rising edge), the edge."""

    def __init__(self, server, model, name, signature):
        self.server, self.model, self.name = server, model, name
        self._signature = signature
        self._driven = {}  # port -> the value last set (a model keeps its inputs)

    def _set(self, port, value):
        """Set an input of the model, skipping the call when it already holds ``value``."""
        if self._driven.get(port) != value:
            self.model.set(port, value)
            self._driven[port] = value

    def _port(self, channel, part):
        return f"{self.name}__{channel}__{part}"

    def _payload(self, channel):
        value = self.model.get(self._port(channel, "payload"))
        return {name: value >> offset & mask for name, offset, mask
                in _fields(self._signature, channel)}

    @property
    def done(self) -> bool:
        """No burst in flight."""
        return self.server.idle


class ClockedReadPort(_ClockedPort):
    """A ``ReadServer`` on the read port ``<name>__ar__*``, ``<name>__r__*`` of a model
    clocked by the caller."""

    def __init__(self, server, model, name, signature):
        super().__init__(server, model, name, signature)
        self._ar_valid, self._ar_ready, self._ar = (self._port("ar", part) for part in (
            "valid", "ready", "payload"))
        self._r_valid, self._r_ready, self._r = (self._port("r", part) for part in (
            "valid", "ready", "payload"))
        self._r_offsets = {name: offset for name, offset, _ in _fields(signature, "r")}
        ar = dict((name, (offset, mask)) for name, offset, mask in _fields(signature, "ar"))
        self._address, self._length = ar["address"], ar["length"]
        self._ar_ready_now = False
        self._beat = None
        self._set(self._ar_ready, 0)
        self._set(self._r_valid, 0)

    def drive(self) -> None:
        """Set ``ar.ready`` and the ``r`` beat of this clock."""
        self._ar_ready_now, self._beat = self.server.drive()
        self._set(self._ar_ready, int(self._ar_ready_now))
        if self._beat is not None:
            self._set(self._r, sum(int(value) << self._r_offsets[name]
                                   for name, value in self._beat.items()))
        self._set(self._r_valid, int(self._beat is not None))

    def sample(self, cycle=None) -> None:
        """Apply the handshakes of the rising edge to come (the model evaluated)."""
        model, request = self.model, None
        if self._ar_ready_now and model.get(self._ar_valid):
            value = model.get(self._ar)
            request = (value >> self._address[0] & self._address[1],
                       value >> self._length[0] & self._length[1])
        self.server.clock(request=request,
                          taken=self._beat is not None and bool(model.get(self._r_ready)))


class ClockedWritePort(_ClockedPort):
    """A ``WriteServer`` on the write port ``<name>__aw__*``, ``__w__*``, ``__b__*`` of a
    model clocked by the caller."""

    def __init__(self, server, model, name, signature):
        super().__init__(server, model, name, signature)
        self._aw_valid, self._aw_ready, self._aw = (self._port("aw", part) for part in (
            "valid", "ready", "payload"))
        self._w_valid, self._w_ready, self._w = (self._port("w", part) for part in (
            "valid", "ready", "payload"))
        self._b_valid, self._b_ready, b = (self._port("b", part) for part in (
            "valid", "ready", "payload"))
        aw = {name: (offset, mask) for name, offset, mask in _fields(signature, "aw")}
        self._address, self._length = aw["address"], aw["length"]
        self._w_fields = [(offset, mask) for _, offset, mask in sorted(
            _fields(signature, "w"), key=lambda f: ("data", "strobe", "last").index(f[0]))]
        self._now = (False, False, False)
        for port in (self._aw_ready, self._w_ready, self._b_valid, b):
            self._set(port, 0)

    def drive(self) -> None:
        """Set ``aw.ready``, ``w.ready`` and ``b.valid`` of this clock."""
        self._now = self.server.drive()
        for port, value in zip((self._aw_ready, self._w_ready, self._b_valid), self._now,
                               strict=True):
            self._set(port, int(value))

    def sample(self, cycle=None) -> None:
        """Apply the handshakes of the rising edge to come (the model evaluated)."""
        model = self.model
        aw_ready, w_ready, respond = self._now
        request = beat = None
        if aw_ready and model.get(self._aw_valid):
            value = model.get(self._aw)
            request = (value >> self._address[0] & self._address[1],
                       value >> self._length[0] & self._length[1])
        if w_ready and model.get(self._w_valid):
            value = model.get(self._w)
            beat = tuple(value >> offset & mask for offset, mask in self._w_fields)
        self.server.clock(request=request, beat=beat,
                          taken=respond and bool(model.get(self._b_ready)))
