/* ---- 8. Checkpoints and tokenizer (implementation) -------------------------------------------- */
#include <stdlib.h> /* qsort */

#define TITANS__CK_FORMAT "titans.h"

/* ---- tokenizer -------------------------------------------------------------------------------- */

TITANSDEF const char *titans_tokenizer_name(int kind) { return kind == TITANS_TOKENIZER_BYTE ? "byte" : NULL; }

TITANSDEF int titans_tokenizer_from_name(const char *name) {
  return (name && strcmp(name, "byte") == 0) ? TITANS_TOKENIZER_BYTE : -1;
}

TITANSDEF int titans_tokenizer_init(titans_tokenizer *tok, int kind) {
  memset(tok, 0, sizeof *tok);
  if (kind != TITANS_TOKENIZER_BYTE) return titans__error(tok->error, TITANS_ERR_ARG, "tokenizer: unknown kind %d", kind);
  tok->kind = kind;
  tok->vocab = 256;
  return TITANS_OK;
}

TITANSDEF void titans_tokenizer_free(titans_tokenizer *tok) {
  titans_free(tok->data);
  memset(tok, 0, sizeof *tok);
}

TITANSDEF int titans_tokenizer_encode(titans_tokenizer *tok, int *ids, size_t max_ids, size_t *n_ids, const char *text,
                                      size_t n_bytes) {
  if (!n_ids || (!text && n_bytes)) return titans__error(tok->error, TITANS_ERR_ARG, "tokenizer encode: NULL argument");
  *n_ids = n_bytes; /* bytes: one id per byte */
  if (!ids) return TITANS_OK;
  if (n_bytes > max_ids)
    return titans__error(tok->error, TITANS_ERR_ARG, "tokenizer encode: %zu ids do not fit in %zu", n_bytes, max_ids);
  for (size_t i = 0; i < n_bytes; i++) ids[i] = (int)(unsigned char)text[i];
  return TITANS_OK;
}

TITANSDEF int titans_tokenizer_decode(titans_tokenizer *tok, char *out, size_t max_bytes, size_t *n_bytes, const int *ids,
                                      size_t n_ids) {
  if (!n_bytes || (!ids && n_ids)) return titans__error(tok->error, TITANS_ERR_ARG, "tokenizer decode: NULL argument");
  *n_bytes = n_ids;
  for (size_t i = 0; i < n_ids; i++)
    if (ids[i] < 0 || ids[i] >= tok->vocab)
      return titans__error(tok->error, TITANS_ERR_ARG, "tokenizer decode: id %d at %zu is outside 0..%d", ids[i], i,
                           tok->vocab - 1);
  if (!out) return TITANS_OK;
  if (n_ids > max_bytes)
    return titans__error(tok->error, TITANS_ERR_ARG, "tokenizer decode: %zu bytes do not fit in %zu", n_ids, max_bytes);
  for (size_t i = 0; i < n_ids; i++) out[i] = (char)(unsigned char)ids[i];
  return TITANS_OK;
}

TITANSDEF int titans_tokenizer_write(const titans_tokenizer *tok, titans_st_writer *w) {
  const char *name = titans_tokenizer_name(tok->kind);
  if (!name) return titans__error(w->error, TITANS_ERR_ARG, "tokenizer: unknown kind %d", tok->kind);
  return titans_st_writer_add_meta(w, "tokenizer", name);
}

TITANSDEF int titans_tokenizer_read(titans_tokenizer *tok, const titans_st_reader *r, int vocab) {
  const char *name = titans_st_meta(r, "tokenizer");
  int kind = TITANS_TOKENIZER_BYTE;
  memset(tok, 0, sizeof *tok);
  if (name) {
    kind = titans_tokenizer_from_name(name);
    if (kind < 0) return titans__error(tok->error, TITANS_ERR_FORMAT, "tokenizer '%.64s' is not known to this version", name);
  } else if (vocab != 256) {
    return titans__error(tok->error, TITANS_ERR_FORMAT, "the file names no tokenizer and its vocabulary (%d) is not bytes",
                         vocab);
  }
  int rc = titans_tokenizer_init(tok, kind);
  if (rc) return rc;
  if (tok->vocab != vocab) {
    titans_tokenizer_free(tok);
    return titans__error(tok->error, TITANS_ERR_FORMAT, "tokenizer '%s' has %d ids but the model's vocabulary is %d",
                         titans_tokenizer_name(kind), 256, vocab);
  }
  return TITANS_OK;
}

/* ---- numbers as text (locale-independent, no stdio) -------------------------------------------- */

/* Parse one JSON number at s: *end after it, *value the number (decimal digits rounded once to
   double: exact whenever there are at most 15 significant digits and |exponent| <= 22), *integral 1
   when it has neither fraction nor exponent. Returns 0 when s does not start with a JSON number. */
static int titans__ck_parse_number(const char *s, const char **end, double *value, int *integral) {
  static const double p10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  const char *p = s;
  int neg = 0, ndig = 0;
  uint64_t mant = 0;
  long exp10 = 0;
  *integral = 1;
  if (*p == '-') neg = 1, p++;
  if (*p == '0') {
    p++;
  } else if (*p >= '1' && *p <= '9') {
    for (; *p >= '0' && *p <= '9'; p++) {
      if (ndig < 19) mant = mant * 10 + (uint64_t)(*p - '0'), ndig++;
      else if (exp10 < 100000) exp10++; /* digits beyond 19 only scale */
    }
  } else {
    return 0;
  }
  if (*p == '.') {
    *integral = 0;
    p++;
    if (!(*p >= '0' && *p <= '9')) return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
      if (mant == 0 && *p == '0') exp10--; /* leading zeros of the fraction */
      else if (ndig < 19) mant = mant * 10 + (uint64_t)(*p - '0'), ndig++, exp10--;
    }
  }
  if (*p == 'e' || *p == 'E') {
    int eneg = 0;
    long e = 0;
    *integral = 0;
    p++;
    if (*p == '+' || *p == '-') eneg = (*p == '-'), p++;
    if (!(*p >= '0' && *p <= '9')) return 0;
    for (; *p >= '0' && *p <= '9'; p++)
      if (e < 100000) e = e * 10 + (*p - '0');
    exp10 += eneg ? -e : e;
  }
  double v;
  if (mant == 0) v = 0.0;
  else if (mant < ((uint64_t)1 << 53) && exp10 >= -22 && exp10 <= 22)
    v = exp10 >= 0 ? (double)mant * p10[exp10] : (double)mant / p10[-exp10];
  else if (exp10 > 400) v = HUGE_VAL;
  else if (exp10 < -400) v = 0.0;
  else v = (double)mant * pow(10.0, (double)exp10);
  *value = neg ? -v : v;
  *end = p;
  return 1;
}

