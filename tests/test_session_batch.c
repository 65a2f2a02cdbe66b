/* Session batches (issue 38, goals 3 and 4), for every block kind:
   - each stream of a titans_session_batch gives the logits of a titans_session fed the same tokens
     (within test_model's session tolerance, 2e-5 of the largest |logit|), with the streams at different
     positions: started at different calls, sitting calls out (TITANS_SESSION_BATCH_IDLE), one reset;
   - forks and state files through the single-session functions: a stream copied out continues as the
     batch's, a session copied in and a state file loaded into a stream continue as the session;
   - non-finite: a NaN reached by one stream's token breaks that stream only (TITANS_ERR_NONFINITE naming
     it), the others go on matching their sessions, the broken one refuses to feed until reset;
   - bad arguments (no streams, no model, no tokens, a token outside the vocabulary, a stream number out of
     range, a session of another model) return errors and change nothing;
   - an allocation-failure sweep over a batch's set-up and feeds: each refused allocation makes the call it
     hits return TITANS_ERR_NOMEM, the streams it broke refuse to feed until reset, and every other stream
     goes on as a session.
   The allocator is replaced (TITANS_MALLOC / TITANS_FREE) to refuse the n-th allocation. */
#include <stdlib.h>
static long long ba_countdown = -1; /* refuse the allocation when this reaches 0; -1: never */
static int ba_injected;             /* allocations refused so far */
static void *ba_malloc(size_t n) {
  if (ba_countdown >= 0 && ba_countdown-- == 0) {
    ba_injected++;
    return NULL;
  }
  return malloc(n);
}
#define TITANS_MALLOC(n) ba_malloc(n)
#define TITANS_FREE(p) free(p)
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "harness.h"
#include "model_fixtures.h"
#include <time.h>

static const int kinds[] = {TITANS_BLOCK_ATTN, TITANS_BLOCK_SWA, TITANS_BLOCK_MAC, TITANS_BLOCK_MAG, TITANS_BLOCK_MAL,
                            TITANS_BLOCK_LMM, TITANS_BLOCK_LM2};
#define NKINDS (int)(sizeof kinds / sizeof kinds[0])
#define NS 4     /* streams */
#define STEPS 23 /* calls of a run */

/* test_model's tiny configuration (every option on: persistent tokens, a window and segments shorter than
   the run, a 2-layer memory with conv, chunks of 2), with an untied head for SWA and MAG. */
static titans_config tiny_config(int kind) {
  titans_config c = tiny_stream_config(kind);
  c.tied = kind != TITANS_BLOCK_SWA && kind != TITANS_BLOCK_MAG;
  return c;
}

/* Stream i's token at call t: IDLE before it starts (call 2 i), for calls 9..11 of stream 3, else random.
   Stream 2 is reset before call 14. */
static int schedule(int i, int t, const int *toks) {
  if (t < 2 * i || (i == 3 && t >= 9 && t < 12)) return TITANS_SESSION_BATCH_IDLE;
  return toks[t * NS + i];
}

/* max |a - b| / max |b| over n */
static double rel_diff(const float *a, const float *b, size_t n) {
  double scale = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
  return th_max_abs_diff(a, b, n) / (scale > 0.0 ? scale : 1.0);
}

