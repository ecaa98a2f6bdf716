"""Episode transcripts on disk: one JSON per episode (the record), one HTML page per episode, and an
index page per run with the clemscore table and a link to every episode.

The JSON is the source of truth (``games sft-data`` and ``games score`` read it); the HTML is for
people: each turn shows the seat, the new prompt text the seat saw and its reply, with aborts
marked.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rlplugs import UsageError

from clembench_games.scoring import clem_table

#: The folder of a run where ``games clem`` lets clemcore write its own results tree (its JSON files
#: are clemcore's, not episode records).
CLEM_RESULTS = "clem-results"
#: The other JSON files our commands write beside records: a run's clemscore table (``games
#: collect``) and an evaluation's report (``rlplugs eval --env clembench-games``, whose renders are records).
NOT_RECORDS = ("scores.json", "report.json")
#: What every episode record has, and what scoring and the SFT data read.
RECORD_KEYS = ("game", "turns", "metrics")

_STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
.turn{border-radius:8px;padding:.6rem .9rem;margin:.6rem 0;white-space:pre-wrap;font-family:ui-monospace,monospace}
.prompt{background:#f1f3f5}.reply{background:#e7f5ff;margin-left:3rem}.abort{background:#ffe3e3}.seat{font-weight:bold;font-family:system-ui}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.2rem .6rem;text-align:right}td:first-child{text-align:left}"""


def episode_path(out: Path, record: dict[str, Any], index: int) -> Path:
    return out / record["game"] / f"{record['instance']['instance_id']}-{index}.json"


def save_episode(out: Path, record: dict[str, Any], index: int) -> Path:
    """Write ``record`` as JSON and its HTML page; returns the JSON path."""
    path = episode_path(out, record, index)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False))
    path.with_suffix(".html").write_text(episode_html(record), encoding="utf-8")
    return path


def load_records(runs: Path) -> Iterator[dict[str, Any]]:
    """Every episode record under ``runs`` (recursively). Any other JSON file there, one that cannot
    be read or is no record, stops the whole load with its path named: skipping it would score a run
    without one of its episodes. Not read: :data:`NOT_RECORDS` and clemcore's own tree."""
    for path in sorted(Path(runs).rglob("*.json")):
        if path.name in NOT_RECORDS or CLEM_RESULTS in path.relative_to(runs).parts:
            continue
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _not_a_record(path, str(exc)) from None
        missing = [k for k in RECORD_KEYS if not isinstance(rec, dict) or k not in rec]
        if missing:
            raise _not_a_record(path, f"no {', '.join(missing)}")
        yield rec


def _not_a_record(path: Path, problem: str) -> UsageError:
    return UsageError(f"{path}: not a readable episode record ({problem}); play that episode again "
                      "or move the file out of the run folder")


def episode_html(record: dict[str, Any]) -> str:
    inst = record["instance"]
    title = f"{record['game']} / {inst['experiment']} / {inst['instance_id']}"
    parts = [f"<h1>{html.escape(title)}</h1>"]
    metrics = ", ".join(f"{k}: {v}" for k, v in record["metrics"].items())
    parts.append(f"<p><b>outcome:</b> {html.escape(record['outcome'])}"
                 + (f" ({html.escape(record['abort_reason'])})" if record["abort_reason"] else "")
                 + f"<br><b>trained seats:</b> {html.escape(', '.join(record['trained_seats']))}"
                 + f"; partner: {html.escape(record['partner'])}"
                 + "".join(f"<br><b>{html.escape(seat)}:</b> {html.escape(model)}"  # clemcore adapter runs
                           for seat, model in record.get("players", {}).items())
                 + f"<br>{html.escape(metrics)}</p>")
    for turn in record["turns"]:
        seat = html.escape(turn["seat"])
        parts.append(f'<div class="turn prompt"><span class="seat">GM → {seat}</span>\n'
                     f"{html.escape(turn['messages'][-1]['content'])}</div>")
        abort = " abort" if turn["verdict"] != "ok" else ""
        parts.append(f'<div class="turn reply{abort}"><span class="seat">{seat}</span>\n'
                     f"{html.escape(turn['response'])}"
                     + (f"\n<b>{html.escape(turn['verdict'])}</b>" if abort else "") + "</div>")
    for event in record["events"]:
        parts.append(f"<p><i>{html.escape(event)}</i></p>")
    return _page(title, "\n".join(parts))


def _fmt(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def write_index(out: Path, records: Iterable[dict[str, Any]] | None = None) -> Path:
    """``index.html`` and ``scores.json`` for the run in ``out``."""
    out = Path(out)
    records = list(load_records(out) if records is None else records)
    table = clem_table(records)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scores.json").write_text(json.dumps(table, indent=1))
    rows = "".join(
        f"<tr><td>{html.escape(g)}</td><td>{v['episodes']}</td><td>{_fmt(v['% Played'])}</td>"
        f"<td>{_fmt(v['Quality'])}</td><td>{_fmt(v['Success'])}</td></tr>"
        for g, v in table["games"].items()
    )
    body = [
        "<h1>clembench-games run</h1>",
        f"<p><b>clemscore {_fmt(table['clemscore'])}</b> = % played {_fmt(table['% Played'])} / 100 "
        f"x quality {_fmt(table['Quality'])}</p>",
        f"<table><tr><th>game</th><th>episodes</th><th>% played</th><th>quality</th><th>% success</th></tr>{rows}</table>",
        "<ul>",
    ]
    for path in sorted(out.rglob("*.html")):
        if path.name != "index.html":
            body.append(f'<li><a href="{html.escape(str(path.relative_to(out)))}">{html.escape(str(path.relative_to(out)))}</a></li>')
    body.append("</ul>")
    index = out / "index.html"
    index.write_text(_page("clembench-games run", "\n".join(body)), encoding="utf-8")
    return index


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{body}</body></html>")
