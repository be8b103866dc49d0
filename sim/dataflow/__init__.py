"""Testbench of the persistent engine (`make sim KERNEL=dataflow`)."""
