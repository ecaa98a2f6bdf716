"""Adapters to trainers: each runs a registered environment inside a trainer's own loop.

- :mod:`rlplugs.adapters.trl`: TRL's GRPO and SFT trainers (``trl grpo --env``, ``rlplugs grpo|sft``);
- :mod:`rlplugs.adapters.verifiers`: verifiers v1 tasksets and envs (prime-rl, ``vf-eval``).
"""
