"""The matrl episode: propose -> evaluate -> refine -> submit, as a multi-turn tool-use chat.

Implements :class:`rlplugs.episode.Episode`. The agent (seat ``"agent"``) answers each observation
with thinking plus tool calls; :meth:`MatrlEpisode.step` runs the tools and appends one
``{"role": "tool"}`` message per call (the Qwen3.5 template wraps those in ``<tool_response>``, so
the thinking of every agent turn after the task request is kept in context). Limits: ``max_turns``
agent turns and ``max_evaluations`` calls of ``evaluate_structure``; ``retrieve_materials`` is free.
The episode ends on a successful ``submit`` or when the turn budget is spent (no submission
scores zero). Every malformed input gets a tool message saying what to fix.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from matrl.cell_limits import check_cell_limits
from matrl.evaluation import Evaluator
from matrl.structures import StructureInputError, parse_structure, structure_to_json
from matrl.toolcalls import TOOL_NAMES, TOOLS, ToolCall, parse_tool_calls
from rlplugs import Message, Score, StepResult

SYSTEM_PROMPT = """You are a materials scientist designing novel inorganic crystal structures that are \
thermodynamically stable and distinct from known materials. You work in turns: propose a candidate, \
evaluate it with the machine-learned interatomic potential, refine it using the feedback, and submit \
your best structure.

Tools (call them in this exact format; reason first, then call; nothing after the call):
<tool_call>
<function=TOOL_NAME>
<parameter=PARAM_NAME>
value
</parameter>
</function>
</tool_call>

{tools}

Structures are CIF text or JSON: {{"lattice": [[ax,ay,az],[bx,by,bz],[cx,cy,cz]] (Å) or \
{{"a":..,"b":..,"c":..,"alpha":..,"beta":..,"gamma":..}}, "species": ["Na","Cl"], \
"frac_coords": [[0,0,0],[0.5,0.5,0.5]]}}.
Budget: {max_turns} turns, {max_evaluations} evaluations, at most {max_atoms} atoms per cell. \
A structure is rewarded for being valid (no atoms closer than 0.5 Å, charge balanced), unique \
among your attempts, novel (no known match) and stable (energy above hull <= 0.1 eV/atom after \
relaxation), and for meeting the task's condition."""


def system_prompt(max_turns: int, max_evaluations: int, max_atoms: int) -> str:
    tools = "\n".join(json.dumps(t["function"]) for t in TOOLS)
    return SYSTEM_PROMPT.format(tools=tools, max_turns=max_turns, max_evaluations=max_evaluations, max_atoms=max_atoms)


