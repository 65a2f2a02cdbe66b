/* Long-context instruments: the retrieval generators of examples/longctx.h (deterministic, the needle at
   the asked depth, the asked length), and the program's `eval` and `needle` commands on tiny models,
   checked against a direct computation through a session here. Every SVG they write must be well-formed
   XML (a small checker below: balanced tags, quoted attributes, escaped text).
   The program is the `titans` next to this binary (make check builds both into the same folder). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "tests/harness.h"
#include "examples/default_text.h"
#include "examples/longctx.h"

#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

/* ---- generators ------------------------------------------------------------------------------------ */

/* The index of the first occurrence of needle [n] in the example's tokens, or SIZE_MAX. */
static size_t find_in_example(const longctx_example *ex, const char *needle) {
  size_t n = strlen(needle), total = ex->length + ex->answer_len;
  for (size_t i = 0; i + n <= total; i++) {
    size_t k = 0;
    while (k < n && longctx_token(ex, i + k) == (unsigned char)needle[k]) k++;
    if (k == n) return i;
  }
  return SIZE_MAX;
}

static size_t count_in_example(const longctx_example *ex, const char *needle) {
  size_t n = strlen(needle), total = ex->length + ex->answer_len, count = 0;
  for (size_t i = 0; i + n <= total; i++) {
    size_t k = 0;
    while (k < n && longctx_token(ex, i + k) == (unsigned char)needle[k]) k++;
    count += k == n;
  }
  return count;
}

static void test_determinism(const int *source, size_t source_len) {
  for (int kind = 0; kind < 3; kind++) {
    longctx_example a, b, c;
    char err[200];
    longctx_example_init(&a, kind, 4096, 0.3, 77, source, source_len, NULL, err);
    longctx_example_init(&b, kind, 4096, 0.3, 77, source, source_len, NULL, err);
    longctx_example_init(&c, kind, 4096, 0.3, 78, source, source_len, NULL, err);
    size_t same = 0, differ = 0;
    for (size_t i = 0; i < 4096 + a.answer_len; i++) {
      same += longctx_token(&a, i) == longctx_token(&b, i);
      differ += longctx_token(&a, i) != longctx_token(&c, i);
    }
    th_check(same == 4096 + a.answer_len, "%s: the same seed gives the same %zu tokens (%zu equal)",
             longctx_kind_name(kind), 4096 + a.answer_len, same);
    th_check(differ > 0 && strcmp(a.answer, c.answer) != 0, "%s: another seed another example (answers %s, %s)",
             longctx_kind_name(kind), a.answer, c.answer);
    /* pieces of any size give the same tokens: what the program feeds */
    int piece[1000];
    size_t bad = 0;
    for (size_t from = 0; from < 4096; from += 1000) {
      size_t n = 4096 - from < 1000 ? 4096 - from : 1000;
      longctx_tokens(&a, from, piece, n);
      for (size_t i = 0; i < n; i++) bad += piece[i] != longctx_token(&b, from + i);
    }
    th_check(bad == 0, "%s: longctx_tokens in pieces of 1000 = token by token (%zu differ)", longctx_kind_name(kind),
             bad);
  }
}

/* The needle once, at the asked depth within one sentence; the question last; the answer after it. */
static void test_layout(int kind, const int *source, size_t source_len) {
  const size_t lengths[4] = {160, 1000, 4096, 65536};
  const double depths[5] = {0.0, 0.1, 0.5, 0.9, 1.0};
  /* the longest sentence of the passkey filler is 22 bytes; prose looks back LONGCTX_SNAP_BACK at most */
  const double tolerance = kind != LONGCTX_PROSE ? 22 : LONGCTX_SNAP_BACK; /* passkey and copy share the filler */
  double worst_depth = 0;
  size_t bad_length = 0, bad_count = 0, bad_question = 0, bad_answer = 0, bad_start = 0, cases = 0;
  for (size_t li = 0; li < 4; li++)
    for (size_t di = 0; di < 5; di++)
      for (uint64_t seed = 1; seed <= 3; seed++) {
        longctx_example ex;
        char err[200];
        if (longctx_example_init(&ex, kind, lengths[li], depths[di], seed * 1000 + li, source, source_len, NULL, err) !=
            0) {
          th_check(0, "%s: init at length %zu: %s", longctx_kind_name(kind), lengths[li], err);
          continue;
        }
        cases++;
        size_t at = find_in_example(&ex, ex.needle);
        bad_count += count_in_example(&ex, ex.needle) != 1;
        /* the filler before the needle, as a fraction of all the filler */
        size_t filler = lengths[li] - ex.question_len - ex.needle_len;
        double target = depths[di] * (double)filler, off = target - (double)at;
        worst_depth = fmax(worst_depth, at == SIZE_MAX || off < 0 ? 1e9 : off);
        bad_start +=
            at != SIZE_MAX && at > 0 && !(longctx_token(&ex, at - 1) == ' ' || longctx_token(&ex, at - 1) == '\n');
        size_t q = find_in_example(&ex, ex.question);
        bad_question += q != lengths[li] - ex.question_len;
        bad_length += ex.length != lengths[li];
        for (size_t i = 0; i < ex.answer_len; i++) {
          int t = longctx_token(&ex, lengths[li] + i), first = longctx_first_symbol(kind);
          bad_answer += t != (unsigned char)ex.answer[i] || t < first || t >= first + longctx_alphabet(kind);
        }
      }
  const char *name = longctx_kind_name(kind);
  th_check(bad_count == 0, "%s: the needle appears exactly once (%zu cases, %zu wrong)", name, cases, bad_count);
  th_check(worst_depth < tolerance, "%s: the needle starts within %.0f bytes before depth * filler (worst %.0f)", name,
           tolerance, worst_depth);
  th_check(bad_start == 0, "%s: the needle starts a sentence (%zu do not)", name, bad_start);
  th_check(bad_question == 0 && bad_length == 0,
           "%s: context + question = the asked length, the question last (%zu, %zu wrong)", name, bad_length,
           bad_question);
  th_check(bad_answer == 0, "%s: the answer (digits, letters for copy) follows the question (%zu wrong)", name,
           bad_answer);
}

static void test_digits_uniform(void) {
  size_t count[10] = {0}, n = 0;
  for (uint64_t seed = 0; seed < 2000; seed++) {
    longctx_example ex;
    char err[200];
    longctx_example_init(&ex, LONGCTX_PASSKEY, 200, 0.5, longctx_eval_seed(5, 200, 0.5, seed), NULL, 0, NULL, err);
    for (size_t i = 0; i < ex.answer_len; i++) count[ex.answer[i] - '0']++, n++;
  }
  double worst = 0;
  for (int d = 0; d < 10; d++) worst = fmax(worst, fabs((double)count[d] / (double)n - 0.1));
  th_check(worst < 0.015, "answer digits are uniform: largest deviation from 0.1 over %zu digits is %.4f", n, worst);
  longctx_example a, b;
  char err[200];
  longctx_example_init(&a, LONGCTX_PASSKEY, 200, -1, 9, NULL, 0, NULL, err);
  longctx_example_init(&b, LONGCTX_PASSKEY, 200, -1, 10, NULL, 0, NULL, err);
  th_check(a.depth >= 0 && a.depth < 1 && a.depth != b.depth, "a negative depth is drawn uniformly (%.3f, %.3f)",
           a.depth, b.depth);
  th_check(longctx_example_init(&a, LONGCTX_PASSKEY, 100, 0.5, 1, NULL, 0, NULL, err) != 0,
           "a too short length is refused: %s", err);
}

/* Several keyed needles (prose): every needle once, each with a key word of its own, the question asking
   for the first drawn (placed at the asked depth), its number the answer; held-out words from their own
   list, random words 4 to 8 letters and none held out; one needle with no options = the single-needle
   example byte for byte, and random words change nothing but the words. */
/* Whether source [source_len] holds word as a whole word (a run of letters, either case). */
static int source_has_word(const int *source, size_t source_len, const char *word) {
  size_t len = strlen(word);
  for (size_t at = 0; at + len <= source_len; at++) {
    if (at > 0 && longctx_is_letter(source[at - 1])) continue;
    if (at + len < source_len && longctx_is_letter(source[at + len])) continue;
    size_t i = 0;
    while (i < len && (source[at + i] | 0x20) == word[i]) i++;
    if (i == len) return 1;
  }
  return 0;
}

/* Whether word belongs to word set `set` (LONGCTX_WORDS_RANDOM: 4 to 8 lowercase letters, no held-out word;
   LONGCTX_WORDS_TEXT: a whole word of the source, 5 to 8 letters, lowered, no held-out word). */
