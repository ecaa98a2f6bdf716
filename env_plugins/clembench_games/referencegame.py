"""Reference game, written from the public rules of reference games in psycholinguistics.

The instruction giver sees three 5x5 character grids, the target always first (as in clembench
2.0); it writes one referring expression. The instruction follower sees the same three grids in another
order and names the one the expression refers to (first, second or third). One round; Main Score
100 on success, 0 otherwise.

Parse rules (clembench 2.0's): the giver's reply is one line starting with ``EXPRESSION:``, the
follower's one line starting with ``ANSWER:`` and then first, second, third, 1, 2 or 3 (any text
may follow on that line: ``ANSWER: second grid.``); keywords in any case, blank lines after the
reply are ignored, anything else aborts. Success and Lose are undefined (NaN) for an aborted
episode, as in clembench's scorer.

Grids are generated per experiment from a seed: ``lines`` (full rows, columns, diagonals),
``rectangles`` (filled or outlined boxes), ``sparse_random`` and ``dense_random`` (cells set at
random with low/high probability). The three grids of an instance are distinct.
"""

from __future__ import annotations

import math
import random
import re
from typing import ClassVar

from clembench_games.master import GameMaster, Message

SIZE = 5
FILLED, EMPTY = "X", "▢"
ORDINALS = ("first", "second", "third")
_EXPRESSION = re.compile(r"expression:\s*(.+)\n*", re.IGNORECASE)
_ANSWER = re.compile(r"answer:\s*(first|second|third|1|2|3).*\n*", re.IGNORECASE)
EXPERIMENTS = ("lines", "rectangles", "sparse_random", "dense_random")

Grid = tuple[str, ...]  # SIZE rows of SIZE characters


def _from_cells(cells: set[tuple[int, int]]) -> Grid:
    return tuple("".join(FILLED if (r, c) in cells else EMPTY for c in range(SIZE)) for r in range(SIZE))


def cells_of(grid: Grid) -> set[tuple[int, int]]:
    return {(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == FILLED}


def _one_grid(experiment: str, rng: random.Random) -> Grid:
    if experiment == "lines":
        lines = [{(r, c) for c in range(SIZE)} for r in range(SIZE)] + [{(r, c) for r in range(SIZE)} for c in range(SIZE)]
        lines += [{(i, i) for i in range(SIZE)}, {(i, SIZE - 1 - i) for i in range(SIZE)}]
        return _from_cells(set().union(*rng.sample(lines, rng.choice((1, 2)))))
    if experiment == "rectangles":
        r0, r1 = sorted(rng.sample(range(SIZE), 2))
        c0, c1 = sorted(rng.sample(range(SIZE), 2))
        box = {(r, c) for r in range(r0, r1 + 1) for c in range(c0, c1 + 1)}
        if rng.random() < 0.5:
            box = {(r, c) for r, c in box if r in (r0, r1) or c in (c0, c1)}
        return _from_cells(box)
    p = {"sparse_random": 0.25, "dense_random": 0.6}[experiment]
    return _from_cells({(r, c) for r in range(SIZE) for c in range(SIZE) if rng.random() < p} or {(0, 0)})


def make_grids(experiment: str, rng: random.Random) -> list[Grid]:
    grids: list[Grid] = []
    while len(grids) < 3:
        g = _one_grid(experiment, rng)
        if g not in grids:
            grids.append(g)
    return grids


def show(grid: Grid) -> str:
    return "\n".join(" ".join(row) for row in grid)


def show_three(grids: list[Grid]) -> str:
    return "\n\n".join(f"{name} grid:\n{show(g)}" for name, g in zip(ORDINALS, grids, strict=True))


class ReferenceGame(GameMaster):
    name: ClassVar[str] = "referencegame"
    seats: ClassVar[tuple[str, ...]] = ("giver", "follower")
    rules: ClassVar[dict[str, str]] = {
        "giver": (
            "We play a reference game. You see three grids; another player sees them in a different "
            "order. Write one expression that lets them pick out the target grid.\n"
            "Answer in exactly this format, nothing else:\n"
            "EXPRESSION: <your referring expression>\n"
            "For example:\nEXPRESSION: the grid with a full middle column"
        ),
        "follower": (
            "We play a reference game. You see three grids; another player describes one of them. "
            "Say which grid the expression refers to.\n"
            "Answer in exactly this format, nothing else:\n"
            "ANSWER: <first, second or third>\n"
            "For example:\nANSWER: second"
        ),
    }

    def __init__(self, instance: dict):
        super().__init__(instance)
        self.grids: list[Grid] = [tuple(g) for g in instance["grids"]]
        self.target = self.grids[instance["target_index"]]
        self.follower_grids = [self.grids[i] for i in instance["follower_order"]]
        self.giver_grids = [self.target, *(g for g in self.grids if g != self.target)]

    def opening(self) -> None:
        self.ask(
            "giver",
            f"{show_three(self.giver_grids)}\n\nThe target is the first grid. Reply with EXPRESSION: <your expression>",
        )

    def metrics(self) -> dict[str, float]:
        m = super().metrics()
        if m["Aborted"]:  # clembench's referencegame scorer leaves both undefined
            m["Success"] = m["Lose"] = math.nan
        return m

    def main_score(self) -> float:
        return 100.0 if self.outcome == "success" else 0.0

    def on_reply(self, seat: str, text: str) -> None:
        if seat == "giver":
            expression = _EXPRESSION.fullmatch(text)
            if not expression:
                self.abort("giver reply is not one line starting with 'EXPRESSION:'")
                return
            self.ask(
                "follower",
                f"{show_three(self.follower_grids)}\n\nExpression: {expression.group(1).strip()}\n"
                "Which grid is it? Reply with ANSWER: first, ANSWER: second or ANSWER: third",
            )
            return
        answer = _ANSWER.fullmatch(text)
        if not answer:
            self.abort("follower reply is not one line 'ANSWER: first|second|third'")
            return
        label = answer.group(1).lower()
        picked_index = int(label) - 1 if label.isdigit() else ORDINALS.index(label)
        if self.follower_grids[picked_index] == self.target:
            self.win(f"picked the target ({label})")
        else:
            self.lose(f"picked the {ORDINALS[picked_index]} grid, not the target")

    # --- scripted players ---------------------------------------------------------------------
    def perfect(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        """Perfect giver lists the target's X cells as (row, column); perfect follower picks the
        grid those cells fit best. Each only uses what its own seat sees."""
        if seat == "giver":
            cells = ", ".join(f"({r + 1},{c + 1})" for r, c in sorted(cells_of(self.target)))
            return f"EXPRESSION: the grid with X exactly at {cells}"
        said = {(int(r) - 1, int(c) - 1) for r, c in re.findall(r"\((\d),\s*(\d)\)", messages[-1]["content"])}

        def fit(g: Grid) -> float:
            mine = cells_of(g)
            return len(mine & said) / max(1, len(mine | said))

        best = max(range(3), key=lambda i: fit(self.follower_grids[i]))
        return f"ANSWER: {ORDINALS[best]}"

    def random(self, seat: str, messages: list[Message], rng: random.Random) -> str:
        if seat == "giver":
            return "EXPRESSION: the grid with some X in it"
        return f"ANSWER: {rng.choice(ORDINALS)}"
