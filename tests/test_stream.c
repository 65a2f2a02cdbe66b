/* Tests of streams (truncated backpropagation through time, titans_stream): for every kind that can
   stream (MAC, LMM, SWA, MAG), a stream read window by window gives the logits of a session fed token by
   token; one window of a fresh stream is the stateless forward bit for bit; a restarted row starts over;
   the truncated gradient of a continuing window matches central differences (the carried state held
   fixed), and w0 gets a gradient only from rows that started there; kinds and windows that cannot
   stream are refused; targets marked TITANS_NO_LOSS are left out of the loss. */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "harness.h"
#include "model_fixtures.h"

static const int kinds[] = {TITANS_BLOCK_MAC, TITANS_BLOCK_LMM, TITANS_BLOCK_SWA, TITANS_BLOCK_MAG, TITANS_BLOCK_LM2};
#define NKINDS (int)(sizeof kinds / sizeof kinds[0])


/* rows [B, n_windows * T] -> the window w as tokens [B, T] (with_target: [B, T + 1], the next token too) */
static void window_of(int *out, const int *rows, size_t B, size_t len, size_t w, size_t T, int with_target) {
  size_t k = T + (with_target ? 1 : 0);
  for (size_t b = 0; b < B; b++) memcpy(out + b * k, rows + b * len + w * T, k * sizeof(int));
}

/* The stream's logits over 3 windows against sessions fed token by token, and the first window against
   the stateless forward. */
static void test_stream_equals_session(int kind) {
  titans_config c = tiny_stream_config(kind);
  titans_model m;
  titans_trainer t;
  titans_stream st;
  const char *name = kind_label(kind);
  if (titans_model_init(&m, &c)) { th_check(0, "%s: model init: %s", name, m.error); return; }
  lively_weights(&m, 31 + (uint64_t)kind);
  titans_trainer_init(&t, &m, NULL);
  size_t B = 2, T = 8, W = 3, len = W * T, V = (size_t)c.vocab;
  int rows[2 * 24], win[2 * 8];
  random_tokens(rows, B * len, c.vocab, 9 + (uint64_t)kind);
  float *ls = titans_alloc_floats(B * len * V), *lw = titans_alloc_floats(B * T * V),
        *l0 = titans_alloc_floats(B * T * V);
  int rc = titans_stream_init(&st, &m, B);
  for (size_t w = 0; w < W && !rc; w++) {
    window_of(win, rows, B, len, w, T, 0);
    rc = titans_forward_logits_stream(&t, &st, win, T, lw);
    if (w == 0) titans_forward_logits(&t, win, B, T, l0);
    if (w == 0 && !rc)
      th_check(memcmp(lw, l0, B * T * V * sizeof(float)) == 0,
               "%s: the first window of a fresh stream == the stateless forward, bit for bit", name);
    for (size_t b = 0; b < B; b++) memcpy(ls + (b * len + w * T) * V, lw + b * T * V, T * V * sizeof(float));
  }
  th_check(rc == 0 && st.position == (long long)len, "%s: 3 windows of %zu tokens stream (%s)", name, T,
           rc ? t.error : "ok");
  double worst = 0, scale = 0;
  for (size_t b = 0; b < B; b++) {
    titans_session ss;
    float *sl = titans_alloc_floats(len * V);
    int src = titans_session_init(&ss, &m);
    for (size_t i = 0; i < len && !src; i++) src = titans_session_feed(&ss, rows + b * len + i, 1, sl + i * V);
    for (size_t i = 0; i < len * V; i++) scale = fmax(scale, fabs(sl[i]));
    double diff = src ? INFINITY : th_max_abs_diff(sl, ls + b * len * V, len * V);
    worst = fmax(worst, diff);
    titans_session_free(&ss);
    titans_free(sl);
  }
  char what[200];
  snprintf(what, sizeof what,
           "%s: stream read window by window == session fed token by token (relative to max |logit| %.3g)", name,
           scale);
  th_close(what, worst / scale, 2e-5);

  /* a restarted row reads its next window as a new document: the stateless forward's logits (MAG's rows
     restart together, and a lone restart is refused) */
  window_of(win, rows, B, len, 1, T, 0);
  titans_stream_restart(&st, 1);
  titans_forward_logits(&t, win, B, T, l0);
  if (kind == TITANS_BLOCK_MAG) {
    rc = titans_forward_logits_stream(&t, &st, win, T, lw);
    th_check(rc == TITANS_ERR_ARG, "%s: a lone restarted row is refused: %s", name, t.error);
    titans_stream_restart(&st, 0);
    rc = titans_forward_logits_stream(&t, &st, win, T, lw);
    th_check(rc == 0 && memcmp(lw, l0, B * T * V * sizeof(float)) == 0,
             "%s: rows restarted together start over (bit for bit)", name);
  } else {
    rc = titans_forward_logits_stream(&t, &st, win, T, lw);
    th_check(rc == 0 && memcmp(lw + T * V, l0 + T * V, T * V * sizeof(float)) == 0 &&
                 memcmp(lw, l0, T * V * sizeof(float)) != 0,
             "%s: a restarted row starts over (bit for bit) while the other row goes on", name);
  }
  titans_stream_free(&st);
  titans_free(ls); titans_free(lw); titans_free(l0);
  titans_trainer_free(&t);
  titans_model_free(&m);
}

