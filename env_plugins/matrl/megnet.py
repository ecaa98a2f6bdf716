"""A dependency-free MEGNet (Chen et al., Chem. Mater. 2019) that loads MatGL's band-gap weights.

Why this exists: the only offline, structure-based band-gap weights we can use are MatGL's
``MEGNet-MP-2019.4.1-BandGap-mfi`` files (BSD-3). They load exactly only with matgl <= 1.x + DGL +
torch 2.2; matgl 4.x loads the state dict but predicts different numbers. This module rebuilds the
published architecture in plain torch (pymatgen for the neighbour list) so the *unchanged*
``state.pt`` gives the reference predictions; ``tests/test_matrl_bandgap.py`` checks CsCl against the
values stored in upstream's example notebook (PBE 4.825, GLLB-SC 8.323, HSE 6.317, SCAN 5.965 eV).

Architecture (from the paper and the weights' shapes): Gaussian expansion of bond lengths (100
centres, 0-6 Å) -> encoders (MLP 64-32, softplus2) -> 3 MEGNet blocks (edge, node, state updates,
residual) -> Set2Set readouts of nodes and edges (3 iterations) -> MLP 32-16-1 -> de-normalise.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

# Node types: H..Bi then Ac..Pu (the short-lived Po-Ra are absent), 89 in all.
_SYMBOLS = (
    "H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge As Se Br Kr "
    "Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm Eu Gd Tb Dy Ho Er Tm Yb "
    "Lu Hf Ta W Re Os Ir Pt Au Hg Tl Pb Bi Ac Th Pa U Np Pu"
).split()
ELEMENT_INDEX = {s: i for i, s in enumerate(_SYMBOLS)}
FIDELITIES = {"pbe": 0, "gllb-sc": 1, "hse": 2, "scan": 3}


class SoftPlus2(nn.Module):
    """softplus(x) - log 2: zero at zero, as in the MEGNet paper."""

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.softplus(x) - math.log(2.0)


def _mlp(dims: list[int], activate_last: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2 or activate_last:
            layers.append(SoftPlus2())
    return nn.Sequential(*layers)


class _Layers(nn.Module):
    """Holds an MLP under ``.layers`` so parameter names match the published state dict."""

    def __init__(self, dims: list[int], activate_last: bool = True):
        super().__init__()
        self.layers = _mlp(dims, activate_last)

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)


def _segment_mean(x: Tensor, index: Tensor, n: int) -> Tensor:
    out = x.new_zeros(n, x.shape[-1]).index_add_(0, index, x)
    count = x.new_zeros(n).index_add_(0, index, torch.ones_like(index, dtype=x.dtype)).clamp(min=1)
    return out / count[:, None]


def _segment_softmax(score: Tensor, index: Tensor, n: int) -> Tensor:
    peak = score.new_full((n,), -torch.inf).scatter_reduce(0, index, score, "amax")
    weight = torch.exp(score - peak[index])
    total = weight.new_zeros(n).index_add_(0, index, weight)
    return weight / total[index]


class _Conv(nn.Module):
    def __init__(self, dim: int, hidden: list[int]):
        super().__init__()
        self.edge_func = _Layers([4 * dim, *hidden])
        self.node_func = _Layers([3 * dim, *hidden])
        self.state_func = _Layers([3 * dim, *hidden])

    def forward(self, g: dict[str, Tensor], e: Tensor, v: Tensor, u: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        src, dst, edge_graph, node_graph, n_graphs = g["src"], g["dst"], g["edge_graph"], g["node_graph"], g["n"]
        e = self.edge_func(torch.cat([v[src], v[dst], e, u[edge_graph]], dim=-1))
        v = self.node_func(torch.cat([v, _segment_mean(e, dst, v.shape[0]), u[node_graph]], dim=-1))
        u = self.state_func(torch.cat([u, _segment_mean(e, edge_graph, n_graphs), _segment_mean(v, node_graph, n_graphs)], dim=-1))
        return e, v, u


class _Block(nn.Module):
    def __init__(self, dense: list[int] | None, dim: int, hidden: list[int]):
        super().__init__()
        if dense:
            self.edge_func = _Layers(dense)
            self.node_func = _Layers(dense)
            self.state_func = _Layers(dense)
        self.dense = bool(dense)
        self.conv = _Conv(dim, hidden)

    def forward(self, g, e, v, u):
        e0, v0, u0 = e, v, u
        if self.dense:
            e, v, u = self.edge_func(e), self.node_func(v), self.state_func(u)
        e, v, u = self.conv(g, e, v, u)
        return e + e0, v + v0, u + u0


class _Set2Set(nn.Module):
    def __init__(self, dim: int, iters: int):
        super().__init__()
        self.dim, self.iters = dim, iters
        self.lstm = nn.LSTM(2 * dim, dim, 1)

    def forward(self, x: Tensor, index: Tensor, n: int) -> Tensor:
        h = (x.new_zeros(1, n, self.dim), x.new_zeros(1, n, self.dim))
        q_star = x.new_zeros(n, 2 * self.dim)
        for _ in range(self.iters):
            q, h = self.lstm(q_star.unsqueeze(0), h)
            q = q.view(n, self.dim)
            alpha = _segment_softmax((x * q[index]).sum(-1), index, n)
            readout = x.new_zeros(n, self.dim).index_add_(0, index, x * alpha[:, None])
            q_star = torch.cat([q, readout], dim=-1)
        return q_star


class _Embedding(nn.Module):
    def __init__(self, n_types: int, n_states: int, dim: int):
        super().__init__()
        self.layer_node_embedding = nn.Embedding(n_types, dim)
        self.layer_state_embedding = nn.Embedding(n_states, dim)


class _Expansion(nn.Module):
    def __init__(self, n: int, final: float, width: float):
        super().__init__()
        self.rbf = nn.Module()
        self.rbf.register_buffer("centers", torch.linspace(0.0, final, n))
        self.width = width

    def forward(self, d: Tensor) -> Tensor:
        return torch.exp(-self.width * (d[:, None] - self.rbf.centers[None, :]) ** 2)


class MEGNet(nn.Module):
    """The MEGNet network; parameter names follow MatGL's so its ``state.pt`` loads strictly."""

    def __init__(self, *, dim_node_embedding: int = 16, dim_edge_embedding: int = 100, dim_state_embedding: int = 16,
                 ntypes_state: int = 4, nblocks: int = 3, hidden_layer_sizes_input=(64, 32),
                 hidden_layer_sizes_conv=(64, 64, 32), hidden_layer_sizes_output=(32, 16),
                 niters_set2set: int = 3, cutoff: float = 5.0, gauss_width: float = 0.5, **_unused):
        super().__init__()
        self.cutoff = cutoff
        hin, hconv, hout = list(hidden_layer_sizes_input), list(hidden_layer_sizes_conv), list(hidden_layer_sizes_output)
        self.bond_expansion = _Expansion(dim_edge_embedding, cutoff + 1.0, gauss_width)
        self.embedding = _Embedding(len(_SYMBOLS), ntypes_state, dim_node_embedding)
        self.edge_encoder = _Layers([dim_edge_embedding, *hin])
        self.node_encoder = _Layers([dim_node_embedding, *hin])
        self.state_encoder = _Layers([dim_state_embedding, *hin])
        self.blocks = nn.ModuleList(
            [_Block(None, hin[-1], hconv)] + [_Block([hconv[-1], *hin], hin[-1], hconv) for _ in range(nblocks - 1)]
        )
        self.edge_s2s = _Set2Set(hconv[-1], niters_set2set)
        self.node_s2s = _Set2Set(hconv[-1], niters_set2set)
        self.output_proj = _Layers([5 * hconv[-1], *hout, 1], activate_last=False)

    def forward(self, g: dict[str, Tensor], state: Tensor) -> Tensor:
        e = self.edge_encoder(self.bond_expansion(g["dist"]))
        v = self.node_encoder(self.embedding.layer_node_embedding(g["types"]))
        u = self.state_encoder(self.embedding.layer_state_embedding(state))
        for block in self.blocks:
            e, v, u = block(g, e, v, u)
        node_vec = self.node_s2s(v, g["node_graph"], g["n"])
        edge_vec = self.edge_s2s(e, g["edge_graph"], g["n"])
        return self.output_proj(torch.cat([node_vec, edge_vec, u], dim=-1)).squeeze(-1)


