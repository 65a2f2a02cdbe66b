#!/usr/bin/python3
"""The write gate of a model's first memory layer, token by token: theta_t / theta_max for each byte.

    /usr/bin/python3 scripts/write_gate.py runs/prose/model.safetensors

In the first layer the memory's input x_t is the token's embedding alone (normalised by the block's
norm1), so the paper's gate theta_t = theta_max sigmoid(lr_w . x_t + lr_b) is a function of the token:
this prints it for digits, letters and signs. A model with gate_key (docs/model.md 1.3) also reads the
key; its printed value is the gate at a zero key, the part the token alone decides. Needs numpy.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import titans_st  # noqa: E402

EPS = 1e-6  # RMSNorm's (docs/model.md section 0)


def first_layer_gate(tensors):
    """theta / theta_max [vocab, H] of layer 0 for every token id."""
    emb, gain = tensors["tok_emb"].astype(np.float64), tensors["layers.0.norm1"].astype(np.float64)
    x = emb / np.sqrt((emb * emb).mean(1, keepdims=True) + EPS) * gain
    z = x @ tensors["layers.0.mem.lr_w"].T.astype(np.float64) + tensors["layers.0.mem.lr_b"]
    return 1.0 / (1.0 + np.exp(-z))


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip())
        return 2
    f = titans_st.load(argv[1])
    if "layers.0.mem.lr_w" not in f.tensors:
        print("%s: layer 0 has no memory" % argv[1])
        return 1
    theta = first_layer_gate(f.tensors)
    classes = [("digits", "0123456789"), ("lower-case letters", "abcdefghijklmnopqrstuvwxyz"),
               ("upper-case letters", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"), ("space, newline, signs", " \n.,;:!?'-()")]
    print("layer 0 write gate theta / theta_max by token (min .. max over the class, per head):")
    for name, chars in classes:
        ids = [ord(c) for c in chars if ord(c) < theta.shape[0]]
        lo, hi = theta[ids].min(0), theta[ids].max(0)
        print("  %-24s %s" % (name, "  ".join("%.3f .. %.3f" % (a, b) for a, b in zip(lo, hi))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