/* Restarts row `row` (every row for MAG, whose rows restart together); nothing when row >= B. */
static void restart(titans_stream *st, size_t row) {
  for (size_t b = 0; b < st->batch && row < st->batch; b++)
    if (b == row || st->model->cfg.block == TITANS_BLOCK_MAG) titans_stream_restart(st, b);
}

/* Loss of window 2 (tokens w2 [B, T + 1]) with the parameters as they are, after window 1 (w1) was read
   with the parameters p0: the carried state is a constant of window 2. restart_row < B restarts a row. */
static double window2_loss(titans_trainer *t, const float *p0, const int *w1, const int *w2, size_t B, size_t T,
                           size_t restart_row) {
  titans_model *m = t->model;
  float *now = titans_alloc_floats(m->n_floats), l = 0;
  memcpy(now, m->params, m->n_floats * sizeof(float));
  memcpy(m->params, p0, m->n_floats * sizeof(float));
  titans_stream st;
  titans_stream_init(&st, m, B);
  titans_eval_loss_stream(t, &st, w1, T, &l);
  memcpy(m->params, now, m->n_floats * sizeof(float));
  restart(&st, restart_row);
  int rc = titans_eval_loss_stream(t, &st, w2, T, &l);
  titans_stream_free(&st);
  titans_free(now);
  return rc ? NAN : l;
}

/* The truncated gradient of window 2 against central differences of window2_loss (Richardson
   extrapolated, along the gradient and a random direction, per parameter tensor; tolerance as in
   test_model). */
