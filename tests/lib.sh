# lib.sh: what the shell tests share. Sourced after the test has cd'd into its scratch folder.
# check DESCRIPTION CONDITION...: runs the condition, prints "ok" or "FAIL", counts it in pass / fail.
# run COMMAND...: the command's exit status on stdout, its output kept in out.txt / err.txt.
pass=0; fail=0
check() { # description, then a shell condition
  what=$1; shift
  if "$@"; then echo "  ok   $what"; pass=$((pass + 1)); else echo "  FAIL $what"; fail=$((fail + 1)); fi
}
run() { "$@" >out.txt 2>err.txt; echo $?; }
