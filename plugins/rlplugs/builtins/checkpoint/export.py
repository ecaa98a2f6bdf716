"""The final export of a TRL/transformers run, written in the dtype it will be served in.

Why: training with fp32 master weights (the safe choice, see :mod:`rlplugs.builtins.checkpoint.guards`)
saves fp32 tensors under a ``"dtype": "float32"`` label, and whatever loads the export with
``dtype="auto"`` then needs twice the memory. At the end of training this callback saves the
model (or PEFT adapter) and its tokenizer/processor to ``<output_dir>/<subdir>`` and runs
:func:`rlplugs.builtins.checkpoint.dtype.fix_dtype` on it. Resumable ``checkpoint-N`` folders keep fp32.
"""

from __future__ import annotations

import logging
from pathlib import Path

from transformers import TrainerCallback

from rlplugs.builtins.checkpoint.dtype import DtypeFixReport, fix_dtype

log = logging.getLogger(__name__)


class DtypeExportCallback(TrainerCallback):
    def __init__(self, dtype: str = "bfloat16", subdir: str | None = None):
        self.dtype = dtype
        self.subdir = subdir or f"export-{dtype}"
        self.report: DtypeFixReport | None = None

    def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if not state.is_world_process_zero or model is None:
            return
        out = Path(args.output_dir) / self.subdir
        model.save_pretrained(out)
        if processing_class is not None:
            processing_class.save_pretrained(out)
        self.report = fix_dtype(out, self.dtype)
        log.info("final export in %s at %s (%d tensors cast)", self.dtype, out, self.report.tensors_cast)
