/* Inference that cannot silently go wrong (issue 15), for every block kind:
   - an allocation-failure sweep over session set-up, feeding, reset, fork, save / load and sampling:
     every injected failure makes the call it hits return an error, every call that returns OK gives
     the outputs of a run without failures, and a session an error left half-updated refuses to go on;
   - NaN weights and a memory near the float range: titans_session_feed returns TITANS_ERR_NONFINITE
     naming the layer and position, the session refuses to feed or save until reset; sampling reports
     non-finite logits;
   - a huge window / max_context from a configuration: opening a session allocates within the
     documented bound, the KV caches grow by use, a hostile state file cannot make them grow;
   - the position limit 2^62: a session there saves, loads and refuses to go past it;
   - configurations whose memory head width is 0 are refused.
   The allocator is replaced (TITANS_MALLOC / TITANS_FREE) to inject failures and to
   measure what is allocated. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- a counting allocator that can refuse the n-th allocation ---------------------------------- */
#define TA_HDR sizeof(max_align_t) /* room for the size in front of each block, alignment kept */
static long long ta_countdown = -1;     /* refuse the allocation when this reaches 0; -1: never */
static int ta_injected;                 /* allocations refused so far */
static size_t ta_cur, ta_peak, ta_largest; /* bytes live, their peak, the largest single request */

static int ta_refuse(void) {
  if (ta_countdown < 0) return 0;
  if (ta_countdown-- > 0) return 0;
  ta_injected++;
  return 1;
}
static void ta_account(size_t add, size_t sub) {
  ta_cur = ta_cur + add - sub;
  if (ta_cur > ta_peak) ta_peak = ta_cur;
  if (add > ta_largest) ta_largest = add;
}
static void *ta_malloc(size_t n) {
  if (ta_refuse()) return NULL;
  unsigned char *p = (unsigned char *)malloc(n + TA_HDR);
  if (!p) return NULL;
  memcpy(p, &n, sizeof n);
  ta_account(n, 0);
  return p + TA_HDR;
}
static void ta_free(void *q) {
  if (!q) return;
  unsigned char *p = (unsigned char *)q - TA_HDR;
  size_t n;
  memcpy(&n, p, sizeof n);
  ta_account(0, n);
  free(p);
}
#define TITANS_MALLOC(n) ta_malloc(n)
#define TITANS_FREE(p) ta_free(p)
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "harness.h"
#ifdef _OPENMP
#include <omp.h>
#endif

static const int kinds[] = {TITANS_BLOCK_ATTN, TITANS_BLOCK_SWA, TITANS_BLOCK_MAC, TITANS_BLOCK_MAG, TITANS_BLOCK_MAL,
                            TITANS_BLOCK_LMM, TITANS_BLOCK_LM2};
#define NKINDS (int)(sizeof kinds / sizeof kinds[0])
#define V 13

/* Small, with caches that must grow past their first 16 slots within the sweep's 41 tokens. */
static titans_config small_config(int kind) {
  titans_config c = titans_config_default(kind, V, 8, 2);
  c.attn_heads = 2;
  c.ffn_hidden = 12;
  c.window = 40;
  c.segment = 32;
  c.max_context = 64;
  c.n_persist = kind == TITANS_BLOCK_LMM ? 0 : 2;
  c.tied = kind != TITANS_BLOCK_SWA;
  c.mem.heads = 2;
  c.mem.head_dim = 4;
  c.mem.depth = 2;
  c.mem.hidden_mult = 2;
  c.mem.chunk = 4;
  c.mem.conv_width = 3;
  c.mem.theta_max = 0.1f;
  return c;
}

static void tokens_of(int *t, size_t n, uint64_t seed) {
  titans_rng r;
  titans_rng_seed(&r, seed);
  for (size_t i = 0; i < n; i++) t[i] = (int)(titans_rng_u64(&r) % V);
}

/* ---- allocation-failure sweep ------------------------------------------------------------------ */

typedef struct sweep_out {
  float logits[5][V];
  int token;
} sweep_out;

typedef struct sweep_count {
  int failures, reported, unreported, wrong, not_refused;
} sweep_count;

/* One run of the scenario. Returns 1 when it ran to the end. With ref, every call that returns OK
   must give ref's outputs. A call during which an allocation was refused must return an error. */