static void test_stream_gradients(int kind, size_t restart_row) {
  titans_config c = tiny_stream_config(kind);
  titans_model m;
  titans_trainer t;
  const char *name = kind_label(kind);
  if (titans_model_init(&m, &c)) { th_check(0, "%s: model init: %s", name, m.error); return; }
  lively_weights(&m, 41 + (uint64_t)kind);
  titans_trainer_init(&t, &m, NULL);
  size_t B = 2, T = 8;
  int w1[2 * 9], w2[2 * 9];
  random_tokens(w1, B * (T + 1), c.vocab, 5 + (uint64_t)kind);
  random_tokens(w2, B * (T + 1), c.vocab, 6 + (uint64_t)kind);
  float *p0 = titans_alloc_floats(m.n_floats), *dir = titans_alloc_floats(m.n_floats);
  memcpy(p0, m.params, m.n_floats * sizeof(float));
  titans_stream st;
  float loss = 0;
  int rc = titans_stream_init(&st, &m, B);
  if (!rc) rc = titans_eval_loss_stream(&t, &st, w1, T, &loss);
  if (!rc) restart(&st, restart_row);
  memset(t.grads, 0, m.n_floats * sizeof(float));
  if (!rc) rc = titans_forward_backward_stream(&t, &st, w2, T, 1.0f, &loss);
  titans_stream_free(&st);
  titans_rng r;
  titans_rng_seed(&r, 77);
  double worst = 0, w0_grad = 0;
  const char *worst_name = "";
  int bad = 0;
  for (size_t p = 0; p < m.n_params && !rc; p++) {
    titans_param *pp = &m.plist[p];
    double gn = 0;
    for (size_t j = 0; j < pp->size; j++) gn += (double)t.grads[pp->offset + j] * t.grads[pp->offset + j];
    gn = sqrt(gn);
    if (strstr(pp->name, ".w0.") || strstr(pp->name, ".lm2.m0")) w0_grad = fmax(w0_grad, gn); /* LM2: m0 */
    for (int rep = 0; rep < 2; rep++) {
      double nn = 0, an = 0, eps = gn > 0 ? fmin(2e-2, fmax(1e-3, 2e-3 / gn)) : 1e-2;
      for (size_t j = 0; j < pp->size; j++) {
        dir[j] = rep == 0 && gn > 0 ? t.grads[pp->offset + j] : titans_rng_normal(&r);
        nn += (double)dir[j] * dir[j];
      }
      nn = sqrt(nn);
      for (size_t j = 0; j < pp->size; j++) { dir[j] /= (float)nn; an += (double)dir[j] * t.grads[pp->offset + j]; }
      float *x = m.params + pp->offset;
      double central[2];
      for (int half = 0; half < 2; half++) {
        double h = half ? eps / 2 : eps;
        for (size_t j = 0; j < pp->size; j++) x[j] = p0[pp->offset + j] + (float)h * dir[j];
        double lp = window2_loss(&t, p0, w1, w2, B, T, restart_row);
        for (size_t j = 0; j < pp->size; j++) x[j] = p0[pp->offset + j] - (float)h * dir[j];
        double lm = window2_loss(&t, p0, w1, w2, B, T, restart_row);
        central[half] = (lp - lm) / (2 * h);
      }
      memcpy(x, p0 + pp->offset, pp->size * sizeof(float));
      double fd = (4 * central[1] - central[0]) / 3, err = fabs(fd - an), tol = 5e-3 * gn + 5e-5;
      if (!(err <= tol)) {
        bad++;
        printf("    %s: directional derivative %.6g, analytic %.6g (|g| %.3g)\n", pp->name, fd, an, gn);
      }
      if (err / (gn + 1e-12) > worst) worst = err / (gn + 1e-12), worst_name = pp->name;
    }
  }
  th_check(rc == 0 && bad == 0,
           "%s%s: truncated gradient of a continuing window vs central differences, %zu tensors "
           "(worst %s, %.3g of |g|)",
           name, restart_row < B ? " (one row restarted)" : "", m.n_params, worst_name, worst);
  if (kind != TITANS_BLOCK_SWA && rc == 0)
    th_check(restart_row < B ? w0_grad > 1e-4 : w0_grad == 0.0,
             "%s: w0 (LM2: m0) gets a gradient only from rows that started there (max |g| %.3g)", name, w0_grad);
  titans_free(p0); titans_free(dir);
  titans_trainer_free(&t);
  titans_model_free(&m);
}

/* Kinds and windows that cannot stream are refused with a message; a TITANS_NO_LOSS target is not counted. */
static void test_refusals_and_ignored_targets(void) {
  int refused[] = {TITANS_BLOCK_MAG, TITANS_BLOCK_MAL, TITANS_BLOCK_ATTN};
  for (int i = 0; i < 3; i++) {
    titans_config c = tiny_stream_config(refused[i]);
    c.n_persist = 3; /* MAG: not a multiple of the chunk (2) */
    titans_model m;
    titans_stream st;
    titans_model_init(&m, &c);
    int rc = titans_stream_init(&st, &m, 2);
    th_check(rc == TITANS_ERR_ARG && st.error[0], "%s (3 persistent tokens, chunk 2) cannot stream: %s",
             titans_block_name(refused[i]), st.error);
    titans_model_free(&m);
  }
  titans_config c = tiny_stream_config(TITANS_BLOCK_MAC);
  titans_model m;
  titans_trainer t;
  titans_stream st;
  titans_model_init(&m, &c);
  lively_weights(&m, 3);
  titans_trainer_init(&t, &m, NULL);
  titans_stream_init(&st, &m, 2);
  int tok[2 * 9];
  random_tokens(tok, sizeof tok / sizeof tok[0], c.vocab, 4);
  float loss;
  int rc = titans_eval_loss_stream(&t, &st, tok, 6, &loss);
  int rc2 = titans_eval_loss_stream(&t, &st, tok, 4, &loss);
  th_check(rc == 0 && rc2 == TITANS_ERR_STATE && st.position == 6,
           "MAC: a window that is not a multiple of the segment ends the stream: %s", t.error);
  /* TITANS_NO_LOSS targets: the mean over the counted positions only; the marked tokens are still inputs */
  size_t B = 2, T = 8, V = (size_t)c.vocab;
  float *logits = titans_alloc_floats(B * T * V);
  int in[2 * 8];
  for (size_t b = 0; b < B; b++) memcpy(in + b * T, tok + b * (T + 1), T * sizeof(int));
  titans_forward_logits(&t, in, B, T, logits);
  int masked[2 * 9];
  memcpy(masked, tok, sizeof masked);
  double want = 0;
  int counted = 0;
  for (size_t b = 0; b < B; b++)
    for (size_t i = 0; i < T; i++) {
      if (i % 3 != 2) { masked[b * (T + 1) + i + 1] = TITANS_NO_LOSS(masked[b * (T + 1) + i + 1]); continue; }
      const float *x = logits + (b * T + i) * V;
      double mx = x[0], sum = 0;
      for (size_t v = 1; v < V; v++) mx = fmax(mx, x[v]);
      for (size_t v = 0; v < V; v++) sum += exp(x[v] - mx);
      want += mx + log(sum) - x[tok[b * (T + 1) + i + 1]];
      counted++;
    }
  want /= counted;
  rc = titans_eval_loss(&t, masked, B, T, &loss);
  if (rc) printf("    %s\n", t.error);
  th_close("a target marked TITANS_NO_LOSS is left out of the mean loss, and read as its token where it is an input",
           rc ? INFINITY : fabs(loss - want), 1e-5);
  titans_free(logits);
  titans_stream_free(&st);
  titans_trainer_free(&t);
  titans_model_free(&m);
}

