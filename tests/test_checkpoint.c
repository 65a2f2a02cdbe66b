/* Tests of checkpoints and the tokenizer (section 8, docs/model.md section 6 and property 7.6), for every block kind:
   configurations through JSON and back; model save/load with bit-identical parameters, batch logits
   and session logits; trainer save/load then more steps equal to the uninterrupted run bit for bit;
   a saved session continuing exactly; and crafted bad files (truncated, wrong shape, missing, extra,
   wrong dtype, non-finite, bad config JSON, hostile sizes, wrong kind or version, a session of
   another model) refused with a message and nothing left allocated. Every comparison here is exact
   (tolerance 0): a checkpoint stores the float bits, and the same computation on the same bits gives
   the same bits. */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "harness.h"
#include <time.h>

static const int kinds[] = {TITANS_BLOCK_ATTN, TITANS_BLOCK_SWA, TITANS_BLOCK_MAC, TITANS_BLOCK_MAG, TITANS_BLOCK_MAL,
                            TITANS_BLOCK_LMM, TITANS_BLOCK_LM2};
#define NKINDS (int)(sizeof kinds / sizeof kinds[0])

/* Files go to $TMPDIR (or /tmp) under a prefix unique to this run; the names used are removed at the end. */
static char tmp_prefix[512];
static const char *tmp_names[] = {"model.safetensors", "trainer.safetensors", "session.safetensors", "m.safetensors",
                                  "good.safetensors", "bad.safetensors"};

static const char *tmp_path(const char *name) {
  static char buf[4][700];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s%s", tmp_prefix, name);
  return buf[k];
}

/* Tiny sizes that still exercise every option: 2 layers, persistent tokens, an untied head (MAG), a
   window and segments shorter than the sequences, chunks that do not divide them. */
static titans_config tiny_config(int kind) {
  titans_config c = titans_config_default(kind, 37, 16, 2);
  c.attn_heads = 2;
  c.ffn_hidden = 24;
  c.window = 6;
  c.segment = 8;
  c.n_persist = kind == TITANS_BLOCK_LMM ? 0 : 2;
  c.tied = kind != TITANS_BLOCK_MAG;
  c.max_context = 64;
  c.mem.heads = 2;
  c.mem.head_dim = 8;
  c.mem.hidden_mult = 2;
  c.mem.chunk = 4;
  c.mem.conv_width = 3;
  c.mem.theta_max = 0.05f;
  return c;
}

static void random_tokens(int *t, size_t n, int V, uint64_t seed) {
  titans_rng r;
  titans_rng_seed(&r, seed);
  for (size_t i = 0; i < n; i++) t[i] = (int)(titans_rng_u64(&r) % (uint64_t)V);
}

static int make_model(titans_model *m, int kind, uint64_t seed) {
  titans_config c = tiny_config(kind);
  int rc = titans_model_init(m, &c);
  if (rc) {
    printf("  model init failed: %s\n", m->error);
    return rc;
  }
  titans_model_init_weights(m, seed);
  return TITANS_OK;
}

static unsigned char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = (unsigned char *)malloc((size_t)len + 1);
  *n = fread(b, 1, (size_t)len, f);
  fclose(f);
  return b;
}

static void write_all(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(b, 1, n, f);
  fclose(f);
}

/* A model load that must fail: the status, a message, and nothing left allocated. */
static void expect_bad_model(const char *what, const char *path) {
  titans_model m;
  memset(&m, 0x5a, sizeof m);
  int rc = titans_model_load(&m, path);
  th_check(rc != TITANS_OK && m.error[0] && !m.params && !m.plist && !m.w.layers, "%s refused (%s): %s", what,
           titans_status_string(rc), m.error);
  if (rc == TITANS_OK) titans_model_free(&m);
}

/* ---- configurations as JSON ------------------------------------------------------------------- */

