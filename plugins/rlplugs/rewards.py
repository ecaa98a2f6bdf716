"""Reward components: named, weighted, sync or async, each logged as its own metric.

The rule this module enforces: a reward that could not be computed is *unscored* (value ``None``
with a reason), never a silent 0. Trainers exclude unscored values (TRL turns ``None`` into NaN
and leaves it out of the weighted sum); :class:`UnscoredLedger` counts them by component and
reason so a judge that keeps failing is visible in the logs, and :func:`rlplugs.envspec.EnvSpec.preflight`
refuses to start training when a component cannot compute at all.

A component's function raises :class:`Unscorable` to say "no score, and here is why"; any other
exception is caught and recorded the same way with its type and message. Components marked
``remote`` (a judge service, an HTTP model) are retried with exponential backoff under a timeout;
only transient errors are retried.

*Group* components (``group=True``, e.g. diversity across the rollouts of one prompt) receive all
samples of one group at once and return one value per sample; the trainer adapters make sure the
whole group is present even when the trainer spreads it over several processes.

*Batch* components (:meth:`RewardComponent.from_batch`) share one function that scores a whole
batch for several components at once (a simulator run that yields both success and validity):
:func:`score_components` calls it once per batch for all of them. This is the only scoring path:
an environment's reward is its list of components, however they are computed.

A sample whose episode was stopped by an error (:func:`rlplugs.episode.stop_reason`) is not
scored at all: every component is unscored with that reason, and group components see only the
group's other members.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from rlplugs.config import StrictConfig
from rlplugs.episode import stop_reason

log = logging.getLogger(__name__)


class Unscorable(Exception):
    """Raised by a component that cannot score this sample; the message is the reason."""


class TransientError(Exception):
    """A failure worth retrying (dropped connection, busy judge); raise it from remote components."""


@dataclass(frozen=True)
class Score:
    """One component's result for one sample: a value, or ``None`` and the reason it is missing."""

    value: float | None
    reason: str | None = None

    @property
    def scored(self) -> bool:
        return self.value is not None


@dataclass
class Sample:
    """What a component scores: the prompt, the model's completion text, the dataset row, and
    for multi-turn environments the finished episode (see :mod:`rlplugs.episode`)."""

    prompt: Any
    completion: str
    row: dict[str, Any] = field(default_factory=dict)
    episode: Any = None
    group: int | None = None


class RetryPolicy(StrictConfig):
    """How a remote component is retried: ``attempts`` tries, sleeping ``backoff_s * 2**k`` between
    them, each try bounded by ``timeout_s`` seconds."""

    attempts: int = Field(3, ge=1, description="tries in all (1: no retry)")
    backoff_s: float = Field(0.5, ge=0, description="sleep before the first retry; doubles after each")
    timeout_s: float = Field(30.0, gt=0, description="seconds one try may take")


RETRYABLE: tuple[type[BaseException], ...] = (TransientError, TimeoutError, ConnectionError)

ComponentFn = Callable[..., Any]  # sample -> float | Score; samples -> list (group, batch); may be async
#: A function scoring a batch for several components: ``fn(samples) -> [{component: Score | float}]``.
BatchFn = Callable[[Sequence["Sample"]], "list[dict[str, Any]] | Awaitable[list[dict[str, Any]]]"]


@dataclass
class RewardComponent:
    """A named, weighted reward term. ``fn(sample) -> float`` (or ``fn(samples) -> list[float]``
    with ``group=True``, or ``fn(samples) -> [{name: value}]`` for a batch component made with
    :meth:`from_batch`); may be ``async``. ``retry`` makes it a remote component."""

    name: str
    fn: ComponentFn
    weight: float = 1.0
    description: str = ""
    group: bool = False
    retry: RetryPolicy | None = None
    batch: bool = False

    def __post_init__(self) -> None:
        if not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"reward component name {self.name!r} must be alphanumeric with '_' or '-'")
        if self.group and self.batch:
            raise ValueError(f"reward component {self.name!r}: a batch component already sees the whole batch")

    @classmethod
    def from_batch(cls, fn: BatchFn, components: Sequence[tuple[str, float, str]],
                   retry: RetryPolicy | None = None) -> list[RewardComponent]:  # fmt: skip
        """Components ``(name, weight, description)`` all computed by one call of ``fn`` per batch."""
        return [cls(name, fn, weight, description, retry=retry, batch=True) for name, weight, description in components]

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(
            getattr(self.fn, "__call__", None)
        )


