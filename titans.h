/* titans.h - v0.1.0 - Titans sequence models in one C11 header, no dependencies.

   Titans ("Learning to Memorize at Test Time", Behrouz, Zhong, Mirrokni, 2025) are sequence models whose
   long-term memory is a small MLP that keeps learning (by gradient descent with momentum and weight
   decay) while the model runs. This header trains and runs them on a CPU.

   USAGE
     In exactly one C or C++ file:
         #define TITANS_IMPLEMENTATION
         #include "titans.h"
     Everywhere else just #include "titans.h". Compile with -O3 -march=native (SIMD) and -fopenmp
     (threads, optional). Link with -lm.

   OPTIONS (define before including the implementation)
     TITANS_STATIC        every public function is static to the including file
     TITANS_MALLOC(n), TITANS_REALLOC(p,n), TITANS_FREE(p)
                          your allocator (define all three or none)
     TITANS_ASSERT(x)     your assert (default: assert from <assert.h>); only checks internal
                          invariants, never the caller's input, which is reported as an error instead
     TITANS_NO_SIMD       plain scalar kernels (same results within float tolerance)
     TITANS_NO_STDIO      no file functions; error messages are not formatted

   CONVENTIONS
     - float32 everywhere. Matrices are row-major; linear weights are stored [out, in] (y = W x).
     - Functions that can fail return a titans_status (TITANS_OK = 0, errors negative). Objects keep
       the message of their last error (titans_*_error()). The library never prints, never exits and
       keeps no global mutable state.
     - Sizes are size_t; every count * size is checked for overflow before it is allocated.
     - Threads: OpenMP when compiled with -fopenmp (the thread count is OpenMP's: OMP_NUM_THREADS or
       omp_set_num_threads). Work is split so that every output element is computed by one thread in
       a fixed order: results are bit-identical run to run and do not depend on the thread count,
       except where a kernel says otherwise.
     - Storage: parameters, gradients and optimizer moments each live in one float slab, sliced into
       structs of named pointers (as llm.c). A shape comment stands beside every buffer.

   CONTENTS
     1. Core: status codes, allocation, checked sizes, RNG, SIMD layer
     2. GEMM: C = alpha op(A) op(B) + beta C
     3. Kernels: activations, norms, conv, embedding, cross-entropy, AdamW
     4. Neural long-term memory layer (SPEC section 1)
     5. Attention
     6. Safetensors files
     7. Models (MAC, MAG, MAL, LMM, attention baselines), training, sessions, sampling
     8. Checkpoints and tokenizer

   LICENSE: MIT or public domain, your choice; see the end of the file.
*/
#ifndef TITANS_H
#define TITANS_H

#define TITANS_VERSION_MAJOR 0
#define TITANS_VERSION_MINOR 1
#define TITANS_VERSION_PATCH 0
#define TITANS_VERSION "0.1.0"

#include <stddef.h>
#include <stdint.h>

#ifdef TITANS_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define TITANSDEF static __attribute__((unused)) /* a file need not call every function */
#else
#define TITANSDEF static
#endif
#else
#ifdef __cplusplus
#define TITANSDEF extern "C"
#else
#define TITANSDEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================================================
   1. Core
   ================================================================================================ */

typedef enum titans_status {
  TITANS_OK = 0,
  TITANS_ERR_ARG = -1,       /* an argument is out of range or shapes do not agree */
  TITANS_ERR_NOMEM = -2,     /* an allocation failed or a size overflowed */
  TITANS_ERR_IO = -3,        /* a file could not be opened, read or written */
  TITANS_ERR_FORMAT = -4,    /* a file or buffer is malformed, truncated or inconsistent */
  TITANS_ERR_NONFINITE = -5, /* a NaN or Inf appeared (loss, gradient) */
  TITANS_ERR_STATE = -6      /* the call does not fit the object's state */
} titans_status;

/* Size of the error-message buffer every object carries (char error[TITANS_ERR_MSG_SIZE]). */
#define TITANS_ERR_MSG_SIZE 256

/* A short fixed name for a status ("ok", "invalid argument", ...). */
TITANSDEF const char *titans_status_string(int status);

