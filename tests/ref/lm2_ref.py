#!/usr/bin/python3
"""Independent float64 PyTorch reference of a whole LM2 language model (docs/model.md sections 0, 2, 3, 4 and 5)
and the generator of tests/ref/lm2_golden.bin, the golden values tests/test_lm2.c compares against.

Written from the equations of docs/model.md, not from titans.h: plain loops over batch rows, positions and
segments, autograd for every gradient. Parameters are rounded to float32 before the float64 computation,
so the stored values are exactly the ones used.

Run: /usr/bin/python3 tests/ref/lm2_ref.py [output path]   (see tests/ref/README.md)
"""
import math, os, struct, sys
import torch

torch.set_default_dtype(torch.float64)
EPS = 1e-6


def rmsnorm(x, g):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + EPS) * g


def rope(x, pos, H):
    # x [T, d] split into H heads of width da; rotate-half pairs (i, i + da/2)
    T, d = x.shape
    da = d // H
    half = da // 2
    inv = torch.tensor([10000.0 ** (-2.0 * i / da) for i in range(half)], dtype=torch.float64)
    ang = torch.tensor(pos, dtype=torch.float64)[:, None] * inv[None, :]  # angles in float64
    c, s = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    xh = x.view(T, H, da)
    x1, x2 = xh[..., :half], xh[..., half:]
    c, s = c[:, None, :], s[:, None, :]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1).view(T, d)


def swa(xn, P, L, cfg):
    # one batch row: xn [T, d]; keys persist (no rope) + positions (t - w, t]
    T, d = xn.shape
    H, w = cfg["H"], cfg["window"]
    da = d // H
    pos = list(range(T))
    q = rope(xn @ P[L + "attn.wq"].T, pos, H).view(T, H, da)
    k = rope(xn @ P[L + "attn.wk"].T, pos, H).view(T, H, da)
    v = (xn @ P[L + "attn.wv"].T).view(T, H, da)
    if cfg["Np"] > 0:
        pe = P[L + "persist"]
        kp = (pe @ P[L + "attn.wk"].T).view(-1, H, da)
        vp = (pe @ P[L + "attn.wv"].T).view(-1, H, da)
    out = []
    for t in range(T):
        lo = max(0, t - w + 1)
        ks, vs = k[lo:t + 1], v[lo:t + 1]
        if cfg["Np"] > 0:
            ks, vs = torch.cat([kp, ks]), torch.cat([vp, vs])
        sc = torch.einsum("hd,nhd->hn", q[t], ks) / math.sqrt(da)
        a = torch.softmax(sc, -1)
        out.append(torch.einsum("hn,nhd->hd", a, vs).reshape(d))
    att = torch.stack(out)
    return att @ P[L + "attn.wo"].T


def lm2_mix(E, P, L, cfg):
    T, d = E.shape
    C = cfg["C"]
    M = P[L + "lm2.m0"]
    mix = []
    for s0 in range(0, T, C):
        Es = E[s0:s0 + C]
        Q = Es @ P[L + "lm2.wq"].T
        K = M @ P[L + "lm2.wk"].T
        V = M @ P[L + "lm2.wv"].T
        A = torch.softmax(Q @ K.T / math.sqrt(d), -1)
        Em = A @ V
        mix.append(Es + torch.sigmoid(Em @ P[L + "lm2.w_out"].T) * Em)
        if Es.shape[0] == C:
            Qu = M @ P[L + "lm2.uq"].T
            Ku = Es @ P[L + "lm2.uk"].T
            Vu = Es @ P[L + "lm2.uv"].T
            U = torch.softmax(Qu @ Ku.T / math.sqrt(d), -1) @ Vu
            M = torch.sigmoid(U @ P[L + "lm2.w_in"].T) * torch.tanh(U) + \
                torch.sigmoid(U @ P[L + "lm2.w_f"].T + P[L + "lm2.b_f"]) * M
    return torch.cat(mix)


def model(P, tokens, cfg):
    B, T1 = tokens.shape
    T = T1 - 1
    logits = []
    for b in range(B):
        x = P["tok_emb"][tokens[b, :T]]
        for l in range(cfg["layers"]):
            L = "layers.%d." % l
            xn = rmsnorm(x, P[L + "norm1"])
            E = swa(xn, P, L, cfg)
            h = x + lm2_mix(E, P, L, cfg)
            hn = rmsnorm(h, P[L + "norm2"])
            u1 = hn @ P[L + "ffn.w1"].T
            x = h + (u1 * torch.sigmoid(u1) * (hn @ P[L + "ffn.w3"].T)) @ P[L + "ffn.w2"].T
        xf = rmsnorm(x, P["norm_f"])
        logits.append(xf @ (P["tok_emb"] if cfg["tied"] else P["lm_head"]).T)
    lg = torch.stack(logits)
    loss = torch.nn.functional.cross_entropy(lg.reshape(B * T, -1), tokens[:, 1:].reshape(-1))
    return lg, loss


