/* ---- 6. Safetensors files (implementation) ---------------------------------------------------- */
#include <stdlib.h> /* qsort */
#ifndef TITANS_NO_STDIO
#include <errno.h>
#endif

#define TITANS__ST_MAX_DEPTH 64 /* nesting of the JSON values skipped inside a tensor's entry */

static const char *const titans__st_dtype_names[TITANS_ST_DTYPE_COUNT] = {
    "BOOL", "F4",  "F6_E2M3", "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
    "I16",  "U16", "F16",     "BF16",    "I32", "U32", "F32",     "C64",     "F64",     "I64",         "U64"};
static const unsigned char titans__st_dtype_bits[TITANS_ST_DTYPE_COUNT] = {8,  4,  6,  6,  8,  8,  8,  8,  8,  8,  8,
                                                                           16, 16, 16, 16, 32, 32, 32, 64, 64, 64, 64};

TITANSDEF const char *titans_st_dtype_name(titans_st_dtype dtype) {
  return (unsigned)dtype < TITANS_ST_DTYPE_COUNT ? titans__st_dtype_names[dtype] : "?";
}

TITANSDEF size_t titans_st_dtype_bits(titans_st_dtype dtype) {
  return (unsigned)dtype < TITANS_ST_DTYPE_COUNT ? titans__st_dtype_bits[dtype] : 0;
}

/* 1 on a little-endian host: the file's bytes are then the floats' bytes. */
static int titans__st_host_le(void) {
  const uint32_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* arr (elements of elem bytes, capacity *cap) with room for at least need elements: arr itself when it
   has room, else a new array (doubled capacity) holding arr's elements, arr freed. NULL on overflow or
   failure, arr untouched. Only titans_alloc_bytes / titans_free, so TITANS_MALLOC is honoured. */
static void *titans__st_grow(void *arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap && arr) return arr;
  size_t ncap = *cap ? *cap : 16;
  while (ncap < need) {
    if (!titans_size_mul(ncap, 2, &ncap)) return NULL;
  }
  void *p = titans_alloc_bytes(ncap, elem);
  if (!p) return NULL;
  if (arr) memcpy(p, arr, *cap * elem);
  titans_free(arr);
  *cap = ncap;
  return p;
}

/* Length of the valid UTF-8 sequence at s (n bytes available), or 0 when it is not valid UTF-8
   (overlong forms, UTF-16 surrogates and code points above U+10FFFF are invalid). */
static size_t titans__st_utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else return 0;
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xBF) return 0;
  return len;
}

/* 1 when the NUL-terminated s is valid UTF-8. */
static int titans__st_utf8_valid(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  while (n) {
    size_t k = titans__st_utf8_len(p, n);
    if (!k) return 0;
    p += k;
    n -= k;
  }
  return 1;
}

/* Decimal digits of v into buf (at least 21 bytes), NUL-terminated; returns the length. */
static size_t titans__st_u64_str(char *buf, uint64_t v) {
  char tmp[20];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + (int)(v % 10));
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
  buf[n] = 0;
  return n;
}

/* "[2, 3]" into buf [cap]; truncated (still NUL-terminated) when it does not fit. For messages. */
static void titans__st_shape_str(char *buf, size_t cap, size_t ndim, const size_t *shape) {
  size_t n = 0;
  char num[24];
  buf[n++] = '[';
  for (size_t i = 0; i < ndim; i++) {
    size_t k = titans__st_u64_str(num, (uint64_t)shape[i]);
    if (n + k + 4 >= cap) break;
    if (i) {
      buf[n++] = ',';
      buf[n++] = ' ';
    }
    memcpy(buf + n, num, k);
    n += k;
  }
  buf[n++] = ']';
  buf[n] = 0;
}

/* prod(shape) into *numel and numel * bits / 8 into *nbytes; 0 on overflow or a fractional byte count. */
static int titans__st_sizes(size_t ndim, const size_t *shape, size_t bits, size_t *numel, size_t *nbytes) {
  size_t n = 1, nbits;
  for (size_t i = 0; i < ndim; i++)
    if (!titans_size_mul(n, shape[i], &n)) return 0;
  if (!titans_size_mul(n, bits, &nbits) || nbits % 8) return 0;
  *numel = n;
  *nbytes = nbits / 8;
  return 1;
}

/* ================================ reader: a strict JSON parser ================================ */

/* The parser's cursor over the header s [n]. Strings are decoded into the reader's arena: a decoded
   string and its NUL are never longer than its quoted JSON form, so the arena [n + 1] always fits. */
typedef struct titans__st_parser {
  const unsigned char *s;
  size_t n, pos;
  char *arena;
  size_t arena_used;
  char *err; /* [TITANS__ERRLEN] */
} titans__st_parser;

static int titans__st_fail(titans__st_parser *p, const char *what) {
  return titans__error(p->err, TITANS_ERR_FORMAT, "safetensors: header byte %zu: %s", p->pos, what);
}

