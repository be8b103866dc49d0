"""Every kernel's parameter record (``hw.lib.params.ParameterRecord``) refuses bad build
parameters with the parameter's name as data, and so does the component built from it (before
the component exists: nothing is left "created but never used")."""

from dataclasses import dataclass

import pytest

from hw.kernels.active_slots import ActiveSlots
from hw.kernels.logits_to_probas import LogitsToProbas
from hw.kernels.reject_sample import RejectSample
from hw.kernels.tree_mask import TreeMask
from hw.kernels.update_state import UpdateCumuDraftState
from hw.kernels.verify_result import VerifyResult
from hw.kernels.work_deltas import WorkDeltas
from hw.lib.params import ParameterError, ParameterRecord, ParameterTypeError, parameter

# component -> [(arguments, message)]; the error names the last argument.
INVALID = {
    ActiveSlots: [
        ({"max_batch_size": 0}, "`max_batch_size` must be at least 1, not 0"),
        ({"max_batch_size": 2.5}, "`max_batch_size` must be an integer, not 2.5"),
        ({"max_batch_size": False}, "`max_batch_size` must be an integer, not False"),
    ],
    LogitsToProbas: [
        ({"max_vocab_size": 0}, "`max_vocab_size` must be between 1 and 16777216, not 0"),
        ({"max_vocab_size": 1.5}, "`max_vocab_size` must be an integer, not 1.5"),
        ({"lanes": 3}, "`lanes` must be a power of two, not 3"),
        ({"lanes": 32}, "`lanes` must be between 1 and 16, not 32"),
        ({"lanes": True}, "`lanes` must be an integer, not True"),
        ({"input_format": "fp16"},
         "`input_format` must be one of 'float32', 'bfloat16', not 'fp16'"),
        ({"row_count_width": 0}, "`row_count_width` must be between 1 and 32, not 0"),
    ],
    RejectSample: [
        ({"max_nodes": 0}, "`max_nodes` must be between 1 and 1024, not 0"),
        ({"max_steps": 0}, "`max_steps` must be between 1 and 256, not 0"),
        ({"max_vocab_size": 0}, r"`max_vocab_size` must be between 1 and 2147483648, not 0"),
        ({"lanes": 3}, "`lanes` must be a power of two, not 3"),
        ({"lanes": 128}, "`lanes` must be between 1 and 64, not 128"),
        ({"read_slots": 2}, "`read_slots` must be between 4 and 4096, not 2"),
        ({"segment_words": 6}, "`segment_words` must be a power of two, not 6"),
        ({"token_width": 16}, r"`token_width` must hold every token below `max_vocab_size` "
                              r"\(131072\), not 16 bits"),
        ({"max_nodes": 8.0}, "`max_nodes` must be an integer, not 8.0"),
        ({"lanes": True}, "`lanes` must be an integer, not True"),
        ({"divider_bits_per_stage": 0}, "`divider_bits_per_stage` must be between 1 and 25, not 0"),
    ],
    TreeMask: [
        ({"max_node_count": 0}, "`max_node_count` must be at least 1, not 0"),
        ({"max_node_count": 2.0}, "`max_node_count` must be an integer, not 2.0"),
        ({"max_verify_num": 0},
         "`max_verify_num` must be between 1 and `max_node_count`, not 0"),
        ({"max_node_count": 16, "max_verify_num": 17},
         "`max_verify_num` must be between 1 and `max_node_count`, not 17"),
        ({"mask_lanes": 4}, "`mask_lanes` must be between 8 and 1024, not 4"),
        ({"mask_lanes": 2048}, "`mask_lanes` must be between 8 and 1024, not 2048"),
        ({"mask_lanes": 24}, "`mask_lanes` must be a power of two, not 24"),
        ({"token_width": 1}, "`token_width` must be between 2 and 64, not 1"),
        ({"seq_len_width": 63}, "`seq_len_width` must be between 1 and 62, not 63"),
        ({"max_batch_size": 0}, "`max_batch_size` must be at least 1, not 0"),
        ({"max_batch_size": True}, "`max_batch_size` must be an integer, not True"),
    ],
    UpdateCumuDraftState: [
        ({"node_top_k": 0}, "`node_top_k` must be between 1 and 16, not 0"),
        ({"node_top_k": 17}, "`node_top_k` must be between 1 and 16, not 17"),
        ({"max_tree_width": 12},
         "`max_tree_width` must be between 1 and `node_top_k`, not 12"),
        ({"max_tree_width": 0}, "`max_tree_width` must be between 1 and `node_top_k`, not 0"),
        ({"node_top_k": 16, "max_tree_width": 9},
         r"`node_top_k` \* `max_tree_width` must be at most 128, not 144"),
        ({"max_node_count": 0}, "`max_node_count` must be at least 1, not 0"),
        ({"max_verify_num": 0}, "`max_verify_num` must be at least 1, not 0"),
        ({"max_input_size": -1}, "`max_input_size` must be at least 0, not -1"),
        ({"max_batch": 0}, "`max_batch` must be at least 1, not 0"),
        ({"token_width": 1}, "`token_width` must be between 2 and 64, not 1"),
        ({"token_width": 65}, "`token_width` must be between 2 and 64, not 65"),
        ({"index_width": 11}, r"`index_width` must be between 12 \(to hold `max_node_count` "
                              r"\+ N and a sign\) and 64, not 11"),
        ({"max_node_count": 1.5}, "`max_node_count` must be an integer, not 1.5"),
        ({"node_top_k": True}, "`node_top_k` must be an integer, not True"),
    ],
    VerifyResult: [
        ({"max_draft_tokens": 0}, "`max_draft_tokens` must be between 1 and 1024, not 0"),
        ({"max_draft_tokens": 1025},
         "`max_draft_tokens` must be between 1 and 1024, not 1025"),
        ({"max_speculative_tokens": 65},
         "`max_speculative_tokens` must be between 1 and 64, not 65"),
        ({"max_batch_size": 0}, "`max_batch_size` must be at least 1, not 0"),
        ({"token_width": 1}, "`token_width` must be between 2 and 64, not 1"),
        ({"loc_width": 65}, "`loc_width` must be between 1 and 64, not 65"),
        ({"seq_len_width": 0}, "`seq_len_width` must be between 1 and 63, not 0"),
        ({"pool_index_width": 64}, "`pool_index_width` must be between 1 and 63, not 64"),
        ({"max_draft_tokens": 8.0}, "`max_draft_tokens` must be an integer, not 8.0"),
    ],
    WorkDeltas: [
        ({"node_top_k": 0}, "`node_top_k` must be between 1 and 16, not 0"),
        ({"node_top_k": 17}, "`node_top_k` must be between 1 and 16, not 17"),
        ({"node_top_k": 2.0}, "`node_top_k` must be an integer, not 2.0"),
        ({"max_verify_num": 0}, "`max_verify_num` must be at least 1, not 0"),
        ({"lanes": 0}, "`lanes` must be between 1 and 16, not 0"),
        ({"lanes": 17}, "`lanes` must be between 1 and 16, not 17"),
        ({"max_batch_size": 0}, "`max_batch_size` must be between 1 and 16777215, not 0"),
        ({"max_batch_size": 1 << 24},
         "`max_batch_size` must be between 1 and 16777215, not 16777216"),
        ({"lanes": True}, "`lanes` must be an integer, not True"),
    ],
}


