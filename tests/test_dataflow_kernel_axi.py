"""The engine's packaged Vitis kernel under an independent AXI model (`make sim
KERNEL=dataflow_kernel`, sim/dataflow_kernel): cocotbext-axi's AxiLiteMaster and RAMs with
random pauses on every channel; rounds through the rings equal golden.engine."""

from sim.dataflow_kernel import TARGET
from sim.harness import BUILD_ROOT


def test_kernel_rounds_under_cocotbext_axi(sim_report):
    summary = TARGET.run(log_file=BUILD_ROOT / "pytest-dataflow_kernel.log")
    rounds = TARGET.config["rounds"]
    assert summary["random_vectors"] == rounds
    assert summary["vectors"] > 3 * rounds  # a round is several commands, bad ones too
    sim_report(f"dataflow_kernel: {rounds} rounds, {summary['vectors']} commands through the "
               f"rings under cocotbext-axi (pauses {TARGET.config['pause']}) bit-exact with "
               f"golden.engine")
