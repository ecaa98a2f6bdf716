"""From a completion to a checked program: extraction and the static (AST) layer of the sandbox.

The static layer is factory-sim's own allowlist (``evolve.sandbox.check``: no imports, no dunder
names, a short list of builtins, attributes only on ``world``, ``math``, entity rows and plain
containers) plus two stricter rules of ours:

- an attribute of ``world`` must be one of the API verbs (factory-sim allows any public name, so
  ``world.decisions`` or a future public helper would slip through);
- literal constants are small (strings up to :data:`MAX_STRING_LITERAL` characters, integers up
  to :data:`MAX_INT_LITERAL`), since no builder program needs a megabyte literal and a model that
  emits one is gaming the parser, not building a factory.

What the static layer cannot stop (loops that never end, allocations, deep recursion) is the
process layer's job (:mod:`factorio_build.zygote`, :mod:`factorio_build.worker`).
"""

from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass

from evolve import sandbox

MAX_STRING_LITERAL = 1000
MAX_INT_LITERAL = 10**12

_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)
_FENCE = re.compile(r"```[ \t]*(python|py)?[ \t]*\n(.*?)```", re.S | re.I)


def extract_program(completion: str) -> str | None:
    """The last fenced code block that defines ``build`` (``python`` blocks preferred), or None.

    Reasoning inside ``<think>`` is ignored: a plan sketched there is not the answer."""
    text = _THINK.sub("", completion or "")
    blocks = [(lang, body) for lang, body in _FENCE.findall(text) if "def build" in body]
    if not blocks:
        return None
    python = [body for lang, body in blocks if lang]
    return (python or [body for _, body in blocks])[-1].strip("\n") + "\n"


class StrictRules(ast.NodeVisitor):
    """Our rules on top of factory-sim's allowlist; raises ``sandbox.SandboxError``."""

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id == "world" and node.attr not in sandbox.WORLD_API:
            raise sandbox.SandboxError(f"line {node.lineno}: world.{node.attr} is not part of the API")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, str) and len(value) > MAX_STRING_LITERAL:
            raise sandbox.SandboxError(f"line {node.lineno}: string literal longer than {MAX_STRING_LITERAL} characters")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT_LITERAL:
            raise sandbox.SandboxError(f"line {node.lineno}: integer literal larger than {MAX_INT_LITERAL}")


#: Python 3.11's AST conversion keeps its recursion bookkeeping in shared state: two threads
#: parsing at once (async reward scoring runs this in worker threads) can fail with
#: "SystemError: AST constructor recursion depth mismatch". Parsing is fast; serialise it.
_PARSE_LOCK = threading.Lock()


def check_program(source: str) -> None:
    """Raise ``sandbox.SandboxError`` (short, names a line) unless both static rule sets accept it."""
    with _PARSE_LOCK:
        sandbox.check(source)  # size limits first, so nothing below parses a huge input
        StrictRules().visit(ast.parse(source))


@dataclass(frozen=True)
class Checked:
    """A completion after the static layer: the program to run, or why there is none."""

    source: str | None
    outcome: str  # "program" | "no_code_block" | "sandbox_violation"
    reason: str


def check_completion(completion: str) -> Checked:
    source = extract_program(completion)
    if source is None:
        return Checked(None, "no_code_block", "no ```python block defining build(world)")
    try:
        check_program(source)
    except sandbox.SandboxError as exc:
        return Checked(None, "sandbox_violation", f"sandbox: {exc}")
    return Checked(source, "program", "passed the static sandbox")
