"""``rlplugs matrl ...``: the judge service and the SUN benchmark.

    rlplugs matrl serve-judges --port 8765 --device cuda [--band_gap_model DIR]
    rlplugs matrl serve-judges --ray --replicas 4 --gpus_per_replica 1 --device cuda
    rlplugs matrl sun-eval --track formula --rollouts 4 --rows 32 --judge sevenn --policy reference --out runs/sun

``sun-eval`` is the generic ``rlplugs eval`` with the matrl options a SUN report needs: one track
(task kind) or all, N rollouts per prompt, and the judging MLIP (``sevenn`` = held-out judge; its
hull is rebuilt on SevenNet's own scale). The report carries validity/uniqueness/novelty/stability/
SUN rates per track, writes the submitted structures as CIF and draws the best ones.
"""

from __future__ import annotations

import argparse
import time

from matrl.datafiles import MEGNET_BANDGAP


def add_commands(subparsers) -> None:
    matrl = subparsers.add_parser("matrl", help="matrl tools: judge service, SUN benchmark")
    sub = matrl.add_subparsers(dest="matrl_command", required=True)

    serve = sub.add_parser("serve-judges", help="serve the MLIP, band-gap and elastic judges over HTTP",
                           description="One machine: FastAPI on uvicorn, no cluster. --ray: Ray Serve (replicas per "
                                       "GPU, restarts, one address for many trainer nodes). See matrl's README.")
    serve.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to serve other machines")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--device", default="cpu")
    serve.add_argument("--graph_workers", type=int, default=0,
                       help="processes building CHGNet graphs for batched relaxations (about 2x on an H200 with 14)")
    serve.add_argument("--band_gap_model", default=str(MEGNET_BANDGAP),
                       help="MatGL-format MEGNet folder (model.json + state.pt); default: the shipped weights; '' = off")
    serve.add_argument("--no_elastic", action="store_true", help="serve no bulk moduli")
    serve.add_argument("--relax_steps", type=int, default=20, help="FIRE steps per relaxation")
    serve.add_argument("--fmax", type=float, default=0.1, help="force convergence threshold (eV/Å)")
    serve.add_argument("--max_batch_size", type=int, default=64, help="requests one batched model call may serve")
    serve.add_argument("--batch_window_s", type=float, default=0.02, help="how long requests wait to share a batch")
    ray = serve.add_argument_group("Ray Serve (pip install 'rlplugs[matrl-ray]')")
    ray.add_argument("--ray", action="store_true", help="serve on Ray Serve instead of one uvicorn process")
    ray.add_argument("--ray_address", help="a running Ray cluster ('auto', 'ray://HEAD:10001'); default: start one here")
    ray.add_argument("--replicas", type=int, default=1, help="judge replicas (one per GPU with --gpus_per_replica 1)")
    ray.add_argument("--gpus_per_replica", type=float, default=0.0)
    ray.add_argument("--cpus_per_replica", type=float, default=1.0)
    ray.add_argument("--detach", action="store_true", help="leave the app running on the cluster and exit")
    serve.set_defaults(func=_serve)

    sun = sub.add_parser("sun-eval", help="SUN benchmark per track, judged by a chosen MLIP")
    sun.add_argument("--track", default="all", help="task kind (formula, unconditional, band_gap, bulk_modulus, "
                                                    "chemsys, space_group) or 'all'")
    sun.add_argument("--rollouts", type=int, default=4, help="rollouts per prompt")
    sun.add_argument("--rows", type=int, default=16, help="prompts")
    sun.add_argument("--judge", choices=["chgnet", "sevenn"], default="sevenn")
    sun.add_argument("--split", default="test")
    who = sun.add_mutually_exclusive_group(required=True)
    who.add_argument("--model", help="Hugging Face model directory")
    who.add_argument("--policy", choices=["reference"])
    sun.add_argument("--env_args", help="further matrl options as JSON (band_gap_model, reference_csvs, ...)")
    sun.add_argument("--render", type=int, default=4, help="best structures to draw")
    sun.add_argument("--out", required=True)
    sun.set_defaults(func=_sun_eval)


