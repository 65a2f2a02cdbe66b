/* Tests of the models (docs/model.md sections 2, 3, 5 and properties 7.2 - 7.5), for every block kind:
   gradients against central differences, causality, sessions fed token by token against the full
   forward, overfitting a fixed batch, one AdamW step against a hand computation, non-finite steps
   rejected with the weights unchanged, thread-count independence, session forks, sampling. */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "harness.h"
#include "model_fixtures.h"

static const int kinds[] = {TITANS_BLOCK_ATTN, TITANS_BLOCK_SWA, TITANS_BLOCK_MAC, TITANS_BLOCK_MAG, TITANS_BLOCK_MAL,
                            TITANS_BLOCK_LMM, TITANS_BLOCK_LM2};
#define NKINDS (int)(sizeof kinds / sizeof kinds[0])

/* A tiny configuration that exercises every option: 2 layers, persistent tokens, a window and
   segments shorter than the sequence, a 2-layer memory with conv and chunks that do not divide T. */
static titans_config tiny_config(int kind) {
  titans_config c = titans_config_default(kind, 13, 8, 2);
  c.attn_heads = 2;
  c.ffn_hidden = 12;
  c.window = 3;
  c.segment = 4;
  c.n_persist = kind == TITANS_BLOCK_LMM ? 0 : 2;
  c.tied = kind != TITANS_BLOCK_SWA; /* one kind checks the untied head */
  c.mem.heads = 2;
  c.mem.head_dim = 4;
  c.mem.depth = 2;
  c.mem.hidden_mult = 2;
  c.mem.chunk = 2;
  c.mem.conv_width = 3;
  c.mem.theta_max = 0.1f;
  if (kind == TITANS_BLOCK_LM2) c.lm2_slots = 3; /* segments 4, 4, 2 of T = 10: two writes, a partial read */
  if (kind == TITANS_BLOCK_MAC) c.mac_learns_from = tiny_mac_learns_from;
  tiny_memory_options(&c);
  return c;
}

static double loss_at(titans_trainer *t, const int *tokens, size_t B, size_t T) {
  float l = 0.0f;
  titans_eval_loss(t, tokens, B, T, &l);
  return l;
}

/* Per parameter tensor: the directional derivative along the gradient's own direction and along a
   random unit direction, by central differences on the float model (a step h that moves the loss by about 2e-3, clamped
   to [1e-3, 2e-2], and h / 2, combined by Richardson extrapolation so the O(h^2) truncation error cancels), against the
   analytic gradient. The float32 forward through the memory recurrence makes the loss rough at the 1e-6 level, so the
   tolerance is 5e-3 of the tensor's gradient norm + 5e-5: a missing or wrong path costs far more
   (the memory layer alone is checked to 1e-6 against double references in test_memory). */
static void test_gradients_of(int kind, int sparse) {
  titans_config c = tiny_config(kind);
  titans_model m;
  titans_trainer t;
  int rc = titans_model_init(&m, &c);
  if (rc) { th_check(0, "model init (%s): %s", kind_label(kind), m.error); return; }
  lively_weights(&m, 11 + (uint64_t)kind);
  titans_trainer_init(&t, &m, NULL);
  size_t B = 2, T = 10;
  int tokens[2 * 11];
  random_tokens(tokens, B * (T + 1), c.vocab, 5 + (uint64_t)kind);
  /* sparse: two targets in three left out, so the head runs on the counted rows alone (titans__head_forward) */
  for (size_t r = 0; sparse && r < B; r++)
    for (size_t i = 1; i <= T; i++)
      if ((r + i) % 3 != 0) tokens[r * (T + 1) + i] = TITANS_NO_LOSS(tokens[r * (T + 1) + i]);
  float loss = 0;
  rc = titans_forward_backward(&t, tokens, B, T, 1.0f, &loss);
  titans_rng r;
  titans_rng_seed(&r, 77);
  double worst = 0;
  const char *worst_name = "";
  int bad = 0;
  float *dir = titans_alloc_floats(m.n_floats);
  for (size_t p = 0; p < m.n_params; p++) {
    titans_param *pp = &m.plist[p];
    double gn = 0;
    for (size_t j = 0; j < pp->size; j++) gn += (double)t.grads[pp->offset + j] * t.grads[pp->offset + j];
    gn = sqrt(gn);
    for (int rep = 0; rep < 2; rep++) {
      double nn = 0, an = 0, eps = gn > 0 ? fmin(2e-2, fmax(1e-3, 2e-3 / gn)) : 1e-2; /* loss moves by ~2e-3 */
      /* first along the gradient itself (the strongest signal: the derivative is |g|), then at random */
      for (size_t j = 0; j < pp->size; j++) {
        dir[j] = rep == 0 && gn > 0 ? t.grads[pp->offset + j] : titans_rng_normal(&r);
        nn += (double)dir[j] * dir[j];
      }
      nn = sqrt(nn);
      for (size_t j = 0; j < pp->size; j++) { dir[j] /= (float)nn; an += (double)dir[j] * t.grads[pp->offset + j]; }
      float *x = m.params + pp->offset;
      float *keep = titans_alloc_floats(pp->size);
      memcpy(keep, x, pp->size * sizeof(float));
      double central[2];
      for (int half = 0; half < 2; half++) {
        double h = half ? eps / 2 : eps;
        for (size_t j = 0; j < pp->size; j++) x[j] = keep[j] + (float)h * dir[j];
        double lp = loss_at(&t, tokens, B, T);
        for (size_t j = 0; j < pp->size; j++) x[j] = keep[j] - (float)h * dir[j];
        double lm = loss_at(&t, tokens, B, T);
        central[half] = (lp - lm) / (2 * h);
      }
      memcpy(x, keep, pp->size * sizeof(float));
      titans_free(keep);
      /* Richardson: the O(h^2) error of the two central differences cancels */
      double fd = (4 * central[1] - central[0]) / 3, err = fabs(fd - an), tol = 5e-3 * gn + 5e-5;
      if (!(err <= tol)) {
        bad++;
        printf("    %s: directional derivative %.6g, analytic %.6g (|g| %.3g)\n", pp->name, fd, an, gn);
      }
      if (err / (gn + 1e-12) > worst) { worst = err / (gn + 1e-12); worst_name = pp->name; }
    }
  }
  titans_free(dir);
  th_check(rc == 0 && bad == 0, "%s%s: every parameter's gradient matches central differences (%zu tensors; worst %s, "
                                "error %.3g of its gradient norm; tol 5e-3)", kind_label(kind),
           sparse ? ", a third of the targets counted" : "", m.n_params, worst_name, worst);
  titans_trainer_free(&t);
  titans_model_free(&m);
}