static void titans__st_ws(titans__st_parser *p) {
  while (p->pos < p->n) {
    unsigned char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

/* Skip whitespace; 1 when the next byte is c (and consume it). */
static int titans__st_accept(titans__st_parser *p, unsigned char c) {
  titans__st_ws(p);
  if (p->pos < p->n && p->s[p->pos] == c) {
    p->pos++;
    return 1;
  }
  return 0;
}

static int titans__st_hex4(const unsigned char *s, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = s[i], d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return 0;
    v = v * 16 + d;
  }
  *out = v;
  return 1;
}

/* Parse a JSON string (after whitespace) and decode it, NUL-terminated, into the arena: *out points at
   it and *len is its byte length. Raw control characters, invalid UTF-8, bad escapes, lone surrogates
   and \u0000 (it would cut a C string) are errors. */
static int titans__st_string(titans__st_parser *p, const char **out, size_t *len) {
  titans__st_ws(p);
  if (p->pos >= p->n || p->s[p->pos] != '"') return titans__st_fail(p, "expected a string");
  size_t start = p->pos++;
  char *dst = p->arena + p->arena_used;
  size_t k = 0;
  for (;;) {
    if (p->pos >= p->n) {
      p->pos = start;
      return titans__st_fail(p, "unterminated string");
    }
    unsigned char c = p->s[p->pos];
    if (c == '"') break;
    if (c < 0x20) return titans__st_fail(p, "control character in a string (must be escaped)");
    if (c != '\\') {
      size_t u = titans__st_utf8_len(p->s + p->pos, p->n - p->pos);
      if (!u) return titans__st_fail(p, "invalid UTF-8 in a string");
      memcpy(dst + k, p->s + p->pos, u);
      k += u;
      p->pos += u;
      continue;
    }
    if (p->pos + 1 >= p->n) return titans__st_fail(p, "unterminated escape in a string");
    unsigned char e = p->s[p->pos + 1];
    static const char esc_in[] = "\"\\/bfnrt", esc_out[] = "\"\\/\b\f\n\r\t";
    const char *simple = e ? strchr(esc_in, e) : NULL;
    if (simple) {
      dst[k++] = esc_out[simple - esc_in];
      p->pos += 2;
      continue;
    }
    if (e != 'u') return titans__st_fail(p, "bad escape in a string");
    unsigned cp, lo;
    if (p->pos + 6 > p->n || !titans__st_hex4(p->s + p->pos + 2, &cp)) return titans__st_fail(p, "bad \\u escape");
    if (cp >= 0xDC00 && cp <= 0xDFFF) return titans__st_fail(p, "lone low surrogate in a \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (p->pos + 12 > p->n || p->s[p->pos + 6] != '\\' || p->s[p->pos + 7] != 'u' ||
          !titans__st_hex4(p->s + p->pos + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF)
        return titans__st_fail(p, "high surrogate not followed by a low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      p->pos += 6;
    }
    if (cp == 0) return titans__st_fail(p, "\\u0000 in a string is not supported");
    p->pos += 6;
    /* UTF-8 of cp: never longer than the escape it came from (6 or 12 bytes). */
    if (cp < 0x80) dst[k++] = (char)cp;
    else if (cp < 0x800) {
      dst[k++] = (char)(0xC0 | (cp >> 6));
      dst[k++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      dst[k++] = (char)(0xE0 | (cp >> 12));
      dst[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
      dst[k++] = (char)(0x80 | (cp & 0x3F));
    } else {
      dst[k++] = (char)(0xF0 | (cp >> 18));
      dst[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
      dst[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
      dst[k++] = (char)(0x80 | (cp & 0x3F));
    }
  }
  p->pos++; /* closing quote */
  dst[k] = 0;
  /* k + 1 <= (pos - start): the quoted form is at least 2 bytes longer than the decoded bytes. */
  TITANS_ASSERT(p->arena_used + k + 1 <= p->n + 1);
  p->arena_used += k + 1;
  *out = dst;
  *len = k;
  return TITANS_OK;
}

/* Parse a non-negative JSON integer (no sign, fraction, exponent or leading zero) that fits in u64. */
static int titans__st_uint(titans__st_parser *p, uint64_t *out) {
  titans__st_ws(p);
  size_t start = p->pos;
  uint64_t v = 0;
  while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
    unsigned d = (unsigned)(p->s[p->pos] - '0');
    if (v > (UINT64_MAX - d) / 10) return titans__st_fail(p, "integer too large");
    v = v * 10 + d;
    p->pos++;
  }
  size_t digits = p->pos - start;
  int more = p->pos < p->n && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E');
  if (digits == 0 || more || (digits > 1 && p->s[start] == '0')) {
    p->pos = start;
    return titans__st_fail(p, "expected a non-negative integer");
  }
  *out = v;
  return TITANS_OK;
}

/* Skip any JSON number (full grammar), for the values of unknown fields. */
static int titans__st_skip_number(titans__st_parser *p) {
  const unsigned char *s = p->s;
  size_t i = p->pos, n = p->n;
  if (i < n && s[i] == '-') i++;
  if (i < n && s[i] == '0') i++;
  else if (i < n && s[i] >= '1' && s[i] <= '9')
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
  else return titans__st_fail(p, "bad number");
  if (i < n && s[i] == '.') {
    size_t d = ++i;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i == d) return titans__st_fail(p, "bad number");
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    size_t d = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i == d) return titans__st_fail(p, "bad number");
  }
  p->pos = i;
  return TITANS_OK;
}

/* Check and skip one JSON value of any kind; arrays and objects nest at most TITANS__ST_MAX_DEPTH deep
   (recursion bounded by depth). Decoded strings are dropped from the arena. */
static int titans__st_skip_value(titans__st_parser *p, int depth) {
  titans__st_ws(p);
  if (p->pos >= p->n) return titans__st_fail(p, "expected a value");
  unsigned char c = p->s[p->pos];
  if (c == '"') {
    size_t mark = p->arena_used, len;
    const char *str;
    int rc = titans__st_string(p, &str, &len);
    p->arena_used = mark;
    return rc;
  }
  if (c == '-' || (c >= '0' && c <= '9')) return titans__st_skip_number(p);
  static const char *const lits[3] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t l = strlen(lits[i]);
    if (p->n - p->pos >= l && memcmp(p->s + p->pos, lits[i], l) == 0) {
      p->pos += l;
      return TITANS_OK;
    }
  }
  if (c != '[' && c != '{') return titans__st_fail(p, "expected a value");
  if (depth >= TITANS__ST_MAX_DEPTH) return titans__st_fail(p, "JSON nested too deeply");
  unsigned char close = c == '[' ? ']' : '}';
  p->pos++;
  if (titans__st_accept(p, close)) return TITANS_OK;
  for (;;) {
    int rc;
    if (close == '}') {
      size_t mark = p->arena_used, len;
      const char *key;
      if ((rc = titans__st_string(p, &key, &len)) != TITANS_OK) return rc;
      p->arena_used = mark;
      if (!titans__st_accept(p, ':')) return titans__st_fail(p, "expected ':'");
    }
    if ((rc = titans__st_skip_value(p, depth + 1)) != TITANS_OK) return rc;
    if (titans__st_accept(p, close)) return TITANS_OK;
    if (!titans__st_accept(p, ',')) return titans__st_fail(p, close == ']' ? "expected ',' or ']'" : "expected ',' or '}'");
  }
}

/* ================================ reader: the safetensors schema ============================== */

static int titans__st_named_fail(titans__st_parser *p, const char *name, const char *what) {
  return titans__error(p->err, TITANS_ERR_FORMAT, "safetensors: header byte %zu: tensor '%.200s': %s", p->pos, name,
                       what);
}

/* "__metadata__": null, or an object whose values are all strings (keys unique). */
static int titans__st_parse_meta(titans__st_parser *p, titans_st_reader *r, size_t *cap) {
  titans__st_ws(p);
  if (p->n - p->pos >= 4 && memcmp(p->s + p->pos, "null", 4) == 0) {
    p->pos += 4;
    return TITANS_OK;
  }
  if (!titans__st_accept(p, '{')) return titans__st_fail(p, "__metadata__ must be an object of strings");
  if (titans__st_accept(p, '}')) return TITANS_OK;
  for (;;) {
    const char *key, *value;
    size_t klen, vlen;
    int rc;
    if ((rc = titans__st_string(p, &key, &klen)) != TITANS_OK) return rc;
    if (!titans__st_accept(p, ':')) return titans__st_fail(p, "expected ':'");
    titans__st_ws(p);
    if (p->pos >= p->n || p->s[p->pos] != '"') return titans__st_fail(p, "__metadata__ values must be strings");
    if ((rc = titans__st_string(p, &value, &vlen)) != TITANS_OK) return rc;
    void *grown = titans__st_grow((void *)r->meta, cap, 2 * (r->n_meta + 1), sizeof(const char *));
    if (!grown) return titans__error(p->err, TITANS_ERR_NOMEM, "safetensors: out of memory for metadata");
    r->meta = (const char **)grown;
    r->meta[2 * r->n_meta] = key;
    r->meta[2 * r->n_meta + 1] = value;
    r->n_meta++;
    if (titans__st_accept(p, '}')) return TITANS_OK;
    if (!titans__st_accept(p, ',')) return titans__st_fail(p, "expected ',' or '}'");
  }
}

/* Array of at most max non-negative integers that fit in size_t into out; *count gets how many. */
static int titans__st_parse_uints(titans__st_parser *p, const char *name, const char *field, size_t *out, size_t max,
                                  size_t *count) {
  char msg[64];
  if (!titans__st_accept(p, '[')) {
    strcpy(msg, field);
    strcat(msg, " must be an array of integers");
    return titans__st_named_fail(p, name, msg);
  }
  *count = 0;
  if (titans__st_accept(p, ']')) return TITANS_OK;
  for (;;) {
    uint64_t v = 0;
    int rc;
    if (*count == max) {
      strcpy(msg, field);
      strcat(msg, ": too many entries");
      return titans__st_named_fail(p, name, msg);
    }
    if ((rc = titans__st_uint(p, &v)) != TITANS_OK) return rc;
    if (v > (uint64_t)SIZE_MAX) return titans__st_named_fail(p, name, "integer does not fit in size_t");
    out[(*count)++] = (size_t)v;
    if (titans__st_accept(p, ']')) return TITANS_OK;
    if (!titans__st_accept(p, ',')) return titans__st_fail(p, "expected ',' or ']'");
  }
}

/* One tensor entry {"dtype": ..., "shape": [...], "data_offsets": [b, e], (unknown fields skipped)}
   into t, checked on its own: known dtype, ndim <= max, sizes without overflow, end - begin = bytes. */
static int titans__st_parse_tensor(titans__st_parser *p, titans_st_tensor *t, size_t data_size) {
  const char *name = t->name;
  int have_dtype = 0, have_shape = 0, have_offsets = 0, rc;
  size_t offs[2] = {0, 0};
  if (!titans__st_accept(p, '{')) return titans__st_named_fail(p, name, "entry must be an object");
  if (!titans__st_accept(p, '}')) {
    for (;;) {
      size_t mark = p->arena_used, klen;
      const char *key;
      if ((rc = titans__st_string(p, &key, &klen)) != TITANS_OK) return rc;
      p->arena_used = mark; /* the key is not kept; it stays readable until the next string */
      if (!titans__st_accept(p, ':')) return titans__st_fail(p, "expected ':'");
      if (strcmp(key, "dtype") == 0) {
        const char *dt;
        size_t dlen, i;
        if (have_dtype) return titans__st_named_fail(p, name, "duplicate field dtype");
        titans__st_ws(p);
        if (p->pos >= p->n || p->s[p->pos] != '"') return titans__st_named_fail(p, name, "dtype must be a string");
        if ((rc = titans__st_string(p, &dt, &dlen)) != TITANS_OK) return rc;
        p->arena_used = mark;
        for (i = 0; i < TITANS_ST_DTYPE_COUNT; i++)
          if (strcmp(dt, titans__st_dtype_names[i]) == 0) break;
        if (i == TITANS_ST_DTYPE_COUNT) return titans__st_named_fail(p, name, "unknown dtype");
        t->dtype = (titans_st_dtype)i;
        have_dtype = 1;
      } else if (strcmp(key, "shape") == 0) {
        if (have_shape) return titans__st_named_fail(p, name, "duplicate field shape");
        if ((rc = titans__st_parse_uints(p, name, "shape", t->shape, TITANS_ST_MAX_DIMS, &t->ndim)) != TITANS_OK) return rc;
        have_shape = 1;
      } else if (strcmp(key, "data_offsets") == 0) {
        size_t cnt;
        if (have_offsets) return titans__st_named_fail(p, name, "duplicate field data_offsets");
        if ((rc = titans__st_parse_uints(p, name, "data_offsets", offs, 2, &cnt)) != TITANS_OK) return rc;
        if (cnt != 2) return titans__st_named_fail(p, name, "data_offsets must be [begin, end]");
        have_offsets = 1;
      } else {
        if ((rc = titans__st_skip_value(p, 2)) != TITANS_OK) return rc;
      }
      if (titans__st_accept(p, '}')) break;
      if (!titans__st_accept(p, ',')) return titans__st_fail(p, "expected ',' or '}'");
    }
  }
  if (!have_dtype) return titans__st_named_fail(p, name, "missing dtype");
  if (!have_shape) return titans__st_named_fail(p, name, "missing shape");
  if (!have_offsets) return titans__st_named_fail(p, name, "missing data_offsets");
  if (!titans__st_sizes(t->ndim, t->shape, titans__st_dtype_bits[t->dtype], &t->numel, &t->nbytes))
    return titans__st_named_fail(p, name, "shape too large (size overflow) or not a whole number of bytes");
  if (offs[1] < offs[0]) return titans__st_named_fail(p, name, "data_offsets end < begin");
  if (offs[1] > data_size) return titans__st_named_fail(p, name, "data_offsets beyond the end of the file");
  if (offs[1] - offs[0] != t->nbytes)
    return titans__st_named_fail(p, name, "data_offsets size does not match shape * dtype size");
  t->offset = offs[0];
  return TITANS_OK;
}

static int titans__st_cmp_tensor_name(const void *a, const void *b) {
  return strcmp(((const titans_st_tensor *)a)->name, ((const titans_st_tensor *)b)->name);
}

static int titans__st_cmp_tensor_offset(const void *a, const void *b) {
  const titans_st_tensor *x = *(const titans_st_tensor *const *)a, *y = *(const titans_st_tensor *const *)b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
  return strcmp(x->name, y->name); /* a total order: the first error reported does not depend on qsort */
}

static int titans__st_cmp_meta(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Whole-file checks once every entry is parsed: unique names, and the tensors' byte ranges tile the
   data region exactly (from 0, no overlap, no gap, up to the end of the file), as Python demands. */
static int titans__st_check_layout(titans_st_reader *r, size_t data_size) {
  size_t n = r->n_tensors;
  if (n > 1) qsort(r->tensors, n, sizeof(titans_st_tensor), titans__st_cmp_tensor_name);
  for (size_t i = 1; i < n; i++)
    if (strcmp(r->tensors[i - 1].name, r->tensors[i].name) == 0)
      return titans__error(r->error, TITANS_ERR_FORMAT, "safetensors: duplicate tensor name '%.200s'", r->tensors[i].name);
  if (r->n_meta > 1) qsort(r->meta, r->n_meta, 2 * sizeof(const char *), titans__st_cmp_meta);
  for (size_t i = 1; i < r->n_meta; i++)
    if (strcmp(r->meta[2 * i - 2], r->meta[2 * i]) == 0)
      return titans__error(r->error, TITANS_ERR_FORMAT, "safetensors: duplicate __metadata__ key '%.200s'", r->meta[2 * i]);
  size_t end = 0;
  if (n) {
    const titans_st_tensor **order = (const titans_st_tensor **)titans_alloc_bytes(n, sizeof(*order));
    if (!order) return titans__error(r->error, TITANS_ERR_NOMEM, "safetensors: out of memory");
    for (size_t i = 0; i < n; i++) order[i] = &r->tensors[i];
    qsort(order, n, sizeof(*order), titans__st_cmp_tensor_offset);
    for (size_t i = 0; i < n; i++) {
      const titans_st_tensor *t = order[i];
      if (t->offset != end) {
        titans_free((void *)order);
        return titans__error(r->error, TITANS_ERR_FORMAT, "safetensors: tensor '%.200s' at data offset %zu: %s",
                             t->name, t->offset, t->offset < end ? "overlaps the tensor before it" : "leaves a gap before it");
      }
      end = t->offset + t->nbytes;
    }
    titans_free((void *)order);
  }
  if (end != data_size)
    return titans__error(r->error, TITANS_ERR_FORMAT,
                         "safetensors: the tensors cover %zu bytes of data but the file has %zu after the header", end,
                         data_size);
  return TITANS_OK;
}

/* The top-level object: "__metadata__" and the tensors, then only whitespace. */
static int titans__st_parse_header(titans__st_parser *p, titans_st_reader *r, size_t data_size) {
  size_t cap_tensors = 0, cap_meta = 0;
  int have_meta = 0, rc;
  if (!titans__st_accept(p, '{')) return titans__st_fail(p, "the header is not a JSON object");
  if (!titans__st_accept(p, '}')) {
    for (;;) {
      const char *key;
      size_t klen;
      if ((rc = titans__st_string(p, &key, &klen)) != TITANS_OK) return rc;
      if (!titans__st_accept(p, ':')) return titans__st_fail(p, "expected ':'");
      if (strcmp(key, "__metadata__") == 0) {
        if (have_meta) return titans__st_fail(p, "duplicate __metadata__");
        have_meta = 1;
        if ((rc = titans__st_parse_meta(p, r, &cap_meta)) != TITANS_OK) return rc;
      } else {
        if (klen > TITANS_ST_MAX_NAME) return titans__st_fail(p, "tensor name longer than TITANS_ST_MAX_NAME bytes");
        void *grown = titans__st_grow(r->tensors, &cap_tensors, r->n_tensors + 1, sizeof(titans_st_tensor));
        if (!grown) return titans__error(p->err, TITANS_ERR_NOMEM, "safetensors: out of memory for the tensor list");
        r->tensors = (titans_st_tensor *)grown;
        titans_st_tensor *t = &r->tensors[r->n_tensors];
        memset(t, 0, sizeof(*t));
        t->name = key;
        if ((rc = titans__st_parse_tensor(p, t, data_size)) != TITANS_OK) return rc;
        r->n_tensors++;
      }
      if (titans__st_accept(p, '}')) break;
      if (!titans__st_accept(p, ',')) return titans__st_fail(p, "expected ',' or '}'");
    }
  }
  titans__st_ws(p);
  if (p->pos != p->n) return titans__st_fail(p, "trailing bytes after the JSON object");
  return TITANS_OK;
}

TITANSDEF void titans_st_reader_free(titans_st_reader *r) {
  if (!r) return;
  titans_free(r->owned);
  titans_free(r->tensors);
  titans_free((void *)r->meta);
  titans_free(r->strings);
  r->owned = NULL;
  r->tensors = NULL;
  r->meta = NULL;
  r->strings = NULL;
  r->bytes = NULL;
  r->size = r->header_len = r->n_tensors = r->n_meta = 0;
}

/* Parse into r, whose fields are zero; on failure everything allocated here is freed again. */
static int titans__st_parse(titans_st_reader *r, const unsigned char *buf, size_t size) {
  if (!buf && size) return titans__error(r->error, TITANS_ERR_ARG, "safetensors: NULL buffer");
  if (size < 8)
    return titans__error(r->error, TITANS_ERR_FORMAT, "safetensors: %zu bytes: too short for the 8-byte header length",
                         size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | buf[i];
  if (n > TITANS_ST_MAX_HEADER)
    return titans__error(r->error, TITANS_ERR_FORMAT, "safetensors: header length %llu is over the limit of %u bytes",
                         (unsigned long long)n, (unsigned)TITANS_ST_MAX_HEADER);
  if (n > (uint64_t)(size - 8))
    return titans__error(r->error, TITANS_ERR_FORMAT,
                         "safetensors: header length %llu runs past the end of the file (%zu bytes): truncated?",
                         (unsigned long long)n, size);
  size_t hlen = (size_t)n, data_size = size - 8 - hlen;
  r->bytes = buf;
  r->size = size;
  r->header_len = hlen;
  r->strings = (char *)titans_alloc_bytes(hlen + 1, 1);
  if (!r->strings) return titans__error(r->error, TITANS_ERR_NOMEM, "safetensors: out of memory for the header");
  titans__st_parser p;
  p.s = buf + 8;
  p.n = hlen;
  p.pos = 0;
  p.arena = r->strings;
  p.arena_used = 0;
  p.err = r->error;
  int rc = titans__st_parse_header(&p, r, data_size);
  if (rc == TITANS_OK) rc = titans__st_check_layout(r, data_size);
  if (rc != TITANS_OK) return rc;
  for (size_t i = 0; i < r->n_tensors; i++) r->tensors[i].data = buf + 8 + hlen + r->tensors[i].offset;
  return TITANS_OK;
}

TITANSDEF int titans_st_reader_parse(titans_st_reader *r, const void *buf, size_t size) {
  if (!r) return TITANS_ERR_ARG;
  memset(r, 0, sizeof(*r));
  int rc = titans__st_parse(r, (const unsigned char *)buf, size);
  if (rc != TITANS_OK) titans_st_reader_free(r);
  return rc;
}

#ifndef TITANS_NO_STDIO
TITANSDEF int titans_st_reader_load(titans_st_reader *r, const char *path) {
  if (!r) return TITANS_ERR_ARG;
  memset(r, 0, sizeof(*r));
  if (!path) return titans__error(r->error, TITANS_ERR_ARG, "safetensors: NULL path");
  FILE *f = fopen(path, "rb");
  if (!f) return titans__error(r->error, TITANS_ERR_IO, "safetensors: cannot open '%.180s': %s", path, strerror(errno));
  /* A first read catches directories and unreadable files before their size is trusted. */
  int c = fgetc(f);
  long len = -1;
  if (!(c == EOF && ferror(f)) && fseek(f, 0, SEEK_END) == 0) len = ftell(f);
  if (len < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return titans__error(r->error, TITANS_ERR_IO, "safetensors: cannot read '%.180s'", path);
  }
  if ((unsigned long)len > (unsigned long)(SIZE_MAX - 1)) {
    fclose(f);
    return titans__error(r->error, TITANS_ERR_NOMEM, "safetensors: '%.180s' is too large for memory", path);
  }
  size_t size = (size_t)len;
  unsigned char *buf = (unsigned char *)titans_alloc_bytes(size, 1);
  if (!buf) {
    fclose(f);
    return titans__error(r->error, TITANS_ERR_NOMEM, "safetensors: cannot allocate %zu bytes for '%.180s'", size, path);
  }
  size_t got = size ? fread(buf, 1, size, f) : 0;
  int extra = fgetc(f); /* the file must not have grown since it was measured */
  int bad = got != size || ferror(f) || extra != EOF;
  fclose(f);
  if (bad) {
    titans_free(buf);
    return titans__error(r->error, TITANS_ERR_IO, "safetensors: short read of '%.180s' (%zu of %zu bytes)", path, got, size);
  }
  int rc = titans__st_parse(r, buf, size);
  r->owned = buf; /* freed with the reader, on failure too */
  if (rc != TITANS_OK) {
    char msg[TITANS__ERRLEN];
    memcpy(msg, r->error, sizeof(msg));
    titans_st_reader_free(r);
    titans__error(r->error, rc, "%.60s: %s", path, msg);
  }
  return rc;
}
#endif

TITANSDEF const char *titans_st_reader_error(const titans_st_reader *r) { return r ? r->error : "NULL reader"; }

TITANSDEF const titans_st_tensor *titans_st_find(const titans_st_reader *r, const char *name) {
  if (!r || !name) return NULL;
  size_t lo = 0, hi = r->n_tensors;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(r->tensors[mid].name, name);
    if (c == 0) return &r->tensors[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

TITANSDEF const titans_st_tensor *titans_st_tensor_at(const titans_st_reader *r, size_t i) {
  return r && i < r->n_tensors ? &r->tensors[i] : NULL;
}

TITANSDEF int titans_st_read_f32(titans_st_reader *r, const char *name, float *out, size_t ndim, const size_t *shape) {
  if (!r) return TITANS_ERR_ARG;
  if (!name || (!shape && ndim) || ndim > TITANS_ST_MAX_DIMS)
    return titans__error(r->error, TITANS_ERR_ARG, "safetensors: read_f32: NULL name/shape or ndim > %d",
                         TITANS_ST_MAX_DIMS);
  const titans_st_tensor *t = titans_st_find(r, name);
  if (!t) return titans__error(r->error, TITANS_ERR_FORMAT, "safetensors: tensor '%.200s' not found", name);
  if (t->dtype != TITANS_ST_F32)
    return titans__error(r->error, TITANS_ERR_FORMAT, "safetensors: tensor '%.200s' is %s, expected F32", name,
                         titans_st_dtype_name(t->dtype));
  int same = t->ndim == ndim;
  for (size_t i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
  if (!same) {
    char have[200], want[200];
    titans__st_shape_str(have, sizeof(have), t->ndim, t->shape);
    titans__st_shape_str(want, sizeof(want), ndim, shape);
    return titans__error(r->error, TITANS_ERR_FORMAT, "safetensors: tensor '%.100s' has shape %s, expected %s", name,
                         have, want);
  }
  if (t->numel && !out) return titans__error(r->error, TITANS_ERR_ARG, "safetensors: read_f32: NULL output");
  if (titans__st_host_le()) {
    if (t->nbytes) memcpy(out, t->data, t->nbytes);
  } else {
    for (size_t i = 0; i < t->numel; i++) {
      const unsigned char *b = t->data + 4 * i;
      uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
      memcpy(out + i, &u, 4);
    }
  }
  return TITANS_OK;
}

TITANSDEF const char *titans_st_meta(const titans_st_reader *r, const char *key) {
  if (!r || !key) return NULL;
  size_t lo = 0, hi = r->n_meta;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(r->meta[2 * mid], key);
    if (c == 0) return r->meta[2 * mid + 1];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

TITANSDEF int titans_st_meta_at(const titans_st_reader *r, size_t i, const char **key, const char **value) {
  if (!r || i >= r->n_meta) return 0;
  if (key) *key = r->meta[2 * i];
  if (value) *value = r->meta[2 * i + 1];
  return 1;
}

/* ======================================== writer ============================================== */

TITANSDEF void titans_st_writer_init(titans_st_writer *w) {
  if (w) memset(w, 0, sizeof(*w));
}

TITANSDEF void titans_st_writer_free(titans_st_writer *w) {
  if (!w) return;
  for (size_t i = 0; i < w->n_tensors; i++) titans_free(w->tensors[i].name);
  for (size_t i = 0; i < w->n_meta; i++) {
    titans_free(w->meta[i].key);
    titans_free(w->meta[i].value);
  }
  titans_free(w->tensors);
  titans_free(w->meta);
  memset(w, 0, sizeof(*w));
}

TITANSDEF const char *titans_st_writer_error(const titans_st_writer *w) { return w ? w->error : "NULL writer"; }

static char *titans__st_strdup(const char *s) {
  size_t n = strlen(s);
  char *d = (char *)titans_alloc_bytes(n + 1, 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

TITANSDEF int titans_st_writer_add_f32(titans_st_writer *w, const char *name, const float *data, size_t ndim,
                                       const size_t *shape) {
  if (!w) return TITANS_ERR_ARG;
  if (!name) return titans__error(w->error, TITANS_ERR_ARG, "safetensors: NULL tensor name");
  size_t nlen = strlen(name), numel, nbytes;
  if (nlen > TITANS_ST_MAX_NAME || !titans__st_utf8_valid(name) || strcmp(name, "__metadata__") == 0)
    return titans__error(w->error, TITANS_ERR_ARG,
                         "safetensors: bad tensor name '%.100s' (invalid UTF-8, too long or reserved)", name);
  if (ndim > TITANS_ST_MAX_DIMS || (ndim && !shape))
    return titans__error(w->error, TITANS_ERR_ARG, "safetensors: tensor '%.200s': ndim > %d or NULL shape", name,
                         TITANS_ST_MAX_DIMS);
  if (!titans__st_sizes(ndim, shape, 32, &numel, &nbytes))
    return titans__error(w->error, TITANS_ERR_ARG, "safetensors: tensor '%.200s': size overflow", name);
  if (numel && !data) return titans__error(w->error, TITANS_ERR_ARG, "safetensors: tensor '%.200s': NULL data", name);
  for (size_t i = 0; i < w->n_tensors; i++)
    if (strcmp(w->tensors[i].name, name) == 0)
      return titans__error(w->error, TITANS_ERR_ARG, "safetensors: tensor '%.200s' added twice", name);
  void *grown = titans__st_grow(w->tensors, &w->cap_tensors, w->n_tensors + 1, sizeof(titans__st_wtensor));
  if (!grown) return titans__error(w->error, TITANS_ERR_NOMEM, "safetensors: out of memory");
  w->tensors = (titans__st_wtensor *)grown;
  titans__st_wtensor *t = &w->tensors[w->n_tensors];
  memset(t, 0, sizeof(*t));
  if (!(t->name = titans__st_strdup(name))) return titans__error(w->error, TITANS_ERR_NOMEM, "safetensors: out of memory");
  t->data = data;
  t->ndim = ndim;
  for (size_t i = 0; i < ndim; i++) t->shape[i] = shape[i];
  t->numel = numel;
  w->n_tensors++;
  return TITANS_OK;
}

TITANSDEF int titans_st_writer_add_meta(titans_st_writer *w, const char *key, const char *value) {
  if (!w) return TITANS_ERR_ARG;
  if (!key || !value) return titans__error(w->error, TITANS_ERR_ARG, "safetensors: NULL metadata key or value");
  if (!titans__st_utf8_valid(key) || !titans__st_utf8_valid(value))
    return titans__error(w->error, TITANS_ERR_ARG, "safetensors: metadata '%.100s': invalid UTF-8", key);
  for (size_t i = 0; i < w->n_meta; i++)
    if (strcmp(w->meta[i].key, key) == 0)
      return titans__error(w->error, TITANS_ERR_ARG, "safetensors: metadata key '%.200s' added twice", key);
  void *grown = titans__st_grow(w->meta, &w->cap_meta, w->n_meta + 1, sizeof(titans__st_wmeta));
  if (!grown) return titans__error(w->error, TITANS_ERR_NOMEM, "safetensors: out of memory");
  w->meta = (titans__st_wmeta *)grown;
  titans__st_wmeta *m = &w->meta[w->n_meta];
  m->key = titans__st_strdup(key);
  m->value = titans__st_strdup(value);
  if (!m->key || !m->value) {
    titans_free(m->key);
    titans_free(m->value);
    return titans__error(w->error, TITANS_ERR_NOMEM, "safetensors: out of memory");
  }
  w->n_meta++;
  return TITANS_OK;
}

/* Header emitter: counts bytes when buf is NULL (first pass), writes them otherwise (second pass).
   The count saturates at SIZE_MAX, which is over TITANS_ST_MAX_HEADER and so refused. */
typedef struct titans__st_emit {
  char *buf;
  size_t len;
} titans__st_emit;

static void titans__st_put(titans__st_emit *e, const char *s, size_t n) {
  if (e->buf) memcpy(e->buf + e->len, s, n);
  if (!titans_size_add(e->len, n, &e->len)) e->len = SIZE_MAX;
}

static void titans__st_puts(titans__st_emit *e, const char *s) { titans__st_put(e, s, strlen(s)); }

static void titans__st_put_u64(titans__st_emit *e, uint64_t v) {
  char num[24];
  titans__st_put(e, num, titans__st_u64_str(num, v));
}

/* A JSON string as serde_json writes it: \" \\ \b \f \n \r \t, other control bytes as \u00XX,
   everything else (UTF-8 included) as is. */
static void titans__st_put_json_string(titans__st_emit *e, const char *s) {
  static const char hex[] = "0123456789abcdef";
  titans__st_put(e, "\"", 1);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    const char *esc = NULL;
    switch (*c) {
      case '"': esc = "\\\""; break;
      case '\\': esc = "\\\\"; break;
      case '\b': esc = "\\b"; break;
      case '\f': esc = "\\f"; break;
      case '\n': esc = "\\n"; break;
      case '\r': esc = "\\r"; break;
      case '\t': esc = "\\t"; break;
      default: break;
    }
    if (esc) titans__st_puts(e, esc);
    else if (*c < 0x20) {
      char u[6] = {'\\', 'u', '0', '0', hex[*c >> 4], hex[*c & 15]};
      titans__st_put(e, u, 6);
    } else titans__st_put(e, (const char *)c, 1);
  }
  titans__st_put(e, "\"", 1);
}

/* The header JSON, unpadded: {"__metadata__":{...},"name":{"dtype":"F32","shape":[..],"data_offsets":[b,e]},...}
   with the tensors in name order and their data laid out in that order. */
static void titans__st_put_header(titans__st_emit *e, const titans_st_writer *w) {
  uint64_t offset = 0;
  titans__st_put(e, "{", 1);
  if (w->n_meta) {
    titans__st_puts(e, "\"__metadata__\":{");
    for (size_t i = 0; i < w->n_meta; i++) {
      if (i) titans__st_put(e, ",", 1);
      titans__st_put_json_string(e, w->meta[i].key);
      titans__st_put(e, ":", 1);
      titans__st_put_json_string(e, w->meta[i].value);
    }
    titans__st_put(e, "}", 1);
  }
  for (size_t i = 0; i < w->n_tensors; i++) {
    const titans__st_wtensor *t = &w->tensors[i];
    if (i || w->n_meta) titans__st_put(e, ",", 1);
    titans__st_put_json_string(e, t->name);
    titans__st_puts(e, ":{\"dtype\":\"F32\",\"shape\":[");
    for (size_t d = 0; d < t->ndim; d++) {
      if (d) titans__st_put(e, ",", 1);
      titans__st_put_u64(e, t->shape[d]);
    }
    titans__st_puts(e, "],\"data_offsets\":[");
    titans__st_put_u64(e, offset);
    titans__st_put(e, ",", 1);
    offset += (uint64_t)t->numel * 4; /* fits: checked by titans__st_prepare */
    titans__st_put_u64(e, offset);
    titans__st_puts(e, "]}");
  }
  titans__st_put(e, "}", 1);
}

static int titans__st_cmp_wtensor(const void *a, const void *b) {
  return strcmp(((const titans__st_wtensor *)a)->name, ((const titans__st_wtensor *)b)->name);
}

static int titans__st_cmp_wmeta(const void *a, const void *b) {
  return strcmp(((const titans__st_wmeta *)a)->key, ((const titans__st_wmeta *)b)->key);
}

/* Sort the entries (output independent of the order of the add calls) and build the first 8 + N bytes
   of the file into *head (titans_free it); *total gets the file's size. */
static int titans__st_prepare(titans_st_writer *w, unsigned char **head, size_t *head_len, size_t *total) {
  *head = NULL;
  if (w->n_tensors > 1) qsort(w->tensors, w->n_tensors, sizeof(titans__st_wtensor), titans__st_cmp_wtensor);
  if (w->n_meta > 1) qsort(w->meta, w->n_meta, sizeof(titans__st_wmeta), titans__st_cmp_wmeta);
  size_t data = 0;
  for (size_t i = 0; i < w->n_tensors; i++) {
    size_t nb;
    if (!titans_size_mul(w->tensors[i].numel, 4, &nb) || !titans_size_add(data, nb, &data))
      return titans__error(w->error, TITANS_ERR_NOMEM, "safetensors: total data size overflows");
  }
  titans__st_emit e = {NULL, 0};
  titans__st_put_header(&e, w);
  size_t n = e.len;
  if (n > TITANS_ST_MAX_HEADER - 7)
    return titans__error(w->error, TITANS_ERR_ARG, "safetensors: header of %zu bytes is over the limit of %u", n,
                         (unsigned)TITANS_ST_MAX_HEADER);
  size_t padded = (n + 7) / 8 * 8; /* data starts 8-byte aligned, as Python pads it */
  if (!titans_size_add(8 + padded, data, total))
    return titans__error(w->error, TITANS_ERR_NOMEM, "safetensors: file size overflows");
  unsigned char *h = (unsigned char *)titans_alloc_bytes(8 + padded, 1);
  if (!h) return titans__error(w->error, TITANS_ERR_NOMEM, "safetensors: out of memory for the header");
  for (int i = 0; i < 8; i++) h[i] = (unsigned char)(((uint64_t)padded >> (8 * i)) & 0xFF);
  e.buf = (char *)h + 8;
  e.len = 0;
  titans__st_put_header(&e, w);
  TITANS_ASSERT(e.len == n);
  memset(h + 8 + n, ' ', padded - n);
  *head = h;
  *head_len = 8 + padded;
  return TITANS_OK;
}

/* Tensor t's bytes, little-endian, into dst [numel * 4]. */
static void titans__st_put_le(unsigned char *dst, const titans__st_wtensor *t) {
  if (titans__st_host_le()) {
    if (t->numel) memcpy(dst, t->data, t->numel * 4);
    return;
  }
  for (size_t i = 0; i < t->numel; i++) {
    uint32_t u;
    memcpy(&u, t->data + i, 4);
    for (int b = 0; b < 4; b++) dst[4 * i + b] = (unsigned char)(u >> (8 * b));
  }
}

TITANSDEF int titans_st_writer_to_memory(titans_st_writer *w, unsigned char **out, size_t *size) {
  if (!w) return TITANS_ERR_ARG;
  if (!out || !size) return titans__error(w->error, TITANS_ERR_ARG, "safetensors: NULL output");
  *out = NULL;
  *size = 0;
  unsigned char *head;
  size_t head_len, total;
  int rc = titans__st_prepare(w, &head, &head_len, &total);
  if (rc != TITANS_OK) return rc;
  unsigned char *buf = (unsigned char *)titans_alloc_bytes(total, 1);
  if (!buf) {
    titans_free(head);
    return titans__error(w->error, TITANS_ERR_NOMEM, "safetensors: cannot allocate %zu bytes", total);
  }
  memcpy(buf, head, head_len);
  titans_free(head);
  size_t pos = head_len;
  for (size_t i = 0; i < w->n_tensors; i++) {
    titans__st_put_le(buf + pos, &w->tensors[i]);
    pos += w->tensors[i].numel * 4;
  }
  TITANS_ASSERT(pos == total);
  *out = buf;
  *size = total;
  return TITANS_OK;
}

#ifndef TITANS_NO_STDIO
/* Stream the file to f; 1 when every fwrite wrote everything. */
static int titans__st_write_stream(titans_st_writer *w, FILE *f, const unsigned char *head, size_t head_len) {
  if (fwrite(head, 1, head_len, f) != head_len) return 0;
  if (titans__st_host_le()) {
    for (size_t i = 0; i < w->n_tensors; i++) {
      const titans__st_wtensor *t = &w->tensors[i];
      if (t->numel && fwrite(t->data, 4, t->numel, f) != t->numel) return 0;
    }
    return 1;
  }
  unsigned char chunk[4096];
  for (size_t i = 0; i < w->n_tensors; i++) {
    const titans__st_wtensor *t = &w->tensors[i];
    for (size_t j = 0; j < t->numel; j += sizeof(chunk) / 4) {
      titans__st_wtensor part = *t;
      part.data = t->data + j;
      part.numel = t->numel - j < sizeof(chunk) / 4 ? t->numel - j : sizeof(chunk) / 4;
      titans__st_put_le(chunk, &part);
      if (fwrite(chunk, 4, part.numel, f) != part.numel) return 0;
    }
  }
  return 1;
}

TITANSDEF int titans_st_writer_save(titans_st_writer *w, const char *path) {
  if (!w) return TITANS_ERR_ARG;
  if (!path) return titans__error(w->error, TITANS_ERR_ARG, "safetensors: NULL path");
  size_t plen = strlen(path);
  char *tmp = (char *)titans_alloc_bytes(plen + 5, 1);
  if (!tmp) return titans__error(w->error, TITANS_ERR_NOMEM, "safetensors: out of memory");
  memcpy(tmp, path, plen);
  memcpy(tmp + plen, ".tmp", 5);
  unsigned char *head;
  size_t head_len, total;
  int rc = titans__st_prepare(w, &head, &head_len, &total);
  if (rc != TITANS_OK) {
    titans_free(tmp);
    return rc;
  }
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    rc = titans__error(w->error, TITANS_ERR_IO, "safetensors: cannot create '%.180s': %s", tmp, strerror(errno));
  } else {
    int ok = titans__st_write_stream(w, f, head, head_len);
    int err = errno;
    ok = fflush(f) == 0 && ok;
    ok = !ferror(f) && ok;
    if (!ok) err = errno;
    if (fclose(f) != 0 && ok) { /* a delayed write error surfaces here */
      ok = 0;
      err = errno;
    }
    if (!ok) rc = titans__error(w->error, TITANS_ERR_IO, "safetensors: cannot write '%.180s': %s", tmp, strerror(err));
    else if (rename(tmp, path) != 0) {
      err = errno;
#ifdef _WIN32
      /* Windows' rename does not replace: drop the old file first (not atomic there). */
      if (remove(path) == 0 && rename(tmp, path) == 0) err = 0;
#endif
      if (err)
        rc = titans__error(w->error, TITANS_ERR_IO, "safetensors: cannot rename '%.120s' to '%.120s': %s", tmp, path,
                           strerror(err));
    }
    if (rc != TITANS_OK) remove(tmp);
  }
  titans_free(head);
  titans_free(tmp);
  return rc;
}
#endif