/* Decimal text of v (at most 21 characters + NUL). */
static void titans__ck_fmt_int(char *out, long long v) {
  char tmp[24];
  int n = 0;
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do {
    tmp[n++] = (char)('0' + (int)(u % 10));
    u /= 10;
  } while (u);
  if (v < 0) *out++ = '-';
  while (n) *out++ = tmp[--n];
  *out = 0;
}

/* x (finite) as the shortest decimal that parses back to the same float: "0.02", "1e-08", "400". out
   holds at least 40 bytes. */
static void titans__ck_fmt_float(char *out, float x) {
  if (x == 0.0f) {
    strcpy(out, signbit(x) ? "-0" : "0");
    return;
  }
  double v = fabs((double)x);
  int e = (int)floor(log10(v));
  for (int p = 1; p <= 17; p++) {
    /* p significant digits: m * 10^k with 10^(p-1) <= m < 10^p */
    int k = e - p + 1;
    double m = floor(v / pow(10.0, (double)k) + 0.5);
    if (m >= pow(10.0, (double)p)) m = floor(m / 10.0 + 0.5), k++;
    unsigned long long mi = (unsigned long long)m;
    while (mi > 0 && mi % 10 == 0) mi /= 10, k++;
    char digits[24], *o = out;
    titans__ck_fmt_int(digits, (long long)mi);
    int nd = (int)strlen(digits), top = nd - 1 + k; /* decimal exponent of the first digit */
    if (x < 0) *o++ = '-';
    if (top >= -5 && top <= 20) {
      if (k >= 0) {
        memcpy(o, digits, (size_t)nd), o += nd;
        for (int i = 0; i < k; i++) *o++ = '0';
      } else if (nd + k > 0) {
        memcpy(o, digits, (size_t)(nd + k)), o += nd + k;
        *o++ = '.';
        memcpy(o, digits + nd + k, (size_t)(-k)), o += -k;
      } else {
        *o++ = '0', *o++ = '.';
        for (int i = 0; i < -(nd + k); i++) *o++ = '0';
        memcpy(o, digits, (size_t)nd), o += nd;
      }
    } else {
      *o++ = digits[0];
      if (nd > 1) *o++ = '.', memcpy(o, digits + 1, (size_t)(nd - 1)), o += nd - 1;
      *o++ = 'e';
      titans__ck_fmt_int(o, top);
      o += strlen(o);
    }
    *o = 0;
    const char *end;
    double back;
    int integral;
    if (titans__ck_parse_number(out, &end, &back, &integral) && (float)back == x) return;
  }
}

/* ---- configurations as JSON -------------------------------------------------------------------- */

enum { TITANS__CK_INT, TITANS__CK_LONG, TITANS__CK_FLOAT, TITANS__CK_BLOCK, TITANS__CK_OBJECT };

typedef struct titans__ck_field {
  const char *key;
  int type;  /* TITANS__CK_* */
  void *ptr; /* int *, long *, float *, int * (block kind), titans__ck_fields * */
} titans__ck_field;

typedef struct titans__ck_fields {
  titans__ck_field f[16];
  int n;
} titans__ck_fields;

static void titans__ck_add(titans__ck_fields *fs, const char *key, int type, void *ptr) {
  TITANS_ASSERT(fs->n < 16);
  fs->f[fs->n].key = key;
  fs->f[fs->n].type = type;
  fs->f[fs->n].ptr = ptr;
  fs->n++;
}

/* The one list of a titans_config's fields, in the order they are written. */
static void titans__ck_config_fields(titans_config *c, titans__ck_fields *top, titans__ck_fields *mem) {
  top->n = mem->n = 0;
  titans__ck_add(top, "block", TITANS__CK_BLOCK, &c->block);
  titans__ck_add(top, "vocab", TITANS__CK_INT, &c->vocab);
  titans__ck_add(top, "d", TITANS__CK_INT, &c->d);
  titans__ck_add(top, "n_layers", TITANS__CK_INT, &c->n_layers);
  titans__ck_add(top, "attn_heads", TITANS__CK_INT, &c->attn_heads);
  titans__ck_add(top, "ffn_hidden", TITANS__CK_INT, &c->ffn_hidden);
  titans__ck_add(top, "window", TITANS__CK_INT, &c->window);
  titans__ck_add(top, "segment", TITANS__CK_INT, &c->segment);
  titans__ck_add(top, "n_persist", TITANS__CK_INT, &c->n_persist);
  titans__ck_add(top, "tied", TITANS__CK_INT, &c->tied);
  titans__ck_add(top, "max_context", TITANS__CK_INT, &c->max_context);
  titans__ck_add(top, "mem", TITANS__CK_OBJECT, mem);
  titans__ck_add(mem, "d", TITANS__CK_INT, &c->mem.d);
  titans__ck_add(mem, "heads", TITANS__CK_INT, &c->mem.heads);
  titans__ck_add(mem, "head_dim", TITANS__CK_INT, &c->mem.head_dim);
  titans__ck_add(mem, "depth", TITANS__CK_INT, &c->mem.depth);
  titans__ck_add(mem, "hidden_mult", TITANS__CK_INT, &c->mem.hidden_mult);
  titans__ck_add(mem, "chunk", TITANS__CK_INT, &c->mem.chunk);
  titans__ck_add(mem, "conv_width", TITANS__CK_INT, &c->mem.conv_width);
  titans__ck_add(mem, "residual", TITANS__CK_INT, &c->mem.residual);
  titans__ck_add(mem, "theta_max", TITANS__CK_FLOAT, &c->mem.theta_max);
}