static void test_streams_equal_sessions(int kind) {
  titans_config c = tiny_config(kind);
  titans_model m;
  titans_model_init(&m, &c);
  lively_weights(&m, 31 + (uint64_t)kind);
  size_t V = (size_t)c.vocab;
  int toks[STEPS * NS];
  random_tokens(toks, STEPS * NS, c.vocab, 5 + (uint64_t)kind);
  titans_session_batch b;
  titans_session ref[NS];
  int rc = titans_session_batch_init(&b, &m, NS);
  for (int i = 0; i < NS; i++) rc = rc ? rc : titans_session_init(&ref[i], &m);
  float *lb = titans_alloc_floats(NS * V), *lr = titans_alloc_floats(V); /* [NS, V], [V] */
  double worst = 0.0;
  int untouched = 1, positions = 1;
  for (int t = 0; t < STEPS && !rc; t++) {
    int tok[NS];
    for (int i = 0; i < NS; i++) tok[i] = schedule(i, t, toks);
    if (t == 14) rc = titans_session_batch_reset(&b, 2) || titans_session_reset(&ref[2]);
    for (size_t j = 0; j < NS * V; j++) lb[j] = 12345.0f; /* an idle stream's row stays as it was */
    rc = rc ? rc : titans_session_batch_feed(&b, tok, lb);
    for (int i = 0; i < NS && !rc; i++) {
      if (tok[i] == TITANS_SESSION_BATCH_IDLE) {
        for (size_t j = 0; j < V; j++) untouched &= lb[i * V + j] == 12345.0f;
        continue;
      }
      rc = titans_session_feed(&ref[i], &tok[i], 1, lr);
      worst = fmax(worst, rel_diff(lb + i * V, lr, V));
      positions &= titans_session_batch_stream(&b, (size_t)i)->position == ref[i].position;
    }
  }
  char what[320];
  snprintf(what, sizeof what, "%s: %d streams over %d calls (staggered starts, idle calls, a reset) == a session each "
           "(relative to max |logit|)", kind_label(kind), NS, STEPS);
  th_close(what, rc ? INFINITY : worst, 2e-5);
  th_check(!rc && untouched && positions, "%s: idle streams' logits rows untouched, positions as the sessions' (%lld, "
           "%lld, %lld, %lld)", kind_label(kind), b.streams[0].position, b.streams[1].position, b.streams[2].position,
           b.streams[3].position);

  /* forks and state files through the single-session functions */
  titans_session fork, loaded;
  rc = rc ? rc : titans_session_init(&fork, &m);
  rc = rc ? rc : titans_session_init(&loaded, &m);
  rc = rc ? rc : titans_session_batch_get(&b, 1, &fork); /* stream 1 out */
  rc = rc ? rc : titans_session_batch_put(&b, 0, &ref[3]); /* session 3 into stream 0 */
  rc = rc ? rc : titans_session_copy(&ref[0], &ref[3]);
  const char *base = getenv("TMPDIR");
  char path[600];
  snprintf(path, sizeof path, "%s/titans_test_session_batch_%ld.safetensors", base && *base ? base : "/tmp",
           (long)time(NULL) % 1000000);
  rc = rc ? rc : titans_session_save(titans_session_batch_stream(&b, 2), path); /* stream 2's state file */
  rc = rc ? rc : titans_session_load(&loaded, path);
  rc = rc ? rc : titans_session_load(titans_session_batch_stream(&b, 3), path); /* ... loaded into stream 3 */
  rc = rc ? rc : titans_session_copy(&ref[3], &ref[2]);
  remove(path);
  double dfork = 0.0, dput = 0.0, dload = 0.0;
  float *lf = titans_alloc_floats(V), *ll = titans_alloc_floats(V); /* [V] each */
  for (int t = 0; t < 9 && !rc; t++) {
    int tok[NS];
    for (int i = 0; i < NS; i++) tok[i] = toks[t * NS + i] % c.vocab;
    tok[3] = tok[2];
    rc = titans_session_batch_feed(&b, tok, lb);
    rc = rc ? rc : titans_session_feed(&fork, &tok[1], 1, lf);
    rc = rc ? rc : titans_session_feed(&loaded, &tok[2], 1, ll);
    for (int i = 0; i < NS && !rc; i++) {
      rc = titans_session_feed(&ref[i], &tok[i], 1, lr);
      if (i == 0) dput = fmax(dput, rel_diff(lb, lr, V));
      if (i == 3) dload = fmax(dload, rel_diff(lb + 3 * V, lr, V));
    }
    dfork = fmax(dfork, rel_diff(lf, lb + V, V));
    dload = fmax(dload, rel_diff(ll, lb + 2 * V, V));
  }
  snprintf(what, sizeof what, "%s: a stream forked out (titans_session_batch_get) continues as the batch's",
           kind_label(kind));
  th_close(what, rc ? INFINITY : dfork, 2e-5);
  snprintf(what, sizeof what, "%s: a session put into a stream continues as the session", kind_label(kind));
  th_close(what, rc ? INFINITY : dput, 2e-5);
  snprintf(what, sizeof what, "%s: a stream's state file loads into a session and into another stream, all three "
           "continue alike", kind_label(kind));
  th_close(what, rc ? INFINITY : dload, 2e-5);

  /* one stream: the batch's rows are the session's row */
  titans_session_batch one;
  rc = titans_session_batch_init(&one, &m, 1);
  rc = rc ? rc : titans_session_reset(&ref[0]);
  double d1 = 0.0;
  for (int t = 0; t < 11 && !rc; t++) {
    rc = titans_session_batch_feed(&one, &toks[t], lb);
    rc = rc ? rc : titans_session_feed(&ref[0], &toks[t], 1, lr);
    d1 = fmax(d1, th_max_abs_diff(lb, lr, V));
  }
  th_check(!rc && d1 == 0.0, "%s: a batch of one stream gives a session's logits bit for bit (max diff %.3g)",
           kind_label(kind), rc ? INFINITY : d1);
  titans_session_batch_free(&one);
  titans_free(lf);
  titans_free(ll);
  titans_session_free(&fork);
  titans_session_free(&loaded);
  titans_free(lb);
  titans_free(lr);
  for (int i = 0; i < NS; i++) titans_session_free(&ref[i]);
  titans_session_batch_free(&b);
  titans_model_free(&m);
}

