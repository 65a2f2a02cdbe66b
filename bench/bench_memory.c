/* bench_memory: speed of one neural long-term memory layer (titans_mem_forward / titans_mem_backward).

     make bench                          (builds build/default/bench_memory and runs every bench)
     ./build/default/bench_memory        adaptive: T = 2048 unless that would break the time budget
     ./build/default/bench_memory T R    fixed T tokens per row and R repetitions
     ./build/default/bench_memory T R N  and a long inference stream of N tokens (default 1M; 0 skips it)
     ./build/default/bench_memory --one b threads T
                                         one chunk size and thread count only, on one line with a hash
                                         of the results (bench/ab.sh compares two titans.h with it)
     ./build/default/bench_memory --delta [T] [R]
                                         the gated delta rule's section alone (below)

   Layer: d = 256, H = 4, d_h = 64, L_M = 2, e = 4 (|W| = 32768 floats per head), K_c = 4, batch 4.
   Prints, for chunk sizes b = 16, 32, 64 on 1 and 2 threads, the forward (inference form) and the
   forward + backward (training form): median time of R runs with the min and max, tokens/s, GFLOP/s
   and the fraction of the FMA peak measured here with an FMA-chain loop (the best of 6 measurements
   spread over the run, since on a shared machine the peak a core reaches varies). Then:
   - the speed-up over the token-by-token recurrence (the same layer with b = 1), and a check that the
     chunked form equals its own recurrence fed one token per call;
   - a long inference stream (1M tokens by default, about a minute): the per-token cost at the end
     against that at 1K, the share of subnormal floats in the memory state and the RSS;
   - the gated delta rule (depth 1, no momentum) token by token (b = 1) against its chunked form
     (per_token_grad, b = 16, 32, 64): the same function, so the ratio is the chunked algorithm's speed-up,
     and the outputs' and gradients' distance from b = 1's says it is the same function;
   - where the time goes: the layer's stages, timed by the layer itself (its stage timers,
     titans_mem_ctx.stage_seconds), and one chunk of one head: its share of the recurrence against the
     same matrix products replayed alone (titans_gemm at the chunk's shapes).
   The flop count is printed with its formula (matrix products only, see flops_note). The whole run
   aims at under ~3 minutes: when one forward + backward is too slow for that at T = 2048 (a slow
   GEMM), T is reduced and the reason printed; rates per token hardly depend on T, the cost being
   linear in T. The layer is driven through the public API only; bench_common.h measures the FMA peak
   with the header's vector layer. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime (bench_common.h) */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "bench_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define BENCH_D 256
#define BENCH_HEADS 4
#define BENCH_DH 64
#define BENCH_DEPTH 2
#define BENCH_MULT 4
#define BENCH_BATCH 4
#define BENCH_MAX_REPS 9
#define BENCH_BUDGET_S 110.0 /* main table + parts; the rest of the run takes ~25 s more */

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench_memory: %s: %s\n", what, msg);
  exit(1);
}

/* median, min and max of n timings (sorts t) */
typedef struct stats {
  double med, min, max;
} stats;

static stats stats_of(double *t, int n) {
  stats s;
  s.med = median(t, (size_t)n); /* sorts t */
  s.min = t[0];
  s.max = t[n - 1];
  return s;
}

/* ---- flop count ---------------------------------------------------------------------------- */

/* The layer's shapes: H heads of width d_h (d_m = H d_h), an MLP of L layers of widths n_0 .. n_L per
   head, chunks of b tokens. The widths are read off the layer's own parameter list (w0.i is
   [H, n_(i+1), n_i]), so they are the library's, not a second derivation. */
typedef struct dims {
  size_t d, H, dh, dm, L, b;
  size_t n[TITANS_MEM_MAX_DEPTH + 1];
} dims;

static dims dims_of(const titans_mem_config *c) {
  titans_param list[64];
  size_t np = titans_mem_param_list(list, 64, c, "", 0);
  dims m;
  memset(&m, 0, sizeof m);
  m.d = (size_t)c->d;
  m.b = (size_t)c->chunk;
  for (size_t p = 0; p < np && p < 64; p++)
    if (strncmp(list[p].name, "w0.", 3) == 0) {
      size_t i = (size_t)atoi(list[p].name + 3);
      m.H = list[p].shape[0];
      m.n[i + 1] = list[p].shape[1];
      m.n[i] = list[p].shape[2];
      if (i + 1 > m.L) m.L = i + 1;
    }
  m.dh = m.n[0];
  m.dm = m.H * m.dh;
  return m;
}

/* The matrix products of the code, listed in the order it calls them, with their shapes: the
   flop count and the replay timing both come from these lists. */
typedef struct gemm_shape {
  int ta, tb;
  size_t m, n, k;
} gemm_shape;

#define BENCH_MAX_SHAPES 160
typedef struct shape_list {
  size_t count;
  gemm_shape s[BENCH_MAX_SHAPES];
} shape_list;

static void push(shape_list *l, int ta, int tb, size_t m, size_t n, size_t k) {
  if (l->count == BENCH_MAX_SHAPES) die("shape list", "too many products");
  gemm_shape g;
  g.ta = ta;
  g.tb = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  l->s[l->count++] = g;
}

static double list_flops(const shape_list *l) {
  double f = 0.0;
  for (size_t i = 0; i < l->count; i++) f += 2.0 * (double)l->s[i].m * (double)l->s[i].n * (double)l->s[i].k;
  return f;
}

/* The products of one chunk of n tokens of one head in the forward: key path, error recursion,
   query path, and (with_state) the chunk-end state. */
static void piece_forward_shapes(shape_list *l, const dims *m, size_t n, int with_state) {
  size_t L = m->L;
  for (size_t i = 0; i < L; i++) push(l, 0, 1, n, m->n[i + 1], m->n[i]); /* zk = ak Wg^T */
  for (size_t i = L - 1; i-- > 0;) push(l, 0, 0, n, m->n[i + 1], m->n[i + 2]); /* gk = delta W */
  for (size_t i = 0; i < L; i++) {
    size_t ni = m->n[i], no = m->n[i + 1];
    push(l, 0, 1, n, no, ni); /* p1 = aq W^T */
    push(l, 0, 1, n, no, ni); /* p2 = aq S^T */
    push(l, 0, 1, n, n, ni);  /* mx = aq ak^T */
    push(l, 0, 0, n, no, n);  /* (C o mx) delta */
  }
  if (with_state)
    for (size_t i = 0; i < L; i++) {
      push(l, 1, 0, m->n[i + 1], m->n[i], n); /* W' -= delta^T diag(c) ak */
      push(l, 1, 0, m->n[i + 1], m->n[i], n); /* S' -= delta^T diag(d) ak */
    }
}

