#!/bin/sh
# Data-parallel ./titans train over MPI (docs/mpi.md): for every kind, `mpirun -np 2 titans-mpi train` gives
# the weights of one process's `titans train` (same options, the batch split over the ranks) to float
# reordering; the reduction overlapped with the backward (the default) and the blocking one (--reduce blocking)
# give the same loss curves and weights; a run stopped at 2 ranks resumes as one process and ends where the
# one-process run does; a batch the ranks do not divide and ranks started with different options are refused;
# a rank killed mid-run leaves the last checkpoint loadable and --resume finishes the run.
# Usage: sh tests/test_mpi.sh BUILD   (BUILD holds titans, titans-mpi and weights_diff: make check-mpi)
# MPI_STEPS (20) steps per equality run; MPI_TOL (1e-4) the largest relative weight difference allowed;
# MPI_MODEL the train options of every run (a model of d = 32 on batches of 8 x 64 by default).
# Skips itself, saying so, without mpirun. The last line is "test_mpi: N passed, N failed".
build=${1:-build/default}
case $build in /*) ;; *) build=$(pwd)/$build ;; esac
if ! command -v mpirun >/dev/null 2>&1; then
  echo "test_mpi: skipped (no mpirun; sh scripts/mpi_setup.sh installs OpenMPI)"
  echo "test_mpi: 0 passed, 0 failed"
  exit 0
fi
one=$build/titans mpi=$build/titans-mpi diff=$build/weights_diff
root=$(cd "$(dirname "$0")/.." && pwd)
steps=${MPI_STEPS:-20} tol=${MPI_TOL:-1e-4}
# OpenMPI refuses root without --allow-run-as-root and more ranks than cores without --oversubscribe;
# ranks are not pinned to cores (each runs one OpenMP thread here).
flags=""
if mpirun --version 2>&1 | grep -q "Open MPI"; then flags="--allow-run-as-root --oversubscribe --bind-to none"; fi
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
tmp=$(mktemp -d "${TMPDIR:-/tmp}/titans_mpi.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
tests_dir=$(cd "$(dirname "$0")" && pwd)
cd "$tmp" || exit 1
. "$tests_dir/lib.sh" # pass, fail, check, run
# weights_diff's relative difference of two model files is at most tol
close() { r=$("$diff" "$1" "$2" | sed -nE 's/.*max relative ([^ ]*) .*/\1/p'); echo "$r" > rel.txt
  [ -n "$r" ] && awk -v r="$r" -v t="$tol" 'BEGIN { exit !(r <= t) }'; }

small=${MPI_MODEL:-"--d 32 --layers 1 --seq 64 --batch 8 --sample-len 0 --val-every 10 --val-batches 1 --log-every 10"}
echo "== one process vs 2 ranks, $steps steps of: $small (streams of 4096 tokens where the kind streams)"
for kind in mag mac mal lmm lm2 attn swa; do
  rc1=$(run "$one" train $small --block $kind --steps $steps --out one_$kind); cp out.txt one_$kind.txt
  rc2=$(run mpirun $flags -np 2 "$mpi" train $small --block $kind --steps $steps --out two_$kind)
  grep -q "data-parallel: 2 ranks" out.txt; said=$?
  check "$kind: both runs exit 0 (rc $rc1, $rc2), the 2-rank run says it is one" [ "$rc1" = 0 -a "$rc2" = 0 -a $said = 0 ]
  close one_$kind/model.safetensors two_$kind/model.safetensors; ok=$?
  v1=$(sed -nE 's/.*validation loss ([0-9.]+)$/\1/p' one_$kind.txt | tail -n 1)
  v2=$(sed -nE 's/.*validation loss ([0-9.]+)$/\1/p' out.txt | tail -n 1)
  check "$kind: 2 ranks give one process's weights: max relative difference $(cat rel.txt) (tol $tol); validation $v1, $v2" [ $ok = 0 ]
done

echo "== overlapped vs blocking reduction vs one process, $steps steps, a loss every step"
# loss_curve FILE: "step loss" of every logged step
loss_curve() { sed -nE 's/^step +([0-9]+)\/[0-9]+ +loss ([0-9.]+) .*/\1 \2/p' "$1"; }
for kind in mag mac lm2 attn; do
  rc1=$(run "$one" train $small --log-every 1 --block $kind --steps $steps --out c1_$kind)
  loss_curve out.txt > c1_$kind.txt
  rc2=$(run mpirun $flags -np 2 "$mpi" train $small --log-every 1 --block $kind --steps $steps --out co_$kind)
  loss_curve out.txt > co_$kind.txt; grep -q "overlapped with the backward" out.txt; said_o=$?
  rc3=$(run mpirun $flags -np 2 "$mpi" train $small --log-every 1 --block $kind --steps $steps --reduce blocking \
    --out cb_$kind)
  loss_curve out.txt > cb_$kind.txt; grep -q "data-parallel: 2 ranks; the gradient all-reduce took" out.txt; said_b=$?
  check "$kind: one process, overlapped and blocking 2-rank runs exit 0 (rc $rc1, $rc2, $rc3) and say how they reduce" \
    [ "$rc1" = 0 -a "$rc2" = 0 -a "$rc3" = 0 -a $said_o = 0 -a $said_b = 0 ]
  n=$(wc -l < co_$kind.txt)
  dl=$(paste co_$kind.txt c1_$kind.txt |
    awk '{ d = $2 - $4; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.4f", m }')
  check "$kind: overlapped and blocking loss curves are equal ($n steps, 4 digits); one process's within $dl" \
    sh -c "[ $n = $steps ] && cmp -s co_$kind.txt cb_$kind.txt && [ \$(wc -l < c1_$kind.txt) = $steps ] && \
           awk -v d=$dl 'BEGIN { exit !(d <= 0.002) }'"
  close cb_$kind/model.safetensors co_$kind/model.safetensors; ok=$?; rob=$(cat rel.txt)
  same=different; cmp -s cb_$kind/model.safetensors co_$kind/model.safetensors && same="bit for bit the same"
  close c1_$kind/model.safetensors co_$kind/model.safetensors; ok1=$?
  check "$kind: overlapped vs blocking weights: max relative difference $rob ($same); overlapped vs one process: \
$(cat rel.txt) (tol $tol)" [ $ok = 0 -a $ok1 = 0 ]
done
rc=$(run mpirun $flags -np 2 "$mpi" train $small --steps 2 --reduce sideways --out bad)
check "--reduce sideways is refused (rc $rc)" sh -c "[ $rc != 0 ] && grep -q 'want overlap or blocking' err.txt"

