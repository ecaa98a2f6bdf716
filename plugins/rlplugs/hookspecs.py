"""Every extension point of rlplugs, in one module.

rlplugs is a hub made only of plugins: the environments, reward components, guidance strategies,
checkpoint fixups and extra CLI commands shipped with rlplugs register themselves through these
hooks exactly as a third-party package would (entry-point group ``rlplugs``). Reading this file
tells you everything the system can be extended with.

A plugin module implements any subset of these functions, decorated with
:data:`rlplugs.hookimpl`, and is named in its distribution's ``pyproject.toml``::

    [project.entry-points.rlplugs]
    my-env = "my_package.plugin"

Registration hooks return :class:`rlplugs.Registration` objects: a name, a one-line summary, a
*factory* and the :class:`rlplugs.StrictConfig` of its options. Every kind takes its options the
same way, as one mapping validated by that config (``--env_args``, ``--reward_args``,
``--guidance_args``, ``--fixup_args`` on command lines, the same keys in YAML), and the factory
receives the validated config (or nothing, when the registration has no config). Factories are
only called when the thing is used, so ``rlplugs list`` stays fast even when an environment needs
a neural network to be built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import argparse

    from rlplugs.registry import Registration

hookspec = pluggy.HookspecMarker("rlplugs")


@hookspec
def rlplugs_register_environments() -> list[Registration]:
    """Environments: each factory takes the env's config and returns an :class:`rlplugs.EnvSpec`
    (which the registration names)."""


@hookspec
def rlplugs_register_reward_components() -> list[Registration]:
    """Reusable reward components: each factory takes its config and returns a
    :class:`rlplugs.RewardComponent` that any environment can add to its own
    (``--extra_rewards NAME[:WEIGHT]``, options in ``--reward_args``)."""


@hookspec
def rlplugs_register_guidance() -> list[Registration]:
    """Inference-time guidance strategies (best-of-N, beam search, ...): each factory takes its
    config and returns an object following :class:`rlplugs.Guidance` (``rlplugs eval --guidance
    NAME``, options in ``--guidance_args``)."""


@hookspec
def rlplugs_register_checkpoint_fixups() -> list[Registration]:
    """Checkpoint fixups and training guards: each factory takes its config and returns an object
    with a ``summary`` and, where it applies, ``trainer_callback(...)`` for TRL (``--fixups NAME``,
    options in ``--fixup_args``) and/or a CLI entry point."""


@hookspec
def rlplugs_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add subcommands to the ``rlplugs`` CLI (``ckpt``, ``games``, ``prm``, ...): the way a plugin
    gets flags of its own (the core commands declare no plugin's flags). A command sets ``func`` on
    its parser with ``set_defaults(func=...)``; ``func(args) -> int`` runs it and raises
    :class:`rlplugs.UsageError` for input the user can fix."""
