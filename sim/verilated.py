"""An in-process Verilator binding: a component's Verilator model as a shared library driven
from Python through ``ctypes``, one clock at a time (no cocotb, no subprocess).

``build(component, name=...)`` elaborates the component to Verilog (top module ``name``, as
``sim.harness`` does), verilates it with ``sim.harness.VERILATOR_ARGS`` and ``-CFLAGS
-fPIC``, writes a C++ wrapper with a C API over every top-level port of the generated
``V<name>.h`` (``CData``/``SData``/``IData``/``QData`` and ``VlWide`` ports alike), compiles
the model, the Verilator runtime and the wrapper with Verilator's own makefile
(``V<name>.mk``) and links them into ``libvmodel.so``. The library is cached under
``build/verilated/<name>-<hash>/``, the hash covering the Verilog text, the tool versions and
the Verilator arguments (as ``sim.harness.model_directory``): a parameter set is built once.

``Model`` loads a library: ``set(name, value)`` / ``get(name)`` take and give Python ints,
``eval()``, ``tick()`` (one clock: ``clk`` high with an evaluation, then low with one),
``reset()`` (``rst`` high for a few clocks). Port names are the Verilog ones as Amaranth
writes them (``command__payload``, ``logits__0__r__valid``, ``config``); ``ports`` lists
them with their direction and width.

The C API (all ``extern "C"``; ``h`` is the model handle): ``vm_new()``, ``vm_delete(h)``,
``vm_eval(h)``, ``vm_tick(h, clk_index, count)``, ``vm_port_count()``,
``vm_port_name(i)``, ``vm_port_width(i)``, ``vm_port_output(i)``, ``vm_set(h, i, words)``
and ``vm_get(h, i, words)`` (``ceil(width / 32)`` little-endian uint32 words),
``vm_set64(h, i, value)`` and ``vm_get64(h, i)`` (ports of at most 64 bits).
"""

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .harness import (
    MAKE_OPTIONS,
    REPO_ROOT,
    VERILATOR_ARGS,
    SimulationError,
    _put_venv_tools_on_path,
    _shown,
    _tool_versions,
    build_lock,
    elaborate,
)

__all__ = ["BUILD_ROOT", "Model", "Port", "build", "build_indexed", "build_verilog",
           "library_directory"]

BUILD_ROOT = REPO_ROOT / "build" / "verilated"
LIBRARY = "libvmodel.so"
WRAPPER = "vmodel_wrap"
#: Bumped when the wrapper's C API changes (part of the cache key).
API_VERSION = 1
# Where the engine's first build went (the serving-tree engine, 13 MB of Verilog, on this
# project's 2-core machine; CPU seconds, issue 36): elaboration 44, Verilator 35, make 134
# (g++ over 354 .cpp files at Verilator's -Os). Most files are small and each one re-reads a
# 78 MB precompiled header: --output-groups 4 concatenates them into four fast-path and four
# slow-path units (make 134 -> 69). In those units -Os costs twice -O1 (fast path 49.5 ->
# 28.1; -O0 9.7, but a clock of the engine then takes 284 us instead of 30; -Os 27): both,
# make 134 -> 54 CPU seconds.
#: Verilator arguments of the library build beyond ``sim.harness.VERILATOR_ARGS`` (which
#: already put the C++ in four compile units per kind): none.
LIBRARY_ARGS: tuple[str, ...] = ()


def build_jobs() -> int:
    """Parallel compiler jobs of a library build: one per core, at most four."""
    return max(1, min(4, os.cpu_count() or 1))


# VL_IN8(&name,msb,lsb); VL_INW(&name,msb,lsb,words); VL_OUT64(...); VL_IN(...) is 32 bits
_PORT = re.compile(r"VL_(IN|OUT)(8|16|64|W)?\(&(\w+),(\d+),(\d+)(?:,(\d+))?\);")


@dataclass(frozen=True)
class Port:
    """A top-level port: its Verilog ``name``, its name in the C++ model (``member``),
    ``width`` in bits, ``output`` (direction) and the C++ storage ``kind`` (``8``, ``16``,
    ``32``, ``64`` or ``W`` for ``VlWide``)."""

    name: str
    member: str
    width: int
    output: bool
    kind: str


def _build_options() -> str:
    """What besides the Verilog makes a library: tools, wrapper API, Verilator arguments,
    compiler options (a change builds anew)."""
    return (f"{_tool_versions()}|api={API_VERSION}|{VERILATOR_ARGS}|{LIBRARY_ARGS}|"
            f"{MAKE_OPTIONS}")


def library_directory(verilog_text: str, *, name: str) -> Path:
    """The cache directory of a library: keyed by the Verilog, the tool versions, the
    Verilator arguments and the wrapper's API version."""
    key = hashlib.sha256(f"{_build_options()}\n{verilog_text}".encode())
    return BUILD_ROOT / f"{name}-{key.hexdigest()[:16]}"


