"""factorio-build: an rlplugs environment on the factory-sim simulator.

The model writes one ``def build(world):`` program per row; the program runs, sandboxed, on each
of the row's unseen scenes and is rewarded by the fraction it verifiably solves. Read the modules
in order: ``config`` -> ``rows`` -> ``prompt`` -> ``programs`` (static sandbox) -> ``pool`` /
``zygote`` / ``worker`` (process sandbox) -> ``scoring`` -> ``reference`` -> ``pictures`` -> ``sft``
-> ``plugin``.

The verifiers v1 classes (``env.taskset.id = "factorio-build"`` in prime-rl) are built from the
EnvSpec on first access, so importing this package never needs verifiers.
"""

__all__ = ["FactorioBuildTaskset", "FactorioBuildHarness"]


def __getattr__(name: str):
    if name not in __all__:  # e.g. `from factorio_build import rows` before the submodule loaded
        raise AttributeError(f"module 'factorio_build' has no attribute {name!r}")
    from rlplugs import verifiers_export

    return verifiers_export(__name__, name)
