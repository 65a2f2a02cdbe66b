#!/usr/bin/python3
"""Independent PyTorch reference of the neural long-term memory layer (docs/model.md section 1) and the
generator of tests/ref/memory_golden.bin, the golden values the C tests compare against.

The reference is the literal token-by-token recurrence of docs/model.md 1.4: a Python loop over t, the momentary
surprise u_t taken with torch.autograd.grad(..., create_graph=True) at the chunk's start weights, so the
outer gradients flow through the inner gradient (second order) without any hand derivation. Everything
runs in float64; inputs and parameters are first rounded to float32 so the stored values are exactly
the values the reference used.

Run: /usr/bin/python3 tests/ref/memory_ref.py [output path]   (see tests/ref/README.md)
"""
import math
import struct
import sys
import os

import numpy as np
import torch

torch.set_default_dtype(torch.float64)
DT = torch.float64
EPS = 1e-6  # L2Norm and RMSNorm epsilon (docs/model.md section 0)

# tau (the surprise bound, docs/model.md 1.4; 0 = off) and gate_key (the write gate reads the key, 1.3) come
# last, so files of the 11- and 12-field layouts still read
CONFIG_FIELDS = ["d", "H", "d_h", "L_M", "e", "b", "K_c", "residual", "theta_max", "B", "T", "tau", "gate_key"]


def bounded_step(cfg, theta_t, u):
    """The surprise bound: theta_t [B, H] times 1 / sqrt(1 + |u_t|^2 / tau^2), |u_t|^2 summed over every
    layer of the head (u: a list of [B, H, n_out, n_in]). tau = 0 leaves theta_t as it is."""
    tau = cfg.get("tau", 0.0)
    if tau <= 0:
        return theta_t
    usq = sum((ul ** 2).sum((-1, -2)) for ul in u)
    return theta_t / torch.sqrt(1.0 + usq / tau ** 2)


# ------------------------------------------------------------------------------------------------
# Building blocks, each written from docs/model.md section 0
# ------------------------------------------------------------------------------------------------
def silu(x):
    return x * torch.sigmoid(x)


def l2norm(x):  # over the last axis: x / sqrt(sum(x^2) + 1e-6)
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + EPS)


def rmsnorm(x, g):  # over the last axis: x / sqrt(mean(x^2) + 1e-6) * g
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + EPS) * g


def causal_conv(u, w):
    """c_t[j] = sum_{s=0}^{K-1} w[j, s] * u_{t-K+1+s}[j], u_tau = 0 before the sequence.
    u: [B, T, C], w: [C, K] -> [B, T, C]."""
    B, T, C = u.shape
    K = w.shape[1]
    padded = torch.cat([torch.zeros(B, K - 1, C, dtype=u.dtype), u], dim=1)  # padded[i] = u_{i-K+1}
    out = torch.zeros(B, T, C, dtype=u.dtype)
    for s in range(K):
        out = out + w[:, s] * padded[:, s:s + T, :]  # u_{t-K+1+s} = padded[t+s]
    return out


def layer_widths(cfg):
    """n_0 .. n_{L_M}: n_0 = n_L = d_h, inner widths e * d_h."""
    L, dh = cfg["L_M"], cfg["d_h"]
    nh = cfg["e"] * dh
    return [dh] + [nh] * (L - 1) + [dh]


def mem_apply(z, W, residual):
    """M(z; W) for every batch row and head at once. z: [B, H, n_0]; W[l]: [B, H, n_{l+1}, n_l]."""
    a = z
    L = len(W)
    for l in range(L):
        zl = torch.einsum("bhoi,bhi->bho", W[l], a)
        a = silu(zl) if l < L - 1 else zl
    return z + a if residual else a