static int sweep_run(const titans_model *m, sweep_out *out, const sweep_out *ref, sweep_count *cnt) {
  int toks[64];
  tokens_of(toks, 64, 5);
  titans_session a, b;
  int have_a = 0, have_b = 0, done = 0, reading = 0;
  titans_session *victim = NULL; /* the session the failed call was changing */
  titans_rng rng;
  titans_rng_seed(&rng, 9);
  titans_st_writer w;
  titans_st_reader r;
  unsigned char *bytes = NULL;
  size_t nbytes = 0;
  titans_st_writer_init(&w);
  memset(&r, 0, sizeof r);
#define STEP(sess, call, check)                                                                                      \
  do {                                                                                                               \
    int before_ = ta_injected, rc_ = (call);                                                                         \
    if (ta_injected != before_) {                                                                                    \
      cnt->failures++;                                                                                               \
      if (rc_ == TITANS_ERR_NOMEM) cnt->reported++;                                                                  \
      else cnt->unreported++;                                                                                        \
    }                                                                                                                \
    if (rc_ != TITANS_OK) {                                                                                          \
      victim = (sess);                                                                                               \
      goto end;                                                                                                      \
    }                                                                                                                \
    if (ref && !(check)) cnt->wrong++;                                                                               \
  } while (0)
#define SAME(i) (memcmp(out->logits[i], ref->logits[i], sizeof out->logits[i]) == 0)
  STEP(NULL, titans_session_init(&a, m), 1);
  have_a = 1;
  STEP(&a, titans_session_feed(&a, toks, 41, out->logits[0]), SAME(0));
  STEP(&a, titans_session_reset(&a), 1);
  STEP(&a, titans_session_feed(&a, toks, 20, out->logits[1]), SAME(1));
  STEP(NULL, titans_session_init(&b, m), 1);
  have_b = 1;
  STEP(&b, titans_session_copy(&b, &a), 1);
  STEP(&b, titans_session_feed(&b, toks + 20, 21, out->logits[2]), SAME(2));
  STEP(NULL, titans_sample_ex(out->logits[2], V, 0.8f, 5, 0.9f, &rng, &out->token), out->token == ref->token);
  STEP(NULL, titans_session_write(&b, &w), 1);
  STEP(NULL, titans_st_writer_to_memory(&w, &bytes, &nbytes), 1);
  STEP(NULL, titans_st_reader_parse(&r, bytes, nbytes), 1);
  /* a failed load resets the session (documented): it may go on, from position 0 */
  reading = 1;
  STEP(NULL, titans_session_read(&a, &r), 1);
  reading = 0;
  STEP(&a, titans_session_feed(&a, toks + 41, 3, out->logits[3]), SAME(3));
  STEP(&b, titans_session_feed(&b, toks + 41, 3, out->logits[4]), SAME(3) && SAME(4));
  done = 1;
end:
#undef STEP
#undef SAME
  ta_countdown = -1;
  /* a session an error left half-updated must not go on as if nothing happened */
  if (!done && victim) {
    int t = 1, rc = titans_session_feed(victim, &t, 1, NULL);
    if (rc != TITANS_ERR_STATE) cnt->not_refused++;
  }
  if (!done && reading && !(a.position == 0 || a.broken)) cnt->not_refused++;
  titans_st_reader_free(&r);
  titans_free(bytes);
  titans_st_writer_free(&w);
  if (have_b) titans_session_free(&b);
  if (have_a) titans_session_free(&a);
  return done;
}