/* A NaN in one token's embedding row: the stream fed it breaks, the others go on. */
static void test_nonfinite(int kind) {
  titans_config c = tiny_config(kind);
  c.tied = 0; /* a tied head would read the NaN row for every stream */
  titans_model m;
  titans_model_init(&m, &c);
  lively_weights(&m, 41 + (uint64_t)kind);
  size_t V = (size_t)c.vocab, d = (size_t)c.d;
  const int bad = 5;
  m.w.tok_emb[(size_t)bad * d + 1] = NAN;
  titans_session_batch b;
  titans_session ref[3];
  int rc = titans_session_batch_init(&b, &m, 3);
  for (int i = 0; i < 3; i++) rc = rc ? rc : titans_session_init(&ref[i], &m);
  float *lb = titans_alloc_floats(3 * V), *lr = titans_alloc_floats(V); /* [3, V], [V] */
  int tok[3] = {1, 2, 3};
  rc = rc ? rc : titans_session_batch_feed(&b, tok, lb);
  for (int i = 0; i < 3 && !rc; i++) rc = titans_session_feed(&ref[i], &tok[i], 1, lr);
  tok[1] = bad;
  int rcn = rc ? rc : titans_session_batch_feed(&b, tok, lb);
  th_check(rcn == TITANS_ERR_NONFINITE && strstr(b.error, "stream 1") && b.streams[1].broken && !b.streams[0].broken &&
               !b.streams[2].broken,
           "%s: a NaN reached by stream 1's token: TITANS_ERR_NONFINITE, only stream 1 broken (%s)", kind_label(kind),
           b.error);
  double worst = 0.0;
  for (int i = 0; i < 3 && !rc; i += 2) {
    rc = titans_session_feed(&ref[i], &tok[i], 1, lr);
    worst = fmax(worst, rel_diff(lb + (size_t)i * V, lr, V));
  }
  int rcs = titans_session_batch_feed(&b, tok, lb), p0 = (int)b.streams[0].position;
  tok[1] = TITANS_SESSION_BATCH_IDLE;
  for (int t = 0; t < 3 && !rc; t++) {
    rc = titans_session_batch_feed(&b, tok, lb);
    for (int i = 0; i < 3 && !rc; i += 2) {
      rc = titans_session_feed(&ref[i], &tok[i], 1, lr);
      worst = fmax(worst, rel_diff(lb + (size_t)i * V, lr, V));
    }
  }
  char what[200];
  snprintf(what, sizeof what, "%s: the other streams took that token and go on as their sessions", kind_label(kind));
  th_close(what, rc ? INFINITY : worst, 2e-5);
  th_check(rcs == TITANS_ERR_STATE && p0 == 2, "%s: feeding the broken stream is TITANS_ERR_STATE and changes nothing; "
           "TITANS_SESSION_BATCH_IDLE sits it out", kind_label(kind));
  tok[1] = 4;
  rc = rc ? rc : titans_session_batch_reset(&b, 1);
  rc = rc ? rc : titans_session_batch_feed(&b, tok, lb);
  th_check(rc == TITANS_OK && b.streams[1].position == 1, "%s: after titans_session_batch_reset the stream feeds again",
           kind_label(kind));
  titans_free(lb);
  titans_free(lr);
  for (int i = 0; i < 3; i++) titans_session_free(&ref[i]);
  titans_session_batch_free(&b);
  titans_model_free(&m);
}

