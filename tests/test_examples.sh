#!/bin/sh
# Smoke test of the example program: ./titans train on a tiny text (checkpoints, loss plot, an
# interrupted run resumed to the same bytes as an uninterrupted one), ./titans generate from the
# checkpoint (deterministic with --seed, memory state carried across runs with --state), and clear
# errors with a non-zero exit for bad arguments and bad files.
# Usage: sh tests/test_examples.sh [path/to/titans]   (default: `make titans`, then ./titans)
# The last line is "test_examples: N passed, N failed"; the exit status is non-zero on a failure.
bin=${1:-}
if [ -z "$bin" ]; then
  make -s titans >/dev/null || { echo "test_examples: 0 passed, 1 failed"; exit 1; }
  bin=./titans
fi
case $bin in /*) ;; *) bin=$(pwd)/$bin ;; esac
root=$(cd "$(dirname "$0")/.." && pwd) # the repository, for README.md
tmp=$(mktemp -d "${TMPDIR:-/tmp}/titans_examples.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
tests_dir=$(cd "$(dirname "$0")" && pwd)
cd "$tmp" || exit 1
. "$tests_dir/lib.sh" # pass, fail, check, run

# a tiny text: a few sentences repeated, about 6 KB
i=0
: > tiny.txt
while [ $i -lt 30 ]; do
  printf 'The keeper wound the clock at midnight and wrote the weather in the log. Line %d.\n' $i >> tiny.txt
  printf 'A small light near at hand and a small light far away are good for different things.\n' >> tiny.txt
  i=$((i + 1))
done

tiny="--data tiny.txt --d 32 --layers 1 --heads 2 --mem-heads 2 --seq 32 --batch 2 --chunk 8 --window 16"
tiny="$tiny --val-every 4 --val-batches 1 --sample-len 20 --seed 7"
mac="--block mac --segment 16" # a segment is MAC's (and LM2's) alone

echo "== train"
rc=$(run "$bin" train $tiny --steps 8 --save-every 4 --out full)
check "train exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "model.safetensors, trainer.safetensors and loss.svg written" \
  [ -s full/model.safetensors -a -s full/trainer.safetensors -a -s full/loss.svg ]
check "progress lines and validation loss printed" grep -q "validation loss" out.txt
check "each progress line gives the gradient norm before clipping" grep -q "^step .* loss [0-9.]*  grad  *[0-9]" out.txt
check "the run ends with the largest gradient norm and the steps far above the clip" \
  grep -q "^gradient norm before clipping: largest [0-9.e+-]* (step [1-8]); [0-8] of 8 steps above 10x the clip (1)" out.txt
check "the plot has curves and a legend" sh -c 'grep -q "<polyline" full/loss.svg && grep -q "validation loss" full/loss.svg'
check "no temporary files left" sh -c '! ls full | grep -q tmp'

rc=$(run "$bin" train $tiny --steps 8 --stop-at 4 --out split)
check "an interrupted run (--stop-at 4) exits 0 (rc=$rc)" [ "$rc" = 0 ]
rc=$(run "$bin" train $tiny --steps 8 --resume --out split)
check "--resume exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "it resumed at step 4" grep -q "resumed .* at step 4" out.txt
check "resumed weights are bit-identical to the uninterrupted run's" cmp -s full/model.safetensors split/model.safetensors
check "so is the whole trainer checkpoint (moments, step, loss history)" cmp -s full/trainer.safetensors split/trainer.safetensors

rc=$(run "$bin" train $tiny --steps 8 --write-cost 0.5 --write-cost-from 2 --out cost)
check "train --write-cost 0.5 --write-cost-from 2 exits 0, its trainer file keeps both (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q 'write_cost...0[.]5,..write_cost_from...2}' cost/trainer.safetensors && \
         ! grep -q write_cost full/trainer.safetensors"
run "$bin" train $tiny --steps 8 --write-cost 0.5 --write-cost-from 2 --stop-at 4 --out cost_split > /dev/null
rc=$(run "$bin" train $tiny --steps 8 --resume --out cost_split)
check "a run with a cost on writing resumed: the uninterrupted run's weights, bit for bit (rc=$rc)" \
  sh -c "[ $rc = 0 ] && cmp -s cost/model.safetensors cost_split/model.safetensors && \
         ! cmp -s cost/model.safetensors full/model.safetensors"
rc=$(run "$bin" train $tiny --steps 8 --write-cost 0.2 --resume --out cost_split)
check "--resume with another --write-cost is refused (rc=$rc)" sh -c "[ $rc != 0 ] && grep -q 'write-cost' err.txt"
rc=$(run "$bin" train $tiny --steps 8 --write-cost 0.5 --write-cost-from 2 --write-cost-log 0.05 --out logcost)
check "train --write-cost-log 0.05 exits 0, its trainer file keeps it, its weights differ from the linear cost's alone (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q 'write_cost_log...0[.]05' logcost/trainer.safetensors && \
         ! cmp -s logcost/model.safetensors cost/model.safetensors"
run "$bin" train $tiny --steps 8 --write-cost 0.5 --write-cost-from 2 --write-cost-log 0.05 --stop-at 4 --out logcost_split \
  > /dev/null
rc=$(run "$bin" train $tiny --steps 8 --resume --out logcost_split)
check "a run with a log cost on writing resumed: the uninterrupted run's weights, bit for bit (rc=$rc)" \
  sh -c "[ $rc = 0 ] && cmp -s logcost/model.safetensors logcost_split/model.safetensors"
rc=$(run "$bin" train $tiny --steps 8 --write-cost-log 0.2 --resume --out logcost_split)
check "--resume with another --write-cost-log is refused (rc=$rc)" sh -c "[ $rc != 0 ] && grep -q 'write-cost-log' err.txt"

rc=$(run "$bin" train $tiny --steps 8 --seed 8 --resume --out split)
check "--resume with another seed is refused (rc=$rc)" [ "$rc" != 0 ]
check "  with a message" grep -q "seed" err.txt
cp full/trainer.safetensors trainer_before.safetensors
rc=$(run "$bin" train $tiny --steps 4 --resume --out full)
check "--resume --steps 4 of a step-8 checkpoint: 'nothing to do', no schedule stretched, nothing written (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q '^nothing to do: full/trainer.safetensors is at step 8' out.txt && ! grep -q stretched out.txt &&
         cmp -s trainer_before.safetensors full/trainer.safetensors"
rc=$(run "$bin" train $tiny --steps 12 --d 64 --resume --out full)
check "--resume with a model option of another value (--d 64): exit 2 naming the checkpoint's (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'trained with --d 32, not 64' err.txt && grep -q 'help train' err.txt"
rc=$(run "$bin" train $tiny $mac --steps 12 --resume --out full)
check "  so are --block mac (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'is a mag model, not --block mac' err.txt"
rc=$(run "$bin" train $tiny --steps 12 --lr 0.01 --resume --out full)
check "  and --lr (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'trained with --lr 0.002, not 0.01' err.txt"
check "  and nothing was written" cmp -s trainer_before.safetensors full/trainer.safetensors

echo "== train: never lose a run"
rc=$(run "$bin" $tiny --threads 1 --steps 2 --out deep/er/run)
check "./titans [train options] trains (rc=$rc)" [ "$rc" = 0 ]
check "  --out is created with its parents" [ -s deep/er/run/model.safetensors ]
check "  the first ETA waits for timed steps (--)" grep -q "step     1/2 .*ETA --" out.txt
rc=$(run "$bin" $tiny --steps 2 --out tiny.txt/run)
check "--out under a file: exit 1 before the first step (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q 'tiny.txt is a file' err.txt && ! grep -q '^step' out.txt"
if [ "$(id -u)" = 0 ]; then
  echo "  skip --out in a read-only directory: running as root, which may write there anyway"
else
  mkdir ro && chmod 555 ro
  rc=$(run "$bin" $tiny --steps 2 --out ro/run)
  check "--out in a read-only directory: exit 1 before the first step (rc=$rc)" sh -c "[ $rc = 1 ] && ! grep -q '^step' out.txt"
  chmod 755 ro
fi
# the surprise bound keeps even theta_max 100 finite: turned off, the inner loop diverges at once
rc=$(run "$bin" $tiny $mac --steps 100 --lr 10 --theta-max 100 --surprise-bound 0 --warmup 0 --out gone/run)
check "a run that fails before its first checkpoint (diverged, rc=$rc) leaves no folder" sh -c "[ $rc = 1 ] && [ ! -e gone ]"
small="--d 32 --layers 1 --heads 2 --mem-heads 2 --batch 2 --threads 1 --val-every 0 --sample-len 0" # the built-in text
rc=$(run "$bin" train $small --chunk 7 --steps 2 --out chunk7)
check "--chunk 7, long reads by default and --seq 128 not a multiple of it: exit 2 before the first step, naming --doc-len (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'doc-len 4096 (the default)' err.txt && grep -q 'help train' err.txt && ! grep -q '^step' out.txt && [ ! -e chunk7 ]"
rc=$(run "$bin" train $tiny --heads 3 --steps 2 --out heads3)
check "--heads 3 with --d 32: exit 2 before the first step, with the pointer to help (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'attn_heads = 3' err.txt && grep -q 'help train' err.txt && [ ! -e heads3 ]"
rc=$(run "$bin" train $small --persist 2 --chunk 4 --steps 1 --out persist2)
check "MAG --persist 2 --chunk 4 cannot stream: --doc-len defaults to 0, saying so (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q 'cannot stream .*--doc-len is 0' out.txt"
rc=$(run "$bin" train $tiny --segment 12 --steps 1 --out seg12)
check "--segment with MAG, which has none: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'segment goes with --block mac or lm2' err.txt"
rc=$(run sh -c 'ulimit -f 100 && exec "$0" "$@"' "$bin" train $tiny --steps 2 --out fsize)
check "a checkpoint past the file-size limit (ulimit -f): exit 1, 'File too large', no temporary file left (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q 'File too large' err.txt && ! ls fsize 2>/dev/null | grep -q tmp"
rc=$(run "$bin" $tiny --steps 8 --stop-at 8 --out nope)
check "--stop-at not before --steps: exit 2 (rc=$rc)" [ "$rc" = 2 ]

# a failed write (here a full disk: the temporary file is /dev/full) is an error that keeps the last checkpoint
if [ -w /dev/full ] && ln -s /dev/full full/trainer.safetensors.tmp 2>/dev/null; then
  cp full/trainer.safetensors trainer8.safetensors
  rc=$(run "$bin" train $tiny --steps 12 --resume --out full)
  check "a checkpoint that cannot be written (disk full): exit 1 naming the file (rc=$rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'trainer.safetensors.tmp.*No space' err.txt"
  check "  the checkpoint before is intact" cmp -s trainer8.safetensors full/trainer.safetensors
  check "  and no temporary file is left" [ ! -e full/trainer.safetensors.tmp ]
else
  echo "  skip the full-disk write: no writable /dev/full"
fi

# started in the background; returns when its first progress line is out (at most 20 s)
start_run() { # out-dir, then train arguments
  d=$1; shift
  "$bin" train $tiny --threads 1 --out "$d" "$@" >"$d.out" 2>"$d.err" &
  pid=$!
  i=0
  while [ $i -lt 200 ] && ! grep -q '^step' "$d.out" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
}
start_run sig --steps 100000
sleep 0.3
kill -s INT $pid; wait $pid; rc=$?
check "SIGINT: the run saves and exits 130 (rc=$rc)" sh -c "[ $rc = 130 ] && [ -s sig/trainer.safetensors ]"
at=$(sed -n 's/.*at step \([0-9]*\) of.*/\1/p' sig.err)
rc=$(run "$bin" train $tiny --threads 1 --steps 100000 --stop-at "${at:-1}" --out sig_ref)
check "  its checkpoint (step ${at:-?}) is the one of a run stopped there with --stop-at" \
  sh -c "[ -n '$at' ] && cmp -s sig/trainer.safetensors sig_ref/trainer.safetensors"
