"""matrl episodes through a faulty network to the judge service: nothing lost, no silent zeros.

    python benchmarks/judge_faults.py --rows 32 --group 4 --load_samples 1500 \
        --out benchmarks/results/judge_faults.json

The real service (``rlplugs matrl serve-judges``, CHGNet on the CPU) sits behind a fault-injecting
proxy (``tests/fault_proxy.py``) that breaks ``--fault_rate`` of the requests with a mix of drops,
resets, hangs, delays, truncated and garbled replies; during each faulty run the service process
is also SIGKILLed once and restarted. Episodes are played by the reference policy through the two
trainer paths, each first on a healthy network (the reference scores), then with faults:

- **TRL**: rlplugs' ``EpisodeRollout`` (TRL's ``rollout_func``: ``ep.step`` per round, an episode
  whose step raises is stopped) with the policy's text in place of ``generate``, then TRL's reward
  functions (``EnvRewardFunctions``) per group of ``--group`` rollouts of one prompt;
- **verifiers**: ``run_eval`` (what ``vf-eval`` runs) on the matrl taskset with ``n = --group``
  sibling attempts, the policy behind rlplugs' OpenAI-compatible policy server.

Every component of every episode is compared with its healthy reference: *as healthy* (same
value), *unscored with reason* (``None`` and a reason: allowed), *unscored without reason*,
*silently zero* (scored 0 where the healthy run scored more: the failure this guards against) or
*changed* (another value). An episode is *lost* when it produced no scores at all (an exception
escaped the rollout or the trace errored); episodes that failed in the healthy run as well are
counted apart (they say nothing about judge faults). *Retried*: episodes (TRL path) or judge requests
(both) that needed at least one retry. Last, a load run on a healthy service: ``--load_samples``
distinct cells scored by the ``matrl-stability`` reward component in one batch with a 5 s
timeout (issue 14: 400 such samples left 220 unscored), which must leave none unscored.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fault_proxy import FAULTS, FaultProxy  # noqa: E402
from result_file import write_result  # noqa: E402

RLPLUGS = str(Path(sys.executable).with_name("rlplugs"))
TOL = 1e-3


class Service:
    """``rlplugs matrl serve-judges`` on a fixed port, which can be killed and started again."""

    def __init__(self, relax_steps: int):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [RLPLUGS, "matrl", "serve-judges", "--port", str(self.port), "--relax_steps", str(relax_steps)]
        self.process: subprocess.Popen | None = None
        self.kills: list[dict[str, float]] = []

    def start(self, wait: bool = True) -> None:
        self.process = subprocess.Popen(self.command, env={**os.environ, "OMP_NUM_THREADS": "1"},
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while wait and not self.ready():
            time.sleep(0.5)

    def ready(self) -> bool:
        try:
            return httpx.get(self.url + "/ready", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def kill_and_restart(self) -> None:
        print(f"{time.strftime('%X')} killing the judge service", file=sys.stderr, flush=True)
        start = time.perf_counter()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.start(wait=False)
        while not self.ready():
            time.sleep(0.25)
        self.kills.append({"down_s": round(time.perf_counter() - start, 1)})

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(60)


def kill_when(proxy: FaultProxy, service: Service, after_requests: int, done: threading.Event) -> threading.Thread:
    """Kill and restart the service once the proxy has seen ``after_requests`` more requests
    (unless ``done`` is set first: the run ended sooner)."""
    target = proxy.counts["requests"] + after_requests

    def run() -> None:
        while proxy.counts["requests"] < target:
            if done.wait(0.05):
                return
        service.kill_and_restart()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def client_stats() -> Counter:
    """Request and retry counts of every judge client in this process (each path builds its own)."""
    from matrl.judge_client import HttpJudges

    total: Counter[str] = Counter()
    for obj in gc.get_objects():
        if isinstance(obj, HttpJudges):
            total.update(obj.stats)
    return total


def lost(reason: str) -> dict[str, str]:
    """An episode that produced no scores, and why."""
    return {"_lost": reason}


def scores_of(mapping: dict[str, Any]) -> dict[str, tuple[float | None, str | None]]:
    return {name: (s.value, s.reason) for name, s in mapping.items()}


# -- the TRL path ----------------------------------------------------------------------------------
class _Trainer:
    """What ``EpisodeRollout`` reads from a GRPOTrainer (no model: the policy writes the turns)."""

    def __init__(self, tokenizer, rows: list[dict]):
        from transformers import GenerationConfig

        self.processing_class, self.chat_template_kwargs = tokenizer, {}
        self.max_completion_length = 1_000_000
        self.generation_config = GenerationConfig()
        self.eos_token_ids = [tokenizer.eos_token_id]
        self.rollout_rows, self.use_vllm = rows, False


def trl_path(spec, rows: list[dict], group: int, judges) -> list[dict]:
    """Episodes played by ``EpisodeRollout`` and scored by TRL's reward functions, per group."""
    from matrl.policy import PrototypePolicy
    from rlplugs.testing.tiny_models import qwen35_tokenizer_dir
    from rlplugs.adapters.trl.rewards import EnvRewardFunctions
    from rlplugs.adapters.trl.rollout import EpisodeRollout
    from transformers import AutoTokenizer

    policy = PrototypePolicy()
    retried: dict[int, int] = Counter()

    class ScriptedRollout(EpisodeRollout):
        def _play_round(self, pending, episodes, records):
            self._turn = [(i, episodes[i]) for i in pending]
            super()._play_round(pending, episodes, records)

        def _generate(self, contexts, limits):  # the policy's reply to each pending episode, as tokens
            eos = self.render.tokenizer.eos_token_id
            return [self.render.encode(policy(episode.observation())) + [eos] for _, episode in self._turn]

    class Observed:
        """Counts the judge client's retries during each ``step`` of one episode."""

        def __init__(self, episode, index: int):
            self._episode, self._index = episode, index

        def step(self, text):
            before = judges.stats["retries"]
            try:
                return self._episode.step(text)
            finally:
                retried[self._index] += judges.stats["retries"] - before

        def __getattr__(self, name):
            return getattr(self._episode, name)

    tokenizer = AutoTokenizer.from_pretrained(qwen35_tokenizer_dir())
    # The offline Qwen3.5 tokenizer marks <tool_call>, </think>, ... special, so the rollout's
    # decode(skip_special_tokens=True) strips them and no tool call would reach the episode (the
    # official tokenizer keeps them as text). Decode keeping them, minus the end-of-turn token.
    decode = tokenizer.decode
    tokenizer.decode = lambda ids, **_: decode(ids, skip_special_tokens=False).replace(tokenizer.eos_token, "")
    made = iter(range(len(rows)))
    observed_spec = dataclasses.replace(spec, episodes=lambda row: Observed(spec.episodes(row), next(made)))
    try:
        out = ScriptedRollout(observed_spec, _Trainer(tokenizer, rows)).run([r["prompt"] for r in rows])
    except Exception as exc:  # noqa: BLE001 - the whole batch is lost
        return [lost(f"the rollout raised {type(exc).__name__}: {exc}")] * len(rows)
    rewards = EnvRewardFunctions(spec)
    results: list[dict] = []
    for g in range(0, len(rows), group):
        members = rows[g : g + group]
        kwargs = {"episode": out["episode"][g : g + group], "task": [r["task"] for r in members],
                  "target": [r["target"] for r in members]}
        try:
            batch = rewards.score_batch([r["prompt"] for r in members], [""] * len(members),
                                        out["completion_ids"][g : g + group], kwargs)
            results += [scores_of(s) for s in batch]
        except Exception as exc:  # noqa: BLE001
            results += [lost(f"the reward functions raised {type(exc).__name__}: {exc}")] * len(members)
    for i, r in enumerate(results):
        if "_lost" not in r:
            r["_retried"] = retried[i] > 0
    return results


