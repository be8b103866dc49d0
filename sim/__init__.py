"""Simulation harness: Amaranth -> Verilog -> Verilator, cocotb testbenches, ``python -m sim``."""
