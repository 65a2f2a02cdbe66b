#!/bin/sh
# What the README promises a user: its C code is the code of examples/ (every ```c block of README.md
# and of docs/memory_api.md appears verbatim in an examples/*.c file) and that code compiles (make)
# and runs; the relative links of README.md and docs/ name files that exist; the Python reader /
# writer round-trips a model (when python3 with numpy is installed); make install / uninstall.
# Usage: sh tests/test_readme.sh [build folder]   (the folder holds titans, readme_quickstart, readme_memory)
# The last line is "test_readme: N passed, N failed"; the exit status is non-zero on a failure.
build=${1:-build/default}
root=$(cd "$(dirname "$0")/.." && pwd)
case $build in /*) ;; *) build=$(pwd)/$build ;; esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/titans_readme.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
check() { # description, then a shell condition
  what=$1; shift
  if "$@"; then echo "  ok   $what"; pass=$((pass + 1)); else echo "  FAIL $what"; fail=$((fail + 1)); fi
}

echo "== the README's C code (and docs/memory_api.md's) is examples/ code"
# every ```c block into its own file, then each must be a verbatim part of one examples/*.c file
for doc in README.md docs/memory_api.md; do
  name=$(basename "$doc" .md)
  awk -v dir="$tmp" -v name="$name" '/^```c$/ { n++; inside = 1; next } /^```/ { inside = 0; next }
    inside { print > (dir "/" name "_block" n ".c") }' "$root/$doc"
  blocks=0; missing=""
  for b in "$tmp/${name}"_block*.c; do
    [ -f "$b" ] || continue
    blocks=$((blocks + 1))
    found=0
    for f in "$root"/examples/*.c; do
      if awk 'FNR == NR { want = want $0 "\n"; next } { have = have $0 "\n" } END { exit index(have, want) ? 0 : 1 }' "$b" "$f"; then
        found=1; break
      fi
    done
    [ $found = 1 ] || missing="$missing $(basename "$b") ($(head -n 1 "$b"))"
  done
  check "all $blocks C blocks of $doc are in examples/*.c${missing:+; not found:$missing}" sh -c "[ $blocks -ge 2 ] && [ -z '$missing' ]"
done

echo "== links between the pages"
# every relative link of README.md and docs/**/*.md ([text](path) or [text](path#anchor)) names a file
# or folder of the repository
bad=""; links=0
for doc in "$root"/README.md "$root"/docs/*.md "$root"/docs/*/*.md; do
  [ -f "$doc" ] || continue
  dir=$(dirname "$doc")
  for target in $(grep -o '](\([^)#: ]*\)[)#]' "$doc" | sed 's/^](//; s/[)#]$//'); do
    [ -n "$target" ] || continue
    links=$((links + 1))
    [ -e "$dir/$target" ] || bad="$bad ${doc#$root/}:$target"
  done
done
check "all $links relative links of README.md and docs/ name files that exist${bad:+; missing:$bad}" \
  sh -c "[ $links -ge 20 ] && [ -z '$bad' ]"

echo "== the header's top block"
version=$(sed -n 's/^#define TITANS_VERSION "\(.*\)"/\1/p' "$root/titans.h")
check "its revision history has a line for TITANS_VERSION ${version:-?}" \
  sh -c "[ -n '$version' ] && sed -n '/^   REVISION HISTORY/,/^\*\//p' '$root/titans.h' | grep -q '^     $version ('"

cd "$tmp" || exit 1
i=0
: > text.txt
while [ $i -lt 40 ]; do
  printf 'The keeper wound the clock at midnight and wrote the weather in the log. Line %d.\n' $i >> text.txt
  i=$((i + 1))
done
"$build/readme_quickstart" text.txt 2 >out.txt 2>err.txt; rc=$?
check "examples/readme_quickstart.c trains 2 steps, samples and saves (rc=$rc)" \
  sh -c "[ $rc = 0 ] && grep -q '^step 2: loss' out.txt && [ -s model.safetensors ]"
"$build/titans" info --model model.safetensors >info.txt 2>&1; rc=$?
check "  its model.safetensors loads (./titans info, rc=$rc)" sh -c "[ $rc = 0 ] && grep -q '^parameters:' info.txt"
"$build/readme_quickstart" >/dev/null 2>&1; rc=$?
check "  without a file: usage, exit 2 (rc=$rc)" [ "$rc" = 2 ]
"$build/readme_memory" >out.txt 2>&1; rc=$?
check "examples/readme_memory.c runs: recall and save / restore as documented (rc=$rc)" [ "$rc" = 0 ]
sed 's/^/       /' out.txt

echo "== Python: python/titans_st.py (numpy only)"
py=""
for p in /usr/bin/python3 python3; do
  if "$p" -c "import numpy" >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "  skipped: python3-numpy not installed"
else
  st="$root/python/titans_st.py"
  "$build/titans" train --data text.txt --d 32 --layers 1 --heads 2 --mem-heads 2 --seq 32 --batch 2 --chunk 8 \
    --window 16 --steps 2 --sample-len 0 --out run >/dev/null 2>&1
  "$build/titans" generate --model run/model.safetensors --prompt "The clock" -n 10 --seed 1 --state mem.safetensors >/dev/null 2>&1
  PYTHONPATH="$root/python" "$py" - run/trainer.safetensors mem.safetensors copy.safetensors >py.txt 2>&1 <<'PY'; rc=$?
import sys, titans_st
trainer, state, out = sys.argv[1:4]
t = titans_st.load(trainer)
s = titans_st.load(state)
params = t.model_tensors()
assert t.kind == "trainer" and t.step == 2 and t.config["d"] == 32, (t.kind, t.step, t.config)
assert len(t.tensors) == 3 * len(params) and t.tensors["adam.m.tok_emb"].shape == (256, 32)
assert s.kind == "session" and s.tokens_seen == 19 and s.config == t.config, (s.kind, s.tokens_seen)
titans_st.save_model(out, t.tensors, t.config)
print("read a trainer (%d parameters, step %d) and a state (%d tokens seen); wrote %s"
      % (sum(v.size for v in params.values()), t.step, s.tokens_seen, out))
PY
  sed 's/^/       /' py.txt
  check "titans_st.py reads a trainer and a memory state with their config, writes the model (rc=$rc)" [ "$rc" = 0 ]
  "$build/titans" info --model run/model.safetensors | grep '^parameters' >a.txt
  "$build/titans" info --model copy.safetensors | grep '^parameters' >b.txt 2>&1
  check "  titans_model_load reads the rewritten model: the same weights hash ($(cat b.txt))" \
    sh -c "[ -s a.txt ] && cmp -s a.txt b.txt"
  "$build/titans" generate --model run/model.safetensors --prompt "The" -n 30 --temperature 0 >a.txt 2>/dev/null
  "$build/titans" generate --model copy.safetensors --prompt "The" -n 30 --temperature 0 >b.txt 2>/dev/null
  check "  and continues a prompt as the original does (greedy)" sh -c "[ -s a.txt ] && cmp -s a.txt b.txt"
  "$build/titans" generate --model copy.safetensors --state mem.safetensors -n 5 --seed 1 >/dev/null 2>err.txt; rc=$?
  check "  and takes the memory state saved with the original (rc=$rc)" sh -c "[ $rc = 0 ] && grep -q '19 tokens seen' err.txt"
  "$build/titans" train --data text.txt --d 32 --layers 1 --heads 2 --mem-heads 1 --mem-depth 1 --seq 32 --batch 2 \
    --chunk 8 --window 16 --steps 2 --sample-len 0 --out run1 >/dev/null 2>&1
  "$py" "$root/scripts/needle_erasure.py" run1/model.safetensors text.txt 0 2000 >py.txt 2>&1; rc=$?
  check "scripts/needle_erasure.py replays a first matrix memory over a needle and its haystack (rc=$rc)" \
    sh -c "[ $rc = 0 ] && grep -q 'tokens after the needle, [0-9]* digits; damage: digits' py.txt && \
           grep -q 'writes that hold 50 / 80 / 95% of the damage' py.txt && ! grep -q nan py.txt"
  "$py" "$root/scripts/needle_erasure.py" run/model.safetensors text.txt >py.txt 2>&1; rc=$?
  check "  a model whose first memory is not one matrix head: exit 1, saying so (rc=$rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'one matrix memory head' py.txt"
  "$py" "$st" text.txt >py.txt 2>&1; rc=$?
  check "titans_st.py given a text file: exit 1 with one line, not a traceback (rc=$rc)" \
    sh -c "[ $rc = 1 ] && [ \$(wc -l <py.txt) = 1 ] && grep -q 'text.txt is not a safetensors file' py.txt"
fi

echo "== make install"
(cd "$root" && make -s install PREFIX="$tmp/prefix" BUILD="$build" >"$tmp/install.txt" 2>&1); rc=$?
check "make install PREFIX=... (rc=$rc): include/titans.h, bin/titans, lib/pkgconfig/titans.pc" \
  sh -c "[ $rc = 0 ] && cmp -s '$root/titans.h' prefix/include/titans.h && [ -x prefix/bin/titans ] && [ -s prefix/lib/pkgconfig/titans.pc ]"
check "  titans.pc gives -I$tmp/prefix/include and -lm" \
  sh -c "grep -qx 'Cflags: -I\${includedir}' prefix/lib/pkgconfig/titans.pc && grep -qx 'Libs: -lm' prefix/lib/pkgconfig/titans.pc && grep -qx 'prefix=$tmp/prefix' prefix/lib/pkgconfig/titans.pc"
if command -v pkg-config >/dev/null 2>&1; then
  flags=$(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" pkg-config --cflags --libs titans)
  printf '#include <titans.h>\nint main(void) { titans_config c = titans_config_default(TITANS_BLOCK_MAC, 256, 64, 1); return c.d != 64; }\n' >use.c
  ${CC:-cc} -std=c11 -c use.c -o use.o $flags; rc=$?
  check "  a program compiles against the installed header with pkg-config's flags ($flags)" [ "$rc" = 0 ]
fi
prefix/bin/titans help >/dev/null; rc=$?
check "  the installed program runs (rc=$rc)" [ "$rc" = 0 ]
(cd "$root" && make -s uninstall PREFIX="$tmp/prefix" >/dev/null 2>&1); rc=$?
check "make uninstall removes the three files (rc=$rc)" \
  sh -c "[ $rc = 0 ] && [ ! -e prefix/include/titans.h ] && [ ! -e prefix/bin/titans ] && [ ! -e prefix/lib/pkgconfig/titans.pc ]"

echo "== bench/ab.sh (the README's side-by-side timing of two titans.h)"
if [ "$(basename "$build")" != default ]; then
  echo "  skipped in this build variant (it builds its own benches; checked in build/default)"
elif ! git -C "$root" rev-parse --verify -q HEAD >/dev/null 2>&1; then
  echo "  skipped: not a git checkout"
else
  AB_DIR="$tmp/ab" sh "$root/bench/ab.sh" HEAD..HEAD 16 1 64 1 >ab.txt 2>&1; rc=$?
  check "bench/ab.sh HEAD..HEAD at T = 64: both builds run, results bit-identical (rc=$rc)" \
    sh -c "[ $rc = 0 ] && [ \$(grep -c '^old one: ' ab.txt) = 1 ] && [ \$(grep -c '^new one: ' ab.txt) = 1 ] && grep -q '^best of all rounds: forward old ' ab.txt && grep -q '^results: bit-identical' ab.txt"
  sed 's/^/       /' ab.txt | tail -n 2
fi

echo "test_readme: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
