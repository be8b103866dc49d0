"""Every Triton launch of the bench goes through :func:`launch`, so that the same calls can
instead be compiled ahead of time for an H100 (sm_90) on a machine without a GPU
(:func:`compile_only`): the check that the kernels validated under ``TRITON_INTERPRET=1`` also
compile with Triton's real backend (to PTX and a cubin through the wheel's ``ptxas``).
"""

from __future__ import annotations

import contextlib

import torch
import triton

__all__ = ["launch", "compile_only", "signature_of", "H100_TARGET"]

#: Triton's target of an H100 (CUDA, compute capability 9.0, warp size 32).
H100_TARGET = ("cuda", 90, 32)

_TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
          torch.int64: "i64", torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8",
          torch.bool: "i1"}
_state: dict = {"compiled": None}
#: Launch keywords that are compile options, not kernel arguments.
_LAUNCH_OPTIONS = ("num_warps", "num_stages")


def signature_of(kernel, args: tuple, constexprs: dict) -> tuple[dict, dict]:
    """Triton's ``(signature, constexprs)`` of a launch: tensors as pointers of their dtype,
    Python floats as fp32, ints as i32 (i64 past 2**31), the constexpr keywords as such."""
    names = kernel.arg_names
    signature, values = {}, {}
    positional = iter(args)
    for name, param in zip(names, kernel.params, strict=True):
        if param.is_constexpr:
            if name not in constexprs:
                raise ValueError(f"{kernel.__name__}: constexpr `{name}` not given")
            signature[name], values[name] = "constexpr", constexprs[name]
            continue
        value = next(positional)
        if isinstance(value, torch.Tensor):
            signature[name] = "*" + _TYPES[value.dtype]
        elif isinstance(value, float):
            signature[name] = "fp32"
        elif isinstance(value, int):
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
        else:
            raise TypeError(f"{kernel.__name__}: argument `{name}` of type {type(value)}")
    return signature, values


def launch(kernel, grid: tuple, *args, **constexprs) -> None:
    """``kernel[grid](*args, **constexprs)`` (``constexprs`` may hold the launch options
    ``num_warps`` and ``num_stages``), or, inside :func:`compile_only`, its compilation for the
    H100 target with those options (recorded, not run)."""
    compiled = _state["compiled"]
    if compiled is None:
        kernel[grid](*args, **constexprs)
        return
    from triton.backends.compiler import GPUTarget

    options = {name: constexprs.pop(name) for name in _LAUNCH_OPTIONS if name in constexprs}
    signature, values = signature_of(kernel, args, constexprs)
    key = (kernel.__name__, tuple(sorted(signature.items())),
           tuple(sorted({**values, **options}.items())))
    if key not in compiled:
        source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=values)
        compiled[key] = triton.compile(source, target=GPUTarget(*H100_TARGET), options=options)


@contextlib.contextmanager
def compile_only():
    """Within this block :func:`launch` compiles for sm_90 instead of running; yields the
    dict of compiled kernels (key: name, signature, constexprs; value: Triton's compiled
    kernel, whose ``asm`` holds ``ptx`` and ``cubin``)."""
    previous = _state["compiled"]
    _state["compiled"] = {}
    try:
        yield _state["compiled"]
    finally:
        _state["compiled"] = previous