/* A stream saved and loaded into a fresh one continues bit for bit; a file of another batch size or of
   other weights is refused and leaves the stream as it was. */
static void test_stream_checkpoint(int kind) {
  titans_config c = tiny_stream_config(kind);
  titans_model m;
  titans_trainer t;
  titans_stream a, b, other;
  const char *name = kind_label(kind);
  titans_model_init(&m, &c);
  lively_weights(&m, 51 + (uint64_t)kind);
  titans_trainer_init(&t, &m, NULL);
  size_t B = 2, T = 8, V = (size_t)c.vocab;
  int tok[2 * 8];
  float *la = titans_alloc_floats(B * T * V), *lb = titans_alloc_floats(B * T * V);
  random_tokens(tok, B * T, c.vocab, 17);
  titans_stream_init(&a, &m, B);
  titans_stream_init(&b, &m, B);
  titans_stream_init(&other, &m, 3);
  int rc = titans_forward_logits_stream(&t, &a, tok, T, la);
  titans_st_writer w;
  unsigned char *bytes = NULL;
  size_t size = 0;
  titans_st_writer_init(&w);
  if (!rc) rc = titans_stream_write(&a, &w);
  if (!rc) rc = titans_st_writer_to_memory(&w, &bytes, &size);
  titans_st_writer_free(&w);
  titans_st_reader r;
  int rr = rc ? -1 : titans_st_reader_parse(&r, bytes, size);
  int refused = rr == 0 && titans_stream_read(&other, &r) == TITANS_ERR_FORMAT && other.position == 0;
  if (rr == 0) rc = titans_stream_read(&b, &r);
  random_tokens(tok, B * T, c.vocab, 18);
  if (!rc) rc = titans_forward_logits_stream(&t, &a, tok, T, la);
  if (!rc) rc = titans_forward_logits_stream(&t, &b, tok, T, lb);
  th_check(rc == 0 && memcmp(la, lb, B * T * V * sizeof(float)) == 0 && b.position == a.position,
           "%s: a stream saved (%zu bytes) and loaded continues bit for bit (%s)", name, size, rc ? b.error : "ok");
  m.params[0] += 1.0f; /* other weights */
  int other_weights = rr == 0 && titans_stream_read(&b, &r) == TITANS_ERR_FORMAT;
  th_check(refused && other_weights, "%s: a stream file of another batch size or other weights is refused: %s", name,
           b.error);
  if (rr == 0) titans_st_reader_free(&r);
  titans_free(bytes);
  titans_stream_free(&a); titans_stream_free(&b); titans_stream_free(&other);
  titans_free(la); titans_free(lb);
  titans_trainer_free(&t);
  titans_model_free(&m);
}

/* titans_block_describe agrees with what the library does: a kind says it streams exactly when its default
   configuration streams (titans_config_default's MAG included), it has a memory exactly when its models
   carry "mem" parameters, a bank exactly when they carry "lm2" ones. */
