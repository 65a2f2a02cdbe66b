/* Fixtures shared by the model-level tests (test_model.c, test_stream.c, test_reduce.c): token streams,
   weights larger than the default init, a tiny configuration. Include after titans.h. */
#ifndef TITANS_TEST_MODEL_FIXTURES_H
#define TITANS_TEST_MODEL_FIXTURES_H
#include <string.h>

/* t [n]: tokens uniform in [0, V), deterministic by seed */
static void random_tokens(int *t, size_t n, int V, uint64_t seed) {
  titans_rng r;
  titans_rng_seed(&r, seed);
  for (size_t i = 0; i < n; i++) t[i] = (int)(titans_rng_u64(&r) % (uint64_t)V);
}

/* Larger weights than the default init, so that every path carries a gradient well above float noise. */
static void lively_weights(titans_model *m, uint64_t seed) {
  titans_model_init_weights(m, seed);
  titans_rng r;
  titans_rng_seed(&r, seed + 1);
  for (size_t p = 0; p < m->n_params; p++) {
    titans_param *pp = &m->plist[p];
    float *x = m->params + pp->offset;
    if (pp->kind == TITANS_PARAM_MATRIX && strstr(pp->name, "w0.") == NULL && strstr(pp->name, "conv_") == NULL)
      for (size_t j = 0; j < pp->size; j++) x[j] = 0.3f * titans_rng_normal(&r);
    if (pp->kind == TITANS_PARAM_GAIN || pp->kind == TITANS_PARAM_TOKENS)
      for (size_t j = 0; j < pp->size; j++) x[j] += 0.2f * titans_rng_normal(&r);
  }
}

/* What the MAC of a test's tiny_config learns from (titans_mac_learns_from): test_model and test_stream
   run MAC's checks once with each. */
static int tiny_mac_learns_from = TITANS_MAC_LEARNS_ATTN_OUTPUT;
/* 1: the memories of a test's tiny_config have the write gate that reads the key (cfg.mem.gate_key) */
static int tiny_gate_key = 0;
/* 1: their queries and keys skip the SiLU (cfg.mem.qk_linear) */
static int tiny_qk_linear = 0;
/* 1: they are matrix memories (depth 1, no surprise bound) whose tokens' inner gradients are taken at the
   weights before each (cfg.mem.per_token_grad), chunks of 2 computed as chunks of 1 */
static int tiny_per_token = 0;
/* 1: they are least-squares memories (cfg.mem.least_squares: depth 1, no momentum, no forgetting, no bound);
   2: the same whose fit's confidence decays by alpha_t (no_forget 0) */
static int tiny_least_squares = 0;

/* The memory options above, set on c. */
static inline void tiny_memory_options(titans_config *c) {
  c->mem.gate_key = tiny_gate_key;
  c->mem.qk_linear = tiny_qk_linear;
  if (tiny_per_token) {
    c->mem.depth = 1;
    c->mem.surprise_bound = 0.0f;
    c->mem.per_token_grad = 1;
  }
  if (tiny_least_squares) {
    titans_mem_config_use_least_squares(&c->mem);
    c->mem.theta_max = 4.0f;
    c->mem.no_forget = tiny_least_squares == 1;
  }
}

/* Tiny, every option on (test_stream, test_reduce): persistent tokens, a window shorter than a stream
   window, a 2-layer memory with conv, chunks of 2 and segments of 4 (windows are multiples of 4). */
static inline titans_config tiny_stream_config(int kind) {
  titans_config c = titans_config_default(kind, 13, 8, 2);
  c.attn_heads = 2;
  c.ffn_hidden = 12;
  c.window = 3;
  c.segment = 4;
  c.n_persist = kind == TITANS_BLOCK_LMM ? 0 : 2;
  c.mem.heads = 2;
  c.mem.head_dim = 4;
  c.mem.depth = 2;
  c.mem.hidden_mult = 2;
  c.mem.chunk = 2;
  c.mem.conv_width = 3;
  c.mem.theta_max = 0.1f;
  if (kind == TITANS_BLOCK_LM2) c.lm2_slots = 3;
  if (kind == TITANS_BLOCK_MAC) c.mac_learns_from = tiny_mac_learns_from;
  tiny_memory_options(&c);
  return c;
}

/* The kind's name in the checks' messages, with what its memory learns from when not the paper's y
   (MAC) and whether its write gate reads the key. */
static const char *kind_label(int kind) {
  static char label[128];
  int from_x = kind == TITANS_BLOCK_MAC && tiny_mac_learns_from == TITANS_MAC_LEARNS_INPUT;
  snprintf(label, sizeof label, "%s%s%s%s%s%s", titans_block_name(kind), from_x ? " (memory learns from X)" : "",
           tiny_gate_key ? " (write gate reads the key)" : "", tiny_per_token ? " (per-token gradients)" : "",
           tiny_qk_linear ? " (q, k without SiLU)" : "", tiny_least_squares ? " (least squares)" : "");
  return label;
}

#endif