static void test_gradients(int kind) {
  test_gradients_of(kind, 0);
  test_gradients_of(kind, 1);
}

static void test_causality_and_sessions(int kind) {
  titans_config c = tiny_config(kind);
  titans_model m;
  titans_trainer t;
  titans_model_init(&m, &c);
  lively_weights(&m, 21 + (uint64_t)kind);
  titans_trainer_init(&t, &m, NULL);
  size_t T = 19, V = (size_t)c.vocab;
  int tok[19], tok2[19];
  random_tokens(tok, T, c.vocab, 3);
  float *a = titans_alloc_floats(T * V), *b = titans_alloc_floats(T * V), *s = titans_alloc_floats(T * V);
  int rc = titans_forward_logits(&t, tok, 1, T, a);
  int causal = 1, moved = 1;
  for (size_t j = 0; j < T; j += 3) {
    memcpy(tok2, tok, sizeof tok);
    tok2[j] = (tok[j] + 1) % c.vocab;
    titans_forward_logits(&t, tok2, 1, T, b);
    if (memcmp(a, b, j * V * sizeof(float)) != 0) causal = 0;
    if (th_max_abs_diff(a + j * V, b + j * V, V) == 0.0) moved = 0;
  }
  th_check(rc == 0 && causal && moved, "%s: causality: changing token j changes no logit before j (bit for bit) and "
                                       "changes position j", kind_label(kind));
  /* a session fed one token at a time gives the logits of the full forward */
  titans_session ss;
  rc = titans_session_init(&ss, &m);
  for (size_t i = 0; i < T && !rc; i++) rc = titans_session_feed(&ss, tok + i, 1, s + i * V);
  double scale = 0;
  for (size_t i = 0; i < T * V; i++) scale = fmax(scale, fabs(a[i]));
  char what[200];
  snprintf(what, sizeof what, "%s: session fed token by token == full forward logits (relative to max |logit| %.3g)",
           kind_label(kind), scale);
  th_close(what, rc ? INFINITY : th_max_abs_diff(s, a, T * V) / scale, 2e-5);
  /* fork: a copy continues like the original; reset starts over */
  titans_session fork;
  titans_session_init(&fork, &m);
  rc = titans_session_reset(&ss);
  th_check(rc == TITANS_OK, "%s: session reset returns TITANS_OK", kind_label(kind));
  titans_session_feed(&ss, tok, 7, NULL);
  titans_session_copy(&fork, &ss);
  titans_session_feed(&ss, tok + 7, T - 7, a);
  titans_session_feed(&fork, tok + 7, T - 7, b);
  int same_fork = memcmp(a, b, V * sizeof(float)) == 0;
  rc = titans_session_reset(&fork);
  rc = rc ? rc : titans_session_feed(&fork, tok, T, b);
  th_check(rc == TITANS_OK && same_fork && memcmp(a, b, V * sizeof(float)) == 0,
           "%s: a forked session continues bit-identically; a reset one starts over", kind_label(kind));
  /* the state as named tensors: copy them into a fresh session, continue identically */
  titans_session other;
  titans_session_init(&other, &m);
  titans_tensor_ref r1[64], r2[64];
  rc = titans_session_reset(&ss);
  rc = rc ? rc : titans_session_feed(&ss, tok, 9, NULL);
  rc = rc ? rc : titans_session_state_prepare(&other, ss.position); /* the KV tensors' sizes depend on it */
  size_t n1 = titans_session_state(&ss, r1, 64), n2 = titans_session_state(&other, r2, 64);
  int ok = n1 == n2;
  for (size_t i = 0; ok && i < n1; i++) {
    ok = strcmp(r1[i].name, r2[i].name) == 0 && r1[i].count == r2[i].count;
    if (ok) memcpy(r2[i].data, r1[i].data, r1[i].count * sizeof(float));
  }
  rc = ok && !rc ? titans_session_state_loaded(&other) : -1;
  titans_session_feed(&ss, tok + 9, T - 9, a);
  titans_session_feed(&other, tok + 9, T - 9, b);
  th_check(rc == 0 && memcmp(a, b, V * sizeof(float)) == 0,
           "%s: a session state saved as %zu named tensors and restored continues bit-identically (%s)",
           kind_label(kind), n1, other.error);
  titans_session_free(&other);
  titans_session_free(&fork);
  titans_session_free(&ss);
  titans_free(a); titans_free(b); titans_free(s);
  titans_trainer_free(&t);
  titans_model_free(&m);
}

/* The choice is real: the same weights give other logits when MAC's memory learns from X (step 3's
   output m is M(X) instead of M(y), and every later segment retrieves from another memory). */
static void test_mac_learns_from_changes_the_model(void) {
  titans_config c = tiny_config(TITANS_BLOCK_MAC);
  titans_model m;
  titans_trainer t;
  titans_model_init(&m, &c);
  lively_weights(&m, 31);
  titans_trainer_init(&t, &m, NULL);
  size_t T = 12, V = (size_t)c.vocab;
  int tok[12];
  random_tokens(tok, T, c.vocab, 4);
  float *paper = titans_alloc_floats(T * V), *from_x = titans_alloc_floats(T * V);
  int rc = titans_forward_logits(&t, tok, 1, T, paper);
  m.cfg.mac_learns_from = TITANS_MAC_LEARNS_INPUT;
  rc = rc ? rc : titans_forward_logits(&t, tok, 1, T, from_x);
  double moved = th_max_abs_diff(paper, from_x, T * V);
  th_check(rc == 0 && moved > 1e-3, "mac: learning from X instead of y changes the logits (max difference %.3g)",
           moved);
  titans_free(paper); titans_free(from_x);
  titans_trainer_free(&t);
  titans_model_free(&m);
}

/* emb_shared alone: every embedding row moves by the same vector, entries +-0.02 x amount, the same
   vector whatever the seed; attention and the key conv do not move. plain: seed 5, no look-up init. */
