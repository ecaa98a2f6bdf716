"""``count-test`` as verifiers sees it: a taskset plus the Env that plays its episodes.

The classes are built on first use, so importing the package never needs verifiers.
"""

__all__ = ["CountTestTaskset", "CountTestEnv", "CountTestHarness"]


def __getattr__(name):
    from rlplugs import verifiers_export

    return verifiers_export(__name__, name)