# ------------------------------------------------------------------------------------------------
# The layer
# ------------------------------------------------------------------------------------------------
def per_token(cfg, p, x):
    """docs/model.md 1.3: q, k, v [B, T, H, d_h] and the gates theta, eta, alpha [B, T, H]."""
    B, T, d = x.shape
    H, dh, K = cfg["H"], cfg["d_h"], cfg["K_c"]

    def path(wname, cname, act_norm):
        u = x @ p[wname].T  # [B, T, d_m]
        if K > 0:
            u = causal_conv(u, p[cname])
        u = silu(u).reshape(B, T, H, dh)  # head h owns channels h*d_h .. (h+1)*d_h-1
        return l2norm(u) if act_norm else u

    q = path("wq", "conv_q", True)
    k = path("wk", "conv_k", True)
    v = path("wv", "conv_v", False)
    theta_logit = torch.einsum("btd,hd->bth", x, p["lr_w"]) + p["lr_b"]
    if cfg.get("gate_key", 0):  # the write gate reads the key too: + lr_k[h] . k_t^h
        theta_logit = theta_logit + torch.einsum("bthj,hj->bth", k, p["lr_k"])
    theta = cfg["theta_max"] * torch.sigmoid(theta_logit)
    eta = torch.sigmoid(torch.einsum("btd,hd->bth", x, p["mom_w"]) + p["mom_b"])
    alpha = torch.sigmoid(torch.einsum("btd,hd->bth", x, p["decay_w"]) + p["decay_b"])
    return q, k, v, theta, eta, alpha


def memory_layer(cfg, p, x, second_order=True, debug=None):
    """docs/model.md 1.4 and 1.5, literally. Returns out [B, T, d] and the final (W_T, S_T) lists
    (layer l: [B, H, n_{l+1}, n_l]). second_order=False detaches u_t (only used to show that the
    second-order path matters). debug: a dict that receives q, k, v, gates, y and the u's."""
    B, T, d = x.shape
    H, dh, L, b, res = cfg["H"], cfg["d_h"], cfg["L_M"], cfg["b"], bool(cfg["residual"])
    q, k, v, theta, eta, alpha = per_token(cfg, p, x)

    W = [p["w0.%d" % l].unsqueeze(0).expand(B, -1, -1, -1).clone() for l in range(L)]
    S = [torch.zeros_like(w) for w in W]
    Wc = W  # W^(c), the weights at the end of the previous chunk
    ys, us = [], []
    for t in range(T):
        if t % b == 0:
            Wc = W
        # momentary surprise at the chunk's start weights; the sum over (batch row, head) is a sum of
        # independent losses, so each block of the gradient is that head's own gradient
        loss = ((mem_apply(k[:, t], Wc, res) - v[:, t]) ** 2).sum()
        u = torch.autograd.grad(loss, Wc, create_graph=second_order)
        if not second_order:
            u = [ul.detach() for ul in u]
        et = eta[:, t, :, None, None]
        th = bounded_step(cfg, theta[:, t], u)[:, :, None, None]
        al = alpha[:, t, :, None, None]
        S = [et * S[l] - th * u[l] for l in range(L)]
        W = [(1.0 - al) * W[l] + S[l] for l in range(L)]
        ys.append(mem_apply(q[:, t], W, res))  # read after the update
        us.append(u)
    y = torch.stack(ys, dim=1)  # [B, T, H, d_h]
    gate = silu(x @ p["wg"].T)  # [B, T, d_m]
    o = (rmsnorm(y, p["out_norm"]).reshape(B, T, H * dh) * gate) @ p["wo"].T
    if debug is not None:
        debug.update(q=q, k=k, v=v, theta=theta, eta=eta, alpha=alpha, y=y, u=us)
    return o, W, S


# ------------------------------------------------------------------------------------------------
# Self-check only: plain online gradient descent with momentum (b = 1 must equal it)
# ------------------------------------------------------------------------------------------------
def online_gd(cfg, p, x):
    B, T, d = x.shape
    L, res = cfg["L_M"], bool(cfg["residual"])
    q, k, v, theta, eta, alpha = per_token(cfg, p, x)
    W = [p["w0.%d" % l].unsqueeze(0).expand(B, -1, -1, -1).clone() for l in range(L)]
    S = [torch.zeros_like(w) for w in W]
    ys = []
    for t in range(T):
        loss = ((mem_apply(k[:, t], W, res) - v[:, t]) ** 2).sum()
        g = torch.autograd.grad(loss, W, create_graph=True)
        th = bounded_step(cfg, theta[:, t], g)[:, :, None, None]
        S = [eta[:, t, :, None, None] * S[l] - th * g[l] for l in range(L)]
        W = [(1 - alpha[:, t, :, None, None]) * W[l] + S[l] for l in range(L)]
        ys.append(mem_apply(q[:, t], W, res))
    return torch.stack(ys, 1), W, S