static void test_shared_embedding_direction(const titans_config *c, const titans_model *plain) {
  titans_lookup_init li = {.key_shift = 0, .attn_identity = 0.0f, .emb_scale = 1.0f, .emb_shared = 1.5f};
  size_t V = (size_t)c->vocab, d = (size_t)c->d, bad_shape = 0, bad_seed = 0, plus = 0, moved = 0;
  titans_model a, other, plain6;
  titans_model_init(&a, c);
  titans_model_init(&other, c);
  titans_model_init(&plain6, c);
  titans_model_init_weights(&a, 5);
  titans_model_init_weights(&other, 6);
  titans_model_init_weights(&plain6, 6);
  titans_model_init_lookup(&a, &li);
  titans_model_init_lookup(&other, &li);
  for (size_t j = 0; j < d; j++) {
    float shift = a.w.tok_emb[j] - plain->w.tok_emb[j];
    plus += shift > 0.0f;
    bad_shape += fabsf(fabsf(shift) - 1.5f * 0.02f) > 1e-6f;
    for (size_t v = 0; v < V; v++) {
      size_t i = v * d + j;
      bad_shape += fabsf(a.w.tok_emb[i] - plain->w.tok_emb[i] - shift) > 1e-6f;
      bad_seed += fabsf(other.w.tok_emb[i] - plain6.w.tok_emb[i] - shift) > 1e-6f;
    }
  }
  for (int l = 0; l < c->n_layers; l++)
    moved += memcmp(a.w.layers[l].attn_wq, plain->w.layers[l].attn_wq, d * d * sizeof(float)) != 0 ||
             memcmp(a.w.layers[l].mem.conv_k, plain->w.layers[l].mem.conv_k,
                    (size_t)c->mem.heads * (size_t)c->mem.head_dim * (size_t)c->mem.conv_width * sizeof(float)) != 0;
  th_check(!bad_shape && plus > 0 && plus < d,
           "lookup init emb_shared 1.5: every row moved by one vector of +-0.03 (%zu wrong, %zu of %zu positive)",
           bad_shape, plus, d);
  th_check(!bad_seed && !moved,
           "lookup init emb_shared: the same vector for seed 6 (%zu wrong); attention and key conv unchanged "
           "(%zu layers moved)", bad_seed, moved);
  titans_model_free(&a);
  titans_model_free(&other);
  titans_model_free(&plain6);
}

/* m: a model of c with seed's weights, then the look-up start li. */
static void init_with_lookup(titans_model *m, const titans_config *c, uint64_t seed, const titans_lookup_init *li) {
  titans_model_init(m, c);
  titans_model_init_weights(m, seed);
  titans_model_init_lookup(m, li);
}

/* The look-up initialisation (titans_model_init_lookup) sets what it says and nothing else, and
   cfg.mem.key_ngram holds the key conv on the previous token through training steps, and is
   written in the configuration only when set. */
/* A 0/1 field of cfg.mem at byte offset `at`: 1 is written to a model's JSON and read back, 2 is refused. */
static void check_mem_flag(titans_config c, size_t at, const char *name) {
  char json[4096], err[TITANS_ERR_MSG_SIZE];
  titans_config back;
  *(int *)((char *)&c.mem + at) = 1;
  titans_config_to_json(&c, json, sizeof json);
  int rc = titans_config_from_json(&back, json, err);
  th_check(rc == TITANS_OK && *(int *)((char *)&back.mem + at) == 1, "%s = 1 is written and read back (%s)", name, json);
  *(int *)((char *)&c.mem + at) = 2;
  th_check(titans_config_check(&c, err) != TITANS_OK, "%s = 2 is refused: %s", name, err);
}