static void titans__ck_train_fields(titans_train_config *tc, titans__ck_fields *fs) {
  fs->n = 0;
  titans__ck_add(fs, "lr", TITANS__CK_FLOAT, &tc->lr);
  titans__ck_add(fs, "min_lr", TITANS__CK_FLOAT, &tc->min_lr);
  titans__ck_add(fs, "warmup_steps", TITANS__CK_LONG, &tc->warmup_steps);
  titans__ck_add(fs, "total_steps", TITANS__CK_LONG, &tc->total_steps);
  titans__ck_add(fs, "weight_decay", TITANS__CK_FLOAT, &tc->weight_decay);
  titans__ck_add(fs, "beta1", TITANS__CK_FLOAT, &tc->beta1);
  titans__ck_add(fs, "beta2", TITANS__CK_FLOAT, &tc->beta2);
  titans__ck_add(fs, "eps", TITANS__CK_FLOAT, &tc->eps);
  titans__ck_add(fs, "clip", TITANS__CK_FLOAT, &tc->clip);
}

/* A bounded string builder: ok stays 0 once something did not fit. */
typedef struct titans__ck_buf {
  char *s;
  size_t size, len;
  int ok;
} titans__ck_buf;

static void titans__ck_put(titans__ck_buf *b, const char *text) {
  size_t n = strlen(text);
  if (!b->ok || b->len + n + 1 > b->size) {
    b->ok = 0;
    return;
  }
  memcpy(b->s + b->len, text, n + 1);
  b->len += n;
}

/* Values of the fields are plain: no string needs escaping (keys and block names are identifiers). */
static void titans__ck_put_object(titans__ck_buf *b, const titans__ck_fields *fs) {
  char num[48];
  titans__ck_put(b, "{");
  for (int i = 0; i < fs->n; i++) {
    const titans__ck_field *f = &fs->f[i];
    if (i) titans__ck_put(b, ",");
    titans__ck_put(b, "\"");
    titans__ck_put(b, f->key);
    titans__ck_put(b, "\":");
    switch (f->type) {
      case TITANS__CK_INT: titans__ck_fmt_int(num, *(const int *)f->ptr), titans__ck_put(b, num); break;
      case TITANS__CK_LONG: titans__ck_fmt_int(num, *(const long *)f->ptr), titans__ck_put(b, num); break;
      case TITANS__CK_FLOAT: {
        float x = *(const float *)f->ptr;
        if (!isfinite(x)) b->ok = 0; /* JSON has no NaN or Inf */
        else titans__ck_fmt_float(num, x), titans__ck_put(b, num);
        break;
      }
      case TITANS__CK_BLOCK: {
        const char *name = titans_block_name(*(const int *)f->ptr);
        if (!name) b->ok = 0;
        else titans__ck_put(b, "\""), titans__ck_put(b, name), titans__ck_put(b, "\"");
        break;
      }
      default: titans__ck_put_object(b, (const titans__ck_fields *)f->ptr); break;
    }
  }
  titans__ck_put(b, "}");
}

TITANSDEF int titans_config_to_json(const titans_config *cfg, char *out, size_t size) {
  titans_config c = *cfg;
  titans__ck_fields top, mem;
  titans__ck_buf b;
  titans__ck_config_fields(&c, &top, &mem);
  b.s = out, b.size = size, b.len = 0, b.ok = out && size > 0;
  titans__ck_put_object(&b, &top);
  if (out && size) out[b.ok ? b.len : 0] = 0;
  return b.ok ? TITANS_OK : TITANS_ERR_ARG;
}

TITANSDEF int titans_train_config_to_json(const titans_train_config *tc, char *out, size_t size) {
  titans_train_config c = *tc;
  titans__ck_fields fs;
  titans__ck_buf b;
  titans__ck_train_fields(&c, &fs);
  b.s = out, b.size = size, b.len = 0, b.ok = out && size > 0;
  titans__ck_put_object(&b, &fs);
  if (out && size) out[b.ok ? b.len : 0] = 0;
  return b.ok ? TITANS_OK : TITANS_ERR_ARG;
}

/* A strict reader of the flat JSON objects above. */
typedef struct titans__ck_json {
  const char *p;   /* current character */
  const char *s;   /* start, for offsets in messages */
  char *err;       /* TITANS_ERR_MSG_SIZE bytes or NULL */
} titans__ck_json;

static void titans__ck_ws(titans__ck_json *j) {
  while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r') j->p++;
}

static int titans__ck_fail(titans__ck_json *j, const char *what) {
  return titans__error(j->err, TITANS_ERR_FORMAT, "config JSON: %s at offset %ld", what, (long)(j->p - j->s));
}

/* A string without escapes of at most cap - 1 bytes into out. */
static int titans__ck_string(titans__ck_json *j, char *out, size_t cap) {
  size_t n = 0;
  if (*j->p != '"') return titans__ck_fail(j, "expected a string");
  j->p++;
  for (; *j->p != '"'; j->p++) {
    unsigned char c = (unsigned char)*j->p;
    if (c == 0) return titans__ck_fail(j, "unterminated string");
    if (c == '\\' || c < 0x20) return titans__ck_fail(j, "escape or control character in a string");
    if (n + 1 >= cap) return titans__ck_fail(j, "string too long");
    out[n++] = (char)c;
  }
  out[n] = 0;
  j->p++;
  return TITANS_OK;
}

static int titans__ck_value(titans__ck_json *j, const titans__ck_field *f);

