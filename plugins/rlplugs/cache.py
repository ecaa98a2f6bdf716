"""Where rlplugs keeps what it builds once and reuses (tokenizers, tiny models, generated datasets).

One place so every plugin caches under the same root, which users move with ``RLPLUGS_CACHE``.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$RLPLUGS_CACHE``, or ``~/.cache/rlplugs``."""
    return Path(os.environ.get("RLPLUGS_CACHE", Path.home() / ".cache" / "rlplugs"))
