"""Word lists for the games, read from the PyPI package ``wonderwords`` (MIT licence).

``wonderwords`` ships plain English noun, adjective and verb lists plus a profanity list; we read
the files through ``importlib.resources`` (no network, no copy in this repository), drop profane
and non-alphabetic entries, and assign every word to a split by a stable hash so that target
words of the validation and test sets never appear as train targets.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

#: Which tenth of the hash space each split owns: train 0-7, validation 8, test 9.
_SPLIT_BUCKETS = {"train": range(0, 8), "validation": range(8, 9), "test": range(9, 10)}


@functools.cache
def _asset(name: str) -> tuple[str, ...]:
    try:
        text = (resources.files("wonderwords") / "assets" / f"{name}.txt").read_text(encoding="utf-8")
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError("clembench-games needs the word lists of 'wonderwords': pip install 'rlplugs[games]'") from exc
    return tuple(w.strip() for w in text.splitlines() if w.strip())


@functools.cache
def _profane() -> frozenset[str]:
    return frozenset(w.lower() for w in _asset("profanitylist"))


@functools.cache
def words(kind: str) -> tuple[str, ...]:
    """Lower-case alphabetic ``kind`` words ("noun", "adjective", "verb"), profanity removed, sorted."""
    clean = {w.lower() for w in _asset(f"{kind}list") if w.isascii() and w.isalpha() and w.islower()}
    return tuple(sorted(clean - _profane()))


def split_of(word: str) -> str:
    """The split a target word belongs to (stable across machines and Python versions)."""
    bucket = int(hashlib.sha256(word.encode()).hexdigest(), 16) % 10
    return next(s for s, r in _SPLIT_BUCKETS.items() if bucket in r)


def targets(kind: str, split: str, length: int | range | None = None) -> list[str]:
    """Target candidates of one part of speech for ``split``, optionally filtered by length."""
    lengths = range(length, length + 1) if isinstance(length, int) else length
    return [w for w in words(kind) if split_of(w) == split and (lengths is None or len(w) in lengths)]


@functools.cache
def five_letter_dictionary() -> frozenset[str]:
    """Every five-letter word of the three lists: the words a Wordle guess may use."""
    return frozenset(w for kind in ("noun", "adjective", "verb") for w in words(kind) if len(w) == 5)
