/* readme_memory: the memory layer's API as docs/memory_api.md shows it. Its two memory snippets are
   excerpts of this file (tests/test_readme.sh checks that they appear here verbatim); `make check`
   compiles and runs it. Prints what it measured and exits 1 when a call fails or the recall is poor. */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* n random unit vectors of width 32 into v [n, 32] */
static void random_unit_vectors(float *v, size_t n, titans_rng *rng) {
  for (size_t i = 0; i < n; i++) {
    double sq = 0;
    for (size_t j = 0; j < 32; j++) v[i * 32 + j] = titans_rng_normal(rng);
    for (size_t j = 0; j < 32; j++) sq += (double)v[i * 32 + j] * v[i * 32 + j];
    for (size_t j = 0; j < 32; j++) v[i * 32 + j] /= (float)sqrt(sq);
  }
}

/* 16 pairs written 32 times, read back: returns 0 when the total squared error is below 0.01. */
static int direct_access(void) {
  enum { n = 16 };
  static float keys[n * 32], values[n * 32], out[n * 32], theta[n]; /* [n, 32], [n, 32], [n, 32], [n] */
  titans_rng data_rng;
  titans_rng_seed(&data_rng, 7);
  random_unit_vectors(keys, n, &data_rng);
  random_unit_vectors(values, n, &data_rng);
  for (size_t i = 0; i < n; i++) theta[i] = 0.2f;

/* one head of width 32, a 2-layer MLP memory (32 -> 128 -> 32) */
titans_mem_config cfg = titans_mem_config_default(32);
cfg.heads = 1;
cfg.head_dim = 32;
cfg.depth = 2;      /* 1 = a matrix memory */
cfg.chunk = 8;      /* the inner gradients of each 8 pairs are taken at their chunk's start */
cfg.conv_width = 0; /* unused by direct access */

/* the layer's parameter slab; direct access reads only w0, the initial memory weights */
float *params = titans_alloc_floats(titans_mem_param_count(&cfg));
if (!params) return 1;
titans_mem_weights w;
titans_mem_weights_bind(&w, &cfg, params);
titans_rng rng;
titans_rng_seed(&rng, 1);
titans_mem_weights_init(&w, &cfg, &rng, 1); /* or fill w.w0[0 .. depth-1] yourself */

titans_mem_state st;
if (titans_mem_state_init(&st, &cfg, 1) != TITANS_OK) {
  fprintf(stderr, "%s\n", st.error);
  titans_free(params);
  return 1;
}
titans_mem_state_reset(&st, &w); /* W = w0, S = 0 */

/* keys, values [n, 32]; theta [n] the inner learning rate of each pair; 32 passes over the pairs */
int rc = TITANS_OK;
for (int pass = 0; pass < 32 && rc == TITANS_OK; pass++)
  rc = titans_mem_write(&st, 0, 0, keys, values, theta, NULL, NULL, n); /* row 0, head 0; eta, alpha
                                                                           NULL: no momentum, no forgetting */
if (rc == TITANS_OK) rc = titans_mem_read(&st, 0, 0, out, keys, n);     /* out [n, 32] = M(keys) */
if (rc != TITANS_OK) fprintf(stderr, "%s\n", st.error);

titans_mem_state_free(&st);
titans_free(params);

  double err = 0;
  for (size_t i = 0; i < n * 32; i++) err += (double)(out[i] - values[i]) * (out[i] - values[i]);
  printf("direct access: 16 pairs written 32 times, read back with a total squared error of %.2g (of 16)\n", err);
  return rc != TITANS_OK || !(err < 0.01);
}

/* A sequence through the layer, then streaming, save / restore / fork and a training forward + backward:
   returns 0 when every call succeeds and the restored state continues as the saved one did. */
