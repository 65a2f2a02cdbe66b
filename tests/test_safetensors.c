/* Safetensors reader and writer (docs/model.md section 6): round trips through memory and files (bit-identical),
   the exact bytes Python's safetensors writes, atomic saves, and a long list of malformed, truncated,
   hostile and randomly damaged files, each of which must be refused with a message, never crash (run
   it under ASan: make check-asan), and never allocate more than the file's size implies. */
#define _POSIX_C_SOURCE 200809L /* getpid, mkdir, rmdir: only the test uses them */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A counting allocator, so the test can bound what parsing allocates and make the k-th allocation
   fail. Test-only state; the library itself keeps none. */
static size_t tm_live, tm_peak, tm_count;
static long tm_fail_at = -1; /* index of the allocation that fails, -1 for none */
static void *tm_malloc(size_t n) {
  if (tm_fail_at >= 0 && (long)tm_count == tm_fail_at) {
    tm_count++;
    return NULL;
  }
  tm_count++;
  unsigned char *p = (unsigned char *)malloc(n + 16);
  if (!p) return NULL;
  memcpy(p, &n, sizeof(n));
  tm_live += n;
  if (tm_live > tm_peak) tm_peak = tm_live;
  return p + 16;
}
static void tm_free(void *q) {
  if (!q) return;
  unsigned char *p = (unsigned char *)q - 16;
  size_t n;
  memcpy(&n, p, sizeof(n));
  tm_live -= n;
  free(p);
}
static void tm_reset(void) {
  tm_peak = tm_live;
  tm_count = 0;
  tm_fail_at = -1;
}
#define TITANS_MALLOC(n) tm_malloc(n)
#define TITANS_FREE(p) tm_free(p)
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "tests/harness.h"
#include <time.h>

static char tmp_dir_prefix[256]; /* "/tmp/titans_st_<pid>" */

static void path_of(char *out, size_t cap, const char *suffix) {
  snprintf(out, cap, "%s_%s", tmp_dir_prefix, suffix);
}

static int file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Whole file into a malloc'ed buffer; NULL when it cannot be read. */
static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, len = 0;
  unsigned char *buf = (unsigned char *)malloc(cap);
  size_t got;
  while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
    len += got;
    if (len == cap) buf = (unsigned char *)realloc(buf, cap *= 2);
  }
  fclose(f);
  *n = len;
  return buf;
}

/* A file made of the 8-byte length of header, header, then data_len bytes (0, 1, 2, ...). */
static unsigned char *mk_file(const char *header, size_t hlen, size_t data_len, size_t *n) {
  *n = 8 + hlen + data_len;
  unsigned char *b = (unsigned char *)malloc(*n ? *n : 1);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  memcpy(b + 8, header, hlen);
  for (size_t i = 0; i < data_len; i++) b[8 + hlen + i] = (unsigned char)i;
  return b;
}

/* ---------------------------------------------------------------------------------------------- */
/* The tensors of the round trips: several shapes, a scalar, an empty tensor, awkward names, and
   values whose bits must survive (NaN payloads, -0, infinities, denormals). */
typedef struct {
  const char *name;
  size_t ndim, shape[4];
} spec_t;
static const spec_t specs[] = {
    {"layers.0.attn.wq", 2, {8, 16, 0, 0}},
    {"layers.0.mem.w0.0", 3, {2, 5, 3, 0}},
    {"b", 1, {7, 0, 0, 0}},
    {"scalar", 0, {0, 0, 0, 0}},
    {"empty", 2, {0, 5, 0, 0}},
    {"quote\"back\\slash\ttab\nnl \x01 ctl", 1, {3, 0, 0, 0}},
    {"unicod\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80", 1, {2, 0, 0, 0}},
};
#define NSPEC (sizeof(specs) / sizeof(specs[0]))

static size_t spec_numel(const spec_t *s) {
  size_t n = 1;
  for (size_t i = 0; i < s->ndim; i++) n *= s->shape[i];
  return n;
}

static float *make_data(const spec_t *s, titans_rng *rng) {
  size_t n = spec_numel(s);
  float *d = (float *)malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++) d[i] = titans_rng_normal(rng);
  uint32_t specials[] = {0x7FC12345u, 0xFFA00001u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x00000001u, 0x007FFFFFu};
  for (size_t i = 0; i < n && i < sizeof(specials) / sizeof(specials[0]); i++) memcpy(&d[i], &specials[i], 4);
  return d;
}

static const char *meta_kv[][2] = {
    {"format", "pt"},
    {"config", "{\"d\": 64, \"heads\": 4, \"block\": \"MAC\", \"name\": \"t\\u00e9st\"}"},
    {"notes", "line1\nline2\ttab \"quoted\" back\\slash \x1f unit-sep \xe2\x82\xac"},
    {"", "empty key"},
};
#define NMETA (sizeof(meta_kv) / sizeof(meta_kv[0]))

static void fill_writer(titans_st_writer *w, float **data, int reverse) {
  titans_st_writer_init(w);
  for (size_t k = 0; k < NSPEC; k++) {
    size_t i = reverse ? NSPEC - 1 - k : k;
    if (titans_st_writer_add_f32(w, specs[i].name, data[i], specs[i].ndim, specs[i].shape) != TITANS_OK)
      th_check(0, "add_f32 %s: %s", specs[i].name, w->error);
  }
  for (size_t k = 0; k < NMETA; k++) {
    size_t i = reverse ? NMETA - 1 - k : k;
    if (titans_st_writer_add_meta(w, meta_kv[i][0], meta_kv[i][1]) != TITANS_OK)
      th_check(0, "add_meta %s: %s", meta_kv[i][0], w->error);
  }
}