/* An object whose keys are exactly the fields of fs, each once. */
static int titans__ck_object(titans__ck_json *j, const titans__ck_fields *fs, int depth) {
  int seen[16] = {0}, rc;
  char key[64];
  if (depth > 4) return titans__ck_fail(j, "nesting too deep");
  titans__ck_ws(j);
  if (*j->p != '{') return titans__ck_fail(j, "expected an object");
  j->p++;
  titans__ck_ws(j);
  if (*j->p == '}') j->p++;
  else
    for (;;) {
      titans__ck_ws(j);
      if ((rc = titans__ck_string(j, key, sizeof key)) != 0) return rc;
      int i = 0;
      while (i < fs->n && strcmp(fs->f[i].key, key) != 0) i++;
      if (i == fs->n)
        return titans__error(j->err, TITANS_ERR_FORMAT, "config JSON: unknown key \"%s\" at offset %ld", key,
                             (long)(j->p - j->s));
      if (seen[i]) return titans__error(j->err, TITANS_ERR_FORMAT, "config JSON: key \"%s\" given twice", key);
      seen[i] = 1;
      titans__ck_ws(j);
      if (*j->p != ':') return titans__ck_fail(j, "expected ':'");
      j->p++;
      titans__ck_ws(j);
      if (fs->f[i].type == TITANS__CK_OBJECT) rc = titans__ck_object(j, (const titans__ck_fields *)fs->f[i].ptr, depth + 1);
      else rc = titans__ck_value(j, &fs->f[i]);
      if (rc) return rc;
      titans__ck_ws(j);
      if (*j->p == ',') {
        j->p++;
        continue;
      }
      if (*j->p == '}') {
        j->p++;
        break;
      }
      return titans__ck_fail(j, "expected ',' or '}'");
    }
  for (int i = 0; i < fs->n; i++)
    if (!seen[i]) return titans__error(j->err, TITANS_ERR_FORMAT, "config JSON: key \"%s\" is missing", fs->f[i].key);
  return TITANS_OK;
}

static int titans__ck_value(titans__ck_json *j, const titans__ck_field *f) {
  if (f->type == TITANS__CK_BLOCK) {
    char name[32];
    int rc = titans__ck_string(j, name, sizeof name);
    if (rc) return rc;
    int kind = titans_block_from_name(name);
    if (kind < 0) return titans__error(j->err, TITANS_ERR_FORMAT, "config JSON: unknown block kind \"%s\"", name);
    *(int *)f->ptr = kind;
    return TITANS_OK;
  }
  const char *end;
  double v;
  int integral;
  if (!titans__ck_parse_number(j->p, &end, &v, &integral))
    return titans__error(j->err, TITANS_ERR_FORMAT, "config JSON: \"%s\" is not a number", f->key);
  j->p = end;
  if (f->type == TITANS__CK_FLOAT) {
    if (!isfinite((float)v)) return titans__error(j->err, TITANS_ERR_FORMAT, "config JSON: \"%s\" is out of float range", f->key);
    *(float *)f->ptr = (float)v;
    return TITANS_OK;
  }
  /* ints and longs: integer syntax, exactly representable (|v| < 2^53 here), within the C type */
  double lo = f->type == TITANS__CK_INT ? (double)INT_MIN : (double)LONG_MIN;
  double hi = f->type == TITANS__CK_INT ? (double)INT_MAX : (double)LONG_MAX;
  if (!integral || !(v >= lo && v <= hi) || fabs(v) > 9007199254740992.0)
    return titans__error(j->err, TITANS_ERR_FORMAT, "config JSON: \"%s\" must be an integer in range", f->key);
  if (f->type == TITANS__CK_INT) *(int *)f->ptr = (int)v;
  else *(long *)f->ptr = (long)v;
  return TITANS_OK;
}

static int titans__ck_parse_fields(const char *json, const titans__ck_fields *fs, char *err) {
  titans__ck_json j;
  if (!json) return titans__error(err, TITANS_ERR_FORMAT, "config JSON: missing");
  j.p = j.s = json;
  j.err = err;
  int rc = titans__ck_object(&j, fs, 0);
  if (rc) return rc;
  titans__ck_ws(&j);
  if (*j.p) return titans__ck_fail(&j, "text after the object");
  return TITANS_OK;
}

TITANSDEF int titans_config_from_json(titans_config *cfg, const char *json, char *err) {
  titans_config c;
  titans__ck_fields top, mem;
  memset(&c, 0, sizeof c);
  titans__ck_config_fields(&c, &top, &mem);
  int rc = titans__ck_parse_fields(json, &top, err);
  if (rc) return rc;
  if ((rc = titans_config_check(&c, err)) != 0) return rc;
  *cfg = c;
  return TITANS_OK;
}

TITANSDEF int titans_train_config_from_json(titans_train_config *tc, const char *json, char *err) {
  titans_train_config c;
  titans__ck_fields fs;
  memset(&c, 0, sizeof c);
  titans__ck_train_fields(&c, &fs);
  int rc = titans__ck_parse_fields(json, &fs, err);
  if (rc) return rc;
  if (!(c.lr >= 0.0f) || !(c.min_lr >= 0.0f) || c.warmup_steps < 0 || c.total_steps < 0 || !(c.weight_decay >= 0.0f) ||
      !(c.beta1 >= 0.0f && c.beta1 < 1.0f) || !(c.beta2 >= 0.0f && c.beta2 < 1.0f) || !(c.eps > 0.0f) || !(c.clip >= 0.0f))
    return titans__error(err, TITANS_ERR_FORMAT, "train config JSON: a value is out of range");
  *tc = c;
  return TITANS_OK;
}

/* ---- shared file checks ------------------------------------------------------------------------ */

/* format, version and kind of a parsed file; want_kind NULL accepts "model" and "trainer". A file
   without "format" and "kind" (e.g. written by another program with these names) counts as a model. */
static int titans__ck_check_header(const titans_st_reader *r, const char *want_kind, char *err) {
  const char *format = titans_st_meta(r, "format"), *version = titans_st_meta(r, "version");
  const char *kind = titans_st_meta(r, "kind");
  if (format && strcmp(format, TITANS__CK_FORMAT) != 0)
    return titans__error(err, TITANS_ERR_FORMAT, "metadata format is \"%.64s\", not \"" TITANS__CK_FORMAT "\"", format);
  if (version) {
    const char *end;
    double major;
    int integral;
    size_t n = strcspn(version, ".");
    char head[16];
    if (n == 0 || n >= sizeof head) return titans__error(err, TITANS_ERR_FORMAT, "metadata version \"%.32s\" is malformed", version);
    memcpy(head, version, n);
    head[n] = 0;
    if (!titans__ck_parse_number(head, &end, &major, &integral) || *end || !integral)
      return titans__error(err, TITANS_ERR_FORMAT, "metadata version \"%.32s\" is malformed", version);
    if (major != (double)TITANS_VERSION_MAJOR)
      return titans__error(err, TITANS_ERR_FORMAT, "the file was written by version %.32s; this is " TITANS_VERSION,
                           version);
  }
  if (!kind) kind = "model";
  if (want_kind ? strcmp(kind, want_kind) != 0 : (strcmp(kind, "model") != 0 && strcmp(kind, "trainer") != 0))
    return titans__error(err, TITANS_ERR_FORMAT, "the file holds a %.32s, not a %s", kind, want_kind ? want_kind : "model");
  return TITANS_OK;
}

