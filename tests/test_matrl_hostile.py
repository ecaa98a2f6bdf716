"""Hostile model output never stops a matrl episode: every reply in the corpus below reaches the real
episode (real parser, real cell checks, real CHGNet where a cell gets that far), ``step`` returns,
and the model reads a tool message that says what was wrong. Each case is time-bounded (the
thread method: a hang inside compiled code, where a signal cannot interrupt, ends the run with the
stacks instead of stalling it). Before the cell limits, a cell with gamma = 179.9999 deg ran a
neighbour search for over 18 minutes, and fractional coordinates of 1e12 were killed for memory."""

from __future__ import annotations

import json

import pytest
from pymatgen.core import Lattice, Structure

from matrl.plugin import MatrlConfig, build_env
from matrl.tasks import task_row
from matrl.toolcalls import format_call
from matrl.validity import check_validity

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.timeout(120, method="thread")]

NACL = {"lattice": [[0, 2.82, 2.82], [2.82, 0, 2.82], [2.82, 2.82, 0]], "species": ["Na", "Cl"],
        "frac_coords": [[0, 0, 0], [0.5, 0.5, 0.5]]}
DEEP = "[" * 5000 + "]" * 5000


def cell(lattice=None, species=None, coords=None) -> str:
    return json.dumps({"lattice": NACL["lattice"] if lattice is None else lattice,
                       "species": NACL["species"] if species is None else species,
                       "frac_coords": NACL["frac_coords"] if coords is None else coords})


def cubic(a: float) -> list[list[float]]:
    return [[a, 0, 0], [0, a, 0], [0, 0, a]]


def submit(structure: str) -> str:
    return format_call("submit", structure=structure)


def hermes(arguments) -> str:
    return '<tool_call>{"name": "evaluate_structure", "arguments": ' + arguments + "}</tool_call>"


def cif(sites: int, group: str = "F m -3 m", a: float = 5.6) -> str:
    lines = ["data_x", f"_symmetry_space_group_name_H-M '{group}'", *(f"_cell_length_{x} {a}" for x in "abc"),
             *(f"_cell_angle_{x} 90" for x in ("alpha", "beta", "gamma")), "loop_", "_atom_site_label",
             "_atom_site_type_symbol", "_atom_site_fract_x", "_atom_site_fract_y", "_atom_site_fract_z",
             "_atom_site_occupancy"]
    lines += [f"Na{i} Na {0.013 * i + 0.11:.3f} {0.031 * i + 0.07:.3f} {0.017 * i + 0.19:.3f} 1" for i in range(sites)]
    return "\n".join(lines)