static void test_json(void) {
  printf("configurations as JSON\n");
  char json[1024], err[TITANS_ERR_MSG_SIZE];
  int ok = 1;
  for (int k = 0; k < NKINDS; k++) {
    titans_config c = tiny_config(kinds[k]), back;
    c.mem.theta_max = 0.0123456789f;
    c.mem.surprise_bound = 0.75f;
    if (kinds[k] == TITANS_BLOCK_MAC) c.mac_learns_from = TITANS_MAC_LEARNS_INPUT;
    memset(&back, 0, sizeof back);
    if (titans_config_to_json(&c, json, sizeof json) || titans_config_from_json(&back, json, err)) {
      ok = 0;
      printf("  %s: %s\n", titans_block_name(kinds[k]), err);
      continue;
    }
    char again[1024];
    titans_config_to_json(&back, again, sizeof again);
    ok &= strcmp(json, again) == 0 && back.mem.theta_max == c.mem.theta_max &&
          back.mem.surprise_bound == c.mem.surprise_bound && back.block == c.block &&
          back.tied == c.tied && back.segment == c.segment && back.mem.chunk == c.mem.chunk &&
          back.mac_learns_from == c.mac_learns_from;
  }
  th_check(ok, "config -> JSON -> config is the identity for every kind, e.g. %s", json);

  titans_config def = titans_config_default(TITANS_BLOCK_MAC, 256, 128, 2);
  titans_config_to_json(&def, json, sizeof json);
  th_check(strstr(json, "\"block\":\"mac\"") && strstr(json, "\"theta_max\":0.1,"), "floats in the shortest form: %s",
           json);
  {
    /* a file written before the surprise bound existed has no such key: it loads with the bound off */
    char old[1024];
    titans_config back, unbounded = def;
    unbounded.mem.surprise_bound = 0.0f;
    titans_config_to_json(&unbounded, json, sizeof json);
    const char *key = strstr(json, ",\"surprise_bound\":0}");
    size_t at = key ? (size_t)(key - json) : 0;
    snprintf(old, sizeof old, "%.*s}}", (int)at, json);
    int rc = key ? titans_config_from_json(&back, old, err) : -1;
    th_check(rc == 0 && back.mem.surprise_bound == 0.0f && back.mem.theta_max == def.mem.theta_max,
             "a config without \"surprise_bound\" (older files) loads with the bound off: %s", key ? old : json);
  }
  {
    /* nor the choice of what MAC's memory learns from: such a file loads with the paper's y */
    char old[1024];
    titans_config back;
    titans_config_to_json(&def, json, sizeof json);
    const char *key = strstr(json, ",\"mac_learns_from\":0}");
    snprintf(old, sizeof old, "%.*s}", key ? (int)(key - json) : 0, json);
    back.mac_learns_from = 7;
    int rc = key ? titans_config_from_json(&back, old, err) : -1;
    th_check(rc == 0 && back.mac_learns_from == TITANS_MAC_LEARNS_ATTN_OUTPUT,
             "a config without \"mac_learns_from\" (older files) loads as the paper's MAC: %s", key ? old : json);
  }
  th_check(titans_config_to_json(&def, json, 40) == TITANS_ERR_ARG && json[0] == 0, "a too small buffer is refused");

  /* floats of every magnitude round-trip exactly through the train config */
  const float vals[] = {4e-4f, 1e-8f, 0.1f, 1.0f / 3.0f, 0.9f, 0.95f, 123456.789f, 3.4028235e38f, 1.17549435e-38f,
                        1.4e-45f, 1e20f, 0.0f, 2.5e-7f, 7.0f};
  int fl_ok = 1;
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
    titans_train_config tc = titans_train_config_default(), tb;
    tc.lr = vals[i];
    tc.weight_decay = vals[(i + 3) % (sizeof vals / sizeof vals[0])];
    if (titans_train_config_to_json(&tc, json, sizeof json) || titans_train_config_from_json(&tb, json, err) ||
        memcmp(&tc.lr, &tb.lr, sizeof(float)) || memcmp(&tc.weight_decay, &tb.weight_decay, sizeof(float))) {
      fl_ok = 0;
      printf("  float %.9g: %s\n", (double)vals[i], json);
    }
  }
  th_check(fl_ok, "%zu floats (denormal, FLT_MAX, 1e-8, 1/3, ...) round-trip bit for bit",
           sizeof vals / sizeof vals[0]);
  {
    /* the cost on writing: written only when set (a trainer file without it is an earlier version's, or
       one that trains without it), round-trips, and a negative or infinite one is refused */
    titans_train_config tc = titans_train_config_default(), tb = tc;
    titans_train_config_to_json(&tc, json, sizeof json);
    int absent = strstr(json, "write_cost") == NULL;
    tc.write_cost = 0.3f;
    tc.write_cost_from = 1000;
    tc.write_cost_log = 0.01f;
    tb.write_cost = 0.0f;
    int rt = !titans_train_config_to_json(&tc, json, sizeof json) && !titans_train_config_from_json(&tb, json, err) &&
             tb.write_cost == 0.3f && tb.write_cost_from == 1000 && tb.write_cost_log == 0.01f;
    char neg[1024], inf[1024], neg_log[1024];
    const char *at = strstr(json, "\"write_cost\":");
    char early[1024];
    snprintf(neg, sizeof neg, "%.*s\"write_cost\":-1}", at ? (int)(at - json) : 0, json);
    snprintf(inf, sizeof inf, "%.*s\"write_cost\":1e39}", at ? (int)(at - json) : 0, json);
    snprintf(early, sizeof early, "%.*s\"write_cost\":0.3,\"write_cost_from\":-1}", at ? (int)(at - json) : 0, json);
    snprintf(neg_log, sizeof neg_log, "%.*s\"write_cost\":0.3,\"write_cost_log\":-1}", at ? (int)(at - json) : 0,
             json);
    int refused = at && titans_train_config_from_json(&tb, neg, err) == TITANS_ERR_FORMAT &&
                  titans_train_config_from_json(&tb, inf, err) == TITANS_ERR_FORMAT &&
                  titans_train_config_from_json(&tb, early, err) == TITANS_ERR_FORMAT &&
                  titans_train_config_from_json(&tb, neg_log, err) == TITANS_ERR_FORMAT;
    th_check(absent && rt && refused,
             "write_cost, write_cost_from, write_cost_log: left out of the JSON at 0, round-trip at 0.3, 1000 and "
             "0.01, a cost of -1 or 1e39, a step of -1 and a log cost of -1 refused (%s)", json);
  }

  /* bad JSON of every kind */
  const char *good = json;
  titans_config_to_json(&def, json, sizeof json);
  struct {
    const char *what, *from, *to;
  } bad[] = {
      {"truncated", "\"mac_learns_from\":0}", "\"mac_learns_from\":0"},
      {"missing key", "\"vocab\":256,", ""},
      {"unknown key", "\"vocab\":256,", "\"vocab\":256,\"colour\":1,"},
      {"repeated key", "\"vocab\":256,", "\"vocab\":256,\"vocab\":256,"},
      {"fraction for an integer", "\"vocab\":256", "\"vocab\":256.5"},
      {"exponent for an integer", "\"vocab\":256", "\"vocab\":2e2"},
      {"string for an integer", "\"vocab\":256", "\"vocab\":\"256\""},
      {"integer overflow", "\"vocab\":256", "\"vocab\":99999999999999999999"},
      {"unknown block", "\"mac\"", "\"mlp\""},
      {"an LM2 block without slots", "\"mac\"", "\"lm2\""},
      {"slots on a block without a bank", "\"lm2_slots\":0", "\"lm2_slots\":4"},
      {"out-of-range d", "\"d\":128", "\"d\":1000000"},
      {"negative layers", "\"n_layers\":2", "\"n_layers\":-2"},
      {"theta_max overflow", "\"theta_max\":0.1,", "\"theta_max\":1e39,"},
      {"negative surprise_bound", "\"surprise_bound\":1}", "\"surprise_bound\":-1}"},
      {"zero theta_max", "\"theta_max\":0.1,", "\"theta_max\":0,"},
      {"trailing text", "\"mac_learns_from\":0}", "\"mac_learns_from\":0} x"},
      {"an unknown mac_learns_from", "\"mac_learns_from\":0", "\"mac_learns_from\":2"},
      {"leading zero", "\"vocab\":256", "\"vocab\":0256"},
      {"escape in a key", "\"vocab\"", "\"voc\\u0061b\""},
      {"mem.d differs", "\"mem\":{\"d\":128", "\"mem\":{\"d\":64"},
  };
  int n_refused = 0, n_bad = (int)(sizeof bad / sizeof bad[0]);
  for (int i = 0; i < n_bad; i++) {
    char mut[1200];
    const char *at = strstr(good, bad[i].from);
    if (!at) {
      printf("  (pattern of '%s' not found)\n", bad[i].what);
      continue;
    }
    size_t pre = (size_t)(at - good);
    snprintf(mut, sizeof mut, "%.*s%s%s", (int)pre, good, bad[i].to, at + strlen(bad[i].from));
    titans_config c;
    err[0] = 0;
    int rc = titans_config_from_json(&c, mut, err);
    if (rc != TITANS_OK && err[0]) n_refused++;
    else printf("  NOT refused: %s: %s\n", bad[i].what, mut);
  }
  th_check(n_refused == n_bad, "%d of %d malformed configuration texts refused with a message", n_refused, n_bad);
  {
    titans_config x = def, back;
    x.mac_learns_from = TITANS_MAC_LEARNS_INPUT;
    char mut[1200];
    titans_config_to_json(&x, mut, sizeof mut);
    char *at = strstr(mut, "\"block\":\"mac\"");
    if (at) at[11] = 'g'; /* "mac" -> "mag" */
    err[0] = 0;
    th_check(at && titans_config_from_json(&back, mut, err) == TITANS_ERR_ARG && err[0],
             "mac_learns_from on a block other than MAC is refused: %s", err);
  }
  titans_config c;
  th_check(titans_config_from_json(&c, NULL, err) != TITANS_OK && titans_config_from_json(&c, "", err) != TITANS_OK &&
               titans_config_from_json(&c, "[]", err) != TITANS_OK,
           "NULL, empty and non-object texts refused");
}

