"""matrl: multi-turn crystal-structure design with machine-learned interatomic potential judges.

The agent proposes inorganic crystals, evaluates them against an MLIP (CHGNet, relaxed with our
batched FIRE), refines, and submits; rewards are SUN (stable, unique, novel), group diversity,
band-gap and bulk-modulus targets. Read the modules in order:

``structures`` (parsing) -> ``validity`` -> ``relax`` (batched FIRE) -> ``megnet`` (band gap) ->
``elastic`` -> ``hull`` -> ``novelty`` -> ``judges`` -> ``service`` (HTTP judges) -> ``tasks`` ->
``toolcalls`` -> ``evaluation`` -> ``episode`` -> ``rewards`` -> ``components`` -> ``policy`` ->
``render`` -> ``plugin`` (registration) -> ``cli``; ``prototypes`` + ``build_reference`` make the
embedded approximate hull in ``data/``.

The verifiers v1 classes (``env.taskset.id = "matrl"`` in prime-rl) are built from the EnvSpec on
first access, so importing this package never needs verifiers.
"""

__all__ = ["MatrlTaskset", "MatrlEnv", "MatrlHarness"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module 'matrl' has no attribute {name!r}")
    from rlplugs import verifiers_export

    return verifiers_export(__name__, name)
