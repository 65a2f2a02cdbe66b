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

int main(void) {
  printf("data-parallel steps: two trainers of 2 rows with summing reduce functions against one of 4 rows\n");
  for (int k = 0; k < NKINDS; k++) {
    test_halves(kinds[k], 0, 0);
    test_halves(kinds[k], 0, 1);
    if (kinds[k] != TITANS_BLOCK_MAL && kinds[k] != TITANS_BLOCK_ATTN) test_halves(kinds[k], 1, 0);
  }
  test_failure_propagates();
  return th_summary("test_reduce");
}
