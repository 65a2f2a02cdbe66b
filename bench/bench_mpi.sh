#!/bin/sh
# bench/bench_mpi.sh: tokens/s of `./titans train` four ways on this machine, the same model and batches:
# one process on 1 thread, one process on 2 threads, and 2 MPI ranks of 1 thread each (titans-mpi: each
# trains half of every batch; docs/mpi.md), the ranks' gradient sum overlapped with the backward (the
# default) and blocking after it (--reduce blocking); for the 2-rank runs also the step time and the
# all-reduce's exposed share of the training time (what the backward did not hide: all of it when blocking),
# its milliseconds a step, the wait for the slower rank before it, and the gradient bytes.
#
#   sh bench/bench_mpi.sh [steps (30)] [train options (the default model: MAG, d = 128, batch 16 x 128)]
#
# Builds BUILD/titans and BUILD/titans-mpi (BUILD=build/default; make; needs mpicc: sh scripts/mpi_setup.sh).
# The machine may be shared: run it when it is quiet, and compare the three runs of one call only. Every
# run prints the mean over its steps, the first (warm-up) step included, as ./titans train does.
set -e
cd "$(dirname "$0")/.."
steps=${1:-30}
shift 2>/dev/null || true
opts=${*:-}
command -v mpirun >/dev/null 2>&1 || { echo "bench_mpi: no mpirun (sh scripts/mpi_setup.sh installs OpenMPI)"; exit 1; }
build=${BUILD:-build/default}
make -s BUILD="$build" "$build/titans" "$build/titans-mpi"
flags=""
if mpirun --version 2>&1 | grep -q "Open MPI"; then flags="--allow-run-as-root --oversubscribe --bind-to none"; fi
out=$(mktemp -d "${TMPDIR:-/tmp}/bench_mpi.XXXXXX")
trap 'rm -rf "$out"' EXIT
common="--steps $steps --sample-len 0 --val-every 0 --save-every 0 --log-every $steps $opts"
export OMP_WAIT_POLICY=passive
tps() { sed -nE 's/^step +[0-9]+\/[0-9]+ .* ([0-9]+) tok\/s .*/\1/p' "$1" | tail -n 1; }
OMP_NUM_THREADS=1 "$build/titans" train $common --threads 1 --out "$out/a" > "$out/a.txt"
OMP_NUM_THREADS=2 "$build/titans" train $common --threads 2 --out "$out/b" > "$out/b.txt"
OMP_NUM_THREADS=1 mpirun $flags -np 2 "$build/titans-mpi" train $common --threads 1 --out "$out/c" > "$out/c.txt"
OMP_NUM_THREADS=1 mpirun $flags -np 2 "$build/titans-mpi" train $common --threads 1 --reduce blocking \
  --out "$out/d" > "$out/d.txt"
sed -n 's/^model: /model: /p' "$out/a.txt"
params=$(sed -nE 's/.* ([0-9]+) parameters.*/\1/p' "$out/a.txt")
tokens=$(sed -nE 's/^training: [0-9]+ steps of ([0-9]+) x ([0-9]+) tokens.*/\1 \2/p' "$out/a.txt" | awk '{ print $1 * $2 }')
one=$(tps "$out/a.txt") two=$(tps "$out/b.txt") ranks=$(tps "$out/c.txt") blocking=$(tps "$out/d.txt")
x() { awk -v a="$1" -v b="$one" 'BEGIN { printf "%.2f", a / b }'; }
step_ms() { awk -v t="$tokens" -v r="$1" 'BEGIN { printf "%.1f", 1e3 * t / r }'; }
printf '%-44s %8s tok/s\n' "1 process, 1 thread" "$one"
printf '%-44s %8s tok/s  (%s x)\n' "1 process, 2 threads" "$two" "$(x "$two")"
printf '%-44s %8s tok/s  (%s x), %s ms a step\n' "2 MPI ranks, 1 thread each, overlapped" "$ranks" "$(x "$ranks")" \
  "$(step_ms "$ranks")"
printf '%-44s %8s tok/s  (%s x), %s ms a step\n' "2 MPI ranks, 1 thread each, blocking" "$blocking" \
  "$(x "$blocking")" "$(step_ms "$blocking")"
line=$(grep '^data-parallel: 2 ranks;' "$out/c.txt")
echo "$line" | sed -E 's/^data-parallel: 2 ranks; /overlapped: /'
exposed=$(echo "$line" | sed -nE 's/.* \(([0-9.]+)%, ([0-9.]+) ms a step.*/\1% = \2 ms a step/p')
line=$(grep '^data-parallel: 2 ranks;' "$out/d.txt")
echo "$line" | sed -E 's/^data-parallel: 2 ranks; /blocking: /'
ms=$(echo "$line" | sed -nE 's/.*, ([0-9.]+) ms a step.*/\1/p')
echo "the all-reduce's exposed share of the training time: overlapped $exposed; blocking $(echo "$line" |
  sed -nE 's/.* \(([0-9.]+)%, ([0-9.]+) ms a step.*/\1% = \2 ms a step/p')"
awk -v p="$params" -v ms="$ms" 'BEGIN { b = 4 * p; printf "gradient: %d floats = %.2f MB a step; blocking all-reduce %.2f ms a step = %.2f GB/s of gradient (2 ranks, one machine)\n", p, b / 1e6, ms, b / (ms * 1e-3) / 1e9 }'
awk -v p="$params" -v a="$two" 'BEGIN { printf "a rank of this machine (1 process, 2 threads): %.3g token-parameters/s: sh bench/mpi_scaling.sh %.3g\n", p * a, p * a }'
