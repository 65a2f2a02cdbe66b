/* bench_batch: many streams at once (issue 38, goal 3). For every block kind at bench_model's reference
   model (d = 256, 4 layers, 4 heads, vocab 256, titans_config_default for the rest), the total tokens/s of
   a titans_session_batch of 1, 4 and 16 streams fed one token per stream per call (logits of every
   stream after every call), against one titans_session fed one token per call (logits after every
   token), measured in the same run. Goal: 16 streams >= 8x the one session's tok/s.
   Each figure is the median over --reps repetitions of --tokens tokens per stream from position 0, timed
   by the calling thread's CPU time (the machine may be shared; with --threads 1 that is all the work),
   with the wall-clock median beside it. A warm-up repetition comes first.
   Usage: bench_batch [--tokens N] [--reps N] [--threads N] [--d N] [--layers N] [--kinds a,b,...] */
#define _POSIX_C_SOURCE 200809L
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "bench_common.h"

#include <string.h>

enum { MAX_REPS = 51, NCOUNTS = 3 };
static const size_t stream_counts[NCOUNTS] = {1, 4, 16};

typedef struct bb_opts {
  size_t tokens; /* tokens per stream of one repetition */
  int reps, threads, d, layers;
  char kinds[200]; /* comma-separated names; empty: every kind */
} bb_opts;

/* tokens/s (by CPU time, by wall time) of n streams: a batch, or (n = 0) one titans_session. */
static int bb_run(const titans_model *m, size_t n, const int *toks, const bb_opts *o, double *cpu_tps,
                  double *wall_tps) {
  size_t V = (size_t)m->cfg.vocab, rows = n ? n : 1;
  float *logits = titans_alloc_floats(rows * V); /* [rows, V] */
  int *step = (int *)titans_alloc_bytes(rows, sizeof(int)); /* [rows] one call's tokens */
  double cpu[MAX_REPS], wall[MAX_REPS];
  titans_session s;
  titans_session_batch b;
  int rc = n ? titans_session_batch_init(&b, m, n) : titans_session_init(&s, m);
  if (!logits || !step) rc = TITANS_ERR_NOMEM;
  for (int r = -1; r < o->reps && !rc; r++) { /* r = -1: warm-up */
    for (size_t i = 0; i < rows && !rc; i++) rc = n ? titans_session_batch_reset(&b, i) : titans_session_reset(&s);
    double c0 = thread_sec(), w0 = now_sec();
    for (size_t t = 0; t < o->tokens && !rc; t++) {
      for (size_t i = 0; i < rows; i++) step[i] = toks[(t * 16 + i) % (o->tokens * 16)];
      rc = n ? titans_session_batch_feed(&b, step, logits) : titans_session_feed(&s, step, 1, logits);
    }
    if (r >= 0) {
      cpu[r] = (double)(rows * o->tokens) / (thread_sec() - c0);
      wall[r] = (double)(rows * o->tokens) / (now_sec() - w0);
    }
  }
  if (rc) fprintf(stderr, "bench_batch: %s\n", n ? b.error : s.error);
  *cpu_tps = rc ? 0.0 : median(cpu, (size_t)o->reps);
  *wall_tps = rc ? 0.0 : median(wall, (size_t)o->reps);
  if (n) titans_session_batch_free(&b);
  else titans_session_free(&s);
  titans_free(logits);
  titans_free(step);
  return rc;
}