class MatrlEpisode:
    """One design episode for one task row."""

    trained_seats = ("agent",)

    def __init__(self, row: dict[str, Any], evaluator: Evaluator, scorer, max_turns: int = 10,
                 max_evaluations: int = 8):
        self.row = row
        self.evaluator = evaluator
        self.scorer = scorer  # callable(row, submission) -> dict[str, Score]
        self.max_turns, self.max_evaluations = max_turns, max_evaluations
        self.max_atoms = int(row.get("max_atoms", 20))
        self.messages: list[Message] = [dict(m) for m in row["prompt"]]
        self.turns = 0
        self.evaluations: list[dict[str, Any]] = []
        self.submission: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self._scores: dict[str, Score] | None = None

    # -- Episode protocol ---------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def current_seat(self) -> str:
        return "agent"

    def observation(self) -> list[Message]:
        return [dict(m) for m in self.messages]

    def transcript(self, seat: str = "agent") -> list[Message]:
        return self.observation()

    def step(self, text: str) -> StepResult:
        if self.done:
            raise RuntimeError("step() on a finished episode")
        self.turns += 1
        self.messages.append({"role": "assistant", "content": text})
        calls = parse_tool_calls(text)
        if not calls:
            self._reply("No tool call found after your reasoning. Call evaluate_structure, retrieve_materials or "
                        "submit using the <tool_call><function=...> format.")
        for call in calls:
            if self.done:
                break
            self._reply(self._run(call))
        if not self.done and self.turns >= self.max_turns:
            self.finish_reason = "turn_limit"
        return StepResult(self.done, {"turn": self.turns, "evaluations": len(self.evaluations),
                                      "finish_reason": self.finish_reason})

    def scores(self) -> dict[str, Score]:
        if not self.done:
            raise RuntimeError("scores() before the episode ended")
        if self._scores is None:
            self._scores = self.scorer(self.row, self.submission)
        return dict(self._scores)

    def clone(self) -> MatrlEpisode:
        twin = copy.copy(self)  # copies the game state below; shares the process-level judges
        twin.evaluator = self.evaluator  # (copy.copy goes through __getstate__, which drops it)
        twin.row = copy.deepcopy(self.row)
        twin.messages = copy.deepcopy(self.messages)
        twin.evaluations = copy.deepcopy(self.evaluations)
        twin.submission = copy.deepcopy(self.submission)
        twin._scores = dict(self._scores) if self._scores is not None else None
        return twin

    def __getstate__(self) -> dict[str, Any]:
        # TRL gathers finished episodes across processes (pickle): ship the game state, not the
        # judges (models, caches) that the evaluator holds; scores() needs only the scorer.
        state = dict(self.__dict__)
        state["evaluator"] = None
        return state

    def record(self) -> dict[str, Any]:
        return {"task_id": self.row.get("task_id"), "task": self.row.get("task"), "target": self.row.get("target"),
                "turns": self.turns, "evaluations": self.evaluations, "submission": self.submission,
                "finish_reason": self.finish_reason, "messages": self.messages}

    # -- tools --------------------------------------------------------------------------------
    def _reply(self, content: str) -> None:
        self.messages.append({"role": "tool", "content": content})

    def _run(self, call: ToolCall) -> str:
        if call.error:
            return f"Tool call not understood: {call.error}"
        if call.name not in TOOL_NAMES:
            return f"Unknown tool {call.name!r}. Available tools: {', '.join(sorted(TOOL_NAMES))}."
        if call.name == "retrieve_materials":
            query = call.arguments.get("query", "")
            if not isinstance(query, str):
                return "retrieve_materials takes a 'query' string: a reduced formula like 'NaCl' or elements like 'Na,Cl'."
            return self._retrieve(query)
        structure_text = call.arguments.get("structure")
        if not isinstance(structure_text, str):
            return f"{call.name} needs a 'structure' parameter (CIF text or JSON)."
        try:
            structure = parse_structure(structure_text, self.max_atoms)
            check_cell_limits(structure)
        except StructureInputError as exc:
            return f"Structure rejected: {exc}"
        if call.name == "evaluate_structure":
            wanted = _properties(call.arguments.get("properties"))
            if isinstance(wanted, str):
                return wanted
            return self._evaluate(structure, wanted)
        return self._submit(structure)

    def _evaluate(self, structure, wanted: tuple[str, ...]) -> str:
        if len(self.evaluations) >= self.max_evaluations:
            return (f"Evaluation budget spent ({self.max_evaluations} of {self.max_evaluations}). "
                    "Submit your best structure now.")
        result = self.evaluator.evaluate(structure, wanted)
        self.evaluations.append(result)
        left = self.max_evaluations - len(self.evaluations)
        return json.dumps({**result, "evaluations_left": left, "turns_left": self.max_turns - self.turns})

    def _submit(self, structure) -> str:
        kind = self.row.get("task")
        wanted = ("band_gap",) if kind == "band_gap" else ("bulk_modulus",) if kind == "bulk_modulus" else ()
        result = self.evaluator.evaluate(structure, wanted)
        self.submission = {"structure": structure_to_json(structure), **result}
        self.finish_reason = "submitted"
        return json.dumps({"submitted": True, "formula": result["formula"]})

    def _retrieve(self, query: str) -> str:
        if not query.strip():
            return "retrieve_materials needs a 'query': a reduced formula like 'NaCl' or elements like 'Na,Cl'."
        hits = self.evaluator.judges.novelty.lookup(query)
        if not hits:
            return json.dumps({"query": query, "materials": [], "note": "no known materials for this query"})
        return json.dumps({"query": query, "reference": self.evaluator.judges.novelty.source, "materials": [
            {"name": name, "formula": s.composition.reduced_formula, "structure": structure_to_json(s)} for name, s in hits
        ]})


EXTRA_PROPERTIES = ("band_gap", "bulk_modulus")


def _properties(value) -> tuple[str, ...] | str:
    """The extra properties asked for, or a message saying what is wrong with ``value``."""
    if value is None or value == "":
        return ()
    if isinstance(value, str) and not any(c in value for c in "[]{}"):  # "band_gap, bulk_modulus"
        value = [p.strip() for p in value.split(",") if p.strip()]
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        return (f"'properties' must be a list of names from {list(EXTRA_PROPERTIES)}, e.g. [\"band_gap\"]; "
                "nothing was evaluated.")
    unknown = [p[:40] for p in value if p not in EXTRA_PROPERTIES]
    if unknown:
        return f"Unknown properties {unknown[:5]}; available: {list(EXTRA_PROPERTIES)}. Nothing was evaluated."
    return tuple(p for p in EXTRA_PROPERTIES if p in value)
