#!/bin/sh
# Smoke test of the MQAR program (examples/mqar.c): a tiny run trains, prints progress and held-out
# accuracy, writes a checkpoint whose metadata holds the task, and `mqar eval` on that checkpoint gives
# the accuracy the run ended with; the gated delta rule's state is counted; bad arguments fail clearly.
# Usage: sh tests/test_mqar_program.sh [path/to/mqar]   (default: `make mqar`, then ./mqar)
# The last line is "test_mqar_program: N passed, N failed"; the exit status is non-zero on a failure.
bin=${1:-}
if [ -z "$bin" ]; then
  make -s mqar >/dev/null || { echo "test_mqar_program: 0 passed, 1 failed"; exit 1; }
  bin=./mqar
fi
case $bin in /*) ;; *) bin=$(pwd)/$bin ;; esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/titans_mqar.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
tests_dir=$(cd "$(dirname "$0")" && pwd)
cd "$tmp" || exit 1
. "$tests_dir/lib.sh" # pass, fail, check, run

tiny="--vocab 32 --d 16 --layers 2 --heads 2 --batch 4 --steps 12 --log-every 4 --eval-every 6"
tiny="$tiny --eval-examples 24 --threads 1"
echo "== train (attention)"
rc=$(run "$bin" train $tiny --block attn --train 16:2,24:3 --curriculum --out attn.safetensors --results runs.tsv)
check "train exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "progress lines with the task of the step" grep -q "^step  *12/12  L   24 K   3  loss [0-9.]*" out.txt
check "the curriculum starts on the first task alone" grep -q "^step  *4/12  L   16 K   2" out.txt
check "held-out accuracy of both tasks, during and after training" \
  sh -c '[ $(grep -c "eval   step      6" out.txt) = 2 ] && [ $(grep -c "^  final" out.txt) = 2 ]'
check "the checkpoint is written" [ -s attn.safetensors ]
check "a results line per evaluated task (4)" [ "$(wc -l < runs.tsv)" = 4 ]
final=$(grep "^  final.*L    24" out.txt | sed 's/.*accuracy \([0-9.]*\).*/\1/')
rc=$(run "$bin" eval --model attn.safetensors --eval-examples 24)
check "eval of the checkpoint exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "its metadata holds the task" grep -q "train=16:2,24:3 curriculum=1" out.txt
again=$(grep "L    24" out.txt | sed 's/.*accuracy \([0-9.]*\).*/\1/')
check "it gives the accuracy the run ended with ($final, $again)" [ -n "$final" -a "$final" = "$again" ]
check "attention's state at L 24: 2 layers x 2 L d = 1536 floats" grep -q "L    24.*state 1536 floats" out.txt

echo "== train (the gated delta rule)"
rc=$(run "$bin" train $tiny --block lmm --gated-delta --train 16:2 --out gd.safetensors)
check "an LMM trained as a gated delta rule exits 0 (rc=$rc)" [ "$rc" = 0 ]
# per layer 4 heads x a 4 x 4 matrix, no momentum (conv tails are not counted, as in Zoology)
check "its state: 2 layers x 4 heads x 4 x 4 = 128 floats" grep -q "state 128 floats" out.txt
check "the metadata says gated_delta=1" grep -q "gated_delta=1" out.txt
rc=$(run "$bin" eval --model gd.safetensors --results gd.tsv --eval-examples 8)
check "its results line names the variant (rc=$rc)" grep -q "^lmm	gated-delta	d=16	layers=2	V=32	L=16	K=2	acc=" gd.tsv

echo "== train (least squares)"
rc=$(run "$bin" train $tiny --block lmm --least-squares --mem-depth 1 --train 16:2 --out ls.safetensors)
check "an LMM trained as a least-squares memory exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "its metadata says what the model does: no_forget=1 (no --no-forget given)" \
  sh -c 'grep -q "no_forget=1 " out.txt && ! grep -q "no_forget=0" out.txt'

echo "== the long-range layout (L:K:D)"
rc=$(run "$bin" train $tiny --block lmm --gated-delta --train 16:2,64:4:24 --out far.safetensors)
check "a run with a long-range task exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "its progress and accuracy name the gap" grep -q "^  final.*L    64  K    4  D 24  accuracy" out.txt
check "its metadata keeps the task as L:K:D" grep -q "train=16:2,64:4:24 " out.txt
rc=$(run "$bin" eval --model far.safetensors --eval 128:4:48 --results far.tsv --eval-examples 8)
check "eval at another length and gap (rc=$rc)" sh -c "[ $rc = 0 ] && grep -q 'L   128  K    4  D 48  accuracy' out.txt"
check "its results line ends with spread=48" grep -q "L=128	K=4	acc=.*	spread=48$" far.tsv
rc=$(run "$bin" train $tiny --train 64:4:0)
check "a gap of 0 written out is refused (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'want L:K' err.txt"
rc=$(run "$bin" train $tiny --train 64:16:40)
check "a long-range task without room for its pairs is refused (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'L - D must be at least 4 K' err.txt"

echo "== plot"
rc=$(run "$bin" plot --results runs.tsv --out plot.svg)
check "plot exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "the plot has a dot per results line (4) and Zoology's 6 points" \
  sh -c '[ $(grep -c "<circle" plot.svg) = 4 ] && [ $(grep -c "(Zoology)" plot.svg) = 6 ]'

echo "== errors"
rc=$(run "$bin" train $tiny --train 16:9)
check "an impossible task (K 9 at L 16) is refused (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'L must be at least 4 K' err.txt"
rc=$(run "$bin" train $tiny --block nope)
check "an unknown block is refused (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'want attn' err.txt"
rc=$(run "$bin" train $tiny --train 16-2)
check "a malformed task list is refused (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'want L:K' err.txt"
rc=$(run "$bin" eval --model missing.safetensors)
check "a missing checkpoint is an error (rc=$rc)" [ "$rc" != 0 ]

echo "test_mqar_program: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
