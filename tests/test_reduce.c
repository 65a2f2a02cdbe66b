/* Tests of data-parallel training (titans_trainer_set_reduce): two trainers that each train two rows of a
   four-row batch, their reduce functions summing the two halves, take the step one trainer takes on all
   four rows (to float reordering), for every kind, with titans_train_step and with streams; the loss
   they report is the whole batch's; targets marked TITANS_NO_LOSS weight the halves by their counted
   targets; a process whose step fails makes the other reject the step with its weights untouched.
   The two "processes" run one after the other in this one: the first runs its step once with a reduce
   function that records its half and fails (the step is rejected, nothing changes), the second then
   steps with the first's half added to its own, and the first steps again with the second's added
   (its half is recomputed, bit for bit the same). */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "harness.h"
#include "model_fixtures.h"

static const int kinds[] = {TITANS_BLOCK_MAC, TITANS_BLOCK_MAG, TITANS_BLOCK_MAL, TITANS_BLOCK_LMM,
                            TITANS_BLOCK_LM2, TITANS_BLOCK_ATTN, TITANS_BLOCK_SWA};
#define NKINDS (int)(sizeof kinds / sizeof kinds[0])


/* What one simulated process handed its reduce function: its gradient sum and stats. */
typedef struct half {
  float *g;        /* [n] */
  double stats[2]; /* loss sum, counted targets */
  const struct half *other; /* the other process's half, added by add_other */
  int calls;
} half;

static void half_record(half *h, const float *grads, size_t n, const double *stats) {
  memcpy(h->g, grads, n * sizeof(float));
  h->stats[0] = stats[0];
  h->stats[1] = stats[1];
  h->calls++;
}

/* records this process's half and fails: the step is rejected */
static int record_and_fail(float *grads, size_t n, double *stats, void *user) {
  half_record((half *)user, grads, n, stats);
  return 1;
}

/* records this process's half, then adds the other's: the sum over both */
static int add_other(float *grads, size_t n, double *stats, void *user) {
  half *h = (half *)user;
  half_record(h, grads, n, stats);
  for (size_t i = 0; i < n; i++) grads[i] += h->other->g[i];
  stats[0] += h->other->stats[0];
  stats[1] += h->other->stats[1];
  return 0;
}

typedef struct proc {
  titans_model m;
  titans_trainer t;
  titans_stream s; /* streams only */
  half h;
} proc;

static void proc_init(proc *p, const titans_config *c, size_t rows, int stream) {
  titans_model_init(&p->m, c);
  lively_weights(&p->m, 7);
  titans_train_config tc = titans_train_config_default();
  tc.lr = 1e-2f;
  tc.warmup_steps = 0;
  tc.clip = 0.5f; /* the clip is active: it must see the global norm */
  titans_trainer_init(&p->t, &p->m, &tc);
  if (stream) titans_stream_init(&p->s, &p->m, rows);
  p->h.g = titans_alloc_floats(p->m.n_floats);
  p->h.calls = 0;
}

static void proc_free(proc *p, int stream) {
  if (stream) titans_stream_free(&p->s);
  titans_free(p->h.g);
  titans_trainer_free(&p->t);
  titans_model_free(&p->m);
}

static int proc_step(proc *p, const int *tokens, size_t rows, size_t T, int stream, float *loss) {
  return stream ? titans_train_step_stream(&p->t, &p->s, tokens, T, loss)
                : titans_train_step(&p->t, tokens, 1, rows, T, loss);
}

/* tokens [4, T + 1] of step `step`; with mask, most targets of rows 2 and 3 are TITANS_NO_LOSS */
static void step_tokens(int *tok, size_t T, int V, int step, int mask) {
  random_tokens(tok, 4 * (T + 1), V, 100 + (uint64_t)step);
  for (size_t b = 2; mask && b < 4; b++)
    for (size_t i = 1; i + 2 < T + 1; i++) tok[b * (T + 1) + i] = TITANS_NO_LOSS(tok[b * (T + 1) + i]);
}

