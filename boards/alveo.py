"""Board records of the AMD Alveo HBM cards the kernels are built for.

A ``Board`` carries what the build flow and the reports need: the FPGA part string, the
resource capacities (LUT, FF, 36 Kb block RAM, UltraRAM, DSP) with where each number comes
from, the HBM capacity and peak bandwidth, the target kernel clock and the per-kernel
parameter set the board builds each kernel with (``kernel_parameters``, keyword arguments of
``hw.kernels.<name>.synthesis_configuration``; see docs/contributing.md).

``board("alveo")`` is the V80, the target card of the seed documents.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["RESOURCES", "Board", "BOARDS", "BOARD_ALIASES", "UnknownBoardError", "board",
           "board_names"]

#: Resource classes of every board record and report, in report order.
RESOURCES = ("LUT", "FF", "BRAM", "URAM", "DSP")


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType({key: (_frozen(value) if isinstance(value, Mapping) else value)
                             for key, value in mapping.items()})


@dataclass(frozen=True)
class Board:
    """One Alveo card.

    Attributes
    ----------
    name : str
        ``--board`` name (``alveo-v80``, ``alveo-u55c``).
    description : str
        One line for listings and reports.
    part : str
        Vivado part string of the card's FPGA.
    family : str
        Device family, in words.
    yosys_family : str
        ``synth_xilinx -family`` used for resource estimates (Yosys has no Versal family:
        ``xcup`` is the proxy for the V80 too).
    capacities : Mapping[str, int]
        Resource -> count on the device, for every entry of ``RESOURCES`` (BRAM in 36 Kb
        blocks).
    capacity_notes : Mapping[str, str]
        Resource -> where its number comes from (data sheet, product brief, derived).
    capacities_confirmed : bool
        Whether every capacity is an exact data-sheet figure. False means that at least one
        is rounded or derived: confirm with Vivado's ``report_utilization`` on the part.
    source : str
        Where the record's numbers come from.
    hbm_gb : int
        HBM capacity in GB.
    hbm_type : str
        HBM generation.
    hbm_bandwidth_gbps : float
        Peak HBM bandwidth in GB/s (10^9 bytes per second).
    clock_mhz : float
        Target kernel clock.
    kernel_parameters : Mapping[str, Mapping[str, object]]
        Kernel name -> keyword overrides of its ``synthesis_configuration`` on this board.
    """

    name: str
    description: str
    part: str
    family: str
    yosys_family: str
    capacities: Mapping[str, int]
    capacity_notes: Mapping[str, str]
    capacities_confirmed: bool
    source: str
    hbm_gb: int
    hbm_type: str
    hbm_bandwidth_gbps: float
    clock_mhz: float = 300.0
    kernel_parameters: Mapping[str, Mapping[str, object]] = field(default_factory=dict)

    def __post_init__(self):
        missing = [r for r in RESOURCES if r not in self.capacities]
        if missing:
            raise ValueError(f"board {self.name}: no capacity for {', '.join(missing)}")
        for resource in RESOURCES:
            value = self.capacities[resource]
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"board {self.name}: capacity of {resource} must be a "
                                 f"positive integer, not {value!r}")
        object.__setattr__(self, "capacities", _frozen(self.capacities))
        object.__setattr__(self, "capacity_notes", _frozen(self.capacity_notes))
        object.__setattr__(self, "kernel_parameters", _frozen(self.kernel_parameters))

    @property
    def clock_period_ns(self) -> float:
        return 1000.0 / self.clock_mhz

    def share(self, resource: str, used: float) -> float:
        """Percentage of the board's ``resource`` that ``used`` occupies."""
        return 100.0 * used / self.capacities[resource]

    def hbm_seconds(self, nbytes: float) -> float:
        """Time to move ``nbytes`` at the peak HBM bandwidth."""
        return nbytes / (self.hbm_bandwidth_gbps * 1e9)

    def to_json(self) -> dict:
        """The record as plain JSON data."""
        return {
            "name": self.name,
            "description": self.description,
            "part": self.part,
            "family": self.family,
            "yosys_family": self.yosys_family,
            "capacities": dict(self.capacities),
            "capacity_notes": dict(self.capacity_notes),
            "capacities_confirmed": self.capacities_confirmed,
            "source": self.source,
            "hbm_gb": self.hbm_gb,
            "hbm_type": self.hbm_type,
            "hbm_bandwidth_gbps": self.hbm_bandwidth_gbps,
            "clock_mhz": self.clock_mhz,
            "kernel_parameters": {kernel: dict(params)
                                  for kernel, params in self.kernel_parameters.items()},
        }


