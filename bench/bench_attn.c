/* bench_attn: the attention kernels (titans_attention_forward, titans_attention_backward,
   titans_kv_cache_attend) in GFLOP/s and as a fraction of the machine's FMA peak measured in the same
   run. Issue 13's goal: forward + backward >= 60% of the peak at T = 1024.
   Usage: bench_attn [--reps N] [--threads LIST]   (default 7 repetitions, threads 1 and 2)

   The problem of bench_model's reference configuration: d = 256 as H = 4 heads of d_a = 64, T = 1024,
   batch 4 (one call per batch row, as the model makes them), positions 0..T-1; full causal attention and
   a sliding window of 64 (SWA's default). Flops count only the useful products over the visible
   (query, key) pairs: 2 d_a per pair and product, 2 products in the forward (q.k, p v), 4 in the
   backward (dout.v, dq, dk, dv); the backward's recomputation of q.k is not counted. Each figure is the
   median over the repetitions of its fraction of the FMA peak measured just before that repetition.
   Last, the backward's inner step alone (titans__attn_bwd_qtile_keys: 64 query rows against 64 keys,
   every pair visible) on one tile, again and again, hot in cache: the ceiling of the backward's kernels,
   against which the whole backward shows what it loses around them; and the whole backward of one row
   with every pair visible (every query at position T, so none of the causal structure's partial tiles):
   what the backward loses in place apart from them. */
#define _POSIX_C_SOURCE 200809L
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "bench_common.h"

#include <string.h>

enum { T_LEN = 1024, HEADS = 4, D_HEAD = 64, BATCH = 4, MAX_REPS = 101 };

typedef struct attn_problem {
  size_t T, H, d_a, B;
  int64_t window;
  float *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv; /* [B, T, H * d_a]; lse [B, T, H] */
  int64_t *pos;                                       /* [T] 0..T-1 */
  double pairs;                                       /* visible (query, key) pairs of one row and head */
} attn_problem;

