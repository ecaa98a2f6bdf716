"""A remote component's timeout counts the time its call runs, not the time it waits for a worker
thread, and a call that timed out is waited for again instead of being sent a second time
(issue 14 item 6: 400 samples at 5 s left 220 unscored on a healthy judge; abandoned threads sent
duplicate requests)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from rlplugs.rewards import RetryPolicy, RewardComponent, Sample, UnscoredLedger, run_sync, score_components


def _threads() -> int:
    """Worker threads of asyncio's default executor (what sync components run on)."""
    return ThreadPoolExecutor()._max_workers


def test_time_queued_for_a_thread_is_not_counted_against_the_timeout():
    calls: list[str] = []
    lock = threading.Lock()

    def judge(sample: Sample) -> float:  # a healthy remote judge: 0.3 s a call, no faults
        with lock:
            calls.append(sample.completion)
        time.sleep(0.3)
        return 1.0

    n = 8 * _threads()  # ~2.4 s of queue in front of the last sample, its own call takes 0.3 s
    component = RewardComponent("judge", judge, retry=RetryPolicy(attempts=2, backoff_s=0.01, timeout_s=1.5))
    ledger = UnscoredLedger()
    results = run_sync(score_components([component], [Sample("p", str(i)) for i in range(n)], ledger))
    assert [r["judge"].value for r in results] == [1.0] * n, ledger.summary()
    assert sorted(calls) == sorted(str(i) for i in range(n))  # one call per sample, none sent twice


def test_a_call_that_timed_out_is_awaited_again_not_sent_again():
    calls = []

    def judge(sample: Sample) -> float:  # slower than one timeout, faster than three
        calls.append(1)
        time.sleep(0.5)
        return 0.25

    ledger = UnscoredLedger()
    component = RewardComponent("judge", judge, retry=RetryPolicy(attempts=4, backoff_s=0.01, timeout_s=0.2))
    [result] = run_sync(score_components([component], [Sample("p", "x")], ledger))
    assert result["judge"].value == 0.25
    assert len(calls) == 1 and ledger.retries["judge"] >= 1
