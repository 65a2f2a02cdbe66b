/* bench_batch: many streams at once (issue 38, goal 3). For every block kind at bench_model's reference
   model (d = 256, 4 layers, 4 heads, vocab 256, titans_config_default for the rest), the total tokens/s of
   a titans_session_batch of 1, 4 and 16 streams fed one token per stream per call (logits of every
   stream after every call), against one titans_session fed one token per call (logits after every
   token), measured in the same run. Goal: 16 streams >= 8x the one session's tok/s.
   Each figure is the median over --reps repetitions of --tokens tokens per stream from position 0, timed
   by the calling thread's CPU time (the machine may be shared; with --threads 1 that is all the work),
   with the wall-clock median beside it. A warm-up repetition comes first.
   With one thread it also prints the bound of 16 streams on this machine (the roofline of bench_model's
   generated token, bench_common.h's token_traffic_of, for a call of 16 tokens): the weights read once,
   each stream's own memory state and KV rows, at the read bandwidth of a buffer of that many bytes; the
   flops of 16 tokens at the FMA peak, both measured in the same run. Its ratio to the one session is the
   most any implementation could gain here: a goal above it is out of this machine's reach.
   Usage: bench_batch [--tokens N] [--reps N] [--threads N] [--d N] [--layers N] [--kinds a,b,...] */
#define _POSIX_C_SOURCE 200809L
#define TITANS_IMPLEMENTATION
#define TITANS_COUNT_FLOPS /* titans_gemm_madds: the matrix products' flops of a generated token */
#include "titans.h"
#include "bench_common.h"

#include <string.h>

enum { MAX_REPS = 51, NCOUNTS = 3 };
#define GOAL_RATIO 8.0 /* issue 38: 16 streams' tok/s over one session's */
static const size_t stream_counts[NCOUNTS] = {1, 4, 16};

typedef struct bb_opts {
  size_t tokens; /* tokens per stream of one repetition */
  int reps, threads, d, layers;
  double peak_gflops; /* one thread's FMA peak by its CPU time, measured at the start (--threads 1 only) */
  char kinds[200]; /* comma-separated names; empty: every kind */
} bb_opts;

/* tokens/s (by CPU time, by wall time) of n streams: a batch, or (n = 0) one titans_session; gemm_mflop
   (unless NULL): titans_gemm's MFLOP a token. */
