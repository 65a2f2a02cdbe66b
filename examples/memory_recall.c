/* memory_recall: how many key -> value associations a neural memory holds, as a function of its depth.

     make memory_recall && ./memory_recall

   Uses only the standalone memory API of titans.h (titans_mem_state_init, titans_mem_weights_bind,
   titans_mem_state_reset, titans_mem_write, titans_mem_read). For N = 8 .. 256 it stores N random
   unit-norm keys -> random unit-norm values in one head of width d_h = 32, reads them back with the
   keys and prints two measures of recall: the mean cosine similarity between what was read and what
   was stored, and the fraction of keys whose read-out is nearer (by cosine) to its own value than to
   any of the other N - 1 stored values. A matrix memory (depth 1, 32 x 32 weights) can hold at most
   d_h = 32 associations exactly; a deeper memory has more weights and a nonlinearity.

   The comparison is made fair this way, for every depth alike:
   - the same pairs, written in the same number of passes (P calls of titans_mem_write over all N pairs,
     each pass in a fresh random order, the same orders for every depth), chunks of CHUNK pairs (the
     inner gradients of a chunk are taken at its start, as in the layer). Two tables: P = 1 (each pair
     written once, as the layer writes its tokens) and P = 32;
   - plain gradient descent on ||M(k) - v||^2: momentum eta = 0 and forgetting alpha = 0 (nothing is
     meant to be forgotten);
   - the inner learning rate theta is tuned per depth and per N on the grid THETAS, and the best (by
     mean cosine; within 1e-4, by squared error, since the cosine ignores scale) is printed with its
     result;
   - the memory starts empty for every depth: the last layer's initial weights are zero, so M(k) = 0
     before any write. Earlier layers start random with unit-variance pre-activations for unit-norm
     keys (first layer N(0, 1), later ones N(0, 2 / n_in)). (titans_mem_weights_init draws N(0, 1 / n_in),
     meant for inputs of unit-variance components; with unit-norm keys that would give pre-activations
     of standard deviation 1 / sqrt(d_h) = 0.18, where SiLU is almost linear and a deep memory starts
     as little more than a matrix: depth 3 at N = 256, P = 32 then recalls 46% instead of 100%.)
   It runs in about a second. */
#define TITANS_IMPLEMENTATION
#include "titans.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DH 32          /* head width d_h */
#define HIDDEN_MULT 4  /* inner width n_hid = 4 d_h = 128 for depth >= 2 */
#define CHUNK 8        /* pairs per chunk of a write */
#define MAX_PASSES 32  /* writes of all N pairs: tables for 1 pass (as the layer writes) and 32 */
#define MAX_DEPTH 3
#define MAX_N 256
#define SEED 20250101u

static const int sizes[] = {8, 16, 32, 64, 128, 256};
static const float THETAS[] = {0.001f, 0.002f, 0.005f, 0.01f, 0.02f, 0.05f, 0.1f, 0.2f, 0.5f, 1.0f};
#define NSIZES (int)(sizeof sizes / sizeof sizes[0])
#define NTHETAS (int)(sizeof THETAS / sizeof THETAS[0])

static void fail(const char *what, int rc, const char *msg) {
  fprintf(stderr, "memory_recall: %s: %s (%s)\n", what, msg, titans_status_string(rc));
  exit(1);
}

/* n random vectors of width d with unit norm */
static void random_unit(float *v, size_t n, size_t d, titans_rng *rng) {
  for (size_t i = 0; i < n; i++) {
    double s = 0.0;
    for (size_t j = 0; j < d; j++) {
      v[i * d + j] = titans_rng_normal(rng);
      s += (double)v[i * d + j] * v[i * d + j];
    }
    float inv = (float)(1.0 / sqrt(s));
    for (size_t j = 0; j < d; j++) v[i * d + j] *= inv;
  }
}

static double cosine(const float *a, const float *b, size_t d) {
  double ab = 0.0, aa = 0.0, bb = 0.0;
  for (size_t j = 0; j < d; j++) {
    ab += (double)a[j] * b[j];
    aa += (double)a[j] * a[j];
    bb += (double)b[j] * b[j];
  }
  return aa > 0.0 && bb > 0.0 ? ab / sqrt(aa * bb) : 0.0;
}

typedef struct recall {
  double cos, top1; /* mean cosine, fraction recalled as the nearest stored value */
  double err;       /* mean ||read - value||^2 (the values have unit norm) */
  float theta;
} recall;