def param_shapes(cfg):
    V, d, ff, Ns, Np = cfg["V"], cfg["d"], cfg["ff"], cfg["Ns"], cfg["Np"]
    sh = [("tok_emb", (V, d))]
    for l in range(cfg["layers"]):
        L = "layers.%d." % l
        sh += [(L + "norm1", (d,))] + [(L + "attn." + n, (d, d)) for n in ("wq", "wk", "wv", "wo")]
        if Np:
            sh.append((L + "persist", (Np, d)))
        sh.append((L + "lm2.m0", (Ns, d)))
        sh += [(L + "lm2." + n, (d, d)) for n in ("wq", "wk", "wv", "w_out", "uq", "uk", "uv", "w_in", "w_f")]
        sh += [(L + "lm2.b_f", (d,)), (L + "norm2", (d,)), (L + "ffn.w1", (ff, d)), (L + "ffn.w3", (ff, d)),
               (L + "ffn.w2", (d, ff))]
    sh.append(("norm_f", (d,)))
    if not cfg["tied"]:
        sh.append(("lm_head", (V, d)))
    return sh


def init(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    P = {}
    for name, shape in param_shapes(cfg):
        if name.endswith(("norm1", "norm2", "norm_f")):
            t = 1 + 0.1 * torch.randn(shape, generator=g)
        elif name.endswith("b_f"):
            t = 0.5 + 1.5 * torch.rand(shape, generator=g)
        elif name.endswith(("persist", "tok_emb", "m0")):
            t = torch.randn(shape, generator=g)
        else:
            t = torch.randn(shape, generator=g) / math.sqrt(shape[1])
        P[name] = t.float().double().requires_grad_(True)
    return P


def session_logits(P, tokens, cfg):
    """The same model one token at a time, as a session runs it: a window of keys per layer, the bank of
    the segment's start, and the write's softmax over the segment accumulated online (running max, sum and
    weighted sum per slot), applied when the segment completes. Returns logits [B, T, V]."""
    B, T1 = tokens.shape
    T, d, C = T1 - 1, cfg["d"], cfg["C"]
    out = torch.zeros(B, T, cfg["V"])
    with torch.no_grad():
        for b in range(B):
            xs = {}  # per layer: the normalised inputs so far (the attention reads its window of them)
            bank = {l: P["layers.%d.lm2.m0" % l].clone() for l in range(cfg["layers"])}
            acc = {}
            for t in range(T):
                x = P["tok_emb"][tokens[b, t]]
                for l in range(cfg["layers"]):
                    L = "layers.%d." % l
                    xn = rmsnorm(x, P[L + "norm1"])
                    xs.setdefault(l, []).append(xn)
                    E = swa(torch.stack(xs[l]), P, L, cfg)[-1]  # the last query only is used
                    M = bank[l]
                    a = torch.softmax((E @ P[L + "lm2.wq"].T) @ (M @ P[L + "lm2.wk"].T).T / math.sqrt(d), -1)
                    Em = a @ (M @ P[L + "lm2.wv"].T)
                    h = x + E + torch.sigmoid(Em @ P[L + "lm2.w_out"].T) * Em
                    sc = (M @ P[L + "lm2.uq"].T) @ (E @ P[L + "lm2.uk"].T) / math.sqrt(d)  # [N_s]
                    vu = E @ P[L + "lm2.uv"].T
                    if t % C == 0:
                        acc[l] = [sc.clone(), torch.ones_like(sc), vu[None, :].repeat(len(sc), 1)]
                    else:
                        mx, sm, ac = acc[l]
                        nm = torch.maximum(mx, sc)
                        acc[l] = [nm, sm * torch.exp(mx - nm) + torch.exp(sc - nm),
                                  ac * torch.exp(mx - nm)[:, None] + torch.exp(sc - nm)[:, None] * vu[None, :]]
                    if t % C == C - 1:
                        U = acc[l][2] / acc[l][1][:, None]
                        bank[l] = torch.sigmoid(U @ P[L + "lm2.w_in"].T) * torch.tanh(U) + \
                            torch.sigmoid(U @ P[L + "lm2.w_f"].T + P[L + "lm2.b_f"]) * M
                    hn = rmsnorm(h, P[L + "norm2"])
                    u1 = hn @ P[L + "ffn.w1"].T
                    x = h + (u1 * torch.sigmoid(u1) * (hn @ P[L + "ffn.w3"].T)) @ P[L + "ffn.w2"].T
                out[b, t] = rmsnorm(x, P["norm_f"]) @ (P["tok_emb"] if cfg["tied"] else P["lm_head"]).T
    return out


def self_checks(P, tokens, cfg, lg, names, grads, failures):
    g = torch.Generator().manual_seed(5)
    # 1. central differences at 3 entries of every parameter
    worst = 0.0
    with torch.no_grad():
        for n, gr in zip(names, grads):
            flat = P[n].view(-1)
            for _ in range(3):
                j = int(torch.randint(0, flat.numel(), (1,), generator=g))
                keep = flat[j].item()
                flat[j] = keep + 1e-6
                lp = model(P, tokens, cfg)[1].item()
                flat[j] = keep - 1e-6
                lm = model(P, tokens, cfg)[1].item()
                flat[j] = keep
                fd, ad = (lp - lm) / 2e-6, gr.view(-1)[j].item()
                worst = max(worst, abs(fd - ad) / max(1e-2, abs(ad)))
    print("  1. central differences vs autograd: worst %.2e" % worst)
    if worst > 1e-6:
        failures.append("central differences")
    # 2. causality: changing the token at j changes no logit before j
    worst = 0.0
    for j in range(1, tokens.shape[1] - 1):
        other = tokens.clone()
        other[:, j] = (other[:, j] + 1) % cfg["V"]
        with torch.no_grad():
            lo = model(P, other, cfg)[0]
        worst = max(worst, (lo[:, :j] - lg[:, :j]).abs().max().item())
    print("  2. causality: largest change of a logit before the changed token %.1e" % worst)
    if worst != 0.0:
        failures.append("causality")
    # 3. token by token with the online write
    diff = (session_logits(P, tokens, cfg) - lg.detach()).abs().max().item()
    print("  3. token by token (online write) vs the full forward: %.2e" % diff)
    if diff > 1e-12:
        failures.append("token by token")
    # 4. the same reference in float32: what a correct float32 implementation can reach
    P32 = {n: t.detach().float().requires_grad_(True) for n, t in P.items()}
    torch.set_default_dtype(torch.float32)
    lg32, loss32 = model(P32, tokens, cfg)
    g32 = torch.autograd.grad(loss32, [P32[n] for n in names], allow_unused=True)
    torch.set_default_dtype(torch.float64)
    dl = ((lg32.double() - lg.detach()).abs().max() / lg.detach().abs().max()).item()
    dg = max(((a.double() - b).abs().max() / max(b.abs().max(), 1e-30)).item() for a, b in zip(g32, grads) if a is not None)
    print("  4. float32 vs float64: logits %.1e (of the largest), gradients %.1e (of each tensor's largest)" % (dl, dg))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "lm2_golden.bin")
    cases = [dict(V=11, d=8, H=2, layers=2, ff=16, window=3, Np=2, C=4, Ns=3, tied=1, B=2, T=11),
             dict(V=7, d=6, H=1, layers=1, ff=12, window=5, Np=0, C=3, Ns=2, tied=0, B=2, T=10),
             dict(V=9, d=8, H=4, layers=2, ff=8, window=16, Np=1, C=4, Ns=4, tied=1, B=2, T=8),
             dict(V=5, d=4, H=2, layers=1, ff=8, window=2, Np=0, C=16, Ns=2, tied=1, B=2, T=6)]
    recs = [("num_cases", [1], [float(len(cases))])]
    failures = []
    for i, cfg in enumerate(cases):
        P = init(cfg, 1000 + i)
        g = torch.Generator().manual_seed(77 + i)
        tokens = torch.randint(0, cfg["V"], (cfg["B"], cfg["T"] + 1), generator=g)
        lg, loss = model(P, tokens, cfg)
        names = [n for n, _ in param_shapes(cfg)]
        grads = torch.autograd.grad(loss, [P[n] for n in names], allow_unused=True)
        grads = [torch.zeros_like(P[n]) if gr is None else gr for n, gr in zip(names, grads)]
        conf = [cfg[k] for k in ("V", "d", "H", "layers", "ff", "window", "Np", "C", "Ns", "tied", "B", "T")]
        recs.append(("case%d.config" % i, [12], [float(c) for c in conf]))
        recs.append(("case%d.tokens" % i, list(tokens.shape), tokens.double().flatten().tolist()))
        recs.append(("case%d.logits" % i, list(lg.shape), lg.detach().flatten().tolist()))
        recs.append(("case%d.loss" % i, [1], [loss.item()]))
        for n, gr in zip(names, grads):
            recs.append(("case%d.param.%s" % (i, n), list(P[n].shape), P[n].detach().flatten().tolist()))
            recs.append(("case%d.grad.%s" % (i, n), list(P[n].shape), gr.flatten().tolist()))
        print("case %d: loss %.6f" % (i, loss.item()))
        self_checks(P, tokens, cfg, lg, names, grads, failures)
    with open(out, "wb") as f:
        f.write(b"TTNSGOLD" + struct.pack("<I", len(recs)))
        for name, dims, vals in recs:
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)) + nb + struct.pack("<I", len(dims)))
            f.write(struct.pack("<%dI" % len(dims), *dims))
            f.write(struct.pack("<%df" % len(vals), *vals))
    print("wrote", out)
    if failures:
        print("SELF-CHECKS FAILED:", ", ".join(failures))
        sys.exit(1)


main()