static int word_in_set(const char *word, int set, const int *source, size_t source_len) {
  int listed = 0, trained = 0;
  for (int j = 0; j < 16; j++) listed |= !strcmp(word, longctx_heldout_words[j]);
  for (int j = 0; j < 16; j++) trained |= !strcmp(word, longctx_words[j]);
  if (set == LONGCTX_WORDS_HELDOUT) return listed;
  if (set == LONGCTX_WORDS_TRAIN) return trained;
  size_t len = strlen(word), letters = 0;
  for (size_t i = 0; i < len; i++) letters += word[i] >= 'a' && word[i] <= 'z';
  if (set == LONGCTX_WORDS_TEXT)
    return !listed && len >= 5 && len <= 8 && letters == len && source_has_word(source, source_len, word);
  return !listed && len >= 4 && len <= 8 && letters == len;
}

static void test_needles(const int *source, size_t source_len) {
  size_t cases = 0, bad_once = 0, bad_words = 0, bad_question = 0, bad_answer = 0, bad_pieces = 0, bad_set = 0;
  size_t bad_marks = 0;
  for (int n = 1; n <= LONGCTX_MAX_NEEDLES; n++)
    for (int set = 0; set <= LONGCTX_WORDS_TEXT; set++)
      for (uint64_t seed = 1; seed <= 4; seed++) {
        longctx_example ex;
        longctx_options opt = {n, set, 0, 0.0, 0.0, 0, 0};
        char err[200], asked[160];
        size_t length = seed % 2 ? 1000 : 4096;
        if (longctx_example_init(&ex, LONGCTX_PROSE, length, 0.3, seed * 77 + (uint64_t)n, source, source_len, &opt,
                                 err) != 0) {
          th_check(0, "prose, %d needles, length %zu: %s", n, length, err);
          continue;
        }
        cases++;
        for (size_t k = 0; k < ex.n_needles; k++) bad_once += count_in_example(&ex, ex.others[k]) != 1;
        /* longctx_mark_needles: as many marks as needle bytes, and every needle's bytes marked */
        unsigned char mark[4096];
        size_t marked = 0, needle_bytes = 0;
        longctx_mark_needles(&ex, mark, length);
        for (size_t i = 0; i < length; i++) marked += mark[i];
        for (size_t k = 0; k < ex.n_needles; k++) {
          size_t at = find_in_example(&ex, ex.others[k]);
          needle_bytes += ex.others_len[k];
          for (size_t j = 0; j < ex.others_len[k]; j++) bad_marks += at + j >= length || !mark[at + j];
        }
        bad_marks += marked != needle_bytes;
        for (int i = 0; i < n; i++) {
          bad_set += !word_in_set(ex.words[i], set, source, source_len);
          for (int j = 0; j < i; j++) bad_words += !strcmp(ex.words[i], ex.words[j]);
        }
        snprintf(asked, sizeof asked, "The special magic number for %s is %s. ", ex.words[0], ex.answer);
        bad_answer += strcmp(asked, ex.needle) != 0 || find_in_example(&ex, asked) != ex.needle_at;
        snprintf(asked, sizeof asked, "What is the special magic number for %s?", ex.words[0]);
        bad_question += find_in_example(&ex, asked) != length - ex.question_len;
        int piece[700];
        for (size_t from = 0; from < length; from += 700) {
          size_t m = length - from < 700 ? length - from : 700;
          longctx_tokens(&ex, from, piece, m);
          for (size_t i = 0; i < m; i++) bad_pieces += piece[i] != longctx_token(&ex, from + i);
        }
      }
  th_check(cases == 4 * 4 * LONGCTX_MAX_NEEDLES, "prose with 1-%d needles: every example set up (%zu)",
           LONGCTX_MAX_NEEDLES, cases);
  th_check(bad_once == 0, "every needle appears exactly once (%zu wrong)", bad_once);
  th_check(bad_words == 0 && bad_set == 0, "the needles' key words differ and come from the asked set (%zu, %zu wrong)",
           bad_words, bad_set);
  th_check(bad_answer == 0 && bad_question == 0, "the question asks for the first needle, whose number is the answer "
           "(%zu, %zu wrong)", bad_answer, bad_question);
  th_check(bad_pieces == 0, "several needles: longctx_tokens in pieces = token by token (%zu differ)", bad_pieces);
  th_check(bad_marks == 0, "longctx_mark_needles marks every needle's bytes and nothing else (%zu wrong)", bad_marks);
  longctx_example a, b;
  longctx_options one = {1, LONGCTX_WORDS_TRAIN, 0, 0.0, 0.0, 0, 0};
  char err[200];
  longctx_example_init(&a, LONGCTX_PROSE, 4096, 0.5, 99, source, source_len, NULL, err);
  longctx_example_init(&b, LONGCTX_PROSE, 4096, 0.5, 99, source, source_len, &one, err);
  size_t differ = 0;
  for (size_t i = 0; i < 4096 + a.answer_len; i++) differ += longctx_token(&a, i) != longctx_token(&b, i);
  th_check(differ == 0, "one needle through the options = the single-needle example (%zu tokens differ)", differ);
  longctx_options random_one = {1, LONGCTX_WORDS_RANDOM, 0, 0.0, 0.0, 0, 0};
  longctx_example_init(&b, LONGCTX_PROSE, 4096, 0.5, 99, source, source_len, &random_one, err);
  th_check(a.source_offset == b.source_offset && !strcmp(a.answer, b.answer) && strcmp(a.words[0], b.words[0]),
           "random key words draw from a stream of their own: the filler's place and the number stay (%s, %s)",
           a.words[0], b.words[0]);
  longctx_options text_one = {1, LONGCTX_WORDS_TEXT, 0, 0.0, 0.0, 0, 0};
  longctx_example_init(&b, LONGCTX_PROSE, 4096, 0.5, 99, source, source_len, &text_one, err);
  th_check(a.source_offset == b.source_offset && !strcmp(a.answer, b.answer) && strcmp(a.words[0], b.words[0]),
           "words of the text draw from a stream of their own: the filler's place and the number stay (%s, %s)",
           a.words[0], b.words[0]);
  /* a source with one word of 5 to 8 letters: 8 needles need 8 words, so the others are random letters */
  static const char few[] = "a bb ccc dddd eeeee ffffffffff ";
  int few_ids[sizeof few - 1];
  for (size_t i = 0; i < sizeof few - 1; i++) few_ids[i] = (unsigned char)few[i];
  longctx_options text_eight = {8, LONGCTX_WORDS_TEXT, 0, 0.0, 0.0, 0, 0};
  int few_ok = longctx_example_init(&b, LONGCTX_PROSE, 4096, 0.5, 5, few_ids, sizeof few - 1, &text_eight, err) == 0;
  size_t from_text = 0, random_ok = 0;
  for (int k = 0; few_ok && k < 8; k++) {
    from_text += !strcmp(b.words[k], "eeeee");
    random_ok += word_in_set(b.words[k], LONGCTX_WORDS_RANDOM, NULL, 0);
  }
  th_check(few_ok && from_text == 1 && random_ok == 8,
           "a text with too few words: one key word from it, the others random letters (%zu, %zu of 8)", from_text,
           random_ok);
  int names_ok = longctx_word_set_parse("bogus") == -1;
  for (int set = 0; set <= LONGCTX_WORDS_TEXT; set++) names_ok &= longctx_word_set_parse(longctx_word_set_name(set)) == set;
  th_check(names_ok, "every word set's name parses back to it, and an unknown name to -1");
  longctx_options two = {2, LONGCTX_WORDS_TRAIN, 0, 0.0, 0.0, 0, 0};
  th_check(longctx_example_init(&a, LONGCTX_PASSKEY, 4096, 0.5, 1, NULL, 0, &two, err) != 0,
           "several needles are refused for the passkey: %s", err);
  longctx_options eight = {8, LONGCTX_WORDS_TRAIN, 0, 0.0, 0.0, 0, 0};
  th_check(longctx_example_init(&a, LONGCTX_PROSE, 300, 0.5, 1, source, source_len, &eight, err) != 0,
           "a length too short for its needles is refused: %s", err);
}

/* Alike key words (longctx_options.alike_words): every further needle's word has as many letters as the
   asked one's and differs from the others, from the asked set or (too few of that length) random letters;
   the asked needle's own draws (its number, word and the filler's place) are those without the option. */