# -- the verifiers path ----------------------------------------------------------------------------
def verifiers_path(options: dict, rows: int, group: int, tmp: Path) -> list[dict]:
    from matrl.policy import PrototypePolicy
    from rlplugs.tools.policy_server import serve_policy
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    os.environ.setdefault("RLPLUGS_BENCH_KEY", "local")
    env = {"taskset": {"id": "matrl", "split": "validation", **options}, "n": group,
           "agent": {"runtime": {"type": "subprocess"}}}
    with serve_policy(PrototypePolicy(), idle_timeout_s=3600) as server:
        # 4 episodes (16 agents) at a time: the policy server answers one request at a time, and
        # with verifiers' default of 128 a third of the agents gave up waiting in the healthy run
        config = EvalConfig(env=env, model="reference", client={"base_url": server.base_url, "api_key_var": "RLPLUGS_BENCH_KEY"},
                            num_rollouts=1, push=False, rich=None, output_dir=tmp, select={"limit": rows},
                            max_concurrent=4)
        episodes = asyncio.run(run_eval(config))
    results: list[dict] = []
    for episode in episodes:
        traces = list(episode.traces)
        if not episode.ok or len(traces) != group:
            stops = Counter(t.stop_condition for t in traces)
            errors = "; ".join(e.message for e in episode.errors)[:200]
            agent_errors = "; ".join(f"{t.last_error.type}: {t.last_error.message}"[:200]
                                     for t in traces if t.last_error) or "none"
            reason = f"{errors} (trace stop conditions: {dict(stops)}; agent errors: {agent_errors})"
            results += [lost(reason)] * group
            continue
        for trace in traces:
            unscored = trace.info.get("unscored", {})
            scores = {name: (r.score, None) for name, r in trace.rewards.items() if r is not None and name not in unscored}
            scores.update({name: (None, reason) for name, reason in unscored.items()})
            results.append(scores)
    return results