/* Deterministic random numbers with explicit state (splitmix64 stream + Box-Muller). */
typedef struct titans_rng {
  uint64_t state;
} titans_rng;

TITANSDEF void titans_rng_seed(titans_rng *rng, uint64_t seed);
TITANSDEF uint64_t titans_rng_u64(titans_rng *rng);
TITANSDEF float titans_rng_uniform(titans_rng *rng); /* in [0, 1) */
TITANSDEF float titans_rng_normal(titans_rng *rng);  /* mean 0, standard deviation 1 */

/* a * b with overflow check: returns 1 and sets *out when it fits, 0 on overflow. */
TITANSDEF int titans_size_mul(size_t a, size_t b, size_t *out);
/* a + b with overflow check: returns 1 and sets *out when it fits, 0 on overflow. */
TITANSDEF int titans_size_add(size_t a, size_t b, size_t *out);

/* Allocate count floats (zeroed); NULL on overflow or failure. Free with titans_free. */
TITANSDEF float *titans_alloc_floats(size_t count);
TITANSDEF void *titans_alloc_bytes(size_t count, size_t elem_size); /* zeroed; NULL on failure */
TITANSDEF void titans_free(void *p);

/* Number of threads the library's parallel loops use (1 without OpenMP). */
TITANSDEF int titans_threads(void);

#include "src/gemm.h"
#include "src/ops.h"
#include "src/memory.h"
#include "src/attn.h"
#include "src/safetensors.h"
#include "src/model.h"
#include "src/checkpoint.h"

#ifdef __cplusplus
}
#endif
#endif /* TITANS_H */

/* ================================================================================================
   IMPLEMENTATION
   ================================================================================================ */
#ifdef TITANS_IMPLEMENTATION
#ifndef TITANS_IMPLEMENTATION_DONE
#define TITANS_IMPLEMENTATION_DONE

/* g++ 12 at -O2 warns "'__Y' is used uninitialized" inside its own AVX-512 intrinsics (they start from
   _mm512_undefined_ps; GCC bug 105593, fixed in GCC 13). The warning is about the compiler's header,
   not this code; silence it for the implementation only. */
#if defined(__cplusplus) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define TITANS__GCC_DIAGNOSTIC_PUSHED
#endif

#include <math.h>
#include <string.h>
#include <stdarg.h>
#include <float.h>
#include <limits.h>
#include <stdlib.h> /* qsort */
#ifndef TITANS_NO_STDIO
#include <stdio.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(TITANS_MALLOC) && defined(TITANS_FREE) && defined(TITANS_REALLOC)
/* ok: all three given */
#elif !defined(TITANS_MALLOC) && !defined(TITANS_FREE) && !defined(TITANS_REALLOC)
#include <stdlib.h>
#define TITANS_MALLOC(n) malloc(n)
#define TITANS_REALLOC(p, n) realloc(p, n)
#define TITANS_FREE(p) free(p)
#else
#error "titans.h: define all of TITANS_MALLOC, TITANS_REALLOC and TITANS_FREE, or none of them"
#endif

#ifndef TITANS_ASSERT
#include <assert.h>
#define TITANS_ASSERT(x) assert(x)
#endif