static void test_alike_words(const int *source, size_t source_len) {
  size_t cases = 0, bad_len = 0, bad_dup = 0, bad_set = 0, bad_asked = 0, random_words = 0;
  for (int n = 2; n <= LONGCTX_MAX_NEEDLES; n++)
    for (int set = 0; set <= LONGCTX_WORDS_TEXT; set++)
      for (uint64_t seed = 1; seed <= 6; seed++) {
        longctx_example ex, plain;
        longctx_options opt = {n, set, 0, 0.0, 0.0, 1, 0}, any = {n, set, 0, 0.0, 0.0, 0, 0};
        char err[200];
        uint64_t example_seed = seed * 53 + (uint64_t)n;
        if (longctx_example_init(&ex, LONGCTX_PROSE, 4096, 0.4, example_seed, source, source_len, &opt, err) != 0 ||
            longctx_example_init(&plain, LONGCTX_PROSE, 4096, 0.4, example_seed, source, source_len, &any, err) != 0) {
          th_check(0, "alike words, %d needles, set %d: %s", n, set, err);
          continue;
        }
        cases++;
        bad_asked += strcmp(ex.words[0], plain.words[0]) || strcmp(ex.answer, plain.answer) ||
                     ex.source_offset != plain.source_offset;
        for (int k = 1; k < n; k++) {
          bad_len += strlen(ex.words[k]) != strlen(ex.words[0]);
          for (int j = 0; j < k; j++) bad_dup += !strcmp(ex.words[j], ex.words[k]);
          int in_set = word_in_set(ex.words[k], set, source, source_len);
          random_words += !in_set;
          bad_set += !in_set && !word_in_set(ex.words[k], LONGCTX_WORDS_RANDOM, NULL, 0);
        }
      }
  th_check(cases == 7 * 4 * 6, "alike words: every example set up (%zu)", cases);
  th_check(bad_len == 0 && bad_dup == 0, "alike words: every further key word as long as the asked one's, all "
           "different (%zu, %zu wrong)", bad_len, bad_dup);
  th_check(bad_set == 0 && random_words > 0, "alike words: from the asked set, or random letters where it has too "
           "few of that length (%zu wrong; %zu random)", bad_set, random_words);
  th_check(bad_asked == 0, "alike words: the asked needle's number, word and filler place as without them (%zu "
           "differ)", bad_asked);
}

/* longctx_answer_kind: a wrong answer is a binding when it agrees with another needle's number at more
   places than with the asked one's, whole when it is that number; digits otherwise, ties included. */