/* ---- tokenizer -------------------------------------------------------------------------------- */

static void test_tokenizer(void) {
  printf("byte tokenizer\n");
  titans_tokenizer tok;
  char text[256], back[256];
  int ids[256];
  size_t n, nb;
  for (int i = 0; i < 256; i++) text[i] = (char)i;
  th_check(titans_tokenizer_init(&tok, TITANS_TOKENIZER_BYTE) == TITANS_OK && tok.vocab == 256 &&
               strcmp(titans_tokenizer_name(tok.kind), "byte") == 0 && titans_tokenizer_from_name("byte") == 0 &&
               titans_tokenizer_from_name("bpe") == -1,
           "init: kind byte, vocabulary 256");
  int rc = titans_tokenizer_encode(&tok, ids, 256, &n, text, 256);
  int rc2 = titans_tokenizer_decode(&tok, back, 256, &nb, ids, n);
  int ok = rc == TITANS_OK && rc2 == TITANS_OK && n == 256 && nb == 256 && memcmp(text, back, 256) == 0;
  for (int i = 0; i < 256; i++) ok &= ids[i] == i;
  th_check(ok, "all 256 bytes encode to ids 0..255 and decode back");
  th_check(titans_tokenizer_encode(&tok, NULL, 0, &n, "hello", 5) == TITANS_OK && n == 5 &&
               titans_tokenizer_encode(&tok, ids, 4, &n, "hello", 5) == TITANS_ERR_ARG && tok.error[0],
           "counting with NULL; too small an output refused: %s", tok.error);
  int badid[2] = {65, 256};
  th_check(titans_tokenizer_decode(&tok, back, 2, &nb, badid, 2) == TITANS_ERR_ARG, "id 256 refused: %s", tok.error);
  titans_tokenizer_free(&tok);
  th_check(titans_tokenizer_init(&tok, 7) == TITANS_ERR_ARG, "unknown kind refused: %s", tok.error);
}

/* ---- models ----------------------------------------------------------------------------------- */

