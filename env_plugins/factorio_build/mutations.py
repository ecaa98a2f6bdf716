"""Semantics-preserving rewrites of a builder program, for warm-start variety.

Each rewrite works on the AST and keeps what the program does (the SFT generator still runs every
result on the simulator and keeps only those that verify, so a rewrite that is wrong in some
corner costs a candidate, never a bad training example):

- ``rename``: helper functions, parameters and local variables get other names;
- ``reorder_defs``: the helpers after ``build`` come in another order;
- ``swap_assignments``: two adjacent assignments that neither read nor write each other's names
  and call nothing but pure builtins trade places;
- ``while_loops``: ``for i in range(...)`` without ``continue`` becomes a counted ``while``
  (when ``i`` is not read after the loop);
- ``inline_helpers``: a helper whose body is a single ``return EXPR`` (no lambda or comprehension,
  whose own scopes could shadow a substituted name) is substituted into its
  call sites (arguments that are names, constants or tuples of them) and dropped
  once no call is left.

Comments are lost (``ast.unparse``); docstrings stay.
"""

from __future__ import annotations

import ast
import copy
import itertools
import random
from collections.abc import Callable

#: Calls with no side effects: an assignment that makes only these may move.
PURE_CALLS = frozenset({"abs", "len", "max", "min", "round", "set", "list", "tuple", "sorted", "sum", "dict", "range"})

#: Replacement name parts for ``rename`` (a name keeps its role, only its spelling changes).
WORDS = ("spot", "cell", "pos", "node", "site", "box", "pair", "span", "mark", "key", "item", "unit", "slot", "part")


def _names_read(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _names_written(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _only_pure_calls(node: ast.AST) -> bool:
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        func = call.func
        pure_math = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "math"
        if not (pure_math or (isinstance(func, ast.Name) and func.id in PURE_CALLS)):
            return False
    return True


def rename(tree: ast.Module, rng: random.Random) -> ast.Module:
    defined = {f.name for f in tree.body if isinstance(f, ast.FunctionDef)} - {"build"}
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | defined | {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    local = sorted({a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)} - {"world"})
    local += sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} - {"_"})
    mapping: dict[str, str] = {}
    for name in sorted(defined) + local:
        if name in mapping or rng.random() < 0.5:
            continue
        new = f"{rng.choice(WORDS)}_{name}" if rng.random() < 0.5 else f"{name}_{rng.choice(WORDS)}"
        if new not in taken:
            mapping[name] = new
            taken.add(new)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in mapping:
            node.id = mapping[node.id]
        elif isinstance(node, ast.arg) and node.arg in mapping:
            node.arg = mapping[node.arg]
        elif isinstance(node, ast.FunctionDef) and node.name in mapping:
            node.name = mapping[node.name]
    return tree


def reorder_defs(tree: ast.Module, rng: random.Random) -> ast.Module:
    head, rest = tree.body[:1], tree.body[1:]  # `build` stays first: the answer opens with it
    rng.shuffle(rest)
    tree.body = head + rest
    return tree


def _bodies(tree: ast.AST):
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def swap_assignments(tree: ast.Module, rng: random.Random) -> ast.Module:
    for block in _bodies(tree):
        for i in range(len(block) - 1):
            a, b = block[i], block[i + 1]
            if not (isinstance(a, ast.Assign) and isinstance(b, ast.Assign)):
                continue
            if not (_only_pure_calls(a) and _only_pure_calls(b)):
                continue
            wa, wb = _names_written(a), _names_written(b)
            if wa & (_names_read(b) | wb) or wb & _names_read(a):
                continue
            if rng.random() < 0.7:
                block[i], block[i + 1] = b, a
    return tree


def _range_loop(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.For)
        and isinstance(node.target, ast.Name)
        and isinstance(node.iter, ast.Call)
        and isinstance(node.iter.func, ast.Name)
        and node.iter.func.id == "range"
        and 1 <= len(node.iter.args) <= 2
        and not node.orelse
        and not any(isinstance(n, ast.Continue) for n in ast.walk(node))
        and node.target.id not in _names_written(ast.Module(body=node.body, type_ignores=[]))
    )