resume_cmd=$(tail -n 1 sig.err)
case $resume_cmd in *" --resume") eval "$resume_cmd --stop-at $((${at:-0} + 1))" >out.txt 2>&1 ;; esac
check "  printing the --resume command, which resumes it" grep -q "resumed sig/trainer.safetensors at step ${at:-x}\$" out.txt
start_run twice --steps 100000 --batch 64 --seq 256 # a step long enough for the second Ctrl-C to land in it
kill -s INT $pid
i=0
while [ $i -lt 500 ] && ! grep -q 'Ctrl-C again' twice.err; do sleep 0.02; i=$((i + 1)); done
check "the first Ctrl-C says what the run does now" grep -q 'stopping after the current step, to save it; Ctrl-C again quits at once' twice.err
kill -s INT $pid; wait $pid; rc=$?
check "a second Ctrl-C before the first checkpoint quits at once, leaving no empty --out folder (rc=$rc)" \
  sh -c "[ $rc = 130 ] && { [ ! -e twice ] || { [ -s twice/trainer.safetensors ] && ! ls twice | grep -q tmp; }; }"
# a pause of 12 s early in the run (the process stopped once it logs its first step; its steps take a few
# ms, so the pause lands somewhere in the first few hundred of 3,000): 40 steps after the pause, the ETA
# goes by the last 20 steps, not by the average over the run (tok/s), which holds the pause. The pause's
# step is read off the log (where the run-average tok/s falls the most, to under half the step before's),
# so the check does not depend on when the signal lands; by then the pause is at least 12 / (p + 40) s a
# step of the average, far above a step's time.
start_run eta --steps 3000 --log-every 1 --val-every 0 --save-every 0 --sample-len 0
kill -s STOP $pid; sleep 12; kill -s CONT $pid; wait $pid
eta_at_pause() { # prints: the pause's step, the step checked, its ETA, the ETA the run's average gives
  awk '/^step +[0-9]+\/[0-9]+ / {
    split($2, st, "/"); n = st[1]; total = st[2]
    for (i = 1; i <= NF; i++) { if ($i == "tok/s") tok[n] = $(i - 1); if ($i == "ETA") eta[n] = $(i + 1) }
    if (n > 1 && tok[n - 1] > 0 && (!p || tok[n] / tok[n - 1] < drop)) { p = n; drop = tok[n] / tok[n - 1] } }
    END { c = p + 40; if (p && drop < 0.5 && (c in eta)) { sub(/s$/, "", eta[c]); print p, c, eta[c], (total - c) * 64 / tok[c] } }' eta.out
}
read -r pause_step eta_step eta by_average <<EOF
$(eta_at_pause)
EOF
check "the ETA goes by the recent steps' speed: ${eta:-?} s at step ${eta_step:-?} (40 after the pause at ${pause_step:-?}), the run's average says ${by_average:-?} s" \
  awk -v e="${eta:-}" -v a="${by_average:-}" 'BEGIN { exit !(e != "" && a != "" && 2 * e < a) }'
start_run term --steps 100000
kill -s TERM $pid; wait $pid; rc=$?
check "SIGTERM: saves and exits 143 (rc=$rc)" sh -c "[ $rc = 143 ] && [ -s term/trainer.safetensors ]"
start_run periodic --steps 5000 # its first checkpoint, step 500, may take a minute on a loaded machine
i=0
while [ $i -lt 1200 ] && [ ! -e periodic/trainer.safetensors ]; do sleep 0.05; i=$((i + 1)); done
kill -s KILL $pid; wait $pid 2>/dev/null
"$bin" info --model periodic/trainer.safetensors >out.txt 2>&1
check "killed with SIGKILL: a checkpoint of the default interval (steps / 10) is there" \
  sh -c "grep -q 'at step \(500\|1000\|1500\)\$' out.txt"

