/* mqar.h: the multi-query associative recall task (MQAR) of Zoology (Arora et al., "Zoology: Measuring and
   Improving Recall in Efficient Language Models", 2023), as a pure function of (seed, split, example index),
   for any vocabulary. Used by examples/mqar.c and tests/test_mqar.c. docs/mqar.md describes the task, the
   choices where Zoology's generator leaves room, and the results.

   An example of length L with K pairs, vocabulary V:
     positions 0 .. 2K-1    k_1 v_1 k_2 v_2 ... k_K v_K: keys drawn from [1, V/2) and values from [V/2, V),
                            each without replacement; no target there.
     positions 2K .. L-1    the queries: key k_i again at position 2K + 2 g_i, the gaps g_i (0-based, in
                            [0, (L - 2K) / 2)) drawn without replacement with p(g) proportional to
                            (g + 1)^(alpha - 1), alpha = 0.01 (most queries come soon after the context,
                            a few far). The target at that position is v_i (the next token); the input at
                            the position after it is filler, not v_i. Every other position is filler
                            with no target.
   Filler is token 0, or (random_filler) a token uniform in [0, V). Targets < 0 mean "no target", as in
   titans_train_step_targets.

   Beyond Zoology, at long range (spread = D > 0; issue 39's item 4): the first part [0, P) with
   P = (L - D) / 2 rounded down to even holds the K pairs in K of its P / 2 two-token slots drawn at random,
   filler between them; the queries take K of the two-token slots of [P + D, L) drawn at random, in a random
   order of the keys. Every query is then more than D positions after every pair: a model whose attention
   reaches D tokens or fewer back (a window w in each of n layers reaches n (w - 1)) can answer only from
   a memory. The gaps are uniform, not Zoology's power law. */
#ifndef TITANS_MQAR_H
#define TITANS_MQAR_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mqar_config {
  int vocab;         /* V >= 4 */
  int seq_len;       /* L */
  int n_pairs;       /* K: 2K <= L, K <= (L - 2K) / 2, K < V/2 - 1 keys and K <= V/2 values */
  double alpha;      /* power-law exponent of the gaps (Zoology: 0.01) */
  int random_filler; /* 0: filler token 0; 1: filler uniform in [0, V) */
  int spread;        /* 0: Zoology's layout; D > 0: pairs spread through [0, P), queries through [P + D, L) */
} mqar_config;

/* Zoology's first setting: V 8192, L 64, K 4, alpha 0.01, filler 0. */
static inline mqar_config mqar_config_default(void) {
  mqar_config c = {8192, 64, 4, 0.01, 0, 0};
  return c;
}

/* The spread layout's first part [0, P) (pairs) and where its queries start, P + D. */
static inline int mqar_spread_pairs_end(const mqar_config *c) { return ((c->seq_len - c->spread) / 2) & ~1; }
static inline int mqar_spread_queries_start(const mqar_config *c) { return mqar_spread_pairs_end(c) + c->spread; }

/* 0, or -1 with the reason in err (n bytes). */
static inline int mqar_check(const mqar_config *c, char *err, size_t n) {
  const char *why = NULL;
  if (c->vocab < 4)
    why = "the vocabulary must hold at least 4 tokens";
  else if (c->n_pairs < 1)
    why = "at least one key-value pair";
  else if (c->spread < 0 || c->spread > c->seq_len)
    why = "the spread D must be in [0, L]";
  else if (!c->spread && c->seq_len < 4 * c->n_pairs)
    why = "L must be at least 4 K (K pairs, then room for K queries two apart)";
  else if (c->spread && (mqar_spread_pairs_end(c) / 2 < c->n_pairs ||
                         (c->seq_len - mqar_spread_queries_start(c)) / 2 < c->n_pairs))
    why = "spread: L - D must be at least 4 K (K two-token slots before the gap of D, K after it)";
  else if (c->n_pairs > c->vocab / 2 - 1)
    why = "K must be at most V/2 - 1 (the keys are distinct tokens of [1, V/2))";
  else if (!(c->alpha > 0.0) || !isfinite(c->alpha))
    why = "alpha must be a positive number";
  if (why && err) snprintf(err, n, "mqar: V %d, L %d, K %d: %s", c->vocab, c->seq_len, c->n_pairs, why);
  return why ? -1 : 0;
}

/* A small generator (splitmix64): every example has its own stream, so examples are independent of the
   order they are made in. */
typedef struct mqar_rng {
  uint64_t state;
} mqar_rng;