# (case id, the model's whole reply, a phrase the tool message must contain)
CORPUS = [
    # tool-call syntax
    ("json-call-nested-5000-deep", '<tool_call>{"name": "submit", "arguments": ' + DEEP + "}</tool_call>", "nested 5001 levels"),
    ("json-arguments-string-nested", '<tool_call>{"name": "submit", "arguments": ' + json.dumps(DEEP) + "}</tool_call>", "nested"),
    ("json-call-huge-integer", '<tool_call>{"name": "submit", "arguments": {"n": ' + "9" * 5000 + "}}</tool_call>", "unreadable value"),
    ("json-call-not-an-object", "<tool_call>[1, 2, 3]</tool_call>", "no <function=NAME>"),
    ("json-call-arguments-a-list", '<tool_call>{"name": "submit", "arguments": [1]}</tool_call>', "must be an object"),
    ("json-call-name-a-number", '<tool_call>{"name": 5, "arguments": {}}</tool_call>', "needs a 'name'"),
    ("properties-nested-5000-deep", format_call("evaluate_structure", structure=cell(), properties=DEEP), "must be a list"),
    ("properties-a-number", hermes(json.dumps({"structure": cell(), "properties": 5})), "must be a list"),
    ("properties-a-dict", hermes(json.dumps({"structure": cell(), "properties": {"band_gap": True}})), "must be a list"),
    ("properties-list-of-numbers", hermes(json.dumps({"structure": cell(), "properties": [1, 2]})), "must be a list"),
    ("properties-unknown-name", hermes(json.dumps({"structure": cell(), "properties": ["density"]})), "Unknown properties"),
    ("structure-a-number", hermes(json.dumps({"structure": 5})), "needs a 'structure'"),
    ("structure-a-list", hermes(json.dumps({"structure": [1, 2]})), "needs a 'structure'"),
    ("structure-null", hermes(json.dumps({"structure": None})), "needs a 'structure'"),
    ("query-a-list", '<tool_call>{"name": "retrieve_materials", "arguments": {"query": ["Na", "Cl"]}}</tool_call>', "query' string"),
    ("query-empty", format_call("retrieve_materials", query=""), "needs a 'query'"),
    ("query-unicode-garbage", format_call("retrieve_materials", query="Ñä\u200b\x00☃-∞"), "materials"),
    ("tool-name-empty", "<tool_call>\n<function=>\n</function>\n</tool_call>", "no <function=NAME>"),
    ("tool-name-unicode", format_call("évaluer☃", structure=cell()), "Unknown tool"),
    ("tool-call-unclosed", "<tool_call>\n<function=submit>\n<parameter=structure>\n{", "needs a 'structure'"),
    ("tool-calls-nested-tags", "<tool_call><tool_call><tool_call>{}</tool_call>", "no <function=NAME>"),
    ("reply-empty", "", "No tool call found"),
    ("reply-control-characters", "\x00\x01\x02\u202e\ufeff" * 50, "No tool call found"),
    ("reply-one-megabyte", "x" * 1_000_000, "No tool call found"),
    # structures
    ("structure-empty-string", submit(""), "No structure given"),
    ("structure-nested-5000-deep", submit('{"lattice": ' + DEEP + "}"), "nested 5001 levels"),
    ("structure-huge-integer", submit('{"lattice": ' + "9" * 5000 + "}"), "unreadable value"),
    ("isolated-atom", submit(cell(cubic(10), ["Na"], [[0, 0, 0]])), "no neighbour within 6"),
    ("isolated-pair", submit(cell(cubic(15), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]])), "no neighbour within 6"),
    ("lattice-1e300", submit(cell(cubic(1e300))), "at most 100"),
    ("lattice-1e999-infinite", submit(cell(cubic(1e999))), "degenerate"),
    ("lattice-nan", submit(cell([[float("nan"), 0, 0], [0, 5, 0], [0, 0, 5]]))," degenerate"),
    ("flat-cell-c-1e-5", submit(cell([[5, 0, 0], [0, 5, 0], [0, 0, 1e-5]])), "too flat"),
    ("flat-cell-gamma-179.9999", submit(json.dumps({**NACL, "lattice": {"a": 5, "b": 5, "c": 5, "alpha": 90, "beta": 90,
                                                                         "gamma": 179.9999}})), "too flat"),
    ("lattice-angles-zero", submit(json.dumps({**NACL, "lattice": {"a": 5, "b": 5, "c": 5, "alpha": 0, "beta": 0,
                                                                    "gamma": 0}})), "rejected"),
    ("lattice-negative-length", submit(json.dumps({**NACL, "lattice": {"a": -5, "b": 5, "c": 5, "alpha": 90,
                                                                        "beta": 90, "gamma": 90}})), "positive"),
    ("lattice-a-string", submit(cell("abc")), "rejected"),
    ("lattice-ragged", submit(cell([[1, 2], [3]])), "rejected"),
    ("dense-cell", submit(cell(cubic(1.2))), "Volume per atom"),
    ("element-Og", submit(cell(species=["Og", "Cl"])), "beyond what the judges know"),
    ("element-Es", submit(cell(species=["Es", "Cl"])), "beyond what the judges know"),
    ("element-unknown", submit(cell(species=["Xx", "Cl"])), "Unknown element"),
    ("element-unicode", submit(cell(species=["Ná", "Cl"])), "Unknown element"),
    ("element-a-number", submit(cell(species=[11, 17])), "Unknown element"),
    ("species-a-dict", submit(cell(species={"Na": 1})), "same length"),
    ("coordinates-nan", submit(cell(coords=[[float("nan"), 0, 0], [0.5, 0.5, 0.5]])), "non-finite"),
    ("coordinates-infinite", submit(cell(coords=[[float("inf"), 0, 0], [0.5, 0.5, 0.5]])), "non-finite"),
    ("coordinates-1e12", submit(cell(coords=[[1e12, 0, 0], [0.5, 0.5, 0.5]])), "near the cell"),
    ("coordinates-strings", submit(cell(coords=[["a", "b", "c"], ["d", "e", "f"]])), "Bad numbers"),
    ("coordinates-extra-brackets", submit(cell(coords=[[[0, 0, 0]], [[0.5, 0.5, 0.5]]])), "submitted"),  # same numbers
    ("too-many-atoms-json", submit(cell(cubic(20), ["Na"] * 5000, [[i / 5000, 0, 0] for i in range(5000)])), "characters; the limit"),
    ("too-many-atoms-cif-symmetry", submit(cif(20)), "symmetry operations"),
    ("cif-nan-cell", submit(cif(1, "P 1").replace("_cell_length_a 5.6", "_cell_length_a nan")), "rejected"),
    ("cif-garbage", submit("data_x\n_cell_length_a ???\nloop_\n_atom_site_label\n"), "rejected"),
    # cells that pass the limits and are judged (real CHGNet): invalid ones score as invalid
    ("noble-gas-compound", submit(cell(species=["Ar", "Cl"])), "without oxidation states or Pauling"),
    ("element-without-electronegativity", submit(cell(species=["Pm", "N"])), "submitted"),
    ("overlapping-atoms", submit(cell(cubic(4), coords=[[0, 0, 0], [0.03, 0, 0]])), "submitted"),
]