static void test_alloc_sweep(int kind) {
  titans_config c = small_config(kind);
  titans_model m;
  if (titans_model_init(&m, &c)) {
    th_check(0, "%s: model init: %s", titans_block_name(kind), m.error);
    return;
  }
  titans_model_init_weights(&m, 3);
  sweep_out ref, out;
  sweep_count cnt;
  memset(&cnt, 0, sizeof cnt);
  memset(&ref, 0, sizeof ref);
  int ok_ref = sweep_run(&m, &ref, NULL, &cnt);
  long long k = 0;
  int runs = 0;
  for (;; k++) {
    memset(&out, 0, sizeof out);
    ta_countdown = k;
    int before = ta_injected;
    int completed = sweep_run(&m, &out, &ref, &cnt);
    runs++;
    if (ta_injected == before) { /* k is past the last allocation: the sweep is complete */
      if (!completed) cnt.wrong++;
      break;
    }
    if (k > 100000) break;
  }
  th_check(ok_ref && cnt.failures > 0 && cnt.failures == cnt.reported && cnt.unreported == 0 && cnt.wrong == 0 &&
               cnt.not_refused == 0,
           "%s: %d allocation failures injected (one per run, %d runs over init, feed, reset, copy, sample, save, "
           "load): %d returned TITANS_ERR_NOMEM, %d were not reported, %d OK calls gave other results, %d broken "
           "sessions went on feeding",
           titans_block_name(kind), cnt.failures, runs, cnt.reported, cnt.unreported, cnt.wrong, cnt.not_refused);
  titans_model_free(&m);
}

/* ---- non-finite values ------------------------------------------------------------------------- */

static void test_nonfinite(int kind) {
  const char *kn = titans_block_name(kind);
  titans_config c = small_config(kind);
  titans_model m;
  titans_model_init(&m, &c);
  titans_model_init_weights(&m, 4);
  int toks[8];
  tokens_of(toks, 8, 6);
  float logits[V];
  titans_session s;
  titans_session_init(&s, &m);
  /* a NaN weight in layer 1's FFN */
  float keep = m.w.layers[1].ffn_w1[0];
  m.w.layers[1].ffn_w1[0] = NAN;
  int rc = titans_session_feed(&s, toks, 5, logits);
  th_check(rc == TITANS_ERR_NONFINITE && strstr(s.error, "layer 1") && strstr(s.error, "position 0"),
           "%s: a NaN weight: feed returns TITANS_ERR_NONFINITE naming the layer and position (%s)", kn, s.error);
  int rc2 = titans_session_feed(&s, toks, 1, logits);
  titans_st_writer w;
  titans_st_writer_init(&w);
  int rc3 = titans_session_write(&s, &w);
  titans_st_writer_free(&w);
  th_check(rc2 == TITANS_ERR_STATE && rc3 == TITANS_ERR_STATE,
           "%s: the broken session refuses to feed (%s) and to be saved", kn, titans_status_string(rc2));
  m.w.layers[1].ffn_w1[0] = keep;
  rc = titans_session_reset(&s);
  rc = rc ? rc : titans_session_feed(&s, toks, 5, logits);
  th_check(rc == TITANS_OK && th_all_finite(logits, V), "%s: after a reset (weights repaired) it runs again", kn);

  /* a NaN in layer 0's value projection, or in a persistent token: feed names layer 0. Either check
     may see it first: the layer's output (every token), or the cache's rows as they enter it (the
     persistent ones at reset); attention reads every row it holds, so the output check alone would too. */
  if (kind != TITANS_BLOCK_LMM) {
    float *wv = m.w.layers[0].attn_wv, keep_wv = wv[3];
    wv[3] = NAN;
    titans_session_reset(&s);
    rc = titans_session_feed(&s, toks, 3, logits);
    wv[3] = keep_wv;
    int rcp = TITANS_ERR_NONFINITE, named = strstr(s.error, "layer 0") != NULL;
    if (c.n_persist > 0) {
      float *pt = m.w.layers[0].persist, keep_p = pt[1];
      pt[1] = NAN;
      titans_session_reset(&s);
      pt[1] = keep_p;
      rcp = titans_session_feed(&s, toks, 1, logits);
      named = named && strstr(s.error, "layer 0") != NULL;
    }
    th_check(rc == TITANS_ERR_NONFINITE && rcp == TITANS_ERR_NONFINITE && named,
             "%s: a NaN in layer 0's keys or values (projection; persistent tokens: %d) is TITANS_ERR_NONFINITE naming "
             "layer 0 (%s)", kn, c.n_persist, s.error);
    titans_session_reset(&s);
  }
  /* a memory near the float range (finite: legal in a state file) overflows at the next token */
  if (kind != TITANS_BLOCK_ATTN && kind != TITANS_BLOCK_SWA) {
    titans_tensor_ref refs[32];
    size_t n = titans_session_state(&s, refs, 32), hit = 0;
    for (size_t i = 0; i < n; i++)
      if (strstr(refs[i].name, "layers.0.mem.state") || strstr(refs[i].name, "layers.0.lm2.state")) {
        for (size_t j = 0; j < refs[i].count; j++) refs[i].data[j] = 3e38f;
        hit = 1;
      }
    rc = titans_session_state_prepare(&s, s.position);
    rc = rc ? rc : titans_session_state_loaded(&s);
    int rcf = titans_session_feed(&s, toks, 1, logits);
    if (kind == TITANS_BLOCK_LM2) /* the bank's products may stay finite: then so must the logits */
      th_check(
          hit && rc == TITANS_OK &&
              (rcf == TITANS_OK ? th_all_finite(logits, V) : rcf == TITANS_ERR_NONFINITE && strstr(s.error, "layer")),
          "%s: a bank at 3e38 loads, then feed gives finite logits or reports the overflow (rc %d)", kn, rcf);
    else
      th_check(hit && rc == TITANS_OK && rcf == TITANS_ERR_NONFINITE && strstr(s.error, "layer 0"),
               "%s: a memory at 3e38 loads, then feed reports the overflow (%s)", kn, s.error);
    titans_session_reset(&s);
  }
  /* an untied output head with NaN: the logits are checked */
  if (!c.tied) {
    keep = m.w.lm_head[3];
    m.w.lm_head[3] = NAN;
    rc = titans_session_feed(&s, toks, 2, logits);
    th_check(rc == TITANS_ERR_NONFINITE && strstr(s.error, "output head"),
             "%s: a NaN in the output head: TITANS_ERR_NONFINITE (%s)", kn, s.error);
    m.w.lm_head[3] = keep;
  }
  titans_session_free(&s);
  titans_model_free(&m);
}

