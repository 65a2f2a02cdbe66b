/* Tests of the training calls with separate inputs and targets (titans_train_step_targets,
   titans_eval_loss_targets, titans_forward_backward_targets), for every block kind: they take the same
   steps, bit for bit, as titans_train_step on the one token array that says the same thing (target at t =
   token t + 1, TITANS_NO_LOSS where the target is left out); a target that no single array can say (the
   input at t + 1 is filler) is scored as the cross-entropy of the logits at t; a reduce function sees
   the counted targets; bad targets and inputs are errors naming their position, weights untouched. And
   the costs on writing skip the positions titans_trainer_set_write_cost_skip marks, at the sequence's
   positions, through every training call. */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "harness.h"
#include "model_fixtures.h"

static const int kinds[] = {TITANS_BLOCK_ATTN, TITANS_BLOCK_SWA, TITANS_BLOCK_MAC, TITANS_BLOCK_MAG,
                            TITANS_BLOCK_MAL,  TITANS_BLOCK_LMM, TITANS_BLOCK_LM2};
#define NKINDS (int)(sizeof kinds / sizeof kinds[0])

enum { N_MICRO = 2, ROWS = 2, LEN = 8 };

/* tokens [N_MICRO, ROWS, LEN + 1] with about a third of the targets marked TITANS_NO_LOSS, and the same
   batch as separate arrays: inputs [N_MICRO, ROWS, LEN] (ids) and targets [N_MICRO, ROWS, LEN] (-1: none). */
static void make_batch(int *tokens, int *inputs, int *targets, int V, uint64_t seed) {
  size_t rows = (size_t)N_MICRO * ROWS;
  random_tokens(tokens, rows * (LEN + 1), V, seed);
  for (size_t r = 0; r < rows; r++)
    for (size_t i = 1; i <= LEN; i++)
      if ((r + i) % 3 == 0) tokens[r * (LEN + 1) + i] = TITANS_NO_LOSS(tokens[r * (LEN + 1) + i]);
  for (size_t r = 0; r < rows; r++)
    for (size_t i = 0; i < LEN; i++) {
      int in = tokens[r * (LEN + 1) + i], next = tokens[r * (LEN + 1) + i + 1];
      inputs[r * LEN + i] = in < 0 ? -1 - in : in;
      targets[r * LEN + i] = next < 0 ? -1 : next;
    }
}

typedef struct pair {
  titans_model m[2];
  titans_trainer t[2];
} pair;

static void pair_init(pair *p, int kind) {
  titans_config c = tiny_stream_config(kind);
  titans_train_config tc = titans_train_config_default();
  tc.lr = 1e-2f;
  tc.warmup_steps = 0;
  for (int i = 0; i < 2; i++) {
    titans_model_init(&p->m[i], &c);
    lively_weights(&p->m[i], 11);
    titans_trainer_init(&p->t[i], &p->m[i], &tc);
  }
}

static void pair_free(pair *p) {
  for (int i = 0; i < 2; i++) {
    titans_trainer_free(&p->t[i]);
    titans_model_free(&p->m[i]);
  }
}

/* Two steps through each API from the same weights: the losses, the weights and the evaluation agree bit for bit. */
static void test_same_as_next_token(int kind) {
  pair p;
  pair_init(&p, kind);
  int V = p.m[0].cfg.vocab;
  int tokens[N_MICRO * ROWS * (LEN + 1)], inputs[N_MICRO * ROWS * LEN], targets[N_MICRO * ROWS * LEN];
  int same = 1, rc = 0;
  for (int step = 0; step < 2; step++) {
    make_batch(tokens, inputs, targets, V, 100 + (uint64_t)step);
    float l0 = 0.0f, l1 = 0.0f;
    rc |= titans_train_step(&p.t[0], tokens, N_MICRO, ROWS, LEN, &l0);
    rc |= titans_train_step_targets(&p.t[1], inputs, targets, N_MICRO, ROWS, LEN, &l1);
    same &= l0 == l1 && isfinite(l0);
  }
  same &= memcmp(p.m[0].params, p.m[1].params, p.m[0].n_floats * sizeof(float)) == 0;
  th_check(!rc && same,
           "%s: two steps of titans_train_step_targets = titans_train_step with TITANS_NO_LOSS marks "
           "(losses and weights bit-identical)",
           kind_label(kind));
  float e0 = 0.0f, e1 = 0.0f;
  rc = titans_eval_loss(&p.t[0], tokens, ROWS, LEN, &e0) |
       titans_eval_loss_targets(&p.t[1], inputs, targets, ROWS, LEN, &e1);
  th_check(!rc && e0 == e1, "%s: titans_eval_loss_targets = titans_eval_loss (%.6f, %.6f)", kind_label(kind), e0, e1);
  memset(p.t[0].grads, 0, p.m[0].n_floats * sizeof(float));
  memset(p.t[1].grads, 0, p.m[1].n_floats * sizeof(float));
  rc = titans_forward_backward(&p.t[0], tokens, ROWS, LEN, 0.5f, &e0) |
       titans_forward_backward_targets(&p.t[1], inputs, targets, ROWS, LEN, 0.5f, &e1);
  double diff = th_max_abs_diff(p.t[0].grads, p.t[1].grads, p.m[0].n_floats);
  th_check(!rc && diff == 0.0 && e0 == e1, "%s: titans_forward_backward_targets adds the same gradient (max diff %.3g)",
           kind_label(kind), diff);
  pair_free(&p);
}