/* Two processes of two rows each against one of four rows, `steps` steps. */
static void test_halves(int kind, int stream, int mask) {
  const size_t T = 8, steps = 3;
  titans_config c = tiny_stream_config(kind);
  proc R, P0, P1;
  proc_init(&R, &c, 4, stream);
  proc_init(&P0, &c, 2, stream);
  proc_init(&P1, &c, 2, stream);
  P0.h.other = &P1.h;
  P1.h.other = &P0.h;
  int tok[4 * 9];
  double loss_diff = 0.0, wdiff01 = 0.0;
  int ok = 1, rejected_clean = 1;
  float *before = titans_alloc_floats(P0.m.n_floats);
  for (size_t s = 0; s < steps && ok; s++) {
    step_tokens(tok, T, c.vocab, (int)s, mask);
    float lr_ = 0, l0 = 0, l1 = 0, lfail = 0;
    ok &= proc_step(&R, tok, 4, T, stream, &lr_) == TITANS_OK;
    memcpy(before, P0.m.params, P0.m.n_floats * sizeof(float));
    titans_trainer_set_reduce(&P0.t, record_and_fail, &P0.h);
    ok &= proc_step(&P0, tok, 2, T, stream, &lfail) == TITANS_ERR_STATE;
    rejected_clean &= memcmp(before, P0.m.params, P0.m.n_floats * sizeof(float)) == 0 && P0.t.step == (long)s;
    titans_trainer_set_reduce(&P1.t, add_other, &P1.h);
    ok &= proc_step(&P1, tok + 2 * (T + 1), 2, T, stream, &l1) == TITANS_OK;
    titans_trainer_set_reduce(&P0.t, add_other, &P0.h);
    ok &= proc_step(&P0, tok, 2, T, stream, &l0) == TITANS_OK;
    double d = fabs((double)l0 - lr_) > fabs((double)l1 - lr_) ? fabs((double)l0 - lr_) : fabs((double)l1 - lr_);
    if (d > loss_diff) loss_diff = d;
  }
  wdiff01 = th_max_abs_diff(P0.m.params, P1.m.params, P0.m.n_floats);
  /* weights move by about lr = 1e-2 a step: the difference relative to that */
  double wdiff = th_max_abs_diff(P0.m.params, R.m.params, R.m.n_floats) / 1e-2;
  const char *how = stream ? "streams" : "titans_train_step";
  th_check(ok, "%s, %s%s: every step ran (the recording pass rejected)", kind_label(kind), how, mask ? ", masked" : "");
  th_check(rejected_clean, "%s, %s%s: a step whose reduce function fails leaves weights and step as they were",
           kind_label(kind), how, mask ? ", masked" : "");
  th_check(wdiff01 == 0.0, "%s, %s%s: both processes hold the same weights after %zu steps (max diff %.3g)",
           kind_label(kind), how, mask ? ", masked" : "", steps, wdiff01);
  /* AdamW divides by sqrt(v): a parameter whose gradient is near float noise moves by up to lr on that
     noise, so reordering the sums shows at 1e-4..1e-3 of lr */
  th_close("  2 x 2 rows vs 4 rows: weights, max |diff| / lr", wdiff, 3e-3);
  th_close("  2 x 2 rows vs 4 rows: reported loss", loss_diff, 1e-5);
  titans_free(before);
  proc_free(&R, stream);
  proc_free(&P0, stream);
  proc_free(&P1, stream);
}

/* A process whose step fails (a token outside the vocabulary) still calls its reduce function, with a NaN
   loss: the other rejects the step as non-finite, weights untouched. */
static void test_failure_propagates(void) {
  const size_t T = 8;
  titans_config c = tiny_stream_config(TITANS_BLOCK_MAG);
  proc P0, P1;
  proc_init(&P0, &c, 2, 0);
  proc_init(&P1, &c, 2, 0);
  P0.h.other = &P1.h;
  int tok[4 * 9];
  step_tokens(tok, T, c.vocab, 0, 0);
  tok[3 * (T + 1) + 2] = c.vocab; /* row 3 (process 1) holds a bad token */
  float l = 0;
  titans_trainer_set_reduce(&P1.t, record_and_fail, &P1.h);
  int rc1 = proc_step(&P1, tok + 2 * (T + 1), 2, T, 0, &l);
  th_check(rc1 == TITANS_ERR_ARG && P1.h.calls == 1 && isnan(P1.h.stats[0]),
           "the failing process returns its own error (%d) and still called its reduce function once, with a NaN loss",
           rc1);
  float *before = titans_alloc_floats(P0.m.n_floats);
  memcpy(before, P0.m.params, P0.m.n_floats * sizeof(float));
  titans_trainer_set_reduce(&P0.t, add_other, &P0.h);
  int rc0 = proc_step(&P0, tok, 2, T, 0, &l);
  th_check(rc0 == TITANS_ERR_NONFINITE && memcmp(before, P0.m.params, P0.m.n_floats * sizeof(float)) == 0 &&
               P0.t.step == 0,
           "the other process rejects the step as non-finite (%d), weights and step untouched: %s", rc0, P0.t.error);
  titans_free(before);
  proc_free(&P0, 0);
  proc_free(&P1, 0);
}