echo "== train --task"
task="--task passkey --recipe none --task-frac 0.75 --lens 160,320"
rc=$(run "$bin" train $tiny $task --steps 6 --out task_full)
check "train --task passkey --recipe none with a --lens curriculum exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "  it trains the stages' shapes (2 x 160, then 1 x 320)" sh -c 'grep -q "2 sequences of 160" out.txt && grep -q "1 sequences of 320" out.txt'
rc=$(run "$bin" train $tiny $task --steps 6 --stop-at 3 --out task_split)
rc2=$(run "$bin" train $tiny $task --steps 6 --resume --out task_split)
check "  interrupted and resumed (rc=$rc, $rc2): bit-identical to the uninterrupted run" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && cmp -s task_full/trainer.safetensors task_split/trainer.safetensors"
rc=$(run "$bin" train $tiny --task prose --recipe none --lens 200 --steps 6 --resume --out task_split)
check "  --resume with another task is refused (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'task' err.txt"
rc=$(run "$bin" train $tiny --lens 200 --steps 2 --out nope)
check "--lens without --task: exit 2 (rc=$rc)" [ "$rc" = 2 ]
mix="--task passkey --recipe none --lens 160,320 --lens-mix"
rc=$(run "$bin" train $tiny $mix --steps 6 --out mix_full)
check "train --lens-mix exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "  its second stage draws from both lengths" grep -q "each step's length drawn from 160,320" out.txt
rc=$(run "$bin" train $tiny $mix --steps 6 --stop-at 3 --out mix_split)
rc2=$(run "$bin" train $tiny $mix --steps 6 --resume --out mix_split)
check "  interrupted and resumed (rc=$rc, $rc2): bit-identical to the uninterrupted run" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && cmp -s mix_full/trainer.safetensors mix_split/trainer.safetensors"
rc=$(run "$bin" train $tiny --task passkey --recipe none --lens 160,320 --steps 6 --out nomix)
check "  it trains otherwise than the same run without --lens-mix (rc=$rc)" \
  sh -c "[ $rc = 0 ] && ! cmp -s mix_full/trainer.safetensors nomix/trainer.safetensors"
rc=$(run "$bin" train $tiny --task passkey --recipe none --lens 160,320 --steps 6 --resume --out mix_split)
check "  --resume without --lens-mix is refused (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'lens-mix' err.txt"
rc=$(run "$bin" train $tiny --lens-mix --steps 2 --out nope)
check "--lens-mix without --task: exit 2 (rc=$rc)" [ "$rc" = 2 ]
jit="--task passkey --recipe none --lens 160 --end-jitter 64"
rc=$(run "$bin" train $tiny $jit --steps 4 --out jit_full)
check "train --end-jitter exits 0 (rc=$rc)" [ "$rc" = 0 ]
rc=$(run "$bin" train $tiny $jit --steps 4 --stop-at 2 --out jit_split)
rc2=$(run "$bin" train $tiny $jit --steps 4 --resume --out jit_split)
check "  interrupted and resumed (rc=$rc, $rc2): bit-identical to the uninterrupted run" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && cmp -s jit_full/trainer.safetensors jit_split/trainer.safetensors"
rc=$(run "$bin" train $tiny --task passkey --recipe none --lens 160 --steps 4 --out nojit)
check "  it trains otherwise than the same run without it (rc=$rc)" \
  sh -c "[ $rc = 0 ] && ! cmp -s jit_full/trainer.safetensors nojit/trainer.safetensors"
rc=$(run "$bin" train $tiny --task passkey --recipe none --lens 160 --steps 4 --resume --out jit_split)
check "  --resume without --end-jitter is refused (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'end-jitter' err.txt"
rc=$(run "$bin" train $tiny --end-jitter 8 --steps 2 --out nope)
check "--end-jitter without --task: exit 2 (rc=$rc)" [ "$rc" = 2 ]
carry="$mix --doc-len 640"
rc=$(run "$bin" train $tiny $carry --steps 6 --out carry_full)
check "train --task --doc-len (memory carried across examples) exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "  it says so, and saves one stream per length" \
  sh -c 'grep -q "carries from one example to the next" out.txt && [ -s carry_full/stream.stage0.safetensors ] && [ -s carry_full/stream.stage1.safetensors ]'
check "  it trains otherwise than the same run without --doc-len" sh -c "! cmp -s mix_full/trainer.safetensors carry_full/trainer.safetensors"
rc=$(run "$bin" train $tiny $carry --steps 6 --stop-at 3 --out carry_split)
rc2=$(run "$bin" train $tiny $carry --steps 6 --resume --out carry_split)
check "  interrupted inside a document and resumed (rc=$rc, $rc2): bit-identical to the uninterrupted run" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && cmp -s carry_full/trainer.safetensors carry_split/trainer.safetensors"
earlier="--task prose --recipe none --needles 3 --lens 800 --doc-len 3200"
rc=$(run "$bin" train $tiny $earlier --ask-earlier --steps 6 --out earlier_full)
check "train --task prose --doc-len --ask-earlier exits 0 and keeps it in the resume line (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -a -q 'needles=3 ask-earlier' earlier_full/trainer.safetensors"
rc=$(run "$bin" train $tiny $earlier --steps 6 --out earlier_none)
check "  it trains otherwise than the same run without it (rc=$rc)" \
  sh -c "[ $rc = 0 ] && ! cmp -s earlier_full/trainer.safetensors earlier_none/trainer.safetensors"
rc=$(run "$bin" train $tiny $earlier --ask-earlier --steps 6 --stop-at 3 --out earlier_split)
rc2=$(run "$bin" train $tiny $earlier --ask-earlier --steps 6 --resume --out earlier_split)
check "  interrupted inside a document and resumed (rc=$rc, $rc2): bit-identical (the rows' bindings drawn again)" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && cmp -s earlier_full/trainer.safetensors earlier_split/trainer.safetensors"
rc=$(run "$bin" train $tiny --task prose --recipe none --lens 800 --ask-earlier --steps 2 --out nope)
check "  --ask-earlier without --doc-len: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'ask-earlier goes with --doc-len' err.txt"
rc=$(run "$bin" train $tiny $mix --doc-len 640 --ask-earlier --steps 2 --out nope)
check "  --ask-earlier with the passkey: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'ask-all, --ask-earlier, --alike-words and --alike-numbers go with' err.txt"
rc=$(run "$bin" train $tiny $mix --doc-len 200 --steps 2 --out nope)
check "  --doc-len shorter than a --lens length: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'shorter than one example' err.txt"
rc=$(run "$bin" train $tiny --task passkey --recipe none --lens 164 --doc-len 656 --steps 2 --out nope)
check "  a length that is not a multiple of the memory chunk: exit 1 (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q 'multiple of the memory chunk' err.txt"
wcf="--task prose --recipe none --lens 200 --write-cost 1 --write-cost-log 0.5"
rc=$(run "$bin" train $tiny $wcf --write-cost-filler-only --steps 4 --out wcf_on)
check "train --task prose --write-cost-filler-only exits 0 and keeps it in the resume line (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -a -q 'write-cost-filler-only' wcf_on/trainer.safetensors"
rc=$(run "$bin" train $tiny $wcf --steps 4 --out wcf_off)
check "  its weights differ from the same run's with the costs on every position (rc=$rc)" \
  sh -c "[ $rc = 0 ] && ! cmp -s wcf_on/model.safetensors wcf_off/model.safetensors"
rc=$(run "$bin" train $tiny $wcf --write-cost-filler-only --steps 4 --stop-at 2 --out wcf_split)
rc2=$(run "$bin" train $tiny $wcf --steps 4 --resume --out wcf_split)
check "  --resume without it is refused (rc=$rc, $rc2)" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 1 ] && grep -q 'write-cost-filler-only' err.txt"
rc=$(run "$bin" train $tiny $wcf --write-cost-filler-only --steps 4 --resume --out wcf_split)
check "  interrupted and resumed with it (rc=$rc): bit-identical to the uninterrupted run" \
  sh -c "[ $rc = 0 ] && cmp -s wcf_on/trainer.safetensors wcf_split/trainer.safetensors"
rc=$(run "$bin" train $tiny --task prose --recipe none --lens 200 --write-cost-filler-only --steps 2 --out nope)
check "  without a cost on writing: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'give --write-cost' err.txt"
rc=$(run "$bin" train $tiny --write-cost 1 --write-cost-filler-only --steps 2 --out nope)
check "  without --task: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'write-cost-filler-only go with --task' err.txt"

echo "== train --task: the retrieval recipe, keyed needles, haystacks"
rc=$(run "$bin" train --data tiny.txt --task prose --lens 200 --steps 2 --val-every 0 --sample-len 0 --out recipe)
check "train --task prose with the recipe's defaults exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "  a MAC of d 128 (prose) whose loss sees the answers (the recipe), and says what its validation measures" \
  sh -c 'grep -q "model: mac, d = 128" out.txt && grep -q "validation loss on text measures what the model was not trained on" out.txt'
"$bin" info --model recipe/model.safetensors >info.txt 2>&1
check "  its memory keys come from the 12 tokens before, held there (the library's key_ngram)" \
  grep -q 'memory keys: from the 12 tokens before' info.txt
