"""The rules where a game deliberately keeps its own behaviour instead of clembench 2.0's.

Every game follows clembench 2.0's rules by default; the few differences that remain are named
here, each with why it is kept and how to turn it off (``env_args: {rule_options: {...}}``). The
options travel inside each instance (``instance["rule_options"]``), so an episode rebuilt from a
dataset row plays by the rules its row was made with. The games README has the full table
(rule | clembench 2.0 | ours | option).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from rlplugs import StrictConfig, did_you_mean


class RuleOptions(StrictConfig):
    """Options of the games' rules (unknown keys are errors)."""

    taboo_spelling_check: bool = Field(
        True,
        description="taboo: a clue word that spells a banned word backwards, or a run of single "
        "letters that spells it either way, breaks the rule. clembench 2.0 only stems the clue's "
        "words, so a describer (ours included, before this check) can win by spelling the target; "
        "set false for clembench's check alone",
    )
    taboo_stopwords: tuple[str, ...] = Field(
        (),
        description="taboo: words dropped from a clue before the stem check. clembench 2.0 drops "
        "NLTK's English stopwords, a corpus NLTK downloads at run time (no package ships it offline); "
        "pass that list here to match it. Default: none, so every word is checked (stricter only "
        "when a banned word is itself a stopword)",
    )

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, options: Any) -> Any:
        unknown = [k for k in options if k not in cls.model_fields] if isinstance(options, dict) else []
        if unknown:  # nested in the env's options: say what was meant, as for top-level keys
            raise ValueError(f"unknown option {did_you_mean(unknown, list(cls.model_fields))}; "
                             f"valid options: {', '.join(cls.model_fields)}")
        return options


def rule_options(instance: dict[str, Any]) -> RuleOptions:
    """The options an instance was made with (clembench 2.0's rules plus the defaults above)."""
    return RuleOptions(**instance.get("rule_options", {}))