static void test_answer_kind(void) {
  longctx_example ex;
  memset(&ex, 0, sizeof ex);
  ex.answer_len = 7, ex.n_needles = 3;
  strcpy(ex.answer, "1052650");
  strcpy(ex.numbers[0], "1052650");
  strcpy(ex.numbers[1], "1036278");
  strcpy(ex.numbers[2], "9580066");
  static const struct { const char *answer; int kind; } cases[] = {
      {"1052650", LONGCTX_ANSWER_RIGHT},   {"1052658", LONGCTX_ANSWER_DIGITS},  /* one place wrong */
      {"1036278", LONGCTX_ANSWER_WHOLE},   {"1056278", LONGCTX_ANSWER_BINDING}, /* 3 places asked, 6 "1036278" */
      {"1036650", LONGCTX_ANSWER_DIGITS},  /* 5 and 4 places: closer to the asked */
      {"1030000", LONGCTX_ANSWER_DIGITS},  /* 3 and 3 ("1036278"): a tie counts as digits */
      {"0000000", LONGCTX_ANSWER_DIGITS},  /* 2 and 2 ("9580066") */
      {"9580066", LONGCTX_ANSWER_WHOLE},   {"9000066", LONGCTX_ANSWER_BINDING}, /* 1 and 5 ("9580066") */
      {"105265", LONGCTX_ANSWER_DIGITS},   /* a short answer: 6 places of the asked */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    th_check(longctx_answer_kind(&ex, cases[i].answer) == cases[i].kind, "answer %s to %s among %s, %s: kind %d",
             cases[i].answer, ex.answer, ex.numbers[1], ex.numbers[2], cases[i].kind);
  ex.n_needles = 1; /* one needle: nothing to bind to */
  th_check(longctx_answer_kind(&ex, "1036278") == LONGCTX_ANSWER_DIGITS, "one needle: every miss is digits");
}

/* longctx_needles_after: the needles the context holds after the asked one, against the asked needle's text
   found among the needles in context order; every count from 0 to 3 turns up over the depths. */
static void test_needles_after(const int *source, size_t source_len) {
  size_t wrong = 0, seen[LONGCTX_MAX_NEEDLES] = {0};
  for (int trial = 0; trial < 40; trial++) {
    longctx_options opt = {4, LONGCTX_WORDS_HELDOUT, 0, 0.0, 0.0, 0, 0};
    longctx_example ex;
    char why[200];
    double depth = 0.05 + 0.9 * (trial % 10) / 9.0;
    if (longctx_example_init(&ex, LONGCTX_PROSE, 4096, depth, 900 + (uint64_t)trial, source, source_len, &opt, why)) {
      th_check(0, "example: %s", why);
      return;
    }
    size_t asked = SIZE_MAX;
    for (size_t k = 0; k < ex.n_needles; k++)
      if (ex.others_len[k] == ex.needle_len && !memcmp(ex.others[k], ex.needle, ex.needle_len)) asked = k;
    size_t after = longctx_needles_after(&ex);
    wrong += asked == SIZE_MAX || after != ex.n_needles - 1 - asked;
    seen[after < LONGCTX_MAX_NEEDLES ? after : 0]++;
  }
  th_check(wrong == 0, "needles after the asked one: as its text's place among the needles says (%zu of 40 wrong)", wrong);
  th_check(seen[0] && seen[1] && seen[2] && seen[3], "every count 0..3 occurs over the depths (%zu %zu %zu %zu)",
           seen[0], seen[1], seen[2], seen[3]);
}

/* Alike numbers (longctx_options.alike_numbers): with 1 every further needle's number starts with exactly
   the asked one's first 1 to 6 digits (the digit after them differs), every count drawn, spread about
   evenly; with 0.5 about half of them do and the others keep their own digits; everything else in the
   example (words, numbers' later digits, depths, filler) as without the option. */
static void test_alike_numbers(const int *source, size_t source_len) {
  size_t cases = 0, further = 0, bad_prefix = 0, bad_rest = 0, bad_other = 0, count[8] = {0};
  size_t half_further = 0, half_alike = 0, half_bad = 0;
  for (int n = 2; n <= LONGCTX_MAX_NEEDLES; n++)
    for (uint64_t seed = 1; seed <= 40; seed++) {
      longctx_example ex, half, plain;
      longctx_options all = {n, LONGCTX_WORDS_TEXT, 0, 0.0, 0.0, 0, 1.0}, some = all, any = all;
      some.alike_numbers = 0.5, any.alike_numbers = 0.0;
      char err[200];
      uint64_t example_seed = seed * 71 + (uint64_t)n;
      if (longctx_example_init(&ex, LONGCTX_PROSE, 4096, 0.3, example_seed, source, source_len, &all, err) != 0 ||
          longctx_example_init(&half, LONGCTX_PROSE, 4096, 0.3, example_seed, source, source_len, &some, err) != 0 ||
          longctx_example_init(&plain, LONGCTX_PROSE, 4096, 0.3, example_seed, source, source_len, &any, err) != 0) {
        th_check(0, "alike numbers, %d needles: %s", n, err);
        continue;
      }
      cases++;
      bad_other += strcmp(ex.answer, plain.answer) || ex.source_offset != plain.source_offset ||
                   memcmp(ex.insert_at, plain.insert_at, sizeof ex.insert_at) != 0;
      for (int k = 1; k < n; k++) {
        size_t shared = 0;
        while (shared < ex.answer_len && ex.numbers[k][shared] == ex.answer[shared]) shared++;
        further++;
        bad_prefix += shared < 1 || shared > ex.answer_len - 1;
        if (shared <= 6) count[shared]++;
        /* past the digit where they part, the digits drawn without the option */
        bad_rest += strcmp(ex.numbers[k] + shared + 1, plain.numbers[k] + shared + 1) != 0;
        bad_other += strcmp(ex.words[k], plain.words[k]) != 0;
        /* a fraction: each further number either the one with all alike or the one without */
        half_further++;
        int is_alike = !strcmp(half.numbers[k], ex.numbers[k]) && strcmp(ex.numbers[k], plain.numbers[k]);
        half_alike += is_alike;
        half_bad += !is_alike && strcmp(half.numbers[k], plain.numbers[k]);
      }
    }
  th_check(cases == 7 * 40, "alike numbers: every example set up (%zu)", cases);
  th_check(bad_prefix == 0, "alike numbers: every further number shares 1 to 6 first digits with the asked one "
           "(%zu of %zu wrong)", bad_prefix, further);
  int spread = 1;
  for (int p = 1; p <= 6; p++) spread &= count[p] > further / 12; /* each count near 1/6 of them */
  th_check(spread, "alike numbers: 1 to 6 shared digits each drawn (%zu %zu %zu %zu %zu %zu of %zu)", count[1],
           count[2], count[3], count[4], count[5], count[6], further);
  th_check(bad_rest == 0 && bad_other == 0, "alike numbers: the later digits, words, places and filler as without "
           "the option (%zu, %zu differ)", bad_rest, bad_other);
  double frac = (double)half_alike / (double)half_further;
  th_check(half_bad == 0 && frac > 0.42 && frac < 0.58, "alike numbers 0.5: %.2f of the further numbers alike, the "
           "others their own digits (%zu neither)", frac, half_bad);
}

/* The questions for the needles not asked at the end (longctx_other_questions): one per other needle,
   its own word and number, none for the asked word, all after the last needle; nothing with one needle
   or with a needle at the very end of the context. */
static void test_other_questions(const int *source, size_t source_len) {
  size_t cases = 0, bad_count = 0, bad_answer = 0, bad_question = 0, bad_place = 0;
  for (int n = 2; n <= 4; n++)
    for (uint64_t seed = 1; seed <= 6; seed++) {
      longctx_example ex;
      longctx_options opt = {n, LONGCTX_WORDS_TEXT, 0, 0.0, 0.0, 0, 0};
      char err[200], text[LONGCTX_MAX_NEEDLES * 160], want[160];
      size_t at[LONGCTX_MAX_NEEDLES], n_at = 0;
      if (longctx_example_init(&ex, LONGCTX_PROSE, 4096, 0.3, seed * 31 + (uint64_t)n, source, source_len, &opt, err))
        continue;
      size_t len = longctx_other_questions(&ex, text, sizeof text, at, &n_at);
      if (len == 0) continue; /* a needle drawn too near the end: checked below */
      cases++;
      bad_count += n_at != (size_t)n - 1;
      for (size_t k = 1; k <= n_at; k++) {
        bad_answer += memcmp(text + at[k - 1], ex.numbers[k], ex.answer_len) != 0;
        snprintf(want, sizeof want, "What is the special magic number for %s? The special magic number for %s is %s. ",
                 ex.words[k], ex.words[k], ex.numbers[k]);
        bad_question += strstr(text, want) == NULL;
      }
      snprintf(want, sizeof want, "number for %s?", ex.words[0]);
      bad_question += strstr(text, want) != NULL;
      bad_place += longctx_needles_end(&ex) + len > ex.context_len;
    }
  th_check(cases >= 12, "other questions: asked in %zu of 18 examples of 2 to 4 needles", cases);
  th_check(!bad_count && !bad_answer && !bad_question && !bad_place,
           "other questions: one per other needle with its own number, none for the asked word, after the last needle "
           "(%zu, %zu, %zu, %zu wrong)", bad_count, bad_answer, bad_question, bad_place);
  longctx_example ex;
  longctx_options one = {1, LONGCTX_WORDS_TEXT, 0, 0.0, 0.0, 0, 0}, three = {3, LONGCTX_WORDS_TEXT, 0, 0.0, 0.0, 0, 0};
  char err[200], text[LONGCTX_MAX_NEEDLES * 160];
  size_t at[LONGCTX_MAX_NEEDLES], n_at = 9;
  longctx_example_init(&ex, LONGCTX_PROSE, 4096, 0.3, 7, source, source_len, &one, err);
  size_t none_one = longctx_other_questions(&ex, text, sizeof text, at, &n_at);
  th_check(none_one == 0 && n_at == 0, "other questions: none with one needle");
  longctx_example_init(&ex, LONGCTX_PROSE, 4096, 1.0, 7, source, source_len, &three, err);
  size_t none_end = longctx_other_questions(&ex, text, sizeof text, at, &n_at);
  th_check(none_end == 0 && n_at == 0, "other questions: none when the asked needle ends the context (%zu bytes)",
           none_end);
}

/* --ask-earlier's bindings: a word asked is one an earlier example bound and the current one does not,
   with the number it was bound to last; an example with nothing askable asks nothing; a full table
   drops its oldest binding. */
static void test_earlier_questions(const int *source, size_t source_len) {
  longctx_bindings b;
  longctx_bindings_clear(&b);
  longctx_options opt = {3, LONGCTX_WORDS_TRAIN, 0, 0.0, 0.0, 0, 0};
  char err[200], text[200], want[200];
  size_t at = 0, asked = 0, bad_word = 0, bad_number = 0, bad_text = 0, rebound = 0, distinct_bad = 0;
  longctx_example ex;
  longctx_example_init(&ex, LONGCTX_PROSE, 4096, 0.5, 1, source, source_len, &opt, err);
  th_check(longctx_earlier_question(&b, &ex, 1, text, sizeof text, &at) == 0, "earlier questions: none before any binding");
  /* a reference of every binding: the last number of each of the 16 training words, and the example it came from */
  char last[16][24];
  long from[16];
  for (int w = 0; w < 16; w++) last[w][0] = 0, from[w] = -1;
  for (uint64_t seed = 1; seed <= 200; seed++) {
    if (longctx_example_init(&ex, LONGCTX_PROSE, 4096, 0.5, seed * 7919, source, source_len, &opt, err)) continue;
    size_t len = longctx_earlier_question(&b, &ex, seed, text, sizeof text, &at);
    if (len) {
      asked++;
      int w = 0;
      while (w < 16 && strncmp(text + 37, longctx_words[w], strlen(longctx_words[w])) != 0) w++;
      int in_ex = 0;
      for (size_t k = 0; w < 16 && k < ex.n_needles; k++) in_ex |= !strcmp(ex.words[k], longctx_words[w]);
      bad_word += w == 16 || in_ex || from[w] < 0;
      if (w < 16) {
        bad_number += memcmp(text + at, last[w], ex.answer_len) != 0;
        snprintf(want, sizeof want, "What is the special magic number for %s? The special magic number for %s is %s. ",
                 longctx_words[w], longctx_words[w], last[w]);
        bad_text += strcmp(text, want) != 0 || len != strlen(want);
        rebound += from[w] >= 0 && from[w] < (long)seed - 1; /* bound more than one example before */
      }
    }
    longctx_bindings_add(&b, &ex);
    for (size_t k = 0; k < ex.n_needles; k++)
      for (int w = 0; w < 16; w++)
        if (!strcmp(ex.words[k], longctx_words[w])) snprintf(last[w], sizeof last[w], "%s", ex.numbers[k]), from[w] = (long)seed;
    for (size_t i = 0; i < b.n; i++)
      for (size_t j = i + 1; j < b.n; j++) distinct_bad += !strcmp(b.held[i].word, b.held[j].word);
  }
  th_check(asked >= 150 && !bad_word && !bad_number && !bad_text && !distinct_bad && rebound > 0,
           "earlier questions: in %zu of 200 examples a word bound earlier and not by the example, with its last number "
           "(%zu from before the example just before), the question's own words (%zu, %zu, %zu, %zu wrong)",
           asked, rebound, bad_word, bad_number, bad_text, distinct_bad);
  /* full: 40 examples of one distinct random word each: the table keeps the last 32 */
  longctx_options random_words = {1, LONGCTX_WORDS_RANDOM, 0, 0.0, 0.0, 0, 0};
  longctx_bindings_clear(&b);
  char first[16] = "";
  for (uint64_t seed = 1; seed <= 40; seed++) {
    longctx_example_init(&ex, LONGCTX_PROSE, 4096, 0.5, seed, source, source_len, &random_words, err);
    if (seed == 1) snprintf(first, sizeof first, "%s", ex.words[0]);
    longctx_bindings_add(&b, &ex);
  }
  int kept_first = 0;
  for (size_t i = 0; i < b.n; i++) kept_first |= !strcmp(b.held[i].word, first);
  th_check(b.n == LONGCTX_EARLIER_MAX && !kept_first && !strcmp(b.held[b.n - 1].word, ex.words[0]),
           "earlier questions: a full table keeps the %d most recent bindings (%zu held)", LONGCTX_EARLIER_MAX, b.n);
}

/* Numbers amid the text (longctx_options.number_words): with 0 the example is the plain one; with 0.05
   only letters change, each to a digit, whole words at a time, about 5% of the words, and the needles,
   the question and the answer are untouched; any piece of the example reads as token by token. */
static void test_number_words(const int *source, size_t source_len) {
  enum { LEN = 16384 };
  longctx_options none = {2, LONGCTX_WORDS_TRAIN, 0, 0.0, 0.0, 0, 0}, some = {2, LONGCTX_WORDS_TRAIN, 0, 0.05, 0.0, 0, 0};
  longctx_example plain, with_numbers, zero;
  char err[200];
  longctx_example_init(&plain, LONGCTX_PROSE, LEN, 0.3, 7, source, source_len, NULL, err);
  longctx_options one = {1, LONGCTX_WORDS_TRAIN, 0, 0.0, 0.0, 0, 0};
  longctx_example_init(&zero, LONGCTX_PROSE, LEN, 0.3, 7, source, source_len, &one, err);
  size_t differ = 0;
  for (size_t i = 0; i < LEN + plain.answer_len; i++) differ += longctx_token(&plain, i) != longctx_token(&zero, i);
  th_check(differ == 0, "numbers 0: the example is the plain one (%zu tokens differ)", differ);
  longctx_example_init(&plain, LONGCTX_PROSE, LEN, 0.3, 7, source, source_len, &none, err);
  longctx_example_init(&with_numbers, LONGCTX_PROSE, LEN, 0.3, 7, source, source_len, &some, err);
  size_t not_letter = 0, words = 0, numbers = 0, half_words = 0;
  for (size_t i = 0; i < LEN; i++) {
    int a = longctx_token(&plain, i), b = longctx_token(&with_numbers, i);
    if (a != b && !(longctx_is_letter(a) && b >= '0' && b <= '9')) not_letter++;
    int starts = longctx_is_letter(a) && (i == 0 || !longctx_is_letter(longctx_token(&plain, i - 1)));
    if (!starts) continue;
    size_t end = i;
    while (end < LEN && longctx_is_letter(longctx_token(&plain, end))) end++;
    words++;
    /* a changed word is all digits (a digit may equal no letter, so count digits, not changes) */
    size_t digits = 0;
    for (size_t j = i; j < end; j++)
      digits += longctx_token(&with_numbers, j) >= '0' && longctx_token(&with_numbers, j) <= '9';
    numbers += digits == end - i;
    half_words += digits != 0 && digits != end - i;
  }
  double frac = words ? (double)numbers / (double)words : 0;
  th_check(not_letter == 0 && half_words == 0,
           "numbers 0.05: only letters become digits, whole words at a time (%zu, %zu)", not_letter, half_words);
  th_check(frac > 0.035 && frac < 0.065, "numbers 0.05: %.3f of %zu words are numbers", frac, words);
  th_check(count_in_example(&with_numbers, with_numbers.needle) == 1 &&
               find_in_example(&with_numbers, with_numbers.question) == LEN - with_numbers.question_len &&
               !strcmp(with_numbers.answer, plain.answer),
           "numbers 0.05: the needle, the question and the answer are the plain example's");
  int piece[1000];
  size_t bad = 0;
  for (size_t from = 0; from < LEN; from += 1000) {
    size_t m = LEN - from < 1000 ? LEN - from : 1000;
    longctx_tokens(&with_numbers, from, piece, m);
    for (size_t i = 0; i < m; i++) bad += piece[i] != longctx_token(&with_numbers, from + i);
  }
  th_check(bad == 0, "numbers 0.05: longctx_tokens in pieces = token by token (%zu differ)", bad);
}

/* Decoy numbers (longctx_options.decoy_numbers): with 0 the numbers are the ones number_words writes alone;
   with 1 every number starts with the first 1 to 6 digits of one of the example's needles' numbers (a
   shorter word: as many as it has), each prefix length drawn about equally often; only the numbers' digits
   change, the needles, question and answer do not; a passkey ignores it. */
static void test_decoy_numbers(const int *source, size_t source_len) {
  enum { LEN = 16384 };
  longctx_options numbers = {3, LONGCTX_WORDS_TEXT, 0, 0.3, 0.0, 0, 0}, decoys = {3, LONGCTX_WORDS_TEXT, 0, 0.3, 1.0, 0, 0},
                  half = {3, LONGCTX_WORDS_TEXT, 0, 0.3, 0.5, 0, 0};
  longctx_example plain, all, some;
  char err[200];
  longctx_example_init(&plain, LONGCTX_PROSE, LEN, 0.4, 9, source, source_len, &numbers, err);
  longctx_example_init(&all, LONGCTX_PROSE, LEN, 0.4, 9, source, source_len, &decoys, err);
  longctx_example_init(&some, LONGCTX_PROSE, LEN, 0.4, 9, source, source_len, &half, err);
  size_t not_digit = 0, n_numbers = 0, decoy_all = 0, decoy_half = 0, by_prefix[7] = {0};
  for (size_t i = 0; i < LEN; i++) {
    int a = longctx_token(&plain, i), b = longctx_token(&all, i);
    if (a != b && !(a >= '0' && a <= '9' && b >= '0' && b <= '9')) not_digit++;
    /* a number word of 7 or more digits after a space: long enough for every prefix length */
    if (i < 1 || longctx_token(&plain, i - 1) != ' ' || !(a >= '0' && a <= '9')) continue;
    size_t end = i;
    while (end < LEN && longctx_token(&plain, end) >= '0' && longctx_token(&plain, end) <= '9') end++;
    if (end - i < 7) continue;
    n_numbers++;
    size_t best_all = 0, best_half = 0; /* the longest start shared with a needle's number */
    for (size_t k = 0; k < all.n_needles; k++) {
      size_t m = 0, h = 0;
      while (m < 7 && longctx_token(&all, i + m) == all.numbers[k][m]) m++;
      while (h < 7 && longctx_token(&some, i + h) == some.numbers[k][h]) h++;
      if (m > best_all) best_all = m;
      if (h > best_half) best_half = h;
    }
    decoy_all += best_all >= 1;
    decoy_half += best_half >= 1;
    by_prefix[best_all < 7 ? best_all : 6]++;
  }
  th_check(not_digit == 0 && !strcmp(all.answer, plain.answer) && !strcmp(all.needle, plain.needle) &&
               !strcmp(all.question, plain.question),
           "decoys: only the numbers' digits change; needle, question and answer kept (%zu)", not_digit);
  th_check(n_numbers > 100 && decoy_all == n_numbers, "decoys 1: each of %zu numbers starts with a needle's digits (%zu)",
           n_numbers, decoy_all);
  /* a prefix of p digits shares p (or by chance more) with the needle: 1..6 about equally often */
  size_t least = n_numbers, most = 0;
  for (int p = 1; p <= 5; p++) least = by_prefix[p] < least ? by_prefix[p] : least, most = by_prefix[p] > most ? by_prefix[p] : most;
  th_check(least > n_numbers / 12 && most < n_numbers / 3, "decoys 1: prefixes of 1 to 6 digits each drawn (%zu..%zu of %zu)",
           least, most, n_numbers);
  /* half decoys: the other half start with a needle's first digit by chance only (about 3 in 10 for 3 needles) */
  double frac = (double)decoy_half / (double)n_numbers;
  th_check(frac > 0.55 && frac < 0.75, "decoys 0.5: %.2f of the numbers start with a needle's first digit", frac);
  longctx_options passkey_decoys = {1, LONGCTX_WORDS_TRAIN, 1, 0.3, 1.0, 0, 0},
                  passkey_numbers = {1, LONGCTX_WORDS_TRAIN, 1, 0.3, 0.0, 0, 0};
  longctx_example_init(&all, LONGCTX_PASSKEY, 4096, 0.4, 9, source, source_len, &passkey_decoys, err);
  longctx_example_init(&plain, LONGCTX_PASSKEY, 4096, 0.4, 9, source, source_len, &passkey_numbers, err);
  size_t differ = 0;
  for (size_t i = 0; i < 4096; i++) differ += longctx_token(&all, i) != longctx_token(&plain, i);
  th_check(differ == 0, "decoys: a passkey example ignores them (%zu tokens differ)", differ);
}

/* Plain sentences in random order: deterministic by seed, made of the pool's sentences only, and not
   periodic (no shift of up to 4,096 bytes repeats a 2,048-byte stretch); a passkey read from it keeps
   its needle, question and answer. */
static void test_sentence_haystack(void) {
  enum { N = 1 << 15 };
  int *a = (int *)malloc(N * sizeof(int)), *b = (int *)malloc(N * sizeof(int));
  longctx_sentence_text(a, N, 5);
  longctx_sentence_text(b, N, 5);
  th_check(!memcmp(a, b, N * sizeof(int)), "sentence haystack: the same seed gives the same text");
  size_t at = 0, unknown = 0;
  while (at < N - 64) { /* every sentence in turn is one of the pool */
    size_t k = 0, len = 0;
    for (; k < LONGCTX_N_SENTENCES; k++) {
      len = strlen(longctx_sentences[k]);
      size_t j = 0;
      while (j < len && a[at + j] == (unsigned char)longctx_sentences[k][j]) j++;
      if (j == len) break;
    }
    if (k == LONGCTX_N_SENTENCES) {
      unknown++;
      break;
    }
    at += len;
  }
  th_check(unknown == 0, "sentence haystack: made of the pool's sentences (%zu bytes checked)", at);
  size_t periodic = 0;
  for (size_t shift = 1; shift <= 4096; shift++) periodic += !memcmp(a + 8192, a + 8192 + shift, 2048 * sizeof(int));
  th_check(periodic == 0, "sentence haystack: no period up to 4,096 bytes (%zu shifts repeat)", periodic);
  longctx_example ex;
  longctx_options from_source = {1, LONGCTX_WORDS_TRAIN, 1, 0.0, 0.0, 0, 0};
  char err[200];
  longctx_example_init(&ex, LONGCTX_PASSKEY, 8192, 0.5, 3, a, N, &from_source, err);
  th_check(count_in_example(&ex, ex.needle) == 1 && find_in_example(&ex, ex.question) == 8192 - ex.question_len &&
               ex.source == a,
           "a passkey with the sentence filler holds its needle once and ends with its question");
  free(a);
  free(b);
}

/* How many times text [n] holds "is " followed by a digit: a number stated as a needle's is. */
static size_t count_stated_numbers(const int *text, size_t n) {
  size_t count = 0;
  for (size_t i = 0; i + 3 < n; i++)
    count += text[i] == 'i' && text[i + 1] == 's' && text[i + 2] == ' ' && text[i + 3] >= '0' && text[i + 3] <= '9';
  return count;
}

/* How many runs of 7 or more digits text [n] holds that start after a space or a tab. */
static size_t count_long_numbers(const int *text, size_t n) {
  size_t count = 0;
  for (size_t i = 1; i < n; i++) {
    if (!(text[i - 1] == ' ' || text[i - 1] == '\t')) continue;
    size_t len = 0;
    while (i + len < n && text[i + len] >= '0' && text[i + len] <= '9') len++;
    count += len >= 7;
  }
  return count;
}

/* The technical haystack (`train --haystack mixed`): deterministic, printable, about 90 digits a KB
   like the C headers it stands for, numbers in several formats, and not periodic; with statements, numbers
   stated after "is" as a needle's are, and without them none. */
static void test_technical_text(void) {
  enum { N = 1 << 16 };
  int *a = (int *)malloc(N * sizeof(int)), *b = (int *)malloc(N * sizeof(int)), *c = (int *)malloc(N * sizeof(int));
  longctx_technical_text(a, N, 5, 0, 0);
  longctx_technical_text(b, N, 5, 0, 0);
  longctx_technical_text(c, N, 6, 0, 0);
  uint64_t hash = 1469598103934665603ull; /* FNV-1a of the bytes */
  for (size_t i = 0; i < N; i++) hash = (hash ^ (uint64_t)(unsigned)a[i]) * 1099511628211ull;
  th_check(hash == 0x4f045298b63dc87bull, /* the text of seed 5 before --statements existed */
           "technical haystack: without statements, the text runs trained before session 32 read (%016llx)",
           (unsigned long long)hash);
  th_check(!memcmp(a, b, N * sizeof(int)) && memcmp(a, c, N * sizeof(int)),
           "technical haystack: the same seed gives the same text, another seed another");
  size_t digits = 0, unprintable = 0;
  for (size_t i = 0; i < N; i++) {
    digits += a[i] >= '0' && a[i] <= '9';
    unprintable += !((a[i] >= 32 && a[i] < 127) || a[i] == '\n' || a[i] == '\t');
  }
  double per_kb = (double)digits * 1024.0 / N;
  th_check(unprintable == 0 && per_kb > 75 && per_kb < 110,
           "technical haystack: printable ASCII (%zu bytes not), %.1f digits a KB (75-110)", unprintable, per_kb);
  char text[N + 1]; /* the bytes as a string, for strstr */
  for (size_t i = 0; i < N; i++) text[i] = (char)a[i];
  text[N] = 0;
  static const char *const formats[] = {"#define ", " 0x", "enum ", "\t{ ", "]: ", " version ", ".c:", "/*\n"};
  size_t missing = 0;
  for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++) missing += strstr(text, formats[k]) == NULL;
  th_check(missing == 0, "technical haystack: constants, hexadecimal, enumerations, tables, logs, versions, "
           "line numbers and comments all occur (%zu missing)", missing);
  size_t periodic = 0;
  for (size_t shift = 1; shift <= 4096; shift++) periodic += !memcmp(a + 8192, a + 8192 + shift, 2048 * sizeof(int));
  th_check(periodic == 0, "technical haystack: no period up to 4,096 bytes (%zu shifts repeat)", periodic);
  size_t stated_plain = count_stated_numbers(a, N);
  longctx_technical_text(b, N, 5, 0.125, 0);
  size_t stated = count_stated_numbers(b, N), lines = 0;
  for (size_t i = 0; i < N; i++) lines += b[i] == '\n';
  unprintable = 0;
  for (size_t i = 0; i < N; i++) unprintable += !((b[i] >= 32 && b[i] < 127) || b[i] == '\n' || b[i] == '\t');
  /* an eighth of some 2,300 lines, two stated numbers each, most after "is" */
  th_check(stated_plain == 0 && stated > 150 && stated < 600 && unprintable == 0,
           "technical haystack with --statements 0.125: %zu numbers after \"is \" in %zu lines (without: %zu), "
           "printable (%zu bytes not)", stated, lines, stated_plain, unprintable);
  /* columns of long numbers: runs of 7 or more digits after a space or tab, which the plain text has none
     of (its longest decimals, 6 digits, follow #define's name; its 8-digit hexadecimals follow "0x") */
  size_t long_plain = count_long_numbers(a, N);
  longctx_technical_text(c, N, 5, 0, 0.125);
  size_t long_columns = count_long_numbers(c, N), stated_columns = count_stated_numbers(c, N);
  unprintable = 0;
  for (size_t i = 0; i < N; i++) unprintable += !((c[i] >= 32 && c[i] < 127) || c[i] == '\n' || c[i] == '\t');
  th_check(long_plain == 0 && long_columns > 100 && stated_columns == 0 && unprintable == 0,
           "technical haystack with --columns 0.125: %zu numbers of 7+ digits after a space or tab (without: %zu), "
           "none after \"is \" (%zu), printable (%zu bytes not)", long_columns, long_plain, stated_columns, unprintable);
  free(a);
  free(b);
  free(c);
}