/* One memory of the given depth: config, parameter slab (only w0 is used), state of one row. */
typedef struct memory {
  titans_mem_config cfg;
  titans_mem_weights w;
  float *params;
  titans_mem_state st;
} memory;

static void memory_init(memory *mem, int depth) {
  mem->cfg = titans_mem_config_default(DH); /* d is unused by direct access; any valid value */
  mem->cfg.heads = 1;
  mem->cfg.head_dim = DH;
  mem->cfg.depth = depth;
  mem->cfg.hidden_mult = HIDDEN_MULT;
  mem->cfg.chunk = CHUNK;
  mem->cfg.conv_width = 0;
  mem->cfg.residual = 0;
  mem->cfg.surprise_bound = 0.0f; /* the paper's unbounded step: the table measures what a memory holds */
  mem->params = titans_alloc_floats(titans_mem_param_count(&mem->cfg));
  if (!mem->params) fail("memory", TITANS_ERR_NOMEM, "cannot allocate the parameters");
  titans_mem_weights_bind(&mem->w, &mem->cfg, mem->params);
  /* initial weights w0.i [n_{i+1}, n_i]: see the header comment */
  titans_rng rng;
  titans_rng_seed(&rng, SEED + (uint64_t)depth);
  for (int i = 0; i < depth; i++) {
    size_t n_in = i == 0 ? DH : (size_t)DH * HIDDEN_MULT, n_out = i == depth - 1 ? DH : (size_t)DH * HIDDEN_MULT;
    float std = i == depth - 1 ? 0.0f : i == 0 ? 1.0f : sqrtf(2.0f / (float)n_in);
    for (size_t j = 0; j < n_in * n_out; j++) mem->w.w0[i][j] = std * titans_rng_normal(&rng);
  }
  int rc = titans_mem_state_init(&mem->st, &mem->cfg, 1);
  if (rc != TITANS_OK) fail("state", rc, mem->st.error);
}

static void memory_free(memory *mem) {
  titans_mem_state_free(&mem->st);
  titans_free(mem->params);
}

/* The work space of run(), allocated once for the largest N. */
typedef struct run_buffers {
  float *kbuf, *vbuf; /* [MAX_N, DH] the keys and values of one pass, in its order */
  float *gates;       /* [MAX_N] theta for every token */
  float *out;         /* [MAX_N, DH] what the reads return */
} run_buffers;

/* Writes the n pairs `passes` times (orders[p] is the order of pass p), reads back, scores. */
static recall run(memory *mem, const float *keys, const float *values, size_t n, const size_t *orders, int passes,
                  float theta, const run_buffers *buf) {
  float *kbuf = buf->kbuf, *vbuf = buf->vbuf, *gates = buf->gates, *out = buf->out;
  recall r;
  r.theta = theta;
  titans_mem_state_reset(&mem->st, &mem->w);
  for (size_t t = 0; t < n; t++) gates[t] = theta;
  for (int p = 0; p < passes; p++) {
    const size_t *ord = orders + (size_t)p * MAX_N;
    for (size_t t = 0; t < n; t++) {
      memcpy(kbuf + t * DH, keys + ord[t] * DH, DH * sizeof(float));
      memcpy(vbuf + t * DH, values + ord[t] * DH, DH * sizeof(float));
    }
    /* eta = alpha = NULL: no momentum, no forgetting */
    int rc = titans_mem_write(&mem->st, 0, 0, kbuf, vbuf, gates, NULL, NULL, n);
    if (rc != TITANS_OK) fail("write", rc, mem->st.error);
  }
  int rc = titans_mem_read(&mem->st, 0, 0, out, keys, n);
  if (rc != TITANS_OK) fail("read", rc, mem->st.error);
  double cs = 0.0, hits = 0.0, err = 0.0;
  for (size_t i = 0; i < n; i++) {
    double own = cosine(out + i * DH, values + i * DH, DH);
    for (size_t j = 0; j < DH; j++) {
      double e = (double)out[i * DH + j] - values[i * DH + j];
      err += e * e;
    }
    int nearest = isfinite(own);
    for (size_t j = 0; j < n && nearest; j++)
      if (j != i && cosine(out + i * DH, values + j * DH, DH) >= own) nearest = 0;
    cs += isfinite(own) ? own : -1.0; /* a diverged write scores -1 */
    hits += nearest;
  }
  r.cos = cs / (double)n;
  r.top1 = hits / (double)n;
  r.err = isfinite(err) ? err / (double)n : INFINITY;
  return r;
}