/* Filler inputs and targets that no next-token array can hold: the loss is the mean cross-entropy, in
   double, of the logits of the inputs at the labelled positions. */
static void test_filler_targets(void) {
  pair p;
  pair_init(&p, TITANS_BLOCK_MAC);
  int V = p.m[0].cfg.vocab;
  int inputs[ROWS * LEN], targets[ROWS * LEN];
  random_tokens(inputs, ROWS * LEN, V, 5);
  for (size_t j = 0; j < ROWS * LEN; j++) {
    targets[j] = j % 4 == 3 ? (int)((j * 7) % (size_t)V) : -1;
    if (j % 4 == 3) inputs[j] = 0; /* filler where the answer is asked */
  }
  float *logits = titans_alloc_floats((size_t)ROWS * LEN * (size_t)V);
  float loss = 0.0f;
  int rc = titans_forward_logits(&p.t[0], inputs, ROWS, LEN, logits) |
           titans_eval_loss_targets(&p.t[0], inputs, targets, ROWS, LEN, &loss);
  double sum = 0.0;
  int counted = 0;
  for (size_t j = 0; j < ROWS * LEN; j++) {
    if (targets[j] < 0) continue;
    const float *z = logits + j * (size_t)V;
    double mx = z[0], se = 0.0;
    for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int v = 0; v < V; v++) se += exp(z[v] - mx);
    sum += mx + log(se) - z[targets[j]];
    counted++;
  }
  double want = sum / counted;
  th_close("filler inputs, targets at every 4th position: the loss is the cross-entropy of the logits there",
           rc ? INFINITY : fabs(loss - want) / want, 1e-5);
  /* titans_forward_logits_targets: the same rows, in order, from a head run on them alone */
  float *at = titans_alloc_floats((size_t)ROWS * LEN * (size_t)V);
  size_t n_at = 0, k = 0;
  double worst = 0.0;
  rc = titans_forward_logits_targets(&p.t[0], inputs, targets, ROWS, LEN, at, &n_at);
  for (size_t j = 0; !rc && j < ROWS * LEN; j++) {
    if (targets[j] < 0) continue;
    for (int v = 0; v < V; v++) worst = fmax(worst, fabs(at[k * (size_t)V + v] - logits[j * (size_t)V + v]));
    k++;
  }
  th_check(!rc && n_at == (size_t)counted && k == n_at && worst <= 1e-5,
           "titans_forward_logits_targets: the %zu rows with a target (want %d), as titans_forward_logits has them "
           "(max diff %.3g)", n_at, counted, worst);
  titans_free(at);
  titans_free(logits);
  pair_free(&p);
}

/* With a reduce function (one process: it keeps the sums as they are), the counted targets are those >= 0. */
static int keep_sums(float *grads, size_t n, double *stats, void *user) {
  (void)grads;
  (void)n;
  memcpy(user, stats, 2 * sizeof(double));
  return 0;
}