class UnscoredLedger:
    """Thread-safe counts of scored/unscored results per component, with reasons."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.scored: Counter[str] = Counter()
        self.unscored: Counter[str] = Counter()
        self.reasons: dict[str, Counter[str]] = defaultdict(Counter)
        self.retries: Counter[str] = Counter()

    def record(self, component: str, score: Score) -> None:
        with self._lock:
            if score.scored:
                self.scored[component] += 1
            else:
                self.unscored[component] += 1
                self.reasons[component][_short(score.reason)] += 1

    def record_retry(self, component: str) -> None:
        with self._lock:
            self.retries[component] += 1

    def summary(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            names = sorted(set(self.scored) | set(self.unscored))
            return {
                n: {
                    "scored": self.scored[n],
                    "unscored": self.unscored[n],
                    "retries": self.retries[n],
                    "reasons": dict(self.reasons[n].most_common(5)),
                }
                for n in names
            }


def reason_kind(reason: str) -> str:
    """``reason`` on one line with its numbers written ``#``, so that one failure counts once across
    scenes and lines ("7/8 scenes", "line 12: ..."): what reports and logs group reasons by."""
    return re.sub(r"\d+(\.\d+)?", "#", " ".join(reason.split()))[:200]


def _short(reason: str | None, limit: int = 160) -> str:
    lines = (reason or "").strip().splitlines()
    reason = lines[0] if lines else "unknown"  # a blank reason must not crash the ledger
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"


def _as_reason(exc: BaseException) -> str:
    if isinstance(exc, Unscorable):
        return str(exc) or "unscorable"
    return f"{type(exc).__name__}: {exc}"


class _ThreadCall:
    """A sync component's call on a worker thread. ``started`` resolves when a thread picks it up,
    so its timeout runs from then: the time it queued behind other samples is not its own."""

    def __init__(self, fn: Callable[[Any], Any], arg: Any):
        loop = asyncio.get_running_loop()
        self.started: asyncio.Future = loop.create_future()

        def run() -> Any:
            loop.call_soon_threadsafe(lambda: self.started.done() or self.started.set_result(None))
            return fn(arg)

        self.result = loop.run_in_executor(None, run)

    async def wait(self, timeout: float | None) -> Any:
        await self.started
        # shield: on a timeout the thread cannot be stopped; the next attempt waits for it again
        return await asyncio.wait_for(asyncio.shield(self.result), timeout)


async def _call(component: RewardComponent, arg: Any, ledger: UnscoredLedger | None) -> Any:
    """Call with retries for remote components; returns the raw value or raises the last error.

    Each try is bounded by ``retry.timeout_s``. An async component's try is cancelled when it runs
    out; a sync component's thread cannot be, so after its timeout the next try waits for the same
    call again instead of starting a duplicate (which would send the same request twice)."""
    attempts = component.retry.attempts if component.retry else 1
    timeout = component.retry.timeout_s if component.retry else None
    running: _ThreadCall | None = None
    for attempt in range(attempts):
        try:
            if component.is_async:
                coro = component.fn(arg)
                return await asyncio.wait_for(coro, timeout) if timeout else await coro
            if running is None or (running.result.done() and running.result.exception() is not None):
                running = _ThreadCall(component.fn, arg)  # the first try, or the last one failed
            return await running.wait(timeout)
        except RETRYABLE as exc:
            if attempt + 1 >= attempts:
                raise
            if ledger is not None:
                ledger.record_retry(component.name)
            delay = component.retry.backoff_s * (2**attempt)
            log.info("reward %s: %s; retry %d/%d in %.2fs", component.name, exc, attempt + 1, attempts - 1, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def _to_score(value: Any) -> Score:
    if value is None:
        return Score(None, "component returned None")
    if isinstance(value, Score):
        return value
    value = float(value)
    if value != value:  # NaN
        return Score(None, "component returned NaN")
    return Score(value)


async def score_components(
    components: Sequence[RewardComponent],
    samples: Sequence[Sample],
    ledger: UnscoredLedger | None = None,
) -> list[dict[str, Score]]:
    """Score every sample with every component, concurrently; never raises for a bad sample."""
    results: list[dict[str, Score]] = [{} for _ in samples]
    live = []
    for i, sample in enumerate(samples):
        reason = stop_reason(sample.episode)
        if reason is None:
            live.append(i)
        else:
            results[i] = {c.name: Score(None, reason) for c in components}

    async def one(component: RewardComponent, index: int) -> None:
        try:
            results[index][component.name] = _to_score(await _call(component, samples[index], ledger))
        except Exception as exc:  # noqa: BLE001 - a failed score is data, not a crash
            results[index][component.name] = Score(None, _as_reason(exc))

    async def group(component: RewardComponent, indices: list[int]) -> None:
        members = [samples[i] for i in indices]
        try:
            values = await _call(component, members, ledger)
            if len(values) != len(indices):
                raise ValueError(f"group component returned {len(values)} values for {len(indices)} samples")
            for i, v in zip(indices, values):
                results[i][component.name] = _to_score(v)
        except Exception as exc:  # noqa: BLE001
            for i in indices:
                results[i][component.name] = Score(None, _as_reason(exc))

    async def batch(members: list[RewardComponent]) -> None:
        try:
            rows = await _call(members[0], [samples[i] for i in live], ledger)
            if len(rows) != len(live):
                raise ValueError(f"batch scorer returned {len(rows)} results for {len(live)} samples")
            for i, row in zip(live, rows):
                for c in members:
                    results[i][c.name] = _to_score(row[c.name]) if c.name in row else Score(None, f"batch scorer gave no '{c.name}'")
        except Exception as exc:  # noqa: BLE001
            for i in live:
                results[i].update({c.name: Score(None, _as_reason(exc)) for c in members})

    jobs: list[Awaitable[None]] = []
    batches: dict[int, list[RewardComponent]] = defaultdict(list)  # one call per shared batch function
    for component in components:
        if component.batch:
            batches[id(component.fn)].append(component)
        elif component.group:
            by_group: dict[Any, list[int]] = defaultdict(list)
            for i in live:
                by_group[samples[i].group if samples[i].group is not None else ("solo", i)].append(i)
            jobs += [group(component, idx) for idx in by_group.values()]
        else:
            jobs += [one(component, i) for i in live]
    if live:
        jobs += [batch(members) for members in batches.values()]
    await asyncio.gather(*jobs)
    if ledger is not None:
        for r in results:
            for name, s in r.items():
                ledger.record(name, s)
    return results


def run_sync(coro: Awaitable[Any]) -> Any:
    """Run a coroutine from sync code, also when the caller already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: dict[str, Any] = {}

    def runner() -> None:
        try:
            result["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001
            result["error"] = exc

    t = threading.Thread(target=runner)
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def weighted_total(scores: dict[str, Score], weights: dict[str, float]) -> float | None:
    """Weighted sum of the scored components; ``None`` when no component with a nonzero weight
    could be scored (weight-0 metrics are reported, not rewarded, so they cannot make a total)."""
    scored = [(weights[n], s.value) for n, s in scores.items() if s.scored and weights.get(n)]
    if not scored:
        return None
    return float(sum(w * v for w, v in scored))