def _serve(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rlplugs import UsageError, validate_options

    from matrl.service import JudgeOptions, JudgeService

    flags = {"device": args.device, "relax_steps": args.relax_steps, "fmax": args.fmax, "graph_workers": args.graph_workers,
             "band_gap_model": args.band_gap_model or None, "elastic": not args.no_elastic,
             "max_batch_size": args.max_batch_size, "batch_window_s": args.batch_window_s}  # fmt: skip
    # one line each (pydantic's report was 13); on Ray the replicas, not this process, need the GPU
    options = validate_options(JudgeOptions, flags, "serve-judges", parsing=args.ray)
    console = Console(stderr=True, highlight=False)
    ray_only = {"--ray_address": args.ray_address is not None, "--replicas": args.replicas != 1, "--detach": args.detach,
                "--gpus_per_replica": args.gpus_per_replica != 0.0, "--cpus_per_replica": args.cpus_per_replica != 1.0}
    if not args.ray and (given := [flag for flag, set_ in ray_only.items() if set_]):  # a plain local server started
        raise UsageError(f"{', '.join(given)}: Ray Serve options; pass --ray as well")
    if args.ray:
        return _serve_on_ray(args, options, console)
    try:
        service = JudgeService(options, args.host, args.port)
    except (OSError, OverflowError) as exc:  # a port in use, or one outside 0-65535
        raise UsageError(f"cannot listen on {args.host}:{args.port} ({getattr(exc, 'strerror', None) or exc}); "
                         "pick another --port") from None
    service.start()
    console.print(f"matrl judges at {service.url} (loading models; GET /ready answers 200 once they are in)")
    while service.replica.judges is None and service.replica.load_error is None:
        time.sleep(0.2)
    if service.replica.load_error:
        service.stop()
        raise UsageError(f"the judges did not load: {service.replica.load_error}")
    console.print(f"ready: {service.replica.judges.mlip.name} ({options.device}), band gap "
                  f"{'on' if options.band_gap_model else 'off'}, bulk modulus {'off' if args.no_elastic else 'on'}; "
                  f"metrics at {service.url}/metrics. Ctrl-C stops.")
    service.http.wait()
    return 0


def _serve_on_ray(args: argparse.Namespace, options, console) -> int:
    from rlplugs import UsageError

    if args.detach and not args.ray_address:
        raise UsageError("--detach needs --ray_address: a Ray instance this command starts ends with it")
    try:
        from matrl import serve_ray
    except ImportError as exc:
        raise UsageError(f"--ray needs Ray Serve ({exc}): pip install 'rlplugs[matrl-ray]'") from None
    url = serve_ray.deploy(options, address=args.ray_address, replicas=args.replicas,
                           gpus_per_replica=args.gpus_per_replica, cpus_per_replica=args.cpus_per_replica,
                           host=args.host, port=args.port)
    console.print(f"matrl judges on Ray Serve at {url}: {args.replicas} replica(s)")
    if args.detach:
        return 0
    console.print("Ctrl-C removes the app and stops Ray (use --detach to leave it running)")
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        serve_ray.shutdown()
    return 0


def _sun_eval(args: argparse.Namespace) -> int:
    from rlplugs import UsageError, check_counts, parse_json_options, run_eval

    from matrl.tasks import TASK_KINDS

    check_counts(args, rollouts=1, rows=1, render=0)
    options = parse_json_options(args.env_args, "--env_args") or {}
    if given := [key for key in ("mlip", "task_mix") if key in options]:  # overwritten by --judge / --track before
        raise UsageError(f"--env_args {', '.join(given)}: sun-eval sets them from --judge and --track; use those flags")
    if args.track != "all":
        if args.track not in TASK_KINDS:
            raise UsageError(f"unknown track {args.track!r}; tracks: {', '.join(TASK_KINDS)} or all")
        options["task_mix"] = {args.track: 1.0}
    options["mlip"] = args.judge
    options.setdefault("eval_rows", args.rows)
    run_eval("matrl", args.out, env_args=options, split=args.split, model=args.model, policy=args.policy,
             rows=args.rows, samples=args.rollouts, render=args.render)
    return 0