static void test_sampling_errors(void) {
  float lg[5] = {0.5f, 2.0f, -1.0f, 1.0f, 0.0f};
  titans_rng rng;
  titans_rng_seed(&rng, 1);
  int tok = 7, rc;
  rc = titans_sample_ex(lg, 5, 0.0f, 0, 1.0f, &rng, &tok);
  th_check(rc == TITANS_OK && tok == 1, "sample_ex: greedy picks the argmax (%d)", tok);
  lg[3] = NAN;
  rc = titans_sample_ex(lg, 5, 0.8f, 0, 1.0f, &rng, &tok);
  int rc0 = titans_sample_ex(lg, 5, 0.0f, 0, 1.0f, &rng, &tok);
  th_check(rc == TITANS_ERR_NONFINITE && rc0 == TITANS_ERR_NONFINITE && tok == -1 &&
               titans_sample(lg, 5, 0.8f, 0, 1.0f, &rng) == -1,
           "sample: a NaN logit is TITANS_ERR_NONFINITE (greedy too) and titans_sample returns -1, not a token");
  lg[3] = INFINITY;
  rc = titans_sample_ex(lg, 5, 0.8f, 0, 1.0f, &rng, &tok);
  th_check(rc == TITANS_ERR_NONFINITE, "sample: a +Inf logit is TITANS_ERR_NONFINITE");
  float masked[5] = {-INFINITY, 1.0f, -INFINITY, 1.0f, -INFINITY};
  int bad = 0;
  for (int i = 0; i < 2000; i++) {
    rc = titans_sample_ex(masked, 5, 1.0f, 4, 1.0f, &rng, &tok);
    bad += rc != TITANS_OK || (tok != 1 && tok != 3);
  }
  th_check(bad == 0, "sample: -Inf logits mark tokens never drawn (2000 draws, top_k 4 > the 2 allowed)");
  float none[3] = {-INFINITY, -INFINITY, -INFINITY};
  rc = titans_sample_ex(none, 3, 1.0f, 0, 1.0f, &rng, &tok);
  th_check(rc == TITANS_ERR_NONFINITE, "sample: every logit -Inf: nothing to draw, TITANS_ERR_NONFINITE");
  rc = titans_sample_ex(masked, 5, NAN, 0, 1.0f, &rng, &tok);
  int rcv = titans_sample_ex(masked, 0, 1.0f, 0, 1.0f, &rng, &tok);
  th_check(rc == TITANS_ERR_ARG && rcv == TITANS_ERR_ARG, "sample: a NaN temperature, V = 0: TITANS_ERR_ARG");
  ta_countdown = 0;
  rc = titans_sample_ex(masked, 5, 1.0f, 0, 1.0f, &rng, &tok);
  ta_countdown = -1;
  th_check(rc == TITANS_ERR_NOMEM && tok == -1,
           "sample: the distribution's allocation fails: TITANS_ERR_NOMEM, no greedy fallback");
}