/* Every tensor and metadata pair of the specs is in r, bit-identical. */
static void check_contents(const char *what, titans_st_reader *r, float **data) {
  int ok = r->n_tensors == NSPEC && r->n_meta == NMETA;
  size_t bad_bits = 0;
  for (size_t i = 0; i < NSPEC && ok; i++) {
    const titans_st_tensor *t = titans_st_find(r, specs[i].name);
    if (!t || t->dtype != TITANS_ST_F32 || t->ndim != specs[i].ndim || t->numel != spec_numel(&specs[i])) {
      ok = 0;
      break;
    }
    for (size_t d = 0; d < t->ndim; d++) ok &= t->shape[d] == specs[i].shape[d];
    size_t n = spec_numel(&specs[i]);
    float *out = (float *)malloc((n ? n : 1) * sizeof(float));
    if (titans_st_read_f32(r, specs[i].name, out, specs[i].ndim, specs[i].shape) != TITANS_OK) ok = 0;
    else if (n && memcmp(out, data[i], n * sizeof(float)) != 0) bad_bits++;
    free(out);
  }
  for (size_t i = 0; i < NMETA && ok; i++) {
    const char *v = titans_st_meta(r, meta_kv[i][0]);
    ok = v && strcmp(v, meta_kv[i][1]) == 0;
  }
  for (size_t i = 1; i < r->n_tensors && ok; i++) ok = strcmp(r->tensors[i - 1].name, r->tensors[i].name) < 0;
  th_check(ok && bad_bits == 0, "%s: %zu tensors, %zu metadata pairs, names sorted, %zu tensors differ in any bit",
           what, r->n_tensors, r->n_meta, bad_bits);
}

static void test_round_trip(void) {
  printf("round trip (memory, file)\n");
  titans_rng rng;
  titans_rng_seed(&rng, 42);
  float *data[NSPEC];
  for (size_t i = 0; i < NSPEC; i++) data[i] = make_data(&specs[i], &rng);

  titans_st_writer w, w2;
  fill_writer(&w, data, 0);
  unsigned char *mem = NULL, *mem2 = NULL;
  size_t n = 0, n2 = 0;
  int rc0 = titans_st_writer_to_memory(&w, &mem, &n);
  th_check(rc0 == TITANS_OK, "to_memory: %zu bytes '%s'", n, w.error);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | mem[i];
  th_check(hlen % 8 == 0 && mem[8] == '{' && mem[8 + hlen - 1] != 0,
           "header length %llu is a multiple of 8 (data 8-byte aligned), starts with '{', padded with spaces",
           (unsigned long long)hlen);

  titans_st_reader r;
  th_check(titans_st_reader_parse(&r, mem, n) == TITANS_OK, "parse the writer's output: '%s'", r.error);
  check_contents("memory round trip", &r, data);
  titans_st_reader_free(&r);
  th_check(r.n_tensors == 0 && r.tensors == NULL, "reader_free leaves an empty reader");
  titans_st_reader_free(&r); /* twice is harmless */

  /* Same inputs in another order give the same bytes; so does serialising twice. */
  fill_writer(&w2, data, 1);
  titans_st_writer_to_memory(&w2, &mem2, &n2);
  th_check(n == n2 && memcmp(mem, mem2, n) == 0, "deterministic: reversed add order gives identical %zu bytes", n);
  titans_free(mem2);
  titans_st_writer_to_memory(&w2, &mem2, &n2);
  th_check(n == n2 && memcmp(mem, mem2, n) == 0, "deterministic: a second serialisation gives identical bytes");
  titans_free(mem2);

  /* Through a file: the same bytes as in memory, loaded bit-identical, no .tmp left behind. */
  char path[300], tmp[310];
  path_of(path, sizeof(path), "rt.safetensors");
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  th_check(titans_st_writer_save(&w, path) == TITANS_OK, "save to %s: '%s'", path, w.error);
  th_check(!file_exists(tmp), "no %s left after the save", tmp);
  size_t fn = 0;
  unsigned char *fbytes = slurp(path, &fn);
  th_check(fbytes && fn == n && memcmp(fbytes, mem, n) == 0, "file bytes == memory bytes (%zu)", fn);
  free(fbytes);
  th_check(titans_st_reader_load(&r, path) == TITANS_OK, "load %s: '%s'", path, r.error);
  check_contents("file round trip", &r, data);

  /* Re-serialising what was read gives the same file (read -> write is the identity). */
  titans_st_writer w3;
  titans_st_writer_init(&w3);
  float *copies[NSPEC];
  for (size_t i = 0; i < r.n_tensors; i++) {
    const titans_st_tensor *t = titans_st_tensor_at(&r, i);
    copies[i] = (float *)malloc((t->numel ? t->numel : 1) * sizeof(float));
    titans_st_read_f32(&r, t->name, copies[i], t->ndim, t->shape);
    titans_st_writer_add_f32(&w3, t->name, copies[i], t->ndim, t->shape);
  }
  const char *k, *v;
  for (size_t i = 0; titans_st_meta_at(&r, i, &k, &v); i++) titans_st_writer_add_meta(&w3, k, v);
  titans_st_writer_to_memory(&w3, &mem2, &n2);
  th_check(n == n2 && memcmp(mem, mem2, n) == 0, "read then write again: identical %zu bytes", n2);
  titans_free(mem2);
  for (size_t i = 0; i < r.n_tensors; i++) free(copies[i]);
  titans_st_writer_free(&w3);
  titans_st_reader_free(&r);

  /* Saving over an existing file replaces it. */
  titans_st_writer_free(&w2);
  titans_st_writer_init(&w2);
  size_t one = 1;
  float x = 3.5f;
  titans_st_writer_add_f32(&w2, "only", &x, 1, &one);
  th_check(titans_st_writer_save(&w2, path) == TITANS_OK, "save over the existing file");
  int rc = titans_st_reader_load(&r, path);
  th_check(rc == TITANS_OK && r.n_tensors == 1 && titans_st_find(&r, "only") && !file_exists(tmp),
           "the new file replaced the old one, no .tmp left");
  titans_st_reader_free(&r);
  remove(path);

  titans_free(mem);
  titans_st_writer_free(&w);
  titans_st_writer_free(&w2);
  for (size_t i = 0; i < NSPEC; i++) free(data[i]);
}

