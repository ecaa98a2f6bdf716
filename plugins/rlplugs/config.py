"""Strict option validation for plugin configs.

Configs are pydantic models with ``extra="forbid"``; this module turns pydantic's generic
"Extra inputs are not permitted" into an error that names the owner, the bad key, the closest
valid keys and the full list, so a typo in a YAML or TOML file fails before any compute is spent.
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo

from rlplugs.errors import InvalidOptionsError, UnknownOptionError, did_you_mean

M = TypeVar("M", bound=BaseModel)


class StrictConfig(BaseModel):
    """Base class for every rlplugs config: unknown keys are errors, values are validated, and a
    number must be finite (``inf`` passed ``gt=0`` bounds, then broke a timer in a worker, and
    travels as ``null`` in JSON)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def validate_options(model: type[M], options: dict[str, Any], owner: str = "", *, parsing: bool = False,
                     keys: Mapping[str, str] | None = None) -> M:
    """``model(**options)`` with errors that say which key is wrong and what was meant.
    ``parsing``: a trainer is only reading its config (verifiers and prime-rl validate the taskset
    options wherever they parse the TOML); validators that reach outside the process, such as a
    service that must answer, leave that to the build (:func:`only_parsing`). ``keys``: the key a
    user typed for an option, where it is another (a verifiers taskset's ``env_task``)."""
    if found := unknown_keys(model, options):
        raise UnknownOptionError(unknown_options_message(*found, owner=owner))
    try:
        return model.model_validate(options, context={"rlplugs_parsing": parsing})
    except ValidationError as exc:
        where = f"'{owner}' " if owner else ""
        raise InvalidOptionsError(f"invalid {where}options: {one_line(exc, keys)}") from exc


def only_parsing(info: ValidationInfo) -> bool:
    """In a field validator (``def check(cls, value, info)``): True while a config is only being
    parsed (``validate_options(..., parsing=True)``), when a check that reaches a service waits."""
    return bool((info.context or {}).get("rlplugs_parsing"))


def field_kinds(annotation: Any) -> tuple[Any, ...]:
    """The types a field accepts: the members of a union (``tuple[str, ...] | None``), else itself."""
    return get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)


def nested_model(annotation: Any) -> type[BaseModel] | None:
    """The options model a field holds (``retry: RetryPolicy``, ``RuleOptions | None``), if any."""
    return next((k for k in field_kinds(annotation) if isinstance(k, type) and issubclass(k, BaseModel)), None)


def unknown_keys(model: type[BaseModel], data: Any, path: str = "") -> tuple[list[str], list[str], str] | None:
    """The first keys of ``data`` that ``model`` does not define, top level first, then inside each
    nested options model (``retry.attempt``): (those keys, the valid keys beside them, their dotted path)."""
    if not isinstance(data, Mapping):
        return None
    unknown = [k for k in data if k not in model.model_fields]
    if unknown:
        return unknown, list(model.model_fields), path
    for name, value in data.items():
        nested = nested_model(model.model_fields[name].annotation)
        if nested is not None and (found := unknown_keys(nested, value, f"{path}{name}.")):
            return found
    return None


def unknown_options_message(unknown: list[str], valid: list[str], path: str = "", owner: str = "") -> str:
    """The one message for option keys nobody defines: each with its closest valid keys, then all
    (``path``: where they are nested, ``retry.``)."""
    where = f" for '{owner}'" if owner else ""
    return (
        f"unknown option{'s' if len(unknown) > 1 else ''}{where}: {did_you_mean(unknown, valid, prefix=path)}. "
        f"Valid options: {', '.join(sorted(path + k for k in valid))}."
    )


def one_line(exc: ValidationError, keys: Mapping[str, str] | None = None) -> str:
    """pydantic's multi-line report as one line a user can act on: ``key: what is wrong`` per error
    (the value is shown where the message does not already say what was wrong with it); ``keys``
    renames a top-level field to the key the user typed for it."""
    parts = []
    for error in exc.errors():
        loc = [str(p) for p in error["loc"]]
        if loc and keys:
            loc[0] = keys.get(loc[0], loc[0])
        where = ".".join(loc)
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] != "value_error":
            got = repr(error["input"])
            message += f" (got {got if len(got) <= 80 else got[:77] + '...'})"
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def parse_json_options(value: str | dict[str, Any] | None, flag: str) -> dict[str, Any] | None:
    """Options given on a command line as a JSON object (``--env_args '{"rows": 4}'``); a dict
    passes through (YAML configs already parsed it). Errors name the flag and what is wrong."""
    if value is None or isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidOptionsError(f"{flag} is not valid JSON ({exc.msg} at position {exc.pos}): {value!r}") from exc
    if not isinstance(parsed, dict):
        raise InvalidOptionsError(f"{flag} must be a JSON object like '{{\"rows\": 4}}', got {value!r}")
    return parsed
