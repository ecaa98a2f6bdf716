"""Process reward models for multi-turn environments: labels, model, training, guidance.

- :mod:`rlplugs.prm.labels`: turn-level rows from rollouts (Monte-Carlo or outcome-propagated);
- :mod:`rlplugs.prm.model`: causal LM + scalar head, BCE on soft labels, save/load, scorer;
- :mod:`rlplugs.prm.train`: ``rlplugs prm train`` (transformers ``Trainer``, optional LoRA);
- :mod:`rlplugs.prm.guidance`: ``best-of-n`` and ``beam`` search over any :class:`~rlplugs.episode.Episode`;
- :mod:`rlplugs.prm.plugin`: registration of the guidance strategies and the CLI commands.
"""