static float *random_floats(size_t n, uint64_t *seed) {
  float *x = titans_alloc_floats(n);
  if (!x) {
    fprintf(stderr, "bench_attn: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = (float)((double)(*seed >> 40) / (double)(1ULL << 24) * 2.0 - 1.0);
  }
  return x;
}

static void problem_init(attn_problem *p, int64_t window) {
  uint64_t seed = 7;
  p->T = T_LEN, p->H = HEADS, p->d_a = D_HEAD, p->B = BATCH, p->window = window;
  size_t n = p->B * p->T * p->H * p->d_a;
  p->q = random_floats(n, &seed), p->k = random_floats(n, &seed), p->v = random_floats(n, &seed);
  p->dout = random_floats(n, &seed);
  p->out = random_floats(n, &seed), p->dq = random_floats(n, &seed), p->dk = random_floats(n, &seed);
  p->dv = random_floats(n, &seed), p->lse = random_floats(p->B * p->T * p->H, &seed);
  p->pos = malloc(p->T * sizeof(int64_t));
  if (!p->pos) exit(1);
  p->pairs = 0;
  for (size_t t = 0; t < p->T; t++) {
    p->pos[t] = (int64_t)t;
    p->pairs += (double)(window > 0 && (int64_t)t + 1 > window ? window : (int64_t)t + 1);
  }
}

static void problem_free(attn_problem *p) {
  titans_free(p->q), titans_free(p->k), titans_free(p->v), titans_free(p->out), titans_free(p->lse);
  titans_free(p->dout), titans_free(p->dq), titans_free(p->dk), titans_free(p->dv);
  free(p->pos);
}

static void run_forward(attn_problem *p) {
  size_t ld = p->H * p->d_a;
  const titans_attn_shape sh = {p->pos, p->pos, p->T, 0, p->T, p->H, p->d_a, p->window};
  for (size_t b = 0; b < p->B; b++)
    if (titans_attention_forward(p->out + b * p->T * ld, p->lse + b * p->T * p->H, p->q + b * p->T * ld,
                                 p->k + b * p->T * ld, p->v + b * p->T * ld, &sh) != TITANS_OK) {
      fprintf(stderr, "bench_attn: forward failed\n");
      exit(1);
    }
}

static void run_backward(attn_problem *p) {
  size_t ld = p->H * p->d_a, n = p->B * p->T * ld;
  memset(p->dq, 0, n * sizeof(float)), memset(p->dk, 0, n * sizeof(float)), memset(p->dv, 0, n * sizeof(float));
  for (size_t b = 0; b < p->B; b++) {
    size_t o = b * p->T * ld;
    const titans_attn_grads g = {p->dq + o, p->dk + o, p->dv + o, p->dout + o};
    const titans_attn_saved fw = {p->q + o, p->k + o, p->v + o, p->out + o, p->lse + b * p->T * p->H};
    const titans_attn_shape sh = {p->pos, p->pos, p->T, 0, p->T, p->H, p->d_a, p->window};
    if (titans_attention_backward(&g, &fw, &sh) != TITANS_OK) {
      fprintf(stderr, "bench_attn: backward failed\n");
      exit(1);
    }
  }
}

/* The KV cache path: every token of row 0 appended, then attended, one at a time (inference). */
static void run_cache(attn_problem *p, titans_kv_cache *cache) {
  size_t ld = p->H * p->d_a;
  titans_kv_cache_reset(cache);
  for (size_t t = 0; t < p->T; t++)
    if (titans_kv_cache_append(cache, p->k + t * ld, p->v + t * ld, p->pos + t, 1) != TITANS_OK ||
        titans_kv_cache_attend(cache, p->out + t * ld, NULL, p->q + t * ld, p->pos[t]) != TITANS_OK) {
      fprintf(stderr, "bench_attn: cache failed\n");
      exit(1);
    }
}

typedef struct timing {
  double fwd, bwd, both, cache; /* medians over the repetitions of GFLOP/s / FMA peak of the same repetition */
  double fwd_gf, bwd_gf, cache_gf; /* median GFLOP/s */
  double peak;                     /* median FMA peak, GFLOP/s */
} timing;

/* Each repetition measures the FMA peak just before its calls and is scored against it: on a shared
   machine the speed a core reaches drifts over seconds, and a fraction of a peak measured at another
   moment drifts with it. */
static timing time_problem(attn_problem *p, int reps, int threads) {
  double ff[MAX_REPS], fb[MAX_REPS], fboth[MAX_REPS], fc[MAX_REPS], gf[MAX_REPS], gb[MAX_REPS], gc[MAX_REPS];
  double pk[MAX_REPS];
  double unit = p->pairs * (double)p->H * (double)p->d_a * 2.0; /* flops of one product, one row */
  double flops_f = 2.0 * unit * (double)p->B, flops_b = 4.0 * unit * (double)p->B, flops_c = 2.0 * unit;
  titans_kv_cache cache;
  if (titans_kv_cache_init(&cache, 0, p->window > 0 ? (size_t)p->window : p->T, p->H, p->d_a, p->window) !=
      TITANS_OK)
    exit(1);
  run_forward(p); /* warm-up: first touch of every buffer */
  run_backward(p);
  for (int r = 0; r < reps; r++) {
    pk[r] = fma_peak(threads);
    double t0 = now_sec();
    run_forward(p);
    double t1 = now_sec();
    run_backward(p);
    double t2 = now_sec();
    run_cache(p, &cache);
    double t3 = now_sec();
    gf[r] = flops_f / (t1 - t0) * 1e-9, gb[r] = flops_b / (t2 - t1) * 1e-9, gc[r] = flops_c / (t3 - t2) * 1e-9;
    ff[r] = gf[r] / pk[r], fb[r] = gb[r] / pk[r], fc[r] = gc[r] / pk[r];
    fboth[r] = (flops_f + flops_b) / (t2 - t0) * 1e-9 / pk[r];
  }
  titans_kv_cache_free(&cache);
  size_t n = (size_t)reps;
  timing t = {median(ff, n), median(fb, n), median(fboth, n), median(fc, n),
              median(gf, n), median(gb, n), median(gc, n), median(pk, n)};
  return t;
}

/* The backward's inner step on one 64 x 64 tile of row 0, head 0 (queries 64..127 against keys 0..63,
   all visible), `calls` times in a row; returns the median over reps of GFLOP/s counting the five
   products it computes (credited: x 4/5) and of its fraction of the 1-thread FMA peak. */
static void tile_ceiling(attn_problem *p, int reps, double *gf5, double *frac5) {
  enum { TQ = 128, TILE = 64 };
  size_t ld = p->H * p->d_a;
  float *out = titans_alloc_floats(TQ * ld), *lse = titans_alloc_floats(TQ * p->H);
  float *grads = titans_alloc_floats(3 * TQ * ld); /* dq, dk, dv [TQ, ld] each */
  size_t nf = titans__attn_panel_floats(TQ, ld);
  float *kvt = titans_alloc_floats(2 * nf); /* [2, nf] the keys', then the values' panels */
  const titans_attn_shape sh = {p->pos, p->pos, TQ, 0, TQ, p->H, p->d_a, 0};
  if (!out || !lse || !grads || !kvt || titans_attention_forward(out, lse, p->q, p->k, p->v, &sh) != TITANS_OK) {
    fprintf(stderr, "bench_attn: tile setup failed\n");
    exit(1);
  }
  titans__attn_panel_pack(kvt, p->k, TQ, ld);
  titans__attn_panel_pack(kvt + nf, p->v, TQ, ld);
  titans__attn_bwd c;
  const titans_attn_grads gr = {grads, grads + TQ * ld, grads + 2 * TQ * ld, p->dout};
  const titans_attn_saved fw = {p->q, p->k, p->v, out, lse};
  titans__attn_bwd_init(&c, &gr, &fw, &sh, ld);
  c.kt = kvt, c.vt = kvt + nf;
  titans__attn_qtile qt;
  qt.n = 0;
  for (size_t i = TILE; i < 2 * TILE; i++) titans__attn_qtile_add(&qt, &c, 0, i, 0.0f);
  const int calls = 4000;
  double g[MAX_REPS], f[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    memset(grads, 0, 3 * TQ * ld * sizeof(float));
    double peak = fma_peak(1), t0 = now_sec();
    for (int i = 0; i < calls; i++)
      titans__attn_bwd_qtile_keys(&c, &qt, 0, 0, TILE, TITANS__ATTN_DQ | TITANS__ATTN_DKDV);
    g[r] = 5.0 * 2.0 * TILE * TILE * (double)p->d_a * calls / (now_sec() - t0) * 1e-9;
    f[r] = g[r] / peak;
  }
  *gf5 = median(g, (size_t)reps), *frac5 = median(f, (size_t)reps);
  titans_free(out), titans_free(lse), titans_free(grads), titans_free(kvt);
}

/* The backward of batch row 0 with every query seeing all T keys (query positions T), reps times on one
   thread; returns the median GFLOP/s in its five products and their fraction of the FMA peak. */
static void all_visible_backward(attn_problem *p, int reps, double *gf5, double *frac5) {
  size_t T = p->T, ld = p->H * p->d_a;
  float *out = titans_alloc_floats(T * ld), *lse = titans_alloc_floats(T * p->H);
  float *grads = titans_alloc_floats(3 * T * ld); /* dq, dk, dv [T, ld] each */
  int64_t *qpos = malloc(T * sizeof(int64_t));    /* [T] all T: after every key */
  if (!out || !lse || !grads || !qpos) exit(1);
  for (size_t t = 0; t < T; t++) qpos[t] = (int64_t)T;
  const titans_attn_shape sh = {qpos, p->pos, T, 0, T, p->H, p->d_a, 0};
  if (titans_attention_forward(out, lse, p->q, p->k, p->v, &sh) != TITANS_OK) exit(1);
  const titans_attn_grads gr = {grads, grads + T * ld, grads + 2 * T * ld, p->dout};
  const titans_attn_saved fw = {p->q, p->k, p->v, out, lse};
  double g[MAX_REPS], f[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    memset(grads, 0, 3 * T * ld * sizeof(float));
    double peak = fma_peak(1), t0 = now_sec();
    if (titans_attention_backward(&gr, &fw, &sh) != TITANS_OK) exit(1);
    g[r] = 5.0 * 2.0 * (double)T * (double)T * (double)ld / (now_sec() - t0) * 1e-9;
    f[r] = g[r] / peak;
  }
  *gf5 = median(g, (size_t)reps), *frac5 = median(f, (size_t)reps);
  titans_free(out), titans_free(lse), titans_free(grads), free(qpos);
}

int main(int argc, char **argv) {
  int reps = 7, threads[2] = {1, 2}, nthreads = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      const char *s = argv[++i];
      nthreads = sscanf(s, "%d,%d", &threads[0], &threads[1]);
      if (nthreads < 1) nthreads = 1;
    } else {
      fprintf(stderr, "usage: bench_attn [--reps N] [--threads A[,B]]\n");
      return 2;
    }
  }
  if (reps < 1 || reps > MAX_REPS) reps = 7;
