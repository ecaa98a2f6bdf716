"""The errors a user can fix, and the one "did you mean" message they carry.

Why a module of its own: the registry (unknown names) and the config validation (unknown keys)
both raise these and both suggest the closest names; with the errors here, neither imports the
other. Every error a user can fix derives from :class:`UsageError`: the ``rlplugs`` command prints
it as one line with exit code 2, never as a traceback. The subclasses keep the builtin type a
library caller would expect (``LookupError``, ``ValueError``, ``ModuleNotFoundError``).
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable, Sequence


class UsageError(Exception):
    """Bad input from a user (a name, an option, a path); shown as one line, exit code 2."""


class UnknownPluginError(UsageError, LookupError):
    """A lookup by a name nothing registered."""


class UnknownOptionError(UsageError, ValueError):
    """An option (config key) the plugin does not define."""


class InvalidOptionsError(UsageError, ValueError):
    """Options that are known but wrong (a value of the wrong type, malformed JSON, ...)."""


class UnknownNameError(UsageError, KeyError):
    """A name an env does not have (a split, an SFT dataset); a ``KeyError`` whose message prints
    as written, not quoted as ``KeyError`` quotes its key."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class MissingDependencyError(UsageError, ModuleNotFoundError):
    """A plugin needs a module that is not installed; the message says how to install it."""


class DuplicateNameError(ValueError):
    """Two plugins registered the same name for the same kind (a packaging bug, not the user's)."""


def closest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Names in ``known`` most like ``name`` (for "did you mean" messages). Names that differ only
    in ``-``/``_`` or case count as one, shown in the spelling closest to ``name`` (``--max_stpes``
    -> ``--max_steps`` where both ``--max_steps`` and ``--max-steps`` exist), whatever the order
    of ``known`` (a set's order changes from run to run)."""
    by_norm: dict[str, str] = {}
    for k in sorted(known):
        norm = k.replace("_", "-").lower()
        if norm not in by_norm or _likeness(name, k) > _likeness(name, by_norm[norm]):
            by_norm[norm] = k
    hits = difflib.get_close_matches(name.replace("_", "-").lower(), list(by_norm), n=n, cutoff=0.5)
    return [by_norm[h] for h in hits]


def _likeness(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def did_you_mean(names: Iterable[str], known: Iterable[str], n: int = 3, prefix: str = "") -> str:
    """``'tabo' (did you mean 'taboo'?), 'xyz'``: each unknown name with its closest known ones,
    each written after ``prefix`` (the dotted path of nested options: ``'retry.attempt'``)."""
    known = list(known)
    parts = []
    for name in names:
        hint = closest(name, known, n=n)
        parts.append(f"'{prefix}{name}'" + (f" (did you mean {' or '.join(repr(prefix + h) for h in hint)}?)" if hint else ""))
    return ", ".join(parts)


def repeated(names: Sequence[str]) -> list[str]:
    """The names that occur more than once in ``names``, sorted (a game, a fixup, a label named twice)."""
    return sorted({name for name in names if names.count(name) > 1})


def check_counts(args: argparse.Namespace, **minimums: int) -> None:
    """Refuse a count flag below its minimum (``check_counts(args, rows=1, render=0)``) before any
    work starts: argparse's ``type=int`` takes ``--rows 0`` or ``--render -1``, which left an empty
    result, or failed minutes later under a name the user never typed. An unset flag (None) passes."""
    for name, minimum in minimums.items():
        value = getattr(args, name)
        if value is not None and value < minimum:
            raise UsageError(f"--{name} {value}: give at least {minimum}")