/* ---- huge windows from a configuration --------------------------------------------------------- */

static void test_huge_window(int kind) {
  const char *kn = titans_block_name(kind);
  titans_config c = small_config(kind);
  c.n_layers = 4;
  c.window = 1 << 24;
  c.max_context = 1 << 24;
  c.segment = 65536;
  titans_model m;
  int rc = titans_model_init(&m, &c);
  if (rc) {
    th_check(0, "%s: model init: %s", kn, m.error);
    return;
  }
  titans_model_init_weights(&m, 2);
  size_t model_bytes = m.n_floats * sizeof(float);
  /* the bound of the header: 8 x the parameters (memory states), prefix + 16 slots per cache, one
     token's scratch, the memory's work space of one chunk, small bookkeeping */
  size_t bound = 8 * model_bytes + (size_t)c.n_layers * (2 * ((size_t)c.n_persist + 16) * (size_t)c.d * 4 + 16 * 8) +
                 17 * 12 * 4 + 256 * 1024;
  size_t base = ta_cur;
  ta_peak = ta_cur;
  titans_session s;
  rc = titans_session_init(&s, &m);
  size_t opened = ta_peak - base;
  th_check(rc == TITANS_OK && opened <= bound,
           "%s: window / max_context 2^24, segment 2^16: opening a session allocates %zu bytes (model %zu bytes, "
           "bound %zu; the caches at full capacity would take %zu MB)",
           kn, opened, model_bytes, bound,
           kind == TITANS_BLOCK_LMM ? 0
                                    : (size_t)c.n_layers * titans__kv_capacity(&c) * (2 * (size_t)c.d * 4 + 8) >> 20);
  int toks[100];
  tokens_of(toks, 100, 8);
  ta_peak = ta_cur;
  rc = titans_session_feed(&s, toks, 100, NULL);
  size_t fed = ta_peak - base;
  size_t grown = (size_t)c.n_layers * 2 * (size_t)c.d * 4 * 256; /* caches doubled to 128 rows (MAC: 2 per token) */
  th_check(rc == TITANS_OK && fed <= bound + grown,
           "%s: after 100 tokens the session holds %zu bytes (caches grown by use; bound %zu)", kn, fed, bound + grown);
  /* a hostile state: a position whose KV rows the file does not hold cannot make the caches grow */
  titans_st_writer w;
  titans_st_writer_init(&w);
  unsigned char *bytes = NULL;
  size_t nbytes = 0;
  rc = titans_session_write(&s, &w);
  rc = rc ? rc : titans_st_writer_to_memory(&w, &bytes, &nbytes);
  titans_st_writer_free(&w);
  titans_st_reader r;
  rc = rc ? rc : titans_st_reader_parse(&r, bytes, nbytes);
  titans_session t;
  rc = rc ? rc : titans_session_init(&t, &m);
  int rcr = rc ? rc : titans_session_read(&t, &r);
  th_check(rcr == TITANS_OK && t.position == 100, "%s: its state saves and loads (%zu bytes)", kn, nbytes);
  if (!rc) {
    /* rewrite the position tensor in the buffer to 2^40 (piece 1 = 2^19 -> position 2^40) */
    const titans_st_tensor *pt = titans_st_find(&r, "position");
    size_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen * 256 + bytes[i];
    float code[3] = {0.0f, 524288.0f, 0.0f};
    if (pt && kind != TITANS_BLOCK_LMM) {
      memcpy(bytes + 8 + hlen + pt->offset, code, sizeof code); /* little-endian host */
      titans_st_reader r2;
      ta_largest = 0;
      int rc2 = titans_st_reader_parse(&r2, bytes, nbytes);
      rc2 = rc2 ? rc2 : titans_session_read(&t, &r2);
      th_check(
          rc2 == TITANS_ERR_FORMAT && ta_largest < ((size_t)1 << 20),
          "%s: a state claiming position 2^40 with 100 tokens' KV rows: refused, largest allocation %zu bytes (%s)", kn,
          ta_largest, t.error);
      if (rc2 != TITANS_ERR_FORMAT || !strstr(t.error, "position")) printf("    (%s)\n", t.error);
      titans_st_reader_free(&r2);
    }
    titans_st_reader_free(&r);
    titans_session_free(&t);
  }
  titans_free(bytes);
  titans_session_free(&s);
  titans_model_free(&m);
}

