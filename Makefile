# titans.h build: `make` builds the examples, `make check` builds and runs every test,
# `make check-all` also runs the variants CI runs, `make bench` runs the benchmarks,
# `make install PREFIX=/usr/local` installs titans.h, the titans program and titans.pc (`make uninstall`).
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
# the README's programs, run by make check (tests/test_readme.sh)
README_PROGRAMS := $(BUILD)/readme_quickstart $(BUILD)/readme_memory
PREFIX  ?= /usr/local
VERSION := $(shell sed -n 's/^\#define TITANS_VERSION "\(.*\)"/\1/p' $(HEADER))

.PHONY: all install uninstall mpi check-mpi check check-o2 check-noomp check-nosimd check-asan check-clang-asan check-neon check-avx2 check-all bench fuzz fuzz-check clean

all: $(EXAMPLES)

%: examples/%.c $(wildcard examples/*.h) $(HEADER)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)

# the example program and the README's programs, built per variant for the smoke tests
# (tests/test_examples.sh, tests/test_mqar_program.sh, tests/test_readme.sh)
$(BUILD)/titans $(BUILD)/mqar $(README_PROGRAMS): $(BUILD)/%: examples/%.c $(wildcard examples/*.h) $(HEADER)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)

$(BUILD)/test_%: tests/test_%.c tests/harness.h tests/model_fixtures.h tests/reference_kernels.h $(HEADER)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)

# the long-context test also reads the example's task generator and text
$(BUILD)/test_longctx: examples/longctx.h examples/default_text.h
# the MQAR test reads the example's task generator
$(BUILD)/test_mqar: examples/mqar.h

$(BUILD)/bench_%: bench/bench_%.c bench/bench_common.h tests/reference_kernels.h $(HEADER)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS) $(BENCH_LIBS)

# Data-parallel training over MPI (docs/mpi.md): `make mpi` builds ./titans-mpi, examples/titans.c built
# with mpicc -DTITANS_MPI (sh scripts/mpi_setup.sh installs OpenMPI). The plain check (build/default) also
# builds it when mpicc is there, and tests/run.sh then runs tests/test_mpi.sh (which skips itself, saying
# so, without mpirun); the variants leave it out. `make check-mpi` runs those tests alone.
MPICC ?= mpicc
MPI_PROGRAMS := $(if $(and $(filter build/default,$(BUILD)),$(shell command -v $(MPICC) 2>/dev/null)),$(BUILD)/titans-mpi $(BUILD)/weights_diff)
mpi: titans-mpi
titans-mpi: examples/titans.c $(wildcard examples/*.h) $(HEADER)
	$(MPICC) $(CFLAGS) -DTITANS_MPI -o $@ $< $(LDLIBS)
$(BUILD)/titans-mpi: examples/titans.c $(wildcard examples/*.h) $(HEADER)
	@mkdir -p $(BUILD)
	$(MPICC) $(CFLAGS) -DTITANS_MPI -o $@ $< $(LDLIBS)
$(BUILD)/weights_diff: tests/weights_diff.c $(HEADER)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)
check-mpi: $(BUILD)/titans $(BUILD)/titans-mpi $(BUILD)/weights_diff
	@sh tests/test_mpi.sh $(BUILD)

# COMPILE_TEST=0 skips tests/compile_test.sh, which depends only on the compilers (the gcc variants
# below leave it to the plain check; check-clang-asan runs it, so clang is covered too).
COMPILE_TEST ?= 1
check: $(TESTS) $(BUILD)/titans $(BUILD)/mqar $(README_PROGRAMS) $(MPI_PROGRAMS)
	@if [ "$(COMPILE_TEST)" != 0 ]; then sh tests/compile_test.sh; fi
	@sh tests/run.sh $(BUILD)

# The variants: -O2, no OpenMP, scalar kernels, and AddressSanitizer + UBSan.
check-o2:
	$(MAKE) COMPILE_TEST=0 check BUILD=build/o2 OPT="-O2 -march=native"
check-noomp:
	$(MAKE) COMPILE_TEST=0 check BUILD=build/noomp OMP=
check-nosimd:
	$(MAKE) COMPILE_TEST=0 check BUILD=build/nosimd EXTRA=-DTITANS_NO_SIMD
check-asan:
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	$(MAKE) COMPILE_TEST=0 check BUILD=build/asan OMP= OPT="-O1 -g -march=native -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
# clang's AddressSanitizer + UndefinedBehaviorSanitizer: its UBSan reports pointer overflow that gcc's
# does not (the t = 0 row pointer of issue 15). No OpenMP (Debian's clang has no libomp by default).
# -fsanitize=integer is not used: it reports well-defined unsigned wrap-around that the code means
# (splitmix64 and the FNV hashes, the `for (size_t i = n; i-- > 0;)` loops), not bugs.
check-clang-asan:
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	$(MAKE) check CC=clang CXX=clang++ BUILD=build/clang-asan OMP= \
	  OPT="-O1 -g -march=native -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
# The NEON kernels: the attention, GEMM and elementwise tests cross-built for AArch64 and run under
# qemu-user (scripts/neon_setup.sh installs both from Debian); only these three, as emulation is slow
# and Debian's aarch64 gcc 12 crashes (an internal compiler error) on test_memory.c. Skips itself,
# saying so, when the tools are missing.
NEON_CC    ?= aarch64-linux-gnu-gcc
NEON_TESTS := $(addprefix build/neon/test_,attn gemm ops)
check-neon:
	@if ! command -v $(NEON_CC) >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; then \
	  echo "check-neon: skipped ($(NEON_CC) or qemu-aarch64 missing; sh scripts/neon_setup.sh installs them)"; \
	else \
	  $(MAKE) CC=$(NEON_CC) BUILD=build/neon OPT=-O2 $(NEON_TESTS) && \
	  TITANS_TEST_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu" sh tests/run.sh build/neon; \
	fi
# The AVX2 kernels on a machine with AVX-512 (which -march=native would choose): the kernels' tests and
# the model's, built for x86-64-v3 (AVX2 + FMA). The model's test catches a shape-dependent method whose
# sums run in another order on AVX2 only (the recompute FFN pieces of session 35). Skips itself, saying
# so, on a CPU without AVX2 and FMA.
AVX2_TESTS := $(addprefix build/avx2/test_,attn gemm ops memory model)
check-avx2:
	@if ! grep -q ' avx2' /proc/cpuinfo 2>/dev/null || ! grep -q ' fma' /proc/cpuinfo 2>/dev/null; then \
	  echo "check-avx2: skipped (this CPU has no AVX2 and FMA)"; \
	else \
	  $(MAKE) BUILD=build/avx2 OPT="-O3 -march=x86-64-v3" $(AVX2_TESTS) && sh tests/run.sh build/avx2; \
	fi
check-all: check check-o2 check-noomp check-nosimd check-asan check-clang-asan check-neon check-avx2

# libFuzzer on the loaders (needs clang and Debian's libclang-rt-14-dev), each target FUZZ_SECONDS
# long: the safetensors parser and the model, trainer and session-state loaders (tests/fuzz_*.c).
# `make fuzz-check` says whether clang's libFuzzer links here.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := safetensors model trainer session
FUZZ_FLAGS := -std=c11 -g -O1 -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/corpus_$$t && \
	  echo "== fuzz_$$t ($(FUZZ_SECONDS) s)" && \
	  clang $(FUZZ_FLAGS) -o build/fuzz/fuzz_$$t tests/fuzz_$$t.c -lm || exit 1; \
	  for f in tests/fuzz_regressions/$${t}_*; do [ -f "$$f" ] || continue; \
	    build/fuzz/fuzz_$$t "$$f" > /dev/null 2>&1 || { echo "fuzz_$$t: regression $$f FAILED"; exit 1; }; done; \
	  { build/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 \
	      -artifact_prefix=build/fuzz/ build/fuzz/corpus_$$t > build/fuzz/fuzz_$$t.log 2>&1; rc=$$?; } ; \
	  grep -E "^(stat::number_of_executed_runs|stat::peak_rss_mb|Done)" build/fuzz/fuzz_$$t.log ; \
	  [ $$rc = 0 ] || { tail -n 40 build/fuzz/fuzz_$$t.log; echo "fuzz_$$t: FAILED (rc=$$rc)"; exit 1; } ; \
	done
fuzz-check:
	@mkdir -p build/fuzz
	@printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
	  > build/fuzz/probe.c
	@clang -fsanitize=fuzzer -o build/fuzz/probe build/fuzz/probe.c 2>/dev/null

bench: $(BENCHES)
	@for b in $(BENCHES); do echo "== $$b"; $$b || exit 1; done

# the header, the program (of $(BUILD)) and a pkg-config file: cc $$(pkg-config --cflags --libs titans)
install: $(BUILD)/titans
	mkdir -p $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig
	cp $(HEADER) $(DESTDIR)$(PREFIX)/include/titans.h
	cp $(BUILD)/titans $(DESTDIR)$(PREFIX)/bin/titans
	printf 'prefix=%s\nincludedir=$${prefix}/include\n\nName: titans\nDescription: %s\nVersion: %s\nCflags: -I$${includedir}\nLibs: -lm\n' \
	  '$(PREFIX)' 'Titans sequence models in one C11 header (define TITANS_IMPLEMENTATION in one file)' '$(VERSION)' \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/titans.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/include/titans.h $(DESTDIR)$(PREFIX)/bin/titans $(DESTDIR)$(PREFIX)/lib/pkgconfig/titans.pc

clean:
	rm -rf build $(EXAMPLES) titans-mpi
