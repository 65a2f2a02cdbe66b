#!/usr/bin/env python3
"""PyTorch speed reference for the titans.h model benchmark (bench/bench_model.c runs it).

The models of docs/model.md sections 1-3 and 5, written from the specification (not from the C code), in
plain eager PyTorch on the CPU in float32: ATTN and SWA baselines, MAC, MAG, MAL, LMM. The memory
layer is the chunked parallel form of docs/model.md 1.6, with the inner gradients u_i in closed form (one
batched forward and backward of the chunk's keys through the memory MLP at the chunk's start), so
autograd differentiates through them: the outer gradient carries the second-order terms of docs/model.md 1.8.

It times training steps (forward, cross-entropy, backward, global-norm clip at 1.0, AdamW) on n
threads and prints one machine-readable line per (kind, n):

    torch_train kind=mac threads=2 torch_threads=2 blas_threads=1 params=6128176 B=4 T=1024 theta_max=0.02
        steps=2 loss=5.5885 warmup_s=... median_s=... min_s=... max_s=... tok_s=... other_cores=0.01

Matrix products go to the system BLAS: the script reports which one it loaded (torch_info blas=...) and
refuses to measure on Debian's reference BLAS (5 GFLOP/s; scripts/bench_setup.sh installs OpenBLAS as the
system BLAS), and the kernels OpenBLAS picked for the CPU (blas_core=): when they leave its widest FMA units
idle (an OpenBLAS older than the CPU falls back to SSE3 ones), it starts again with OPENBLAS_CORETYPE set.
Full causal attention uses torch's fused SDPA when present (torch >= 2.0), else blocks of
128 queries against the keys they see; the memory's chunk coefficients are computed for every chunk at
once before the chunk loop. OpenBLAS's thread pool is separate from torch's
OpenMP threads: for n > 1 a warm-up step on each split (torch n, BLAS n), (n, 1), (1, n) picks the
fastest, which is then timed (one warm-up step for n = 1). other_cores is the CPU time other processes
took during the timed steps, in cores: above ~0.1 the line is not a clean measurement.

It is a speed reference: the same shapes, chunk size, segment, window and parameter count as the C
library, but not bit-for-bit the same numbers (different random initial weights, constant learning rate).

    /usr/bin/python3 bench/torch_model.py                       # every kind, 1 and 2 threads
    /usr/bin/python3 bench/torch_model.py --kinds mac,lmm --threads 2 --steps 5
    /usr/bin/python3 bench/torch_model.py --check               # the memory layer against its recurrence
"""
import argparse
import ctypes
import ctypes.util
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

KINDS = ("attn", "swa", "mac", "mag", "mal", "lmm")


# ---- configuration (docs/model.md 1.1, 5; the defaults titans_config_default documents) ---------------

