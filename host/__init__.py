"""Host runtime of the persistent engine (docs/host.md): ``host.Engine`` runs draft rounds,
verify-tree builds and verifies through the engine's commands on a pluggable backend
("golden": ``golden.engine.Engine``; "rtl": ``host.RtlBackend``, the Verilated hardware
engine run in process, with each command's cycles and bytes; "card": ``host.CardBackend``,
the engine's Vitis kernel driven through its registers and rings, as on a card)
and returns numpy arrays in SGLang's formats. ``python -m host`` decodes with a synthetic
draft/target model pair and prints the acceptance figures.

Imports point one way: ``host`` imports ``golden`` (and, for the rtl backend, ``sim``);
nothing imports ``host`` but its tests.
"""

from .backend import BACKENDS, Backend, CommandResult, GoldenBackend, make_backend
from .card import CardBackend
from .decode import DecodeRun, Metrics, decode
from .engine import Engine, EngineError, engine_config
from .kv import KVSlots
from .results import CommandRecord, RoundResult, VerifyResult, VerifyTree
from .rtl import RtlBackend
from .synthetic import BigramModels
from .trees import TREES, TreePoint

__all__ = [
    "BACKENDS",
    "Backend",
    "BigramModels",
    "CardBackend",
    "CommandRecord",
    "CommandResult",
    "DecodeRun",
    "Engine",
    "EngineError",
    "GoldenBackend",
    "KVSlots",
    "Metrics",
    "RoundResult",
    "RtlBackend",
    "TREES",
    "TreePoint",
    "VerifyResult",
    "VerifyTree",
    "decode",
    "engine_config",
    "make_backend",
]