static void test_model_roundtrip(void) {
  printf("model save/load: bit-identical parameters, logits and session logits\n");
  const size_t B = 2, T = 13, NS = 19;
  for (int k = 0; k < NKINDS; k++) {
    const char *kn = titans_block_name(kinds[k]), *path = tmp_path("model.safetensors");
    titans_model a, b;
    if (make_model(&a, kinds[k], 100 + (uint64_t)k)) continue;
    titans_tokenizer tok, tok2;
    char *meta = NULL;
    titans_tokenizer_init(&tok, TITANS_TOKENIZER_BYTE);
    int rc = titans_model_save(&a, path);
    rc = rc ? rc : titans_model_load_ex(&b, NULL, &meta, path);
    if (!th_check(rc == TITANS_OK, "%s: save and load: %s", kn, rc ? (a.error[0] ? a.error : b.error) : "ok")) {
      titans_model_free(&a);
      continue;
    }
    int same = b.n_floats == a.n_floats && b.n_params == a.n_params && meta == NULL &&
               memcmp(a.params, b.params, a.n_floats * sizeof(float)) == 0;
    for (size_t p = 0; same && p < a.n_params; p++)
      same = strcmp(a.plist[p].name, b.plist[p].name) == 0 && a.plist[p].offset == b.plist[p].offset;
    th_check(same, "%s: %zu parameters in %zu tensors, bit-identical", kn, a.n_floats, a.n_params);

    /* batch logits */
    int tokens[2 * 13];
    float *la = (float *)malloc(B * T * 37 * sizeof(float)), *lb = (float *)malloc(B * T * 37 * sizeof(float));
    random_tokens(tokens, B * T, a.cfg.vocab, 7);
    titans_trainer ta, tb;
    titans_trainer_init(&ta, &a, NULL);
    titans_trainer_init(&tb, &b, NULL);
    rc = titans_forward_logits(&ta, tokens, B, T, la);
    rc = rc ? rc : titans_forward_logits(&tb, tokens, B, T, lb);
    th_check(rc == TITANS_OK && memcmp(la, lb, B * T * 37 * sizeof(float)) == 0,
             "%s: batch logits [%zu, %zu, 37] bit-identical", kn, B, T);
    titans_trainer_free(&ta);
    titans_trainer_free(&tb);

    /* session logits */
    titans_session sa, sb;
    int toks[19];
    random_tokens(toks, NS, a.cfg.vocab, 8);
    titans_session_init(&sa, &a);
    titans_session_init(&sb, &b);
    rc = titans_session_feed(&sa, toks, NS, la);
    rc = rc ? rc : titans_session_feed(&sb, toks, NS, lb);
    th_check(rc == TITANS_OK && memcmp(la, lb, 37 * sizeof(float)) == 0,
             "%s: session logits after %zu tokens bit-identical", kn, NS);
    titans_session_free(&sa);
    titans_session_free(&sb);

    /* in memory (the no-stdio path), and with a tokenizer and a user string */
    titans_st_writer w;
    titans_st_reader r;
    unsigned char *buf = NULL;
    size_t size = 0;
    titans_model c;
    titans_st_writer_init(&w);
    rc = titans_model_write(&a, NULL, &w);
    rc = rc ? rc : titans_st_writer_to_memory(&w, &buf, &size);
    rc = rc ? rc : titans_st_reader_parse(&r, buf, size);
    rc = rc ? rc : titans_model_read(&c, NULL, &r);
    th_check(rc == TITANS_OK && memcmp(a.params, c.params, a.n_floats * sizeof(float)) == 0 &&
                 titans_st_find(&r, kinds[k] == TITANS_BLOCK_ATTN ? "layers.1.attn.wq" : "layers.1.norm2") &&
                 (kinds[k] == TITANS_BLOCK_ATTN || kinds[k] == TITANS_BLOCK_SWA ||
                  titans_st_find(&r, kinds[k] == TITANS_BLOCK_LM2 ? "layers.0.lm2.m0" : "layers.0.mem.w0.1")) &&
                 strcmp(titans_st_meta(&r, "kind"), "model") == 0,
             "%s: through memory (write, to_memory, parse, read): docs/model.md section 6 names, bit-identical", kn);
    if (rc == TITANS_OK) titans_model_free(&c);
    titans_st_reader_free(&r);
    titans_st_writer_free(&w);
    titans_free(buf);
    free(la);
    free(lb);
    titans_model_free(&b);

    if (k == 0) {
      /* a byte-vocabulary model with a tokenizer and a caller string */
      titans_config cb = tiny_config(kinds[k]);
      cb.vocab = 256;
      titans_model m2, m3;
      titans_model_init(&m2, &cb);
      titans_model_init_weights(&m2, 5);
      rc = titans_model_save_ex(&m2, &tok, "step=12\nnote=caf\xc3\xa9", path);
      rc = rc ? rc : titans_model_load_ex(&m3, &tok2, &meta, path);
      th_check(rc == TITANS_OK && tok2.kind == TITANS_TOKENIZER_BYTE && tok2.vocab == 256 && meta &&
                   strcmp(meta, "step=12\nnote=caf\xc3\xa9") == 0,
               "tokenizer kind and caller string saved and read back: \"%s\"", meta ? meta : "(none)");
      titans_free(meta);
      meta = NULL;
      if (rc == TITANS_OK) {
        titans_tokenizer_free(&tok2);
        titans_model_free(&m3);
      }
      titans_model_save(&m2, path); /* no tokenizer key: a 256 vocabulary means bytes */
      rc = titans_model_load_ex(&m3, &tok2, NULL, path);
      th_check(rc == TITANS_OK && tok2.kind == TITANS_TOKENIZER_BYTE, "no tokenizer key and vocabulary 256: bytes");
      if (rc == TITANS_OK) {
        titans_tokenizer_free(&tok2);
        titans_model_free(&m3);
      }
      titans_model_free(&m2);
      titans_model_save(&a, path);
      rc = titans_model_load_ex(&m3, &tok2, NULL, path);
      th_check(rc == TITANS_ERR_FORMAT && !m3.params,
               "no tokenizer key and vocabulary 37: refused when a tokenizer is asked for: %s", m3.error);
    }
    titans_tokenizer_free(&tok);
    titans_model_free(&a);
  }
  titans_model m;
  th_check(titans_model_load(&m, tmp_path("does-not-exist.safetensors")) == TITANS_ERR_IO && m.error[0],
           "a missing file: TITANS_ERR_IO: %s", m.error);
  titans_model a;
  make_model(&a, TITANS_BLOCK_MAC, 1);
  th_check(titans_model_save(&a, tmp_path("no/such/dir/m.safetensors")) == TITANS_ERR_IO && a.error[0],
           "saving into a missing directory: TITANS_ERR_IO: %s", a.error);
  titans_model_free(&a);
}