static void test_reduce_counts(void) {
  pair p;
  pair_init(&p, TITANS_BLOCK_LMM);
  int tokens[N_MICRO * ROWS * (LEN + 1)], inputs[N_MICRO * ROWS * LEN], targets[N_MICRO * ROWS * LEN];
  make_batch(tokens, inputs, targets, p.m[0].cfg.vocab, 9);
  double stats[2] = {0.0, 0.0};
  int counted = 0;
  for (size_t j = 0; j < N_MICRO * ROWS * LEN; j++) counted += targets[j] >= 0;
  titans_trainer_set_reduce(&p.t[0], keep_sums, stats);
  float loss = 0.0f;
  int rc = titans_train_step_targets(&p.t[0], inputs, targets, N_MICRO, ROWS, LEN, &loss);
  th_check(!rc && stats[1] == (double)counted && fabs(stats[0] / stats[1] - loss) < 1e-5 * fabs(loss),
           "a reduce function gets the counted targets (%.0f of %d positions, want %d) and their loss sum", stats[1],
           N_MICRO * ROWS * LEN, counted);
  pair_free(&p);
}

/* A target >= V, a negative input or an input >= V: TITANS_ERR_ARG naming the position, nothing changes. */
static void test_bad_arrays(void) {
  pair p;
  pair_init(&p, TITANS_BLOCK_SWA);
  int V = p.m[0].cfg.vocab;
  int tokens[N_MICRO * ROWS * (LEN + 1)], inputs[N_MICRO * ROWS * LEN], targets[N_MICRO * ROWS * LEN];
  make_batch(tokens, inputs, targets, V, 3);
  size_t nf = p.m[0].n_floats;
  float *before = titans_alloc_floats(nf);
  memcpy(before, p.m[0].params, nf * sizeof(float));
  float loss = 0.0f;
  targets[1 * LEN + 5] = V; /* row 1, position 5 of the first micro-batch */
  int rc = titans_train_step_targets(&p.t[0], inputs, targets, N_MICRO, ROWS, LEN, &loss);
  th_check(rc == TITANS_ERR_ARG && strstr(p.t[0].error, "(1, 5)") && isnan(loss) && p.t[0].step == 0 &&
               memcmp(before, p.m[0].params, nf * sizeof(float)) == 0,
           "a target >= V is refused, weights untouched: %s", p.t[0].error);
  targets[1 * LEN + 5] = -7; /* any negative target: no loss */
  rc = titans_eval_loss_targets(&p.t[0], inputs, targets, ROWS, LEN, &loss);
  th_check(rc == TITANS_OK && isfinite(loss), "a negative target is left out of the loss (rc %d)", rc);
  int bad_inputs[2] = {-1, V};
  for (int k = 0; k < 2; k++) {
    int saved = inputs[ROWS * LEN + 2];
    inputs[ROWS * LEN + 2] = bad_inputs[k]; /* second micro-batch, row 0, position 2 */
    rc = titans_train_step_targets(&p.t[0], inputs, targets, N_MICRO, ROWS, LEN, &loss);
    th_check(rc == TITANS_ERR_ARG && strstr(p.t[0].error, "(0, 2)") && p.t[0].step == 0 &&
                 memcmp(before, p.m[0].params, nf * sizeof(float)) == 0,
             "an input %d is refused, weights untouched: %s", bad_inputs[k], p.t[0].error);
    rc = titans_forward_backward_targets(&p.t[0], inputs + ROWS * LEN, targets, ROWS, LEN, 1.0f, &loss);
    th_check(rc == TITANS_ERR_ARG, "titans_forward_backward_targets refuses it too: %s", p.t[0].error);
    inputs[ROWS * LEN + 2] = saved;
  }
  titans_free(before);
  pair_free(&p);
}

/* The gradient after one call of `path` (0: titans_forward_backward on ROWS rows, 1: titans_train_step in
   ROWS micro-batches of one row, 2: titans_train_step_stream) from fresh weights, with both costs on
   writing and skip [ROWS, LEN]; grads [n_floats] gets it. */
