/* Model benchmark (issue 4): training and inference tokens/s of every block kind at the reference
   configuration, beside the attention baseline and beside a PyTorch implementation of the same models
   (bench/torch_model.py, run from here when /usr/bin/python3 can import torch).

   Reference configuration: d = 256, 4 layers, 4 attention heads, vocab 256, T = 1024, B = 4, and the
   documented defaults of titans_config_default for the rest (d_ff = 1024, window 64, segment 64,
   4 persistent tokens for MAC/MAG/MAL, memory H = 4, d_h = 64, L_M = 2, e = 4, b = 16, K_c = 4; LM2:
   16 slots). bench/torch_model.py has no LM2: its rows have no PyTorch figure.

   Training: titans_train_step (forward, backward, clipping, AdamW) on B x T tokens. Warm-up steps
   first: two at the first thread count (the first step faults in gigabytes of activation buffers, and
   glibc reuses freed blocks only from the third step on, once its mmap threshold has adapted), one at
   the others. Then budget / warm-up-time timed steps, clamped to [min-steps, steps]; median and
   min..max.
   Inference: a session fed one token per call with logits after every token: a warm-up stream, then
   --infer-reps timed streams of --infer-tokens tokens from position 0.
   A kind whose training diverges (TITANS_ERR_NONFINITE, the memory's inner updates blowing up) is
   measured again with theta_max / 4, at most twice, and marked in the table: the cost of a step does
   not depend on theta_max.

       make bench                                  (every bench, this one with its defaults)
       ./build/default/bench_model --kinds mac,attn --threads 2 --no-torch
       ./build/default/bench_model --help */
#define _POSIX_C_SOURCE 200809L /* popen, pclose, clock_gettime, getrusage, sysconf */
#define TITANS_IMPLEMENTATION
#define TITANS_COUNT_FLOPS /* titans_gemm_madds: the matrix products' flops of a training step */
#include "titans.h"
#include "bench_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define BM_MAX_KINDS 7
#define BM_MAX_THREADS 8
#define BM_MAX_SAMPLES 64

static const int bm_all_kinds[BM_MAX_KINDS] = {TITANS_BLOCK_MAC, TITANS_BLOCK_MAG, TITANS_BLOCK_MAL, TITANS_BLOCK_LMM,
                                               TITANS_BLOCK_LM2, TITANS_BLOCK_ATTN, TITANS_BLOCK_SWA};

typedef struct bm_opts {
  int kinds[BM_MAX_KINDS];
  int nkinds;
  int threads[BM_MAX_THREADS];
  int nthreads;
  int max_steps, min_steps; /* timed training steps: budget / warm-up time, clamped */
  double budget;            /* seconds of timed training steps per (kind, threads) */
  double torch_budget;      /* the same for PyTorch */
  size_t B, T;
  int d, layers, heads, vocab;
  float theta_max;     /* 0: the library default */
  size_t infer_tokens; /* tokens of one inference stream */
  int infer_reps;      /* timed streams */
  int train, infer;    /* measure training, inference */
  int interleave;      /* timed training steps take the thread counts in turn (see bm_train_interleaved) */
  int torch;           /* run bench/torch_model.py */
  const char *python;  /* interpreter */
  const char *script;  /* NULL: found in ./bench or next to this program */
} bm_opts;

typedef struct bm_stat {
  double med, lo, hi; /* tokens/s: median, slowest, fastest sample */
  int n;              /* timed samples (0 = not measured) */
} bm_stat;

typedef struct bm_cell { /* one kind on one thread count */
  bm_stat train, infer, torch;
  bm_stat infer_cpu;    /* inference tokens/s by the process's CPU time (the roofline's: see bm_roofline) */
  double infer_mflop;   /* titans_gemm MFLOP per generated token, counted over the timed streams */
  int warm_steps;       /* training warm-up steps */
  double warm_mb;       /* memory first touched by them (minor page faults x page size) */
  double step_faults;   /* minor page faults per timed step (0 in a steady state) */
  double other_cores;   /* CPU cores busy with other processes during the timed training steps */
  double torch_other;   /* the same during PyTorch's timed steps */
  double torch_loss;    /* PyTorch's first loss */
  int torch_threads, blas_threads; /* PyTorch's fastest split of the threads */
  size_t torch_params;
} bm_cell;

typedef struct bm_kind { /* what does not depend on the thread count */
  size_t params;
  double loss;          /* loss of the first step: near ln(vocab) at initialisation */
  float theta_max;      /* memory inner learning-rate bound used */
  float theta_default;
  double gemm_mflop;    /* MFLOP per training token in titans_gemm (forward, backward), from a warm-up step */
  double tok_mb;        /* MB a generated token must read: weights, memory state, KV rows (bm_token_bytes) */
  double attn_mflop;    /* the attention's own MFLOP per generated token (not in titans_gemm), averaged */
  double bw_gbs;        /* GB/s of one thread reading a buffer of tok_mb, measured in this run */
  int failed;
} bm_kind;

static double bm_peak1; /* GFLOP/s of the FMA-chain loop on one thread by the wall clock, at the start */
static double bm_peak1_cpu; /* the same by the thread's CPU time (the roofline's: see bm_roofline) */

static long bm_faults(void) {
  struct rusage r;
  return getrusage(RUSAGE_SELF, &r) == 0 ? r.ru_minflt : 0;
}

/* Busy seconds of all CPUs (from /proc/stat) minus this process's CPU seconds: what other processes
   took. Sampled around the timed steps so that a reader can see when the machine was shared. */
typedef struct bm_cpu {
  double t, busy, self;
} bm_cpu;

static bm_cpu bm_cpu_sample(void) {
  bm_cpu c = {now_sec(), 0, 0};
  struct rusage r;
  if (getrusage(RUSAGE_SELF, &r) == 0)
    c.self = (double)r.ru_utime.tv_sec + 1e-6 * (double)r.ru_utime.tv_usec + (double)r.ru_stime.tv_sec +
             1e-6 * (double)r.ru_stime.tv_usec;
  FILE *f = fopen("/proc/stat", "r");
  unsigned long long v[8] = {0};
  if (f && fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                  &v[7]) == 8) {
    long hz = sysconf(_SC_CLK_TCK);
    /* user nice system idle iowait irq softirq steal: all but idle and iowait are busy */
    c.busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)(hz > 0 ? hz : 100);
  } else {
    c.busy = NAN;
  }
  if (f) fclose(f);
  return c;
}

