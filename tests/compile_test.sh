#!/bin/sh
# The header must compile without a warning as C11 and as C++ (-Wall -Wextra -pedantic), with and
# without SIMD, with and without the implementation. Prints one line per configuration and the totals.
CC=${CC:-cc}; CXX=${CXX:-c++}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf '#define TITANS_IMPLEMENTATION\n#include "titans.h"\nint main(void) { return titans_threads() > 0 ? 0 : 1; }\n' > "$tmp/impl.c"
printf '#include "titans.h"\nint f(void) { return TITANS_OK; }\n' > "$tmp/decl.c"
printf '#define TITANS_STATIC\n#define TITANS_IMPLEMENTATION\n#include "titans.h"\nint main(void) { return titans_threads() > 0 ? 0 : 1; }\n' > "$tmp/static.c"
cp "$tmp/impl.c" "$tmp/impl.cpp"
pass=0; fail=0; n=0
# Each configuration compiles in the background (they are independent); report() prints them in order.
try() { # label, command...
  n=$((n + 1)); echo "$1" > "$tmp/label.$n"; shift
  ( "$@" > "$tmp/out.$n" 2>&1; echo $? > "$tmp/rc.$n" ) &
}
report() {
  wait
  i=1
  while [ $i -le $n ]; do
    label=$(cat "$tmp/label.$i"); rc=$(cat "$tmp/rc.$i")
    if [ "$rc" = 0 ] && [ ! -s "$tmp/out.$i" ]; then echo "  ok   $label"; pass=$((pass + 1))
    else echo "  FAIL $label"; head -n 20 "$tmp/out.$i"; fail=$((fail + 1)); fi
    i=$((i + 1))
  done
}
W="-Wall -Wextra -pedantic -Werror=vla -I."
try "C11 implementation" $CC -std=c11 $W -march=native -fopenmp -c "$tmp/impl.c" -o "$tmp/a.o"
try "C11 implementation, no SIMD, no OpenMP" $CC -std=c11 $W -DTITANS_NO_SIMD -c "$tmp/impl.c" -o "$tmp/b.o"
try "C11 implementation, generic x86-64 (no -march)" $CC -std=c11 $W -c "$tmp/impl.c" -o "$tmp/c.o"
try "C11 declarations only" $CC -std=c11 $W -c "$tmp/decl.c" -o "$tmp/d.o"
try "C11 TITANS_STATIC" $CC -std=c11 $W -march=native -c "$tmp/static.c" -o "$tmp/e.o"
try "C11 TITANS_NO_FSYNC, TITANS_NO_STDIO" $CC -std=c11 $W -DTITANS_NO_FSYNC -DTITANS_NO_STDIO -c "$tmp/impl.c" -o "$tmp/e2.o"
try "C++17 implementation" $CXX -std=c++17 $W -march=native -fopenmp -c "$tmp/impl.cpp" -o "$tmp/f.o"
try "C++17 implementation at -O2 (inlining warnings)" $CXX -std=c++17 $W -O2 -march=native -fopenmp -c "$tmp/impl.cpp" -o "$tmp/f2.o"
try "C11 implementation at -O2 (inlining warnings)" $CC -std=c11 $W -O2 -march=native -fopenmp -c "$tmp/impl.c" -o "$tmp/a2.o"
try "C++11 implementation, no SIMD" $CXX -std=c++11 $W -DTITANS_NO_SIMD -c "$tmp/impl.cpp" -o "$tmp/g.o"
if command -v clang >/dev/null 2>&1; then
  try "clang C11 implementation" clang -std=c11 $W -march=native -c "$tmp/impl.c" -o "$tmp/h.o"
fi
report
echo "compile_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
