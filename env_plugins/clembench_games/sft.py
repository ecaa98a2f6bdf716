"""Won episodes -> turn-level SFT samples.

Every reply of a seat the model played becomes one chat sample: the messages that seat saw
(rules, game-master prompts, its own earlier replies) followed by the reply as the assistant
turn. Only episodes that were won (clembench Success) are kept, the won-episode recipe of the
model card; thinking stays off because the messages carry no thinking blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def turn_samples(record: dict[str, Any], seats: Iterable[str] | None = None) -> Iterator[dict[str, Any]]:
    """One ``{"messages": [...], game, experiment, instance_id, seat, turn}`` per reply of ``seats``
    (default: the seats the model played)."""
    keep = set(record["trained_seats"] if seats is None else seats)
    inst = record["instance"]
    for i, turn in enumerate(record["turns"]):
        if turn["seat"] not in keep:
            continue
        yield {
            "messages": [*turn["messages"], {"role": "assistant", "content": turn["response"]}],
            "game": record["game"],
            "experiment": inst["experiment"],
            "instance_id": inst["instance_id"],
            "seat": turn["seat"],
            "turn": i,
        }


def won_turn_samples(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turn-level samples of every won episode."""
    return [s for rec in records if rec["metrics"].get("Success") == 1.0 for s in turn_samples(rec)]