static int bb_kind(int kind, const bb_opts *o, int *met) {
  titans_config c = titans_config_default(kind, 256, o->d, o->layers);
  c.attn_heads = 4;
  titans_model m;
  int rc = titans_model_init(&m, &c);
  if (rc) {
    fprintf(stderr, "bench_batch: %s: %s\n", titans_block_name(kind), m.error);
    return rc;
  }
  titans_model_init_weights(&m, 1234);
  int *toks = (int *)titans_alloc_bytes(o->tokens * 16, sizeof(int)); /* [tokens, 16] */
  if (!toks) return TITANS_ERR_NOMEM;
  titans_rng rng;
  titans_rng_seed(&rng, 7);
  for (size_t i = 0; i < o->tokens * 16; i++) toks[i] = (int)(titans_rng_u64(&rng) % 256);
  double one_cpu, one_wall, cpu[NCOUNTS], wall[NCOUNTS];
  rc = bb_run(&m, 0, toks, o, &one_cpu, &one_wall);
  for (int k = 0; k < NCOUNTS && !rc; k++) rc = bb_run(&m, stream_counts[k], toks, o, &cpu[k], &wall[k]);
  if (!rc) {
    *met = cpu[NCOUNTS - 1] >= 8.0 * one_cpu;
    printf("| %s | %.0f (%.0f) |", titans_block_name(kind), one_cpu, one_wall);
    for (int k = 0; k < NCOUNTS; k++) printf(" %.0f (%.0f) | %.2fx |", cpu[k], wall[k], cpu[k] / one_cpu);
    printf(" %s |\n", *met ? "met" : "not met");
    fflush(stdout);
  }
  titans_free(toks);
  titans_model_free(&m);
  return rc;
}

static void usage(void) {
  printf("usage: bench_batch [--tokens N] [--reps N] [--threads N] [--d N] [--layers N] [--kinds attn,swa,...]\n"
         "  --tokens N   tokens per stream of a repetition (default 48)\n"
         "  --reps N     timed repetitions, median reported (default 5, at most %d)\n"
         "  --threads N  OpenMP threads (default 1)\n"
         "  --d N --layers N   model (default 256, 4)\n",
         MAX_REPS);
}

int main(int argc, char **argv) {
  bb_opts o = {48, 5, 1, 256, 4, ""};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      usage();
      return 2;
    }
    if (!strcmp(a, "--tokens")) o.tokens = (size_t)atol(v);
    else if (!strcmp(a, "--reps")) o.reps = atoi(v);
    else if (!strcmp(a, "--threads")) o.threads = atoi(v);
    else if (!strcmp(a, "--d")) o.d = atoi(v);
    else if (!strcmp(a, "--layers")) o.layers = atoi(v);
    else if (!strcmp(a, "--kinds")) snprintf(o.kinds, sizeof o.kinds, "%s", v);
    else {
      usage();
      return 2;
    }
    i++;
  }
  if (o.tokens < 1 || o.reps < 1 || o.reps > MAX_REPS || o.threads < 1) {
    usage();
    return 2;
  }
  set_threads(o.threads);
  printf("titans.h %s session batches: d=%d layers=%d vocab=256 heads=4, %zu tokens per stream, median of %d "
         "repetitions, %d thread(s), load average %.2f\n", TITANS_VERSION, o.d, o.layers, o.tokens, o.reps, o.threads,
         load_average());
  printf("tok/s in total by CPU time (by wall time); ratio: against one titans_session; goal: 16 streams >= 8x\n\n");
  printf("| kind | session tok/s |");
  for (int k = 0; k < NCOUNTS; k++) printf(" %zu stream%s tok/s | ratio |", stream_counts[k], k ? "s" : "");
  printf(" goal |\n|---|---:|");
  for (int k = 0; k < NCOUNTS; k++) printf("---:|---:|");
  printf("---|\n");
  int met_all = 1, any = 0;
  for (int kind = 0; kind < TITANS_BLOCK_COUNT; kind++) {
    const char *name = titans_block_name(kind);
    if (o.kinds[0]) { /* a whole name of the list */
      const char *p = strstr(o.kinds, name);
      size_t len = strlen(name);
      if (!p || (p != o.kinds && p[-1] != ',') || (p[len] != ',' && p[len] != '\0')) continue;
    }
    int met = 0;
    if (bb_kind(kind, &o, &met)) return 1;
    met_all &= met;
    any = 1;
  }
  if (any) printf("\ngoal (16 streams >= 8x one session) met by every kind measured: %s\n", met_all ? "yes" : "no");
  return 0;
}