# ------------------------------------------------------------------------------------------------
# Self-check only: the chunked parallel form of docs/model.md 1.6 (scalars A, B, C, D, E, hand-derived deltas),
# to show the spec's formulas reproduce the recurrence the C implementation is compared against.
# ------------------------------------------------------------------------------------------------
def chunked_form(cfg, p, x):
    B, T, d = x.shape
    L, b, res = cfg["L_M"], cfg["b"], bool(cfg["residual"])
    q, k, v, theta, eta, alpha = per_token(cfg, p, x)
    W0 = [p["w0.%d" % l].unsqueeze(0).expand(B, -1, -1, -1).clone() for l in range(L)]
    S0 = [torch.zeros_like(w) for w in W0]
    ys = []
    for c0 in range(0, T, b):
        n = min(b, T - c0)
        th, et, om = theta[:, c0:c0 + n], eta[:, c0:c0 + n], 1.0 - alpha[:, c0:c0 + n]  # [B, n, H]

        def prod(f, lo, hi):  # prod_{lo < j <= hi} f_j over local indices (empty product = 1)
            r = torch.ones(B, f.shape[2])
            for j in range(lo + 1, hi + 1):
                r = r * f[:, j]
            return r

        Av = [prod(om, -1, t) for t in range(n)]
        Ev = [prod(et, -1, t) for t in range(n)]
        Bv = [sum(prod(om, s, t) * Ev[s] for s in range(t + 1)) for t in range(n)]
        # keys through W0: activations A_l [B, H, n, n_l] and deltas
        kk = k[:, c0:c0 + n].transpose(1, 2)  # [B, H, n, d_h]
        vv = v[:, c0:c0 + n].transpose(1, 2)
        acts, zs = [kk], []
        for l in range(L):
            z = acts[-1] @ W0[l].transpose(-1, -2)
            zs.append(z)
            acts.append(silu(z) if l < L - 1 else z)
        out = acts[-1] + (kk if res else 0)
        delta = [None] * L
        delta[L - 1] = 2 * (out - vv)
        for l in range(L - 1, 0, -1):
            sg = torch.sigmoid(zs[l - 1])
            delta[l - 1] = (delta[l] @ W0[l]) * (sg * (1 + zs[l - 1] * (1 - sg)))
        if cfg.get("tau", 0.0) > 0:  # the bound: |u_i|^2 = sum_l |delta_l[i]|^2 |A_l[i]|^2, no outer product formed
            usq = sum((delta[l] ** 2).sum(-1) * (acts[l] ** 2).sum(-1) for l in range(L))  # [B, H, n]
            th = th / torch.sqrt(1.0 + usq.transpose(1, 2) / cfg["tau"] ** 2)
        C = torch.zeros(B, n, n, th.shape[2])
        D = torch.zeros(B, n, n, th.shape[2])
        for t in range(n):
            for i in range(t + 1):
                D[:, t, i] = th[:, i] * prod(et, i, t)
                C[:, t, i] = th[:, i] * sum(prod(om, s, t) * prod(et, i, s) for s in range(i, t + 1))
        Cm = C.permute(0, 3, 1, 2)  # [B, H, n, n]
        Dm = D.permute(0, 3, 1, 2)
        A_ = torch.stack(Av, 1).transpose(1, 2)[..., None]  # [B, H, n, 1]
        B_ = torch.stack(Bv, 1).transpose(1, 2)[..., None]
        # queries: Zhat_l = diag(A) Ahat W0^T + diag(B) Ahat S0^T - (C o (Ahat A^T)) Delta
        qq = q[:, c0:c0 + n].transpose(1, 2)
        ah = qq
        for l in range(L):
            zh = (A_ * (ah @ W0[l].transpose(-1, -2)) + B_ * (ah @ S0[l].transpose(-1, -2))
                  - (Cm * (ah @ acts[l].transpose(-1, -2))) @ delta[l])
            ah = silu(zh) if l < L - 1 else zh
        ys.append((ah + (qq if res else 0)).transpose(1, 2))
        Ab, Bb, Eb = Av[n - 1][..., None, None], Bv[n - 1][..., None, None], Ev[n - 1][..., None, None]
        cb, db = Cm[:, :, n - 1, :, None], Dm[:, :, n - 1, :, None]  # [B, H, n, 1]
        newW = [Ab * W0[l] + Bb * S0[l] - delta[l].transpose(-1, -2) @ (cb * acts[l]) for l in range(L)]
        newS = [Eb * S0[l] - delta[l].transpose(-1, -2) @ (db * acts[l]) for l in range(L)]
        W0, S0 = newW, newS
    return torch.cat(ys, 1), W0, S0