static void test_lookup_init(void) {
  titans_config c = tiny_config(TITANS_BLOCK_MAC);
  titans_model m, plain;
  titans_model_init(&m, &c);
  titans_model_init(&plain, &c);
  titans_model_init_weights(&m, 5);
  titans_model_init_weights(&plain, 5);
  titans_lookup_init li = titans_lookup_init_default();
  th_check(li.key_shift == 1 && li.attn_identity == 1.5f && li.emb_scale == 10.0f && li.emb_shared == 0.0f &&
               li.head_gain == 0.5f,
           "lookup init: the defaults are key shift, identity attention 1.5, embeddings x 10, no shared vector, the "
           "head's gain 0.5");
  titans_model_init_lookup(&m, &li);
  size_t K = (size_t)c.mem.conv_width, dm = (size_t)c.mem.heads * (size_t)c.mem.head_dim, d = (size_t)c.d;
  size_t bad_conv = 0, bad_attn = 0, bad_emb = 0, bad_wq = 0;
  for (int l = 0; l < c.n_layers; l++) {
    const titans_layer *L = &m.w.layers[l];
    for (size_t j = 0; j < dm; j++)
      for (size_t t = 0; t < K; t++) bad_conv += L->mem.conv_k[j * K + t] != (t == K - 2 ? 1.0f : 0.0f);
    bad_wq += memcmp(L->mem.wq, L->mem.wk, dm * d * sizeof(float)) != 0;
    for (size_t i = 0; i < d; i++)
      for (size_t j = 0; j < d; j++) {
        float id = i == j ? 1.0f : 0.0f;
        bad_attn += L->attn_wq[i * d + j] != 1.5f * id || L->attn_wk[i * d + j] != 1.5f * id ||
                    L->attn_wv[i * d + j] != id || L->attn_wo[i * d + j] != id;
      }
  }
  for (size_t i = 0; i < (size_t)c.vocab * d; i++) bad_emb += m.w.tok_emb[i] != 10.0f * plain.w.tok_emb[i];
  th_check(!bad_conv && !bad_wq && !bad_attn && !bad_emb,
           "lookup init: key conv on the previous token, wq = wk, identity attention, embeddings x 10 (%zu, %zu, %zu, "
           "%zu wrong)",
           bad_conv, bad_wq, bad_attn, bad_emb);
  test_shared_embedding_direction(&c, &plain);
  /* head_gain: the final norm's gain and nothing else (the default's 0.5 above); 0 leaves it at 1 */
  size_t bad_gain = 0, bad_default_gain = 0;
  for (size_t i = 0; i < d; i++) bad_default_gain += m.w.norm_f[i] != 0.5f;
  titans_lookup_init zero_gain = {.key_shift = 1, .attn_identity = 0.0f, .emb_scale = 1.0f, .head_gain = 0.0f};
  titans_model no_gain;
  init_with_lookup(&no_gain, &c, 5, &zero_gain);
  for (size_t i = 0; i < d; i++) bad_default_gain += no_gain.w.norm_f[i] != 1.0f;
  titans_model_free(&no_gain);
  titans_lookup_init only_gain = {.key_shift = 0, .attn_identity = 0.0f, .emb_scale = 1.0f, .head_gain = 0.3f};
  titans_model gained;
  init_with_lookup(&gained, &c, 5, &only_gain);
  for (size_t i = 0; i < d; i++) bad_gain += gained.w.norm_f[i] != 0.3f;
  for (size_t i = 0; i < d; i++) gained.w.norm_f[i] = plain.w.norm_f[i];
  th_check(!bad_default_gain && !bad_gain && !memcmp(gained.params, plain.params, plain.n_floats * sizeof(float)),
           "lookup init head_gain 0.3: norm_f 0.3 and every other weight unchanged; the defaults' 0.5, and 0 keeps 1 "
           "(%zu, %zu wrong)", bad_gain, bad_default_gain);
  titans_model_free(&gained);
  /* key_ngram: a config field, refused without a conv, kept through training steps */
  char err[TITANS_ERR_MSG_SIZE], json[4096];
  titans_config bad = c;
  bad.mem.key_ngram = 1, bad.mem.conv_width = 1;
  th_check(titans_config_check(&bad, err) != TITANS_OK, "key_ngram without a conv of 2 taps is refused: %s", err);
  titans_config_to_json(&c, json, sizeof json);
  th_check(strstr(json, "key_ngram") == NULL, "key_ngram = 0 is not written (files stay as they were)");
  m.cfg.mem.key_ngram = 1;
  titans_config_to_json(&m.cfg, json, sizeof json);
  titans_config back;
  int rc = titans_config_from_json(&back, json, err);
  th_check(rc == TITANS_OK && back.mem.key_ngram == 1, "key_ngram = 1 is written and read back (%s)", json);
  /* gate_key and qk_linear, likewise: absent from the files of models without them, read back where set, 0 or 1 */
  th_check(strstr(json, "gate_key") == NULL, "gate_key = 0 is not written (files stay as they were)");
  check_mem_flag(m.cfg, offsetof(titans_mem_config, gate_key), "gate_key");
  th_check(strstr(json, "qk_linear") == NULL, "qk_linear = 0 is not written (files stay as they were)");
  check_mem_flag(m.cfg, offsetof(titans_mem_config, qk_linear), "qk_linear");
  /* least_squares, likewise; it needs a matrix memory without momentum or the bound (forgetting decays its G) */
  th_check(strstr(json, "least_squares") == NULL, "least_squares = 0 is not written (files stay as they were)");
  titans_config ls = m.cfg;
  titans_mem_config_use_least_squares(&ls.mem);
  ls.mem.least_squares = 0;
  check_mem_flag(ls, offsetof(titans_mem_config, least_squares), "least_squares");
  ls.mem.least_squares = 1;
  ls.mem.no_forget = 0;
  th_check(titans_config_check(&ls, err) == TITANS_OK, "least_squares with forgetting (a decaying G) is taken: %s", err);
  ls.mem.no_momentum = 0;
  th_check(titans_config_check(&ls, err) != TITANS_OK, "least_squares with momentum is refused: %s", err);
  /* per_token_grad, likewise; it needs a matrix memory without the surprise bound */
  th_check(strstr(json, "per_token_grad") == NULL, "per_token_grad = 0 is not written (files stay as they were)");
  titans_config exact = m.cfg;
  exact.mem.depth = 1;
  exact.mem.surprise_bound = 0.0f;
  exact.mem.per_token_grad = 1;
  titans_config_to_json(&exact, json, sizeof json);
  rc = titans_config_from_json(&back, json, err);
  th_check(rc == TITANS_OK && back.mem.per_token_grad == 1, "per_token_grad = 1 is written and read back (%s)", json);
  exact.mem.depth = 2;
  th_check(titans_config_check(&exact, err) != TITANS_OK, "per_token_grad with depth 2 is refused: %s", err);
  exact.mem.depth = 1;
  exact.mem.surprise_bound = 1.0f;
  th_check(titans_config_check(&exact, err) != TITANS_OK, "per_token_grad with a surprise bound is refused: %s", err);
  titans_trainer t;
  titans_trainer_init(&t, &m, NULL);
  int tok[2 * 17];
  random_tokens(tok, 2 * 17, c.vocab, 9);
  float loss;
  for (int step = 0; step < 3; step++) titans_train_step(&t, tok, 1, 2, 16, &loss);
  size_t moved_other = 0, moved_prev = 0;
  for (int l = 0; l < c.n_layers; l++)
    for (size_t j = 0; j < dm; j++)
      for (size_t k = 0; k < K; k++) {
        float w = m.w.layers[l].mem.conv_k[j * K + k];
        if (k == K - 2) moved_prev += w != 1.0f;
        else moved_other += w != 0.0f;
      }
  th_check(moved_other == 0 && moved_prev > 0,
           "key_ngram: after 3 steps the other taps are 0 (%zu not) and the previous token's learns (%zu moved)",
           moved_other, moved_prev);
  /* the step is the projected gradient: the held taps' gradient is left out of the norm (and of AdamW's
     moments), so the norm is that of the raw gradient without them */
  size_t moment_held = 0;
  for (int l = 0; l < c.n_layers; l++) {
    size_t off = (size_t)(m.w.layers[l].mem.conv_k - m.params);
    for (size_t j = 0; j < dm; j++)
      for (size_t k = 0; k < K; k++) moment_held += k != K - 2 && t.adam_m[off + j * K + k] != 0.0f;
  }
  memset(t.grads, 0, m.n_floats * sizeof(float));
  titans_forward_backward(&t, tok, 2, 16, 1.0f, &loss);
  double raw = 0.0, kept = 0.0;
  for (size_t i = 0; i < m.n_floats; i++) raw += (double)t.grads[i] * t.grads[i];
  kept = raw;
  for (int l = 0; l < c.n_layers; l++) {
    size_t off = (size_t)(m.w.layers[l].mem.conv_k - m.params);
    for (size_t j = 0; j < dm; j++)
      for (size_t k = 0; k < K; k++)
        if (k != K - 2) kept -= (double)t.grads[off + j * K + k] * t.grads[off + j * K + k];
  }
  titans_train_step(&t, tok, 1, 2, 16, &loss);
  double rel = fabs(t.last_grad_norm - sqrt(kept)) / sqrt(kept);
  th_check(moment_held == 0 && rel < 1e-6 && sqrt(raw) > sqrt(kept) * (1 + 4e-6),
           "key_ngram: the held taps' gradient counts nowhere (%zu moments not 0; norm %g, without them %g, raw %g)",
           moment_held, (double)t.last_grad_norm, sqrt(kept), sqrt(raw));
  titans_trainer_free(&t);
  titans_model_free(&m);
  titans_model_free(&plain);
}

