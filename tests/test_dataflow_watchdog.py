"""The engine's watchdog (docs/engine.md, "The watchdog"): a command that has not completed
within the bound completes with ``Status.WATCHDOG``, the round in flight ends where its last
completed command left it (``golden.engine.Engine.abandon_round``), and the engine serves the
next commands as the golden does. Forced here by a read port that takes no request (a hung
memory) during a ``draft_depth``, on Amaranth's simulator with a small bound."""

from golden.engine import Status
from hw.dataflow.engine import EngineParams, PersistentEngine
from hw.lib.stream import stream_get, stream_put
from sim.amaranth_tb import simulate
from sim.dataflow.memory import CardMemory
from sim.dataflow.rounds import Scenario, check_step, completion_fields
from tests.test_dataflow_engine import SMALL

BOUND = 3000  # config.watchdog_cycles of the test (the build's bound is far larger)


def test_watchdog_cuts_off_a_hung_command_and_the_engine_goes_on():
    params = EngineParams(**SMALL)
    dut = PersistentEngine(**SMALL)
    memory = CardMemory(1 << 18, seed=6, latency=(1, 4))
    case = Scenario(params, memory, seed=6, bad_commands=0)
    hung = {"read": False}
    seen = {}

    async def run(ctx, step):
        await stream_put(ctx, dut.command, step.command)
        completion = completion_fields(await stream_get(ctx, dut.completion))
        check_step(step, completion, case.host)
        return completion

    async def bench(ctx):
        ctx.set(dut.config, dict(case.config, watchdog_cycles=BOUND))
        b = 2
        steps = case.budget_round(b, [2, 2], verify_num=4)
        await run(ctx, next(steps))  # begin_round
        await run(ctx, next(steps))  # depth 1
        # depth 2 with the read port hung: the engine cannot read the draft model's top-K
        r = case.golden._round
        probas, tokens = case._draft_inputs(b, r.frontier.node_ids.shape[1])
        command = case.host.draft_depth(probas, tokens, width=None)
        hung["read"] = True
        start = ctx.get(dut.counters[0].busy_cycles)
        await stream_put(ctx, dut.command, command)
        completion = completion_fields(await stream_get(ctx, dut.completion))
        seen["busy"] = ctx.get(dut.counters[0].busy_cycles) - start
        seen["status"], seen["tag"] = completion["status"], completion["tag"]
        seen["sent"] = command["tag"]
        hung["read"] = False
        case.golden.abandon_round()
        # every slot reads as depth 1 left it; the round is over (build_verify: BAD_PHASE)
        for slot in range(params.max_batch):
            await run(ctx, case._read_state(slot))
        seen["build"] = (await run(ctx, case._build(0)))["status"]
        # a new round on the same slots runs as on the golden
        for step in case.budget_round(b, [2], verify_num=4):
            await run(ctx, step)
        seen["after"] = True

    servers = [memory.serve_read(dut.read, params.port_bits, hold=lambda: hung["read"]),
               *(memory.serve_write(port, params.port_bits)
                 for port in (dut.result_write, dut.mask_write, dut.table_write)),
               *(memory.serve_read(port, params.logit_port_bits) for port in dut.logits)]
    simulate(dut, bench, background=servers)
    assert seen["status"] == Status.WATCHDOG
    assert seen["tag"] == seen["sent"]
    assert BOUND - 8 <= seen["busy"] <= BOUND + 8  # the read port waited until the cut
    assert seen["build"] == Status.BAD_PHASE
    assert seen["after"]


def test_build_bound_grows_with_the_build():
    """The build's bound covers its longest commands: larger builds get larger bounds, and
    the V80-sized default is at most a few seconds' worth of clocks at 300 MHz."""
    small = EngineParams(**SMALL).watchdog_cycles
    wider = EngineParams(**dict(SMALL, max_vocab_size=4096)).watchdog_cycles
    assert small < wider
    default = EngineParams().watchdog_cycles
    for bound in (small, wider, default):
        assert bound & (bound - 1) == 0, bound  # a power of two
    assert default <= 2 ** 34