static void test_atomic_and_io_errors(void) {
  printf("atomic save, i/o errors\n");
  titans_st_writer w;
  titans_st_writer_init(&w);
  float d[6] = {1, 2, 3, 4, 5, 6};
  size_t shape[2] = {2, 3};
  titans_st_writer_add_f32(&w, "x", d, 2, shape);

  int rc = titans_st_writer_save(&w, "/nonexistent_titans_dir/sub/model.safetensors");
  th_check(rc == TITANS_ERR_IO, "save into a missing directory: %s ('%s')", titans_status_string(rc), w.error);

  /* "<path>.tmp" cannot be created (it is a directory): the old file must be left as it was. */
  char path[300], tmp[310];
  path_of(path, sizeof(path), "atomic.safetensors");
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(path, "wb");
  fputs("old contents", f);
  fclose(f);
  mkdir(tmp, 0700);
  rc = titans_st_writer_save(&w, path);
  size_t n = 0;
  unsigned char *old = slurp(path, &n);
  th_check(rc == TITANS_ERR_IO && old && n == 12 && memcmp(old, "old contents", 12) == 0,
           "save whose temporary file cannot be created: %s, old file intact ('%s')", titans_status_string(rc),
           w.error);
  free(old);
  rmdir(tmp);
  remove(path);

  /* The target is a directory: writing the temporary file works, the rename fails; the temporary file
     must be removed again. */
  char dir[300], dtmp[310];
  path_of(dir, sizeof(dir), "isdir");
  snprintf(dtmp, sizeof(dtmp), "%s.tmp", dir);
  mkdir(dir, 0700);
  rc = titans_st_writer_save(&w, dir);
  th_check(rc == TITANS_ERR_IO && !file_exists(dtmp), "save over a directory: %s, no .tmp left ('%s')",
           titans_status_string(rc), w.error);
  rmdir(dir);

  titans_st_reader r;
  rc = titans_st_reader_load(&r, "/nonexistent_titans_dir/model.safetensors");
  th_check(rc == TITANS_ERR_IO, "load a missing file: %s ('%s')", titans_status_string(rc), r.error);
  rc = titans_st_reader_load(&r, "/tmp");
  th_check(rc == TITANS_ERR_IO, "load a directory: %s ('%s')", titans_status_string(rc), r.error);
  titans_st_writer_free(&w);
}

/* Exactly the bytes Python's safetensors writes (serde_json compact header: "__metadata__" first,
   tensors sorted by name within one dtype, data contiguous in that order, spaces up to a multiple of 8),
   and files Python writes load here. */
static void test_python_layout(void) {
  printf("Python's layout\n");
  float a[2] = {1.0f, -2.0f}, b[1] = {0.5f};
  size_t sa = 2, sb[2] = {1, 1};
  titans_st_writer w;
  titans_st_writer_init(&w);
  titans_st_writer_add_f32(&w, "b", b, 2, sb);
  titans_st_writer_add_f32(&w, "a", a, 1, &sa);
  titans_st_writer_add_meta(&w, "format", "pt");
  unsigned char *mem;
  size_t n;
  titans_st_writer_to_memory(&w, &mem, &n);
  const char *hdr =
      "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[8,12]}}";
  size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
  unsigned char want[256];
  memset(want, ' ', sizeof(want));
  for (int i = 0; i < 8; i++) want[i] = (unsigned char)(padded >> (8 * i));
  memcpy(want + 8, hdr, hl);
  memcpy(want + 8 + padded, a, 8); /* little-endian host: the floats' bytes are the file's */
  memcpy(want + 8 + padded + 8, b, 4);
  th_check(n == 8 + padded + 12 && memcmp(mem, want, n) == 0,
           "writer output == Python's bytes (%zu bytes, header %zu + %zu spaces)", n, hl, padded - hl);
  titans_free(mem);
  titans_st_writer_free(&w);

  /* Mixed dtypes with the data in Python's order (descending alignment: F32, I32, BF16), the header
     listing them in another order, unpadded (as older versions and other writers leave it). */
  const char *py = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]},"
                   "\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                   "\"f\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}";
  unsigned char *file = mk_file(py, strlen(py), 12, &n);
  titans_st_reader r;
  int rc = titans_st_reader_parse(&r, file, n);
  const titans_st_tensor *t = titans_st_find(&r, "w");
  th_check(rc == TITANS_OK && r.n_tensors == 3 && t && t->dtype == TITANS_ST_BF16 && t->nbytes == 4 &&
               t->data == file + 8 + strlen(py) + 8,
           "mixed dtypes, unpadded header, data order != name order: parsed ('%s')", r.error);
  float s = 0;
  rc = titans_st_read_f32(&r, "f", &s, 0, NULL);
  float want_s;
  memcpy(&want_s, file + 8 + strlen(py), 4);
  th_check(rc == TITANS_OK && memcmp(&s, &want_s, 4) == 0, "F32 scalar read");
  size_t one = 1;
  rc = titans_st_read_f32(&r, "i", &s, 1, &one);
  th_check(rc == TITANS_ERR_FORMAT && strstr(r.error, "I32") && strstr(r.error, "'i'"),
           "read_f32 of an I32 tensor: '%s'", r.error);
  titans_st_reader_free(&r);
  free(file);

  /* Leading whitespace, "__metadata__": null, unknown fields (serde ignores them), escapes in names,
     a name given with a \u escape is found by its UTF-8 bytes. */
  const char *loose = " \n{\"__metadata__\":null, \"t\\u00e9\\ud83d\\ude00\\/x\" : {\"extra\": [1, -2.5e+3, {\"k\": "
                      "[true, false, null]}],"
                      "\"data_offsets\":[0,4], \"shape\":[1], \"dtype\":\"F32\"}}\t\r\n";
  file = mk_file(loose, strlen(loose), 4, &n);
  rc = titans_st_reader_parse(&r, file, n);
  th_check(rc == TITANS_OK && titans_st_find(&r, "t\xc3\xa9\xf0\x9f\x98\x80/x") && r.n_meta == 0,
           "whitespace, null metadata, unknown fields, escaped name: parsed ('%s')", r.error);
  titans_st_reader_free(&r);
  free(file);

  /* An empty file of tensors: "{}" padded, as Python writes it. */
  file = mk_file("{}      ", 8, 0, &n);
  rc = titans_st_reader_parse(&r, file, n);
  th_check(rc == TITANS_OK && r.n_tensors == 0, "no tensors: parsed");
  titans_st_reader_free(&r);
  free(file);
}