class Config:
    def __init__(self, kind, vocab=256, d=256, n_layers=4, attn_heads=4):
        self.kind = kind
        self.vocab = vocab
        self.d = d
        self.n_layers = n_layers
        self.attn_heads = attn_heads
        self.ffn_hidden = ((4 * d + 7) // 8) * 8
        self.window = 64
        self.segment = 64
        self.n_persist = 4 if kind in ("mac", "mag", "mal") else 0
        # memory layer
        self.mem_heads = 4
        self.head_dim = d // 4
        self.depth = 2
        self.hidden_mult = 4
        self.chunk = 16
        self.conv_width = 4
        self.residual = False
        self.theta_max = 0.1                  # titans_mem_config_default
        self.surprise_bound = 1.0             # tau of docs/model.md 1.4 (0: the paper's unbounded step)


# ---- small functions of docs/model.md section 0 -------------------------------------------------------

def rmsnorm(x, g):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g


def l2norm(x):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


def dsilu(z):
    s = torch.sigmoid(z)
    return s * (1 + z * (1 - s))


def causal_dwconv(p, w, tail):
    """p [B, T, ch] projected inputs, w [ch, K], tail [B, K-1, ch] or None (zeros before the start).
    Returns the conv output [B, T, ch] and the new tail (the last K-1 inputs)."""
    K = w.shape[1]
    T = p.shape[1]
    if K == 0:
        return p, None
    full = torch.cat([tail, p], 1) if tail is not None else F.pad(p, (0, 0, K - 1, 0))
    c = full[:, 0:T] * w[:, 0]
    for s in range(1, K):
        c = c + full[:, s:s + T] * w[:, s]
    return c, full[:, full.shape[1] - (K - 1):]


def rope_tables(pos, dim):
    """cos, sin [len(pos), dim/2] of the rotate-half RoPE, base 10000, angles in double (docs/model.md section 0)."""
    half = dim // 2
    inv = torch.pow(torch.tensor(10000.0, dtype=torch.float64),
                    -torch.arange(half, dtype=torch.float64) * 2.0 / dim)
    ang = pos.to(torch.float64)[:, None] * inv[None, :]
    return ang.cos().float(), ang.sin().float()


def rope(x, cs):
    """x [..., T, da] rotated by the tables cs = (cos, sin) [T, da/2]."""
    cos, sin = cs
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


def segprod(x):
    """x [..., n] -> P [..., n, n] with P[t, s] = prod_{s<j<=t} x_j for t >= s, 0 above the diagonal.
    Formed as direct products (a masked cumulative product), never as ratios (docs/model.md 1.6)."""
    n = x.shape[-1]
    strict = torch.ones(n, n, dtype=torch.bool).tril(-1)             # t > s
    X = torch.where(strict, x.unsqueeze(-1).expand(*x.shape, n), torch.ones((), dtype=x.dtype))
    return torch.cumprod(X, dim=-2) * torch.ones(n, n, dtype=x.dtype).tril()


def chunk_gate_products(et, dec):
    """The parts of the scalars A, E, B, C, D of docs/model.md 1.6 that depend on the momentum and decay gates only,
    for chunks of gates [..., n]: A, E, B [..., n], P = Pa Pe [..., n, n] and the last row of Pe [..., n]."""
    A = torch.cumprod(dec, -1)
    E = torch.cumprod(et, -1)
    Pa, Pe = segprod(dec), segprod(et)                               # [..., n, n]
    Bv = (Pa @ E.unsqueeze(-1)).squeeze(-1)
    return A, E, Bv, Pa @ Pe, Pe[..., -1, :]


def chunk_coeffs_finish(P, Pe_last, th):
    """C [..., n, n] (C[t, i], lower triangular) and the rows of the chunk's last token Cb, Db [..., n] from the
    gate products and the chunk's learning rates th [..., n]."""
    C = P * th.unsqueeze(-2)
    return C, C[..., -1, :], Pe_last * th


def chunk_gate_products_all(eta, dec, b):
    """chunk_gate_products of every chunk of gates [B, H, T] in one batched computation (hoisted out of the chunk
    loop: the gates do not depend on the memory state), as a list per chunk; None when b does not divide T (the
    loop then computes each chunk's own). theta is left out: with the surprise bound it depends on the state."""
    T = eta.shape[-1]
    if T % b != 0:
        return None
    sh = eta.shape[:-1] + (T // b, b)
    A, E, Bv, P, Pe_last = chunk_gate_products(eta.reshape(sh), dec.reshape(sh))
    return list(zip(A.unbind(-2), E.unbind(-2), Bv.unbind(-2), P.unbind(-3), Pe_last.unbind(-2)))


def surprise_scale(u2, tau):
    """docs/model.md 1.4: theta_t -> theta_t / sqrt(1 + |u_t|^2 / tau^2); u2 = |u_t|^2 [..., n]."""
    return torch.rsqrt(1 + u2 / (tau * tau))


def normal(*shape, std=0.02):
    return nn.Parameter(torch.randn(*shape) * std)


# ---- the neural long-term memory (docs/model.md section 1) --------------------------------------------

class Memory(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, H, dh, K = c.d, c.mem_heads, c.head_dim, c.conv_width
        dm = H * dh
        self.c = c
        self.H, self.dh, self.dm, self.K, self.b = H, dh, dm, K, c.chunk
        self.widths = [dh] + [c.hidden_mult * dh] * (c.depth - 1) + [dh]
        self.wq, self.wk, self.wv = normal(dm, d), normal(dm, d), normal(dm, d)
        if K > 0:
            def conv_init():
                w = torch.randn(dm, K) * 0.02
                w[:, K - 1] += 1.0                                     # identity plus noise
                return nn.Parameter(w)
            self.conv_q, self.conv_k, self.conv_v = conv_init(), conv_init(), conv_init()
        else:
            self.conv_q = self.conv_k = self.conv_v = None
        self.lr_w, self.mom_w, self.decay_w = normal(H, d), normal(H, d), normal(H, d)
        self.lr_b = nn.Parameter(torch.zeros(H))                                 # theta = theta_max / 2
        self.mom_b = nn.Parameter(torch.zeros(H))                                # eta = 0.5
        self.decay_b = nn.Parameter(torch.full((H,), math.log(0.02 / 0.98)))     # alpha ~ 0.02
        n = self.widths
        self.w0 = nn.ParameterList([nn.Parameter(torch.randn(H, n[i + 1], n[i]) / math.sqrt(n[i]))
                                    for i in range(c.depth)])
        self.out_norm = nn.Parameter(torch.ones(dh))
        self.wg = normal(dm, d)
        self.wo = normal(d, dm, std=0.02 / math.sqrt(2 * c.n_layers))

    def init_state(self, B):
        W = [w.unsqueeze(0).expand(B, *w.shape) for w in self.w0]   # [B, H, n_{l+1}, n_l]
        S = [torch.zeros(B, *w.shape) for w in self.w0]
        return {"W": W, "S": S, "tq": None, "tk": None, "tv": None, "trq": None, "pos": 0}

    def heads(self, x):                       # [B, T, dm] -> [B, H, T, dh]
        B, T, _ = x.shape
        return x.view(B, T, self.H, self.dh).transpose(1, 2)

    def mlp(self, a, W):
        """M(a; W) for a [B, H, n, dh]: the memory read with fixed weights."""
        z0 = a
        for l, w in enumerate(W):
            z = a @ w.transpose(-1, -2)
            a = F.silu(z) if l < len(W) - 1 else z
        return a + z0 if self.c.residual else a

    def output(self, y, gate_in):
        """docs/model.md 1.5: y [B, H, T, dh], gate_in [B, T, d] -> o [B, T, d]."""
        B, H, T, dh = y.shape
        yn = rmsnorm(y, self.out_norm).transpose(1, 2).reshape(B, T, H * dh)
        return (yn * F.silu(gate_in @ self.wg.t())) @ self.wo.t()

    def query_stream(self, x, st, tail_key):
        p, st[tail_key] = causal_dwconv(x @ self.wq.t(), self.conv_q, st[tail_key]) if self.K else (x @ self.wq.t(), None)
        return l2norm(self.heads(F.silu(p)))

    def retrieve(self, x, st):
        """Retrieval only (MAC step 1): M(q; W) with the weights committed at this point, no update."""
        q = self.query_stream(x, st, "trq")
        return self.output(self.mlp(q, st["W"]), x)

    def forward(self, x, st):
        """x [B, T, d] -> o [B, T, d]; advances the state st by T tokens (a multiple of b, or the end)."""
        assert st["pos"] % self.b == 0
        q = self.query_stream(x, st, "tq")
        if self.K:
            pk, st["tk"] = causal_dwconv(x @ self.wk.t(), self.conv_k, st["tk"])
            pv, st["tv"] = causal_dwconv(x @ self.wv.t(), self.conv_v, st["tv"])
        else:
            pk, pv = x @ self.wk.t(), x @ self.wv.t()
        k = l2norm(self.heads(F.silu(pk)))
        v = self.heads(F.silu(pv))
        theta = (self.c.theta_max * torch.sigmoid(x @ self.lr_w.t() + self.lr_b)).transpose(1, 2)   # [B, H, T]
        eta = torch.sigmoid(x @ self.mom_w.t() + self.mom_b).transpose(1, 2)
        alpha = torch.sigmoid(x @ self.decay_w.t() + self.decay_b).transpose(1, 2)
        y = self.scan(q, k, v, theta, eta, alpha, st)
        return self.output(y, x)

    def scan(self, q, k, v, theta, eta, alpha, st):
        """The chunked parallel form (docs/model.md 1.6) over q, k, v [B, H, T, dh] and the gates [B, H, T]."""
        W, S = st["W"], st["S"]
        L, b = len(W), self.b
        ys = []
        # split once: slicing inside the loop would make autograd scatter every slice's gradient into a
        # zero tensor of the full length, T / b times over
        dec_all = 1 - alpha
        pieces = list(zip(q.split(b, 2), k.split(b, 2), v.split(b, 2), theta.split(b, -1), eta.split(b, -1),
                          dec_all.split(b, -1)))
        # the gate products of docs/model.md 1.6 for every chunk at once, batched over [..., nc, b]
        tau = self.c.surprise_bound
        products = chunk_gate_products_all(eta, dec_all, b)
        for ci, (Qc, Kc, Vc, th, et, dec) in enumerate(pieces):
            # key path at the chunk's start W0: activations A_{l-1} and errors Delta_l
            acts, zs, a = [Kc], [], Kc
            for l in range(L):
                z = a @ W[l].transpose(-1, -2)
                zs.append(z)
                a = F.silu(z) if l < L - 1 else z
                if l < L - 1:
                    acts.append(a)
            out = a + Kc if self.c.residual else a
            delta = 2 * (out - Vc)
            deltas = [None] * L
            for l in range(L - 1, -1, -1):
                deltas[l] = delta
                if l > 0:
                    delta = (delta @ W[l]) * dsilu(zs[l - 1])
            if tau > 0:
                # the surprise bound: |u_t|^2 = sum_l |delta_t^l|^2 |a_t^{l-1}|^2 at the chunk's start weights
                u2 = sum((deltas[l] * deltas[l]).sum(-1) * (acts[l] * acts[l]).sum(-1) for l in range(L))
                th = th * surprise_scale(u2, tau)
            A, E, Bv, P, Pe_last = products[ci] if products is not None else chunk_gate_products(et, dec)
            C, Cb, Db = chunk_coeffs_finish(P, Pe_last, th)
            # query path through W_t = A_t W0 + B_t S0 - sum_i C_ti u_i, layer by layer
            a = Qc
            for l in range(L):
                z = (A.unsqueeze(-1) * (a @ W[l].transpose(-1, -2)) + Bv.unsqueeze(-1) * (a @ S[l].transpose(-1, -2))
                     - (C * (a @ acts[l].transpose(-1, -2))) @ deltas[l])
                a = F.silu(z) if l < L - 1 else z
            ys.append(a + Qc if self.c.residual else a)
            # state at the chunk's end
            nW, nS = [], []
            for l in range(L):
                dT = deltas[l].transpose(-1, -2)
                nW.append(A[..., -1, None, None] * W[l] + Bv[..., -1, None, None] * S[l]
                          - dT @ (Cb.unsqueeze(-1) * acts[l]))
                nS.append(E[..., -1, None, None] * S[l] - dT @ (Db.unsqueeze(-1) * acts[l]))
            W, S = nW, nS
        st["W"], st["S"] = W, S
        st["pos"] += q.shape[2]
        return torch.cat(ys, 2)


def memory_recurrence(mem, q, k, v, theta, eta, alpha, W, S):
    """docs/model.md 1.4 token by token (the definition), for --check: u_t by autograd at the chunk's start."""
    T, b = q.shape[2], mem.b
    W, S = [w.clone() for w in W], [s.clone() for s in S]
    ys = []
    for t in range(T):
        if t % b == 0:
            W0 = [w.detach().clone().requires_grad_(True) for w in W]
        loss = (mem.mlp(k[:, :, t:t + 1], W0) - v[:, :, t:t + 1]).pow(2).sum()
        u = torch.autograd.grad(loss, W0)
        th = theta[..., t]
        if mem.c.surprise_bound > 0:
            th = th * surprise_scale(sum((ul * ul).sum((-2, -1)) for ul in u), mem.c.surprise_bound)
        for l in range(len(W)):
            S[l] = eta[..., t, None, None] * S[l] - th[..., None, None] * u[l]
            W[l] = (1 - alpha[..., t, None, None]) * W[l] + S[l]
        ys.append(mem.mlp(q[:, :, t:t + 1], W))
    return torch.cat(ys, 2), W, S


# ---- attention (docs/model.md section 2) --------------------------------------------------------------

def softmax_attend(q, keys, vals, masks, scale):
    """One softmax over several key groups: q [..., n, da]; keys[i], vals[i] [..., m_i, da] (broadcast);
    masks[i] [n, m_i] bool (True = visible) or None."""
    q = q * scale                                # on q: T x da products instead of T x T
    scores = []
    for kk, mk in zip(keys, masks):
        s = q @ kk.transpose(-1, -2)
        scores.append(s if mk is None else s.masked_fill(~mk, float("-inf")))
    p = torch.softmax(scores[0] if len(scores) == 1 else torch.cat(scores, -1), -1)
    out, o = None, 0
    for vv in vals:
        m = vv.shape[-2]
        part = p[..., o:o + m] @ vv
        out = part if out is None else out + part
        o += m
    return out


CAUSAL_BLOCK = 128


def attn_causal(q, k, v, pk, pv, scale):
    """Full causal attention with an optional always-visible prefix pk, pv [*, H, P, da]. Without a
    prefix, torch's fused scaled_dot_product_attention when this torch has it (2.0+); otherwise by
    blocks of CAUSAL_BLOCK queries against the keys they can see (no [B, H, T, T] score tensor, and
    about half the products of a full masked T x T)."""
    T = q.shape[2]
    if pk is None and hasattr(F, "scaled_dot_product_attention"):
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        except TypeError:                           # torch 2.0: no scale argument (its default is ours)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    outs = []
    for i0 in range(0, T, CAUSAL_BLOCK):
        i1 = min(T, i0 + CAUSAL_BLOCK)
        mask = torch.ones(i1 - i0, i1, dtype=torch.bool).tril(i0)    # query i0 + r sees keys <= i0 + r
        qb, kb, vb = q[:, :, i0:i1], k[:, :, :i1], v[:, :, :i1]
        if pk is None:
            outs.append(softmax_attend(qb, [kb], [vb], [mask], scale))
        else:
            outs.append(softmax_attend(qb, [pk, kb], [pv, vb], [None, mask], scale))
    return torch.cat(outs, 2)


def attn_sliding(q, k, v, pk, pv, w, scale):
    """Sliding-window attention (a query at t sees keys in (t - w, t]) plus the prefix pk, pv, in blocks
    of w queries against the 2 w keys that can reach them, so the cost is O(T w), not O(T^2)."""
    B, H, T, da = q.shape
    nb = (T + w - 1) // w
    Tp = nb * w
    if Tp != T:
        q, k, v = (F.pad(t, (0, 0, 0, Tp - T)) for t in (q, k, v))
    kb = F.pad(k, (0, 0, w, 0)).unfold(2, 2 * w, w).transpose(-1, -2)   # [B, H, nb, 2w, da]
    vb = F.pad(v, (0, 0, w, 0)).unfold(2, 2 * w, w).transpose(-1, -2)
    qb = q.reshape(B, H, nb, w, da)
    i = torch.arange(w)[:, None]
    m = torch.arange(2 * w)[None, :]
    band = (m > i) & (m <= i + w)                                         # key (j-1) w + m, query j w + i
    first = band & (m >= w)                                               # block 0: no keys before 0
    mask = torch.stack([first] + [band] * (nb - 1))[:, :, :]              # [nb, w, 2w]
    if pk is None:
        out = softmax_attend(qb, [kb], [vb], [mask], scale)
    else:
        out = softmax_attend(qb, [pk.unsqueeze(2), kb], [pv.unsqueeze(2), vb], [None, mask], scale)
    return out.reshape(B, H, Tp, da)[:, :, :T]


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c.d
        self.Ha, self.da = c.attn_heads, d // c.attn_heads
        self.scale = 1.0 / math.sqrt(self.da)
        self.wq, self.wk, self.wv = normal(d, d), normal(d, d), normal(d, d)
        self.wo = normal(d, d, std=0.02 / math.sqrt(2 * c.n_layers))

    def split(self, x):                        # [B, T, d] -> [B, Ha, T, da]
        B, T, _ = x.shape
        return x.view(B, T, self.Ha, self.da).transpose(1, 2)

    def merge(self, o):                        # [B, Ha, T, da] -> [B, T, d] through wo
        B, H, T, da = o.shape
        return o.transpose(1, 2).reshape(B, T, H * da) @ self.wo.t()

    def qkv(self, x, cs):
        q = rope(self.split(x @ self.wq.t()), cs)
        k = rope(self.split(x @ self.wk.t()), cs)
        return q, k, self.split(x @ self.wv.t())

    def prefix(self, p):                       # persistent rows [*, P, d] -> keys, values (no RoPE)
        if p is None:
            return None, None
        if p.dim() == 2:
            p = p.unsqueeze(0)
        return self.split(p @ self.wk.t()), self.split(p @ self.wv.t())


# ---- blocks (docs/model.md section 3) and the language model (docs/model.md section 5) ----------------

class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d, kind = c.d, c.kind
        self.norm1, self.norm2 = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))
        if kind != "lmm":
            self.attn = Attention(c)
        self.persist = normal(c.n_persist, d) if c.n_persist > 0 else None
        if kind in ("mac", "mag"):
            self.gate_norm_y, self.gate_norm_m = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))
        if kind in ("mac", "mag", "mal", "lmm"):
            self.mem = Memory(c)
        ff = c.ffn_hidden
        self.w1, self.w3 = normal(ff, d), normal(ff, d)
        self.w2 = normal(d, ff, std=0.02 / math.sqrt(2 * c.n_layers))

    def gate(self, y, m):
        return rmsnorm(y, self.gate_norm_y) * torch.sigmoid(rmsnorm(m, self.gate_norm_m))

    def with_persist(self, x):
        B = x.shape[0]
        return torch.cat([self.persist.unsqueeze(0).expand(B, -1, -1), x], 1)

    def mixer(self, x, cs):
        kind, a = self.c.kind, getattr(self, "attn", None)
        B, T, _ = x.shape
        P = self.c.n_persist
        if kind == "attn":
            pk, pv = a.prefix(self.persist)
            return a.merge(attn_causal(*a.qkv(x, cs), pk, pv, a.scale))
        if kind == "swa":
            pk, pv = a.prefix(self.persist)
            return a.merge(attn_sliding(*a.qkv(x, cs), pk, pv, self.c.window, a.scale))
        if kind == "lmm":
            return self.mem(x, self.mem.init_state(B))
        if kind == "mag":
            m = self.mem(self.with_persist(x), self.mem.init_state(B))[:, P:]
            pk, pv = a.prefix(self.persist)
            y = a.merge(attn_sliding(*a.qkv(x, cs), pk, pv, self.c.window, a.scale))
            return self.gate(y, m)
        if kind == "mal":
            y = self.mem(self.with_persist(x), self.mem.init_state(B))
            pk, pv = a.prefix(y[:, :P])          # the memory's outputs at the persistent positions
            return a.merge(attn_sliding(*a.qkv(y[:, P:], cs), pk, pv, self.c.window, a.scale))
        return self.mac(x)

    def mac(self, x):
        """docs/model.md 3.1: segments of C tokens; retrieve, attend over persist || Hm || X, update, gate."""
        a, mem, c = self.attn, self.mem, self.c
        B, T, _ = x.shape
        C = c.segment
        st = mem.init_state(B)
        cs = rope_tables(torch.arange(C), a.da)               # local positions
        pk, pv = a.prefix(self.persist)
        outs = []
        for s0 in range(0, T, C):
            xs = x[:, s0:s0 + C]
            n = xs.shape[1]
            csn = (cs[0][:n], cs[1][:n])
            hm = mem.retrieve(xs, st)                        # weights committed at the segment's start
            q, kx, vx = a.qkv(xs, csn)
            khm = rope(a.split(hm @ a.wk.t()), csn)           # Hm_j shares position j
            vhm = a.split(hm @ a.wv.t())
            causal = torch.ones(n, n, dtype=torch.bool).tril()
            keys, vals, masks = [khm, kx], [vhm, vx], [causal, causal]
            if pk is not None:
                keys, vals, masks = [pk] + keys, [pv] + vals, [None] + masks
            y = a.merge(softmax_attend(q, keys, vals, masks, a.scale))
            mm = mem(y, st)                                   # the memory learns from Y
            outs.append(self.gate(y, mm))
        return torch.cat(outs, 1)

    def forward(self, x, cs):
        h = x + self.mixer(rmsnorm(x, self.norm1), cs)
        hn = rmsnorm(h, self.norm2)
        return h + (F.silu(hn @ self.w1.t()) * (hn @ self.w3.t())) @ self.w2.t()