@pytest.mark.parametrize(
    ("component", "arguments", "message"),
    [(component, arguments, message)
     for component, cases in INVALID.items() for arguments, message in cases],
    ids=lambda value: value.__name__ if isinstance(value, type) else None)
def test_invalid_parameters(component, arguments, message):
    error_type = ParameterTypeError if "an integer" in message else ParameterError
    with pytest.raises(error_type, match=f"^{message}$") as error:
        component.Params(**arguments)
    assert error.value.parameter == list(arguments)[-1]
    with pytest.raises(error_type, match=f"^{message}$"):
        component(**arguments)


@dataclass(frozen=True)
class _Record(ParameterRecord):
    """A record of every kind of parameter."""

    k: int = parameter(8, "``K``.", hi=16)
    width: int = parameter(4, "At most ``k``.", hi="k")
    lanes: int = parameter(8, "Lanes.", hi="most_lanes", power_of_two=True)
    format: str = parameter("float32", "Element format.", choices=("float32", "bfloat16"))

    @property
    def most_lanes(self) -> int:
        return 4 * self.k

    def check(self):
        if self.lanes < self.width:
            raise ParameterError("lanes", "`lanes` must be at least `width`")


def test_record_checks_fields_in_order_then_the_rules_between_them():
    assert _Record() == _Record(8, 4, 8, "float32")
    for arguments, message in [
        ({"k": 0, "width": 0}, "`k` must be between 1 and 16, not 0"),
        ({"width": 9}, "`width` must be between 1 and `k`, not 9"),  # a field: by name
        ({"k": 2, "width": 2, "lanes": 16}, "`lanes` must be between 1 and 8, not 16"),  # by value
        ({"lanes": 6}, "`lanes` must be a power of two, not 6"),
        ({"format": "fp8"}, "`format` must be one of 'float32', 'bfloat16', not 'fp8'"),
        ({"width": 8, "lanes": 4}, "`lanes` must be at least `width`"),
    ]:
        with pytest.raises(ParameterError, match=f"^{message}$"):
            _Record(**arguments)


def test_record_docstring_states_each_parameter_once():
    assert _Record.__doc__ == (
        "A record of every kind of parameter.\n\nParameters\n----------\n"
        "k : int, 1..16 (default 8)\n    ``K``.\n"
        "width : int, 1..``k`` (default 4)\n    At most ``k``.\n"
        "lanes : int, 1..``most_lanes``, a power of two (default 8)\n    Lanes.\n"
        "format : one of 'float32', 'bfloat16' (default 'float32')\n    Element format.")