check "  its key words are words of the training text (the recipe's --key-words text, in the resume line)" \
  grep -a -q 'key-words=text' recipe/trainer.safetensors
rc=$(run "$bin" train --data tiny.txt --task prose --d 32 --lens 200 --steps 2 --val-every 0 --min-rows 3 --out rows)
check "  --min-rows 3: three sequences of 200 a step; the run ends with a retrieval check, not a text sample (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q '200 (max(3, 16 x 200 / length) sequences)' out.txt && grep -q '^retrieval check' out.txt \
    && [ \$(grep -c '^  depth .*, answered \"' out.txt) = 3 ] && ! grep -q '^sample' out.txt"
rc=$(run "$bin" train --data tiny.txt --task prose --d 32 --lens 200 --steps 3 --val-every 0 --resume --out rows)
check "  --resume without its --min-rows is refused (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'min-rows=3' err.txt"
rc=$(run "$bin" train --min-rows 2 --steps 2 --out nope)
check "--min-rows without --task: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train --data tiny.txt --task prose --block mag --d 32 --lens 200 --steps 2 --val-every 0 --sample-len 0 --out recipe2)
check "  options given win over the recipe (--block mag --d 32) (rc=$rc)" sh -c "[ $rc = 0 ] && grep -q 'model: mag, d = 32' out.txt"
rc=$(run "$bin" train --recipe none --steps 2 --out nope)
check "--recipe without --task: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train --task prose --recipe fast --steps 2 --out nope)
check "--recipe fast: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train $tiny --task passkey --recipe none --needles 2 --lens 160 --steps 2 --out nope)
check "--needles with the passkey: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'needles' err.txt"
rc=$(run "$bin" train $tiny --task prose --recipe none --needles 3 --lens 400 --steps 3 --out needles3)
check "train --task prose --needles 3 exits 0 (rc=$rc)" [ "$rc" = 0 ]
rc=$(run "$bin" train $tiny --task prose --recipe none --needles 2 --key-words random --lens 400 --steps 2 --out randkeys)
check "train --task prose --key-words random exits 0 and keeps it in the resume line (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -a -q 'key-words=random' randkeys/trainer.safetensors"
rc=$(run "$bin" train $tiny --task prose --recipe none --needles 2 --key-words text --lens 400 --steps 2 --out textkeys)
check "train --task prose --key-words text exits 0 and keeps it in the resume line (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -a -q 'key-words=text' textkeys/trainer.safetensors"
rc=$(run "$bin" train $tiny --task prose --recipe none --needles 3 --ask-all --lens 600 --steps 2 --out askall)
check "train --task prose --ask-all exits 0 and keeps it in the resume line (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -a -q 'needles=3 ask-all' askall/trainer.safetensors"
rc=$(run "$bin" train $tiny --task passkey --recipe none --ask-all --lens 160 --steps 2 --out nope)
check "--ask-all with the passkey: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'ask-all, --ask-earlier, --alike-words and --alike-numbers go with' err.txt"
rc=$(run "$bin" train $tiny --task prose --recipe none --key-words heldout --lens 400 --steps 2 --out nope)
check "train --key-words heldout (the words kept from training): exit 2 (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'want train, random or text' err.txt"
rc=$(run "$bin" train $tiny --task passkey --recipe none --key-words random --lens 160 --steps 2 --out nope)
check "--key-words with the passkey: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'key-words' err.txt"
rc=$(run "$bin" needle --model randkeys/model.safetensors --task prose --data tiny.txt --needles 2 --key-words random \
  --len 400 --depth 50 --trials 2 --svg n.svg)
check "needle --key-words random exits 0 and says what it asks (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q 'the key asked drawn from the random words' out.txt"
rc=$(run "$bin" needle --model textkeys/model.safetensors --task prose --data tiny.txt --needles 2 --key-words text \
  --len 400 --depth 50 --trials 2 --svg n.svg)
check "needle --key-words text exits 0 and says what it asks (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q \"the key asked drawn from the haystack's words\" out.txt"
rc=$(run "$bin" train $tiny --task passkey --recipe none --haystack sentences --lens 160 --steps 3 --out hay)
check "train --task passkey --haystack sentences exits 0 and says so (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q 'plain sentences in random order' out.txt"
rc=$(run "$bin" train $tiny --task passkey --recipe none --lens 160 --steps 3 --resume --out hay)
check "  --resume without its --haystack is refused (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'task' err.txt"
rc=$(run "$bin" train $tiny --task passkey --lens 160 --steps 2 --out hayrecipe)
check "train --task passkey: the recipe's filler is plain sentences, in the resume line (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q 'passkey filler: plain sentences' out.txt && grep -a -q 'haystack=sentences' hayrecipe/trainer.safetensors"
rc=$(run "$bin" train $tiny --task passkey --haystack own --lens 160 --steps 2 --out hayown)
check "  --haystack own: the fixed cycle again, no haystack in the resume line (rc=$rc)" \
  sh -c "[ $rc = 0 ] && ! grep -q 'filler:' out.txt && ! grep -a -q 'haystack=' hayown/trainer.safetensors"
rc=$(run "$bin" train $tiny --task passkey --lens 160 --steps 3 --resume --out hayown)
check "  a run on the cycle resumed without --haystack own is refused, saying both task lines and the fix (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q 'haystack=sentences' err.txt && grep -q 'add --haystack own' err.txt"
rc=$(run "$bin" train $tiny --task prose --recipe none --haystack mixed --lens 256 --steps 2 --out haymixed)
check "train --task prose --haystack mixed exits 0, says so, and names it in the resume line (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q 'alternating every 4 KB with technical text' out.txt && grep -a -q 'haystack=mixed' haymixed/trainer.safetensors"
rc=$(run "$bin" train $tiny --task prose --recipe none --haystack mixed --statements 0.125 --lens 256 --steps 2 --out haystated)
check "  --statements 0.125: the filler's line and the resume line say so (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q 'lines sentences stating numbers' out.txt && grep -a -q 'haystack=mixed statements=0.125' haystated/trainer.safetensors"
rc=$(run "$bin" train $tiny --task prose --recipe none --statements 0.125 --lens 256 --steps 2 --out nostated)
check "  --statements without --haystack mixed: exit 2, saying so (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'statements goes with --haystack mixed' err.txt"
rc=$(run "$bin" train --data tiny.txt --task prose --recipe numbers --lens 256 --steps 2 --val-every 0 --sample-len 0 \
  --out recipenum)
check "train --task prose --recipe numbers: an LMM amid the technical text, its first memory shut, both costs on writing on the filler only (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q 'model: lmm' out.txt && grep -q 'technical text dense in numbers' out.txt && \
         grep -a -q 'haystack=mixed numbers=[0-9.]* write-cost-filler-only' recipenum/trainer.safetensors && \
         grep -a -q 'write_cost...0[.]3,..write_cost_from...1000,..write_cost_log...0[.]01' recipenum/trainer.safetensors && \
         '$bin' info --model recipenum/model.safetensors | grep -q 'layer 0 memory gates at zero input: theta 1e-12' && \
         '$bin' info --model recipenum/model.safetensors | grep -q 'layer 1 memory gates at zero input: theta 0.5'"
rc=$(run "$bin" needle --model recipenum/model.safetensors --task prose --data tiny.txt --needles 4 --len 1K --depth 50 \
  --trials 1 --key-cosines)
check "needle --key-cosines: per memory layer, 7 places' cosines and two more, each within [-1, 1] (rc=$rc)" \
  sh -c "[ $rc = 0 ] && [ \$(grep -c 'memory layer [01]: two needles, the same place of their numbers (1..7):' out.txt) = 2 ] && \
         grep 'memory layer 1: two needles' out.txt | tr -c '0-9.\n-' ' ' | \
         awk '{n = 0; for (i = 1; i <= NF; i++) if (\$i ~ /^-?[0-9]+[.][0-9]+\$/) { n++; if (\$i < -1 || \$i > 1) bad = 1 } } END {exit bad || n != 9}'"
check "  and, a matrix memory, how far the writes after each needle moved its values: 4 ratios >= 0, by the needles after it" \
  sh -c "grep 'memory layer 1: how far the writes after a needle moved' out.txt | sed 's/.*(0, 1, ...)://' | \
         awk '{exit !(NF == 4 && \$1 >= 0 && \$2 >= 0 && \$3 >= 0 && \$4 >= 0)}'"
