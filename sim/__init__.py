"""Simulation harness: Amaranth -> Verilog -> Verilator with cocotb testbenches (``python -m sim``)."""
