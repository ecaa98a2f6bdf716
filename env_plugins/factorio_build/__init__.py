"""factorio-build: an rlplugs environment on the factory-sim simulator.

The model writes one ``def build(world):`` program per row; the program runs, sandboxed, on each
of the row's unseen scenes and is rewarded by the fraction it verifiably solves. Read the modules
in order: ``config`` -> ``rows`` -> ``prompt`` -> ``programs`` (static sandbox) -> ``worker`` /
``pool`` (process sandbox) -> ``scoring`` -> ``reference`` -> ``pictures`` -> ``sft`` -> ``plugin``.
"""