rc=$(run "$bin" train --data tiny.txt --task prose --recipe numbers --least-squares --lens 256 --steps 2 --val-every 0 \
  --sample-len 0 --out recipels)
check "train --least-squares: the model file says least_squares, no momentum, no forgetting, theta_max 100, no bound (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -a -q 'theta_max...100,..surprise_bound...0,.*no_momentum...1,..no_forget...1,.*least_squares...1' \
         recipels/model.safetensors"
rc=$(run "$bin" needle --model recipels/model.safetensors --task prose --data tiny.txt --needles 4 --len 1K --depth 50 \
  --trials 1 --key-cosines)
check "  needle --key-cosines measures its drift as any matrix memory's (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q 'memory layer 1: how far the writes after a needle moved' out.txt"
rc=$(run "$bin" train --data tiny.txt --task prose --recipe numbers --least-squares --forget-fit --alpha-init 0.001 \
  --lens 256 --steps 2 --val-every 0 --sample-len 0 --out recipelsf)
check "train --least-squares --forget-fit: the model file says least_squares and not no_forget (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -a -q 'least_squares...1' recipelsf/model.safetensors && \
         ! grep -a -q 'no_forget...1' recipelsf/model.safetensors"
rc=$(run "$bin" needle --model recipels/model.safetensors --task prose --data tiny.txt --len 1K --trials 1 --alpha 0.01)
check "  needle --alpha 0.01 turns forgetting on in a model trained without it, and says so (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q 'forgetting gate set to start at 0.01' out.txt"
rc=$(run "$bin" train $tiny --forget-fit --steps 1 --out fitless)
check "  --forget-fit without --least-squares: exit 2, saying it needs it (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'give --least-squares' err.txt"
rc=$(run "$bin" train $tiny --least-squares --steps 1 --out lsdeep)
check "  --least-squares with the default memory of depth 2: exit 2 (a usage error), saying it needs depth 1 (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'least_squares needs depth 1' err.txt"
rc=$(run "$bin" needle --model full/model.safetensors --task prose --data tiny.txt --needles 4 --len 1K --trials 1 --key-cosines)
check "  a memory whose keys read their own token (key_ngram 0): exit 1, saying why (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q 'key_ngram' err.txt"
rc=$(run "$bin" train --data tiny.txt --task prose --recipe numbers --lens 256 --steps 3 --val-every 0 --sample-len 0 \
  --resume --out recipenum)
check "  resumed by the same command (rc=$rc)" [ "$rc" = 0 ]
rc=$(run "$bin" train --data tiny.txt --task prose --lens 256 --steps 3 --val-every 0 --sample-len 0 --resume --out recipenum)
check "  resumed without --recipe numbers: refused (rc=$rc)" [ "$rc" = 1 ]
rc=$(run "$bin" train --data tiny.txt --task prose --recipe numbers --write-cost-everywhere --lens 256 --steps 1 \
  --val-every 0 --sample-len 0 --out recipenum_everywhere)
check "  --write-cost-everywhere: the costs on every position, the resume line without the filler's mark (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -a -q 'haystack=mixed numbers' recipenum_everywhere/trainer.safetensors && \
         ! grep -a -q 'write-cost-filler-only' recipenum_everywhere/trainer.safetensors"
rc=$(run "$bin" train --data tiny.txt --task prose --recipe numbers --write-cost 0 --write-cost-log 0 --lens 256 --steps 1 \
  --val-every 0 --sample-len 0 --out recipenum_nocost)
check "  with both costs 0: no cost to place, it trains (rc=$rc)" [ "$rc" = 0 ]
rc=$(run "$bin" train --data tiny.txt --task prose --recipe numbers --layers 3 --lens 256 --steps 1 --val-every 0 \
  --sample-len 0 --out recipenum3)
check "  with --layers 3 the first memory shut, the others open (rc=$rc)" \
  sh -c "[ $rc = 0 ] && '$bin' info --model recipenum3/model.safetensors | grep -q 'layer 2 memory gates at zero input: theta 0.5'"
rc=$(run "$bin" train --data tiny.txt --task passkey --recipe numbers --steps 1 --out nope)
check "--recipe numbers with --task passkey: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'for --task prose' err.txt"
rc=$(run "$bin" needle --model haymixed/model.safetensors --task prose --haystack mixed --len 400)
check "needle --haystack mixed (a training filler): exit 2, saying why (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'training filler' err.txt"
rc=$(run "$bin" train $tiny --haystack own --steps 2 --out nope)
check "--haystack own without --task: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" needle --model needles3/model.safetensors --task prose --data tiny.txt --needles 4 --key-words heldout \
  --len 400 --depth 50 --trials 2 --svg n.svg)
check "needle --needles 4 --key-words heldout exits 0 and says what it asks (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q '4 needles of different key words, the key asked drawn from the held-out words' out.txt"
rc=$(run "$bin" needle --model needles3/model.safetensors --task prose --data tiny.txt --needles 3 --len 400,500 \
  --depth 50 --trials 2 --svg n.svg --answers answers.tsv)
check "needle --answers writes one line per trial, the others' numbers and whose number each answer is (rc=$rc)" \
  sh -c "[ $rc = 0 ] && [ \$(wc -l < answers.tsv) = 5 ] && head -1 answers.tsv | grep -q answer_is && \
         awk -F'\t' 'NR > 1 && (\$9 !~ /^(asked|none|other:[a-z]+)\$/ || split(\$10, n, \",\") != 2) {bad = 1} END {exit bad}' answers.tsv"