def while_loops(tree: ast.Module, rng: random.Random) -> ast.Module:
    serial = itertools.count()
    for function in [f for f in tree.body if isinstance(f, ast.FunctionDef)]:
        for block in list(_bodies(function)):
            for i, loop in enumerate(block):
                if not _range_loop(loop) or rng.random() < 0.5:
                    continue
                var = loop.target.id
                outside = sum(1 for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == var)
                if outside != sum(1 for n in ast.walk(loop) if isinstance(n, ast.Name) and n.id == var):
                    continue  # the name is used outside the loop: its final value could differ
                counter = f"_{var.strip('_') or 'n'}{next(serial)}"
                args = loop.iter.args
                start, stop = (args[0], args[1]) if len(args) == 2 else (ast.Constant(0), args[0])
                body = [ast.Assign([ast.Name(var, ast.Store())], ast.Name(counter, ast.Load()))] if var != "_" else []
                body += loop.body + [ast.AugAssign(ast.Name(counter, ast.Store()), ast.Add(), ast.Constant(1))]
                limit = "_stop" + counter
                block[i : i + 1] = [
                    ast.Assign([ast.Name(counter, ast.Store())], start),
                    ast.Assign([ast.Name(limit, ast.Store())], stop),
                    ast.While(ast.Compare(ast.Name(counter, ast.Load()), [ast.Lt()], [ast.Name(limit, ast.Load())]), body, []),
                ]
                break  # the block changed under the enumeration
    return tree


def _plain(node: ast.expr) -> bool:
    """Names, constants and tuples of them: safe to repeat wherever a parameter is used."""
    return all(isinstance(n, (ast.Name, ast.Constant, ast.Tuple, ast.Load)) for n in ast.walk(node))


def _returned(f: ast.FunctionDef) -> ast.expr | None:
    """EXPR of a function whose body is ``return EXPR`` (after an optional docstring), else None."""
    body = f.body[1:] if ast.get_docstring(f) is not None else f.body
    return body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None


def inline_helpers(tree: ast.Module, rng: random.Random) -> ast.Module:
    helpers = {
        f.name: f
        for f in tree.body
        if isinstance(f, ast.FunctionDef) and f.name != "build" and (returned := _returned(f)) is not None
        and not any(isinstance(n, ast.Lambda | ast.comprehension) for n in ast.walk(returned))  # own scopes
        and rng.random() < 0.7
    }
    for call in [n for n in ast.walk(tree) if isinstance(n, ast.Call)]:
        f = helpers.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if f is None or len(call.args) != len(f.args.args) or call.keywords:
            continue
        if not all(_plain(a) for a in call.args):
            continue  # an argument with a call in it would run once per use
        params = {p.arg: a for p, a in zip(f.args.args, call.args)}
        expr = _Substitute(params).visit(copy.deepcopy(_returned(f)))
        call.func, call.args = ast.Name("_inline", ast.Load()), [expr]  # marked; unwrapped below
    tree = _Unwrap().visit(tree)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    tree.body = [f for f in tree.body if not (isinstance(f, ast.FunctionDef) and f.name in helpers and f.name not in used)]
    return tree


class _Substitute(ast.NodeTransformer):
    """Parameters -> argument expressions, in one pass (a substituted name is not looked at again)."""

    def __init__(self, params: dict[str, ast.expr]):
        self.params = params

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return copy.deepcopy(self.params[node.id]) if node.id in self.params else node


class _Unwrap(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "_inline":
            return node.args[0]
        return node


REWRITES: dict[str, Callable[[ast.Module, random.Random], ast.Module]] = {
    "inline_helpers": inline_helpers,
    "while_loops": while_loops,
    "swap_assignments": swap_assignments,
    "reorder_defs": reorder_defs,
    "rename": rename,  # last: the others look names up
}


def mutate(source: str, rng: random.Random) -> tuple[str, list[str]]:
    """``source`` with a random subset of :data:`REWRITES` applied; and the names applied."""
    tree = ast.parse(source)
    applied = []
    for name, rewrite in REWRITES.items():
        if rng.random() < 0.5:
            tree = rewrite(tree, rng)
            applied.append(name)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n", applied
