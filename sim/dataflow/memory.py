"""Card memory as the engine's ports see it, for Amaranth simulations.

``CardMemory`` is a little-endian byte array with a bump allocator for named arrays of 32-bit
words (docs/engine.md, "Memory formats"). ``serve_read`` and ``serve_write`` return background
Amaranth testbenches that answer an AXI4-style read or write port
(``hw.dataflow.memory_ports``) from that array: each burst is answered after a random latency,
in order, and both the request channel and the data channel are stalled at random, so the
engine is tested under memory back-pressure. Accesses outside the array fail the simulation.
"""

import random
from collections import deque

import numpy as np

__all__ = ["CardMemory"]


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
    """

    def __init__(self, size, *, seed=0, latency=(1, 8), stall=0.0):
        self.data = np.zeros(size, np.uint8)
        self._rng = random.Random(seed)
        self._latency = latency
        self._stall = stall
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
        words = np.asarray(values, np.int64).astype(np.uint64) & 0xFFFF_FFFF
        self.data[address:address + 4 * len(words)] = words.astype("<u4").view(np.uint8)

    def read_words(self, address, count, *, signed=True):
        """``count`` words from byte ``address`` as int64 (sign-extended when ``signed``)."""
        raw = self.data[address:address + 4 * count].view("<u4").astype(np.int64)
        return np.where(raw >= 1 << 31, raw - (1 << 32), raw) if signed else raw

    def _check(self, address, length, port_bytes):
        if address % port_bytes or address + port_bytes * length > len(self.data):
            raise AssertionError(f"burst at {address:#x} of {length} beats is outside the "
                                 f"memory or not aligned to {port_bytes} bytes")

    def _stalled(self):
        return self._stall and self._rng.random() < self._stall

    # --- port servers -----------------------------------------------------------------------

    def serve_read(self, port, port_bits):
        """A background testbench answering the read port ``port``."""
        port_bytes = port_bits // 8

        async def serve(ctx):
            bursts = deque()  # [ready_cycle, address, beats left]
            cycle = 0
            ctx.set(port.r.valid, 0)
            while True:
                ctx.set(port.ar.ready, not self._stalled())
                offer = bool(bursts) and bursts[0][0] <= cycle and not self._stalled()
                if offer:
                    _, address, left = bursts[0]
                    beat = int.from_bytes(self.data[address:address + port_bytes].tobytes(),
                                          "little")
                    ctx.set(port.r.payload, {"data": beat, "last": int(left == 1)})
                ctx.set(port.r.valid, offer)
                _, _, ar_valid, ar_ready, ar, r_ready = await ctx.tick().sample(
                    port.ar.valid, port.ar.ready, port.ar.payload, port.r.ready)
                cycle += 1
                if offer and r_ready:
                    bursts[0][1] += port_bytes
                    bursts[0][2] -= 1
                    if bursts[0][2] == 0:
                        bursts.popleft()
                if ar_valid and ar_ready:
                    self._check(ar.address, ar.length + 1, port_bytes)
                    bursts.append([cycle + self._rng.randint(*self._latency), ar.address,
                                   ar.length + 1])
        return serve

    def serve_write(self, port, port_bits):
        """A background testbench answering the write port ``port`` (byte strobes honoured,
        one OKAY response per burst once its last beat is in)."""
        port_bytes = port_bits // 8

        async def serve(ctx):
            bursts = deque()  # [address, beats left] awaiting data
            responses = deque()  # ready cycles
            cycle = 0
            ctx.set(port.b.valid, 0)
            while True:
                ctx.set(port.aw.ready, not self._stalled())
                ctx.set(port.w.ready, bool(bursts) and not self._stalled())
                offer = bool(responses) and responses[0] <= cycle and not self._stalled()
                ctx.set(port.b.valid, offer)
                ctx.set(port.b.payload, {"resp": 0})
                _, _, aw_valid, aw_ready, aw, w_valid, w_ready, w, b_ready = \
                    await ctx.tick().sample(port.aw.valid, port.aw.ready, port.aw.payload,
                                            port.w.valid, port.w.ready, port.w.payload,
                                            port.b.ready)
                cycle += 1
                if offer and b_ready:
                    responses.popleft()
                if w_valid and w_ready:
                    address, left = bursts[0]
                    for byte in range(port_bytes):
                        if w.strobe >> byte & 1:
                            self.data[address + byte] = (w.data >> (8 * byte)) & 0xFF
                    if (left == 1) != bool(w.last):
                        raise AssertionError(f"write burst at {address:#x}: `last` on the "
                                             "wrong beat")
                    bursts[0] = [address + port_bytes, left - 1]
                    if left == 1:
                        bursts.popleft()
                        responses.append(cycle + self._rng.randint(*self._latency))
                if aw_valid and aw_ready:
                    self._check(aw.address, aw.length + 1, port_bytes)
                    bursts.append([aw.address, aw.length + 1])
        return serve
