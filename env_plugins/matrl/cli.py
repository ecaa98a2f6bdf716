"""``rlplugs matrl ...``: the judge service and the SUN benchmark.

    rlplugs matrl serve-judges --port 8765 --device cuda [--band_gap_model DIR]
    rlplugs matrl sun-eval --track formula --rollouts 4 --rows 32 --judge sevenn --policy reference --out runs/sun

``sun-eval`` is the generic ``rlplugs eval`` with the matrl options a SUN report needs: one track
(task kind) or all, N rollouts per prompt, and the judging MLIP (``sevenn`` = held-out judge; its
hull is rebuilt on SevenNet's own scale). The report carries validity/uniqueness/novelty/stability/
SUN rates per track, writes the submitted structures as CIF and draws the best ones.
"""

from __future__ import annotations

import argparse
import json
import logging

from matrl.datafiles import MEGNET_BANDGAP

log = logging.getLogger(__name__)


def add_commands(subparsers) -> None:
    matrl = subparsers.add_parser("matrl", help="matrl tools: judge service, SUN benchmark")
    sub = matrl.add_subparsers(dest="matrl_command", required=True)

    serve = sub.add_parser("serve-judges", help="serve the MLIP, band-gap and elastic judges over HTTP")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--device", default="cpu")
    serve.add_argument("--graph_workers", type=int, default=0,
                       help="processes building CHGNet graphs for batched relaxations (about 2x on an H200 with 14)")
    serve.add_argument("--band_gap_model", default=str(MEGNET_BANDGAP),
                       help="MatGL-format MEGNet folder (model.json + state.pt); default: the shipped weights; '' = off")
    serve.add_argument("--batch_window_s", type=float, default=0.02, help="how long relax requests wait to share a batch")
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
    from matrl.judges import CHGNetJudge, EOSElasticJudge, MEGNetBandGapJudge
    from matrl.service import JudgeService

    mlip = CHGNetJudge(device=args.device, graph_workers=args.graph_workers)
    band_gap = MEGNetBandGapJudge(args.band_gap_model) if args.band_gap_model else None
    service = JudgeService(mlip, band_gap, EOSElasticJudge(mlip), args.host, args.port, args.batch_window_s)
    log.warning("matrl judges serving at %s (band gap: %s)", service.url, "on" if band_gap else "off")
    try:
        service.server.serve_forever()
    except KeyboardInterrupt:
        service.stop()
    return 0


def _sun_eval(args: argparse.Namespace) -> int:
    from rlplugs.cli import UsageError, cmd_eval, parse_env_args

    from matrl.tasks import TASK_KINDS

    options = parse_env_args(args.env_args)
    if args.track != "all":
        if args.track not in TASK_KINDS:
            raise UsageError(f"unknown track {args.track!r}; tracks: {', '.join(TASK_KINDS)} or all")
        options["task_mix"] = {args.track: 1.0}
    options["mlip"] = args.judge
    options.setdefault("eval_rows", args.rows)
    eval_args = argparse.Namespace(
        env="matrl", env_args=json.dumps(options), split=args.split, model=args.model, policy=args.policy,
        tokenizer=None, rows=args.rows, samples=args.rollouts, temperature=None, top_p=None, max_new_tokens=None,
        enable_thinking=None, batch_size=8, seed=0, guidance=None, n=None, beam_width=None, prm=None,
        render=args.render, out=args.out,
    )
    return cmd_eval(eval_args)