/* A tiny model of each kind overfits one fixed batch. */
static void test_overfit(int kind) {
  titans_config c = titans_config_default(kind, 16, 32, 2);
  c.window = 8;
  c.segment = 16;
  c.mem.chunk = 8;
  if (kind == TITANS_BLOCK_MAC) c.mac_learns_from = tiny_mac_learns_from;
  titans_model m;
  titans_trainer t;
  titans_model_init(&m, &c);
  titans_model_init_weights(&m, 3);
  titans_train_config tc = titans_train_config_default();
  tc.lr = 1e-2f;
  tc.min_lr = 1e-3f;
  tc.warmup_steps = 10;
  tc.total_steps = 150;
  tc.weight_decay = 0.0f;
  titans_trainer_init(&t, &m, &tc);
  size_t B = 2, T = 32;
  int tokens[2 * 33];
  random_tokens(tokens, B * (T + 1), c.vocab, 9);
  float first = 0, loss = 0;
  int rc = 0;
  for (int step = 0; step < 150 && !rc; step++) {
    rc = titans_train_step(&t, tokens, 1, B, T, &loss);
    if (step == 0) first = loss;
  }
  th_check(rc == 0 && loss < 0.2f, "%s: overfits a fixed batch of 64 random tokens: loss %.3f -> %.4f after 150 steps "
                                   "(threshold 0.2)", kind_label(kind), first, loss);
  titans_trainer_free(&t);
  titans_model_free(&m);
}

/* One AdamW step of the trainer against the formula computed here in double (first step: bias
   corrections make m_hat = g, v_hat = g^2), with gradient clipping active. */
static void test_adamw_step(void) {
  titans_config c = tiny_config(TITANS_BLOCK_MAG);
  titans_model m;
  titans_trainer t;
  titans_model_init(&m, &c);
  lively_weights(&m, 5);
  titans_train_config tc = titans_train_config_default();
  tc.clip = 0.5f;
  tc.warmup_steps = 4;
  titans_trainer_init(&t, &m, &tc);
  int tokens[2 * 11];
  random_tokens(tokens, 22, c.vocab, 1);
  float loss;
  titans_forward_backward(&t, tokens, 2, 10, 1.0f, &loss);
  float *g = titans_alloc_floats(m.n_floats), *p0 = titans_alloc_floats(m.n_floats);
  memcpy(g, t.grads, m.n_floats * sizeof(float));
  memcpy(p0, m.params, m.n_floats * sizeof(float));
  double norm = 0;
  for (size_t i = 0; i < m.n_floats; i++) norm += (double)g[i] * g[i];
  norm = sqrt(norm);
  double clip = norm > tc.clip ? tc.clip / norm : 1.0, lr = tc.lr * 1.0 / tc.warmup_steps, worst = 0;
  int rc = titans_train_step(&t, tokens, 1, 2, 10, &loss);
  for (size_t p = 0; p < m.n_params; p++) {
    titans_param *pp = &m.plist[p];
    double wd = pp->kind == TITANS_PARAM_MATRIX ? tc.weight_decay : 0.0;
    for (size_t j = pp->offset; j < pp->offset + pp->size; j++) {
      double gj = g[j] * clip, mh = gj, vh = gj * gj;
      double want = p0[j] - lr * (mh / (sqrt(vh) + tc.eps) + wd * p0[j]);
      worst = fmax(worst, fabs(want - m.params[j]));
    }
  }
  /* tolerance: a few float ulps of parameters of magnitude <= 1 */
  th_close("one AdamW step (clipped, warm-up lr, decay on matrices only) vs the formula in double",
           rc ? INFINITY : worst, 3e-7);
  /* a non-finite gradient is an error naming the step, and the weights stay as they were */
  memcpy(p0, m.params, m.n_floats * sizeof(float));
  m.w.layers[1].norm2[0] = NAN;
  memcpy(g, m.params, m.n_floats * sizeof(float));
  rc = titans_train_step(&t, tokens, 1, 2, 10, &loss);
  th_check(rc == TITANS_ERR_NONFINITE && memcmp(g, m.params, m.n_floats * sizeof(float)) == 0 && t.step == 1,
           "a step with a NaN is rejected (%s) and the weights are untouched", t.error);
  int badtok[22];
  memcpy(badtok, tokens, sizeof badtok);
  badtok[3] = 99;
  th_check(titans_train_step(&t, badtok, 1, 2, 10, &loss) == TITANS_ERR_ARG,
           "a token outside the vocabulary is an error: %s", t.error);
  titans_free(g); titans_free(p0);
  titans_trainer_free(&t);
  titans_model_free(&m);
}

static void test_threads(void) {
#ifdef _OPENMP
  int saved = omp_get_max_threads(), same = 1;
  for (int k = 0; k < NKINDS; k++) {
    titans_config c = tiny_config(kinds[k]);
    titans_model m;
    titans_trainer t;
    titans_model_init(&m, &c);
    lively_weights(&m, 2);
    titans_trainer_init(&t, &m, NULL);
    int tokens[3 * 17];
    random_tokens(tokens, 51, c.vocab, 8);
    float *g1 = titans_alloc_floats(m.n_floats), l1 = 0.0f, l2 = 0.0f;
    omp_set_num_threads(1);
    titans_forward_backward(&t, tokens, 3, 16, 1.0f, &l1);
    memcpy(g1, t.grads, m.n_floats * sizeof(float));
    memset(t.grads, 0, m.n_floats * sizeof(float));
    omp_set_num_threads(2);
    titans_forward_backward(&t, tokens, 3, 16, 1.0f, &l2);
    if (l1 != l2 || memcmp(g1, t.grads, m.n_floats * sizeof(float)) != 0) same = 0;
    titans_free(g1);
    titans_trainer_free(&t);
    titans_model_free(&m);
  }
  omp_set_num_threads(saved);
  th_check(same, "every kind: 1 and 2 threads give bit-identical loss and gradients");
  /* sessions on threads over one shared model */
  titans_config c = tiny_config(TITANS_BLOCK_MAC);
  titans_model m;
  titans_model_init(&m, &c);
  lively_weights(&m, 4);
  int tok[40];
  random_tokens(tok, 40, c.vocab, 6);
  float seq[4][13], par[4][13];
  for (int i = 0; i < 4; i++) {
    titans_session s;
    titans_session_init(&s, &m);
    titans_session_feed(&s, tok + i * 5, 20, seq[i]);
    titans_session_free(&s);
  }
#pragma omp parallel for num_threads(2)
  for (int i = 0; i < 4; i++) {
    titans_session s;
    titans_session_init(&s, &m);
    titans_session_feed(&s, tok + i * 5, 20, par[i]);
    titans_session_free(&s);
  }
  th_check(memcmp(seq, par, sizeof seq) == 0, "four sessions run on two threads over one shared model give the logits "
                                             "of sequential runs");
  titans_model_free(&m);
#else
  th_check(1, "threads: built without OpenMP, nothing to compare");
#endif
}