static int bb_run(const titans_model *m, size_t n, const int *toks, const bb_opts *o, double *cpu_tps,
                  double *wall_tps, double *gemm_mflop) {
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
    unsigned long long madds = titans_gemm_madds();
    double c0 = thread_sec(), w0 = now_sec();
    for (size_t t = 0; t < o->tokens && !rc; t++) {
      for (size_t i = 0; i < rows; i++) step[i] = toks[(t * 16 + i) % (o->tokens * 16)];
      rc = n ? titans_session_batch_feed(&b, step, logits) : titans_session_feed(&s, step, 1, logits);
    }
    if (r >= 0) {
      cpu[r] = (double)(rows * o->tokens) / (thread_sec() - c0);
      wall[r] = (double)(rows * o->tokens) / (now_sec() - w0);
      if (gemm_mflop) *gemm_mflop = 2.0 * (double)(titans_gemm_madds() - madds) / (double)(rows * o->tokens) / 1e6;
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

/* The roofline of a call of n streams, one token each, on one thread (see the header comment). */
typedef struct bb_bound {
  double shared_mb, stream_mb; /* a token's weights; one stream's own state and KV rows */
  double read_gbs;             /* one thread reading a buffer of shared_mb + n stream_mb, measured now */
  double mflop;                /* a token's: titans_gemm's (counted over the one session) + the attention's */
  double tok_s;                /* the bound: n tokens over the slower of the bytes and the flops; 0: none */
  int by_bytes;
} bb_bound;

static bb_bound bb_bound_of(const titans_model *m, const bb_opts *o, double gemm_mflop, size_t n) {
  bb_bound b = {0};
  token_traffic tt = token_traffic_of(m, o->tokens);
  b.shared_mb = tt.shared_floats * sizeof(float) / 1e6;
  b.stream_mb = tt.stream_floats * sizeof(float) / 1e6;
  b.mflop = gemm_mflop + tt.attn_mflop;
  if (o->threads != 1 || o->peak_gflops <= 0) return b;
  double mb = b.shared_mb + (double)n * b.stream_mb;
  b.read_gbs = read_bandwidth((size_t)(mb * 1e6));
  if (b.read_gbs <= 0) return b;
  double t_bytes = mb * 1e-3 / b.read_gbs, t_flops = (double)n * b.mflop * 1e-3 / o->peak_gflops; /* seconds */
  b.by_bytes = t_bytes > t_flops;
  b.tok_s = (double)n / (b.by_bytes ? t_bytes : t_flops);
  return b;
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
  double one_cpu, one_wall, cpu[NCOUNTS], wall[NCOUNTS], gemm_mflop = 0.0;
  rc = bb_run(&m, 0, toks, o, &one_cpu, &one_wall, &gemm_mflop);
  for (int k = 0; k < NCOUNTS && !rc; k++) rc = bb_run(&m, stream_counts[k], toks, o, &cpu[k], &wall[k], NULL);
  if (!rc) {
    bb_bound bound = bb_bound_of(&m, o, gemm_mflop, stream_counts[NCOUNTS - 1]);
    double most = bound.tok_s / one_cpu; /* the most 16 streams can gain over this session here */
    *met = cpu[NCOUNTS - 1] >= GOAL_RATIO * one_cpu;
    printf("| %s | %.0f (%.0f) |", titans_block_name(kind), one_cpu, one_wall);
    for (int k = 0; k < NCOUNTS; k++) printf(" %.0f (%.0f) | %.2fx |", cpu[k], wall[k], cpu[k] / one_cpu);
    if (bound.tok_s > 0)
      printf(" %.0f (%s) | %.2fx | %.0f%% |", bound.tok_s, bound.by_bytes ? "bytes" : "flops", most,
             100.0 * cpu[NCOUNTS - 1] / bound.tok_s);
    else
      printf(" - | - | - |");
    printf(" %s |\n", *met ? "met" : bound.tok_s > 0 && most < GOAL_RATIO ? "out of reach here" : "not met");
    if (bound.tok_s > 0)
      printf("bench_batch_bound kind=%s streams=%zu shared_mb=%.3f stream_mb=%.3f read_gbs=%.2f mflop=%.3f "
             "peak_gflops=%.1f bound_tok_s=%.1f session_tok_s=%.1f streams_tok_s=%.1f most_ratio=%.3f\n",
             titans_block_name(kind), stream_counts[NCOUNTS - 1], bound.shared_mb, bound.stream_mb, bound.read_gbs,
             bound.mflop, o->peak_gflops, bound.tok_s, one_cpu, cpu[NCOUNTS - 1], most);
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
  bb_opts o = {48, 5, 1, 256, 4, 0.0, ""};
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
  if (o.threads == 1) o.peak_gflops = fma_peak(1);
  printf("titans.h %s session batches: d=%d layers=%d vocab=256 heads=4, %zu tokens per stream, median of %d "
         "repetitions, %d thread(s), load average %.2f\n", TITANS_VERSION, o.d, o.layers, o.tokens, o.reps, o.threads,
         load_average());
  printf("tok/s in total by CPU time (by wall time); ratio: against one titans_session; goal: 16 streams >= %.0fx\n",
         GOAL_RATIO);
  if (o.peak_gflops > 0)
    printf("16 streams' bound: weights once and each stream's state per call, at the read bandwidth of that many "
           "bytes, or 16 tokens' flops at the FMA peak (%.1f GFLOP/s, 1 thread, measured now); its ratio is the "
           "most any implementation could reach here\n", o.peak_gflops);
  printf("\n| kind | session tok/s |");
  for (int k = 0; k < NCOUNTS; k++) printf(" %zu stream%s tok/s | ratio |", stream_counts[k], k ? "s" : "");
  printf(" 16 streams' bound tok/s | bound / session | 16 streams %% of bound | goal |\n|---|---:|");
  for (int k = 0; k < NCOUNTS; k++) printf("---:|---:|");
  printf("---:|---:|---:|---|\n");
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
  if (any)
    printf("\ngoal (16 streams >= %.0fx one session) met by every kind measured: %s\n", GOAL_RATIO,
           met_all ? "yes" : "no");
  return 0;
}