recount=$(awk -F'\t' 'function shared(a, b,  i, n) { n = 0; for (i = 1; i <= length(a); i++) n += substr(a, i, 1) == substr(b, i, 1); return n }
  NR > 1 { trials++; if ($7 == $6) { exact++; next }
           own = shared($7, $6); best = 0; whole = 0; k = split($10, other, ",")
           for (i = 1; i <= k; i++) { split(other[i], kv, "="); s = shared($7, kv[2]); if (s > best) best = s; if ($7 == kv[2]) whole = 1 }
           if (best > own) { bindings++; wholes += whole } else digits++ }
  END { printf "%d/%d .* %d (%d) / %d$", exact, trials, bindings, wholes, digits }' answers.tsv)
check "needle --needles 3: the keyed-recall table's exact answers and bindings / digits agree with --answers ($recount)" \
  sh -c "grep -q 'misses: bindings (whole) / digits' out.txt && grep '^needles3 ' out.txt | grep -q '$recount'"
rc=$(run "$bin" needle --model hay/model.safetensors --task passkey --haystack tiny.txt --len 400 --depth 50 --trials 2 --svg n.svg)
check "needle --haystack FILE exits 0 and reads it (rc=$rc)" sh -c "[ $rc = 0 ] && grep -q 'filler: tiny.txt' out.txt"
rc=$(run "$bin" needle --model needles3/model.safetensors --task prose --data tiny.txt --len 400 --depth 50 --trials 1 \
  --trace trace.tsv --svg n.svg)
check "needle --trace writes the memory's change per chunk and layer, and its plot (rc=$rc)" \
  sh -c "[ $rc = 0 ] && [ \$(grep -c '^[0-9]' trace.tsv) -ge 40 ] && awk -F'\t' '\$5 > 0' trace.tsv | grep -q 'magic' && grep -q '</svg>' trace.tsv.svg"
no_digit=$(awk -F'\t' '$1 ~ /^[0-9]/ && $2 == 0 && $5 == 0 && $6 !~ /[0-9]/' trace.tsv | wc -l)
check "needle --trace: the write gate's selectivity, its chunks without a digit counted as in the TSV ($no_digit)" \
  grep -q "^layer 0: median write over the needles' largest: [0-9.e-]* in the $no_digit chunks without a digit" out.txt
run "$bin" train $tiny --block lmm --chunk 96 --steps 2 --out chunk96 > /dev/null
rc=$(run "$bin" needle --model chunk96/model.safetensors --task prose --data tiny.txt --len 400 --depth 50 --trials 1 \
  --trace trace96.tsv --svg n.svg)
check "needle --trace of a memory whose chunks are 96 tokens: each line shows the chunk's first 63 (rc=$rc)" \
  sh -c "[ $rc = 0 ] && [ \$(grep -c '^[0-9]' trace96.tsv) -ge 4 ] && \
         awk -F'\t' '\$1 ~ /^[0-9]/ && length(\$6) != 63 && \$1 % 96 == 0 {bad = 1} END {exit bad}' trace96.tsv"
rc=$(run "$bin" needle --model needles3/model.safetensors --task prose --data tiny.txt --len 600 --depth 10 --trials 2 \
  --curve curve.tsv --curve-every 50)
check "needle --curve: a line per trial and probe, 50 tokens apart, digits read never fewer, and its plot (rc=$rc)" \
  sh -c "[ $rc = 0 ] && [ \$(grep -c '^needles3' curve.tsv) -ge 16 ] && grep -q '</svg>' curve.tsv.svg && \
         awk -F'\t' '/^needles3/ {n[\$2]++; if (\$3 != 50 * n[\$2] || \$4 < d[\$2] || \$5 > \$6 || \$7 != (\$5 == \$6)) bad = 1; d[\$2] = \$4}
                     END {exit bad || n[0] != n[1]}' curve.tsv && grep -q 'exact match of 2 trials' out.txt"
rc=$(run "$bin" needle --model needles3/model.safetensors --task prose --data tiny.txt --len 600 --curve c.tsv --curve-every 4000)
check "needle --curve with no room for a probe: exit 1, saying so (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'no probe fits' err.txt"
rc=$(run "$bin" train $tiny --layers 2 --theta-init 1e-12,0.5 --mem-head-dim 8 --steps 2 --out gates2)
check "train --theta-init X,Y gives each layer its own write gate; --mem-head-dim sets d_h (rc=$rc)" \
  sh -c "[ $rc = 0 ] && \"$bin\" info --model gates2/model.safetensors > info.txt && grep -q 'memory: 2 heads of 8,' info.txt && \
         grep -q 'layer 0 memory gates at zero input: theta 1e-12 ' info.txt && grep -q 'layer 1 memory gates at zero input: theta 0[.]5' info.txt"
rc=$(run "$bin" train $tiny --layers 2 --theta-init 0.1,0.2,0.3 --steps 2 --out nope)
check "  --theta-init with a value per layer for another number of layers: exit 2 (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'theta-init lists 3 values for 2 layers' err.txt"
rc=$(run "$bin" train $tiny --numbers 0.1 --steps 2 --out nope)
check "--numbers without --task: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train $tiny --task prose --recipe none --numbers 0.2 --lens 400 --steps 3 --out numbers)
check "train --task prose --numbers 0.2 exits 0 (rc=$rc)" [ "$rc" = 0 ]
rc=$(run "$bin" train $tiny --task prose --recipe none --lens 400 --steps 3 --resume --out numbers)
check "  --resume without its --numbers is refused (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'numbers' err.txt"
rc=$(run "$bin" needle --model numbers/model.safetensors --task prose --data tiny.txt --numbers 0.3 --len 400 --depth 50 \
  --trials 2 --svg n.svg)
check "needle --numbers 0.3 exits 0 and says so (rc=$rc)" sh -c "[ $rc = 0 ] && grep -q '0.3 of its words written as numbers' out.txt"
rc=$(run "$bin" train $tiny --decoys 0.5 --steps 2 --out nope)
check "--decoys without --task: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train $tiny --task prose --recipe none --decoys 0.5 --lens 400 --steps 3 --out nope)
check "--decoys without --numbers: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'decoys are some of its numbers' err.txt"
rc=$(run "$bin" train $tiny --task prose --recipe none --numbers 0.2 --decoys 0.5 --lens 400 --steps 3 --out decoys)
check "train --task prose --decoys 0.5 exits 0 (rc=$rc)" [ "$rc" = 0 ]
rc=$(run "$bin" train $tiny --task prose --recipe none --numbers 0.2 --lens 400 --steps 3 --resume --out decoys)
check "  --resume without its --decoys is refused (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'decoys' err.txt"
rc=$(run "$bin" needle --model decoys/model.safetensors --task prose --data tiny.txt --numbers 0.3 --decoys 0.5 --len 400 \
  --depth 50 --trials 2 --svg n.svg)
check "needle --decoys 0.5 exits 0 and says so (rc=$rc)" sh -c "[ $rc = 0 ] && grep -q '0.5 of those numbers start' out.txt"
rc=$(run "$bin" needle --model decoys/model.safetensors --task prose --data tiny.txt --decoys 0.5 --len 400 --trials 1)
check "needle --decoys without --numbers: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train $tiny --alike-words --steps 2 --out nope)
check "--alike-words without --task: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train $tiny --task passkey --recipe none --alike-words --lens 400 --steps 2 --out nope)
check "--alike-words with the passkey: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'go with --task prose' err.txt"
rc=$(run "$bin" train $tiny --task prose --recipe none --needles 3 --alike-words --lens 400 --steps 3 --out alike)
check "train --task prose --needles 3 --alike-words exits 0 (rc=$rc)" [ "$rc" = 0 ]
rc=$(run "$bin" train $tiny --task prose --recipe none --needles 3 --lens 400 --steps 3 --resume --out alike)
check "  --resume without its --alike-words is refused (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'alike-words' err.txt"
rc=$(run "$bin" needle --model alike/model.safetensors --task prose --data tiny.txt --needles 3 --alike-words --len 400 \
  --depth 50 --trials 2 --answers alike.tsv --svg n.svg)
check "needle --needles 3 --alike-words exits 0, says so, and its other key words are as long as the asked one's" \
  sh -c "[ $rc = 0 ] && grep -q 'as long as the asked' out.txt && awk -F'\t' 'NR > 1 { n = split(\$10, o, \",\"); \
  for (i = 1; i <= n; i++) { split(o[i], w, \"=\"); if (length(w[1]) != length(\$5)) bad++ } rows++ } \
  END { exit !(rows == 2 && !bad) }' alike.tsv"
rc=$(run "$bin" needle --model alike/model.safetensors --task passkey --alike-words --len 400 --trials 1)
check "needle --alike-words with the passkey: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train $tiny --alike-numbers 0.5 --steps 2 --out nope)
check "--alike-numbers without --task: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train $tiny --task passkey --recipe none --alike-numbers 1 --lens 400 --steps 2 --out nope)
check "--alike-numbers with the passkey: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'alike-numbers go with --task prose' err.txt"
rc=$(run "$bin" train $tiny --task prose --recipe none --needles 3 --alike-numbers 1.5 --lens 400 --steps 3 --out nope)
check "--alike-numbers 1.5 (a fraction above 1): exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train $tiny --task prose --recipe none --needles 3 --alike-numbers 0.5 --lens 400 --steps 3 --out alikenum)
check "train --task prose --needles 3 --alike-numbers 0.5 exits 0 (rc=$rc)" [ "$rc" = 0 ]
rc=$(run "$bin" train $tiny --task prose --recipe none --needles 3 --lens 400 --steps 3 --resume --out alikenum)
check "  --resume without its --alike-numbers is refused (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'alike-numbers' err.txt"
# the answers file: column 6 the asked number, column 10 word=number of each other needle
rc=$(run "$bin" needle --model alikenum/model.safetensors --task prose --data tiny.txt --needles 3 --alike-numbers 1 \
  --len 400 --depth 50 --trials 2 --answers alikenum.tsv --svg n.svg)
check "needle --needles 3 --alike-numbers 1 exits 0, says so, and its other numbers start with the asked one's first digit" \
  sh -c "[ $rc = 0 ] && grep -q 'start with the asked one' out.txt && awk -F'\t' 'NR > 1 { n = split(\$10, o, \",\"); \
  for (i = 1; i <= n; i++) { split(o[i], w, \"=\"); if (substr(w[2], 1, 1) != substr(\$6, 1, 1) || w[2] == \$6) bad++ } \
  rows++ } END { exit !(rows == 2 && !bad) }' alikenum.tsv"
rc=$(run "$bin" needle --model alikenum/model.safetensors --task passkey --alike-numbers 1 --len 400 --trials 1)
check "needle --alike-numbers with the passkey: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" needle --model hay/model.safetensors --task passkey --needles 2 --len 400)
check "needle --needles with the passkey: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" needle --model hay/model.safetensors --task prose --data tiny.txt --haystack sentences --len 400)
check "needle with both --data and --haystack: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train $tiny $mac --mac-learns-input --steps 2 --out learnx)
check "train --block mac --mac-learns-input exits 0 (rc=$rc)" [ "$rc" = 0 ]
"$bin" info --model learnx/model.safetensors >out.txt 2>&1
check "  info shows that its memory learns from X, and the config saves it" \
  sh -c 'grep -q "memory learns from X" out.txt && grep -q "\"mac_learns_from\":1" out.txt'
