"""Check rlplugs' prime-rl TOMLs with prime-rl's own code, from a prime-rl source checkout.

prime-rl is not on PyPI, so nothing in the test suite can import it; this script reads a checkout
(``PRIME_RL_SRC``, after its ``uv sync``) and runs, in prime-rl's environment, for every TOML in
``configs/prime-rl/``:

1. prime-rl's config loader (``prime_rl.utils.config.cli(RLConfig, args=["@", toml])``, what its
   ``rl`` entry point does), with every warning kept: valid or not, the inference table and GPU
   layout, renderer, batch and group sizes, algorithm per source, checkpointing, the run folder;
2. ``rl @ TOML --dry-run`` (the console script), which writes the per-component configs;
3. each written env-server config reloaded through ``EnvServerConfig``;
4. a few episodes per train source through prime-rl's env-server path: the real ``env-server``
   entry point on the written config, prime-rl's orchestrator ``Env`` (its ``EnvClient``) loading
   the taskset client-side and sending task data, and the environment's reference policy served
   by :mod:`rlplugs.tools.policy_server` as the model. The report gives each trace's reward and the
   agent names of the trainable traces: RAE keeps one baseline per name (``trace.agent.name``).
   A chat endpoint returns no token ids, so prime-rl's algorithms, which credit sampled tokens,
   are not run here; that and vLLM need GPUs (examples/prime_rl.md).

It writes one JSON report (``--out``). Run it with any Python: when prime-rl is not importable it
re-runs itself with the checkout's ``.venv/bin/python`` (or ``--python``)::

    python scripts/check_prime_rl.py ~/prime-rl --out benchmarks/results/prime_rl_check.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REEXEC = "RLPLUGS_CHECK_PRIME_RL_REEXEC"

#: What the check changes in a source so a CPU plays it in minutes (reported in the JSON).
CHECK_OVERRIDES: dict[str, dict[str, Any]] = {
    "matrl": {"env": {"n": 2}},  # 2 sibling attempts instead of 16: CHGNet relaxations on CPU
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("prime_rl_src", type=Path, help="a prime-rl source checkout (after `uv sync`)")
    p.add_argument("--python", default=None, help="prime-rl's Python (default PRIME_RL_SRC/.venv/bin/python)")
    p.add_argument("--configs", type=Path, nargs="*", default=None, help="TOMLs (default: configs/prime-rl/*.toml)")
    p.add_argument("--episodes", type=int, default=2, help="episodes per train source (one task each)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON report here (default: print it)")
    return p.parse_args(argv)


def fail(message: str) -> None:
    print(f"check_prime_rl: {message}", file=sys.stderr)
    sys.exit(2)


def ensure_prime_rl(args: argparse.Namespace) -> None:
    """Re-run this script under prime-rl's Python when this one cannot import prime-rl."""
    try:
        import prime_rl.configs.rl  # noqa: F401
        import prime_rl.orchestrator.envs  # noqa: F401
        import rlplugs  # noqa: F401
        return
    except ImportError as exc:
        if os.environ.get(REEXEC):
            fail(f"{sys.executable} cannot import what the check needs ({exc}); install rlplugs into "
                 "prime-rl's environment as examples/prime_rl.md shows")
    python = Path(args.python) if args.python else args.prime_rl_src / ".venv" / "bin" / "python"
    if not python.exists():
        fail(f"no prime-rl Python at {python}: run `uv sync` in {args.prime_rl_src} or pass --python")
    os.environ[REEXEC] = "1"
    os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])


def git(src: Path, *args: str) -> str | None:
    result = subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


