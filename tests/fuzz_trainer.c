/* libFuzzer target for the trainer loader (titans_trainer_read), see tests/fuzz_common.h for the input:
     make fuzz
   An accepted trainer is written again and must load to the same step, parameters and moments. */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "fuzz_common.h"

static unsigned char *tmpl;
static size_t tlen;

static void make_template(void) {
  titans_config c = fuzz_config();
  titans_model m;
  titans_trainer t;
  FUZZ_ASSERT(titans_model_init(&m, &c) == TITANS_OK);
  titans_model_init_weights(&m, 1);
  FUZZ_ASSERT(titans_trainer_init(&t, &m, NULL) == TITANS_OK);
  int toks[2 * 9];
  for (int i = 0; i < 18; i++) toks[i] = (i * 7) % 16;
  float loss;
  FUZZ_ASSERT(titans_train_step(&t, toks, 1, 2, 8, &loss) == TITANS_OK); /* moments not zero */
  titans_st_writer w;
  titans_st_writer_init(&w);
  FUZZ_ASSERT(titans_trainer_write(&t, NULL, "user string", &w) == TITANS_OK);
  FUZZ_ASSERT(titans_st_writer_to_memory(&w, &tmpl, &tlen) == TITANS_OK);
  titans_st_writer_free(&w);
  titans_trainer_free(&t);
  titans_model_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!tmpl) make_template();
  unsigned char *owned;
  size_t len;
  const unsigned char *bytes = fuzz_bytes(data, size, tmpl, tlen, &len, &owned);
  titans_st_reader r;
  if (titans_st_reader_parse(&r, bytes, len) == TITANS_OK) {
    titans_model m;
    titans_trainer t;
    char *user = NULL;
    if (titans_trainer_read(&t, &m, NULL, &user, &r) == TITANS_OK) {
      titans_st_writer w;
      titans_st_writer_init(&w);
      unsigned char *buf = NULL;
      size_t n = 0;
      FUZZ_ASSERT(titans_trainer_write(&t, NULL, user, &w) == TITANS_OK);
      FUZZ_ASSERT(titans_st_writer_to_memory(&w, &buf, &n) == TITANS_OK);
      titans_st_reader r2;
      titans_model m2;
      titans_trainer t2;
      FUZZ_ASSERT(titans_st_reader_parse(&r2, buf, n) == TITANS_OK);
      FUZZ_ASSERT(titans_trainer_read(&t2, &m2, NULL, NULL, &r2) == TITANS_OK);
      size_t nf = m.n_floats * sizeof(float);
      FUZZ_ASSERT(t2.step == t.step && m2.n_floats == m.n_floats && memcmp(m2.params, m.params, nf) == 0 &&
                  memcmp(t2.adam_m, t.adam_m, nf) == 0 && memcmp(t2.adam_v, t.adam_v, nf) == 0);
      titans_trainer_free(&t2);
      titans_model_free(&m2);
      titans_st_reader_free(&r2);
      titans_free(buf);
      titans_st_writer_free(&w);
      titans_free(user);
      titans_trainer_free(&t);
      titans_model_free(&m);
    }
    titans_st_reader_free(&r);
  }
  free(owned);
  return 0;
}
