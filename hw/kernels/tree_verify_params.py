"""Build parameters and port layouts of the fused verify (``hw.kernels.tree_verify``,
docs/kernels.md §10), readable without building the kernel.

Memory layout of ``target_logits`` (docs/tree_verify.md): request ``b``'s node ``i`` has its
row at byte address ``row_address + i * row_pitch`` (``cmd`` fields; ``row_pitch`` a whole
number of port words). Word ``w`` of a row (``port_bytes`` bytes) holds the logits
``w * port_logits .. w * port_logits + port_logits - 1``, logit ``l`` of the word at bits
``l * logit_bits`` (little endian, as a dense ``[B, n, V]`` tensor whose rows start at port
words). The row's ``row_words = ceil(V / port_logits)`` words are split into ``read_ports``
contiguous chunks of ``chunk_words`` words, the power of two at least
``ceil(row_words / read_ports)`` (the last chunks shorter or empty): port ``p`` reads words
``p * chunk_words ..`` in bursts, as one HBM pseudo-channel per port would. (A power of two,
so that a token's bank and bank word are bit fields of its index.)
"""

from dataclasses import dataclass

from amaranth.hdl import signed, unsigned
from amaranth.lib import data, wiring

from hw.lib.axi import read_port_signature
from hw.lib.params import ParameterError, ParameterRecord, index_bits, parameter
from hw.lib.stream import packet_layout

__all__ = ["TreeVerifyParams", "LOGIT_BITS", "chunk_words"]

#: Bits per logit in memory by ``logit_format`` (bfloat16 is widened by ``<< 16``).
LOGIT_BITS = {"float32": 32, "bfloat16": 16}


def chunk_words(vocab_size: int, params) -> int:
    """Words of a row of ``vocab_size`` logits each port reads (see the module)."""
    row_words = -(-vocab_size // params.port_logits)
    return 1 << (-(-row_words // params.read_ports) - 1).bit_length()


@dataclass(frozen=True)
class TreeVerifyParams(ParameterRecord):
    """Validated build parameters of :class:`hw.kernels.tree_verify.TreeVerify` and the port
    layouts they give."""

    max_nodes: int = parameter(64, "Largest ``n`` (draft tree positions per request).",
                               lo=2, hi=1024)
    max_steps: int = parameter(8, "Largest ``S`` (``num_speculative_tokens``).", lo=2, hi=256)
    max_vocab_size: int = parameter(131072, "Largest ``V``.", hi=1 << 24)
    read_ports: int = parameter(2, "Memory read ports; each reads one chunk of a row.",
                                hi=64, power_of_two=True)
    port_bits: int = parameter(256, "Data bits per read port beat.", lo=64, hi=1024,
                               power_of_two=True)
    logit_format: str = parameter("float32", "Element type of ``target_logits`` in memory.",
                                  choices=("float32", "bfloat16"))
    max_burst: int = parameter(16, "Beats per read burst (AXI4: at most 256).", hi=256,
                               power_of_two=True)
    block_words: int = parameter(
        8, "Bank words per stored block sum of the final row: the draw rescans one block.",
        hi=1 << 16, power_of_two=True)
    token_width: int = parameter(
        32, "Bits of token ids (candidates and ``predicts``); must hold every token below "
            "``max_vocab_size``.", lo=2, hi=32)
    index_width: int = parameter(32, "Bits of ``retrive_index`` values.", hi=64)
    address_width: int = parameter(40, "Bits of byte addresses.", lo=16, hi=64)

    def check(self):
        if (self.max_vocab_size - 1) >> self.token_width:
            raise ParameterError(
                "token_width", f"`token_width` must hold every token below `max_vocab_size` "
                               f"({self.max_vocab_size}), not {self.token_width} bits")

    @property
    def logit_bits(self) -> int:
        return LOGIT_BITS[self.logit_format]

    @property
    def port_logits(self) -> int:
        """Logits per port beat."""
        return self.port_bits // self.logit_bits

    @property
    def port_bytes(self) -> int:
        return self.port_bits // 8

    @property
    def lanes(self) -> int:
        """Exponential units: one per logit of a beat of every port
        (``read_ports * port_logits``)."""
        return self.read_ports * self.port_logits

    @property
    def max_row_words(self) -> int:
        """``ceil(max_vocab_size / port_logits)``: port words of the longest row."""
        return -(-self.max_vocab_size // self.port_logits)

    @property
    def bank_words(self) -> int:
        """Words of each port's row bank: the longest chunk."""
        return chunk_words(self.max_vocab_size, self)

    @property
    def max_blocks(self) -> int:
        return -(-self.bank_words // self.block_words)

    @property
    def node_bits(self) -> int:
        return index_bits(self.max_nodes)

    @property
    def cmd_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "lfsr": 1,
            "nodes": range(self.max_nodes + 1),
            "steps": range(self.max_steps + 1),
            "vocab_size": range(self.max_vocab_size + 1),
            "row_address": unsigned(self.address_width),
            "row_pitch": unsigned(self.address_width),
            "temperature": 32,
            "top_k": signed(32),
            "top_p": 32,
            "seed": 32,
            "final_coin": 32,
            "threshold_single": 32,
            "threshold_acc": 32,
        })

    @property
    def tree_layout(self) -> data.StructLayout:
        link = signed(self.node_bits + 2)
        return packet_layout({
            "candidate": unsigned(self.token_width),
            "index": unsigned(self.index_width),
            "next_token": link,
            "next_sibling": link,
            "coin": 32,
        })

    @property
    def result_layout(self) -> data.StructLayout:
        return packet_layout({
            "index": unsigned(self.index_width),
            "token": unsigned(self.token_width),
            "error": 1,
            "nan": 1,
        })

    @property
    def status_layout(self) -> data.StructLayout:
        return data.StructLayout({"cycles": 32, "rows": 16, "beats": 48})

    @property
    def ports(self) -> dict:
        """Stream port name -> payload layout (the read ports are ``read``, an array of
        ``hw.lib.axi.read_port_signature``; ``status`` is not a stream)."""
        return {"cmd": self.cmd_layout, "tree": self.tree_layout, "result": self.result_layout}

    @property
    def read_port(self) -> wiring.Signature:
        return read_port_signature(self.address_width, self.port_bits)