static double bm_other_cores(bm_cpu a, bm_cpu b) {
  double dt = b.t - a.t, other = (b.busy - a.busy) - (b.self - a.self);
  return dt > 0 && !isnan(other) ? (other > 0 ? other / dt : 0.0) : NAN;
}

/* tokens/s statistics of n samples of seconds per run of `tokens` tokens. */
static bm_stat bm_stats(double *secs, int n, double tokens) {
  bm_stat s = {0, 0, 0, n};
  if (n <= 0) return s;
  double med = median(secs, (size_t)n); /* sorts secs */
  s.med = tokens / med;
  s.lo = tokens / secs[n - 1];
  s.hi = tokens / secs[0];
  return s;
}

static void bm_load_average(char *out, size_t size) {
  FILE *f = fopen("/proc/loadavg", "r");
  double a = 0, b = 0, c = 0;
  if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
    snprintf(out, size, "%.2f %.2f %.2f", a, b, c);
  else
    snprintf(out, size, "unknown");
  if (f) fclose(f);
}

static const char *bm_name(int kind) {
  const char *n = titans_block_name(kind);
  return n ? n : "?";
}

/* bench/torch_model.py implements every kind but LM2. */
static int bm_torch_has(int kind) { return kind != TITANS_BLOCK_LM2; }

static titans_config bm_config(const bm_opts *o, int kind) {
  titans_config c = titans_config_default(kind, o->vocab, o->d, o->layers);
  c.attn_heads = o->heads;
  if (o->theta_max > 0) c.mem.theta_max = o->theta_max;
  return c;
}

/* ---- the C library ------------------------------------------------------------------------------ */

/* Warm-up training steps on the current thread count (first: the trainer's first steps, two of them);
   *warm: the last one's seconds. */
static int bm_warm(bm_cell *cell, bm_kind *kind, titans_trainer *tr, const int *tokens, const bm_opts *o, int first,
                   double *warm) {
  double page = (double)sysconf(_SC_PAGESIZE);
  float loss = 0.0f;
  for (int w = 0; w < (first ? 2 : 1); w++) {
    long f0 = bm_faults();
    unsigned long long madds = titans_gemm_madds();
    double t0 = now_sec();
    int rc = titans_train_step(tr, tokens, 1, o->B, o->T, &loss);
    *warm = now_sec() - t0;
    if (rc) return rc;
    if (first && w == 0) {
      kind->loss = loss;
      kind->gemm_mflop = 2.0 * (double)(titans_gemm_madds() - madds) / (double)(o->B * o->T) / 1e6;
    }
    cell->warm_steps++;
    cell->warm_mb += (double)(bm_faults() - f0) * (page > 0 ? page : 4096) / 1e6;
  }
  return TITANS_OK;
}

/* Timed steps for a warm-up step of warm seconds: budget / warm, clamped to [min_steps, max_steps] */
static int bm_timed_steps(const bm_opts *o, double warm) {
  int steps = (int)(o->budget / (warm > 1e-9 ? warm : 1e-9));
  if (steps > o->max_steps) steps = o->max_steps;
  if (steps < o->min_steps) steps = o->min_steps;
  return steps;
}

/* Warm-up and timed training steps on the current thread count. first: the trainer's first steps. */
static int bm_train(bm_cell *cell, bm_kind *kind, titans_trainer *tr, const int *tokens, const bm_opts *o,
                    int first) {
  double secs[BM_MAX_SAMPLES], warm = 0;
  float loss = 0.0f;
  int rc = bm_warm(cell, kind, tr, tokens, o, first, &warm);
  if (rc) return rc;
  int steps = bm_timed_steps(o, warm);
  long f0 = bm_faults();
  bm_cpu c0 = bm_cpu_sample();
  for (int i = 0; i < steps; i++) {
    double t0 = now_sec();
    rc = titans_train_step(tr, tokens, 1, o->B, o->T, &loss);
    secs[i] = now_sec() - t0;
    if (rc) return rc;
  }
  cell->other_cores = bm_other_cores(c0, bm_cpu_sample());
  cell->step_faults = (double)(bm_faults() - f0) / steps;
  cell->train = bm_stats(secs, steps, (double)(o->B * o->T));
  return TITANS_OK;
}

/* --interleave: every thread count's warm-up, then the timed steps in turns (1 thread, 2 threads, 1, 2,
   ...), as many per thread count as the first one's warm-up step sets. On a machine whose speed drifts
   over tens of seconds (a shared host), the thread counts then see the same drift, and their ratio
   does not depend on which one ran first. */
static int bm_train_interleaved(bm_cell *cells, bm_kind *kind, titans_trainer *tr, const int *tokens,
                                const bm_opts *o) {
  static double secs[BM_MAX_THREADS][BM_MAX_SAMPLES];
  bm_cpu spent[BM_MAX_THREADS]; /* summed over the timed steps: wall time, busy CPU time, this process's */
  long faults[BM_MAX_THREADS];
  double warm = 0, first_warm = 0;
  float loss = 0.0f;
  for (int ti = 0; ti < o->nthreads; ti++) {
    set_threads(o->threads[ti]);
    int rc = bm_warm(&cells[ti], kind, tr, tokens, o, ti == 0, &warm);
    if (rc) return rc;
    if (ti == 0) first_warm = warm;
    memset(&spent[ti], 0, sizeof spent[ti]);
    faults[ti] = 0;
  }
  int steps = bm_timed_steps(o, first_warm);
  for (int i = 0; i < steps; i++)
    for (int ti = 0; ti < o->nthreads; ti++) {
      set_threads(o->threads[ti]);
      long f0 = bm_faults();
      bm_cpu c0 = bm_cpu_sample();
      double t0 = now_sec();
      int rc = titans_train_step(tr, tokens, 1, o->B, o->T, &loss);
      secs[ti][i] = now_sec() - t0;
      if (rc) return rc;
      bm_cpu c1 = bm_cpu_sample();
      spent[ti].t += c1.t - c0.t;
      spent[ti].busy += c1.busy - c0.busy;
      spent[ti].self += c1.self - c0.self;
      faults[ti] += bm_faults() - f0;
    }
  bm_cpu zero = {0, 0, 0};
  for (int ti = 0; ti < o->nthreads; ti++) {
    cells[ti].other_cores = bm_other_cores(zero, spent[ti]);
    cells[ti].step_faults = (double)faults[ti] / steps;
    cells[ti].train = bm_stats(secs[ti], steps, (double)(o->B * o->T));
  }
  return TITANS_OK;
}