static void test_bad_arguments(void) {
  titans_config c = tiny_config(TITANS_BLOCK_MAG), c2 = tiny_config(TITANS_BLOCK_SWA);
  titans_model m, m2;
  titans_model_init(&m, &c);
  titans_model_init(&m2, &c2);
  titans_model_init_weights(&m, 1);
  titans_model_init_weights(&m2, 2);
  titans_session_batch b;
  int r0 = titans_session_batch_init(&b, &m, 0);
  int r1 = titans_session_batch_init(&b, NULL, 3);
  int r2 = titans_session_batch_init(NULL, &m, 3);
  th_check(r0 == TITANS_ERR_ARG && r1 == TITANS_ERR_ARG && r2 == TITANS_ERR_ARG && b.streams == NULL,
           "init: 0 streams, no model, no batch: TITANS_ERR_ARG");
  int rc = titans_session_batch_init(&b, &m, 3);
  float *lb = titans_alloc_floats(3 * (size_t)c.vocab); /* [3, V] */
  int good[3] = {1, 2, 3}, over[3] = {1, c.vocab, 3}, neg[3] = {1, 2, -2};
  rc = rc ? rc : titans_session_batch_feed(&b, good, lb);
  int a1 = titans_session_batch_feed(&b, NULL, lb), a2 = titans_session_batch_feed(&b, over, lb);
  int a3 = titans_session_batch_feed(&b, neg, lb), a4 = titans_session_batch_feed(NULL, good, lb);
  th_check(!rc && a1 == TITANS_ERR_ARG && a2 == TITANS_ERR_ARG && a3 == TITANS_ERR_ARG && a4 == TITANS_ERR_ARG &&
               b.streams[0].position == 1 && b.streams[2].position == 1,
           "feed: no tokens, a token = V, a token -2, no batch: TITANS_ERR_ARG, positions unchanged (%s)", b.error);
  titans_session s, other;
  titans_session_init(&s, &m);
  titans_session_init(&other, &m2);
  int g1 = titans_session_batch_get(&b, 3, &s), g2 = titans_session_batch_put(&b, 7, &s);
  int g3 = titans_session_batch_reset(&b, 3), g4 = titans_session_batch_put(&b, 0, &other);
  int g5 = titans_session_batch_get(&b, 0, &other), g6 = titans_session_batch_get(&b, 0, NULL);
  th_check(g1 == TITANS_ERR_ARG && g2 == TITANS_ERR_ARG && g3 == TITANS_ERR_ARG && g4 == TITANS_ERR_ARG &&
               g5 == TITANS_ERR_ARG && g6 == TITANS_ERR_ARG && titans_session_batch_stream(&b, 3) == NULL &&
               b.streams[0].position == 1,
           "get / put / reset / stream: a stream number >= n, a session of another model, NULL: errors, nothing "
           "changed");
  int all_idle[3] = {TITANS_SESSION_BATCH_IDLE, TITANS_SESSION_BATCH_IDLE, TITANS_SESSION_BATCH_IDLE};
  th_check(titans_session_batch_feed(&b, all_idle, NULL) == TITANS_OK && b.streams[1].position == 1,
           "feed: every stream idle (and no logits) is TITANS_OK and changes nothing");
  titans_session_batch_free(&b);
  titans_session_batch_free(&b); /* twice: harmless */
  titans_session_free(&s);
  titans_session_free(&other);
  titans_free(lb);
  titans_model_free(&m);
  titans_model_free(&m2);
}

/* What one run of the sweep saw. */
typedef struct sweep_count {
  int failures, reported, unreported; /* refused allocations; calls that then returned NOMEM; that did not */
  int in_feed;                        /* refused allocations inside titans_session_batch_feed */
  int not_refused;                    /* broken streams that fed again without a reset */
  double worst;                       /* the largest difference of a stream's logits from its session's */
} sweep_count;

#define SWEEP_CALLS 20
/* Three streams of a fresh batch fed SWEEP_CALLS calls, the allocator refusing its k-th allocation from
   the batch's init on (k = -1: none), against one session a stream fed by the same allocator unhindered.
   A broken stream sits out (IDLE) after checking that feeding it is refused, and is reset two calls later;
   its session is reset with it. Returns 1 when k was past the run's last allocation. */
