"""Tool calls as Qwen3.5 writes them, and the tool schemas the agent is shown.

Qwen3.5's chat template (TRL's ``qwen3_5_think.jinja``) renders a call as::

    <tool_call>
    <function=evaluate_structure>
    <parameter=structure>
    {"lattice": ..., "species": ..., "frac_coords": ...}
    </parameter>
    </function>
    </tool_call>

so that is what a Qwen3.5 policy emits. We also accept the Qwen3/Hermes JSON form
(``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``) because SFT data in the wild uses
both. Calls inside the thinking block (before ``</think>``) are ignored: thinking is not acting.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from matrl.untrusted_json import UntrustedJSONError, loads

MAX_CALLS_PER_TURN = 4
MAX_CALL_CHARS = 50_000  # a structure is at most 20,000 characters (matrl.structures)
MAX_CALL_DEPTH = 16  # {"name", "arguments": {"structure": {"lattice": [[...]]}}} is 5 deep

TOOLS = [
    {"type": "function", "function": {
        "name": "evaluate_structure",
        "description": "Relax a candidate crystal with the MLIP judge (20 FIRE steps, fmax 0.1 eV/Å) and report energy "
                       "per atom, energy above the reference hull, validity findings, novelty, and on request band gap "
                       "and bulk modulus. Counts against the evaluation budget.",
        "parameters": {"type": "object", "required": ["structure"], "properties": {
            "structure": {"type": "string", "description": "CIF text, or JSON {lattice, species, frac_coords}"},
            "properties": {"type": "array", "items": {"type": "string", "enum": ["band_gap", "bulk_modulus"]},
                           "description": "extra properties to predict"},
        }},
    }},
    {"type": "function", "function": {
        "name": "submit",
        "description": "Submit the final structure; this ends the episode and it is scored.",
        "parameters": {"type": "object", "required": ["structure"], "properties": {
            "structure": {"type": "string", "description": "CIF text, or JSON {lattice, species, frac_coords}"},
        }},
    }},
    {"type": "function", "function": {
        "name": "retrieve_materials",
        "description": "Look up known reference materials by reduced formula (e.g. 'NaCl') or element list "
                       "(e.g. 'Li,Fe,O'). Free: does not count as an evaluation.",
        "parameters": {"type": "object", "required": ["query"], "properties": {
            "query": {"type": "string", "description": "a reduced formula or comma-separated elements"},
        }},
    }},
]
TOOL_NAMES = {t["function"]["name"] for t in TOOLS}


@dataclass
class ToolCall:
    name: str
    arguments: dict = field(default_factory=dict)
    error: str | None = None  # set when the call's syntax is broken; the message says how to fix it


_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.S)


def acting_text(text: str) -> str:
    """The part of a reply after the thinking block (the template strips thinking the same way)."""
    return text.split("</think>")[-1]


def parse_tool_calls(text: str) -> list[ToolCall]:
    """All tool calls in the acting part of ``text`` (at most MAX_CALLS_PER_TURN), in order."""
    calls = []
    for body in _BLOCK.findall(acting_text(text))[:MAX_CALLS_PER_TURN]:
        calls.append(_parse_block(body.strip()))
    return calls


def _parse_block(body: str) -> ToolCall:
    if body.startswith("{"):
        try:
            data = loads(body, MAX_CALL_DEPTH, MAX_CALL_CHARS)
        except UntrustedJSONError as exc:
            return ToolCall("", error=f"tool call {exc}; use the <function=...> format")
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return ToolCall("", error="tool call JSON needs a 'name' string and an 'arguments' object")
        args = data.get("arguments", {})
        if isinstance(args, str):
            try:
                args = loads(args, MAX_CALL_DEPTH, MAX_CALL_CHARS)
            except UntrustedJSONError as exc:
                return ToolCall(data["name"], error=f"'arguments' is a string that is not acceptable JSON: {exc}")
        if not isinstance(args, dict):
            return ToolCall(data["name"], error="'arguments' must be an object")
        return ToolCall(data["name"], {k: _as_text_or_value(v) for k, v in args.items()})
    match = _FUNCTION.search(body)
    if not match:
        return ToolCall("", error="no <function=NAME> inside <tool_call>; write <tool_call>\\n<function=submit>\\n"
                                  "<parameter=structure>\\n...\\n</parameter>\\n</function>\\n</tool_call>")
    name, inner = match.group(1), match.group(2)
    args = {key: _decode_parameter(value) for key, value in _PARAMETER.findall(inner)}
    return ToolCall(name, args)


def _decode_parameter(value: str):
    """Parameter values are text; JSON lists (e.g. properties) are decoded, structures stay text
    (a list that does not decode stays text too; the tool that reads it says what is wrong)."""
    stripped = value.strip()
    if stripped.startswith("["):
        try:
            return loads(stripped, MAX_CALL_DEPTH, MAX_CALL_CHARS)
        except UntrustedJSONError:
            return stripped
    return stripped


def _as_text_or_value(value):
    # a structure given as a JSON object inside JSON arguments is re-serialised to the text form
    return json.dumps(value) if isinstance(value, dict) else value


def format_call(name: str, **arguments) -> str:
    """A tool call in Qwen3.5's format (used by the scripted reference policy and tests)."""
    params = "".join(
        f"<parameter={k}>\n{json.dumps(v) if isinstance(v, (list, dict)) else v}\n</parameter>\n" for k, v in arguments.items()
    )
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