/* ---- a minimal XML well-formedness checker ------------------------------------------------------------ */

static int is_name_char(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == ':' ||
         c == '_' || c == '.';
}

/* 1 when text [n] is one well-formed element: tags balanced and properly nested, every attribute
   name="value" (or 'value'), no raw '<' in text or values, '&' only as an entity. Why in why [200]. */
static int xml_well_formed(const char *s, size_t n, char *why) {
  char stack[64][64];
  int depth = 0, roots = 0;
  size_t i = 0;
  while (i < n) {
    if (s[i] == '&') {
      size_t k = i + 1;
      while (k < n && k < i + 10 && (is_name_char(s[k]) || s[k] == '#')) k++;
      if (k >= n || s[k] != ';' || k == i + 1) return snprintf(why, 200, "a bare '&' at byte %zu", i), 0;
      i = k + 1;
      continue;
    }
    if (s[i] != '<') {
      if (depth == 0 && s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t')
        return snprintf(why, 200, "text outside the root element at byte %zu", i), 0;
      i++;
      continue;
    }
    int closing = i + 1 < n && s[i + 1] == '/';
    size_t k = i + 1 + (size_t)closing, name_start = k;
    while (k < n && is_name_char(s[k])) k++;
    size_t name_len = k - name_start;
    if (name_len == 0 || name_len >= 64) return snprintf(why, 200, "a tag without a name at byte %zu", i), 0;
    if (closing) {
      while (k < n && s[k] == ' ') k++;
      if (k >= n || s[k] != '>') return snprintf(why, 200, "a malformed end tag at byte %zu", i), 0;
      if (depth == 0 || strlen(stack[depth - 1]) != name_len || strncmp(stack[depth - 1], s + name_start, name_len))
        return snprintf(why, 200, "</%.*s> at byte %zu closes %s", (int)name_len, s + name_start, i,
                        depth ? stack[depth - 1] : "nothing"), 0;
      depth--;
      i = k + 1;
      continue;
    }
    /* attributes */
    for (;;) {
      while (k < n && (s[k] == ' ' || s[k] == '\n' || s[k] == '\t')) k++;
      if (k >= n) return snprintf(why, 200, "an unterminated tag at byte %zu", i), 0;
      if (s[k] == '>' || (s[k] == '/' && k + 1 < n && s[k + 1] == '>')) break;
      size_t a = k;
      while (k < n && is_name_char(s[k])) k++;
      if (k == a || k >= n || s[k] != '=') return snprintf(why, 200, "a malformed attribute at byte %zu", a), 0;
      k++;
      if (k >= n || (s[k] != '"' && s[k] != '\''))
        return snprintf(why, 200, "an unquoted attribute value at byte %zu", k), 0;
      char quote = s[k++];
      while (k < n && s[k] != quote) {
        if (s[k] == '<') return snprintf(why, 200, "a '<' inside an attribute value at byte %zu", k), 0;
        k++;
      }
      if (k >= n) return snprintf(why, 200, "an unterminated attribute value at byte %zu", a), 0;
      k++;
    }
    if (s[k] == '/') { /* empty element */
      if (depth == 0) roots++;
      i = k + 2;
      continue;
    }
    if (depth == 64) return snprintf(why, 200, "nesting deeper than 64"), 0;
    if (depth == 0) roots++;
    memcpy(stack[depth], s + name_start, name_len);
    stack[depth++][name_len] = 0;
    i = k + 1;
  }
  if (depth) return snprintf(why, 200, "<%s> is never closed", stack[depth - 1]), 0;
  if (roots != 1) return snprintf(why, 200, "%d root elements", roots), 0;
  return 1;
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = (char *)malloc((size_t)size + 1);
  *n = fread(buf, 1, (size_t)size, f);
  buf[*n] = 0;
  fclose(f);
  return buf;
}

static void check_svg(const char *path, const char *what) {
  size_t n = 0;
  char *s = slurp(path, &n), why[200] = "";
  if (!s) {
    th_check(0, "%s: %s was not written", what, path);
    return;
  }
  int ok = xml_well_formed(s, n, why) && strstr(s, "<svg") == s;
  th_check(ok, "%s: %s is well-formed SVG (%zu bytes)%s%s", what, path, n, ok ? "" : ": ", why);
  free(s);
}

static void test_xml_checker(void) {
  const char *good = "<svg a=\"1\"><g><text x='2'>a &lt; b &amp; c</text><line/></g></svg>\n";
  const char *bad[5] = {"<svg><g></svg>", "<svg a=1></svg>", "<svg>a < b</svg>", "<svg>a & b</svg>",
                        "<svg></svg><svg/>"};
  char why[200];
  th_check(xml_well_formed(good, strlen(good), why), "the XML checker accepts a well-formed document");
  int rejected = 0;
  for (int i = 0; i < 5; i++) rejected += !xml_well_formed(bad[i], strlen(bad[i]), why);
  th_check(rejected == 5, "the XML checker rejects 5 malformed documents (%d rejected)", rejected);
}

/* ---- the program on tiny models ---------------------------------------------------------------------- */

static char program[4096], dir[256];

static int run(const char *args, const char *out_name) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' %s > '%s/%s' 2> '%s/%s.err'", program, args, dir, out_name, dir, out_name);
  int rc = system(cmd);
  rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (rc != 0) { /* show why: the first lines the program wrote */
    for (int which = 0; which < 2; which++) {
      snprintf(cmd, sizeof cmd, "%s/%s%s", dir, out_name, which ? ".err" : "");
      FILE *f = fopen(cmd, "r");
      char line[512];
      for (int n = 0; f && n < 40 && fgets(line, sizeof line, f); n++) printf("    | %s", line);
      if (f) fclose(f);
    }
  }
  return rc;
}