def build(component, *, name: str = "top", log=print) -> Path:
    """Build (or reuse) the shared library of ``component``; return its path.

    Parameters
    ----------
    component : wiring.Component
        The design; its Verilog text keys the cache.
    name : str
        Top module name (the C++ class is ``V<name>``), also the cache directory's prefix.
    log : callable
        Progress messages.
    """
    return build_verilog(elaborate(component, name=name), name=name, log=log)


def build_indexed(factory, *, key: str, sources, name: str = "top", log=print) -> Path:
    """``build(factory(), name=name)`` without elaborating when an earlier call with the same
    ``key`` (the component's parameters, as text) and the same ``sources`` (the Python files
    the hardware is written in: their contents, with the tool versions, key an index entry)
    found the library: elaborating a large component takes tens of seconds, looking a
    library up in the index none. Any change to a source file or a tool misses the index and
    elaborates (and then reuses the Verilog-keyed library when the Verilog is unchanged)."""
    digest = hashlib.sha256(f"{_build_options()}|{name}|{key}".encode())
    for path in sorted(Path(source) for source in sources):
        digest.update(f"\n{path.relative_to(REPO_ROOT)}\n".encode())
        digest.update(path.read_bytes())
    entry = BUILD_ROOT / "index" / f"{name}-{digest.hexdigest()[:24]}"
    if entry.exists():
        library = Path(entry.read_text().strip())
        if (library.parent / "model.stamp").exists() and library.exists():
            return library
    library = build(factory(), name=name, log=log)
    entry.parent.mkdir(parents=True, exist_ok=True)
    partial = entry.with_name(f"{entry.name}.{os.getpid()}")
    partial.write_text(f"{library}\n")
    partial.replace(entry)  # atomic: a reader sees no entry or a whole one
    return library


def build_verilog(verilog_text: str, *, name: str = "top", log=print) -> Path:
    """Build (or reuse) the shared library of the Verilog ``verilog_text`` (top module
    ``name``); return its path. Raises ``SimulationError`` when Verilator or the compiler
    fails (the log is ``build.log`` in the build directory). Two processes building the same
    library take turns (``sim.harness.build_lock``): the second finds the first's library."""
    directory = library_directory(verilog_text, name=name)
    library = directory / LIBRARY
    if not _built(directory):
        with build_lock(directory, log=log):
            if not _built(directory):  # not built while this one waited
                _compile(verilog_text, directory, name, log)
    return library


def _built(directory: Path) -> bool:
    """A finished library: its stamp is written last."""
    return (directory / "model.stamp").exists() and (directory / LIBRARY).exists()


def _compile(verilog_text: str, directory: Path, name: str, log) -> None:
    """Verilate ``verilog_text``, write the wrapper, compile and link ``LIBRARY`` into
    ``directory`` (under the build lock), then stamp it."""
    _put_venv_tools_on_path()
    if directory.exists():
        shutil.rmtree(directory)  # a half-finished earlier build
    obj = directory / "obj"
    obj.mkdir(parents=True)
    source = directory / f"{name}.v"
    source.write_text(verilog_text)
    wrapper = obj / f"{WRAPPER}.cpp"
    wrapper.write_text("// replaced once the model's header exists\n")
    log(f"building the Verilated library of {name} in {_shown(directory)} "
        "(once per parameter set)")
    log_path = directory / "build.log"
    prefix = f"V{name}"
    env = dict(os.environ)
    env.pop("VERILATOR_ROOT", None)
    with open(log_path, "w") as log_file:
        def run(command, cwd=None):
            log_file.write("$ " + " ".join(map(str, command)) + "\n")
            log_file.flush()
            result = subprocess.run(command, cwd=cwd, stdout=log_file, stderr=subprocess.STDOUT,
                                    env=env, check=False)
            if result.returncode:
                raise SimulationError(f"Verilated library of {name}: `{command[0]}` failed "
                                      f"(exit {result.returncode}); see {log_path}")

        run(["verilator", "--cc", *VERILATOR_ARGS, *LIBRARY_ARGS, "--top-module", name,
             "--prefix", prefix, "-Mdir", str(obj), "-CFLAGS", "-fPIC", str(source),
             str(wrapper)])
        ports = parse_header((obj / f"{prefix}.h").read_text())
        wrapper.write_text(wrapper_source(prefix, ports))
        (obj / "vmodel.mk").write_text(
            f"include {prefix}.mk\n\n"
            f"{LIBRARY}: $(VK_USER_OBJS) $(VK_GLOBAL_OBJS) $(VM_PREFIX)__ALL.a\n"
            "\t$(CXX) -shared $(LDFLAGS) $^ $(LOADLIBES) $(LDLIBS) $(LIBS) -o $@\n")
        run(["make", "-j", str(build_jobs()), "-f", "vmodel.mk", *MAKE_OPTIONS, LIBRARY],
            cwd=obj)
    shutil.copy(obj / LIBRARY, directory / LIBRARY)
    (directory / "model.stamp").write_text("ok\n")


