#!/bin/sh
# Setup for the PyTorch side of `make bench` (bench/torch_model.py, run by bench_model) on Debian:
# python3-torch and python3-numpy, and OpenBLAS made the system BLAS through Debian's alternatives.
# Debian's python3-torch calls the system libblas.so.3 for its CPU matrix products; with the reference
# BLAS (libblas3, the default when nothing else is installed) they run at ~5 GFLOP/s and every ratio
# against titans.h is meaningless. torch_model.py reports the BLAS it finds and refuses the reference
# one unless given --allow-reference-blas.
#
#     sudo sh scripts/bench_setup.sh          (or as root; idempotent)
#     sh scripts/bench_setup.sh --check       (only reports what is installed)
set -e
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
case "$arch" in
  amd64) triplet=x86_64-linux-gnu ;;
  arm64) triplet=aarch64-linux-gnu ;;
  *) triplet=$(gcc -dumpmachine 2>/dev/null || echo "$arch-linux-gnu") ;;
esac
report() {
  for alt in libblas.so.3-$triplet liblapack.so.3-$triplet; do
    printf '%s -> %s\n' "$alt" "$(update-alternatives --query "$alt" 2>/dev/null | sed -n 's/^Value: //p')"
  done
  /usr/bin/python3 -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo "torch: not installed"
  # The kernels OpenBLAS picks for this CPU: an OpenBLAS older than the CPU falls back to "Prescott"
  # (SSE3, no FMA); bench/torch_model.py then starts again with OPENBLAS_CORETYPE set (docs/bench_model.md).
  /usr/bin/python3 -c 'import ctypes; b = ctypes.CDLL("libopenblas.so.0"); b.openblas_get_corename.restype = ctypes.c_char_p; print("OpenBLAS kernels:", b.openblas_get_corename().decode())' 2>/dev/null || echo "OpenBLAS kernels: unknown"
}
if [ "$1" = "--check" ]; then report; exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "bench_setup: not a Debian system (no apt-get); install PyTorch with an optimised BLAS yourself" >&2
  exit 1
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-torch python3-numpy libopenblas0-pthread
# libopenblas0-pthread registers itself with a higher priority than the reference BLAS; set it anyway
# in case the alternatives were switched to manual mode.
for lib in libblas.so.3 liblapack.so.3; do
  target=/usr/lib/$triplet/openblas-pthread/$lib
  [ -e "$target" ] && update-alternatives --set "$lib-$triplet" "$target"
done
report
