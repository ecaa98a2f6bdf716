"""The plugin contract is the only door, and the package has no import cycles.

Environment packages (``env_plugins/*``) and the built-in plugins (``rlplugs.builtins.*``:
``checkpoint``, ``prm``, ``rewards``) may import ``rlplugs`` (the root, which re-exports the contract), their own
modules and third-party libraries, nothing else of rlplugs: a plugin that reaches into
``rlplugs.tools.cli`` or a test fixture breaks the day the core moves. Read from the source (the AST),
so every import counts, those inside functions included.

Cycles: a graph of the imports that run when a module is imported (module level, class bodies;
not function bodies, which run later), including the module a name of the lazy root loads
(``from rlplugs import EnvSpec`` imports ``rlplugs.envspec``). A cycle there makes the import
order matter and is how half-initialised modules happen.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rlplugs

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "plugins" / "rlplugs"
ENV_PLUGINS = ROOT / "env_plugins"
BUILTINS = CORE / "builtins"  # each module or package in it is one built-in plugin


def module_name(path: Path) -> str:
    base = CORE.parent if path.is_relative_to(CORE) else ENV_PLUGINS
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_files(where: Path) -> list[Path]:
    return [where] if where.is_file() else sorted(where.rglob("*.py"))


def imported(tree: ast.AST, module: str, is_package: bool, top_level_only: bool) -> list[tuple[int, str]]:
    """(line, module or module.name) for every import in ``tree``; relative imports resolved."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if top_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if top_level_only and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    package = package[: len(package) - (child.level - 1)]
                    base = ".".join(package + ([base] if base else []))
                found.extend((child.lineno, f"{base}.{alias.name}") for alias in child.names)
            visit(child)

    visit(tree)
    return found


def plugin_modules() -> list[tuple[Path, str]]:
    """(file, the rlplugs prefix that is the plugin's own, or '' for env packages)."""
    out = [(path, "") for package in sorted(ENV_PLUGINS.iterdir()) if (package / "__init__.py").is_file()
           for path in python_files(package)]  # fmt: skip
    builtins = [where for where in sorted(BUILTINS.iterdir()) if where.suffix == ".py" and where.stem != "__init__"
                or (where / "__init__.py").is_file()]  # fmt: skip
    out += [(path, module_name(where)) for where in builtins for path in python_files(where)]
    return out


def contract_violations() -> list[str]:
    bad = []
    for path, own in plugin_modules():
        tree = ast.parse(path.read_text(), str(path))
        name = module_name(path)
        for line, target in imported(tree, name, path.name == "__init__.py", top_level_only=False):
            parts = target.split(".")
            if parts[0] != "rlplugs" or target == "rlplugs" or len(parts) == 2 and parts[1] in rlplugs.__all__:
                continue  # not rlplugs, or a name of the root contract
            if own and (target == own or target.startswith(own + ".")):
                continue
            bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    return bad


def test_plugins_import_only_the_contract():
    bad = contract_violations()
    assert not bad, "plugins may import only `rlplugs` (the root contract), their own modules and libraries:\n" + "\n".join(bad)


def test_the_contract_names_resolve_lazily():
    """Every name the root promises loads, and ``import rlplugs`` itself loads none of them."""
    import subprocess
    import sys

    code = "import sys, rlplugs; print(sorted(m for m in sys.modules if m.startswith('rlplugs')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['rlplugs']"
    for name in rlplugs.__all__:
        if name != "verifiers_export":  # needs the verifiers extra; resolved in the bridge's tests
            assert getattr(rlplugs, name) is not None, name


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports at import time."""
    files = {module_name(p): p for where in (CORE, ENV_PLUGINS) for p in where.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        edges = graph.setdefault(name, set())
        for _, target in imported(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py", True):
            if target.startswith("rlplugs.") and target.count(".") == 1 and target[8:] in getattr(rlplugs, "_EXPORTS", {}):
                target = rlplugs._EXPORTS[target[8:]]  # a lazy name of the root: its module loads
            while target and target not in files:  # `from pkg import name`: the module pkg
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles (module-level imports):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