/* Loss and gradients of one forward_backward of tokens [B, T + 1] with recomputation on or off (a
   trainer of its own each time). Returns the loss; g [n_floats] gets the gradients. */
static float recompute_grads(titans_model *m, int on, const int *tokens, size_t B, size_t T, float *g, int *ok) {
  titans_trainer t;
  float loss = 0.0f;
  titans_trainer_init(&t, m, NULL);
  titans_trainer_set_recompute(&t, on);
  *ok = *ok && titans_forward_backward(&t, tokens, B, T, 1.0f, &loss) == TITANS_OK;
  memcpy(g, t.grads, m->n_floats * sizeof(float));
  titans_trainer_free(&t);
  return loss;
}

/* titans_trainer_set_recompute: MAC's backward runs each segment's forward again from the state it
   kept, and every kind's FFN runs in pieces of 1024 rows (the last up to 2047), its hidden rows computed
   again in the backward. With at most 1024 rows the loss and every gradient must be the same bits as without it:
   B = 3 rows (MAC: T = 15, a last segment of 3 of 4, memory chunks of 2 across segment starts), two
   steps in a row, then off again; then a MAC stream of two windows that carries the memory. With
   more rows (2 x 1040) the FFN's weight gradients are summed piece by piece: the loss must be the same
   bits, every other gradient too, and the FFN's within float rounding. */
static void test_recompute(int kind) {
  titans_config c = tiny_config(kind);
  titans_model m;
  titans_trainer plain, re;
  titans_model_init(&m, &c);
  lively_weights(&m, 5);
  titans_trainer_init(&plain, &m, NULL);
  titans_trainer_init(&re, &m, NULL);
  titans_trainer_set_recompute(&re, 1);
  size_t T = kind == TITANS_BLOCK_MAC ? 15 : 16;
  int tokens[2 * 1041];
  int same = 1, calls = 0;
  for (int rep = 0; rep < 3 && same; rep++) {
    random_tokens(tokens, 3 * (T + 1), c.vocab, 20 + (uint64_t)rep);
    float l1 = 0.0f, l2 = 0.0f;
    if (rep == 2) titans_trainer_set_recompute(&re, 0);
    memset(plain.grads, 0, m.n_floats * sizeof(float));
    memset(re.grads, 0, m.n_floats * sizeof(float));
    calls += !titans_forward_backward(&plain, tokens, 3, T, 1.0f, &l1);
    calls += !titans_forward_backward(&re, tokens, 3, T, 1.0f, &l2);
    same = same && l1 == l2 && memcmp(plain.grads, re.grads, m.n_floats * sizeof(float)) == 0;
  }
  th_check(same && calls == 6, "%s: with recomputation the loss and gradients are bit-identical (two steps on, then "
                               "off)", kind_label(kind));
  if (kind == TITANS_BLOCK_MAC) {
    titans_trainer_set_recompute(&re, 1);
    titans_stream s1, s2;
    int ok = !titans_stream_init(&s1, &m, 3) && !titans_stream_init(&s2, &m, 3);
    for (int w = 0; w < 2 && ok; w++) {
      random_tokens(tokens, 27, c.vocab, 30 + (uint64_t)w);
      float l1 = 0.0f, l2 = 0.0f;
      memset(plain.grads, 0, m.n_floats * sizeof(float));
      memset(re.grads, 0, m.n_floats * sizeof(float));
      ok = !titans_forward_backward_stream(&plain, &s1, tokens, 8, 1.0f, &l1) &&
           !titans_forward_backward_stream(&re, &s2, tokens, 8, 1.0f, &l2) && l1 == l2 &&
           memcmp(plain.grads, re.grads, m.n_floats * sizeof(float)) == 0;
    }
    th_check(ok, "mac: with recomputation a stream's windows give the same loss and gradients as without");
    titans_stream_free(&s1);
    titans_stream_free(&s2);
  }
  titans_trainer_free(&plain);
  titans_trainer_free(&re);
  /* two FFN pieces: 2 x 1,040 rows, cut at 1,024 (the second piece 1,056 rows) */
  float *g1 = titans_alloc_floats(m.n_floats), *g2 = titans_alloc_floats(m.n_floats);
  int ok = g1 && g2;
  random_tokens(tokens, 2 * 1041, c.vocab, 40);
  float l1 = ok ? recompute_grads(&m, 0, tokens, 2, 1040, g1, &ok) : 0.0f;
  float l2 = ok ? recompute_grads(&m, 1, tokens, 2, 1040, g2, &ok) : 0.0f;
  double worst_ffn = 0.0;
  int others_same = 1;
  for (size_t p = 0; ok && p < m.n_params; p++) {
    const titans_param *pp = &m.plist[p];
    int ffn_weight = strstr(pp->name, "ffn.w") != NULL;
    double big = 0.0, diff = 0.0;
    for (size_t j = 0; j < pp->size; j++) {
      big = fmax(big, fabs(g1[pp->offset + j]));
      diff = fmax(diff, fabs((double)g1[pp->offset + j] - g2[pp->offset + j]));
    }
    if (ffn_weight) worst_ffn = fmax(worst_ffn, diff / (big + 1e-30));
    else others_same = others_same && diff == 0.0;
  }
  th_check(ok && l1 == l2 && others_same && worst_ffn <= 1e-5,
           "%s: 2,080 rows in two FFN pieces: the same loss, the same gradients but the FFN weights' (those within "
           "%.2g of their largest; tol 1e-5)", kind_label(kind), worst_ffn);
  titans_free(g1);
  titans_free(g2);
  titans_model_free(&m);
}

