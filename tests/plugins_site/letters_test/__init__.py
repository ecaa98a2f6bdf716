"""``letters-test`` as verifiers sees it: ``vf.load_taskset(id="letters-test")`` imports this module.

The classes are built on first use, so importing the package never needs verifiers.
"""

__all__ = ["LettersTestTaskset", "LettersTestHarness"]


def __getattr__(name):
    from rlplugs import verifiers_export

    return verifiers_export(__name__, name)