def batch_graphs(structures, cutoff: float) -> dict[str, Tensor]:
    """Neighbour graphs of several pymatgen structures as one disjoint graph (directed edges < cutoff)."""
    src, dst, dist, types, edge_graph, node_graph = [], [], [], [], [], []
    offset = 0
    for k, s in enumerate(structures):
        unknown = sorted({sp.symbol for sp in s.species} - set(ELEMENT_INDEX))
        if unknown:
            raise ValueError(f"MEGNet has no embedding for element(s) {', '.join(unknown)}")
        i, j, _, d = s.get_neighbor_list(r=cutoff, exclude_self=True)
        src.append(i + offset)
        dst.append(j + offset)
        dist.append(d)
        edge_graph.append(np.full(len(i), k))
        types += [ELEMENT_INDEX[sp.symbol] for sp in s.species]
        node_graph.append(np.full(len(s), k))
        offset += len(s)
    cat = np.concatenate
    return {
        "src": torch.as_tensor(cat(src), dtype=torch.long), "dst": torch.as_tensor(cat(dst), dtype=torch.long),
        "dist": torch.as_tensor(cat(dist), dtype=torch.float32), "types": torch.as_tensor(types, dtype=torch.long),
        "edge_graph": torch.as_tensor(cat(edge_graph), dtype=torch.long),
        "node_graph": torch.as_tensor(cat(node_graph), dtype=torch.long), "n": len(structures),
    }


class MEGNetPredictor:
    """Loads a MatGL-format model folder (``model.json`` + ``state.pt``) and predicts per structure."""

    def __init__(self, model_dir: str | Path):
        model_dir = Path(model_dir)
        spec = json.loads((model_dir / "model.json").read_text())
        kwargs = spec["kwargs"]["model"]["init_args"]
        if kwargs.get("element_types"):
            raise ValueError(f"{model_dir}: custom element_types are not supported; expected MatGL's default 89 elements")
        self.net = MEGNet(**kwargs)
        state = torch.load(model_dir / "state.pt", map_location="cpu", weights_only=True)
        self.net.load_state_dict({k.removeprefix("model."): v for k, v in state.items()}, strict=True)
        self.net.eval()
        self.mean, self.std = _normalizer(spec["kwargs"].get("target_transformer", ""))

    @torch.no_grad()
    def predict(self, structures, fidelity: str = "pbe") -> list[float]:
        g = batch_graphs(structures, self.net.cutoff)
        state = torch.full((len(structures),), FIDELITIES[fidelity], dtype=torch.long)
        out = self.net(g, state) * self.std + self.mean
        return [float(x) for x in out]


def _normalizer(text: str) -> tuple[float, float]:
    """Parse 'Normalizer: Mean=1.57, Std: 1.86' (MatGL's repr); identity when absent."""
    m = re.search(r"Mean\s*[=:]\s*([-0-9.eE]+).*Std\s*[=:]\s*([-0-9.eE]+)", text)
    return (float(m.group(1)), float(m.group(2))) if m else (0.0, 1.0)