static void test_read_f32_errors(void) {
  printf("read_f32 checks\n");
  float d[32] = {0};
  size_t s48[2] = {4, 8}, s84[2] = {8, 4}, s32[1] = {32}, s4[3] = {4, 8, 1};
  titans_st_writer w;
  titans_st_writer_init(&w);
  titans_st_writer_add_f32(&w, "layers.0.attn.wq", d, 2, s48);
  unsigned char *mem;
  size_t n;
  titans_st_writer_to_memory(&w, &mem, &n);
  titans_st_reader r;
  titans_st_reader_parse(&r, mem, n);
  float out[32];
  int rc = titans_st_read_f32(&r, "layers.0.attn.wq", out, 2, s84);
  th_check(rc == TITANS_ERR_FORMAT && strstr(r.error, "layers.0.attn.wq") && strstr(r.error, "[4, 8]") &&
               strstr(r.error, "[8, 4]"),
           "wrong shape: '%s'", r.error);
  rc = titans_st_read_f32(&r, "layers.0.attn.wq", out, 1, s32);
  th_check(rc == TITANS_ERR_FORMAT && strstr(r.error, "[32]"), "same size, other rank: '%s'", r.error);
  rc = titans_st_read_f32(&r, "layers.0.attn.wq", out, 3, s4);
  th_check(rc == TITANS_ERR_FORMAT, "extra unit dimension: '%s'", r.error);
  rc = titans_st_read_f32(&r, "layers.1.attn.wq", out, 2, s48);
  th_check(rc == TITANS_ERR_FORMAT && strstr(r.error, "not found"), "missing tensor: '%s'", r.error);
  rc = titans_st_read_f32(&r, "layers.0.attn.wq", out, 9, s48);
  th_check(rc == TITANS_ERR_ARG, "ndim 9: '%s'", r.error);
  th_check(titans_st_meta(&r, "nope") == NULL && titans_st_tensor_at(&r, 1) == NULL &&
               !titans_st_meta_at(&r, 0, NULL, NULL),
           "absent metadata and out-of-range indices give NULL / 0");
  titans_st_reader_free(&r);
  titans_free(mem);
  titans_st_writer_free(&w);
}

static void test_writer_errors(void) {
  printf("writer argument checks\n");
  titans_st_writer w;
  titans_st_writer_init(&w);
  float d[4] = {0};
  size_t s1 = 4, s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, big[2] = {(size_t)1 << 40, (size_t)1 << 40};
  int rc;
  rc = titans_st_writer_add_f32(&w, "a", d, 1, &s1);
  th_check(rc == TITANS_OK, "add a");
  rc = titans_st_writer_add_f32(&w, "a", d, 1, &s1);
  th_check(rc == TITANS_ERR_ARG, "duplicate name: '%s'", w.error);
  rc = titans_st_writer_add_f32(&w, "__metadata__", d, 1, &s1);
  th_check(rc == TITANS_ERR_ARG, "reserved name: '%s'", w.error);
  rc = titans_st_writer_add_f32(&w, "bad\xff", d, 1, &s1);
  th_check(rc == TITANS_ERR_ARG, "invalid UTF-8 name: '%s'", w.error);
  rc = titans_st_writer_add_f32(&w, "n9", d, 9, s9);
  th_check(rc == TITANS_ERR_ARG, "9 dimensions: '%s'", w.error);
  rc = titans_st_writer_add_f32(&w, "big", d, 2, big);
  th_check(rc == TITANS_ERR_ARG, "shape product overflow: '%s'", w.error);
  rc = titans_st_writer_add_f32(&w, "null", NULL, 1, &s1);
  th_check(rc == TITANS_ERR_ARG, "NULL data: '%s'", w.error);
  size_t zero = 0;
  rc = titans_st_writer_add_f32(&w, "nulldata_empty", NULL, 1, &zero);
  th_check(rc == TITANS_OK, "NULL data for an empty tensor is fine");
  rc = titans_st_writer_add_meta(&w, "k", "v");
  th_check(rc == TITANS_OK, "add meta");
  rc = titans_st_writer_add_meta(&w, "k", "w");
  th_check(rc == TITANS_ERR_ARG, "duplicate metadata key: '%s'", w.error);
  rc = titans_st_writer_add_meta(&w, "k2", "\xc0\x80");
  th_check(rc == TITANS_ERR_ARG, "overlong UTF-8 value: '%s'", w.error);
  th_check(w.n_tensors == 2 && w.n_meta == 1, "failed adds added nothing (%zu tensors, %zu meta)", w.n_tensors,
           w.n_meta);
  titans_st_writer_free(&w);
}

/* ---------------------------------------------------------------------------------------------- */
/* Bad files. Each must be refused with the expected status and a message; the reader is left empty. */
static void expect_bad_bytes(const char *label, const unsigned char *buf, size_t n, int want, const char *substr) {
  titans_st_reader r;
  int rc = titans_st_reader_parse(&r, buf, n);
  int ok = rc == want && r.error[0] && (!substr || strstr(r.error, substr)) && r.n_tensors == 0 && r.tensors == NULL &&
           r.strings == NULL;
  th_check(ok, "%-34s -> %s: %s", label, titans_status_string(rc), r.error);
  titans_st_reader_free(&r);
}

static void expect_bad(const char *label, const char *header, size_t data_len, const char *substr) {
  size_t n;
  unsigned char *b = mk_file(header, strlen(header), data_len, &n);
  expect_bad_bytes(label, b, n, TITANS_ERR_FORMAT, substr);
  free(b);
}

#define T4(name, dtype, shape, offs)                                                                                   \
  "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offs "}"

