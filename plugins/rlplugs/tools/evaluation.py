"""Generic evaluation: run an environment's :class:`~rlplugs.envspec.EvalProtocol` with a policy.

Every environment is evaluated the same way, so numbers are comparable across checkpoints and
across the TRL and prime-rl routes:

- **single-turn** envs: ``samples_per_row`` completions for each of the first ``rows`` rows,
  generated in batches, scored with :meth:`EnvSpec.ascore <rlplugs.envspec.EnvSpec.ascore>`
  (the samples of one row form one group, so group components see their siblings);
- **multi-turn** envs: one episode per sample, played in lock-step so a batch policy answers
  every live episode's turn in one ``generate`` call (or by a guidance strategy, which plays
  each episode with its own search); scores are the episode's own ``scores()`` overlaid with the
  env's components.

A sample that cannot be scored stays *unscored* with its reason; an episode stopped by an error,
by a failed search, for never ending, or one that could not start is unscored in every component
(episodes are started and played guarded, :func:`rlplugs.episode.start_episode`). Means are over scored values only and the unscored
counts are reported beside them. :func:`evaluate` returns plain dicts that :mod:`rlplugs.tools.report`
writes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlplugs.config import validate_options
from rlplugs.envspec import EnvSpec, EvalProtocol
from rlplugs.episode import (
    Episode,
    GuardedEpisode,
    Guidance,
    Policy,
    as_batch_policy,
    last_reply,
    play_lockstep,
    start_episode,
    stop_reason,
)
from rlplugs.rewards import Sample, Score, UnscoredLedger, run_sync, weighted_total

log = logging.getLogger(__name__)

Advance = Callable[[int], None]  # progress callback: n units done


def protocol_overrides(protocol: EvalProtocol, **overrides: Any) -> EvalProtocol:
    """``protocol`` with the given fields replaced; ``None`` means "keep the env's value"."""
    changes = {k: v for k, v in overrides.items() if v is not None}
    return validate_options(EvalProtocol, {**protocol.model_dump(), **changes}, "eval protocol") if changes else protocol


def eval_rows(spec: EnvSpec, split: str, rows: int) -> list[dict[str, Any]]:
    """The first ``rows`` rows of ``split`` as plain dicts (all of them, said so, when it has fewer)."""
    ds = spec.dataset(split)
    n = min(rows, len(ds))
    if n < rows:
        log.warning("split %r of %s has %d rows: evaluating those, not the %d asked for (the env's options "
                    "may set the split's size)", split, spec.name, n, rows)  # fmt: skip
    return [dict(ds[i]) for i in range(n)]


# --- single-turn ----------------------------------------------------------------------------


def complete_rows(rows: list[dict[str, Any]], policy: Policy, samples: int, advance: Advance) -> list[Sample]:
    """``samples`` completions per row; a batch policy answers a whole chunk of rows at once."""
    batch = as_batch_policy(policy)
    chunk = max(1, getattr(policy, "batch_size", 8) // max(1, samples))
    out: list[Sample] = []
    for start in range(0, len(rows), chunk):
        part = rows[start : start + chunk]
        replies = batch.generate([r["prompt"] for r in part], n=samples)
        for offset, (row, texts) in enumerate(zip(part, replies)):
            out += [Sample(prompt=row["prompt"], completion=t, row=row, group=start + offset) for t in texts]
        advance(len(part) * samples)
    return out


# --- multi-turn -----------------------------------------------------------------------------


def play_all(episodes: list[GuardedEpisode], policy: Policy, max_turns: int, advance: Advance) -> None:
    """Every episode played to its end by :func:`rlplugs.episode.play_lockstep`; an episode whose
    ``step`` raised is stopped by its guard, one still running after ``max_turns`` turns is stopped
    there; either way its sample is unscored with the reason."""
    play_lockstep(episodes, as_batch_policy(policy), max_turns, on_done=lambda _: advance(1))


def play_guided(episodes: list[GuardedEpisode], policy: Policy, guidance: Guidance, advance: Advance) -> list[Episode]:
    """Each episode played by ``guidance``; one whose search raised is stopped with the reason."""
    batch = as_batch_policy(policy)
    played: list[Episode] = []
    for ep in episodes:
        try:
            played.append(guidance.play(ep, batch))
        except Exception as exc:  # noqa: BLE001 - one failed search must not end the run
            ep.stop(f"guidance raised {type(exc).__name__}: {exc}")
            played.append(ep)
        advance(1)
    return played


def episode_samples(
    spec: EnvSpec, rows: list[dict[str, Any]], policy: Policy, protocol: EvalProtocol,
    guidance: Guidance | None, max_turns: int, advance: Advance,
) -> list[Sample]:
    assert spec.episodes is not None
    starts = [(g, row) for g, row in enumerate(rows) for _ in range(protocol.samples_per_row)]
    episodes = [start_episode(spec.episodes, row) for _, row in starts]
    if guidance is not None:
        played = play_guided(episodes, policy, guidance, advance)
    else:
        play_all(episodes, policy, max_turns, advance)
        played = list(episodes)
    samples = []
    for (group, row), ep in zip(starts, played):
        seat = ep.trained_seats[0] if ep.trained_seats else ep.current_seat
        samples.append(Sample(prompt=row["prompt"], completion=last_reply(ep, seat), row=row, episode=ep, group=group))
    return samples


def score_episodes(spec: EnvSpec, samples: list[Sample], ledger: UnscoredLedger) -> list[dict[str, Score]]:
    """The env's components overlaid on each episode's own ``scores()``; a stopped episode is
    unscored in every component with its reason (by :func:`rlplugs.rewards.score_components`)."""
    results = run_sync(spec.ascore(samples, ledger))
    for sample, own in zip(samples, results):
        if stop_reason(sample.episode) is not None:
            continue
        try:
            own.update({k: v for k, v in sample.episode.scores().items() if k not in own})
        except Exception as exc:  # noqa: BLE001
            own["episode_scores"] = Score(None, f"scores() raised {type(exc).__name__}: {exc}")
    return results


# --- summary --------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def summarise(spec: EnvSpec, protocol: EvalProtocol, samples: list[Sample], scores: list[dict[str, Score]]) -> dict[str, Any]:
    """Means of every component over scored values, the success rate, unscored counts with
    reasons, and the same numbers per ``report_by`` group."""
    names = list(dict.fromkeys([c.name for c in spec.components] + [n for s in scores for n in s]))

    def block(indices: list[int]) -> dict[str, Any]:
        comps = {n: _mean([scores[i][n].value for i in indices if n in scores[i] and scores[i][n].scored]) for n in names}
        totals = [t for i in indices if (t := weighted_total(scores[i], spec.weights)) is not None]
        success = comps.get(protocol.success_component) if protocol.success_component else None
        return {"samples": len(indices), "success_rate": success, "weighted_reward": _mean(totals), "components": comps}

    everything = list(range(len(samples)))
    summary = block(everything)
    unscored: dict[str, dict[str, Any]] = {}
    for n in names:
        reasons = Counter(scores[i][n].reason or "unknown" for i in everything if n in scores[i] and not scores[i][n].scored)
        if reasons:
            unscored[n] = {"count": sum(reasons.values()), "reasons": dict(reasons.most_common(5))}
    summary["unscored"] = unscored
    by: dict[str, dict[str, Any]] = {}
    for column in protocol.report_by:
        groups: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(samples):
            groups[str(s.row.get(column, "(missing)"))].append(i)
        by[column] = {value: block(idx) for value, idx in sorted(groups.items())}
    summary["by"] = by
    return summary


def completion_lengths(samples: list[Sample]) -> dict[str, Any] | None:
    """Tokens per completion and how many ``max_new_tokens`` cut off, from the policy's
    :class:`~rlplugs.tools.policies.Reply` objects (a truncated program or answer scores as a
    format failure, so the share at the cap says what a score alone hides); None for a policy
    whose replies do not say."""
    replies = [s.completion for s in samples if hasattr(s.completion, "at_cap")]
    if not replies:
        return None
    at_cap = sum(r.at_cap for r in replies)
    return {"samples": len(replies), "mean_tokens": _mean([r.tokens for r in replies]),
            "max_tokens": max(r.tokens for r in replies), "at_cap": at_cap, "at_cap_share": at_cap / len(replies)}  # fmt: skip


def at_cap_share(split_result: dict[str, Any]) -> float | None:
    """The share of a split's completions cut off at ``max_new_tokens`` (an evaluation's split
    result, or a split of ``report.json``); None when the policy's replies did not say."""
    return (split_result.get("completions") or {}).get("at_cap_share")


