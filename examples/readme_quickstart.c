/* readme_quickstart: train a small Titans model on a text file, print a sample, save the model.
   The README shows this file as it is; `make check` compiles and runs it (tests/test_readme.sh).
     ./readme_quickstart FILE [steps]      (steps: 500 by default) */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: %s FILE [steps]\n", argv[0]); return 2; }
  long steps = argc > 2 ? atol(argv[2]) : 500;
  enum { B = 16, T = 128 };                          /* sequences per step, tokens per sequence */

  /* the text, one token per byte */
  FILE *f = fopen(argv[1], "rb");
  if (!f) { perror(argv[1]); return 1; }
  static unsigned char text[1 << 20];                /* up to 1 MB */
  size_t n = fread(text, 1, sizeof text, f);
  fclose(f);
  if (n < T + 1) { fprintf(stderr, "%s: need at least %d bytes\n", argv[1], T + 1); return 1; }

  titans_config cfg = titans_config_default(TITANS_BLOCK_MAC, 256, 128, 2); /* kind, vocab, d, layers */
  titans_model model;
  if (titans_model_init(&model, &cfg)) { fprintf(stderr, "%s\n", model.error); return 1; }
  titans_model_init_weights(&model, 1234);

  titans_trainer tr;
  titans_train_config tc = titans_train_config_for_steps(steps); /* warm-up steps / 10, cosine to the end */
  if (titans_trainer_init(&tr, &model, &tc)) { fprintf(stderr, "%s\n", tr.error); return 1; }
  static int tokens[B * (T + 1)];                    /* [B, T + 1]: inputs and their next-token targets */
  titans_rng rng;
  titans_rng_seed(&rng, 42);
  int rc = 0;
  for (long step = 0; step < steps && !rc; step++) {
    for (int b = 0; b < B; b++) {                    /* B windows of the text at random offsets */
      size_t at = (size_t)(titans_rng_u64(&rng) % (n - T));
      for (int t = 0; t <= T; t++) tokens[b * (T + 1) + t] = text[at + t];
    }
    float loss;
    rc = titans_train_step(&tr, tokens, 1, B, T, &loss);
    if (rc) fprintf(stderr, "%s\n", tr.error);
    else if ((step + 1) % 50 == 0 || step + 1 == steps) printf("step %ld: loss %.3f\n", step + 1, loss);
  }
  titans_trainer_free(&tr);

  titans_session s;                                  /* inference: bounded memory */
  if (!rc && (rc = titans_session_init(&s, &model)) != 0) fprintf(stderr, "%s\n", s.error);
  if (!rc) {
    static float logits[256];                        /* [V] after the last token fed */
    int prompt[4] = {'T', 'h', 'e', ' '};
    rc = titans_session_feed(&s, prompt, 4, logits);
    printf("The ");
    for (int i = 0; i < 200 && !rc; i++) {
      int next;                                      /* an error, not a token, on NaN logits */
      if ((rc = titans_sample_ex(logits, cfg.vocab, 0.8f, 40, 0.95f, &rng, &next)) != 0) break;
      putchar(next);
      rc = titans_session_feed(&s, &next, 1, logits);
    }
    printf("\n");
    if (rc) fprintf(stderr, "%s\n", s.error);
    titans_session_free(&s);
  }
  if (!rc && (rc = titans_model_save(&model, "model.safetensors")) != 0) fprintf(stderr, "%s\n", model.error);
  titans_model_free(&model);
  return rc ? 1 : 0;
}