/* The retrieval recipe is the library's: a program that builds it from titans.h's calls (docs/model.md
   5.1) gets the model ./titans train --task prose starts from, configuration and every weight bit for
   bit (--lr 0: the one step leaves the weights where they started). */
static void test_recipe_in_library(const char *data_path) {
  char args[1024], path[512];
  snprintf(args, sizeof args, "train --task prose --data %s --lens 200 --steps 1 --lr 0 --val-every 0 --sample-len 0 "
           "--threads 1 --out %s/recipe", data_path, dir);
  int rc = run(args, "recipe.txt");
  th_check(rc == 0, "./titans train --task prose --lr 0 (the recipe's starting point) exits 0 (rc=%d)", rc);
  titans_config c = titans_config_default(TITANS_BLOCK_MAC, 256, 128, 2); /* prose: d 128 */
  c.mem.heads = 1, c.mem.head_dim = 128, c.mem.depth = 1;
  c.mem.theta_max = 1.0f, c.mem.surprise_bound = 6.0f;
  c.mem.conv_width = 13, c.mem.key_ngram = 12;
  c.mac_learns_from = TITANS_MAC_LEARNS_INPUT;
  titans_model lib, prog;
  titans_model_init(&lib, &c);
  titans_model_init_weights(&lib, 1234);                 /* ./titans train's default seed */
  titans_model_set_gates(&lib, 0.0f, 0.02f, 1e-7f);     /* theta as it is; momentum 0.02, forgetting 1e-7 */
  titans_lookup_init li = titans_lookup_init_default();
  titans_model_init_lookup(&lib, &li);
  snprintf(path, sizeof path, "%s/recipe/model.safetensors", dir);
  rc = titans_model_load(&prog, path);
  if (!th_check(rc == TITANS_OK, "the recipe's model loads: %s", rc ? prog.error : "ok")) {
    titans_model_free(&lib);
    return;
  }
  char a[4096], b[4096];
  titans_config_to_json(&lib.cfg, a, sizeof a);
  titans_config_to_json(&prog.cfg, b, sizeof b);
  th_check(!strcmp(a, b), "the library's calls give the recipe's configuration (%s)", strcmp(a, b) ? b : "equal");
  size_t differ = 0;
  for (size_t i = 0; i < lib.n_floats && lib.n_floats == prog.n_floats; i++) differ += lib.params[i] != prog.params[i];
  th_check(lib.n_floats == prog.n_floats && differ == 0,
           "... and its weights, bit for bit (%zu floats, %zu differ)", lib.n_floats, differ);
  titans_model_free(&lib);
  titans_model_free(&prog);
}