def row_digest(sample: Sample) -> str:
    """A short digest of a sample's whole row, so two evaluations can tell that they scored the same
    row. The prompt alone does not tell rows apart: factorio-build asks every row the same question
    and varies its scenes, and a prompt digest pooled 64 holdout rows into one in ``rlplugs report``."""
    content = {"prompt": sample.prompt, "row": sample.row}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:16]


def sample_record(index: int, sample: Sample, scores: dict[str, Score]) -> dict[str, Any]:
    record: dict[str, Any] = {
        "index": index,
        "group": sample.group,
        "row_digest": row_digest(sample),
        "completion": sample.completion,
        "scores": {n: s.value for n, s in scores.items()},
        "unscored_reasons": {n: s.reason for n, s in scores.items() if not s.scored},
        "reasons": {n: s.reason for n, s in scores.items() if s.scored and s.reason},  # why it scored what it did
    }
    if hasattr(sample.completion, "at_cap"):
        record["tokens"], record["at_cap"] = sample.completion.tokens, sample.completion.at_cap
    if sample.episode is not None:
        try:
            record["episode"] = sample.episode.record()
        except Exception as exc:  # noqa: BLE001
            record["episode"] = {"error": f"record() raised {type(exc).__name__}: {exc}"}
    return record


# --- entry points ---------------------------------------------------------------------------