def versions(src: Path) -> dict[str, Any]:
    import verifiers

    pinned = git(src, "ls-tree", "HEAD", "deps/verifiers")
    return {
        "prime_rl": {"commit": git(src, "rev-parse", "HEAD"), "describe": git(src, "describe", "--tags", "--always"),
                     "version": importlib.metadata.version("prime-rl")},
        "verifiers": {"version": importlib.metadata.version("verifiers"),
                      "pinned_submodule_commit": pinned.split()[2] if pinned else None,
                      # the commit of the verifiers checkout in use (None for a wheel, e.g. PyPI 0.4.0)
                      "installed_commit": git(Path(verifiers.__file__).parent, "rev-parse", "HEAD")},
        # prime-rl's other submodules where they came from PyPI instead (None: not installed)
        "packages": {name: installed(name) for name in ("renderers", "prime-pydantic-config", "rlplugs")},
        # uv resolves verifiers' harness scripts afresh: a date cap keeps them reproducible (examples/prime_rl.md)
        "uv_exclude_newer": os.environ.get("UV_EXCLUDE_NEWER"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, no GPU used",
    }


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port nothing listens on, never one handed out before: a service started on an earlier port
    may not be listening yet when the next is chosen (the judges' port went to the env server once)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def deep_update(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in update.items():
        out[key] = deep_update(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


# --- 1. the loader ------------------------------------------------------------------------


def load(toml: Path) -> tuple[Any, dict[str, Any]]:
    from prime_rl.configs.rl import RLConfig
    from prime_rl.utils.config import cli

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            config = cli(RLConfig, args=["@", str(toml)])
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the report says why it is invalid
            return None, {"valid": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    o, d = config.orchestrator, config.deployment
    summary: dict[str, Any] = {
        "valid": True,
        "warnings": sorted({str(w.message) for w in caught if issubclass(w.category, UserWarning)}),
        "inference": config.inference is not None,
        "gpus": {"inference": d.num_infer_gpus if config.inference is not None else 0, "trainer": d.num_train_gpus},
        "model": config.model.name if config.model else None,
        "renderer": o.renderer.name,
        "batch_size_traces": o.batch_size,
        "group_size": o.group_size,
        "run_dir": str(config.run_dir),
        "ckpt": None if config.ckpt is None else {"interval": config.ckpt.interval, "keep_last": config.ckpt.keep_last},
        "weight_broadcast": config.weight_broadcast.type if config.weight_broadcast else None,
        "lora": config.trainer.model.lora is not None,
        "train_sources": {s.resolved_name: {"algo": s.algo.type, "group_size": s.group_size} for s in o.train.source},
    }
    if config.inference is not None:
        v = config.inference.vllm
        summary["vllm"] = {"data_parallel_size": v.data_parallel_size, "tensor_parallel_size": v.tensor_parallel_size,
                           "max_model_len": v.max_model_len, "enable_lora": v.enable_lora}
    return config, summary


# --- 2./3. the dry run and its env-server configs ------------------------------------------


def dry_run(toml: Path, out_dir: Path) -> tuple[dict[str, Any], Path | None]:
    rl = Path(sys.executable).with_name("rl")
    command = [str(rl), "@", str(toml), "--dry-run", "--output-dir", str(out_dir)]
    start = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, "NO_COLOR": "1"})
    report: dict[str, Any] = {"ok": result.returncode == 0, "rc": result.returncode, "seconds": round(time.monotonic() - start, 1)}
    configs = sorted(out_dir.glob("*/configs"))
    if result.returncode != 0 or not configs:
        report["ok"] = False
        report["tail"] = (result.stdout + result.stderr)[-2000:]
        return report, None
    report["written"] = sorted(str(p.relative_to(configs[0])) for p in configs[0].rglob("*.json"))
    return report, configs[0]


def reload_env_configs(configs: Path) -> dict[str, Any]:
    from prime_rl.configs.env_server import EnvServerConfig
    from prime_rl.utils.config import cli

    out = {}
    for path in sorted((configs / "envs").glob("*/*.json")):
        key = f"{path.parent.name}/{path.stem}"
        try:
            config = cli(EnvServerConfig, args=["@", str(path)])
            out[key] = {"reloaded": True, "env": type(config.env).__name__, "taskset": config.env.taskset.id,
                        "address": config.serve.address}
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            out[key] = {"reloaded": False, "error": f"{type(exc).__name__}: {exc}"[:1000]}
    return out


# --- 4. rollouts through prime-rl's env-server client -------------------------------------


@contextlib.contextmanager
def background(command: list[str], log: Path):
    """A process for the duration of the ``with`` block, its output in ``log``."""
    with open(log, "w") as f:
        process = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def env_server(config_path: Path, address: str, log: Path):
    """prime-rl's ``env-server`` entry point on a written config, at ``address``."""
    command = [str(Path(sys.executable).with_name("env-server")), "@", str(config_path), "--serve.address", address]
    return background(command, log)


@contextlib.contextmanager
def matrl_judges(log: Path):
    """``rlplugs matrl serve-judges`` on CPU at a free port (the TOML's judge_url is replaced)."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("rlplugs")), "matrl", "serve-judges", "--device", "cpu", "--port", str(port)]
    with background(command, log):
        yield f"http://127.0.0.1:{port}"


async def served(game: Any, server: subprocess.Popen, log: Path) -> Any:
    """``game`` while the env server runs: its exit ends the wait (the client would wait forever)."""
    playing = asyncio.ensure_future(game)
    while not (await asyncio.wait({playing}, timeout=0.5))[0]:
        if server.poll() is not None:
            playing.cancel()
            last = next((line for line in reversed(log.read_text(errors="replace").splitlines()) if line.strip()), "")
            raise RuntimeError(f"env-server exited with code {server.returncode}: {last.strip()[:300]} (log {log.name})")
    return playing.result()


async def play(source: Any, address: str, base_url: str, episodes: int) -> dict[str, Any]:
    import verifiers.v1 as vf
    from prime_rl.orchestrator.envs import Env

    env = Env(source, address)
    start = time.monotonic()
    await env.start()
    client = vf.EvalClientConfig(base_url=base_url, api_key_var="RLPLUGS_CHECK_KEY")
    tasks = [next(env.tasks) for _ in range(episodes)]
    played = await asyncio.gather(*(
        env.run(client=client, model_name="reference", cache_salt=None, task_data=t.data.model_dump(mode="json"))
        for t in tasks
    ))
    traces = [t for e in played for t in e.traces]
    await env.env_client.close()
    return {
        "tasks_loaded": env.num_tasks,
        "episodes": len(played),
        "episodes_ok": sum(e.ok for e in played),
        "traces": len(traces),
        "traces_scored": sum(1 for t in traces if t.ok and t.reward is not None and any(r is not None for r in t.rewards.values())),
        "rewards": [round(t.reward, 4) if t.reward is not None else None for t in traces],
        "trainable_agent_names": sorted({t.agent.name for t in traces if t.agent.trainable}),
        "errors": sorted({str(err.message)[:300] for t in traces for err in t.errors}),
        "algo": source.algo.type,
        "seconds": round(time.monotonic() - start, 1),
    }


def rollouts(config: Any, configs: Path, work: Path, episodes: int) -> dict[str, Any]:
    from prime_rl.configs.orchestrator import TrainSourceConfig

    from rlplugs import make_env
    from rlplugs.tools.policy_server import serve_policy

    out = {}
    for source in config.orchestrator.train.source:
        name = source.resolved_name
        taskset_id = source.env.taskset.id
        overrides = copy.deepcopy(CHECK_OVERRIDES.get(taskset_id, {}))
        with contextlib.ExitStack() as stack:
            if source.env.taskset.model_dump().get("judge_url"):
                url = stack.enter_context(matrl_judges(work / f"{name}-judges.log"))
                overrides = deep_update(overrides, {"env": {"taskset": {"judge_url": url}}})
            written = json.loads((configs / "envs" / "train" / f"{name}.json").read_text())
            server_config = work / f"{name}-env-server.json"
            server_config.write_text(json.dumps(deep_update(written, overrides)))
            checked = TrainSourceConfig.model_validate(deep_update(source.model_dump(mode="json"), overrides))
            address = f"tcp://127.0.0.1:{free_port()}"
            log = work / f"{name}-env-server.log"
            process = stack.enter_context(env_server(server_config, address, log))
            spec = make_env(taskset_id)
            server = stack.enter_context(serve_policy(spec.reference_policy, model="reference", idle_timeout_s=900))
            try:
                report = asyncio.run(served(play(checked, address, server.base_url, episodes), process, log))
            except Exception as exc:  # noqa: BLE001 - the report says what failed
                report = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            if "judge_url" in overrides.get("env", {}).get("taskset", {}):  # a free port: say what it was
                overrides["env"]["taskset"]["judge_url"] = "rlplugs matrl serve-judges --device cpu"
            report["check_overrides"] = overrides or None
            report["model_requests"] = server.requests
        out[name] = report
    return out


def check(toml: Path, work: Path, episodes: int) -> dict[str, Any]:
    config, report = load(toml)
    if config is None:
        return report
    report["dry_run"], configs = dry_run(toml, work / "dry-run")
    if configs is None:
        return report
    report["env_server_configs"] = reload_env_configs(configs)
    report["rollouts"] = rollouts(config, configs, work, episodes)
    report["ok"] = bool(
        report["valid"] and report["inference"] and not report["warnings"] and report["dry_run"]["ok"]
        and all(e["reloaded"] for e in report["env_server_configs"].values())
        and all(r.get("traces_scored", 0) > 0 and r.get("episodes_ok") == r.get("episodes") for r in report["rollouts"].values())
    )
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.prime_rl_src.is_dir():
        fail(f"{args.prime_rl_src} is not a folder (a prime-rl source checkout)")
    if not (args.prime_rl_src / "packages" / "prime-rl-configs").is_dir():
        fail(f"{args.prime_rl_src} is not a prime-rl source checkout (no packages/prime-rl-configs)")
    ensure_prime_rl(args)
    os.environ.setdefault("RLPLUGS_CHECK_KEY", "local")  # the policy server takes any key
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tomls = args.configs or sorted((REPO / "configs" / "prime-rl").glob("*.toml"))
    report: dict[str, Any] = {
        "command": "python scripts/check_prime_rl.py PRIME_RL_SRC" + (f" --episodes {args.episodes}" if args.episodes != 2 else ""),
        **versions(args.prime_rl_src.resolve()),
        "configs": {},
    }
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rlplugs-prime-rl-check-") as tmp:
        for toml in tomls:
            work = Path(tmp) / toml.stem
            work.mkdir()
            key = str(toml.resolve().relative_to(REPO)) if toml.resolve().is_relative_to(REPO) else str(toml)
            report["configs"][key] = check(toml.resolve(), work, args.episodes)
            print(f"{key}: {'ok' if report['configs'][key].get('ok') else 'FAILED'}", file=sys.stderr)
    report["seconds"] = round(time.monotonic() - start, 1)
    report["all_ok"] = all(c.get("ok") for c in report["configs"].values())
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    else:
        print(text)
    return 0 if report["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