/* ---- the position limit ------------------------------------------------------------------------ */

static void test_position_limit(int kind) {
  const char *kn = titans_block_name(kind);
  titans_config c = small_config(kind);
  titans_model m;
  titans_model_init(&m, &c);
  titans_model_init_weights(&m, 5);
  titans_session s, t;
  titans_session_init(&s, &m);
  titans_session_init(&t, &m);
  /* a state at 2^62 - 1 (memories at w0, KV rows zero): prepare, list, loaded */
  int rc = titans_session_state_prepare(&s, TITANS_MAX_POSITION - 1);
  titans_tensor_ref refs[32];
  titans_session_state(&s, refs, 32);
  rc = rc ? rc : titans_session_state_loaded(&s);
  int tok = 3;
  float logits[V];
  int rc1 = rc ? rc : titans_session_feed(&s, &tok, 1, logits);
  long long at = s.position;
  int rc2 = titans_session_feed(&s, &tok, 1, logits);
  th_check(rc1 == TITANS_OK && at == TITANS_MAX_POSITION && rc2 == TITANS_ERR_STATE && s.position == at &&
               th_all_finite(logits, V),
           "%s: a session reaches position 2^62, then feed refuses to go past it (%s)", kn, s.error);
  const char *path = "build/test_inference_2p62.safetensors";
  rc = titans_session_save(&s, path);
  rc = rc ? rc : titans_session_load(&t, path);
  int rc3 = rc ? rc : titans_session_feed(&t, &tok, 1, logits);
  th_check(rc == TITANS_OK && t.position == TITANS_MAX_POSITION && rc3 == TITANS_ERR_STATE,
           "%s: what it saves at 2^62 loads (position %lld), and refuses to go on the same way", kn, t.position);
  remove(path);
  /* one past the limit is not a position */
  titans_session_state(&t, refs, 32);
  uint64_t p = (uint64_t)TITANS_MAX_POSITION + 1;
  for (int i = 0; i < 3; i++) t.position_code[i] = (float)((p >> (21 * i)) & 0x1FFFFF);
  rc = titans_session_state_loaded(&t);
  th_check(rc == TITANS_ERR_FORMAT, "%s: a state at 2^62 + 1 is refused (%s)", kn, t.error);
  rc = titans_session_state_prepare(&t, TITANS_MAX_POSITION + 1);
  th_check(rc == TITANS_ERR_ARG, "%s: preparing 2^62 + 1 is an argument error", kn);
  titans_session_free(&s);
  titans_session_free(&t);
  titans_model_free(&m);
}

static void test_head_width(void) {
  titans_config c = titans_config_default(TITANS_BLOCK_MAC, 256, 16, 1);
  c.mem.heads = 32;
  c.mem.head_dim = 16 / 32;
  char err[TITANS_ERR_MSG_SIZE] = "";
  int rc = titans_config_check(&c, err);
  th_check(rc == TITANS_ERR_ARG && strstr(err, "head_dim"),
           "config: 32 memory heads of width 16 / 32 = 0: refused (%s)", err);
}

int main(void) {
#ifdef _OPENMP
  omp_set_num_threads(1); /* the allocator's counters are not atomic */
#endif
  printf("allocation failures are reported, never silently absorbed\n");
  for (int k = 0; k < NKINDS; k++) test_alloc_sweep(kinds[k]);
  printf("non-finite values are errors\n");
  for (int k = 0; k < NKINDS; k++) test_nonfinite(kinds[k]);
  test_sampling_errors();
  printf("memory is allocated by use, not from a configuration's promises\n");
  for (int k = 0; k < NKINDS; k++) test_huge_window(kinds[k]);
  printf("positions: what a session can reach, it can save and load\n");
  for (int k = 0; k < NKINDS; k++) test_position_limit(kinds[k]);
  test_head_width();
  return th_summary("test_inference");
}