/* The products of one chunk in the backward: the recomputed forward, then every product. */
static void piece_backward_shapes(shape_list *l, const dims *m, size_t n) {
  size_t L = m->L;
  piece_forward_shapes(l, m, n, 0);
  for (size_t i = 0; i < L; i++) { /* end state */
    size_t ni = m->n[i], no = m->n[i + 1];
    push(l, 0, 0, n, ni, no); /* R1 = delta dW' */
    push(l, 0, 0, n, ni, no); /* R2 = delta dS' */
    push(l, 0, 1, n, no, ni); /* Q1 = ak dW'^T */
    push(l, 0, 1, n, no, ni); /* Q2 = ak dS'^T */
  }
  for (size_t i = L; i-- > 0;) { /* query path */
    size_t ni = m->n[i], no = m->n[i + 1];
    push(l, 0, 1, n, n, no);  /* T1 = dZ delta^T */
    push(l, 1, 0, n, no, n);  /* d delta -= (C o mx)^T dZ */
    push(l, 0, 0, n, ni, no); /* daq = dP1 W */
    push(l, 0, 0, n, ni, no); /* daq += dP2 S */
    push(l, 0, 0, n, ni, n);  /* daq += dMx ak */
    push(l, 1, 0, no, ni, n); /* dW += dP1^T aq */
    push(l, 1, 0, no, ni, n); /* dS += dP2^T aq */
    push(l, 1, 0, n, ni, n);  /* dak += dMx^T aq */
  }
  for (size_t i = 0; i + 1 < L; i++) { /* error recursion */
    size_t no = m->n[i + 1], nn = m->n[i + 2];
    push(l, 0, 1, n, nn, no); /* d delta_{i+1} += dG W^T */
    push(l, 1, 0, nn, no, n); /* dW_{i+1} += delta^T dG */
  }
  for (size_t i = L; i-- > 0;) { /* key path */
    size_t ni = m->n[i], no = m->n[i + 1];
    push(l, 1, 0, no, ni, n); /* dW += dZk^T ak */
    push(l, 0, 0, n, ni, no); /* dak += dZk W */
  }
}

/* Projections, gates and output of bt tokens (the input and output stages). */
static void io_forward_shapes(shape_list *l, const dims *m, size_t bt) {
  for (int s = 0; s < 3; s++) push(l, 0, 1, bt, m->dm, m->d); /* wq, wk, wv */
  for (int g = 0; g < 3; g++) push(l, 0, 1, bt, m->H, m->d);  /* gates */
  push(l, 0, 1, bt, m->dm, m->d);                               /* wg */
  push(l, 0, 1, bt, m->d, m->dm);                               /* wo */
}

static void io_backward_shapes(shape_list *l, const dims *m, size_t bt) {
  push(l, 1, 0, m->d, m->dm, bt); /* d wo */
  push(l, 0, 0, bt, m->dm, m->d); /* d gated */
  push(l, 1, 0, m->dm, m->d, bt); /* d wg */
  push(l, 0, 0, bt, m->d, m->dm); /* dx from wg */
  for (int s = 0; s < 3; s++) {
    push(l, 1, 0, m->dm, m->d, bt); /* d wq, d wk, d wv */
    push(l, 0, 0, bt, m->d, m->dm); /* dx */
  }
  for (int g = 0; g < 3; g++) {
    push(l, 1, 0, m->H, m->d, bt); /* d gate weights */
    push(l, 0, 0, bt, m->d, m->H); /* dx */
  }
}

typedef struct flop_count {
  double piece_fwd, piece_bwd; /* one chunk of b tokens, one head */
  double tok_fwd, tok_bwd;     /* whole layer, per token */
} flop_count;

static flop_count count_flops(const dims *m) {
  flop_count f;
  shape_list l;
  l.count = 0;
  piece_forward_shapes(&l, m, m->b, 1);
  f.piece_fwd = list_flops(&l);
  l.count = 0;
  piece_backward_shapes(&l, m, m->b);
  f.piece_bwd = list_flops(&l);
  l.count = 0;
  io_forward_shapes(&l, m, 1);
  f.tok_fwd = (double)m->H * f.piece_fwd / (double)m->b + list_flops(&l);
  l.count = 0;
  io_backward_shapes(&l, m, 1);
  f.tok_bwd = (double)m->H * f.piece_bwd / (double)m->b + list_flops(&l);
  return f;
}

/* Prints the closed formula and checks it against the lists (they must agree exactly). */
static void flops_note(const dims *m) {
  double W = 0, W1 = 0, S = 0;
  for (size_t i = 0; i < m->L; i++) {
    W += (double)(m->n[i] * m->n[i + 1]);
    if (i > 0) W1 += (double)(m->n[i] * m->n[i + 1]);
    S += (double)(m->n[i] + m->n[i + 1]);
  }
  double b = (double)m->b, d = (double)m->d, dm = (double)m->dm, H = (double)m->H;
  double fwd = 10 * b * W + 2 * b * W1 + 2 * b * b * S, bwd = 26 * b * W + 6 * b * W1 + 6 * b * b * S;
  double io_f = 10 * d * dm + 6 * d * H, io_b = 20 * d * dm + 12 * d * H;
  flop_count f = count_flops(m);
  printf(
      "flops: matrix products only, as the code runs them (the b x b products in full, although C is\n"
      "lower triangular; elementwise work, exp and copies not counted). Per chunk of b tokens and head, with\n"
      "|W| = sum_i n_i n_(i+1) = %.0f, |W'| = the same over layers i >= 1 = %.0f, S = sum_i (n_i + n_(i+1)) = %.0f:\n",
      W, W1, S);
  printf("  forward : 10 b|W| + 2 b|W'| + 2 b^2 S = key path 2b|W| + error recursion 2b|W'|\n"
         "            + query path (2 weight products, b x b scores, (C o M) Delta) 4b|W| + 2b^2 S\n"
         "            + chunk-end state 4b|W|\n");
  printf("  backward: 26 b|W| + 6 b|W'| + 6 b^2 S = recomputed forward (no state) 6b|W| + 2b|W'| + 2b^2 S\n"
         "            + end state 8b|W| + query path 8b|W| + 4b^2 S + error recursion 4b|W'| + key path 4b|W|\n");
  printf("  layer per token: H x (the above) / b + the 5 products wq, wk, wv, wg, wo and the 3 gates: forward\n"
         "            5 x 2 d d_m + 3 x 2 d H, backward 10 x 2 d d_m + 6 x 2 d H (d = %.0f, d_m = %.0f, H = %.0f)\n",
         d, dm, H);
  double tf = H * fwd / b + io_f, tb = H * bwd / b + io_b;
  if (fabs(tf - f.tok_fwd) > 0.5 || fabs(tb - f.tok_bwd) > 0.5)
    printf("  WARNING: formula (%.0f, %.0f) and product list (%.0f, %.0f) disagree\n", tf, tb, f.tok_fwd, f.tok_bwd);
}

