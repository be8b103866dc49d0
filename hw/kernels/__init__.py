"""One parametrised ``wiring.Component`` per kernel of docs/kernels.md."""
