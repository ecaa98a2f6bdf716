"""The TRL adapter: train TRL's GRPO and SFT trainers on any registered rlplugs environment.

- :func:`rlplugs.adapters.trl.launch.run_training` — what ``rlplugs grpo|sft`` and ``trl grpo|sft --env`` run;
- :mod:`rlplugs.adapters.trl.grpo`, :mod:`rlplugs.adapters.trl.sft` — the training scripts accelerate starts;
- :class:`rlplugs.adapters.trl.trainer.EnvGRPOTrainer` — GRPOTrainer with the zero-spread filter;
- :class:`rlplugs.adapters.trl.rewards.EnvRewardFunctions` — an EnvSpec's components as TRL reward functions;
- :func:`rlplugs.adapters.trl.rollout.make_episode_rollout` — multi-turn episodes as a TRL ``rollout_func``;
- :mod:`rlplugs.adapters.trl.startup_hook` — the opt-in ``trl`` CLI hook installed by ``rlplugs_trl_hook.pth``.

Nothing is imported here: the startup hook must stay cheap.
"""
