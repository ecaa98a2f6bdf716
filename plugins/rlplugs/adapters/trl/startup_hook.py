"""Make the literal ``trl grpo --env NAME`` (and ``trl sft --env NAME``) train an rlplugs environment.

TRL's CLI has no plugin mechanism and silently hands an unknown ``--env`` to ``accelerate launch``
(its training commands pass every option their parser does not know to accelerate as a launch
option). rlplugs therefore installs ``rlplugs_trl_hook.pth`` at the root of
site-packages; Python runs it in every interpreter, so it is kept to a cheap check of
``sys.argv[0]`` and imports this module only in the ``trl`` console-script process.

This module imports nothing heavy. It adds a one-shot import hook that, once ``trl.cli.main`` has
been executed, wraps its ``get_commands`` (read at call time by ``main()``) so that the ``grpo``
and ``sft`` commands become :class:`rlplugs.adapters.trl.cli_command.EnvTrainingCommand`: without
``--env``/``environment:`` they run TRL's own command unchanged; with it they launch rlplugs'
script. Only TRL versions in :data:`TESTED_TRL` are touched; any other version, or any failure
here, leaves ``trl`` exactly as shipped (with one warning).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import warnings

TESTED_TRL = ((1, 16), (1, 17))  # [low, high): the TRL releases whose CLI internals this hook was tested on
PATCHED_COMMANDS = ("grpo", "sft")


def is_trl_cli(argv: list[str] | None = None) -> bool:
    """True in the process started by TRL's ``trl`` console script."""
    argv = sys.argv if argv is None else argv
    return bool(argv) and os.path.splitext(os.path.basename(argv[0]))[0] == "trl"


def version_tested(version: str) -> bool:
    try:
        major_minor = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return TESTED_TRL[0] <= major_minor < TESTED_TRL[1]


def patch_cli(main_module) -> bool:
    """Wrap ``trl.cli.main.get_commands``; returns whether the TRL version was in range."""
    version = getattr(sys.modules.get("trl"), "__version__", "unknown")
    if not version_tested(version):
        warnings.warn(
            f"rlplugs: trl {version} is outside the tested range >=1.16,<1.17; `trl grpo --env` is not "
            "available (use `rlplugs grpo --env ...`)",
            stacklevel=1,
        )
        return False
    stock_get_commands = main_module.get_commands

    def get_commands():
        from rlplugs.adapters.trl.cli_command import EnvTrainingCommand

        return [EnvTrainingCommand(c.name) if c.name in PATCHED_COMMANDS else c for c in stock_get_commands()]

    main_module.get_commands = get_commands
    return True


class _PatchAfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``trl.cli.main`` through the normal finders and patches it right after it executes."""

    TARGET = "trl.cli.main"

    def __init__(self) -> None:
        self._loader = None

    def find_spec(self, fullname, path, target=None):
        if fullname != self.TARGET:
            return None
        sys.meta_path.remove(self)  # one shot, and the lookup below must not find us again
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        try:
            patch_cli(module)
        except Exception as exc:  # noqa: BLE001 - never break the stock CLI
            warnings.warn(f"rlplugs: could not extend the trl CLI ({type(exc).__name__}: {exc})", stacklevel=1)


def install() -> None:
    """Arm the hook in the ``trl`` CLI process (a no-op anywhere else)."""
    try:
        if is_trl_cli() and not any(isinstance(f, _PatchAfterImport) for f in sys.meta_path):
            if "trl.cli.main" in sys.modules:
                patch_cli(sys.modules["trl.cli.main"])
            else:
                sys.meta_path.insert(0, _PatchAfterImport())
    except Exception as exc:  # noqa: BLE001
        warnings.warn(f"rlplugs: trl startup hook failed ({type(exc).__name__}: {exc})", stacklevel=1)


install()
