"""A plugin whose hook name has a typo: it would register nothing, so the registry reports it broken."""

from __future__ import annotations

import rlplugs
from rlplugs import Registration


@rlplugs.hookimpl
def rlplugs_register_enviroments():
    return [Registration("misspelled-test", lambda: None, "never registered")]
