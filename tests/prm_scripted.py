"""A scripted batch policy for PRM tests: sample ``j`` of every conversation is ``texts[j % len]``
(``sampled[j % len]`` instead while its ``temperature`` is above 0, as a guidance's sampling copy sets it).

It lets a test know exactly which candidate styles the guidance and the labeller see, so the
real parts under test (Monte-Carlo labelling, a really trained PRM, the search) can be checked
against exact expected outcomes.
"""

from __future__ import annotations


class ScriptedPolicy:
    def __init__(self, texts: list[str], sampled: list[str] | None = None):
        self.texts = texts
        self.sampled = sampled or texts
        self.temperature = 0.0
        self.calls: list[tuple[int, int]] = []  # (conversations, n) of every generate() call

    def generate(self, conversations, n=1):
        self.calls.append((len(conversations), n))
        texts = self.sampled if self.temperature > 0 else self.texts
        return [[texts[j % len(texts)] for j in range(n)] for _ in conversations]
