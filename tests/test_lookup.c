/* The memory can carry an in-context look-up: a one-layer LMM built by hand so that every token
   writes "after byte a comes byte b" into its memory and asks "what came after my byte last time"
   predicts the second copy of a random letter string from the first, through the library's own
   session code and through the training forward. docs/long_context.md reports that no trained
   memory model learns this look-up within the budgets tried, while attention does; this test shows
   the failure is one of learning, not of the memory path, and guards that path.

   The construction (d = 64, one memory head of 64, a matrix memory):
   - embeddings one-hot: letter c -> e_c, space -> e_26, newline -> e_27, any other byte -> e_28;
     after the block's RMSNorm a token is 8 e_c;
   - wq = wk = wv = I / 4, so each projection is 2 e_c; the key conv reads the previous byte (tap
     K - 2), the query and value convs the current one; SiLU(2) > 0 and L2Norm give one-hot keys and
     queries, so distinct bytes have orthogonal keys;
   - theta = theta_max sigma(0) = 0.5 with theta_max 1, no momentum, no forgetting, w0 = 0, no
     surprise bound: with unit keys a write of (k, v) leaves W k = v exactly (docs/model.md 1.4);
   - a constant output gate (wg all 0.1: SiLU(0.8) for every channel and token) and wo = 3 I; no FFN;
     tied embeddings read the retrieved one-hot value as the next byte's logit.
   The memory returns the byte that most recently followed the current one; a line's letters are
   distinct, so that is the right answer (chance is about 1/20 per letter). */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "harness.h"

enum { D = 64, K = 4, LINE = 20, LINES = 32, LINE_BYTES = 2 * LINE + 2 };

static int byte_slot(int b) { return b >= 'a' && b <= 'z' ? b - 'a' : b == ' ' ? 26 : b == '\n' ? 27 : 28; }

static void build_lookup_model(titans_model *m) {
  titans_config c = titans_config_default(TITANS_BLOCK_LMM, 256, D, 1);
  c.mem.heads = 1;
  c.mem.head_dim = D;
  c.mem.depth = 1;
  c.mem.chunk = 16;
  c.mem.conv_width = K;
  c.mem.theta_max = 1.0f;
  c.mem.surprise_bound = 0.0f;
  if (titans_model_init(m, &c) != TITANS_OK) {
    th_check(0, "model init: %s", m->error);
    exit(1);
  }
  memset(m->params, 0, m->n_floats * sizeof(float));
  for (int b = 0; b < 256; b++) m->w.tok_emb[b * D + byte_slot(b)] = 1.0f;
  titans_layer *L = &m->w.layers[0];
  titans_mem_weights *w = &L->mem;
  for (size_t j = 0; j < D; j++) {
    m->w.norm_f[j] = L->norm1[j] = L->norm2[j] = w->out_norm[j] = 1.0f;
    w->wq[j * D + j] = w->wk[j * D + j] = w->wv[j * D + j] = 0.25f;
    w->conv_q[j * K + K - 1] = w->conv_v[j * K + K - 1] = 1.0f;
    w->conv_k[j * K + K - 2] = 1.0f; /* the key describes the previous byte */
    w->wo[j * D + j] = 3.0f;
    for (size_t i = 0; i < D; i++) w->wg[j * D + i] = 0.1f;
  }
  w->lr_b[0] = 0.0f;     /* theta = theta_max / 2 */
  w->mom_b[0] = -30.0f;  /* eta ~ 1e-13 */
  w->decay_b[0] = -30.0f; /* alpha ~ 1e-13 */
}

/* text [LINES * LINE_BYTES]: each line 20 distinct random letters, a space, the same letters, a
   newline. Distinct, so that "what followed this letter last time" has one answer in a line. */
static void make_text(int *text, uint64_t seed) {
  titans_rng r;
  titans_rng_seed(&r, seed);
  for (int l = 0; l < LINES; l++) {
    int *line = text + l * LINE_BYTES, letters[26];
    for (int i = 0; i < 26; i++) letters[i] = 'a' + i;
    for (int i = 0; i < LINE; i++) { /* a partial Fisher-Yates shuffle */
      int j = i + (int)(titans_rng_u64(&r) % (uint64_t)(26 - i)), tmp = letters[i];
      letters[i] = letters[j];
      letters[j] = tmp;
      line[i] = line[LINE + 1 + i] = letters[i];
    }
    line[LINE] = ' ';
    line[LINE_BYTES - 1] = '\n';
  }
}

static int argmax(const float *x, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

/* Fraction of the second copies' letters 2..20 (and of the first copies', the control) whose next
   byte is the argmax of logits [n, 256] (logits of position t predict text[t + 1]). */
static void score(const float *logits, const int *text, int n, double *first, double *second) {
  int hit[2] = {0, 0}, count[2] = {0, 0};
  for (int t = 0; t + 1 < n; t++) {
    int pos = (t + 1) % LINE_BYTES, part = pos >= LINE + 2 && pos < LINE_BYTES - 1 ? 1
                                           : pos >= 1 && pos < LINE                ? 0
                                                                                   : -1;
    if (part < 0) continue;
    hit[part] += argmax(logits + (size_t)t * 256, 256) == text[t + 1];
    count[part]++;
  }
  *first = (double)hit[0] / count[0];
  *second = (double)hit[1] / count[1];
}

int main(void) {
  printf("a hand-built one-layer LMM looks up what followed the current byte\n");
  titans_model m;
  build_lookup_model(&m);
  int n = LINES * LINE_BYTES, text[LINES * LINE_BYTES];
  make_text(text, 11);
  float *session_logits = titans_alloc_floats((size_t)n * 256), *batch_logits = titans_alloc_floats((size_t)n * 256);

  titans_session s;
  int rc = titans_session_init(&s, &m);
  for (int t = 0; t < n && rc == TITANS_OK; t++)
    rc = titans_session_feed(&s, text + t, 1, session_logits + (size_t)t * 256);
  th_check(rc == TITANS_OK, "a session reads %d bytes (rc=%d %s)", n, rc, rc ? s.error : "");
  double first, second;
  score(session_logits, text, n, &first, &second);
  th_check(second >= 0.9, "session: %.0f%% of the second copies' letters predicted (need >= 90%%)", 100 * second);
  th_check(first <= 0.15, "session: %.0f%% of the first copies' (random) letters, near chance 5%% (need <= 15%%)",
           100 * first);

  titans_train_config tc = titans_train_config_default();
  titans_trainer tr;
  rc = titans_trainer_init(&tr, &m, &tc);
  if (rc == TITANS_OK) rc = titans_forward_logits(&tr, text, 1, (size_t)n, batch_logits);
  th_check(rc == TITANS_OK, "the training forward reads the same bytes in one call (rc=%d)", rc);
  double f2, s2;
  score(batch_logits, text, n, &f2, &s2);
  th_check(s2 == second && f2 == first, "training forward: the same hits (%.0f%%, %.0f%%) as the session", 100 * s2,
           100 * f2);
  th_close("training forward vs session logits", th_max_abs_diff(batch_logits, session_logits, (size_t)n * 256), 1e-3);

  titans_trainer_free(&tr);
  titans_session_free(&s);
  titans_free(session_logits);
  titans_free(batch_logits);
  titans_model_free(&m);
  return th_summary("test_lookup");
}