/* The gradient of titans_forward_backward with tc.write_cost set minus the same without it, with every
   memory's write gate reading nothing but its bias (lr_w = 0, lr_b[h] = z_h): theta_t / theta_max =
   sigma(z_h) at every token, so the cost's gradient on lr_b[h] is write_cost * sigma'(z_h) times the
   tokens a memory writes per token of the batch (MAG and MAL: (T + N_p) / T), in every layer, and no other
   tensor but lr_w moves. With recompute (MAC's segments run again) and in two micro-batches of half the
   scale the same. */
static void write_cost_grads(titans_model *m, float cost, long from, int recompute, const int *tokens, size_t B,
                             size_t T, int halves, float *g, int *ok) {
  titans_train_config tc = titans_train_config_default();
  tc.write_cost = cost;
  tc.write_cost_from = from;
  titans_trainer t;
  float loss = 0.0f;
  *ok = *ok && titans_trainer_init(&t, m, &tc) == TITANS_OK;
  titans_trainer_set_recompute(&t, recompute);
  if (halves) /* rows [0, B/2) and [B/2, B), each at scale 1/2 */
    for (size_t h = 0; h < 2; h++)
      *ok = *ok && titans_forward_backward(&t, tokens + h * (B / 2) * (T + 1), B / 2, T, 0.5f, &loss) == TITANS_OK;
  else
    *ok = *ok && titans_forward_backward(&t, tokens, B, T, 1.0f, &loss) == TITANS_OK;
  memcpy(g, t.grads, m->n_floats * sizeof(float));
  titans_trainer_free(&t);
}

static void test_write_cost(int kind) {
  titans_config c = tiny_config(kind);
  titans_model m;
  titans_model_init(&m, &c);
  lively_weights(&m, 9);
  const float zs[2] = {-1.0f, 0.5f}, cost = 0.3f;
  for (size_t p = 0; p < m.n_params; p++) {
    const titans_param *pp = &m.plist[p];
    if (strstr(pp->name, "mem.lr_w")) memset(m.params + pp->offset, 0, pp->size * sizeof(float));
    if (strstr(pp->name, "mem.lr_b"))
      for (size_t h = 0; h < pp->size; h++) m.params[pp->offset + h] = zs[h % 2];
  }
  size_t B = 2, T = kind == TITANS_BLOCK_MAC ? 15 : 10;
  /* MAG's and MAL's memories write their persistent tokens before the sequence's */
  size_t prefix = kind == TITANS_BLOCK_MAG || kind == TITANS_BLOCK_MAL ? (size_t)c.n_persist : 0;
  double writes_per_token = (double)(T + prefix) / (double)T;
  int tokens[2 * 16], ok = 1;
  random_tokens(tokens, B * (T + 1), c.vocab, 3);
  float *g0 = titans_alloc_floats(m.n_floats), *g1 = titans_alloc_floats(m.n_floats);
  ok = g0 && g1;
  for (int variant = 0; variant < 3 && ok; variant++) { /* plain, recompute, two micro-batches */
    write_cost_grads(&m, 0.0f, 0, variant == 1, tokens, B, T, variant == 2, g0, &ok);
    write_cost_grads(&m, cost, 0, variant == 1, tokens, B, T, variant == 2, g1, &ok);
    double worst = 0.0;
    int others_same = 1, gates = 0;
    for (size_t p = 0; ok && p < m.n_params; p++) {
      const titans_param *pp = &m.plist[p];
      if (strstr(pp->name, "mem.lr_w")) continue;
      if (strstr(pp->name, "mem.lr_b")) {
        gates++;
        for (size_t h = 0; h < pp->size; h++) {
          double sg = 1.0 / (1.0 + exp(-(double)zs[h % 2])), want = cost * sg * (1.0 - sg) * writes_per_token;
          worst = fmax(worst, fabs((double)g1[pp->offset + h] - g0[pp->offset + h] - want) / want);
        }
      } else
        others_same = others_same && memcmp(g0 + pp->offset, g1 + pp->offset, pp->size * sizeof(float)) == 0;
    }
    th_check(ok && gates == c.n_layers && others_same && worst <= 1e-4,
             "%s: a cost on writing adds write_cost sigma'(z) to every layer's write-gate bias gradient (worst %.2g, "
             "tol 1e-4) and nothing elsewhere (%s)", kind_label(kind), worst,
             variant == 0 ? "one call" : variant == 1 ? "recompute" : "two micro-batches at scale 1/2");
  }
  write_cost_grads(&m, 0.0f, 0, 0, tokens, B, T, 0, g0, &ok);
  write_cost_grads(&m, cost, 1, 0, tokens, B, T, 0, g1, &ok); /* a fresh trainer is at step 0 */
  th_check(ok && memcmp(g0, g1, m.n_floats * sizeof(float)) == 0,
           "%s: with write_cost_from 1 the first step's gradient is the one without the cost", kind_label(kind));
  titans_free(g0);
  titans_free(g1);
  titans_model_free(&m);
}

static void test_sampling(void) {
  float logits[5] = {0.1f, 2.0f, -1.0f, 1.5f, 0.0f};
  titans_rng r;
  titans_rng_seed(&r, 1);
  int greedy = titans_sample(logits, 5, 0.0f, 0, 1.0f, &r), top1 = titans_sample(logits, 5, 1.0f, 1, 1.0f, &r);
  int counts[5] = {0}, n = 20000, only_top = 1;
  for (int i = 0; i < n; i++) counts[titans_sample(logits, 5, 1.0f, 0, 1.0f, &r)]++;
  double z = 0, worst = 0;
  for (int i = 0; i < 5; i++) z += exp(logits[i]);
  for (int i = 0; i < 5; i++) worst = fmax(worst, fabs(counts[i] / (double)n - exp(logits[i]) / z));
  for (int i = 0; i < 200; i++) {
    int k = titans_sample(logits, 5, 1.0f, 2, 1.0f, &r);
    if (k != 1 && k != 3) only_top = 0;
  }
  int p_small = titans_sample(logits, 5, 1.0f, 0, 0.1f, &r);
  th_check(greedy == 1 && top1 == 1 && only_top && p_small == 1,
           "sampling: greedy and top-k 1 give the argmax, top-k 2 keeps the two best, a small top-p keeps the best");
  th_close("sampling at temperature 1 follows softmax (20000 draws, largest frequency error)", worst, 0.015);
}