static int titans__ck_is_memory_kind(int block) {
  return block == TITANS_BLOCK_MAC || block == TITANS_BLOCK_MAG || block == TITANS_BLOCK_MAL || block == TITANS_BLOCK_LMM;
}

/* The floats of cfg's parameters (SPEC 1.2, 2, 3, 5), computed with overflow checks before anything
   is allocated; 0 on overflow. Only used to refuse a configuration the file cannot hold, so a
   hostile header cannot make the loader allocate more than the file's size implies. */
static size_t titans__ck_param_floats(const titans_config *c) {
  size_t d = (size_t)c->d, V = (size_t)c->vocab, ff = (size_t)c->ffn_hidden, layer = 0, t, total;
  int attn = c->block != TITANS_BLOCK_LMM, gated = c->block == TITANS_BLOCK_MAC || c->block == TITANS_BLOCK_MAG;
  /* norms 2d, FFN 3 d d_ff */
  if (!titans_size_mul(d, ff, &t) || !titans_size_mul(t, 3, &t) || !titans_size_add(t, 2 * d, &layer)) return 0;
  if (attn) {
    if (!titans_size_mul(d, d, &t) || !titans_size_mul(t, 4, &t) || !titans_size_add(layer, t, &layer)) return 0;
    if (!titans_size_mul((size_t)c->n_persist, d, &t) || !titans_size_add(layer, t, &layer)) return 0;
  }
  if (gated && !titans_size_add(layer, 2 * d, &layer)) return 0;
  if (titans__ck_is_memory_kind(c->block) && !titans_size_add(layer, titans_mem_param_count(&c->mem), &layer)) return 0;
  if (!titans_size_mul(layer, (size_t)c->n_layers, &total)) return 0;
  if (!titans_size_mul(V, d, &t) || !titans_size_add(total, t, &total) || !titans_size_add(total, d, &total)) return 0;
  if (!c->tied && !titans_size_add(total, t, &total)) return 0;
  return total;
}

/* Floats the file's tensors hold (any dtype counts its bytes / 4): an upper bound of what it can fill. */
static size_t titans__ck_file_floats(const titans_st_reader *r) {
  size_t total = 0;
  for (size_t i = 0; i < r->n_tensors; i++) total += r->tensors[i].nbytes / 4; /* <= file size / 4 */
  return total;
}

static int titans__ck_finite(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return 0;
  return 1;
}

static int titans__ck_cmp_param(const void *a, const void *b) {
  return strcmp((*(const titans_param *const *)a)->name, (*(const titans_param *const *)b)->name);
}

/* 1 when name is one of the parameters (idx sorted by name, n entries). */
static int titans__ck_has_param(const titans_param *const *idx, size_t n, const char *name) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(idx[mid]->name, name);
    if (c == 0) return 1;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return 0;
}

/* Every tensor of the file must be a parameter, or (trainer files) "adam.m." / "adam.v." + a
   parameter. Reports the first one that is not. */
static int titans__ck_no_extra(const titans_model *m, const titans_st_reader *r, int trainer, char *err) {
  const titans_param **idx = (const titans_param **)titans_alloc_bytes(m->n_params, sizeof *idx);
  if (!idx) return titans__error(err, TITANS_ERR_NOMEM, "cannot allocate an index of %zu parameters", m->n_params);
  for (size_t i = 0; i < m->n_params; i++) idx[i] = &m->plist[i];
  qsort((void *)idx, m->n_params, sizeof *idx, titans__ck_cmp_param);
  int rc = TITANS_OK;
  for (size_t i = 0; i < r->n_tensors && !rc; i++) {
    const char *name = r->tensors[i].name;
    if (trainer && (strncmp(name, "adam.m.", 7) == 0 || strncmp(name, "adam.v.", 7) == 0)) name += 7;
    if (!titans__ck_has_param(idx, m->n_params, name))
      rc = titans__error(err, TITANS_ERR_FORMAT, "tensor '%.80s' is not a parameter of this configuration",
                         r->tensors[i].name);
  }
  titans_free((void *)idx);
  return rc;
}

/* Read one F32 tensor of exactly p's shape into out, finite (and >= 0 when nonneg). */
static int titans__ck_read_tensor(titans_st_reader *r, const char *name, const titans_param *p, float *out, int nonneg,
                                  char *err) {
  size_t shape[4];
  for (int i = 0; i < p->ndim; i++) shape[i] = p->shape[i];
  if (!titans_st_find(r, name)) return titans__error(err, TITANS_ERR_FORMAT, "tensor '%s' is missing", name);
  if (titans_st_read_f32(r, name, out, (size_t)p->ndim, shape) != TITANS_OK)
    return titans__error(err, TITANS_ERR_FORMAT, "%s", r->error);
  if (!titans__ck_finite(out, p->size)) return titans__error(err, TITANS_ERR_FORMAT, "tensor '%s' holds NaN or Inf", name);
  if (nonneg)
    for (size_t i = 0; i < p->size; i++)
      if (out[i] < 0.0f) return titans__error(err, TITANS_ERR_FORMAT, "tensor '%s' holds a negative value", name);
  return TITANS_OK;
}

/* ---- models ---------------------------------------------------------------------------------- */

