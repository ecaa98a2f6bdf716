"""Process reward models for multi-turn environments: labels, model, training, guidance.

- :mod:`rlplugs.builtins.prm.labels`: turn-level rows from rollouts (Monte-Carlo or outcome-propagated);
- :mod:`rlplugs.builtins.prm.model`: causal LM + scalar head, BCE on soft labels, save/load, scorer;
- :mod:`rlplugs.builtins.prm.train`: ``rlplugs prm train`` (transformers ``Trainer``, optional LoRA);
- :mod:`rlplugs.builtins.prm.guidance`: ``best-of-n`` and ``beam`` search over any :class:`~rlplugs.episode.Episode`;
- :mod:`rlplugs.builtins.prm.plugin`: registration of the guidance strategies and the CLI commands.
"""
