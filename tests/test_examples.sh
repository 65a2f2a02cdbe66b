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
tmp=$(mktemp -d "${TMPDIR:-/tmp}/titans_examples.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
pass=0; fail=0
check() { # description, then a shell condition
  what=$1; shift
  if "$@"; then echo "  ok   $what"; pass=$((pass + 1)); else echo "  FAIL $what"; fail=$((fail + 1)); fi
}
# exit status of a command, its output kept in out.txt / err.txt
run() { "$@" >out.txt 2>err.txt; echo $?; }

# a tiny text: a few sentences repeated, about 6 KB
i=0
: > tiny.txt
while [ $i -lt 30 ]; do
  printf 'The keeper wound the clock at midnight and wrote the weather in the log. Line %d.\n' $i >> tiny.txt
  printf 'A small light near at hand and a small light far away are good for different things.\n' >> tiny.txt
  i=$((i + 1))
done

tiny="--data tiny.txt --d 32 --layers 1 --heads 2 --mem-heads 2 --seq 32 --batch 2 --segment 16 --chunk 8 --window 16"
tiny="$tiny --val-every 4 --val-batches 1 --sample-len 20 --seed 7"

echo "== train"
rc=$(run "$bin" train $tiny --steps 8 --save-every 4 --out full)
check "train exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "model.safetensors, trainer.safetensors and loss.svg written" \
  [ -s full/model.safetensors -a -s full/trainer.safetensors -a -s full/loss.svg ]
check "progress lines and validation loss printed" grep -q "validation loss" out.txt
check "the plot has curves and a legend" sh -c 'grep -q "<polyline" full/loss.svg && grep -q "validation loss" full/loss.svg'
check "no temporary files left" sh -c '! ls full | grep -q tmp'

rc=$(run "$bin" train $tiny --steps 8 --stop-at 4 --out split)
check "an interrupted run (--stop-at 4) exits 0 (rc=$rc)" [ "$rc" = 0 ]
rc=$(run "$bin" train $tiny --steps 8 --resume --out split)
check "--resume exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "it resumed at step 4" grep -q "resumed .* at step 4" out.txt
check "resumed weights are bit-identical to the uninterrupted run's" cmp -s full/model.safetensors split/model.safetensors
check "so is the whole trainer checkpoint (moments, step, loss history)" cmp -s full/trainer.safetensors split/trainer.safetensors

rc=$(run "$bin" train $tiny --steps 8 --seed 8 --resume --out split)
check "--resume with another seed is refused (rc=$rc)" [ "$rc" != 0 ]
check "  with a message" grep -q "seed" err.txt

echo "== train --task"
task="--task passkey --task-frac 0.75 --lens 160,320"
rc=$(run "$bin" train $tiny $task --steps 6 --out task_full)
check "train --task passkey with a --lens curriculum exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "  it trains the stages' shapes (2 x 160, then 1 x 320)" sh -c 'grep -q "2 sequences of 160" out.txt && grep -q "1 sequences of 320" out.txt'
rc=$(run "$bin" train $tiny $task --steps 6 --stop-at 3 --out task_split)
rc2=$(run "$bin" train $tiny $task --steps 6 --resume --out task_split)
check "  interrupted and resumed (rc=$rc, $rc2): bit-identical to the uninterrupted run" \
  sh -c "[ $rc = 0 ] && [ $rc2 = 0 ] && cmp -s task_full/trainer.safetensors task_split/trainer.safetensors"
rc=$(run "$bin" train $tiny --task prose --lens 200 --steps 6 --resume --out task_split)
check "  --resume with another task is refused (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'task' err.txt"
rc=$(run "$bin" train $tiny --lens 200 --steps 2 --out nope)
check "--lens without --task: exit 2 (rc=$rc)" [ "$rc" = 2 ]

echo "== generate"
gen="--model full/model.safetensors -n 40 --temperature 0.8 --top-k 10 --top-p 0.9 --seed 3"
rc=$(run "$bin" generate $gen --prompt "The keeper")
check "generate exits 0 (rc=$rc)" [ "$rc" = 0 ]
cp out.txt gen1.txt
check "it prints the prompt and then the sample" grep -q "^The keeper" gen1.txt
run "$bin" generate $gen --prompt "The keeper" >/dev/null
check "the same --seed gives the same text" cmp -s out.txt gen1.txt
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

echo "== errors"
rc=$(run "$bin" generate --model missing.safetensors)
check "a missing model file: exit 1 with a message (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'missing.safetensors' err.txt"
head -c 1000 full/model.safetensors > broken.safetensors
rc=$(run "$bin" generate --model broken.safetensors)
check "a truncated model file: exit 1 with a message (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q 'error' err.txt"
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

echo "test_examples: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
