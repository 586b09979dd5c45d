"""SR-NMT weakly-recurrent units (Di Gangi & Federico 2018, section 3, Figures 1-2).

Recurrence (the registered `srnmt` cell):
    [x̃_t, g_t] = LN(W x_t)                          one LN over the whole pre-activation, no bias
    h_t = (1 − σ(g_t)) ⊙ h_{t−1} + σ(g_t) ⊙ x̃_t      no activation
Encoder unit (section 3.1), W ∈ R^{d×(4·d/2+d)}:
    [x→, x←, g→, g←, z] = LN(W x)
    h→_i = (1 − σ(g→_i)) ⊙ h→_{i−1} + σ(g→_i) ⊙ x→_i
    h←_i = (1 − σ(g←_i)) ⊙ h←_{i+1} + σ(g←_i) ⊙ x←_i    (from each sentence's last real token)
    h_i = (1 − σ(z_i)) ⊙ [h→_i; h←_i] + σ(z_i) ⊙ x_i      highway, so the input size is d
Decoder unit (section 3.2), W ∈ R^{d×3d}, W_s, W_c ∈ R^{d×d}:
    [ỹ, g, z] = LN(W y);  s̃_i = (1 − σ(g_i)) ⊙ s̃_{i−1} + σ(g_i) ⊙ ỹ_i
    c_i = attn(s̃_i, H) / √d
    o_i = tanh(LN(W_s s̃_i) + LN(W_c c_i))
    s_i = (1 − σ(z_i)) ⊙ o_i + σ(z_i) ⊙ y_i
Attention (section 3.2, layer-normalised MLP attention over the last encoder layer H):
    α̃_ij = v_α · tanh(LN(W_as s̃_i) + LN(W_ah h_j)),  α_i = softmax(α̃_i),  c_i = Σ_j α_ij h_j

Table 4 ablations: `layer_norm=False` turns every LN(W x) into W x + b; `highway=False` drops z and
the highway (s_i = o_i, h_i = [h→; h←]); a decoder unit with `attention=False` (every layer but the
last when multi-attention is off) keeps Figure 2's first three sub-layers: s_i = highway(s̃_i).
Dropout is applied before every multiplication by a parameter matrix (section 4).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from rnmt.cells.base import RecurrentCell, run
from rnmt.cells.registry import register_cell
from rnmt.cells.scan import masked_scan
from rnmt.cells.triton import triton_path
from rnmt.energies import energies
from rnmt.io import InputError
from rnmt.machine.matmul import Linear


class NormedLinear(nn.Module):
    """LN(W x) without bias when `layer_norm`, else W x + b."""

    def __init__(self, input_size: int, output_size: int, layer_norm: bool = True) -> None:
        super().__init__()
        self.linear = Linear(input_size, output_size, bias=not layer_norm)
        self.norm = nn.LayerNorm(output_size) if layer_norm else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.linear(x))


def _lerp(a: Tensor, b: Tensor, w: Tensor) -> Tensor:
    """a + w ⊙ (b − a) in the widest of the three dtypes (under bfloat16 autocast the projections are
    bfloat16 and the state float32; torch.lerp takes one dtype)."""
    dtype = torch.promote_types(torch.promote_types(a.dtype, b.dtype), w.dtype)
    return torch.lerp(a.to(dtype), b.to(dtype), w.to(dtype))


def weak_step(p: Tensor, h: Tensor) -> Tensor:
    """h' = (1 − σ(g)) ⊙ h + σ(g) ⊙ x̃ for p = [x̃; g]."""
    x, g = p.chunk(2, -1)
    return _lerp(h, x, torch.sigmoid(g))


def highway(out: Tensor, x: Tensor, z: Tensor) -> Tensor:
    """(1 − σ(z)) ⊙ out + σ(z) ⊙ x."""
    return _lerp(out, x, torch.sigmoid(z))


class Recurrence(RecurrentCell):
    """The weakly-recurrent step over inputs that are already [x̃; g] (a unit's own projection)."""

    @property
    def projection_size(self) -> int:
        return 2 * self.hidden_size

    def project_inputs(self, x: Tensor) -> Tensor:
        return x

    def step(self, p: Tensor, state: Tensor) -> Tensor:
        return weak_step(p, state)

    def sequence(self, projected: Tensor, mask: Tensor | None, state: Tensor) -> Tensor:
        """`weak_step` over all steps as one linear scan (cells/scan.py): f = 1 − σ(g), u = σ(g) ⊙ x̃; on CUDA
        one Triton kernel (cells/triton)."""
        kernels = triton_path(projected, "srnmt")
        if kernels:
            return kernels.sequence(projected, mask, state)
        x, g = projected.chunk(2, -1)
        a = torch.sigmoid(g)
        return masked_scan(1 - a, a * x, state, mask)


@register_cell("srnmt")
class SRNMTCell(Recurrence):
    """The recurrence as a stand-alone cell: [x̃, g] = LN(W x), then `weak_step`."""

    def __init__(self, input_size: int, hidden_size: int, layer_norm: bool = True) -> None:
        super().__init__(input_size, hidden_size)
        self.proj = NormedLinear(input_size, 2 * hidden_size, layer_norm)

    def project_inputs(self, x: Tensor) -> Tensor:
        return self.proj(x)

    @property
    def weight_matrix_count(self) -> int:
        return 2            # W's two hidden-sized blocks, for x̃ and g