static inline uint64_t mqar_rng_next(mqar_rng *r) {
  uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* uniform in [0, n), n > 0 (the modulo bias is below 2^-40 for the sizes used here) */
static inline uint64_t mqar_rng_below(mqar_rng *r, uint64_t n) { return mqar_rng_next(r) % n; }

/* uniform in (0, 1) */
static inline double mqar_rng_open01(mqar_rng *r) {
  return ((double)(mqar_rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
}

/* The stream of example `index` of split `split` (0: training, 1: held out) under seed. */
static inline mqar_rng mqar_example_rng(uint64_t seed, uint64_t split, uint64_t index) {
  mqar_rng r = {seed};
  r.state = mqar_rng_next(&r) ^ (split * 0xD1B54A32D192ED03ull);
  r.state = mqar_rng_next(&r) ^ index;
  mqar_rng_next(&r);
  return r;
}

/* out [count]: count distinct values of [lo, hi), in the order drawn (a partial Fisher-Yates over a pool
   [hi - lo] the caller provides). */
static inline void mqar_draw_distinct(int *out, int count, int lo, int hi, int *pool, mqar_rng *r) {
  int n = hi - lo;
  for (int i = 0; i < n; i++) pool[i] = lo + i;
  for (int i = 0; i < count; i++) {
    int j = i + (int)mqar_rng_below(r, (uint64_t)(n - i));
    int tmp = pool[i];
    pool[i] = pool[j];
    pool[j] = tmp;
    out[i] = pool[i];
  }
}

typedef struct mqar_scored {
  double key;
  int gap;
} mqar_scored;

/* descending by key */
static inline int mqar_scored_cmp(const void *a, const void *b) {
  double x = ((const mqar_scored *)a)->key, y = ((const mqar_scored *)b)->key;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* gaps [count] drawn without replacement from [0, space) with weights (g + 1)^(alpha - 1): Efraimidis and
   Spirakis' keys log(u) / w, the count largest (the same law as drawing one at a time and renormalising).
   scratch [space]. */
static inline void mqar_draw_gaps(int *gaps, int count, int space, double alpha, mqar_scored *scratch, mqar_rng *r) {
  for (int g = 0; g < space; g++) {
    double weight = pow((double)(g + 1), alpha - 1.0);
    scratch[g].key = log(mqar_rng_open01(r)) / weight;
    scratch[g].gap = g;
  }
  qsort(scratch, (size_t)space, sizeof *scratch, mqar_scored_cmp);
  for (int i = 0; i < count; i++) gaps[i] = scratch[i].gap;
}

/* Example `index` of split `split` under seed: inputs [L] token ids in [0, V), targets [L] (the value at
   each query, -1 elsewhere). Returns 0, or -1 for a configuration mqar_check refuses or no memory. */
static inline int mqar_example(const mqar_config *c, uint64_t seed, uint64_t split, uint64_t index, int *inputs,
                               int *targets) {
  if (mqar_check(c, NULL, 0)) return -1;
  int V = c->vocab, L = c->seq_len, K = c->n_pairs, half = V / 2, space = (L - 2 * K) / 2;
  int pair_slots = c->spread ? mqar_spread_pairs_end(c) / 2 : K, query_from = mqar_spread_queries_start(c);
  int query_slots = c->spread ? (L - query_from) / 2 : 0;
  int slots = pair_slots > query_slots ? pair_slots : query_slots, pool_n = V - half > slots ? V - half : slots;
  int *keys = (int *)malloc((size_t)K * sizeof(int));                               /* [K] */
  int *values = (int *)malloc((size_t)K * sizeof(int));                             /* [K] */
  int *gaps = (int *)malloc((size_t)K * sizeof(int));                               /* [K] query slots */
  int *at = (int *)malloc((size_t)K * sizeof(int));                                 /* [K] pair slots */
  int *pool = (int *)malloc((size_t)pool_n * sizeof(int));                          /* [max(V - V/2, slots)] */
  mqar_scored *scored = (mqar_scored *)malloc((size_t)space * sizeof(mqar_scored)); /* [space] */
  int rc = keys && values && gaps && at && pool && scored ? 0 : -1;
  if (!rc) {
    mqar_rng r = mqar_example_rng(seed, split, index);
    mqar_draw_distinct(keys, K, 1, half, pool, &r);
    mqar_draw_distinct(values, K, half, V, pool, &r);
    if (c->spread) {
      mqar_draw_distinct(at, K, 0, pair_slots, pool, &r);    /* pair i at 2 at[i] */
      mqar_draw_distinct(gaps, K, 0, query_slots, pool, &r); /* its query at query_from + 2 gaps[i] */
    } else {
      for (int i = 0; i < K; i++) at[i] = i;
      mqar_draw_gaps(gaps, K, space, c->alpha, scored, &r);
    }
    int query_base = c->spread ? query_from : 2 * K;
    for (int t = 0; t < L; t++) {
      inputs[t] = c->random_filler ? (int)mqar_rng_below(&r, (uint64_t)V) : 0;
      targets[t] = -1;
    }
    for (int i = 0; i < K; i++) {
      inputs[2 * at[i]] = keys[i];
      inputs[2 * at[i] + 1] = values[i];
      int q = query_base + 2 * gaps[i];
      inputs[q] = keys[i];
      targets[q] = values[i];
    }
  }
  free(keys);
  free(values);
  free(gaps);
  free(at);
  free(pool);
  free(scored);
  return rc;
}

/* A batch of B examples index0 .. index0 + B - 1: inputs, targets [B, L]. Returns 0 or -1. */
static inline int mqar_batch(const mqar_config *c, uint64_t seed, uint64_t split, uint64_t index0, size_t B,
                             int *inputs, int *targets) {
  size_t L = (size_t)c->seq_len;
  for (size_t b = 0; b < B; b++)
    if (mqar_example(c, seed, split, index0 + b, inputs + b * L, targets + b * L)) return -1;
  return 0;
}

#endif