class LM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_emb = normal(c.vocab, c.d)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layers)])
        self.norm_f = nn.Parameter(torch.ones(c.d))

    def forward(self, tokens):
        T = tokens.shape[1]
        cs = rope_tables(torch.arange(T), self.c.d // self.c.attn_heads)
        x = self.tok_emb[tokens]
        for blk in self.blocks:
            x = blk(x, cs)
        return rmsnorm(x, self.norm_f) @ self.tok_emb.t()            # tied head


def make_optimizer(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and not name.endswith("persist") else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=4e-4, betas=(0.9, 0.95), eps=1e-8)


def train_step(model, opt, tokens):
    opt.zero_grad(set_to_none=True)
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


# ---- threads ---------------------------------------------------------------------------------------------

def openblas_handle():
    """Debian's torch calls the system BLAS (OpenBLAS) for matrix products; OpenBLAS keeps its own
    thread pool, which torch.set_num_threads does not size, so it is set here as well."""
    for name in ("libopenblas.so.0", ctypes.util.find_library("openblas"), "libblas.so.3"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_set_num_threads
            return lib
        except (OSError, AttributeError):
            pass
    return None


def blas_report():
    """(name, path) of the BLAS library this process has loaded (torch's matrix products on Debian go
    to the system libblas.so.3, an alternative: reference BLAS, OpenBLAS, BLIS, MKL), read from
    /proc/self/maps after one product, with torch's build configuration as the fallback."""
    torch.ones(64, 64) @ torch.ones(64, 64)
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(p)
                if any(x in base for x in ("blas", "mkl_", "blis")) and p not in paths:
                    paths.append(os.path.realpath(p))
    except OSError:
        pass
    for p in paths:
        low = p.lower()
        if "openblas" in low:
            return "openblas", p
        if "mkl" in low:
            return "mkl", p
        if "blis" in low:
            return "blis", p
    for p in paths:
        if "/blas/libblas" in p or p.endswith("libblas.so.3"):
            return "reference", p
    cfg = torch.__config__.show().lower()
    for name in ("openblas", "mkl", "blis"):
        if f"blas_info={name}" in cfg or f"blas={name}" in cfg:
            return name, "(linked into torch)"
    return "unknown", paths[0] if paths else "(none found)"


# A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels at load time from the CPU's family and model
# numbers. A CPU newer than the OpenBLAS (Debian 12's 0.3.21 on Intel Sapphire/Emerald Rapids, family 6
# model 143/207) is not in its table and gets the generic SSE3 kernels ("Prescott"): sgemm at 20-45
# GFLOP/s on a core where the AVX-512 kernels ("SkylakeX") reach 100-150. OPENBLAS_CORETYPE overrides
# the choice. OpenBLAS 0.3.x's names (lower case) of the kernel sets with AVX-512, and with FMA:
OPENBLAS_AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")
OPENBLAS_FMA_CORES = OPENBLAS_AVX512_CORES + ("haswell", "zen", "excavator", "steamroller", "piledriver")


def openblas_core(blas):
    """The kernel set OpenBLAS chose for this CPU (openblas_get_corename), or None if unknown."""
    if blas is None:
        return None
    try:
        blas.openblas_get_corename.restype = ctypes.c_char_p
        name = blas.openblas_get_corename()
        return name.decode() if name else None
    except (AttributeError, UnicodeDecodeError):
        return None


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def openblas_better_core(core):
    """When OpenBLAS chose kernels that leave the CPU's widest FMA units idle (a CPU it does not know, or
    an AVX-512 AMD CPU that 0.3.21 gives its AVX2 "Zen" kernels), the core to ask for instead: SkylakeX
    with AVX-512 (bench_gemm asks for the same), Haswell with AVX2 and FMA; else None."""
    if core is None:
        return None
    flags = cpu_flags()
    if {"avx512f", "avx512dq", "avx512bw", "avx512vl", "fma"} <= flags:
        return None if core.lower() in OPENBLAS_AVX512_CORES else "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return None if core.lower() in OPENBLAS_FMA_CORES else "Haswell"
    return None


def set_threads(n, blas, n_blas=None):
    torch.set_num_threads(n)
    if blas is not None:
        blas.openblas_set_num_threads(ctypes.c_int(n if n_blas is None else n_blas))


# ---- benchmark ---------------------------------------------------------------------------------------------

def cpu_sample():
    """(wall, busy CPU seconds of the machine, CPU seconds of this process): what other processes took
    during a measurement is the difference, so a reader can see when the machine was shared."""
    busy = float("nan")
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        busy = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), busy, r.ru_utime + r.ru_stime


def other_cores(a, b):
    dt = b[0] - a[0]
    return max(0.0, ((b[1] - a[1]) - (b[2] - a[2])) / dt) if dt > 0 else float("nan")


def bench(args):
    blas = openblas_handle()
    kinds = KINDS if args.kinds == "all" else tuple(args.kinds.split(","))
    threads = [int(t) for t in args.threads.split(",")]
    thetas = {}
    for item in filter(None, args.theta_max.split(",")):
        name, value = item.split("=")
        thetas[name] = float(value)
    blas_name, blas_path = blas_report()
    core = openblas_core(blas) if blas_name == "openblas" else None
    better = openblas_better_core(core)
    if better and not args.keep_blas_core and "OPENBLAS_CORETYPE" not in os.environ:
        # OpenBLAS reads OPENBLAS_CORETYPE once, when it is loaded (with torch): start again with it.
        print(f"torch_info OpenBLAS chose its {core} kernels on a CPU that runs {better}'s: starting again "
              f"with OPENBLAS_CORETYPE={better} (--keep-blas-core keeps {core})", flush=True)
        os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, OPENBLAS_CORETYPE=better))
    print(f"torch_info version={torch.__version__} blas={blas_name} blas_path={blas_path} "
          f"blas_core={core or 'unknown'} OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '-')} "
          f"max_threads={torch.get_num_threads()}", flush=True)
    if better:  # kept: --keep-blas-core, or OPENBLAS_CORETYPE came from the caller
        why = "--keep-blas-core" if args.keep_blas_core else "OPENBLAS_CORETYPE from the environment"
        print(f"torch_warning OpenBLAS runs its {core} kernels on a CPU that runs {better}'s ({why}): its "
              f"matrix products are slower than they could be", flush=True)
    if blas_name == "reference":
        msg = ("torch_model.py: torch's matrix products run on the REFERENCE BLAS (%s), about 5 GFLOP/s: every "
               "ratio against it would be meaningless. Install OpenBLAS as the system BLAS with "
               "`sudo sh scripts/bench_setup.sh` (Debian's libopenblas0-pthread through update-alternatives)" % blas_path)
        if not args.allow_reference_blas:
            print("torch_error " + msg, flush=True)
            sys.exit(2)
        print("torch_warning " + msg + "; measuring anyway (--allow-reference-blas)", flush=True)
    for kind in kinds:
        if kind not in KINDS:
            sys.exit(f"unknown kind {kind}")
        torch.manual_seed(1234)
        c = Config(kind, vocab=args.vocab, d=args.d, n_layers=args.layers, attn_heads=args.heads)
        c.theta_max = thetas.get(kind, c.theta_max)
        model = LM(c)
        opt = make_optimizer(model)
        params = sum(p.numel() for p in model.parameters())
        g = torch.Generator().manual_seed(7)
        tokens = torch.randint(0, c.vocab, (args.B, args.T + 1), generator=g)
        first_loss = None
        for n in threads:
            # warm-up, and the thread split: torch's own (OpenMP) threads and OpenBLAS's pool add up,
            # and torch = BLAS = n oversubscribes the cores (it ran MAC 2x slower on 2 threads than
            # on 1), so for n > 1 one step on each of (n, n), (n, 1), (1, n) picks the fastest
            splits = [(n, n)] if n == 1 else [(n, n), (n, 1), (1, n)]
            tried = []
            for tt, bt in splits:
                set_threads(tt, blas, bt)
                t0 = time.perf_counter()
                loss = train_step(model, opt, tokens)
                tried.append((time.perf_counter() - t0, tt, bt))
                first_loss = loss if first_loss is None else first_loss
            warm, tt, bt = min(tried)
            set_threads(tt, blas, bt)
            steps = max(args.min_steps, min(args.steps, int(args.budget / max(warm, 1e-9))))
            times = []
            c0 = cpu_sample()
            for _ in range(steps):
                t0 = time.perf_counter()
                train_step(model, opt, tokens)
                times.append(time.perf_counter() - t0)
            other = other_cores(c0, cpu_sample())
            med = statistics.median(times)
            probe = " ".join(f"probe_{a}x{b}_s={t:.3f}" for t, a, b in tried) if len(tried) > 1 else ""
            print(f"torch_train kind={kind} threads={n} torch_threads={tt} blas_threads={bt} params={params} "
                  f"B={args.B} T={args.T} theta_max={c.theta_max:g} steps={steps} loss={first_loss:.4f} "
                  f"warmup_s={warm:.4f} median_s={med:.4f} min_s={min(times):.4f} max_s={max(times):.4f} "
                  f"tok_s={args.B * args.T / med:.1f} other_cores={other:.2f} {probe}".rstrip(), flush=True)