static int titans__ck_add_common_meta(titans_st_writer *w, const titans_config *cfg, const char *kind,
                                      const titans_tokenizer *tok) {
  char json[1024];
  int rc = titans_config_to_json(cfg, json, sizeof json);
  if (rc) return titans__error(w->error, rc, "cannot write the configuration as JSON");
  if ((rc = titans_st_writer_add_meta(w, "format", TITANS__CK_FORMAT)) != 0) return rc;
  if ((rc = titans_st_writer_add_meta(w, "version", TITANS_VERSION)) != 0) return rc;
  if ((rc = titans_st_writer_add_meta(w, "kind", kind)) != 0) return rc;
  if ((rc = titans_st_writer_add_meta(w, "config", json)) != 0) return rc;
  if (tok && (rc = titans_tokenizer_write(tok, w)) != 0) return rc;
  return TITANS_OK;
}

static int titans__ck_add_params(titans_st_writer *w, const titans_model *m, const float *slab, const char *prefix) {
  char name[128];
  size_t lp = strlen(prefix);
  for (size_t i = 0; i < m->n_params; i++) {
    const titans_param *p = &m->plist[i];
    size_t shape[4], ln = strlen(p->name);
    for (int k = 0; k < p->ndim; k++) shape[k] = p->shape[k];
    if (lp + ln >= sizeof name) return titans__error(w->error, TITANS_ERR_ARG, "parameter name too long");
    memcpy(name, prefix, lp);
    memcpy(name + lp, p->name, ln + 1);
    int rc = titans_st_writer_add_f32(w, name, slab + p->offset, (size_t)p->ndim, shape);
    if (rc) return rc;
  }
  return TITANS_OK;
}

TITANSDEF int titans_model_write(titans_model *m, const titans_tokenizer *tok, titans_st_writer *w) {
  int rc = titans__ck_add_common_meta(w, &m->cfg, "model", tok);
  if (!rc) rc = titans__ck_add_params(w, m, m->params, "");
  if (rc) return titans__error(m->error, rc, "model save: %s", w->error);
  return TITANS_OK;
}

/* Model part of a model or trainer file (kind checked by the caller). */
static int titans__ck_model_read(titans_model *m, titans_tokenizer *tok, titans_st_reader *r, int trainer) {
  titans_config cfg;
  char err[TITANS_ERR_MSG_SIZE];
  int rc;
  memset(m, 0, sizeof *m);
  if (tok) memset(tok, 0, sizeof *tok);
  const char *json = titans_st_meta(r, "config");
  if (!json) return titans__error(m->error, TITANS_ERR_FORMAT, "the file has no \"config\" metadata");
  if ((rc = titans_config_from_json(&cfg, json, err)) != 0)
    return titans__error(m->error, TITANS_ERR_FORMAT, "bad configuration: %s", err);
  size_t need = titans__ck_param_floats(&cfg), have = titans__ck_file_floats(r);
  if (need == 0 || need > have)
    return titans__error(m->error, TITANS_ERR_FORMAT, "the configuration needs %zu floats of parameters, the file holds %zu (a tensor "
                         "is missing or the configuration does not belong to these tensors)",
                         need, have);
  if (tok && (rc = titans_tokenizer_read(tok, r, cfg.vocab)) != 0)
    return titans__error(m->error, rc, "%s", tok->error);
  if ((rc = titans_model_init(m, &cfg)) != 0) {
    memcpy(err, m->error, sizeof err);
    titans_model_free(m);
    if (tok) titans_tokenizer_free(tok);
    return titans__error(m->error, rc, "%s", err);
  }
  size_t want = trainer ? 3 * m->n_params : m->n_params;
  rc = titans__ck_no_extra(m, r, trainer, err);
  if (!rc && r->n_tensors != want)
    rc = titans__error(err, TITANS_ERR_FORMAT, "the file has %zu tensors, the configuration %zu", r->n_tensors, want);
  for (size_t i = 0; i < m->n_params && !rc; i++)
    rc = titans__ck_read_tensor(r, m->plist[i].name, &m->plist[i], m->params + m->plist[i].offset, 0, err);
  if (rc) {
    titans_model_free(m);
    if (tok) titans_tokenizer_free(tok);
    return titans__error(m->error, rc, "%s", err);
  }
  return TITANS_OK;
}

TITANSDEF int titans_model_read(titans_model *m, titans_tokenizer *tok, titans_st_reader *r) {
  int rc = titans__ck_check_header(r, NULL, m->error);
  if (rc) {
    char err[TITANS_ERR_MSG_SIZE];
    memcpy(err, m->error, sizeof err);
    memset(m, 0, sizeof *m);
    memcpy(m->error, err, sizeof err);
    return rc;
  }
  const char *kind = titans_st_meta(r, "kind");
  return titans__ck_model_read(m, tok, r, kind && strcmp(kind, "trainer") == 0);
}

/* A copy of the file's "user" string into *out (NULL when absent). */
static int titans__ck_user_meta(const titans_st_reader *r, char **out, char *err) {
  if (!out) return TITANS_OK;
  *out = NULL;
  const char *v = titans_st_meta(r, "user");
  if (!v) return TITANS_OK;
  size_t n = strlen(v);
  *out = (char *)titans_alloc_bytes(n + 1, 1);
  if (!*out) return titans__error(err, TITANS_ERR_NOMEM, "cannot allocate %zu bytes of metadata", n + 1);
  memcpy(*out, v, n + 1);
  return TITANS_OK;
}

#ifndef TITANS_NO_STDIO
TITANSDEF int titans_model_save_ex(titans_model *m, const titans_tokenizer *tok, const char *user_meta, const char *path) {
  titans_st_writer w;
  titans_st_writer_init(&w);
  int rc = titans_model_write(m, tok, &w);
  if (!rc && user_meta && (rc = titans_st_writer_add_meta(&w, "user", user_meta)) != 0)
    titans__error(m->error, rc, "model save: %s", w.error);
  if (!rc && (rc = titans_st_writer_save(&w, path)) != 0) titans__error(m->error, rc, "model save: %s", w.error);
  titans_st_writer_free(&w);
  return rc;
}

TITANSDEF int titans_model_save(titans_model *m, const char *path) { return titans_model_save_ex(m, NULL, NULL, path); }

