"""The ``rtl`` backend of ``host.sgl_kernel``'s two verify ops: K6 ``RejectSample``
(``hw.kernels.reject_sample``) as a Verilator model in this process (docs/host.md, "Drop-in
ops for SGLang").

:func:`tree_speculative_sampling_target_only` and :func:`verify_tree_greedy` take the
goldens' arguments (numpy arrays of the goldens' dtypes, outputs written in place, the
goldens' checks and ``ValueError`` messages) and run the call on the hardware: the call's
``cmd`` and ``tree`` beats (``sim.reject_sample.streams.feeds``) go into the model, its
``target_probs`` reads are answered from the memory image of the arrays
(``sim.reject_sample.memory.MemoryImage``, after ``memory_latency`` clocks), and the outputs
are rebuilt from its ``result`` packets and ``draft_write`` beats
(``sim.reject_sample.streams.outputs_from_dut``), as ``sim/reject_sample/pysim.py`` does on
Amaranth's simulator. Nothing is written unless every request completed; a request the
kernel flags (a sibling cycle) is the golden's ``ValueError``.

The build: :func:`build_parameters` rounds the call's ``n`` (tree positions), ``S``
(``accept_index`` columns) and ``V`` (vocabulary) up to powers of two of at least
:data:`LEAST` so that calls of similar shapes share one model (greedy calls read no rows:
any loaded build of their ``n`` and ``S`` serves, else the smallest vocabulary's);
:data:`FIXED` holds the rest (8 float32 lanes per memory word, 16 reads in flight, 32-word
segments, 32-bit tokens, indices and addresses). A shape beyond the largest build K6 allows
is a ``ValueError``. Each parameter set is elaborated, verilated and compiled once
(``sim.verilated.build_indexed``, cached under ``build/verilated/``: about 15 s on 2 cores)
and loaded once per process (:func:`model`). A call runs at about 45,000 to 70,000 clocks a
second (Python answers the ports every clock).
"""

from __future__ import annotations

import dataclasses
import sys
from collections import deque

import numpy as np

from golden.reject_sample import greedy_arguments, sampling_arguments

__all__ = ["FIXED", "LEAST", "K6Model", "build_parameters", "model",
           "tree_speculative_sampling_target_only", "verify_tree_greedy"]

#: The build parameters no call shape changes.
FIXED = {"lanes": 8, "read_slots": 16, "segment_words": 32, "token_width": 32,
         "index_width": 32, "address_width": 32}
#: The smallest build: ``max_nodes``, ``max_steps``, ``max_vocab_size``.
LEAST = {"max_nodes": 16, "max_steps": 8, "max_vocab_size": 4096}

# Clocks a request may take before the run is called hung: per node decision (a memory read,
# the add, the divider), per final-row word (two passes and the rescan), and a fixed part.
_CLOCKS_PER_DECISION = 64
_CLOCKS_PER_WORD = 4
_CLOCKS_PER_REQUEST = 1000


def _power_of_two(value: int, least: int) -> int:
    return max(least, 1 << max(0, int(value) - 1).bit_length())


def _largest(name: str) -> int:
    """K6's largest allowed ``name`` (its parameter record's upper bound)."""
    from hw.kernels.reject_sample_params import RejectSampleParams

    field = next(f for f in dataclasses.fields(RejectSampleParams) if f.name == name)
    return field.metadata["check"]["hi"]