def check_highway(unit: str, input_size: int, hidden_size: int) -> None:
    if input_size != hidden_size:
        raise InputError(f"SR-NMT {unit}: the highway connection adds the input to the output, so the input "
                         f"size ({input_size}) must equal hidden ({hidden_size}); set emb = hidden "
                         "(with factors: combine 'sum'), or highway: false")


class EncoderUnit(nn.Module):
    """Bidirectional weakly-recurrent layer, d/2 per direction, one projection and one LN (section 3.1)."""

    def __init__(self, input_size: int, hidden_size: int, layer_norm: bool = True, highway: bool = True,
                 dropout: float = 0.1) -> None:
        super().__init__()
        if hidden_size % 2:
            raise InputError(f"SR-NMT encoder: hidden ({hidden_size}) must be even (d/2 per direction)")
        if highway:
            check_highway("encoder", input_size, hidden_size)
        self.hidden_size, self.highway = hidden_size, highway
        self.proj = NormedLinear(input_size, 2 * hidden_size + (hidden_size if highway else 0), layer_norm)
        self.recurrence = Recurrence(hidden_size // 2, hidden_size // 2)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x [B, S, input], mask [B, S] → h [B, S, d] (zero beyond each sentence in the recurrent part)."""
        half = self.hidden_size // 2
        a = self.proj(self.dropout(x))
        xf, xb, gf, gb = a[..., : 2 * self.hidden_size].split(half, -1)
        fwd, _ = run(self.recurrence, torch.cat([xf, gf], -1), mask)
        bwd, _ = run(self.recurrence, torch.cat([xb, gb], -1), mask, reverse=True)
        h = torch.cat([fwd, bwd], -1)
        return highway(h, x, a[..., 2 * self.hidden_size:]) if self.highway else h


class NormedMLPAttention(nn.Module):
    """α̃_ij = v_α · tanh(LN(W_as s̃_i) + LN(W_ah h_j)); c_i = Σ_j α_ij h_j (section 3.2)."""

    def __init__(self, hidden_size: int, layer_norm: bool = True, dropout: float = 0.1) -> None:
        super().__init__()
        self.query = NormedLinear(hidden_size, hidden_size, layer_norm)
        self.key = NormedLinear(hidden_size, hidden_size, layer_norm)
        self.v = Linear(hidden_size, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def keys(self, memory: Tensor) -> Tensor:
        """LN(W_ah h_j), computed once per sentence: [B, S, d]."""
        return self.key(self.dropout(memory))

    def forward(self, s: Tensor, keys: Tensor, memory: Tensor, mask: Tensor) -> Tensor:
        """s [B, T, d], keys/memory [B, S, d], mask [B, S] → contexts [B, T, d]."""
        q = self.query(self.dropout(s))
        scores = energies(q.unsqueeze(2), keys.unsqueeze(1), self.v.weight)          # [B, T, S]
        scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
        return torch.bmm(torch.softmax(scores, -1), memory)


class DecoderUnit(nn.Module):
    """Weakly-recurrent decoder layer with its own attention over H (section 3.2)."""

    def __init__(self, input_size: int, hidden_size: int, layer_norm: bool = True, highway: bool = True,
                 attention: bool = True, dropout: float = 0.1) -> None:
        super().__init__()
        if highway:
            check_highway("decoder", input_size, hidden_size)
        self.hidden_size, self.highway = hidden_size, highway
        self.proj = NormedLinear(input_size, (3 if highway else 2) * hidden_size, layer_norm)
        self.recurrence = Recurrence(hidden_size, hidden_size)
        self.attention = NormedMLPAttention(hidden_size, layer_norm, dropout) if attention else None
        if attention:
            self.state_out = NormedLinear(hidden_size, hidden_size, layer_norm)      # LN(W_s s̃)
            self.context_out = NormedLinear(hidden_size, hidden_size, layer_norm)    # LN(W_c c)
        self.dropout = nn.Dropout(dropout)

    def forward(self, y: Tensor, state: Tensor, keys: Tensor | None, memory: Tensor,
                mask: Tensor) -> tuple[Tensor, Tensor]:
        """y [B, T, input], s̃_0 [B, d] → (s [B, T, d], s̃_T [B, d]); keys from `attention.keys`."""
        d = self.hidden_size
        a = self.proj(self.dropout(y))
        full = torch.ones(y.shape[:2], dtype=torch.bool, device=y.device)
        s_tilde, state = run(self.recurrence, a[..., : 2 * d], full, state=state)
        out = s_tilde
        if self.attention is not None:
            if keys is None:
                raise ValueError("a decoder unit with attention needs the keys of `attention.keys(memory)`")
            c = self.attention(s_tilde, keys, memory, mask) / math.sqrt(d)
            out = torch.tanh(self.state_out(self.dropout(s_tilde)) + self.context_out(self.dropout(c)))
        return (highway(out, y, a[..., 2 * d:]) if self.highway else out), state
