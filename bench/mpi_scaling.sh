#!/bin/sh
# bench/mpi_scaling.sh: the efficiency data-parallel training would reach at 8, 64 and 512 ranks, from a
# rank's measured speed and the gradient bytes (docs/mpi.md, "Scaling to many machines").
#
#   sh bench/mpi_scaling.sh RATE [tokens per rank per step (2048)]
#
# RATE: a rank's token-parameters per second, tokens/s x parameters, as bench/bench_mpi.sh prints it
# (for the MAG model of 2 layers, training costs about 6 flops per token-parameter). A step of t tokens
# per rank on P parameters computes for C = P t / RATE seconds; a ring all-reduce of the 4 P gradient
# bytes moves 2 (N - 1) / N x 4 P bytes through each rank's link, in 2 (N - 1) messages:
#     R = 2 (N - 1) / N x 4 P / bandwidth + 2 (N - 1) x latency.
# Without overlap a step takes C + R (efficiency C / (C + R)). Overlapped as titans_trainer_set_reduce_overlap
# does it (each range of the gradient sent once the backward has finished it: per layer from the top its
# FFN, then the rest of the layer, the embedding last), with the backward about 2/3 of C and each range's
# backward time and link time in proportion to its floats: range k is final at B c_k (B = 2 C / 3, c_k the
# floats of ranges 0..k), the link sends the ranges in order, so the last byte leaves at
# max_k (B c_k + R (1 - c_(k-1))), and a step takes C / 3 + max(B, that). The bottom layer's last range
# and the embedding can only go once the backward is over: that tail is what overlap cannot hide.
# P(d) for the MAG model of 2 layers: 46 d^2 + 346 d (titans train prints 797,912 at d = 128, 3,103,128 at
# 256, 12,235,544 at 512, 48,588,312 at 1024). Latency: 30 us a message at 10 Gbit/s (TCP), 3 us at
# 100 Gbit/s (RDMA): assumptions, not measurements.
rate=${1:?usage: sh bench/mpi_scaling.sh RATE [tokens per rank (2048)]}
t=${2:-2048}
awk -v rate="$rate" -v t="$t" '
# the backward B and the link R overlapped over the ranges of the MAG model of 2 layers at width d, tied:
# per layer its FFN (norm2 and 3 matrices of d x 4 d) and the rest, then the embedding (256 x d)
function overlapped(d, b, r,    p, layer, ffn, f, n, k, c, end, e) {
  p = 46 * d * d + 346 * d; layer = (p - 257 * d) / 2; ffn = 12 * d * d + d
  n = 0; f[++n] = ffn + d; f[++n] = layer - ffn; f[++n] = ffn; f[++n] = layer - ffn; f[++n] = 256 * d
  c = 0; end = b
  for (k = 1; k <= n; k++) { e = b * (c + f[k]) / p + r * (1 - c / p); if (e > end) end = e; c += f[k] }
  return end
}
BEGIN {
  printf "a rank: %.3g token-parameters/s (%.1f GFLOP/s at 6 flops each), %d tokens per step\n", rate, 6 * rate / 1e9, t
  printf "%6s %12s %10s %6s %10s %10s %9s %9s\n", "d", "params", "grad MB", "ranks", "Gbit/s", "compute s", "no ovl", "overlap"
  split("256 512 1024 2048", ds, " "); split("8 64 512", ns, " "); split("10 100", bws, " ")
  for (i = 1; i <= 4; i++) for (k = 1; k <= 2; k++) for (j = 1; j <= 3; j++) {
    d = ds[i]; n = ns[j]; bw = bws[k] * 1e9 / 8; lat = bws[k] == 10 ? 30e-6 : 3e-6
    p = 46 * d * d + 346 * d; c = p * t / rate
    r = 2 * (n - 1) / n * 4 * p / bw + 2 * (n - 1) * lat
    ov = c / 3 + overlapped(d, 2 * c / 3, r)
    printf "%6d %12.0f %10.1f %6d %10d %10.3f %8.1f%% %8.1f%%\n", d, p, 4 * p / 1e6, n, bws[k], c, 100 * c / (c + r), 100 * c / ov
  }
}'