def evaluate_samples(
    spec: EnvSpec,
    split: str,
    policy: Policy,
    protocol: EvalProtocol | None = None,
    guidance: Guidance | None = None,
    max_turns: int = 200,
    advance: Advance | None = None,
) -> tuple[dict[str, Any], list[Sample]]:
    """:func:`evaluate`, also returning the :class:`~rlplugs.rewards.Sample` objects (for
    rendering or further scoring)."""
    protocol = protocol or spec.eval
    advance = advance or (lambda n: None)
    start = time.perf_counter()
    rows = eval_rows(spec, split, protocol.rows)
    ledger = UnscoredLedger()
    if spec.multi_turn:
        samples = episode_samples(spec, rows, policy, protocol, guidance, max_turns, advance)
        scores = score_episodes(spec, samples, ledger)
    else:
        if guidance is not None:
            raise ValueError(f"guidance plays multi-turn episodes; env '{spec.name}' is single-turn")
        samples = complete_rows(rows, policy, protocol.samples_per_row, advance)
        scores = run_sync(spec.ascore(samples, ledger))
    result = summarise(spec, protocol, samples, scores)
    if not spec.multi_turn and (lengths := completion_lengths(samples)):
        result["completions"] = lengths
    result["counts"] = {
        "rows": len(rows),
        "samples": len(samples),
        "samples_per_row": protocol.samples_per_row,
        "unscored_samples": sum(1 for s in scores if not any(v.scored for v in s.values())),
    }
    result["split"] = split
    result["wall_time_s"] = round(time.perf_counter() - start, 3)
    result["samples"] = [sample_record(i, s, sc) for i, (s, sc) in enumerate(zip(samples, scores))]
    return result, samples


def evaluate(
    spec: EnvSpec,
    split: str,
    policy: Policy,
    protocol: EvalProtocol | None = None,
    guidance: Guidance | None = None,
    max_turns: int = 200,
    advance: Advance | None = None,
) -> dict[str, Any]:
    """Evaluate ``policy`` on ``split`` of ``spec`` under ``protocol`` (default: the env's).

    Returns a JSON-ready dict: ``split``, ``counts``, ``success_rate``, ``weighted_reward``,
    ``components`` (means over scored values), ``unscored`` (counts and reasons), ``by``
    (per ``report_by`` group), ``wall_time_s``, ``samples`` (one record per sample) and, for a
    single-turn env whose policy's replies say how they ended, ``completions`` (tokens, share cut
    off at ``max_new_tokens``).
    """
    return evaluate_samples(spec, split, policy, protocol, guidance, max_turns, advance)[0]


def evaluate_to_dir(
    spec: EnvSpec,
    splits: Sequence[str],
    policy: Policy,
    out_dir: str | Path,
    protocol: EvalProtocol | None = None,
    policy_name: str = "",
    guidance: Guidance | None = None,
    guidance_name: str | None = None,
    render: int = 3,
    progress: bool = False,
) -> tuple[dict[str, Any], Path]:
    """:func:`evaluate` every split and write ``report.json``, ``report.md``, ``samples.jsonl``
    and pictures into ``out_dir`` (see :mod:`rlplugs.tools.report`). Returns the report and the dir."""
    from rlplugs.tools.report import progress_bar, write_report

    protocol = protocol or spec.eval
    results, samples = {}, {}
    with progress_bar(enabled=progress) as bar:
        for split in splits:
            total = protocol.rows * protocol.samples_per_row
            task = bar.add_task(f"{spec.name}/{split}", total=total)
            results[split], samples[split] = evaluate_samples(
                spec, split, policy, protocol, guidance, advance=lambda n, t=task: bar.advance(t, n)
            )
    meta = {
        "env": spec.name,
        "description": spec.description,
        "policy": policy_name or getattr(policy, "name", type(policy).__name__),
        "guidance": guidance_name,
        "protocol": protocol.model_dump(mode="json"),
        "decoding": getattr(policy, "decoding_settings", None),  # a model's dtype and attention; None otherwise
    }
    out = Path(out_dir)
    report = write_report(spec, meta, results, samples, out, render=render)
    return report, out