int main(void) {
  clock_t start = clock();
  titans_rng rng;
  titans_rng_seed(&rng, SEED);
  float *keys = titans_alloc_floats(MAX_N * DH), *values = titans_alloc_floats(MAX_N * DH);
  float *kbuf = titans_alloc_floats(MAX_N * DH), *vbuf = titans_alloc_floats(MAX_N * DH);
  float *out = titans_alloc_floats(MAX_N * DH), *gates = titans_alloc_floats(MAX_N);
  size_t *orders = (size_t *)titans_alloc_bytes((size_t)MAX_PASSES * MAX_N, sizeof(size_t));
  if (!keys || !values || !kbuf || !vbuf || !out || !gates || !orders)
    fail("buffers", TITANS_ERR_NOMEM, "out of memory");

  const run_buffers buf = {kbuf, vbuf, gates, out};
  memory mems[MAX_DEPTH];
  for (int L = 1; L <= MAX_DEPTH; L++) memory_init(&mems[L - 1], L);

  printf("memory_recall: N random unit-norm keys -> random unit-norm values in one memory head, d_h = %d,\n"
         "written P times each (a fresh random order per pass, chunks of %d, no momentum, no forgetting), then\n"
         "read back with the keys. cos: mean cosine(read, stored value); top1: fraction whose read-out is\n"
         "nearest to its own value among the N stored; theta: the best inner learning rate of the grid\n",
         DH, CHUNK);
  for (int i = 0; i < NTHETAS; i++) printf("%s%g", i ? ", " : "{", (double)THETAS[i]);
  printf("} for that depth and N (by mean cosine, ties by squared error).\nweights per head:");
  for (int L = 1; L <= MAX_DEPTH; L++)
    printf(" depth %d: %zu%s", L, mems[L - 1].st.head_size, L == 1 ? " (matrix)," : L < MAX_DEPTH ? "," : "\n");

  static const int pass_counts[2] = {1, MAX_PASSES};
  for (int pi = 0; pi < 2; pi++) {
    int passes = pass_counts[pi];
    titans_rng_seed(&rng, SEED); /* the same pairs and orders in both tables */
    printf("\nP = %d pass%s\n%5s", passes, passes > 1 ? "es" : " (each pair written once)", "N");
    for (int L = 1; L <= MAX_DEPTH; L++) /* padded to the 22 columns of the figures below, but the last */
      printf(" | depth %d%s%*s", L, L == 1 ? " (matrix)" : "", L < MAX_DEPTH ? (L == 1 ? 6 : 15) : 0, "");
    printf("\n%5s", "");
    for (int L = 1; L <= MAX_DEPTH; L++) printf(" | %6s %6s %8s", "cos", "top1", "theta");
    printf("\n");
    for (int si = 0; si < NSIZES; si++) {
      size_t n = (size_t)sizes[si];
      random_unit(keys, n, DH, &rng);
      random_unit(values, n, DH, &rng);
      for (int p = 0; p < MAX_PASSES; p++) { /* Fisher-Yates */
        size_t *ord = orders + (size_t)p * MAX_N;
        for (size_t i = 0; i < n; i++) ord[i] = i;
        for (size_t i = n; i-- > 1;) {
          size_t j = (size_t)(titans_rng_u64(&rng) % (i + 1)), t = ord[i];
          ord[i] = ord[j];
          ord[j] = t;
        }
      }
      printf("%5zu", n);
      for (int L = 1; L <= MAX_DEPTH; L++) {
        recall best;
        best.cos = -2.0;
        best.top1 = 0.0;
        best.theta = 0.0f;
        best.err = INFINITY;
        for (int ti = 0; ti < NTHETAS; ti++) {
          recall r = run(&mems[L - 1], keys, values, n, orders, passes, THETAS[ti], &buf);
          /* the cosine ignores scale, so several theta can tie on it (e.g. one chunk written once from
             an empty memory); then the smaller squared error decides */
          if (r.cos > best.cos + 1e-4 || (r.cos >= best.cos - 1e-4 && r.err < best.err)) best = r;
        }
        printf(" | %6.3f %5.0f%% %8g", best.cos, 100.0 * best.top1, (double)best.theta);
      }
      printf("\n");
      fflush(stdout);
    }
  }
  printf("\n(%.1f s of CPU)\n", (double)(clock() - start) / CLOCKS_PER_SEC);
  for (int L = 1; L <= MAX_DEPTH; L++) memory_free(&mems[L - 1]);
  titans_free(keys);
  titans_free(values);
  titans_free(kbuf);
  titans_free(vbuf);
  titans_free(out);
  titans_free(gates);
  titans_free(orders);
  return 0;
}