/* ---- the overlapped hook (titans_trainer_set_reduce_overlap) ---------------------------------- */

/* What a simulated process saw of its ranges this step: each float's range, the values handed out. */
typedef struct ranges {
  half h;               /* the finish function's half, as the blocking hook's */
  size_t n_floats;
  unsigned char *seen;  /* [n_floats] how many ranges held each float */
  float *given;         /* [n_floats] each float's value when its range was handed out */
  size_t count, lows[16]; /* ranges this step; the first 16 ranges' offsets */
  int order_ok;         /* ranges came top of the slab first, each right below the last */
  size_t next_hi;       /* where the next range must end */
  int fail_start;       /* 1: the start function reports a failure */
  /* this step's checks, read by finish */
  int covered_once, final_ok, finishes;
  size_t step_ranges; /* ranges of the last step */
} ranges;

static void ranges_init(ranges *r, size_t n) {
  memset(r, 0, sizeof *r);
  r->n_floats = n;
  r->h.g = titans_alloc_floats(n);
  r->seen = (unsigned char *)titans_alloc_bytes(n, 1);
  r->given = titans_alloc_floats(n);
}

static void ranges_free(ranges *r) {
  titans_free(r->h.g);
  titans_free(r->seen);
  titans_free(r->given);
}

static void ranges_new_step(ranges *r) {
  memset(r->seen, 0, r->n_floats);
  r->count = 0;
  r->order_ok = 1;
  r->next_hi = r->n_floats;
}

static int record_start(float *range, size_t n, size_t offset, void *user) {
  ranges *r = (ranges *)user;
  if (r->count == 0) ranges_new_step(r);
  r->order_ok &= offset + n == r->next_hi && n > 0;
  r->next_hi = offset;
  if (r->count < 16) r->lows[r->count] = offset;
  r->count++;
  for (size_t i = 0; i < n && offset + i < r->n_floats; i++) r->seen[offset + i]++;
  memcpy(r->given + offset, range, n * sizeof(float));
  return r->fail_start;
}

/* finish's checks: the ranges covered the slab once, and nothing changed after it was handed out */
static void ranges_check(ranges *r, const float *grads, size_t n) {
  int once = r->count > 0 && n == r->n_floats;
  for (size_t i = 0; once && i < n; i++) once = r->seen[i] == 1;
  r->covered_once = once && r->order_ok && r->next_hi == 0;
  r->final_ok = memcmp(r->given, grads, n * sizeof(float)) == 0;
  r->finishes++;
  r->step_ranges = r->count;
  r->count = 0;
}

static int record_finish_and_fail(float *grads, size_t n, double *stats, void *user) {
  ranges *r = (ranges *)user;
  ranges_check(r, grads, n);
  half_record(&r->h, grads, n, stats);
  return 1;
}

static int finish_add_other(float *grads, size_t n, double *stats, void *user) {
  ranges *r = (ranges *)user;
  ranges_check(r, grads, n);
  return add_other(grads, n, stats, &r->h);
}

/* The blocking and the overlapped hooks, each on the two-process simulation of test_halves (micro
   micro-batches of one row with titans_train_step when micro is 2): the overlapped ranges cover the slab
   once, top first, each final when handed out, and every weight is bit for bit the blocking hook's. */