echo "== a run stopped at 2 ranks, resumed as one process"
rc=$(run mpirun $flags -np 2 "$mpi" train $small --steps $steps --stop-at 8 --out split)
check "stopped at step 8 on 2 ranks (rc $rc), rows' memory saved" [ "$rc" = 0 -a -s split/stream.safetensors ]
rc=$(run "$one" train $small --steps $steps --resume --out split)
check "resumed as one process (rc $rc) at step 8, the rows' memory too" \
  sh -c "[ $rc = 0 ] && grep -q 'at step 8' out.txt && grep -q 'resumed the rows' out.txt"
close one_mag/model.safetensors split/model.safetensors; ok=$?
check "  it ends where the one-process run does: max relative difference $(cat rel.txt)" [ $ok = 0 ]

echo "== refused"
rc=$(run mpirun $flags -np 2 "$mpi" train $small --batch 7 --steps 2 --out bad)
check "--batch 7 on 2 ranks is refused (rc $rc)" sh -c "[ $rc != 0 ] && grep -q 'does not split over 2 ranks' err.txt"
rc=$(run mpirun $flags -np 1 "$mpi" train $small --steps 2 --seed 1 --out bad : -np 1 "$mpi" train $small --steps 2 --seed 2 --out bad)
check "ranks started with different options are refused (rc $rc)" sh -c "[ $rc != 0 ] && grep -q 'different options' err.txt"
check "  before writing anything" [ ! -e bad/trainer.safetensors ]

echo "== a rank killed mid-run"
long=60
mpirun $flags -np 2 "$mpi" train $small --steps $long --save-every 5 --out killed > killed.txt 2>&1 &
mpirun_pid=$!
i=0
while [ ! -e killed/trainer.safetensors ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
# no pause: the checkpoint is renamed into place whole, and the 60 steps can end within a fraction of a second
victim=$(ps -o pid= --ppid $mpirun_pid 2>/dev/null | tail -n 1 | tr -d ' ')
killed=no
if [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null; then killed=yes; fi
wait $mpirun_pid; rc=$?
if [ $killed = yes ]; then
  check "a rank killed with SIGKILL ends the run (mpirun rc $rc)" [ "$rc" != 0 ]
else
  echo "  (the run ended before a rank could be killed: the checks below still run)"
fi
rc=$(run "$one" info --model killed/trainer.safetensors)
check "the last checkpoint loads (titans info rc $rc)" [ "$rc" = 0 ]
rc=$(run mpirun $flags -np 2 "$mpi" train $small --steps $long --save-every 5 --resume --out killed)
check "--resume on 2 ranks finishes the run (rc $rc): $(grep -o 'resumed .* at step [0-9]*' out.txt | sed 's/.*at/at/')" \
  sh -c "[ $rc = 0 ] && grep -q 'trained .* steps' out.txt"
rc=$(run "$one" train $small --steps $long --out killed_ref)
close killed_ref/model.safetensors killed/model.safetensors; ok=$?
check "  and ends where an uninterrupted one-process run does: max relative difference $(cat rel.txt)" [ $ok = 0 ]

echo "== the MPI program of docs/mpi.md"
awk 'f == 0 && /^```c$/ { f = 1; n = 0; next }
     f == 1 && /^```$/ { if (lines[0] ~ /mpi_train\.c/) { for (i = 0; i < n; i++) print lines[i]; exit } f = 0; next }
     f == 1 { lines[n++] = $0 }' \
  "$root/docs/mpi.md" > mpi_train.c
check "docs/mpi.md holds it ($(wc -l < mpi_train.c) lines)" [ -s mpi_train.c ]
mpicc -std=c11 -Wall -Wextra -pedantic -Werror -O2 -I"$root" mpi_train.c -o mpi_train -lm > cc.txt 2>&1; rc=$?
check "it compiles with mpicc, no warning (rc $rc)" [ $rc = 0 ]
rc=$(run mpirun $flags -np 2 ./mpi_train)
check "it runs on 2 ranks (rc $rc): $(tail -n 1 out.txt)" sh -c "[ $rc = 0 ] && grep -q 'step 40: loss' out.txt"
loss2=$(tail -n 1 out.txt)
rc=$(run mpirun $flags -np 1 ./mpi_train)
check "  and gives one rank's loss to 4 digits (rc $rc): $(tail -n 1 out.txt)" [ "$rc" = 0 -a "$(tail -n 1 out.txt)" = "$loss2" ]

echo "test_mpi: $pass passed, $fail failed"
[ $fail = 0 ]
