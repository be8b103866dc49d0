"""A one-hot finite state machine with Amaranth's ``m.FSM`` interface.

Amaranth's ``m.FSM`` encodes its state in binary: every state's decode compares the whole
state register, and the next state is one multiplexer over all states and their conditions.
In a large FSM that is the deepest logic of the design (the fused verify's 45 states: 10 LUT
levels from the state register back into it), and Yosys cannot recode it (``fsm_detect``
refuses a register with an initial value). :class:`OneHotFSM` keeps one flip-flop per state:
a state's decode is its flag, and a flag's next value is an OR over the transitions into the
state and the hold term, so its depth follows the conditions of its own transitions only
(docs/timing.md, "The state decode").
"""

from contextlib import contextmanager

from amaranth.hdl import Cat, Module, Signal

__all__ = ["OneHotFSM"]


class OneHotFSM:
    """One flag per state; written like ``m.FSM``::

        with OneHotFSM(m, init="IDLE", name="state") as fsm:
            with fsm.State("IDLE"):
                with m.If(start):
                    fsm.next = "RUN"
            with fsm.State("RUN"):
                ...
        busy = ~fsm.ongoing("IDLE")

    The semantics are ``m.FSM``'s: a state's statements act while it is the current state, the
    last ``fsm.next`` reached in a clock wins, a state without one stays. States must not nest
    and ``fsm.next`` is only valid inside a state.

    Parameters
    ----------
    m : Module
        The module the flags and their logic are added to.
    init : str
        The state after reset (its flag's initial value is 1, every other flag's 0).
    name : str
        Prefix of the flags' names (``<name>_<STATE>``).
    domain : str
        Clock domain of the flags.
    """

    def __init__(self, m: Module, *, init: str, name: str = "fsm", domain: str = "sync"):
        self._m, self._init, self._name, self._domain = m, init, name, domain
        self._flags = {}
        self._transitions = {}  # state -> [(target, taken)], in the order they are written
        self._current = None
        self._closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self._close()

    def _flag(self, state: str) -> Signal:
        if state not in self._flags:
            if self._closed:
                raise SyntaxError(f"no state {state!r} in this FSM")
            self._flags[state] = Signal(name=f"{self._name}_{state}", init=state == self._init)
        return self._flags[state]

    @contextmanager
    def State(self, state: str):  # noqa: N802 (the name of ``m.State``)
        """Statements of ``state``: they act while it is the current state."""
        if self._current is not None:
            raise SyntaxError(f"state {state!r} inside state {self._current!r}")
        if state in self._transitions:
            raise SyntaxError(f"state {state!r} is written twice")
        self._transitions[state] = []
        self._current = state
        with self._m.If(self._flag(state)):
            yield
        self._current = None

    @property
    def next(self):
        raise AttributeError("OneHotFSM.next can only be assigned")

    @next.setter
    def next(self, target: str):
        if self._current is None:
            raise SyntaxError(f"`fsm.next = {target!r}` outside a state")
        sites = self._transitions[self._current]
        taken = Signal(name=f"{self._name}_{self._current}_to_{target}_{len(sites)}")
        self._m.d.comb += taken.eq(1)  # 1 where the statement is reached, else 0
        self._flag(target)
        sites.append((target, taken))

    def ongoing(self, state: str) -> Signal:
        """The flag of ``state``: 1 while it is the current state."""
        return self._flag(state)

    def _close(self):
        self._closed = True
        if self._init not in self._transitions:
            raise SyntaxError(f"the initial state {self._init!r} has no `State` block")
        missing = sorted(set(self._flags) - set(self._transitions))
        if missing:
            raise SyntaxError(f"states without a `State` block: {', '.join(missing)}")
        entering = {state: [] for state in self._flags}
        leaving = {state: [] for state in self._flags}
        for state, sites in self._transitions.items():
            for index, (target, taken) in enumerate(sites):
                later = [other for _, other in sites[index + 1:]]
                wins = taken & ~Cat(*later).any() if later else taken  # the last one wins
                if target != state:  # (a `next` to the state itself only masks earlier ones)
                    entering[target].append(wins)
                    leaving[state].append(wins)
        for state, flag in self._flags.items():
            stays = flag & ~Cat(*leaving[state]).any() if leaving[state] else flag
            self._m.d[self._domain] += flag.eq(Cat(stays, *entering[state]).any())
