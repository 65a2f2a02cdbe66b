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

.PHONY: all install uninstall check check-o2 check-noomp check-nosimd check-asan check-all bench fuzz clean

all: $(EXAMPLES)

%: examples/%.c $(wildcard examples/*.h) $(HEADER)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)

# the example program and the README's programs, built per variant for the smoke tests
# (tests/test_examples.sh, tests/test_readme.sh)
$(BUILD)/titans $(README_PROGRAMS): $(BUILD)/%: examples/%.c $(wildcard examples/*.h) $(HEADER)
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

check: $(TESTS) $(BUILD)/titans $(README_PROGRAMS)
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
	rm -rf build $(EXAMPLES)