/* ---- one layer ----------------------------------------------------------------------------- */

typedef struct layer {
  titans_mem_config cfg;
  titans_mem_weights w, g;
  float *params, *grads;
  titans_mem_state st;
  titans_mem_ctx ctx;
  size_t B, T;
  float *x, *out, *dout, *dx; /* [B, T, d] */
} layer;

static titans_mem_config bench_config(int chunk) {
  titans_mem_config c = titans_mem_config_default(BENCH_D);
  c.heads = BENCH_HEADS;
  c.head_dim = BENCH_DH;
  c.depth = BENCH_DEPTH;
  c.hidden_mult = BENCH_MULT;
  c.chunk = chunk;
  return c;
}

/* The same weights and inputs for every b (the parameter layout does not depend on b). */
static void layer_init_cfg(layer *ly, titans_mem_config cfg, size_t B, size_t T) {
  memset(ly, 0, sizeof *ly);
  ly->cfg = cfg;
  ly->B = B;
  ly->T = T;
  size_t np = titans_mem_param_count(&ly->cfg), nx = B * T * BENCH_D;
  ly->params = titans_alloc_floats(np);
  ly->grads = titans_alloc_floats(np);
  ly->x = titans_alloc_floats(nx);
  ly->out = titans_alloc_floats(nx);
  ly->dout = titans_alloc_floats(nx);
  ly->dx = titans_alloc_floats(nx);
  if (!ly->params || !ly->grads || !ly->x || !ly->out || !ly->dout || !ly->dx) die("layer", "out of memory");
  titans_mem_weights_bind(&ly->w, &ly->cfg, ly->params);
  titans_mem_weights_bind(&ly->g, &ly->cfg, ly->grads);
  titans_rng rng;
  titans_rng_seed(&rng, 1234);
  titans_mem_weights_init(&ly->w, &ly->cfg, &rng, 1);
  titans_rng_seed(&rng, 99);
  for (size_t i = 0; i < nx; i++) ly->x[i] = titans_rng_normal(&rng);
  for (size_t i = 0; i < nx; i++) ly->dout[i] = 0.01f * titans_rng_normal(&rng);
  if (titans_mem_state_init(&ly->st, &ly->cfg, B) != TITANS_OK) die("state", ly->st.error);
  titans_mem_ctx_init(&ly->ctx);
}

static void layer_init(layer *ly, int chunk, size_t B, size_t T) { layer_init_cfg(ly, bench_config(chunk), B, T); }

static void layer_free(layer *ly) {
  titans_mem_state_free(&ly->st);
  titans_mem_ctx_free(&ly->ctx);
  titans_free(ly->params);
  titans_free(ly->grads);
  titans_free(ly->x);
  titans_free(ly->out);
  titans_free(ly->dout);
  titans_free(ly->dx);
}

/* Inference forward over the whole sequence from the initial state. */
static double run_forward(layer *ly) {
  titans_mem_state_reset(&ly->st, &ly->w);
  double t0 = now_sec();
  if (titans_mem_forward(&ly->cfg, &ly->w, &ly->st, ly->out, ly->x, ly->T, NULL) != TITANS_OK)
    die("forward", ly->st.error);
  return now_sec() - t0;
}

/* Training forward + backward (gradients accumulate; they are zeroed outside the timing). */
static double run_fwdbwd(layer *ly) {
  titans_mem_state_reset(&ly->st, &ly->w);
  memset(ly->grads, 0, titans_mem_param_count(&ly->cfg) * sizeof(float));
  memset(ly->dx, 0, ly->B * ly->T * BENCH_D * sizeof(float));
  double t0 = now_sec();
  if (titans_mem_forward(&ly->cfg, &ly->w, &ly->st, ly->out, ly->x, ly->T, &ly->ctx) != TITANS_OK)
    die("forward", ly->st.error);
  if (titans_mem_backward(&ly->cfg, &ly->w, &ly->g, ly->dx, ly->dout, ly->x, &ly->ctx, 1) != TITANS_OK)
    die("backward", ly->ctx.error);
  return now_sec() - t0;
}

/* one warm-up, then reps timed runs */
static stats time_runs(layer *ly, int fwdbwd, int reps) {
  double t[BENCH_MAX_REPS];
  if (fwdbwd) run_fwdbwd(ly);
  else run_forward(ly);
  for (int r = 0; r < reps; r++) t[r] = fwdbwd ? run_fwdbwd(ly) : run_forward(ly);
  return stats_of(t, reps);
}

/* ---- where the time goes ------------------------------------------------------------------- */

/* The stages of a training forward and its backward (TITANS_MEM_STAGE_*: inputs, recurrence, output;
   output backward with the zeroing of the backward's work space, recurrence backward, inputs backward),
   as the layer's own stage timers measure them: medians of reps runs after one warm-up. */
#define BENCH_PARTS TITANS_MEM_STAGES
static void time_parts(layer *ly, int reps, double *med) {
  double t[BENCH_MAX_REPS][BENCH_PARTS], col[BENCH_MAX_REPS];
  run_fwdbwd(ly);
  for (int r = 0; r < reps; r++) {
    memset(t[r], 0, sizeof t[r]);
    ly->ctx.stage_seconds = t[r];
    run_fwdbwd(ly);
    ly->ctx.stage_seconds = NULL;
  }
  for (int p = 0; p < BENCH_PARTS; p++) {
    for (int r = 0; r < reps; r++) col[r] = t[r][p];
    med[p] = stats_of(col, reps).med;
  }
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
  double mx = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (!(d <= mx)) mx = d; /* NaN wins */
  }
  return mx;
}

static double max_abs(const float *a, size_t n) {
  double mx = 0.0;
  for (size_t i = 0; i < n; i++)
    if (fabs((double)a[i]) > mx) mx = fabs((double)a[i]);
  return mx;
}

/* The products of one chunk of one head (forward with the state update, or backward) replayed
   alone on one thread: seconds per chunk-head (best of 7 windows). Buffers hold small random values. */