def build_parameters(nodes: int, steps: int, vocab: int, batch: int = 1) -> dict:
    """The ``RejectSample`` parameters of the build that runs a call of ``batch`` requests of
    ``nodes`` positions, ``steps`` ``accept_index`` columns and a vocabulary of ``vocab``
    (1 for a greedy call): each rounded up to a power of two of at least :data:`LEAST`, with
    :data:`FIXED`. ``ValueError`` for a shape no build accepts."""
    wanted = {"max_nodes": (nodes, "`candidates` has n = {} positions"),
              "max_steps": (steps, "`accept_index` has S = {} columns"),
              "max_vocab_size": (vocab, "`target_probs` has V = {} entries per row")}
    params = dict(FIXED)
    for name, (value, what) in wanted.items():
        largest = _largest(name)
        if value > largest:
            raise ValueError(f"{what.format(value)}; the rtl backend's K6 builds take at most "
                             f"{largest} (`{name}`): use backend='golden'")
        params[name] = min(largest, _power_of_two(value, LEAST[name]))
    row_words = -(-vocab // FIXED["lanes"])
    if batch * nodes * row_words > 1 << FIXED["address_width"]:
        raise ValueError(f"`target_probs` of B*n = {batch * nodes} rows of V = {vocab} does "
                         f"not fit the rtl build's {FIXED['address_width']}-bit word "
                         "addresses: use backend='golden'")
    return params


class K6Model:
    """One Verilated K6 build, run call by call (the model is reset before each call).

    Parameters
    ----------
    parameters : dict
        ``RejectSample``'s parameters (:func:`build_parameters`).
    log : callable or None
        Progress messages of the build (None: standard error); a cached build says nothing.
    """

    def __init__(self, parameters: dict, *, log=None):
        from hw.kernels.reject_sample_params import RejectSampleParams
        from sim.verilated import Model

        self.params = RejectSampleParams(**parameters)
        self.library = _library(tuple(sorted(parameters.items())),
                                log if log is not None else _stderr)
        self.model = Model(self.library)
        self.cycles = 0  # clocks of the last call
        self._shown = {}  # port -> the payload it holds (a port is set only when it changes)

    def _offer(self, port: str, word) -> None:
        """Drive stream ``port``: ``word`` as its payload with ``valid``, or idle (None)."""
        self.model.set(f"{port}__valid", word is not None)
        if word is not None and self._shown.get(port) != word:
            self.model.set(f"{port}__payload", word)
            self._shown[port] = word

    def _output(self, port: str):
        """Stream ``port``'s payload if its ``valid`` is high, else None."""
        return self.model.get(f"{port}__payload") if self.model.get(f"{port}__valid") else None

    def run(self, call, *, memory_latency: int = 1):
        """Run ``call`` (a ``sim.reject_sample.call.Call``, all requests back to back):
        ``(packets, writes, memory)``, the ``result`` packets (one list of beat dicts per
        request), the ``draft_write`` beats and the ``target_probs`` memory image, for
        ``sim.reject_sample.streams.outputs_from_dut``. ``RuntimeError`` if the kernel does
        not finish in time (a hung model)."""
        from sim.reject_sample.memory import MemoryImage
        from sim.reject_sample.streams import beats, feeds

        params, model = self.params, self.model
        words = feeds(params, call)
        memory = MemoryImage(call, params.lanes)
        cmd, tree = deque(words["cmd"]), deque(words["tree"])
        responses = deque()  # (due cycle, read_data payload), in request order
        packets, current, writes = [], [], []
        b, n = call.batch_size, call.nodes
        limit = b * (n * call.steps * (_CLOCKS_PER_DECISION + memory_latency)
                     + _CLOCKS_PER_WORD * call.row_words(params.lanes) + _CLOCKS_PER_REQUEST)
        model.reset()
        self._shown = {}
        for port in ("read_address", "result", "draft_write"):
            model.set(f"{port}__ready", 1)
        cycle = 0
        while len(packets) < b or cmd or tree:
            if cycle >= limit:
                raise RuntimeError(f"rtl K6: {len(packets)} of {b} requests done after "
                                   f"{cycle} clocks (the model hangs)")
            self._offer("cmd", cmd[0] if cmd else None)
            self._offer("tree", tree[0] if tree else None)
            data = responses[0][1] if responses and responses[0][0] <= cycle else None
            self._offer("read_data", data)
            model.eval()
            cmd_taken = bool(cmd) and model.get("cmd__ready")
            tree_taken = bool(tree) and model.get("tree__ready")
            data_taken = data is not None and model.get("read_data__ready")
            address = self._output("read_address")
            result = self._output("result")
            draft = self._output("draft_write")
            model.tick()
            cycle += 1
            if cmd_taken:
                cmd.popleft()
            if tree_taken:
                tree.popleft()
            if data_taken:
                responses.popleft()
            if address is not None:
                due = max(cycle + memory_latency - 1, responses[-1][0] if responses else 0)
                responses.append((due, memory.payload(address)))
            if result is not None:
                beat = beats(params.result_layout, [result])[0]
                current.append(beat)
                if beat["last"]:
                    packets.append(current)
                    current = []
            if draft is not None:
                writes.append(beats(params.draft_layout, [draft])[0])
        self.cycles = cycle
        return packets, writes, memory


def model(nodes: int = 1, steps: int = 1, vocab: int = 1, *, batch: int = 1,
          any_vocab: bool = False, log=None) -> K6Model:
    """The loaded :class:`K6Model` of the build for calls of this shape
    (:func:`build_parameters`): built on first use, then kept for the process (a demo calls
    it ahead to show the build's progress). ``any_vocab`` (greedy calls, which read no
    rows): a loaded build of the same ``n`` and ``S`` at any vocabulary serves too."""
    parameters = build_parameters(nodes, steps, vocab, batch)
    key = tuple(sorted(parameters.items()))
    if key not in _MODELS and any_vocab:
        shape = {**parameters, "max_vocab_size": None}
        key = next((loaded for loaded in _MODELS
                    if {**dict(loaded), "max_vocab_size": None} == shape), key)
    if key not in _MODELS:
        _MODELS[key] = K6Model(parameters, log=log)
    return _MODELS[key]


_MODELS: dict = {}
_LIBRARIES: dict = {}


def _library(parameters: tuple, log):
    """K6's shared library for ``parameters`` (``(name, value)`` pairs): from this process's
    memory, else from ``sim.verilated``'s index (keyed by the parameters and the ``hw/``
    sources), else elaborated and built (cached by its Verilog)."""
    if parameters not in _LIBRARIES:
        from hw.kernels.reject_sample import RejectSample
        from sim.harness import REPO_ROOT
        from sim.verilated import build_indexed

        _LIBRARIES[parameters] = build_indexed(
            lambda: RejectSample(**dict(parameters)), key=repr(parameters),
            sources=(REPO_ROOT / "hw").glob("**/*.py"), name="reject_sample", log=log)
    return _LIBRARIES[parameters]


def _stderr(message):
    """The default build log: standard error."""
    print(f"host.k6_rtl: {message}", file=sys.stderr)


def _run(call, outputs: dict, log) -> None:
    """Run ``call`` on its build and write ``outputs`` (name -> the golden's output view) in
    place once every request completed; a request the kernel flags is the golden's
    ``ValueError`` (nothing written)."""
    from sim.reject_sample.streams import outputs_from_dut

    shape = (call.nodes, call.steps, call.vocab_size)
    if call.batch_size == 0:
        build_parameters(*shape)  # a shape no build takes is refused all the same
        return
    k6 = model(*shape, batch=call.batch_size, any_vocab=call.mode == "greedy", log=log)
    packets, writes, memory = k6.run(call)
    for req, packet in enumerate(packets):
        if packet[-1]["error"]:
            raise ValueError(f"`retrive_next_sibling` of request {req} has a cycle (a sibling "
                             f"walk longer than n = {call.nodes})")
    work = {name: np.array(array, order="C") for name, array in outputs.items()}
    try:
        outputs_from_dut(call, memory, packets, writes, out=work)
    except AssertionError as error:
        raise RuntimeError(f"rtl K6: the kernel's output is malformed: {error}") from error
    for name, array in outputs.items():
        array[...] = work[name]


def tree_speculative_sampling_target_only(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    uniform_samples,
    uniform_samples_for_final_sampling,
    target_probs,
    draft_probs,
    threshold_single=1.0,
    threshold_acc=1.0,
    deterministic=True,
    *,
    log=None,
) -> None:
    """:func:`golden.tree_speculative_sampling_target_only` (same arguments, checks and
    in-place outputs) run on K6's Verilated model; ``log``: the build's progress messages
    (None: standard error)."""
    from sim.reject_sample.call import Call

    v, b, n, s, (coins, coin_final, target, draft, _, _) = sampling_arguments(
        predicts, accept_index, accept_token_num, candidates, retrive_index,
        retrive_next_token, retrive_next_sibling, uniform_samples,
        uniform_samples_for_final_sampling, target_probs, draft_probs, threshold_single,
        threshold_acc, deterministic)
    call = Call("rtl", "sampling", v["candidates"], v["retrive_index"],
                v["retrive_next_token"], v["retrive_next_sibling"], s, target_probs=target,
                uniform_samples=coins, final_coins=coin_final,
                threshold_single=float(threshold_single), threshold_acc=float(threshold_acc))
    _run(call, {"predicts": v["predicts"], "accept_index": v["accept_index"],
                "accept_token_num": v["accept_token_num"], "draft_probs": draft}, log)


def verify_tree_greedy(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    target_predict,
    *,
    log=None,
) -> None:
    """:func:`golden.verify_tree_greedy` (same arguments, checks and in-place outputs) run on
    K6's Verilated model (its greedy mode); ``log`` as for
    :func:`tree_speculative_sampling_target_only`."""
    from sim.reject_sample.call import Call

    v, b, n, s, target = greedy_arguments(predicts, accept_index, accept_token_num, candidates,
                                          retrive_index, retrive_next_token,
                                          retrive_next_sibling, target_predict)
    call = Call("rtl", "greedy", v["candidates"], v["retrive_index"], v["retrive_next_token"],
                v["retrive_next_sibling"], s, target_predict=target)
    _run(call, {"predicts": v["predicts"], "accept_index": v["accept_index"],
                "accept_token_num": v["accept_token_num"]}, log)