/* ---- trainers --------------------------------------------------------------------------------- */

static void test_trainer_resume(void) {
  printf("trainer save/load: continued training equals the uninterrupted run bit for bit\n");
  const size_t B = 2, T = 16;
  const int K1 = 3, K2 = 3;
  for (int k = 0; k < NKINDS; k++) {
    const char *kn = titans_block_name(kinds[k]), *path = tmp_path("trainer.safetensors");
    titans_model a, b;
    titans_trainer ta, tb;
    titans_train_config tc = titans_train_config_default();
    tc.lr = 3e-3f;
    tc.warmup_steps = 2;
    tc.total_steps = K1 + K2;
    if (make_model(&a, kinds[k], 200 + (uint64_t)k)) continue;
    titans_trainer_init(&ta, &a, &tc);
    int tokens[(K1 + K2) * 2 * 17], rc = TITANS_OK;
    random_tokens(tokens, sizeof tokens / sizeof tokens[0], a.cfg.vocab, 300 + (uint64_t)k);
    float loss;
    for (int s = 0; s < K1 && !rc; s++) rc = titans_train_step(&ta, tokens + s * B * (T + 1), 1, B, T, &loss);
    rc = rc ? rc : titans_trainer_save(&ta, NULL, "sampler=42:7", path);
    for (int s = K1; s < K1 + K2 && !rc; s++) rc = titans_train_step(&ta, tokens + s * B * (T + 1), 1, B, T, &loss);
    char *meta = NULL;
    int rc2 = titans_trainer_load(&tb, &b, NULL, &meta, path);
    if (!th_check(rc == TITANS_OK && rc2 == TITANS_OK, "%s: train, save, load: %s", kn,
                  rc    ? ta.error
                  : rc2 ? tb.error
                        : "ok")) {
      titans_trainer_free(&ta);
      titans_model_free(&a);
      continue;
    }
    char tca[512], tcb[512];
    titans_train_config_to_json(&tc, tca, sizeof tca);
    titans_train_config_to_json(&tb.tc, tcb, sizeof tcb);
    th_check(tb.step == K1 && tb.model == &b && meta && strcmp(meta, "sampler=42:7") == 0 && strcmp(tca, tcb) == 0,
             "%s: step %ld, train config and caller string restored", kn, tb.step);
    for (int s = K1; s < K1 + K2 && !rc; s++) rc = titans_train_step(&tb, tokens + s * B * (T + 1), 1, B, T, &loss);
    th_check(rc == TITANS_OK && tb.step == ta.step && memcmp(a.params, b.params, a.n_floats * sizeof(float)) == 0 &&
                 memcmp(ta.adam_m, tb.adam_m, a.n_floats * sizeof(float)) == 0 &&
                 memcmp(ta.adam_v, tb.adam_v, a.n_floats * sizeof(float)) == 0,
             "%s: %d + %d steps (resumed) equal %d uninterrupted steps: parameters and moments bit-identical (max diff "
             "%.3g)",
             kn, K1, K2, K1 + K2, th_max_abs_diff(a.params, b.params, a.n_floats));
    titans_free(meta);

    /* a trainer file also loads as a model (its parameters); a model file is not a trainer */
    titans_model c;
    titans_trainer_save(&ta, NULL, NULL, path);
    rc = titans_model_load(&c, path);
    th_check(rc == TITANS_OK && memcmp(c.params, a.params, a.n_floats * sizeof(float)) == 0,
             "%s: titans_model_load reads a trainer file's parameters", kn);
    if (rc == TITANS_OK) titans_model_free(&c);
    titans_model_save(&a, path);
    titans_trainer tc2;
    titans_model mc;
    rc = titans_trainer_load(&tc2, &mc, NULL, NULL, path);
    th_check(rc == TITANS_ERR_FORMAT && !mc.params && !tc2.grads, "%s: a model file is not a trainer: %s", kn,
             tc2.error);

    titans_trainer_free(&ta);
    titans_trainer_free(&tb);
    titans_model_free(&a);
    titans_model_free(&b);
  }
}

/* ---- sessions --------------------------------------------------------------------------------- */

