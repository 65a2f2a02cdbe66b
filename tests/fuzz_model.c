/* libFuzzer target for the model loader (titans_model_read), see tests/fuzz_common.h for the input:
     make fuzz    (or: clang -std=c11 -g -O1 -I. -fsanitize=fuzzer,address,undefined tests/fuzz_model.c -lm)
   An accepted model is written again and must load to the same parameters; small ones run a session. */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "fuzz_common.h"

static unsigned char *tmpl;
static size_t tlen;

static void make_template(void) {
  titans_config c = fuzz_config();
  titans_model m;
  FUZZ_ASSERT(titans_model_init(&m, &c) == TITANS_OK);
  titans_model_init_weights(&m, 1);
  titans_st_writer w;
  titans_st_writer_init(&w);
  FUZZ_ASSERT(titans_model_write(&m, NULL, &w) == TITANS_OK);
  FUZZ_ASSERT(titans_st_writer_to_memory(&w, &tmpl, &tlen) == TITANS_OK);
  titans_st_writer_free(&w);
  titans_model_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!tmpl) make_template();
  unsigned char *owned;
  size_t len;
  const unsigned char *bytes = fuzz_bytes(data, size, tmpl, tlen, &len, &owned);
  titans_st_reader r;
  titans_model m;
  if (titans_st_reader_parse(&r, bytes, len) == TITANS_OK) {
    if (titans_model_read(&m, NULL, &r) == TITANS_OK) {
      titans_st_writer w;
      titans_st_writer_init(&w);
      unsigned char *buf = NULL;
      size_t n = 0;
      FUZZ_ASSERT(titans_model_write(&m, NULL, &w) == TITANS_OK);
      FUZZ_ASSERT(titans_st_writer_to_memory(&w, &buf, &n) == TITANS_OK);
      titans_st_reader r2;
      titans_model m2;
      FUZZ_ASSERT(titans_st_reader_parse(&r2, buf, n) == TITANS_OK);
      FUZZ_ASSERT(titans_model_read(&m2, NULL, &r2) == TITANS_OK);
      FUZZ_ASSERT(m2.n_floats == m.n_floats && memcmp(m2.params, m.params, m.n_floats * sizeof(float)) == 0);
      titans_model_free(&m2);
      titans_st_reader_free(&r2);
      titans_free(buf);
      titans_st_writer_free(&w);
      fuzz_run_session(&m);
      titans_model_free(&m);
    }
    titans_st_reader_free(&r);
  }
  free(owned);
  return 0;
}
