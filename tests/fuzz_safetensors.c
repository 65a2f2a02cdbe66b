/* libFuzzer target for the safetensors reader (and, on what it accepts, the writer):
     clang -std=c11 -g -O1 -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
           -o build/fuzz_safetensors tests/fuzz_safetensors.c -lm
     ./build/fuzz_safetensors -max_total_time=60 -max_len=4096 [corpus_dir]
   Every input is parsed; an accepted file has all its lookups exercised and its F32 tensors written
   back and parsed again, which must give the same tensors. Any broken invariant aborts (a finding). */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include <stdlib.h>

#define FUZZ_ASSERT(x) \
  do {                 \
    if (!(x)) abort(); \
  } while (0)

/* Write every F32 tensor and the metadata of r again, parse the result, compare. */
static void fuzz_rewrite(const titans_st_reader *r) {
  titans_st_writer w;
  titans_st_writer_init(&w);
  size_t n_f32 = 0;
  float **copies = (float **)calloc(r->n_tensors + 1, sizeof(float *));
  FUZZ_ASSERT(copies);
  for (size_t i = 0; i < r->n_tensors; i++) {
    const titans_st_tensor *t = &r->tensors[i];
    if (t->dtype != TITANS_ST_F32) continue;
    copies[i] = (float *)malloc(t->nbytes ? t->nbytes : 1);
    FUZZ_ASSERT(copies[i]);
    if (t->nbytes) memcpy(copies[i], t->data, t->nbytes); /* little-endian host */
    FUZZ_ASSERT(titans_st_writer_add_f32(&w, t->name, copies[i], t->ndim, t->shape) == TITANS_OK);
    n_f32++;
  }
  const char *k, *v;
  for (size_t i = 0; titans_st_meta_at(r, i, &k, &v); i++)
    FUZZ_ASSERT(titans_st_writer_add_meta(&w, k, v) == TITANS_OK);
  unsigned char *buf = NULL;
  size_t size = 0;
  FUZZ_ASSERT(titans_st_writer_to_memory(&w, &buf, &size) == TITANS_OK);
  titans_st_reader r2;
  FUZZ_ASSERT(titans_st_reader_parse(&r2, buf, size) == TITANS_OK);
  FUZZ_ASSERT(r2.n_tensors == n_f32 && r2.n_meta == r->n_meta);
  for (size_t i = 0; i < r2.n_tensors; i++) {
    const titans_st_tensor *a = &r2.tensors[i], *b = titans_st_find(r, a->name);
    FUZZ_ASSERT(b && b->dtype == TITANS_ST_F32 && a->ndim == b->ndim && a->nbytes == b->nbytes);
    FUZZ_ASSERT(memcmp(a->shape, b->shape, sizeof(a->shape)) == 0);
    FUZZ_ASSERT(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
  }
  for (size_t i = 0; titans_st_meta_at(r, i, &k, &v); i++) {
    const char *v2 = titans_st_meta(&r2, k);
    FUZZ_ASSERT(v2 && strcmp(v, v2) == 0);
  }
  titans_st_reader_free(&r2);
  titans_free(buf);
  for (size_t i = 0; i < r->n_tensors; i++) free(copies[i]);
  free(copies);
  titans_st_writer_free(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  titans_st_reader r;
  int rc = titans_st_reader_parse(&r, data, size);
  if (rc != TITANS_OK) {
    FUZZ_ASSERT(rc == TITANS_ERR_FORMAT && r.error[0] && r.n_tensors == 0 && !r.tensors && !r.strings);
    titans_st_reader_free(&r);
    return 0;
  }
  /* Invariants of an accepted file: names sorted and unique, each tensor's bytes inside the data
     region, the ranges tiling it exactly. */
  const uint8_t *data_start = data + 8 + r.header_len;
  size_t covered = 0;
  for (size_t i = 0; i < r.n_tensors; i++) {
    const titans_st_tensor *t = titans_st_tensor_at(&r, i);
    FUZZ_ASSERT(t && titans_st_find(&r, t->name) == t);
    if (i) FUZZ_ASSERT(strcmp(r.tensors[i - 1].name, t->name) < 0);
    FUZZ_ASSERT(t->ndim <= TITANS_ST_MAX_DIMS && strlen(t->name) <= TITANS_ST_MAX_NAME);
    FUZZ_ASSERT(t->data >= data_start && t->data + t->nbytes <= data + size);
    FUZZ_ASSERT(t->nbytes * 8 == t->numel * titans_st_dtype_bits(t->dtype));
    covered += t->nbytes;
    if (t->dtype == TITANS_ST_F32) {
      float *out = (float *)malloc(t->nbytes ? t->nbytes : 1);
      FUZZ_ASSERT(out);
      FUZZ_ASSERT(titans_st_read_f32(&r, t->name, out, t->ndim, t->shape) == TITANS_OK);
      FUZZ_ASSERT(t->nbytes == 0 || memcmp(out, t->data, t->nbytes) == 0);
      /* a wrong shape must be refused with a message, out untouched */
      size_t wrong[TITANS_ST_MAX_DIMS + 1];
      memcpy(wrong, t->shape, sizeof(t->shape));
      wrong[t->ndim] = 2;
      FUZZ_ASSERT(titans_st_read_f32(&r, t->name, out, t->ndim + 1, wrong) != TITANS_OK && r.error[0]);
      free(out);
    } else {
      float dummy;
      FUZZ_ASSERT(titans_st_read_f32(&r, t->name, &dummy, t->ndim, t->shape) == TITANS_ERR_FORMAT);
    }
  }
  FUZZ_ASSERT(covered == (size_t)(data + size - data_start));
  const char *k, *v;
  for (size_t i = 0; titans_st_meta_at(&r, i, &k, &v); i++) FUZZ_ASSERT(titans_st_meta(&r, k) == v);
  FUZZ_ASSERT(titans_st_find(&r, "\x01 surely absent") == NULL);
  fuzz_rewrite(&r);
  titans_st_reader_free(&r);
  return 0;
}