/* CPU seconds of the whole process (every thread). */
static double bm_cpu_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One stream of n tokens, one per call, logits [V] after each. Returns wall seconds (and CPU seconds in
   *cpu), < 0 on error. */
static double bm_stream(titans_session *s, const int *tokens, size_t n, float *logits, double *cpu) {
  if (titans_session_reset(s)) return -1.0;
  double t0 = now_sec(), c0 = bm_cpu_sec();
  for (size_t i = 0; i < n; i++)
    if (titans_session_feed(s, &tokens[i], 1, logits)) return -1.0;
  *cpu = bm_cpu_sec() - c0;
  return now_sec() - t0;
}

/* ---- the roofline of a generated token (issue 38) --------------------------------------------------
   What one token must read: token_traffic_of (bench_common.h), the weights and the stream's own state.
   Its flops: the matrix products counted by titans_gemm over the timed streams, plus the attention's 4 d
   per visible row. The bound is the larger of bytes / (the read bandwidth of a buffer that size,
   measured here) and flops / (the FMA peak). */

/* Fills kind->tok_mb and kind->attn_mflop for a stream of n tokens from position 0 (averages). */
static void bm_token_bytes(bm_kind *kind, const titans_model *m, size_t n) {
  token_traffic tt = token_traffic_of(m, n);
  kind->tok_mb = (tt.shared_floats + tt.stream_floats) * sizeof(float) / 1e6;
  kind->attn_mflop = tt.attn_mflop;
}

static int bm_infer(bm_cell *cell, const titans_model *m, const int *tokens, float *logits, const bm_opts *o) {
  double secs[BM_MAX_SAMPLES], cpus[BM_MAX_SAMPLES];
  titans_session s;
  int rc = titans_session_init(&s, m);
  if (rc) {
    fprintf(stderr, "bench_model: session init failed: %s\n", s.error);
    return rc;
  }
  unsigned long long madds = 0;
  for (int i = -1; i < o->infer_reps && rc == TITANS_OK; i++) { /* i = -1: warm-up stream */
    unsigned long long m0 = titans_gemm_madds();
    double cpu = 0.0, t = bm_stream(&s, tokens, o->infer_tokens, logits, &cpu);
    if (t < 0) {
      fprintf(stderr, "bench_model: session feed failed: %s\n", s.error);
      rc = TITANS_ERR_STATE;
    } else if (i >= 0) {
      secs[i] = t;
      cpus[i] = cpu;
      madds += titans_gemm_madds() - m0;
    }
  }
  if (rc == TITANS_OK) {
    cell->infer = bm_stats(secs, o->infer_reps, (double)o->infer_tokens);
    cell->infer_cpu = bm_stats(cpus, o->infer_reps, (double)o->infer_tokens);
    cell->infer_mflop = 2.0 * (double)madds / ((double)o->infer_reps * (double)o->infer_tokens) / 1e6;
  }
  titans_session_free(&s);
  return rc;
}

static void bm_print_cell(const bm_cell *c, int kind, int threads) {
  printf("  %-4s %d thr:", bm_name(kind), threads);
  if (c->train.n)
    printf(" train %7.1f tok/s [%.1f..%.1f] (%d warm-up + %d steps, %.0f MB first touched, %.0f faults/step, "
           "other processes %.2f cores)",
           c->train.med, c->train.lo, c->train.hi, c->warm_steps, c->train.n, c->warm_mb, c->step_faults,
           c->other_cores);
  if (c->infer.n)
    printf(" infer %7.1f tok/s [%.1f..%.1f] (by CPU time %.1f)", c->infer.med, c->infer.lo, c->infer.hi,
           c->infer_cpu.med);
  printf("\n");
  fflush(stdout);
}

/* Every thread count of one kind on one model. Returns TITANS_ERR_NONFINITE when a step diverged
   (the caller measures again with a smaller theta_max). */
static int bm_measure(bm_cell *cells, bm_kind *kind, int k, const titans_config *c, const int *tokens,
                      const bm_opts *o) {
  titans_model m;
  titans_trainer tr;
  int rc = titans_model_init(&m, c);
  if (rc) {
    fprintf(stderr, "bench_model: %s: %s\n", bm_name(k), m.error);
    return rc;
  }
  titans_model_init_weights(&m, 1234);
  kind->params = m.n_floats;
  if (o->infer) {
    bm_token_bytes(kind, &m, o->infer_tokens);
    kind->bw_gbs = read_bandwidth((size_t)(kind->tok_mb * 1e6));
  }
  rc = titans_trainer_init(&tr, &m, NULL);
  if (rc) {
    fprintf(stderr, "bench_model: %s: %s\n", bm_name(k), tr.error);
    titans_model_free(&m);
    return rc;
  }
  float *logits = titans_alloc_floats((size_t)c->vocab); /* [V] */
  if (!logits) rc = TITANS_ERR_NOMEM;
  if (rc == TITANS_OK && o->train && o->interleave) {
    rc = bm_train_interleaved(cells, kind, &tr, tokens, o);
    if (rc) fprintf(stderr, "bench_model: %s: train step failed: %s\n", bm_name(k), tr.error);
  }
  for (int ti = 0; ti < o->nthreads && rc == TITANS_OK; ti++) {
    set_threads(o->threads[ti]);
    if (o->train && !o->interleave) {
      rc = bm_train(&cells[ti], kind, &tr, tokens, o, ti == 0);
      if (rc) fprintf(stderr, "bench_model: %s: train step failed: %s\n", bm_name(k), tr.error);
    }
    if (rc == TITANS_OK && o->infer) rc = bm_infer(&cells[ti], &m, tokens, logits, o);
    if (rc == TITANS_OK) bm_print_cell(&cells[ti], k, o->threads[ti]);
  }
  titans_free(logits);
  titans_trainer_free(&tr);
  titans_model_free(&m);
  return rc;
}

