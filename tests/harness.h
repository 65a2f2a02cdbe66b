/* Minimal test harness shared by the tests: every check prints what it compared and the largest
   difference, and th_summary() prints "name: N passed, N failed" and gives the exit code. */
#ifndef TITANS_TEST_HARNESS_H
#define TITANS_TEST_HARNESS_H
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int th_passed, th_failed;

/* Record one check; prints "ok" or "FAIL" and the message. Returns ok. */
static inline int th_check(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("  %s ", ok ? "ok  " : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  if (ok) th_passed++;
  else th_failed++;
  fflush(stdout);
  return ok;
}

/* A difference check: passes when diff <= tol and diff is not NaN. */
static inline int th_close(const char *what, double diff, double tol) {
  return th_check(diff <= tol, "%s: max diff %.3g (tol %.3g)", what, diff, tol);
}

/* max_i |a_i - b_i|; NaN anywhere gives INFINITY. */
static inline double th_max_abs_diff(const float *a, const float *b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d != d) return INFINITY;
    if (d > m) m = d;
  }
  return m;
}

/* max_i |a_i - b_i| / max(floor, |b_i|): relative where values are large, absolute near zero. */
static inline double th_max_rel_diff(const float *a, const float *b, size_t n, double floor) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) {
    double scale = fabs((double)b[i]) > floor ? fabs((double)b[i]) : floor;
    double d = fabs((double)a[i] - (double)b[i]) / scale;
    if (d != d) return INFINITY;
    if (d > m) m = d;
  }
  return m;
}

static inline int th_all_finite(const float *a, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(a[i])) return 0;
  return 1;
}

static inline int th_summary(const char *name) {
  printf("%s: %d passed, %d failed\n", name, th_passed, th_failed);
  return th_failed ? 1 : 0;
}
#endif