rc=$(run "$bin" train $tiny --no-forget --steps 2 --out noforget)
check "train --no-forget exits 0 (rc=$rc)" [ "$rc" = 0 ]
"$bin" info --model noforget/model.safetensors >out.txt 2>&1
check "  info says the memory forgets nothing, alpha 0 at every layer, and the config saves it" \
  sh -c 'grep -q "memory forgetting: none" out.txt && ! grep "memory gates at zero input" out.txt | grep -vq "alpha 0$" &&
         grep -q "\"no_forget\":1" out.txt'
rc=$(run "$bin" train $tiny --no-forget --steps 4 --resume --out noforget)
check "  it resumes with --no-forget (rc=$rc)" [ "$rc" = 0 ]
rc=$(run "$bin" train $tiny --no-forget --steps 12 --resume --out full)
check "  a run without it refuses to resume with it (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'trained with --no-forget 0, not 1' err.txt"
rc=$(run "$bin" train $tiny --block mag --mac-learns-input --steps 2 --out nope)
check "--mac-learns-input with another block: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'block mac' err.txt"

echo "== generate"
gen="--model full/model.safetensors -n 40 --temperature 0.8 --top-k 10 --top-p 0.9 --seed 3"
rc=$(run "$bin" generate $gen --prompt "The keeper")
check "generate exits 0 (rc=$rc)" [ "$rc" = 0 ]
cp out.txt gen1.txt
check "it prints the prompt and then the sample" grep -q "^The keeper" gen1.txt
run "$bin" generate $gen --prompt "The keeper" >/dev/null
check "the same --seed gives the same text" cmp -s out.txt gen1.txt
rc=$(run "$bin" generate $gen --prompt "The keeper" --samples 3)
check "generate --samples 3 (a session batch) exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "  and prints three samples, each the prompt and its continuation" \
  sh -c '[ "$(grep -ac "^=== sample [123] of 3$" out.txt)" = 3 ] && [ "$(grep -a -A1 "^=== sample" out.txt | grep -ac "^The keeper")" = 3 ]'
cp out.txt samples1.txt
run "$bin" generate $gen --prompt "The keeper" --samples 3 >/dev/null
check "  the same --seed gives the same samples" cmp -s out.txt samples1.txt
rc=$(run "$bin" generate $gen --samples 2 --state never.safetensors)
check "generate --samples 2 --state: exit 2, nothing written (rc=$rc)" \
  sh -c "[ $rc = 2 ] && [ ! -e never.safetensors ] && grep -q 'samples' err.txt"
rc=$(run "$bin" generate $gen --samples 0)
check "generate --samples 0: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" generate --model full/trainer.safetensors -n 10 --seed 1)
check "a trainer checkpoint works as a model too (rc=$rc)" [ "$rc" = 0 ]

rc=$(run "$bin" generate $gen --prompt "The clock" --state mem.safetensors)
check "generate --state (new file) exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "  and writes the state file" [ -s mem.safetensors ]
check "  having seen 49 tokens" grep -q "49 tokens seen" err.txt
rc=$(run "$bin" generate $gen --prompt "The light" --state mem.safetensors)
check "generate --state (existing file) exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "  reads the memory it saved" grep -q "read the memory state .*49 tokens seen" err.txt
check "  and saves it again, 49 tokens later" grep -q "wrote the memory state .*98 tokens seen" err.txt

