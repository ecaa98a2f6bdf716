"""Checkpoint fixups and training guards, each born of a failure seen in a real RL run.

- :mod:`.dtype`: make ``config.json`` dtype labels and safetensors shards agree (``rlplugs ckpt
  fix-dtype``); :mod:`.export` does it to a TRL run's final export;
- :mod:`.resume`: resume from weights with a fresh optimizer, keeping step, LR schedule, RNG and
  data order; :mod:`.segments` records each stretch of training between restarts;
- :mod:`.dcp_repair`: add the optimizer state a strict DCP load expects (prime-rl ``step_N``);
- :mod:`.guards`: stop a run whose bf16 updates round away;
- :mod:`.truncation`: watch the share of completions clipped at the length limit.

:mod:`.plugin` registers them all; :mod:`.cli` is ``rlplugs ckpt``.
"""
