"""``rlplugs ckpt ...``: the checkpoint tools for trainers without hooks (prime-rl) and for humans.

    rlplugs ckpt fix-dtype DIR [--dtype bfloat16]
    rlplugs ckpt repair-optimizer STEP_DIR
    rlplugs ckpt strip-optimizer CHECKPOINT [--out DIR]
    rlplugs ckpt segments RUN_DIR [--begin STEP (--fresh-optimizer | --optimizer-carried)] [--end STEP --reason TEXT]

Each returns 0 on success and 2, with the reason on stderr, when the checkpoint is refused (it is
then left as it was).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from rlplugs.builtins.checkpoint.dtype import TARGET_DTYPES


def _console(err: bool = False) -> Console:
    return Console(stderr=err, highlight=False, soft_wrap=True)


def _fail(exc: Exception) -> int:
    _console(err=True).print(f"[red]refused:[/red] {escape(str(exc))}")
    return 2


def cmd_fix_dtype(args: argparse.Namespace) -> int:
    from rlplugs.builtins.checkpoint.dtype import CheckpointError, fix_dtype

    try:
        report = fix_dtype(args.dir, args.dtype)
    except CheckpointError as exc:
        return _fail(exc)
    out = _console()
    if not report.changed:
        out.print(f"{args.dir}: already {args.dtype}, nothing to do")
        return 0
    out.print(
        f"{args.dir}: {report.tensors_cast} tensors cast to {args.dtype} in {len(report.shards_rewritten)} shard(s)"
    )
    if report.config_keys_rewritten:
        out.print(f"config.json: {', '.join(report.config_keys_rewritten)} -> {args.dtype}")
    return 0


def cmd_repair_optimizer(args: argparse.Namespace) -> int:
    from rlplugs.builtins.checkpoint.dcp_repair import RepairError, repair_optimizer_state

    try:
        report = repair_optimizer_state(args.step_dir, args.model_prefix, args.optimizer_prefix)
    except RepairError as exc:
        return _fail(exc)
    out = _console()
    if not report.params_repaired:
        out.print(f"{report.checkpoint}: every parameter already has optimizer state, nothing to do")
        return 0
    out.print(f"{report.checkpoint}: added never-stepped optimizer state for {len(report.params_repaired)} parameters "
              f"({len(report.keys_added)} keys, file {report.file_written})")  # fmt: skip
    for fqn in report.params_repaired:
        out.print(f"  {fqn}")
    return 0


def cmd_strip_optimizer(args: argparse.Namespace) -> int:
    from rlplugs.builtins.checkpoint.resume import ResumeError, strip_optimizer

    try:
        out_dir = strip_optimizer(args.checkpoint, args.out)
    except ResumeError as exc:
        return _fail(exc)
    _console().print(
        f"weights-only checkpoint: {out_dir}\n"
        f"resume with --resume_from_checkpoint {out_dir} and the 'fresh-optimizer-resume' fixup, which restores "
        "the LR schedule position (the trainer skips scheduler.pt when optimizer.pt is absent)"
    )
    return 0


def cmd_segments(args: argparse.Namespace) -> int:
    from rich.table import Table

    from rlplugs.builtins.checkpoint.segments import SegmentLog

    try:
        if not Path(args.run_dir).is_dir():  # recording made the folder: a typo started a new chain
            raise ValueError(f"{args.run_dir}: no such run folder; give the run's --output_dir")
        if args.begin is None and (args.optimizer_carried is not None or args.resumed_from is not None):
            raise ValueError("--optimizer-carried, --fresh-optimizer and --resumed-from describe a new segment: pass --begin STEP")
        if args.end is None and args.reason != "ended":
            raise ValueError("--reason says why a segment ended: pass --end STEP")
        if args.begin is not None and args.end is not None and args.begin > args.end:
            raise ValueError(f"--begin {args.begin} is after --end {args.end}: a new segment resumes from a "
                             "checkpoint the ended one wrote, at or before the step it ended")
        segments = SegmentLog(args.run_dir)
        if args.end is not None:
            segments.end(args.end, args.reason)
        if args.begin is not None:
            segments.begin(args.begin, args.optimizer_carried, args.resumed_from)
    except ValueError as exc:
        return _fail(exc)
    if not segments.segments:
        _console().print(f"{args.run_dir}: no segments recorded")
        return 0
    table = Table(title=f"training segments of {args.run_dir}")
    for col in ("#", "steps", "optimizer", "ended because", "resumed from"):
        table.add_column(col)
    for i, s in enumerate(segments.segments, 1):
        end = str(s.end_step) if s.end_step is not None else f"{s.last_step}… (running)"
        carried = {True: "carried", False: "fresh", None: "unknown"}[s.optimizer_carried]
        table.add_row(str(i), f"{s.start_step} → {end}", carried, s.end_reason or "still running", s.resumed_from or "")
    _console().print(table)
    return 0


def add_ckpt_command(subparsers: argparse._SubParsersAction) -> None:
    ckpt = subparsers.add_parser("ckpt", help="checkpoint fixups: dtype, optimizer state, resume, segments")
    sub = ckpt.add_subparsers(dest="ckpt_command", required=True)

    p = sub.add_parser("fix-dtype", help="rewrite config.json dtype labels (all levels) and cast safetensors shards")
    p.add_argument("dir", help="a Hugging Face checkpoint folder (config.json + *.safetensors)")
    p.add_argument("--dtype", default="bfloat16", help=f"target dtype: {', '.join(TARGET_DTYPES)}")
    p.set_defaults(func=cmd_fix_dtype)

    p = sub.add_parser("repair-optimizer", help="add missing per-parameter optimizer state to a DCP checkpoint")
    p.add_argument("step_dir", help="prime-rl checkpoints/step_N (or the DCP folder holding .metadata)")
    p.add_argument("--model-prefix", default="app.model.", help="flattened key prefix of the model state")
    p.add_argument("--optimizer-prefix", default="app.optimizers.", help="flattened key prefix of the optimizer state")
    p.set_defaults(func=cmd_repair_optimizer)

    p = sub.add_parser(
        "strip-optimizer", help="weights-only copy of a TRL/transformers checkpoint for a fresh-optimizer resume"
    )
    p.add_argument("checkpoint", help="a checkpoint-N folder")
    p.add_argument("--out", default=None, help="output folder (default <checkpoint>-fresh-optimizer)")
    p.set_defaults(func=cmd_strip_optimizer)

    p = sub.add_parser("segments", help="print (or record, for hook-less trainers) the chain of training segments")
    p.add_argument("run_dir", help="the run's output folder")
    p.add_argument("--begin", type=int, metavar="STEP", help="record a new segment starting at STEP")
    carried = p.add_mutually_exclusive_group()
    carried.add_argument("--optimizer-carried", dest="optimizer_carried", action="store_true", default=None)
    carried.add_argument("--fresh-optimizer", dest="optimizer_carried", action="store_false")
    p.add_argument("--resumed-from", default=None, help="checkpoint the new segment starts from")
    p.add_argument("--end", type=int, metavar="STEP", help="close the open segment at STEP")
    p.add_argument("--reason", default="ended", help="why the segment ended (with --end)")
    p.set_defaults(func=cmd_segments)