static void test_bad_files(void) {
  printf("malformed files\n");
  unsigned char b[64] = {0};
  expect_bad_bytes("empty file", b, 0, TITANS_ERR_FORMAT, "too short");
  expect_bad_bytes("7 bytes", b, 7, TITANS_ERR_FORMAT, "too short");
  expect_bad_bytes("NULL buffer, size 8", NULL, 8, TITANS_ERR_ARG, NULL);
  /* header length field larger than the file */
  size_t n;
  unsigned char *f = mk_file("{}", 2, 0, &n);
  f[0] = 100;
  expect_bad_bytes("header length > file", f, n, TITANS_ERR_FORMAT, "past the end");
  memset(f, 0, 8);
  f[7] = 0x80; /* 2^63 */
  expect_bad_bytes("header length 2^63", f, n, TITANS_ERR_FORMAT, "over the limit");
  memset(f, 0xFF, 8);
  expect_bad_bytes("header length 2^64-1", f, n, TITANS_ERR_FORMAT, "over the limit");
  uint64_t cap1 = (uint64_t)TITANS_ST_MAX_HEADER + 1;
  for (int i = 0; i < 8; i++) f[i] = (unsigned char)(cap1 >> (8 * i));
  expect_bad_bytes("header length = cap + 1", f, n, TITANS_ERR_FORMAT, "over the limit");
  free(f);

  expect_bad("empty header", "", 0, "not a JSON object");
  expect_bad("non-JSON", "hello, world", 0, "not a JSON object");
  expect_bad("JSON array", "[1, 2]", 0, "not a JSON object");
  expect_bad("JSON string", "\"{}\"", 0, "not a JSON object");
  expect_bad("JSON number", "42", 0, "not a JSON object");
  expect_bad("JSON null", "null", 0, "not a JSON object");
  expect_bad("trailing garbage", "{} x", 0, "trailing");
  expect_bad("two objects", "{}{}", 0, "trailing");
  f = mk_file("{}\0\0\0\0\0\0", 8, 0, &n);
  expect_bad_bytes("NUL padding (bytes)", f, n, TITANS_ERR_FORMAT, "trailing");
  free(f);
  expect_bad("unclosed object", "{", 0, "expected a string");
  expect_bad("trailing comma", "{" T4("a", "F32", "[1]", "[0,4]") ",}", 4, "expected a string");
  expect_bad("missing colon", "{\"a\" {}}", 0, "expected ':'");
  expect_bad("missing comma", "{" T4("a", "F32", "[1]", "[0,4]") T4("b", "F32", "[1]", "[4,8]") "}", 8, "expected ','");
  expect_bad("single quotes", "{'a':{}}", 0, "expected a string");

  expect_bad("missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "missing dtype");
  expect_bad("missing shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "missing shape");
  expect_bad("missing data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing data_offsets");
  expect_bad("empty entry", "{\"a\":{}}", 0, "missing dtype");
  expect_bad("entry is an array", "{\"a\":[]}", 0, "must be an object");
  expect_bad("entry is a string", "{\"a\":\"F32\"}", 0, "must be an object");
  expect_bad("dtype is a number", "{" T4("a", "F32", "[1]", "[0,4]") ",\"b\":{\"dtype\":5}}", 4,
             "dtype must be a string");
  expect_bad("shape is a string", "{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4,
             "shape must be");
  expect_bad("shape holds a string", "{" T4("a", "F32", "[1,\"2\"]", "[0,8]") "}", 8, "non-negative integer");
  expect_bad("shape holds null", "{" T4("a", "F32", "[null]", "[0,4]") "}", 4, "non-negative integer");
  expect_bad("data_offsets is an object", "{" T4("a", "F32", "[1]", "{}") "}", 4, "data_offsets must be");
  expect_bad("data_offsets of 1", "{" T4("a", "F32", "[1]", "[4]") "}", 4, "[begin, end]");
  expect_bad("data_offsets of 3", "{" T4("a", "F32", "[1]", "[0,4,4]") "}", 4, "too many");
  expect_bad("metadata is an array", "{\"__metadata__\":[\"a\"]}", 0, "__metadata__ must be");
  expect_bad("metadata value is a number", "{\"__metadata__\":{\"a\":1}}", 0, "must be strings");
  expect_bad("metadata value is an object", "{\"__metadata__\":{\"a\":{}}}", 0, "must be strings");
  expect_bad("duplicate __metadata__", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate __metadata__");
  expect_bad("duplicate metadata key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate __metadata__ key");

  expect_bad("negative shape", "{" T4("a", "F32", "[-1]", "[0,4]") "}", 4, "non-negative integer");
  expect_bad("negative offset", "{" T4("a", "F32", "[1]", "[-4,0]") "}", 4, "non-negative integer");
  expect_bad("fractional shape 1.0", "{" T4("a", "F32", "[1.0]", "[0,4]") "}", 4, "non-negative integer");
  expect_bad("exponent shape 1e0", "{" T4("a", "F32", "[1e0]", "[0,4]") "}", 4, "non-negative integer");
  expect_bad("fractional offset", "{" T4("a", "F32", "[1]", "[0,4.5]") "}", 4, "non-negative integer");
  expect_bad("leading zero 01", "{" T4("a", "F32", "[01]", "[0,4]") "}", 4, "non-negative integer");
  expect_bad("plus sign", "{" T4("a", "F32", "[+1]", "[0,4]") "}", 4, "non-negative integer");
  expect_bad("integer > 2^64", "{" T4("a", "F32", "[18446744073709551616]", "[0,4]") "}", 4, "too large");

  expect_bad("offsets past the data", "{" T4("a", "F32", "[2]", "[0,8]") "}", 4, "beyond the end");
  expect_bad("huge offsets", "{" T4("a", "F32", "[1]", "[18446744073709551611,18446744073709551615]") "}", 4, "beyond");
  expect_bad("end < begin", "{" T4("a", "F32", "[0]", "[4,0]") "}", 4, "end < begin");
  expect_bad("overlapping tensors", "{" T4("a", "F32", "[2]", "[0,8]") "," T4("b", "F32", "[2]", "[4,12]") "}", 12,
             "overlaps");
  expect_bad("same range twice", "{" T4("a", "F32", "[1]", "[0,4]") "," T4("b", "F32", "[1]", "[0,4]") "}", 4,
             "overlaps");
  expect_bad("gap between tensors", "{" T4("a", "F32", "[1]", "[0,4]") "," T4("b", "F32", "[1]", "[8,12]") "}", 12,
             "gap");
  expect_bad("data after the last tensor", "{" T4("a", "F32", "[1]", "[0,4]") "}", 8, "cover 4 bytes");
  expect_bad("no tensors but data", "{}", 4, "cover 0 bytes");
  expect_bad("size/shape mismatch", "{" T4("a", "F32", "[3]", "[0,8]") "}", 8, "does not match");
  expect_bad("size/dtype mismatch", "{" T4("a", "F64", "[2]", "[0,8]") "}", 8, "does not match");
  expect_bad("shape [2^40, 2^40]", "{" T4("a", "F32", "[1099511627776,1099511627776]", "[0,4]") "}", 4, "overflow");
  expect_bad("shape [2^62] * 4 bytes", "{" T4("a", "F32", "[4611686018427387904]", "[0,0]") "}", 0, "overflow");
  expect_bad("F4 odd count", "{" T4("a", "F4", "[3]", "[0,1]") "}", 1, "whole number of bytes");
  expect_bad("9 dimensions", "{" T4("a", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4, "too many");
  expect_bad("unknown dtype F33", "{" T4("a", "F33", "[1]", "[0,4]") "}", 4, "unknown dtype");
  expect_bad("lower-case dtype f32", "{" T4("a", "f32", "[1]", "[0,4]") "}", 4, "unknown dtype");
  expect_bad("empty dtype", "{" T4("a", "", "[1]", "[0,4]") "}", 4, "unknown dtype");
  expect_bad("duplicate names", "{" T4("a", "F32", "[1]", "[0,4]") "," T4("a", "F32", "[1]", "[4,8]") "}", 8,
             "duplicate tensor name 'a'");
  expect_bad("duplicate name via escape",
             "{" T4("a", "F32", "[1]", "[0,4]") "," T4("\\u0061", "F32", "[1]", "[4,8]") "}", 8,
             "duplicate tensor name");
  expect_bad("duplicate field", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
             "duplicate field dtype");

  expect_bad("unterminated key", "{\"a", 0, "unterminated string");
  expect_bad("unterminated value", "{\"a\":{\"dtype\":\"F32", 0, "unterminated string");
  expect_bad("unterminated escape", "{\"a\\", 0, "unterminated escape");
  expect_bad("bad escape \\x", "{\"a\\x\":{}}", 0, "bad escape");
  expect_bad("short \\u", "{\"a\\u12\":{}}", 0, "bad \\u");
  expect_bad("non-hex \\u", "{\"a\\uZZZZ\":{}}", 0, "bad \\u");
  expect_bad("lone high surrogate", "{\"a\\ud800\":{}}", 0, "surrogate");
  expect_bad("high + non-low surrogate", "{\"a\\ud800\\u0041\":{}}", 0, "surrogate");
  expect_bad("lone low surrogate", "{\"a\\udc00\":{}}", 0, "surrogate");
  expect_bad("\\u0000 in a name", "{\"a\\u0000b\":{}}", 0, "\\u0000");
  expect_bad("raw newline in a string", "{\"a\nb\":{}}", 0, "control character");
  expect_bad("invalid UTF-8 0xFF", "{\"a\xff\":{}}", 0, "UTF-8");
  expect_bad("overlong UTF-8", "{\"a\xc0\xaf\":{}}", 0, "UTF-8");
  expect_bad("UTF-8 surrogate", "{\"a\xed\xa0\x80\":{}}", 0, "UTF-8");
  expect_bad("truncated UTF-8", "{\"a\xe2\x82", 0, "UTF-8");
  expect_bad("code point > U+10FFFF", "{\"a\xf4\x90\x80\x80\":{}}", 0, "UTF-8");
  expect_bad("UTF-8 outside a string", "{\xc3\xa9}", 0, "expected a string");
  expect_bad("bad literal in unknown field", "{\"a\":{\"x\":tru}}", 0, "expected a value");
  expect_bad("bad number in unknown field", "{\"a\":{\"x\":1.}}", 0, "bad number");
  expect_bad("leading zero in unknown field", "{\"a\":{\"x\":01}}", 0, "expected ','");

  /* Names: TITANS_ST_MAX_NAME bytes is fine, one more is refused. */
  char *h = (char *)malloc(TITANS_ST_MAX_NAME + 200);
  for (int extra = 0; extra < 2; extra++) {
    size_t len = TITANS_ST_MAX_NAME + (size_t)extra;
    h[0] = '{';
    h[1] = '"';
    memset(h + 2, 'n', len);
    strcpy(h + 2 + len, "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
    f = mk_file(h, strlen(h), 4, &n);
    titans_st_reader r;
    int rc = titans_st_reader_parse(&r, f, n);
    th_check(extra ? rc == TITANS_ERR_FORMAT : rc == TITANS_OK, "name of %zu bytes -> %s %s", len,
             titans_status_string(rc), r.error);
    titans_st_reader_free(&r);
    free(f);
  }
  free(h);

  /* Deep nesting: 10000 '[' at the top, inside an unknown field, inside a shape, inside metadata. */
  size_t depth = 10000;
  char *deep = (char *)malloc(depth + 200);
  const char *prefixes[4] = {"", "{\"a\":{\"x\":", "{\"a\":{\"shape\":", "{\"__metadata__\":{\"k\":"};
  const char *expect_msg[4] = {"not a JSON object", "nested too deeply", "non-negative integer", "must be strings"};
  for (int k = 0; k < 4; k++) {
    strcpy(deep, prefixes[k]);
    size_t l = strlen(deep);
    memset(deep + l, '[', depth);
    deep[l + depth] = 0;
    char label[64];
    snprintf(label, sizeof(label), "10000 '[' (%s)",
             k == 0   ? "top"
             : k == 1 ? "unknown field"
             : k == 2 ? "shape"
                      : "metadata");
    expect_bad(label, deep, 0, expect_msg[k]);
  }
  /* The document may nest 64 containers deep: the top object, the entry and 62 arrays in an unknown
     field are accepted, 63 arrays are not (a constant limit on the recursion, not a crash). */
  for (int lv = 62; lv <= 63; lv++) {
    char *s = deep;
    s += sprintf(s, "{\"a\":{\"x\":");
    for (int i = 0; i < lv; i++) *s++ = '[';
    for (int i = 0; i < lv; i++) *s++ = ']';
    strcpy(s, ",\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}");
    f = mk_file(deep, strlen(deep), 4, &n);
    titans_st_reader r;
    int rc = titans_st_reader_parse(&r, f, n);
    th_check(lv == 62 ? rc == TITANS_OK : rc == TITANS_ERR_FORMAT, "%d nested arrays in an unknown field -> %s %s",
             lv, titans_status_string(rc), r.error);
    titans_st_reader_free(&r);
    free(f);
  }
  free(deep);
}

/* ---------------------------------------------------------------------------------------------- */
/* A small valid file for the truncation and damage tests. */
static unsigned char *valid_file(size_t *n, float **data) {
  titans_rng rng;
  titans_rng_seed(&rng, 7);
  for (size_t i = 0; i < NSPEC; i++) data[i] = make_data(&specs[i], &rng);
  titans_st_writer w;
  fill_writer(&w, data, 0);
  unsigned char *mem;
  titans_st_writer_to_memory(&w, &mem, n);
  titans_st_writer_free(&w);
  return mem;
}

/* Use everything a parsed reader offers; returns 0 when an invariant is broken. */
static int exercise(titans_st_reader *r, const unsigned char *buf, size_t n) {
  const unsigned char *data_start = buf + 8 + r->header_len;
  size_t total = 0;
  for (size_t i = 0; i < r->n_tensors; i++) {
    const titans_st_tensor *t = titans_st_tensor_at(r, i);
    if (titans_st_find(r, t->name) != t) return 0;
    if (t->data < data_start || t->nbytes > (size_t)(buf + n - t->data)) return 0;
    total += t->nbytes;
    if (t->dtype == TITANS_ST_F32) {
      float *out = (float *)malloc(t->nbytes ? t->nbytes : 1);
      int rc = titans_st_read_f32(r, t->name, out, t->ndim, t->shape);
      int same = rc == TITANS_OK && (t->nbytes == 0 || memcmp(out, t->data, t->nbytes) == 0);
      free(out);
      if (!same) return 0;
    }
  }
  if (total != (size_t)(buf + n - data_start)) return 0;
  const char *k, *v;
  for (size_t i = 0; titans_st_meta_at(r, i, &k, &v); i++)
    if (titans_st_meta(r, k) != v) return 0;
  return 1;
}

static void test_truncation(void) {
  printf("truncation at every length\n");
  float *data[NSPEC];
  size_t n;
  unsigned char *mem = valid_file(&n, data);
  size_t rejected = 0, wrong = 0;
  for (size_t len = 0; len < n; len++) {
    unsigned char *cut = (unsigned char *)malloc(len ? len : 1); /* exact size: ASan sees any over-read */
    memcpy(cut, mem, len);
    titans_st_reader r;
    int rc = titans_st_reader_parse(&r, cut, len);
    if (rc == TITANS_ERR_FORMAT && r.error[0]) rejected++;
    else wrong++;
    titans_st_reader_free(&r);
    free(cut);
  }
  th_check(wrong == 0, "%zu of %zu proper prefixes refused with a message, %zu accepted or odd status", rejected, n,
           wrong);
  titans_free(mem);
  for (size_t i = 0; i < NSPEC; i++) free(data[i]);
}

static void test_random_damage(void) {
  printf("random byte flips\n");
  float *data[NSPEC];
  size_t n;
  unsigned char *mem = valid_file(&n, data);
  size_t hlen = (size_t)mem[0] | (size_t)mem[1] << 8 | (size_t)mem[2] << 16;
  titans_rng rng;
  titans_rng_seed(&rng, 1234);
  unsigned char *buf = (unsigned char *)malloc(n);
  const int iters = 6000;
  size_t accepted = 0, rejected = 0, broken = 0, header_accepted = 0;
  for (int it = 0; it < iters; it++) {
    memcpy(buf, mem, n);
    int flips = 1 + (int)(titans_rng_u64(&rng) % 3);
    int in_header = it % 2; /* half the damage goes to the 8 + N header bytes, where it matters */
    for (int k = 0; k < flips; k++) {
      size_t range = in_header ? 8 + hlen : n;
      size_t pos = (size_t)(titans_rng_u64(&rng) % range);
      unsigned char x = (unsigned char)(1 + titans_rng_u64(&rng) % 255);
      if (it % 3 == 0) x = (unsigned char)(1u << (titans_rng_u64(&rng) % 8)); /* single-bit flips too */
      buf[pos] ^= x;
    }
    /* some iterations also change the length, so the size checks see damage as well */
    size_t len = n;
    if (it % 7 == 0) len = n - (size_t)(titans_rng_u64(&rng) % 16);
    titans_st_reader r;
    int rc = titans_st_reader_parse(&r, buf, len);
    if (rc == TITANS_OK) {
      accepted++;
      if (in_header) header_accepted++;
      if (!exercise(&r, buf, len)) broken++;
    } else if (rc == TITANS_ERR_FORMAT && r.error[0]) {
      rejected++;
    } else {
      broken++;
    }
    titans_st_reader_free(&r);
  }
  th_check(broken == 0 && accepted + rejected == (size_t)iters,
           "%d damaged files: %zu accepted (%zu with header damage) and consistent, %zu refused, %zu broken", iters,
           accepted, header_accepted, rejected, broken);
  free(buf);
  titans_free(mem);
  for (size_t i = 0; i < NSPEC; i++) free(data[i]);
}

/* Parsing allocates O(header), bounded by the file's size, however hostile; failed allocations give
   TITANS_ERR_NOMEM and leak nothing. */
static void test_allocation(void) {
  printf("allocation bounds and failures\n");
  /* 100000 tiny tensors ("a0".."a99999", shape [0]) */
  size_t count = 100000;
  size_t cap = count * 64 + 16, pos = 0;
  char *h = (char *)malloc(cap);
  h[pos++] = '{';
  for (size_t i = 0; i < count; i++)
    pos += (size_t)snprintf(h + pos, cap - pos, "%s\"a%zu\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                            i ? "," : "", i);
  h[pos++] = '}';
  size_t n;
  unsigned char *f = mk_file(h, pos, 0, &n);
  free(h);
  titans_st_reader r;
  tm_reset();
  size_t base = tm_live;
  clock_t c0 = clock();
  int rc = titans_st_reader_parse(&r, f, n);
  double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
  size_t peak = tm_peak - base;
  th_check(rc == TITANS_OK && r.n_tensors == count && peak <= 8 * n,
           "%zu tensors in a %zu-byte file: parsed in %.3f s, peak allocation %zu bytes = %.2f x the file (bound 8 x)",
           count, n, secs, peak, (double)peak / (double)n);
  titans_st_reader_free(&r);
  f[8 + pos - 2] = 'X'; /* damage the very end: everything allocated on the way must be released */
  tm_reset();
  rc = titans_st_reader_parse(&r, f, n);
  th_check(rc == TITANS_ERR_FORMAT && tm_live == base, "damaged at the end: refused, %zu bytes still allocated",
           tm_live - base);
  free(f);

  /* Every allocation failing in turn: NOMEM (or OK once past the last one), nothing leaked. */
  float *data[NSPEC];
  unsigned char *mem = valid_file(&n, data);
  base = tm_live; /* mem itself came from the library's allocator */
  size_t nomem = 0, ok = 0, other = 0;
  for (long k = 0; k < 64; k++) {
    tm_reset();
    tm_fail_at = k;
    rc = titans_st_reader_parse(&r, mem, n);
    if (rc == TITANS_ERR_NOMEM && r.error[0]) nomem++;
    else if (rc == TITANS_OK && exercise(&r, mem, n)) ok++;
    else other++;
    titans_st_reader_free(&r);
    if (tm_live != base) other++;
  }
  tm_fail_at = -1;
  th_check(other == 0 && nomem > 0,
           "reader with allocation k failing (k < 64): %zu NOMEM, %zu OK, %zu wrong or leaking", nomem, ok, other);
  nomem = ok = other = 0;
  for (long k = 0; k < 64; k++) {
    titans_st_writer w;
    tm_reset();
    tm_fail_at = k;
    titans_st_writer_init(&w);
    int add_failed = 0;
    for (size_t i = 0; i < NSPEC; i++)
      if (titans_st_writer_add_f32(&w, specs[i].name, data[i], specs[i].ndim, specs[i].shape) != TITANS_OK)
        add_failed = 1;
    for (size_t i = 0; i < NMETA; i++)
      if (titans_st_writer_add_meta(&w, meta_kv[i][0], meta_kv[i][1]) != TITANS_OK) add_failed = 1;
    unsigned char *out = NULL;
    size_t on = 0;
    rc = titans_st_writer_to_memory(&w, &out, &on);
    if (add_failed || rc == TITANS_ERR_NOMEM) nomem++;
    else if (rc == TITANS_OK && on == n && memcmp(out, mem, n) == 0) ok++;
    else other++;
    titans_free(out);
    titans_st_writer_free(&w);
    if (tm_live != base) other++;
  }
  tm_fail_at = -1;
  th_check(other == 0 && nomem > 0 && ok > 0, "writer with allocation k failing (k < 64): %zu NOMEM, %zu OK, %zu wrong",
           nomem, ok, other);
  titans_free(mem);
  for (size_t i = 0; i < NSPEC; i++) free(data[i]);
}

/* Throughput of a 16 MB tensor through memory and a file (informational; checked bit-identical). */
static void test_throughput(void) {
  printf("throughput\n");
  size_t shape[2] = {2048, 2048}, numel = 2048 * 2048;
  float *x = (float *)malloc(numel * sizeof(float)), *y = (float *)malloc(numel * sizeof(float));
  titans_rng rng;
  titans_rng_seed(&rng, 3);
  for (size_t i = 0; i < numel; i++) x[i] = titans_rng_uniform(&rng);
  char path[300];
  path_of(path, sizeof(path), "big.safetensors");
  titans_st_writer w;
  titans_st_writer_init(&w);
  titans_st_writer_add_f32(&w, "big", x, 2, shape);
  clock_t c0 = clock();
  int rc = titans_st_writer_save(&w, path);
  double ts = (double)(clock() - c0) / CLOCKS_PER_SEC;
  titans_st_reader r;
  c0 = clock();
  rc |= titans_st_reader_load(&r, path);
  rc |= titans_st_read_f32(&r, "big", y, 2, shape);
  double tl = (double)(clock() - c0) / CLOCKS_PER_SEC;
  double mb = (double)(numel * 4) / 1e6;
  /* The data are finite here, so bit-identical also shows as zero absolute and relative differences. */
  th_close("16 MB tensor through a file, |x - y|", th_all_finite(y, numel) ? th_max_abs_diff(x, y, numel) : INFINITY,
           0.0);
  th_close("16 MB tensor through a file, relative", th_max_rel_diff(y, x, numel, 1e-30), 0.0);
  th_check(rc == TITANS_OK && memcmp(x, y, numel * 4) == 0,
           "%.0f MB: save %.3f s (%.0f MB/s CPU), load + read %.3f s (%.0f MB/s CPU), bit-identical", mb, ts,
           mb / (ts > 1e-9 ? ts : 1e-9), tl, mb / (tl > 1e-9 ? tl : 1e-9));
  titans_st_reader_free(&r);
  titans_st_writer_free(&w);
  remove(path);
  free(x);
  free(y);
}

int main(void) {
  snprintf(tmp_dir_prefix, sizeof(tmp_dir_prefix), "/tmp/titans_st_%ld", (long)getpid());
  test_round_trip();
  test_atomic_and_io_errors();
  test_python_layout();
  test_read_f32_errors();
  test_writer_errors();
  test_bad_files();
  test_truncation();
  test_random_damage();
  test_allocation();
  test_throughput();
  th_check(tm_live == 0, "everything the library allocated was freed (%zu bytes live)", tm_live);
  return th_summary("test_safetensors");
}