/* ---- SIMD layer: one vector type of TITANS__VW floats with load/store/fma/reduce ------------ */
#if !defined(TITANS_NO_SIMD) && defined(__AVX512F__)
#include <immintrin.h>
#define TITANS__AVX512 1
#define TITANS__VW 16
typedef __m512 titans__vf;
static inline titans__vf titans__vload(const float *p) { return _mm512_loadu_ps(p); }
static inline void titans__vstore(float *p, titans__vf v) { _mm512_storeu_ps(p, v); }
static inline titans__vf titans__vset1(float x) { return _mm512_set1_ps(x); }
static inline titans__vf titans__vadd(titans__vf a, titans__vf b) { return _mm512_add_ps(a, b); }
static inline titans__vf titans__vsub(titans__vf a, titans__vf b) { return _mm512_sub_ps(a, b); }
static inline titans__vf titans__vmul(titans__vf a, titans__vf b) { return _mm512_mul_ps(a, b); }
static inline titans__vf titans__vmax(titans__vf a, titans__vf b) { return _mm512_max_ps(a, b); }
static inline titans__vf titans__vfma(titans__vf a, titans__vf b, titans__vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline float titans__vsum(titans__vf v) { return _mm512_reduce_add_ps(v); }
#elif !defined(TITANS_NO_SIMD) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TITANS__AVX2 1
#define TITANS__VW 8
typedef __m256 titans__vf;
static inline titans__vf titans__vload(const float *p) { return _mm256_loadu_ps(p); }
static inline void titans__vstore(float *p, titans__vf v) { _mm256_storeu_ps(p, v); }
static inline titans__vf titans__vset1(float x) { return _mm256_set1_ps(x); }
static inline titans__vf titans__vadd(titans__vf a, titans__vf b) { return _mm256_add_ps(a, b); }
static inline titans__vf titans__vsub(titans__vf a, titans__vf b) { return _mm256_sub_ps(a, b); }
static inline titans__vf titans__vmul(titans__vf a, titans__vf b) { return _mm256_mul_ps(a, b); }
static inline titans__vf titans__vmax(titans__vf a, titans__vf b) { return _mm256_max_ps(a, b); }
static inline titans__vf titans__vfma(titans__vf a, titans__vf b, titans__vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline float titans__vsum(titans__vf v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
#elif !defined(TITANS_NO_SIMD) && defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#define TITANS__NEON 1
#define TITANS__VW 4
typedef float32x4_t titans__vf;
static inline titans__vf titans__vload(const float *p) { return vld1q_f32(p); }
static inline void titans__vstore(float *p, titans__vf v) { vst1q_f32(p, v); }
static inline titans__vf titans__vset1(float x) { return vdupq_n_f32(x); }
static inline titans__vf titans__vadd(titans__vf a, titans__vf b) { return vaddq_f32(a, b); }
static inline titans__vf titans__vsub(titans__vf a, titans__vf b) { return vsubq_f32(a, b); }
static inline titans__vf titans__vmul(titans__vf a, titans__vf b) { return vmulq_f32(a, b); }
static inline titans__vf titans__vmax(titans__vf a, titans__vf b) { return vmaxq_f32(a, b); }
static inline titans__vf titans__vfma(titans__vf a, titans__vf b, titans__vf c) { return vfmaq_f32(c, a, b); }
static inline float titans__vsum(titans__vf v) { return vaddvq_f32(v); }
#else
#define TITANS__SCALAR 1
#define TITANS__VW 1
typedef float titans__vf;
static inline titans__vf titans__vload(const float *p) { return *p; }
static inline void titans__vstore(float *p, titans__vf v) { *p = v; }
static inline titans__vf titans__vset1(float x) { return x; }
static inline titans__vf titans__vadd(titans__vf a, titans__vf b) { return a + b; }
static inline titans__vf titans__vsub(titans__vf a, titans__vf b) { return a - b; }
static inline titans__vf titans__vmul(titans__vf a, titans__vf b) { return a * b; }
static inline titans__vf titans__vmax(titans__vf a, titans__vf b) { return a > b ? a : b; }
static inline titans__vf titans__vfma(titans__vf a, titans__vf b, titans__vf c) { return a * b + c; }
static inline float titans__vsum(titans__vf v) { return v; }
#endif

/* sum_i a[i] * b[i], vectorised; the order of the sum is fixed for a given n. */
static inline float titans__dot(const float *a, const float *b, size_t n) {
  titans__vf acc = titans__vset1(0.0f);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) acc = titans__vfma(titans__vload(a + i), titans__vload(b + i), acc);
  float s = titans__vsum(acc);
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

/* y[i] += alpha * x[i] */
static inline void titans__axpy(float *y, float alpha, const float *x, size_t n) {
  titans__vf va = titans__vset1(alpha);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) titans__vstore(y + i, titans__vfma(va, titans__vload(x + i), titans__vload(y + i)));
  for (; i < n; i++) y[i] += alpha * x[i];
}

/* ---- status, errors --------------------------------------------------------------------------- */
TITANSDEF const char *titans_status_string(int status) {
  switch (status) {
    case TITANS_OK: return "ok";
    case TITANS_ERR_ARG: return "invalid argument";
    case TITANS_ERR_NOMEM: return "out of memory";
    case TITANS_ERR_IO: return "i/o error";
    case TITANS_ERR_FORMAT: return "malformed data";
    case TITANS_ERR_NONFINITE: return "non-finite value";
    case TITANS_ERR_STATE: return "invalid state";
    default: return "unknown status";
  }
}

/* Write a formatted message into an object's error buffer (size TITANS__ERRLEN) and return status. */
#define TITANS__ERRLEN TITANS_ERR_MSG_SIZE
static inline int titans__error(char *buf, int status, const char *fmt, ...) {
  if (buf) {
#ifndef TITANS_NO_STDIO
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, TITANS__ERRLEN, fmt, ap);
    va_end(ap);
#else
    size_t n = strlen(fmt);
    if (n >= TITANS__ERRLEN) n = TITANS__ERRLEN - 1;
    memcpy(buf, fmt, n);
    buf[n] = 0;
#endif
  }
  return status;
}

/* ---- checked sizes, allocation ---------------------------------------------------------------- */
TITANSDEF int titans_size_mul(size_t a, size_t b, size_t *out) {
  if (b != 0 && a > SIZE_MAX / b) return 0;
  *out = a * b;
  return 1;
}

TITANSDEF int titans_size_add(size_t a, size_t b, size_t *out) {
  if (a > SIZE_MAX - b) return 0;
  *out = a + b;
  return 1;
}

TITANSDEF void *titans_alloc_bytes(size_t count, size_t elem_size) {
  size_t bytes;
  if (!titans_size_mul(count, elem_size, &bytes)) return NULL;
  if (bytes == 0) bytes = 1;
  void *p = TITANS_MALLOC(bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

TITANSDEF float *titans_alloc_floats(size_t count) { return (float *)titans_alloc_bytes(count, sizeof(float)); }

TITANSDEF void titans_free(void *p) {
  if (p) TITANS_FREE(p);
}

TITANSDEF int titans_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/* ---- RNG -------------------------------------------------------------------------------------- */
TITANSDEF void titans_rng_seed(titans_rng *rng, uint64_t seed) { rng->state = seed ^ 0x9E3779B97F4A7C15ull; }

TITANSDEF uint64_t titans_rng_u64(titans_rng *rng) {
  uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

TITANSDEF float titans_rng_uniform(titans_rng *rng) { return (float)(titans_rng_u64(rng) >> 40) * (1.0f / 16777216.0f); }

TITANSDEF float titans_rng_normal(titans_rng *rng) {
  /* Box-Muller from two 53-bit uniforms; u1 in (0, 1] so log never sees 0. */
  double u1 = ((double)(titans_rng_u64(rng) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = (double)(titans_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#include "src/gemm_impl.h"
#include "src/ops_impl.h"
#include "src/memory_impl.h"
#include "src/attn_impl.h"
#include "src/safetensors_impl.h"
#include "src/model_impl.h"
#include "src/checkpoint_impl.h"

#ifdef TITANS__GCC_DIAGNOSTIC_PUSHED
#pragma GCC diagnostic pop
#endif
#endif /* TITANS_IMPLEMENTATION_DONE */
#endif /* TITANS_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
This software is available under 2 licenses -- choose whichever you prefer.
------------------------------------------------------------------------------
ALTERNATIVE A - MIT License
Copyright (c) 2026 The titans.h authors
Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:
The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
ALTERNATIVE B - Public Domain (www.unlicense.org)
This is free and unencumbered software released into the public domain.
Anyone is free to copy, modify, publish, use, compile, sell, or distribute this
software, either in source code form or as a compiled binary, for any purpose,
commercial or non-commercial, and by any means.
In jurisdictions that recognize copyright laws, the author or authors of this
software dedicate any and all copyright interest in the software to the public
domain. We make this dedication for the benefit of the public at large and to
the detriment of our heirs and successors. We intend this dedication to be an
overt act of relinquishment of all present and future rights to this software
under copyright law.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN
ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION
WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
------------------------------------------------------------------------------
*/