static void tiny_model(titans_model *m, int block, uint64_t seed, const char *path) {
  titans_config c = titans_config_default(block, 256, 32, 1);
  c.attn_heads = 2;
  c.window = 16;
  c.segment = 16;
  c.mem.heads = 2;
  c.mem.head_dim = 16;
  c.mem.depth = 1;
  c.mem.chunk = 8;
  titans_model_init(m, &c);
  titans_model_init_weights(m, seed);
  titans_tokenizer tok;
  titans_tokenizer_init(&tok, TITANS_TOKENIZER_BYTE);
  if (titans_model_save_ex(m, &tok, NULL, path) != TITANS_OK) printf("cannot save %s: %s\n", path, m->error);
  titans_tokenizer_free(&tok);
}

/* The bucket means of streams through each model, computed here token by token: mean [models, buckets]. */
static void direct_eval(double *mean, titans_model **models, size_t n_models, const int *held_out, size_t n_val,
                        size_t len, size_t streams) {
  size_t buckets = 0;
  while (((size_t)1 << buckets) < len) buckets++;
  buckets++; /* [0,1), [1,2), ..., the one holding len - 1 */
  float logits[256];
  for (size_t m = 0; m < n_models; m++) {
    double sum[40] = {0}, count[40] = {0};
    for (size_t s = 0; s < streams; s++) {
      size_t off = (size_t)((double)(n_val - len - 1) * (double)s / (double)(streams - 1));
      titans_session sess;
      titans_session_init(&sess, models[m]);
      for (size_t t = 0; t < len; t++) {
        titans_session_feed(&sess, &held_out[off + t], 1, logits);
        double mx = logits[0], z = 0;
        for (int v = 1; v < 256; v++) mx = fmax(mx, logits[v]);
        for (int v = 0; v < 256; v++) z += exp(logits[v] - mx);
        size_t k = 0;
        for (size_t p = t; p; p >>= 1) k++;
        sum[k] += log(z) + mx - logits[held_out[off + t + 1]];
        count[k] += 1;
      }
      titans_session_free(&sess);
    }
    for (size_t k = 0; k < buckets; k++) mean[m * buckets + k] = sum[k] / count[k];
  }
}

static void test_eval(titans_model **models, const int *held_out, size_t n_val) {
  char args[4096], path[512];
  const size_t len = 200, streams = 3, buckets = 9; /* positions 0..199: [0,1) .. [128,256) */
  snprintf(args, sizeof args,
           "eval --model %s/mac/model.safetensors --model %s/swa/model.safetensors --data %s/data.txt "
           "--len 200 --streams 3 --threads 2 --svg %s/eval.svg",
           dir, dir, dir, dir);
  int rc = run(args, "eval.txt");
  th_check(rc == 0, "./titans eval on two tiny models exits 0 (rc=%d)", rc);
  snprintf(path, sizeof path, "%s/eval.txt", dir);
  size_t n;
  char *out = slurp(path, &n);
  double got[2 * 9], diff_col[9];
  size_t rows = 0, counts_ok = 0;
  for (char *line = out ? strtok(out, "\n") : NULL; line; line = strtok(NULL, "\n")) {
    char range[64];
    double count, a, b, d;
    if (line[0] != '[' || sscanf(line, "%63s %lf %lf %lf %lf", range, &count, &a, &b, &d) != 5 || rows == buckets)
      continue;
    size_t expect = rows == 0 ? 1 : (size_t)1 << (rows - 1);
    if (rows == buckets - 1) expect = len - 128;
    counts_ok += count == (double)(expect * streams);
    got[rows] = a, got[buckets + rows] = b, diff_col[rows] = d;
    rows++;
  }
  free(out);
  th_check(rows == buckets && counts_ok == buckets,
           "eval prints %zu buckets with their counts (%zu rows, %zu counts right)", buckets, rows, counts_ok);
  if (rows != buckets) return;
  double mean[2 * 9], worst = 0, worst_diff = 0;
  direct_eval(mean, models, 2, held_out, n_val, len, streams);
  for (size_t i = 0; i < 2 * buckets; i++) worst = fmax(worst, fabs(mean[i] - got[i]));
  for (size_t k = 0; k < buckets; k++) worst_diff = fmax(worst_diff, fabs((mean[k] - mean[buckets + k]) - diff_col[k]));
  th_close("eval's per-bucket loss = a direct session computation (printed to 4 decimals)", worst, 1.5e-4);
  th_close("eval's difference column = model 1 - model 2, computed directly", worst_diff, 2.5e-4);
  snprintf(path, sizeof path, "%s/eval.svg", dir);
  check_svg(path, "eval");
}