static double replay_chunk_gemms(const dims *m, int backward, double min_seconds) {
  shape_list l;
  l.count = 0;
  if (backward) piece_backward_shapes(&l, m, m->b);
  else piece_forward_shapes(&l, m, m->b, 1);
  size_t na = 0, nb = 0, nc = 0;
  for (size_t i = 0; i < l.count; i++) {
    const gemm_shape *g = &l.s[i];
    if (g->m * g->k > na) na = g->m * g->k;
    if (g->k * g->n > nb) nb = g->k * g->n;
    if (g->m * g->n > nc) nc = g->m * g->n;
  }
  float *a = titans_alloc_floats(na), *bm = titans_alloc_floats(nb), *c = titans_alloc_floats(nc);
  if (!a || !bm || !c) die("replay", "out of memory");
  titans_rng rng;
  titans_rng_seed(&rng, 5);
  for (size_t i = 0; i < na; i++) a[i] = 0.1f * titans_rng_normal(&rng);
  for (size_t i = 0; i < nb; i++) bm[i] = 0.1f * titans_rng_normal(&rng);
  /* the best of 7 windows: other processes on the machine only ever slow a window down */
  double best = INFINITY;
  for (int win = 0; win < 7; win++) {
    long rounds = 0;
    double t0 = now_sec(), t = 0.0;
    do {
      for (size_t i = 0; i < l.count; i++) {
        const gemm_shape *g = &l.s[i];
        size_t lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
        /* literal flags, as at the library's call sites (a compiler may specialise an inlined GEMM on them) */
        if (g->ta) {
          if (g->tb) titans_gemm(1, 1, g->m, g->n, g->k, 1.0f, titans_cm(a, lda), titans_cm(bm, ldb), 0.0f,
                                 titans_m(c, g->n));
          else titans_gemm(1, 0, g->m, g->n, g->k, 1.0f, titans_cm(a, lda), titans_cm(bm, ldb), 0.0f,
                           titans_m(c, g->n));
        } else {
          if (g->tb) titans_gemm(0, 1, g->m, g->n, g->k, 1.0f, titans_cm(a, lda), titans_cm(bm, ldb), 0.0f,
                                 titans_m(c, g->n));
          else titans_gemm(0, 0, g->m, g->n, g->k, 1.0f, titans_cm(a, lda), titans_cm(bm, ldb), 0.0f,
                           titans_m(c, g->n));
        }
      }
      rounds++;
      t = now_sec() - t0;
    } while (t < min_seconds / 7);
    if (t / (double)rounds < best) best = t / (double)rounds;
  }
  titans_free(a);
  titans_free(bm);
  titans_free(c);
  return best;
}

/* One chunk of one head on 1 thread: its time inside the layer (the recurrence stages of the 1-thread
   stage timings, per chunk and head) against its matrix products replayed alone. */
typedef struct anatomy {
  double fwd, bwd;         /* seconds per chunk and head */
  double gemm_fwd, gemm_bwd;
} anatomy;

/* Everything main() measures, printed at the end against the best FMA peak seen during the run (on a
   shared machine the peak a core reaches varies with what runs beside it). */
typedef struct results {
  stats run[3][2][2];          /* [b][threads][fwd, fwd+bwd] */
  double tok_flops[3][2];      /* [b][fwd, fwd+bwd] flops per token */
  stats b1[2];                 /* b = 1 forward, [threads] */
  double b1_flops;             /* flops per token at b = 1 */
  double stream_rate, stream_diff, stream_scale;
  double part_med[4][BENCH_PARTS], part_flops[4][BENCH_PARTS];
  int part_b[4], part_thr[4], nparts;
  anatomy anat[3];             /* one chunk of one head, [b] */
  double chunk_flops[3][2];
  double peak[2];              /* best GFLOP/s of the FMA loop, [threads] */
} results;

static void peak_update(results *R, int nthreads) {
  static const int thr[2] = {1, 2};
  for (int ti = 0; ti < nthreads; ti++) {
    double p = fma_peak_wall(thr[ti]);
    if (p > R->peak[ti]) R->peak[ti] = p;
  }
}

/* ---- a long inference stream --------------------------------------------------------------- */

/* Resident set size in MB (Linux /proc/self/statm; -1 elsewhere). */
static double rss_mb(void) {
  long pages = -1, resident = -1;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
  }
  return resident < 0 ? -1.0 : (double)resident * 4096.0 / 1e6;
}

static double subnormal_share(const float *x, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++) c += x[i] != 0.0f && fabsf(x[i]) < FLT_MIN;
  return (double)c / (double)n;
}

typedef struct long_stream {
  size_t tokens, block;
  double early, late, ratio; /* per-token seconds at 1K and at the end (medians), late / early */
  double early_lo, early_hi, late_lo, late_hi;
  double sub_early, sub_late, rss_early, rss_late, seconds;
} long_stream;

/* One layer (b = 16, the default chunk; batch 1) fed `tokens` tokens as inference, block tokens per
   call. The state is saved at position 1K; at the end, calls from the saved 1K state and calls on the
   long state are timed in turns (rounds of one each, so both see the same load): the ratio of their
   medians is the per-token cost at the end relative to 1K. */
static long_stream long_stream_run(size_t tokens, size_t block, int rounds) {
  long_stream L;
  memset(&L, 0, sizeof L);
  L.tokens = tokens;
  L.block = block;
  titans_mem_config cfg = bench_config(16);
  layer ly;
  layer_init(&ly, 16, 1, block);
  titans_mem_state early, tmp;
  if (titans_mem_state_init(&early, &cfg, 1) != TITANS_OK || titans_mem_state_init(&tmp, &cfg, 1) != TITANS_OK)
    die("long stream", "state");
  size_t nw = ly.st.batch * (size_t)cfg.heads * ly.st.head_size;
  titans_mem_state_reset(&ly.st, &ly.w);
  double t0 = now_sec();
  size_t fed = 0;
  while (fed < tokens) {
    if (titans_mem_forward(&cfg, &ly.w, &ly.st, ly.out, ly.x, block, NULL) != TITANS_OK)
      die("long stream", ly.st.error);
    fed += block;
    if (fed == 1024 || (fed > 1024 && fed - block < 1024)) {
      titans_mem_state_copy(&early, &ly.st);
      L.sub_early = 0.5 * (subnormal_share(ly.st.w, nw) + subnormal_share(ly.st.s, nw));
      L.rss_early = rss_mb();
    }
  }
  L.sub_late = 0.5 * (subnormal_share(ly.st.w, nw) + subnormal_share(ly.st.s, nw));
  L.rss_late = rss_mb(); /* before the timed rounds, whose first call sizes tmp's scratch */
  double te[BENCH_MAX_REPS], tl[BENCH_MAX_REPS];
  if (rounds > BENCH_MAX_REPS) rounds = BENCH_MAX_REPS;
  for (int r = 0; r < rounds; r++) {
    titans_mem_state_copy(&tmp, &early);
    double a = now_sec();
    if (titans_mem_forward(&cfg, &ly.w, &tmp, ly.out, ly.x, block, NULL) != TITANS_OK) die("long stream", tmp.error);
    double b = now_sec();
    if (titans_mem_forward(&cfg, &ly.w, &ly.st, ly.out, ly.x, block, NULL) != TITANS_OK)
      die("long stream", ly.st.error);
    double c = now_sec();
    te[r] = (b - a) / (double)block;
    tl[r] = (c - b) / (double)block;
  }
  stats se = stats_of(te, rounds), sl = stats_of(tl, rounds);
  L.early = se.med;
  L.early_lo = se.min;
  L.early_hi = se.max;
  L.late = sl.med;
  L.late_lo = sl.min;
  L.late_hi = sl.max;
  L.ratio = sl.med / se.med;
  L.seconds = now_sec() - t0;
  titans_mem_state_free(&early);
  titans_mem_state_free(&tmp);
  layer_free(&ly);
  return L;
}

