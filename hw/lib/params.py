"""Checks of build parameters, shared by every kernel's parameter record.

One helper family for the whole project (the golden ops use the same ``check_int`` for their
runtime arguments): errors are ``ParameterError`` (a ``ValueError``) or ``ParameterTypeError``
(also a ``TypeError``) with the parameter's name in ``parameter``, and messages of the form
"`max_tree_width` must be between 1 and `node_top_k`, not 12".
"""

from golden._abi import ParameterError, ParameterTypeError, check_int

__all__ = ["ParameterError", "ParameterTypeError", "check_int", "check_power_of_two",
           "check_choice", "index_bits"]


def check_power_of_two(name, value, lo, hi):
    """``check_int(name, value, lo, hi)``, and ``value`` a power of two."""
    value = check_int(name, value, lo, hi)
    if value & (value - 1):
        raise ParameterError(name, f"`{name}` must be a power of two, not {value}")
    return value


def check_choice(name, value, choices):
    """``value`` if it is one of ``choices``, else ``ParameterError`` listing them."""
    if value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise ParameterError(name, f"`{name}` must be one of {listed}, not {value!r}")
    return value


def index_bits(count):
    """Unsigned width holding ``0 .. count - 1`` (at least 1 bit)."""
    return max(1, (count - 1).bit_length())