@pytest.fixture(scope="module")
def spec():
    return build_env(MatrlConfig(relax_steps=2, elastic_judge=False))


@pytest.fixture(scope="module")
def row(spec):
    system = spec.dataset("validation")[0]["prompt"][0]
    r = task_row("formula", "NaCl")
    return {"prompt": [system, {"role": "user", "content": r["request"]}], "task": "formula",
            "target": json.dumps(r["target"]), "task_id": "hostile", "max_atoms": 20}


@pytest.mark.parametrize("reply, phrase", [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_hostile_reply_gets_a_message_and_never_raises(spec, row, reply, phrase):
    episode = spec.episodes(row)
    episode.step(reply)  # the raw environment, no adapter guard: it must not raise
    tools = [m["content"] for m in episode.messages[len(row["prompt"]):] if m["role"] == "tool"]
    assert tools, "the model got no answer"
    assert "Traceback" not in tools[-1]
    assert phrase in tools[-1] or any(phrase in f for e in episode.evaluations for f in e.get("findings", [])) \
        or phrase in json.dumps(episode.submission or {}), tools[-1][:300]


@pytest.mark.parametrize("species, counts, element", [(["Pm", "O"], [2, 3], "Pm"), (["Ar", "Cl"], [1, 1], "Ar"),
                                                      (["Rn", "F"], [1, 2], "Rn")])
def test_composition_without_smact_data_is_invalid_with_the_reason(species, counts, element):
    sites = [s for s, n in zip(species, counts) for _ in range(n)]
    structure = Structure(Lattice.cubic(6.0), sites, [[i / len(sites), 0.5 * (i % 2), 0] for i in range(len(sites))])
    validity = check_validity(structure)
    assert not validity.compositional and not validity.valid
    assert any(element in f and "electronegativity" in f for f in validity.findings), validity.findings
