"""A plugin that fails on import: the registry must report it by name and load the others."""

raise ImportError("rlplugs_testplugins.broken is broken on purpose")