TITANSDEF int titans_model_load_ex(titans_model *m, titans_tokenizer *tok, char **user_meta, const char *path) {
  titans_st_reader r;
  if (user_meta) *user_meta = NULL;
  int rc = titans_st_reader_load(&r, path);
  if (rc) {
    memset(m, 0, sizeof *m);
    if (tok) memset(tok, 0, sizeof *tok);
    titans__error(m->error, rc, "%s", r.error);
    titans_st_reader_free(&r);
    return rc;
  }
  rc = titans_model_read(m, tok, &r);
  if (!rc && (rc = titans__ck_user_meta(&r, user_meta, m->error)) != 0) {
    titans_model_free(m);
    if (tok) titans_tokenizer_free(tok);
    titans__error(m->error, rc, "cannot allocate the file's metadata");
  }
  titans_st_reader_free(&r);
  return rc;
}

TITANSDEF int titans_model_load(titans_model *m, const char *path) { return titans_model_load_ex(m, NULL, NULL, path); }
#endif

/* ---- trainers --------------------------------------------------------------------------------- */

TITANSDEF int titans_trainer_write(titans_trainer *t, const titans_tokenizer *tok, const char *user_meta,
                                   titans_st_writer *w) {
  titans_model *m = t->model;
  char tc_json[512], step[24];
  int rc = titans_train_config_to_json(&t->tc, tc_json, sizeof tc_json);
  if (rc) return titans__error(t->error, rc, "trainer save: the train configuration has a non-finite value");
  if (t->step < 0) return titans__error(t->error, TITANS_ERR_STATE, "trainer save: negative step");
  titans__ck_fmt_int(step, t->step);
  rc = titans__ck_add_common_meta(w, &m->cfg, "trainer", tok);
  if (!rc) rc = titans_st_writer_add_meta(w, "train_config", tc_json);
  if (!rc) rc = titans_st_writer_add_meta(w, "step", step);
  if (!rc && user_meta) rc = titans_st_writer_add_meta(w, "user", user_meta);
  if (!rc) rc = titans__ck_add_params(w, m, m->params, "");
  if (!rc) rc = titans__ck_add_params(w, m, t->adam_m, "adam.m.");
  if (!rc) rc = titans__ck_add_params(w, m, t->adam_v, "adam.v.");
  if (rc) return titans__error(t->error, rc, "trainer save: %s", w->error);
  return TITANS_OK;
}

/* The trainer part once the model is read: train config, step, moments. On failure after
   titans_trainer_init, *inited tells the caller to free t. */
static int titans__ck_trainer_state(titans_trainer *t, titans_model *m, titans_st_reader *r, int *inited, char *err) {
  titans_train_config tc;
  char name[128];
  int rc;
  const char *step = titans_st_meta(r, "step"), *end;
  double v;
  int integral;
  *inited = 0;
  if ((rc = titans_train_config_from_json(&tc, titans_st_meta(r, "train_config"), err)) != 0) return rc;
  if (!step || !titans__ck_parse_number(step, &end, &v, &integral) || *end || !integral || v < 0 || v > 9.0e15 ||
      v > (double)LONG_MAX)
    return titans__error(err, TITANS_ERR_FORMAT, "metadata \"step\" is missing or not a step count");
  if ((rc = titans_trainer_init(t, m, &tc)) != 0) return titans__error(err, rc, "%s", t->error);
  *inited = 1;
  for (size_t i = 0; i < m->n_params && !rc; i++) {
    const titans_param *p = &m->plist[i];
    memcpy(name, "adam.m.", 7);
    memcpy(name + 7, p->name, strlen(p->name) + 1);
    rc = titans__ck_read_tensor(r, name, p, t->adam_m + p->offset, 0, err);
    name[5] = 'v';
    if (!rc) rc = titans__ck_read_tensor(r, name, p, t->adam_v + p->offset, 1, err);
  }
  if (rc) return rc;
  t->step = (long)v;
  return TITANS_OK;
}

TITANSDEF int titans_trainer_read(titans_trainer *t, titans_model *m, titans_tokenizer *tok, char **user_meta,
                                  titans_st_reader *r) {
  char err[TITANS_ERR_MSG_SIZE];
  int rc, inited = 0;
  memset(t, 0, sizeof *t);
  memset(m, 0, sizeof *m);
  if (tok) memset(tok, 0, sizeof *tok);
  if (user_meta) *user_meta = NULL;
  if ((rc = titans__ck_check_header(r, "trainer", err)) != 0) goto fail;
  if ((rc = titans__ck_model_read(m, tok, r, 1)) != 0) {
    memcpy(err, m->error, sizeof err);
    goto fail;
  }
  if ((rc = titans__ck_trainer_state(t, m, r, &inited, err)) != 0 || (rc = titans__ck_user_meta(r, user_meta, err)) != 0) {
    if (inited) titans_trainer_free(t);
    titans_model_free(m);
    if (tok) titans_tokenizer_free(tok);
    goto fail;
  }
  return TITANS_OK;
fail:
  memset(t, 0, sizeof *t);
  titans__error(t->error, rc, "%s", err);
  titans__error(m->error, rc, "%s", err);
  return rc;
}

#ifndef TITANS_NO_STDIO
TITANSDEF int titans_trainer_save(titans_trainer *t, const titans_tokenizer *tok, const char *user_meta, const char *path) {
  titans_st_writer w;
  titans_st_writer_init(&w);
  int rc = titans_trainer_write(t, tok, user_meta, &w);
  if (!rc && (rc = titans_st_writer_save(&w, path)) != 0) titans__error(t->error, rc, "trainer save: %s", w.error);
  titans_st_writer_free(&w);
  return rc;
}

TITANSDEF int titans_trainer_load(titans_trainer *t, titans_model *m, titans_tokenizer *tok, char **user_meta,
                                  const char *path) {
  titans_st_reader r;
  int rc = titans_st_reader_load(&r, path);
  if (rc) {
    memset(t, 0, sizeof *t);
    memset(m, 0, sizeof *m);
    if (tok) memset(tok, 0, sizeof *tok);
    if (user_meta) *user_meta = NULL;
    titans__error(t->error, rc, "%s", r.error);
    titans__error(m->error, rc, "%s", r.error);
  } else {
    rc = titans_trainer_read(t, m, tok, user_meta, &r);
  }
  titans_st_reader_free(&r);
  return rc;
}
#endif

/* ---- sessions --------------------------------------------------------------------------------- */