def parse_header(header: str) -> list[Port]:
    """The top-level ports declared in a Verilated model's header (``VL_IN8(&clk,0,0);``
    ...), in declaration order."""
    ports = []
    for direction, kind, member, msb, lsb, _ in _PORT.findall(header):
        width = int(msb) - int(lsb) + 1
        ports.append(Port(name=_verilog_name(member), member=member, width=width,
                          output=direction == "OUT", kind=kind or "32"))
    if not ports:
        raise SimulationError("no ports found in the Verilated header")
    return ports


def _verilog_name(member: str) -> str:
    """Undo Verilator's name escapes (``__05F`` is ``_``: ``a___05Fb`` is ``a__b``)."""
    return re.sub(r"__0([0-9A-Fa-f]{2})", lambda match: chr(int(match.group(1), 16)), member)


def wrapper_source(prefix: str, ports: list[Port]) -> str:
    """The C++ wrapper: a C API over the model ``prefix`` and its ``ports``."""
    names = ", ".join(f'"{port.name}"' for port in ports)
    widths = ", ".join(str(port.width) for port in ports)
    outputs = ", ".join(str(int(port.output)) for port in ports)
    set_cases, get_cases, set64_cases, get64_cases = [], [], [], []
    for index, port in enumerate(ports):
        member = f"m->top->{port.member}"
        words = -(-port.width // 32)
        if port.kind == "W":
            if not port.output:
                set_cases.append(f"case {index}: for (int i = 0; i < {words}; ++i) "
                                 f"{member}[i] = w[i]; break;")
            get_cases.append(f"case {index}: for (int i = 0; i < {words}; ++i) "
                             f"w[i] = {member}[i]; break;")
            continue
        ctype = {"8": "CData", "16": "SData", "32": "IData", "64": "QData"}[port.kind]
        if not port.output:
            value = "(QData)w[0]" if words == 1 else "((QData)w[1] << 32 | w[0])"
            set_cases.append(f"case {index}: {member} = ({ctype})({value}); break;")
            set64_cases.append(f"case {index}: {member} = ({ctype})v; break;")
        get = f"(QData){member}"
        get_cases.append(f"case {index}: w[0] = (uint32_t){get}; "
                         + (f"w[1] = (uint32_t)({get} >> 32); " if words == 2 else "")
                         + "break;")
        get64_cases.append(f"case {index}: return {get};")
    clk = next((i for i, port in enumerate(ports) if port.name == "clk"), -1)

    def block(cases):
        return "\n        ".join(cases)

    return f"""// Generated by sim/verilated.py: a C API over {prefix}.
#include <cstdint>
#include "verilated.h"
#include "{prefix}.h"

namespace {{
struct Handle {{
    VerilatedContext* context;
    {prefix}* top;
}};
const char* port_names[] = {{{names}}};
const int port_widths[] = {{{widths}}};
const int port_outputs[] = {{{outputs}}};
}}  // namespace

double sc_time_stamp() {{ return 0; }}

extern "C" {{
void* vm_new() {{
    Handle* m = new Handle;
    m->context = new VerilatedContext;
    m->context->fatalOnError(false);
    m->top = new {prefix}(m->context, "top");
    return m;
}}

void vm_delete(void* h) {{
    Handle* m = static_cast<Handle*>(h);
    m->top->final();
    delete m->top;
    delete m->context;
    delete m;
}}

void vm_eval(void* h) {{ static_cast<Handle*>(h)->top->eval(); }}

int vm_port_count() {{ return {len(ports)}; }}
const char* vm_port_name(int i) {{ return port_names[i]; }}
int vm_port_width(int i) {{ return port_widths[i]; }}
int vm_port_output(int i) {{ return port_outputs[i]; }}
int vm_clock_port() {{ return {clk}; }}

int vm_set(void* h, int port, const uint32_t* w) {{
    Handle* m = static_cast<Handle*>(h);
    switch (port) {{
        {block(set_cases)}
        default: return -1;
    }}
    return 0;
}}

int vm_get(void* h, int port, uint32_t* w) {{
    Handle* m = static_cast<Handle*>(h);
    switch (port) {{
        {block(get_cases)}
        default: return -1;
    }}
    return 0;
}}

int vm_set64(void* h, int port, uint64_t v) {{
    Handle* m = static_cast<Handle*>(h);
    switch (port) {{
        {block(set64_cases)}
        default: return -1;
    }}
    return 0;
}}

uint64_t vm_get64(void* h, int port) {{
    Handle* m = static_cast<Handle*>(h);
    switch (port) {{
        {block(get64_cases)}
        default: return 0;
    }}
}}

// `count` clocks: `clk` high, evaluate; `clk` low, evaluate (`clk` is port `clock`).
int vm_tick(void* h, int clock, int count) {{
    Handle* m = static_cast<Handle*>(h);
    for (int i = 0; i < count; ++i) {{
        if (vm_set64(h, clock, 1)) return -1;
        m->top->eval();
        vm_set64(h, clock, 0);
        m->top->eval();
    }}
    return 0;
}}
}}
"""


class Model:
    """A Verilated model loaded from its shared library (``build``'s result).

    Parameters
    ----------
    library : str or Path
        The ``libvmodel.so`` to load.
    clock : str
        The clock input (``tick`` toggles it).
    reset : str
        The synchronous reset input (``reset`` raises it).

    Each ``Model`` is a separate instance of the design (its own ``VerilatedContext``).
    """

    def __init__(self, library, *, clock: str = "clk", reset: str = "rst"):
        self._lib = lib = ctypes.CDLL(str(library))
        lib.vm_new.restype = ctypes.c_void_p
        lib.vm_delete.argtypes = [ctypes.c_void_p]
        lib.vm_eval.argtypes = [ctypes.c_void_p]
        lib.vm_port_name.restype = ctypes.c_char_p
        lib.vm_port_name.argtypes = [ctypes.c_int]
        lib.vm_port_width.argtypes = [ctypes.c_int]
        lib.vm_port_output.argtypes = [ctypes.c_int]
        words = ctypes.POINTER(ctypes.c_uint32)
        lib.vm_set.argtypes = [ctypes.c_void_p, ctypes.c_int, words]
        lib.vm_get.argtypes = [ctypes.c_void_p, ctypes.c_int, words]
        lib.vm_set64.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
        lib.vm_get64.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.vm_get64.restype = ctypes.c_uint64
        lib.vm_tick.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        self.ports: dict[str, tuple[int, int, bool]] = {}  # name -> (index, width, output)
        for index in range(lib.vm_port_count()):
            self.ports[lib.vm_port_name(index).decode()] = (
                index, lib.vm_port_width(index), bool(lib.vm_port_output(index)))
        self._handle = ctypes.c_void_p(lib.vm_new())
        self._clock = self._index(clock)
        self._reset = reset if reset in self.ports else None
        self.cycle = 0
        # bound C functions for the per-clock paths
        self._set64, self._get64 = lib.vm_set64, lib.vm_get64
        self.set(clock, 0)
        self.eval()

    def _index(self, name) -> int:
        try:
            return self.ports[name][0]
        except KeyError:
            raise KeyError(f"the model has no port {name!r} (ports: "
                           f"{', '.join(self.ports)})") from None

    def set(self, name: str, value: int) -> None:
        """Drive the input ``name`` with ``value`` (taken modulo ``2**width``); call ``eval``
        (or ``tick``) for the model to see it."""
        index, width, output = self.ports[name] if name in self.ports else (
            self._index(name), 0, False)
        if output:
            raise ValueError(f"port {name!r} is an output")
        value = int(value) & ((1 << width) - 1)
        if width <= 64:
            self._set64(self._handle, index, value)
            return
        count = -(-width // 32)
        buffer = (ctypes.c_uint32 * count)(*((value >> (32 * i)) & 0xFFFF_FFFF
                                            for i in range(count)))
        self._lib.vm_set(self._handle, index, buffer)

    def get(self, name: str) -> int:
        """The value of the port ``name`` (inputs: as driven) as an unsigned int."""
        index, width, _ = self.ports[name] if name in self.ports else (
            self._index(name), 0, False)
        if width <= 64:
            return self._get64(self._handle, index)
        count = -(-width // 32)
        buffer = (ctypes.c_uint32 * count)()
        self._lib.vm_get(self._handle, index, buffer)
        return int.from_bytes(bytes(buffer), "little")

    def eval(self) -> None:
        """Evaluate the model (combinational outputs follow the inputs)."""
        self._lib.vm_eval(self._handle)

    def tick(self, count: int = 1) -> None:
        """``count`` clocks: the rising edge (``clk`` high, evaluate), then ``clk`` low,
        evaluate. Inputs set before stay as they are."""
        self._lib.vm_tick(self._handle, self._clock, count)
        self.cycle += count

    def reset(self, cycles: int = 2) -> None:
        """Hold the reset input high for ``cycles`` clocks, then low (evaluated)."""
        if self._reset is None:
            raise ValueError("the model has no reset input")
        self.set(self._reset, 1)
        self.tick(cycles)
        self.set(self._reset, 0)
        self.eval()

    def close(self) -> None:
        """Free the model (``final()`` and delete); the object is unusable afterwards."""
        if self._handle is not None:
            self._lib.vm_delete(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
