"""Our clean-room games beside clembench's own, played by the same scripted policies: where are the
clean-room numbers comparable to the leaderboard's, and where not?

Each policy works from the messages alone (what a model sees), so one policy plays both
implementations: our game through :func:`rlplugs.episode.play` (self-play, every seat), and
clembench's game through the clemcore adapter (``clem_adapter.run_games``, self-play, scored by the
game's own scorer). The policies:

- ``perfect``: the best a scripted, message-only player does here. Wordle: the first word of our
  dictionary that fits every letter feedback so far and was not tried yet (clues are ignored: ours
  and clembench's differ); the critic always agrees. Referencegame: the giver lists the target's
  X cells (the target is the first grid in both), the follower picks the grid those cells fit
  best. It is a solver, not an oracle: no game state is read.
- ``random``: well-formed replies with random content (a random word of our dictionary, a random
  grid, a coin-flip critic).
- ``rule_breaking``: well-formed prefixes, broken rules (a six-letter guess; a two-line
  expression), so every episode should abort in both.

Taboo and privateshared are attempted on clembench's side; when clemcore cannot run them (taboo
imports NLTK's stopwords, a download; privateshared fails in its first probe round on clemcore
3.7), the reason is recorded and there is no comparison.

Run it in the clemcore venv (clemcore cannot share one with verifiers; see the games README)::

    python3 -m venv .venv-clem && .venv-clem/bin/pip install torch==2.13.0 && .venv-clem/bin/pip install -e '.[clem]' scikit-learn
    .venv-clem/bin/python benchmarks/clem_parity.py --checkout /path/to/clembench
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import math
import os
import random
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from result_file import write_result

from rlplugs import UsageError
from rlplugs.episode import play

from clembench_games import clem_table, instances, new_game
from clembench_games.master import GameEpisode
from clembench_games.wordle import feedback
from clembench_games.words import five_letter_dictionary

Messages = list[dict[str, str]]
#: How the clemcore venv of the committed result was made (scikit-learn: clembench's privateshared imports it).
VENV = ("python3 -m venv .venv-clem && .venv-clem/bin/pip install torch==2.13.0 "
        "&& .venv-clem/bin/pip install -e '.[clem]' scikit-learn")
GAMES = ("wordle", "wordle_withclue", "wordle_withcritic", "referencegame", "taboo", "privateshared")
#: Games our message-only policies know how to play (taboo and privateshared are only attempted).
PLAYED = GAMES[:4]

# --- reading either implementation's messages -----------------------------------------------
_OURS_FEEDBACK = re.compile(r"Feedback: ((?:[a-z] (?:green|yellow|red)(?:, )?){5})")
_CLEM_FEEDBACK = re.compile(r"guess_feedback: ((?:[a-z]<(?:green|yellow|red)> ?){5})")
_GRID_LINE = r"(?:\S ){4}\S"
_GRID = re.compile(rf"((?:{_GRID_LINE}\n){{4}}{_GRID_LINE})")
_CELLS = re.compile(r"\((\d),\s*(\d)\)")
_ORDINALS = ("first", "second", "third")


def _feedbacks(chat: str) -> list[tuple[str, list[str]]]:
    out = []
    for m in _OURS_FEEDBACK.finditer(chat):
        pairs = [p.split() for p in m.group(1).split(", ")]
        out.append(("".join(p[0] for p in pairs), [p[1] for p in pairs]))
    for m in _CLEM_FEEDBACK.finditer(chat):
        pairs = re.findall(r"([a-z])<(\w+)>", m.group(1))
        out.append(("".join(p[0] for p in pairs), [p[1] for p in pairs]))
    return out


def _tried(messages: Messages) -> set[str]:
    return {m.group(1).lower() for msg in messages if msg["role"] == "assistant"
            for m in [re.search(r"guess:\s*([a-zA-Z]+)", msg["content"])] if m}


def _is_critic(first: str) -> bool:
    # clembench's critic may see no rules at all on clemcore 3.7.0: its first message is the proposal
    return "you are the critic" in first or "agree or disagree with my guess" in first or first.startswith("clue:")


def _cells(grid: str) -> set[tuple[int, int]]:
    return {(r, c) for r, row in enumerate(grid.splitlines()) for c, ch in enumerate(row.split()) if ch == "X"}


def _seat(messages: Messages) -> str:
    """The seat a conversation belongs to, from its first message (ours or clembench's wording)."""
    first = messages[0]["content"]
    if _is_critic(first):
        return "critic"
    if "Wordle" in first:
        return "guesser"
    if "Write one expression" in first or "generate a referring expression" in first:
        return "giver"
    if "Say which grid" in first or "select the grid" in first:
        return "follower"
    raise ValueError("clem_parity: a conversation of a game these policies do not play")


def _rng(messages: Messages) -> random.Random:
    return random.Random(hashlib.sha256(repr(messages).encode()).hexdigest())


# --- the three policies ---------------------------------------------------------------------
def perfect(messages: Messages) -> str:
    seat = _seat(messages)
    chat = "\n".join(m["content"] for m in messages[1:] if m["role"] == "user")  # not the rules' example feedback
    if seat == "critic":
        return "explanation: the guess may fit the clue.\nagreement: yes"
    if seat == "guesser":
        tried, seen = _tried(messages), _feedbacks(chat)
        if "final guess" in messages[-1]["content"] or "guess_agreement:" in messages[-1]["content"]:
            tried = set()  # the critic has spoken: commit to the same proposal
        pool = [w for w in sorted(five_letter_dictionary()) if w not in tried and all(feedback(g, w) == c for g, c in seen)]
        return f"explanation: it fits every feedback so far.\nguess: {pool[0] if pool else 'house'}"
    grids = _GRID.findall(messages[-1]["content"])
    if seat == "giver":
        cells = ", ".join(f"({r + 1},{c + 1})" for r, c in sorted(_cells(grids[0])))
        return f"Expression: the grid with X exactly at {cells}"
    said = {(int(r) - 1, int(c) - 1) for r, c in _CELLS.findall(messages[-1]["content"])}
    best = max(range(3), key=lambda i: len(_cells(grids[i]) & said) / max(1, len(_cells(grids[i]) | said)))
    return f"Answer: {_ORDINALS[best]}"


def random_player(messages: Messages) -> str:
    seat, rng = _seat(messages), _rng(messages)
    if seat == "critic":
        return f"explanation: a coin flip.\nagreement: {rng.choice(['yes', 'no'])}"
    if seat == "guesser":
        return f"explanation: a random word.\nguess: {rng.choice(sorted(five_letter_dictionary()))}"
    if seat == "giver":
        return "Expression: the grid with some X in it"
    return f"Answer: {rng.choice(_ORDINALS)}"


def rule_breaking(messages: Messages) -> str:
    seat = _seat(messages)
    if seat in ("guesser", "critic"):
        return "explanation: six letters are more fun.\nguess: planet" if seat == "guesser" else "explanation: hm\nagreement: perhaps"
    if seat == "giver":
        return "Expression: the grid with X in it\nI hope that helps."
    return "Answer: the one with the most X\nbecause it is the fullest"


POLICIES: dict[str, Callable[[Messages], str]] = {"perfect": perfect, "random": random_player, "rule_breaking": rule_breaking}


# --- playing both sides ---------------------------------------------------------------------
def ours(game: str, policy: Callable[[Messages], str], per_experiment: int) -> dict:
    records = []
    for inst in instances(game, "test", per_experiment):
        g = new_game(inst)
        records.append(play(GameEpisode(g, g.seats, seed=inst["seed"]), policy).record())
    return _summary(records)


def clembench(checkout: Path, game: str, policy: Callable[[Messages], str], limit: int | None) -> dict:
    from clembench_games.clem_adapter import run_games

    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # clemcore writes clembench.log into the working directory
        try:
            run = run_games(checkout, [game], policy, Path(tmp) / "out", limit=limit)
        except UsageError as exc:
            return {"error": str(exc)}
        finally:
            os.chdir(cwd)
    summary = _summary(run.records)
    if run.failures:
        summary["failed_instances"] = len(run.failures)
        summary["failure_example"] = run.failures[0][2][:300]
    return summary


def _summary(records: list[dict]) -> dict:
    table = clem_table(records)["games"]
    row = next(iter(table.values()), {})
    clemscore = row.get("% Played", math.nan) / 100.0 * row.get("Quality", math.nan)
    return {"episodes": len(records), "% Played": _r(row.get("% Played")), "Quality": _r(row.get("Quality")),
            "clemscore": _r(clemscore)}


def _r(x: float | None) -> float | None:
    return None if x is None or x != x else round(x, 2)


def verdict(sides: dict[str, dict[str, dict]]) -> str:
    """Same policy, same % played on both sides? Then the rules (formats, aborts) agree; the quality
    gap per policy says how far the instances (words, grids) and what the policy makes of them differ."""
    failed = [p for p in sides if "error" in sides[p]["clembench"]]
    if failed:
        return f"not comparable here: clembench's game did not run for {', '.join(failed)} (see its error)"
    played = {p: (s["ours"]["% Played"], s["clembench"]["% Played"]) for p, s in sides.items()}
    gaps = {p: round(s["ours"]["Quality"] - s["clembench"]["Quality"], 2) for p, s in sides.items()
            if s["ours"]["Quality"] is not None and s["clembench"]["Quality"] is not None}
    gap_text = ", ".join(f"{p} {g:+.2f}" for p, g in gaps.items()) or "none (nothing played)"
    if any(a != b for a, b in played.values()):
        return f"not comparable: the same policy is aborted at different rates ({played}); quality gaps (ours - clembench): {gap_text}"
    close = all(abs(g) <= 15 for g in gaps.values())
    return (f"{'comparable' if close else 'rules comparable, quality not'}: every policy has the same % played on both "
            f"sides; quality gaps (ours - clembench): {gap_text} (instances differ: our words/grids vs clembench's)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", type=Path, required=True, help="a clembench checkout")
    ap.add_argument("--limit", type=int, default=None,
                    help="clembench instances per experiment (its first ones; default: all, as clem run plays them)")
    ap.add_argument("--per_experiment", type=int, default=8, help="our test instances per experiment")
    ap.add_argument("--clembench_commit", default=None, help="recorded when the checkout has no .git")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "clem_parity.json")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    games = {}
    for game in GAMES:
        if game not in PLAYED:
            probe = clembench(args.checkout, game, perfect, 1)
            games[game] = {"clembench": probe, "verdict": "not compared: these policies do not play it"
                           + (f"; clembench's side fails: {probe['error'][:200]}" if "error" in probe else "")}
            continue
        sides = {name: {"ours": ours(game, p, args.per_experiment), "clembench": clembench(args.checkout, game, p, args.limit)}
                 for name, p in POLICIES.items()}
        games[game] = {**sides, "verdict": verdict(sides)}
        print(game, games[game]["verdict"], flush=True)
    commit = subprocess.run(["git", "-C", str(args.checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    write_result(args.out, {
        "clembench_commit": commit.stdout.strip() or args.clembench_commit or "unknown (the checkout has no .git)",
        "clembench_source": str(args.checkout.name),
        "clemcore": importlib.metadata.version("clemcore"),
        "venv": VENV,
        "ours": f"test split, {args.per_experiment} instances per experiment, self-play",
        "clembench": (f"first {args.limit} instances of each experiment" if args.limit else "every instance")
        + " of each game's instances file, self-play through clem_adapter",
        "games": games,
    }, load)


if __name__ == "__main__":
    main()
