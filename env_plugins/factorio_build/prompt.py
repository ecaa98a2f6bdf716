"""The prompt: the task in words plus an API reference generated from the API itself.

The reference is read off ``fsim.program_api``'s ``World`` class (signatures and the first
paragraph of each docstring, the ``Entity`` fields) and the language rules off ``evolve.sandbox``
(its builtins and size limits), so a factory-sim upgrade that changes a verb changes the prompt
with it instead of leaving the model a stale manual.
"""

from __future__ import annotations

import dataclasses
import inspect

from evolve import sandbox
from fsim.program_api import world_class

TASK_GOALS = {
    "construct_smelting_line": (
        "You stand near an iron-ore patch (its centre is world.patch()) holding 2 burner mining drills, "
        "2 stone furnaces and 60 coal. Build a smelting line: a burner mining drill over iron ore whose "
        "output drops into a stone furnace, both fuelled with coal. After the build phase the game runs "
        "3,600 ticks (60 s) with no actions; the scene counts as solved when machines turn at least 10 "
        "machine-mined ore into iron plates in that window."
    ),
    "build_line": (
        "You stand near an iron-ore patch (world.patch()) holding burner mining drills, stone furnaces and "
        "coal. Construct a working drill-to-furnace line on the patch and fuel it so it produces iron plates."
    ),
    "plate_line": (
        "A burner mining drill and a stone furnace already stand aligned, empty, among other machines. "
        "You hold coal. Find the drill whose drop point lies in a furnace, walk there and fuel both so "
        "the line produces iron plates."
    ),
    "belt_smelting": (
        "Public markers name an iron patch, a coal patch and an output chest (world.marker). You hold "
        "4 burner drills, 4 stone furnaces, 40 transport belts, 10 burner inserters and 20 coal. Build "
        "mining and smelting on the iron patch and carry the plates by belt and inserter into the chest; "
        "returning from build (or world.finish()) starts a ten-minute window in which at least 150 plates "
        "must reach the chest. 20 coal is not enough fuel: mine more."
    ),
}

GAME_RULES = (
    "Coordinates are tiles: +x is east, +y is south. A 2x2 machine placed at tile (x, y) covers x..x+1, "
    "y..y+1 and its centre is (x+1, y+1). A burner drill mines the ore under its 2x2 footprint and drops "
    "it at centre + (-0.5, -1.3) rotated to its facing (N as given; E turns (dx, dy) into (-dy, dx)); "
    "whatever machine's footprint holds that point receives it. Drills are placeable only over ore; "
    "nothing is placeable on walls, water, other machines or the tile you stand on. A burner drill burns "
    "about one coal per 27 s, a working furnace about one per 44 s."
)


#: The few verbs factory-sim leaves without a docstring.
UNDOCUMENTED = {"decisions_left": "Decisions the program may still spend."}


def _signature(method) -> str:
    """``(a: int, b: str = 'x') -> bool`` with the annotations unquoted and ``self`` dropped."""
    sig = inspect.signature(method)
    params = []
    for p in list(sig.parameters.values())[1:]:
        text = p.name + (f": {p.annotation}" if p.annotation is not p.empty else "")
        if p.default is not p.empty:
            text += f" = {p.default!r}"
        params.append(text)
    ret = f" -> {sig.return_annotation}" if sig.return_annotation is not sig.empty else ""
    return f"({', '.join(params)}){ret}"


def api_reference(task: str) -> str:
    """Signatures and one-line docs of every verb and query a program may call on ``world``."""
    cls = world_class(task)
    lines = ["world (the only object your program receives):"]
    seen: set[str] = set()
    for klass in reversed(cls.__mro__):
        for name, member in vars(klass).items():
            if name in seen or name not in sandbox.WORLD_API or not callable(member):
                continue
            seen.add(name)
            method = getattr(cls, name)
            doc = " ".join(inspect.cleandoc(method.__doc__ or "").split("\n\n")[0].split())
            doc = doc or UNDOCUMENTED.get(name, "")
            signature = _signature(method)
            lines.append(f"  world.{name}{signature}" + (f"  -- {doc}" if doc else ""))
    counters = sorted(n for n in sandbox.WORLD_API if n in ("refusals", "failures"))
    lines.append(f"  world.{', world.'.join(counters)}: int counters of refused intents and failed actions")
    entity = cls._ENTITY
    fields = ", ".join(f"{f.name}" for f in dataclasses.fields(entity))
    lines.append(f"{entity.__name__} rows from world.entities() have fields: {fields}")
    return "\n".join(lines)


def language_rules() -> str:
    """What the sandbox accepts, stated from the sandbox's own tables."""
    builtins = ", ".join(sandbox.SAFE_BUILTIN_NAMES)
    return (
        f"Write plain Python: top-level `def` statements only, one of them `def build(world):`; at most "
        f"{sandbox.MAX_LINES} lines and {sandbox.MAX_CHARS} characters. No imports, classes, try/with/raise, "
        "global/nonlocal, yield, decorators or names starting with '__'. `math` is available without "
        f"import; the only builtins are {builtins}. Attributes are allowed on world, math, entity rows "
        "and plain lists/dicts/sets/strings. An action the game cannot take is refused and returns False."
    )


def system_prompt(task: str) -> str:
    return (
        "You write Python programs that play a Factorio-like game through a small API. Your program is "
        "run, unchanged, on several scenes it has not seen, so it must read each scene through the API "
        "and adapt to it.\n\n"
        f"Rules of the game:\n{GAME_RULES}\n\nAPI:\n{api_reference(task)}\n\nLanguage:\n{language_rules()}"
    )


def user_prompt(task: str, n_scenes: int) -> str:
    return (
        f"Task ({task}): {TASK_GOALS[task]}\n\n"
        f"Your program will run on {n_scenes} unseen scenes of this task. Reply with one program in a "
        "single ```python code block defining `def build(world):`."
    )


def messages(task: str, n_scenes: int) -> list[dict[str, str]]:
    """The chat prompt of a row (system + user)."""
    return [
        {"role": "system", "content": system_prompt(task)},
        {"role": "user", "content": user_prompt(task, n_scenes)},
    ]