: > gsig.out # there before the background job opens it, for the loop below
"$bin" generate $gen --prompt "The clock" -n 100000000 --state sigmem.safetensors >gsig.out 2>gsig.err &
pid=$!
i=0
while [ $i -lt 200 ] && [ "$(wc -c <gsig.out)" -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
kill -s INT $pid
# a background job of this shell starts with SIGINT ignored: a program that does not catch it would run on
i=0
while [ $i -lt 300 ] && kill -0 $pid 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
kill -s KILL $pid 2>/dev/null; wait $pid; rc=$?
"$bin" info --state sigmem.safetensors >out.txt 2>&1
seen=$(sed -n 's/.* \([0-9]*\) tokens seen.*/\1/p' out.txt)
check "Ctrl-C during generate --state: exit 130 and the memory state is saved (rc=$rc, ${seen:-no} tokens seen)" \
  sh -c "[ $rc = 130 ] && grep -q 'interrupted (SIGINT)' gsig.err && grep -q 'wrote the memory state sigmem.safetensors' gsig.err &&
         [ '${seen:-0}' -ge 200 ]"

echo "== info"
rc=$(run "$bin" info --model full/model.safetensors)
check "info --model exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "  the configuration and the parts" sh -c 'grep -q "^config: {" out.txt && grep -q "layer 0 memory" out.txt && grep -q "layer 0 FFN" out.txt'
total=$(sed -n 's/^parameters: \([0-9,]*\).*/\1/p' out.txt | tr -d ,)
parts=$(awk '/^  / && $NF ~ /^[0-9,]+$/ { gsub(",", "", $NF); s += $NF } END { print s }' out.txt)
"$bin" train $tiny --steps 1 --sample-len 0 --out one >train1.txt 2>&1
check "  the parts add up to the total, which train printed ($parts = $total)" \
  sh -c "[ -n '$total' ] && [ '$parts' = '$total' ] && grep -q ' $total parameters' train1.txt"
rc=$(run "$bin" info --state mem.safetensors)
check "info --state: tokens seen and the memory norms per layer (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q '98 tokens seen' out.txt && grep -q '^  0 ' out.txt"
rc=$(run "$bin" info --state full/model.safetensors)
check "  a model given as --state: exit 1 (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'not a memory state' err.txt"
rc=$(run "$bin" info)
check "  info without a file: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train $tiny --block lmm --steps 1 --sample-len 0 --out lmm)
check "LMM's summary line claims no attention heads (rc=$rc)" sh -c "[ $rc = 0 ] && grep -q '^model: lmm' out.txt && ! grep -q 'attention heads' out.txt"
rc=$(run "$bin" train $tiny --block lmm --steps 1 --sample-len 0 --key-shift --emb-scale 10 --w0-scale 0.1 --out init1)
rc2=$(run "$bin" train $tiny $mac --steps 1 --sample-len 0 --conv-uniform --surprise-bound 0.5 --out init2)
rc3=$(run "$bin" info --model init2/model.safetensors)
check "the initialisation options train (--key-shift --emb-scale --w0-scale: rc=$rc; --conv-uniform --surprise-bound: rc=$rc2), and info shows the bound" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && [ $rc3 = 0 ] && grep -q 'surprise bound 0.5' out.txt"
rc=$(run "$bin" train $tiny $mac --steps 1 --sample-len 0 --attn-identity 1.5 --key-shift --out init3)
check "--attn-identity trains (rc=$rc)" [ "$rc" = 0 ]
kf="--block lmm --steps 6 --sample-len 0 --emb-scale 10"
rc=$(run "$bin" train $tiny $kf --key-shift-fixed --out kfix)
rc2=$(run "$bin" info --model kfix/model.safetensors)
check "--key-shift-fixed trains (rc=$rc) and its key convs stay one tap on the previous token after 6 steps (rc=$rc2)" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && grep -q 'memory keys: from the previous token alone' out.txt"
rc=$(run "$bin" train $tiny $kf --key-shift --out kshift)
rc2=$(run "$bin" info --model kshift/model.safetensors)
check "  with --key-shift alone the other taps learn (rc=$rc, $rc2)" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && ! grep -q 'memory keys:' out.txt"
rc=$(run "$bin" train $tiny $kf --key-shift-fixed --stop-at 3 --out kfix_split)
rc2=$(run "$bin" train $tiny $kf --key-shift-fixed --resume --out kfix_split)
check "  interrupted and resumed (rc=$rc, $rc2): bit-identical to the uninterrupted run" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && cmp -s kfix/trainer.safetensors kfix_split/trainer.safetensors"
rc=$(run "$bin" train $tiny $kf --resume --out kfix_split)
check "  --resume without --key-shift-fixed is refused (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'key-shift-fixed' err.txt"
af="$mac --layers 2 --steps 1 --lr 0 --sample-len 0" # lr 0: the gates stay where they started
rc=$(run "$bin" train $tiny $af --alpha-init 0.001,0.00001 --out alpha2)
rc2=$(run "$bin" info --model alpha2/model.safetensors)
check "--alpha-init X,Y starts each layer's forgetting gate at its own value (rc=$rc, $rc2)" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && grep -q 'layer 0 memory gates at zero input: .*alpha 0.001\$' out.txt &&
         grep -q 'layer 1 memory gates at zero input: .*alpha 1e-05\$' out.txt"
rc=$(run "$bin" train $tiny $af --alpha-init 0.001 --out alpha1)
rc2=$(run "$bin" train $tiny $af --alpha-init 0.001,0.001 --out alpha11)
check "  a list of one value per layer trains the bytes of the single value (rc=$rc, $rc2)" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && cmp -s alpha1/model.safetensors alpha11/model.safetensors"
rc=$(run "$bin" train $tiny $af --alpha-init 0.001,0.01,0.1 --out alpha3)
check "  a list whose length is not --layers: exit 2 naming both (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'lists 3 values for 2 layers' err.txt && [ ! -e alpha3 ]"
rc=$(run "$bin" train $tiny --block lm2 --slots 5 --segment 16 --steps 2 --sample-len 0 --out lm2)
rc2=$(run "$bin" info --model lm2/model.safetensors)
check "LM2 trains (--block lm2 --slots 5: rc=$rc) and info shows its bank (rc=$rc2)" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && grep -q 'a bank of 5 slots written every 16 tokens' out.txt"
rc=$(run "$bin" generate --model lm2/model.safetensors --prompt "abc" -n 20 --state lm2/state.safetensors)
rc2=$(run "$bin" generate --model lm2/model.safetensors -n 20 --state lm2/state.safetensors)
rc3=$(run "$bin" info --state lm2/state.safetensors)
check "LM2 generate --state carries the bank across runs (rc=$rc, $rc2) and info shows its norm (rc=$rc3)" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && [ $rc3 = 0 ] && grep -q '44 tokens seen' out.txt && grep -q '|bank|' out.txt"
rc=$(run "$bin" train $tiny --block mac --slots 4 --steps 1)
check "--slots without --block lm2: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" --steps 1 --val-every 0 --sample-len 0 --out default1)
count=$(sed -n 's/.* \([0-9]*\) parameters.*/\1/p' out.txt | awk '{ s = $1; r = ""; while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) } print s r }')
check "the README's parameter count of the default model is the program's ($count)" \
  sh -c "[ $rc = 0 ] && [ -n '$count' ] && grep -q 'default model (MAG, .* $count parameters' '$root/README.md'"

echo "== errors"
rc=$(run "$bin" generate --model missing.safetensors)
check "a missing model file: exit 1 with a message (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'missing.safetensors' err.txt"
head -c 1000 full/model.safetensors > broken.safetensors
rc=$(run "$bin" generate --model broken.safetensors)
check "a truncated model file: exit 1 with a message (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'error' err.txt"
rc=$(run "$bin" generate --model "$bin")
check "a program given as --model: exit 1, 'not a safetensors file' (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q 'is not a safetensors file (header length' err.txt"
check "  naming the file once" [ "$(grep -o "$bin" err.txt | wc -l)" = 1 ]
rc=$(run "$bin" generate --model full/model.safetensors --state full/model.safetensors -n 5)
check "a model file given as --state: refused (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'not a session' err.txt"
rc=$(run "$bin" train --steps banana)
check "a bad number: exit 2 with a message (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'steps' err.txt"
rc=$(run "$bin" train --block transformer)
check "an unknown block kind: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train --colour blue)
check "an unknown option: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" generate)
check "generate without --model: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" train --data no-such-file.txt)
check "a missing --data file: exit 1 (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'no-such-file' err.txt"
printf 'too short' > short.txt
rc=$(run "$bin" train --data short.txt --out short)
check "a text shorter than --seq: exit 1 (rc=$rc)" [ "$rc" = 1 ]
rc=$(run "$bin" eval)
check "eval without --model: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" eval --model full/model.safetensors --len 12Q)
check "eval with a bad size: exit 2 with a message (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'len' err.txt"
rc=$(run "$bin" eval --model full/model.safetensors --data tiny.txt --len 1M)
check "eval longer than the held-out split: exit 1 with a message (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'held-out' err.txt"
: > empty.txt
rc=$(run "$bin" eval --model full/model.safetensors --data empty.txt)
check "eval --data an empty file: exit 1 saying so once, no note of a --len it cannot read (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q 'too few to evaluate' err.txt && ! grep -q 'note: --len' out.txt"
rc=$(run "$bin" needle --model full/model.safetensors --task riddle)
check "needle with an unknown task: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" needle --model full/model.safetensors --len 64)
check "needle shorter than a task needs: exit 2 with a message (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'at least' err.txt"
rc=$(run "$bin" needle --model missing.safetensors)
check "needle with a missing model: exit 1 (rc=$rc)" [ "$rc" = 1 ]
rc=$(run "$bin" train --data /dev/zero --data-max 100000 --out zero)
check "--data larger than --data-max (here /dev/zero): exit 1 with a message (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q 'more than 100000 bytes' err.txt"
rc=$(run "$bin" train --mem-heads 32 --d 16 --out heads)
check "--mem-heads 32 --d 16 (head width 0.5): exit 2, not rounded (rc=$rc)" \
  sh -c "[ $rc = 2 ] && grep -q 'does not divide' err.txt"
rc=$(run "$bin" train --mem-heads 3 --d 32 --out heads)
check "--mem-heads 3 --d 32: exit 2 (rc=$rc)" [ "$rc" = 2 ]

# A memory state near the float range is legal (finite) and loads, but the next tokens overflow:
# generate must fail (non-zero) and keep the old state file, not write one it would refuse.
cp mem.safetensors huge.safetensors
hlen=$(od -An -tu8 -N8 huge.safetensors | tr -d ' ')
span=$(head -c $((8 + hlen)) huge.safetensors | tail -c "$hlen" | \
  sed -n 's/.*"layers\.0\.mem\.state":{[^}]*"data_offsets":\[\([0-9]*\),\([0-9]*\)\].*/\1 \2/p')
set -- $span
if [ -n "${2:-}" ]; then
  n=$((($2 - $1) / 4)); : > big.bin; k=0
  while [ $k -lt "$n" ]; do printf '\346\261\141\177' >> big.bin; k=$((k + 1)); done # 3e38 as f32 LE
  dd if=big.bin of=huge.safetensors bs=1 seek=$((8 + hlen + $1)) conv=notrunc 2>/dev/null
fi
check "  (the state file's layers.0.mem.state found and overwritten with 3e38)" [ -n "${2:-}" ]
cp huge.safetensors huge_before.safetensors
rc=$(run "$bin" generate $gen --prompt "The" --state huge.safetensors)
check "a state that overflows at the next token: exit 1 (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'NaN or Inf' err.txt"
check "  and the old state file is kept, unchanged" cmp -s huge.safetensors huge_before.safetensors

rc=$(run "$bin" frobnicate)
check "an unknown command: exit 2 (rc=$rc)" [ "$rc" = 2 ]
rc=$(run "$bin" help)
check "help exits 0 (rc=$rc)" [ "$rc" = 0 ]
rc=$(run "$bin" help foo)
check "help of an unknown command: exit 2 with a message (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q \"no help for 'foo'\" err.txt"
version=$(sed -n 's/^#define TITANS_VERSION "\(.*\)"/\1/p' "$root/titans.h")
rc=$(run "$bin" --version)
check "--version: exit 0, 'titans $version' (the header's TITANS_VERSION) (rc=$rc)" \
  sh -c "[ $rc = 0 ] && [ -n '$version' ] && [ \"\$(cat out.txt)\" = 'titans $version' ]"
mkdir -p a_folder
rc=$(run "$bin" train --data a_folder --out folder)
check "--data a folder: exit 1, 'Is a directory' (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'a_folder: Is a directory' err.txt"
rc=$(run "$bin" eval --model full/model.safetensors --data a_folder)
check "eval --data a folder: exit 1, 'Is a directory' (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'a_folder: Is a directory' err.txt"

echo "test_examples: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