/* FNV-1a over the bytes of x [n]: two builds whose results are bit-identical print the same hash. */
static unsigned long long hash_floats(const float *x, size_t n, unsigned long long h) {
  const unsigned char *p = (const unsigned char *)x;
  for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

/* ---- the gated delta rule: token by token against its chunked form --------------------------- */
#ifndef BENCH_ONE_ONLY /* bench/ab.sh builds --one alone, against headers older than per_token_grad too */

/* The gated delta rule (titans_mem_config_gated_delta: depth 1, no momentum, no bound) with H = 4 heads of
   d_h = 64 at b = 1, and at b = 16, 32, 64 with per_token_grad (docs/model.md 1.10): the same function
   computed a chunk at a time. Forward and forward + backward on 1 thread, median of reps runs, and how far
   each chunked run's outputs and gradients lie from b = 1's (relative to their largest magnitude). */
#define DELTA_CHUNKS 4
typedef struct delta_rule_row {
  int b;
  stats fwd, fwdbwd;
  double recur;               /* median s of the recurrence's stages (forward and backward) in a fwd+bwd */
  double out_diff, grad_diff; /* max |x - x_b1| / max |x_b1| */
} delta_rule_row;

static void delta_rule_run(delta_rule_row *rows, size_t B, size_t T, int reps) {
  static const int chunks[DELTA_CHUNKS] = {1, 16, 32, 64};
  float *out1 = NULL, *grad1 = NULL;
  size_t nx = B * T * BENCH_D, np = 0;
  set_threads(1);
  for (int ci = 0; ci < DELTA_CHUNKS; ci++) {
    titans_mem_config c = titans_mem_config_gated_delta(BENCH_D);
    c.heads = BENCH_HEADS;
    c.head_dim = BENCH_DH;
    c.chunk = chunks[ci];
    c.per_token_grad = chunks[ci] > 1;
    layer ly;
    layer_init_cfg(&ly, c, B, T);
    np = titans_mem_param_count(&c);
    rows[ci].b = chunks[ci];
    rows[ci].fwd = time_runs(&ly, 0, reps);
    double parts[BENCH_PARTS];
    time_parts(&ly, reps, parts);
    rows[ci].recur = parts[TITANS_MEM_STAGE_RECURRENCE] + parts[TITANS_MEM_STAGE_RECURRENCE_BACKWARD];
    rows[ci].fwdbwd = time_runs(&ly, 1, reps); /* leaves the last run's outputs and gradients */
    if (ci == 0) {
      out1 = titans_alloc_floats(nx);
      grad1 = titans_alloc_floats(np);
      if (!out1 || !grad1) die("delta rule", "out of memory");
      memcpy(out1, ly.out, nx * sizeof(float));
      memcpy(grad1, ly.grads, np * sizeof(float));
    }
    rows[ci].out_diff = max_abs_diff(ly.out, out1, nx) / max_abs(out1, nx);
    rows[ci].grad_diff = max_abs_diff(ly.grads, grad1, np) / max_abs(grad1, np);
    layer_free(&ly);
  }
  titans_free(out1);
  titans_free(grad1);
}

static void delta_rule_report(const delta_rule_row *rows, size_t B, size_t T, int reps) {
  printf("\nthe gated delta rule (depth 1, no momentum, H = %d heads of d_h = %d): token by token (b = 1) against\n"
         "its chunked form (per_token_grad: the same recurrence, a chunk of b tokens at a time), 1 thread, T = %zu,\n"
         "batch %zu, median of %d runs [min, max]; diff = max |x - x(b = 1)| / max |x(b = 1)| of the outputs and\n"
         "the parameters' gradients; recur = the recurrence's own stages of a fwd+bwd (the layer's stage timers)\n",
         BENCH_HEADS, BENCH_DH, T, B, reps);
  printf("%4s %21s %21s %9s %9s %9s %8s %10s %10s\n", "b", "fwd s", "fwd+bwd s", "fwd x", "fwd+bwd x", "recur s",
         "recur x", "out diff", "grad diff");
  for (int ci = 0; ci < DELTA_CHUNKS; ci++) {
    const delta_rule_row *r = &rows[ci];
    printf("%4d %7.3f [%5.3f,%5.3f] %7.3f [%5.3f,%5.3f] %8.1fx %8.1fx %9.3f %7.1fx %10.2g %10.2g\n", r->b, r->fwd.med,
           r->fwd.min, r->fwd.max, r->fwdbwd.med, r->fwdbwd.min, r->fwdbwd.max, rows[0].fwd.med / r->fwd.med,
           rows[0].fwdbwd.med / r->fwdbwd.med, r->recur, rows[0].recur / r->recur, r->out_diff, r->grad_diff);
  }
  for (int ci = 1; ci < DELTA_CHUNKS; ci++)
    printf("bench_memory_delta b=%d fwd_speedup=%.2f fwdbwd_speedup=%.2f recur_speedup=%.2f out_diff=%.3g "
           "grad_diff=%.3g\n",
           rows[ci].b, rows[0].fwd.med / rows[ci].fwd.med, rows[0].fwdbwd.med / rows[ci].fwdbwd.med,
           rows[0].recur / rows[ci].recur, rows[ci].out_diff, rows[ci].grad_diff);
}

/* --delta [T] [reps]: the delta rule's section alone */
static int run_delta(int argc, char **argv) {
  long T = argc > 2 ? strtol(argv[2], NULL, 10) : 512, reps = argc > 3 ? strtol(argv[3], NULL, 10) : 5;
  if (T < 1 || T > 65536 || reps < 1 || reps > BENCH_MAX_REPS)
    die("usage", "bench_memory --delta [T tokens per row (512)] [repetitions 1..9 (5)]");
  delta_rule_row rows[DELTA_CHUNKS];
  delta_rule_run(rows, BENCH_BATCH, (size_t)T, (int)reps);
  delta_rule_report(rows, BENCH_BATCH, (size_t)T, (int)reps);
  return 0;
}
#endif

/* --one b threads T: one layer at one chunk size and thread count, forward and forward + backward
   (one warm-up, then BENCH_MAX_REPS runs of each), printed on one line with a hash of the output, dx
   and the weight gradients. bench/ab.sh runs it for two builds of titans.h in turns. */
static int run_one(int argc, char **argv) {
  long b = argc > 2 ? strtol(argv[2], NULL, 10) : 16, nt = argc > 3 ? strtol(argv[3], NULL, 10) : 1;
  long T = argc > 4 ? strtol(argv[4], NULL, 10) : 1024;
  if (b < 1 || b > 1024 || nt < 1 || nt > 64 || T < 1 || T > 65536)
    die("usage", "bench_memory --one [chunk b (16)] [threads (1)] [T tokens per row (1024)]");
  set_threads((int)nt);
  layer ly;
  layer_init(&ly, (int)b, BENCH_BATCH, (size_t)T);
  stats f = time_runs(&ly, 0, BENCH_MAX_REPS), fb = time_runs(&ly, 1, BENCH_MAX_REPS);
  size_t nx = ly.B * ly.T * BENCH_D;
  unsigned long long h = hash_floats(ly.out, nx, 14695981039346656037ULL);
  h = hash_floats(ly.dx, nx, h);
  h = hash_floats(ly.grads, titans_mem_param_count(&ly.cfg), h);
  printf("one: b %ld, threads %ld, B %zu, T %ld: forward best %.4f s median %.4f s, forward+backward best %.4f s "
         "median %.4f s, results hash %016llx\n",
         b, nt, ly.B, T, f.min, f.med, fb.min, fb.med, h);
  layer_free(&ly);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--one") == 0) return run_one(argc, argv);
#ifndef BENCH_ONE_ONLY
  if (argc > 1 && strcmp(argv[1], "--delta") == 0) return run_delta(argc, argv);
#else
  die("usage", "built with BENCH_ONE_ONLY (bench/ab.sh): only --one");
#endif
  static const int chunks[3] = {16, 32, 64};
  static const int threads[2] = {1, 2};
  int nthreads = 2;
#ifndef _OPENMP
  nthreads = 1; /* built without OpenMP: one thread only */
#endif
  size_t T = 2048, B = BENCH_BATCH, T1 = 256, long_tokens = (size_t)1 << 20;
  int reps = 5, fixed = 0;
  static results R;
  memset(&R, 0, sizeof R);
  if (argc > 1) {
    long v = strtol(argv[1], NULL, 10);
    if (v < 64 || v % 64 != 0 || v > 65536) die("usage", "bench_memory [T (a multiple of 64)] [repetitions 3..9]");
    T = (size_t)v;
    fixed = 1;
  }
  if (argc > 2) {
    long v = strtol(argv[2], NULL, 10);
    if (v < 3 || v > BENCH_MAX_REPS) die("usage", "bench_memory [T (a multiple of 64)] [repetitions 3..9]");
    reps = (int)v;
  }
  if (argc > 3) {
    long v = strtol(argv[3], NULL, 10);
    if (v != 0 && (v < 2048 || v > (1L << 30)))
      die("usage", "bench_memory [T] [repetitions] [long-stream tokens, 0 = skip]");
    long_tokens = (size_t)v;
  }
  double start = now_sec();
  titans_mem_config c64 = bench_config(64);
  dims m64 = dims_of(&c64);
  printf("bench_memory: one memory layer, d = %d, H = %d, d_h = %d, L_M = %d, e = %d, K_c = %d, batch %zu\n", BENCH_D,
         BENCH_HEADS, BENCH_DH, BENCH_DEPTH, BENCH_MULT, c64.conv_width, B);
  printf("vector width %d floats (%s), OpenMP %s\n", vector_width(), vector_name(),
#ifdef _OPENMP
         "on"
#else
         "off"
#endif
  );
  double load0 = load_average();
  if (load0 >= 0) {
    printf("load average at the start %.2f", load0);
    if (load0 > 0.5) {
      printf(": other processes are running,\nthe figures below are lower and noisier than on an idle machine");
#ifdef _OPENMP
      printf("\n(with fewer free cores than threads, OpenMP's spin-waiting makes every parallel region slow: try\n"
             "OMP_WAIT_POLICY=passive)");
#endif
    }
    printf("\n");
  }
  printf("\n");
  flops_note(&m64);
  peak_update(&R, nthreads);

  /* choose T: one forward + backward at b = 64 on 1 thread, T = 64, gives the cost per token */
  if (!fixed) {
    set_threads(1);
    layer probe;
    layer_init(&probe, 64, B, 64);
    run_fwdbwd(&probe);
    double per_tok = run_fwdbwd(&probe) / (double)(B * 64);
    layer_free(&probe);
    /* runs in units of one fwd+bwd at 1 thread: per b, (1 + reps) x (fwd ~0.3 + fwd+bwd 1) x (1 thread
       + 2 threads ~0.6), and 4 part timings of (1 + 3) runs */
    double units5 = 3 * (1 + 5) * 1.3 * (1 + 0.6 * (nthreads - 1)) + 4 * 4 * 1.3;
    double units3 = 3 * (1 + 3) * 1.3 * (1 + 0.6 * (nthreads - 1)) + 4 * 4 * 1.3;
    double full = per_tok * (double)(B * 2048);
    if (full * units5 <= BENCH_BUDGET_S) {
      T = 2048;
    } else if (full * units3 <= BENCH_BUDGET_S) {
      T = 2048;
      reps = 3;
    } else {
      reps = 3;
      T = 2048;
      while (T > 64 && per_tok * (double)(B * T) * units3 > BENCH_BUDGET_S) T /= 2;
      printf("\nNOTE: one forward + backward at b = 64 takes %.2f ms per token on 1 thread, so T = 2048 would take\n"
             "about %.0f s here; T reduced to %zu to keep the run short (rates per token hardly depend on T).\n",
             1e3 * per_tok, full * units3, T);
    }
  }

  /* 1. the main table */
  for (int ci = 0; ci < 3; ci++) {
    layer ly;
    layer_init(&ly, chunks[ci], B, T);
    dims m = dims_of(&ly.cfg);
    flop_count f = count_flops(&m);
    R.tok_flops[ci][0] = f.tok_fwd;
    R.tok_flops[ci][1] = f.tok_fwd + f.tok_bwd;
    R.chunk_flops[ci][0] = f.piece_fwd;
    R.chunk_flops[ci][1] = f.piece_bwd;
    for (int ti = 0; ti < nthreads; ti++) {
      set_threads(threads[ti]);
      for (int pass = 0; pass < 2; pass++) R.run[ci][ti][pass] = time_runs(&ly, pass, reps);
    }
    layer_free(&ly);
    peak_update(&R, nthreads);
  }

  /* 2. the token-by-token recurrence: the same layer with b = 1, forward only, on T1 tokens */
  {
    titans_mem_config c1 = bench_config(1);
    dims m1 = dims_of(&c1);
    R.b1_flops = count_flops(&m1).tok_fwd;
  }
  if (!fixed) { /* probe: T = 16 */
    set_threads(1);
    layer probe;
    layer_init(&probe, 1, B, 16);
    run_forward(&probe);
    double per_tok = run_forward(&probe) / (double)(B * 16);
    layer_free(&probe);
    while (T1 > 16 && per_tok * (double)(B * T1) * 4 * (1 + 0.6 * (nthreads - 1)) > 20.0) T1 /= 2;
  }
  if (T1 > T) T1 = T;
  {
    layer ly1;
    layer_init(&ly1, 1, B, T1);
    for (int ti = 0; ti < nthreads; ti++) {
      set_threads(threads[ti]);
      R.b1[ti] = time_runs(&ly1, 0, 3);
    }
    layer_free(&ly1);
  }
  /* b = 1 is another function than b = 64 (a chunk takes its inner gradients at its start), so the
     check of the chunked form is against the b = 64 recurrence fed one token per call (streaming) */
  {
    layer lyc;
    layer_init(&lyc, 64, B, T1);
    set_threads(1);
    run_forward(&lyc);
    size_t nx = B * T1 * BENCH_D;
    float *xt = titans_alloc_floats(B * BENCH_D), *ot = titans_alloc_floats(B * BENCH_D), *os = titans_alloc_floats(nx);
    if (!xt || !ot || !os) die("streaming", "out of memory");
    titans_mem_state_reset(&lyc.st, &lyc.w);
    double t0 = now_sec();
    for (size_t t = 0; t < T1; t++) {
      for (size_t r = 0; r < B; r++) memcpy(xt + r * BENCH_D, lyc.x + (r * T1 + t) * BENCH_D, BENCH_D * sizeof(float));
      if (titans_mem_forward(&lyc.cfg, &lyc.w, &lyc.st, ot, xt, 1, NULL) != TITANS_OK) die("streaming", lyc.st.error);
      for (size_t r = 0; r < B; r++) memcpy(os + (r * T1 + t) * BENCH_D, ot + r * BENCH_D, BENCH_D * sizeof(float));
    }
    R.stream_rate = (double)(B * T1) / (now_sec() - t0);
    R.stream_diff = max_abs_diff(lyc.out, os, nx);
    R.stream_scale = max_abs(os, nx);
    titans_free(xt);
    titans_free(ot);
    titans_free(os);
    layer_free(&lyc);
  }
  peak_update(&R, nthreads);

  /* 3. where the time goes: the parts (all b on 1 thread, b = 64 on 2 threads) */
  for (int ci = 0; ci < 3; ci++)
    for (int ti = 0; ti < nthreads; ti++) {
      if (ti > 0 && chunks[ci] != 64) continue;
      int k = R.nparts++;
      layer ly;
      layer_init(&ly, chunks[ci], B, T);
      dims m = dims_of(&ly.cfg);
      set_threads(threads[ti]);
      time_parts(&ly, 3, R.part_med[k]);
      R.part_b[k] = chunks[ci];
      R.part_thr[k] = threads[ti];
      double bt = (double)(B * T), chunkheads = bt / (double)m.b * (double)m.H;
      double d = (double)m.d, dm = (double)m.dm, H = (double)m.H;
      double *fl = R.part_flops[k];
      fl[0] = bt * (3 * 2 * d * dm + 3 * 2 * d * H); /* wq, wk, wv, gates */
      fl[1] = R.chunk_flops[ci][0] * chunkheads;
      fl[2] = bt * 2 * 2 * d * dm;                   /* wg, wo */
      fl[3] = bt * 4 * 2 * d * dm;                   /* wo, wg: weight and input gradients */
      fl[4] = R.chunk_flops[ci][1] * chunkheads;
      fl[5] = bt * (6 * 2 * d * dm + 6 * 2 * d * H); /* wq, wk, wv, gates */
      if (threads[ti] == 1) {
        R.anat[ci].fwd = R.part_med[k][TITANS_MEM_STAGE_RECURRENCE] / chunkheads;
        R.anat[ci].bwd = R.part_med[k][TITANS_MEM_STAGE_RECURRENCE_BACKWARD] / chunkheads;
      }
      layer_free(&ly);
    }

  /* 4. one chunk of one head on 1 thread: its matrix products replayed alone */
  set_threads(1);
  for (int ci = 0; ci < 3; ci++) {
    titans_mem_config c = bench_config(chunks[ci]);
    dims m = dims_of(&c);
    R.anat[ci].gemm_fwd = replay_chunk_gemms(&m, 0, 0.14);
    R.anat[ci].gemm_bwd = replay_chunk_gemms(&m, 1, 0.14);
  }
  peak_update(&R, nthreads);

#ifndef BENCH_ONE_ONLY
  /* 5. the gated delta rule token by token against its chunked form */
  delta_rule_row delta_rows[DELTA_CHUNKS];
  delta_rule_run(delta_rows, B, 512, 3);
#endif

  /* 6. a long inference stream: per-token cost at the end against 1K, subnormals, RSS (1 thread) */
  long_stream LS;
  memset(&LS, 0, sizeof LS);
  if (long_tokens > 0) {
    set_threads(1);
    LS = long_stream_run(long_tokens, 1024, 9);
  }

  /* ---- report ---- */
  printf("\nFMA peak, the best of the FMA-chain loop (%d independent chains per thread) measured 6 times during\n"
         "the run: 1 thread %.1f GFLOP/s", BENCH_CHAINS, R.peak[0]);
  if (nthreads > 1) {
    printf(", 2 threads %.1f GFLOP/s", R.peak[1]);
    /* two cores: a 2-thread figure below twice the 1-thread one only says the cores were shared at the
       time; the fractions of peak use the larger (the conservative choice) */
    if (R.peak[1] < 2.0 * R.peak[0]) {
      R.peak[1] = 2.0 * R.peak[0];
      printf(";\n2-thread figures below are fractions of twice the 1-thread peak, %.1f GFLOP/s", R.peak[1]);
    }
  }
  printf(
      "\n\nT = %zu tokens per row, batch %zu (%zu tokens per run); median of %d runs after one warm-up, [min, max];\n"
      "%% peak of the median run and of the best run\n",
      T, B, B * T, reps);
  printf("%4s %4s %-8s %9s %21s %10s %8s %7s %7s\n", "b", "thr", "pass", "median s", "[min, max] s", "tokens/s",
         "GFLOP/s", "% peak", "best");
  for (int ci = 0; ci < 3; ci++)
    for (int ti = 0; ti < nthreads; ti++)
      for (int pass = 0; pass < 2; pass++) {
        stats s = R.run[ci][ti][pass];
        double tok = (double)(B * T), gf = tok * R.tok_flops[ci][pass] / s.med * 1e-9;
        double gbest = tok * R.tok_flops[ci][pass] / s.min * 1e-9;
        printf("%4d %4d %-8s %9.3f   [%7.3f, %7.3f] %10.0f %8.2f %6.1f%% %6.1f%%\n", chunks[ci], threads[ti],
               pass ? "fwd+bwd" : "fwd", s.med, s.min, s.max, tok / s.med, gf, 100.0 * gf / R.peak[ti],
               100.0 * gbest / R.peak[ti]);
      }

  printf("\nspeed-up over the token-by-token recurrence (the same layer with b = 1: one token per chunk, the exact\n"
         "online recurrence), forward only, T = %zu per row, batch %zu, median of 3 runs; ratio = chunked forward\n"
         "tokens/s (table above) / b = 1 tokens/s\n",
         T1, B);
  for (int ti = 0; ti < nthreads; ti++) {
    stats s = R.b1[ti];
    double rate = (double)(B * T1) / s.med, gf = rate * R.b1_flops * 1e-9;
    printf(
        "  %d thread%s: b = 1 %.3f s [%.3f, %.3f], %.0f tokens/s, %.2f GFLOP/s (%.1f%% peak); speed-up b = 16 %.1fx, "
        "b = 32 %.1fx, b = 64 %.1fx\n",
        threads[ti], threads[ti] > 1 ? "s" : "", s.med, s.min, s.max, rate, gf, 100.0 * gf / R.peak[ti],
        (double)(B * T) / R.run[0][ti][0].med / rate, (double)(B * T) / R.run[1][ti][0].med / rate,
        (double)(B * T) / R.run[2][ti][0].med / rate);
  }
  printf("  b = 64 fed one token per call (streaming inference, 1 thread): %.0f tokens/s; its outputs against one\n"
         "  call over the sequence: max |diff| %.3g, relative to max |out| %.3g: %.2g %s\n",
         R.stream_rate, R.stream_diff, R.stream_scale, R.stream_diff / R.stream_scale,
         R.stream_diff <= 1e-4 * R.stream_scale ? "(ok)" : "(LARGER THAN 1e-4)");

  printf("\nwhere the time goes: the stages of one forward + backward, from the layer's stage timers\n"
         "(titans_mem_ctx.stage_seconds; median of 3 runs); under each time its share of the total and the\n"
         "GFLOP/s of that stage's matrix products\n");
  printf("%4s %4s %14s %14s %14s | %14s %14s %14s\n", "b", "thr", "inputs", "recur", "output", "out bwd",
         "recur bwd", "in bwd");
  for (int k = 0; k < R.nparts; k++) {
    double total = 0;
    for (int p = 0; p < BENCH_PARTS; p++) total += R.part_med[k][p];
    printf("%4d %4d", R.part_b[k], R.part_thr[k]);
    for (int p = 0; p < BENCH_PARTS; p++) printf(" %s%13.3fs", p == 3 ? "| " : "", R.part_med[k][p]);
    printf("\n%9s", "");
    for (int p = 0; p < BENCH_PARTS; p++)
      printf(" %s%6.1f%% %5.1fGF", p == 3 ? "| " : "", 100.0 * R.part_med[k][p] / total,
             R.part_flops[k][p] / R.part_med[k][p] * 1e-9);
    printf("\n");
  }

  printf("\none chunk of one head on 1 thread: its time inside the layer (the recurrence stages above at 1 thread,\n"
         "per chunk and head, which includes the loop over chunks) against its matrix products replayed alone\n"
         "(titans_gemm at the chunk's shapes, best of 7 windows); the rest is the elementwise work (SiLU and its\n"
         "derivatives, the surprise bound, coefficients), copies and scalings\n");
  printf("%4s %-8s %9s %9s %6s %9s %6s %9s %9s %7s\n", "b", "pass", "chunk us", "gemm us", "share", "rest us", "share",
         "chunk GF", "gemm GF", "% peak");
  for (int ci = 0; ci < 3; ci++) {
    const anatomy *a = &R.anat[ci];
    for (int pass = 0; pass < 2; pass++) {
      double whole = pass ? a->bwd : a->fwd, g = pass ? a->gemm_bwd : a->gemm_fwd;
      double rest = whole - g, fl = R.chunk_flops[ci][pass];
      printf("%4d %-8s %9.1f %9.1f %5.0f%% %9.1f %5.0f%% %9.1f %9.1f %6.1f%%\n", chunks[ci],
             pass ? "backward" : "forward", whole * 1e6, g * 1e6, 100 * g / whole, rest * 1e6, 100 * rest / whole,
             fl / whole * 1e-9, fl / g * 1e-9, 100 * fl / g * 1e-9 / R.peak[0]);
    }
  }
#ifndef BENCH_ONE_ONLY
  delta_rule_report(delta_rows, B, 512, 3);
#endif
  if (long_tokens > 0) {
    printf("\nlong inference stream (1 thread, batch 1, b = 16, %zu tokens per call, %zu tokens, %.0f s): the state\n"
           "saved at 1K and the state at the end each fed one call in turns, 9 rounds; medians [min, max]\n",
           LS.block, LS.tokens, LS.seconds);
    printf("  per token at 1K %.2f us [%.2f, %.2f], at %zu %.2f us [%.2f, %.2f]: ratio %.3f (goal <= 1.02) %s\n",
           LS.early * 1e6, LS.early_lo * 1e6, LS.early_hi * 1e6, LS.tokens, LS.late * 1e6, LS.late_lo * 1e6,
           LS.late_hi * 1e6, LS.ratio, LS.ratio <= 1.02 ? "(met)" : "(NOT met)");
    printf("  subnormal floats of the memory state (W, S): %.1f%% at 1K, %.1f%% at the end (flushed at chunk ends);\n"
           "  RSS %.1f MB at 1K, %.1f MB at the end\n",
           100 * LS.sub_early, 100 * LS.sub_late, LS.rss_early, LS.rss_late);
  }
  double load1 = load_average();
  if (load1 >= 0) printf("\nload average at the end %.2f\n", load1);
  printf("bench_memory: done in %.0f s\n", now_sec() - start);
  return 0;
}