static int sweep_run(const titans_model *m, const int *toks, long long k, sweep_count *cnt) {
  size_t V = (size_t)m->cfg.vocab;
  titans_session ref[3];
  int have_ref = 0, broke_at[3] = {-1, -1, -1};
  for (; have_ref < 3; have_ref++)
    if (titans_session_init(&ref[have_ref], m)) break;
  float *lb = titans_alloc_floats(3 * V), *lr = titans_alloc_floats(V); /* [3, V], [V] */
  titans_session_batch b;
  int before = ba_injected;
  ba_countdown = k;
  int rc = titans_session_batch_init(&b, m, 3), ran = 0;
  if (ba_injected != before) {
    cnt->failures++;
    if (rc == TITANS_ERR_NOMEM) cnt->reported++;
    else cnt->unreported++;
  }
  for (int t = 0; t < SWEEP_CALLS && !rc && have_ref == 3 && lb && lr; t++) {
    int tok[3];
    for (int i = 0; i < 3; i++) {
      tok[i] = toks[t * 3 + i];
      if (broke_at[i] >= 0 && t == broke_at[i] + 2) { /* the broken stream back from position 0 */
        ba_countdown = -1;
        if (titans_session_batch_reset(&b, (size_t)i) || titans_session_reset(&ref[i])) cnt->unreported++;
        broke_at[i] = -1;
      } else if (broke_at[i] >= 0) {
        tok[i] = TITANS_SESSION_BATCH_IDLE;
      }
    }
    before = ba_injected;
    int frc = titans_session_batch_feed(&b, tok, lb);
    long long after = ba_countdown;
    ba_countdown = -1; /* the sessions are the reference: never refused */
    if (ba_injected != before) {
      cnt->failures++;
      cnt->in_feed++;
      if (frc == TITANS_ERR_NOMEM) cnt->reported++;
      else cnt->unreported++;
    }
    for (int i = 0; i < 3; i++) {
      if (tok[i] == TITANS_SESSION_BATCH_IDLE) continue;
      titans_session *st = titans_session_batch_stream(&b, (size_t)i);
      if (st->broken) { /* it fed no further: a retry is refused, its session drops this token */
        int retry[3] = {TITANS_SESSION_BATCH_IDLE, TITANS_SESSION_BATCH_IDLE, TITANS_SESSION_BATCH_IDLE};
        retry[i] = 1;
        if (titans_session_batch_feed(&b, retry, NULL) != TITANS_ERR_STATE) cnt->not_refused++;
        broke_at[i] = t;
        continue;
      }
      if (titans_session_feed(&ref[i], &tok[i], 1, lr)) cnt->unreported++;
      else cnt->worst = fmax(cnt->worst, rel_diff(lb + (size_t)i * V, lr, V));
    }
    ba_countdown = after; /* as the feed left it: -1 once the run's one refusal is spent */
    ran = 1;
  }
  int past = ba_countdown >= 0 || k < 0; /* the countdown never reached 0 */
  ba_countdown = -1;
  if (!rc) titans_session_batch_free(&b);
  for (int i = 0; i < have_ref; i++) titans_session_free(&ref[i]);
  titans_free(lb);
  titans_free(lr);
  return past && ran;
}

static void test_alloc_sweep(int kind) {
  titans_config c = tiny_config(kind);
  titans_model m;
  titans_model_init(&m, &c);
  lively_weights(&m, 51 + (uint64_t)kind);
  int toks[SWEEP_CALLS * 3];
  random_tokens(toks, SWEEP_CALLS * 3, c.vocab, 7 + (uint64_t)kind);
  sweep_count cnt;
  memset(&cnt, 0, sizeof cnt);
  int runs = 0, complete = 0;
  for (long long k = 0; k < 100000 && !complete; k++, runs++) complete = sweep_run(&m, toks, k, &cnt);
  th_check(complete && cnt.failures > 0 && cnt.failures == cnt.reported && cnt.unreported == 0 && cnt.not_refused == 0 &&
               cnt.worst <= 2e-5,
           "%s: %d allocation failures injected (one per run, %d runs over init and %d feeds of 3 streams; %d in a feed): %d "
           "returned TITANS_ERR_NOMEM, %d did not; %d broken streams fed again unreset; the others as their sessions "
           "(max diff %.3g, tol 2e-5)",
           kind_label(kind), cnt.failures, runs, SWEEP_CALLS, cnt.in_feed, cnt.reported, cnt.unreported, cnt.not_refused, cnt.worst);
  titans_model_free(&m);
}

int main(void) {
  printf("session batches: each stream == a session, forks and state files, every block kind\n");
  for (int k = 0; k < NKINDS; k++) test_streams_equal_sessions(kinds[k]);
  tiny_mac_learns_from = TITANS_MAC_LEARNS_INPUT;
  test_streams_equal_sessions(TITANS_BLOCK_MAC);
  tiny_gate_key = 1; /* the memory's write gate reads the key */
  test_streams_equal_sessions(TITANS_BLOCK_MAC);
  tiny_gate_key = 0;
  tiny_mac_learns_from = TITANS_MAC_LEARNS_ATTN_OUTPUT;
  printf("session batches: NaN and Inf\n");
  for (int k = 0; k < NKINDS; k++) test_nonfinite(kinds[k]);
  printf("session batches: bad arguments\n");
  test_bad_arguments();
  printf("session batches: allocation failures\n");
  for (int k = 0; k < NKINDS; k++) test_alloc_sweep(kinds[k]);
  return th_summary("test_session_batch");
}