static int bm_run_kind(bm_cell *cells, bm_kind *kind, int k, const int *tokens, const bm_opts *o) {
  titans_config c = bm_config(o, k);
  kind->theta_default = kind->theta_max = c.mem.theta_max;
  for (int attempt = 0;; attempt++) {
    memset(cells, 0, (size_t)o->nthreads * sizeof *cells);
    int rc = bm_measure(cells, kind, k, &c, tokens, o);
    if (rc != TITANS_ERR_NONFINITE || !has_neural_memory(k) || attempt == 2) {
      if (rc) {
        kind->failed = 1;
        fprintf(stderr, "bench_model: %s: failed (%s)\n", bm_name(k), titans_status_string(rc));
      }
      return rc;
    }
    printf("WARNING: %s: a training step is not finite with theta_max = %g (the memory diverges); "
           "measuring again with theta_max = %g\n", bm_name(k), (double)c.mem.theta_max, (double)c.mem.theta_max / 4);
    c.mem.theta_max /= 4;
    kind->theta_max = c.mem.theta_max;
  }
}

/* ---- PyTorch ------------------------------------------------------------------------------------ */

static int bm_file_exists(const char *path) {
  FILE *f = fopen(path, "r");
  if (f) fclose(f);
  return f != NULL;
}

/* bench/torch_model.py from the working directory (make bench runs from the repository root), else
   ../../bench/torch_model.py next to this program (build/default/bench_model). */
static int bm_find_script(char *out, size_t size, const char *argv0, const char *given) {
  if (given) {
    snprintf(out, size, "%s", given);
    return bm_file_exists(out);
  }
  snprintf(out, size, "bench/torch_model.py");
  if (bm_file_exists(out)) return 1;
  const char *slash = strrchr(argv0, '/');
  if (!slash) return 0;
  snprintf(out, size, "%.*s/../../bench/torch_model.py", (int)(slash - argv0), argv0);
  return bm_file_exists(out);
}

/* The shell sees every path in single quotes; a path holding one is refused. */
static int bm_shell_safe(const char *s) { return strchr(s, '\'') == NULL; }

static int bm_torch_available(const char *python) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", python);
  FILE *p = popen(cmd, "r");
  if (!p) return 0;
  return pclose(p) == 0;
}

/* value of " key=" in a line of torch_model.py's output, or NAN. */
static double bm_field(const char *line, const char *key) {
  char pat[40];
  snprintf(pat, sizeof pat, " %s=", key);
  const char *at = strstr(line, pat);
  return at ? strtod(at + strlen(pat), NULL) : NAN;
}

static void bm_parse_torch_line(bm_cell cells[][BM_MAX_THREADS], const char *line, const bm_opts *o) {
  const char *k = strstr(line, " kind=");
  if (strncmp(line, "torch_train ", 12) != 0 || !k) return;
  char name[16];
  size_t n = strcspn(k + 6, " \n");
  if (n >= sizeof name) return;
  memcpy(name, k + 6, n);
  name[n] = 0;
  int kind = titans_block_from_name(name), thr = (int)bm_field(line, "threads");
  double tok = (double)(o->B * o->T);
  for (int ki = 0; ki < o->nkinds; ki++) {
    for (int ti = 0; ti < o->nthreads; ti++) {
      if (o->kinds[ki] != kind || o->threads[ti] != thr) continue;
      bm_cell *c = &cells[ki][ti];
      c->torch.med = tok / bm_field(line, "median_s");
      c->torch.lo = tok / bm_field(line, "max_s");
      c->torch.hi = tok / bm_field(line, "min_s");
      c->torch.n = (int)bm_field(line, "steps");
      c->torch_loss = bm_field(line, "loss");
      c->torch_params = (size_t)bm_field(line, "params");
      c->torch_other = bm_field(line, "other_cores");
      c->torch_threads = (int)bm_field(line, "torch_threads");
      c->blas_threads = (int)bm_field(line, "blas_threads");
    }
  }
}