static void test_session_resume(void) {
  printf("session save/load: a restored session continues exactly\n");
  const size_t N1 = 11, N2 = 9; /* 11: inside a chunk, a segment, past the window */
  for (int k = 0; k < NKINDS; k++) {
    const char *kn = titans_block_name(kinds[k]), *path = tmp_path("session.safetensors");
    titans_model m;
    if (make_model(&m, kinds[k], 400 + (uint64_t)k)) continue;
    int toks[20];
    float la[37], lb[37];
    random_tokens(toks, N1 + N2, m.cfg.vocab, 500 + (uint64_t)k);
    titans_session a, b;
    titans_session_init(&a, &m);
    titans_session_init(&b, &m);
    int rc = titans_session_feed(&a, toks, N1, NULL);
    rc = rc ? rc : titans_session_save(&a, path);
    rc = rc ? rc : titans_session_feed(&a, toks + N1, N2, la);
    /* b has read something else first: the load must replace all of it */
    rc = rc ? rc : titans_session_feed(&b, toks + 3, 7, NULL);
    int rc2 = titans_session_load(&b, path);
    int rc3 = rc2 ? rc2 : titans_session_feed(&b, toks + N1, N2, lb);
    th_check(rc == TITANS_OK && rc2 == TITANS_OK && rc3 == TITANS_OK && b.position == a.position &&
                 memcmp(la, lb, sizeof la) == 0,
             "%s: %zu tokens, save, %zu more: logits equal the uninterrupted session's bit for bit (%s)", kn, N1, N2,
             rc ? a.error : rc2 || rc3 ? b.error : "ok");

    /* the state file is refused by a session of another model: other weights, other config */
    titans_model m2, m3;
    make_model(&m2, kinds[k], 999);
    titans_config c3 = tiny_config(kinds[k]);
    c3.d = c3.mem.d = 32;
    c3.mem.head_dim = 16;
    titans_model_init(&m3, &c3);
    titans_model_init_weights(&m3, 1);
    titans_session s2, s3;
    titans_session_init(&s2, &m2);
    titans_session_init(&s3, &m3);
    titans_session_feed(&s2, toks, 4, NULL);
    rc = titans_session_load(&s2, path);
    th_check(rc == TITANS_ERR_FORMAT && s2.position == 0, "%s: another model's weights: refused, session reset: %s", kn,
             s2.error);
    rc = titans_session_load(&s3, path);
    th_check(rc == TITANS_ERR_FORMAT, "%s: another configuration (d = 32): refused: %s", kn, s3.error);
    titans_session_free(&s2);
    titans_session_free(&s3);
    titans_model_free(&m2);
    titans_model_free(&m3);

    /* a session file is not a model, a model file is not a session */
    expect_bad_model("a session file loaded as a model", path);
    titans_model_save(&m, tmp_path("m.safetensors"));
    rc = titans_session_load(&b, tmp_path("m.safetensors"));
    th_check(rc == TITANS_ERR_FORMAT && b.position == 0, "%s: a model file loaded as a session: refused: %s", kn,
             b.error);

    /* a state tensor with NaN: the library refuses to save it, and a crafted file is refused on load */
    if (k == 2) {
      titans_session_feed(&a, toks, 5, NULL);
      titans_tensor_ref refs[64];
      size_t nr = titans_session_state(&a, refs, 64);
      float keep = refs[nr - 1].data[0];
      refs[nr - 1].data[0] = NAN;
      remove(path);
      rc = titans_session_save(&a, path);
      FILE *written = fopen(path, "rb");
      th_check(rc == TITANS_ERR_STATE && written == NULL, "a state holding NaN: not saved: %s", a.error);
      if (written) fclose(written);
      titans_st_writer w;
      titans_st_writer_init(&w);
      char hash[17];
      for (int i = 0; i < 16; i++) hash[i] = "0123456789abcdef"[(titans_model_hash(&m) >> (60 - 4 * i)) & 15];
      hash[16] = 0;
      char cj[1024];
      titans_config_to_json(&m.cfg, cj, sizeof cj);
      titans_st_writer_add_meta(&w, "format", "titans.h");
      titans_st_writer_add_meta(&w, "version", TITANS_VERSION);
      titans_st_writer_add_meta(&w, "kind", "session");
      titans_st_writer_add_meta(&w, "config", cj);
      titans_st_writer_add_meta(&w, "model_hash", hash);
      for (size_t i = 0; i < nr; i++) titans_st_writer_add_f32(&w, refs[i].name, refs[i].data, 1, &refs[i].count);
      rc = titans_st_writer_save(&w, path);
      titans_st_writer_free(&w);
      refs[nr - 1].data[0] = keep;
      rc = rc ? rc : titans_session_load(&b, path);
      th_check(rc == TITANS_ERR_FORMAT && b.position == 0, "a crafted state holding NaN: refused: %s", b.error);
    }
    titans_session_free(&a);
    titans_session_free(&b);
    titans_model_free(&m);
  }
}

/* ---- crafted bad files ----------------------------------------------------------------------- */

enum { MUT_NONE, MUT_SHAPE, MUT_MISSING, MUT_EXTRA, MUT_NAN, MUT_CONFIG, MUT_FORMAT, MUT_VERSION, MUT_NOCONFIG };