# ------------------------------------------------------------------------------------------------
# Cases and parameters
# ------------------------------------------------------------------------------------------------
def param_shapes(cfg):
    d, H, dh, L, K = cfg["d"], cfg["H"], cfg["d_h"], cfg["L_M"], cfg["K_c"]
    dm = H * dh
    n = layer_widths(cfg)
    shapes = [("wq", [dm, d]), ("wk", [dm, d]), ("wv", [dm, d])]
    if K > 0:
        shapes += [("conv_q", [dm, K]), ("conv_k", [dm, K]), ("conv_v", [dm, K])]
    shapes += [("lr_w", [H, d]), ("lr_b", [H])]
    if cfg.get("gate_key", 0):
        shapes += [("lr_k", [H, dh])]
    shapes += [("mom_w", [H, d]), ("mom_b", [H]), ("decay_w", [H, d]), ("decay_b", [H])]
    shapes += [("w0.%d" % l, [H, n[l + 1], n[l]]) for l in range(L)]
    shapes += [("out_norm", [dh]), ("wg", [dm, d]), ("wo", [d, dm])]
    return shapes


def f32(t):  # round to float32, compute in float64: the stored values are exactly the values used
    return t.to(torch.float32).to(DT)


def make_params(cfg, gen):
    d, H, dh, K = cfg["d"], cfg["H"], cfg["d_h"], cfg["K_c"]
    dm = H * dh
    n = layer_widths(cfg)

    def normal(shape, std):
        return torch.randn(*shape, generator=gen) * std

    def uniform(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(*shape, generator=gen)

    p = {}
    for name, shape in param_shapes(cfg):
        if name in ("wq", "wk", "wv", "wg"):
            t = normal(shape, 1.0 / math.sqrt(d))  # unit-variance projections of a unit-variance x
        elif name.startswith("conv_"):
            t = normal(shape, 0.5)  # a centre tap near 1 keeps the conv O(1) with a mixed history
            t[:, -1] += 0.5
        elif name in ("lr_w", "mom_w", "decay_w"):
            t = normal(shape, 0.3 / math.sqrt(d))  # gate logits vary by token but do not saturate
        elif name == "lr_k":
            t = normal(shape, 1.0)  # |k| = 1: the key moves the write gate's logit by about 1
        elif name in ("lr_b", "mom_b"):
            t = uniform(shape, -1.0, 1.0)
        elif name == "decay_b":
            t = uniform(shape, -3.0, -1.0)  # alpha about 0.05 .. 0.3: the memory forgets, not too fast
        elif name.startswith("w0."):
            l = int(name[3:])
            t = normal(shape, 1.0 / math.sqrt(n[l]))
        elif name == "out_norm":
            t = 1.0 + normal(shape, 0.1)
        elif name == "wo":
            t = normal(shape, 1.0 / math.sqrt(dm))
        else:
            raise AssertionError(name)
        p[name] = f32(t)
    return p


# theta_max values are dyadic so their float32 config entry is exact.
CASES = [
    # main case: L_M = 2, conv, b = 4 (does not divide T = 11)
    dict(d=8, H=2, d_h=4, L_M=2, e=2, b=4, K_c=4, residual=0, theta_max=0.5, B=2, T=11),
    dict(d=8, H=2, d_h=4, L_M=1, e=2, b=1, K_c=4, residual=0, theta_max=0.5, B=2, T=11),
    dict(d=8, H=2, d_h=4, L_M=1, e=2, b=3, K_c=0, residual=1, theta_max=0.75, B=2, T=11),
    dict(d=8, H=2, d_h=4, L_M=2, e=3, b=5, K_c=0, residual=1, theta_max=0.625, B=2, T=11),
    dict(d=8, H=2, d_h=4, L_M=3, e=2, b=4, K_c=4, residual=1, theta_max=0.5, B=2, T=12),
    dict(d=8, H=2, d_h=4, L_M=3, e=2, b=1, K_c=0, residual=0, theta_max=0.5, B=2, T=11),
    dict(d=12, H=3, d_h=4, L_M=2, e=2, b=1, K_c=4, residual=1, theta_max=0.5, B=2, T=11),
    # d_m = 12 != d = 8, conv width 2, one partial chunk (b > T)
    dict(d=8, H=2, d_h=6, L_M=2, e=2, b=16, K_c=2, residual=0, theta_max=0.5, B=2, T=11),
    # the surprise bound (tau dyadic too), small enough to scale most steps
    dict(d=8, H=2, d_h=4, L_M=2, e=2, b=4, K_c=4, residual=0, theta_max=0.5, B=2, T=11, tau=0.5),
    dict(d=8, H=2, d_h=4, L_M=1, e=2, b=1, K_c=4, residual=0, theta_max=0.5, B=2, T=11, tau=0.25),
    dict(d=8, H=2, d_h=4, L_M=3, e=2, b=3, K_c=0, residual=1, theta_max=0.5, B=2, T=11, tau=0.5),
    # the write gate that reads the key (gate_key), with and without the surprise bound
    dict(d=8, H=2, d_h=4, L_M=1, e=2, b=4, K_c=4, residual=0, theta_max=0.5, B=2, T=11, gate_key=1),
    dict(d=8, H=2, d_h=4, L_M=2, e=2, b=3, K_c=4, residual=0, theta_max=0.5, B=2, T=11, tau=0.5, gate_key=1),
]


def make_case(i, cfg):
    gen = torch.Generator().manual_seed(20250117 + 101 * i)
    p = make_params(cfg, gen)
    x = f32(torch.randn(cfg["B"], cfg["T"], cfg["d"], generator=gen))
    dout = f32(torch.randn(cfg["B"], cfg["T"], cfg["d"], generator=gen))
    return p, x, dout


def outer_loss(cfg, p, x, dout, second_order=True):
    o, _, _ = memory_layer(cfg, p, x, second_order)
    return (o * dout).sum()


def run_case(cfg, p, x, dout):
    leaves = {k: t.clone().requires_grad_(True) for k, t in p.items()}
    xl = x.clone().requires_grad_(True)
    dbg = {}
    o, W, S = memory_layer(cfg, leaves, xl, True, dbg)
    Lval = (o * dout).sum()
    names = list(leaves)
    grads = torch.autograd.grad(Lval, [leaves[k] for k in names] + [xl])
    g = dict(zip(names, grads[:-1]))
    g["x"] = grads[-1]
    return o.detach(), [w.detach() for w in W], [s.detach() for s in S], g, dbg


# ------------------------------------------------------------------------------------------------
# Self-checks
# ------------------------------------------------------------------------------------------------
def maxdiff(a, b):
    return (a - b).abs().max().item()


def check_conv():
    gen = torch.Generator().manual_seed(7)
    u = torch.randn(2, 9, 5, generator=gen)
    w = torch.randn(5, 4, generator=gen)
    ref = torch.nn.functional.conv1d(u.transpose(1, 2), w[:, None, :], padding=3, groups=5)[..., :9]
    return maxdiff(causal_conv(u, w), ref.transpose(1, 2))


def fd_check(cfg, p, x, dout, g, gen, per_param=3, h=1e-5):
    """Central differences of L = sum(out * dout) at a few random entries of every parameter and x.
    Returns the largest |fd - autograd| / max(1e-2, |autograd|) (gradients here are O(1); the floor keeps
    near-zero entries, whose differences are all rounding, from dominating)."""
    worst = 0.0
    targets = list(p.items()) + [("x", x)]
    for name, t in targets:
        flat_n = t.numel()
        idx = torch.randint(0, flat_n, (per_param,), generator=gen).tolist()
        for j in idx:
            vals = []
            for sgn in (1.0, -1.0):
                pp = {k: v.clone().requires_grad_(True) for k, v in p.items()}
                xx = x.clone().requires_grad_(True)
                tgt = xx if name == "x" else pp[name]
                with torch.no_grad():
                    tgt.view(-1)[j] += sgn * h
                vals.append(outer_loss(cfg, pp, xx, dout).item())
            fd = (vals[0] - vals[1]) / (2 * h)
            an = g[name].reshape(-1)[j].item()
            worst = max(worst, abs(fd - an) / max(1e-2, abs(an)))
    return worst


def gradcheck_tiny():
    """torch.autograd.gradcheck (full Jacobian by finite differences) on a tiny case, every input."""
    cfg = dict(d=4, H=2, d_h=2, L_M=2, e=2, b=2, K_c=2, residual=1, theta_max=0.5, B=1, T=5)
    gen = torch.Generator().manual_seed(99)
    p = make_params(cfg, gen)
    x = torch.randn(1, 5, 4, generator=gen)
    names = list(p)

    def fn(*args):
        pp = dict(zip(names, args[:-1]))
        return memory_layer(cfg, pp, args[-1])[0]

    inputs = tuple(p[k].clone().requires_grad_(True) for k in names) + (x.requires_grad_(True),)
    return torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


def causality_check(cfg, p, x):
    o, _, _ = memory_layer(cfg, {k: v.clone().requires_grad_(True) for k, v in p.items()}, x)
    j = cfg["T"] // 2
    x2 = x.clone()
    x2[:, j] += 1.0
    o2, _, _ = memory_layer(cfg, {k: v.clone().requires_grad_(True) for k, v in p.items()}, x2)
    return maxdiff(o[:, :j], o2[:, :j]), maxdiff(o[:, j:], o2[:, j:])


# ------------------------------------------------------------------------------------------------
# File output
# ------------------------------------------------------------------------------------------------
def write_golden(path, records):
    with open(path, "wb") as f:
        f.write(b"TTNSGOLD")
        f.write(struct.pack("<I", len(records)))
        for name, arr in records:
            a = np.ascontiguousarray(np.asarray(arr, dtype="<f4"))
            nb = name.encode("ascii")
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<I", a.ndim))
            f.write(struct.pack("<%dI" % a.ndim, *a.shape))
            f.write(a.tobytes())


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "memory_golden.bin")
    torch.manual_seed(0)
    print("conv vs torch conv1d(groups, padding=K-1): max diff %.3g" % check_conv())
    ok_all = True
    records = [("num_cases", np.array([len(CASES)], dtype=np.float32))]
    gen_fd = torch.Generator().manual_seed(4242)
    for i, cfg in enumerate(CASES):
        p, x, dout = make_case(i, cfg)
        o, W, S, g, dbg = run_case(cfg, p, x, dout)
        th, et, al = dbg["theta"], dbg["eta"], dbg["alpha"]
        print("case%d: %s" % (i, " ".join("%s=%s" % (k, cfg.get(k, 0)) for k in CONFIG_FIELDS)))
        print("  |out| max %.3f  rms %.3f;  theta %.3f..%.3f  eta %.3f..%.3f  alpha %.3f..%.3f"
              % (o.abs().max(), o.pow(2).mean().sqrt(), th.min(), th.max(), et.min(), et.max(),
                 al.min(), al.max()))
        moved = max(maxdiff(W[l], p["w0.%d" % l].unsqueeze(0)) for l in range(cfg["L_M"]))
        print("  max |grad| per tensor: " + " ".join("%s %.2g" % (k, v.abs().max()) for k, v in g.items()))
        print("  max |W_T - w0| = %.3f (the memory moves)" % moved)
        leaves = {k: t.clone().requires_grad_(True) for k, t in p.items()}
        y_cf, W_cf, S_cf = chunked_form(cfg, leaves, x)
        e_cf = max([maxdiff(y_cf, dbg["y"])] + [maxdiff(a, b) for a, b in zip(W_cf, W)] +
                   [maxdiff(a, b) for a, b in zip(S_cf, S)])
        print("  docs/model.md 1.6 chunked parallel form vs 1.4 recurrence (y, W_T, S_T): max diff %.3g" % e_cf)
        ok_all &= e_cf < 1e-10
        if cfg["b"] == 1:
            leaves = {k: t.clone().requires_grad_(True) for k, t in p.items()}
            y_gd, W_gd, S_gd = online_gd(cfg, leaves, x)
            e_gd = max([maxdiff(y_gd, dbg["y"])] + [maxdiff(a, b) for a, b in zip(W_gd, W)])
            print("  b = 1 vs plain online GD with momentum: max diff %.3g" % e_gd)
            ok_all &= e_gd < 1e-12
        else:  # the chunk rule matters: the same case with b = 1 gives other outputs
            leaves = {k: t.clone().requires_grad_(True) for k, t in p.items()}
            o_b1, _, _ = memory_layer(dict(cfg, b=1), leaves, x)
            print("  same case with b = 1: out differs by %.3g (the chunk-start rule is exercised)"
                  % maxdiff(o_b1, o))
        before, after = causality_check(cfg, p, x)
        print("  causality: change x_%d -> outputs before it change by %.3g (after: %.3g)"
              % (cfg["T"] // 2, before, after))
        ok_all &= before == 0.0 and after > 0.0
        fd = fd_check(cfg, p, x, dout, g, gen_fd)
        print("  central differences (3 entries of every parameter and x): max rel err %.3g" % fd)
        ok_all &= fd < 1e-6
        # the second-order terms matter: with u_t detached, k and v reach the output only through
        # u_t's value being constant, so grad.wk vanishes and grad.w0 changes
        leaves = {k: t.clone().requires_grad_(True) for k, t in p.items()}
        L1 = outer_loss(cfg, leaves, x, dout, second_order=False)
        g1 = torch.autograd.grad(L1, [leaves["wk"], leaves["w0.0"]], allow_unused=True)
        gwk = torch.zeros_like(g["wk"]) if g1[0] is None else g1[0]
        print("  u detached (first order only): grad.wk max diff %.3g, grad.w0.0 max diff %.3g "
              "(|grad.wk| max %.3g, |grad.w0.0| max %.3g)" % (maxdiff(gwk, g["wk"]), maxdiff(g1[1], g["w0.0"]),
                                                              g["wk"].abs().max(), g["w0.0"].abs().max()))

        # what float32 can reach: the same reference run in float32 (the C tolerance should be near this)
        p32 = {k: t.to(torch.float32).requires_grad_(True) for k, t in p.items()}
        x32 = x.to(torch.float32).requires_grad_(True)
        o32, _, _ = memory_layer(cfg, p32, x32)
        g32 = torch.autograd.grad((o32 * dout.to(torch.float32)).sum(), list(p32.values()) + [x32])
        rel = max(maxdiff(a.to(DT), g[k]) / g[k].abs().max().item() for k, a in zip(list(p) + ["x"], g32))
        print("  float32 run of this reference: out max diff %.3g, grads max diff / max |grad| %.3g"
              % (maxdiff(o32.detach().to(DT), o), rel))

        pre = "case%d." % i
        records.append((pre + "config", np.array([cfg.get(k, 0.0) for k in CONFIG_FIELDS], dtype=np.float32)))
        records.append((pre + "x", x.numpy()))
        for name, _ in param_shapes(cfg):
            records.append((pre + name, p[name].numpy()))
        records.append((pre + "dout", dout.numpy()))
        records.append((pre + "out", o.numpy()))
        for l in range(cfg["L_M"]):
            records.append((pre + "state.w.%d" % l, W[l].numpy()))
        for l in range(cfg["L_M"]):
            records.append((pre + "state.s.%d" % l, S[l].numpy()))
        for name, _ in param_shapes(cfg):
            records.append((pre + "grad." + name, g[name].numpy()))
        records.append((pre + "grad.x", g["x"].numpy()))
        B, T, H, dh = cfg["B"], cfg["T"], cfg["H"], cfg["d_h"]
        for nm in ("q", "k", "v", "y"):
            records.append((pre + "dbg." + nm, dbg[nm].detach().reshape(B, T, H * dh).numpy()))
        for nm in ("theta", "eta", "alpha"):
            records.append((pre + "dbg." + nm, dbg[nm].detach().numpy()))

    ok = gradcheck_tiny()
    print("torch.autograd.gradcheck, tiny case (every parameter and x, full Jacobian): %s" % ok)
    ok_all &= bool(ok)
    write_golden(out_path, records)
    print("wrote %s: %d records, %d bytes" % (out_path, len(records), os.path.getsize(out_path)))
    print("self-checks: %s" % ("all passed" if ok_all else "FAILED"))
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