# -- comparison ------------------------------------------------------------------------------------
def compare(run: list[dict], reference: list[dict]) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    lost_reasons: Counter[str] = Counter()
    healthy_failures: Counter[str] = Counter()
    silent, changed = [], []
    for i, (got, ref) in enumerate(zip(run, reference)):
        if "_lost" in ref:  # no healthy score to compare with: not a judge fault
            counts["failed_in_healthy_run_too" if "_lost" in got else "failed_in_healthy_run_only"] += 1
            healthy_failures[ref["_lost"][:200]] += 1
            continue
        if "_lost" in got:
            counts["lost"] += 1
            lost_reasons[got["_lost"][:200]] += 1
            continue
        counts["retried"] += bool(got.get("_retried"))  # measured per episode on the TRL path only
        kinds = set()
        for name, (ref_value, _) in ((n, v) for n, v in ref.items() if not n.startswith("_")):
            value, reason = got.get(name, (None, None))
            if value is None:
                if ref_value is None:
                    continue  # not applicable in the healthy run either
                kinds.add("unscored_with_reason" if reason else "unscored_without_reason")
                reasons[(reason or "")[:140]] += 1
            elif ref_value is None or abs(value - ref_value) > TOL:
                if value == 0 and (ref_value or 0) > 0:
                    kinds.add("silently_zero")
                    silent.append({"episode": i, "component": name, "healthy": ref_value, "reason": reason})
                else:
                    kinds.add("changed")
                    changed.append({"episode": i, "component": name, "healthy": ref_value, "got": value})
        for kind in kinds:
            counts[kind] += 1
        if not kinds:
            counts["as_healthy"] += 1
    per_episode_retries = any("_retried" in r for r in run)
    counts["retried"] = counts["retried"] if per_episode_retries else None
    return {"episodes": len(run), **{k: counts[k] for k in ("as_healthy", "retried", "unscored_with_reason",
                                                             "unscored_without_reason", "silently_zero", "changed",
                                                             "lost", "failed_in_healthy_run_too",
                                                             "failed_in_healthy_run_only")},
            "unscored_reasons": dict(reasons.most_common(8)), "lost_reasons": dict(lost_reasons.most_common(5)),
            "healthy_run_failures": dict(healthy_failures.most_common(5)), "silent_zero_examples": silent[:8],
            "changed_examples": changed[:8]}