_CONFIRM = "Confirm against Vivado's report_utilization for the part before relying on shares."

ALVEO_V80 = Board(
    name="alveo-v80",
    description="AMD Alveo V80 (Versal HBM, 32 GB HBM2e, 819 GB/s): the seed documents' card",
    part="xcv80-lsva4737-2MHP-e-S",
    family="Versal HBM series",
    yosys_family="xcup",
    capacities={
        "LUT": 2_600_000,
        "FF": 5_200_000,
        "BRAM": 3_700,
        "URAM": 1_300,
        "DSP": 10_848,
    },
    capacity_notes={
        "LUT": "AMD Alveo V80 product brief: '2.6M LUTs', a figure rounded to 0.1 M",
        "FF": "derived, not published: Versal CLBs hold two flip-flops per LUT (2 x 2.6 M)",
        "BRAM": "approximate (about 3,700 36 Kb blocks, ~130 Mb), recalled from AMD's Versal "
                "HBM device tables, not checked against a data sheet: the least certain "
                "figure",
        "URAM": "approximate (about 1,300 UltraRAMs, ~365 Mb), recalled from AMD's Versal HBM "
                "device tables, not checked against a data sheet: the least certain figure",
        "DSP": "AMD Alveo V80 product brief: 10,848 DSP engines",
    },
    capacities_confirmed=False,
    source="AMD Alveo V80 product brief (LUT, DSP, HBM); FF derived from the LUT count; BRAM "
           "and URAM approximate. " + _CONFIRM,
    hbm_gb=32,
    hbm_type="HBM2e",
    hbm_bandwidth_gbps=819.0,
    clock_mhz=300.0,
    kernel_parameters={},
)

ALVEO_U55C = Board(
    name="alveo-u55c",
    description="AMD Alveo U55C (Virtex UltraScale+ HBM, 16 GB HBM2, 460 GB/s)",
    part="xcu55c-fsvh2892-2L-e",
    family="Virtex UltraScale+ HBM",
    yosys_family="xcup",
    capacities={
        "LUT": 1_303_680,
        "FF": 2_607_360,
        "BRAM": 2_016,
        "URAM": 960,
        "DSP": 9_024,
    },
    capacity_notes={
        "LUT": "AMD Alveo U55C data sheet",
        "FF": "AMD Alveo U55C data sheet (registers)",
        "BRAM": "AMD Alveo U55C data sheet (36 Kb block RAMs)",
        "URAM": "AMD Alveo U55C data sheet",
        "DSP": "AMD Alveo U55C data sheet (DSP slices)",
    },
    capacities_confirmed=True,
    source="AMD Alveo U55C data sheet (device resources, HBM). " + _CONFIRM,
    hbm_gb=16,
    hbm_type="HBM2",
    hbm_bandwidth_gbps=460.0,
    clock_mhz=300.0,
    kernel_parameters={},
)

#: Every board, by name.
BOARDS = MappingProxyType({b.name: b for b in (ALVEO_V80, ALVEO_U55C)})

#: Short names accepted by ``--board``.
BOARD_ALIASES = MappingProxyType({"alveo": "alveo-v80"})


class UnknownBoardError(KeyError):
    """A board name that is neither a record nor an alias."""

    def __str__(self):
        return f"unknown board {self.args[0]!r}; known boards: {', '.join(board_names())}"


def board_names() -> list[str]:
    """Every name ``board`` accepts: aliases first, then the records."""
    return [*BOARD_ALIASES, *BOARDS]


def board(name: str) -> Board:
    """The record called ``name`` (``alveo`` is the V80)."""
    try:
        return BOARDS[BOARD_ALIASES.get(name, name)]
    except KeyError:
        raise UnknownBoardError(name) from None

