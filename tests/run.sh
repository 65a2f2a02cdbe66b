#!/bin/sh
# Runs every test binary in the build folder $1, then prints the totals as "N passed, N failed".
# Exits non-zero when any check failed or any test binary crashed.
build=${1:-build/default}
# TITANS_TEST_RUNNER: a command that runs each test binary (make check-neon: qemu-aarch64 -L ...)
runner=${TITANS_TEST_RUNNER:-}
# OpenMP threads that wait by spinning crawl when the machine is busier than its cores (a shared CI
# box): test_model took 109 s instead of 15 s at a load of 8 on 2 cores. Waiting threads sleep instead.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
total_pass=0; total_fail=0; crashed=""
for t in "$build"/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  echo "== $name"
  start=$(date +%s)
  out=$($runner "$t" 2>&1); rc=$?
  printf '%s\n' "$out"
  echo "($name took $(( $(date +%s) - start )) s)"
  line=$(printf '%s\n' "$out" | grep -E '^[a-z_0-9]+: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
  # no summary line, or a non-zero exit that no failed check explains: count the binary as a failure
  if [ -z "$line" ]; then
    crashed="$crashed $name(rc=$rc)"; total_fail=$((total_fail + 1))
  elif [ $rc -ne 0 ] && [ "$(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')" = 0 ]; then
    crashed="$crashed $name(rc=$rc)"; total_fail=$((total_fail + 1))
  fi
  if [ -n "$line" ]; then
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/'); f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
  fi
done
# a shell test: NAME SCRIPT ARG, its last line "NAME: N passed, N failed" added to the totals
run_script() {
  echo "== $1"
  start=$(date +%s)
  out=$(sh "$2" "$3" 2>&1); rc=$?
  printf '%s\n' "$out"
  echo "($1 took $(( $(date +%s) - start )) s)"
  line=$(printf '%s\n' "$out" | tail -n 1)
  p=$(echo "$line" | sed -nE 's/.*: ([0-9]+) passed.*/\1/p'); f=$(echo "$line" | sed -nE 's/.* ([0-9]+) failed$/\1/p')
  if [ -z "$p" ]; then crashed="$crashed $1(rc=$rc)"; total_fail=$((total_fail + 1))
  else total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); fi
}
# the smoke test of the example program, when it was built
if [ -x "$build/titans" ]; then run_script test_examples tests/test_examples.sh "$build/titans"; fi
# the MQAR program (examples/mqar.c), when it was built
if [ -x "$build/mqar" ]; then run_script test_mqar_program tests/test_mqar_program.sh "$build/mqar"; fi
# what the README promises (its C code, the Python reader, make install), when its programs were built
if [ -x "$build/readme_quickstart" ] && [ -x "$build/readme_memory" ] && [ -x "$build/titans" ]; then
  run_script test_readme tests/test_readme.sh "$build"
fi
# data-parallel training over MPI, when make built the MPI program (tests/test_mpi.sh; skips without mpirun)
if [ -x "$build/titans-mpi" ]; then run_script test_mpi tests/test_mpi.sh "$build"; fi
[ -n "$crashed" ] && echo "crashed or exited non-zero without a failed check:$crashed"
echo "total: $total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