def load_run(url: str, samples: int, timeout_s: float) -> dict[str, Any]:
    """``samples`` distinct cells scored by ``matrl-stability`` in one batch (a healthy service)."""
    from matrl.prototypes import binary_prototypes
    from matrl.structures import structure_to_json
    from matrl.toolcalls import format_call
    from rlplugs.registry import get_registry
    from rlplugs.rewards import Sample, UnscoredLedger, run_sync, score_components

    component = get_registry().get("reward_component", "matrl-stability").build(
        {"judge_url": url, "retry": {"attempts": 3, "backoff_s": 0.5, "timeout_s": timeout_s}})
    bases = [s for pair in (("Na", "Cl"), ("Mg", "O"), ("Li", "F"), ("K", "Br")) for _, s in binary_prototypes(*pair)]
    batch = []
    for k in range(samples):
        cell = bases[k % len(bases)].copy()
        cell.scale_lattice(cell.volume * (1 + 0.0005 * (k // len(bases))))
        batch.append(Sample("p", format_call("submit", structure=structure_to_json(cell))))
    ledger = UnscoredLedger()
    start = time.perf_counter()
    results = run_sync(score_components([component], batch, ledger))
    wall = time.perf_counter() - start
    unscored = Counter(r[component.name].reason for r in results if not r[component.name].scored)
    return {"samples": samples, "timeout_s": timeout_s, "unscored": sum(unscored.values()),
            "unscored_reasons": dict(unscored.most_common(5)),
            "wall_s": round(wall, 1), "samples_per_s": round(samples / wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32, help="prompts per path (each played --group times)")
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--fault_rate", type=float, default=0.1)
    parser.add_argument("--relax_steps", type=int, default=10)
    parser.add_argument("--load_samples", type=int, default=1500)
    parser.add_argument("--paths", default="trl,verifiers")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/judge_faults.json"))
    args = parser.parse_args()

    import tempfile

    from matrl.plugin import MatrlConfig, build_env, judge_set

    load_before = os.getloadavg()
    service = Service(args.relax_steps)
    service.start()
    proxy = FaultProxy(service.url, rate=0.0, seed=7, hang_s=25.0, delay_s=2.0).start()
    retry = {"attempts": 7, "backoff_s": 1.0, "timeout_s": 10.0}  # ~60 s of retries: a restart takes 25-40 s here
    options = {"judge_url": proxy.url, "retry": retry, "eval_rows": args.rows}
    config = MatrlConfig(**options)
    spec = build_env(config)
    rows = [dict(r) for r in spec.dataset("validation").select(range(args.rows)) for _ in range(args.group)]
    results: dict[str, Any] = {"paths": {}}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for path in args.paths.split(","):
                run = {"trl": lambda: trl_path(spec, rows, args.group, judge_set(config).mlip),
                       "verifiers": lambda: verifiers_path(options, args.rows, args.group, Path(tmp) / path)}[path]
                print(f"{time.strftime('%X')} {path}: healthy reference run", file=sys.stderr, flush=True)
                proxy.rate, first = 0.0, proxy.counts["requests"]
                reference = run()
                proxy.rate, before = args.fault_rate, Counter(proxy.counts)
                stats_before = client_stats()
                print(f"{time.strftime('%X')} {path}: run with {args.fault_rate:.0%} faults and one service kill",
                      file=sys.stderr, flush=True)
                done = threading.Event()
                killer = kill_when(proxy, service, max((before["requests"] - first) // 3, 1), done)
                start = time.perf_counter()
                faulty = run()
                done.set()
                killer.join()
                faults = Counter(proxy.counts) - before
                client = client_stats() - stats_before
                results["paths"][path] = {**compare(faulty, reference), "wall_s": round(time.perf_counter() - start, 1),
                                          "faults_injected": {k: faults[k] for k in (*FAULTS, "requests")},
                                          "service_kills": list(service.kills), "client": dict(client)}
                service.kills.clear()
                print(f"{path}: {results['paths'][path]}", file=sys.stderr, flush=True)
        proxy.rate = 0.0
        if args.load_samples:
            print("load run", file=sys.stderr, flush=True)
            results["healthy_load_run"] = load_run(service.url, args.load_samples, timeout_s=5.0)
    finally:
        proxy.stop()
        service.stop()
    results.update({
        "setup": {"rows": args.rows, "group": args.group, "fault_rate": args.fault_rate, "faults": list(FAULTS),
                  "hang_s": 25.0, "delay_s": 2.0, "client_retry": retry, "relax_steps": args.relax_steps,
                  "service": "rlplugs matrl serve-judges (FastAPI/uvicorn, CHGNet on CPU); the faulty runs SIGKILL "
                             "it once and start it again on the same port"},
        "goal": "0 lost, 0 silently zero, every unscored item with its reason; load run 0 unscored",
    })
    write_result(args.out, results, load_before[0])


if __name__ == "__main__":
    main()