static int grads_with_skip(int kind, int path, const int *tokens, const unsigned char *skip, float *grads) {
  titans_config c = tiny_stream_config(kind);
  c.vocab = 32; /* ROWS x (LEN + 1) distinct tokens */
  titans_train_config tc = titans_train_config_default();
  tc.clip = 0.0f; /* the gradient as computed, not rescaled by its norm */
  tc.write_cost = 2.0f;
  tc.write_cost_log = 0.5f;
  titans_model m;
  titans_trainer t;
  titans_stream st;
  int rc = titans_model_init(&m, &c);
  if (rc) return rc;
  lively_weights(&m, 5);
  rc = titans_trainer_init(&t, &m, &tc);
  titans_trainer_set_write_cost_skip(&t, skip);
  float loss = 0.0f;
  if (!rc && path == 0) rc = titans_forward_backward(&t, tokens, ROWS, LEN, 1.0f, &loss);
  if (!rc && path == 1) rc = titans_train_step(&t, tokens, ROWS, 1, LEN, &loss);
  if (!rc && path == 2 && !(rc = titans_stream_init(&st, &m, ROWS))) {
    rc = titans_train_step_stream(&t, &st, tokens, LEN, &loss);
    titans_stream_free(&st);
  }
  if (!rc) memcpy(grads, t.grads, m.n_floats * sizeof(float));
  titans_trainer_free(&t);
  titans_model_free(&m);
  return rc;
}

/* With the costs on one input position p of row 1 alone, against the costs nowhere: the embedding
   gradient of row 1's token at p changes; those of its tokens after p and of every token of row 0 are
   the same bits (a write at p reads nothing later, nor the other row). Every token is distinct, so each
   embedding row is one position's. A mask read at a shifted position (by the persistent tokens, a MAC
   segment's start, a micro-batch) moves the change. */
static void test_write_cost_skip(int kind, int path) {
  static const char *paths[] = {"titans_forward_backward", "titans_train_step, a micro-batch a row",
                                "titans_train_step_stream"};
  const size_t row = 1, p = 5;
  int tokens[ROWS * (LEN + 1)];
  for (size_t j = 0; j < ROWS * (LEN + 1); j++) tokens[j] = (int)j + 1;
  unsigned char skip[ROWS * LEN];
  titans_config c = tiny_stream_config(kind);
  c.vocab = 32;
  titans_model shape;
  if (titans_model_init(&shape, &c)) {
    th_check(0, "%s: the test's model: %s", kind_label(kind), shape.error);
    return;
  }
  size_t nf = shape.n_floats, emb = (size_t)(shape.w.tok_emb - shape.params), d = (size_t)c.d;
  titans_model_free(&shape);
  float *g[2] = {titans_alloc_floats(nf), titans_alloc_floats(nf)};
  int rc = 0;
  for (int on = 0; on < 2; on++) {
    memset(skip, 1, sizeof skip); /* the costs nowhere */
    if (on) skip[row * LEN + p] = 0;
    rc |= grads_with_skip(kind, path, tokens, skip, g[on]);
  }
  const float *e0 = g[0] + emb, *e1 = g[1] + emb; /* [V, d] */
  size_t at_p = (size_t)tokens[row * (LEN + 1) + p];
  int changed = memcmp(e0 + at_p * d, e1 + at_p * d, d * sizeof(float)) != 0, same = 1;
  for (size_t q = p + 1; q < LEN; q++) {
    size_t v = (size_t)tokens[row * (LEN + 1) + q];
    same &= memcmp(e0 + v * d, e1 + v * d, d * sizeof(float)) == 0;
  }
  for (size_t q = 0; q < LEN; q++) {
    size_t v = (size_t)tokens[q]; /* row 0 */
    same &= memcmp(e0 + v * d, e1 + v * d, d * sizeof(float)) == 0;
  }
  th_check(!rc && changed && same,
           "%s, %s: the costs on writing at one position of one row alone change the embedding gradient of its "
           "token there, not of the tokens after it nor of the other row", kind_label(kind), paths[path]);
  titans_free(g[0]);
  titans_free(g[1]);
}

int main(void) {
  printf("training with separate targets: the same steps as TITANS_NO_LOSS token arrays, every kind\n");
  for (int k = 0; k < NKINDS; k++) test_same_as_next_token(kinds[k]);
  printf("training with separate targets: filler inputs, the reduce counts, bad arrays\n");
  test_filler_targets();
  test_reduce_counts();
  test_bad_arrays();
  printf("the costs on writing skip the positions the caller marks (titans_trainer_set_write_cost_skip)\n");
  const int memory_kinds[] = {TITANS_BLOCK_MAC, TITANS_BLOCK_MAG, TITANS_BLOCK_MAL, TITANS_BLOCK_LMM};
  for (int k = 0; k < 4; k++)
    for (int path = 0; path < 3; path++)
      if (path < 2 || memory_kinds[k] != TITANS_BLOCK_MAL) /* MAL does not stream */
        test_write_cost_skip(memory_kinds[k], path);
  return th_summary("test_train_targets");
}