TITANSDEF uint64_t titans_model_hash(const titans_model *m) {
  /* FNV-1a over the parameters' 32-bit patterns taken in pairs: independent of the host's byte order */
  uint64_t h = 0xcbf29ce484222325ull;
  const float *p = m->params;
  size_t n = m->n_floats, i = 0;
  for (; i + 2 <= n; i += 2) {
    uint32_t a, b;
    memcpy(&a, p + i, 4);
    memcpy(&b, p + i + 1, 4);
    h = (h ^ (((uint64_t)a << 32) | b)) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  if (i < n) {
    uint32_t a;
    memcpy(&a, p + i, 4);
    h = (h ^ a) * 0x100000001b3ull;
  }
  return (h ^ (uint64_t)n) * 0x100000001b3ull;
}

static void titans__ck_hex64(char *out, uint64_t v) {
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) out[i] = hex[(v >> (60 - 4 * i)) & 15];
  out[16] = 0;
}

/* The session's state list, allocated: *list [*n]. */
static int titans__ck_state_list(titans_session *s, titans_tensor_ref **list, size_t *n) {
  size_t count = titans_session_state(s, NULL, 0);
  *list = (titans_tensor_ref *)titans_alloc_bytes(count ? count : 1, sizeof **list);
  if (!*list) return titans__error(s->error, TITANS_ERR_NOMEM, "cannot allocate the state list");
  *n = titans_session_state(s, *list, count);
  TITANS_ASSERT(*n == count);
  return TITANS_OK;
}

TITANSDEF int titans_session_write(titans_session *s, titans_st_writer *w) {
  titans_tensor_ref *list = NULL;
  size_t n = 0;
  char hash[17];
  int rc = titans__ck_state_list(s, &list, &n);
  if (rc) return rc;
  titans__ck_hex64(hash, titans_model_hash(s->model));
  rc = titans__ck_add_common_meta(w, &s->model->cfg, "session", NULL);
  if (!rc) rc = titans_st_writer_add_meta(w, "model_hash", hash);
  for (size_t i = 0; i < n && !rc; i++) rc = titans_st_writer_add_f32(w, list[i].name, list[i].data, 1, &list[i].count);
  titans_free(list);
  if (rc) return titans__error(s->error, rc, "session save: %s", w->error);
  return TITANS_OK;
}

/* Checks the file against the session, then copies: nothing is written into s before all is valid. */
static int titans__ck_session_read(titans_session *s, titans_st_reader *r, titans_tensor_ref *list, size_t n, char *err) {
  char mine[1024], theirs[1024], hash[17];
  titans_config fcfg;
  int rc = titans__ck_check_header(r, "session", err);
  if (rc) return rc;
  if ((rc = titans_config_from_json(&fcfg, titans_st_meta(r, "config"), err)) != 0) return rc;
  if (titans_config_to_json(&s->model->cfg, mine, sizeof mine) || titans_config_to_json(&fcfg, theirs, sizeof theirs) ||
      strcmp(mine, theirs) != 0)
    return titans__error(err, TITANS_ERR_FORMAT, "the state belongs to a model of another configuration");
  const char *fhash = titans_st_meta(r, "model_hash");
  titans__ck_hex64(hash, titans_model_hash(s->model));
  if (!fhash || strcmp(fhash, hash) != 0)
    return titans__error(err, TITANS_ERR_FORMAT, "the state was saved from other weights (model hash %.16s, this model %s)",
                         fhash ? fhash : "missing", hash);
  if (r->n_tensors != n) return titans__error(err, TITANS_ERR_FORMAT, "the file has %zu state tensors, the session %zu", r->n_tensors, n);
  for (size_t i = 0; i < n; i++) {
    const titans_st_tensor *t = titans_st_find(r, list[i].name);
    if (!t) return titans__error(err, TITANS_ERR_FORMAT, "state tensor '%s' is missing", list[i].name);
    if (t->dtype != TITANS_ST_F32 || t->ndim != 1 || t->shape[0] != list[i].count)
      return titans__error(err, TITANS_ERR_FORMAT, "state tensor '%s' is not F32 [%zu]", list[i].name, list[i].count);
  }
  /* all names found and the counts agree: no tensor is left over. Copy (bit-exact, any host order) */
  for (size_t i = 0; i < n; i++) {
    if ((rc = titans_st_read_f32(r, list[i].name, list[i].data, 1, &list[i].count)) != 0)
      return titans__error(err, rc, "%s", r->error);
    if (!titans__ck_finite(list[i].data, list[i].count))
      return titans__error(err, TITANS_ERR_FORMAT, "state tensor '%s' holds NaN or Inf", list[i].name);
  }
  if ((rc = titans_session_state_loaded(s)) != 0) return titans__error(err, rc, "%s", s->error);
  return TITANS_OK;
}

TITANSDEF int titans_session_read(titans_session *s, titans_st_reader *r) {
  titans_tensor_ref *list = NULL;
  size_t n = 0;
  char err[TITANS_ERR_MSG_SIZE];
  int rc = titans__ck_state_list(s, &list, &n);
  if (rc) return rc;
  rc = titans__ck_session_read(s, r, list, n, err);
  titans_free(list);
  if (rc) {
    titans_session_reset(s);
    return titans__error(s->error, rc, "session load: %s", err);
  }
  return TITANS_OK;
}

#ifndef TITANS_NO_STDIO
TITANSDEF int titans_session_save(titans_session *s, const char *path) {
  titans_st_writer w;
  titans_st_writer_init(&w);
  int rc = titans_session_write(s, &w);
  if (!rc && (rc = titans_st_writer_save(&w, path)) != 0) titans__error(s->error, rc, "session save: %s", w.error);
  titans_st_writer_free(&w);
  return rc;
}

TITANSDEF int titans_session_load(titans_session *s, const char *path) {
  titans_st_reader r;
  int rc = titans_st_reader_load(&r, path);
  if (rc) {
    titans_session_reset(s);
    titans__error(s->error, rc, "session load: %s", r.error);
  } else {
    rc = titans_session_read(s, &r);
  }
  titans_st_reader_free(&r);
  return rc;
}
#endif
