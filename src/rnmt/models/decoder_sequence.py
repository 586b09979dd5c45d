"""RNNSearch's teacher-forced decoder loop (ATR paper appendix A.1, eq. 13) as one autograd function with
a hand-written backward: the fast path of `RNNSearch.forward` (models/rnnsearch.py), which must equal its
step loop; also GNMT's first decoder layer and DTMT's decoder (below).

At target step j, with K = W_m m (the attention keys) and p_j the lower cell's projection of E y_{j−1}:

    s̃_j = lower(p_j, s_{j−1})
    q_j = W_q s̃_j,   e_jk = vᵀ tanh(q_j + K_k) = 2vᵀ σ(2q_j + 2K_k) − Σv   (rnmt.energies)
    α_j = softmax_k(e_j) over real source positions,   c_j = Σ_k α_jk m_k
    s_j = higher(W_c c_j + b_c, s̃_j)

The cells' steps are their step kernels (cells/kernel.py), which also differentiate them. Backward at
step j, from ∂s_j (the readout's, plus step j+1's) and ∂c_j (the readout's):

    higher's kernel → δ_j = ∂(W_c c_j + b_c) and its part of ∂s̃_j;   ∂c_j += δ_j W_c
    ∂α_jk = m_k · ∂c_j,   ∂e_j = α_j ⊙ (∂α_j − Σ_k α_jk ∂α_jk)
    u = σ(2q_j + 2K) (kept from the forward, as autograd keeps it),   ∂a = ∂e ⊗ 2v ⊙ u(1 − u)
    ∂q_j = 2 Σ_k ∂a_k,   ∂K += 2 ∂a,   ∂v += Σ_k ∂e_k 2u_k,   ∂s̃_j += ∂q_j W_q
    lower's kernel → ∂p_j and ∂s_{j−1}

and after the loop every weight's gradient is one product over all steps: ∂W_q = Σ_j ∂q_jᵀ s̃_j,
∂W_c = Σ_j δ_jᵀ c_j, ∂m = Σ_j α_jᵀ ∂c_j (one batched product), and the cells' own (`StepKernel.grads`).
Where the step loop runs about 30 small operations forward and 57 backward through autograd a step,
this runs about as many forward and some 30 backward, without autograd's bookkeeping. u is kept
time-major ([T, B, S, A]), so each step's slice is dense.

On CUDA each step's attention is two Triton kernels forward and two backward (models/triton/attention.py)
instead of about seven and ten torch operations, an ATR cell's step one product and one Triton kernel each
way (`ATRKernel`, cells/triton/atr.py `rows_forward`), and the ATR tables' GRU's two products and two Triton
kernels each way (`ResetBeforeKernel`, cells/triton/gru.py): read from the code, a decoder step is then 8
kernels forward and 9 backward with ATR, 12 and 13 with that GRU, where the step loop launches about 30 and
57 with ATR. Under autocast each product adds the rounding of its activation operand and, where it has an
addend, the addend's own add (`narrow`), but for the cells' recurrent biases, which their row kernels add:
13 and 17 with ATR, 19 and 23 with that GRU; W_c's product goes straight into its step's slice (`out`).

A GNMT decoder (models/gnmt.py) has no higher cell: its first layer is the lower one, s_j = s̃_j, and the
layers above it run after this loop. DTMT's decoder (models/dtmt.py) is the same loop with transition blocks
for cells (the query block lower, the decoder block higher: each a bottom cell and its T-GRUs chained within
the step, cells/kernel.py `ChainKernel`) and a multi-head attention: q_j, K and u split into h heads of A/h,
one v of A/h shared by them, α_j one softmax a head over the real positions, each head's context from its M/h
of the memory, and c_j = W_o [c_j¹; …; c_jʰ] + b_o; backward per head likewise, ∂[c¹; …] = ∂c_j W_o, and
∂W_o = Σ_j ∂c_jᵀ [c_j¹; …] after the loop. On CUDA its heads' attention takes the Triton kernels where a power
of two of at least 16 divides a head's widths (DTMT's 16 heads of 64 at width 1024); its cells' steps take
their row kernels (cells/triton/gated.py): counted through triton's interpreter with CUDA's kernels forced
(operations that compute and Triton launches, a target word's worth), a DTMT#1 decoder step (two blocks of two
cells) is 25 forward and 14 backward, where the step loop runs 97 and 131 (12 of the 25 draw the cells' dropout
noise on the CPU, 3 a cell; on CUDA one kernel a cell; benchmarks/gpu/decoder-kernels.py).

It serves the cells with a step kernel whose output is the state itself and whose input projection is affine
(GRU and ATR with their papers' options, DTMT's transition blocks); under autocast it runs in float32 with
autocast off, as the cells' whole-sequence paths do (cells/base.py `_whole`), its products (the cells', W_q's
and W_c's, each step's and the weight gradients after the loop) with operands in autocast's dtype and float32
results (rnmt.machine.matmul `narrow`), as the step loop's are under autocast: state, gates and attention (its
products too) stay float32. Which path a run takes is measured once per run (rnmt.machine.fastpath;
`use_path("loop")` forces the step loop, `use_path("sequence")` this one); the step loop is the default where
nothing is measured.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from rnmt.cells.base import autocast_device, forced_path, graphed
from rnmt.cells.kernel import StepKernel, product_grad, row_sum
from rnmt.cells.taken import record_path, unrecorded
from rnmt.machine import fastpath
from rnmt.machine.matmul import addmm, mm, narrow, products_dtype, products_in
from rnmt.models.attention import attention_kernels


class DecoderSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, lower: StepKernel, higher: StepKernel | None, kernels: Any, heads: int, p: Tensor,
                s0: Tensor, memory: Tensor, keys: Tensor, mask: Tensor, w_q: Tensor, v: Tensor, w_o: Tensor | None,
                b_o: Tensor | None, w_c: Tensor | None, b_c: Tensor | None, *params: Tensor) -> tuple[Tensor, Tensor]:
        """p [B, T, P] (the lower cell's projected inputs), s0 [B, H], memory [B, S, M], keys [B, S, A],
        mask [B, S] (True at real source tokens) → (states s_j [B, T, H], contexts c_j [B, T, M]);
        `kernels`: the attention's Triton kernels (`attention_kernels`), or None for torch's operations.
        Without a `higher` cell (and `w_c`), s_j = s̃_j: a GNMT decoder's first layer and its attention.
        With `w_o`, c_j = W_o [c_j¹; …; c_jʰ] + b_o (DTMT's output map of its heads)."""
        B, T = p.shape[:2]
        H, S, M, A = s0.size(1), memory.size(1), memory.size(2), keys.size(2)
        hs = p.new_empty(B, T + 1, H)                  # s_0 .. s_T
        hs[:, 0] = s0
        tilde = p.new_empty(B, T, H) if higher else hs[:, 1:]
        u = p.new_empty(T, B, S, A)                    # u_j = σ(2q_j + 2K), as autograd keeps it
        alpha, contexts = p.new_empty(B, T, heads, S), p.new_empty(B, T, M)
        raw = p.new_empty(B, T, M) if w_o is not None else contexts      # the heads' contexts before W_o
        p2 = p.new_empty(B, T, w_c.size(0)) if higher else None     # the higher cell's projected inputs
        lower.begin(p, s0)
        if higher:
            higher.begin(p2, s0)
        keys2, v2, w_q_t, outside = keys * 2, v.reshape(-1) * 2, w_q.t(), ~mask[:, None]
        by_head = _by_head(memory, heads)
        w_o_t, w_c_t = (w.t() if w is not None else None for w in (w_o, w_c))
        keep = mask.to(torch.int8) if kernels else None
        low = products_dtype(p)
        weights = [w_q, *(w for w in (w_o, w_c) if w is not None), *params]
        with narrow(low, weights):                   # the weights every step's products read, rounded once
            for t in range(T):
                lower.forward(t, p[:, t], hs[:, t], tilde[:, t])
                q = mm(tilde[:, t], w_q_t)
                if kernels:
                    kernels.forward(q, keys2, v2, keep, memory, u[t], alpha[:, t], raw[:, t])
                else:
                    u_t = torch.add(keys2, q[:, None], alpha=2, out=u[t]).sigmoid_()
                    scores = torch.matmul(u_t.view(B, S, heads, -1), v2).transpose(1, 2)       # [B, h, S]
                    torch.softmax(scores.masked_fill_(outside, float("-inf")), -1, out=alpha[:, t])
                    raw[:, t] = torch.matmul(alpha[:, t, :, None], by_head).view(B, M)
                if w_o is not None:
                    addmm(b_o, raw[:, t], w_o_t, out=contexts[:, t])
                if higher:
                    addmm(b_c, contexts[:, t], w_c_t, out=p2[:, t])
                    higher.forward(t, p2[:, t], tilde[:, t], hs[:, t + 1])
        ctx.kernels, ctx.attention, ctx.low, ctx.weights = (lower, higher), kernels, low, weights
        ctx.biases = b_o is not None, b_c is not None
        ctx.save_for_backward(p, hs, tilde, u, alpha, contexts, raw, p2, memory, v2, w_q, w_o, w_c)
        return hs[:, 1:], contexts

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, d_states: Tensor, d_contexts: Tensor) -> tuple[Tensor | None, ...]:
        with narrow(ctx.low, ctx.weights):
            return DecoderSequence._backward(ctx, d_states, d_contexts)

    @staticmethod
    def _backward(ctx: Any, d_states: Tensor, d_contexts: Tensor) -> tuple[Tensor | None, ...]:
        p, hs, tilde, u, alpha, contexts, raw, p2, memory, v2, w_q, w_o, w_c = ctx.saved_tensors
        lower, higher = ctx.kernels
        (B, T), (S, M), heads = p.shape[:2], memory.shape[1:], alpha.size(2)
        d = v2.size(0)                                  # the width of a head's keys
        dp, dc = torch.empty_like(p), torch.empty_like(contexts)
        d_raw = torch.empty_like(raw) if w_o is not None else dc
        dp2 = torch.empty_like(p2) if higher else None
        dq = p.new_empty(B, T, w_q.size(0))
        dv, d_keys = v2.new_zeros(1, d), torch.zeros_like(u[0])       # ∂K = 2v ⊙ d_keys
        v4 = v2 * 2
        by_head = _by_head(memory, heads)
        g = torch.zeros_like(hs[:, 0])
        kernels = ctx.attention
        dv_rows = torch.zeros_like(u[0, :, 0]) if kernels else None      # [B, A]: ∂v by sentence
        for t in range(T - 1, -1, -1):
            g = g + d_states[:, t]
            if higher:
                g_tilde = higher.backward(t, p2[:, t], tilde[:, t], g, dp2[:, t])
                addmm(d_contexts[:, t], dp2[:, t], w_c, out=dc[:, t])
            else:                                       # s_j is s̃_j: its gradient goes to the lower cell whole
                g_tilde = g
                dc[:, t] = d_contexts[:, t]
            if w_o is not None:
                mm(dc[:, t], w_o, out=d_raw[:, t])
            if kernels:
                kernels.backward(d_raw[:, t], memory, alpha[:, t], u[t], v4, dq[:, t], d_keys, dv_rows)
                g = lower.backward(t, p[:, t], hs[:, t], addmm(g_tilde, dq[:, t], w_q), dp[:, t])
                continue
            a = alpha[:, t]                                                               # [B, h, S]
            d_alpha = torch.matmul(by_head, d_raw[:, t].view(B, heads, -1, 1)).squeeze(-1)
            d_e_t = (a * (d_alpha - (a * d_alpha).sum(-1, keepdim=True))).transpose(1, 2)  # [B, S, h]
            u_t = u[t]
            dv += torch.mv(u_t.view(-1, d).t(), d_e_t.reshape(-1))
            w_t = torch.addcmul(u_t, u_t, u_t, value=-1, out=u_t).view(B, S, heads, d)   # σ' = u(1 − u), u is not
            sums = torch.matmul(d_e_t.transpose(1, 2)[:, :, None], w_t.transpose(1, 2))  # read again; 2 Σ_k ∂a_k
            torch.mul(sums.view(B, heads, d), v4, out=dq[:, t].view(B, heads, d))
            d_keys.view(B, S, heads, d).addcmul_(d_e_t[..., None], w_t)
            g = lower.backward(t, p[:, t], hs[:, t], addmm(g_tilde, dq[:, t], w_q), dp[:, t])
        if kernels:
            dv = dv_rows.view(B, heads, d).sum((0, 1)).unsqueeze(0)
        d_keys.view(B, S, heads, d).mul_(v4)                                          # 2 Σ_j ∂a_j
        d_memory = torch.matmul(alpha.permute(0, 2, 3, 1), d_raw.view(B, T, heads, -1).transpose(1, 2))
        d_memory = d_memory.transpose(1, 2).reshape(B, S, M)
        d_w_o = product_grad(dc, raw) if w_o is not None else None
        d_w_c = product_grad(dp2, contexts) if higher else None
        grads = [*lower.grads(hs[:, :-1], dp), *(higher.grads(tilde, dp2) if higher else ())]
        return (None, None, None, None, dp, g, d_memory, d_keys, None, product_grad(dq, tilde), dv * 2, d_w_o,
                row_sum(dc) if ctx.biases[0] else None, d_w_c, row_sum(dp2) if ctx.biases[1] else None, *grads)


def _by_head(memory: Tensor, heads: int) -> Tensor:
    """memory [B, S, M] as [B, h, S, M/h], dense (a copy a pass where h > 1, so that no step's product copies it;
    one head's is a view)."""
    B, S, M = memory.shape
    return memory.view(B, S, heads, M // heads).transpose(1, 2).contiguous()


def _parts(model: Any) -> tuple[StepKernel, StepKernel | None] | None:
    """The decoder's step kernels (the higher cell's None where the model has none: GNMT) where this path
    serves its cells and mode, else None."""
    cells = [c for c in (model.dec_lower, model.dec_higher) if c is not None]
    if any(not c.passes_state() or c.input_weights() is None for c in cells):
        return None
    kernels = [c.step_kernel() for c in cells]
    if any(k is None for k in kernels):
        return None
    return kernels[0], kernels[1] if len(kernels) > 1 else None


def decode(model: Any, p_lower: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, Tensor] | None:
    """RNNSearch's decoder over all target steps by this path → (outputs [B, T, H], contexts [B, T, M]);
    None where it does not serve the model."""
    kernels = _parts(model)
    if kernels is None:
        return None
    amp = autocast_device()
    if amp is not None:
        with torch.autocast(amp, enabled=False), products_in(torch.get_autocast_dtype(amp)):
            return decode(model, p_lower.float(), {k: v.float() if v.is_floating_point() else v
                                                   for k, v in state.items()})
    w_c, b_c = model.dec_higher.input_weights() if model.dec_higher is not None else (None, None)
    params = [t for k in kernels if k is not None for t in k.params]
    att = model.attention
    attention = attention_kernels(p_lower, state["memory"].size(1), att.heads, state["keys"].size(2),
                                  state["memory"].size(2))
    if torch.is_grad_enabled():
        record(model, "rnmt kernel (Triton attention)" if attention else "rnmt kernel")
    w_o, b_o = (att.out.weight, att.out.bias) if att.out is not None else (None, None)
    return DecoderSequence.apply(*kernels, attention, att.heads, p_lower.contiguous(), state["state"].contiguous(),
                                 state["memory"].contiguous(), state["keys"].contiguous(), state["mask"],
                                 att.query_proj.weight, att.v.weight, w_o, b_o, w_c, b_c, *params)


def record(model: Any, label: str) -> None:
    """Keep the kind of path the model's decoder trained on, the first time (rnmt.cells.taken)."""
    if unrecorded(model):
        record_path(f"{model.decoder_name} ({model.dec_lower.path_key()})", label, model)


MEASURE_STEPS = 24           # the target length a choice is measured at
_CHOICES: dict[tuple[Any, ...], str] = fastpath.lookup({})


def chosen(model: Any, p_lower: Tensor, memory: Tensor) -> str:
    """'sequence' (this path) or 'loop' for the model's decoder at these sizes: the forced path
    (`use_path`), else the run's measured choice (the step loop where nothing is measured)."""
    forced = forced_path()
    if forced == "loop" or (forced is None and fastpath.mode() == "default") or _parts(model) is None:
        return "loop"
    if forced is not None:
        return "sequence"
    params = [w for w in model.parameters() if w.requires_grad]
    grad = torch.is_grad_enabled() and bool(params)
    amp = autocast_device()
    B, S = p_lower.size(0), memory.size(1)
    higher = model.dec_higher.path_key() if model.dec_higher is not None else "none"
    heads, in_graph = model.attention.heads, graphed(p_lower.device)
    key = (model.dec_lower.path_key(), higher, tuple(memory.shape[2:]), heads, B.bit_length(), S.bit_length(), grad,
           p_lower.device, p_lower.dtype, amp, torch.get_num_threads(), in_graph)
    if key not in _CHOICES:
        name = f"{model.decoder_name.lower()} {key[0]} / {key[1]}" if model.dec_higher is not None else \
            f"gnmt layer 1 {key[0]}"
        what = (f"{name}, memory {key[2][0]}{f', {heads} heads' if heads > 1 else ''}, batch < {2 ** key[4]}, "
                f"source < {2 ** key[5]}, {'forward+backward' if grad else 'forward'}, {p_lower.device.type} "
                f"{str(p_lower.dtype).removeprefix('torch.')}{', autocast' if amp else ''}")
        with torch.random.fork_rng(devices=[p_lower.device] if p_lower.device.type == "cuda" else []):
            runs = candidates(model, p_lower, memory, grad, params)
        _CHOICES[key] = fastpath.choose(what, runs, "loop", p_lower.device, graphed=in_graph)
    return _CHOICES[key]


def candidates(model: Any, p_lower: Tensor, memory: Tensor, grad: bool, params: list[Tensor],
               steps: int = MEASURE_STEPS) -> dict[str, Any]:
    """Both paths over `steps` target steps of random inputs of p_lower's and memory's batch and widths and
    memory's source length (backward included where `grad`), as callables."""
    B, S = p_lower.size(0), memory.size(1)
    p = torch.randn(B, steps, p_lower.size(-1), device=p_lower.device, dtype=p_lower.dtype,
                    requires_grad=grad)
    m = torch.tanh(torch.randn(B, S, memory.size(-1), device=memory.device, dtype=memory.dtype))
    s0, mask = torch.zeros(B, model.dec_lower.state_size, device=p.device, dtype=p.dtype), m.new_ones(B, S).bool()

    def timed(path: str) -> Any:
        def fn() -> None:
            state = {"state": s0, "memory": m, "keys": model.attention.keys(m), "mask": mask}
            outs, contexts = model.decoder_loop(p, state) if path == "loop" else decode(model, p, state)
            if grad:
                torch.autograd.grad(outs.float().sum() + contexts.float().sum(), [p, *params], allow_unused=True)
        return fn

    return {"loop": timed("loop"), "sequence": timed("sequence")}