#ifndef _OPENMP
  nthreads = 1, threads[0] = 1;
#endif
  printf("titans.h %s attention benchmark: T=%d H=%d d_a=%d batch %d, median of %d repetitions, load average "
         "%.2f\n", TITANS_VERSION, T_LEN, HEADS, D_HEAD, BATCH, reps, load_average());
  printf("| window | threads | forward GFLOP/s | %% peak | backward GFLOP/s | %% peak | forward + backward %% peak "
         "| cache attend GFLOP/s | %% peak | FMA peak GFLOP/s |\n|---|---|---|---|---|---|---|---|---|---|\n");
  int64_t windows[2] = {0, 64};
  attn_problem probs[2];
  for (int w = 0; w < 2; w++) {
    problem_init(&probs[w], windows[w]);
    for (int ti = 0; ti < nthreads; ti++) {
      set_threads(threads[ti]);
      timing t = time_problem(&probs[w], reps, threads[ti]);
      printf("| %s | %d | %.1f | %.0f%% | %.1f | %.0f%% | %.0f%% | %.1f | %.0f%% | %.1f |\n", w ? "64" : "full",
             threads[ti], t.fwd_gf, 100 * t.fwd, t.bwd_gf, 100 * t.bwd, 100 * t.both, t.cache_gf, 100 * t.cache,
             t.peak);
      fflush(stdout);
    }
  }
  printf("%% peak: the median over the repetitions of GFLOP/s over the FMA peak (independent FMA chains, "
         "per-thread CPU time, best of 5) measured just before each repetition\n");
  double gf5, frac5;
  set_threads(1);
  tile_ceiling(&probs[0], reps, &gf5, &frac5);
  printf("the backward's inner step alone, one 64 x 64 tile hot in cache, 1 thread: %.1f GFLOP/s in its 5 products "
         "(%.0f%% of the peak), %.1f credited with 4 (%.0f%%)\n", gf5, 100 * frac5, 0.8 * gf5, 80 * frac5);
  all_visible_backward(&probs[0], reps, &gf5, &frac5);
  printf("the backward of one row with every pair visible (no causal mask), 1 thread: %.1f GFLOP/s in its 5 "
         "products (%.0f%% of the peak), %.1f credited with 4 (%.0f%%)\n", gf5, 100 * frac5, 0.8 * gf5, 80 * frac5);
  for (int w = 0; w < 2; w++) problem_free(&probs[w]);
  return 0;
}
