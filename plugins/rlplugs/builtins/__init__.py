"""Plugins that ship with rlplugs: registered through the ``rlplugs`` entry-point group like any
other plugin and held to the same contract (they import only the public ``rlplugs`` namespace).

- :mod:`rlplugs.builtins.rewards`: reward components any environment can add by name;
- :mod:`rlplugs.builtins.checkpoint`: checkpoint fixups and training guards (``rlplugs ckpt``);
- :mod:`rlplugs.builtins.prm`: process reward models and the guidance they drive (``rlplugs prm``).
"""
