# titans.h build: `make` builds the examples, `make check` builds and runs every test,
# `make check-all` also runs the variants CI runs, `make bench` runs the benchmarks.
CC      ?= cc
CXX     ?= c++
OPT     ?= -O3 -march=native
OMP     ?= -fopenmp
EXTRA   ?=
BUILD   ?= build/default
CFLAGS  := -std=c11 -Wall -Wextra -pedantic -I. $(OPT) $(OMP) $(EXTRA)
LDLIBS  := -lm

HEADER   := titans.h
TESTS    := $(patsubst tests/%.c,$(BUILD)/%,$(wildcard tests/test_*.c))
BENCHES  := $(patsubst bench/%.c,$(BUILD)/%,$(wildcard bench/bench_*.c))
EXAMPLES := $(patsubst examples/%.c,%,$(wildcard examples/*.c))

.PHONY: all check check-o2 check-noomp check-nosimd check-asan check-all bench fuzz clean

all: $(EXAMPLES)

%: examples/%.c $(wildcard examples/*.h) $(HEADER)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)

# the example program, built per variant for the smoke test (tests/test_examples.sh)
$(BUILD)/titans: examples/titans.c $(wildcard examples/*.h) $(HEADER)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)

$(BUILD)/test_%: tests/test_%.c tests/harness.h $(HEADER)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)

# the long-context test also reads the example's task generator and text
$(BUILD)/test_longctx: examples/longctx.h examples/default_text.h

$(BUILD)/bench_%: bench/bench_%.c $(HEADER)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS) $(BENCH_LIBS)

check: $(TESTS) $(BUILD)/titans
	@sh tests/compile_test.sh
	@sh tests/run.sh $(BUILD)

# The variants: -O2, no OpenMP, scalar kernels, and AddressSanitizer + UBSan.
check-o2:
	$(MAKE) check BUILD=build/o2 OPT="-O2 -march=native"
check-noomp:
	$(MAKE) check BUILD=build/noomp OMP=
check-nosimd:
	$(MAKE) check BUILD=build/nosimd EXTRA=-DTITANS_NO_SIMD
check-asan:
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	$(MAKE) check BUILD=build/asan OMP= OPT="-O1 -g -march=native -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
check-all: check check-o2 check-noomp check-nosimd check-asan

# libFuzzer on the safetensors loader (needs clang and Debian's libclang-rt-14-dev); FUZZ_SECONDS long
FUZZ_SECONDS ?= 60
fuzz:
	@mkdir -p build/fuzz/corpus
	clang -std=c11 -g -O1 -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	  -o build/fuzz/fuzz_safetensors tests/fuzz_safetensors.c -lm
	build/fuzz/fuzz_safetensors -max_total_time=$(FUZZ_SECONDS) -max_len=4096 build/fuzz/corpus

bench: $(BENCHES)
	@for b in $(BENCHES); do echo "== $$b"; $$b || exit 1; done

clean:
	rm -rf build $(EXAMPLES)
