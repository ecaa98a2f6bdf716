"""JSON written by the model, parsed with bounds on size and nesting.

Why: Python's ``json`` recurses once per nesting level and raises ``RecursionError`` (not a
``ValueError``) past about a thousand levels, and turns an over-long integer into a ``ValueError``
that is not a ``JSONDecodeError``. A tool call like ``[[[[...]]]]`` must cost the model a turn with
a message, never stop the episode, so every model-written JSON text (tool-call arguments, list
parameters, structures) goes through :func:`loads`, which raises only :class:`UntrustedJSONError`.
"""

from __future__ import annotations

import json
from typing import Any


class UntrustedJSONError(ValueError):
    """The text is not acceptable JSON; the message says why, for the model."""


def nesting_depth(text: str) -> int:
    """Deepest ``[``/``{`` nesting of ``text``, brackets inside strings not counted."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def loads(text: str, max_depth: int, max_chars: int) -> Any:
    """``json.loads(text)`` for text of at most ``max_chars`` nested at most ``max_depth`` deep."""
    if len(text) > max_chars:
        raise UntrustedJSONError(f"JSON is {len(text)} characters; the limit is {max_chars}")
    depth = nesting_depth(text)
    if depth > max_depth:
        raise UntrustedJSONError(f"JSON is nested {depth} levels deep; at most {max_depth} levels are accepted")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UntrustedJSONError(f"JSON does not parse ({exc.msg} at character {exc.pos})") from None
    except ValueError as exc:  # e.g. an integer longer than Python's digit limit
        raise UntrustedJSONError(f"JSON has an unreadable value ({exc})") from None
