"""What the model writes: Qwen3.5 tool calls (as the real chat template renders them) and
structures as CIF/JSON, with clear, actionable errors for everything malformed."""

import json

import pytest
from pymatgen.core import Lattice, Structure

from matrl.structures import StructureInputError, parse_structure, structure_key, structure_to_json
from matrl.toolcalls import format_call, parse_tool_calls
from rlplugs.testing.tiny_models import qwen35_tokenizer_dir

NACL_JSON = json.dumps({"lattice": {"a": 5.64, "b": 5.64, "c": 5.64, "alpha": 90, "beta": 90, "gamma": 90},
                        "species": ["Na", "Cl"], "frac_coords": [[0, 0, 0], [0.5, 0.5, 0.5]]})


def test_tool_call_rendered_by_qwen35_template_parses_back():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen35_tokenizer_dir())
    messages = [
        {"role": "user", "content": "design a crystal"},
        {"role": "assistant", "content": "I will try rock salt.", "reasoning_content": "NaCl is a safe start",
         "tool_calls": [{"type": "function", "function": {"name": "evaluate_structure", "arguments": {
             "structure": NACL_JSON, "properties": ["band_gap"]}}}]},
    ]
    rendered = tok.apply_chat_template(messages, tokenize=False)
    assistant = rendered.split("<|im_start|>assistant\n")[-1]
    calls = parse_tool_calls(assistant)
    assert [c.name for c in calls] == ["evaluate_structure"]
    assert calls[0].arguments["properties"] == ["band_gap"]
    assert parse_structure(calls[0].arguments["structure"]).composition.reduced_formula == "NaCl"
    assert format_call("evaluate_structure", structure=NACL_JSON, properties=["band_gap"]) in assistant


def test_json_style_tool_call_and_thinking_are_handled():
    text = ('<think>maybe <tool_call>{"name": "submit", "arguments": {}}</tool_call></think>\n'
            '<tool_call>{"name": "submit", "arguments": {"structure": ' + json.dumps(json.loads(NACL_JSON)) + '}}</tool_call>')
    calls = parse_tool_calls(text)
    assert len(calls) == 1 and calls[0].name == "submit"  # the call inside thinking is not acted on
    assert parse_structure(calls[0].arguments["structure"]).num_sites == 2


@pytest.mark.parametrize("text, fix", [
    ("<tool_call>{not json}</tool_call>", "does not parse"),
    ("<tool_call>\n<submit>\n</tool_call>", "no <function=NAME>"),
    ('<tool_call>{"arguments": {}}</tool_call>', "needs a 'name'"),
])
def test_broken_tool_calls_carry_a_fix_it_message(text, fix):
    (call,) = parse_tool_calls(text)
    assert call.error and fix in call.error


def test_cif_and_json_forms_give_the_same_crystal():
    s = Structure.from_spacegroup("Fm-3m", Lattice.cubic(5.64), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]])
    from_cif = parse_structure(s.to(fmt="cif"))
    from_json = parse_structure(structure_to_json(s))
    assert structure_key(from_cif) == structure_key(from_json) == structure_key(s)


@pytest.mark.parametrize("text, message", [
    ("", "No structure given"),
    ("{bad", "does not parse"),
    ('{"lattice": [[1,0,0],[0,1,0]], "species": ["Na"], "frac_coords": [[0,0,0]]}', "3x3"),
    ('{"lattice": [[4,0,0],[0,4,0],[0,0,4]], "species": ["Na","Cl"], "frac_coords": [[0,0,0]]}', "same length"),
    ('{"lattice": [[4,0,0],[0,4,0],[0,0,4]], "species": ["Qq"], "frac_coords": [[0,0,0]]}', "Unknown element"),
    ('{"lattice": [[4,0,0],[8,0,0],[0,0,4]], "species": ["Na"], "frac_coords": [[0,0,0]]}', "degenerate"),
    ("data_x\n_cell_length_a 4\n_cell_length_b oops\n", "CIF"),
    ("hello", "neither JSON"),
])
def test_malformed_structures_are_rejected_with_a_reason(text, message):
    with pytest.raises(StructureInputError, match=message):
        parse_structure(text)


def test_oversized_cell_names_the_limit():
    big = Structure(Lattice.cubic(12), ["Na"] * 21, [[i / 21, 0, 0] for i in range(21)])
    with pytest.raises(StructureInputError, match="21 atoms; the limit is 20"):
        parse_structure(structure_to_json(big), max_atoms=20)
