#!/usr/bin/python3
"""Which writes erase a needle from a model's first memory layer: a float64 re-run of that layer's memory.

    /usr/bin/python3 scripts/needle_erasure.py MODEL HAYSTACK [OFFSET [TOKENS_AFTER]]

For a model whose first memory layer is a matrix memory (mem depth 1: the retrieval recipe's MAC or
MAG) this puts the needle "The special magic number for gravel is 8305716. " after 3,000 bytes of
HAYSTACK read from OFFSET (100000), reads TOKENS_AFTER (65536) more bytes, and replays the layer's
recurrence of docs/model.md 1.3-1.4 (keys, values and gates of the token's normalised embedding, the
chunk's surprise at its start weights, the surprise bound, momentum, forgetting). Per write after the
needle it measures the damage, |W_t k_n - W_{t-1} k_n| summed over the needle digits' keys k_n, and
prints: the damage of digits and of other bytes, the writes that do most of it, how many writes hold
50 / 80 / 95% of it, and every 8,192 tokens cos(W k_n, v_n), how well the memory still returns what
each needle digit wrote. It reads the memory alone: attention, the output path and later layers are
not in it (./titans needle measures the answers). In a MAC model the memory learns from its block
input only with --mac-learns-input (the recipe's); otherwise this is not its input. Needs numpy.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import titans_st  # noqa: E402

NEEDLE = b"The special magic number for gravel is 8305716. "
EPS = 1e-6  # RMSNorm's and L2Norm's (docs/model.md section 0)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def silu(z):
    return z * sigmoid(z)


def causal_conv(u, w):
    """u [T, C], w [C, K]: c_t = sum_s w[:, s] u_{t-K+1+s} (docs/model.md section 0)."""
    K = w.shape[1]
    out = np.zeros_like(u)
    for s in range(K):
        shift = K - 1 - s
        out[shift:] += w[:, s] * u[:len(u) - shift]
    return out


def l2norm(z):
    return z / np.sqrt((z * z).sum(1, keepdims=True) + EPS)


def layer_inputs(f, text):
    """Keys, values and gates of layer 0's memory for the bytes of text, each [T, ...]."""
    t, mem = f.tensors, f.config["mem"]
    p = "layers.0.mem."
    toks = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
    emb = t["tok_emb"].astype(np.float64)[toks]
    x = emb / np.sqrt((emb * emb).mean(1, keepdims=True) + EPS) * t["layers.0.norm1"]  # [T, d]
    k = l2norm(silu(causal_conv(x @ t[p + "wk"].T, t[p + "conv_k"])))                  # [T, d_h]
    v = silu(causal_conv(x @ t[p + "wv"].T, t[p + "conv_v"]))                           # [T, d_h]
    theta = mem["theta_max"] * sigmoid(x @ t[p + "lr_w"][0] + t[p + "lr_b"][0])        # [T]
    eta = sigmoid(x @ t[p + "mom_w"][0] + t[p + "mom_b"][0])                            # [T]
    alpha = sigmoid(x @ t[p + "decay_w"][0] + t[p + "decay_b"][0])                      # [T]
    return toks, k, v, theta, eta, alpha


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip())
        return 2
    f = titans_st.load(argv[1])
    mem = f.config["mem"] if f.config else None
    if not mem or mem["depth"] != 1 or mem["heads"] != 1 or "layers.0.mem.wk" not in f.tensors:
        print("%s: the first layer needs one matrix memory head (mem depth 1, 1 head)" % argv[1])
        return 1
    hay = open(argv[2], "rb").read()
    offset = int(argv[3]) if len(argv) > 3 else 100000
    after = int(argv[4]) if len(argv) > 4 else 65536
    text = hay[offset:offset + 3000] + NEEDLE + hay[offset + 3000:offset + 3000 + after]
    needle_at = 3000
    toks, k, v, theta, eta, alpha = layer_inputs(f, text)
    digit_at = [needle_at + NEEDLE.index(b"8305716") + j for j in range(7)]
    last = digit_at[-1]
    k_needle, v_needle = k[digit_at], v[digit_at]  # [7, d_h] each
    W = f.tensors["layers.0.mem.w0.0"][0].astype(np.float64).copy()  # [d_h, d_h]
    S = np.zeros_like(W)
    tau, b = mem["surprise_bound"], mem["chunk"]
    damage = np.zeros(len(toks))  # [T] |change of W k_n| summed over the needle digits, per write
    for c0 in range(0, len(toks), b):
        c1 = min(c0 + b, len(toks))
        err = k[c0:c1] @ W.T - v[c0:c1]  # [b, d_h] each token's error at the chunk's start weights
        u2 = 4 * (err * err).sum(1) * (k[c0:c1] ** 2).sum(1)  # |u_t|^2 of u_t = 2 err k^T
        step = theta[c0:c1] / np.sqrt(1 + u2 / tau ** 2) if tau > 0 else theta[c0:c1]
        for i in range(c1 - c0):
            t = c0 + i
            before = k_needle @ W.T
            S = eta[t] * S - step[i] * 2 * np.outer(err[i], k[t])
            W = (1 - alpha[t]) * W + S
            if t > last:
                damage[t] = np.abs(k_needle @ W.T - before).sum()
        if c1 > last and (c1 - last) // 8192 != (c0 - last) // 8192:
            got = k_needle @ W.T
            cos = (got * v_needle).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(v_needle, axis=1)
            print("after %7d tokens: cos(W k_n, v_n) of the 7 digits %s" % (c1 - last, " ".join("%.2f" % c for c in cos)))
    hit, read = damage[last + 1:], toks[last + 1:]
    is_digit = (read >= 48) & (read < 58)
    print("%d tokens after the needle, %d digits; damage: digits %.3g, other bytes %.3g" %
          (len(read), is_digit.sum(), hit[is_digit].sum(), hit[~is_digit].sum()))
    order = np.sort(hit)[::-1]
    share = np.cumsum(order) / max(order.sum(), 1e-30)
    print("writes that hold 50 / 80 / 95%% of the damage: %d / %d / %d" %
          tuple(int(np.searchsorted(share, z)) + 1 for z in (0.5, 0.8, 0.95)))
    print("the 12 writes that damage most (the bytes before and the byte written):")
    for j in np.argsort(-hit)[:12]:
        t = last + 1 + j
        print("  %7d tokens after: %8.3g  %r" % (t - last, hit[j], text[max(0, t - 14):t + 1].decode("latin-1")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
