"""Play every clembench-games test instance with the scripted players and the message-only
reference policy, save the transcripts (JSON + HTML, one index per run) and print the clemscore
tables: the sanity bounds any trained model sits between. Offline, CPU, a few seconds.

    python examples/clembench_scripted_bounds.py --out outputs/clembench-bounds
    # then open outputs/clembench-bounds/<player>/index.html
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlplugs.episode import play
from rlplugs.registry import make_env

from clembench_games import GAMES, instances, new_game, play_scripted
from clembench_games.transcripts import save_episode, write_index


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="outputs/clembench-bounds")
    parser.add_argument("--split", default="test", choices=("validation", "test"))
    args = parser.parse_args()
    spec = make_env("clembench-games", {})
    runs = {
        "perfect": [play_scripted(new_game(i), "perfect", seed=i["seed"]) for g in GAMES for i in instances(g, args.split)],
        "random": [play_scripted(new_game(i), "random", seed=i["seed"]) for g in GAMES for i in instances(g, args.split)],
        # self-play rows: one per seat; play each instance once (from its first seat's row)
        "reference": [play(spec.episodes(row), spec.reference_policy) for row in spec.dataset(args.split)
                      if row["seat"] == GAMES[row["game"]].seats[0]],
    }
    for name, episodes in runs.items():
        out = Path(args.out) / name
        records = [ep.record() for ep in episodes]
        for k, rec in enumerate(records):
            save_episode(out, rec, k)
        index = write_index(out, records)
        table = json.loads((out / "scores.json").read_text())
        print(f"{name:9s} clemscore {table['clemscore']:6.2f}  % played {table['% Played']:6.2f}  "  # noqa: T201
              f"quality {table['Quality']:6.2f}  -> {index}")
    return 0


if __name__ == "__main__":
    from rlplugs import run_script

    sys.exit(run_script(main))  # a fault is one line; RLPLUGS_TRACEBACK=1 shows its traceback