/* A model file written by hand, with one mutation. */
static int write_variant(titans_model *m, const char *path, int mut, const char *config_json) {
  titans_st_writer w;
  char json[1024];
  titans_st_writer_init(&w);
  titans_config_to_json(&m->cfg, json, sizeof json);
  titans_st_writer_add_meta(&w, "format", mut == MUT_FORMAT ? "pytorch" : "titans.h");
  titans_st_writer_add_meta(&w, "version", mut == MUT_VERSION ? "1.0.0" : TITANS_VERSION);
  titans_st_writer_add_meta(&w, "kind", "model");
  if (mut != MUT_NOCONFIG) titans_st_writer_add_meta(&w, "config", mut == MUT_CONFIG ? config_json : json);
  float *nanbuf = NULL;
  for (size_t i = 0; i < m->n_params; i++) {
    titans_param *p = &m->plist[i];
    size_t shape[4];
    for (int j = 0; j < p->ndim; j++) shape[j] = p->shape[j];
    const float *data = m->params + p->offset;
    if (i == 3 && mut == MUT_MISSING) continue;
    if (i == 3 && mut == MUT_SHAPE && p->ndim == 2) {
      size_t t = shape[0];
      shape[0] = shape[1];
      shape[1] = t;
      if (shape[0] == shape[1]) shape[0] = 1, shape[1] = p->size; /* a square matrix: flatten it */
    }
    if (i == 3 && mut == MUT_NAN) {
      nanbuf = (float *)malloc(p->size * sizeof(float));
      memcpy(nanbuf, data, p->size * sizeof(float));
      nanbuf[p->size / 2] = NAN;
      data = nanbuf;
    }
    titans_st_writer_add_f32(&w, p->name, data, (size_t)p->ndim, shape);
  }
  float extra[3] = {1, 2, 3};
  size_t es = 3;
  if (mut == MUT_EXTRA) titans_st_writer_add_f32(&w, "layers.0.attn.bias", extra, 1, &es);
  int rc = titans_st_writer_save(&w, path);
  titans_st_writer_free(&w);
  free(nanbuf);
  return rc;
}

