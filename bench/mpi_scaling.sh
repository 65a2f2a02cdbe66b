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
# Without overlap a step takes C + R (efficiency C / (C + R)); with the reduction of each layer overlapped
# with the backward of the layers below it (the backward is about 2/3 of C), about max(C, C / 3 + R).
# P(d) for the MAG model of 2 layers: 46 d^2 + 346 d (titans train prints 797,912 at d = 128, 3,103,128 at
# 256, 12,235,544 at 512, 48,588,312 at 1024). Latency: 30 us a message at 10 Gbit/s (TCP), 3 us at
# 100 Gbit/s (RDMA): assumptions, not measurements.
rate=${1:?usage: sh bench/mpi_scaling.sh RATE [tokens per rank (2048)]}
t=${2:-2048}
awk -v rate="$rate" -v t="$t" 'BEGIN {
  printf "a rank: %.3g token-parameters/s (%.1f GFLOP/s at 6 flops each), %d tokens per step\n", rate, 6 * rate / 1e9, t
  printf "%6s %12s %10s %6s %10s %10s %9s %9s\n", "d", "params", "grad MB", "ranks", "Gbit/s", "compute s", "no ovl", "overlap"
  split("256 512 1024 2048", ds, " "); split("8 64 512", ns, " "); split("10 100", bws, " ")
  for (i = 1; i <= 4; i++) for (k = 1; k <= 2; k++) for (j = 1; j <= 3; j++) {
    d = ds[i]; n = ns[j]; bw = bws[k] * 1e9 / 8; lat = bws[k] == 10 ? 30e-6 : 3e-6
    p = 46 * d * d + 346 * d; c = p * t / rate
    r = 2 * (n - 1) / n * 4 * p / bw + 2 * (n - 1) * lat
    ov = c / 3 + r; if (ov < c) ov = c
    printf "%6d %12.0f %10.1f %6d %10d %10.3f %8.1f%% %8.1f%%\n", d, p, 4 * p / 1e6, n, bws[k], c, 100 * c / (c + r), 100 * c / ov
  }
}'