static void test_block_describe(void) {
  for (int kind = 0; kind < TITANS_BLOCK_COUNT; kind++) {
    titans_block_info has = titans_block_describe(kind);
    titans_config c = titans_config_default(kind, 32, 16, 1);
    c.mem.head_dim = 16 / c.mem.heads;
    titans_model m;
    titans_stream st;
    th_check(titans_model_init(&m, &c) == TITANS_OK, "%s: the default config builds: %s", has.name, m.error);
    int streams = titans_stream_init(&st, &m, 1) == TITANS_OK;
    if (streams) titans_stream_free(&st);
    th_check(streams == has.streams, "%s: streams %d, described %d", has.name, streams, has.streams);
    th_check(has.name && !strcmp(has.name, titans_block_name(kind)), "%s: its name", titans_block_name(kind));
    int mem = 0, bank = 0;
    for (size_t i = 0; i < m.n_params; i++) {
      mem |= strstr(m.plist[i].name, ".mem.") != NULL;
      bank |= strstr(m.plist[i].name, ".lm2.") != NULL;
    }
    th_check(mem == has.memory && bank == has.bank, "%s: memory %d (described %d), bank %d (described %d)", has.name,
             mem, has.memory, bank, has.bank);
    titans_model_free(&m);
  }
  titans_block_info none = titans_block_describe(TITANS_BLOCK_COUNT);
  th_check(!none.name && !none.memory && !none.streams, "a number that is not a kind: all zero");
}

/* titans_config_default_persist is titans_config_default's N_p, and a program that moves the memory chunk
   and asks it again keeps a model that streams wherever the kind does (MAG: one chunk of 8). */
static void test_default_persist(void) {
  for (int kind = 0; kind < TITANS_BLOCK_COUNT; kind++) {
    titans_block_info has = titans_block_describe(kind);
    titans_config c = titans_config_default(kind, 32, 16, 1);
    th_check(titans_config_default_persist(&c) == c.n_persist, "%s: default_persist %d, the default's %d", has.name,
             titans_config_default_persist(&c), c.n_persist);
    c.mem.head_dim = 16 / c.mem.heads;
    c.mem.chunk = 8;
    c.n_persist = titans_config_default_persist(&c);
    titans_model m;
    titans_stream st;
    th_check(titans_model_init(&m, &c) == TITANS_OK, "%s: chunk 8 builds: %s", has.name, m.error);
    int streams = titans_stream_init(&st, &m, 1) == TITANS_OK;
    if (streams) titans_stream_free(&st);
    th_check(streams == has.streams, "%s with chunk 8 and %d persistent tokens: streams %d, described %d", has.name,
             c.n_persist, streams, has.streams);
    titans_model_free(&m);
  }
}

int main(void) {
  printf("streams: what each kind has (titans_block_describe)\n");
  test_block_describe();
  printf("streams: the default persistent tokens for a chunk (titans_config_default_persist)\n");
  test_default_persist();
  printf("streams: window by window == sessions, restarts\n");
  for (int k = 0; k < NKINDS; k++) test_stream_equals_session(kinds[k]);
  printf("streams: truncated gradients vs central differences\n");
  for (int k = 0; k < NKINDS; k++) {
    test_stream_gradients(kinds[k], 99);
    test_stream_gradients(kinds[k], 1);
  }
  printf("streams: MAC whose memory learns from its block input X\n");
  tiny_mac_learns_from = TITANS_MAC_LEARNS_INPUT;
  test_stream_equals_session(TITANS_BLOCK_MAC);
  test_stream_gradients(TITANS_BLOCK_MAC, 99);
  printf("streams: the memory's write gate reads the key (MAC learning from X, MAG)\n");
  tiny_gate_key = 1;
  test_stream_equals_session(TITANS_BLOCK_MAC);
  test_stream_gradients(TITANS_BLOCK_MAC, 99);
  tiny_mac_learns_from = TITANS_MAC_LEARNS_ATTN_OUTPUT;
  test_stream_equals_session(TITANS_BLOCK_MAG);
  test_stream_gradients(TITANS_BLOCK_MAG, 99);
  tiny_gate_key = 0;
  printf("streams: checkpoints\n");
  for (int k = 0; k < NKINDS; k++) test_stream_checkpoint(kinds[k]);
  printf("streams: refusals, ignored targets\n");
  test_refusals_and_ignored_targets();
  return th_summary("test_stream");
}
