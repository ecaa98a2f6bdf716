"""rlplugs: plugins for existing LLM RL trainers (TRL, prime-rl/verifiers).

The core (this package) knows no environment by name: environments, reward components, guidance
strategies and checkpoint fixups all arrive through the ``rlplugs`` entry-point group and the
hooks in :mod:`rlplugs.hookspecs`.
"""

import pluggy

__version__ = "0.1.0"

#: Decorator for plugin functions implementing :mod:`rlplugs.hookspecs`.
hookimpl = pluggy.HookimplMarker("rlplugs")

__all__ = ["hookimpl", "__version__"]