/* The program's needle table of one model: exact counts and digit accuracies [cells] in row-major order. */
static size_t parse_needle_table(const char *out, const char *model, size_t *exact, double *acc, size_t max) {
  char head[128];
  snprintf(head, sizeof head, "model %s:", model);
  const char *p = strstr(out, head);
  size_t cells = 0;
  if (!p) return 0;
  p = strchr(p, '\n');
  if (p) p = strchr(p + 1, '\n'); /* past the header row */
  while (p && cells < max) {
    p++;
    if (*p == '\n' || *p == 0) break;
    const char *eol = strchr(p, '\n');
    for (const char *q = strchr(p, '('); q && (!eol || q < eol); q = strchr(q + 1, '(')) {
      size_t e, t;
      double a;
      if (sscanf(q, "(%zu/%zu) %lf", &e, &t, &a) == 3 && cells < max) exact[cells] = e, acc[cells] = a, cells++;
    }
    p = eol;
  }
  return cells;
}

/* Greedy decoding and teacher forcing of one example through a session: the digits greedy gets right, and
   whether every teacher-forced argmax is right (which must equal greedy's exact match). */
static void direct_needle(titans_model *m, const longctx_example *ex, size_t *greedy_right, int *forced_exact) {
  titans_session s, fork;
  float logits[256];
  titans_session_init(&s, m);
  titans_session_init(&fork, m);
  int *ids = (int *)malloc(ex->length * sizeof(int));
  longctx_tokens(ex, 0, ids, ex->length);
  titans_session_feed(&s, ids, ex->length, logits);
  titans_session_copy(&fork, &s);
  float forked_logits[256];
  memcpy(forked_logits, logits, sizeof logits);
  *greedy_right = 0;
  for (size_t i = 0; i < ex->answer_len; i++) {
    int best = 0;
    for (int v = 1; v < 256; v++)
      if (logits[v] > logits[best]) best = v;
    *greedy_right += best == ex->answer[i];
    titans_session_feed(&s, &best, 1, logits);
  }
  *forced_exact = 1;
  for (size_t i = 0; i < ex->answer_len; i++) {
    int best = 0, truth = (unsigned char)ex->answer[i];
    for (int v = 1; v < 256; v++)
      if (forked_logits[v] > forked_logits[best]) best = v;
    *forced_exact &= best == truth;
    titans_session_feed(&fork, &truth, 1, forked_logits);
  }
  free(ids);
  titans_session_free(&s);
  titans_session_free(&fork);
}

static void test_needle(titans_model **models, const char *task, const int *held_out, size_t n_val) {
  char args[4096], path[512];
  const size_t lens[2] = {256, 512}, depths[2] = {10, 90}, trials = 2;
  int kind = longctx_kind_from_name(task);
  char data_opt[300] = "";
  if (kind == LONGCTX_PROSE) snprintf(data_opt, sizeof data_opt, "--data %s/data.txt", dir);
  snprintf(args, sizeof args,
           "needle --model %s/mac/model.safetensors --model %s/swa/model.safetensors --task %s %s "
           "--len 256,512 --depth 10,90 --trials 2 --seed 3 --threads 2 --svg %s/needle.svg",
           dir, dir, task, data_opt, dir);
  int rc = run(args, "needle.txt");
  th_check(rc == 0, "./titans needle --task %s on two tiny models exits 0 (rc=%d)", task, rc);
  snprintf(path, sizeof path, "%s/needle.txt", dir);
  size_t n;
  char *out = slurp(path, &n);
  if (!out) return;
  th_check(strstr(out, "chance: exact match") && strstr(out, "peak RSS") && strstr(out, "tok/s"),
           "needle reports the chance levels, tokens/s and the peak RSS");
  const char *labels[2] = {"mac", "swa"};
  for (int mi = 0; mi < 2; mi++) {
    size_t exact[4], cells = 0, mismatch = 0, forced_mismatch = 0;
    double acc[4];
    cells = parse_needle_table(out, labels[mi], exact, acc, 4);
    th_check(cells == 4, "%s: needle prints a 2 x 2 table for %s (%zu cells)", task, labels[mi], cells);
    if (cells != 4) continue;
    for (size_t r = 0; r < 2; r++)
      for (size_t c = 0; c < 2; c++) {
        size_t digits = 0, exact_direct = 0, forced = 0;
        for (size_t t = 0; t < trials; t++) {
          longctx_example ex;
          char err[200];
          double depth = (double)depths[c] / 100.0;
          longctx_example_init(&ex, kind, lens[r], depth, longctx_eval_seed(3, lens[r], depth, t), held_out, n_val,
                               NULL, err);
          size_t right;
          int forced_exact;
          direct_needle(models[mi], &ex, &right, &forced_exact);
          digits += right;
          exact_direct += right == ex.answer_len;
          forced += (size_t)forced_exact;
        }
        size_t cell = r * 2 + c;
        double acc_direct = (double)digits / (double)(trials * longctx_answer_len(kind));
        mismatch += exact[cell] != exact_direct || fabs(acc[cell] - acc_direct) > 0.006;
        forced_mismatch += forced != exact_direct;
      }
    th_check(mismatch == 0,
             "%s, %s: needle's exact matches and digit accuracies = greedy decoding here (%zu cells differ)", task,
             labels[mi], mismatch);
    th_check(forced_mismatch == 0, "%s, %s: teacher-forced exact match = greedy exact match (%zu cells differ)", task,
             labels[mi], forced_mismatch);
  }
  free(out);
  snprintf(path, sizeof path, "%s/needle.svg", dir);
  check_svg(path, "needle");
}

int main(int argc, char **argv) {
  (void)argc;
  printf("== longctx generators\n");
  size_t text_len = default_text_size();
  char *text = (char *)malloc(text_len);
  default_text_copy(text);
  int *ids = (int *)malloc(text_len * sizeof(int));
  for (size_t i = 0; i < text_len; i++) ids[i] = (unsigned char)text[i];
  test_determinism(ids, text_len);
  test_layout(LONGCTX_PASSKEY, NULL, 0);
  test_layout(LONGCTX_PROSE, ids, text_len);
  test_layout(LONGCTX_COPY, NULL, 0);
  test_digits_uniform();
  test_needles(ids, text_len);
  test_alike_words(ids, text_len);
  test_alike_numbers(ids, text_len);
  test_answer_kind();
  test_needles_after(ids, text_len);
  test_other_questions(ids, text_len);
  test_earlier_questions(ids, text_len);
  test_number_words(ids, text_len);
  test_decoy_numbers(ids, text_len);
  test_sentence_haystack();
  test_technical_text();
  test_xml_checker();

  printf("== ./titans eval and needle on tiny models\n");
  const char *slash = strrchr(argv[0], '/');
  snprintf(program, sizeof program, "%.*stitans", slash ? (int)(slash - argv[0] + 1) : 0, argv[0]);
  FILE *probe = fopen(program, "rb");
  if (th_check(probe != NULL, "the program %s exists (make check builds it)", program)) {
    fclose(probe);
    snprintf(dir, sizeof dir, "%s/titans_longctx.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
      th_check(0, "cannot create a temporary folder");
      return th_summary("test_longctx");
    }
    /* data: 20,000 bytes of the built-in text; the held-out 10% is its last 2,000 */
    char path[512];
    snprintf(path, sizeof path, "%s/data.txt", dir);
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, 20000, f);
    fclose(f);
    size_t n_train = 20000 - 20000 / 10, n_val = 20000 - n_train;
    titans_model mac, swa;
    snprintf(path, sizeof path, "%s/mac", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/swa", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/mac/model.safetensors", dir);
    tiny_model(&mac, TITANS_BLOCK_MAC, 11, path);
    snprintf(path, sizeof path, "%s/swa/model.safetensors", dir);
    tiny_model(&swa, TITANS_BLOCK_SWA, 12, path);
    titans_model *models[2] = {&mac, &swa};
    test_eval(models, ids + n_train, n_val);
    test_needle(models, "passkey", NULL, 0);
    test_needle(models, "prose", ids + n_train, n_val);
    test_needle(models, "copy", NULL, 0);
    snprintf(path, sizeof path, "%s/data.txt", dir);
    test_recipe_in_library(path);
    titans_model_free(&mac);
    titans_model_free(&swa);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("  (could not remove %s)\n", dir);
  }
  free(ids);
  free(text);
  return th_summary("test_longctx");
}