def check(args):
    """The chunked form against the token-by-token recurrence (docs/model.md 7.1) in float64, b = 1, 4, 16 and
    one that does not divide T, and the outer gradient against finite differences (gradcheck)."""
    torch.set_default_dtype(torch.float64)
    worst = 0.0
    for b in (1, 4, 16, 5):
        torch.manual_seed(b)
        c = Config("lmm", d=16, n_layers=1)
        c.chunk, c.theta_max = b, 0.1
        mem = Memory(c)
        B, T = 2, 23
        x = torch.randn(B, T, c.d)
        st = mem.init_state(B)
        # the same inputs the scan sees
        q = mem.query_stream(x, mem.init_state(B), "tq")
        pk, _ = causal_dwconv(x @ mem.wk.t(), mem.conv_k, None)
        pv, _ = causal_dwconv(x @ mem.wv.t(), mem.conv_v, None)
        k, v = l2norm(mem.heads(F.silu(pk))), mem.heads(F.silu(pv))
        th = (c.theta_max * torch.sigmoid(x @ mem.lr_w.t() + mem.lr_b)).transpose(1, 2)
        et = torch.sigmoid(x @ mem.mom_w.t() + mem.mom_b).transpose(1, 2)
        al = torch.sigmoid(x @ mem.decay_w.t() + mem.decay_b).transpose(1, 2)
        y_ref, W_ref, S_ref = memory_recurrence(mem, q, k, v, th, et, al, st["W"], st["S"])
        y = mem.scan(q, k, v, th, et, al, st)
        rel = lambda a, r: ((a - r).abs().max() / r.abs().max()).item()
        err = max([rel(y, y_ref)] + [rel(a, r) for a, r in zip(st["W"] + st["S"], W_ref + S_ref)])
        worst = max(worst, err)
        print(f"check chunked vs recurrence b={b} T={T}: max |diff| / max |ref| = {err:.3e} (y, W, S)")
    torch.manual_seed(3)
    c = Config("lmm", d=8, n_layers=1)
    c.chunk, c.theta_max, c.hidden_mult = 3, 0.5, 2
    mem = Memory(c)
    x = torch.randn(1, 7, c.d, requires_grad=True)
    ok = torch.autograd.gradcheck(lambda xx, w0: mem(xx, {**mem.init_state(1), "W": [w0, mem.w0[1].unsqueeze(0)]}),
                                  (x, mem.w0[0].detach().unsqueeze(0).clone().requires_grad_(True)), eps=1e-6,
                                  atol=1e-5)
    print(f"check gradcheck of the memory layer (inputs and w0, through the updates): {ok}")
    good = worst < 1e-10 and ok
    print("check " + ("passed" if good else "FAILED"))
    return 0 if good else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", default="all", help="comma-separated: attn,swa,mac,mag,mal,lmm (default all)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--steps", type=int, default=5, help="most timed steps after the warm-up (default 5)")
    ap.add_argument("--min-steps", type=int, default=2, help="fewest timed steps (default 2)")
    ap.add_argument("--budget", type=float, default=4.0,
                    help="seconds of timed steps per kind and thread count: steps = budget / warm-up time, "
                         "clamped to [min-steps, steps] (default 4)")
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--theta-max", default="", help="per-kind memory theta_max, e.g. mag=0.01,mac=0.02 "
                    "(default 0.005, the library's)")
    ap.add_argument("--check", action="store_true", help="check the memory layer and exit")
    ap.add_argument("--keep-blas-core", action="store_true",
                    help="measure on the kernels OpenBLAS chose even when they use fewer of the CPU's "
                         "vector units than it has (by default the script starts again with OPENBLAS_CORETYPE)")
    ap.add_argument("--allow-reference-blas", action="store_true",
                    help="measure even when torch runs on the reference BLAS (refused otherwise)")
    args = ap.parse_args()
    if args.check:
        return check(args)
    bench(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
