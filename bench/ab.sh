#!/bin/sh
# bench/ab.sh: one memory layer timed with an older titans.h and with the working tree's, side by side.
#
#   sh bench/ab.sh OLD[..NEW] [b] [threads] [T] [rounds]   (defaults: b = 16, 1 thread, T = 1024, 3 rounds)
#
# OLD and NEW are git revisions; without ..NEW the new build is the working tree's titans.h.
# The machine is shared and its speed drifts by 10-20% within the hour, so two benches run an hour
# apart do not compare two versions of the code. This builds bench/bench_memory.c twice, against
# OLD's titans.h (git show OLD:titans.h) and against NEW's (or the working tree's), and runs the two in turns
# (old, new, old, new, ...) with `--one b threads T`: each run prints the best and median of 9
# forward and 9 forward + backward passes and a hash of the results. At the end: the best time of
# each build over all rounds, new / old, and whether the results were bit-identical. The builds go to
# build/ab (AB_DIR=... elsewhere). tests/test_readme.sh runs it on HEAD..HEAD.
set -e
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: sh bench/ab.sh OLD[..NEW] [b (16)] [threads (1)] [T (1024)] [rounds (3)]" >&2
  exit 2
fi
case $1 in
  *..*) rev=${1%%..*} newrev=${1#*..} ;;
  *) rev=$1 newrev= ;;
esac
chunk=${2:-16}
threads=${3:-1}
tokens=${4:-1024}
rounds=${5:-3}
cc=${CC:-cc}
dir=${AB_DIR:-build/ab} # the two builds and the runs' log
mkdir -p "$dir/old" "$dir/new"
if ! git show "$rev:titans.h" > "$dir/old/titans.h"; then
  echo "ab.sh: no titans.h at $rev" >&2
  exit 1
fi
if [ -n "$newrev" ]; then
  if ! git show "$newrev:titans.h" > "$dir/new/titans.h"; then
    echo "ab.sh: no titans.h at $newrev" >&2
    exit 1
  fi
  newname="$newrev ($(git rev-parse --short "$newrev"))"
else
  cp titans.h "$dir/new/titans.h"
  newname="the working tree"
fi
# bench_memory.c includes "titans.h": bench/ has none, so -I picks the copy of each build.
for x in old new; do
  # BENCH_ONE_ONLY: the --one mode alone, which builds against older headers too
  if ! $cc -std=c11 -O3 -march=native -fopenmp -DBENCH_ONE_ONLY -I"$dir/$x" -o "$dir/$x/bench_memory" \
    bench/bench_memory.c -lm; then
    echo "ab.sh: bench/bench_memory.c does not build against the $x titans.h" >&2
    exit 1
  fi
done
echo "ab.sh: $rev ($(git rev-parse --short "$rev")) against $newname, b = $chunk, $threads thread(s), T = $tokens, $rounds rounds"
log="$dir/runs.txt"
: > "$log"
r=1
while [ "$r" -le "$rounds" ]; do
  for x in old new; do
    line=$(OMP_WAIT_POLICY=passive "$dir/$x/bench_memory" --one "$chunk" "$threads" "$tokens")
    echo "$x $line" | tee -a "$log"
  done
  r=$((r + 1))
done
# the best forward and forward + backward times of each build, and its results hashes
awk '
  function after(word,   rest, parts) { rest = substr($0, index($0, word) + length(word)); split(rest, parts, " "); return parts[1] + 0 }
  { x = $1; f = after("forward best "); fb = after("forward+backward best ")
    if (!(x in fwd) || f < fwd[x]) fwd[x] = f
    if (!(x in fwb) || fb < fwb[x]) fwb[x] = fb
    if (!(x in hash)) hash[x] = $NF
    else if (hash[x] != $NF) hash[x] = "differs" }
  END {
    printf "best of all rounds: forward old %.4f s, new %.4f s (new / old %.3f); forward+backward old %.4f s, new %.4f s (new / old %.3f)\n",
           fwd["old"], fwd["new"], fwd["new"] / fwd["old"], fwb["old"], fwb["new"], fwb["new"] / fwb["old"]
    if (hash["old"] == hash["new"] && hash["old"] != "differs") printf "results: bit-identical (hash %s)\n", hash["old"]
    else printf "results: differ (old %s, new %s)\n", hash["old"], hash["new"]
  }' "$log"