static void test_overlap(int kind, int stream, int micro, int tied) {
  const size_t T = 8, steps = 3;
  titans_config c = tiny_stream_config(kind);
  c.tied = tied;
  proc B0, B1, O0, O1; /* blocking and overlapped processes; O*.h is unused */
  proc_init(&B0, &c, 2, stream);
  proc_init(&B1, &c, 2, stream);
  proc_init(&O0, &c, 2, stream);
  proc_init(&O1, &c, 2, stream);
  ranges r0, r1;
  ranges_init(&r0, O0.m.n_floats);
  ranges_init(&r1, O1.m.n_floats);
  B0.h.other = &B1.h;
  B1.h.other = &B0.h;
  r0.h.other = &r1.h;
  r1.h.other = &r0.h;
  int tok[4 * 9], ok = 1, checks = 1, rejected_clean = 1;
  size_t expect = 2 * (size_t)c.n_layers + (tied ? 1 : 2);
  float *before = titans_alloc_floats(O0.m.n_floats);
  for (size_t s = 0; s < steps && ok; s++) {
    step_tokens(tok, T, c.vocab, (int)s, 0);
    float l = 0;
    size_t nm = stream ? 1 : (size_t)micro, rows = 2 / nm;
    titans_trainer_set_reduce(&B0.t, record_and_fail, &B0.h);
    ok &= (stream ? proc_step(&B0, tok, 2, T, 1, &l) : titans_train_step(&B0.t, tok, nm, rows, T, &l)) ==
          TITANS_ERR_STATE;
    titans_trainer_set_reduce(&B1.t, add_other, &B1.h);
    ok &= (stream ? proc_step(&B1, tok + 2 * (T + 1), 2, T, 1, &l)
                  : titans_train_step(&B1.t, tok + 2 * (T + 1), nm, rows, T, &l)) == TITANS_OK;
    titans_trainer_set_reduce(&B0.t, add_other, &B0.h);
    ok &= (stream ? proc_step(&B0, tok, 2, T, 1, &l) : titans_train_step(&B0.t, tok, nm, rows, T, &l)) == TITANS_OK;

    memcpy(before, O0.m.params, O0.m.n_floats * sizeof(float));
    ok &= titans_trainer_set_reduce_overlap(&O0.t, record_start, record_finish_and_fail, &r0) == TITANS_OK;
    ok &= (stream ? proc_step(&O0, tok, 2, T, 1, &l) : titans_train_step(&O0.t, tok, nm, rows, T, &l)) ==
          TITANS_ERR_STATE;
    checks &= r0.covered_once && r0.final_ok;
    rejected_clean &= memcmp(before, O0.m.params, O0.m.n_floats * sizeof(float)) == 0 && O0.t.step == (long)s;
    ok &= titans_trainer_set_reduce_overlap(&O1.t, record_start, finish_add_other, &r1) == TITANS_OK;
    ok &= (stream ? proc_step(&O1, tok + 2 * (T + 1), 2, T, 1, &l)
                  : titans_train_step(&O1.t, tok + 2 * (T + 1), nm, rows, T, &l)) == TITANS_OK;
    checks &= r1.covered_once && r1.final_ok;
    titans_trainer_set_reduce_overlap(&O0.t, record_start, finish_add_other, &r0);
    ok &= (stream ? proc_step(&O0, tok, 2, T, 1, &l) : titans_train_step(&O0.t, tok, nm, rows, T, &l)) == TITANS_OK;
    checks &= r0.covered_once && r0.final_ok;
  }
  char what[160];
  snprintf(what, sizeof what, "%s, %s%s, %s", kind_label(kind), stream ? "streams" : "titans_train_step",
           micro > 1 ? " of 2 micro-batches" : "", tied ? "tied" : "untied");
  th_check(ok, "overlap, %s: every step ran (the recording passes rejected)", what);
  th_check(checks && r0.finishes == (int)(2 * steps) && r1.finishes == (int)steps && r0.step_ranges == expect,
           "  %zu ranges a step (%zu expected), top first, covering the %zu floats once, each final when handed out; "
           "finish once a step", r0.step_ranges, expect, O0.m.n_floats);
  /* the second range: tied, the top layer's mixer (its FFN and the final norm came first); untied, the top
     layer's FFN (the final norm and head came first) */
  const titans_layer *top = &O0.m.w.layers[c.n_layers - 1];
  size_t expect_low1 = (size_t)((tied ? top->norm1 : top->norm2) - O0.m.params);
  th_check(r0.lows[1] == expect_low1, "  the second range starts at %zu (%s; expected %zu)", r0.lows[1],
           tied ? "the top layer's norm1: its attention or memory" : "the top layer's norm2: its FFN", expect_low1);
  th_check(rejected_clean, "  a step whose finish fails leaves weights and step as they were");
  double d0 = th_max_abs_diff(O0.m.params, B0.m.params, O0.m.n_floats);
  double d1 = th_max_abs_diff(O1.m.params, B1.m.params, O1.m.n_floats);
  th_check(d0 == 0.0 && d1 == 0.0,
           "  the weights are the blocking hook's bit for bit after %zu steps (max diff %.3g, %.3g)", steps, d0, d1);
  titans_free(before);
  ranges_free(&r0);
  ranges_free(&r1);
  proc_free(&B0, stream);
  proc_free(&B1, stream);
  proc_free(&O0, stream);
  proc_free(&O1, stream);
}

