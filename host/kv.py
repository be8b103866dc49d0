"""A stand-in for the serving system's KV-cache pool: hands out KV slot ids."""

import numpy as np

from .checks import INT32_MAX, check_integer

__all__ = ["KVSlots"]


class KVSlots:
    """Hands out KV slot ids ``0, 1, 2, ...`` in order, wrapping at ``pool_size`` (default
    and most 2**31, so ids fit the hardware's int32 ``req_to_token``). Nothing is freed: the
    golden and the hardware engine only copy slot ids around, they never read the KV cache,
    so any distinct ids do. A serving system passes its allocator's slots instead.
    ``host.Engine`` gives back the ids of a call that fails (:meth:`mark`, :meth:`rewind`)."""

    def __init__(self, pool_size: int = INT32_MAX + 1):
        self.pool_size = check_integer("pool_size", pool_size, 1, INT32_MAX + 1)
        self._next = 0

    def take(self, shape) -> np.ndarray:
        """The next ``prod(shape)`` slot ids, int64 of ``shape``."""
        count = int(np.prod(shape, dtype=np.int64))
        ids = (self._next + np.arange(count, dtype=np.int64)) % self.pool_size
        self._next = (self._next + count) % self.pool_size
        return ids.reshape(shape)

    def mark(self) -> int:
        """Where the allocator stands (for :meth:`rewind`)."""
        return self._next

    def rewind(self, mark: int) -> None:
        """Give back every id taken since :meth:`mark` returned ``mark``."""
        self._next = mark