static void test_config_errors(void) {
  titans_config c = tiny_config(TITANS_BLOCK_MAC);
  titans_model m;
  c.segment = 5; /* not a multiple of the chunk 2 */
  th_check(titans_model_init(&m, &c) == TITANS_ERR_ARG, "MAC segment not a multiple of the chunk is rejected: %s",
           m.error);
  c = tiny_config(TITANS_BLOCK_ATTN);
  c.attn_heads = 3;
  th_check(titans_model_init(&m, &c) == TITANS_ERR_ARG, "heads that do not divide d are rejected: %s", m.error);
  c = tiny_config(TITANS_BLOCK_LM2);
  c.lm2_slots = 0;
  th_check(titans_model_init(&m, &c) == TITANS_ERR_ARG, "LM2 without slots is rejected: %s", m.error);
  c = tiny_config(TITANS_BLOCK_MAC);
  c.lm2_slots = 4;
  th_check(titans_model_init(&m, &c) == TITANS_ERR_ARG, "slots on a block without a bank are rejected: %s", m.error);
  c = tiny_config(TITANS_BLOCK_SWA);
  c.d = 60000;
  c.n_layers = 1000;
  th_check(titans_model_init(&m, &c) == TITANS_ERR_ARG, "an absurd size is refused before allocating: %s", m.error);
}

/* The schedule sized for a run: peak at the end of a warm-up of steps / 10, min_lr from the last step on. */
static void test_schedule_for_steps(void) {
  titans_train_config tc = titans_train_config_for_steps(500), def = titans_train_config_default();
  float at_peak = titans_lr_at(&tc, 49), last = titans_lr_at(&tc, 499), after = titans_lr_at(&tc, 500);
  th_check(tc.warmup_steps == 50 && tc.total_steps == 500 && tc.lr == def.lr && tc.min_lr == def.min_lr &&
               at_peak == def.lr && last > def.min_lr && last < def.min_lr * 1.001f && after == def.min_lr,
           "titans_train_config_for_steps(500): warm-up 50, lr %g at step 49, %g at step 499, %g at 500 (min %g)",
           (double)at_peak, (double)last, (double)after, (double)def.min_lr);
}

int main(void) {
  printf("models: gradients vs central differences, every block kind\n");
  for (int k = 0; k < NKINDS; k++) test_gradients(kinds[k]);
  printf("models: causality, sessions, forks, saved states\n");
  for (int k = 0; k < NKINDS; k++) test_causality_and_sessions(kinds[k]);
  printf("models: MAC whose memory learns from its block input X (titans_mac_learns_from)\n");
  test_mac_learns_from_changes_the_model();
  tiny_mac_learns_from = TITANS_MAC_LEARNS_INPUT;
  test_gradients(TITANS_BLOCK_MAC);
  test_causality_and_sessions(TITANS_BLOCK_MAC);
  test_overfit(TITANS_BLOCK_MAC);
  printf("models: the memory's write gate reads the key (cfg.mem.gate_key), MAC learning from X and MAG\n");
  tiny_gate_key = 1;
  test_gradients(TITANS_BLOCK_MAC);
  test_causality_and_sessions(TITANS_BLOCK_MAC);
  tiny_mac_learns_from = TITANS_MAC_LEARNS_ATTN_OUTPUT;
  test_gradients(TITANS_BLOCK_MAG);
  test_causality_and_sessions(TITANS_BLOCK_MAG);
  tiny_gate_key = 0;
  printf("models: the memory's queries and keys without the SiLU (cfg.mem.qk_linear)\n");
  tiny_qk_linear = 1;
  test_gradients(TITANS_BLOCK_LMM);
  test_causality_and_sessions(TITANS_BLOCK_LMM);
  tiny_qk_linear = 0;
  printf("models: a matrix memory whose tokens' gradients are at the weights before each (per_token_grad)\n");
  tiny_per_token = 1;
  test_gradients(TITANS_BLOCK_LMM);
  test_gradients(TITANS_BLOCK_MAC);
  test_causality_and_sessions(TITANS_BLOCK_LMM);
  test_causality_and_sessions(TITANS_BLOCK_MAC);
  tiny_per_token = 0;
  printf("models: least-squares memories (cfg.mem.least_squares)\n");
  tiny_least_squares = 1;
  test_gradients(TITANS_BLOCK_LMM);
  test_gradients(TITANS_BLOCK_MAC);
  test_causality_and_sessions(TITANS_BLOCK_LMM);
  test_causality_and_sessions(TITANS_BLOCK_MAC);
  test_causality_and_sessions(TITANS_BLOCK_MAG);
  printf("models: least-squares memories whose confidence decays (no_forget 0)\n");
  tiny_least_squares = 2;
  test_gradients(TITANS_BLOCK_LMM);
  test_causality_and_sessions(TITANS_BLOCK_MAC);
  tiny_least_squares = 0;
  printf("models: the look-up initialisation and keys held on the previous token\n");
  test_lookup_init();
  printf("models: training\n");
  for (int k = 0; k < NKINDS; k++) test_overfit(kinds[k]);
  test_adamw_step();
  test_threads();
  for (int k = 0; k < NKINDS; k++) test_recompute(kinds[k]);
  tiny_mac_learns_from = TITANS_MAC_LEARNS_INPUT;
  test_recompute(TITANS_BLOCK_MAC);
  tiny_mac_learns_from = TITANS_MAC_LEARNS_ATTN_OUTPUT;
  printf("models: a cost on writing (titans_train_config.write_cost)\n");
  const int memory_kinds[] = {TITANS_BLOCK_MAC, TITANS_BLOCK_MAG, TITANS_BLOCK_MAL, TITANS_BLOCK_LMM};
  for (int k = 0; k < 4; k++) test_write_cost(memory_kinds[k]);
  tiny_mac_learns_from = TITANS_MAC_LEARNS_INPUT;
  test_write_cost(TITANS_BLOCK_MAC);
  tiny_mac_learns_from = TITANS_MAC_LEARNS_ATTN_OUTPUT;
  test_sampling();
  test_config_errors();
  test_schedule_for_steps();
  return th_summary("test_model");
}
