"""The ``trl grpo``/``trl sft`` command as extended by rlplugs' startup hook.

A superset of TRL's ``TrainingCommand``: with no environment named it *is* the stock command
(same parser, same launch, byte-for-byte the same behaviour); with ``--env NAME`` on the command
line or ``environment:`` in the ``--config`` YAML it launches rlplugs' script through
:func:`rlplugs.adapters.trl.launch.run_training`. ``--help`` shows the superset parser, so ``--env`` is
discoverable from ``trl grpo --help``.
"""

from __future__ import annotations

from argparse import Namespace

from trl.cli.commands.base import CommandContext
from trl.cli.commands.training import TrainingCommand

ENV_FLAGS = ("--env", "--environment")


def names_environment(argv: list[str]) -> bool:
    """Whether the arguments choose an rlplugs environment: the CLI flag, or in the ``--config``
    YAML the ``environment:`` key, or ``env:`` given a name instead of TRL's map of environment
    variables (rlplugs' launcher then says to write ``environment:``). A YAML that cannot be read
    is left to the stock command to report."""
    if any(a in ENV_FLAGS or a.startswith(tuple(f + "=" for f in ENV_FLAGS)) for a in argv):
        return True
    from rlplugs.adapters.trl.arguments import LaunchError, names_env_in_env_key, read_config_file

    try:
        config = read_config_file(argv) or {}
    except LaunchError:
        return False
    return bool(config.get("environment")) or names_env_in_env_key(config)


class EnvTrainingCommand(TrainingCommand):
    """``trl <name>`` that also accepts ``--env NAME``."""

    def run(self, args: Namespace, context: CommandContext) -> int:
        argv = context.argv_after(self.name)
        if "-h" in argv or "--help" in argv:
            from rlplugs.adapters.trl.launch import SCRIPTS

            SCRIPTS[self.name][1](prog=f"trl {self.name}").parse_args(["--help"])
        if not names_environment(argv):
            return super().run(args, context)
        from rlplugs.adapters.trl.launch import run_training

        return run_training(self.name, argv, prog=f"trl {self.name}")
