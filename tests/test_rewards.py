"""The core reward machinery: unscored accounting, retries of remote components, async and group
components, and preflight refusing a component that never computes."""

from __future__ import annotations

import asyncio
import time

import pytest

from rlplugs.envspec import EnvSpec, PreflightError
from rlplugs.rewards import (
    RetryPolicy,
    RewardComponent,
    Sample,
    Score,
    TransientError,
    UnscoredLedger,
    Unscorable,
    run_sync,
    score_components,
)


def samples(*texts: str, group: int | None = None) -> list[Sample]:
    return [Sample(prompt="p", completion=t, group=group) for t in texts]


def length(sample: Sample) -> float:
    return float(len(sample.completion))


def test_failures_are_unscored_with_their_reason_never_zero():
    def judge(sample: Sample) -> float:
        if sample.completion == "refuse":
            raise Unscorable("judge refused the input")
        if sample.completion == "crash":
            raise KeyError("answer")
        if sample.completion == "none":
            return None
        if sample.completion == "nan":
            return float("nan")
        return 1.0

    ledger = UnscoredLedger()
    results = run_sync(
        score_components([RewardComponent("judge", judge)], samples("ok", "refuse", "crash", "none", "nan"), ledger)
    )
    got = [r["judge"] for r in results]
    assert got[0] == Score(1.0)
    assert got[1] == Score(None, "judge refused the input")
    assert got[2].value is None and got[2].reason == "KeyError: 'answer'"
    assert got[3] == Score(None, "component returned None")
    assert got[4] == Score(None, "component returned NaN")
    summary = ledger.summary()["judge"]
    assert summary["scored"] == 1 and summary["unscored"] == 4
    assert summary["reasons"]["judge refused the input"] == 1


def test_blank_or_multiline_reasons_are_recorded_not_fatal():
    def judge(sample: Sample) -> float:
        raise Unscorable(sample.completion)

    ledger = UnscoredLedger()
    results = run_sync(
        score_components([RewardComponent("judge", judge)], samples("   ", "first line\nsecond"), ledger)
    )
    assert [r["judge"].value for r in results] == [None, None]
    assert ledger.summary()["judge"]["reasons"] == {"unknown": 1, "first line": 1}


def test_remote_component_retries_transient_errors_with_backoff():
    calls: list[float] = []

    def flaky(sample: Sample) -> float:
        calls.append(time.perf_counter())
        if len(calls) < 3:
            raise TransientError("judge busy")
        return 0.5

    ledger = UnscoredLedger()
    component = RewardComponent("flaky", flaky, retry=RetryPolicy(attempts=3, backoff_s=0.05, timeout_s=5))
    [result] = run_sync(score_components([component], samples("x"), ledger))
    assert result["flaky"] == Score(0.5)
    assert len(calls) == 3 and ledger.retries["flaky"] == 2
    assert calls[1] - calls[0] >= 0.05 and calls[2] - calls[1] >= 0.1  # exponential backoff


def test_remote_component_times_out_then_is_unscored_and_permanent_errors_are_not_retried():
    async def slow(sample: Sample) -> float:
        await asyncio.sleep(5)
        return 1.0

    attempts = []

    def broken(sample: Sample) -> float:
        attempts.append(1)
        raise ValueError("bad request")

    ledger = UnscoredLedger()
    policy = RetryPolicy(attempts=2, backoff_s=0.01, timeout_s=0.05)
    components = [RewardComponent("slow", slow, retry=policy), RewardComponent("broken", broken, retry=policy)]
    start = time.perf_counter()
    [result] = run_sync(score_components(components, samples("x"), ledger))
    assert time.perf_counter() - start < 2
    assert result["slow"].value is None and result["slow"].reason.startswith("TimeoutError")
    assert ledger.retries["slow"] == 1
    assert result["broken"] == Score(None, "ValueError: bad request") and len(attempts) == 1


def test_async_components_score_samples_concurrently():
    in_flight, peak = [0], [0]

    async def judge(sample: Sample) -> float:
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        await asyncio.sleep(0.05)
        in_flight[0] -= 1
        return 1.0

    component = RewardComponent("judge", judge)
    assert component.is_async
    results = run_sync(score_components([component], samples("a", "b", "c", "d")))
    assert [r["judge"].value for r in results] == [1.0] * 4
    assert peak[0] == 4


def test_group_component_sees_each_group_whole_and_bad_output_is_unscored():
    def distinct(members: list[Sample]) -> list[float]:
        texts = [m.completion for m in members]
        return [float(texts.count(t) == 1) for t in texts]

    def wrong_length(members: list[Sample]) -> list[float]:
        return [1.0]

    batch = samples("a", "a", "b", group=0) + samples("c", "d", group=1)
    components = [RewardComponent("distinct", distinct, group=True), RewardComponent("wrong", wrong_length, group=True)]
    results = run_sync(score_components(components, batch))
    assert [r["distinct"].value for r in results] == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert all(r["wrong"].value is None and "returned 1 values for" in r["wrong"].reason for r in results)


def _spec(components: list[RewardComponent]) -> EnvSpec:
    return EnvSpec(
        name="unit",
        description="unit-test environment",
        datasets={},
        components=components,
        preflight_samples=lambda: samples("abc", "de"),
    )


def test_preflight_names_the_component_that_never_computes():
    def dead(sample: Sample) -> float:
        raise Unscorable("service unreachable")

    with pytest.raises(PreflightError) as caught:
        _spec([RewardComponent("length", length), RewardComponent("dead", dead)]).preflight()
    message = str(caught.value)
    assert "'dead' (service unreachable)" in message and "'length'" not in message
    report = _spec([RewardComponent("length", length)]).preflight()
    assert report["length"] == {"scored": 2, "of": 2, "values": [3.0, 2.0], "reasons": []}


def test_preflight_accepts_a_component_that_computes_on_some_samples():
    def picky(sample: Sample) -> float:
        if len(sample.completion) < 3:
            raise Unscorable("too short")
        return 1.0

    report = _spec([RewardComponent("picky", picky)]).preflight()
    assert report["picky"]["scored"] == 1 and report["picky"]["reasons"] == ["too short"]