/* A failing step (a bad token) still starts every range, zeros, and calls finish with a NaN loss; a start
   function that fails fails the step with TITANS_ERR_STATE, weights untouched, the other ranges still
   started; finish NULL with a start is refused. */
static void test_overlap_failures(void) {
  const size_t T = 8;
  titans_config c = tiny_stream_config(TITANS_BLOCK_MAG);
  proc P;
  proc_init(&P, &c, 2, 0);
  ranges r;
  ranges_init(&r, P.m.n_floats);
  r.h.other = &r.h;
  int tok[4 * 9];
  step_tokens(tok, T, c.vocab, 0, 0);
  tok[1 * (T + 1) + 2] = c.vocab;
  float l = 0;
  titans_trainer_set_reduce_overlap(&P.t, record_start, record_finish_and_fail, &r);
  int rc = titans_train_step(&P.t, tok, 1, 2, T, &l);
  int zeros = 1;
  for (size_t i = 0; i < P.m.n_floats; i++) zeros &= r.given[i] == 0.0f;
  th_check(rc == TITANS_ERR_ARG && r.covered_once && zeros && r.finishes == 1 && isnan(r.h.stats[0]),
           "overlap: a step with a bad token returns its error (%d), still starts every range (all zeros) and "
           "calls finish once with a NaN loss", rc);
  step_tokens(tok, T, c.vocab, 0, 0);
  float *before = titans_alloc_floats(P.m.n_floats);
  memcpy(before, P.m.params, P.m.n_floats * sizeof(float));
  r.fail_start = 1;
  titans_trainer_set_reduce_overlap(&P.t, record_start, finish_add_other, &r);
  rc = titans_train_step(&P.t, tok, 1, 2, T, &l);
  th_check(rc == TITANS_ERR_STATE && r.covered_once && r.finishes == 2 &&
               memcmp(before, P.m.params, P.m.n_floats * sizeof(float)) == 0 && P.t.step == 0,
           "overlap: a failing start function fails the step (%d), every range still started, finish called, "
           "weights untouched: %s", rc, P.t.error);
  rc = titans_trainer_set_reduce_overlap(&P.t, record_start, NULL, &r);
  th_check(rc == TITANS_ERR_ARG && P.t.reduce == finish_add_other,
           "overlap: a start without finish is refused (%d), the hooks unchanged: %s", rc, P.t.error);
  titans_trainer_set_reduce(&P.t, NULL, NULL);
  th_check(P.t.reduce == NULL && P.t.reduce_start == NULL, "set_reduce(NULL) turns both off");
  titans_free(before);
  ranges_free(&r);
  proc_free(&P, 0);
}

int main(void) {
  printf("data-parallel steps: two trainers of 2 rows with summing reduce functions against one of 4 rows\n");
  for (int k = 0; k < NKINDS; k++) {
    test_halves(kinds[k], 0, 0);
    test_halves(kinds[k], 0, 1);
    if (kinds[k] != TITANS_BLOCK_MAL && kinds[k] != TITANS_BLOCK_ATTN) test_halves(kinds[k], 1, 0);
  }
  test_failure_propagates();
  printf("overlapped reduction: ranges handed out during the backward, against the blocking hook\n");
  for (int k = 0; k < NKINDS; k++) {
    test_overlap(kinds[k], 0, 1, 1);
    if (kinds[k] != TITANS_BLOCK_MAL && kinds[k] != TITANS_BLOCK_ATTN) test_overlap(kinds[k], 1, 1, 1);
  }
  test_overlap(TITANS_BLOCK_MAG, 0, 2, 1);
  test_overlap(TITANS_BLOCK_MAG, 0, 1, 0);
  test_overlap(TITANS_BLOCK_LM2, 0, 2, 0);
  test_overlap_failures();
  return th_summary("test_reduce");
}
