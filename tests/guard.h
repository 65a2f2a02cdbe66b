/* Guard pages for the tests: an operand placed against a page that cannot be read, so that a kernel
   reading one float past its end (or before its start) faults, even a read whose value it then throws
   away, which no padding of NaN can reveal; and a call run under a fault handler, so that such a read
   is reported as a failed check instead of ending the test. POSIX only (mmap, sigsetjmp): the file
   that includes this defines _DEFAULT_SOURCE before its first #include, and uses it only where
   TG_HAVE_GUARD_PAGES is defined. The handler jumps back on the calling thread: run the call on one
   thread. */
#ifndef TITANS_TEST_GUARD_H
#define TITANS_TEST_GUARD_H
#if defined(__unix__) || defined(__APPLE__)
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#define TG_HAVE_GUARD_PAGES 1

typedef struct tg_block {
  char *base;   /* the mapping: the floats' pages and the guard page */
  size_t bytes; /* of the mapping */
  float *p;     /* [n] */
} tg_block;

/* n floats (at least one) against a guard page: their last float just before it (after == 0) or their
   first float just after it (after == 1). Their values are set to 0.25. Returns p, NULL on failure. */
static float *tg_alloc(tg_block *g, size_t n, int after) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = (n ? n : 1) * sizeof(float);
  size_t span = (bytes + page - 1) / page * page;
  g->bytes = span + page;
  g->base = mmap(NULL, g->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (g->base == MAP_FAILED) return g->p = NULL;
  if (mprotect(after ? g->base : g->base + span, page, PROT_NONE) != 0) {
    munmap(g->base, g->bytes);
    return g->p = NULL;
  }
  g->p = (float *)(after ? g->base + page : g->base + span - bytes);
  for (size_t i = 0; i < (n ? n : 1); i++) g->p[i] = 0.25f;
  return g->p;
}

static void tg_free(tg_block *g) {
  if (g->p) munmap(g->base, g->bytes);
  g->p = NULL;
}

static sigjmp_buf tg_jump;
static void tg_on_fault(int sig) { siglongjmp(tg_jump, sig); }

/* Runs fn(arg) with SIGSEGV and SIGBUS caught: returns the signal that stopped it, 0 if none. */
static int tg_run(void (*fn)(void *), void *arg) {
  struct sigaction act, old_segv, old_bus;
  memset(&act, 0, sizeof(act));
  act.sa_handler = tg_on_fault;
  sigemptyset(&act.sa_mask);
  sigaction(SIGSEGV, &act, &old_segv);
  sigaction(SIGBUS, &act, &old_bus);
  int sig = sigsetjmp(tg_jump, 1);
  if (sig == 0) fn(arg);
  sigaction(SIGSEGV, &old_segv, NULL);
  sigaction(SIGBUS, &old_bus, NULL);
  return sig;
}
#endif
#endif