static void test_bad_files(void) {
  printf("crafted bad files are refused with a message, never a crash\n");
  titans_model m;
  const char *good = tmp_path("good.safetensors"), *bad = tmp_path("bad.safetensors");
  make_model(&m, TITANS_BLOCK_MAC, 77);
  titans_model_save(&m, good);
  size_t n = 0;
  unsigned char *bytes = read_all(good, &n);
  if (!bytes || n < 8) {
    th_check(0, "cannot read back %s", good);
    titans_model_free(&m);
    return;
  }
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = (hl << 8) | bytes[i];

  /* the hand-written variant without a mutation loads: the mutations below are the only difference */
  titans_model ok;
  write_variant(&m, bad, MUT_NONE, NULL);
  int rc = titans_model_load(&ok, bad);
  th_check(rc == TITANS_OK && memcmp(ok.params, m.params, m.n_floats * sizeof(float)) == 0,
           "hand-written reference file loads");
  if (rc == TITANS_OK) titans_model_free(&ok);

  /* truncated at many lengths */
  size_t cuts[] = {0, 4, 8, 9, 8 + (size_t)hl / 2, 8 + (size_t)hl, 8 + (size_t)hl + 3, n / 2, n - 4, n - 1};
  int all = 1;
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    titans_model t;
    write_all(bad, bytes, cuts[i]);
    memset(&t, 0, sizeof t);
    rc = titans_model_load(&t, bad);
    all &= rc != TITANS_OK && t.params == NULL && t.error[0];
    if (rc == TITANS_OK) titans_model_free(&t);
  }
  th_check(all, "truncated at %zu lengths (0 .. %zu bytes): all refused", sizeof cuts / sizeof cuts[0], n - 1);

  /* wrong dtype: "F32" -> "I32" in the first tensor's entry (same byte count, so only the dtype is wrong) */
  unsigned char *mut = (unsigned char *)malloc(n);
  memcpy(mut, bytes, n);
  char *hdr = (char *)mut + 8;
  char *f32 = NULL;
  for (size_t i = 0; i + 3 <= (size_t)hl; i++)
    if (memcmp(hdr + i, "\"F32\"", 5) == 0) {
      f32 = hdr + i;
      break;
    }
  if (f32) memcpy(f32, "\"I32\"", 5);
  write_all(bad, mut, n);
  expect_bad_model("wrong dtype (I32)", bad);

  write_variant(&m, bad, MUT_SHAPE, NULL);
  expect_bad_model("wrong shape", bad);
  write_variant(&m, bad, MUT_MISSING, NULL);
  expect_bad_model("missing tensor", bad);
  write_variant(&m, bad, MUT_EXTRA, NULL);
  expect_bad_model("extra tensor", bad);
  write_variant(&m, bad, MUT_NAN, NULL);
  expect_bad_model("a NaN parameter", bad);
  write_variant(&m, bad, MUT_FORMAT, NULL);
  expect_bad_model("format \"pytorch\"", bad);
  write_variant(&m, bad, MUT_VERSION, NULL);
  expect_bad_model("version 1.0.0", bad);
  write_variant(&m, bad, MUT_NOCONFIG, NULL);
  expect_bad_model("no config", bad);
  write_variant(&m, bad, MUT_CONFIG, "{\"block\":\"mac\"");
  expect_bad_model("bad config JSON", bad);

  /* another valid configuration (d = 32): the tensors do not match it */
  char json[1024];
  titans_config c = m.cfg;
  c.d = c.mem.d = 32;
  c.mem.head_dim = 16;
  titans_config_to_json(&c, json, sizeof json);
  write_variant(&m, bad, MUT_CONFIG, json);
  expect_bad_model("a valid config of other sizes", bad);

  /* hostile sizes that pass titans_config_check: refused before anything is allocated */
  c = m.cfg;
  c.vocab = 1 << 24;
  c.d = c.mem.d = 65536;
  c.ffn_hidden = 1 << 20;
  c.n_layers = 1024;
  c.attn_heads = 1;
  c.mem.head_dim = 16384;
  c.mem.heads = 4;
  titans_config_to_json(&c, json, sizeof json);
  write_variant(&m, bad, MUT_CONFIG, json);
  expect_bad_model("huge dimensions (vocab 2^24, d 65536, 1024 layers)", bad);
  c = m.cfg;
  c.n_persist = 4096;
  c.n_layers = 1024;
  titans_config_to_json(&c, json, sizeof json);
  write_variant(&m, bad, MUT_CONFIG, json);
  expect_bad_model("4096 persistent tokens x 1024 layers", bad);

  /* random damage to the header: every outcome is an error or a valid model, never a crash */
  titans_rng r;
  titans_rng_seed(&r, 31337);
  int loaded = 0, refused = 0, finite = 1;
  for (int trial = 0; trial < 300; trial++) {
    memcpy(mut, bytes, n);
    int flips = 1 + (int)(titans_rng_u64(&r) % 3);
    for (int f = 0; f < flips; f++) {
      size_t at = 8 + (size_t)(titans_rng_u64(&r) % hl);
      mut[at] = (unsigned char)(titans_rng_u64(&r) % 128);
    }
    titans_model t;
    titans_st_reader rd;
    rc = titans_st_reader_parse(&rd, mut, n);
    if (rc == TITANS_OK) rc = titans_model_read(&t, NULL, &rd);
    else memset(&t, 0, sizeof t);
    titans_st_reader_free(&rd);
    if (rc == TITANS_OK) {
      loaded++;
      finite &= th_all_finite(t.params, t.n_floats);
      titans_model_free(&t);
    } else {
      refused++;
      finite &= t.params == NULL;
    }
  }
  th_check(finite, "300 randomly damaged headers: %d refused, %d still valid models (damage in padding or digits)",
           refused, loaded);

  /* a trainer file with a negative second moment or a bad step */
  titans_trainer t;
  titans_trainer_init(&t, &m, NULL);
  t.adam_v[5] = -1.0f;
  titans_trainer_save(&t, NULL, NULL, bad);
  titans_trainer t2;
  titans_model m2;
  rc = titans_trainer_load(&t2, &m2, NULL, NULL, bad);
  th_check(rc == TITANS_ERR_FORMAT && !m2.params && !t2.adam_m, "a negative AdamW second moment: refused: %s",
           t2.error);
  t.adam_v[5] = 0.0f;
  titans_trainer_free(&t);

  /* a train config out of range: titans_trainer_init refuses it, names the field and allocates nothing */
  {
    struct {
      const char *field;
      titans_train_config tc;
    } bad_tc[12];
    const titans_train_config d = titans_train_config_default();
    for (int i = 0; i < 12; i++) bad_tc[i].tc = d;
    bad_tc[0].field = "lr", bad_tc[0].tc.lr = NAN;
    bad_tc[1].field = "min_lr", bad_tc[1].tc.min_lr = -1e-5f;
    bad_tc[2].field = "weight_decay", bad_tc[2].tc.weight_decay = INFINITY;
    bad_tc[3].field = "clip", bad_tc[3].tc.clip = -1.0f;
    bad_tc[4].field = "write_cost", bad_tc[4].tc.write_cost = -0.3f;
    bad_tc[5].field = "write_cost_log", bad_tc[5].tc.write_cost_log = NAN;
    bad_tc[6].field = "beta1", bad_tc[6].tc.beta1 = 1.0f;
    bad_tc[7].field = "beta2", bad_tc[7].tc.beta2 = -0.1f;
    bad_tc[8].field = "eps", bad_tc[8].tc.eps = 0.0f;
    bad_tc[9].field = "warmup_steps", bad_tc[9].tc.warmup_steps = -1;
    bad_tc[10].field = "total_steps", bad_tc[10].tc.total_steps = -5;
    bad_tc[11].field = "write_cost_from", bad_tc[11].tc.write_cost_from = -1;
    int all_refused = 1;
    for (int i = 0; i < 12; i++) {
      titans_trainer tb;
      int rc_init = titans_trainer_init(&tb, &m, &bad_tc[i].tc);
      if (rc_init != TITANS_ERR_ARG || !strstr(tb.error, bad_tc[i].field) || tb.grads || tb.fwd) {
        all_refused = 0;
        printf("  %s: rc %d, \"%s\"\n", bad_tc[i].field, rc_init, tb.error);
      }
      if (rc_init == TITANS_OK) titans_trainer_free(&tb);
    }
    titans_trainer good;
    int good_ok = titans_trainer_init(&good, &m, &d) == TITANS_OK;
    if (good_ok) titans_trainer_free(&good);
    th_check(all_refused && good_ok,
             "titans_trainer_init: 12 train configs out of range (NaN lr, negative costs, beta1 = 1, eps = 0, negative "
             "steps, ...) refused naming the field, nothing allocated; the defaults accepted");
  }

  free(mut);
  free(bytes);
  titans_model_free(&m);
}

int main(void) {
  const char *base = getenv("TMPDIR");
  snprintf(tmp_prefix, sizeof tmp_prefix, "%s/titans_test_checkpoint_%ld_", base && *base ? base : "/tmp",
           (long)time(NULL) % 1000000);
  test_json();
  test_tokenizer();
  test_model_roundtrip();
  test_trainer_resume();
  test_session_resume();
  test_bad_files();
  for (size_t i = 0; i < sizeof tmp_names / sizeof tmp_names[0]; i++) remove(tmp_path(tmp_names[i]));
  return th_summary("test_checkpoint");
}