/* "a,b,c" of kind names or numbers */
static void bm_join(char *out, size_t size, const int *v, int n, int kinds) {
  size_t used = 0;
  out[0] = 0;
  for (int i = 0; i < n && used < size; i++) {
    int w = kinds ? snprintf(out + used, size - used, "%s%s", i ? "," : "", bm_name(v[i]))
                  : snprintf(out + used, size - used, "%s%d", i ? "," : "", v[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
}

/* --theta-max kind=value,... for the kinds whose theta_max was lowered */
static void bm_theta_arg(char *out, size_t size, const bm_kind *kinds, const bm_opts *o) {
  size_t used = 0;
  out[0] = 0;
  for (int ki = 0; ki < o->nkinds && used < size; ki++) {
    if (!has_neural_memory(o->kinds[ki])) continue;
    int w = snprintf(out + used, size - used, "%s%s=%g", used ? "," : " --theta-max ", bm_name(o->kinds[ki]),
                     (double)kinds[ki].theta_max);
    if (w < 0) break;
    used += (size_t)w;
  }
}

static void bm_run_torch(bm_cell cells[][BM_MAX_THREADS], const bm_kind *kinds, const bm_opts *o,
                         const char *argv0) {
  char script[1024], klist[128], tlist[64], theta[256], cmd[2400];
  if (!bm_find_script(script, sizeof script, argv0, o->script)) {
    printf(
        "PyTorch comparison skipped: bench/torch_model.py not found (run from the repository root or pass --script)\n");
    return;
  }
  if (!bm_shell_safe(script) || !bm_shell_safe(o->python)) {
    printf("PyTorch comparison skipped: a path holds a single quote\n");
    return;
  }
  if (!bm_torch_available(o->python)) {
    printf(
        "PyTorch comparison skipped: %s cannot import torch. Install it with `sudo sh scripts/bench_setup.sh`\n"
        "(Debian: python3-torch with OpenBLAS as the system BLAS), or point --python at an interpreter that has it.\n",
        o->python);
    return;
  }
  int tk[BM_MAX_KINDS], ntk = 0;
  for (int ki = 0; ki < o->nkinds; ki++)
    if (bm_torch_has(o->kinds[ki])) tk[ntk++] = o->kinds[ki];
    else printf("PyTorch: torch_model.py has no %s model; its rows have no PyTorch figure\n", bm_name(o->kinds[ki]));
  if (ntk == 0) return;
  bm_join(klist, sizeof klist, tk, ntk, 1);
  bm_join(tlist, sizeof tlist, o->threads, o->nthreads, 0);
  bm_theta_arg(theta, sizeof theta, kinds, o);
  snprintf(cmd, sizeof cmd,
           "'%s' '%s' --kinds %s --threads %s --B %zu --T %zu --d %d --layers %d --heads %d --vocab %d --steps %d "
           "--min-steps %d --budget %g%s 2>&1",
           o->python, script, klist, tlist, o->B, o->T, o->d, o->layers, o->heads, o->vocab, o->max_steps,
           o->min_steps, o->torch_budget, theta);
  printf("PyTorch: %s\n", cmd);
  fflush(stdout);
  FILE *p = popen(cmd, "r");
  if (!p) {
    printf("PyTorch comparison skipped: popen failed\n");
    return;
  }
  char line[1024];
  while (fgets(line, sizeof line, p)) {
    printf("  %s", line);
    fflush(stdout);
    bm_parse_torch_line(cells, line, o);
  }
  int st = pclose(p);
  if (st != 0) printf("PyTorch: torch_model.py exited with status %d\n", st);
}

/* ---- report ------------------------------------------------------------------------------------- */

static double bm_ratio(double a, double b) { return a > 0 && b > 0 ? a / b : NAN; }

static void bm_print_ratio(double r) {
  if (isnan(r))
    printf(" - |");
  else
    printf(" %.2fx |", r);
}

static void bm_print_stat(bm_stat s) {
  if (s.n > 0)
    printf(" %.0f [%.0f..%.0f] |", s.med, s.lo, s.hi);
  else
    printf(" - |");
}

/* Issue 38's goal 2 for a memory kind's one-token speed: at least GOAL_VS_ATTN times ATTN's and
   GOAL_OF_BOUND of its own bound. "out of reach here" when even the bound's speed is under GOAL_VS_ATTN
   times ATTN's measured speed on this machine (most = bound / ATTN's tok/s); "-" for ATTN and SWA. */
#define GOAL_VS_ATTN 0.6
#define GOAL_OF_BOUND 0.5
static const char *bm_goal2(titans_block_kind kind, double vs_attn, double of_bound, double most) {
  if (kind == TITANS_BLOCK_ATTN || kind == TITANS_BLOCK_SWA || isnan(vs_attn)) return "-";
  if (vs_attn >= GOAL_VS_ATTN && of_bound >= GOAL_OF_BOUND) return "met";
  if (most < GOAL_VS_ATTN) return "out of reach here";
  return "not met";
}

/* The roofline of a generated token on one thread (see bm_token_bytes): tokens/s by the process's CPU
   time, so that other processes taking the core do not count against it (the bandwidth and the peak are
   measured the same way), and the fraction of the bound's speed reached. */
static void bm_roofline(bm_cell cells[][BM_MAX_THREADS], const bm_kind *kinds, const bm_opts *o) {
  int attn = -1, header = 0;
  for (int ki = 0; ki < o->nkinds; ki++)
    if (o->kinds[ki] == TITANS_BLOCK_ATTN) attn = ki;
  for (int ti = 0; ti < o->nthreads; ti++) {
    if (o->threads[ti] != 1) continue;
    for (int ki = 0; ki < o->nkinds; ki++) {
      const bm_cell *c = &cells[ki][ti];
      const bm_kind *kd = &kinds[ki];
      if (c->infer_cpu.n == 0 || kd->bw_gbs <= 0 || bm_peak1_cpu <= 0) continue;
      if (!header) {
        printf("\nroofline of a generated token, 1 thread (bytes: weights used, memory W and S, KV rows seen; "
               "flops: titans_gemm + attention; tok/s by CPU time):\n"
               "| kind | MB/token | read GB/s (buffer that size) | MFLOP/token | bound tok/s | tok/s | %% of bound "
               "| vs attn | bound vs attn | goal (>= %.1fx attn, >= %.0f%% of bound) |\n"
               "|---|---|---|---|---|---|---|---|---|---|\n", GOAL_VS_ATTN, 100.0 * GOAL_OF_BOUND);
        header = 1;
      }
      double mflop = c->infer_mflop + kd->attn_mflop;
      double t_mem = kd->tok_mb * 1e-3 / kd->bw_gbs, t_fma = mflop * 1e-3 / bm_peak1_cpu; /* seconds per token */
      double bound = 1.0 / (t_mem > t_fma ? t_mem : t_fma);
      const bm_cell *a = attn >= 0 ? &cells[attn][ti] : NULL;
      printf("| %s | %.2f | %.1f | %.2f | %.0f (%s) | %.1f | %.1f%% |", bm_name(o->kinds[ki]), kd->tok_mb, kd->bw_gbs,
             mflop, bound, t_mem > t_fma ? "bytes" : "flops", c->infer_cpu.med, 100.0 * c->infer_cpu.med / bound);
      double vs_attn = a && a->infer_cpu.n ? bm_ratio(c->infer_cpu.med, a->infer_cpu.med) : NAN;
      double most = a && a->infer_cpu.n ? bm_ratio(bound, a->infer_cpu.med) : NAN; /* at 100% of its bound */
      bm_print_ratio(vs_attn);
      bm_print_ratio(most);
      const char *goal = bm_goal2(o->kinds[ki], vs_attn, c->infer_cpu.med / bound, most);
      printf(" %s |\n", goal);
      printf("bench_model_roofline kind=%s tok_mb=%.3f read_gbs=%.2f mflop=%.3f gemm_mflop=%.3f attn_mflop=%.3f "
             "bound_tok_s=%.1f infer_cpu_tok_s=%.1f infer_wall_tok_s=%.1f fraction=%.4f bound_vs_attn=%.3f goal=%s\n",
             bm_name(o->kinds[ki]), kd->tok_mb, kd->bw_gbs, mflop, c->infer_mflop, kd->attn_mflop, bound,
             c->infer_cpu.med, c->infer.med, c->infer_cpu.med / bound, most, goal[0] == '-' ? "none" : goal);
    }
  }
}

static void bm_report(bm_cell cells[][BM_MAX_THREADS], const bm_kind *kinds, const bm_opts *o) {
  int attn = -1, marked = 0;
  for (int ki = 0; ki < o->nkinds; ki++)
    if (o->kinds[ki] == TITANS_BLOCK_ATTN) attn = ki;
  printf("\n| kind | threads | params | train tok/s [min..max] | vs attn | infer tok/s [min..max] | vs attn "
         "| PyTorch train tok/s [min..max] (torch+BLAS threads) | titans.h / PyTorch | other load (cores) |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (int ki = 0; ki < o->nkinds; ki++) {
    int lowered = kinds[ki].theta_max != kinds[ki].theta_default;
    marked |= lowered;
    for (int ti = 0; ti < o->nthreads; ti++) {
      const bm_cell *c = &cells[ki][ti];
      const bm_cell *a = attn >= 0 ? &cells[attn][ti] : NULL;
      printf("| %s%s | %d | %zu |", bm_name(o->kinds[ki]), lowered ? "*" : "", o->threads[ti], kinds[ki].params);
      bm_print_stat(c->train);
      bm_print_ratio(a ? bm_ratio(c->train.med, a->train.med) : NAN);
      bm_print_stat(c->infer);
      bm_print_ratio(a ? bm_ratio(c->infer.med, a->infer.med) : NAN);
      if (c->torch.n > 0)
        printf(" %.0f [%.0f..%.0f] (%d+%d) |", c->torch.med, c->torch.lo, c->torch.hi, c->torch_threads,
               c->blas_threads);
      else
        printf(" - |");
      bm_print_ratio(bm_ratio(c->train.med, c->torch.med));
      if (c->torch.n > 0)
        printf(" %.2f / %.2f |\n", c->other_cores, c->torch_other);
      else
        printf(" %.2f |\n", c->other_cores);
    }
  }
  if (marked) {
    printf("\n* theta_max lowered because a training step diverged (non-finite loss):");
    for (int ki = 0; ki < o->nkinds; ki++)
      if (kinds[ki].theta_max != kinds[ki].theta_default)
        printf(" %s %g -> %g;", bm_name(o->kinds[ki]), (double)kinds[ki].theta_default, (double)kinds[ki].theta_max);
    printf(" PyTorch ran with the same value.\n");
  }
  /* thread scaling: the training tokens/s of each thread count over the first one's, beside the load
     (other processes' busy cores during those steps and the 1-minute load average now); the goal on 2
     cores is 2 threads >= 1.7x 1 thread, which only a machine without other load can show */
  if (o->nthreads > 1) {
    double la = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
      if (fscanf(f, "%lf", &la) != 1) la = -1.0;
      fclose(f);
    }
    printf("\nthread scaling (train tokens/s over %d thread%s; goal 2 threads >= 1.7x); load average %.2f\n",
           o->threads[0], o->threads[0] > 1 ? "s" : "", la);
    for (int ki = 0; ki < o->nkinds; ki++)
      for (int ti = 1; ti < o->nthreads; ti++) {
        const bm_cell *c0 = &cells[ki][0], *c = &cells[ki][ti];
        printf("  %-4s %d/%d threads: %.2fx (other processes %.2f cores at %d thread%s, %.2f at %d)\n",
               bm_name(o->kinds[ki]), o->threads[ti], o->threads[0], bm_ratio(c->train.med, c0->train.med),
               c0->other_cores, o->threads[0], o->threads[0] > 1 ? "s" : "", c->other_cores, o->threads[ti]);
      }
  }
  /* the matrix products' share of the FMA peak: a training token's flops in titans_gemm (a lower bound of
     its flops: attention's own kernels and the elementwise work are not counted) at the measured speeds;
     PyTorch's models have the same products, so the same flops at its speed say how far 3x its speed is
     from what the machine can do */
  printf("\nmatrix products (titans_gemm) per training token, at the speeds above; %% of the FMA peak "
         "(%.1f GFLOP/s on 1 thread at the start, times the threads):\n", bm_peak1);
  for (int ki = 0; ki < o->nkinds; ki++)
    for (int ti = 0; ti < o->nthreads; ti++) {
      const bm_cell *c = &cells[ki][ti];
      double mf = kinds[ki].gemm_mflop, peak = bm_peak1 * o->threads[ti];
      if (c->train.n == 0 || mf <= 0 || peak <= 0) continue;
      double ours = mf * c->train.med / 1e3, theirs = mf * c->torch.med / 1e3;
      printf("  %-4s %d thr: %.1f MFLOP/token: titans.h %.1f GFLOP/s (%.0f%%)", bm_name(o->kinds[ki]), o->threads[ti],
             mf, ours, 100.0 * ours / peak);
      if (c->torch.n > 0)
        printf(", PyTorch %.1f (%.0f%%); 3x PyTorch needs %.0f%% of the peak", theirs, 100.0 * theirs / peak,
               300.0 * theirs / peak);
      printf("\n");
    }
  bm_roofline(cells, kinds, o);
  /* step-0 losses: both models start near ln(vocab) from their own random weights */
  for (int ki = 0; ki < o->nkinds; ki++) {
    const bm_cell *c = &cells[ki][0];
    if (c->torch.n > 0)
      printf("step-0 loss %-4s titans.h %.4f, PyTorch %.4f (ln vocab %.4f); parameters %zu and %zu%s\n",
             bm_name(o->kinds[ki]), kinds[ki].loss, c->torch_loss, log((double)o->vocab), kinds[ki].params,
             c->torch_params, c->torch_params == kinds[ki].params ? " (equal)" : " (DIFFER)");
  }
  printf("\n");
  for (int ki = 0; ki < o->nkinds; ki++) {
    for (int ti = 0; ti < o->nthreads; ti++) {
      const bm_cell *c = &cells[ki][ti];
      printf("bench_model kind=%s threads=%d params=%zu theta_max=%g failed=%d loss=%.4f train_tok_s=%.1f "
             "train_min=%.1f train_max=%.1f train_steps=%d warmup_steps=%d warmup_mb=%.0f step_faults=%.0f "
             "other_cores=%.2f "
             "infer_tok_s=%.1f infer_min=%.1f infer_max=%.1f torch_tok_s=%.1f torch_min=%.1f torch_max=%.1f "
             "torch_steps=%d torch_threads=%d blas_threads=%d torch_params=%zu torch_loss=%.4f torch_other_cores=%.2f "
             "titans_over_torch=%.3f gemm_mflop_token=%.2f peak1_gflops=%.1f\n",
             bm_name(o->kinds[ki]), o->threads[ti], kinds[ki].params, (double)kinds[ki].theta_max, kinds[ki].failed,
             kinds[ki].loss, c->train.med, c->train.lo, c->train.hi, c->train.n, c->warm_steps, c->warm_mb,
             c->step_faults, c->other_cores, c->infer.med, c->infer.lo, c->infer.hi, c->torch.med, c->torch.lo,
             c->torch.hi, c->torch.n, c->torch_threads, c->blas_threads, c->torch_params, c->torch_loss, c->torch_other,
             bm_ratio(c->train.med, c->torch.med), kinds[ki].gemm_mflop, bm_peak1);
      if (c->torch.n > 0 && c->torch_params != kinds[ki].params)
        printf("WARNING: %s: the PyTorch model has %zu parameters, titans.h %zu\n", bm_name(o->kinds[ki]),
               c->torch_params, kinds[ki].params);
    }
  }
}

/* ---- options ------------------------------------------------------------------------------------- */

static void bm_usage(void) {
  printf("usage: bench_model [options]\n"
         "  --kinds LIST        comma-separated of mac,mag,mal,lmm,lm2,attn,swa (default all)\n"
         "  --threads LIST      comma-separated thread counts (default 1,2)\n"
         "  --steps N           most timed training steps (default 5)\n"
         "  --min-steps N       fewest timed training steps (default 2)\n"
         "  --budget S          seconds of timed training per kind and thread count: steps = S / warm-up\n"
         "                      step time, clamped to [min-steps, steps] (default 4)\n"
         "  --torch-budget S    the same for PyTorch (default 4)\n"
         "  --B N --T N         batch and sequence length (default 4, 1024)\n"
         "  --d N --layers N --heads N --vocab N   model (default 256, 4, 4, 256)\n"
         "  --theta-max X       memory inner learning-rate bound (default: the library's)\n"
         "  --infer-tokens N    tokens of one inference stream (default 256)\n"
         "  --infer-reps N      timed inference streams (default 3)\n"
         "  --interleave        timed training steps take the thread counts in turns (1, 2, 1, 2, ...)\n"
         "                      after every count's warm-up; steps per count from the first count's warm-up\n"
         "  --no-train, --no-infer, --no-torch   skip a part\n"
         "  --python PATH       interpreter for bench/torch_model.py (default /usr/bin/python3)\n"
         "  --script PATH       path of torch_model.py\n");
}

static int bm_parse_list(int *out, int max, const char *s, int kinds) {
  int n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (n >= max) return -1;
    int v = kinds ? titans_block_from_name(tok) : atoi(tok);
    if (kinds ? v < 0 : (v < 1 || v > 1024)) return -1;
    out[n++] = v;
  }
  return n > 0 ? n : -1;
}

static void bm_defaults(bm_opts *o) {
  memset(o, 0, sizeof *o);
  memcpy(o->kinds, bm_all_kinds, sizeof bm_all_kinds);
  o->nkinds = BM_MAX_KINDS;
  o->threads[0] = 1;
  o->threads[1] = 2;
  o->nthreads = 2;
  o->max_steps = 5;
  o->min_steps = 2;
  o->budget = 4.0;
  o->torch_budget = 4.0;
  o->B = 4;
  o->T = 1024;
  o->d = 256;
  o->layers = 4;
  o->heads = 4;
  o->vocab = 256;
  o->infer_tokens = 256;
  o->infer_reps = 3;
  o->train = o->infer = o->torch = 1;
  o->python = "/usr/bin/python3";
}

static int bm_parse(bm_opts *o, int argc, char **argv) {
  bm_defaults(o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--no-torch")) { o->torch = 0; continue; }
    if (!strcmp(a, "--no-train")) { o->train = 0; continue; }
    if (!strcmp(a, "--no-infer")) { o->infer = 0; continue; }
    if (!strcmp(a, "--interleave")) { o->interleave = 1; continue; }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { bm_usage(); exit(0); }
    if (!v) { fprintf(stderr, "bench_model: %s needs a value\n", a); return -1; }
    i++;
    if (!strcmp(a, "--kinds")) { if ((o->nkinds = bm_parse_list(o->kinds, BM_MAX_KINDS, v, 1)) < 0) return -1;
    } else if (!strcmp(a, "--threads")) {
      if ((o->nthreads = bm_parse_list(o->threads, BM_MAX_THREADS, v, 0)) < 0) return -1;
    } else if (!strcmp(a, "--steps"))
      o->max_steps = atoi(v);
    else if (!strcmp(a, "--min-steps")) o->min_steps = atoi(v);
    else if (!strcmp(a, "--budget")) o->budget = atof(v);
    else if (!strcmp(a, "--torch-budget")) o->torch_budget = atof(v);
    else if (!strcmp(a, "--B")) o->B = (size_t)atol(v);
    else if (!strcmp(a, "--T")) o->T = (size_t)atol(v);
    else if (!strcmp(a, "--d")) o->d = atoi(v);
    else if (!strcmp(a, "--layers")) o->layers = atoi(v);
    else if (!strcmp(a, "--heads")) o->heads = atoi(v);
    else if (!strcmp(a, "--vocab")) o->vocab = atoi(v);
    else if (!strcmp(a, "--theta-max")) o->theta_max = (float)atof(v);
    else if (!strcmp(a, "--infer-tokens")) o->infer_tokens = (size_t)atol(v);
    else if (!strcmp(a, "--infer-reps")) o->infer_reps = atoi(v);
    else if (!strcmp(a, "--python")) o->python = v;
    else if (!strcmp(a, "--script")) o->script = v;
    else { fprintf(stderr, "bench_model: unknown option %s\n", a); return -1; }
  }
  if (o->max_steps < 1 || o->max_steps > BM_MAX_SAMPLES) o->max_steps = 5;
  if (o->min_steps < 1) o->min_steps = 1;
  if (o->min_steps > o->max_steps) o->min_steps = o->max_steps;
  if (o->infer_reps < 1) o->infer_reps = 1;
  if (o->infer_reps > BM_MAX_SAMPLES) o->infer_reps = BM_MAX_SAMPLES;
  if (o->B < 1 || o->T < 1 || o->infer_tokens < 1 || o->theta_max < 0) return -1;
  return 0;
}

static void bm_header(const bm_opts *o) {
  titans_config c = bm_config(o, TITANS_BLOCK_MAC);
  char load[64];
  int max_threads = 1;
#ifdef _OPENMP
  max_threads = omp_get_max_threads();
#else
  printf("note: built without OpenMP: every run uses 1 thread\n");
#endif
  bm_load_average(load, sizeof load);
  printf("titans.h %s model benchmark: d=%d layers=%d attn_heads=%d vocab=%d T=%zu B=%zu d_ff=%d window=%d "
         "segment=%d n_persist=%d (mac/mag/mal) mem: H=%d d_h=%d L_M=%d e=%d b=%d K_c=%d theta_max=%g\n",
         TITANS_VERSION, o->d, o->layers, o->heads, o->vocab, o->T, o->B, c.ffn_hidden, c.window, c.segment,
         c.n_persist, c.mem.heads, c.mem.head_dim, c.mem.depth, c.mem.hidden_mult, c.mem.chunk, c.mem.conv_width,
         (double)c.mem.theta_max);
  printf("training: warm-up (2 steps, 1 at later thread counts), then "
         "clamp(%g s / step time, %d, %d) timed steps%s; inference: %zu tokens one per call with logits, warm-up + "
         "%d streams\n",
         o->budget, o->min_steps, o->max_steps, o->interleave ? " per thread count, taken in turns" : "",
         o->infer_tokens, o->infer_reps);
  printf("OpenMP threads available: %d; load average at start: %s\n", max_threads, load);
  bm_peak1 = fma_peak_wall(1);
  printf("FMA peak of 1 thread by the wall clock: %.1f GFLOP/s\n", bm_peak1);
  if (o->infer) {
    bm_peak1_cpu = fma_peak(1);
    printf("FMA peak of 1 thread by its CPU time: %.1f GFLOP/s\n", bm_peak1_cpu);
  }
#ifdef _OPENMP
  if (max_threads > 1) {
    const char *policy = getenv("OMP_WAIT_POLICY");
    printf("an empty parallel region of %d threads after 50 us of serial work: %.1f us (OMP_WAIT_POLICY=%s)\n",
           max_threads, omp_region_cost_us(max_threads), policy ? policy : "unset");
    /* a shared host can give the threads less than a core each with no load showing inside this machine */
    printf("FMA peak by the wall clock, %d threads over 1: %.2fx (the most a thread count can gain now; %d on "
           "an idle machine)\n",
           max_threads, fma_peak_wall(max_threads) / bm_peak1, max_threads);
  }
#endif
  fflush(stdout);
}

int main(int argc, char **argv) {
  bm_opts o;
  if (bm_parse(&o, argc, argv)) {
    bm_usage();
    return 2;
  }
  char err[TITANS_ERR_MSG_SIZE], load[64];
  for (int ki = 0; ki < o.nkinds; ki++) {
    titans_config c = bm_config(&o, o.kinds[ki]);
    if (titans_config_check(&c, err)) {
      fprintf(stderr, "bench_model: %s\n", err);
      return 2;
    }
  }
  bm_header(&o);

  static bm_cell cells[BM_MAX_KINDS][BM_MAX_THREADS];
  bm_kind kinds[BM_MAX_KINDS];
  memset(kinds, 0, sizeof kinds);
  size_t n_tok = o.B * (o.T + 1) > o.infer_tokens ? o.B * (o.T + 1) : o.infer_tokens;
  int *tokens = (int *)malloc(n_tok * sizeof(int)); /* [B, T + 1] training batch; its start is the stream */
  if (!tokens) return 1;
  titans_rng rng;
  titans_rng_seed(&rng, 42);
  for (size_t i = 0; i < n_tok; i++) tokens[i] = (int)(titans_rng_u64(&rng) % (uint64_t)o.vocab);

  double t_start = now_sec();
  int failed = 0;
  for (int ki = 0; ki < o.nkinds; ki++)
    if (bm_run_kind(cells[ki], &kinds[ki], o.kinds[ki], tokens, &o)) failed = 1;
  double t_c = now_sec() - t_start;
  if (o.torch && o.train) bm_run_torch(cells, kinds, &o, argv[0]);
  bm_load_average(load, sizeof load);
  bm_report(cells, kinds, &o);
  printf("time: titans.h %.0f s, PyTorch %.0f s; load average at end: %s\n", t_c, now_sec() - t_start - t_c, load);
  free(tokens);
  return failed;
}
