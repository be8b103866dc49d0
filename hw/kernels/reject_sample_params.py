"""Build parameters and port layouts of K6 tree rejection sampling (``hw.kernels.reject_sample``,
docs/kernels.md §8), readable without building the kernel (testbenches and the host read the
layouts here)."""

from dataclasses import dataclass

from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from hw.lib.params import ParameterError, ParameterRecord, index_bits, parameter
from hw.lib.stream import packet_layout

__all__ = ["RejectSampleParams"]


@dataclass(frozen=True)
class RejectSampleParams(ParameterRecord):
    """Validated build parameters of :class:`RejectSample` and the port layouts they give
    (testbenches and the host read layouts here without building the component)."""

    max_nodes: int = parameter(64, "Largest ``n`` (draft tree positions per request).",
                               hi=1024)
    max_steps: int = parameter(8, "Largest ``S`` (``num_speculative_tokens``).", hi=256)
    max_vocab_size: int = parameter(131072, "Largest ``V``.", hi=1 << 31)
    lanes: int = parameter(
        8, "float32 elements per memory word and per clock of the final-row stream.", hi=64,
        power_of_two=True)
    read_slots: int = parameter(
        32, "Memory reads in flight and the final-row buffer: covers the memory latency at full "
            "streaming rate.", lo=4, hi=4096, power_of_two=True)
    segment_words: int = parameter(
        64, "Words per stored running sum of the final row: the pick rescans one segment.",
        hi=1 << 20, power_of_two=True)
    token_width: int = parameter(
        32, "Bits of token ids (candidates, ``predict``; 32: SGLang's int32 ``predicts``); "
            "must hold every token below ``max_vocab_size``.", lo=2, hi=32)
    index_width: int = parameter(32, "Bits of ``retrive_index`` values.", hi=64)
    address_width: int = parameter(32, "Bits of word addresses.", hi=64)
    divider_bits_per_stage: int = parameter(
        1, "``Float32Divide.bits_per_stage`` of the ``threshold_acc`` divider (two break the "
           "300 MHz rule of docs/timing.md).", hi=25)

    def check(self):
        if (self.max_vocab_size - 1) >> self.token_width:
            raise ParameterError(
                "token_width", f"`token_width` must hold every token below `max_vocab_size` "
                               f"({self.max_vocab_size}), not {self.token_width} bits")

    @property
    def max_row_words(self) -> int:
        """``ceil(max_vocab_size / lanes)``: the longest final-row stream."""
        return -(-self.max_vocab_size // self.lanes)

    @property
    def max_segments(self) -> int:
        return -(-self.max_row_words // self.segment_words)

    @property
    def node_bits(self) -> int:
        return index_bits(self.max_nodes)

    @property
    def cmd_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "greedy": 1,
            "lfsr": 1,
            "nodes": range(self.max_nodes + 1),
            "steps": range(self.max_steps + 1),
            "vocab_size": range(self.max_vocab_size + 1),
            "row_address": unsigned(self.address_width),
            "row_words": unsigned(self.address_width),
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
            "predict": unsigned(self.token_width),
        })

    @property
    def read_data_layout(self) -> data.ArrayLayout:
        return data.ArrayLayout(32, self.lanes)

    @property
    def draft_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "address": unsigned(self.address_width),
            "lane": range(max(self.lanes, 2)),
            "value": 32,
        })

    @property
    def result_layout(self) -> data.StructLayout:
        return packet_layout({
            "index": unsigned(self.index_width),
            "token": unsigned(self.token_width),
            "error": 1,
        })

    @property
    def status_layout(self) -> data.StructLayout:
        return data.StructLayout({"walk_cycles": 32, "row_cycles": 32})

    @property
    def node_layout(self) -> data.StructLayout:
        """An entry of the on-chip node memory."""
        return data.StructLayout({
            "candidate": unsigned(self.token_width),
            "index": unsigned(self.index_width),
            "next": unsigned(self.node_bits),
            "next_none": 1,
            "sibling": unsigned(self.node_bits),
            "sibling_none": 1,
            "coin": 32,
            "predict": unsigned(self.token_width),
            "address": unsigned(self.address_width),
        })

    @property
    def ports(self) -> dict:
        """Stream port name -> payload layout (``read_address`` carries a plain
        ``unsigned(address_width)``; ``status`` is not a stream)."""
        return {"cmd": self.cmd_layout, "tree": self.tree_layout,
                "read_data": self.read_data_layout, "draft_write": self.draft_layout,
                "result": self.result_layout}