static int layer_sequence(void) {
  enum { B = 2, T = 32, d = 256 };
  static float x[B * T * d], out[B * T * d], x1[B * d], out1[B * d], out2[B * d]; /* [B, T, d], [B, 1, d] */
  static float dx[B * T * d], dout[B * T * d];                                      /* [B, T, d] */
  titans_rng rng;
  titans_rng_seed(&rng, 3);
  for (size_t i = 0; i < (size_t)B * T * d; i++) x[i] = titans_rng_normal(&rng), dout[i] = titans_rng_normal(&rng);
  for (size_t i = 0; i < (size_t)B * d; i++) x1[i] = titans_rng_normal(&rng);

titans_mem_config cfg = titans_mem_config_default(256); /* H = 4, d_h = 64, L_M = 2, b = 16, K_c = 4 */
float *params = titans_alloc_floats(titans_mem_param_count(&cfg));
float *grad_slab = titans_alloc_floats(titans_mem_param_count(&cfg)); /* zeroed: the backward accumulates */
if (!params || !grad_slab) return 1;
titans_mem_weights w, grad;
titans_mem_weights_bind(&w, &cfg, params);
titans_mem_weights_bind(&grad, &cfg, grad_slab);
titans_mem_weights_init(&w, &cfg, &rng, 1);

titans_mem_state st, fork;
titans_mem_ctx ctx;
titans_mem_ctx_init(&ctx);
int rc = titans_mem_state_init(&st, &cfg, B);            /* B rows (sequences) */
if (rc == TITANS_OK) rc = titans_mem_state_init(&fork, &cfg, B);
if (rc != TITANS_OK) return 1;
titans_mem_state_reset(&st, &w);

/* a whole sequence: x, out [B, T, d]; ctx = NULL for inference */
rc = titans_mem_forward(&cfg, &w, &st, out, x, T, NULL);

/* streaming: the state moves on; the next call continues where this one stopped, with any number of
   tokens (one token per call gives the outputs of one call over the whole sequence) */
if (rc == TITANS_OK) rc = titans_mem_forward(&cfg, &w, &st, out1, x1, 1, NULL); /* x1, out1 [B, 1, d] */

/* save / restore (a flat float buffer, the position included) and fork */
size_t n = titans_mem_state_floats(&st);
float *buf = titans_alloc_floats(n);
if (!buf) rc = TITANS_ERR_NOMEM;
if (rc == TITANS_OK) titans_mem_state_save(&st, buf);
if (rc == TITANS_OK) rc = titans_mem_state_load(&st, buf, n); /* TITANS_ERR_FORMAT if buf does not fit */
if (rc == TITANS_OK) rc = titans_mem_state_copy(&fork, &st);  /* same config and batch */

/* training: a forward that saves its activations, then the backward (accumulates into grad) */
titans_mem_state_reset(&st, &w);
if (rc == TITANS_OK) rc = titans_mem_forward(&cfg, &w, &st, out, x, T, &ctx);
if (rc == TITANS_OK) rc = titans_mem_backward(&cfg, &w, &grad, dx, dout, x, &ctx, 1); /* 1: from w0 */
if (rc != TITANS_OK) fprintf(stderr, "%s%s\n", st.error, ctx.error);

  /* the fork holds the state saved after T + 1 tokens: reloading it into st continues as the fork does */
  int same = rc == TITANS_OK && titans_mem_state_load(&st, buf, n) == TITANS_OK &&
             titans_mem_forward(&cfg, &w, &st, out1, x1, 1, NULL) == TITANS_OK &&
             titans_mem_forward(&cfg, &w, &fork, out2, x1, 1, NULL) == TITANS_OK;
  for (size_t i = 0; same && i < (size_t)B * d; i++) same = out1[i] == out2[i];
  double gsq = 0;
  for (size_t i = 0; i < titans_mem_param_count(&cfg); i++) gsq += (double)grad_slab[i] * grad_slab[i];
  printf("layer: %d x %d tokens, streamed, saved (%zu floats), restored and forked (%s); gradient norm %.4g\n", B, T,
         n, same ? "the same next outputs" : "DIFFERENT next outputs", sqrt(gsq));

titans_mem_ctx_free(&ctx);
titans_mem_state_free(&fork);
titans_mem_state_free(&st);
titans_free(buf);
titans_free(grad_slab);
titans_free(params);
  return rc != TITANS_OK || !same || !(gsq > 0);
}

int main(void) {
  int failed = direct_access();
  failed |= layer_sequence();
  return failed;
}
