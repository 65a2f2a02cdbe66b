/* titans.h - v0.1.0 - Titans sequence models in one C11 header, no dependencies.

   Titans ("Learning to Memorize at Test Time", Behrouz, Zhong, Mirrokni, 2025) are sequence models whose
   long-term memory is a small MLP that keeps learning (by gradient descent with momentum and weight
   decay) while the model runs. This header trains and runs them on a CPU.

   USAGE
     In exactly one C or C++ file:
         #define TITANS_IMPLEMENTATION
         #include "titans.h"
     Everywhere else just #include "titans.h". Compile with -O3 (or -O2) -march=native (SIMD) and -fopenmp
     (threads, optional). Link with -lm.

   OPTIONS (define before including the implementation)
     TITANS_STATIC        every public function is static to the including file
     TITANS_MALLOC(n), TITANS_FREE(p)
                          your allocator (define both or neither; no realloc is needed: blocks are
                          64-byte aligned inside larger TITANS_MALLOC blocks)
     TITANS_ASSERT(x)     your assert (default: assert from <assert.h>); only checks internal
                          invariants, never the caller's input, which is reported as an error instead
     TITANS_NO_SIMD       plain scalar kernels (same results within float tolerance)
     TITANS_NO_STDIO      no file functions; error messages are not formatted
     TITANS_NO_FSYNC      saves do not fsync the file and its folder (faster, not durable across a
                          power loss); fsync is only used on POSIX systems (__unix__, __APPLE__)
     TITANS_COUNT_FLOPS   titans_gemm counts its multiply-adds (titans_gemm_madds), for benchmarks

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
     - Functions take at most 10 parameters: arrays that travel together go as one small struct of
       named pointers with their shapes, by const pointer (a memory chunk, titans__mem_chunk; an
       attention call, titans_attn_shape; an optimizer span, titans_adamw_arrays; a product,
       titans__gemm_job), or by value when it is a pointer and its stride (a matrix operand of
       titans_gemm and its leading dimension, titans_cmat / titans_mat). The SIMD tiles too (titans_gemm's
       titans__gemm_* kernels, titans__mem_update_tile, titans__attn_madd_kernel): their extra arguments
       are compile-time tile sizes, and the always-inlined ones take a product by value
       (titans__gemm_job) and load its fields into locals first, so that they stay in registers.

   CONTENTS
     1. Core: status codes, allocation, checked sizes, RNG, SIMD layer
     2. GEMM: C = alpha op(A) op(B) + beta C
     3. Kernels: activations, norms, conv, embedding, cross-entropy, AdamW
     4. Neural long-term memory layer (docs/model.md section 1)
     5. Attention
     6. Safetensors files
     7. Models (MAC, MAG, MAL, LMM, attention baselines), training, sessions, sampling: one table of
        the block kinds (titans__kinds), then a subsection per kind with its training forward,
        backward and one-token step side by side
     8. Checkpoints and tokenizer

   DATA-PARALLEL TRAINING (several processes, e.g. MPI ranks; the header links no MPI)
     titans_trainer_set_reduce(&tr, fn, user) after titans_trainer_init / _load: every training step
     then hands fn this process's gradient slab (as a sum over its counted targets), loss sum and target
     count once, before clipping; fn replaces each with its sum over the processes (one in-place
     all-reduce), so the global norm and the AdamW step are the same on every process. Or
     titans_trainer_set_reduce_overlap(&tr, start, finish, user): the backward hands start each range of
     the slab as soon as it is final (a layer's while the layers below are differentiated: start an
     MPI_Iallreduce), and finish sums the loss and count and waits for them all before clipping.
     docs/mpi.md has a complete MPI program.

   THE MODEL, in the project's own words (every layer's equations, parameter names and shapes, the
   decisions where the paper is silent, a glossary of the paper's terms): docs/model.md. "docs/model.md
   1.4" in a comment means its section 1.4.

   REVISION HISTORY (one line a version; every change is in the project's git log)
     unreleased          API: titans_attention_forward takes its positions and sizes as a titans_attn_shape,
                         titans_attention_backward takes (titans_attn_grads, titans_attn_saved,
                         titans_attn_shape), titans_adamw_update its arrays as a titans_adamw_arrays;
                         cfg.mem.gate_key, a write gate that also reads the key (off: files unchanged);
                         cfg.mem.qk_linear, queries and keys without the SiLU (off: files unchanged);
                         cfg.mem.least_squares, the memory as the gate-weighted least-squares fit of values on
                         keys (recursive least squares; off: files unchanged);
                         titans_lookup_init.emb_shared (one vector every token embedding starts with);
                         titans_config_default_persist; titans_trainer_set_reduce_overlap (the data-parallel
                         sum overlapped with the backward)
                         API: titans_gemm takes 10 arguments, a matrix and its ld as titans_cm(a, lda) / titans_m;
                         one exp (degree 7) for kernels and attention: activations change in their last bits
                         titans_lookup_init.head_gain (the final norm's gain at the start); the default
                         look-up start sets it to 0.5 (titans_lookup_init_default changes the models it builds)
                         titans_train_config.write_cost and write_cost_from, a cost on writing (titans_mem_ctx.
                         write_cost carries it into the memory's backward; off: files unchanged)
                         titans_train_config.write_cost_log (titans_mem_ctx.write_cost_log), the same in log space
                         titans_trainer_set_write_cost_skip (titans_mem_ctx.write_cost_skip): positions both
                         costs leave alone; titans_train_config_check, which titans_trainer_init now applies
     0.1.0 (2026-11-21)  first version: MAC, MAG, MAL, LMM, LM2 and attention baselines; train, stream, run, save

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

/* Allocate count floats (zeroed, 64-byte aligned); NULL on overflow or failure. Free with titans_free
   (never free(): the block starts inside a larger TITANS_MALLOC block). */
TITANSDEF float *titans_alloc_floats(size_t count);
TITANSDEF void *titans_alloc_bytes(size_t count, size_t elem_size); /* zeroed, 64-byte aligned; NULL on failure */
TITANSDEF void titans_free(void *p);

/* Number of threads the library's parallel loops use (1 without OpenMP). */
TITANSDEF int titans_threads(void);

/* ---- 2. GEMM (declarations) ------------------------------------------------------------------- */

/* A matrix operand of titans_gemm: the address of its first element and its leading dimension ld (the
   distance between the starts of two rows, in floats; at least the row's width). A and B are read
   (titans_cmat), C is written (titans_mat). titans_cm(p, ld) and titans_m(p, ld) build them in the call:
       titans_gemm(0, 1, rows, d_out, d_in, 1.0f, titans_cm(x, d_in), titans_cm(w, d_in), 0.0f, titans_m(y, d_out));
   is y = x W^T for x [rows, d_in], W [d_out, d_in], y [rows, d_out]. */
typedef struct titans_cmat {
  const float *p; /* the element (0, 0) */
  size_t ld;      /* floats from one row's start to the next */
} titans_cmat;
typedef struct titans_mat {
  float *p;  /* the element (0, 0) */
  size_t ld; /* floats from one row's start to the next */
} titans_mat;
static inline titans_cmat titans_cm(const float *p, size_t ld) {
  titans_cmat a;
  a.p = p;
  a.ld = ld;
  return a;
}
static inline titans_mat titans_m(float *p, size_t ld) {
  titans_mat c;
  c.p = p;
  c.ld = ld;
  return c;
}

/* Row-major C[m x n] = alpha * op(A) * op(B) + beta * C: BLAS's sgemm (row-major), each matrix pointer
   paired with its leading dimension (a.ld is sgemm's lda, b.ld its ldb, c.ld its ldc).
   op(A) is m x k: A is stored [m, a.ld] (a.ld >= k) when trans_a == 0, [k, a.ld] (a.ld >= m) when 1.
   op(B) is k x n: B is stored [k, b.ld] (b.ld >= n) when trans_b == 0, [n, b.ld] (b.ld >= k) when 1.
   C is stored [m, c.ld] (c.ld >= n).
   When beta == 0, C is not read (NaN in C does not propagate). When k == 0 or alpha == 0, C = beta * C
   and A, B are not read (as BLAS). Columns of A, B, C past the widths (the padding up to a.ld, b.ld,
   c.ld) are never read or written. Never allocates: scratch lives on the stack (at most about 330 KiB per
   thread); threads over output tiles with OpenMP when the product is large (m*n*k >= 2^20 per thread)
   and the caller is not already inside a parallel region (where cores are shared with other busy
   processes, OMP_WAIT_POLICY=passive keeps OpenMP's spin-waiting from stalling a threaded call until
   the OS runs the other thread). Each C element is summed over k in a fixed order that depends on the
   shape only, whatever the thread count: results are bit-identical for any number of threads. */
TITANSDEF void titans_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, titans_cmat a,
                           titans_cmat b, float beta, titans_mat c);

#ifdef TITANS_COUNT_FLOPS
/* The multiply-adds of every titans_gemm call since the program started (m n k of each call that reads
   A and B), the library's own calls included: what a benchmark divides by its time for GFLOP/s. The
   count is kept only where TITANS_COUNT_FLOPS is defined (one atomic add per call). */
TITANSDEF unsigned long long titans_gemm_madds(void);
#endif

/* ---- 3. Kernels (declarations) ---------------------------------------------------------------- */

/* Activations, norms, the causal depthwise conv, embedding, cross-entropy and AdamW.
   - Forward kernels write their outputs; backward kernels ACCUMULATE (+=) into the gradients they
     are given (zero them yourself), except titans_cross_entropy, which writes dlogits.
   - They never allocate. Only titans_embedding_forward reports bad input (an int status);
     titans_cross_entropy returns NaN for a target >= V.
   - Large calls run on OpenMP threads (elementwise kernels over blocks, row kernels over rows), unless
     the caller is already inside a parallel region; every output element is computed by one thread in
     a fixed order, so results are bit-identical run to run and do not depend on the thread count.
   - The activations use the library's own vectorised exp (a few ulp from the correctly rounded
     result, +-Inf and NaN handled), so results match libm within float tolerance, not bit for bit. */

/* Elementwise over n floats; out may alias inp. sigma(x) = 1/(1+exp(-x)), SiLU(x) = x sigma(x). */
TITANSDEF void titans_silu_forward(float *out, const float *inp, size_t n);                       /* [n] */
/* dinp += dout * SiLU'(inp), from the forward's input. */
TITANSDEF void titans_silu_backward(float *dinp, const float *dout, const float *inp, size_t n);   /* [n] */
TITANSDEF void titans_sigmoid_forward(float *out, const float *inp, size_t n);                    /* [n] */
/* dinp += dout * out (1 - out), from the forward's output. */
TITANSDEF void titans_sigmoid_backward(float *dinp, const float *dout, const float *out, size_t n); /* [n] */
TITANSDEF void titans_tanh_forward(float *out, const float *inp, size_t n);                       /* [n] */
/* dinp += dout * (1 - out^2), from the forward's output. */
TITANSDEF void titans_tanh_backward(float *dinp, const float *dout, const float *out, size_t n);    /* [n] */

/* Row softmax with the row maximum subtracted; out, inp [rows, cols]; out may alias inp.
   A row that is all -Inf (nothing to attend to) gives zeros; a NaN in a row makes the row NaN. */
TITANSDEF void titans_softmax_forward(float *out, const float *inp, size_t rows, size_t cols);
/* dinp += out * (dout - sum(dout * out)) per row; all [rows, cols]. */
TITANSDEF void titans_softmax_backward(float *dinp, const float *dout, const float *out, size_t rows, size_t cols);

/* RMSNorm per row (docs/model.md section 0): out = inp * rstd * gain, rstd = 1 / sqrt(mean(inp^2) + 1e-6).
   out, inp [rows, cols]; gain [cols]; rstd [rows] is saved for the backward. out may alias inp. */
TITANSDEF void titans_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *gain, size_t rows,
                                      size_t cols);
/* dinp [rows, cols] += ..., dgain [cols] += ... (dgain may be NULL: gain frozen); dout, inp [rows, cols];
   gain [cols]; rstd [rows] from the forward. */
TITANSDEF void titans_rmsnorm_backward(float *dinp, float *dgain, const float *dout, const float *inp,
                                       const float *gain, const float *rstd, size_t rows, size_t cols);

/* L2Norm per row (docs/model.md section 0): out = inp * rnorm, rnorm = 1 / sqrt(sum(inp^2) + 1e-6).
   out, inp [rows, cols]; rnorm [rows] is saved for the backward. out may alias inp. */
TITANSDEF void titans_l2norm_forward(float *out, float *rnorm, const float *inp, size_t rows, size_t cols);
/* dinp [rows, cols] += ...; dout, inp [rows, cols]; rnorm [rows]. */
TITANSDEF void titans_l2norm_backward(float *dinp, const float *dout, const float *inp, const float *rnorm,
                                      size_t rows, size_t cols);

/* Causal depthwise conv (docs/model.md section 0): out_t[j] = sum_{s<K} weight[j, s] * u_{t-K+1+s}[j] over the sequence
   inp [T, C], weight [C, K]. tail [K-1, C] holds the K-1 rows before the sequence (streaming: the last
   K-1 inputs of the previous call), or NULL for zeros. out [T, C] must not alias inp.
   K = 0 is an empty sum (zeros). */
TITANSDEF void titans_conv_forward(float *out, const float *inp, const float *tail, const float *weight, size_t T,
                                   size_t C, size_t K);
/* dinp [T, C] += ..., dweight [C, K] += ... (either may be NULL to skip it); dout, inp [T, C];
   tail [K-1, C] or NULL as in the forward (its gradient is not computed). */
TITANSDEF void titans_conv_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                    const float *tail, const float *weight, size_t T, size_t C, size_t K);

/* out [n, d] = rows tokens[n] of table [vocab, d]. Returns TITANS_ERR_ARG, writing nothing, when a
   token is outside [0, vocab); TITANS_OK otherwise. */
TITANSDEF int titans_embedding_forward(float *out, const int *tokens, const float *table, size_t n, size_t vocab,
                                       size_t d);
/* dtable [vocab, d] row tokens[i] += dout [n, d] row i, in token order (deterministic with repeated
   tokens); negative tokens are skipped. */
TITANSDEF void titans_embedding_backward(float *dtable, const float *dout, const int *tokens, size_t n, size_t d);

/* Mean cross-entropy of logits [n, V] against targets [n]; a target < 0 is ignored (not counted in the
   mean). Returns the mean loss (0 when every target is ignored). When dlogits [n, V] is not NULL it is
   WRITTEN (not accumulated): scale * (softmax - onehot) / count on counted rows, 0 on ignored rows.
   Stable for huge logits (log-sum-exp with the row maximum). A target >= V returns NaN and writes
   nothing. */
TITANSDEF float titans_cross_entropy(float *dlogits, const float *logits, const int *targets, size_t n, size_t V,
                                     float scale);

/* The arrays one AdamW step reads and updates: a span of parameters, its gradient and its moments. */
typedef struct titans_adamw_arrays {
  float *param;      /* [n] updated in place */
  const float *grad; /* [n] */
  float *m;          /* [n] first moment, updated in place */
  float *v;          /* [n] second moment, updated in place */
  size_t n;          /* floats in each */
} titans_adamw_arrays;

/* One AdamW step with decoupled weight decay over a's param, grad, m, v [n]; step counts from 1 (bias
   correction; a step < 1 counts as 1):
     m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
     param -= lr * ( (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps) + weight_decay * param ) */
TITANSDEF void titans_adamw_update(const titans_adamw_arrays *a, float lr, float beta1, float beta2, float eps,
                                   float weight_decay, long step);
/* ================================================================================================
   4. Neural long-term memory layer (docs/model.md section 1)
   ================================================================================================
   Per head h, the memory is an MLP M(z; W) with weights W = (W_0 .. W_{L-1}), W_i [n_{i+1}, n_i],
   n_0 = n_L = d_h, inner widths n_hid = e * d_h. Each token t writes (k_t, v_t) by one step of gradient
   descent with momentum S and weight decay on l_t(W) = ||M(k_t; W) - v_t||^2, the gradient taken at the
   weights of its chunk's start, then reads y_t = M(q_t; W_t). See docs/memory.md for the chunked form
   and the derivation of the backward pass.

   Objects:
     titans_mem_config   sizes and options (docs/model.md 1.1)
     titans_mem_weights  named pointers into a parameter slab the caller owns (docs/model.md 1.2)
     titans_mem_state    the streaming state of B sequences (docs/model.md 1.7): memory weights, momentum,
                         position and conv tails; save/restore/copy
     titans_mem_ctx      activations one training forward saves for its backward
   A layer's call sequence for training:
     titans_mem_state_reset(&st, &cfg, &w);                 (W = w0, S = 0, position 0)
     titans_mem_forward(&cfg, &w, &st, out, x, T, &ctx);    (saves what the backward needs)
     titans_mem_backward(&cfg, &w, &grad, dx, dout, x, &ctx, 1);
   and for inference the same forward with ctx = NULL, in any split of the sequence. */

#define TITANS_MEM_MAX_DEPTH 8

typedef struct titans_mem_config {
  int d;           /* model width (input and output of the layer) */
  int heads;       /* H, memory heads */
  int head_dim;    /* d_h; d_m = heads * head_dim */
  int depth;       /* L_M >= 1 memory MLP layers (1 = matrix memory) */
  int hidden_mult; /* e: inner width n_hid = e * d_h (depth >= 2) */
  int chunk;       /* b, tokens per chunk of the inner mini-batch */
  int conv_width;  /* K_c, causal depthwise conv width; 0 = no conv */
  int residual;    /* 1: M(z) = z + MLP(z) */
  float theta_max; /* upper bound of the inner learning rate */
  float surprise_bound; /* tau > 0: each token's momentary surprise u_t is scaled by
                           1 / sqrt(1 + |u_t|^2 / tau^2), so no token writes more than theta_t tau;
                           0: unbounded (the paper's step). docs/model.md 1.4 */
  int key_ngram;   /* n >= 1: the key conv reads only the n tokens before its own, one per group of
                      channels: channel c of a head reads token t - 1 - floor(c n / d_h) (n = 1: k_t from
                      x_{t-1} alone); the trainer sets every other tap back to 0 after each optimizer step.
                      Needs conv_width >= n + 1. 0: every tap learns, the paper's conv. docs/model.md 5.1 */
  int no_momentum; /* 1: eta_t = 0 for every token (S_t = -theta_t u_t: no past surprise; mom_w, mom_b are
                      unused and get no gradient); 0: the momentum gate of docs/model.md 1.3 */
  int no_forget;   /* 1: alpha_t = 0 for every token (W_t = W_{t-1} + S_t: the memory forgets nothing;
                      decay_w, decay_b are unused and get no gradient); 0: the forgetting gate of
                      docs/model.md 1.3. Not in the paper. Why: a learned alpha is only as small as the
                      training lengths need; a memory trained to 1K forgot MQAR's pairs over 16K of filler. */
  int gate_key;    /* 1: the write gate theta_t also reads the key: theta_t = theta_max sigma(lr_w x_t +
                      lr_k . k_t + lr_b), lr_k [H, d_h] starting at 0, so the memory can write a token or not
                      by the tokens its key holds, not by the token alone (not in the paper; docs/model.md
                      1.3). 0: the paper's gate of x_t alone */
  int qk_linear;   /* 1: queries and keys skip the SiLU: q_t = L2Norm(conv(W_Q x)), the same for k_t (v_t keeps
                      it), so a key's components take either sign instead of lying near one orthant. Not in
                      the paper; measured no better at binding four keys (docs/model.md 1.3). 0: the SiLU */
  int per_token_grad; /* 1: each token's inner gradient is taken at the weights just before it, as with
                      chunk 1, for any chunk b: the chunk is still computed in parallel, by solving a
                      triangular system for the tokens' errors (the delta rule's chunked form, DeltaNet's
                      WY / UT transform). Needs depth 1 and surprise_bound 0 (the errors are then linear in
                      the weights). 0: the gradients of a chunk are taken at its start (the paper's
                      mini-batch). Not in the paper; docs/model.md 1.10 */
  int least_squares; /* 1: the memory is the least-squares fit of the values on the keys, each token weighted by
                      its write gate: W_t = argmin_W sum_{s<=t} theta_s |W k_s - v_s|^2 + |W - W_0|^2, kept
                      token by token (recursive least squares; S holds G_t = I - P_t, P_t the inverse of
                      I + sum_{s<=t} theta_s k_s k_s^T). A later key moves an earlier key's value only as far
                      as the two keys are not yet told apart, where a gradient step moves it by their cosine.
                      Needs depth 1, no_momentum, no_forget, surprise_bound 0, residual 0, per_token_grad 0.
                      Not in the paper (the Mesa layer's rule); docs/model.md 1.11. 0: the gradient step */
} titans_mem_config;

/* Defaults of docs/model.md 1.1 for width d: H = 4, d_h = d / 4, L_M = 2, e = 4, b = 16, K_c = 4, no residual,
   theta_max = 0.1, surprise_bound = 1. A chunk applies b inner gradients taken at one point and momentum
   carries them on, so with aligned keys one chunk moves the memory by about 2 theta 87 times its error
   at b = 16, eta = 0.9 (docs/memory.md section 5): unbounded, a deep memory diverged above theta_max
   0.005. The surprise bound caps each token's step at theta_t tau instead, and with it theta_max 0.1
   trained best on tiny Shakespeare (docs/long_context.md, the stability map). With surprise_bound = 0
   (the paper's unbounded step) use theta_max <= 0.005. */
TITANSDEF titans_mem_config titans_mem_config_default(int d);
/* The memory as a gated delta rule (Gated DeltaNet's recurrence, docs/model.md 1.9): the defaults with
   depth 1 (a matrix memory per head), each token's gradient at the weights just before it (per_token_grad,
   computed in chunks of 16: the same function as chunk 1, a layer at d_h = 64 trains 1.9x faster;
   docs/memory_api.md), no momentum and no surprise bound, theta_max 0.5. Each token then moves the memory by
       W_t = (1 - alpha_t) W_{t-1} - beta_t (W_{t-1} k_t - v_t) k_t^T,   beta_t = 2 theta_t in (0, 1),
   with L2-normalised k_t and q_t, and reads y_t = W_t q_t. */
TITANSDEF titans_mem_config titans_mem_config_gated_delta(int d);
/* Makes c a least-squares memory (least_squares, docs/model.md 1.11): sets least_squares and what a fit has
   no use for, depth 1, no momentum, no forgetting, no surprise bound, no residual, per_token_grad 0; leaves
   the widths, the chunk and theta_max (a token's weight in the fit: ./titans uses 100, which writes a new key
   99% at once). Set no_forget = 0 after it for a fit whose confidence decays by alpha_t (model.md 1.11). */
TITANSDEF void titans_mem_config_use_least_squares(titans_mem_config *c);
/* TITANS_OK, or TITANS_ERR_ARG with a message in err (TITANS_ERR_MSG_SIZE bytes, may be NULL). */
TITANSDEF int titans_mem_config_check(const titans_mem_config *cfg, char *err);

typedef struct titans_mem_weights {
  float *wq, *wk, *wv;             /* [d_m, d] projections */
  float *conv_q, *conv_k, *conv_v; /* [d_m, K_c] causal depthwise convs (NULL when K_c = 0) */
  float *lr_w, *mom_w, *decay_w;   /* [H, d] gates: inner learning rate, momentum, forgetting */
  float *lr_b, *mom_b, *decay_b;   /* [H] */
  float *lr_k;                     /* [H, d_h] the write gate's weights on the key (gate_key; NULL otherwise) */
  float *w0[TITANS_MEM_MAX_DEPTH]; /* w0[i]: [H, n_{i+1}, n_i] each head's initial memory weights */
  float *out_norm;                 /* [d_h] RMSNorm gain on retrieved vectors (shared by heads) */
  float *wg;                       /* [d_m, d] output gate */
  float *wo;                       /* [d, d_m] output projection */
} titans_mem_weights;

/* One named parameter of a layout: name (e.g. "layers.0.mem.w0.1"), shape, offset into the slab. */
typedef enum titans_param_kind {
  TITANS_PARAM_MATRIX = 0, /* gets weight decay */
  TITANS_PARAM_GAIN = 1,   /* norm gains: no decay */
  TITANS_PARAM_BIAS = 2,   /* no decay */
  TITANS_PARAM_TOKENS = 3  /* persistent tokens, memory banks: no decay */
} titans_param_kind;

typedef struct titans_param {
  char name[96];
  int ndim;
  size_t shape[4];
  size_t size;   /* product of the shape */
  size_t offset; /* in floats from the start of the slab */
  int kind;      /* titans_param_kind */
} titans_param;

/* Number of floats of the layer's parameters. */
TITANSDEF size_t titans_mem_param_count(const titans_mem_config *cfg);
/* Points w's fields into slab (titans_mem_param_count floats) in the canonical order. */
TITANSDEF void titans_mem_weights_bind(titans_mem_weights *w, const titans_mem_config *cfg, float *slab);
/* Describes the parameters: fills up to max entries of list (may be NULL) with names prefix + name,
   offsets starting at base_offset; returns the number of parameters. */
TITANSDEF size_t titans_mem_param_list(titans_param *list, size_t max, const titans_mem_config *cfg,
                                       const char *prefix, size_t base_offset);
/* Initialisation of docs/model.md section 5: normal(0, 0.02) matrices, wo scaled by 1/sqrt(2 n_layers), w0 normal(0,
   1/sqrt(fan_in)), conv taps identity (last tap 1) plus normal(0, 0.02), gains 1, gate biases for
   theta = theta_max / 2, eta = 0.5, alpha ~ 0.02 (eta ~ 0.9 until 2026-11-26: docs/long_context.md,
   "Momentum and long windows", says why it changed). */
TITANSDEF void titans_mem_weights_init(const titans_mem_weights *w, const titans_mem_config *cfg, titans_rng *rng,
                                       int n_layers);

typedef struct titans_mem_state {
  titans_mem_config cfg;
  size_t batch;       /* B rows */
  size_t head_size;   /* floats of one head's memory weights: sum_i n_{i+1} n_i */
  long long position; /* tokens consumed (the same for every row) */
  float *w_chunk;     /* [B, H, head_size] weights at the current chunk's start (inner gradients) */
  float *w;           /* [B, H, head_size] running weights W_t */
  float *s_chunk;     /* [B, H, head_size] momentum at the current chunk's start (kept for save/load) */
  float *s;           /* [B, H, head_size] running momentum S_t */
  float *tail_q, *tail_k, *tail_v; /* [B, K_c - 1, d_m] last projected inputs of the update stream */
  float *tail_rq;     /* [B, K_c - 1, d_m] last projected queries of the retrieval stream (MAC) */
  float *scratch;     /* per-call work space, grown on demand */
  size_t scratch_size;
  char error[TITANS_ERR_MSG_SIZE];
} titans_mem_state;

TITANSDEF int titans_mem_state_init(titans_mem_state *st, const titans_mem_config *cfg, size_t batch);
TITANSDEF void titans_mem_state_free(titans_mem_state *st);
/* W = w0 for every row, S = 0, position 0, conv tails zero. */
TITANSDEF void titans_mem_state_reset(titans_mem_state *st, const titans_mem_weights *w);
/* dst (initialised with the same config and batch) becomes a copy of src: a fork. */
TITANSDEF int titans_mem_state_copy(titans_mem_state *dst, const titans_mem_state *src);
/* Serialisation to a flat float buffer: titans_mem_state_floats() floats, position included. */
TITANSDEF size_t titans_mem_state_floats(const titans_mem_state *st);
TITANSDEF void titans_mem_state_save(const titans_mem_state *st, float *buf);
TITANSDEF int titans_mem_state_load(titans_mem_state *st, const float *buf, size_t count);

/* Activations saved by a training forward. Owns its buffers; reusable across calls of the same or
   smaller size. */
typedef struct titans_mem_ctx {
  size_t batch, T, nchunks, cap_bt, cap_states; /* sizes of the last forward, capacities */
  long long start_position;
  int retrieval;        /* 1 when saved by titans_mem_retrieve */
  float *proj;          /* [3, B, T, d_m] wq x, wk x, wv x (conv inputs) */
  float *conv;          /* [3, B, T, d_m] conv outputs (SiLU inputs); = proj when K_c = 0 */
  float *act;           /* [3, B, T, d_m] SiLU outputs (L2Norm inputs for q, k; v itself) */
  float *qk;            /* [2, B, T, d_m] L2-normalised q, k */
  float *rnorm;         /* [2, B, T, H] L2Norm reciprocal norms */
  float *gates;         /* [3, B, T, H] theta, eta, alpha */
  float *y;             /* [B, T, d_m] retrieved memory outputs */
  float *yn;            /* [B, T, d_m] RMSNorm(y) */
  float *rstd;          /* [B, T, H] RMSNorm reciprocal std */
  float *g;             /* [B, T, d_m] wg x (SiLU input of the output gate) */
  float *gated;         /* [B, T, d_m] yn * SiLU(g) (input of wo) */
  float *states;        /* [B, H, nchunks + 1, 2, head_size] W, S at every chunk start and at the end */
  float *tails;         /* [4, B, K_c - 1, d_m] conv tails at the forward's start (q, k, v, rq) */
  /* Gradient with respect to the final state (input to the backward, zero unless the caller adds to
     it) and with respect to the initial state (output of the backward). */
  float *dstate_final;  /* [B, H, 2, head_size] d W_T, d S_T */
  float *dstate_init;   /* [B, H, 2, head_size] d W_0, d S_0 of the forward's start */
  /* Likewise for the conv tails (streams q, k, v, rq), so chained calls get exact gradients. */
  float *dtails_final;  /* [4, B, K_c - 1, d_m] input, zeroed by the forward */
  float *dtails_init;   /* [4, B, K_c - 1, d_m] output */
  float *grad_work;     /* the backward's gradient vectors and per-thread work, kept between calls */
  size_t cap_grad;
  double *stage_seconds; /* NULL, or the caller's [TITANS_MEM_STAGES]: the stage timers (below) */
  /* 0, or the weight of a cost on writing that the caller adds to its loss: write_cost times the sum over
     the forward's tokens and heads of theta_t / theta_max. The backward adds its gradient, write_cost /
     theta_max, to every d theta_t. The trainer sets it from titans_train_config.write_cost. */
  float write_cost;
  /* 0, or the weight of a cost on writing in log space: write_cost_log times the sum over the forward's
     tokens and heads of log(theta_t / theta_max). The backward adds write_cost_log / theta_t to every
     d theta_t above 1e-30 (none below: the cost stops there, where its constant pull would otherwise drive
     a shut gate's logit on without end and c / theta_t overflows). The trainer sets it from
     titans_train_config.write_cost_log. */
  float write_cost_log;
  /* NULL, or [batch, T] of the next forward: 1 where both costs leave the position's write alone (its
     d theta_t gains nothing), e.g. the facts a retrieval example asks the memory to keep; the costs then
     shut the gates of the rest only. The trainer sets it from titans_trainer_set_write_cost_skip. */
  const unsigned char *write_cost_skip;
  char error[TITANS_ERR_MSG_SIZE];
} titans_mem_ctx;

/* The stage timers: where a training forward and its backward spend their time, for benchmarks
   (bench/bench_memory.c). Point ctx->stage_seconds at TITANS_MEM_STAGES doubles: titans_mem_forward
   with that ctx and titans_mem_backward then add each stage's wall time to its entry (the caller zeroes
   them). NULL, the default, reads no clock. */
enum {
  TITANS_MEM_STAGE_INPUTS = 0,              /* forward: projections, convs, SiLU, L2Norm, gates */
  TITANS_MEM_STAGE_RECURRENCE = 1,          /* forward: the chunked recurrence of every row and head */
  TITANS_MEM_STAGE_OUTPUT = 2,              /* forward: RMSNorm, the output gate, wo */
  TITANS_MEM_STAGE_OUTPUT_BACKWARD = 3,     /* backward: zeroing its work space, the output path */
  TITANS_MEM_STAGE_RECURRENCE_BACKWARD = 4, /* backward: the recurrence, last chunk first */
  TITANS_MEM_STAGE_INPUTS_BACKWARD = 5,     /* backward: d W_0, the input path */
  TITANS_MEM_STAGES = 6
};

TITANSDEF void titans_mem_ctx_init(titans_mem_ctx *ctx);
TITANSDEF void titans_mem_ctx_free(titans_mem_ctx *ctx);

/* The memory layer over T new tokens of each of the state's B rows.
   out [B, T, d]: o_t of docs/model.md 1.5; x [B, T, d]: the layer input. Advances the state by T tokens.
   ctx: NULL for inference; otherwise saves activations for titans_mem_backward (the state's position
   must then be a multiple of the chunk size). Returns TITANS_OK or an error (message in st->error). */
TITANSDEF int titans_mem_forward(const titans_mem_config *cfg, const titans_mem_weights *w, titans_mem_state *st,
                                 float *out, const float *x, size_t T, titans_mem_ctx *ctx);

/* Retrieval only (docs/model.md 1.5, MAC step 1): out [B, T, d] from M(q_t; W) with the state's current weights;
   changes no memory weights (only the retrieval stream's conv tail moves on). */
TITANSDEF int titans_mem_retrieve(const titans_mem_config *cfg, const titans_mem_weights *w, titans_mem_state *st,
                                  float *out, const float *x, size_t T, titans_mem_ctx *ctx);

/* Backward of the forward (or retrieve) that filled ctx. Accumulates parameter gradients into grad
   (a titans_mem_weights over a gradient slab) and the input gradient into dx [B, T, d]; dout [B, T, d].
   Adds ctx->dstate_final (gradient of the final state, zeroed by the forward) into the recurrence and
   writes ctx->dstate_init. init_from_w0: 1 when the forward started from titans_mem_state_reset, so
   d W_0 flows into grad->w0 (summed over rows). */
TITANSDEF int titans_mem_backward(const titans_mem_config *cfg, const titans_mem_weights *w,
                                  const titans_mem_weights *grad, float *dx, const float *dout, const float *x,
                                  titans_mem_ctx *ctx, int init_from_w0);

/* Direct associative-memory access for a host program (no projections, gates given):
   write n (key, value) pairs into head `head` of row `row`: keys, values [n, d_h]; gates theta, eta,
   alpha [n] (NULL eta/alpha = 0, i.e. plain SGD without momentum or forgetting). A least-squares memory
   (cfg least_squares) adds each pair to its fit with weight theta and reads no eta or alpha. */
TITANSDEF int titans_mem_write(titans_mem_state *st, size_t row, size_t head, const float *keys, const float *values,
                               const float *theta, const float *eta, const float *alpha, size_t n);
/* read: out [n, d_h] = M(queries[i]; W) with the current weights of (row, head). */
TITANSDEF int titans_mem_read(titans_mem_state *st, size_t row, size_t head, float *out, const float *queries,
                              size_t n);
/* ---- 5. Attention (declarations) -------------------------------------------------------------- */

/* Kernels of the short-term memory (docs/model.md section 2): RoPE, one masked multi-head attention forward and
   backward that covers every mask the blocks need, and a bounded KV cache for inference.

   Layout. A buffer of H heads of width d_a is [rows, H * d_a]: head h of row t is the slice
   x[t * H * d_a + h * d_a .. + d_a). Positions are int64_t (long is 32 bits on some platforms).

   The mask. Keys are a prefix of P always-visible rows (persistent memory tokens, docs/model.md section 2) followed by
   Tk positioned rows with positions kpos[0..Tk). The query with position qpos[i] sees
       - every prefix row, and
       - positioned key j iff  kpos[j] <= qpos[i]  and  (window == 0 or kpos[j] > qpos[i] - window).
   This one rule gives every attention of the blocks:
       - full causal self-attention:   P = 0, kpos = qpos = [0..T), window = 0;
       - sliding window w (SWA):       the same with window = w (a query at t sees (t - w, t]);
       - persistent tokens (MAG, MAL): P = N_p, keys = [persist k || K] (no RoPE on the prefix rows);
       - MAC (docs/model.md 3.1), one segment of C tokens, keys = [persist || Hm || X], queries from X:
         P = N_p, Tk = 2C, kpos = [0..C-1, 0..C-1], qpos = [0..C-1], window = 0. Hm_j and X_j both
         carry position j, so the query at i sees Hm_j and X_j for j <= i and no later retrieved token.

   A block's attention (per sequence): q = x wq^T, k = [persist; x] wk^T, v likewise (titans_gemm);
   titans_rope_forward on q and on the Tk positioned rows of k; titans_attention_forward; out wo^T.
   Backward: titans_attention_backward, then titans_rope_backward on dq and on the positioned rows
   of dk; the prefix rows of dk, dv are the persistent tokens' gradients (through wk, wv).

   No order of kpos is required. The kernels split kpos (and qpos in the backward) into maximal
   non-decreasing runs: with at most TITANS_ATTN_MAX_RUNS runs (one for causal/SWA, two for MAC) each
   query finds its visible keys by binary search in every run, so SWA costs O(window) per query;
   with more runs they scan every key. Keys are always visited in index order, prefix first.

   Numerics. Scores are q.k / sqrt(d_a) in float; the softmax is computed online, tile by tile, with the
   running maximum subtracted (flash-attention style), so no [Tq, Tk] score matrix is ever formed and
   the forward allocates nothing. A tile is the prefix in chunks of TITANS_ATTN_TILE rows, then runs of
   consecutive keys whose positions share floor(pos / TITANS_ATTN_TILE): for increasing positions a
   query's tiles depend only on the keys it sees, so the batched forward and the KV cache give the same
   bits. exp is a private polynomial (< 1.4 ulp) that vectorises. A query that sees no key (not possible
   in the blocks) outputs zeros and has lse = -INFINITY. The forward saves the log-sum-exp of each
   (row, head); the backward recomputes the scores from it.

   Speed: the scores are 4 x 4 blocks of dot products whose sixteen lane sums are reduced together, the
   weighted sums (p v, and dq, dk, dv in the backward) 4 x 64 register blocks; `bench_attn` (make bench)
   prints GFLOP/s and the fraction of the machine's FMA peak (figures: docs/results/). */

#define TITANS_ROPE_BASE 10000.0 /* docs/model.md section 0: RoPE base */
#define TITANS_ATTN_TILE 64      /* keys per online-softmax tile */
#define TITANS_ATTN_MAX_RUNS 16  /* sorted position runs searched by bisection; more runs => scan */

/* RoPE in place on x [T, H * d_a], rotate-half convention: within each head, the pair
   (x[i], x[i + d_a/2]) for i < d_a/2 is rotated by the angle pos[t] * BASE^(-2i / d_a):
       x[i]       <- x[i] cos - x[i + d_a/2] sin
       x[i + d_a/2] <- x[i] sin + x[i + d_a/2] cos
   Angle, sin, cos and the rotation are computed in double (positions in the millions stay exact) and
   rounded once to float. d_a must be even (TITANS_ERR_ARG otherwise). Threads over rows. */
TITANSDEF int titans_rope_forward(float *x,            /* [T, H * d_a] in place */
                                  const int64_t *pos,  /* [T] absolute positions */
                                  size_t T, size_t H, size_t d_a);

/* Backward of titans_rope_forward: the rotation is orthogonal, so the gradient with respect to the
   input is the rotation by the negative angle of the gradient with respect to the output. Applied in
   place: dx holds dL/d(rotated x) on entry and dL/d(x) on return (an overwrite, not an accumulation,
   as the forward overwrites x). */
TITANSDEF int titans_rope_backward(float *dx,           /* [T, H * d_a] in place */
                                   const int64_t *pos,  /* [T] */
                                   size_t T, size_t H, size_t d_a);

/* The shape of one attention call: Tq query rows at positions qpos, attending over P prefix rows (every
   query sees them) then Tk key rows at positions kpos, in H heads of d_a, within window positions. The
   forward, the backward and the kernels inside take it whole, as every one of them needs most of it. */
typedef struct titans_attn_shape {
  const int64_t *qpos; /* [Tq] query positions */
  const int64_t *kpos; /* [Tk] positions of the key rows after the prefix (may be NULL when Tk = 0) */
  size_t Tq;           /* query rows */
  size_t P;            /* prefix rows (persistent tokens): no position, visible to every query */
  size_t Tk;           /* positioned key rows */
  size_t H, d_a;       /* heads, head width (even, for RoPE) */
  int64_t window;      /* a query at t sees keys in (t - window, t]; 0 = no window */
} titans_attn_shape;

/* The arrays of an attention call that its backward reads: the forward's inputs and outputs. */
typedef struct titans_attn_saved {
  const float *q;   /* [Tq, H * d_a] */
  const float *k;   /* [P + Tk, H * d_a] prefix first */
  const float *v;   /* [P + Tk, H * d_a] */
  const float *out; /* [Tq, H * d_a] the forward's output */
  const float *lse; /* [Tq, H] the forward's log-sum-exp */
} titans_attn_saved;

/* The gradients of an attention call: dq, dk, dv (laid out as q, k, v) are added into, from dout. */
typedef struct titans_attn_grads {
  float *dq;         /* [Tq, H * d_a] += */
  float *dk;         /* [P + Tk, H * d_a] += (prefix rows included) */
  float *dv;         /* [P + Tk, H * d_a] += */
  const float *dout; /* [Tq, H * d_a] dL/d out */
} titans_attn_grads;

/* Masked multi-head attention forward (mask: see above). For each query row i and head h:
       out[i, h] = sum_j softmax_j(q[i, h] . k[j, h] / sqrt(d_a)) v[j, h]   over the visible keys j
       lse[i, h] = log sum_j exp(q[i, h] . k[j, h] / sqrt(d_a))            (-INFINITY if none visible)
   lse may be NULL (inference). out must not overlap q, k or v. Allocates a transposed copy of k
   ((P + Tk) * H * d_a floats, rounded up to 16 rows) for its score kernel. Threads over heads x tiles
   of query rows; every output element is computed by one thread in a fixed order (bit-identical for
   any thread count). Returns TITANS_ERR_ARG for d_a == 0, H == 0, window < 0, sizes that overflow, or
   a NULL buffer that is needed, TITANS_ERR_NOMEM when the copy cannot be allocated. */
TITANSDEF int titans_attention_forward(float *out,                     /* [Tq, H * d_a] */
                                       float *lse,                     /* [Tq, H] or NULL */
                                       const float *q,                 /* [Tq, H * d_a] */
                                       const float *k,                 /* [P + Tk, H * d_a] prefix first */
                                       const float *v,                 /* [P + Tk, H * d_a] */
                                       const titans_attn_shape *shape); /* positions, sizes, window */

/* Backward of titans_attention_forward. ACCUMULATES: dq += dL/dq, dk += dL/dk, dv += dL/dv (prefix
   rows included). Needs the forward's out and lse; recomputes the scores. The gradients must not
   overlap the inputs. Deterministic: every
   gradient element is summed in one fixed order (dq over keys in index order, dk and dv over queries
   in index order) whatever the thread count. It threads over heads in one fused pass (query tiles in
   order, each adding its dq and its dk, dv terms), or, when there are at least three times as many
   threads as heads, in two passes (dq over heads x query tiles, then dk, dv over heads x key tiles)
   that cost about 1.8 times the work but give bit-identical results. Allocates transposed copies of k
   and v (twice the forward's copy; TITANS_ERR_NOMEM when that fails); the two-pass scheme also
   allocates Tq * H floats, and if that fails it falls back to the fused pass. */
TITANSDEF int titans_attention_backward(const titans_attn_grads *grads, /* dq, dk, dv += from dout */
                                        const titans_attn_saved *saved, /* the forward's q, k, v, out, lse */
                                        const titans_attn_shape *shape); /* the forward's */

/* A bounded KV cache for token-by-token inference: the P prefix rows (persistent tokens) and a ring
   of at most `capacity` positioned keys/values. Appending beyond the capacity overwrites the oldest
   row, so memory stays bounded however long the stream runs. Queries use the mask rule above with
   the cache's window. Capacity to choose: SWA (window w): w; full attention: the longest context;
   MAC: 2C (the Hm and X rows of one segment; reset at each segment boundary).
   Keys are stored as given: apply RoPE to them before titans_kv_cache_append. Rows must be appended
   in non-decreasing position order for the ring to keep the rows a later query can see.
   titans_kv_cache_init allocates every slot; the caches of inference sessions start small and grow
   by use (doubling, up to the capacity), so a large capacity read from an untrusted file costs
   memory only as tokens arrive. Until the ring first fills, slots 0 .. count - 1 hold the rows in
   order (next == count). Write k and v through these functions (append, set_prefix), not directly:
   the keys are also kept transposed (kt). */
typedef struct titans_kv_cache {
  float *k;         /* [P + reserved, H * d_a]: prefix rows, then the ring slots */
  float *v;         /* [P + reserved, H * d_a] */
  float *kt;        /* k again, transposed in panels of 16 rows (the layout the attention's score kernel
                       reads, docs/model.md section 2); the cache's functions keep it in step with k */
  int64_t *pos;     /* [reserved] position of each ring slot */
  size_t P;         /* prefix rows */
  size_t capacity;  /* ring slots */
  size_t reserved;  /* ring slots allocated (<= capacity); append grows it by doubling */
  size_t H, d_a;    /* heads, head width */
  int64_t window;   /* mask window, 0 = none */
  size_t count;     /* valid ring rows, <= capacity */
  size_t next;      /* ring slot the next append writes */
  char error[256];  /* message of the last error (TITANS__ERRLEN) */
} titans_kv_cache;

/* Allocate a cache (prefix rows zeroed, ring empty). On failure returns TITANS_ERR_ARG (capacity, H or
   d_a zero, window < 0) or TITANS_ERR_NOMEM and leaves a cache that titans_kv_cache_free accepts. */
TITANSDEF int titans_kv_cache_init(titans_kv_cache *cache, size_t P, size_t capacity, size_t H,
                                   size_t d_a, int64_t window);
TITANSDEF void titans_kv_cache_free(titans_kv_cache *cache);
/* Copy the persistent keys/values (projected, no RoPE) into the prefix rows. */
TITANSDEF void titans_kv_cache_set_prefix(titans_kv_cache *cache,
                                          const float *k_prefix,  /* [P, H * d_a] */
                                          const float *v_prefix); /* [P, H * d_a] */
/* Forget every positioned row; the prefix stays. */
TITANSDEF void titans_kv_cache_reset(titans_kv_cache *cache);
/* Fork: dst becomes an independent copy of src. dst must be an initialised cache of the same shape
   (P, capacity, H, d_a; TITANS_ERR_ARG otherwise); dst's slots grow when src holds more rows than
   dst has allocated (TITANS_ERR_NOMEM, dst unchanged, when that fails). */
TITANSDEF int titans_kv_cache_copy(titans_kv_cache *dst, const titans_kv_cache *src);
/* Fork into a new cache: dst (uninitialised) is allocated as a copy of src. */
TITANSDEF int titans_kv_cache_clone(titans_kv_cache *dst, const titans_kv_cache *src);
/* Append n rows (n may exceed the capacity: then only the last `capacity` rows stay). Grows the
   allocated slots when needed: TITANS_ERR_NOMEM (cache unchanged) when that fails. */
TITANSDEF int titans_kv_cache_append(titans_kv_cache *cache,
                                     const float *k,      /* [n, H * d_a], RoPE applied */
                                     const float *v,      /* [n, H * d_a] */
                                     const int64_t *pos,  /* [n] */
                                     size_t n);
/* Attention of one query over the cache (prefix, then ring rows oldest first): the result of
   titans_attention_forward for the same visible keys, bit-identical when the cache holds them in the
   batched order with increasing positions (SWA, full attention). lse may be NULL. Threads over heads
   when the cache is large. */
TITANSDEF int titans_kv_cache_attend(titans_kv_cache *cache,
                                     float *out,         /* [H * d_a] */
                                     float *lse,         /* [H] or NULL */
                                     const float *q,     /* [H * d_a], RoPE applied */
                                     int64_t qpos);
/* The message of the cache's last error ("" if none). */
TITANSDEF const char *titans_kv_cache_error(const titans_kv_cache *cache);
/* ---- 6. Safetensors files (declarations) ------------------------------------------------------

   The checkpoint format of docs/model.md section 6, as Python's safetensors writes it:
       [8 bytes: N, little-endian u64] [N bytes: JSON header] [data: raw little-endian tensor bytes]
   The header maps each tensor name to {"dtype":"F32","shape":[...],"data_offsets":[begin,end]}
   (offsets count from the end of the header) and may hold "__metadata__": {"key":"value",...}
   whose values are all strings.

   Reading: titans_st_reader_parse (a memory buffer) or titans_st_reader_load (a path) validates the
   whole file against its real size before returning TITANS_OK; a malformed, truncated, oversized or
   hostile file returns TITANS_ERR_FORMAT (TITANS_ERR_IO, TITANS_ERR_NOMEM) with a message in
   reader.error. It accepts exactly what Python's safetensors accepts, less: tensors of more than
   TITANS_ST_MAX_DIMS dimensions, names longer than TITANS_ST_MAX_NAME bytes, a "\u0000" in a
   string, a key repeated inside one JSON object (serde keeps the last one; we refuse), a
   "__metadata__" that is neither an object of strings nor null. Unknown fields inside a tensor's entry
   are checked to be JSON and ignored, as serde does.

       titans_st_reader r;
       if (titans_st_reader_load(&r, "model.safetensors") != TITANS_OK) puts(r.error);
       size_t shape[2] = {64, 16};
       float w[64 * 16];
       if (titans_st_read_f32(&r, "layers.0.attn.wq", w, 2, shape) != TITANS_OK) puts(r.error);
       const char *cfg = titans_st_meta(&r, "config");    // NULL when absent
       titans_st_reader_free(&r);

   Writing: collect F32 tensors (borrowed, not copied) and string metadata in a titans_st_writer, then
   serialise to memory or save to a path atomically ("<path>.tmp", then rename). The output is
   deterministic and byte-identical to what Python's safetensors writes for the same F32 tensors and
   (for at most one key, whose order Python does not fix) metadata: tensors sorted by name, data
   contiguous in that order, header padded with spaces to a multiple of 8 bytes. */

#define TITANS_ST_MAX_DIMS 8                 /* dimensions of one tensor */
#define TITANS_ST_MAX_NAME 4096              /* bytes of a tensor name (UTF-8, without the NUL) */
#define TITANS_ST_MAX_HEADER 100000000u      /* bytes of the JSON header (Python's limit) */

/* Element types, with Python's names (titans_st_dtype_name). F4 is 4 bits, F6_* 6 bits a element: a
   tensor of those must hold a whole number of bytes. */
typedef enum titans_st_dtype {
  TITANS_ST_BOOL, TITANS_ST_F4, TITANS_ST_F6_E2M3, TITANS_ST_F6_E3M2, TITANS_ST_U8, TITANS_ST_I8,
  TITANS_ST_F8_E5M2, TITANS_ST_F8_E4M3, TITANS_ST_F8_E8M0, TITANS_ST_F8_E4M3FNUZ, TITANS_ST_F8_E5M2FNUZ,
  TITANS_ST_I16, TITANS_ST_U16, TITANS_ST_F16, TITANS_ST_BF16, TITANS_ST_I32, TITANS_ST_U32, TITANS_ST_F32,
  TITANS_ST_C64, TITANS_ST_F64, TITANS_ST_I64, TITANS_ST_U64,
  TITANS_ST_DTYPE_COUNT
} titans_st_dtype;

/* "F32", "BF16", ...; "?" for a value out of range. */
TITANSDEF const char *titans_st_dtype_name(titans_st_dtype dtype);
/* Bits of one element (32 for F32); 0 for a value out of range. */
TITANSDEF size_t titans_st_dtype_bits(titans_st_dtype dtype);

/* One tensor of a parsed file. Everything points into the reader; valid until titans_st_reader_free. */
typedef struct titans_st_tensor {
  const char *name;                  /* NUL-terminated UTF-8 */
  titans_st_dtype dtype;
  size_t ndim;                       /* 0..TITANS_ST_MAX_DIMS; 0 is a scalar (one element) */
  size_t shape[TITANS_ST_MAX_DIMS];  /* [ndim], the rest 0 */
  size_t numel;                      /* product of shape */
  size_t nbytes;                     /* numel * bits / 8 = data_offsets end - begin */
  size_t offset;                     /* data_offsets begin, from the start of the data region */
  const unsigned char *data;         /* [nbytes] little-endian, inside the file's bytes; not aligned */
} titans_st_tensor;

/* A parsed file. Read the fields, change none of them. */
typedef struct titans_st_reader {
  const unsigned char *bytes;   /* [size] the whole file: the caller's buffer, or owned (below) */
  size_t size;
  unsigned char *owned;         /* [size] the file's bytes when read from a path, else NULL */
  size_t header_len;            /* N */
  titans_st_tensor *tensors;    /* [n_tensors] sorted by name (strcmp: bytes, i.e. code points) */
  size_t n_tensors;
  const char **meta;            /* [n_meta][2] key, value, sorted by key */
  size_t n_meta;
  char *strings;                /* [header_len + 1] arena of the decoded names, keys and values */
  char error[TITANS_ERR_MSG_SIZE]; /* message of the last error, "" when none */
} titans_st_reader;

/* Parse a file held in memory: buf [size] is NOT copied and must outlive the reader. Sets every field
   of *r (an earlier content is not freed: free it first). On failure r holds no allocation and
   r->error says why; titans_st_reader_free(r) is safe either way. Allocates O(header length), never
   more than the buffer's size implies. Returns TITANS_OK, TITANS_ERR_FORMAT or TITANS_ERR_NOMEM. */
TITANSDEF int titans_st_reader_parse(titans_st_reader *r, const void *buf, size_t size);
#ifndef TITANS_NO_STDIO
/* Read the whole file at path into memory (the reader owns it) and parse it as above. Returns
   TITANS_OK, TITANS_ERR_IO (cannot open or read), TITANS_ERR_NOMEM or TITANS_ERR_FORMAT. */
TITANSDEF int titans_st_reader_load(titans_st_reader *r, const char *path);
#endif
/* Release what the reader owns and leave it empty (n_tensors = 0). */
TITANSDEF void titans_st_reader_free(titans_st_reader *r);
TITANSDEF const char *titans_st_reader_error(const titans_st_reader *r);

/* The tensor called name, or NULL (binary search, O(log n)). */
TITANSDEF const titans_st_tensor *titans_st_find(const titans_st_reader *r, const char *name);
/* Tensor i in name order, i < r->n_tensors; NULL when out of range. */
TITANSDEF const titans_st_tensor *titans_st_tensor_at(const titans_st_reader *r, size_t i);
/* Copy tensor name into out [prod(shape)] as floats, after checking that it exists (else
   TITANS_ERR_FORMAT), is F32 (else TITANS_ERR_FORMAT) and has exactly the shape [ndim] (else
   TITANS_ERR_FORMAT, the message naming the tensor and both shapes). ndim > TITANS_ST_MAX_DIMS or a
   NULL argument: TITANS_ERR_ARG. Bit-exact (NaN payloads included); out is untouched on error. */
TITANSDEF int titans_st_read_f32(titans_st_reader *r, const char *name, float *out, size_t ndim,
                                 const size_t *shape);
/* The metadata value of key, or NULL. Values are NUL-terminated UTF-8 owned by the reader. */
TITANSDEF const char *titans_st_meta(const titans_st_reader *r, const char *key);
/* Metadata pair i in key order (i < r->n_meta): returns 1 and sets *key, *value; 0 when out of range. */
TITANSDEF int titans_st_meta_at(const titans_st_reader *r, size_t i, const char **key, const char **value);

/* ---- writer ----------------------------------------------------------------------------------- */
typedef struct titans__st_wtensor {
  char *name;                        /* owned copy */
  const float *data;                 /* [numel] borrowed from the caller */
  size_t ndim;
  size_t shape[TITANS_ST_MAX_DIMS];  /* [ndim] */
  size_t numel;
} titans__st_wtensor;

typedef struct titans__st_wmeta {
  char *key, *value;                 /* owned copies */
} titans__st_wmeta;

typedef struct titans_st_writer {
  titans__st_wtensor *tensors;       /* [cap_tensors], n_tensors used */
  size_t n_tensors, cap_tensors;
  titans__st_wmeta *meta;            /* [cap_meta], n_meta used */
  size_t n_meta, cap_meta;
  char error[TITANS_ERR_MSG_SIZE];   /* message of the last error, "" when none */
} titans_st_writer;

/* An empty writer; titans_st_writer_free releases it. */
TITANSDEF void titans_st_writer_init(titans_st_writer *w);
TITANSDEF void titans_st_writer_free(titans_st_writer *w);
TITANSDEF const char *titans_st_writer_error(const titans_st_writer *w);
/* Add an F32 tensor. name is copied (valid UTF-8, at most TITANS_ST_MAX_NAME bytes, not
   "__metadata__", not already added); shape [ndim] is copied (ndim <= TITANS_ST_MAX_DIMS, ndim = 0 is
   a scalar); data [prod(shape)] is BORROWED: it must stay valid and unchanged until the last
   serialise/save call. data may be NULL only when prod(shape) = 0. TITANS_ERR_ARG or
   TITANS_ERR_NOMEM on failure, with nothing added. */
TITANSDEF int titans_st_writer_add_f32(titans_st_writer *w, const char *name, const float *data, size_t ndim,
                                       const size_t *shape);
/* Add a metadata pair; both strings are copied and must be valid UTF-8; a key may be given once.
   TITANS_ERR_ARG or TITANS_ERR_NOMEM on failure, with nothing added. */
TITANSDEF int titans_st_writer_add_meta(titans_st_writer *w, const char *key, const char *value);
/* Serialise into a new buffer *out [*size], allocated with titans_alloc_bytes: free it with
   titans_free. On failure *out = NULL, *size = 0. TITANS_ERR_ARG (header over TITANS_ST_MAX_HEADER)
   or TITANS_ERR_NOMEM. */
TITANSDEF int titans_st_writer_to_memory(titans_st_writer *w, unsigned char **out, size_t *size);
#ifndef TITANS_NO_STDIO
/* Write the file atomically: to "<path>.tmp" (streamed: only the header is buffered), flushed and
   closed with every error checked, fsync'ed, then renamed over path, and the folder fsync'ed (best
   effort: some file systems refuse it), so a crash or power loss leaves the old file or the new one.
   fsync is POSIX only (__unix__, __APPLE__) and off under TITANS_NO_FSYNC. On failure the temporary
   file is removed, an existing file at path is left as it was, and TITANS_ERR_IO (or _ARG, _NOMEM)
   is returned. */
TITANSDEF int titans_st_writer_save(titans_st_writer *w, const char *path);
#endif
/* ================================================================================================
   7. Models, training and inference sessions (docs/model.md sections 3 and 5)
   ================================================================================================
   A language model: tok_emb [V, d] -> n_layers blocks of one kind -> RMSNorm(norm_f) -> logits
   (tied: tok_emb h; untied: lm_head h). Every block is pre-norm with residuals:
       h = x + Mixer(RMSNorm(x; norm1)),   out = h + FFN(RMSNorm(h; norm2)),  FFN = SwiGLU
   Mixers: ATTN (full causal attention), SWA (sliding window), MAC, MAG, MAL, LMM (docs/model.md 3.1 - 3.4),
   LM2 (sliding-window attention, then a bank of memory slots read every token and written every
   segment; docs/model.md 4).

   Use:
       titans_config cfg = titans_config_default(TITANS_BLOCK_MAC, 256, 128, 4);
       titans_model model;   titans_model_init(&model, &cfg);  titans_model_init_weights(&model, 1234);
       titans_trainer tr;    titans_trainer_init(&tr, &model, NULL);
       titans_train_step(&tr, tokens, 1, B, T, &loss);        // tokens [1, B, T + 1]
       titans_session s;     titans_session_init(&s, &model);
       titans_session_feed(&s, prompt, n, logits);            // logits [V] after the last token
       int next = titans_sample(logits, cfg.vocab, 0.8f, 40, 0.95f, &rng);
*/

typedef enum titans_block_kind {
  TITANS_BLOCK_ATTN = 0, /* baseline: full causal attention */
  TITANS_BLOCK_SWA = 1,  /* baseline: sliding-window attention */
  TITANS_BLOCK_MAC = 2,  /* memory as context */
  TITANS_BLOCK_MAG = 3,  /* memory as gating */
  TITANS_BLOCK_MAL = 4,  /* memory as layer */
  TITANS_BLOCK_LMM = 5,  /* memory only */
  TITANS_BLOCK_LM2 = 6,  /* LM2: attention, then a bank of memory slots read and written per segment */
  TITANS_BLOCK_COUNT = 7
} titans_block_kind;

/* "attn", "swa", "mac", "mag", "mal", "lmm", "lm2"; NULL for an unknown kind. */
TITANSDEF const char *titans_block_name(int kind);
/* The kind of a name above, or -1. */
TITANSDEF int titans_block_from_name(const char *name);
/* What a kind has, read off its row of the kinds table, so that a program offers an option only where it
   applies without naming kinds itself. All zero (name NULL) for a number that is not a kind. */
typedef struct titans_block_info {
  const char *name; /* titans_block_name */
  int memory;       /* a Titans memory layer: the cfg.mem fields apply, and a memory state is carried */
  int bank;         /* an LM2 bank of cfg.lm2_slots slots */
  int attention;    /* attention: cfg.attn_heads and cfg.window apply */
  int segment;      /* reads in segments of cfg.segment (MAC; LM2 writes its bank once per segment) */
  int streams;      /* the kind can stream (titans_stream_unit: the unit of a config, 0 where it cannot) */
} titans_block_info;
TITANSDEF titans_block_info titans_block_describe(int kind);

typedef struct titans_config {
  int block;        /* titans_block_kind */
  int vocab;        /* V */
  int d;            /* model width */
  int n_layers;     /* blocks */
  int attn_heads;   /* H_a; d_a = d / H_a (even, for RoPE) */
  int ffn_hidden;   /* d_ff of the SwiGLU FFN */
  int window;       /* sliding window w (SWA, MAG, MAL) */
  int segment;      /* C, MAC segment length (a multiple of mem.chunk); LM2: tokens between bank writes */
  int n_persist;    /* N_p persistent tokens per layer (any kind with attention; 0 = none) */
  int tied;         /* 1: logits use tok_emb; 0: a separate lm_head */
  int max_context;  /* ATTN sessions keep at most this many keys (then the oldest are dropped) */
  titans_mem_config mem; /* the memory layer (MAC, MAG, MAL, LMM); mem.d == d */
  int lm2_slots;    /* N_s, the LM2 bank's slots (LM2 only; 0 for the other kinds) */
  int mac_learns_from; /* titans_mac_learns_from (MAC only; 0 for the other kinds) */
} titans_config;

/* What MAC's memory learns from (step 3 of docs/model.md 3.1). The paper writes the attention output y
   into the memory; y carries what the memory itself retrieved into the segment, so the memory also
   learns its own reads. TITANS_MAC_LEARNS_INPUT writes the segment's normalised block input X instead
   (the keys MAG's memory learns from); retrieval, attention and the gate are unchanged. A departure
   from the paper, off by default: docs/long_context.md shows what it does at 1M tokens. */
typedef enum titans_mac_learns_from {
  TITANS_MAC_LEARNS_ATTN_OUTPUT = 0, /* the paper: M_t = M_{t-1}(y_t) */
  TITANS_MAC_LEARNS_INPUT = 1        /* M_t = M_{t-1}(X_t) */
} titans_mac_learns_from;

/* Documented defaults for a kind, vocabulary and width: H_a = max(1, d / 64), d_ff = 4 d rounded to a
   multiple of 8 (2/3 of that for the SwiGLU's three matrices would also be reasonable; we keep 4 d as
   simple), w = 64, C = 64, N_p = titans_config_default_persist (4 for MAC and MAL, one memory chunk for
   MAG, 0 for the others), tied embeddings, max_context = 4096, mem = titans_mem_config_default(d) with
   b = 16, and for LM2 N_s = 16 slots. Every kind that can stream (titans_block_describe) streams with these. */
TITANSDEF titans_config titans_config_default(int block, int vocab, int d, int n_layers);
/* The persistent tokens titans_config_default gives c's kind with c's memory chunk: one chunk for MAG, whose
   memory reads them first and streams only when they are whole chunks (titans_stream_unit); 4 for MAC and
   MAL; 0 for the kinds without a memory or without attention. A program that changes cfg.mem.chunk calls
   it again to keep the default. */
TITANSDEF int titans_config_default_persist(const titans_config *c);
/* TITANS_OK or TITANS_ERR_ARG with a message in err (may be NULL). */
TITANSDEF int titans_config_check(const titans_config *cfg, char *err);

/* The LM2 bank's parameters (docs/model.md section 4): names layers.{i}.lm2.* */
typedef struct titans_lm2_weights {
  float *m0;           /* [N_s, d] the bank at a sequence's start */
  float *wq, *wk, *wv; /* [d, d] read: queries from the attention output E, keys and values from the bank */
  float *w_out;        /* [d, d] output gate: E_next = E + sigma(E_mem w_out^T) * E_mem */
  float *uq, *uk, *uv; /* [d, d] write: queries from the bank, keys and values from the segment's E */
  float *w_in, *w_f;   /* [d, d] input and forget gates of the write */
  float *b_f;          /* [d] forget-gate bias (starts the gate at 0.9) */
} titans_lm2_weights;

typedef struct titans_layer {
  float *norm1, *norm2;                         /* [d] */
  float *attn_wq, *attn_wk, *attn_wv, *attn_wo; /* [d, d] (NULL for LMM) */
  float *persist;                               /* [N_p, d] (NULL when N_p = 0) */
  float *gate_norm_y, *gate_norm_m;             /* [d] (MAC, MAG) */
  titans_mem_weights mem;                       /* (MAC, MAG, MAL, LMM) */
  titans_lm2_weights lm2;                       /* (LM2) */
  float *ffn_w1, *ffn_w3;                       /* [d_ff, d] */
  float *ffn_w2;                                /* [d, d_ff] */
} titans_layer;

typedef struct titans_weights {
  float *tok_emb;       /* [V, d] */
  float *norm_f;        /* [d] */
  float *lm_head;       /* [V, d], NULL when tied */
  titans_layer *layers; /* [n_layers] */
} titans_weights;

typedef struct titans_model {
  titans_config cfg;
  size_t n_floats;       /* floats of all parameters */
  float *params;         /* [n_floats] the parameter slab */
  titans_param *plist;   /* [n_params] names (docs/model.md section 6), shapes, offsets into params */
  size_t n_params;
  titans_weights w;      /* named pointers into params */
  char error[TITANS_ERR_MSG_SIZE];
} titans_model;

/* Allocates a model of cfg with all parameters zero. */
TITANSDEF int titans_model_init(titans_model *m, const titans_config *cfg);
/* docs/model.md section 5 initialisation from a seed (deterministic). */
TITANSDEF void titans_model_init_weights(titans_model *m, uint64_t seed);
TITANSDEF void titans_model_free(titans_model *m);
/* Sets where every memory layer's gates start, through their biases (the gate weights stay): theta as a
   fraction of theta_max, eta (momentum) and alpha (forgetting), each in (0, 1); a value outside (0, 1)
   leaves that gate as it is. titans_model_init_weights starts them at 0.5, 0.5 and 0.02. */
TITANSDEF void titans_model_set_gates(titans_model *m, float theta_frac, float eta, float alpha);
/* The same for layer `layer` alone (0-based; out of range: nothing), e.g. a forgetting rate per layer. */
TITANSDEF void titans_model_set_layer_gates(titans_model *m, int layer, float theta_frac, float eta, float alpha);

/* Where retrieval training starts (docs/model.md 5.1): a look-up the memory can learn from the
   first steps, which the library's plain initialisation does not give it (docs/long_context.md). */
typedef struct titans_lookup_init {
  int key_shift;       /* 1: every memory's key conv starts as one tap on the previous token and its query
                          projection equal to its key projection: a token writes "after x_{t-1} comes x_t"
                          and asks "what came after x_t last time", the look-up of an induction head. With
                          cfg.mem.key_ngram = n >= 2 the key's channel groups read the n tokens before
                          (group g token t - 1 - g) and the query's the same groups one token later
                          (t - g): "what came after these n tokens" */
  float attn_identity; /* > 0: every layer's attention starts copying its own token, wq = wk = X I,
                          wv = wo = I (MAC's memory then learns from the bytes, as LMM's does); 0: unchanged */
  float emb_scale;     /* the token embeddings times this (1: unchanged): a retrieved value can then make a
                          sharp prediction through the tied head from the first steps */
  float emb_shared;    /* > 0: every token embedding gains one shared vector, this many times the normal
                          std per entry (signs drawn once, fixed), before emb_scale. A normalised input then
                          has a direction every token shares, from which attention's queries and keys can
                          score by relative position alone (RoPE, no biases): the previous-token head an
                          induction head needs. 0: unchanged (docs/model.md 5.1) */
  float head_gain;     /* > 0: the final norm's gain (norm_f) starts at this value, scaling every logit of
                          the tied head. With emb_scale X the residual is mostly the token's own embedding,
                          and the head predicts that token again with a logit of about X |e| sqrt(d) (|e|
                          the unscaled row's norm; 25 at X 10, d 128): an answer loss of 22 and gradients
                          above 10x the clip for the first ~40 steps. 0: unchanged (1) */
} titans_lookup_init;

/* {key_shift 1, attn_identity 1.5, emb_scale 10, emb_shared 0, head_gain 0.5}: the values ./titans train --task
   starts from. */
TITANSDEF titans_lookup_init titans_lookup_init_default(void);
/* Applies li to freshly initialised weights (after titans_model_init_weights and the gates), in the order
   key shift, attention, the embeddings' shared vector, their scale, the head's gain. A model that keeps the key there while it trains also sets
   cfg.mem.key_ngram (1, or the n of its n-gram keys). */
TITANSDEF void titans_model_init_lookup(titans_model *m, const titans_lookup_init *li);
/* Points w (with its own layers array of n_layers entries, caller-provided) into any slab of the model's
   layout, e.g. a gradient slab. */
TITANSDEF void titans_weights_bind(titans_weights *w, titans_layer *layers, const titans_config *cfg, float *slab);

/* ---- training --------------------------------------------------------------------------------- */
typedef struct titans_train_config {
  float lr;            /* peak learning rate (4e-4) */
  float min_lr;        /* floor of the cosine (lr / 10) */
  long warmup_steps;   /* linear warm-up (100) */
  long total_steps;    /* length of the cosine schedule (10000) */
  float weight_decay;  /* on matrices only (0.1) */
  float beta1, beta2;  /* 0.9, 0.95 */
  float eps;           /* 1e-8 */
  float clip;          /* global gradient-norm clip (1.0; 0 = none) */
  float write_cost;    /* a cost on writing (0 = none; not in the paper): the loss trained gains write_cost
                          times the mean over the batch's tokens, and the sum over memory layers and heads,
                          of theta_t / theta_max, so the write gates stay shut where writing does not help
                          the loss (docs/model.md 5). The loss reported leaves it out. */
  long write_cost_from; /* the optimizer step from which the cost applies (0: from the first), so that
                           the memory first learns what to write */
  float write_cost_log; /* a cost on writing in log space (0 = none; not in the paper): the loss trained
                           gains write_cost_log times the same mean of log(theta_t / theta_max), from step
                           write_cost_from on. Its pull on a gate's logit, c (1 - theta_t / theta_max),
                           does not fade as theta_t falls (write_cost's, c theta_t / theta_max
                           (1 - theta_t / theta_max), does) and leaves a saturated gate alone
                           (docs/model.md 5). The loss reported leaves it out. */
} titans_train_config;

/* The defaults: peak lr 4e-4 reached by a linear warm-up over 100 steps, then a cosine down to min_lr =
   4e-5 at step 10,000 (min_lr after it), AdamW with weight decay 0.1 on matrices, betas 0.9 / 0.95, eps
   1e-8, gradient norm clipped at 1. titans_trainer_init(t, m, NULL) uses them. They suit a run of about
   10,000 steps: a shorter run barely leaves the peak, so size the schedule to the run (below). */
TITANSDEF titans_train_config titans_train_config_default(void);
/* The defaults with the schedule sized for a run of `steps` optimizer steps: warm-up steps / 10, the
   cosine ending at `steps`. */
TITANSDEF titans_train_config titans_train_config_for_steps(long steps);
/* The learning rate of step s (0-based): linear warm-up, then cosine down to min_lr. */
TITANSDEF float titans_lr_at(const titans_train_config *tc, long step);

struct titans__fwd; /* saved activations (private) */

typedef struct titans_trainer {
  titans_model *model;
  titans_train_config tc;
  float *grads;        /* [n_floats] gradient slab (same layout as the parameters) */
  float *adam_m;       /* [n_floats] first moments */
  float *adam_v;       /* [n_floats] second moments */
  long step;           /* optimizer steps taken */
  float last_grad_norm, last_lr;
  struct titans__fwd *fwd; /* activations of the current micro-batch */
  int recompute;       /* titans_trainer_set_recompute */
  int (*reduce)(float *grads, size_t n, double *stats, void *user); /* titans_trainer_set_reduce, or NULL */
  int (*reduce_start)(float *range, size_t n, size_t offset, void *user); /* _set_reduce_overlap, or NULL */
  void *reduce_user;
  const unsigned char *write_cost_skip; /* titans_trainer_set_write_cost_skip, or NULL */
  char error[TITANS_ERR_MSG_SIZE];
} titans_trainer;

/* A token marked TITANS_NO_LOSS(id) in the token arrays of the training calls is read as id where it is
   an input and left out of the mean loss where it is a target (e.g. train on the answer of a question
   only). TITANS_NO_LOSS(id) = -1 - id. */
#define TITANS_NO_LOSS(id) (-1 - (id))

/* TITANS_OK if every field of tc is in range (rates, decay, clip and costs finite and >= 0, step counts >=
   0, betas in [0, 1), eps > 0), else TITANS_ERR_ARG naming the field in err (may be NULL). */
TITANSDEF int titans_train_config_check(const titans_train_config *tc, char *err);
/* tc may be NULL for the defaults; a tc out of range (titans_train_config_check) is refused, t->error says
   which field, and nothing is allocated. */
TITANSDEF int titans_trainer_init(titans_trainer *t, titans_model *m, const titans_train_config *tc);
TITANSDEF void titans_trainer_free(titans_trainer *t);

/* Data-parallel training: each of P processes holds the same model and trainer and trains its own rows
   of a global batch. A reduce function makes their steps one step on the whole batch. Once per
   titans_train_step / titans_train_step_stream, after the backward and before clipping, the trainer
   calls fn(grads, n, stats, user) with
     grads [n]  this process's gradient as a SUM over its counted targets (its mean times stats[1]),
     stats [2]  {this process's loss summed over its counted targets, how many targets it counted},
   and fn must replace every element of both with its sum over the P processes (an in-place all-reduce,
   e.g. MPI_Allreduce(MPI_IN_PLACE, grads, n, MPI_FLOAT, MPI_SUM, comm), the same with stats as 2
   MPI_DOUBLE) and return 0. The trainer then divides by the global count: the mean of the whole batch,
   weighted by targets (TITANS_NO_LOSS targets count nowhere), whose norm, clipping and AdamW step are the
   same on every process. The sum's order is fn's: results match one process on the whole batch to float
   reordering. A step that fails on one process (a non-finite loss, a bad token) still calls fn, with a
   NaN loss and a zero gradient, so no process waits forever and every one rejects the step with
   TITANS_ERR_NONFINITE, weights untouched. fn returning non-zero fails the step with TITANS_ERR_STATE,
   weights untouched. fn NULL (the default, and after titans_trainer_init / _load) turns it off.
   Evaluation calls are never reduced. */
TITANSDEF void titans_trainer_set_reduce(titans_trainer *t,
                                         int (*fn)(float *grads, size_t n, double *stats, void *user), void *user);
/* on = 1: the training forward keeps less and the backward computes it again: MAC keeps only the memory
   state at each segment's start (the backward runs each segment's forward again before its backward),
   and every kind runs its FFN in pieces of 1,024 rows (the last up to 2,047) whose hidden rows the
   backward computes again. The same loss and gradients (the same bits, but for the rounding of the FFN's weight gradients
   summed by piece) in a tenth of the memory (docs/model.md 5.3: a 64K-token step of the passkey recipe
   0.70 GB, 7.7 GB without) for a few percent more arithmetic. 0 (the default) turns it off. */
TITANSDEF void titans_trainer_set_recompute(titans_trainer *t, int on);
/* skip [rows, T] (the rows of the following training calls' token arrays: n_micro x B for
   titans_train_step and _targets, B for titans_forward_backward, the stream's rows for
   titans_train_step_stream), or NULL (the default): 1 where the costs on writing (titans_train_config.
   write_cost, write_cost_log) leave the write of the input at that position alone. A retrieval task
   marks its needles, so the costs shut the gates on the filler only (docs/model.md 5). Read by every
   training call until set again; the caller keeps it alive and fills it for each call's tokens. */
TITANSDEF void titans_trainer_set_write_cost_skip(titans_trainer *t, const unsigned char *skip);
/* The same reduction overlapped with the backward: while the backward of a step's last micro-batch runs,
   the trainer calls start(range, n, offset, user) each time a range of the gradient slab is final,
     range [n]  grads + offset, already scaled into a SUM over this process's counted targets,
   top of the model first: the final norm and output head (untied), then per layer from the top its FFN
   (norm2, ffn.*; the tied head's final norm goes with the top one) and the rest of the layer (norm1, the
   attention, memory or bank), the token embedding last (a tied head adds to it). start begins an
   in-place sum of the range over the processes, e.g. MPI_Iallreduce(MPI_IN_PLACE, range, n, ...), and
   returns 0 without waiting for it; the trainer no longer touches the range. After the backward it calls
   finish(grads, n_floats, stats, user) once: finish sums stats as the blocking fn does and waits until
   every started range holds its sum (MPI_Waitall), then returns 0. The ranges depend on the
   configuration alone (2 n_layers + 2 of them, 2 n_layers + 1 when tied, in a fixed order), so every
   process starts the same reductions in the same order, and together they cover the slab once. The
   results are those of the blocking hook with the same sums: the mean, norm, clip and AdamW step are
   computed after finish, identically on every process. With n_micro > 1 only the last micro-batch's
   backward overlaps. A step that fails on this process still starts every range not yet started
   (zeros) and calls finish with a NaN loss, as above. start or finish returning non-zero fails the step
   with TITANS_ERR_STATE (the remaining ranges are still started and finish still called), weights
   untouched. start NULL makes finish the blocking hook (titans_trainer_set_reduce); finish NULL
   with a start is TITANS_ERR_ARG (t->error says why) and leaves the hooks as they were. */
TITANSDEF int titans_trainer_set_reduce_overlap(titans_trainer *t,
                                                int (*start)(float *range, size_t n, size_t offset, void *user),
                                                int (*finish)(float *grads, size_t n, double *stats, void *user),
                                                void *user);
/* One optimizer step: forward and backward of n_micro micro-batches of B sequences (gradients
   accumulated and averaged), global-norm clipping, AdamW at titans_lr_at(step). tokens
   [n_micro, B, T + 1]: positions 0..T-1 are inputs, 1..T their next-token targets. *loss is the mean
   loss (NaN when the step fails before computing one). A non-finite loss or gradient returns
   TITANS_ERR_NONFINITE naming the step, and the weights and optimizer state stay as they were before
   the call. */
TITANSDEF int titans_train_step(titans_trainer *t, const int *tokens, size_t n_micro, size_t B, size_t T, float *loss);
/* Mean loss of tokens [B, T + 1] without gradients. */
TITANSDEF int titans_eval_loss(titans_trainer *t, const int *tokens, size_t B, size_t T, float *loss);
/* Lower level: forward and backward of one batch, ADDING scale * gradient into t->grads. *loss is the
   mean loss of the batch. */
TITANSDEF int titans_forward_backward(titans_trainer *t, const int *tokens, size_t B, size_t T, float scale,
                                      float *loss);
/* The same three calls with separate inputs and targets, for tasks whose target at t is not the input at
   t + 1 (e.g. associative recall: filler as the input, the value as the target). inputs [n_micro, B, T]
   token ids in [0, V); targets [n_micro, B, T], the token position t should predict, or < 0 for a
   position left out of the loss. A target >= V or an input outside [0, V) is TITANS_ERR_ARG naming its
   (row, position), weights untouched. Losses, gradients and a reduce function's counts are those of
   titans_train_step with the same counted targets: tokens whose position t + 1 holds targets[t] (or
   TITANS_NO_LOSS(x) where targets[t] < 0) give the same step. */
TITANSDEF int titans_train_step_targets(titans_trainer *t, const int *inputs, const int *targets, size_t n_micro,
                                        size_t B, size_t T, float *loss);
TITANSDEF int titans_eval_loss_targets(titans_trainer *t, const int *inputs, const int *targets, size_t B, size_t T,
                                       float *loss);
TITANSDEF int titans_forward_backward_targets(titans_trainer *t, const int *inputs, const int *targets, size_t B,
                                              size_t T, float scale, float *loss);
/* Logits of a whole batch in one call (the reference the sessions are tested against): logits
   [B, T, V] for inputs tokens [B, T]. */
TITANSDEF int titans_forward_logits(titans_trainer *t, const int *tokens, size_t B, size_t T, float *logits);
/* Logits of the positions that have a target, for scoring answers without [B, T, V] of logits: inputs and
   targets [B, T] as titans_eval_loss_targets; logits [n, V] of the positions whose target is >= 0, in
   row-major order (b, then t), n their count (*n_out, may be NULL). The head runs on those rows only. */
TITANSDEF int titans_forward_logits_targets(titans_trainer *t, const int *inputs, const int *targets, size_t B,
                                            size_t T, float *logits, size_t *n_out);

/* ---- streams: training and evaluation over reads longer than one call ----
   A stream carries, for each of B rows, what a model remembers from one call to the next, so that
   consecutive windows of the same long documents are read as one sequence: the memory layers' weights,
   momentum and conv tails, and (SWA) the last `window` normalised inputs of each layer's attention.
   Gradients stop at the window boundary (truncated backpropagation through time): the carried state
   is an input of the next window, not a function of the weights. A row restarted with
   titans_stream_restart begins a new document at its next window, from w0 (and its gradient then
   reaches w0).
   Exactness: for MAC with T a multiple of the segment, LMM and MAG with T a multiple of the chunk, and
   SWA, the logits of a stream read window by window equal a session's fed token by token (float
   tolerance). Windows must be multiples of MAC's segment or LMM's chunk, except a last one: after a
   window of another length the stream has ended and refuses further calls. MAG streams when its
   persistent tokens are a multiple of the memory chunk (0 included), with every row restarting
   together (the memory reads the persistent tokens at a document's start); LM2 streams windows that
   are multiples of its segment, carrying each row's bank; MAL and full attention (ATTN) cannot stream
   in this version: the calls return TITANS_ERR_ARG. Use (one stream per independent set of rows, e.g.
   one for training, one for validation):
       titans_stream st;  titans_stream_init(&st, &model, B);
       for each window w of the documents:  titans_train_step_stream(&tr, &st, tokens_w, T, &loss);
       (titans_stream_restart(&st, row) when row b's document ends)                                   */
typedef struct titans_stream {
  const titans_model *model;
  size_t batch;              /* B rows */
  long long position;        /* tokens read by each row since the stream began (restarts do not reset it) */
  titans_mem_state *mem;     /* [n_layers] the memory state each layer carries (memory kinds), else NULL */
  float *attn_tail;          /* [n_layers, B, window, d] SWA: the last normalised block inputs, oldest first */
  float *bank;               /* [n_layers, B, N_s, d] LM2: each row's bank after its last complete segment, else NULL */
  size_t *attn_tail_rows;    /* [B] how many of those rows hold text of the row's current document */
  long long *row_position;   /* [B] tokens each row has read of its current document */
  unsigned char *fresh;      /* [B] 1: the row's next window starts a new document */
  int ended;                 /* 1 after a window that was not a multiple of the segment / chunk */
  float *staged;             /* what titans_stream_write hands to a writer (owned, freed with the stream) */
  char error[TITANS_ERR_MSG_SIZE];
} titans_stream;

/* A stream of B rows on model m, every row fresh. Returns TITANS_ERR_ARG for a kind that cannot stream. */
TITANSDEF int titans_stream_init(titans_stream *s, const titans_model *m, size_t B);
/* The windows of a stream on a model of configuration c must be multiples of this many tokens (MAC's and
   LM2's segment, LMM's and MAG's memory chunk, 1 for SWA); 0 when such a model cannot stream. */
TITANSDEF size_t titans_stream_unit(const titans_config *c);
TITANSDEF void titans_stream_free(titans_stream *s);
/* Row `row` starts a new document at its next window (TITANS_ERR_ARG for a row out of range). */
TITANSDEF int titans_stream_restart(titans_stream *s, size_t row);
/* titans_train_step of one micro-batch, tokens [B, T + 1], continuing the stream's rows; the stream
   moves on only when the step succeeds. */
TITANSDEF int titans_train_step_stream(titans_trainer *t, titans_stream *s, const int *tokens, size_t T, float *loss);
/* titans_forward_backward (gradients added into t->grads, scaled) continuing the stream's rows. */
TITANSDEF int titans_forward_backward_stream(titans_trainer *t, titans_stream *s, const int *tokens, size_t T,
                                             float scale, float *loss);
/* Mean loss of tokens [B, T + 1] continuing the stream's rows, no gradients. */
TITANSDEF int titans_eval_loss_stream(titans_trainer *t, titans_stream *s, const int *tokens, size_t T, float *loss);
/* logits [B, T, V] of inputs tokens [B, T] continuing the stream's rows. */
TITANSDEF int titans_forward_logits_stream(titans_trainer *t, titans_stream *s, const int *tokens, size_t T,
                                           float *logits);

/* ---- inference sessions ----
   A session runs the model token by token with bounded memory. What can fail, and how:
   - titans_session_init: TITANS_ERR_NOMEM. Opening a session allocates the memory-layer states
     (8 weight-sized buffers per memory layer for MAC, 4 otherwise: at most 8 times the model's
     parameter floats), the persistent-token rows of the KV caches, 16 ring slots per cache and one
     token's scratch (17 d + 3 d_ff + 2 floats, titans__step_work), plus the memory layer's per-thread work space of one
     chunk (O(b^2 + b n_hid) floats per head-task). The KV caches then grow by use, doubling, up to
     their capacity (window, 2 segment for MAC, max_context for ATTN): at most
     2 (N_p + capacity) d floats (+ one int64 per slot) per layer, reached only after that many tokens.
     So a model file's configuration cannot make a session reserve memory it does not use.
   - titans_session_reset: TITANS_ERR_NOMEM (MAG, MAL, and the persistent-token rows need scratch).
   - titans_session_feed: TITANS_ERR_ARG (a token outside the vocabulary; nothing was changed),
     TITANS_ERR_STATE (the position limit TITANS_MAX_POSITION, or a session left broken by an earlier
     error; nothing was changed), TITANS_ERR_NOMEM (a cache or work space could not grow), and
     TITANS_ERR_NONFINITE: every layer's output of every token, and the logits, are checked; the
     message names the layer (or the output head) and the position.
     After NOMEM or NONFINITE the session is broken: part of a token went through, and the memory
     cannot be rolled back without keeping a copy of it at every token (as costly as the update
     itself). Every later feed, copy-from and save returns TITANS_ERR_STATE until titans_session_reset,
     titans_session_load/read, or titans_session_copy into it. The tokens before the failing one were
     fed (s->position counts them). To go back to the last good state, keep a fork
     (titans_session_copy) of it; to keep it across runs, save it before feeding more.
   - titans_session_copy, titans_session_state_prepare: TITANS_ERR_NOMEM (caches grow),
     TITANS_ERR_ARG, TITANS_ERR_STATE.
   - titans_session_save/write: TITANS_ERR_STATE for a broken session or a state holding NaN or Inf:
     what is saved always loads. */

/* The largest session position (2^62 tokens): a feed stops there (TITANS_ERR_STATE), and a state
   file with any position up to it loads. */
#define TITANS_MAX_POSITION ((long long)1 << 62)

struct titans__session_layer; /* per-layer state (private) */

typedef struct titans_session {
  const titans_model *model;   /* shared, read-only: several sessions may run at once on threads */
  long long position;          /* tokens fed */
  float position_code[3];      /* the position as three exact 21-bit pieces (for titans_session_state) */
  struct titans__session_layer *layers;
  float *work;                 /* scratch of one token */
  size_t work_size;
  int broken;                  /* 1 after an error left the state inconsistent (see above) */
  char error[TITANS_ERR_MSG_SIZE];
} titans_session;

TITANSDEF int titans_session_init(titans_session *s, const titans_model *m);
TITANSDEF void titans_session_free(titans_session *s);
/* Back to the state of a new session (position 0, memories at w0, caches empty). TITANS_OK, or
   TITANS_ERR_NOMEM with the session broken (feed refuses it) until a reset succeeds. */
TITANSDEF int titans_session_reset(titans_session *s);
/* dst (initialised on the same model) becomes an independent copy of src: a fork. */
TITANSDEF int titans_session_copy(titans_session *dst, const titans_session *src);
/* Feed n tokens one after another; logits [V] (may be NULL) receives the logits after the last.
   Errors: see above (a NaN or Inf anywhere is TITANS_ERR_NONFINITE, never a silent result). */
TITANSDEF int titans_session_feed(titans_session *s, const int *tokens, size_t n, float *logits);
/* The session's state as named float tensors (memory weights and momentum, conv tails, KV caches,
   position) for saving: fills up to max entries, returns the count. The KV tensors hold the rows in
   use, so their sizes depend on the position. Pointers stay valid until the session is fed, reset,
   prepared, loaded or freed. To restore a state of position p into a session:
   titans_session_state_prepare(s, p), then titans_session_state lists tensors of the sizes such a
   state has; write into them and call titans_session_state_loaded. */
typedef struct titans_tensor_ref {
  char name[96];
  float *data;
  size_t count;
} titans_tensor_ref;
TITANSDEF size_t titans_session_state(titans_session *s, titans_tensor_ref *list, size_t max);
/* Sizes the state for a position p in 0..TITANS_MAX_POSITION (grows the KV caches to the rows such
   a state holds) and marks the session as being restored: feed refuses it until
   titans_session_state_loaded succeeds. TITANS_ERR_ARG, TITANS_ERR_NOMEM. */
TITANSDEF int titans_session_state_prepare(titans_session *s, long long position);
/* Validates a state written into the tensors of titans_session_state (finite, consistent with the
   prepared position) and makes the session usable. */
TITANSDEF int titans_session_state_loaded(titans_session *s);

/* ---- session batches: many streams at once ----
   n independent sessions (streams) of one model, fed one token each per call: every stream has its own
   memory, position, caches and error, and the products with the shared weights (FFN, output head, the
   attention's projections, the memory's projections, gates and output, LM2's projections) run over the
   n rows at once instead of n times one row; each stream's memory recurrence and bank run per stream.
   Each stream is an ordinary titans_session (b->streams[i], or titans_session_batch_stream): fork it,
   save or load it, read its state with the titans_session_* functions, or copy a session in and out
   (titans_session_batch_get / _put). Every block kind works; a stream's logits equal those of a
   titans_session fed the same tokens within float rounding (the products' sums run in another order).
   Errors (b->error says which stream and why):
   - titans_session_batch_init: TITANS_ERR_ARG (n_streams 0, NULL), TITANS_ERR_NOMEM.
   - titans_session_batch_feed: TITANS_ERR_ARG (tokens NULL, or a token outside the vocabulary that is
     not TITANS_SESSION_BATCH_IDLE) and TITANS_ERR_STATE (a stream fed is broken or at the position
     limit): nothing was changed. TITANS_ERR_NOMEM, TITANS_ERR_NONFINITE: as titans_session_feed, for the
     streams they hit (those are broken, their logits rows left as they were); the other streams took
     their token. A broken stream is fed again after titans_session_batch_reset, _put, or
     titans_session_load into titans_session_batch_stream; until then feed it TITANS_SESSION_BATCH_IDLE. */
#define TITANS_SESSION_BATCH_IDLE (-1) /* a token that leaves its stream as it is in this call */

typedef struct titans_session_batch {
  const titans_model *model;
  size_t n;                  /* streams */
  titans_session *streams;   /* [n] the streams */
  float *work;               /* [work_size] one token's rows of every stream (private layout) */
  size_t work_size;
  unsigned char *index;      /* the streams, positions and caches of a call (private layout) */
  char error[TITANS_ERR_MSG_SIZE];
} titans_session_batch;

/* n_streams sessions of m, each at position 0. */
TITANSDEF int titans_session_batch_init(titans_session_batch *b, const titans_model *m, size_t n_streams);
TITANSDEF void titans_session_batch_free(titans_session_batch *b);
/* One token per stream: tokens [n] (TITANS_SESSION_BATCH_IDLE: that stream sits this call out); logits
   [n, V] (may be NULL) receives each fed stream's logits after its token in its row. */
TITANSDEF int titans_session_batch_feed(titans_session_batch *b, const int *tokens, float *logits);
/* Stream i as an ordinary session (borrowed: valid until titans_session_batch_free); NULL if i >= n. */
TITANSDEF titans_session *titans_session_batch_stream(titans_session_batch *b, size_t i);
/* dst (a session of the same model) becomes a copy of stream i / stream i becomes a copy of src: a fork
   out of the batch, or a session (a fork, a loaded state) into it. As titans_session_copy; TITANS_ERR_ARG
   for i >= n. */
TITANSDEF int titans_session_batch_get(titans_session_batch *b, size_t i, titans_session *dst);
TITANSDEF int titans_session_batch_put(titans_session_batch *b, size_t i, const titans_session *src);
/* Stream i back to position 0 (titans_session_reset). */
TITANSDEF int titans_session_batch_reset(titans_session_batch *b, size_t i);

/* ---- sampling --------------------------------------------------------------------------------- */
/* A token from logits [V]: temperature <= 0 is greedy (argmax, the first on ties); otherwise
   softmax(logits / T), then keep the top_k most likely (0 = all), then the smallest set whose
   probability reaches top_p (>= 1 = all), and draw with rng. A logit of -INFINITY marks a token that
   is never drawn. Returns TITANS_OK with *token set, TITANS_ERR_NONFINITE for a NaN or +Inf logit
   (or every logit -Inf), TITANS_ERR_NOMEM when the distribution cannot be allocated (temperature > 0),
   TITANS_ERR_ARG for V = 0 or > INT_MAX, NULL pointers, a NaN temperature or top_p; *token is -1 on
   error. */
TITANSDEF int titans_sample_ex(const float *logits, size_t V, float temperature, int top_k, float top_p,
                               titans_rng *rng, int *token);
/* The same, returning the token, or -1 on any error (never a silent substitute). */
TITANSDEF int titans_sample(const float *logits, size_t V, float temperature, int top_k, float top_p, titans_rng *rng);
/* ================================================================================================
   8. Checkpoints and tokenizer (docs/model.md section 6)
   ================================================================================================
   Every file is a safetensors file (section 6) of F32 tensors whose __metadata__ (all values strings)
   says what it holds:
       "format":    "titans.h"
       "version":   "0.1.0" (the writer's TITANS_VERSION; a file of another major version is refused)
       "kind":      "model" | "trainer" | "session"
       "config":    the titans_config as JSON (every field, the memory's under "mem"; see
                    titans_config_to_json), so a file alone rebuilds its model
       "tokenizer": "byte" (optional)
       "user":      the caller's string (optional), e.g. a training program's data position
   A model file holds every parameter under its docs/model.md section 6 name ("tok_emb", "layers.0.mem.w0.1", ...). A
   trainer file adds "adam.m.<name>", "adam.v.<name>" for each parameter and the metadata "step" and
   "train_config" (JSON): everything an exact resume needs. A session file holds the tensors of
   titans_session_state under their names, "config" and "model_hash" (of the weights it ran on).

   Loading checks everything and never trusts a number in the file: the metadata, the configuration
   (titans_config_check, and a configuration is refused before anything is allocated when its
   parameters need more floats than the file holds), each tensor's presence, dtype and exact shape,
   no tensor left over, finite values (AdamW second moments also >= 0). A failed load leaves the object empty (model,
   trainer) or reset (session) with the reason in its error buffer. Saves are atomic and durable ("<path>.tmp", fsync,
   rename, fsync of the folder; see titans_st_writer_save).

       titans_model m;
       if (titans_model_load(&m, "model.safetensors") != TITANS_OK) fprintf(stderr, "%s\n", m.error);
       ...
       titans_model_save(&m, "copy.safetensors");
       titans_model_free(&m);

   The writer/reader-level functions (titans_model_write, titans_model_read, ...) work on a
   titans_st_writer / titans_st_reader, so a caller can add metadata of its own or read from memory;
   they are available under TITANS_NO_STDIO, the path functions are not. See docs/checkpoints.md. */

/* ---- tokenizer -------------------------------------------------------------------------------- */
typedef enum titans_tokenizer_kind {
  TITANS_TOKENIZER_BYTE = 0, /* one token per byte: ids 0..255, vocabulary 256 */
  TITANS_TOKENIZER_COUNT = 1
} titans_tokenizer_kind;

typedef struct titans_tokenizer {
  int kind;    /* titans_tokenizer_kind */
  int vocab;   /* number of token ids (256 for bytes) */
  void *data;  /* tables of a trained tokenizer (NULL for bytes); owned */
  char error[TITANS_ERR_MSG_SIZE];
} titans_tokenizer;

/* "byte"; NULL for an unknown kind. */
TITANSDEF const char *titans_tokenizer_name(int kind);
/* The kind of a name above, or -1. */
TITANSDEF int titans_tokenizer_from_name(const char *name);
TITANSDEF int titans_tokenizer_init(titans_tokenizer *tok, int kind);
TITANSDEF void titans_tokenizer_free(titans_tokenizer *tok);
/* Text -> ids. *n_ids receives the number of ids the text needs; ids [max_ids] (may be NULL to count)
   receives them when they fit, else TITANS_ERR_ARG. */
TITANSDEF int titans_tokenizer_encode(titans_tokenizer *tok, int *ids, size_t max_ids, size_t *n_ids,
                                      const char *text, size_t n_bytes);
/* Ids -> text (raw bytes, not NUL-terminated). *n_bytes receives the bytes the ids need; out
   [max_bytes] (may be NULL to count) receives them when they fit, else TITANS_ERR_ARG. An id outside
   0..vocab-1 is TITANS_ERR_ARG. Decoding a sequence piece by piece gives the bytes of the whole. */
TITANSDEF int titans_tokenizer_decode(titans_tokenizer *tok, char *out, size_t max_bytes, size_t *n_bytes,
                                      const int *ids, size_t n_ids);
/* Record the tokenizer in a file's metadata ("tokenizer": name). */
TITANSDEF int titans_tokenizer_write(const titans_tokenizer *tok, titans_st_writer *w);
/* Initialise tok from a file's metadata. A file without the key gets the byte tokenizer when vocab is
   256 (TITANS_ERR_FORMAT otherwise); the tokenizer's vocabulary must equal vocab (the model's). */
TITANSDEF int titans_tokenizer_read(titans_tokenizer *tok, const titans_st_reader *r, int vocab);

/* ---- configurations as JSON ------------------------------------------------------------------- */
/* Every field of cfg as one JSON object, e.g. {"block":"mac","vocab":256,...,"mem":{"d":128,...}}:
   integers as integers, floats in the shortest decimal form that reads back to the same float. out
   [size] receives the NUL-terminated text (TITANS_ERR_ARG when it does not fit; 1024 bytes always do).
   Locale-independent, no stdio. */
TITANSDEF int titans_config_to_json(const titans_config *cfg, char *out, size_t size);
/* Parse what titans_config_to_json writes: every field exactly once, no other key, integers in range
   (no fraction or exponent), finite floats; then titans_config_check. TITANS_OK or TITANS_ERR_FORMAT
   (TITANS_ERR_ARG from the check) with a message in err (TITANS_ERR_MSG_SIZE bytes, may be NULL). */
TITANSDEF int titans_config_from_json(titans_config *cfg, const char *json, char *err);
/* The same for a training configuration (checked: finite, lr >= 0, 0 <= beta < 1, eps > 0, ...). */
TITANSDEF int titans_train_config_to_json(const titans_train_config *tc, char *out, size_t size);
TITANSDEF int titans_train_config_from_json(titans_train_config *tc, const char *json, char *err);

/* ---- models ----------------------------------------------------------------------------------- */
/* Add the model's parameters (borrowed: keep m alive and unchanged until the writer is saved) and
   the metadata format, version, kind = "model", config and, when tok is not NULL, tokenizer. Errors go
   to m->error. */
TITANSDEF int titans_model_write(titans_model *m, const titans_tokenizer *tok, titans_st_writer *w);
/* Allocate m (its previous content is not freed) from a parsed model or trainer file and copy its
   parameters; tok (may be NULL) is initialised with titans_tokenizer_read. On failure m holds no
   allocation and m->error says why. */
TITANSDEF int titans_model_read(titans_model *m, titans_tokenizer *tok, titans_st_reader *r);
#ifndef TITANS_NO_STDIO
TITANSDEF int titans_model_save(titans_model *m, const char *path);
TITANSDEF int titans_model_load(titans_model *m, const char *path);
/* With a tokenizer and a caller string ("user" metadata; both may be NULL). load_ex sets *user_meta
   (may be NULL) to a copy of the file's string (free with titans_free), NULL when it has none. */
TITANSDEF int titans_model_save_ex(titans_model *m, const titans_tokenizer *tok, const char *user_meta,
                                   const char *path);
TITANSDEF int titans_model_load_ex(titans_model *m, titans_tokenizer *tok, char **user_meta, const char *path);
#endif

/* ---- trainers (exact resume) ------------------------------------------------------------------ */
/* Everything a titans_trainer needs to continue bit for bit: parameters, AdamW moments, step, train
   configuration; plus the caller's string (user_meta, may be NULL), e.g. a data sampler's state. */
TITANSDEF int titans_trainer_write(titans_trainer *t, const titans_tokenizer *tok, const char *user_meta,
                                   titans_st_writer *w);
/* Rebuild model and trainer from a trainer file: m and t are uninitialised on entry; on success m is
   allocated from the file's configuration, t is initialised on m with the file's train configuration,
   moments and step. tok and user_meta as in titans_model_load_ex. On failure nothing stays allocated
   and t->error (and m->error) say why. */
TITANSDEF int titans_trainer_read(titans_trainer *t, titans_model *m, titans_tokenizer *tok, char **user_meta,
                                  titans_st_reader *r);
#ifndef TITANS_NO_STDIO
TITANSDEF int titans_trainer_save(titans_trainer *t, const titans_tokenizer *tok, const char *user_meta,
                                  const char *path);
TITANSDEF int titans_trainer_load(titans_trainer *t, titans_model *m, titans_tokenizer *tok, char **user_meta,
                                  const char *path);
#endif

/* ---- sessions --------------------------------------------------------------------------------- */
/* A 64-bit hash of the model's parameter bytes (FNV-style over 8-byte words), recorded in session
   files: a state only means something for the weights it ran on. */
TITANSDEF uint64_t titans_model_hash(const titans_model *m);
/* The session's state (titans_session_state), borrowed like the model's parameters, with kind =
   "session", the model's config and hash. */
TITANSDEF int titans_session_write(titans_session *s, titans_st_writer *w);
/* Restore a state into s (initialised on its model): the file's config and model hash must be the
   session's, every state tensor present with its exact size, none left over, all finite; then
   titans_session_state_loaded. On failure the session is reset and s->error says why. */
TITANSDEF int titans_session_read(titans_session *s, titans_st_reader *r);
#ifndef TITANS_NO_STDIO
TITANSDEF int titans_session_save(titans_session *s, const char *path);
TITANSDEF int titans_session_load(titans_session *s, const char *path);
#endif

/* ---- streams ---------------------------------------------------------------------------------- */
/* A stream's state (every row's carried memory, SWA tails, positions, restart flags) with kind =
   "stream", the model's config and hash and the batch size, so that a training run interrupted inside
   its documents resumes exactly. The tensors are staged in a buffer the stream owns until the next
   write or titans_stream_free. */
TITANSDEF int titans_stream_write(titans_stream *s, titans_st_writer *w);
/* Restores a state written for the same model weights, configuration and batch (all checked first: on
   failure s is unchanged and s->error says why). */
TITANSDEF int titans_stream_read(titans_stream *s, titans_st_reader *r);
#ifndef TITANS_NO_STDIO
TITANSDEF int titans_stream_save(titans_stream *s, const char *path);
TITANSDEF int titans_stream_load(titans_stream *s, const char *path);
#endif

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
#include <time.h>   /* timespec_get: the memory layer's stage timers */
#ifndef TITANS_NO_STDIO
#include <stdio.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(TITANS_MALLOC) && defined(TITANS_FREE)
/* ok: both given */
#elif !defined(TITANS_MALLOC) && !defined(TITANS_FREE)
#include <stdlib.h>
#define TITANS_MALLOC(n) malloc(n)
#define TITANS_FREE(p) free(p)
#else
#error "titans.h: define both TITANS_MALLOC and TITANS_FREE, or neither"
#endif

#ifndef TITANS_ASSERT
#include <assert.h>
#define TITANS_ASSERT(x) assert(x)
#endif

/* ---- SIMD layer: one vector type of TITANS__VW floats with load/store/fma/reduce -------------- */
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
  for (; i + TITANS__VW <= n; i += TITANS__VW)
    titans__vstore(y + i, titans__vfma(va, titans__vload(x + i), titans__vload(y + i)));
  for (; i < n; i++) y[i] += alpha * x[i];
}

/* y[i] = alpha * x[i], computed exactly as titans__axpy onto a zeroed y (so +0, never -0, for a zero product) */
static inline void titans__axpy_set(float *y, float alpha, const float *x, size_t n) {
  titans__vf va = titans__vset1(alpha), vz = titans__vset1(0.0f);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) titans__vstore(y + i, titans__vfma(va, titans__vload(x + i), vz));
  for (; i < n; i++) {
    float z = 0.0f;
    z += alpha * x[i];
    y[i] = z;
  }
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

/* Blocks aligned to a cache line, so that no vector load of a row whose stride is a multiple of 64
   bytes straddles two lines (glibc's malloc returns 16 bytes past a page for large blocks: attention
   measured 5-8% slower on such buffers). TITANS_MALLOC'd with TITANS__ALIGN bytes more; the byte just
   before the aligned pointer holds its distance from the block's start (1 .. TITANS__ALIGN). */
#define TITANS__ALIGN 64
static void *titans__alloc_aligned(size_t bytes) {
  size_t total;
  if (!titans_size_add(bytes ? bytes : 1, TITANS__ALIGN, &total)) return NULL;
  unsigned char *raw = (unsigned char *)TITANS_MALLOC(total);
  if (!raw) return NULL;
  size_t off = TITANS__ALIGN - (size_t)((uintptr_t)raw % TITANS__ALIGN);
  raw[off - 1] = (unsigned char)off;
  return raw + off;
}

static void titans__free_aligned(void *p) {
  if (!p) return;
  unsigned char *a = (unsigned char *)p;
  TITANS_FREE(a - a[-1]);
}

/* A block of new_bytes holding the first min(old_bytes, new_bytes) bytes of p (NULL: none), p freed;
   NULL on failure, p untouched. */
static void *titans__realloc_aligned(void *p, size_t old_bytes, size_t new_bytes) {
  void *q = titans__alloc_aligned(new_bytes);
  if (!q) return NULL;
  if (p) memcpy(q, p, old_bytes < new_bytes ? old_bytes : new_bytes);
  titans__free_aligned(p);
  return q;
}

TITANSDEF void *titans_alloc_bytes(size_t count, size_t elem_size) {
  size_t bytes;
  if (!titans_size_mul(count, elem_size, &bytes)) return NULL;
  void *p = titans__alloc_aligned(bytes); /* 0 bytes: a block of 1 */
  if (p) memset(p, 0, bytes);
  return p;
}

TITANSDEF float *titans_alloc_floats(size_t count) { return (float *)titans_alloc_bytes(count, sizeof(float)); }

TITANSDEF void titans_free(void *p) { titans__free_aligned(p); }

TITANSDEF int titans_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

#ifdef _OPENMP
/* Whether a loop may start threads at all: more than one thread to start, and not inside a parallel
   region already. A region of one thread still costs libgomp a team per call, and a session makes such
   calls for every token (issue 38: with --threads 1 an OpenMP build generated 1.6-1.8x slower than one
   without OpenMP). Loops on a token's path skip the pragma altogether when this is false. */
static inline int titans__omp_can_split(void) { return omp_get_max_threads() > 1 && !omp_in_parallel(); }
#endif

/* ---- RNG -------------------------------------------------------------------------------------- */
TITANSDEF void titans_rng_seed(titans_rng *rng, uint64_t seed) { rng->state = seed ^ 0x9E3779B97F4A7C15ull; }

TITANSDEF uint64_t titans_rng_u64(titans_rng *rng) {
  uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

TITANSDEF float titans_rng_uniform(titans_rng *rng) {
  return (float)(titans_rng_u64(rng) >> 40) * (1.0f / 16777216.0f);
}

TITANSDEF float titans_rng_normal(titans_rng *rng) {
  /* Box-Muller from two 53-bit uniforms; u1 in (0, 1] so log never sees 0. */
  double u1 = ((double)(titans_rng_u64(rng) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = (double)(titans_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- 2. GEMM (implementation) ----------------------------------------------------------------- */

/* The fast path. Five methods, chosen from the shape alone (titans__gemm_method), never from the
   thread count:
   - direct: op(B) rows contiguous (trans_b == 0) and m small, or op(B) narrow (n <= 256 and k * n
     <= 128K; k <= 256 and k * n <= 32K when trans_a). Tiles of R rows x NV vectors of C keep their sums
     in registers over all of k; A and B are read where they lie, no copies, so a 16 x 64 x 64 product
     costs little more than its FMAs.
   - bdirect: trans_b == 1 with a narrow op(B) (as above, and <= 64K floats) and more rows: op(B) is
     transposed into a stack block once, then the direct method.
   - tdot (AVX-512): trans_b == 1, m <= 16. One vector spans the rows of op(A) (and, when m < 16, several
     k offsets); rows of B are broadcast, and each 16 x 16 tile is transposed in registers at the end.
   - dot: trans_b == 1, rows of op(A) and of B dotted along k, tiles of R x S sums reduced by a fixed
     tree (m <= 2 with k >= 1024 on AVX-512, small m on other ISAs, n <= 16 with a long k).
   - packed (Goto's scheme) for the rest: for each NC-wide column block and KC-deep slice of k, op(B) is
     packed into NR-wide panels [kc, NR] that stay in L2; the MR x NR micro-kernel reads rows of A in
     place (trans_a == 0) or MR-row panels packed MC rows at a time (trans_a == 1).
   Every C element is one chain of FMAs over k in increasing order (cut into slices that depend only on
   k), or lane-wise chains plus a fixed reduction tree (dot, tdot), then C = alpha * sum + beta * C.
   Which tile or thread computes an element does not change that arithmetic, so results are
   bit-identical for any thread count. No heap: scratch lives on the stack, at most 320 KiB (packed). */

#if defined(__GNUC__) || defined(__clang__)
#define TITANS__GEMM_INLINE static inline __attribute__((always_inline))
#define TITANS__GEMM_NOINLINE static __attribute__((noinline))
#elif defined(_MSC_VER)
#define TITANS__GEMM_INLINE static __forceinline
#define TITANS__GEMM_NOINLINE static __declspec(noinline)
#else
#define TITANS__GEMM_INLINE static inline
#define TITANS__GEMM_NOINLINE static
#endif
#ifdef __cplusplus
#define TITANS__GEMM_ALIGN alignas(64)
#else
#define TITANS__GEMM_ALIGN _Alignas(64)
#endif
/* Unroll a loop over a tile's rows or vectors completely: an accumulator array indexed by a loop left
   rolled is kept in memory and written back every k step (seen for 8-row masked tiles). */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#define TITANS__GEMM_UNROLL _Pragma("GCC unroll 32")
#else
#define TITANS__GEMM_UNROLL
#endif
/* Keep a loaded vector in a register: without it GCC folds the load into each FMA that uses it, so
   a vector shared by R FMAs is loaded R times (measured 2x slower for tiles of <= 4 rows). */
#if (defined(__GNUC__) || defined(__clang__)) && (defined(TITANS__AVX512) || defined(TITANS__AVX2))
#define TITANS__GEMM_INREG(x) __asm__("" : "+v"(x))
#elif defined(__GNUC__) && TITANS__VW == 1
/* The scalar build: GCC 12 (-O2, -O3) vectorized the 8-row direct tile by building a row's op(B)
   values with loads of that row and the three after it, used one, and so read up to three rows past
   the end of B (a crash when B ended at the end of a mapping; test_gemm's guard pages). An opaque
   value keeps that loop out of the vectorizer. */
#define TITANS__GEMM_INREG(x) __asm__("" : "+g"(x))
#else
#define TITANS__GEMM_INREG(x) ((void)0)
#endif
#if defined(__GNUC__) || defined(__clang__)
#define TITANS__GEMM_PREFETCHW(p) __builtin_prefetch((p), 1, 3)
#define TITANS__GEMM_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#define TITANS__GEMM_PREFETCH_L2(p) __builtin_prefetch((p), 0, 2)
#else
#define TITANS__GEMM_PREFETCH_L2(p) ((void)(p))
#define TITANS__GEMM_PREFETCH(p) ((void)(p))
#define TITANS__GEMM_PREFETCHW(p) ((void)(p))
#endif

/* Micro-tile of the packed method: MR rows x NV vectors (NR = NV * VW columns), about 16-24
   accumulators so that the FMA latency is hidden and the registers are not exhausted. */
#ifndef TITANS__GEMM_MR
#if defined(TITANS__AVX512)
#define TITANS__GEMM_MR 8
#define TITANS__GEMM_NV 2
#elif defined(TITANS__AVX2)
#define TITANS__GEMM_MR 6
#define TITANS__GEMM_NV 2
#elif defined(TITANS__NEON)
#define TITANS__GEMM_MR 8
#define TITANS__GEMM_NV 2
#else
#define TITANS__GEMM_MR 4
#define TITANS__GEMM_NV 4
#endif
#endif
#define TITANS__GEMM_NR (TITANS__GEMM_NV * TITANS__VW)
#ifndef TITANS__GEMM_KC
#define TITANS__GEMM_KC 256 /* depth of a k slice: an [KC, MR] A panel stays in L1 */
#endif
#ifndef TITANS__GEMM_NC
#define TITANS__GEMM_NC 256 /* width of a column block: the [KC, NC] B block (256 KiB) stays in L2 */
#endif
#ifndef TITANS__GEMM_MC
#define TITANS__GEMM_MC 64 /* rows of op(A) packed at once: [MC, KC] = 64 KiB, whole cache lines of A */
#endif
#define TITANS__GEMM_DR 8     /* most rows in a direct tile */
#define TITANS__GEMM_BD_FLOATS 65536 /* floats of op(B) the bdirect method copies: 256 KiB of stack */
#define TITANS__GEMM_DNV 8    /* most vectors in a direct tile (a 1-row tile: 8 FMA chains) */
#define TITANS__GEMM_DACC 24  /* most accumulators in a direct tile (6 rows x 4 vectors) */

#define TITANS__GEMM_KD 1024  /* k slice of the dot method when op(A) must be packed: [16, KD] = 64 KiB */
#define TITANS__GEMM_SMALL 16 /* m (or n) up to this uses the direct or dot method */
#ifndef TITANS__GEMM_PAR_WORK
#define TITANS__GEMM_PAR_WORK 1048576.0 /* m*n*k per thread below which threads do not pay off */
#endif

/* ---- partial vectors: a lane mask for the first cnt (1..VW) lanes ----------------------------- */
#if defined(TITANS__AVX512)
typedef __mmask16 titans__gemm_mask;
static inline titans__gemm_mask titans__gemm_mask_n(size_t cnt) { return (__mmask16)((1u << cnt) - 1u); }
static inline titans__vf titans__gemm_vload_m(const float *p, titans__gemm_mask m) {
  return _mm512_maskz_loadu_ps(m, p);
}
static inline void titans__gemm_vstore_m(float *p, titans__vf v, titans__gemm_mask m) {
  _mm512_mask_storeu_ps(p, m, v);
}
#elif defined(TITANS__AVX2)
typedef __m256i titans__gemm_mask;
static inline titans__gemm_mask titans__gemm_mask_n(size_t cnt) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline titans__vf titans__gemm_vload_m(const float *p, titans__gemm_mask m) { return _mm256_maskload_ps(p, m); }
static inline void titans__gemm_vstore_m(float *p, titans__vf v, titans__gemm_mask m) { _mm256_maskstore_ps(p, m, v); }
#else
typedef size_t titans__gemm_mask;
static inline titans__gemm_mask titans__gemm_mask_n(size_t cnt) { return cnt; }
static inline titans__vf titans__gemm_vload_m(const float *p, titans__gemm_mask m) {
  float t[TITANS__VW];
  for (size_t i = 0; i < TITANS__VW; i++) t[i] = i < m ? p[i] : 0.0f;
  return titans__vload(t);
}
static inline void titans__gemm_vstore_m(float *p, titans__vf v, titans__gemm_mask m) {
  float t[TITANS__VW];
  titans__vstore(t, v);
  for (size_t i = 0; i < m; i++) p[i] = t[i];
}
#endif

/* out = alpha * acc + beta * C, stored to c (vector ops, so every lane is rounded the same way);
   beta == 0 does not read C. */
TITANS__GEMM_INLINE void titans__gemm_put(float *c, titans__vf acc, titans__vf va, titans__vf vb, float beta) {
  titans__vf o = titans__vmul(va, acc);
  if (beta != 0.0f) o = titans__vfma(vb, titans__vload(c), o);
  titans__vstore(c, o);
}
TITANS__GEMM_INLINE void titans__gemm_put_m(float *c, titans__vf acc, titans__vf va, titans__vf vb, float beta,
                                            titans__gemm_mask m) {
  titans__vf o = titans__vmul(va, acc);
  if (beta != 0.0f) o = titans__vfma(vb, titans__gemm_vload_m(c, m), o);
  titans__gemm_vstore_m(c, o, m);
}

/* Four horizontal sums at once: out[q] = sum of the lanes of vq, always by the same tree (lane i plus
   lane i + VW/2, then i + VW/4, ..., as titans__gemm_hsum_tree), whichever slot a vector is in. */
#if defined(TITANS__AVX512)
TITANS__GEMM_INLINE void titans__gemm_reduce4(float *out /* [4] */, __m512 v0, __m512 v1, __m512 v2, __m512 v3) {
  __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x44), _mm512_shuffle_f32x4(v0, v1, 0xEE));
  __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, 0x44), _mm512_shuffle_f32x4(v2, v3, 0xEE));
  __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
  x = _mm512_add_ps(x, _mm512_shuffle_ps(x, x, 0x4E)); /* lane i + lane i^2 in each 128-bit quarter */
  x = _mm512_add_ps(x, _mm512_shuffle_ps(x, x, 0xB1)); /* lane i + lane i^1 */
  __m512 y = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), x);
  _mm_storeu_ps(out, _mm512_castps512_ps128(y));
}
#elif defined(TITANS__AVX2)
TITANS__GEMM_INLINE void titans__gemm_reduce4(float *out /* [4] */, __m256 v0, __m256 v1, __m256 v2, __m256 v3) {
  __m256 w01 = _mm256_add_ps(_mm256_permute2f128_ps(v0, v1, 0x20), _mm256_permute2f128_ps(v0, v1, 0x31));
  __m256 w23 = _mm256_add_ps(_mm256_permute2f128_ps(v2, v3, 0x20), _mm256_permute2f128_ps(v2, v3, 0x31));
  __m256 x = _mm256_add_ps(_mm256_shuffle_ps(w01, w23, 0x44), _mm256_shuffle_ps(w01, w23, 0xEE));
  x = _mm256_add_ps(x, _mm256_shuffle_ps(x, x, 0xB1));
  /* lanes 0, 2 hold the sums of v0, v2; lanes 4, 6 those of v1, v3 */
  __m128 lo = _mm256_castps256_ps128(x), hi = _mm256_extractf128_ps(x, 1);
  _mm_storeu_ps(out, _mm_shuffle_ps(_mm_unpacklo_ps(lo, hi), _mm_unpackhi_ps(lo, hi), 0x44));
}
#else
static inline float titans__gemm_hsum_tree(titans__vf v) {
  float t[TITANS__VW];
  titans__vstore(t, v);
  for (size_t w = TITANS__VW / 2; w >= 1; w /= 2)
    for (size_t i = 0; i < w; i++) t[i] += t[i + w];
  return t[0];
}
TITANS__GEMM_INLINE void titans__gemm_reduce4(float *out /* [4] */, titans__vf v0, titans__vf v1, titans__vf v2,
                                              titans__vf v3) {
  out[0] = titans__gemm_hsum_tree(v0);
  out[1] = titans__gemm_hsum_tree(v1);
  out[2] = titans__gemm_hsum_tree(v2);
  out[3] = titans__gemm_hsum_tree(v3);
}
#endif

#if defined(TITANS__AVX512)
/* In registers: r[i] lane q becomes r[q] lane i (a 16 x 16 transpose, 64 shuffles). */
TITANS__GEMM_INLINE void titans__gemm_tr16(__m512 *r) {
  __m512 t[16], u[16];
  TITANS__GEMM_UNROLL
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);     /* per 128-bit lane: x0 y0 x1 y1 */
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]); /* x2 y2 x3 y3 */
  }
  TITANS__GEMM_UNROLL
  for (int g = 0; g < 4; g++) { /* u[4g + c], lane L: rows 4g..4g+3 at column 4L + c */
    u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  TITANS__GEMM_UNROLL
  for (int c = 0; c < 4; c++) {
    __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    __m512 v2 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE), v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(v0, v1, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(v0, v1, 0xDD);
    r[8 + c] = _mm512_shuffle_f32x4(v2, v3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v2, v3, 0xDD);
  }
}

/* dst[q * lddst + r] = src[r * ldsrc + q] for r, q < 16. */
TITANS__GEMM_INLINE void titans__gemm_transpose16(float *dst, size_t lddst, const float *src, size_t ldsrc) {
  __m512 r[16];
  TITANS__GEMM_UNROLL
  for (size_t i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ldsrc);
  titans__gemm_tr16(r);
  TITANS__GEMM_UNROLL
  for (size_t i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * lddst, r[i]);
}

#endif

/* One product C [m, n] = alpha * op(A) op(B) + beta * C, titans_gemm's arguments and the method chosen
   for it (or a piece of it, or of a method's step): the methods' drivers take it whole. */
typedef struct titans__gemm_job {
  int trans_a, trans_b, method;
  size_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  const float *a, *b; /* [m, lda] or [k, lda] (trans_a); [k, ldb] or [n, ldb] (trans_b) */
  float *c;           /* [m, ldc] */
} titans__gemm_job;

/* ---- direct method: op(B) rows read in place -------------------------------------------------- */

/* One R x (NV * VW) tile at column j of g's block (g: an R-row block of C, as titans__gemm_direct_block
   takes it; passed by value, so that once inlined its fields are registers): C = alpha * op(A) op(B) +
   beta * C with op(B)[p, j] = b[p * ldb + j] and op(A)[r, p] = a[r * lda + p] (TA == 0) or
   a[p * lda + r] (TA == 1; the layout is a compile-time constant so that the R row offsets need no
   registers). When masked (then NV == 1) only the lanes in mlast exist. */
TITANS__GEMM_INLINE void titans__gemm_direct_tile(const int TA, const size_t R, const size_t NV, const int masked,
                                                  titans__gemm_job g, size_t j, titans__gemm_mask mlast) {
  float *c = g.c + j;                 /* [R, ldc] */
  const float *a = g.a, *b = g.b + j; /* a: [R, lda] or [k, lda] (TA); b: [k, ldb] */
  const size_t ldc = g.ldc, lda = g.lda, ldb = g.ldb, k = g.k;
  const float alpha = g.alpha, beta = g.beta;
  titans__vf acc[TITANS__GEMM_DACC]; /* [R][NV]: sized to what tiles use, or GCC keeps it in memory */
  TITANS__GEMM_UNROLL
  for (size_t r = 0; r < R; r++)
    TITANS__GEMM_UNROLL
    for (size_t v = 0; v < NV; v++) acc[r * NV + v] = titans__vset1(0.0f);
  for (size_t p = 0; p < k; p++) {
    const float *bp = b + p * ldb;
    titans__vf bv[TITANS__GEMM_DNV];
    if (masked) bv[0] = titans__gemm_vload_m(bp, mlast);
    else
      TITANS__GEMM_UNROLL
      for (size_t v = 0; v < NV; v++) bv[v] = titans__vload(bp + v * TITANS__VW);
    if (R > 1)
      TITANS__GEMM_UNROLL
      for (size_t v = 0; v < NV; v++) TITANS__GEMM_INREG(bv[v]);
    TITANS__GEMM_UNROLL
    for (size_t r = 0; r < R; r++) {
      titans__vf av = titans__vset1(TA ? a[p * lda + r] : a[r * lda + p]);
      TITANS__GEMM_UNROLL
      for (size_t v = 0; v < NV; v++) acc[r * NV + v] = titans__vfma(av, bv[v], acc[r * NV + v]);
    }
  }
  titans__vf va = titans__vset1(alpha), vb = titans__vset1(beta);
  TITANS__GEMM_UNROLL
  for (size_t r = 0; r < R; r++) {
    if (masked) titans__gemm_put_m(c + r * ldc, acc[r], va, vb, beta, mlast);
    else
      TITANS__GEMM_UNROLL
      for (size_t v = 0; v < NV; v++) titans__gemm_put(c + r * ldc + v * TITANS__VW, acc[r * NV + v], va, vb, beta);
  }
}

/* Columns [0, n) of an R-row block: tiles of NV vectors, then narrower ones, the last vector masked. */
TITANS__GEMM_INLINE void titans__gemm_direct_rows(const int TA, const size_t R, const size_t NV, titans__gemm_job g) {
  const size_t n = g.n;
  titans__gemm_mask full = titans__gemm_mask_n(TITANS__VW);
  size_t j = 0;
  for (; j + NV * TITANS__VW <= n; j += NV * TITANS__VW) titans__gemm_direct_tile(TA, R, NV, 0, g, j, full);
  if (NV > 4 && j + 4 * TITANS__VW <= n) { /* what remains: at most one tile of each halved width */
    titans__gemm_direct_tile(TA, R, 4, 0, g, j, full);
    j += 4 * TITANS__VW;
  }
  if (NV > 2 && j + 2 * TITANS__VW <= n) {
    titans__gemm_direct_tile(TA, R, 2, 0, g, j, full);
    j += 2 * TITANS__VW;
  }
  for (; j + TITANS__VW <= n; j += TITANS__VW) titans__gemm_direct_tile(TA, R, 1, 0, g, j, full);
  if (j < n) titans__gemm_direct_tile(TA, R, 1, 1, g, j, titans__gemm_mask_n(n - j));
}

/* An R-row block (R = g.m <= 8) of C: g's c, a and b start at the block (its row 0, column 0). NV
   chosen so that R x NV stays near 16-24 accumulators (8 for one row). */
TITANS__GEMM_INLINE void titans__gemm_direct_block(const int TA, titans__gemm_job g) {
  switch (g.m) {
    case 1: titans__gemm_direct_rows(TA, 1, 8, g); break;
    case 2: titans__gemm_direct_rows(TA, 2, 4, g); break;
    case 3: titans__gemm_direct_rows(TA, 3, 4, g); break;
    case 4: titans__gemm_direct_rows(TA, 4, 4, g); break;
    case 5: titans__gemm_direct_rows(TA, 5, 4, g); break;
    case 6: titans__gemm_direct_rows(TA, 6, 4, g); break;
    case 7: titans__gemm_direct_rows(TA, 7, 2, g); break;
    default: titans__gemm_direct_rows(TA, 8, 2, g); break;
  }
}

/* The block of g's product at rows [i, i + DR) (or fewer, at the end) and columns [j, j + nb) of C, as
   titans__gemm_direct_block takes it. Built in the block's function from g itself: a copy of g made by
   the caller would be stored whole (one 64-byte store on AVX-512) and read back field by field, which
   cost a tiny product (1 x 64 x 64) about 6 ns a call. */
TITANS__GEMM_INLINE titans__gemm_job titans__gemm_direct_sub(const titans__gemm_job *g, size_t i, size_t j, size_t nb) {
  titans__gemm_job t = *g;
  t.m = g->m - i < TITANS__GEMM_DR ? g->m - i : TITANS__GEMM_DR;
  t.n = nb;
  t.c = g->c + i * g->ldc + j;
  t.a = g->trans_a ? g->a + i : g->a + i * g->lda;
  t.b = g->b + j;
  return t;
}

/* One function per layout of A: GCC allocates the registers of the many tile loops better in two
   smaller functions than in one (it kept loop counters in vector registers). The block's job is a
   value, so that its fields are loaded once, not after every store to C. */
TITANS__GEMM_NOINLINE void titans__gemm_direct_block_n(const titans__gemm_job *g, size_t i, size_t j, size_t nb) {
  titans__gemm_direct_block(0, titans__gemm_direct_sub(g, i, j, nb));
}
TITANS__GEMM_NOINLINE void titans__gemm_direct_block_t(const titans__gemm_job *g, size_t i, size_t j, size_t nb) {
  titans__gemm_direct_block(1, titans__gemm_direct_sub(g, i, j, nb));
}

/* C [m, n] = alpha * op(A) op(B) + beta * C by direct tiles of up to 8 rows. Column blocks outside, so
   that the [k, cb] strip of B is read from memory once and from L2 by the following row tiles. */
static void titans__gemm_direct(const titans__gemm_job *g) {
  const int trans_a = g->trans_a;
  const size_t m = g->m, n = g->n, k = g->k;
  size_t cb = (size_t)131072 / (k ? k : 1); /* 512 KiB of B per column block */
  cb = cb < 128 ? 128 : cb - cb % 128;
  if (m <= TITANS__GEMM_DR) cb = n; /* one row tile: nothing to reuse */
  for (size_t j = 0; j < n; j += cb) {
    size_t nb = n - j < cb ? n - j : cb;
    for (size_t i = 0; i < m; i += TITANS__GEMM_DR) {
      if (trans_a) titans__gemm_direct_block_t(g, i, j, nb);
      else titans__gemm_direct_block_n(g, i, j, nb);
    }
  }
}

/* The direct method after copying op(B) = B^T ([n, ldb] rows along k) into a contiguous [k, n] block:
   for trans_b == 1 with a small op(B) and many rows, where packing A (as the packed method does) would
   cost a large fraction of the FMAs. */
TITANS__GEMM_NOINLINE void titans__gemm_bdirect(const titans__gemm_job *g) {
  const size_t n = g->n, k = g->k, ldb = g->ldb;
  const float *b = g->b;
  TITANS__GEMM_ALIGN float bt[TITANS__GEMM_BD_FLOATS]; /* [k, n] */
  size_t j = 0;
  TITANS_ASSERT((double)k * (double)n <= (double)TITANS__GEMM_BD_FLOATS);
#if defined(TITANS__AVX512)
  for (; j + 16 <= n; j += 16) {
    size_t p = 0;
    for (; p + 16 <= k; p += 16) titans__gemm_transpose16(bt + p * n + j, n, b + j * ldb + p, ldb);
    for (; p < k; p++)
      for (size_t q = 0; q < 16; q++) bt[p * n + j + q] = b[(j + q) * ldb + p];
  }
#endif
  for (; j < n; j++)
    for (size_t p = 0; p < k; p++) bt[p * n + j] = b[j * ldb + p];
  titans__gemm_job t = *g;
  t.b = bt;
  t.ldb = n;
  titans__gemm_direct(&t);
}

/* ---- dot method: rows of op(A) and of B, both contiguous along k ------------------------------ */

/* R x S dot products: C[r, s] = alpha * sum_p a[r * lda + p] * b[s * ldb + p] + beta * C[r, s] for
   s < ns (rows s >= ns of b are not read; their slots repeat row ns - 1 and are not stored). */
TITANS__GEMM_INLINE void titans__gemm_dot_tile(const size_t R, const size_t S, titans_mat cm, titans_cmat am,
                                               titans_cmat bm, size_t ns, size_t k, float alpha, float beta) {
  float *c = cm.p;                  /* [R, ldc] */
  const float *a = am.p, *b = bm.p; /* [R, lda], [ns, ldb] */
  const size_t ldc = cm.ld, lda = am.ld, ldb = bm.ld;
  const float *bs[8];
  titans__vf acc[4][8];
  TITANS__GEMM_UNROLL
  for (size_t s = 0; s < S; s++) bs[s] = b + (s < ns ? s : ns - 1) * ldb;
  TITANS__GEMM_UNROLL
  for (size_t r = 0; r < R; r++)
    TITANS__GEMM_UNROLL
    for (size_t s = 0; s < S; s++) acc[r][s] = titans__vset1(0.0f);
  size_t p = 0;
  for (; p + TITANS__VW <= k; p += TITANS__VW) {
    titans__vf bv[8];
    TITANS__GEMM_UNROLL
    for (size_t s = 0; s < S; s++) {
      bv[s] = titans__vload(bs[s] + p);
      if (R > 1) TITANS__GEMM_INREG(bv[s]);
    }
    TITANS__GEMM_UNROLL
    for (size_t r = 0; r < R; r++) {
      titans__vf av = titans__vload(a + r * lda + p);
      TITANS__GEMM_UNROLL
      for (size_t s = 0; s < S; s++) acc[r][s] = titans__vfma(av, bv[s], acc[r][s]);
    }
  }
  if (p < k) { /* the tail: masked lanes add 0 * 0 */
    titans__gemm_mask mk = titans__gemm_mask_n(k - p);
    titans__vf bv[8];
    TITANS__GEMM_UNROLL
    for (size_t s = 0; s < S; s++) bv[s] = titans__gemm_vload_m(bs[s] + p, mk);
    TITANS__GEMM_UNROLL
    for (size_t r = 0; r < R; r++) {
      titans__vf av = titans__gemm_vload_m(a + r * lda + p, mk);
      TITANS__GEMM_UNROLL
      for (size_t s = 0; s < S; s++) acc[r][s] = titans__vfma(av, bv[s], acc[r][s]);
    }
  }
  TITANS__GEMM_UNROLL
  for (size_t r = 0; r < R; r++) {
    TITANS__GEMM_UNROLL
    for (size_t s0 = 0; s0 < S; s0 += 4) {
      float sum[4];
      titans__gemm_reduce4(sum, acc[r][s0], acc[r][s0 + 1], acc[r][s0 + 2], acc[r][s0 + 3]);
      for (size_t q = 0; q < 4 && s0 + q < ns; q++) {
        float *cp = c + r * ldc + s0 + q;
        float o = alpha * sum[q];
        if (beta != 0.0f) o += beta * *cp;
        *cp = o;
      }
    }
  }
}

/* The S columns starting at b for an R-row block of a: a tile of S = 8 (R <= 2) or two of S = 4.
   c [R, ldc], a [R, lda], b [ns, ldb] (rows along k). */
TITANS__GEMM_INLINE void titans__gemm_dot_cols8(const size_t R, titans_mat c, titans_cmat a, titans_cmat b, size_t ns,
                                                size_t k, float alpha, float beta) {
  if (R <= 2) {
    titans__gemm_dot_tile(R, 8, c, a, b, ns, k, alpha, beta);
  } else {
    titans__gemm_dot_tile(R, 4, c, a, b, ns < 4 ? ns : 4, k, alpha, beta);
    if (ns > 4)
      titans__gemm_dot_tile(R, 4, titans_m(c.p + 4, c.ld), a, titans_cm(b.p + 4 * b.ld, b.ld), ns - 4, k, alpha, beta);
  }
}

/* The block of up to 4 rows from row i and 8 columns from column j of g's C. */
static void titans__gemm_dot_block(const titans__gemm_job *g, size_t i, size_t j) {
  const size_t rows = g->m - i < 4 ? g->m - i : 4, ns = g->n - j < 8 ? g->n - j : 8, k = g->k;
  const size_t lda = g->lda, ldb = g->ldb, ldc = g->ldc;
  const float alpha = g->alpha, beta = g->beta, *a = g->a + i * lda, *b = g->b + j * ldb;
  float *c = g->c + i * ldc + j;
  const titans_mat cm = titans_m(c, ldc);
  const titans_cmat am = titans_cm(a, lda), bm = titans_cm(b, ldb);
  switch (rows) {
    case 1: titans__gemm_dot_cols8(1, cm, am, bm, ns, k, alpha, beta); break;
    case 2: titans__gemm_dot_cols8(2, cm, am, bm, ns, k, alpha, beta); break;
    case 3: titans__gemm_dot_cols8(3, cm, am, bm, ns, k, alpha, beta); break;
    default: titans__gemm_dot_cols8(4, cm, am, bm, ns, k, alpha, beta); break;
  }
}

/* C [m, n] = alpha * A B^T + beta * C with A [m, lda], B [n, ldb] (rows along k). The operand with
   fewer rows is walked by the inner loop so that it stays in cache. */
static void titans__gemm_dot(const titans__gemm_job *g) {
  const size_t m = g->m, n = g->n;
  if (m <= n) {
    for (size_t j = 0; j < n; j += 8)
      for (size_t i = 0; i < m; i += 4) titans__gemm_dot_block(g, i, j);
  } else {
    for (size_t i = 0; i < m; i += 4)
      for (size_t j = 0; j < n; j += 8) titans__gemm_dot_block(g, i, j);
  }
}

/* The dot method for trans_a == 1 (op(A) = A^T, A [k, lda]) and m <= TITANS__GEMM_SMALL: op(A) is
   copied in k slices of KD into [m, KD] rows; slices after the first add to C. */
TITANS__GEMM_NOINLINE void titans__gemm_dot_ta(const titans__gemm_job *g) {
  const size_t m = g->m, k = g->k, lda = g->lda;
  const float *a = g->a;
  titans__gemm_job t = *g; /* each slice: A^T's copy times B's columns p0 .. p0 + kd */
  TITANS__GEMM_ALIGN float at[TITANS__GEMM_SMALL * TITANS__GEMM_KD]; /* [m, kd] */
  for (size_t p0 = 0; p0 < k; p0 += TITANS__GEMM_KD) {
    size_t kd = k - p0 < TITANS__GEMM_KD ? k - p0 : TITANS__GEMM_KD;
    for (size_t p = 0; p < kd; p++)
      for (size_t i = 0; i < m; i++) at[i * kd + p] = a[(p0 + p) * lda + i];
    t.k = kd, t.a = at, t.lda = kd, t.b = g->b + p0, t.beta = p0 == 0 ? g->beta : 1.0f;
    titans__gemm_dot(&t);
  }
}

/* ---- transposed dot method (AVX-512): trans_b == 1 and m <= 16 ------------------------------------
   One vector covers all rows of op(A): with mp = m rounded up to a power of two and G = 16 / mp, lane
   i * G + q holds row i at k offset q, so a step consumes G values of k. at [kd / G][16] is op(A) packed
   that way (zero padded). For 16 rows j of B, acc[j] += broadcast(b[j, p .. p + G)) * at[p / G]; then
   the 16 x 16 tile is transposed in registers, the G lanes of a row are added by a fixed tree, and row
   i of C receives 16 consecutive values. */
#if defined(TITANS__AVX512) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define TITANS__GEMM_HAVE_TDOT 1

/* b[0 .. G) repeated over the vector (only the first cnt < G read when masked). */
TITANS__GEMM_INLINE __m512 titans__gemm_bcast(const size_t G, const float *b, int masked, size_t cnt) {
  if (G == 1) return _mm512_set1_ps(*b);
  if (G == 2) /* two floats by an unaligned 64-bit load */
    return _mm512_broadcast_f32x2(masked ? _mm_load_ss(b)
                                         : _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)b)));
  if (G == 4)
    return _mm512_broadcast_f32x4(masked ? _mm_maskz_loadu_ps((__mmask8)((1u << cnt) - 1u), b) : _mm_loadu_ps(b));
  if (G == 8)
    return _mm512_broadcast_f32x8(masked ? _mm256_maskz_loadu_ps((__mmask8)((1u << cnt) - 1u), b) : _mm256_loadu_ps(b));
  return masked ? _mm512_maskz_loadu_ps((__mmask16)((1u << cnt) - 1u), b) : _mm512_loadu_ps(b);
}

/* acc[j0 .. j0 + nr) += the products of at [ceil(k / G), 16] with rows bs[j0 .. j0 + nr) of B over k,
   G values of k a step (the tile's loop but for 16 rows at G = 1; the constants fold once inlined). */
TITANS__GEMM_INLINE void titans__gemm_tdot_rows(const size_t G, __m512 *acc, const float *const *bs, const float *at,
                                                size_t k, const size_t j0, const size_t nr) {
  size_t p = 0;
  for (; p + G <= k; p += G, at += 16) {
    __m512 av = _mm512_loadu_ps(at);
    if (G >= 4 && p % 16 == 0 && p + 128 < k) /* up to 16 row streams: help the prefetcher, 8 lines ahead */
      TITANS__GEMM_UNROLL
      for (size_t j = j0; j < j0 + nr; j++) TITANS__GEMM_PREFETCH(bs[j] + p + 128);
    TITANS__GEMM_UNROLL
    for (size_t j = j0; j < j0 + nr; j++) acc[j] = _mm512_fmadd_ps(titans__gemm_bcast(G, bs[j] + p, 0, G), av, acc[j]);
  }
  if (p < k) { /* k tail: the missing b values load as 0, at is zero there too */
    __m512 av = _mm512_loadu_ps(at);
    TITANS__GEMM_UNROLL
    for (size_t j = j0; j < j0 + nr; j++)
      acc[j] = _mm512_fmadd_ps(titans__gemm_bcast(G, bs[j] + p, 1, k - p), av, acc[j]);
  }
}

/* The tile's loop for one row of op(A) (G = 16, at = that row, zero padded to whole vectors): row j of B
   whole, then row j + 1, so the tile's 16 rows are read in address order, one stream, where the k-step
   loop reads 16 rows at once. Each acc[j] sums the same terms in the same order as that loop (the
   results are the same bits); out of the L2 cache the matrix-vector product of a generated token ran
   1.2-2x faster this way (issue 38). Held in cache, rows of 128 ran slower (one chain of 8 sums a row;
   the d = 128 model generates 5% slower), and neither keeping the k-step loop for short rows nor two
   rows a pass (two streams) did better: docs/results/2026-11-30-session23.md. Rows past nr are left at
   zero. */
TITANS__GEMM_INLINE void titans__gemm_tdot_rows_whole(__m512 *acc, const float *const *bs, const float *at, size_t k,
                                                      size_t nr) {
  const size_t full = k / 16 * 16;
  const __mmask16 tail = (__mmask16)((1u << (k - full)) - 1u);
  for (size_t j = 0; j < nr; j++) {
    const float *r = bs[j]; /* [k] */
    __m512 s = _mm512_setzero_ps();
    size_t p = 0;
    for (; p + 64 <= full; p += 64) { /* unrolled: the loads of a row go out together */
      /* 8 KB ahead, past the rows of this tile into the next: the hardware prefetcher stops at every
         4 KB page and the one-row product waited on it (the memory kinds' generated token 1.18-1.25x,
         docs/results/2026-11-30-session24.md) */
      TITANS__GEMM_PREFETCH(r + p + 2048);
      TITANS__GEMM_PREFETCH(r + p + 2048 + 16);
      TITANS__GEMM_PREFETCH(r + p + 2048 + 32);
      TITANS__GEMM_PREFETCH(r + p + 2048 + 48);
      __m512 b0 = _mm512_loadu_ps(r + p), b1 = _mm512_loadu_ps(r + p + 16);
      __m512 b2 = _mm512_loadu_ps(r + p + 32), b3 = _mm512_loadu_ps(r + p + 48);
      s = _mm512_fmadd_ps(b0, _mm512_loadu_ps(at + p), s);
      s = _mm512_fmadd_ps(b1, _mm512_loadu_ps(at + p + 16), s);
      s = _mm512_fmadd_ps(b2, _mm512_loadu_ps(at + p + 32), s);
      s = _mm512_fmadd_ps(b3, _mm512_loadu_ps(at + p + 48), s);
    }
    for (; p < full; p += 16) s = _mm512_fmadd_ps(_mm512_loadu_ps(r + p), _mm512_loadu_ps(at + p), s);
    if (full < k) s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, r + full), _mm512_loadu_ps(at + full), s);
    acc[j] = s;
  }
}

/* at [ceil(k / G), 16]: op(A) packed by titans__gemm_tdot_pack. */
TITANS__GEMM_INLINE void titans__gemm_tdot_tile(const size_t G, titans_mat cm, size_t m, const float *at,
                                                titans_cmat bm, size_t nj, size_t k, float alpha, float beta) {
  float *c = cm.p;       /* [m, ldc] */
  const float *b = bm.p; /* [nj, ldb] */
  const size_t ldc = cm.ld, ldb = bm.ld;
  __m512 acc[16];
  const float *bs[16];
  TITANS__GEMM_UNROLL
  for (size_t j = 0; j < 16; j++) { /* rows past nj repeat the last one and are not stored */
    bs[j] = b + (j < nj ? j : nj - 1) * ldb;
    acc[j] = _mm512_setzero_ps();
  }
  /* Rows 2 KiB apart or a multiple (ldb a multiple of 512: k = 512, 1024, the FFN's second product) fall
     in one or two sets of the L1 cache, whose 8 ways cannot hold the 16 lines a k step reads: every load
     missed (m = 16: 54 GFLOP/s against 112 at k = 256). Eight rows a pass over k fit; each acc sums the
     same terms in the same order either way. */
  const int aliased = ldb * sizeof(float) % 2048 == 0;
  if (G == 16) {
    titans__gemm_tdot_rows_whole(acc, bs, at, k, nj);
  } else if (G == 1 && nj == 16 && !aliased) {
    /* Row j = 4 g + r of B lies at rows[g] + off[r]: four moving row pointers and three strides (ldb,
       2 ldb, 3 ldb, in bytes, as the index of each load) address all sixteen rows, where sixteen
       pointers outgrow x86-64's general registers (GCC reloaded five from the stack every k step). */
    const size_t l1 = ldb * sizeof(float), off[4] = {0, l1, 2 * l1, 3 * l1};
    const char *rows[4];
    TITANS__GEMM_UNROLL
    for (size_t g = 0; g < 4; g++) rows[g] = (const char *)(b + 4 * g * ldb);
    for (size_t p = 0; p < k; p++, at += 16) {
      __m512 av = _mm512_loadu_ps(at);
      if (p % 16 == 0 && p + 64 < k) /* each row's next line every 16 steps: fetch it 4 lines ahead */
        TITANS__GEMM_UNROLL
        for (size_t j = 0; j < 16; j++) TITANS__GEMM_PREFETCH(rows[j / 4] + off[j % 4] + 64 * sizeof(float));
      TITANS__GEMM_UNROLL
      for (size_t j = 0; j < 16; j++)
        acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(*(const float *)(const void *)(rows[j / 4] + off[j % 4])), av, acc[j]);
      TITANS__GEMM_UNROLL
      for (size_t g = 0; g < 4; g++) rows[g] += sizeof(float);
    }
  } else if (aliased) { /* rows past nj repeat the last one, adding no lines */
    titans__gemm_tdot_rows(G, acc, bs, at, k, 0, 8);
    titans__gemm_tdot_rows(G, acc, bs, at, k, 8, 8);
  } else {
    titans__gemm_tdot_rows(G, acc, bs, at, k, 0, 16);
  }
  titans__gemm_tr16(acc); /* acc[i * G + q] lane j: row i of C, column j, partial sum q */
  TITANS__GEMM_UNROLL
  for (size_t w = G / 2; w >= 1; w /= 2)
    for (size_t i = 0; i < 16 / G; i++) /* unrolled with w (a pragma here: "ignoring loop annotation" at -O1) */
      TITANS__GEMM_UNROLL
      for (size_t q = 0; q < w; q++) acc[i * G + q] = _mm512_add_ps(acc[i * G + q], acc[i * G + q + w]);
  __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  __mmask16 mj = (__mmask16)((1u << nj) - 1u);
  for (size_t i = 0; i < m; i++) {
    if (nj == 16) titans__gemm_put(c + i * ldc, acc[i * G], va, vb, beta);
    else titans__gemm_put_m(c + i * ldc, acc[i * G], va, vb, beta, mj);
  }
}

/* op(A) rows [m, k slice] into at [ceil(kd / G), 16]: at[g * 16 + i * G + q] = op(A)[i, p0 + g * G + q],
   zero where i >= m or p0 + g * G + q >= p0 + kd. */
TITANS__GEMM_INLINE void titans__gemm_tdot_pack(float *at, const size_t G, int trans_a, size_t m, const float *a,
                                                 size_t lda, size_t p0, size_t kd) {
  size_t groups = (kd + G - 1) / G, full = kd / G, mp = 16 / G;
  if (trans_a) { /* op(A)[i, p] = a[p * lda + i]: row p of a holds the m values of a k step */
    if (G == 1) {
      __mmask16 mm = (__mmask16)((1u << m) - 1u);
      for (size_t p = 0; p < kd; p++) _mm512_storeu_ps(at + p * 16, _mm512_maskz_loadu_ps(mm, a + (p0 + p) * lda));
      return;
    }
    for (size_t g = 0; g < groups; g++)
      for (size_t i = 0; i < mp; i++)
        for (size_t q = 0; q < G; q++) {
          size_t p = g * G + q;
          at[g * 16 + i * G + q] = i < m && p < kd ? a[(p0 + p) * lda + i] : 0.0f;
        }
    return;
  }
  if (G == 1) { /* 16 x 16 transposes; rows past m repeat row m - 1 and are zeroed by the mask */
    __mmask16 mm = (__mmask16)((1u << m) - 1u);
    size_t p = 0;
    for (; p + 16 <= kd; p += 16) {
      __m512 r[16];
      TITANS__GEMM_UNROLL
      for (size_t i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(a + (i < m ? i : m - 1) * lda + p0 + p);
      titans__gemm_tr16(r);
      TITANS__GEMM_UNROLL
      for (size_t q = 0; q < 16; q++) _mm512_storeu_ps(at + (p + q) * 16, _mm512_maskz_mov_ps(mm, r[q]));
    }
    for (; p < kd; p++)
      for (size_t i = 0; i < 16; i++) at[p * 16 + i] = i < m ? a[i * lda + p0 + p] : 0.0f;
    return;
  }
  for (size_t i = 0; i < mp; i++) { /* G > 1: row i's k values are already in the right order, G at a time */
    const float *src = a + i * lda + p0;
    float *dst = at + i * G;
    if (i >= m) {
      for (size_t g = 0; g < groups; g++)
        for (size_t q = 0; q < G; q++) dst[g * 16 + q] = 0.0f;
      continue;
    }
    for (size_t g = 0; g < full; g++) memcpy(dst + g * 16, src + g * G, G * sizeof(float));
    if (full < groups)
      for (size_t q = 0; q < G; q++) dst[full * 16 + q] = full * G + q < kd ? src[full * G + q] : 0.0f;
  }
}

/* One k slice of g's product, columns p0 .. p0 + kd of op(A) (rows of B), C scaled by beta (g's for the
   first slice, 1 for the others): pack op(A) into at, then the column tiles. g is passed by value so
   that, once inlined, its fields are registers, not loads after every store to C. */
TITANS__GEMM_INLINE void titans__gemm_tdot_slice(const size_t G, float *at, titans__gemm_job g, size_t p0, size_t kd,
                                                 float beta) {
  const int trans_a = g.trans_a;
  const size_t m = g.m, n = g.n, lda = g.lda, ldb = g.ldb, ldc = g.ldc;
  const float alpha = g.alpha, *a = g.a, *b = g.b;
  float *c = g.c;
  titans__gemm_tdot_pack(at, G, trans_a, m, a, lda, p0, kd);
  for (size_t j = 0; j < n; j += 16)
    titans__gemm_tdot_tile(G, titans_m(c + j, ldc), m, at, titans_cm(b + j * ldb + p0, ldb), n - j < 16 ? n - j : 16,
                           kd, alpha, beta);
}

TITANS__GEMM_NOINLINE void titans__gemm_tdot(const titans__gemm_job *g) {
  const titans__gemm_job t = *g;
  const size_t m = t.m, k = t.k;
  const float beta = t.beta;
  TITANS__GEMM_ALIGN float at[TITANS__GEMM_KD * 16]; /* op(A) slice, lanes as above */
  for (size_t p0 = 0; p0 < k; p0 += TITANS__GEMM_KD) {
    size_t kd = k - p0 < TITANS__GEMM_KD ? k - p0 : TITANS__GEMM_KD;
    float bs = p0 == 0 ? beta : 1.0f; /* later slices add to C */
    if (m <= 1) titans__gemm_tdot_slice(16, at, t, p0, kd, bs);
    else if (m <= 2) titans__gemm_tdot_slice(8, at, t, p0, kd, bs);
    else if (m <= 4) titans__gemm_tdot_slice(4, at, t, p0, kd, bs);
    else if (m <= 8) titans__gemm_tdot_slice(2, at, t, p0, kd, bs);
    else titans__gemm_tdot_slice(1, at, t, p0, kd, bs);
  }
}
#endif

/* ---- packed method ---------------------------------------------------------------------------- */

/* op(B)[p0 : p0 + kc, j0 : j0 + nc] into panels bp [ceil(nc / NR)][kc][NR], zero padded to NR. */
static void titans__gemm_pack_b(float *bp, const float *b, size_t ldb, int trans_b, size_t p0, size_t kc, size_t j0,
                                size_t nc) {
  for (size_t jp = 0; jp < nc; jp += TITANS__GEMM_NR) {
    size_t w = nc - jp < TITANS__GEMM_NR ? nc - jp : TITANS__GEMM_NR;
    float *dst = bp + jp * kc;
    if (!trans_b) {
      const float *src = b + p0 * ldb + j0 + jp;
      if (w == TITANS__GEMM_NR) {
        for (size_t p = 0; p < kc; p++)
          for (size_t v = 0; v < TITANS__GEMM_NV; v++)
            titans__vstore(dst + p * TITANS__GEMM_NR + v * TITANS__VW, titans__vload(src + p * ldb + v * TITANS__VW));
      } else {
        for (size_t p = 0; p < kc; p++)
          for (size_t j = 0; j < TITANS__GEMM_NR; j++) dst[p * TITANS__GEMM_NR + j] = j < w ? src[p * ldb + j] : 0.0f;
      }
    } else {
      const float *src = b + (j0 + jp) * ldb + p0; /* op(B)[p, j] = src[j * ldb + p] */
#if defined(TITANS__AVX512)
      if (w == TITANS__GEMM_NR) {
        size_t p = 0;
        for (; p + 16 <= kc; p += 16)
          for (size_t h = 0; h < TITANS__GEMM_NR; h += 16)
            titans__gemm_transpose16(dst + p * TITANS__GEMM_NR + h, TITANS__GEMM_NR, src + h * ldb + p, ldb);
        for (; p < kc; p++)
          for (size_t j = 0; j < TITANS__GEMM_NR; j++) dst[p * TITANS__GEMM_NR + j] = src[j * ldb + p];
        continue;
      }
#endif
      for (size_t j = 0; j < TITANS__GEMM_NR; j++) {
        if (j < w)
          for (size_t p = 0; p < kc; p++) dst[p * TITANS__GEMM_NR + j] = src[j * ldb + p];
        else
          for (size_t p = 0; p < kc; p++) dst[p * TITANS__GEMM_NR + j] = 0.0f;
      }
    }
  }
}

/* op(A)[i0 : i0 + mb, p0 : p0 + kc] into panels ap [ceil(mb / MR)][kc][MR] (zero padded to MR rows) for
   trans_a == 1: op(A)[i, p] = a[p * lda + i], so row p of a holds the block's mb consecutive i, read whole.
   (For trans_a == 0 the micro-kernel reads the rows of A in place.) */
static void titans__gemm_pack_a(float *ap, const float *a, size_t lda, size_t i0, size_t mb, size_t p0, size_t kc) {
  for (size_t p = 0; p < kc; p++) {
    const float *src = a + (p0 + p) * lda + i0;
    for (size_t ip = 0; ip < mb; ip += TITANS__GEMM_MR) {
      size_t mr = mb - ip < TITANS__GEMM_MR ? mb - ip : TITANS__GEMM_MR;
      float *dst = ap + ip * kc + p * TITANS__GEMM_MR;
#if (defined(TITANS__AVX512) || defined(TITANS__AVX2)) && TITANS__GEMM_MR == 8
      if (mr == 8) { /* a plain copy: masked stores are slow on some cores */
        _mm256_storeu_ps(dst, _mm256_loadu_ps(src + ip));
        continue;
      }
#endif
      for (size_t r = 0; r < TITANS__GEMM_MR; r++) dst[r] = r < mr ? src[ip + r] : 0.0f;
    }
  }
}

/* One MR x NR tile: C[0:mr, 0:nr] = alpha * sum_p op(A)[r, p] bp[p][.] + beta * C. op(A) is either a
   packed panel ap [kc][MR] (zero padded) or, when in_place, the rows a + r * lda themselves (rows past mr
   repeat row mr - 1). bp is zero padded, so the loop always runs on the full tile; only the stores are
   cut to mr x nr. */
TITANS__GEMM_INLINE void titans__gemm_micro_body(const int in_place, titans_mat cm, titans_cmat am, const float *bp,
                                                 size_t kc, float alpha, float beta, size_t mr, size_t nr) {
  float *c = cm.p;       /* [mr, ldc]; bp: [kc, NR] */
  const float *a = am.p; /* [kc, MR] packed, or [mr, lda] in place */
  const size_t ldc = cm.ld, lda = am.ld;
  titans__vf acc[TITANS__GEMM_MR][TITANS__GEMM_NV];
  const float *ar[TITANS__GEMM_MR];
  TITANS__GEMM_UNROLL
  for (size_t r = 0; r < TITANS__GEMM_MR; r++) {
    ar[r] = in_place ? a + (r < mr ? r : mr - 1) * lda : a + r;
    TITANS__GEMM_UNROLL
    for (size_t v = 0; v < TITANS__GEMM_NV; v++) acc[r][v] = titans__vset1(0.0f);
  }
  for (size_t r = 0; r < mr; r++) { /* the C tile arrives in cache while the loop runs */
    TITANS__GEMM_PREFETCHW(c + r * ldc);
    TITANS__GEMM_PREFETCHW(c + r * ldc + nr - 1);
  }
  for (size_t p = 0; p < kc; p++) {
    titans__vf bv[TITANS__GEMM_NV];
    TITANS__GEMM_UNROLL
    for (size_t v = 0; v < TITANS__GEMM_NV; v++) bv[v] = titans__vload(bp + p * TITANS__GEMM_NR + v * TITANS__VW);
    TITANS__GEMM_UNROLL
    for (size_t r = 0; r < TITANS__GEMM_MR; r++) {
      titans__vf av = titans__vset1(in_place ? ar[r][p] : a[p * TITANS__GEMM_MR + r]);
      TITANS__GEMM_UNROLL
      for (size_t v = 0; v < TITANS__GEMM_NV; v++) acc[r][v] = titans__vfma(av, bv[v], acc[r][v]);
    }
  }
  titans__vf va = titans__vset1(alpha), vb = titans__vset1(beta);
  if (mr == TITANS__GEMM_MR && nr == TITANS__GEMM_NR) {
    TITANS__GEMM_UNROLL
    for (size_t r = 0; r < TITANS__GEMM_MR; r++)
      TITANS__GEMM_UNROLL
      for (size_t v = 0; v < TITANS__GEMM_NV; v++)
        titans__gemm_put(c + r * ldc + v * TITANS__VW, acc[r][v], va, vb, beta);
  } else {
    TITANS__GEMM_UNROLL
    for (size_t r = 0; r < TITANS__GEMM_MR; r++) {
      if (r >= mr) break;
      TITANS__GEMM_UNROLL
      for (size_t v = 0; v < TITANS__GEMM_NV; v++) {
        size_t col = v * TITANS__VW;
        if (col >= nr) break;
        size_t cnt = nr - col < TITANS__VW ? nr - col : TITANS__VW;
        titans__gemm_put_m(c + r * ldc + col, acc[r][v], va, vb, beta, titans__gemm_mask_n(cnt));
      }
    }
  }
}

/* Not inlined: the kernel's registers are then allocated on their own, whatever the loops around it.
   c [mr, ldc], ap [kc, MR] (packed), a [mr, lda] (in place), bp [kc, NR]. */
TITANS__GEMM_NOINLINE void titans__gemm_micro(titans_mat c, const float *ap, const float *bp, size_t kc, float alpha,
                                            float beta, size_t mr, size_t nr) {
  titans__gemm_micro_body(0, c, titans_cm(ap, 0), bp, kc, alpha, beta, mr, nr);
}
TITANS__GEMM_NOINLINE void titans__gemm_micro_in_place(titans_mat c, titans_cmat a, const float *bp, size_t kc,
                                                     float alpha, float beta, size_t mr, size_t nr) {
  titans__gemm_micro_body(1, c, a, bp, kc, alpha, beta, mr, nr);
}

/* A stream of prefetches into L2 over a block of rows (rows x row_bytes, stride apart), issued a few
   lines at a time between micro-kernel calls, so that the next block to pack is in cache when its
   turn comes (its rows often lie in different pages, which the hardware prefetcher does not follow). */
typedef struct titans__gemm_pf {
  const char *base;
  size_t rows, row_bytes, stride, r, off, per_step;
} titans__gemm_pf;

static void titans__gemm_pf_init(titans__gemm_pf *pf, const float *base, size_t rows, size_t row_floats,
                                 size_t stride_floats, size_t steps) {
  pf->base = (const char *)base;
  pf->rows = base ? rows : 0;
  pf->row_bytes = row_floats * sizeof(float);
  pf->stride = stride_floats * sizeof(float);
  pf->r = 0;
  pf->off = 0;
  pf->per_step = (pf->rows * (pf->row_bytes / 64 + 1) + steps - 1) / (steps ? steps : 1);
}

TITANS__GEMM_INLINE void titans__gemm_pf_step(titans__gemm_pf *pf) {
  for (size_t i = 0; i < pf->per_step && pf->r < pf->rows; i++) {
    const char *row = pf->base + pf->r * pf->stride;
    if (pf->off < pf->row_bytes) {
      TITANS__GEMM_PREFETCH_L2(row + pf->off);
      pf->off += 64;
    } else { /* the row's last byte: its line may be one more */
      TITANS__GEMM_PREFETCH_L2(row + pf->row_bytes - 1);
      pf->off = 0;
      pf->r++;
    }
  }
}

TITANS__GEMM_NOINLINE void titans__gemm_packed(const titans__gemm_job *g) {
  const int trans_a = g->trans_a;
  const size_t m = g->m, n = g->n, k = g->k, lda = g->lda, ldb = g->ldb, ldc = g->ldc;
  const float alpha = g->alpha, beta = g->beta, *a = g->a, *b = g->b;
  float *c = g->c;
  const int trans_b = g->trans_b;
  TITANS__GEMM_ALIGN float bpack[TITANS__GEMM_KC * TITANS__GEMM_NC]; /* [NC / NR][kc][NR] */
  TITANS__GEMM_ALIGN float apack[TITANS__GEMM_KC * TITANS__GEMM_MC]; /* [MC / MR][kc][MR] */
  /* whole panels per block (the buffers hold KC * MC and KC * NC floats) */
  const size_t MR = TITANS__GEMM_MR, NR = TITANS__GEMM_NR;
  const size_t MC = TITANS__GEMM_MC / MR * MR, NC = TITANS__GEMM_NC / NR * NR;
  size_t nslices = (k + TITANS__GEMM_KC - 1) / TITANS__GEMM_KC;
  size_t kslice = (k + nslices - 1) / nslices; /* equal slices, a function of k only */
  titans__gemm_pf pfa;
  for (size_t jc = 0; jc < n; jc += NC) {
    size_t nc = n - jc < NC ? n - jc : NC, ntiles = (nc + NR - 1) / NR;
    for (size_t pc = 0; pc < k; pc += kslice) {
      size_t kc = k - pc < kslice ? k - pc : kslice;
      float beta_s = pc == 0 ? beta : 1.0f; /* later slices add to C */
      titans__gemm_pack_b(bpack, b, ldb, trans_b, pc, kc, jc, nc);
      for (size_t ic = 0; ic < m; ic += MC) {
        size_t mb = m - ic < MC ? m - ic : MC;
        if (!trans_a) { /* rows of A are read in place: packing them costs more than it saves */
          for (size_t ir = 0; ir < mb; ir += MR)
            for (size_t jr = 0; jr < nc; jr += NR)
              titans__gemm_micro_in_place(titans_m(c + (ic + ir) * ldc + jc + jr, ldc),
                                          titans_cm(a + (ic + ir) * lda + pc, lda), bpack + jr * kc, kc, alpha, beta_s,
                                          mb - ir < MR ? mb - ir : MR, nc - jr < NR ? nc - jr : NR);
          continue;
        }
        titans__gemm_pack_a(apack, a, lda, ic, mb, pc, kc);
        { /* the next A block: next rows, else the first rows of the next slice or column block */
          size_t in = ic + MC, pn = pc, calls = (mb + MR - 1) / MR * ntiles;
          int any = 1;
          if (in >= m) {
            in = 0;
            pn = pc + kslice;
            if (pn >= k) { pn = 0; any = jc + NC < n; }
          }
          size_t mn = m - in < MC ? m - in : MC, kn = k - pn < kslice ? k - pn : kslice;
          titans__gemm_pf_init(&pfa, any ? a + pn * lda + in : NULL, kn, mn, lda, calls);
        }
        for (size_t ir = 0; ir < mb; ir += MR)
          for (size_t jr = 0; jr < nc; jr += NR) {
            titans__gemm_pf_step(&pfa);
            titans__gemm_micro(titans_m(c + (ic + ir) * ldc + jc + jr, ldc), apack + ir * kc, bpack + jr * kc, kc,
                               alpha, beta_s, mb - ir < MR ? mb - ir : MR, nc - jr < NR ? nc - jr : NR);
          }
      }
    }
  }
}

/* ---- dispatch and threads --------------------------------------------------------------------- */

enum { TITANS__GEMM_DIRECT, TITANS__GEMM_DOT, TITANS__GEMM_TDOT, TITANS__GEMM_PACKED, TITANS__GEMM_BDIRECT };

/* Rows [i0, i1) x columns [j0, j1) of the job's C, by its method. */
static void titans__gemm_run(const titans__gemm_job *g, size_t i0, size_t i1, size_t j0, size_t j1) {
  titans__gemm_job t = *g; /* the piece, a product of its own */
  t.m = i1 - i0, t.n = j1 - j0;
  t.a = g->a + (g->trans_a ? i0 : i0 * g->lda);
  t.b = g->b + (g->trans_b ? j0 * g->ldb : j0);
  t.c = g->c + i0 * g->ldc + j0;
  if (t.m == 0 || t.n == 0) return;
  if (g->method == TITANS__GEMM_DIRECT) {
    titans__gemm_direct(&t);
#if defined(TITANS__GEMM_HAVE_TDOT)
  } else if (g->method == TITANS__GEMM_TDOT) {
    titans__gemm_tdot(&t);
#endif
  } else if (g->method == TITANS__GEMM_BDIRECT) {
    titans__gemm_bdirect(&t);
  } else if (g->method == TITANS__GEMM_DOT) {
    if (g->trans_a) titans__gemm_dot_ta(&t);
    else titans__gemm_dot(&t);
  } else {
    titans__gemm_packed(&t);
  }
}

#ifdef _OPENMP
/* The pieces the threads share: C cut along one dimension into about 4 pieces per thread, claimed
   dynamically, so that a thread the OS runs late finds its share done by the others instead of holding
   everyone up. Columns for few rows of C (or when the packed method's blocks stay squarer that way),
   rows otherwise; for the packed method, the other dimension when the preferred one gives a single
   piece (a d x d weight gradient with d = 256 and k = B T would otherwise run on one thread while the
   others wait: ~10% of a 2-thread MAG step). Pieces stay large enough that what each piece packs again
   (op(B) for row pieces, op(A) for column pieces) costs little: 256 columns or 128 rows, 64 columns for
   the small-m methods. Every element of C is computed the same way whatever the pieces, so the split
   never changes a result. */
typedef struct titans__gemm_split {
  int by_cols;
  size_t step, count;
} titans__gemm_split;

static titans__gemm_split titans__gemm_split_along(const titans__gemm_job *g, int nt, int by_cols) {
  titans__gemm_split sp;
  int packed = g->method == TITANS__GEMM_PACKED;
  sp.by_cols = by_cols;
  size_t len = by_cols ? g->n : g->m, quantum = by_cols ? TITANS__GEMM_NR : TITANS__GEMM_MR;
  size_t least = by_cols ? (packed ? 256 : 64) : 128, want = (size_t)nt * 4;
  if (quantum < 16) quantum = 16; /* whole vectors and whole 16-column tiles of the transposed dot */
  size_t step = (len + want - 1) / want;
  if (step < least) step = least;
  step = (step + quantum - 1) / quantum * quantum;
  sp.step = step;
  sp.count = (len + step - 1) / step;
  return sp;
}

static titans__gemm_split titans__gemm_split_for(const titans__gemm_job *g, int nt) {
  int packed = g->method == TITANS__GEMM_PACKED;
  int by_cols = packed ? g->n >= g->m : g->m <= TITANS__GEMM_SMALL;
  titans__gemm_split sp = titans__gemm_split_along(g, nt, by_cols);
  if (sp.count < 2 && packed) { /* the packed method splits either way; the others keep their usual cut */
    titans__gemm_split other = titans__gemm_split_along(g, nt, !by_cols);
    if (other.count > sp.count) sp = other;
  }
  return sp;
}

static void titans__gemm_piece(const titans__gemm_job *g, const titans__gemm_split *sp, size_t i) {
  size_t lo = i * sp->step, len = sp->by_cols ? g->n : g->m, hi = lo + sp->step < len ? lo + sp->step : len;
  if (sp->by_cols) titans__gemm_run(g, 0, g->m, lo, hi);
  else titans__gemm_run(g, lo, hi, 0, g->n);
}
#endif

/* The method for a shape (measured on an AVX-512 core; the shape alone decides, never the threads).
   Small m: direct (trans_b == 0) or the (transposed) dot method, except m > 8 with an op(B) of many MiB,
   which the packed method streams better. Otherwise direct or bdirect while op(B) is narrow (n <= 256)
   and small: packing A, as the packed method does, would cost about 32 / n of the FMAs. */
static int titans__gemm_method(int trans_a, int trans_b, size_t m, size_t n, size_t k) {
  double kn = (double)k * (double)n;
  if (m <= TITANS__GEMM_SMALL) {
    if (m > 8 && kn > 2097152.0) return TITANS__GEMM_PACKED;
    if (!trans_b) return TITANS__GEMM_DIRECT;
#if defined(TITANS__GEMM_HAVE_TDOT)
    if (m <= 2 && k >= 1024) return TITANS__GEMM_DOT; /* fewer B rows in flight at once */
    return TITANS__GEMM_TDOT;
#else
    return trans_a ? TITANS__GEMM_PACKED : TITANS__GEMM_DOT;
#endif
  }
  /* op(A) = A^T in place steps to a new row of A every k: fine for a short k only */
  int narrow = trans_a ? k <= 256 && kn <= 32768.0 : n <= 256 && kn <= 131072.0;
  if (!trans_b) return n <= TITANS__GEMM_SMALL || narrow ? TITANS__GEMM_DIRECT : TITANS__GEMM_PACKED;
  if (narrow && kn <= (double)TITANS__GEMM_BD_FLOATS) return TITANS__GEMM_BDIRECT;
  if (n <= TITANS__GEMM_SMALL && !trans_a) return TITANS__GEMM_DOT;
  return TITANS__GEMM_PACKED;
}

#ifdef TITANS_COUNT_FLOPS
static unsigned long long titans__gemm_madd_count;
TITANSDEF unsigned long long titans_gemm_madds(void) {
  unsigned long long n;
#ifdef _OPENMP
#pragma omp atomic read
#endif
  n = titans__gemm_madd_count;
  return n;
}
#endif

TITANSDEF void titans_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, titans_cmat a,
                           titans_cmat b, float beta, titans_mat c) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) { /* C = beta * C, A and B not read (as BLAS) */
    for (size_t i = 0; i < m; i++)
      for (size_t j = 0; j < n; j++) c.p[i * c.ld + j] = beta == 0.0f ? 0.0f : beta * c.p[i * c.ld + j];
    return;
  }
#ifdef TITANS_COUNT_FLOPS
  {
    unsigned long long madds = (unsigned long long)m * n * k;
#ifdef _OPENMP
#pragma omp atomic
#endif
    titans__gemm_madd_count += madds;
  }
#endif
  titans__gemm_job g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = a.ld;
  g.ldb = b.ld;
  g.ldc = c.ld;
  g.alpha = alpha;
  g.beta = beta;
  g.a = a.p;
  g.b = b.p;
  g.c = c.p;
  g.method = titans__gemm_method(trans_a, trans_b, m, n, k);
#ifdef _OPENMP
  {
    double work = (double)m * (double)n * (double)k;
    if (work >= 2.0 * TITANS__GEMM_PAR_WORK) { /* small calls skip the OpenMP queries altogether */
      int nt = omp_get_max_threads();
      if (work < TITANS__GEMM_PAR_WORK * nt) nt = (int)(work / TITANS__GEMM_PAR_WORK);
      if (nt > 1 && !omp_in_parallel()) {
        titans__gemm_split sp = titans__gemm_split_for(&g, nt);
        if (sp.count > 1) {
          long count = (long)sp.count;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
          for (long i = 0; i < count; i++) titans__gemm_piece(&g, &sp, (size_t)i);
          return;
        }
      }
    }
  }
#endif
  titans__gemm_run(&g, 0, m, 0, n);
}
/* ---- 3. Kernels (implementation) -------------------------------------------------------------- */

#define TITANS__OPS_BLOCK 16384    /* floats per elementwise work unit; a multiple of every TITANS__VW */
#define TITANS__OPS_PAR_WORK 65536 /* floats of work below which starting threads costs more than it saves */
#define TITANS__OPS_CB 64          /* channels (columns) per conv / gain / embedding block; multiple of VW */
#define TITANS__OPS_TB 32          /* sequence rows per conv block */
#define TITANS__OPS_SG 8           /* conv taps per pass of the weight gradient */
#define TITANS__OPS_CE_PARTS 64    /* cross-entropy row groups: a fixed count fixes the loss's sum order */

/* ---- private SIMD extensions: what exp, sigmoid, tanh and AdamW need beyond the core layer ---- */
#if defined(TITANS__AVX512)
static inline titans__vf titans__ops_vdiv(titans__vf a, titans__vf b) { return _mm512_div_ps(a, b); }
static inline titans__vf titans__ops_vsqrt(titans__vf a) { return _mm512_sqrt_ps(a); }
static inline titans__vf titans__ops_vabs(titans__vf a) { return _mm512_abs_ps(a); }
/* a < b ? x : y per lane (false when a or b is NaN) */
static inline titans__vf titans__ops_vsel_lt(titans__vf a, titans__vf b, titans__vf x, titans__vf y) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x);
}
/* max(lo, min(hi, x)) keeping NaN: x86 min/max return the second operand when one is NaN */
static inline titans__vf titans__ops_vclamp(titans__vf x, float lo, float hi) {
  return _mm512_max_ps(_mm512_set1_ps(lo), _mm512_min_ps(_mm512_set1_ps(hi), x));
}
/* 2^n for integral n in [-126, 127], written into the exponent field */
static inline titans__vf titans__ops_vpow2i(titans__vf n) {
  __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
  return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
/* p 2^n for integral n by adding n to the exponent field; exact while the result stays normal */
static inline titans__vf titans__ops_vldexp(titans__vf p, titans__vf n) {
  __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
}
#elif defined(TITANS__AVX2)
static inline titans__vf titans__ops_vdiv(titans__vf a, titans__vf b) { return _mm256_div_ps(a, b); }
static inline titans__vf titans__ops_vsqrt(titans__vf a) { return _mm256_sqrt_ps(a); }
static inline titans__vf titans__ops_vabs(titans__vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline titans__vf titans__ops_vsel_lt(titans__vf a, titans__vf b, titans__vf x, titans__vf y) {
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
static inline titans__vf titans__ops_vclamp(titans__vf x, float lo, float hi) {
  return _mm256_max_ps(_mm256_set1_ps(lo), _mm256_min_ps(_mm256_set1_ps(hi), x));
}
static inline titans__vf titans__ops_vpow2i(titans__vf n) {
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
static inline titans__vf titans__ops_vldexp(titans__vf p, titans__vf n) {
  __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
}
#elif defined(TITANS__NEON)
static inline titans__vf titans__ops_vdiv(titans__vf a, titans__vf b) { return vdivq_f32(a, b); }
static inline titans__vf titans__ops_vsqrt(titans__vf a) { return vsqrtq_f32(a); }
static inline titans__vf titans__ops_vabs(titans__vf a) { return vabsq_f32(a); }
static inline titans__vf titans__ops_vsel_lt(titans__vf a, titans__vf b, titans__vf x, titans__vf y) {
  return vbslq_f32(vcltq_f32(a, b), x, y);
}
/* NEON min/max return NaN when either operand is NaN */
static inline titans__vf titans__ops_vclamp(titans__vf x, float lo, float hi) {
  return vmaxq_f32(vdupq_n_f32(lo), vminq_f32(vdupq_n_f32(hi), x));
}
static inline titans__vf titans__ops_vpow2i(titans__vf n) {
  return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23));
}
static inline titans__vf titans__ops_vldexp(titans__vf p, titans__vf n) {
  return vreinterpretq_f32_s32(vaddq_s32(vreinterpretq_s32_f32(p), vshlq_n_s32(vcvtnq_s32_f32(n), 23)));
}
#else
static inline titans__vf titans__ops_vdiv(titans__vf a, titans__vf b) { return a / b; }
static inline titans__vf titans__ops_vsqrt(titans__vf a) { return sqrtf(a); }
static inline titans__vf titans__ops_vabs(titans__vf a) { return fabsf(a); }
static inline titans__vf titans__ops_vsel_lt(titans__vf a, titans__vf b, titans__vf x, titans__vf y) {
  return a < b ? x : y;
}
#endif

/* Multiply-adds with one rounding rule, so a scalar tail element gets the bits of a vector lane
   whatever the compiler's contraction setting (C++ and GNU C contract a * b + c into an fma by default,
   ISO C does not): fused whenever the hardware fuses (the SIMD layer's fma, or fmaf where it is fast),
   a plain multiply-add otherwise (then no compiler can fuse either). The exp below and the attention
   (section 5) compute with them wherever a scalar and a vector path must agree bit for bit. */
static inline float titans__fmaf(float a, float b, float c) {
#if !defined(TITANS__SCALAR) || defined(FP_FAST_FMAF)
  return fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

#ifdef TITANS__SCALAR
static inline titans__vf titans__vfmaf(titans__vf a, titans__vf b, titans__vf c) { return titans__fmaf(a, b, c); }
#else
static inline titans__vf titans__vfmaf(titans__vf a, titans__vf b, titans__vf c) { return titans__vfma(a, b, c); }
#endif

/* ---- exp, sigmoid, tanh ------------------------------------------------------------------------
   The library's one exponential, for the activations, the softmaxes and the attention: a scalar
   (titans__expf) and a vector (titans__vexp) form that give the same bits lane for lane, so a vector
   loop's scalar tail agrees with its body. exp(x) = 2^n e^r: n = round(x / ln2), rounded by adding
   1.5 * 2^23 in the fma that multiplies by 1/ln2; Cody-Waite reduction r = x - n ln2 in about
   [-ln2/2, ln2/2] (ln2 split in a 9-bit head, so n * head is exact, and a tail); e^r = 1 + r + r^2 g(r),
   g the degree-5 polynomial of Cephes' expf (e^r of degree 7). Every multiply-add is an explicit
   titans__fmaf / titans__vfmaf, so no compiler's contraction setting can round the two forms
   differently. x is clamped to [-104, 89]: exp is 0 below -103.98 and +Inf above 88.73 in float, and
   the clamp keeps n in [-150, 128]. 2^n is applied in two steps: n1 = clamp(n, -125, 127) is added to
   the exponent bits of e^r (exact: the result stays normal), then one multiply by 2^(n - n1),
   n - n1 in [-25, 1], rounds once into a subnormal or overflows to +Inf. With a single float multiply
   there is nothing for -ffast-math reassociation to regroup. NaN stays NaN. Error: within 2 ulp of the
   correctly rounded result over the whole float range, subnormal results in subnormal ulps
   (tests/test_ops.c). (A libm call per attention weight cost a third of the attention's forward.) */
#define TITANS__EXP_LO (-104.0f)         /* clamped below: exp rounds to 0 */
#define TITANS__EXP_HI 89.0f             /* clamped above: exp overflows to +Inf */
#define TITANS__EXP_SHIFT 12582912.0f    /* 1.5 * 2^23: adding it rounds to an integer, kept in the low bits */
static const float titans__exp_c[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                       4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
static const float titans__ln2_hi = 0.693359375f, titans__ln2_lo = -2.12194440e-4f; /* hi + lo = ln 2 */

/* n (an integral float, |n| < 2^22) shifted into a float's exponent field, as a two's complement
   uint32_t: the bits titans__ops_vpow2i and titans__ops_vldexp add, read from n + 1.5 * 2^23 in
   unsigned arithmetic (no float to int conversion, which a NaN would make undefined). */
static inline uint32_t titans__exp_field(float n) {
  float t = n + TITANS__EXP_SHIFT;
  uint32_t bits;
  memcpy(&bits, &t, sizeof(bits));
  return (bits - 0x4B400000u) << 23;
}

static inline float titans__expf(float x) {
  if (x != x) return x + x; /* the bit arithmetic below could turn a NaN into a number */
  float xc = x < TITANS__EXP_LO ? TITANS__EXP_LO : (x > TITANS__EXP_HI ? TITANS__EXP_HI : x);
  float n = titans__fmaf(xc, 1.44269504088896341f, TITANS__EXP_SHIFT) - TITANS__EXP_SHIFT;
  float r = titans__fmaf(n, -titans__ln2_hi, xc);
  r = titans__fmaf(n, -titans__ln2_lo, r);
  float y = titans__exp_c[0];
  for (int i = 1; i < 6; i++) y = titans__fmaf(y, r, titans__exp_c[i]);
  y = titans__fmaf(y, r * r, r) + 1.0f;
  float n1 = n < -125.0f ? -125.0f : (n > 127.0f ? 127.0f : n);
  uint32_t bits;
  memcpy(&bits, &y, sizeof(bits));
  bits += titans__exp_field(n1); /* y 2^n1, exact */
  memcpy(&y, &bits, sizeof(y));
  float p2;
  bits = titans__exp_field(n - n1) + (127u << 23); /* 2^(n - n1) */
  memcpy(&p2, &bits, sizeof(p2));
  return y * p2;
}

#if defined(TITANS__SCALAR)
static inline titans__vf titans__vexp(titans__vf x) { return titans__expf(x); }
#else
/* titans__expf on every lane, the same operations in the same order (NaN passes through the clamps) */
static inline titans__vf titans__vexp(titans__vf x) {
  titans__vf xc = titans__ops_vclamp(x, TITANS__EXP_LO, TITANS__EXP_HI);
  titans__vf shift = titans__vset1(TITANS__EXP_SHIFT);
  titans__vf n = titans__vsub(titans__vfmaf(xc, titans__vset1(1.44269504088896341f), shift), shift);
  titans__vf r = titans__vfmaf(n, titans__vset1(-titans__ln2_hi), xc);
  r = titans__vfmaf(n, titans__vset1(-titans__ln2_lo), r);
  titans__vf y = titans__vset1(titans__exp_c[0]);
  for (int i = 1; i < 6; i++) y = titans__vfmaf(y, r, titans__vset1(titans__exp_c[i]));
  y = titans__vadd(titans__vfmaf(y, titans__vmul(r, r), r), titans__vset1(1.0f));
  titans__vf n1 = titans__ops_vclamp(n, -125.0f, 127.0f);
  return titans__vmul(titans__ops_vldexp(y, n1), titans__ops_vpow2i(titans__vsub(n, n1)));
}
#endif

/* sigma(x) from e = exp(-|x|) <= 1, which never overflows: 1/(1+e) for x >= 0, e/(1+e) below. */
static inline float titans__sigmoidf(float x) {
  float e = titans__expf(-fabsf(x));
  float s = 1.0f / (1.0f + e);
  return x < 0.0f ? e * s : s;
}

static inline titans__vf titans__vsigmoid(titans__vf x) {
  titans__vf zero = titans__vset1(0.0f), one = titans__vset1(1.0f);
  titans__vf e = titans__vexp(titans__vsub(zero, titans__ops_vabs(x)));
  titans__vf s = titans__ops_vdiv(one, titans__vadd(one, e));
  return titans__ops_vsel_lt(x, zero, titans__vmul(e, s), s);
}

/* tanh: below |x| = 0.55, x (1 + x^2 h(x^2)) with h a degree-4 Chebyshev fit of (tanh(x) - x) / x^3
   (error 4e-9 relative), where (1 - e)/(1 + e) would cancel; above, sign(x) (1 - e)/(1 + e) with
   e = exp(-2|x|). */
static const float titans__tanh_h[5] = {-6.610227831e-3f, 2.130938866e-2f, -5.390942883e-2f, 1.333311373e-1f,
                                        -3.333333201e-1f};

static inline float titans__tanhf(float x) {
  float ax = fabsf(x);
  if (ax < 0.55f) {
    const float *c = titans__tanh_h;
    float y = x * x;
    return x * (1.0f + y * ((((c[0] * y + c[1]) * y + c[2]) * y + c[3]) * y + c[4])); /* keeps -0 */
  }
  float e = titans__expf(-2.0f * ax);
  float t = (1.0f - e) / (1.0f + e);
  return x < 0.0f ? -t : t;
}

static inline titans__vf titans__vtanh(titans__vf x) {
  titans__vf zero = titans__vset1(0.0f), one = titans__vset1(1.0f), ax = titans__ops_vabs(x);
  titans__vf e = titans__vexp(titans__vmul(ax, titans__vset1(-2.0f)));
  titans__vf big = titans__ops_vdiv(titans__vsub(one, e), titans__vadd(one, e));
  big = titans__ops_vsel_lt(x, zero, titans__vsub(zero, big), big);
  const float *c = titans__tanh_h;
  titans__vf y = titans__vmul(x, x);
  titans__vf h = titans__vfma(titans__vset1(c[0]), y, titans__vset1(c[1]));
  h = titans__vfma(h, y, titans__vset1(c[2]));
  h = titans__vfma(h, y, titans__vset1(c[3]));
  h = titans__vfma(h, y, titans__vset1(c[4]));
  titans__vf small = titans__vmul(x, titans__vfma(y, h, one)); /* x (1 + y h) keeps the sign of -0 */
  return titans__ops_vsel_lt(ax, titans__vset1(0.55f), small, big);
}

/* ---- threads and row helpers ------------------------------------------------------------------ */
static inline size_t titans__ops_min(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t titans__ops_ceil_div(size_t a, size_t b) { return a / b + (a % b != 0); }
/* a * b + c rounded as the vector lanes round it (one rounding with FMA), for scalar tails that must
   match them bit for bit */
static inline float titans__ops_fmaf(float a, float b, float c) {
#if defined(TITANS__SCALAR)
  return a * b + c;
#else
  return fmaf(a, b, c);
#endif
}

#ifdef _OPENMP
/* Start threads only when the work (floats touched) pays for them, there are at least two units
   (blocks, rows) to share, and the caller is not in a parallel region already (then the kernel runs
   on the calling thread). */
static inline int titans__ops_par(size_t work, size_t units) {
  return work >= TITANS__OPS_PAR_WORK && units > 1 && titans__omp_can_split();
}
#endif

typedef void (*titans__ops_fwd_fn)(float *out, const float *inp, size_t n);
typedef void (*titans__ops_bwd_fn)(float *dinp, const float *dout, const float *saved, size_t n);

/* fn over n floats in blocks of TITANS__OPS_BLOCK, threaded when large. Blocks start at multiples of
   the vector width, so which elements take the scalar tail depends on n only, not on the threads. */
static void titans__ops_map_fwd(titans__ops_fwd_fn fn, float *out, const float *inp, size_t n) {
  ptrdiff_t nb = (ptrdiff_t)titans__ops_ceil_div(n, TITANS__OPS_BLOCK);
#ifdef _OPENMP
  if (titans__ops_par(n, (size_t)nb)) {
#pragma omp parallel for schedule(static)
    for (ptrdiff_t b = 0; b < nb; b++) {
      size_t i0 = (size_t)b * TITANS__OPS_BLOCK;
      fn(out + i0, inp + i0, titans__ops_min(n - i0, TITANS__OPS_BLOCK));
    }
    return;
  }
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t i0 = (size_t)b * TITANS__OPS_BLOCK;
    fn(out + i0, inp + i0, titans__ops_min(n - i0, TITANS__OPS_BLOCK));
  }
}

static void titans__ops_map_bwd(titans__ops_bwd_fn fn, float *dinp, const float *dout, const float *saved, size_t n) {
  ptrdiff_t nb = (ptrdiff_t)titans__ops_ceil_div(n, TITANS__OPS_BLOCK);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(n, (size_t)nb))
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t i0 = (size_t)b * TITANS__OPS_BLOCK;
    fn(dinp + i0, dout + i0, saved + i0, titans__ops_min(n - i0, TITANS__OPS_BLOCK));
  }
}

/* Largest element of x [n], n >= 1. A NaN may be skipped here; it still reaches the row's result
   through the sum of exps. */
static float titans__ops_rowmax(const float *x, size_t n) {
  float m = x[0];
  size_t i = 0;
  if (n >= TITANS__VW) {
    float lanes[TITANS__VW];
    titans__vf acc = titans__vload(x);
    for (i = TITANS__VW; i + TITANS__VW <= n; i += TITANS__VW) acc = titans__vmax(acc, titans__vload(x + i));
    titans__vstore(lanes, acc);
    for (size_t k = 0; k < TITANS__VW; k++) m = lanes[k] > m ? lanes[k] : m;
  }
  for (; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

/* out [n] = exp(x - shift) (out may be NULL: sum only; may alias x); returns the sum. Runs of 256
   floats are summed in float vector lanes and the runs in double, so a 50000-wide row (a vocabulary)
   keeps its sum accurate to ~1e-7 whatever the vector width. */
static float titans__ops_exp_sum(float *out, const float *x, float shift, size_t n) {
  titans__vf vs = titans__vset1(shift);
  double total = 0.0;
  size_t i = 0;
  while (i + TITANS__VW <= n) {
    titans__vf acc = titans__vset1(0.0f);
    size_t end = titans__ops_min(n, i + 256);
    for (; i + TITANS__VW <= end; i += TITANS__VW) {
      titans__vf e = titans__vexp(titans__vsub(titans__vload(x + i), vs));
      if (out) titans__vstore(out + i, e);
      acc = titans__vadd(acc, e);
    }
    total += (double)titans__vsum(acc);
  }
  for (; i < n; i++) {
    float e = titans__expf(x[i] - shift);
    if (out) out[i] = e;
    total += (double)e;
  }
  return (float)total;
}

/* out [n] = x [n] * a (out may be x) */
static inline void titans__ops_scale_to(float *out, const float *x, float a, size_t n) {
  titans__vf va = titans__vset1(a);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) titans__vstore(out + i, titans__vmul(titans__vload(x + i), va));
  for (; i < n; i++) out[i] = x[i] * a;
}

/* x [n] *= a */
static inline void titans__ops_scale(float *x, float a, size_t n) { titans__ops_scale_to(x, x, a, n); }

/* out [n] = a x [n] + b y [n]: two products and a sum per element, as the scalar expression without
   contraction (spelled out in vectors so that -O2, which leaves such loops scalar, runs them as fast
   as -O3) */
static inline void titans__ops_lincomb(float *out, float a, const float *x, float b, const float *y, size_t n) {
  titans__vf va = titans__vset1(a), vb = titans__vset1(b);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW)
    titans__vstore(out + i,
                   titans__vadd(titans__vmul(va, titans__vload(x + i)), titans__vmul(vb, titans__vload(y + i))));
  for (; i < n; i++) out[i] = a * x[i] + b * y[i];
}

/* out [n] = a [n] * b [n] */
static inline void titans__ops_mul(float *out, const float *a, const float *b, size_t n) {
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW)
    titans__vstore(out + i, titans__vmul(titans__vload(a + i), titans__vload(b + i)));
  for (; i < n; i++) out[i] = a[i] * b[i];
}

/* y [n] += a [n] * b [n] */
static inline void titans__ops_fma_row(float *y, const float *a, const float *b, size_t n) {
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW)
    titans__vstore(y + i, titans__vfma(titans__vload(a + i), titans__vload(b + i), titans__vload(y + i)));
  for (; i < n; i++) y[i] += a[i] * b[i];
}

/* sum_i a[i] b[i] c[i] */
static inline float titans__ops_dot3(const float *a, const float *b, const float *c, size_t n) {
  titans__vf acc = titans__vset1(0.0f);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW)
    acc = titans__vfma(titans__vmul(titans__vload(a + i), titans__vload(b + i)), titans__vload(c + i), acc);
  float s = titans__vsum(acc);
  for (; i < n; i++) s += a[i] * b[i] * c[i];
  return s;
}

/* ---- SiLU, sigmoid, tanh ---------------------------------------------------------------------- */

static void titans__silu_fwd_span(float *out, const float *inp, size_t n) {
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf x = titans__vload(inp + i);
    titans__vstore(out + i, titans__vmul(x, titans__vsigmoid(x)));
  }
  for (; i < n; i++) out[i] = inp[i] * titans__sigmoidf(inp[i]);
}

/* SiLU'(x) = s + x s (1 - s) = s (1 + x (1 - s)), s = sigma(x) */
static void titans__silu_bwd_span(float *dinp, const float *dout, const float *inp, size_t n) {
  titans__vf one = titans__vset1(1.0f);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf x = titans__vload(inp + i), s = titans__vsigmoid(x);
    titans__vf dx = titans__vmul(s, titans__vfma(x, titans__vsub(one, s), one));
    titans__vstore(dinp + i, titans__vfma(titans__vload(dout + i), dx, titans__vload(dinp + i)));
  }
  for (; i < n; i++) {
    float s = titans__sigmoidf(inp[i]);
    dinp[i] += dout[i] * (s * (1.0f + inp[i] * (1.0f - s)));
  }
}

TITANSDEF void titans_silu_forward(float *out, const float *inp, size_t n) {
  titans__ops_map_fwd(titans__silu_fwd_span, out, inp, n);
}

TITANSDEF void titans_silu_backward(float *dinp, const float *dout, const float *inp, size_t n) {
  titans__ops_map_bwd(titans__silu_bwd_span, dinp, dout, inp, n);
}

static void titans__sigmoid_fwd_span(float *out, const float *inp, size_t n) {
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) titans__vstore(out + i, titans__vsigmoid(titans__vload(inp + i)));
  for (; i < n; i++) out[i] = titans__sigmoidf(inp[i]);
}

/* sigma' = y (1 - y) from the output y */
static void titans__sigmoid_bwd_span(float *dinp, const float *dout, const float *out, size_t n) {
  titans__vf one = titans__vset1(1.0f);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf y = titans__vload(out + i);
    titans__vf dy = titans__vmul(titans__vload(dout + i), titans__vmul(y, titans__vsub(one, y)));
    titans__vstore(dinp + i, titans__vadd(titans__vload(dinp + i), dy));
  }
  for (; i < n; i++) dinp[i] += dout[i] * (out[i] * (1.0f - out[i]));
}

TITANSDEF void titans_sigmoid_forward(float *out, const float *inp, size_t n) {
  titans__ops_map_fwd(titans__sigmoid_fwd_span, out, inp, n);
}

TITANSDEF void titans_sigmoid_backward(float *dinp, const float *dout, const float *out, size_t n) {
  titans__ops_map_bwd(titans__sigmoid_bwd_span, dinp, dout, out, n);
}

static void titans__tanh_fwd_span(float *out, const float *inp, size_t n) {
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) titans__vstore(out + i, titans__vtanh(titans__vload(inp + i)));
  for (; i < n; i++) out[i] = titans__tanhf(inp[i]);
}

/* tanh' = 1 - y^2 from the output y */
static void titans__tanh_bwd_span(float *dinp, const float *dout, const float *out, size_t n) {
  titans__vf one = titans__vset1(1.0f);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf y = titans__vload(out + i);
    titans__vf dy = titans__vsub(one, titans__vmul(y, y));
    titans__vstore(dinp + i, titans__vfma(titans__vload(dout + i), dy, titans__vload(dinp + i)));
  }
  for (; i < n; i++) dinp[i] += dout[i] * (1.0f - out[i] * out[i]);
}

TITANSDEF void titans_tanh_forward(float *out, const float *inp, size_t n) {
  titans__ops_map_fwd(titans__tanh_fwd_span, out, inp, n);
}

TITANSDEF void titans_tanh_backward(float *dinp, const float *dout, const float *out, size_t n) {
  titans__ops_map_bwd(titans__tanh_bwd_span, dinp, dout, out, n);
}

/* ---- softmax ---------------------------------------------------------------------------------- */

static void titans__softmax_row(float *out, const float *inp, size_t n) { /* [n] */
  if (n == 0) return;
  float mx = titans__ops_rowmax(inp, n);
  if (mx == -INFINITY) mx = 0.0f; /* all -Inf: every exp is 0 and the row becomes zeros */
  float sum = titans__ops_exp_sum(out, inp, mx, n);
  titans__ops_scale(out, sum == 0.0f ? 0.0f : 1.0f / sum, n); /* a NaN sum keeps the row NaN */
}

/* dx += y (g - y.g) */
static void titans__softmax_bwd_row(float *dx, const float *g, const float *y, size_t n) { /* [n] */
  float dot = titans__dot(g, y, n);
  titans__vf vd = titans__vset1(dot);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf gy = titans__vsub(titans__vload(g + i), vd);
    titans__vstore(dx + i, titans__vfma(titans__vload(y + i), gy, titans__vload(dx + i)));
  }
  for (; i < n; i++) dx[i] += y[i] * (g[i] - dot);
}

TITANSDEF void titans_softmax_forward(float *out, const float *inp, size_t rows, size_t cols) {
  ptrdiff_t nr = (ptrdiff_t)rows;
#ifdef _OPENMP
  if (titans__ops_par(rows * cols, rows)) {
#pragma omp parallel for schedule(static)
    for (ptrdiff_t r = 0; r < nr; r++) titans__softmax_row(out + (size_t)r * cols, inp + (size_t)r * cols, cols);
    return;
  }
#endif
  for (ptrdiff_t r = 0; r < nr; r++) titans__softmax_row(out + (size_t)r * cols, inp + (size_t)r * cols, cols);
}

TITANSDEF void titans_softmax_backward(float *dinp, const float *dout, const float *out, size_t rows, size_t cols) {
  ptrdiff_t nr = (ptrdiff_t)rows;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(rows * cols, rows))
#endif
  for (ptrdiff_t r = 0; r < nr; r++) {
    size_t o = (size_t)r * cols;
    titans__softmax_bwd_row(dinp + o, dout + o, out + o, cols);
  }
}

/* ---- RMSNorm ---------------------------------------------------------------------------------- */

/* out [n] = x * rstd * gain; returns rstd = 1 / sqrt(mean(x^2) + 1e-6) */
static float titans__rmsnorm_row(float *out, const float *x, const float *gain, size_t n) {
  float ms = n ? titans__dot(x, x, n) / (float)n : 0.0f;
  float s = 1.0f / sqrtf(ms + 1e-6f);
  titans__vf vs = titans__vset1(s);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW)
    titans__vstore(out + i, titans__vmul(titans__vmul(titans__vload(x + i), vs), titans__vload(gain + i)));
  for (; i < n; i++) out[i] = x[i] * s * gain[i];
  return s;
}

/* Differentiates out_j = x_j s gain_j, s = (mean(x^2) + eps)^(-1/2), ds/dx_j = -s^3 x_j / n:
   dx_j += s (g_j gain_j - x_j s^2 (sum_i g_i gain_i x_i) / n); and, when dgain is not NULL,
   dgain_j += g_j x_j s exactly as titans__rmsnorm_dgain_row adds it. */
static void titans__rmsnorm_bwd_row(float *dx, float *dgain, const float *g, const float *x, const float *gain,
                                    float s, size_t n) {
  float c = n ? s * s * titans__ops_dot3(g, gain, x, n) / (float)n : 0.0f;
  titans__vf vs = titans__vset1(s), vc = titans__vset1(-c);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf gi = titans__vload(g + i), xi = titans__vload(x + i);
    titans__vf t = titans__vfma(xi, vc, titans__vmul(gi, titans__vload(gain + i)));
    titans__vstore(dx + i, titans__vfma(vs, t, titans__vload(dx + i)));
    if (dgain) titans__vstore(dgain + i, titans__vfma(titans__vmul(gi, xi), vs, titans__vload(dgain + i)));
  }
  for (; i < n; i++) {
    dx[i] += s * (g[i] * gain[i] - x[i] * c);
    if (dgain) dgain[i] = titans__ops_fmaf(g[i] * x[i], s, dgain[i]);
  }
}

/* dgain [m] += g [m] * x [m] * s for one row. The threaded and the serial backward both add every
   row through this, in row order, so dgain comes out bit-identical whatever the thread count. */
static inline void titans__rmsnorm_dgain_row(float *dgain, const float *g, const float *x, float s, size_t m) {
  titans__vf vs = titans__vset1(s);
  size_t i = 0;
  for (; i + TITANS__VW <= m; i += TITANS__VW)
    titans__vstore(dgain + i, titans__vfma(titans__vmul(titans__vload(g + i), titans__vload(x + i)), vs,
                                           titans__vload(dgain + i)));
  for (; i < m; i++) dgain[i] = titans__ops_fmaf(g[i] * x[i], s, dgain[i]);
}

TITANSDEF void titans_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *gain, size_t rows,
                                      size_t cols) {
  ptrdiff_t nr = (ptrdiff_t)rows;
#ifdef _OPENMP
  if (titans__ops_par(rows * cols, rows)) {
#pragma omp parallel for schedule(static)
    for (ptrdiff_t r = 0; r < nr; r++)
      rstd[r] = titans__rmsnorm_row(out + (size_t)r * cols, inp + (size_t)r * cols, gain, cols);
    return;
  }
#endif
  for (ptrdiff_t r = 0; r < nr; r++)
    rstd[r] = titans__rmsnorm_row(out + (size_t)r * cols, inp + (size_t)r * cols, gain, cols);
}

/* Serial: one pass over the rows, dinp and dgain together. Threaded: dinp over rows, then dgain over
   column blocks (it sums over rows, so splitting rows would make two threads add into one element). */
TITANSDEF void titans_rmsnorm_backward(float *dinp, float *dgain, const float *dout, const float *inp,
                                       const float *gain, const float *rstd, size_t rows, size_t cols) {
  ptrdiff_t nr = (ptrdiff_t)rows, nb = (ptrdiff_t)titans__ops_ceil_div(cols, TITANS__OPS_CB);
  int par = 0;
#ifdef _OPENMP
  par = titans__ops_par(rows * cols, rows) && omp_get_max_threads() > 1;
#pragma omp parallel for schedule(static) if (par)
#endif
  for (ptrdiff_t r = 0; r < nr; r++) {
    size_t o = (size_t)r * cols;
    titans__rmsnorm_bwd_row(dinp + o, par ? NULL : dgain, dout + o, inp + o, gain, rstd[r], cols);
  }
  if (!dgain || !par) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t j0 = (size_t)b * TITANS__OPS_CB, m = titans__ops_min(cols, j0 + TITANS__OPS_CB) - j0;
    for (size_t r = 0; r < rows; r++)
      titans__rmsnorm_dgain_row(dgain + j0, dout + r * cols + j0, inp + r * cols + j0, rstd[r], m);
  }
}

/* ---- L2Norm ----------------------------------------------------------------------------------- */

/* out [n] = x * rnorm; returns rnorm = 1 / sqrt(sum(x^2) + 1e-6) */
static float titans__l2norm_row(float *out, const float *x, size_t n) {
  float s = 1.0f / sqrtf(titans__dot(x, x, n) + 1e-6f);
  titans__vf vs = titans__vset1(s);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) titans__vstore(out + i, titans__vmul(titans__vload(x + i), vs));
  for (; i < n; i++) out[i] = x[i] * s;
  return s;
}

/* Differentiates out_j = x_j s, s = (sum(x^2) + eps)^(-1/2): dx_j += s (g_j - x_j s^2 (g . x)). */
static void titans__l2norm_bwd_row(float *dx, const float *g, const float *x, float s, size_t n) {
  float c = s * s * titans__dot(g, x, n);
  titans__vf vs = titans__vset1(s), vc = titans__vset1(-c);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf t = titans__vfma(titans__vload(x + i), vc, titans__vload(g + i));
    titans__vstore(dx + i, titans__vfma(vs, t, titans__vload(dx + i)));
  }
  for (; i < n; i++) dx[i] += s * (g[i] - x[i] * c);
}

TITANSDEF void titans_l2norm_forward(float *out, float *rnorm, const float *inp, size_t rows, size_t cols) {
  ptrdiff_t nr = (ptrdiff_t)rows;
#ifdef _OPENMP
  if (titans__ops_par(rows * cols, rows)) {
#pragma omp parallel for schedule(static)
    for (ptrdiff_t r = 0; r < nr; r++)
      rnorm[r] = titans__l2norm_row(out + (size_t)r * cols, inp + (size_t)r * cols, cols);
    return;
  }
#endif
  for (ptrdiff_t r = 0; r < nr; r++)
    rnorm[r] = titans__l2norm_row(out + (size_t)r * cols, inp + (size_t)r * cols, cols);
}

TITANSDEF void titans_l2norm_backward(float *dinp, const float *dout, const float *inp, const float *rnorm,
                                      size_t rows, size_t cols) {
  ptrdiff_t nr = (ptrdiff_t)rows;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(rows * cols, rows))
#endif
  for (ptrdiff_t r = 0; r < nr; r++) {
    size_t o = (size_t)r * cols;
    titans__l2norm_bwd_row(dinp + o, dout + o, inp + o, rnorm[r], cols);
  }
}

/* ---- causal depthwise conv -------------------------------------------------------------------- */

/* Row tau of the sequence extended by its tail: inp row tau for tau >= 0, tail row K-1+tau for
   -(K-1) <= tau < 0, NULL (zeros) there when there is no tail. K >= 1. */
static inline const float *titans__conv_row(const float *inp, const float *tail, ptrdiff_t tau, size_t C, size_t K) {
  if (tau >= 0) return inp + (size_t)tau * C;
  if (!tail) return NULL;
  return tail + (size_t)((ptrdiff_t)K - 1 + tau) * C;
}

/* out rows [t0, t1) x channels [j0, j1): taps added in order s = 0..K-1 with the weight column of tap
   s gathered into a contiguous vector (weight is [C, K]). */
static void titans__conv_fwd_block(float *out, const float *inp, const float *tail, const float *weight, size_t t0,
                                   size_t t1, size_t j0, size_t j1, size_t C, size_t K) {
  float w[TITANS__OPS_CB];
  size_t m = j1 - j0;
  for (size_t t = t0; t < t1; t++) memset(out + t * C + j0, 0, m * sizeof(float));
  for (size_t s = 0; s < K; s++) {
    for (size_t j = 0; j < m; j++) w[j] = weight[(j0 + j) * K + s];
    for (size_t t = t0; t < t1; t++) {
      const float *u = titans__conv_row(inp, tail, (ptrdiff_t)(t + s) - (ptrdiff_t)(K - 1), C, K);
      if (u) titans__ops_fma_row(out + t * C + j0, w, u + j0, m);
    }
  }
}

/* dinp rows [t0, t1) x channels [j0, j1): input row tau fed outputs t = tau + K-1-s, s = 0..K-1. */
static void titans__conv_bwd_inp_block(float *dinp, const float *dout, const float *weight, size_t t0, size_t t1,
                                       size_t j0, size_t j1, size_t T, size_t C, size_t K) {
  float w[TITANS__OPS_CB];
  size_t m = j1 - j0;
  for (size_t s = 0; s < K; s++) {
    for (size_t j = 0; j < m; j++) w[j] = weight[(j0 + j) * K + s];
    for (size_t tau = t0; tau < t1; tau++) {
      size_t t = tau + (K - 1 - s);
      if (t < T) titans__ops_fma_row(dinp + tau * C + j0, w, dout + t * C + j0, m);
    }
  }
}

/* dweight for channels [j0, j1): each tap summed over the whole sequence in order, then added. Up to
   TITANS__OPS_SG taps share one pass over the sequence (their input rows are neighbours in cache). */
static void titans__conv_bwd_w_block(float *dweight, const float *dout, const float *inp, const float *tail,
                                     size_t j0, size_t j1, size_t T, size_t C, size_t K) {
  float acc[TITANS__OPS_SG][TITANS__OPS_CB];
  size_t m = j1 - j0;
  for (size_t s0 = 0; s0 < K; s0 += TITANS__OPS_SG) {
    size_t ns = titans__ops_min(TITANS__OPS_SG, K - s0);
    memset(acc, 0, sizeof acc);
    for (size_t t = 0; t < T; t++) {
      for (size_t s = 0; s < ns; s++) {
        const float *u = titans__conv_row(inp, tail, (ptrdiff_t)(t + s0 + s) - (ptrdiff_t)(K - 1), C, K);
        if (u) titans__ops_fma_row(acc[s], dout + t * C + j0, u + j0, m);
      }
    }
    for (size_t s = 0; s < ns; s++)
      for (size_t j = 0; j < m; j++) dweight[(j0 + j) * K + s0 + s] += acc[s][j];
  }
}

/* Block b of titans_conv_forward (ncb channel blocks per row block). */
static void titans__conv_fwd_task(float *out, const float *inp, const float *tail, const float *weight, size_t T,
                                  size_t C, size_t K, size_t ncb, size_t b) {
  size_t t0 = b / ncb * TITANS__OPS_TB, j0 = b % ncb * TITANS__OPS_CB;
  titans__conv_fwd_block(out, inp, tail, weight, t0, titans__ops_min(T, t0 + TITANS__OPS_TB), j0,
                         titans__ops_min(C, j0 + TITANS__OPS_CB), C, K);
}

TITANSDEF void titans_conv_forward(float *out, const float *inp, const float *tail, const float *weight, size_t T,
                                   size_t C, size_t K) {
  size_t ncb = titans__ops_ceil_div(C, TITANS__OPS_CB);
  ptrdiff_t nb = (ptrdiff_t)(titans__ops_ceil_div(T, TITANS__OPS_TB) * ncb);
#ifdef _OPENMP
  if (titans__ops_par(T * C * (K + 1), (size_t)nb)) {
#pragma omp parallel for schedule(static)
    for (ptrdiff_t b = 0; b < nb; b++) titans__conv_fwd_task(out, inp, tail, weight, T, C, K, ncb, (size_t)b);
    return;
  }
#endif
  for (ptrdiff_t b = 0; b < nb; b++) titans__conv_fwd_task(out, inp, tail, weight, T, C, K, ncb, (size_t)b);
}

TITANSDEF void titans_conv_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                    const float *tail, const float *weight, size_t T, size_t C, size_t K) {
  size_t ncb = titans__ops_ceil_div(C, TITANS__OPS_CB);
  ptrdiff_t nb = dinp ? (ptrdiff_t)(titans__ops_ceil_div(T, TITANS__OPS_TB) * ncb) : 0;
  ptrdiff_t nc = dweight ? (ptrdiff_t)ncb : 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(T * C * K, (size_t)nb))
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t t0 = (size_t)b / ncb * TITANS__OPS_TB, j0 = (size_t)b % ncb * TITANS__OPS_CB;
    titans__conv_bwd_inp_block(dinp, dout, weight, t0, titans__ops_min(T, t0 + TITANS__OPS_TB), j0,
                               titans__ops_min(C, j0 + TITANS__OPS_CB), T, C, K);
  }
  /* dweight sums over the sequence: split over channels, so one thread owns each weight */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(T * C * K, (size_t)nc))
#endif
  for (ptrdiff_t b = 0; b < nc; b++) {
    size_t j0 = (size_t)b * TITANS__OPS_CB;
    titans__conv_bwd_w_block(dweight, dout, inp, tail, j0, titans__ops_min(C, j0 + TITANS__OPS_CB), T, C, K);
  }
}

/* ---- embedding -------------------------------------------------------------------------------- */
TITANSDEF int titans_embedding_forward(float *out, const int *tokens, const float *table, size_t n, size_t vocab,
                                       size_t d) {
  for (size_t i = 0; i < n; i++)
    if (tokens[i] < 0 || (size_t)tokens[i] >= vocab) return TITANS_ERR_ARG;
  if (d == 0) return TITANS_OK;
  ptrdiff_t nn = (ptrdiff_t)n;
#ifdef _OPENMP
  if (titans__ops_par(n * d, n)) {
#pragma omp parallel for schedule(static)
    for (ptrdiff_t i = 0; i < nn; i++) memcpy(out + (size_t)i * d, table + (size_t)tokens[i] * d, d * sizeof(float));
    return TITANS_OK;
  }
#endif
  for (ptrdiff_t i = 0; i < nn; i++) memcpy(out + (size_t)i * d, table + (size_t)tokens[i] * d, d * sizeof(float));
  return TITANS_OK;
}

/* Repeated tokens add into one table row, so threads split the d columns: each thread adds its
   columns of every token, in token order. */
TITANSDEF void titans_embedding_backward(float *dtable, const float *dout, const int *tokens, size_t n, size_t d) {
  ptrdiff_t nb = (ptrdiff_t)titans__ops_ceil_div(d, TITANS__OPS_CB);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(n * d, (size_t)nb))
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t j0 = (size_t)b * TITANS__OPS_CB, m = titans__ops_min(d, j0 + TITANS__OPS_CB) - j0;
    for (size_t i = 0; i < n; i++)
      if (tokens[i] >= 0) titans__axpy(dtable + (size_t)tokens[i] * d + j0, 1.0f, dout + i * d + j0, m);
  }
}

/* ---- cross-entropy ---------------------------------------------------------------------------- */

/* Loss of one row, -log softmax(x)[target] = (max - x[target]) + log(sum exp(x - max)); when drow is
   not NULL it gets gscale * (softmax - onehot). */
static float titans__ce_row(float *drow, const float *x, int target, size_t V, float gscale) {
  float mx = titans__ops_rowmax(x, V);
  float sum = titans__ops_exp_sum(drow, x, mx, V);
  if (drow) {
    titans__ops_scale(drow, gscale / sum, V);
    drow[target] -= gscale;
  }
  return (mx - x[target]) + logf(sum);
}

TITANSDEF float titans_cross_entropy(float *dlogits, const float *logits, const int *targets, size_t n, size_t V,
                                     float scale) {
  size_t count = 0;
  for (size_t i = 0; i < n; i++) {
    if (targets[i] >= 0 && (size_t)targets[i] >= V) return NAN;
    count += targets[i] >= 0;
  }
  float gscale = count ? scale / (float)count : 0.0f;
  double part[TITANS__OPS_CE_PARTS] = {0}; /* loss sums of fixed row groups, added in order at the end */
  size_t per = titans__ops_ceil_div(n, TITANS__OPS_CE_PARTS);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(n * V, n))
#endif
  for (ptrdiff_t p = 0; p < TITANS__OPS_CE_PARTS; p++) {
    size_t i1 = titans__ops_min(n, ((size_t)p + 1) * per);
    for (size_t i = titans__ops_min(n, (size_t)p * per); i < i1; i++) {
      float *drow = dlogits ? dlogits + i * V : NULL; /* [V] */
      if (targets[i] >= 0) part[p] += titans__ce_row(drow, logits + i * V, targets[i], V, gscale);
      else if (drow && V) memset(drow, 0, V * sizeof(float));
    }
  }
  double total = 0.0;
  for (size_t p = 0; p < TITANS__OPS_CE_PARTS; p++) total += part[p];
  return count ? (float)(total / (double)count) : 0.0f;
}

/* ---- AdamW ------------------------------------------------------------------------------------ */
typedef struct titans__adamw_hp {
  float lr, beta1, beta2, eps, wd;
  float c1; /* 1 / (1 - beta1^step) */
  float c2; /* 1 / sqrt(1 - beta2^step) */
} titans__adamw_hp;

static titans__adamw_hp titans__adamw_make(float lr, float beta1, float beta2, float eps, float wd, long step) {
  titans__adamw_hp h;
  double t = (double)(step < 1 ? 1 : step);
  h.lr = lr;
  h.beta1 = beta1;
  h.beta2 = beta2;
  h.eps = eps;
  h.wd = wd;
  h.c1 = (float)(1.0 / (1.0 - pow((double)beta1, t)));
  h.c2 = (float)(1.0 / sqrt(1.0 - pow((double)beta2, t)));
  return h;
}

static void titans__adamw_span(float *p, const float *g, float *m, float *v, size_t n, const titans__adamw_hp *h) {
  titans__vf b1 = titans__vset1(h->beta1), b2 = titans__vset1(h->beta2), a1 = titans__vset1(1.0f - h->beta1);
  titans__vf a2 = titans__vset1(1.0f - h->beta2), c1 = titans__vset1(h->c1), c2 = titans__vset1(h->c2);
  titans__vf eps = titans__vset1(h->eps), wd = titans__vset1(h->wd), nlr = titans__vset1(-h->lr);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf gi = titans__vload(g + i), pi = titans__vload(p + i);
    titans__vf mi = titans__vfma(b1, titans__vload(m + i), titans__vmul(a1, gi));
    titans__vf vi = titans__vfma(b2, titans__vload(v + i), titans__vmul(titans__vmul(a2, gi), gi));
    titans__vf den = titans__vfma(titans__ops_vsqrt(vi), c2, eps);
    titans__vf upd = titans__vfma(wd, pi, titans__ops_vdiv(titans__vmul(mi, c1), den));
    titans__vstore(m + i, mi);
    titans__vstore(v + i, vi);
    titans__vstore(p + i, titans__vfma(nlr, upd, pi));
  }
  for (; i < n; i++) {
    m[i] = h->beta1 * m[i] + (1.0f - h->beta1) * g[i];
    v[i] = h->beta2 * v[i] + (1.0f - h->beta2) * g[i] * g[i];
    p[i] -= h->lr * (m[i] * h->c1 / (sqrtf(v[i]) * h->c2 + h->eps) + h->wd * p[i]);
  }
}

TITANSDEF void titans_adamw_update(const titans_adamw_arrays *a, float lr, float beta1, float beta2, float eps,
                                   float weight_decay, long step) {
  float *param = a->param, *m = a->m, *v = a->v;
  const float *grad = a->grad;
  size_t n = a->n;
  titans__adamw_hp h = titans__adamw_make(lr, beta1, beta2, eps, weight_decay, step);
  ptrdiff_t nb = (ptrdiff_t)titans__ops_ceil_div(n, TITANS__OPS_BLOCK);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(n, (size_t)nb))
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t i0 = (size_t)b * TITANS__OPS_BLOCK;
    titans__adamw_span(param + i0, grad + i0, m + i0, v + i0, titans__ops_min(n - i0, TITANS__OPS_BLOCK), &h);
  }
}
/* ---- 4. Neural long-term memory layer (implementation) ---------------------------------------- */

/* Sizes derived from a config. Memory layer i (0-based) maps width n[i] to n[i+1]: W_i [n[i+1], n[i]]. */
typedef struct titans__mem_dims {
  size_t d, H, dh, dm, L, b, K; /* model width, heads, head width, H*dh, depth, chunk, conv width */
  size_t n[TITANS_MEM_MAX_DEPTH + 1];  /* layer widths n_0 .. n_L */
  size_t wofs[TITANS_MEM_MAX_DEPTH];   /* offset of W_i inside one head's weights */
  size_t head_size;                    /* floats of one head's weights: sum_i n[i+1] n[i] */
  size_t nmax;                         /* largest width */
  float tau;                           /* surprise bound (0: off) */
  int exact;                           /* per_token_grad: each token's error at the weights before it */
  int qk_linear;                       /* cfg qk_linear: q and k without the SiLU */
  int ls;                              /* cfg least_squares: the recursive least-squares memory */
} titans__mem_dims;

static titans__mem_dims titans__mem_get_dims(const titans_mem_config *c) {
  titans__mem_dims m;
  memset(&m, 0, sizeof m);
  m.d = (size_t)c->d;
  m.H = (size_t)c->heads;
  m.dh = (size_t)c->head_dim;
  m.dm = m.H * m.dh;
  m.L = (size_t)c->depth;
  m.b = (size_t)c->chunk;
  m.K = (size_t)c->conv_width;
  m.tau = c->surprise_bound;
  m.exact = c->per_token_grad;
  m.qk_linear = c->qk_linear;
  m.ls = c->least_squares;
  for (size_t i = 0; i <= m.L; i++) m.n[i] = (i == 0 || i == m.L) ? m.dh : m.dh * (size_t)c->hidden_mult;
  m.nmax = m.dh;
  for (size_t i = 0; i < m.L; i++) {
    m.wofs[i] = m.head_size;
    m.head_size += m.n[i + 1] * m.n[i];
    if (m.n[i + 1] > m.nmax) m.nmax = m.n[i + 1];
  }
  return m;
}

TITANSDEF titans_mem_config titans_mem_config_default(int d) {
  titans_mem_config c;
  c.d = d;
  c.heads = 4;
  c.head_dim = d / 4 > 0 ? d / 4 : 1;
  c.depth = 2;
  c.hidden_mult = 4;
  c.chunk = 16;
  c.conv_width = 4;
  c.residual = 0;
  c.theta_max = 0.1f;
  c.surprise_bound = 1.0f;
  c.key_ngram = 0;
  c.no_momentum = 0;
  c.no_forget = 0;
  c.gate_key = 0;
  c.qk_linear = 0;
  c.per_token_grad = 0;
  c.least_squares = 0;
  return c;
}

TITANSDEF titans_mem_config titans_mem_config_gated_delta(int d) {
  titans_mem_config c = titans_mem_config_default(d);
  c.depth = 1;
  c.chunk = 16;
  c.per_token_grad = 1; /* chunk 16 computes what chunk 1 does (each token's error at the weights before it) */
  c.no_momentum = 1;
  c.surprise_bound = 0.0f; /* the delta rule's step is not capped */
  c.theta_max = 0.5f;      /* beta = 2 theta < 1: with |k| = 1 a token at most replaces the value at its key */
  return c;
}

TITANSDEF void titans_mem_config_use_least_squares(titans_mem_config *c) {
  c->least_squares = 1;
  c->depth = 1;            /* the fit is a matrix: W k */
  c->no_momentum = 1;      /* a fit has no step to carry on, */
  c->no_forget = 1;        /* nor to decay (its confidence may: no_forget = 0, model.md 1.11), */
  c->surprise_bound = 0.0f; /* nor to bound: its write cannot overshoot */
  c->residual = 0;
  c->per_token_grad = 0; /* token by token already */
}

TITANSDEF int titans_mem_config_check(const titans_mem_config *c, char *err) {
  /* The bounds keep every size product far from overflow (d_m, n_hid <= 2^16, b <= 2^12). */
  if (c->d < 1 || c->d > 65536) return titans__error(err, TITANS_ERR_ARG, "memory: d = %d, want 1..65536", c->d);
  if (c->heads < 1 || c->head_dim < 1 || (long)c->heads * c->head_dim > 65536)
    return titans__error(err, TITANS_ERR_ARG, "memory: heads = %d, head_dim = %d, want >= 1 and product <= 65536",
                         c->heads, c->head_dim);
  if (c->depth < 1 || c->depth > TITANS_MEM_MAX_DEPTH)
    return titans__error(err, TITANS_ERR_ARG, "memory: depth = %d, want 1..%d", c->depth, TITANS_MEM_MAX_DEPTH);
  if (c->depth >= 2 && (c->hidden_mult < 1 || (long)c->hidden_mult * c->head_dim > 65536))
    return titans__error(err, TITANS_ERR_ARG, "memory: hidden_mult = %d, want >= 1 and hidden width <= 65536",
                         c->hidden_mult);
  if (c->chunk < 1 || c->chunk > 4096)
    return titans__error(err, TITANS_ERR_ARG, "memory: chunk = %d, want 1..4096", c->chunk);
  if (c->conv_width < 0 || c->conv_width > 64)
    return titans__error(err, TITANS_ERR_ARG, "memory: conv_width = %d, want 0..64", c->conv_width);
  if (c->residual != 0 && c->residual != 1)
    return titans__error(err, TITANS_ERR_ARG, "memory: residual must be 0 or 1");
  if (c->no_momentum != 0 && c->no_momentum != 1)
    return titans__error(err, TITANS_ERR_ARG, "memory: no_momentum must be 0 or 1");
  if (c->no_forget != 0 && c->no_forget != 1)
    return titans__error(err, TITANS_ERR_ARG, "memory: no_forget must be 0 or 1");
  if (c->gate_key != 0 && c->gate_key != 1)
    return titans__error(err, TITANS_ERR_ARG, "memory: gate_key must be 0 or 1");
  if (c->per_token_grad != 0 && c->per_token_grad != 1)
    return titans__error(err, TITANS_ERR_ARG, "memory: per_token_grad must be 0 or 1");
  if (c->qk_linear != 0 && c->qk_linear != 1)
    return titans__error(err, TITANS_ERR_ARG, "memory: qk_linear must be 0 or 1");
  if (c->per_token_grad && (c->depth != 1 || c->surprise_bound != 0.0f))
    return titans__error(err, TITANS_ERR_ARG,
                         "memory: per_token_grad needs depth 1 and surprise_bound 0 (depth %d, surprise_bound %g)",
                         c->depth, (double)c->surprise_bound);
  if (c->least_squares != 0 && c->least_squares != 1)
    return titans__error(err, TITANS_ERR_ARG, "memory: least_squares must be 0 or 1");
  if (c->least_squares && (c->depth != 1 || !c->no_momentum || c->surprise_bound != 0.0f || c->residual ||
                           c->per_token_grad))
    return titans__error(err, TITANS_ERR_ARG,
                         "memory: least_squares needs depth 1, no_momentum, surprise_bound 0, residual 0 "
                         "and per_token_grad 0 (depth %d, no_momentum %d, surprise_bound %g, residual %d, "
                         "per_token_grad %d)",
                         c->depth, c->no_momentum, (double)c->surprise_bound, c->residual, c->per_token_grad);
  if (!(c->theta_max > 0.0f) || !isfinite(c->theta_max))
    return titans__error(err, TITANS_ERR_ARG, "memory: theta_max must be a positive finite number");
  if (!(c->surprise_bound >= 0.0f) || !isfinite(c->surprise_bound))
    return titans__error(err, TITANS_ERR_ARG, "memory: surprise_bound must be 0 (off) or a positive finite number");
  if (c->key_ngram < 0 || c->key_ngram > c->head_dim || (c->key_ngram > 0 && c->conv_width < c->key_ngram + 1))
    return titans__error(err, TITANS_ERR_ARG,
                         "memory: key_ngram = %d, want 0, or 1..head_dim (%d) with conv_width (%d) >= key_ngram + 1",
                         c->key_ngram, c->head_dim, c->conv_width);
  return TITANS_OK;
}

/* ---- parameter layout ------------------------------------------------------------------------- */

/* How the walk's parameters start (titans_model_init_weights, titans_mem_weights_init): each parameter of
   a walk names its rule, and a walk given a titans__init fills the parameters in the walk's order. */
enum {
  TITANS__INIT_NORMAL = 0,  /* normal(0, a) */
  TITANS__INIT_CONST = 1,   /* every entry a */
  TITANS__INIT_CONV = 2,    /* normal(0, a), plus 1 on each row's last tap: the conv starts near identity */
  TITANS__INIT_EARLIER = 3  /* drawn earlier in the walk than its place (the untied output head) */
};
typedef struct titans__init_rule {
  int how;  /* TITANS__INIT_* */
  float a;  /* the standard deviation or the constant */
} titans__init_rule;

typedef struct titans__init {
  titans_rng *rng;
  float out_std; /* output projections: 0.02 / sqrt(2 n_layers), so that the residual stream's variance
                    does not grow with depth (GPT-2's rule) */
} titans__init;

static void titans__fill_normal(float *p, size_t n, float std, titans_rng *rng) {
  for (size_t i = 0; i < n; i++) p[i] = std * titans_rng_normal(rng);
}

static void titans__fill_const(float *p, size_t n, float value) {
  for (size_t i = 0; i < n; i++) p[i] = value;
}

/* logit of p in (0, 1): the bias that makes sigma(bias) = p */
static float titans__logit(float p) { return logf(p / (1.0f - p)); }

/* Fills p [rows, cols] by rule r. */
static void titans__param_fill(const titans__init *in, float *p, size_t rows, size_t cols, titans__init_rule r) {
  switch (r.how) {
    case TITANS__INIT_NORMAL: titans__fill_normal(p, rows * cols, r.a, in->rng); break;
    case TITANS__INIT_CONST: titans__fill_const(p, rows * cols, r.a); break;
    case TITANS__INIT_CONV:
      titans__fill_normal(p, rows * cols, r.a, in->rng);
      for (size_t j = 0; j < rows; j++) p[j * cols + cols - 1] += 1.0f;
      break;
    default: break;
  }
}

/* Appends one parameter of shape [ndim] at *offset: records it in list (when there is room) and returns
   its offset. */
static size_t titans__param_push(titans_param *list, size_t max, size_t *count, size_t *offset, const char *prefix,
                                 const char *name, int kind, int ndim, const size_t shape[3]) {
  size_t size = 1, at = *offset;
  for (int i = 0; i < ndim; i++) size *= shape[i];
  if (list && *count < max) {
    titans_param *p = &list[*count];
    memset(p, 0, sizeof *p);
    size_t lp = strlen(prefix), ln = strlen(name);
    if (lp + ln >= sizeof p->name) lp = ln = 0; /* cannot happen with the library's prefixes */
    memcpy(p->name, prefix, lp);
    memcpy(p->name + lp, name, ln);
    p->ndim = ndim;
    for (int i = 0; i < ndim; i++) p->shape[i] = shape[i];
    p->size = size;
    p->offset = at;
    p->kind = kind;
  }
  (*count)++;
  *offset += size;
  return at;
}

/* The one place that fixes the order of the memory layer's parameters and how they start: records the
   list, binds the pointers of w to slab, fills the (bound) weights of w by their rules (list, slab, init
   may each be NULL). Returns the number of parameters; *offset advances. */
static size_t titans__mem_walk(const titans_mem_config *cfg, titans_mem_weights *w, float *slab, titans_param *list,
                               size_t max, const char *prefix, size_t *offset, const titans__init *init) {
  titans__mem_dims m = titans__mem_get_dims(cfg);
  size_t count = 0, o;
  static const char *const w0_names[TITANS_MEM_MAX_DEPTH] = {"w0.0", "w0.1", "w0.2", "w0.3",
                                                             "w0.4", "w0.5", "w0.6", "w0.7"};
  const titans__init_rule small = {TITANS__INIT_NORMAL, 0.02f}, gain = {TITANS__INIT_CONST, 1.0f};
  const titans__init_rule out = {TITANS__INIT_NORMAL, init ? init->out_std : 0.0f};
  /* Near-identity taps: the layer starts as its plain projections (a conv of small random taps would
     shrink q, k, v by ~50x and slow early training). */
  const titans__init_rule taps = {TITANS__INIT_CONV, 0.02f};
  /* The gates start small and stable: theta = theta_max / 2, eta = 0.5, alpha ~ 0.02 (the biases are
     the logits of 0.5, 0.5, 0.02). Momentum multiplies the inner step by up to 1 / (1 - eta) and the
     gradient through the chunk-to-chunk recurrence grows with it: at eta = 0.9 every memory kind trained
     on windows of 512 tokens met gradients 10^3-10^8 times the clip and stalled (docs/long_context.md,
     "Momentum and long windows"); at 0.5 they stall less often (long windows also want a smaller
     theta), and windows of 128 train as well as at 0.9. */
  const titans__init_rule lr = {TITANS__INIT_CONST, 0.0f}, mom = {TITANS__INIT_CONST, 0.0f};
  const titans__init_rule decay = {TITANS__INIT_CONST, -3.8918203f};
  /* a parameter [a] (nd 1), [a, b_] (nd 2) or [a, b_, c_] (nd 3), filled as [rows, cols] with cols its
     last dimension */
#define TITANS__MEM_PARAM(field, name, kind, nd, a, b_, c_, rule)                                             \
  {                                                                                                       \
    const size_t shape_[3] = {a, b_, c_};                                                                 \
    o = titans__param_push(list, max, &count, offset, prefix, name, kind, nd, shape_);                    \
  }                                                                                                       \
  if (w && slab) w->field = slab + o;                                                                     \
  if (init)                                                                                               \
    titans__param_fill(init, w->field, (nd) == 1 ? 1 : (nd) == 2 ? (a) : (a) * (b_),                      \
                       (nd) == 1 ? (a) : (nd) == 2 ? (b_) : (c_), rule);
  TITANS__MEM_PARAM(wq, "wq", TITANS_PARAM_MATRIX, 2, m.dm, m.d, 0, small)
  TITANS__MEM_PARAM(wk, "wk", TITANS_PARAM_MATRIX, 2, m.dm, m.d, 0, small)
  TITANS__MEM_PARAM(wv, "wv", TITANS_PARAM_MATRIX, 2, m.dm, m.d, 0, small)
  if (m.K > 0) {
    TITANS__MEM_PARAM(conv_q, "conv_q", TITANS_PARAM_MATRIX, 2, m.dm, m.K, 0, taps)
    TITANS__MEM_PARAM(conv_k, "conv_k", TITANS_PARAM_MATRIX, 2, m.dm, m.K, 0, taps)
    TITANS__MEM_PARAM(conv_v, "conv_v", TITANS_PARAM_MATRIX, 2, m.dm, m.K, 0, taps)
  } else if (w && slab) {
    w->conv_q = w->conv_k = w->conv_v = NULL;
  }
  TITANS__MEM_PARAM(lr_w, "lr_w", TITANS_PARAM_MATRIX, 2, m.H, m.d, 0, small)
  TITANS__MEM_PARAM(lr_b, "lr_b", TITANS_PARAM_BIAS, 1, m.H, 0, 0, lr)
  if (cfg->gate_key) {
    TITANS__MEM_PARAM(lr_k, "lr_k", TITANS_PARAM_MATRIX, 2, m.H, m.dh, 0, lr) /* 0: the paper's gate at first */
  } else if (w && slab) {
    w->lr_k = NULL;
  }
  TITANS__MEM_PARAM(mom_w, "mom_w", TITANS_PARAM_MATRIX, 2, m.H, m.d, 0, small)
  TITANS__MEM_PARAM(mom_b, "mom_b", TITANS_PARAM_BIAS, 1, m.H, 0, 0, mom)
  TITANS__MEM_PARAM(decay_w, "decay_w", TITANS_PARAM_MATRIX, 2, m.H, m.d, 0, small)
  TITANS__MEM_PARAM(decay_b, "decay_b", TITANS_PARAM_BIAS, 1, m.H, 0, 0, decay)
  for (size_t i = 0; i < m.L; i++) {
    const titans__init_rule w0 = {TITANS__INIT_NORMAL, 1.0f / sqrtf((float)m.n[i])}; /* unit-variance layers */
    TITANS__MEM_PARAM(w0[i], w0_names[i], TITANS_PARAM_MATRIX, 3, m.H, m.n[i + 1], m.n[i], w0)
  }
  if (w && slab)
    for (size_t i = m.L; i < TITANS_MEM_MAX_DEPTH; i++) w->w0[i] = NULL;
  TITANS__MEM_PARAM(out_norm, "out_norm", TITANS_PARAM_GAIN, 1, m.dh, 0, 0, gain)
  TITANS__MEM_PARAM(wg, "wg", TITANS_PARAM_MATRIX, 2, m.dm, m.d, 0, small)
  TITANS__MEM_PARAM(wo, "wo", TITANS_PARAM_MATRIX, 2, m.d, m.dm, 0, out)
#undef TITANS__MEM_PARAM
  return count;
}

TITANSDEF size_t titans_mem_param_count(const titans_mem_config *cfg) {
  size_t offset = 0;
  titans__mem_walk(cfg, NULL, NULL, NULL, 0, "", &offset, NULL);
  return offset;
}

TITANSDEF void titans_mem_weights_bind(titans_mem_weights *w, const titans_mem_config *cfg, float *slab) {
  size_t offset = 0;
  titans__mem_walk(cfg, w, slab, NULL, 0, "", &offset, NULL);
}

TITANSDEF size_t titans_mem_param_list(titans_param *list, size_t max, const titans_mem_config *cfg, const char *prefix,
                                       size_t base_offset) {
  return titans__mem_walk(cfg, NULL, NULL, list, max, prefix ? prefix : "", &base_offset, NULL);
}

TITANSDEF void titans_mem_weights_init(const titans_mem_weights *w, const titans_mem_config *cfg, titans_rng *rng,
                                       int n_layers) {
  titans__init init = {rng, 0.02f / sqrtf(2.0f * (float)(n_layers > 0 ? n_layers : 1))};
  titans_mem_weights bound = *w; /* the walk takes a writable one; with no slab it only reads the pointers */
  size_t offset = 0;
  titans__mem_walk(cfg, &bound, NULL, NULL, 0, "", &offset, &init);
}

/* ---- scalar pieces ---------------------------------------------------------------------------- */

/* SiLU'(z) = s (1 + z (1 - s)), s = sigmoid(z) (the chunk kernels keep s beside z) */
static inline float titans__silu_d1(float z, float s) { return s * (1.0f + z * (1.0f - s)); }
/* SiLU''(z) = s (1 - s) (2 + z (1 - 2 s)) */
static inline float titans__silu_d2(float z, float s) { return s * (1.0f - s) * (2.0f + z * (1.0f - 2.0f * s)); }

/* The chunk coefficients of docs/model.md 1.6 for n tokens with gates theta, eta, alpha [n]:
   A, B, E [n]; C, D [n, n] lower triangular (zero above the diagonal). Built by the recurrences
   A_t = (1-alpha_t) A_{t-1}, E_t = eta_t E_{t-1}, B_t = (1-alpha_t) B_{t-1} + E_t,
   D_{t,i} = eta_t D_{t-1,i}, D_{t,t} = theta_t, C_{t,i} = (1-alpha_t) C_{t-1,i} + D_{t,i},
   which form every product directly (never a ratio of cumulative products). */
static void titans__mem_coeffs(float *A, float *B, float *E, float *C, float *D, const float *theta, const float *eta,
                               const float *alpha, size_t n) {
  for (size_t t = 0; t < n; t++) {
    float keep = 1.0f - alpha[t];
    float Ap = t ? A[t - 1] : 1.0f, Bp = t ? B[t - 1] : 0.0f, Ep = t ? E[t - 1] : 1.0f;
    E[t] = eta[t] * Ep;
    A[t] = keep * Ap;
    B[t] = keep * Bp + E[t];
    float *Ct = C + t * n, *Dt = D + t * n;
    /* rows t - 1; at t = 0 the loop below reads nothing, and forming C + (t - 1) * n would be UB */
    const float *Cp = t ? C + (t - 1) * n : C, *Dp = t ? D + (t - 1) * n : D;
    for (size_t i = 0; i < t; i++) {
      Dt[i] = eta[t] * Dp[i];
      Ct[i] = keep * Cp[i] + Dt[i];
    }
    Dt[t] = theta[t];
    Ct[t] = theta[t];
    for (size_t i = t + 1; i < n; i++) Ct[i] = Dt[i] = 0.0f;
  }
}

/* The chunk coefficients A, B, E [n], C, D [n, n] of titans__mem_coeffs, or their gradients: the five
   arrays travel together through the backward. */
typedef struct titans__mem_coeffs_view {
  float *A, *B, *E; /* [n] */
  float *C, *D;     /* [n, n] lower triangular */
} titans__mem_coeffs_view;

/* Backward of titans__mem_coeffs, whose outputs are c. d (dA, dB, dE, dC, dD) holds the gradients of the
   outputs and is used as the adjoint accumulators (overwritten). Accumulates dtheta, deta, dalpha [n]. */
static void titans__mem_coeffs_backward(float *dtheta, float *deta, float *dalpha, const titans__mem_coeffs_view *d,
                                        const titans__mem_coeffs_view *c, const float *eta, const float *alpha,
                                        size_t n) {
  float *dA = d->A, *dB = d->B, *dE = d->E, *dC = d->C, *dD = d->D;
  const float *A = c->A, *B = c->B, *E = c->E, *C = c->C, *D = c->D;
  for (size_t t = n; t-- > 0;) {
    float keep = 1.0f - alpha[t];
    float Ap = t ? A[t - 1] : 1.0f, Bp = t ? B[t - 1] : 0.0f, Ep = t ? E[t - 1] : 1.0f;
    float *dCt = dC + t * n, *dDt = dD + t * n;
    /* A_t = keep A_{t-1} */
    dalpha[t] -= dA[t] * Ap;
    if (t) dA[t - 1] += keep * dA[t];
    /* B_t = keep B_{t-1} + E_t */
    dalpha[t] -= dB[t] * Bp;
    if (t) dB[t - 1] += keep * dB[t];
    dE[t] += dB[t];
    /* C_{t,i} = keep C_{t-1,i} + D_{t,i} (i < t); C_{t,t} = D_{t,t} */
    for (size_t i = 0; i <= t; i++) dDt[i] += dCt[i];
    if (t) {
      const float *Cp = C + (t - 1) * n, *Dp = D + (t - 1) * n;
      float *dCp = dC + (t - 1) * n, *dDp = dD + (t - 1) * n;
      float da = 0.0f, de = 0.0f;
      for (size_t i = 0; i < t; i++) {
        da += dCt[i] * Cp[i];
        dCp[i] += keep * dCt[i];
        /* D_{t,i} = eta_t D_{t-1,i} */
        de += dDt[i] * Dp[i];
        dDp[i] += eta[t] * dDt[i];
      }
      dalpha[t] -= da;
      deta[t] += de;
    }
    dtheta[t] += dDt[t];
    /* E_t = eta_t E_{t-1} */
    deta[t] += dE[t] * Ep;
    if (t) dE[t - 1] += eta[t] * dE[t];
  }
}

/* ---- the chunk kernel ------------------------------------------------------------------------- */

/* Work space of one thread for one piece of at most b tokens of one head. */
typedef struct titans__mem_work {
  float *cA, *cB, *cE;                       /* [b] chunk coefficients */
  float *cC, *cD;                            /* [b, b] */
  float *th, *et, *al;                       /* [b] gates of the piece (th: the step after the surprise bound) */
  float *sc;                                 /* [b] the bound's scale of each token's step (1 when off) */
  float *vv;                                 /* [b, dh] values */
  float *ak[TITANS_MEM_MAX_DEPTH];           /* ak[i] [b, n_i]: key path input of layer i (ak[0] = keys) */
  float *zk[TITANS_MEM_MAX_DEPTH];           /* zk[i] [b, n_{i+1}]: key path pre-activations */
  float *sk[TITANS_MEM_MAX_DEPTH];           /* sk[i] [b, n_{i+1}]: sigmoid(zk[i]) (i < L-1) */
  float *sq[TITANS_MEM_MAX_DEPTH];           /* sq[i] [b, n_{i+1}]: sigmoid(zq[i]) (i < L-1) */
  float *gk[TITANS_MEM_MAX_DEPTH];           /* gk[i] [b, n_{i+1}]: delta[i+1] W_{i+1} (i < L-1) */
  float *delta[TITANS_MEM_MAX_DEPTH];        /* delta[i] [b, n_{i+1}]: d l / d zk[i] */
  float *aq[TITANS_MEM_MAX_DEPTH];           /* aq[i] [b, n_i]: query path input of layer i (aq[0] = queries) */
  float *zq[TITANS_MEM_MAX_DEPTH];           /* zq[i] [b, n_{i+1}]: query path pre-activations */
  float *p1[TITANS_MEM_MAX_DEPTH];           /* p1[i] [b, n_{i+1}]: aq[i] W_i^T */
  float *p2[TITANS_MEM_MAX_DEPTH];           /* p2[i] [b, n_{i+1}]: aq[i] S_i^T */
  float *mx[TITANS_MEM_MAX_DEPTH];           /* mx[i] [b, b]: aq[i] ak[i]^T */
  float *cm;                                 /* [b, b] C o mx */
  float *kk;                                 /* [b, b] ak[0] ak[0]^T, the keys' dot products (per_token_grad) */
  float *ps;                                 /* [b, dh] ak[0] S^T, the keys through the momentum (per_token_grad) */
  float *tmp, *tmp2;                         /* [b, nmax] */
  float *lsu, *lse;                          /* [b, dh] least_squares: u_t = P_{t-1} k_t, e_t = v_t - W_{t-1} k_t */
  float *lsr, *lss;                          /* [b] least_squares: r_t = theta_t / (1 + theta_t s_t), s_t = k_t . u_t */
  /* backward only */
  float *lskeep;                             /* [b + 1, 2, head_size] least_squares: (W, G) before each token, and
                                                the running state of the recomputation */
  float *lsvec;                              /* [6, dh] least_squares: the backward's vectors of one token */
  float *dA, *dB, *dE, *dth, *det, *dal;     /* [b] */
  float *dC, *dD, *t1, *dmx;                 /* [b, b] */
  float *ddelta[TITANS_MEM_MAX_DEPTH];       /* [b, n_{i+1}] */
  float *dzk[TITANS_MEM_MAX_DEPTH];          /* [b, n_{i+1}] */
  float *dak[TITANS_MEM_MAX_DEPTH];          /* [b, n_i] */
  float *dz, *dp1, *dp2, *daq;               /* [b, nmax] */
  float *dq, *dv;                            /* [b, dh] */
  float *dW, *dS, *dWend, *dSend;            /* [head_size] */
} titans__mem_work;

/* Takes count floats from base at *used (base NULL: only counts). */
static float *titans__take(float *base, size_t *used, size_t count) {
  float *p = base ? base + *used : NULL;
  *used += count;
  return p;
}

/* Carves a work struct out of buf (NULL: only counts). Returns the number of floats used. */
static size_t titans__mem_work_carve(titans__mem_work *wk, float *buf, const titans__mem_dims *m, int backward) {
  size_t used = 0, b = m->b;
  titans__mem_work dummy;
  if (!wk) wk = &dummy;
  memset(wk, 0, sizeof *wk); /* every field is set below when buf is given; this keeps compilers sure */
  wk->cA = titans__take(buf, &used, b); wk->cB = titans__take(buf, &used, b); wk->cE = titans__take(buf, &used, b);
  wk->cC = titans__take(buf, &used, b * b); wk->cD = titans__take(buf, &used, b * b);
  wk->th = titans__take(buf, &used, b); wk->et = titans__take(buf, &used, b); wk->al = titans__take(buf, &used, b);
  wk->sc = titans__take(buf, &used, b);
  wk->vv = titans__take(buf, &used, b * m->dh);
  for (size_t i = 0; i < m->L; i++) {
    wk->ak[i] = titans__take(buf, &used, b * m->n[i]);
    wk->zk[i] = titans__take(buf, &used, b * m->n[i + 1]);
    wk->sk[i] = titans__take(buf, &used, b * m->n[i + 1]);
    wk->sq[i] = titans__take(buf, &used, b * m->n[i + 1]);
    wk->gk[i] = titans__take(buf, &used, b * m->n[i + 1]);
    wk->delta[i] = titans__take(buf, &used, b * m->n[i + 1]);
    wk->aq[i] = titans__take(buf, &used, b * m->n[i]);
    wk->zq[i] = titans__take(buf, &used, b * m->n[i + 1]);
    wk->p1[i] = titans__take(buf, &used, b * m->n[i + 1]);
    wk->p2[i] = titans__take(buf, &used, b * m->n[i + 1]);
    wk->mx[i] = titans__take(buf, &used, b * b);
  }
  wk->cm = titans__take(buf, &used, b * b);
  wk->kk = titans__take(buf, &used, m->exact ? b * b : 0);     /* per_token_grad's solve only */
  wk->ps = titans__take(buf, &used, m->exact ? b * m->dh : 0);
  wk->tmp = titans__take(buf, &used, b * m->nmax);
  wk->tmp2 = titans__take(buf, &used, b * m->nmax);
  wk->lsu = titans__take(buf, &used, m->ls ? b * m->dh : 0);
  wk->lse = titans__take(buf, &used, m->ls ? b * m->dh : 0);
  wk->lsr = titans__take(buf, &used, m->ls ? b : 0);
  wk->lss = titans__take(buf, &used, m->ls ? b : 0);
  if (backward) {
    wk->lskeep = titans__take(buf, &used, m->ls ? (b + 1) * 2 * m->head_size : 0);
    wk->lsvec = titans__take(buf, &used, m->ls ? 6 * m->dh : 0);
    wk->dA = titans__take(buf, &used, b); wk->dB = titans__take(buf, &used, b); wk->dE = titans__take(buf, &used, b);
    wk->dth = titans__take(buf, &used, b); wk->det = titans__take(buf, &used, b);
    wk->dal = titans__take(buf, &used, b);
    wk->dC = titans__take(buf, &used, b * b); wk->dD = titans__take(buf, &used, b * b);
    wk->t1 = titans__take(buf, &used, b * b); wk->dmx = titans__take(buf, &used, b * b);
    for (size_t i = 0; i < m->L; i++) {
      wk->ddelta[i] = titans__take(buf, &used, b * m->n[i + 1]);
      wk->dzk[i] = titans__take(buf, &used, b * m->n[i + 1]);
      wk->dak[i] = titans__take(buf, &used, b * m->n[i]);
    }
    wk->dz = titans__take(buf, &used, b * m->nmax); wk->dp1 = titans__take(buf, &used, b * m->nmax);
    wk->dp2 = titans__take(buf, &used, b * m->nmax); wk->daq = titans__take(buf, &used, b * m->nmax);
    wk->dq = titans__take(buf, &used, b * m->dh); wk->dv = titans__take(buf, &used, b * m->dh);
    wk->dW = titans__take(buf, &used, m->head_size); wk->dS = titans__take(buf, &used, m->head_size);
    wk->dWend = titans__take(buf, &used, m->head_size); wk->dSend = titans__take(buf, &used, m->head_size);
  }
  return used;
}

/* Copies n rows of width w from a strided source [n, ld] to a packed [n, w]. */
static void titans__copy_rows(float *dst, const float *src, size_t n, size_t w, size_t ld) {
  for (size_t t = 0; t < n; t++) memcpy(dst + t * w, src + t * ld, w * sizeof(float));
}

/* Adds a packed [n, w] into strided rows [n, ld]. */
static void titans__add_rows(float *dst, size_t ld, const float *src, size_t n, size_t w) {
  for (size_t t = 0; t < n; t++) titans__axpy(dst + t * ld, 1.0f, src + t * w, w);
}

/* out[t, :] = s[t] * in[t, :] over [n, w] */
static void titans__scale_rows(float *out, const float *s, const float *in, size_t n, size_t w) {
  for (size_t t = 0; t < n; t++) titans__ops_scale_to(out + t * w, in + t * w, s[t], w);
}

/* s = sigmoid(z) (vectorised) and y = SiLU(z) = z s over n floats; s is kept for the derivatives. */
static void titans__silu_keep(float *y, float *s, const float *z, size_t n) {
  titans_sigmoid_forward(s, z, n);
  titans__ops_mul(y, z, s, n);
}

/* |u_t|^2 of token t: u_t = sum over layers of the outer products delta[i]_t ak[i]_t^T, one per weight
   matrix, so |u_t|^2 = sum_i |delta[i]_t|^2 |ak[i]_t|^2 (no product is formed). */
static float titans__mem_surprise_sq(const titans__mem_dims *m, const titans__mem_work *wk, size_t t) {
  float sq = 0.0f;
  for (size_t i = 0; i < m->L; i++) {
    const float *de = wk->delta[i] + t * m->n[i + 1], *a = wk->ak[i] + t * m->n[i];
    sq += titans__dot(de, de, m->n[i + 1]) * titans__dot(a, a, m->n[i]);
  }
  return sq;
}

/* The surprise bound (docs/model.md 1.4): theta_t u_t becomes theta_t sc_t u_t with
   sc_t = 1 / sqrt(1 + |u_t|^2 / tau^2), so |sc_t u_t| < tau: however large the error or the memory's
   weights, one token moves the memory by less than theta_t tau (momentum and the chunk then sum such
   steps). Folded into the step: wk->th[t] *= sc_t, wk->sc[t] = sc_t (1 when the bound is off). */
static void titans__mem_bound_steps(const titans__mem_dims *m, titans__mem_work *wk, size_t n) {
  for (size_t t = 0; t < n; t++) {
    wk->sc[t] = 1.0f;
    if (m->tau > 0.0f) {
      wk->sc[t] = 1.0f / sqrtf(1.0f + titans__mem_surprise_sq(m, wk, t) / (m->tau * m->tau));
      wk->th[t] *= wk->sc[t];
    }
  }
}

/* Backward of titans__mem_bound_steps. On entry wk->dth holds d loss / d (the bounded step); on return
   it holds d loss / d theta, and the bound's dependence on |u_t| is added into ddelta and dak:
   d sc / d |u|^2 = -sc^3 / (2 tau^2), d |u|^2 / d delta[i]_t = 2 |ak[i]_t|^2 delta[i]_t and
   d |u|^2 / d ak[i]_t = 2 |delta[i]_t|^2 ak[i]_t. theta [n] (stride gstride) is the unbounded step. */
static void titans__mem_bound_steps_backward(const titans__mem_dims *m, titans__mem_work *wk, const float *theta,
                                             size_t gstride, size_t n) {
  if (!(m->tau > 0.0f)) return;
  for (size_t t = 0; t < n; t++) {
    float sc = wk->sc[t], g = wk->dth[t];
    float dsq = g * theta[t * gstride] * (-0.5f * sc * sc * sc / (m->tau * m->tau)); /* d loss / d |u_t|^2 */
    wk->dth[t] = g * sc;
    for (size_t i = 0; i < m->L; i++) {
      size_t no = m->n[i + 1], ni = m->n[i];
      const float *de = wk->delta[i] + t * no, *a = wk->ak[i] + t * ni;
      float a2 = titans__dot(a, a, ni), d2 = titans__dot(de, de, no);
      titans__axpy(wk->ddelta[i] + t * no, 2.0f * dsq * a2, de, no);
      titans__axpy(wk->dak[i] + t * ni, 2.0f * dsq * d2, a, ni);
    }
  }
}

/* p[0 .. VW) := v by a non-temporal store where the CPU has one (p aligned to the vector), else a store. */
static inline void titans__vstream(float *p, titans__vf v) {
#if defined(TITANS__AVX512)
  _mm512_stream_ps(p, v);
#elif defined(TITANS__AVX2)
  _mm256_stream_ps(p, v);
#else
  titans__vstore(p, v);
#endif
}

/* v with its subnormal lanes (|v| < FLT_MIN) set to zero. */
static inline titans__vf titans__vflush_subnormal(titans__vf v) {
  return titans__ops_vsel_lt(titans__ops_vabs(v), titans__vset1(FLT_MIN), titans__vset1(0.0f), v);
}

/* When flush is set, sets the floats of x [n] whose magnitude is below FLT_MIN (subnormals) to zero;
   then, when dst is not NULL, copies x into dst [n], in the same pass. The memory decays by
   (1 - alpha) per token: without the flush, a long stream leaves most of the state subnormal, and
   arithmetic on subnormals is slow on many CPUs. (W, S) are flushed at every chunk end, in training and
   inference alike, so both see the same state (by titans__mem_state_update in the same pass as the
   update, by this function where a layer's width is not a multiple of the vector width); a no-op on a
   state without subnormals (bit-identical results). dst is written with non-temporal stores where
   the CPU has them and dst is aligned: training writes every chunk's end state into the context, read
   again only by the backward, hundreds of MB later, so caching those lines (and reading each one from
   memory before writing it) only evicts the running state, which x keeps hot for the next chunk. */
static void titans__mem_state_out(float *dst, float *x, size_t n, int flush) {
#if defined(TITANS__AVX512) || defined(TITANS__AVX2)
  int stream = dst && (uintptr_t)dst % (TITANS__VW * sizeof(float)) == 0;
#else
  int stream = 0;
#endif
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf v = titans__vload(x + i);
    if (flush) {
      v = titans__vflush_subnormal(v);
      titans__vstore(x + i, v);
    }
    if (stream) titans__vstream(dst + i, v);
    else if (dst) titans__vstore(dst + i, v);
  }
#if defined(TITANS__AVX512) || defined(TITANS__AVX2)
  if (stream) _mm_sfence(); /* the streamed lines reach memory before any later store (another thread reads them) */
#endif
  for (; i < n; i++) {
    if (flush && fabsf(x[i]) < FLT_MIN) x[i] = 0.0f;
    if (dst) dst[i] = x[i];
  }
}

/* Where a chunk's end state goes besides (W, S) themselves: copies w_copy, s_copy [head_size] (NULL:
   none; training keeps every chunk's end state for the backward), and whether its subnormals are
   flushed first (at every chunk end: titans__mem_state_out says why). */
typedef struct titans__mem_sink {
  float *w_copy, *s_copy;
  int flush;
} titans__mem_sink;

/* One layer's step at a chunk's end, as titans__mem_state_update applies it to W and S [no, ni]: the
   coefficients and arrays of the update travel together from the piece's forward to the kernel. */
typedef struct titans__mem_layer_step {
  float An, Bn, En;     /* the decays of the chunk's last token: A_n, B_n, E_n */
  const float *delta;   /* [n, no] the chunk's inner-loss errors */
  const float *tc, *td; /* [n, ni] diag(C_n,.) ak and diag(D_n,.) ak */
  size_t n, no, ni;     /* tokens; the layer's output and input widths */
} titans__mem_layer_step;

/* The state arrays titans__mem_state_update reads and writes, and how: they travel together to its tiles. */
typedef struct titans__mem_state_io {
  float *wo, *so;     /* [no, ni] (leading dim ni) the new W and S (may be w, s) */
  const float *w, *s; /* [no, ni] (leading dim ni) W and S at the chunk's start */
  float *wc, *sc;     /* [no, ni] (leading dim ni) copies of the new W and S (NULL: none) */
  int flush, stream;  /* flush the new state's subnormals; stream the copies (both aligned) */
} titans__mem_state_io;

/* One R x NV tile of titans__mem_state_update: rows o .. o + R of W and S [no, ni], vectors j .. j + NV.
   vA, vB, vE: u's A_n, B_n, E_n in every lane. */
TITANS__GEMM_INLINE void titans__mem_update_tile(const size_t R, const size_t NV, const titans__mem_state_io *io,
                                                 const titans__mem_layer_step *u, titans__vf vA, titans__vf vB,
                                                 titans__vf vE, size_t o, size_t j) {
  float *wo = io->wo, *so = io->so, *wc = io->wc, *sc = io->sc;
  const float *w = io->w, *s = io->s;
  const int flush = io->flush, stream = io->stream;
  const float *delta = u->delta, *tc = u->tc, *td = u->td; /* [n, no], [n, ni], [n, ni] */
  const size_t n = u->n, no = u->no, ni = u->ni;
  titans__vf aw[4 * 2], as[4 * 2]; /* [R][NV] sums over the tokens */
  TITANS__GEMM_UNROLL
  for (size_t z = 0; z < R * NV; z++) aw[z] = as[z] = titans__vset1(0.0f);
  for (size_t t = 0; t < n; t++) {
    titans__vf c[2], d[2];
    TITANS__GEMM_UNROLL
    for (size_t v = 0; v < NV; v++) {
      c[v] = titans__vload(tc + t * ni + j + v * TITANS__VW);
      d[v] = titans__vload(td + t * ni + j + v * TITANS__VW);
    }
    TITANS__GEMM_UNROLL
    for (size_t r = 0; r < R; r++) {
      titans__vf e = titans__vset1(delta[t * no + o + r]);
      TITANS__GEMM_UNROLL
      for (size_t v = 0; v < NV; v++) {
        aw[r * NV + v] = titans__vfma(e, c[v], aw[r * NV + v]);
        as[r * NV + v] = titans__vfma(e, d[v], as[r * NV + v]);
      }
    }
  }
  TITANS__GEMM_UNROLL
  for (size_t r = 0; r < R; r++)
    TITANS__GEMM_UNROLL
    for (size_t v = 0; v < NV; v++) {
      size_t x = (o + r) * ni + j + v * TITANS__VW;
      titans__vf wv = titans__vload(w + x), sv = titans__vload(s + x);
      titans__vf nw = titans__vsub(titans__vadd(titans__vmul(vA, wv), titans__vmul(vB, sv)), aw[r * NV + v]);
      titans__vf ns = titans__vsub(titans__vmul(vE, sv), as[r * NV + v]);
      if (flush) {
        nw = titans__vflush_subnormal(nw);
        ns = titans__vflush_subnormal(ns);
      }
      titans__vstore(wo + x, nw);
      titans__vstore(so + x, ns);
      if (stream) {
        titans__vstream(wc + x, nw);
        titans__vstream(sc + x, ns);
      } else if (wc) {
        titans__vstore(wc + x, nw);
        titans__vstore(sc + x, ns);
      }
    }
}

/* The chunk-end state of one memory layer, in one pass over W and S [no, ni] (wo, so may be w, s):
     W' = A_n W + B_n S - delta^T tc,   S' = E_n S - delta^T td
   with delta [n, no] the chunk's inner-loss errors, tc = diag(C_n,.) ak and td = diag(D_n,.) ak [n, ni].
   It was five passes (titans__ops_lincomb, two titans_gemm(1, 0, ...) rank-n updates, titans__ops_scale_to),
   each reading or writing the whole 128 KiB state of a head from L2, and then a sixth, the sink's
   (flush and copy, titans__mem_state_out). The values round as those did: each sum a chain of FMAs
   over the tokens from zero, then (A_n W + B_n S) - sum. wc, sc [no, ni] (NULL: none) take a copy,
   streamed when aligned. Needs ni % VW == 0. Returns whether it streamed (the caller fences). */
static int titans__mem_state_update(float *wo, float *so, const float *w, const float *s, const titans__mem_sink *copy,
                                    const titans__mem_layer_step *u) {
  float *wc = copy->w_copy, *sc = copy->s_copy;
  const size_t no = u->no, ni = u->ni;
  titans__vf vA = titans__vset1(u->An), vB = titans__vset1(u->Bn), vE = titans__vset1(u->En);
#if defined(TITANS__AVX512) || defined(TITANS__AVX2)
  const uintptr_t vbytes = TITANS__VW * sizeof(float);
  int stream = wc && (uintptr_t)wc % vbytes == 0 && (uintptr_t)sc % vbytes == 0;
#else
  int stream = 0;
#endif
  const titans__mem_state_io io = {wo, so, w, s, wc, sc, copy->flush, stream};
  size_t o = 0;
  for (; o + 4 <= no; o += 4) {
    size_t j = 0;
    for (; j + 2 * TITANS__VW <= ni; j += 2 * TITANS__VW) titans__mem_update_tile(4, 2, &io, u, vA, vB, vE, o, j);
    for (; j < ni; j += TITANS__VW) titans__mem_update_tile(4, 1, &io, u, vA, vB, vE, o, j);
  }
  for (; o < no; o++)
    for (size_t j = 0; j < ni; j += TITANS__VW) titans__mem_update_tile(1, 1, &io, u, vA, vB, vE, o, j);
  return stream;
}

/* A piece of one head's memory stream, read in place: n tokens of its q, k, v rows (the head's slice of
   rows ld floats apart) and of its gates (gstride floats apart). The piece's forward and backward take
   these arrays as one, as every caller hands them on together. */
typedef struct titans__mem_chunk {
  const float *q, *k, *v;           /* [n, ld] queries, keys, values (the head's slice at column 0) */
  const float *theta, *eta, *alpha; /* [n] (stride gstride) the step, momentum and decay gates */
  size_t ld, gstride;               /* row stride of q, k, v (and of y, dy, dq, dk, dv); stride of the gates */
  size_t n;                         /* tokens, at most b */
} titans__mem_chunk;

/* The gradients a piece's backward accumulates into, laid out as its titans__mem_chunk. */
typedef struct titans__mem_chunk_grad {
  float *dq, *dk, *dv;           /* [n, ld] */
  float *dtheta, *deta, *dalpha; /* [n] (stride gstride) */
} titans__mem_chunk_grad;

/* The first half of titans__mem_chunk_forward, which reads only the chunk-start weights wgrad: the piece's
   gates and rows into wk, the key path, the inner-loss errors, the surprise bound and the coefficients. */
static void titans__mem_chunk_keys(const titans__mem_dims *m, int residual, const titans__mem_chunk *c,
                                   const float *wgrad, titans__mem_work *wk) {
  const size_t L = m->L, dh = m->dh, n = c->n, ld = c->ld;
  for (size_t t = 0; t < n; t++) {
    wk->th[t] = c->theta[t * c->gstride];
    wk->et[t] = c->eta[t * c->gstride];
    wk->al[t] = c->alpha[t * c->gstride];
  }
  titans__copy_rows(wk->ak[0], c->k, n, dh, ld);
  titans__copy_rows(wk->aq[0], c->q, n, dh, ld);
  titans__copy_rows(wk->vv, c->v, n, dh, ld);

  /* Key path through the chunk-start weights: zk[i] = ak[i] Wg_i^T, ak[i+1] = SiLU(zk[i]). */
  for (size_t i = 0; i < L; i++) {
    titans_gemm(0, 1, n, m->n[i + 1], m->n[i], 1.0f, titans_cm(wk->ak[i], m->n[i]),
                titans_cm(wgrad + m->wofs[i], m->n[i]), 0.0f, titans_m(wk->zk[i], m->n[i + 1]));
    if (i + 1 < L) titans__silu_keep(wk->ak[i + 1], wk->sk[i], wk->zk[i], n * m->n[i + 1]);
  }
  /* Errors of the inner loss: delta[L-1] = 2 (M(k) - v); delta[i] = (delta[i+1] W_{i+1}) o SiLU'(zk[i]). */
  for (size_t t = 0; t < n; t++)
    for (size_t j = 0; j < dh; j++) {
      float pred = wk->zk[L - 1][t * dh + j] + (residual ? wk->ak[0][t * dh + j] : 0.0f);
      wk->delta[L - 1][t * dh + j] = 2.0f * (pred - wk->vv[t * dh + j]);
    }
  for (size_t i = L - 1; i-- > 0;) {
    size_t wi = m->n[i + 1];
    titans_gemm(0, 0, n, wi, m->n[i + 2], 1.0f, titans_cm(wk->delta[i + 1], m->n[i + 2]),
                titans_cm(wgrad + m->wofs[i + 1], wi), 0.0f, titans_m(wk->gk[i], wi));
    for (size_t j = 0; j < n * wi; j++) wk->delta[i][j] = wk->gk[i][j] * titans__silu_d1(wk->zk[i][j], wk->sk[i][j]);
  }
  titans__mem_bound_steps(m, wk, n);
  titans__mem_coeffs(wk->cA, wk->cB, wk->cE, wk->cC, wk->cD, wk->th, wk->et, wk->al, n);
}

/* Whether the chunk's n tokens carry any momentum term (a B coefficient not 0): else the solve skips S. */
static int titans__chunk_has_momentum(const titans__mem_work *wk, size_t n) {
  for (size_t t = 0; t < n; t++)
    if (wk->cB[t] != 0.0f) return 1;
  return 0;
}

/* per_token_grad (docs/model.md 1.10): turns the errors titans__mem_chunk_keys took at the piece's start
   weights, delta_t = 2 (W k_t + r k_t - v_t) (r: residual), into the errors at the weights just before each
   token, e_t = 2 (W_{t-1} k_t + r k_t - v_t), in place in wk->delta[0]. With depth 1 every step is
   u_j = e_j k_j^T, so W_{t-1} = A_{t-1} W + B_{t-1} S - sum_{j<t} C_{t-1,j} e_j k_j^T (1.6) and
       e_t + sum_{j<t} 2 C_{t-1,j} (k_j . k_t) e_j = 2 (A_{t-1} W k_t + B_{t-1} S k_t + r k_t - v_t) =: ehat_t,
   a unit lower triangular system (I + N) e = ehat, solved by forward substitution. Everything after (query
   path, chunk-end state) reads delta[0] as before. Keeps kk = K K^T and ps = K S^T for the backward; s is
   the momentum at the piece's start (skipped when every B_t is 0: no momentum). Depth 1 only. */
static void titans__mem_delta_solve(const titans__mem_dims *m, titans__mem_work *wk, const float *s, size_t n) {
  const size_t dh = m->dh;
  float *e = wk->delta[0];
  const float *p = wk->zk[0], *k = wk->ak[0]; /* p [n, dh] = K W^T from the key path */
  int momentum = titans__chunk_has_momentum(wk, n);
  if (momentum)
    titans_gemm(0, 1, n, dh, dh, 1.0f, titans_cm(k, dh), titans_cm(s, dh), 0.0f, titans_m(wk->ps, dh));
  titans_gemm(0, 1, n, n, dh, 1.0f, titans_cm(k, dh), titans_cm(k, dh), 0.0f, titans_m(wk->kk, n));
  for (size_t t = 1; t < n; t++) {
    float *et = e + t * dh;
    /* ehat_t = delta_t + 2 (A_{t-1} - 1) p_t + 2 B_{t-1} ps_t */
    titans__axpy(et, 2.0f * (wk->cA[t - 1] - 1.0f), p + t * dh, dh);
    if (momentum) titans__axpy(et, 2.0f * wk->cB[t - 1], wk->ps + t * dh, dh);
    const float *crow = wk->cC + (t - 1) * n, *kt = wk->kk + t * n;
    for (size_t j = 0; j < t; j++) titans__axpy(et, -2.0f * crow[j] * kt[j], e + j * dh, dh);
  }
}

/* Backward of titans__mem_delta_solve and of the key path under it (it replaces titans__mem_key_backward
   for per_token_grad). On entry wk->ddelta[0] holds d loss / d e (the solved errors) and dA, dB, dC the
   coefficients' gradients so far; adds the solve's share into dA, dB, dC and gives dak[0], dv and the chunk
   start's dW, dS. Uses wk->dz, dp1, dp2 [n, dh] and t1 [n, n] (free after the query path's backward):
     dehat = (I + N)^-T de (back substitution), dN_{t,j} = -dehat_t . e_j (j < t),
     N_{t,j} = 2 C_{t-1,j} kk_{t,j},  ehat_t = 2 (A_{t-1} p_t + B_{t-1} ps_t + r k_t - v_t),
     p = K W^T, ps = K S^T, kk = K K^T. */
static void titans__mem_delta_solve_backward(const titans__mem_dims *m, int residual, titans__mem_work *wk,
                                             const float *w, const float *s, size_t n) {
  const size_t dh = m->dh;
  const float *e = wk->delta[0], *de = wk->ddelta[0], *k = wk->ak[0], *p = wk->zk[0];
  float *dehat = wk->dz, *dp = wk->dp1, *dps = wk->dp2, *dkk = wk->t1, *dk = wk->dak[0];
  int momentum = titans__chunk_has_momentum(wk, n);
  for (size_t t = n; t-- > 0;) {
    float *dt = dehat + t * dh;
    memcpy(dt, de + t * dh, dh * sizeof(float));
    for (size_t i = t + 1; i < n; i++)
      titans__axpy(dt, -2.0f * wk->cC[(i - 1) * n + t] * wk->kk[i * n + t], dehat + i * dh, dh);
  }
  memset(dkk, 0, n * n * sizeof(float));
  for (size_t t = 1; t < n; t++)
    for (size_t j = 0; j < t; j++) {
      float dN = -titans__dot(dehat + t * dh, e + j * dh, dh);
      wk->dC[(t - 1) * n + j] += 2.0f * dN * wk->kk[t * n + j];
      float g = 2.0f * dN * wk->cC[(t - 1) * n + j];
      dkk[t * n + j] += g; /* kk is symmetric: its (t, j) and (j, t) are one product */
      dkk[j * n + t] += g;
    }
  titans_gemm(0, 0, n, dh, n, 1.0f, titans_cm(dkk, n), titans_cm(k, dh), 1.0f, titans_m(dk, dh));
  for (size_t t = 0; t < n; t++) {
    const float *dt = dehat + t * dh;
    float a = t ? wk->cA[t - 1] : 1.0f, b = t ? wk->cB[t - 1] : 0.0f;
    if (t) {
      wk->dA[t - 1] += 2.0f * titans__dot(dt, p + t * dh, dh);
      if (momentum) wk->dB[t - 1] += 2.0f * titans__dot(dt, wk->ps + t * dh, dh);
    }
    titans__ops_scale_to(dp + t * dh, dt, 2.0f * a, dh);
    if (momentum) titans__ops_scale_to(dps + t * dh, dt, 2.0f * b, dh);
    titans__axpy(wk->dv + t * dh, -2.0f, dt, dh);
    if (residual) titans__axpy(dk + t * dh, 2.0f, dt, dh);
  }
  titans_gemm(1, 0, dh, dh, n, 1.0f, titans_cm(dp, dh), titans_cm(k, dh), 1.0f, titans_m(wk->dW, dh));
  titans_gemm(0, 0, n, dh, dh, 1.0f, titans_cm(dp, dh), titans_cm(w, dh), 1.0f, titans_m(dk, dh));
  if (momentum) {
    titans_gemm(1, 0, dh, dh, n, 1.0f, titans_cm(dps, dh), titans_cm(k, dh), 1.0f, titans_m(wk->dS, dh));
    titans_gemm(0, 0, n, dh, dh, 1.0f, titans_cm(dps, dh), titans_cm(s, dh), 1.0f, titans_m(dk, dh));
  }
}

/* The outputs of one piece c of n <= b tokens of one head, from a running state (W, S) = (w, s) inside a
   chunk whose inner gradients are taken at wgrad (the chunk-start weights; the same pointer as w at a
   chunk start). Writes y [n, ld] (unless y is NULL) and leaves in wk everything the backward and
   titans__mem_chunk_end_state need. */
static void titans__mem_chunk_forward(const titans__mem_dims *m, int residual, float *y, const titans__mem_chunk *c,
                                      const float *wgrad, const float *w, const float *s, titans__mem_work *wk) {
  const size_t L = m->L, dh = m->dh, n = c->n, ld = c->ld;
  titans__mem_chunk_keys(m, residual, c, wgrad, wk);
  if (m->exact) titans__mem_delta_solve(m, wk, s, n); /* wgrad == w: the caller's piece starts the solve */

  /* Query path through the per-token weights W_t = A_t W + B_t S - sum_i C_{t,i} u_i:
     zq[i] = diag(A) aq[i] W_i^T + diag(B) aq[i] S_i^T - (C o (aq[i] ak[i]^T)) delta[i]. */
  for (size_t i = 0; i < L; i++) {
    size_t ni = m->n[i], no = m->n[i + 1];
    titans_gemm(0, 1, n, no, ni, 1.0f, titans_cm(wk->aq[i], ni), titans_cm(w + m->wofs[i], ni), 0.0f,
                titans_m(wk->p1[i], no));
    titans_gemm(0, 1, n, no, ni, 1.0f, titans_cm(wk->aq[i], ni), titans_cm(s + m->wofs[i], ni), 0.0f,
                titans_m(wk->p2[i], no));
    titans_gemm(0, 1, n, n, ni, 1.0f, titans_cm(wk->aq[i], ni), titans_cm(wk->ak[i], ni), 0.0f, titans_m(wk->mx[i], n));
    titans__ops_mul(wk->cm, wk->cC, wk->mx[i], n * n);
    for (size_t t = 0; t < n; t++)
      titans__ops_lincomb(wk->zq[i] + t * no, wk->cA[t], wk->p1[i] + t * no, wk->cB[t], wk->p2[i] + t * no, no);
    titans_gemm(0, 0, n, no, n, -1.0f, titans_cm(wk->cm, n), titans_cm(wk->delta[i], no), 1.0f,
                titans_m(wk->zq[i], no));
    if (i + 1 < L) titans__silu_keep(wk->aq[i + 1], wk->sq[i], wk->zq[i], n * no);
  }
  if (y)
    for (size_t t = 0; t < n; t++)
      for (size_t j = 0; j < dh; j++)
        y[t * ld + j] = wk->zq[L - 1][t * dh + j] + (residual ? wk->aq[0][t * dh + j] : 0.0f);
}

/* The state after a piece of n tokens whose forward (titans__mem_chunk_forward from (w, s)) left wk:
   writes it to w_out, s_out [head_size] (they may alias w / s: the update is done in place after every
   read of the old state) and hands it to the sink (NULL: none). */
static void titans__mem_chunk_end_state(const titans__mem_dims *m, float *w_out, float *s_out,
                                        const titans__mem_sink *sink, const float *w, const float *s, size_t n,
                                        titans__mem_work *wk) {
  /* State after the piece: W' = A_n W + B_n S - delta^T diag(C_n,.) ak, S' = E_n S - delta^T diag(D_n,.) ak,
     then the sink's flush and copies. W' first: it reads the old S, which the S update then overwrites. */
  const size_t L = m->L;
  const float *crow = wk->cC + (n - 1) * n, *drow = wk->cD + (n - 1) * n;
  float An = wk->cA[n - 1], Bn = wk->cB[n - 1], En = wk->cE[n - 1];
  int flush = sink && sink->flush, streamed = 0;
  for (size_t i = 0; i < L; i++) {
    size_t ni = m->n[i], no = m->n[i + 1], sz = ni * no;
    const float *wi = w + m->wofs[i], *si = s + m->wofs[i];
    float *wo = w_out + m->wofs[i], *so = s_out + m->wofs[i];
    float *wc = sink && sink->w_copy ? sink->w_copy + m->wofs[i] : NULL;
    float *sc = sink && sink->s_copy ? sink->s_copy + m->wofs[i] : NULL;
    if (ni % TITANS__VW == 0) {
      titans__scale_rows(wk->tmp, crow, wk->ak[i], n, ni);
      titans__scale_rows(wk->tmp2, drow, wk->ak[i], n, ni);
      titans__mem_sink copy = {wc, sc, flush};
      titans__mem_layer_step step = {An, Bn, En, wk->delta[i], wk->tmp, wk->tmp2, n, no, ni};
      streamed |= titans__mem_state_update(wo, so, wi, si, &copy, &step);
      continue;
    }
    titans__ops_lincomb(wo, An, wi, Bn, si, sz);
    titans__scale_rows(wk->tmp, crow, wk->ak[i], n, ni);
    titans_gemm(1, 0, no, ni, n, -1.0f, titans_cm(wk->delta[i], no), titans_cm(wk->tmp, ni), 1.0f, titans_m(wo, ni));
    titans__ops_scale_to(so, si, En, sz);
    titans__scale_rows(wk->tmp, drow, wk->ak[i], n, ni);
    titans_gemm(1, 0, no, ni, n, -1.0f, titans_cm(wk->delta[i], no), titans_cm(wk->tmp, ni), 1.0f, titans_m(so, ni));
    if (flush || wc) {
      titans__mem_state_out(wc, wo, sz, flush);
      titans__mem_state_out(sc, so, sz, flush);
    }
  }
#if defined(TITANS__AVX512) || defined(TITANS__AVX2)
  if (streamed) _mm_sfence(); /* as in titans__mem_state_out */
#else
  (void)streamed;
#endif
}

/* One layer of titans__mem_token_step in one pass over its W and S [no, ni], updated in place:
     W' = A W + B S - delta tc^T,   S' = E S - delta td^T,   zq [no] = W' aq
   (u: the one token's step, n = 1; aq [ni] the query path's input of the layer). W' and S' round as
   titans__mem_state_update rounds them for a piece of one token, so the state is the same bits; zq is
   read from W' as the update writes it instead of as A (W aq) + B (S aq) - C (aq . ak) delta, which is
   the same sum rounded differently. Before, the query path read W and S, the update read and wrote
   them, and the session's finite check read them again: six passes over the head's state a token,
   now four. Returns, in each lane, the sum of (W' + S') * 0 over its values: finite (0) only when every
   value written is finite (an overflow of W' + S' only makes it NaN: the caller then checks the slow way).
   Needs ni % VW == 0. */
static titans__vf titans__mem_token_layer(float *zq, float *w, float *s, const float *aq, int flush,
                                          const titans__mem_layer_step *u) {
  const titans__vf vA = titans__vset1(u->An), vB = titans__vset1(u->Bn), vE = titans__vset1(u->En);
  const titans__vf zero = titans__vset1(0.0f);
  titans__vf check = zero;
  for (size_t o = 0; o < u->no; o++) {
    titans__vf e = titans__vset1(u->delta[o]), dot = zero;
    float *wr = w + o * u->ni, *sr = s + o * u->ni; /* [ni] row o of W and S */
    for (size_t j = 0; j < u->ni; j += TITANS__VW) {
      titans__vf wv = titans__vload(wr + j), sv = titans__vload(sr + j);
      titans__vf aw = titans__vfma(e, titans__vload(u->tc + j), zero); /* as the update tile's sum of one token */
      titans__vf as = titans__vfma(e, titans__vload(u->td + j), zero);
      titans__vf nw = titans__vsub(titans__vadd(titans__vmul(vA, wv), titans__vmul(vB, sv)), aw);
      titans__vf ns = titans__vsub(titans__vmul(vE, sv), as);
      if (flush) {
        nw = titans__vflush_subnormal(nw);
        ns = titans__vflush_subnormal(ns);
      }
      titans__vstore(wr + j, nw);
      titans__vstore(sr + j, ns);
      dot = titans__vfma(nw, titans__vload(aq + j), dot);
      check = titans__vfma(titans__vadd(nw, ns), zero, check);
    }
    zq[o] = titans__vsum(dot);
  }
  return check;
}

/* Whether titans__mem_token_step can take a head: every layer's input width a multiple of the vector width. */
static int titans__mem_token_fusable(const titans__mem_dims *m) {
  for (size_t i = 0; i < m->L; i++)
    if (m->n[i] % TITANS__VW != 0) return 0;
  return 1;
}

/* One token of one head (a piece c of n = 1) from the running state (w, s), which it updates in place;
   the same computation as titans__mem_chunk_forward then titans__mem_chunk_end_state (and the same state
   bits), with each layer's update, query read and finite check in one pass (titans__mem_token_layer).
   wgrad (the chunk-start weights) may be w: the key path reads it before any write. flush: the token
   ends a chunk. Writes y [dh] and returns 1 when every value of the new W and S is known to be finite
   (0: unknown, check them). Needs titans__mem_token_fusable(m). */
static int titans__mem_token_step(const titans__mem_dims *m, int residual, float *y, const titans__mem_chunk *c,
                                  const float *wgrad, float *w, float *s, int flush, titans__mem_work *wk) {
  const size_t L = m->L, dh = m->dh;
  titans__mem_chunk_keys(m, residual, c, wgrad, wk);
  titans__vf check = titans__vset1(0.0f);
  for (size_t i = 0; i < L; i++) {
    size_t ni = m->n[i], no = m->n[i + 1];
    titans__ops_scale_to(wk->tmp, wk->ak[i], wk->cC[0], ni); /* [ni] C_11 ak, as titans__mem_chunk_end_state */
    titans__ops_scale_to(wk->tmp2, wk->ak[i], wk->cD[0], ni); /* [ni] D_11 ak */
    titans__mem_layer_step step = {wk->cA[0], wk->cB[0], wk->cE[0], wk->delta[i], wk->tmp, wk->tmp2, 1, no, ni};
    check = titans__vadd(check, titans__mem_token_layer(wk->zq[i], w + m->wofs[i], s + m->wofs[i], wk->aq[i], flush,
                                                        &step));
    if (i + 1 < L) titans__silu_keep(wk->aq[i + 1], wk->sq[i], wk->zq[i], no);
  }
  for (size_t j = 0; j < dh; j++) y[j] = wk->zq[L - 1][j] + (residual ? wk->aq[0][j] : 0.0f);
  return titans__vsum(check) == 0.0f;
}

/* rowdot[t] = sum_j a[t, j] b[t, j] over [n, w], added into out[t] scaled by sign */
static void titans__rowdot_acc(float *out, float sign, const float *a, const float *b, size_t n, size_t w) {
  for (size_t t = 0; t < n; t++) out[t] += sign * titans__dot(a + t * w, b + t * w, w);
}

/* The gradient through the decay terms of the chunk-end state W' = A_n W + B_n S (+ ...), S' = E_n S
   (+ ...), from dWe = dL/dW', dSe = dL/dS' [sz] and decay = (A_n, B_n, E_n): dW = A_n dWe,
   dS = B_n dWe + E_n dSe, and dots = (dWe . W, dWe . S, dSe . S) for dA_n, dB_n, dE_n. One pass over
   the six arrays (six passes before, the backward's largest elementwise cost); every value rounds as
   titans__axpy_set, titans__axpy and titans__dot round it. */
static void titans__mem_end_state_grad(float *dW, float *dS, float dots[3], const float *dWe, const float *dSe,
                                       const float *w, const float *s, const float decay[3], size_t sz) {
  float An = decay[0], Bn = decay[1], En = decay[2];
  titans__vf vA = titans__vset1(An), vB = titans__vset1(Bn), vE = titans__vset1(En), vz = titans__vset1(0.0f);
  titans__vf accW = vz, accWS = vz, accS = vz;
  size_t i = 0;
  for (; i + TITANS__VW <= sz; i += TITANS__VW) {
    titans__vf dwe = titans__vload(dWe + i), dse = titans__vload(dSe + i);
    titans__vf wv = titans__vload(w + i), sv = titans__vload(s + i);
    titans__vstore(dW + i, titans__vfma(vA, dwe, vz));
    titans__vstore(dS + i, titans__vfma(vE, dse, titans__vfma(vB, dwe, vz)));
    accW = titans__vfma(dwe, wv, accW);
    accWS = titans__vfma(dwe, sv, accWS);
    accS = titans__vfma(dse, sv, accS);
  }
  float dw = titans__vsum(accW), dws = titans__vsum(accWS), ds = titans__vsum(accS);
  for (size_t j = i; j < sz; j++) { /* 0 + x, as the vector fma(a, b, 0) rounds a -0 product to +0 */
    float zw = 0.0f, zs = 0.0f;
    zw += An * dWe[j];
    zs += Bn * dWe[j];
    dW[j] = zw;
    dS[j] = zs + En * dSe[j];
  }
  for (size_t j = i; j < sz; j++) dw += dWe[j] * w[j];
  for (size_t j = i; j < sz; j++) dws += dWe[j] * s[j];
  for (size_t j = i; j < sz; j++) ds += dSe[j] * s[j];
  dots[0] = dw;
  dots[1] = dws;
  dots[2] = ds;
}

/* The backward of one whole chunk (a piece starting at a chunk start, so the inner gradients are taken at
   w), in the stages below, each a function: the forward again (titans__mem_chunk_forward), then the
   gradient through the chunk-end state, the query path, the coefficients and the surprise bound, the key
   path, and last the sums into the caller's arrays. Between stages the gradients live in wk. */

/* Zeroes wk's accumulators for a piece of n tokens (wk->dW, wk->dS are set, not accumulated, by their
   first writes in titans__mem_end_state_backward). */
static void titans__mem_work_zero_grads(const titans__mem_dims *m, titans__mem_work *wk, size_t n) {
  const size_t L = m->L, dh = m->dh;
  memset(wk->dA, 0, n * sizeof(float));
  memset(wk->dB, 0, n * sizeof(float));
  memset(wk->dE, 0, n * sizeof(float));
  memset(wk->dth, 0, n * sizeof(float));
  memset(wk->det, 0, n * sizeof(float));
  memset(wk->dal, 0, n * sizeof(float));
  memset(wk->dC, 0, n * n * sizeof(float));
  memset(wk->dD, 0, n * n * sizeof(float));
  for (size_t i = 0; i < L; i++) {
    memset(wk->ddelta[i], 0, n * m->n[i + 1] * sizeof(float));
    memset(wk->dzk[i], 0, n * m->n[i + 1] * sizeof(float));
    memset(wk->dak[i], 0, n * m->n[i] * sizeof(float));
  }
  memset(wk->dq, 0, n * dh * sizeof(float));
  memset(wk->dv, 0, n * dh * sizeof(float));
}

/* From wk->dWend, wk->dSend (the gradient of the state after the chunk): sets wk->dW, wk->dS and adds
   into the coefficients' gradients (dA, dB, dE, the last rows of dC, dD), dak and ddelta. */
static void titans__mem_end_state_backward(const titans__mem_dims *m, titans__mem_work *wk, const float *w,
                                           const float *s, size_t n) {
  const size_t L = m->L;
  /* State after the chunk: W' = A_n W + B_n S - delta^T diag(c) ak; S' = E_n S - delta^T diag(dd) ak. */
  const float *crow = wk->cC + (n - 1) * n, *drow = wk->cD + (n - 1) * n;
  float *dcrow = wk->dC + (n - 1) * n, *ddrow = wk->dD + (n - 1) * n;
  const float decay[3] = {wk->cA[n - 1], wk->cB[n - 1], wk->cE[n - 1]};
  for (size_t i = 0; i < L; i++) {
    size_t ni = m->n[i], no = m->n[i + 1], sz = ni * no, o = m->wofs[i];
    const float *dWe = wk->dWend + o, *dSe = wk->dSend + o;
    float dots[3];
    titans__mem_end_state_grad(wk->dW + o, wk->dS + o, dots, dWe, dSe, w + o, s + o, decay, sz);
    wk->dA[n - 1] += dots[0];
    wk->dB[n - 1] += dots[1];
    wk->dE[n - 1] += dots[2];
    /* through ak: R1 = delta dW', R2 = delta dS' [n, ni] */
    titans_gemm(0, 0, n, ni, no, 1.0f, titans_cm(wk->delta[i], no), titans_cm(dWe, ni), 0.0f, titans_m(wk->tmp, ni));
    titans_gemm(0, 0, n, ni, no, 1.0f, titans_cm(wk->delta[i], no), titans_cm(dSe, ni), 0.0f, titans_m(wk->tmp2, ni));
    titans__rowdot_acc(dcrow, -1.0f, wk->tmp, wk->ak[i], n, ni);
    titans__rowdot_acc(ddrow, -1.0f, wk->tmp2, wk->ak[i], n, ni);
    for (size_t t = 0; t < n; t++)
      for (size_t j = 0; j < ni; j++)
        wk->dak[i][t * ni + j] -= crow[t] * wk->tmp[t * ni + j] + drow[t] * wk->tmp2[t * ni + j];
    /* through delta: Q1 = ak dW'^T, Q2 = ak dS'^T [n, no] */
    titans_gemm(0, 1, n, no, ni, 1.0f, titans_cm(wk->ak[i], ni), titans_cm(dWe, ni), 0.0f, titans_m(wk->tmp, no));
    titans_gemm(0, 1, n, no, ni, 1.0f, titans_cm(wk->ak[i], ni), titans_cm(dSe, ni), 0.0f, titans_m(wk->tmp2, no));
    for (size_t t = 0; t < n; t++)
      for (size_t j = 0; j < no; j++)
        wk->ddelta[i][t * no + j] -= crow[t] * wk->tmp[t * no + j] + drow[t] * wk->tmp2[t * no + j];
  }
}

/* The query path, last layer first, from dy [n, ld] (the gradient of y): adds into wk->dq, dA, dB, dC,
   ddelta, dak, dW and dS. */
static void titans__mem_query_backward(const titans__mem_dims *m, int residual, titans__mem_work *wk, const float *dy,
                                       size_t ld, const float *w, const float *s, size_t n) {
  const size_t L = m->L, dh = m->dh;
  /* dz = d zq[i] */
  titans__copy_rows(wk->dz, dy, n, dh, ld);
  if (residual) titans__add_rows(wk->dq, dh, wk->dz, n, dh);
  for (size_t i = L; i-- > 0;) {
    size_t ni = m->n[i], no = m->n[i + 1], o = m->wofs[i];
    /* zq[i] = diag(A) p1 + diag(B) p2 - (C o mx) delta[i] */
    titans__rowdot_acc(wk->dA, 1.0f, wk->dz, wk->p1[i], n, no);
    titans__rowdot_acc(wk->dB, 1.0f, wk->dz, wk->p2[i], n, no);
    titans_gemm(0, 1, n, n, no, 1.0f, titans_cm(wk->dz, no), titans_cm(wk->delta[i], no), 0.0f, titans_m(wk->t1, n));
    for (size_t t = 0; t < n; t++)
      for (size_t j = 0; j < n; j++) {
        size_t tj = t * n + j;
        wk->dC[tj] -= wk->t1[tj] * wk->mx[i][tj];
        wk->dmx[tj] = -wk->cC[tj] * wk->t1[tj];
        wk->cm[tj] = wk->cC[tj] * wk->mx[i][tj];
      }
    titans_gemm(1, 0, n, no, n, -1.0f, titans_cm(wk->cm, n), titans_cm(wk->dz, no), 1.0f, titans_m(wk->ddelta[i], no));
    titans__scale_rows(wk->dp1, wk->cA, wk->dz, n, no);
    titans__scale_rows(wk->dp2, wk->cB, wk->dz, n, no);
    /* p1 = aq W^T, p2 = aq S^T, mx = aq ak^T */
    titans_gemm(0, 0, n, ni, no, 1.0f, titans_cm(wk->dp1, no), titans_cm(w + o, ni), 0.0f, titans_m(wk->daq, ni));
    titans_gemm(0, 0, n, ni, no, 1.0f, titans_cm(wk->dp2, no), titans_cm(s + o, ni), 1.0f, titans_m(wk->daq, ni));
    titans_gemm(0, 0, n, ni, n, 1.0f, titans_cm(wk->dmx, n), titans_cm(wk->ak[i], ni), 1.0f, titans_m(wk->daq, ni));
    titans_gemm(1, 0, no, ni, n, 1.0f, titans_cm(wk->dp1, no), titans_cm(wk->aq[i], ni), 1.0f,
                titans_m(wk->dW + o, ni));
    titans_gemm(1, 0, no, ni, n, 1.0f, titans_cm(wk->dp2, no), titans_cm(wk->aq[i], ni), 1.0f,
                titans_m(wk->dS + o, ni));
    titans_gemm(1, 0, n, ni, n, 1.0f, titans_cm(wk->dmx, n), titans_cm(wk->aq[i], ni), 1.0f, titans_m(wk->dak[i], ni));
    if (i > 0) {
      /* aq[i] = SiLU(zq[i-1]) */
      for (size_t j = 0; j < n * ni; j++) wk->dz[j] = wk->daq[j] * titans__silu_d1(wk->zq[i - 1][j], wk->sq[i - 1][j]);
    } else {
      for (size_t j = 0; j < n * dh; j++) wk->dq[j] += wk->daq[j];
    }
  }
}

/* The key path, the error recursion first, then the layers from the last: adds into wk->ddelta, dzk,
   dak, dv and dW. Reads no coefficient (titans__mem_coeffs_backward may run before it). */
static void titans__mem_key_backward(const titans__mem_dims *m, int residual, titans__mem_work *wk, const float *w,
                                     size_t n) {
  const size_t L = m->L, dh = m->dh;
  /* The error recursion: delta[i] = gk[i] o SiLU'(zk[i]), gk[i] = delta[i+1] W_{i+1}. */
  for (size_t i = 0; i + 1 < L; i++) {
    size_t no = m->n[i + 1], nn = m->n[i + 2], o1 = m->wofs[i + 1];
    float *dg = wk->tmp;
    for (size_t j = 0; j < n * no; j++) {
      float z = wk->zk[i][j];
      float sg = wk->sk[i][j];
      dg[j] = wk->ddelta[i][j] * titans__silu_d1(z, sg);
      wk->dzk[i][j] += wk->ddelta[i][j] * wk->gk[i][j] * titans__silu_d2(z, sg);
    }
    titans_gemm(0, 1, n, nn, no, 1.0f, titans_cm(dg, no), titans_cm(w + o1, no), 1.0f, titans_m(wk->ddelta[i + 1], nn));
    titans_gemm(1, 0, nn, no, n, 1.0f, titans_cm(wk->delta[i + 1], nn), titans_cm(dg, no), 1.0f,
                titans_m(wk->dW + o1, no));
  }
  /* delta[L-1] = 2 (zk[L-1] + residual k - v) */
  for (size_t j = 0; j < n * dh; j++) {
    float g = 2.0f * wk->ddelta[L - 1][j];
    wk->dzk[L - 1][j] += g;
    wk->dv[j] -= g;
    if (residual) wk->dak[0][j] += g;
  }
  /* zk[i] = ak[i] W_i^T, ak[i] = SiLU(zk[i-1]) */
  for (size_t i = L; i-- > 0;) {
    size_t ni = m->n[i], no = m->n[i + 1], o = m->wofs[i];
    titans_gemm(1, 0, no, ni, n, 1.0f, titans_cm(wk->dzk[i], no), titans_cm(wk->ak[i], ni), 1.0f,
                titans_m(wk->dW + o, ni));
    titans_gemm(0, 0, n, ni, no, 1.0f, titans_cm(wk->dzk[i], no), titans_cm(w + o, ni), 1.0f, titans_m(wk->dak[i], ni));
    if (i > 0)
      for (size_t j = 0; j < n * ni; j++)
        wk->dzk[i - 1][j] += wk->dak[i][j] * titans__silu_d1(wk->zk[i - 1][j], wk->sk[i - 1][j]);
  }
}

/* Adds the piece's gradients, gathered in wk, into the caller's arrays g (laid out as the chunk c). */
static void titans__mem_chunk_grad_add(const titans__mem_dims *m, const titans__mem_chunk_grad *g,
                                       const titans__mem_chunk *c, const titans__mem_work *wk) {
  const size_t n = c->n, dh = m->dh;
  for (size_t t = 0; t < n; t++) {
    g->dtheta[t * c->gstride] += wk->dth[t];
    g->deta[t * c->gstride] += wk->det[t];
    g->dalpha[t * c->gstride] += wk->dal[t];
  }
  titans__add_rows(g->dq, c->ld, wk->dq, n, dh);
  titans__add_rows(g->dk, c->ld, wk->dak[0], n, dh);
  titans__add_rows(g->dv, c->ld, wk->dv, n, dh);
}

/* Backward of one whole chunk c. Inputs: w, s [head_size] the state at the chunk start; dy [n, ld] the
   gradient of y; wk->dWend, wk->dSend the gradient of the state after the chunk. Outputs: wk->dW, wk->dS
   the gradient of the state at the chunk start; accumulates into g. */
static void titans__mem_chunk_backward(const titans__mem_dims *m, int residual, const titans__mem_chunk_grad *g,
                                       const float *dy, const titans__mem_chunk *c, const float *w, const float *s,
                                       titans__mem_work *wk) {
  const size_t n = c->n;
  titans__mem_chunk_forward(m, residual, NULL, c, w, w, s, wk);
  titans__mem_work_zero_grads(m, wk, n);
  titans__mem_end_state_backward(m, wk, w, s, n);
  titans__mem_query_backward(m, residual, wk, dy, c->ld, w, s, n);
  /* per_token_grad: the solve for the errors adds into the coefficients' gradients, so it goes first */
  if (m->exact) titans__mem_delta_solve_backward(m, residual, wk, w, s, n);
  /* The gates through the coefficients (complete here: the key path reads no coefficient), then the
     surprise bound, whose scale depends on the key path's errors and activations. */
  const titans__mem_coeffs_view coeffs = {wk->cA, wk->cB, wk->cE, wk->cC, wk->cD};
  const titans__mem_coeffs_view dcoeffs = {wk->dA, wk->dB, wk->dE, wk->dC, wk->dD};
  titans__mem_coeffs_backward(wk->dth, wk->det, wk->dal, &dcoeffs, &coeffs, wk->et, wk->al, n);
  titans__mem_bound_steps_backward(m, wk, c->theta, c->gstride, n);
  if (!m->exact) titans__mem_key_backward(m, residual, wk, w, n);
  titans__mem_chunk_grad_add(m, g, c, wk);
}

/* ---- the least-squares memory (least_squares, docs/model.md 1.11) ----------------------------- */

/* G *= keep_g [head_size], its subnormal results set to zero (a decaying G would otherwise leave them, and
   arithmetic on them is slow on many CPUs; titans__mem_state_out flushes a gradient memory's state alike). */
static void titans__mem_ls_decay(float *g, float keep_g, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = keep_g * g[i];
    g[i] = fabsf(x) < FLT_MIN ? 0.0f : x;
  }
}

/* n tokens of one head of the least-squares memory from the state (W, G) = (w, g), [dh, dh] each, updated
   in place; the reads into y [n, ld] (NULL: none). P = I - G is the inverse of I + the sum of
   theta_s k_s k_s^T over the tokens so far, and each token t (beta_t = theta_t, its write gate) does
     u_t = P k_t,  s_t = k_t . u_t,  r_t = beta_t / (1 + beta_t max(s_t, 0)),  e_t = v_t - W k_t,
     W += r_t e_t u_t^T,  G += r_t u_t u_t^T,  y_t = W q_t.
   By Sherman-Morrison r_t u_t = beta_t P_t k_t (P_t: the inverse after token t), so W stays the weighted
   least-squares fit of docs/model.md 1.11; s_t lies in [0, 1] exactly, the max only guards rounding.
   With forgetting (alpha_t > 0; 0 under no_forget) the token first decays the fit's confidence,
   G *= 1 - alpha_t, i.e. P moves toward I by alpha_t: W keeps its values, but a new key is written as
   if fewer tokens had been fitted before it (model.md 1.11); G stays within [0, I).
   keep [n + 1, 2, head_size] (NULL: none) receives (W, G) before each token (before its decay).
   Leaves u, e, r and s in wk. */
static void titans__mem_ls_forward(const titans__mem_dims *m, float *y, const titans__mem_chunk *c, float *w,
                                   float *g, float *keep, titans__mem_work *wk) {
  const size_t dh = m->dh, hs = m->head_size, ld = c->ld;
  for (size_t t = 0; t < c->n; t++) {
    const float *k = c->k + t * ld, *v = c->v + t * ld, beta = c->theta[t * c->gstride],
                alpha = c->alpha[t * c->gstride];
    float *u = wk->lsu + t * dh, *e = wk->lse + t * dh; /* [dh] */
    if (keep) {
      memcpy(keep + t * 2 * hs, w, hs * sizeof(float));
      memcpy(keep + t * 2 * hs + hs, g, hs * sizeof(float));
    }
    if (alpha != 0.0f) titans__mem_ls_decay(g, 1.0f - alpha, hs);
    for (size_t o = 0; o < dh; o++) {
      u[o] = k[o] - titans__dot(g + o * dh, k, dh);
      e[o] = v[o] - titans__dot(w + o * dh, k, dh);
    }
    float s = titans__dot(k, u, dh), r = beta / (1.0f + beta * (s > 0.0f ? s : 0.0f));
    wk->lss[t] = s;
    wk->lsr[t] = r;
    for (size_t o = 0; o < dh; o++) {
      titans__axpy(w + o * dh, r * e[o], u, dh);
      titans__axpy(g + o * dh, r * u[o], u, dh);
    }
    if (y)
      for (size_t o = 0; o < dh; o++) y[t * ld + o] = titans__dot(w + o * dh, c->q + t * ld, dh);
  }
}

/* Backward of titans__mem_ls_forward over one chunk c from its start state (w, g): wk->dWend, dSend hold
   dL/d(W, G) after the chunk; writes dL/d(W, G) at its start into wk->dW, dS and adds the tokens'
   gradients (dq, dk, dv, dtheta) into gd. It recomputes the chunk keeping (W, G) before each token, then
   goes back token by token with dense adjoints dW, dG; for token t, W' its weights after:
     y = W' q:                 dW += dy q^T, dq = W'^T dy
     W' = W + r e u^T, G' = G + r u u^T:
                               dr = e . dW u + u . dG u, de = r dW u, du = r (dW^T e + (dG + dG^T) u)
     e = v - W k:              dv = de, dk = -W^T de, dW -= de k^T
     r = beta / (1 + beta s):  dbeta = dr / (1 + beta s)^2, ds = -dr beta^2 / (1 + beta s)^2 (0 if s < 0)
     s = k . u, u = k - a G k: du += ds k, dk += ds u + du - a G^T du, dG -= du k^T
     the decay G *= a (a = 1 - alpha, G here the state before it): dalpha = -sum(G .* dG), dG *= a.
   (The flush of the decay's subnormals is taken as the identity.) */
static void titans__mem_ls_backward(const titans__mem_dims *m, const titans__mem_chunk_grad *gd, const float *dy,
                                    const titans__mem_chunk *c, const float *w, const float *g, titans__mem_work *wk) {
  const size_t dh = m->dh, hs = m->head_size, ld = c->ld, n = c->n;
  float *run = wk->lskeep + n * 2 * hs; /* [2, head_size] the running state: the chunk's end once recomputed */
  memcpy(run, w, hs * sizeof(float));
  memcpy(run + hs, g, hs * sizeof(float));
  titans__mem_ls_forward(m, NULL, c, run, run + hs, wk->lskeep, wk);
  float *dW = wk->dW, *dG = wk->dS; /* [dh, dh] the adjoints of the state after the token at hand */
  memcpy(dW, wk->dWend, hs * sizeof(float));
  memcpy(dG, wk->dSend, hs * sizeof(float));
  float *dWu = wk->lsvec, *dWe = dWu + dh, *du = dWe + dh, *de = du + dh, *dq = de + dh, *dk = dq + dh; /* [dh] */
  for (size_t t = n; t-- > 0;) {
    const float *k = c->k + t * ld, *q = c->q + t * ld, *dyt = dy + t * ld, *u = wk->lsu + t * dh,
                *e = wk->lse + t * dh;
    const float *wb = wk->lskeep + t * 2 * hs, *gb = wb + hs, *wa = wb + 2 * hs; /* W, G before; W after */
    const float beta = c->theta[t * c->gstride], a = 1.0f - c->alpha[t * c->gstride], r = wk->lsr[t], s = wk->lss[t];
    memset(dq, 0, dh * sizeof(float));
    for (size_t o = 0; o < dh; o++) {
      titans__axpy(dq, dyt[o], wa + o * dh, dh);
      titans__axpy(dW + o * dh, dyt[o], q, dh);
    }
    float dr = 0.0f;
    memset(dWe, 0, dh * sizeof(float));
    memset(du, 0, dh * sizeof(float));
    for (size_t o = 0; o < dh; o++) {
      float gu = titans__dot(dG + o * dh, u, dh); /* (dG u)_o */
      dWu[o] = titans__dot(dW + o * dh, u, dh);
      dr += e[o] * dWu[o] + u[o] * gu;
      du[o] += r * gu;
      titans__axpy(du, r * u[o], dG + o * dh, dh); /* r dG^T u */
      titans__axpy(dWe, e[o], dW + o * dh, dh);    /* dW^T e */
    }
    titans__axpy(du, r, dWe, dh);
    memset(dk, 0, dh * sizeof(float));
    for (size_t o = 0; o < dh; o++) {
      de[o] = r * dWu[o];
      titans__axpy(dk, -de[o], wb + o * dh, dh);
      titans__axpy(dW + o * dh, -de[o], k, dh);
    }
    float den = 1.0f + beta * (s > 0.0f ? s : 0.0f);
    float dbeta = dr / (den * den), ds = s > 0.0f ? -dr * beta * beta / (den * den) : 0.0f;
    titans__axpy(dk, ds, u, dh);
    titans__axpy(du, ds, k, dh);
    titans__axpy(dk, 1.0f, du, dh);
    for (size_t o = 0; o < dh; o++) {
      titans__axpy(dk, -a * du[o], gb + o * dh, dh);
      titans__axpy(dG + o * dh, -du[o], k, dh);
    }
    if (a != 1.0f) { /* dG is now the adjoint of the decayed G: carry it back through the decay */
      gd->dalpha[t * c->gstride] -= titans__dot(gb, dG, hs);
      for (size_t i = 0; i < hs; i++) dG[i] *= a;
    }
    titans__axpy(gd->dq + t * ld, 1.0f, dq, dh);
    titans__axpy(gd->dk + t * ld, 1.0f, dk, dh);
    titans__axpy(gd->dv + t * ld, 1.0f, de, dh);
    gd->dtheta[t * c->gstride] += dbeta;
  }
}

/* ---- streaming state -------------------------------------------------------------------------- */

TITANSDEF int titans_mem_state_init(titans_mem_state *st, const titans_mem_config *cfg, size_t batch) {
  memset(st, 0, sizeof *st);
  int rc = titans_mem_config_check(cfg, st->error);
  if (rc) return rc;
  if (batch < 1 || batch > ((size_t)1 << 24))
    return titans__error(st->error, TITANS_ERR_ARG, "memory state: batch = %zu", batch);
  titans__mem_dims m = titans__mem_get_dims(cfg);
  st->cfg = *cfg;
  st->batch = batch;
  st->head_size = m.head_size;
  size_t per_row = 0, tail = m.K > 0 ? (m.K - 1) * m.dm : 0, total;
  /* 4 weight-sized buffers per head, 4 conv tails per row */
  if (!titans_size_mul(m.H, m.head_size, &per_row) || !titans_size_mul(per_row, 4, &per_row) ||
      !titans_size_add(per_row, 4 * tail, &per_row) || !titans_size_mul(per_row, batch, &total))
    return titans__error(st->error, TITANS_ERR_NOMEM, "memory state: size overflow");
  float *slab = titans_alloc_floats(total);
  if (!slab) return titans__error(st->error, TITANS_ERR_NOMEM, "memory state: cannot allocate %zu floats", total);
  size_t wsz = batch * m.H * m.head_size, tsz = batch * tail;
  st->w_chunk = slab;
  st->w = slab + wsz;
  st->s_chunk = slab + 2 * wsz;
  st->s = slab + 3 * wsz;
  st->tail_q = slab + 4 * wsz;
  st->tail_k = st->tail_q + tsz;
  st->tail_v = st->tail_k + tsz;
  st->tail_rq = st->tail_v + tsz;
  return TITANS_OK;
}

TITANSDEF void titans_mem_state_free(titans_mem_state *st) {
  titans_free(st->w_chunk);
  titans_free(st->scratch);
  memset(st, 0, sizeof *st);
}

/* Floats of the state's slab (weights, momentum, tails), which save/load/copy move as one block. */
static size_t titans__mem_state_slab_floats(const titans_mem_state *st) {
  titans__mem_dims m = titans__mem_get_dims(&st->cfg);
  size_t tail = m.K > 0 ? (m.K - 1) * m.dm : 0;
  return st->batch * (4 * m.H * m.head_size + 4 * tail);
}

/* Row r of the state back to the start of a sequence: W = w0, S = 0, conv tails zero (the position,
   shared by the rows, is left alone). */
static void titans__mem_state_reset_row(titans_mem_state *st, const titans_mem_weights *w, size_t r) {
  titans__mem_dims m = titans__mem_get_dims(&st->cfg);
  size_t row = m.H * m.head_size, tail = m.K > 0 ? (m.K - 1) * m.dm : 0;
  for (size_t h = 0; h < m.H; h++) {
    float *wr = st->w + (r * m.H + h) * m.head_size; /* [head_size] */
    for (size_t i = 0; i < m.L; i++) {
      size_t sz = m.n[i + 1] * m.n[i];
      memcpy(wr + m.wofs[i], w->w0[i] + h * sz, sz * sizeof(float));
    }
  }
  memcpy(st->w_chunk + r * row, st->w + r * row, row * sizeof(float));
  memset(st->s_chunk + r * row, 0, row * sizeof(float));
  memset(st->s + r * row, 0, row * sizeof(float));
  float *tails[4] = {st->tail_q, st->tail_k, st->tail_v, st->tail_rq};
  for (int i = 0; i < 4; i++) memset(tails[i] + r * tail, 0, tail * sizeof(float));
}

TITANSDEF void titans_mem_state_reset(titans_mem_state *st, const titans_mem_weights *w) {
  for (size_t r = 0; r < st->batch; r++) titans__mem_state_reset_row(st, w, r);
  st->position = 0;
}

TITANSDEF int titans_mem_state_copy(titans_mem_state *dst, const titans_mem_state *src) {
  if (dst->batch != src->batch || memcmp(&dst->cfg, &src->cfg, sizeof src->cfg) != 0)
    return titans__error(dst->error, TITANS_ERR_ARG, "memory state copy: configurations or batch sizes differ");
  memcpy(dst->w_chunk, src->w_chunk, titans__mem_state_slab_floats(src) * sizeof(float));
  dst->position = src->position;
  return TITANS_OK;
}

/* Row dr of dst becomes row sr of src: weights, momentum and the four conv tails (not the position). */
static void titans__mem_state_copy_row(titans_mem_state *dst, size_t dr, const titans_mem_state *src, size_t sr) {
  titans__mem_dims m = titans__mem_get_dims(&src->cfg);
  size_t row = m.H * m.head_size, tail = m.K > 0 ? (m.K - 1) * m.dm : 0;
  float *to[8] = {dst->w_chunk, dst->w, dst->s_chunk, dst->s, dst->tail_q, dst->tail_k, dst->tail_v, dst->tail_rq};
  const float *from[8] = {src->w_chunk, src->w,      src->s_chunk, src->s,
                          src->tail_q,  src->tail_k, src->tail_v,  src->tail_rq};
  for (int i = 0; i < 8; i++) {
    size_t n = i < 4 ? row : tail;
    if (n) memcpy(to[i] + dr * n, from[i] + sr * n, n * sizeof(float));
  }
}

/* dst takes src's memory, momentum, position and update-stream conv tails, and keeps its own
   retrieval-stream tail (MAC commits the memory at a segment start this way). */
static void titans__mem_state_commit(titans_mem_state *dst, const titans_mem_state *src) {
  titans__mem_dims m = titans__mem_get_dims(&src->cfg);
  size_t tail = src->batch * (m.K > 0 ? (m.K - 1) * m.dm : 0);
  memcpy(dst->w_chunk, src->w_chunk, (titans__mem_state_slab_floats(src) - tail) * sizeof(float));
  dst->position = src->position;
}

/* Layout of a saved state: [position as two floats holding 24-bit halves... ] -- see below. */
TITANSDEF size_t titans_mem_state_floats(const titans_mem_state *st) { return 3 + titans__mem_state_slab_floats(st); }

/* The position is stored exactly as three 21-bit pieces (each a float integer < 2^21), so any position
   below 2^63 round-trips through float storage. */
TITANSDEF void titans_mem_state_save(const titans_mem_state *st, float *buf) {
  uint64_t p = (uint64_t)st->position;
  buf[0] = (float)(p & 0x1FFFFF);
  buf[1] = (float)((p >> 21) & 0x1FFFFF);
  buf[2] = (float)((p >> 42) & 0x1FFFFF);
  memcpy(buf + 3, st->w_chunk, titans__mem_state_slab_floats(st) * sizeof(float));
}

TITANSDEF int titans_mem_state_load(titans_mem_state *st, const float *buf, size_t count) {
  if (count != titans_mem_state_floats(st))
    return titans__error(st->error, TITANS_ERR_FORMAT, "memory state load: %zu floats, want %zu", count,
                         titans_mem_state_floats(st));
  uint64_t p = 0;
  for (int i = 0; i < 3; i++) {
    float f = buf[i];
    if (!(f >= 0.0f && f < 2097152.0f) || f != floorf(f))
      return titans__error(st->error, TITANS_ERR_FORMAT, "memory state load: bad position field");
    p |= (uint64_t)f << (21 * i);
  }
  size_t n = titans__mem_state_slab_floats(st);
  for (size_t i = 0; i < n; i++)
    if (!isfinite(buf[3 + i]))
      return titans__error(st->error, TITANS_ERR_FORMAT, "memory state load: non-finite value");
  memcpy(st->w_chunk, buf + 3, n * sizeof(float));
  st->position = (long long)p;
  return TITANS_OK;
}

TITANSDEF void titans_mem_ctx_init(titans_mem_ctx *ctx) { memset(ctx, 0, sizeof *ctx); }

/* The stage timers' clock: wall seconds (C11's timespec_get, so no POSIX clock is needed). */
static double titans__mem_clock(const titans_mem_ctx *ctx) {
  if (!ctx || !ctx->stage_seconds) return 0.0;
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Adds the time since *since to ctx's timer of stage and restarts *since (no timers: nothing). */
static void titans__mem_stage_done(titans_mem_ctx *ctx, int stage, double *since) {
  if (!ctx || !ctx->stage_seconds) return;
  double now = titans__mem_clock(ctx);
  ctx->stage_seconds[stage] += now - *since;
  *since = now;
}

TITANSDEF void titans_mem_ctx_free(titans_mem_ctx *ctx) {
  titans_free(ctx->proj);
  titans_free(ctx->states);
  titans_free(ctx->grad_work);
  memset(ctx, 0, sizeof *ctx);
}

/* ---- layer buffers ---------------------------------------------------------------------------- */

/* Per-call activations of B x T tokens (in a ctx for training, in the state's scratch otherwise). */
typedef struct titans__mem_bufs {
  float *proj[3];  /* [B, T, d_m] q, k, v projections */
  float *conv[3];  /* [B, T, d_m] conv outputs (= proj without conv) */
  float *act[3];   /* [B, T, d_m] SiLU outputs; act[2] is v */
  float *qk[2];    /* [B, T, d_m] L2-normalised q, k */
  float *rnorm[2]; /* [B, T, H] */
  float *gates[3]; /* [B, T, H] theta, eta, alpha */
  float *y, *yn, *g, *gated; /* [B, T, d_m] */
  float *rstd;     /* [B, T, H] */
} titans__mem_bufs;

static size_t titans__mem_bufs_carve(titans__mem_bufs *bf, float *base, const titans__mem_dims *m, size_t bt) {
  size_t used = 0, v = bt * m->dm, s = bt * m->H;
  for (int i = 0; i < 3; i++) bf->proj[i] = titans__take(base, &used, v);
  for (int i = 0; i < 3; i++) bf->conv[i] = m->K > 0 ? titans__take(base, &used, v) : bf->proj[i];
  for (int i = 0; i < 3; i++) bf->act[i] = titans__take(base, &used, v);
  for (int i = 0; i < 2; i++) bf->qk[i] = titans__take(base, &used, v);
  for (int i = 0; i < 2; i++) bf->rnorm[i] = titans__take(base, &used, s);
  for (int i = 0; i < 3; i++) bf->gates[i] = titans__take(base, &used, s);
  bf->y = titans__take(base, &used, v);
  bf->yn = titans__take(base, &used, v);
  bf->g = titans__take(base, &used, v);
  bf->gated = titans__take(base, &used, v);
  bf->rstd = titans__take(base, &used, s);
  return used;
}

/* The piece of n tokens whose first token's row is o in bf's [B, T, d_m] rows and g in its [B, T, H] gates
   (one head's slice: o and g include its column h d_h, h). */
static titans__mem_chunk titans__mem_piece_of(const titans__mem_dims *m, const titans__mem_bufs *bf, size_t o,
                                              size_t g, size_t n) {
  const titans__mem_chunk c = {bf->qk[0] + o,    bf->qk[1] + o,    bf->act[2] + o, bf->gates[0] + g,
                               bf->gates[1] + g, bf->gates[2] + g, m->dm,          m->H,
                               n};
  return c;
}

/* Grows *buf to at least count floats (contents lost). */
static int titans__reserve(float **buf, size_t *cap, size_t count) {
  if (*cap >= count && *buf) return 1;
  titans_free(*buf);
  *buf = titans_alloc_floats(count);
  *cap = *buf ? count : 0;
  return *buf != NULL;
}

static int titans__mem_thread_id(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/* ---- input and output paths, each forward beside its backward --------------------------------- */

/* tail [K-1, dm] becomes the last K-1 rows of [tail; seq], seq [T, dm]. */
static void titans__mem_tail_advance(float *tail, const float *seq, size_t T, size_t K1, size_t dm) {
  if (K1 == 0) return;
  if (T >= K1) {
    memcpy(tail, seq + (T - K1) * dm, K1 * dm * sizeof(float));
  } else {
    memmove(tail, tail + T * dm, (K1 - T) * dm * sizeof(float));
    memcpy(tail + (K1 - T) * dm, seq, T * dm * sizeof(float));
  }
}

/* Gradients of the layer's intermediate vectors during a backward. */
typedef struct titans__mem_grads {
  float *dgated, *dyn, *tmp, *dg, *dy; /* [B, T, d_m] */
  float *dvec[3];                      /* [B, T, d_m] d q, d k, d v (after L2Norm / SiLU) */
  float *dact, *dconv, *dproj;         /* [B, T, d_m] reused per stream */
  float *dgates[3];                    /* [B, T, H] d theta, d eta, d alpha, then of their logits */
} titans__mem_grads;

static size_t titans__mem_grads_carve(titans__mem_grads *gr, float *base, const titans__mem_dims *m, size_t bt) {
  size_t used = 0, v = bt * m->dm;
  gr->dgated = titans__take(base, &used, v);
  gr->dyn = titans__take(base, &used, v);
  gr->tmp = titans__take(base, &used, v);
  gr->dg = titans__take(base, &used, v);
  gr->dy = titans__take(base, &used, v);
  for (int i = 0; i < 3; i++) gr->dvec[i] = titans__take(base, &used, v);
  gr->dact = titans__take(base, &used, v);
  gr->dconv = titans__take(base, &used, v);
  gr->dproj = titans__take(base, &used, v);
  for (int i = 0; i < 3; i++) gr->dgates[i] = titans__take(base, &used, bt * m->H);
  return used;
}

/* gate_key: the write gate's logits z [bt, H] += lr_k[h] . k_t^h, k [bt, d_m] the L2-normalised keys. */
static void titans__mem_gate_key_forward(const titans__mem_dims *m, const float *lr_k, const float *k, float *z,
                                         size_t bt) {
  for (size_t t = 0; t < bt; t++)
    for (size_t h = 0; h < m->H; h++)
      z[t * m->H + h] += titans__dot(lr_k + h * m->dh, k + t * m->dm + h * m->dh, m->dh);
}

/* Its backward from dz [bt, H], the gradient of the logits: d k [bt, d_m] and d lr_k [H, d_h] added into. */
static void titans__mem_gate_key_backward(const titans__mem_dims *m, const float *lr_k, const float *k, const float *dz,
                                          float *dk, float *dlr_k, size_t bt) {
  for (size_t t = 0; t < bt; t++)
    for (size_t h = 0; h < m->H; h++) {
      float g = dz[t * m->H + h];
      titans__axpy(dk + t * m->dm + h * m->dh, g, lr_k + h * m->dh, m->dh);
      titans__axpy(dlr_k + h * m->dh, g, k + t * m->dm + h * m->dh, m->dh);
    }
}

/* q (nstreams = 1) or q, k, v and the gates (nstreams = 3) of B x T tokens x [B, T, d].
   tails[s] [B, K-1, d_m] are the conv histories (advanced here); saved[s] (may be NULL) receives a copy of
   them before they advance. */
static void titans__mem_inputs_forward(const titans__mem_dims *m, const titans_mem_config *cfg,
                                       const titans_mem_weights *w, titans__mem_bufs *bf, float *const *tails,
                                       float *const *saved, const float *x, size_t B, size_t T, int nstreams) {
  size_t bt = B * T, K1 = m->K > 0 ? m->K - 1 : 0;
  const float *proj_w[3] = {w->wq, w->wk, w->wv}, *conv_w[3] = {w->conv_q, w->conv_k, w->conv_v};
  for (int si = 0; si < nstreams; si++) {
    titans_gemm(0, 1, bt, m->dm, m->d, 1.0f, titans_cm(x, m->d), titans_cm(proj_w[si], m->d), 0.0f,
                titans_m(bf->proj[si], m->dm));
    if (m->K > 0) {
      if (saved && saved[si]) memcpy(saved[si], tails[si], B * K1 * m->dm * sizeof(float));
      for (size_t r = 0; r < B; r++) {
        float *tail = tails[si] + r * K1 * m->dm;
        const float *in = bf->proj[si] + r * T * m->dm;
        titans_conv_forward(bf->conv[si] + r * T * m->dm, in, tail, conv_w[si], T, m->dm, m->K);
        titans__mem_tail_advance(tail, in, T, K1, m->dm);
      }
    }
    if (si < 2 && m->qk_linear)
      memcpy(bf->act[si], bf->conv[si], bt * m->dm * sizeof(float));
    else
      titans_silu_forward(bf->act[si], bf->conv[si], bt * m->dm);
    if (si < 2) titans_l2norm_forward(bf->qk[si], bf->rnorm[si], bf->act[si], bt * m->H, m->dh);
  }
  if (nstreams < 3) return;
  /* gates: theta = theta_max sigmoid(lr_w x + lr_b), eta = sigmoid(mom_w x + mom_b), alpha likewise */
  const float *gate_w[3] = {w->lr_w, w->mom_w, w->decay_w}, *gate_b[3] = {w->lr_b, w->mom_b, w->decay_b};
  for (int gi = 0; gi < 3; gi++) {
    float *g = bf->gates[gi];
    titans_gemm(0, 1, bt, m->H, m->d, 1.0f, titans_cm(x, m->d), titans_cm(gate_w[gi], m->d), 0.0f, titans_m(g, m->H));
    for (size_t t = 0; t < bt; t++)
      for (size_t h = 0; h < m->H; h++) g[t * m->H + h] += gate_b[gi][h];
    if (gi == 0 && w->lr_k) titans__mem_gate_key_forward(m, w->lr_k, bf->qk[1], g, bt);
    titans_sigmoid_forward(g, g, bt * m->H);
    if (gi == 0)
      for (size_t j = 0; j < bt * m->H; j++) g[j] *= cfg->theta_max;
    if ((gi == 1 && cfg->no_momentum) || (gi == 2 && cfg->no_forget)) /* eta or alpha = 0: the backward's */
      memset(g, 0, bt * m->H * sizeof(float)); /* factor s (1 - s) then gives their weights no gradient */
  }
}

/* The conv of one row reads concat = [tail (K-1 rows); proj (T rows)] and its final tail is the last
   K-1 rows of concat. From dfinal (gradient of the final tail) and dconv (gradient of the conv
   outputs) this adds the gradient of the initial tail into dinit and dfinal's share into dproj
   (all [rows, dm]; weight [dm, K]). */
static void titans__mem_tail_backward(float *dinit, float *dproj, const float *dfinal, const float *dconv,
                                      const float *weight, size_t T, size_t K, size_t dm) {
  size_t K1 = K - 1;
  for (size_t j = 0; j < K1; j++) {
    size_t c = T + j; /* concat index of final tail row j */
    float *dst = c >= K1 ? dproj + (c - K1) * dm : dinit + c * dm;
    titans__axpy(dst, 1.0f, dfinal + j * dm, dm);
  }
  /* output t reads concat[t + s] with tap s; concat index q < K1 is tail row q */
  for (size_t q = 0; q < K1; q++)
    for (size_t t = 0; t <= q && t < T; t++)
      for (size_t c = 0; c < dm; c++) dinit[q * dm + c] += dconv[t * dm + c] * weight[c * K + (q - t)];
}

/* The layer's input rows x [B*T, d] and their gradient dx, which every input's backward adds into. */
typedef struct titans__mem_input {
  const float *x; /* [B*T, d] */
  float *dx;      /* [B*T, d] */
  size_t B, T;    /* rows, tokens per row */
} titans__mem_input;

/* The conv tails of the q, k, v streams, one after the other (stream si's at si * B * (K-1) * dm), each
   [B, K-1, dm]: saved the ones the forward started from, dfinal the gradient of the ones it ended with,
   dinit the gradient of the starting ones (added into). */
typedef struct titans__mem_tails_grad {
  const float *saved, *dfinal;
  float *dinit;
} titans__mem_tails_grad;

/* The first nstreams of the q, k, v streams (L2Norm for q and k, SiLU, the conv, the projection) from
   gr->dvec: adds into the projection and conv weights' gradients, the tails' and in->dx. */
static void titans__mem_streams_backward(const titans__mem_dims *m, const titans_mem_weights *w,
                                         const titans_mem_weights *grad, titans__mem_bufs *bf, titans__mem_grads *gr,
                                         const titans__mem_input *in, const titans__mem_tails_grad *tails,
                                         int nstreams) {
  size_t B = in->B, T = in->T, bt = B * T, n = bt * m->dm, K1 = m->K > 0 ? m->K - 1 : 0, tsz = B * K1 * m->dm;
  const float *x = in->x, *saved_tails = tails->saved, *dtails_final = tails->dfinal;
  float *dx = in->dx, *dtails_init = tails->dinit;
  const float *proj_w[3] = {w->wq, w->wk, w->wv};
  float *proj_g[3] = {grad->wq, grad->wk, grad->wv};
  const float *conv_w[3] = {w->conv_q, w->conv_k, w->conv_v};
  float *conv_g[3] = {grad->conv_q, grad->conv_k, grad->conv_v};
  for (int si = 0; si < nstreams; si++) {
    const float *dact = gr->dvec[si];
    if (si < 2) { /* q, k = L2Norm(act) */
      memset(gr->dact, 0, n * sizeof(float));
      titans_l2norm_backward(gr->dact, gr->dvec[si], bf->act[si], bf->rnorm[si], bt * m->H, m->dh);
      dact = gr->dact;
    }
    float *dconv = m->K > 0 ? gr->dconv : gr->dproj;
    if (si < 2 && m->qk_linear)
      memcpy(dconv, dact, n * sizeof(float));
    else
      memset(dconv, 0, n * sizeof(float)), titans_silu_backward(dconv, dact, bf->conv[si], n);
    if (m->K > 0) {
      memset(gr->dproj, 0, n * sizeof(float));
      for (size_t r = 0; r < B; r++) {
        size_t o = r * T * m->dm, to = (size_t)si * tsz + r * K1 * m->dm;
        titans_conv_backward(gr->dproj + o, conv_g[si], gr->dconv + o, bf->proj[si] + o, saved_tails + to,
                             conv_w[si], T, m->dm, m->K);
        if (K1 > 0)
          titans__mem_tail_backward(dtails_init + to, gr->dproj + o, dtails_final + to, gr->dconv + o, conv_w[si], T,
                                    m->K, m->dm);
      }
    }
    titans_gemm(1, 0, m->dm, m->d, bt, 1.0f, titans_cm(gr->dproj, m->dm), titans_cm(x, m->d), 1.0f,
                titans_m(proj_g[si], m->d));
    titans_gemm(0, 0, bt, m->d, m->dm, 1.0f, titans_cm(gr->dproj, m->dm), titans_cm(proj_w[si], m->d), 1.0f,
                titans_m(dx, m->d));
  }
}

/* gr->dgates, the gradients of theta, eta and alpha [bt, H], become those of their logits z (in place):
   theta = theta_max sigmoid(z): d z = d theta * theta (1 - theta / theta_max); eta, alpha: s (1 - s). */
static void titans__mem_gates_logits_backward(const titans__mem_dims *m, const titans_mem_config *cfg,
                                              const titans__mem_bufs *bf, titans__mem_grads *gr, size_t bt) {
  for (int gi = 0; gi < 3; gi++) {
    float *dg = gr->dgates[gi];
    const float *gv = bf->gates[gi];
    float scale = gi == 0 ? 1.0f / cfg->theta_max : 1.0f;
    for (size_t j = 0; j < bt * m->H; j++) dg[j] *= gv[j] * (1.0f - gv[j] * scale);
  }
}

/* The three gates' linear maps of x from the gradients of their logits (gr->dgates after
   titans__mem_gates_logits_backward): adds into their weights' and biases' gradients and in->dx. */
static void titans__mem_gates_inputs_backward(const titans__mem_dims *m, const titans_mem_weights *w,
                                              const titans_mem_weights *grad, titans__mem_grads *gr,
                                              const titans__mem_input *in) {
  size_t bt = in->B * in->T;
  const float *x = in->x;
  float *dx = in->dx;
  const float *gate_w[3] = {w->lr_w, w->mom_w, w->decay_w};
  float *gate_gw[3] = {grad->lr_w, grad->mom_w, grad->decay_w}, *gate_gb[3] = {grad->lr_b, grad->mom_b, grad->decay_b};
  for (int gi = 0; gi < 3; gi++) {
    float *dg = gr->dgates[gi];
    titans_gemm(1, 0, m->H, m->d, bt, 1.0f, titans_cm(dg, m->H), titans_cm(x, m->d), 1.0f, titans_m(gate_gw[gi], m->d));
    for (size_t t = 0; t < bt; t++)
      for (size_t h = 0; h < m->H; h++) gate_gb[gi][h] += dg[t * m->H + h];
    titans_gemm(0, 0, bt, m->d, m->H, 1.0f, titans_cm(dg, m->H), titans_cm(gate_w[gi], m->d), 1.0f, titans_m(dx, m->d));
  }
}

/* Backward of titans__mem_inputs_forward from gr->dvec (and gr->dgates when nstreams = 3): the gates'
   logits, the write gate's share of d k (gate_key), the streams, then the gates' maps of x. */
static void titans__mem_inputs_backward(const titans__mem_dims *m, const titans_mem_config *cfg,
                                        const titans_mem_weights *w, const titans_mem_weights *grad,
                                        titans__mem_bufs *bf, titans__mem_grads *gr, const titans__mem_input *in,
                                        const titans__mem_tails_grad *tails, int nstreams) {
  size_t bt = in->B * in->T;
  if (nstreams >= 3) titans__mem_gates_logits_backward(m, cfg, bf, gr, bt);
  if (nstreams >= 3 && w->lr_k)
    titans__mem_gate_key_backward(m, w->lr_k, bf->qk[1], gr->dgates[0], gr->dvec[1], grad->lr_k, bt);
  titans__mem_streams_backward(m, w, grad, bf, gr, in, tails, nstreams);
  if (nstreams >= 3) titans__mem_gates_inputs_backward(m, w, grad, gr, in);
}

/* out [B*T, d] = wo (RMSNorm(y) * SiLU(wg x)) from bf->y */
static void titans__mem_output_forward(const titans__mem_dims *m, const titans_mem_weights *w, titans__mem_bufs *bf,
                                       float *out, const float *x, size_t bt) {
  titans_rmsnorm_forward(bf->yn, bf->rstd, bf->y, w->out_norm, bt * m->H, m->dh);
  titans_gemm(0, 1, bt, m->dm, m->d, 1.0f, titans_cm(x, m->d), titans_cm(w->wg, m->d), 0.0f, titans_m(bf->g, m->dm));
  titans_silu_forward(bf->gated, bf->g, bt * m->dm);
  for (size_t j = 0; j < bt * m->dm; j++) bf->gated[j] *= bf->yn[j];
  titans_gemm(0, 1, bt, m->d, m->dm, 1.0f, titans_cm(bf->gated, m->dm), titans_cm(w->wo, m->dm), 0.0f,
              titans_m(out, m->d));
}

/* out = wo (RMSNorm(y) * SiLU(g)): from dout [bt, d] writes gr->dy and accumulates d wo, d wg, d out_norm, dx. */
static void titans__mem_output_backward(const titans__mem_dims *m, const titans_mem_weights *w,
                                        const titans_mem_weights *grad, titans__mem_bufs *bf, titans__mem_grads *gr,
                                        float *dx, const float *dout, const float *x, size_t bt) {
  size_t n = bt * m->dm;
  titans_gemm(1, 0, m->d, m->dm, bt, 1.0f, titans_cm(dout, m->d), titans_cm(bf->gated, m->dm), 1.0f,
              titans_m(grad->wo, m->dm));
  titans_gemm(0, 0, bt, m->dm, m->d, 1.0f, titans_cm(dout, m->d), titans_cm(w->wo, m->dm), 0.0f,
              titans_m(gr->dgated, m->dm));
  for (size_t j = 0; j < n; j++) {
    float g = bf->g[j];
    gr->dyn[j] = gr->dgated[j] * g * titans__sigmoidf(g);
    gr->tmp[j] = gr->dgated[j] * bf->yn[j];
  }
  memset(gr->dg, 0, n * sizeof(float));
  titans_silu_backward(gr->dg, gr->tmp, bf->g, n);
  titans_gemm(1, 0, m->dm, m->d, bt, 1.0f, titans_cm(gr->dg, m->dm), titans_cm(x, m->d), 1.0f,
              titans_m(grad->wg, m->d));
  titans_gemm(0, 0, bt, m->d, m->dm, 1.0f, titans_cm(gr->dg, m->dm), titans_cm(w->wg, m->d), 1.0f, titans_m(dx, m->d));
  memset(gr->dy, 0, n * sizeof(float));
  titans_rmsnorm_backward(gr->dy, grad->out_norm, gr->dyn, bf->y, w->out_norm, bf->rstd, bt * m->H, m->dh);
}

/* ---- forward ---------------------------------------------------------------------------------- */

/* Allocates the call's buffers: in ctx (training) or the state's scratch; plus per-thread work. */
static int titans__mem_prepare(const titans__mem_dims *m, titans_mem_state *st, titans_mem_ctx *ctx, size_t T,
                               titans__mem_bufs *bf, float **work, size_t *work_floats, int backward) {
  size_t bt, nbuf, nwork, total;
  int nth = titans_threads();
  if (!titans_size_mul(st->batch, T, &bt) || bt > ((size_t)1 << 40) / (m->dm + 1))
    return titans__error(st->error, TITANS_ERR_NOMEM, "memory: %zu x %zu tokens is too many", st->batch, T);
  nbuf = titans__mem_bufs_carve(bf, NULL, m, bt);
  *work_floats = titans__mem_work_carve(NULL, NULL, m, backward);
  nwork = *work_floats * (size_t)nth;
  if (!titans_size_add(nwork, ctx ? 0 : nbuf, &total))
    return titans__error(st->error, TITANS_ERR_NOMEM, "memory: size overflow");
  if (!titans__reserve(&st->scratch, &st->scratch_size, total))
    return titans__error(st->error, TITANS_ERR_NOMEM, "memory: cannot allocate %zu floats of work space", total);
  *work = st->scratch;
  if (!ctx) titans__mem_bufs_carve(bf, st->scratch + nwork, m, bt);
  return TITANS_OK;
}

/* Sizes a ctx for B x T tokens and carves its buffers. */
static int titans__mem_ctx_reserve(titans_mem_ctx *ctx, const titans__mem_dims *m, size_t B, size_t T,
                                   titans__mem_bufs *bf, char *err) {
  size_t bt = B * T, nchunks = (T + m->b - 1) / m->b, nbuf = titans__mem_bufs_carve(bf, NULL, m, bt);
  size_t K1 = m->K > 0 ? m->K - 1 : 0;
  size_t states = B * m->H * (nchunks + 1) * 2 * m->head_size;
  size_t extra = 3 * 4 * B * K1 * m->dm + 2 * (B * m->H * 2 * m->head_size);
  size_t bigger = states + extra;
  if (!titans__reserve(&ctx->proj, &ctx->cap_bt, nbuf) || !titans__reserve(&ctx->states, &ctx->cap_states, bigger))
    return titans__error(err, TITANS_ERR_NOMEM, "memory: cannot allocate the training context (%zu + %zu floats)",
                         nbuf, bigger);
  titans__mem_bufs_carve(bf, ctx->proj, m, bt);
  ctx->conv = bf->conv[0];
  ctx->act = bf->act[0];
  ctx->qk = bf->qk[0];
  ctx->rnorm = bf->rnorm[0];
  ctx->gates = bf->gates[0];
  ctx->y = bf->y;
  ctx->yn = bf->yn;
  ctx->g = bf->g;
  ctx->gated = bf->gated;
  ctx->rstd = bf->rstd;
  ctx->tails = ctx->states + states;
  ctx->dstate_final = ctx->tails + 4 * B * K1 * m->dm;
  ctx->dstate_init = ctx->dstate_final + B * m->H * 2 * m->head_size;
  ctx->dtails_final = ctx->dstate_init + B * m->H * 2 * m->head_size;
  ctx->dtails_init = ctx->dtails_final + 4 * B * K1 * m->dm;
  memset(ctx->dstate_final, 0, (2 * B * m->H * 2 * m->head_size + 8 * B * K1 * m->dm) * sizeof(float));
  ctx->batch = B;
  ctx->T = T;
  ctx->nchunks = nchunks;
  return TITANS_OK;
}

/* One (row, head)'s slices of a titans_mem_state: the memory the recurrence runs and the chunk start it
   keeps (the weights the inner gradients are taken at). */
typedef struct titans__mem_head_state {
  float *w_chunk; /* [head_size] W at the start of the current chunk */
  float *w;       /* [head_size] W now, updated in place token by token */
  float *s_chunk; /* [head_size] S (momentum) at the start of the current chunk */
  float *s;       /* [head_size] S now */
} titans__mem_head_state;

/* The recurrence of one (row, head) over T tokens from the state's position; saves chunk-start states
   into states [nchunks + 1, 2, head_size] when not NULL. Returns 1 when the call's last piece was one
   token taken by titans__mem_token_step, which rewrote every value of W and S and found them finite
   (0: not known). */
static int titans__mem_recur_one(const titans__mem_dims *m, int residual, titans__mem_bufs *bf,
                                 const titans__mem_head_state *hst, float *states, long long position, size_t r,
                                 size_t h, size_t T, titans__mem_work *wk) {
  size_t ld = m->dm, base = r * T * ld + h * m->dh, gbase = r * T * m->H + h, hs = m->head_size, c = 0;
  float *wchunk = hst->w_chunk, *w = hst->w, *schunk = hst->s_chunk, *s = hst->s;
  if (states && position % (long long)m->b == 0) {
    /* Training: every piece starts a chunk; it updates the running state (w, s) in place, which stays
       in cache for the next chunk, and its end state is streamed out to states[c + 1] for the backward
       (one write of each line, no read of it). The chunk-start state is set once at the end. */
    titans__mem_state_out(states, w, hs, 0);
    titans__mem_state_out(states + hs, s, hs, 0);
    for (size_t t = 0; t < T; c++) {
      size_t len = T - t < m->b ? T - t : m->b;
      titans__mem_sink sink = {states + (c + 1) * 2 * hs, states + (c + 1) * 2 * hs + hs, len == m->b};
      const titans__mem_chunk piece = titans__mem_piece_of(m, bf, base + t * ld, gbase + t * m->H, len);
      if (m->ls) {
        titans__mem_ls_forward(m, bf->y + base + t * ld, &piece, w, s, NULL, wk);
        memcpy(sink.w_copy, w, hs * sizeof(float));
        memcpy(sink.s_copy, s, hs * sizeof(float));
      } else {
        titans__mem_chunk_forward(m, residual, bf->y + base + t * ld, &piece, w, w, s, wk);
        titans__mem_chunk_end_state(m, w, s, &sink, w, s, len, wk);
      }
      t += len;
    }
    memcpy(wchunk, states + (c - 1) * 2 * hs, hs * sizeof(float)); /* c >= 1: T > 0 */
    memcpy(schunk, states + (c - 1) * 2 * hs + hs, hs * sizeof(float));
    return 0;
  }
  int checked = 0, fusable = titans__mem_token_fusable(m);
  for (size_t t = 0; t < T; c++) {
    size_t off = (size_t)((unsigned long long)(position + (long long)t) % m->b), len = m->b - off;
    if (len > T - t) len = T - t;
    /* A whole chunk with more of the call after it reads its inner gradients' weights from w itself
       (the piece reads them before it updates w in place): no copy. The call's last piece copies, so
       that w_chunk, s_chunk end as the start of the chunk the next call continues (or the last one). */
    int whole_inner = off == 0 && len == m->b && t + len < T;
    if (off == 0 && !whole_inner) {
      memcpy(wchunk, w, hs * sizeof(float));
      memcpy(schunk, s, hs * sizeof(float));
    }
    if (states) {
      memcpy(states + c * 2 * hs, w, hs * sizeof(float));
      memcpy(states + c * 2 * hs + hs, s, hs * sizeof(float));
    }
    titans__mem_sink sink = {NULL, NULL, off + len == m->b}; /* a chunk's end: flush */
    const titans__mem_chunk piece = titans__mem_piece_of(m, bf, base + t * ld, gbase + t * m->H, len);
    /* per_token_grad: every token's error is taken at the weights before it, so a piece starts from w
       wherever it falls in its chunk */
    const float *wgrad = whole_inner || m->exact ? w : wchunk;
    if (m->ls) { /* token by token: no chunk-start weights */
      titans__mem_ls_forward(m, bf->y + base + t * ld, &piece, w, s, NULL, wk);
      checked = 0;
    } else if (len == 1 && fusable) { /* a session's token: one pass per layer over W and S */
      checked = titans__mem_token_step(m, residual, bf->y + base + t * ld, &piece, wgrad, w, s, sink.flush, wk);
    } else {
      titans__mem_chunk_forward(m, residual, bf->y + base + t * ld, &piece, wgrad, w, s, wk);
      titans__mem_chunk_end_state(m, w, s, &sink, w, s, len, wk);
      checked = 0;
    }
    t += len;
  }
  if (states) {
    memcpy(states + c * 2 * hs, w, hs * sizeof(float));
    memcpy(states + c * 2 * hs + hs, s, hs * sizeof(float));
  }
  return checked;
}

#ifdef _OPENMP
/* Whether the (row, head) tasks of a call over T tokens run on threads: at least two tasks, threads to
   start, and work (floats of the heads' weights the tokens touch) that pays for waking them. A session's
   one-token call at d = 128 (4 heads of 8K floats) stays on the calling thread; d = 256 splits. */
static int titans__mem_split(const titans__mem_dims *m, long long tasks, size_t T) {
  return tasks > 1 && (double)tasks * (double)T * (double)m->head_size >= TITANS__OPS_PAR_WORK &&
         titans__omp_can_split();
}
#endif

/* Task `task` (row task / H, head task % H) of titans_mem_forward: the recurrence over the call's T tokens
   with a work space of its thread's own. Returns titans__mem_recur_one's answer. */
static int titans__mem_forward_task(const titans__mem_dims *m, int residual, titans__mem_bufs *bf,
                                     titans_mem_state *st, titans_mem_ctx *ctx, float *work, size_t work_floats,
                                     long long task, size_t T) {
  size_t hs = m->head_size, r = (size_t)task / m->H, h = (size_t)task % m->H, at = (size_t)task * hs;
  titans__mem_work wk;
  titans__mem_work_carve(&wk, work + (size_t)titans__mem_thread_id() * work_floats, m, 0);
  float *states = ctx ? ctx->states + (size_t)task * (ctx->nchunks + 1) * 2 * hs : NULL;
  const titans__mem_head_state hst = {st->w_chunk + at, st->w + at, st->s_chunk + at, st->s + at};
  return titans__mem_recur_one(m, residual, bf, &hst, states, st->position, r, h, T, &wk);
}

/* titans_mem_forward, and *state_finite (when not NULL) := 1 when the call rewrote every value of the
   state's W and S and found them all finite, else 0 (not known: check them). A session's one-token
   call answers 1 (titans__mem_token_step), so its finite check need not read W and S again. */
static int titans__mem_forward_checked(const titans_mem_config *cfg, const titans_mem_weights *w, titans_mem_state *st,
                                       float *out, const float *x, size_t T, titans_mem_ctx *ctx, int *state_finite) {
  if (state_finite) *state_finite = 0;
  if (memcmp(cfg, &st->cfg, sizeof *cfg) != 0)
    return titans__error(st->error, TITANS_ERR_ARG, "memory forward: the state was made for another configuration");
  if (T == 0) return TITANS_OK;
  titans__mem_dims m = titans__mem_get_dims(cfg);
  if (ctx && st->position % (long long)m.b != 0)
    return titans__error(st->error, TITANS_ERR_STATE,
                         "memory forward: training calls must start at a chunk boundary (position %lld, chunk %zu)",
                         st->position, m.b);
  titans__mem_bufs bf;
  float *work;
  size_t work_floats, B = st->batch;
  int rc = titans__mem_prepare(&m, st, ctx, T, &bf, &work, &work_floats, 0);
  if (rc) return rc;
  if (ctx) {
    rc = titans__mem_ctx_reserve(ctx, &m, B, T, &bf, st->error);
    if (rc) return rc;
    ctx->start_position = st->position;
    ctx->retrieval = 0;
  }
  size_t K1 = m.K > 0 ? m.K - 1 : 0, tsz = B * K1 * m.dm;
  float *tails[3] = {st->tail_q, st->tail_k, st->tail_v};
  float *saved[3] = {ctx ? ctx->tails : NULL, ctx ? ctx->tails + tsz : NULL, ctx ? ctx->tails + 2 * tsz : NULL};
  double since = titans__mem_clock(ctx);
  titans__mem_inputs_forward(&m, cfg, w, &bf, tails, saved, x, B, T, 3);
  titans__mem_stage_done(ctx, TITANS_MEM_STAGE_INPUTS, &since);

  long long tasks = (long long)(B * m.H);
  int finite = 1; /* every task's W and S rewritten and finite */
#ifdef _OPENMP
  if (titans__mem_split(&m, tasks, T)) {
#pragma omp parallel for schedule(static) reduction(&& : finite)
    for (long long task = 0; task < tasks; task++)
      finite = titans__mem_forward_task(&m, cfg->residual, &bf, st, ctx, work, work_floats, task, T) && finite;
  } else
#endif
    for (long long task = 0; task < tasks; task++)
      finite = titans__mem_forward_task(&m, cfg->residual, &bf, st, ctx, work, work_floats, task, T) && finite;
  if (state_finite) *state_finite = finite;
  st->position += (long long)T;
  titans__mem_stage_done(ctx, TITANS_MEM_STAGE_RECURRENCE, &since);
  titans__mem_output_forward(&m, w, &bf, out, x, B * T);
  titans__mem_stage_done(ctx, TITANS_MEM_STAGE_OUTPUT, &since);
  return TITANS_OK;
}

TITANSDEF int titans_mem_forward(const titans_mem_config *cfg, const titans_mem_weights *w, titans_mem_state *st,
                                 float *out, const float *x, size_t T, titans_mem_ctx *ctx) {
  return titans__mem_forward_checked(cfg, w, st, out, x, T, ctx, NULL);
}

/* Floats of the shared buffers of titans__mem_forward_rows for n rows: the rows' projections, gates and
   outputs (titans__mem_bufs) and their three conv tails gathered [3, n, K_c - 1, d_m]. */
static size_t titans__mem_rows_floats(const titans_mem_config *cfg, size_t n) {
  titans__mem_dims m = titans__mem_get_dims(cfg);
  titans__mem_bufs bf;
  size_t K1 = m.K > 0 ? m.K - 1 : 0;
  return titans__mem_bufs_carve(&bf, NULL, &m, n) + 3 * n * K1 * m.dm;
}

/* Row r of titans__mem_forward_rows: the recurrence of every head of state st (batch 1) over its one
   token, bf's row r, with st's scratch (reserved by the caller) as the work space. Returns 1 when its W
   and S were rewritten and found finite (titans__mem_recur_one), 0 if not known. */
static int titans__mem_row_recur(const titans__mem_dims *m, int residual, titans__mem_bufs *bf, titans_mem_state *st,
                                 size_t r) {
  size_t hs = m->head_size;
  titans__mem_work wk;
  titans__mem_work_carve(&wk, st->scratch, m, 0);
  int finite = 1;
  for (size_t h = 0; h < m->H; h++) {
    const titans__mem_head_state hst = {st->w_chunk + h * hs, st->w + h * hs, st->s_chunk + h * hs, st->s + h * hs};
    finite = titans__mem_recur_one(m, residual, bf, &hst, NULL, st->position, r, h, 1, &wk) && finite;
  }
  st->position++;
  return finite;
}

/* One token for each of n memories of one layer: titans_mem_forward of x [n, d] row r on state st[r]
   (batch 1, each its own position) at T = 1, out [n, d]. The projections, the gates and the output gate
   and projection are products over the n rows; the convs (on each state's tails, gathered into the
   shared buffers and put back) and the recurrences are per state. bufs [titans__mem_rows_floats(cfg, n)].
   finite [n] as titans__mem_forward_checked's state_finite. TITANS_ERR_NOMEM (a state's work space could
   not grow; every state is then left unchanged) or TITANS_OK. */
static int titans__mem_forward_rows(const titans_mem_config *cfg, const titans_mem_weights *w,
                                    titans_mem_state *const *st, size_t n, float *out, const float *x, float *bufs,
                                    int *finite) {
  titans__mem_dims m = titans__mem_get_dims(cfg);
  titans__mem_bufs bf;
  size_t K1 = m.K > 0 ? m.K - 1 : 0, tail = K1 * m.dm, used = titans__mem_bufs_carve(&bf, bufs, &m, n);
  size_t work_floats = titans__mem_work_carve(NULL, NULL, &m, 0);
  for (size_t r = 0; r < n; r++) /* before any change, so that a failure leaves every state as it was */
    if (!titans__reserve(&st[r]->scratch, &st[r]->scratch_size, work_floats)) return TITANS_ERR_NOMEM;
  float *tails[3] = {bufs + used, bufs + used + n * tail, bufs + used + 2 * n * tail}; /* [n, K_c - 1, d_m] each */
  for (size_t r = 0; r < n && tail; r++) {
    float *own[3] = {st[r]->tail_q, st[r]->tail_k, st[r]->tail_v};
    for (int si = 0; si < 3; si++) memcpy(tails[si] + r * tail, own[si], tail * sizeof(float));
  }
  float *none[3] = {NULL, NULL, NULL};
  titans__mem_inputs_forward(&m, cfg, w, &bf, tails, none, x, n, 1, 3);
  for (size_t r = 0; r < n && tail; r++) {
    float *own[3] = {st[r]->tail_q, st[r]->tail_k, st[r]->tail_v};
    for (int si = 0; si < 3; si++) memcpy(own[si], tails[si] + r * tail, tail * sizeof(float));
  }
#ifdef _OPENMP
  if (n > 1 && titans__mem_split(&m, (long long)(n * m.H), 1)) {
#pragma omp parallel for schedule(static)
    for (long long r = 0; r < (long long)n; r++) finite[r] = titans__mem_row_recur(&m, cfg->residual, &bf, st[r], (size_t)r);
  } else
#endif
    for (size_t r = 0; r < n; r++) finite[r] = titans__mem_row_recur(&m, cfg->residual, &bf, st[r], r);
  titans__mem_output_forward(&m, w, &bf, out, x, n);
  return TITANS_OK;
}

/* y [n, ld] = M(q; W) for n <= b queries of one head; leaves activations in wk->aq, wk->zq. */
static void titans__mem_read_block(const titans__mem_dims *m, int residual, float *y, size_t ldy, const float *q,
                                   size_t ld, const float *w, size_t n, titans__mem_work *wk) {
  titans__copy_rows(wk->aq[0], q, n, m->dh, ld);
  for (size_t i = 0; i < m->L; i++) {
    titans_gemm(0, 1, n, m->n[i + 1], m->n[i], 1.0f, titans_cm(wk->aq[i], m->n[i]), titans_cm(w + m->wofs[i], m->n[i]),
                0.0f, titans_m(wk->zq[i], m->n[i + 1]));
    if (i + 1 < m->L) titans__silu_keep(wk->aq[i + 1], wk->sq[i], wk->zq[i], n * m->n[i + 1]);
  }
  for (size_t t = 0; t < n; t++)
    for (size_t j = 0; j < m->dh; j++)
      y[t * ldy + j] = wk->zq[m->L - 1][t * m->dh + j] + (residual ? wk->aq[0][t * m->dh + j] : 0.0f);
}

/* Task `task` of titans_mem_retrieve: the reads of one (row, head) over T tokens from its weights w
   [head_size], in blocks of at most b queries. */
static void titans__mem_retrieve_task(const titans__mem_dims *m, int residual, titans__mem_bufs *bf, const float *w,
                                      float *work, size_t work_floats, long long task, size_t T) {
  size_t r = (size_t)task / m->H, h = (size_t)task % m->H, base = r * T * m->dm + h * m->dh;
  titans__mem_work wk;
  titans__mem_work_carve(&wk, work + (size_t)titans__mem_thread_id() * work_floats, m, 0);
  for (size_t t = 0; t < T; t += m->b) {
    size_t n = T - t < m->b ? T - t : m->b;
    titans__mem_read_block(m, residual, bf->y + base + t * m->dm, m->dm, bf->qk[0] + base + t * m->dm, m->dm, w, n,
                           &wk);
  }
}

TITANSDEF int titans_mem_retrieve(const titans_mem_config *cfg, const titans_mem_weights *w, titans_mem_state *st,
                                  float *out, const float *x, size_t T, titans_mem_ctx *ctx) {
  if (memcmp(cfg, &st->cfg, sizeof *cfg) != 0)
    return titans__error(st->error, TITANS_ERR_ARG, "memory retrieve: the state was made for another configuration");
  if (T == 0) return TITANS_OK;
  titans__mem_dims m = titans__mem_get_dims(cfg);
  titans__mem_bufs bf;
  float *work;
  size_t work_floats, B = st->batch, hs = m.head_size;
  int rc = titans__mem_prepare(&m, st, ctx, T, &bf, &work, &work_floats, 0);
  if (rc) return rc;
  if (ctx) {
    rc = titans__mem_ctx_reserve(ctx, &m, B, T, &bf, st->error);
    if (rc) return rc;
    ctx->start_position = st->position;
    ctx->retrieval = 1;
    memcpy(ctx->states, st->w, B * m.H * hs * sizeof(float)); /* [B, H, head_size]: the weights read */
  }
  float *tails[1] = {st->tail_rq};
  size_t K1 = m.K > 0 ? m.K - 1 : 0;
  float *saved[1] = {ctx ? ctx->tails + 3 * B * K1 * m.dm : NULL};
  titans__mem_inputs_forward(&m, cfg, w, &bf, tails, saved, x, B, T, 1);
  long long tasks = (long long)(B * m.H);
#ifdef _OPENMP
  if (titans__mem_split(&m, tasks, T)) {
#pragma omp parallel for schedule(static)
    for (long long task = 0; task < tasks; task++)
      titans__mem_retrieve_task(&m, cfg->residual, &bf, st->w + (size_t)task * hs, work, work_floats, task, T);
  } else
#endif
    for (long long task = 0; task < tasks; task++)
      titans__mem_retrieve_task(&m, cfg->residual, &bf, st->w + (size_t)task * hs, work, work_floats, task, T);
  titans__mem_output_forward(&m, w, &bf, out, x, B * T);
  return TITANS_OK;
}

/* ---- backward --------------------------------------------------------------------------------- */

/* One (row, head)'s slices of a titans_mem_ctx that the backward of its recurrence reads and writes. */
typedef struct titans__mem_head_grad {
  const float *states; /* [nchunks + 1, 2, head_size] (W, S) at each chunk start, saved by the forward */
  size_t nchunks;      /* chunks of the forward call */
  const float *dfinal; /* [2, head_size] dL/d(W, S) after the call (read) */
  float *dinit;        /* [2, head_size] dL/d(W, S) before the call (written) */
} titans__mem_head_grad;

/* Backward of the recurrence of one (row, head), last chunk first. */
static void titans__mem_recur_backward_one(const titans__mem_dims *m, int residual, titans__mem_bufs *bf,
                                           titans__mem_grads *gr, const titans__mem_head_grad *hg, size_t r,
                                           size_t h, size_t T, titans__mem_work *wk) {
  size_t ld = m->dm, base = r * T * ld + h * m->dh, gbase = r * T * m->H + h, hs = m->head_size;
  const float *states = hg->states, *dfinal = hg->dfinal;
  float *dinit = hg->dinit;
  size_t nchunks = hg->nchunks;
  /* The gradient of the state after chunk c is read where chunk c + 1 wrote it: two buffers take turns
     (no copies), the last chunk's reads come straight from dfinal and the first chunk writes into dinit. */
  float *buf[2][2] = {{wk->dW, wk->dS}, {wk->dWend, wk->dSend}};
  titans__mem_work cw = *wk;
  cw.dWend = (float *)(uintptr_t)dfinal; /* only read */
  cw.dSend = (float *)(uintptr_t)(dfinal + hs);
  if (nchunks == 0) memcpy(dinit, dfinal, 2 * hs * sizeof(float));
  for (size_t c = nchunks, turn = 0; c-- > 0; turn ^= 1) {
    size_t t = c * m->b, len = T - t < m->b ? T - t : m->b, o = base + t * ld, g = gbase + t * m->H;
    const float *wc = states + c * 2 * hs;
    cw.dW = c == 0 ? dinit : buf[turn][0];
    cw.dS = c == 0 ? dinit + hs : buf[turn][1];
    const titans__mem_chunk piece = titans__mem_piece_of(m, bf, o, g, len);
    const titans__mem_chunk_grad dpiece = {gr->dvec[0] + o,   gr->dvec[1] + o,   gr->dvec[2] + o,
                                           gr->dgates[0] + g, gr->dgates[1] + g, gr->dgates[2] + g};
    if (m->ls)
      titans__mem_ls_backward(m, &dpiece, gr->dy + o, &piece, wc, wc + hs, &cw);
    else
      titans__mem_chunk_backward(m, residual, &dpiece, gr->dy + o, &piece, wc, wc + hs, &cw);
    cw.dWend = cw.dW;
    cw.dSend = cw.dS;
  }
}

/* Backward of the reads of one (row, head) with fixed weights w: dq rows, and d W added into dW. */
static void titans__mem_read_backward_one(const titans__mem_dims *m, int residual, titans__mem_bufs *bf,
                                          titans__mem_grads *gr, const float *w, float *dW, size_t r, size_t h,
                                          size_t T, titans__mem_work *wk) {
  size_t ld = m->dm, base = r * T * ld + h * m->dh;
  for (size_t t = 0; t < T; t += m->b) {
    size_t n = T - t < m->b ? T - t : m->b, o = base + t * ld;
    titans__mem_read_block(m, residual, wk->tmp2, m->dh, bf->qk[0] + o, ld, w, n, wk);
    titans__copy_rows(wk->dz, gr->dy + o, n, m->dh, ld);
    if (residual) titans__add_rows(gr->dvec[0] + o, ld, wk->dz, n, m->dh);
    for (size_t i = m->L; i-- > 0;) {
      size_t ni = m->n[i], no = m->n[i + 1], wo = m->wofs[i];
      titans_gemm(1, 0, no, ni, n, 1.0f, titans_cm(wk->dz, no), titans_cm(wk->aq[i], ni), 1.0f, titans_m(dW + wo, ni));
      titans_gemm(0, 0, n, ni, no, 1.0f, titans_cm(wk->dz, no), titans_cm(w + wo, ni), 0.0f, titans_m(wk->daq, ni));
      if (i > 0)
        for (size_t j = 0; j < n * ni; j++)
          wk->dz[j] = wk->daq[j] * titans__silu_d1(wk->zq[i - 1][j], wk->sq[i - 1][j]);
      else
        titans__add_rows(gr->dvec[0] + o, ld, wk->daq, n, m->dh);
    }
  }
}

/* The rows whose memory started at w0 (rows [B] flags, NULL = every row) pass d W_0 of the backward that
   filled ctx into grad->w0, summed over the rows in a fixed order. The other rows continued a state
   carried from an earlier call: their gradient stops there (truncated backpropagation through time). */
static void titans__mem_w0_grad(const titans_mem_config *cfg, const titans_mem_weights *grad, const titans_mem_ctx *ctx,
                                const unsigned char *rows) {
  titans__mem_dims m = titans__mem_get_dims(cfg);
  size_t hs = m.head_size;
  for (size_t h = 0; h < m.H; h++)
    for (size_t r = 0; r < ctx->batch; r++) {
      if (rows && !rows[r]) continue;
      const float *dw = ctx->dstate_init + (r * m.H + h) * 2 * hs; /* [head_size] d W_0 of (r, h) */
      for (size_t i = 0; i < m.L; i++) {
        size_t sz = m.n[i + 1] * m.n[i];
        titans__axpy(grad->w0[i] + h * sz, 1.0f, dw + m.wofs[i], sz);
      }
    }
}

TITANSDEF int titans_mem_backward(const titans_mem_config *cfg, const titans_mem_weights *w,
                                  const titans_mem_weights *grad, float *dx, const float *dout, const float *x,
                                  titans_mem_ctx *ctx, int init_from_w0) {
  if (!ctx->proj || ctx->T == 0)
    return titans__error(ctx->error, TITANS_ERR_STATE, "memory backward: the context holds no forward");
  titans__mem_dims m = titans__mem_get_dims(cfg);
  size_t B = ctx->batch, T = ctx->T, bt = B * T, hs = m.head_size;
  int nth = titans_threads();
  double since = titans__mem_clock(ctx);
  titans__mem_bufs bf;
  titans__mem_bufs_carve(&bf, ctx->proj, &m, bt);
  titans__mem_grads gr;
  size_t ngrad = titans__mem_grads_carve(&gr, NULL, &m, bt);
  size_t work_floats = titans__mem_work_carve(NULL, NULL, &m, 1);
  /* The slab lives in ctx and is reused (a fresh 46 MB allocation per call faulted in every page). Only
     what the backward accumulates into starts at zero: d q, d k, d v and the gate gradients (the per-
     chunk kernels add into them); every other vector is written before it is read. */
  if (!titans__reserve(&ctx->grad_work, &ctx->cap_grad, ngrad + work_floats * (size_t)nth))
    return titans__error(ctx->error, TITANS_ERR_NOMEM, "memory backward: cannot allocate work space");
  float *slab = ctx->grad_work;
  titans__mem_grads_carve(&gr, slab, &m, bt);
  for (int i = 0; i < 3; i++) memset(gr.dvec[i], 0, bt * m.dm * sizeof(float));
  for (int i = 0; i < 3; i++) memset(gr.dgates[i], 0, bt * m.H * sizeof(float));
  float *work = slab + ngrad;
  memset(work, 0, work_floats * (size_t)nth * sizeof(float));

  titans__mem_output_backward(&m, w, grad, &bf, &gr, dx, dout, x, bt);
  titans__mem_stage_done(ctx, TITANS_MEM_STAGE_OUTPUT_BACKWARD, &since);
  long long tasks = (long long)(B * m.H);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (tasks > 1 && !omp_in_parallel())
#endif
  for (long long task = 0; task < tasks; task++) {
    size_t r = (size_t)task / m.H, h = (size_t)task % m.H;
    titans__mem_work wk;
    titans__mem_work_carve(&wk, work + (size_t)titans__mem_thread_id() * work_floats, &m, 1);
    const float *dfinal = ctx->dstate_final + (size_t)task * 2 * hs;
    float *dinit = ctx->dstate_init + (size_t)task * 2 * hs;
    if (ctx->retrieval) {
      /* the state does not change: d(state before) = d(state after) + what the reads add */
      memcpy(dinit, dfinal, 2 * hs * sizeof(float));
      titans__mem_read_backward_one(&m, cfg->residual, &bf, &gr, ctx->states + (size_t)task * hs, dinit, r, h, T, &wk);
    } else {
      const titans__mem_head_grad hg = {ctx->states + (size_t)task * (ctx->nchunks + 1) * 2 * hs, ctx->nchunks,
                                        dfinal, dinit};
      titans__mem_recur_backward_one(&m, cfg->residual, &bf, &gr, &hg, r, h, T, &wk);
    }
  }
  titans__mem_stage_done(ctx, TITANS_MEM_STAGE_RECURRENCE_BACKWARD, &since);
  if (init_from_w0) titans__mem_w0_grad(cfg, grad, ctx, NULL);
  size_t K1 = m.K > 0 ? m.K - 1 : 0, slot = ctx->retrieval ? 3 * B * K1 * m.dm : 0;
  memset(ctx->dtails_init, 0, 4 * B * K1 * m.dm * sizeof(float));
  const titans__mem_input in = {x, dx, B, T};
  const titans__mem_tails_grad tails = {ctx->tails + slot, ctx->dtails_final + slot, ctx->dtails_init + slot};
  const unsigned char *skip = ctx->write_cost_skip; /* [bt] or NULL; d theta is [bt, H] */
  if (ctx->write_cost != 0.0f && !ctx->retrieval) { /* a retrieval writes nothing */
    const float dtheta = ctx->write_cost / cfg->theta_max; /* d (c theta / theta_max) / d theta */
    for (size_t j = 0; j < bt * m.H; j++)
      if (!skip || !skip[j / m.H]) gr.dgates[0][j] += dtheta;
  }
  if (ctx->write_cost_log != 0.0f && !ctx->retrieval) /* d (c log(theta / theta_max)) / d theta = c / theta */
    for (size_t j = 0; j < bt * m.H; j++) {
      float theta = bf.gates[0][j];
      if (theta > 1e-30f && (!skip || !skip[j / m.H]))
        gr.dgates[0][j] += ctx->write_cost_log / theta; /* the cost's floor (above) */
    }
  titans__mem_inputs_backward(&m, cfg, w, grad, &bf, &gr, &in, &tails, ctx->retrieval ? 1 : 3);
  titans__mem_stage_done(ctx, TITANS_MEM_STAGE_INPUTS_BACKWARD, &since);
  return TITANS_OK;
}

/* ---- direct associative access ---------------------------------------------------------------- */

TITANSDEF int titans_mem_write(titans_mem_state *st, size_t row, size_t head, const float *keys, const float *values,
                               const float *theta, const float *eta, const float *alpha, size_t n) {
  titans__mem_dims m = titans__mem_get_dims(&st->cfg);
  if (row >= st->batch || head >= m.H)
    return titans__error(st->error, TITANS_ERR_ARG, "memory write: row %zu / head %zu out of range", row, head);
  if (!keys || !values || !theta) return titans__error(st->error, TITANS_ERR_ARG, "memory write: NULL input");
  size_t work_floats = titans__mem_work_carve(NULL, NULL, &m, 0), zeros_off = work_floats;
  if (!titans__reserve(&st->scratch, &st->scratch_size, work_floats + m.b))
    return titans__error(st->error, TITANS_ERR_NOMEM, "memory write: cannot allocate work space");
  titans__mem_work wk;
  titans__mem_work_carve(&wk, st->scratch, &m, 0);
  float *zeros = st->scratch + zeros_off; /* [b] gates of 0 where eta / alpha are NULL */
  memset(zeros, 0, m.b * sizeof(float));
  size_t at = (row * m.H + head) * m.head_size;
  float *w = st->w + at, *s = st->s + at, *wc = st->w_chunk + at, *sc = st->s_chunk + at;
  /* Each call starts a chunk of its own: the inner gradients of its first b pairs are taken at the
     current weights, and so on. Every piece starts a chunk, so it reads them from w itself (before its
     in-place update); w_chunk, s_chunk are set once, below. */
  for (size_t t = 0; t < n; t += m.b) {
    size_t len = n - t < m.b ? n - t : m.b;
    const titans__mem_chunk c = {keys + t * m.dh, keys + t * m.dh, values + t * m.dh, theta + t,
                                 eta ? eta + t : zeros, alpha ? alpha + t : zeros, m.dh, 1, len};
    if (m.ls) {
      titans__mem_ls_forward(&m, NULL, &c, w, s, NULL, &wk);
      continue;
    }
    titans__mem_chunk_forward(&m, st->cfg.residual, NULL, &c, w, w, s, &wk);
    titans__mem_chunk_end_state(&m, w, s, NULL, w, s, len, &wk);
  }
  memcpy(wc, w, m.head_size * sizeof(float));
  memcpy(sc, s, m.head_size * sizeof(float));
  return TITANS_OK;
}

TITANSDEF int titans_mem_read(titans_mem_state *st, size_t row, size_t head, float *out, const float *queries,
                              size_t n) {
  titans__mem_dims m = titans__mem_get_dims(&st->cfg);
  if (row >= st->batch || head >= m.H)
    return titans__error(st->error, TITANS_ERR_ARG, "memory read: row %zu / head %zu out of range", row, head);
  size_t work_floats = titans__mem_work_carve(NULL, NULL, &m, 0);
  if (!titans__reserve(&st->scratch, &st->scratch_size, work_floats))
    return titans__error(st->error, TITANS_ERR_NOMEM, "memory read: cannot allocate work space");
  titans__mem_work wk;
  titans__mem_work_carve(&wk, st->scratch, &m, 0);
  const float *w = st->w + (row * m.H + head) * m.head_size;
  for (size_t t = 0; t < n; t += m.b) {
    size_t len = n - t < m.b ? n - t : m.b;
    titans__mem_read_block(&m, st->cfg.residual, out + t * m.dh, m.dh, queries + t * m.dh, m.dh, w, len, &wk);
  }
  return TITANS_OK;
}
/* ---- 5. Attention (implementation) ------------------------------------------------------------ */

/* Bit-exactness between the code paths (fused and two-pass backward, batched forward and KV cache,
   any thread count) rests on the private helpers below: a score q.k is one fma chain over the head's
   elements in order (keys along the vector lanes, read from panels), whichever queries and keys are
   computed with it; a sum of scaled rows adds one fma per element and term (multiply-add in the
   scalar tail) in term order, however the terms are grouped into calls or register blocks; exp is one
   function with a scalar and a vector form of the same bits (titans__expf / titans__vexp, section 3,
   which also gives the multiply-adds titans__fmaf / titans__vfmaf). They are private (not titans_gemm,
   titans__dot or titans__axpy) so the guarantee does not depend on how the core picks its kernels. */

/* out[r] = a_r . b_r for the n row pairs (row stride ld), each as the score kernel computes a score:
   one fma chain over the elements in order from the first (the backward's D = dout.out, so that
   dout.v - D is exactly 0 where a query's only key is v); sixteen rows at a time, their chains
   interleaved. */
static void titans__attn_row_dots(float *out, const float *a, const float *b, size_t ld, size_t n, size_t d_a) {
  size_t r = 0;
  for (; r + 16 <= n; r += 16) { /* 16 chains: the rows are often cold, and their loads overlap */
    float s[16] = {0};
    for (size_t i = 0; i < d_a; i++)
      for (size_t g = 0; g < 16; g++) s[g] = titans__fmaf(a[(r + g) * ld + i], b[(r + g) * ld + i], s[g]);
    for (size_t g = 0; g < 16; g++) out[r + g] = s[g];
  }
  for (; r < n; r++) {
    float s = 0.0f;
    for (size_t i = 0; i < d_a; i++) s = titans__fmaf(a[r * ld + i], b[r * ld + i], s);
    out[r] = s;
  }
}

/* ---- scores from rows stored transposed, in panels -------------------------------------------- */

/* The score kernels read the keys (the backward: the values too) transposed, in panels of
   TITANS__ATTN_PW rows: panel p holds rows p PW .. p PW + PW - 1 of an [n, ld] matrix as [ld, PW], so
   element e of row j sits at (j / PW) ld PW + e PW + j % PW, and head h's slice of a panel starts
   h d_a PW floats in. Lanes of rows past n are zero. With the keys along the vector lanes, a score
   is one fma chain over the head's elements in order (a matrix product's inner loop), not a vector of
   partial sums to be reduced across lanes. */
#define TITANS__ATTN_PW 16
#define TITANS__ATTN_PV (TITANS__ATTN_PW / TITANS__VW) /* vectors per panel row */
#define TITANS__ATTN_SR 4                                /* query rows per score-kernel call */
#ifdef TITANS__AVX512
#define TITANS__ATTN_SP 4 /* panels per score-kernel call: 16 accumulators */
#else
#define TITANS__ATTN_SP 1 /* 4 rows x 1 panel: 8 (AVX2), 16 (NEON) accumulators */
#endif

/* Floats of the panels of an [n, ld] matrix; 0 when the size overflows (n >= 1). */
static size_t titans__attn_panel_floats(size_t n, size_t ld) {
  size_t panels = n / TITANS__ATTN_PW + (n % TITANS__ATTN_PW != 0), rows, floats, bytes;
  if (!titans_size_mul(panels, TITANS__ATTN_PW, &rows) || !titans_size_mul(rows, ld, &floats) ||
      !titans_size_mul(floats, sizeof(float), &bytes))
    return 0;
  return floats;
}

/* Row j of the panels := row[0 .. ld-1]. */
static void titans__attn_panel_put(float *pan, size_t ld, size_t j, const float *row) {
  float *dst = pan + j / TITANS__ATTN_PW * ld * TITANS__ATTN_PW + j % TITANS__ATTN_PW;
  for (size_t e = 0; e < ld; e++) dst[e * TITANS__ATTN_PW] = row[e];
}

/* The panels of src [n, ld], padding lanes zero (n * ld fits: the callers sized the panels first). */
static void titans__attn_panel_pack(float *pan, const float *src, size_t n, size_t ld) {
  const size_t PW = TITANS__ATTN_PW;
  size_t np = (n + PW - 1) / PW;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(n * ld, np))
#endif
  for (ptrdiff_t pp = 0; pp < (ptrdiff_t)np; pp++) {
    size_t p = (size_t)pp, rows = n - p * PW < PW ? n - p * PW : PW;
    float *dst = pan + p * ld * PW;
    const float *s = src + p * PW * ld;
    for (size_t e = 0; e < ld; e++) {
      float *d = dst + e * PW;
      size_t l = 0;
      for (; l < rows; l++) d[l] = s[l * ld + e];
      for (; l < PW; l++) d[l] = 0.0f;
    }
  }
}

/* out[r lo + l] = (a_r . (lane l of the NP panels at pan, pstride floats apart)) * scale for r < NR,
   l < NP PW. Each score is one chain of fmas over the d_a elements in order from the first, then one
   multiply (exact for scale 1): its bits depend on the query, the key and the scale only, never on the
   rows, panels or vector width it is computed with. */
TITANS__GEMM_INLINE void titans__attn_score_kernel(float *out, size_t lo, const float *const *a, const float *pan,
                                                   size_t pstride, size_t d_a, float scale, int NR, int NP) {
  const int PV = TITANS__ATTN_PV, NV = NP * TITANS__ATTN_PV;
  titans__vf acc[TITANS__ATTN_SR][TITANS__ATTN_SP * TITANS__ATTN_PV];
  TITANS__GEMM_UNROLL
  for (int r = 0; r < NR; r++)
    TITANS__GEMM_UNROLL
    for (int u = 0; u < NV; u++) acc[r][u] = titans__vset1(0.0f);
  for (size_t i = 0; i < d_a; i++) {
    titans__vf x[TITANS__ATTN_SP * TITANS__ATTN_PV];
    TITANS__GEMM_UNROLL
    for (int p = 0; p < NP; p++)
      TITANS__GEMM_UNROLL
      for (int v = 0; v < PV; v++) {
        x[p * PV + v] = titans__vload(pan + (size_t)p * pstride + i * TITANS__ATTN_PW + (size_t)v * TITANS__VW);
        TITANS__GEMM_INREG(x[p * PV + v]); /* else GCC folds the load into each of the NR fmas (1.8x slower) */
      }
    TITANS__GEMM_UNROLL
    for (int r = 0; r < NR; r++) {
      titans__vf ar = titans__vset1(a[r][i]);
      TITANS__GEMM_UNROLL
      for (int u = 0; u < NV; u++) acc[r][u] = titans__vfmaf(ar, x[u], acc[r][u]);
    }
  }
  titans__vf vs = titans__vset1(scale);
  TITANS__GEMM_UNROLL
  for (int r = 0; r < NR; r++)
    TITANS__GEMM_UNROLL
  for (int u = 0; u < NV; u++)
    titans__vstore(out + (size_t)r * lo + (size_t)u * TITANS__VW, titans__vmul(acc[r][u], vs));
}

/* titans__attn_score_kernel with nr <= SR rows and np <= SP panels as constants. */
static void titans__attn_score_call(float *out, size_t lo, const float *const *a, const float *pan, size_t pstride,
                                    size_t d_a, float scale, int nr, int np) {
#if TITANS__ATTN_SP == 4
#define TITANS__ATTN_SCORE_ROWS(NR)                                                          \
  switch (np) {                                                                              \
  case 4: titans__attn_score_kernel(out, lo, a, pan, pstride, d_a, scale, NR, 4); return;    \
  case 3: titans__attn_score_kernel(out, lo, a, pan, pstride, d_a, scale, NR, 3); return;    \
  case 2: titans__attn_score_kernel(out, lo, a, pan, pstride, d_a, scale, NR, 2); return;    \
  default: titans__attn_score_kernel(out, lo, a, pan, pstride, d_a, scale, NR, 1); return;   \
  }
#else
#define TITANS__ATTN_SCORE_ROWS(NR)                                                                                    \
  (void)np;                                                                                                            \
  titans__attn_score_kernel(out, lo, a, pan, pstride, d_a, scale, NR, 1);                                              \
  return;
#endif
  switch (nr) {
  case 4: TITANS__ATTN_SCORE_ROWS(4)
  case 3: TITANS__ATTN_SCORE_ROWS(3)
  case 2: TITANS__ATTN_SCORE_ROWS(2)
  default: TITANS__ATTN_SCORE_ROWS(1)
  }
#undef TITANS__ATTN_SCORE_ROWS
}

/* S[r lds + t] = (a_r . (key row rows[t])) * scale for r < na, t < nt, the keys read from one head's panels (pan:
   the head's slice of panel 0; pstride = ld PW). Consecutive rows go a run at a time, SP panels and
   SR query rows a kernel call; a panel's lanes outside the run are computed and dropped. */
static void titans__attn_scores(float *S, size_t lds, const float *const *a, size_t na, const float *pan,
                                size_t pstride, const size_t *rows, size_t nt, size_t d_a, float scale) {
  const size_t PW = TITANS__ATTN_PW, SW = TITANS__ATTN_SP * TITANS__ATTN_PW;
  float blk[TITANS__ATTN_SR * TITANS__ATTN_SP * TITANS__ATTN_PW]; /* [SR, SW] a call's scores */
  size_t t1;
  for (size_t t0 = 0; t0 < nt; t0 = t1) {
    for (t1 = t0 + 1; t1 < nt && rows[t1] == rows[t1 - 1] + 1; t1++) {
    }
    size_t first = rows[t0], end = first + (t1 - t0); /* the run: key rows [first, end) */
    for (size_t pb = first - first % PW; pb < end; pb += SW) {
      size_t span = end - pb < SW ? end - pb : SW;
      int np = (int)((span + PW - 1) / PW);
      size_t l0 = first > pb ? first - pb : 0, l1 = span; /* the lanes the run needs */
      float *dst = S + t0 + (pb + l0 - first);
      const float *pp = pan + pb / PW * pstride;
      int direct = l0 == 0 && l1 == (size_t)np * PW;
      for (size_t r = 0; r < na; r += TITANS__ATTN_SR) {
        int nr = na - r < TITANS__ATTN_SR ? (int)(na - r) : TITANS__ATTN_SR;
        titans__attn_score_call(direct ? dst + r * lds : blk, direct ? lds : SW, a + r, pp, pstride, d_a, scale, nr,
                                np);
        if (!direct)
          for (int g = 0; g < nr; g++)
            memcpy(dst + (r + (size_t)g) * lds, blk + (size_t)g * SW + l0, (l1 - l0) * sizeof(float));
      }
    }
  }
}

/* The terms of titans__attn_madd for a block of rows, coef(r, t) x_t over t < nt: they travel together
   from titans__attn_madd to its kernel. */
typedef struct titans__attn_madd_terms {
  const float *coef;        /* coef(r, t) = coef[r cy + t ct] */
  const unsigned char *vis; /* laid out as coef: the term is visible where != 0 (NULL: every term) */
  size_t cy, ct;            /* coef's (and vis's) strides along the rows r and the terms t */
  const float *const *x;    /* [nt] pointers to the terms' vectors x_t */
  size_t nt;
} titans__attn_madd_terms;

/* y_r += sum_t coef(r, t) x_t over the visible terms t < nt (those of tm), for NR <= 4 rows and the NC <= 4
   vector chunks from offset i (masked == 0: every term). Each element of a row is a chain of fmas over t
   in order (a multiply-add in the scalar tail), so any split of the terms or the rows into calls gives
   the same bits; the NR x NC accumulators stay in registers and every x_t chunk is loaded once for the
   NR rows. */
TITANS__GEMM_INLINE void titans__attn_madd_kernel(float *const *y, const titans__attn_madd_terms *tm, size_t i, int NR,
                                                  int NC, int masked) {
  const float *coef = tm->coef;
  const unsigned char *vis = tm->vis;
  const size_t cy = tm->cy, ct = tm->ct, nt = tm->nt;
  const float *const *x = tm->x;
  titans__vf acc[4][4];
  TITANS__GEMM_UNROLL
  for (int r = 0; r < NR; r++)
    TITANS__GEMM_UNROLL
    for (int u = 0; u < NC; u++) acc[r][u] = titans__vload(y[r] + i + (size_t)u * TITANS__VW);
  for (size_t t = 0; t < nt; t++) {
    titans__vf xv[4];
    TITANS__GEMM_UNROLL
    for (int u = 0; u < NC; u++) xv[u] = titans__vload(x[t] + i + (size_t)u * TITANS__VW);
    TITANS__GEMM_UNROLL
    for (int r = 0; r < NR; r++) {
      if (masked && !vis[(size_t)r * cy + t * ct]) continue;
      titans__vf a = titans__vset1(coef[(size_t)r * cy + t * ct]);
      TITANS__GEMM_UNROLL
      for (int u = 0; u < NC; u++) acc[r][u] = titans__vfmaf(a, xv[u], acc[r][u]);
    }
  }
  TITANS__GEMM_UNROLL
  for (int r = 0; r < NR; r++)
    TITANS__GEMM_UNROLL
    for (int u = 0; u < NC; u++) titans__vstore(y[r] + i + (size_t)u * TITANS__VW, acc[r][u]);
}

#define TITANS__ATTN_MADD_CASE(NR, NC)                                                                      \
  do {                                                                                                      \
    if (vis) titans__attn_madd_kernel(y + r, &tm, i, NR, NC, 1);                                            \
    else titans__attn_madd_kernel(y + r, &tm, i, NR, NC, 0);                                                \
  } while (0)

/* y_r += sum_t coef(r, t) x_t (titans__attn_madd_kernel's terms and bits) for r < ny over n floats; vis
   (NULL: every term) is laid out as coef. */
static void titans__attn_madd(float *const *y, size_t ny, const float *coef, size_t cy, size_t ct,
                              const unsigned char *vis, const float *const *x, size_t nt, size_t n) {
  size_t nv = n - n % TITANS__VW;
  for (size_t r = 0; r < ny; r += 4) {
    size_t nr = ny - r < 4 ? ny - r : 4;
    const float *cr = coef + r * cy;
    const unsigned char *vr = vis ? vis + r * cy : NULL;
    const titans__attn_madd_terms tm = {cr, vr, cy, ct, x, nt};
    size_t i = 0;
    for (; i + 4 * TITANS__VW <= nv; i += 4 * TITANS__VW) {
      if (nr == 4) TITANS__ATTN_MADD_CASE(4, 4);
      else if (nr == 3) TITANS__ATTN_MADD_CASE(3, 4);
      else if (nr == 2) TITANS__ATTN_MADD_CASE(2, 4);
      else TITANS__ATTN_MADD_CASE(1, 4);
    }
    for (; i < nv; i += TITANS__VW) {
      if (nr == 4) TITANS__ATTN_MADD_CASE(4, 1);
      else if (nr == 3) TITANS__ATTN_MADD_CASE(3, 1);
      else if (nr == 2) TITANS__ATTN_MADD_CASE(2, 1);
      else TITANS__ATTN_MADD_CASE(1, 1);
    }
    for (size_t g = 0; g < nr; g++)
      for (size_t e = nv; e < n; e++) {
        float acc = y[r + g][e];
        for (size_t t = 0; t < nt; t++)
          if (!vr || vr[g * cy + t * ct]) acc = titans__fmaf(cr[g * cy + t * ct], x[t][e], acc);
        y[r + g][e] = acc;
      }
  }
}
#undef TITANS__ATTN_MADD_CASE

/* s[t] = exp(s[t] - m) for t < n (the softmax's weights from scaled scores: exactly 1 where s = m).
   Returns their sum as titans__attn_row_sum adds them when `sum`. */
static float titans__attn_exp_row(float *s, size_t n, float m, int sum) {
  titans__vf acc = titans__vset1(0.0f), vm = titans__vset1(m);
  size_t t = 0;
  for (; t + TITANS__VW <= n; t += TITANS__VW) {
    titans__vf p = titans__vexp(titans__vsub(titans__vload(s + t), vm));
    titans__vstore(s + t, p);
    acc = titans__vadd(acc, p);
  }
  float total = sum ? titans__vsum(acc) : 0.0f;
  if (t < n) { /* the tail through one vector (the same bits as the scalar exp), then added in order */
    float pad[TITANS__VW] = {0};
    memcpy(pad, s + t, (n - t) * sizeof(float));
    titans__vstore(pad, titans__vexp(titans__vsub(titans__vload(pad), vm)));
    memcpy(s + t, pad, (n - t) * sizeof(float));
    for (; t < n; t++) total += s[t];
  }
  return total;
}

/* ---- visible ranges: maximal non-decreasing runs of a position array, bisection within each ---- */

typedef struct titans__attn_runs {
  const int64_t *pos;                          /* [n] */
  size_t n;
  size_t nruns;                                /* 0 with n > 0: too many runs, scan instead */
  size_t start[TITANS_ATTN_MAX_RUNS + 1];      /* run r is [start[r], start[r + 1]) */
} titans__attn_runs;

static void titans__attn_runs_init(titans__attn_runs *r, const int64_t *pos, size_t n) {
  r->pos = pos;
  r->n = n;
  r->nruns = 0;
  if (n == 0) return;
  size_t nr = 0;
  r->start[0] = 0;
  for (size_t j = 1; j <= n; j++) {
    if (j == n || pos[j] < pos[j - 1]) {
      if (nr == TITANS_ATTN_MAX_RUNS) { /* too many runs: scan mode */
        r->nruns = 0;
        return;
      }
      r->start[++nr] = j;
    }
  }
  r->nruns = nr;
}

/* Iterates, in index order, over the maximal stretches [b, e) of indices j with lo <= pos[j] <= hi. */
typedef struct titans__attn_iter {
  const titans__attn_runs *r;
  int64_t lo, hi; /* inclusive bounds */
  size_t run;     /* next run (bisection mode) */
  size_t idx;     /* next index (scan mode) */
} titans__attn_iter;

static void titans__attn_iter_init(titans__attn_iter *it, const titans__attn_runs *r, int64_t lo, int64_t hi) {
  it->r = r;
  it->lo = lo;
  it->hi = hi;
  it->run = 0;
  it->idx = 0;
}

/* The first index in [a, z) whose position reaches v (after == 0) or exceeds it (after != 0), by
   bisection: the positions must not decrease over [a, z). */
static size_t titans__attn_bisect(const int64_t *pos, size_t a, size_t z, int64_t v, int after) {
  while (a < z) {
    size_t mid = a + (z - a) / 2;
    if (after ? pos[mid] <= v : pos[mid] < v) a = mid + 1;
    else z = mid;
  }
  return a;
}

static int titans__attn_iter_next(titans__attn_iter *it, size_t *b, size_t *e) {
  const titans__attn_runs *r = it->r;
  const int64_t *pos = r->pos;
  if (r->nruns > 0) {
    while (it->run < r->nruns) {
      size_t r0 = r->start[it->run], r1 = r->start[it->run + 1];
      it->run++;
      size_t first = titans__attn_bisect(pos, r0, r1, it->lo, 0), end = titans__attn_bisect(pos, first, r1, it->hi, 1);
      if (first < end) {
        *b = first;
        *e = end;
        return 1;
      }
    }
    return 0;
  }
  size_t j = it->idx, n = r->n;
  while (j < n && (pos[j] < it->lo || pos[j] > it->hi)) j++;
  if (j == n) {
    it->idx = n;
    return 0;
  }
  *b = j;
  while (j < n && pos[j] >= it->lo && pos[j] <= it->hi) j++;
  *e = j;
  it->idx = j;
  return 1;
}

/* Positions of the keys a query at qp sees: (qp - window, qp], as inclusive bounds without overflow. */
static void titans__attn_key_bounds(int64_t qp, int64_t window, int64_t *lo, int64_t *hi) {
  *hi = qp;
  *lo = (window > 0 && qp >= INT64_MIN + window) ? qp - window + 1 : INT64_MIN;
}

/* Positions of the queries that see a key at kp: [kp, kp + window). */
static void titans__attn_query_bounds(int64_t kp, int64_t window, int64_t *lo, int64_t *hi) {
  *lo = kp;
  *hi = (window > 0 && kp <= INT64_MAX - (window - 1)) ? kp + (window - 1) : INT64_MAX;
}

/* ---- online softmax over tiles of keys, for a block of query rows ----------------------------- */

/* A query folds its visible keys into its softmax one tile at a time: the prefix in chunks of
   TITANS_ATTN_TILE rows, then the positioned keys in groups of consecutive keys whose positions share
   floor(pos / TITANS_ATTN_TILE) (at most TITANS_ATTN_TILE keys a group). A tile updates the running
   maximum once (rescaling the sums when it grows) and adds its terms in key order. For positions that
   increase along the keys the tiles depend only on the keys a query sees, not on which queries are
   processed alongside nor on where a ring buffer wraps: the batched forward and the KV cache then
   fold the same tiles and give the same bits. */

#define TITANS__ATTN_QB 32 /* query rows that share each key and value load in the forward */

/* The online-softmax state of a block of query rows of one head. */
typedef struct titans__attn_rows {
  size_t n, d_a;
  float scale;
  const float *q[TITANS__ATTN_QB];                   /* [d_a] */
  float *o[TITANS__ATTN_QB];                         /* [d_a] running numerator, then the output */
  float m[TITANS__ATTN_QB];                          /* running max of the scores, -INFINITY before any */
  float l[TITANS__ATTN_QB];                          /* running sum of exp(score - m) */
  int64_t lo[TITANS__ATTN_QB], hi[TITANS__ATTN_QB];  /* positions of the keys the row sees */
} titans__attn_rows;

/* The pending tile of keys. */
typedef struct titans__attn_tile {
  size_t n;
  int positioned;  /* 0: prefix rows, visible to every query */
  int64_t group;   /* floor(pos / TITANS_ATTN_TILE) of the tile's keys */
  const float *kpan; /* the keys' panels: the head's slice of panel 0 */
  size_t pstride;    /* floats from one panel to the next (ld PW) */
  size_t row[TITANS_ATTN_TILE];             /* each key's row in the panels */
  const float *v[TITANS_ATTN_TILE];         /* [d_a] head slices of the values */
  int64_t pos[TITANS_ATTN_TILE];
} titans__attn_tile;

static void titans__attn_rows_init(titans__attn_rows *R, size_t d_a, float scale) {
  R->n = 0;
  R->d_a = d_a;
  R->scale = scale;
}

static void titans__attn_rows_add(titans__attn_rows *R, float *o, const float *q, int64_t qpos, int64_t window) {
  size_t r = R->n++;
  R->q[r] = q;
  R->o[r] = o;
  R->m[r] = -INFINITY;
  R->l[r] = 0.0f;
  memset(o, 0, R->d_a * sizeof(float));
  titans__attn_key_bounds(qpos, window, &R->lo[r], &R->hi[r]);
}

/* The largest lane of v, in registers (which of +0 and -0 when they tie, or which NaN, is the
   instruction set's choice, the same on every call). */
static inline float titans__attn_vmax_lanes(titans__vf v) {
#if defined(TITANS__AVX512)
  return _mm512_reduce_max_ps(v);
#elif defined(TITANS__AVX2)
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
#elif defined(TITANS__NEON)
  return vmaxvq_f32(v);
#else
  return v;
#endif
}

/* The largest of s[0..n-1] (n >= 1): a vector of running maxima over the chunks and the last VW
   elements, then across its lanes (a scalar loop below VW elements); the same bits for the same
   sequence wherever it sits in a tile. (With a NaN among the scores the result may or may not be that
   NaN; the outputs are NaN either way.) */
static float titans__attn_row_max(const float *s, size_t n) {
  float m = s[0];
  size_t t = 1;
  if (n >= TITANS__VW) {
    titans__vf mv = titans__vload(s);
    for (t = TITANS__VW; t + TITANS__VW <= n; t += TITANS__VW) mv = titans__vmax(mv, titans__vload(s + t));
    if (t < n) mv = titans__vmax(mv, titans__vload(s + n - TITANS__VW)); /* the tail, overlapping: max is idempotent */
    return titans__attn_vmax_lanes(mv);
  }
  for (; t < n; t++) m = s[t] > m ? s[t] : m;
  return m;
}

/* s[0] + ... + s[n-1]: a vector of partial sums over the chunks, then across its lanes, then the tail;
   the same bits for the same sequence wherever it sits in a tile. */
static float titans__attn_row_sum(const float *s, size_t n) {
  titans__vf acc = titans__vset1(0.0f);
  size_t t = 0;
  for (; t + TITANS__VW <= n; t += TITANS__VW) acc = titans__vadd(acc, titans__vload(s + t));
  float sum = titans__vsum(acc);
  for (; t < n; t++) sum += s[t];
  return sum;
}

/* Which keys of the pending tile each row sees. Returns 0 when every row sees every key; otherwise
   fills vis [n, W] (1: row r sees key t) and, per row, [a[r], b[r]): the first visible key and one past
   the last (a = b = nt when the row sees none). *ranges = 1 when each row sees exactly [a[r], b[r]), as
   it does whenever the tile's positions do not decrease (SWA, causal attention). */
static int titans__attn_tile_visibility(const titans__attn_rows *R, const titans__attn_tile *T, unsigned char *vis,
                                        size_t *a, size_t *b, int *ranges) {
  const size_t W = TITANS_ATTN_TILE;
  size_t nt = T->n, n = R->n;
  int masked = 0, sorted = 1;
  for (size_t r = 0; r < n; r++) a[r] = 0, b[r] = nt;
  *ranges = 1;
  if (!T->positioned) return 0;
  int64_t pmin = T->pos[0], pmax = T->pos[0];
  for (size_t t = 1; t < nt; t++) {
    pmin = T->pos[t] < pmin ? T->pos[t] : pmin;
    pmax = T->pos[t] > pmax ? T->pos[t] : pmax;
    sorted &= T->pos[t] >= T->pos[t - 1];
  }
  for (size_t r = 0; r < n && !masked; r++) masked = pmin < R->lo[r] || pmax > R->hi[r];
  if (!masked) return 0;
  *ranges = sorted;
  for (size_t r = 0; r < n; r++) {
    unsigned char *vr = vis + r * W;
    if (sorted) {
      size_t lo = titans__attn_bisect(T->pos, 0, nt, R->lo[r], 0),
             hi = titans__attn_bisect(T->pos, lo, nt, R->hi[r], 1);
      memset(vr, 0, nt);
      memset(vr + lo, 1, hi - lo);
      a[r] = lo < hi ? lo : nt, b[r] = lo < hi ? hi : nt;
      continue;
    }
    a[r] = b[r] = nt;
    for (size_t t = 0; t < nt; t++) {
      vr[t] = (unsigned char)(T->pos[t] >= R->lo[r] && T->pos[t] <= R->hi[r]);
      if (vr[t]) a[r] = a[r] < t ? a[r] : t, b[r] = t + 1;
    }
  }
  return 1;
}

/* The online softmax's step for the tile: S [n, W] holds the scores q.k * scale over [tb, te); each
   row that sees a key updates its running maximum (rescaling its sum and output when it grows), turns
   its scores into weights exp(s - m) and adds the visible ones to its sum in key order. vis, a, b,
   ranges as titans__attn_tile_visibility gives them (vis NULL: every row sees [tb, te)). */
static void titans__attn_tile_softmax(titans__attn_rows *R, float *S, const unsigned char *vis, const size_t *a,
                                      const size_t *b, int ranges, size_t tb, size_t te) {
  const size_t W = TITANS_ATTN_TILE;
  size_t n = R->n, d_a = R->d_a;
  float mt[TITANS__ATTN_QB]; /* the tile's maximum of each row, as the loop "m = s[a]; m = max" gives it */
  for (size_t r = 0; r < n; r++)
    mt[r] = a[r] < b[r] && (ranges || !vis) ? titans__attn_row_max(S + r * W + a[r], b[r] - a[r])
                                            : (a[r] < b[r] ? S[r * W + a[r]] : -INFINITY);
  if (vis && !ranges) /* the rows interleaved, so that their compare chains overlap */
    for (size_t t = tb; t < te; t++)
      for (size_t r = 0; r < n; r++) {
        float s = S[r * W + t];
        if (t > a[r] && vis[r * W + t] && s > mt[r]) mt[r] = s;
      }
  for (size_t r = 0; r < n; r++) {
    if (a[r] >= b[r]) continue;
    if (mt[r] > R->m[r]) {
      if (R->m[r] != -INFINITY) { /* nothing to rescale before the first key */
        float c = titans__expf(R->m[r] - mt[r]);
        R->l[r] *= c;
        for (size_t i = 0; i < d_a; i++) R->o[r][i] *= c;
      }
      R->m[r] = mt[r];
    }
  }
  /* The weights, and the sums: over the row's visible keys [a, b) when they are a range, as the KV
     cache's tile of the same keys gives them; over [tb, te), zeros included, otherwise. An invisible
     weight is +0 (o += p v skips it too). */
  for (size_t r = 0; r < n; r++) {
    float *s = S + r * W;
    if (a[r] >= b[r]) {
      for (size_t t = tb; t < te; t++) s[t] = 0.0f;
      continue;
    }
    if (ranges) {
      for (size_t t = tb; t < a[r]; t++) s[t] = 0.0f;
      for (size_t t = b[r]; t < te; t++) s[t] = 0.0f;
      R->l[r] += titans__attn_exp_row(s + a[r], b[r] - a[r], R->m[r], 1);
      continue;
    }
    titans__attn_exp_row(s + tb, te - tb, R->m[r], 0);
    for (size_t t = tb; t < te; t++) s[t] = vis[r * W + t] ? s[t] : 0.0f;
    R->l[r] += titans__attn_row_sum(s + tb, te - tb);
  }
}

/* Fold the pending tile into every row of the block. */
static void titans__attn_fold(titans__attn_rows *R, titans__attn_tile *T) {
  const size_t W = TITANS_ATTN_TILE;
  size_t nt = T->n, n = R->n;
  float S[TITANS__ATTN_QB * TITANS_ATTN_TILE];             /* [n, W] scores q.k * scale, then weights */
  unsigned char vis_buf[TITANS__ATTN_QB * TITANS_ATTN_TILE]; /* [n, W] */
  size_t a[TITANS__ATTN_QB], b[TITANS__ATTN_QB];            /* each row's visible keys lie in [a, b) */
  int ranges;
  if (nt == 0) return;
  const unsigned char *vis = titans__attn_tile_visibility(R, T, vis_buf, a, b, &ranges) ? vis_buf : NULL;
  size_t tb = nt, te = 0; /* the keys some row sees lie in [tb, te) */
  for (size_t r = 0; r < n; r++)
    if (a[r] < b[r]) tb = a[r] < tb ? a[r] : tb, te = b[r] > te ? b[r] : te;
  if (tb < te) {
    /* scores q.k * scale (pairs no row sees are computed and never used) */
    titans__attn_scores(S + tb, W, R->q, n, T->kpan, T->pstride, T->row + tb, te - tb, R->d_a, R->scale);
    titans__attn_tile_softmax(R, S, vis, a, b, ranges, tb, te);
    /* o += p v over the visible terms, in key order */
    titans__attn_madd(R->o, n, S + tb, W, 1, vis ? vis + tb : NULL, T->v + tb, te - tb, R->d_a);
  }
  T->n = 0;
}

/* floor(pos / TITANS_ATTN_TILE) without overflow */
static int64_t titans__attn_group(int64_t pos) {
  int64_t g = pos / TITANS_ATTN_TILE;
  return (g * TITANS_ATTN_TILE > pos) ? g - 1 : g;
}

static void titans__attn_tile_begin(titans__attn_tile *T, int positioned, const float *kpan, size_t pstride) {
  T->n = 0;
  T->positioned = positioned;
  T->group = 0;
  T->kpan = kpan;
  T->pstride = pstride;
}

/* Add a key (its row in the panels, the head slice of its value) to the pending tile; folds the tile
   first when the key starts a new one. */
static void titans__attn_tile_add(titans__attn_rows *R, titans__attn_tile *T, size_t row, const float *v,
                                  int64_t pos) {
  int64_t g = T->positioned ? titans__attn_group(pos) : 0;
  if (T->n == TITANS_ATTN_TILE || (T->n > 0 && g != T->group)) titans__attn_fold(R, T);
  if (T->n == 0) T->group = g;
  T->row[T->n] = row;
  T->v[T->n] = v;
  T->pos[T->n] = pos;
  T->n++;
}

/* Normalise the outputs; lse[r * stride] = log-sum-exp (-INFINITY, output zero, where no key was seen). */
static void titans__attn_rows_finish(titans__attn_rows *R, float *lse, size_t stride) {
  for (size_t r = 0; r < R->n; r++) {
    float l = -INFINITY;
    if (R->m[r] != -INFINITY) {
      float inv = 1.0f / R->l[r];
      for (size_t i = 0; i < R->d_a; i++) R->o[r][i] *= inv;
      l = R->m[r] + logf(R->l[r]);
    }
    if (lse) lse[r * stride] = l;
  }
}

static float titans__attn_scale(size_t d_a) { return (float)(1.0 / sqrt((double)d_a)); }

/* ---- argument checks -------------------------------------------------------------------------- */

/* Checks the shapes of a call; *ld = H * d_a. */
static int titans__attn_check(size_t Tq, size_t P, size_t Tk, size_t H, size_t d_a, int64_t window,
                              size_t *ld) {
  size_t rows, n;
  if (H == 0 || d_a == 0 || window < 0) return TITANS_ERR_ARG;
  if (!titans_size_mul(H, d_a, ld) || !titans_size_add(P, Tk, &rows)) return TITANS_ERR_ARG;
  if (!titans_size_mul(rows, *ld, &n) || !titans_size_mul(Tq, *ld, &n)) return TITANS_ERR_ARG;
  if (!titans_size_mul(n, sizeof(float), &n)) return TITANS_ERR_ARG;
  return TITANS_OK;
}

/* ---- RoPE ------------------------------------------------------------------------------------- */

#define TITANS__ROPE_STACK 256 /* inverse frequencies kept on the stack up to this half width */

/* RoPE of one row [H, d_a] at position pos; inv [d_a / 2] the inverse frequencies (NULL: computed here). */
static void titans__rope_row(float *row, int64_t pos, const double *inv, size_t H, size_t d_a, int inverse) {
  size_t half = d_a / 2;
  double p = (double)pos;
  for (size_t i = 0; i < half; i++) {
    double f = inv ? inv[i] : pow(TITANS_ROPE_BASE, -2.0 * (double)i / (double)d_a);
    double ang = p * f;
    double c = cos(ang), s = sin(ang);
    if (inverse) s = -s;
    for (size_t h = 0; h < H; h++) {
      float *xh = row + h * d_a;
      double x1 = xh[i], x2 = xh[i + half];
      xh[i] = (float)(x1 * c - x2 * s);
      xh[i + half] = (float)(x1 * s + x2 * c);
    }
  }
}

static int titans__rope_apply(float *x, const int64_t *pos, size_t T, size_t H, size_t d_a, int inverse) {
  size_t ld, n;
  if (T == 0) return TITANS_OK;
  if (!x || !pos || H == 0 || d_a == 0 || d_a % 2 != 0) return TITANS_ERR_ARG;
  if (!titans_size_mul(H, d_a, &ld) || !titans_size_mul(T, ld, &n)) return TITANS_ERR_ARG;
  size_t half = d_a / 2;
  double inv_stack[TITANS__ROPE_STACK];
  int cached = half <= TITANS__ROPE_STACK;
  if (cached)
    for (size_t i = 0; i < half; i++) inv_stack[i] = pow(TITANS_ROPE_BASE, -2.0 * (double)i / (double)d_a);
  const double *inv = inv_stack;
#ifdef _OPENMP
  if (n >= 16384 && titans__omp_can_split()) {
#pragma omp parallel for schedule(static)
    for (ptrdiff_t tt = 0; tt < (ptrdiff_t)T; tt++)
      titans__rope_row(x + (size_t)tt * ld, pos[tt], cached ? inv : NULL, H, d_a, inverse);
    return TITANS_OK;
  }
#endif
  for (size_t t = 0; t < T; t++) titans__rope_row(x + t * ld, pos[t], cached ? inv : NULL, H, d_a, inverse);
  return TITANS_OK;
}

TITANSDEF int titans_rope_forward(float *x, const int64_t *pos, size_t T, size_t H, size_t d_a) {
  return titans__rope_apply(x, pos, T, H, d_a, 0);
}

TITANSDEF int titans_rope_backward(float *dx, const int64_t *pos, size_t T, size_t H, size_t d_a) {
  return titans__rope_apply(dx, pos, T, H, d_a, 1);
}

/* ---- forward: one block of query rows --------------------------------------------------------- */

#define TITANS__ATTN_QTILE 32 /* query rows per task (forward) */
#define TITANS__ATTN_BQ 64    /* query rows per tile (backward) */
#define TITANS__ATTN_KTILE 16 /* key rows per task (two-pass backward) */
#define TITANS__ATTN_PAR_WORK 65536 /* multiply-adds below which a call runs on one thread */

/* Head h, query rows [i0, i1) (at most TITANS__ATTN_QB) of the call sh: the prefix, then every key that
   some row may see (the rows' visibility filters the pairs). kpan is the head's slice of the keys'
   panel 0, vh of the values' row 0, kr the keys' runs of positions. */
static void titans__attn_forward_block(float *out, float *lse, const float *q, const float *kpan, const float *vh,
                                       const titans_attn_shape *sh, const titans__attn_runs *kr, size_t h,
                                       size_t i0, size_t i1) {
  const int64_t *qpos = sh->qpos;
  size_t P = sh->P, H = sh->H, d_a = sh->d_a, ld = H * d_a;
  int64_t window = sh->window;
  float scale = titans__attn_scale(d_a);
  titans__attn_rows R;
  titans__attn_tile T;
  titans__attn_rows_init(&R, d_a, scale);
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (size_t i = i0; i < i1; i++) {
    titans__attn_rows_add(&R, out + i * ld + h * d_a, q + i * ld + h * d_a, qpos[i], window);
    lo = R.lo[i - i0] < lo ? R.lo[i - i0] : lo;
    hi = R.hi[i - i0] > hi ? R.hi[i - i0] : hi;
  }
  titans__attn_tile_begin(&T, 0, kpan, ld * TITANS__ATTN_PW);
  for (size_t j = 0; j < P; j++) titans__attn_tile_add(&R, &T, j, vh + j * ld, 0);
  titans__attn_fold(&R, &T);
  titans__attn_tile_begin(&T, 1, kpan, ld * TITANS__ATTN_PW);
  titans__attn_iter it;
  titans__attn_iter_init(&it, kr, lo, hi);
  size_t b, e;
  while (titans__attn_iter_next(&it, &b, &e))
    for (size_t j = b; j < e; j++) titans__attn_tile_add(&R, &T, P + j, vh + (P + j) * ld, kr->pos[j]);
  titans__attn_fold(&R, &T);
  titans__attn_rows_finish(&R, lse ? lse + i0 * H + h : NULL, H);
}

/* ---- backward: the pairs of a query tile with a range of keys --------------------------------- */

/* Everything of one backward call. */
typedef struct titans__attn_bwd {
  float *dq, *dk, *dv;
  const float *dout, *q, *k, *out, *lse; /* k: the rows dq adds; scores read the panels */
  const float *kt, *vt; /* [P + Tk rounded up to PW, ld] the keys and the values in panels */
  const int64_t *qpos, *kpos;
  size_t Tq, P, Tk, H, d_a, ld;
  int64_t window;
  float scale;
  titans__attn_runs kr, qr;
} titans__attn_bwd;

/* Everything of a backward call but the panels kt, vt (packed afterwards); ld = H d_a, checked by the
   caller. */
static void titans__attn_bwd_init(titans__attn_bwd *c, const titans_attn_grads *g, const titans_attn_saved *fw,
                                  const titans_attn_shape *sh, size_t ld) {
  const int64_t *qpos = sh->qpos, *kpos = sh->kpos;
  size_t Tq = sh->Tq, P = sh->P, Tk = sh->Tk, H = sh->H, d_a = sh->d_a;
  int64_t window = sh->window;
  c->dq = g->dq, c->dk = g->dk, c->dv = g->dv, c->dout = g->dout;
  c->q = fw->q, c->k = fw->k, c->out = fw->out, c->lse = fw->lse;
  c->kt = c->vt = NULL;
  c->qpos = qpos, c->kpos = kpos;
  c->Tq = Tq, c->P = P, c->Tk = Tk, c->H = H, c->d_a = d_a, c->ld = ld, c->window = window;
  c->scale = titans__attn_scale(d_a);
  titans__attn_runs_init(&c->kr, kpos, Tk);
  titans__attn_runs_init(&c->qr, qpos, Tq);
}

/* The backward's weight g = scale * p * (dp - D) of a (query, key) pair from its softmax weight p
   and dp = dout.v. */
static inline float titans__attn_pair_g(float p, float dp, float D, float scale) { return scale * (p * (dp - D)); }

/* Query rows of one head that see at least one key, in index order. */
typedef struct titans__attn_qtile {
  size_t n;
  const float *q[TITANS__ATTN_BQ];     /* [d_a] head slices of the rows */
  const float *dout[TITANS__ATTN_BQ];
  float *dq[TITANS__ATTN_BQ];
  float lse[TITANS__ATTN_BQ], D[TITANS__ATTN_BQ];
  int64_t lo[TITANS__ATTN_BQ], hi[TITANS__ATTN_BQ]; /* positions of the keys each row sees */
} titans__attn_qtile;

/* Appends query row i of head h (D = dout.out of the row) to a query tile. */
static void titans__attn_qtile_add(titans__attn_qtile *qt, const titans__attn_bwd *c, size_t h, size_t i, float D) {
  size_t off = i * c->ld + h * c->d_a, n = qt->n++;
  qt->q[n] = c->q + off, qt->dout[n] = c->dout + off, qt->dq[n] = c->dq + off;
  qt->lse[n] = c->lse[i * c->H + h], qt->D[n] = D;
  titans__attn_key_bounds(c->qpos[i], c->window, &qt->lo[n], &qt->hi[n]);
}

#define TITANS__ATTN_KGROUP 64 /* keys whose pairs with a query tile are computed together */
enum { TITANS__ATTN_DQ = 1, TITANS__ATTN_DKDV = 2 };

#define TITANS__ATTN_SUBROWS 16 /* query rows of a partly visible group whose keys are narrowed together */

/* One group of at most KGROUP keys of one head against a query tile (titans__attn_bwd_qtile_keys fills
   it, titans__attn_bwd_block computes its blocks): the keys' rows and the pairs' work arrays. */
typedef struct titans__attn_kgroup {
  const size_t *rows;           /* [KG] the keys' rows of k, v (prefix first) */
  const float *const *k;        /* [KG] the keys' head slices [d_a], which dq adds */
  float *const *dk, *const *dv; /* [KG] the keys' gradient rows' head slices [d_a] */
  const float *kpan, *vpan;     /* the head's slices of the keys' and the values' panel 0 */
  float *P, *G;                 /* [rows of the tile, KG] q.k then p; dout.v then g */
} titans__attn_kgroup;

/* The pairs of one group of keys with one block of a query tile's rows, where the rows' keys
   kl[t0 .. t1-1] lie (t: the key's place in its group): p = exp(q.k scale - lse) (the forward's
   softmax weight) and g = scale * p * (dout.v - D), q.k and dout.v by the score kernel as the forward
   computes q.k, then, as `what` asks, dq_r += sum_t g k_t and dk_t += sum_r g q_r, dv_t += sum_r p dout_r
   (vm: [rows, KG] the visible pairs, NULL when all are). */
static void titans__attn_bwd_block(const titans__attn_bwd *c, const titans__attn_qtile *qt,
                                   const titans__attn_kgroup *g, size_t r0, size_t r1, size_t t0, size_t t1,
                                   const unsigned char *vm, int what) {
  const size_t KG = TITANS__ATTN_KGROUP, pstride = c->ld * TITANS__ATTN_PW;
  size_t n = r1 - r0, nk = t1 - t0, d_a = c->d_a;
  float *Pb = g->P + r0 * KG + t0, *Gb = g->G + r0 * KG + t0; /* [n, KG] the block's corner */
  const unsigned char *vb = vm ? vm + r0 * KG + t0 : NULL;
  titans__attn_scores(Pb, KG, qt->q + r0, n, g->kpan, pstride, g->rows + t0, nk, d_a, c->scale); /* the forward's */
  titans__attn_scores(Gb, KG, qt->dout + r0, n, g->vpan, pstride, g->rows + t0, nk, d_a, 1.0f);   /* dout.v */
  for (size_t r = 0; r < n; r++) {
    float *pr = Pb + r * KG, *gr = Gb + r * KG, D = qt->D[r0 + r];
    titans__attn_exp_row(pr, nk, qt->lse[r0 + r], 0); /* every t: invisible weights go unused */
    for (size_t t = 0; t < nk; t++) gr[t] = titans__attn_pair_g(pr[t], gr[t], D, c->scale);
  }
  if (what & TITANS__ATTN_DKDV) {
    titans__attn_madd(g->dk + t0, nk, Gb, 1, KG, vb, qt->q + r0, n, d_a);
    titans__attn_madd(g->dv + t0, nk, Pb, 1, KG, vb, qt->dout + r0, n, d_a);
  }
  if (what & TITANS__ATTN_DQ) titans__attn_madd(qt->dq + r0, n, Gb, KG, 1, vb, g->k + t0, nk, d_a);
}

/* Keys b..e-1 (rows of k, v) against the rows of a query tile, KGROUP keys at a time, each group's
   pairs as titans__attn_bwd_block computes them: dq_r adds its keys in order, dk_j and dv_j their
   rows in order, invisible pairs skipped. A group that some row sees only in part goes SUBROWS rows at
   a time, each block over the keys its rows see (a causal diagonal group then computes 5/8 of its
   pairs, not all). Every scheme of the backward computes its pairs and sums here, so they agree bit
   for bit. */
static void titans__attn_bwd_qtile_keys(const titans__attn_bwd *c, const titans__attn_qtile *qt, size_t h, size_t b,
                                        size_t e, int what) {
  const size_t KG = TITANS__ATTN_KGROUP, SB = TITANS__ATTN_SUBROWS;
  size_t ld = c->ld, ho = h * c->d_a, n = qt->n;
  const float *kpan = c->kt + ho * TITANS__ATTN_PW, *vpan = c->vt + ho * TITANS__ATTN_PW;
  float P[TITANS__ATTN_BQ * TITANS__ATTN_KGROUP]; /* [n, KG] q.k, then p */
  float G[TITANS__ATTN_BQ * TITANS__ATTN_KGROUP]; /* [n, KG] dout.v, then g */
  unsigned char vis[TITANS__ATTN_BQ * TITANS__ATTN_KGROUP]; /* [n, KG] */
  size_t rows[TITANS__ATTN_KGROUP];
  const float *kl[TITANS__ATTN_KGROUP];
  float *dkl[TITANS__ATTN_KGROUP], *dvl[TITANS__ATTN_KGROUP];
  const titans__attn_kgroup g = {rows, kl, dkl, dvl, kpan, vpan, P, G};
  int64_t lo_max = INT64_MIN, hi_min = INT64_MAX; /* every row sees the positions in [lo_max, hi_min] */
  for (size_t r = 0; r < n; r++) {
    lo_max = qt->lo[r] > lo_max ? qt->lo[r] : lo_max;
    hi_min = qt->hi[r] < hi_min ? qt->hi[r] : hi_min;
  }
  for (size_t j0 = b; j0 < e; j0 += KG) {
    size_t nk = e - j0 < KG ? e - j0 : KG;
    int all = 1; /* every row sees every key of the group */
    for (size_t t = 0; t < nk; t++) {
      size_t j = j0 + t;
      rows[t] = j, kl[t] = c->k + j * ld + ho;
      dkl[t] = c->dk + j * ld + ho, dvl[t] = c->dv + j * ld + ho;
      if (j >= c->P) all &= c->kpos[j - c->P] >= lo_max && c->kpos[j - c->P] <= hi_min;
    }
    if (all) {
      titans__attn_bwd_block(c, qt, &g, 0, n, 0, nk, NULL, what);
      continue;
    }
    for (size_t r0 = 0; r0 < n; r0 += SB) {
      size_t r1 = n - r0 < SB ? n : r0 + SB, t0 = nk, t1 = 0, seen = 0;
      for (size_t r = r0; r < r1; r++)
        for (size_t t = 0; t < nk; t++) {
          size_t j = j0 + t;
          int v = j < c->P || (c->kpos[j - c->P] >= qt->lo[r] && c->kpos[j - c->P] <= qt->hi[r]);
          vis[r * KG + t] = (unsigned char)v;
          if (v) seen++, t0 = t < t0 ? t : t0, t1 = t + 1 > t1 ? t + 1 : t1;
        }
      if (seen == 0) continue;
      titans__attn_bwd_block(c, qt, &g, r0, r1, t0, t1, seen == (r1 - r0) * (t1 - t0) ? NULL : vis, what);
    }
  }
}

/* Head h, query rows [i0, i1) (at most a tile): dq of the rows and, as `what` asks, their dk, dv terms.
   Stores D = dout.out of each row in Dsave [Tq, H] when it is not NULL. */
static void titans__attn_bwd_qtile_run(const titans__attn_bwd *c, size_t h, size_t i0, size_t i1, int what,
                                       float *Dsave) {
  titans__attn_qtile qt;
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  float Dr[TITANS__ATTN_BQ]; /* [i1 - i0] dout.out of each row */
  titans__attn_row_dots(Dr, c->dout + i0 * c->ld + h * c->d_a, c->out + i0 * c->ld + h * c->d_a, c->ld, i1 - i0,
                        c->d_a);
  qt.n = 0;
  for (size_t i = i0; i < i1; i++) {
    float D = Dr[i - i0];
    if (Dsave) Dsave[i * c->H + h] = D;
    if (c->lse[i * c->H + h] == -INFINITY) continue; /* sees no key: no gradient */
    titans__attn_qtile_add(&qt, c, h, i, D);
    lo = qt.lo[qt.n - 1] < lo ? qt.lo[qt.n - 1] : lo;
    hi = qt.hi[qt.n - 1] > hi ? qt.hi[qt.n - 1] : hi;
  }
  if (qt.n == 0) return;
  titans__attn_bwd_qtile_keys(c, &qt, h, 0, c->P, what);
  titans__attn_iter it; /* keys some row of the tile may see; the rows filter them */
  titans__attn_iter_init(&it, &c->kr, lo, hi);
  size_t b, e;
  while (titans__attn_iter_next(&it, &b, &e)) titans__attn_bwd_qtile_keys(c, &qt, h, c->P + b, c->P + e, what);
}

/* Head h, key rows [j0, j1): the dk, dv terms of every query row that may see one of the keys, rows in
   index order, a query tile at a time (the pairs' visibility filters them), as the fused pass adds
   them. D is [Tq, H] from the dq pass. */
static void titans__attn_bwd_ktile_run(const titans__attn_bwd *c, const float *D, size_t h, size_t j0, size_t j1) {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  int prefix = j0 < c->P; /* a prefix key is seen by every query */
  for (size_t j = j0 > c->P ? j0 : c->P; j < j1; j++) {
    int64_t a, z;
    titans__attn_query_bounds(c->kpos[j - c->P], c->window, &a, &z);
    lo = a < lo ? a : lo;
    hi = z > hi ? z : hi;
  }
  titans__attn_qtile qt;
  qt.n = 0;
  titans__attn_iter it;
  titans__attn_iter_init(&it, &c->qr, prefix ? INT64_MIN : lo, prefix ? INT64_MAX : hi);
  size_t b, e;
  while (titans__attn_iter_next(&it, &b, &e))
    for (size_t i = b; i < e; i++) {
      if (c->lse[i * c->H + h] == -INFINITY) continue;
      titans__attn_qtile_add(&qt, c, h, i, D[i * c->H + h]);
      if (qt.n == TITANS__ATTN_BQ) titans__attn_bwd_qtile_keys(c, &qt, h, j0, j1, TITANS__ATTN_DKDV), qt.n = 0;
    }
  if (qt.n > 0) titans__attn_bwd_qtile_keys(c, &qt, h, j0, j1, TITANS__ATTN_DKDV);
}

/* ---- the forward and the backward ------------------------------------------------------------- */

#ifdef _OPENMP
/* An upper bound of the multiply-adds of a call (in double: never overflows); decides on threads. */
static double titans__attn_work(size_t Tq, size_t P, size_t Tk, size_t ld) {
  return (double)Tq * ((double)P + (double)Tk) * (double)ld;
}
#endif

/* titans_attention_forward with the keys' panels in ws (titans__attn_panel_floats(P + Tk, H d_a)
   floats), or in memory of its own when ws is NULL. */
static int titans__attention_forward_ws(float *out, float *lse, const float *q, const float *k, const float *v,
                                        const titans_attn_shape *sh, float *ws) {
  const int64_t *qpos = sh->qpos, *kpos = sh->kpos;
  size_t Tq = sh->Tq, P = sh->P, Tk = sh->Tk, H = sh->H, d_a = sh->d_a, ld;
  int64_t window = sh->window;
  int st = titans__attn_check(Tq, P, Tk, H, d_a, window, &ld);
  if (st != TITANS_OK) return st;
  if (Tq == 0) return TITANS_OK;
  if (!out || !q || !qpos || ((P + Tk) > 0 && (!k || !v)) || (Tk > 0 && !kpos)) return TITANS_ERR_ARG;
  float *kt = NULL, *own = NULL; /* [P + Tk rounded up to PW, ld] the keys in panels */
  if (P + Tk > 0) {
    size_t nf = titans__attn_panel_floats(P + Tk, ld);
    if (nf == 0) return TITANS_ERR_ARG;
    /* not zeroed: the packing writes every float, padding included */
    if (!(kt = ws) && !(kt = own = (float *)titans__alloc_aligned(nf * sizeof(float)))) return TITANS_ERR_NOMEM;
    titans__attn_panel_pack(kt, k, P + Tk, ld);
  }
  titans__attn_runs kr;
  titans__attn_runs_init(&kr, kpos, Tk);
  size_t ntile = (Tq + TITANS__ATTN_QTILE - 1) / TITANS__ATTN_QTILE;
  size_t ntask = H * ntile;
#ifdef _OPENMP
  int par = ntask > 1 && titans__attn_work(Tq, P, Tk, ld) >= TITANS__ATTN_PAR_WORK && titans__omp_can_split();
#pragma omp parallel for schedule(dynamic, 1) if (par)
#endif
  for (ptrdiff_t task = 0; task < (ptrdiff_t)ntask; task++) {
    size_t h = (size_t)task % H, i0 = (size_t)task / H * TITANS__ATTN_QTILE;
    size_t i1 = i0 + TITANS__ATTN_QTILE < Tq ? i0 + TITANS__ATTN_QTILE : Tq;
    const float *kpan = kt ? kt + h * d_a * TITANS__ATTN_PW : NULL, *vh = v ? v + h * d_a : NULL;
    for (size_t b = i0; b < i1; b += TITANS__ATTN_QB)
      titans__attn_forward_block(out, lse, q, kpan, vh, sh, &kr, h, b,
                                 b + TITANS__ATTN_QB < i1 ? b + TITANS__ATTN_QB : i1);
  }
  titans_free(own);
  return TITANS_OK;
}

TITANSDEF int titans_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                                       const titans_attn_shape *shape) {
  if (!shape) return TITANS_ERR_ARG;
  return titans__attention_forward_ws(out, lse, q, k, v, shape, NULL);
}

enum { TITANS__ATTN_BWD_AUTO = 0, TITANS__ATTN_BWD_FUSED = 1, TITANS__ATTN_BWD_TWO_PASS = 2 };

/* The backward with a chosen scheme (tests compare them):
   FUSED     one task per head: query tiles in order, each adding its dq and its dk, dv terms;
   TWO_PASS  dq over heads x query tiles, then dk, dv over heads x key tiles (recomputes the pairs).
   Both add every gradient element's terms in the same order with the same arithmetic. The keys' and
   the values' panels go in ws (2 titans__attn_panel_floats(P + Tk, H d_a) floats), or in memory of its
   own when ws is NULL. */
static int titans__attention_backward_ws(const titans_attn_grads *g, const titans_attn_saved *fw,
                                         const titans_attn_shape *sh, int mode, float *ws) {
  titans__attn_bwd c;
  size_t Tq = sh->Tq, P = sh->P, Tk = sh->Tk, H = sh->H, ld;
  const float *k = fw->k, *v = fw->v;
  int st = titans__attn_check(Tq, P, Tk, H, sh->d_a, sh->window, &ld);
  if (st != TITANS_OK) return st;
  if (Tq == 0 || P + Tk == 0) return TITANS_OK;
  if (!g->dq || !g->dk || !g->dv || !g->dout || !fw->q || !k || !v || !fw->out || !fw->lse || !sh->qpos ||
      (Tk > 0 && !sh->kpos))
    return TITANS_ERR_ARG;
  titans__attn_bwd_init(&c, g, fw, sh, ld);
  int par = 0, nth = 1;
#ifdef _OPENMP
  par = titans__attn_work(Tq, P, Tk, c.ld) >= TITANS__ATTN_PAR_WORK && titans__omp_can_split();
  if (par) nth = omp_get_max_threads();
#endif
  (void)par;
  /* two passes cost ~1.8x the work of the fused pass, which only has H tasks: worth it from 3H threads */
  if (mode == TITANS__ATTN_BWD_AUTO) mode = (size_t)nth >= 3 * H ? TITANS__ATTN_BWD_TWO_PASS : TITANS__ATTN_BWD_FUSED;
  float *D = NULL; /* [Tq, H] dout.out of each row (two passes) */
  if (mode == TITANS__ATTN_BWD_TWO_PASS) {
    D = titans_alloc_floats(Tq * H); /* Tq * H <= Tq * ld: checked above */
    if (!D) mode = TITANS__ATTN_BWD_FUSED;
  }
  size_t nf = titans__attn_panel_floats(P + Tk, c.ld);
  if (nf == 0 || nf > SIZE_MAX / 2 / sizeof(float)) {
    titans_free(D);
    return TITANS_ERR_ARG;
  }
  /* [2, nf] k, then v panels; not zeroed: the packing writes every float, padding included */
  float *own = NULL, *kvt = ws ? ws : (own = (float *)titans__alloc_aligned(2 * nf * sizeof(float)));
  if (!kvt) {
    titans_free(D);
    return TITANS_ERR_NOMEM;
  }
  titans__attn_panel_pack(kvt, k, P + Tk, c.ld);
  titans__attn_panel_pack(kvt + nf, v, P + Tk, c.ld);
  c.kt = kvt, c.vt = kvt + nf;
  size_t nqt = (Tq + TITANS__ATTN_BQ - 1) / TITANS__ATTN_BQ;
  if (mode == TITANS__ATTN_BWD_FUSED) {
    /* the dk, dv rows of a head are only touched by its task, query tiles in order */
#ifdef _OPENMP
#pragma omp parallel for schedule(static, 1) if (par && H > 1)
#endif
    for (ptrdiff_t hh = 0; hh < (ptrdiff_t)H; hh++)
      for (size_t i0 = 0; i0 < Tq; i0 += TITANS__ATTN_BQ)
        titans__attn_bwd_qtile_run(&c, (size_t)hh, i0, i0 + TITANS__ATTN_BQ < Tq ? i0 + TITANS__ATTN_BQ : Tq,
                                   TITANS__ATTN_DQ | TITANS__ATTN_DKDV, NULL);
    titans_free(own);
    return TITANS_OK;
  }
  size_t ntask = H * nqt;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) if (par)
#endif
  for (ptrdiff_t task = 0; task < (ptrdiff_t)ntask; task++) {
    size_t h = (size_t)task % H, i0 = (size_t)task / H * TITANS__ATTN_BQ;
    titans__attn_bwd_qtile_run(&c, h, i0, i0 + TITANS__ATTN_BQ < Tq ? i0 + TITANS__ATTN_BQ : Tq, TITANS__ATTN_DQ,
                               D);
  }
  size_t nkt = (P + Tk + TITANS__ATTN_KTILE - 1) / TITANS__ATTN_KTILE;
  ntask = H * nkt;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) if (par)
#endif
  for (ptrdiff_t task = 0; task < (ptrdiff_t)ntask; task++) {
    size_t h = (size_t)task % H, j0 = (size_t)task / H * TITANS__ATTN_KTILE;
    titans__attn_bwd_ktile_run(&c, D, h, j0, j0 + TITANS__ATTN_KTILE < P + Tk ? j0 + TITANS__ATTN_KTILE : P + Tk);
  }
  titans_free(own);
  titans_free(D);
  return TITANS_OK;
}

/* The backward with a chosen scheme and memory of its own (tests compare the schemes). */
static int titans__attention_backward_mode(const titans_attn_grads *g, const titans_attn_saved *fw,
                                           const titans_attn_shape *sh, int mode) {
  return titans__attention_backward_ws(g, fw, sh, mode, NULL);
}

TITANSDEF int titans_attention_backward(const titans_attn_grads *grads, const titans_attn_saved *saved,
                                        const titans_attn_shape *shape) {
  if (!grads || !saved || !shape) return TITANS_ERR_ARG;
  return titans__attention_backward_mode(grads, saved, shape, TITANS__ATTN_BWD_AUTO);
}

/* ---- KV cache --------------------------------------------------------------------------------- */

/* The public struct spells the error buffer's size out; it must be the core's. */
typedef char titans__kv_cache_errlen_check[sizeof(((titans_kv_cache *)0)->error) == TITANS__ERRLEN ? 1 : -1];

/* A cache with `reserve` (<= capacity, >= 1) ring slots allocated; the full size is checked for
   overflow here, so growing later cannot overflow. */
static int titans__kv_cache_init_reserve(titans_kv_cache *cache, size_t P, size_t capacity, size_t H, size_t d_a,
                                         int64_t window, size_t reserve) {
  size_t ld, rows, n;
  memset(cache, 0, sizeof(*cache));
  if (capacity == 0 || H == 0 || d_a == 0 || window < 0)
    return titans__error(cache->error, TITANS_ERR_ARG, "kv cache: capacity, H and d_a must be > 0, window >= 0");
  if (!titans_size_mul(H, d_a, &ld) || !titans_size_add(P, capacity, &rows) || !titans_size_mul(rows, ld, &n) ||
      !titans_size_mul(capacity, sizeof(int64_t), &n) || titans__attn_panel_floats(rows, ld) == 0)
    return titans__error(cache->error, TITANS_ERR_NOMEM, "kv cache: size overflows");
  reserve = reserve < 1 ? 1 : reserve > capacity ? capacity : reserve;
  rows = P + reserve;
  cache->k = titans_alloc_floats(rows * ld);
  cache->v = titans_alloc_floats(rows * ld);
  cache->pos = (int64_t *)titans_alloc_bytes(reserve, sizeof(int64_t));
  size_t nf = cache->k && cache->v && cache->pos ? titans__attn_panel_floats(rows, ld) : 0;
  cache->kt = nf ? titans_alloc_floats(nf) : NULL; /* zero, as k */
  if (!cache->k || !cache->v || !cache->pos || !cache->kt) {
    titans_kv_cache_free(cache);
    return titans__error(cache->error, TITANS_ERR_NOMEM, "kv cache: out of memory (%zu rows of %zu floats)", rows, ld);
  }
  cache->P = P;
  cache->capacity = capacity;
  cache->reserved = reserve;
  cache->H = H;
  cache->d_a = d_a;
  cache->window = window;
  return TITANS_OK;
}

TITANSDEF int titans_kv_cache_init(titans_kv_cache *cache, size_t P, size_t capacity, size_t H, size_t d_a,
                                   int64_t window) {
  return titans__kv_cache_init_reserve(cache, P, capacity, H, d_a, window, capacity);
}

/* Makes at least `slots` (<= capacity) ring slots allocated: doubles, so appends cost O(1) amortised.
   Only grows while the ring has not wrapped (slots in order), so the rows stay where they are. On
   failure nothing the cache uses changes. */
static int titans__kv_cache_reserve(titans_kv_cache *cache, size_t slots) {
  if (slots <= cache->reserved) return TITANS_OK;
  size_t cap = cache->capacity, grow = cache->reserved > cap / 2 ? cap : 2 * cache->reserved;
  if (grow < slots) grow = slots;
  if (grow > cap) grow = cap;
  size_t ld = cache->H * cache->d_a, bytes = (cache->P + grow) * ld * sizeof(float); /* checked at init */
  size_t old_bytes = (cache->P + cache->reserved) * ld * sizeof(float);
  float *k = (float *)titans__realloc_aligned(cache->k, old_bytes, bytes);
  if (!k) return titans__error(cache->error, TITANS_ERR_NOMEM, "kv cache: cannot grow to %zu rows", grow);
  cache->k = k;
  float *v = (float *)titans__realloc_aligned(cache->v, old_bytes, bytes);
  if (!v) return titans__error(cache->error, TITANS_ERR_NOMEM, "kv cache: cannot grow to %zu rows", grow);
  cache->v = v;
  int64_t *pos =
      (int64_t *)titans__realloc_aligned(cache->pos, cache->reserved * sizeof(int64_t), grow * sizeof(int64_t));
  if (!pos) return titans__error(cache->error, TITANS_ERR_NOMEM, "kv cache: cannot grow to %zu rows", grow);
  cache->pos = pos;
  size_t old_nf = titans__attn_panel_floats(cache->P + cache->reserved, ld);
  size_t nf = titans__attn_panel_floats(cache->P + grow, ld); /* <= the capacity's: checked at init */
  float *kt = (float *)titans__realloc_aligned(cache->kt, old_nf * sizeof(float), nf * sizeof(float));
  if (!kt) return titans__error(cache->error, TITANS_ERR_NOMEM, "kv cache: cannot grow to %zu rows", grow);
  cache->kt = kt;
  /* new rows start at zero, as titans_kv_cache_init's: a restored state need not write rows it lacks */
  size_t old = cache->P + cache->reserved, add = (grow - cache->reserved) * ld;
  memset(cache->k + old * ld, 0, add * sizeof(float));
  memset(cache->v + old * ld, 0, add * sizeof(float));
  memset(cache->kt + old_nf, 0, (nf - old_nf) * sizeof(float)); /* the old panels' spare lanes are zero */
  cache->reserved = grow;
  return TITANS_OK;
}

TITANSDEF void titans_kv_cache_free(titans_kv_cache *cache) {
  if (!cache) return;
  titans_free(cache->k);
  titans_free(cache->v);
  titans_free(cache->kt);
  titans_free(cache->pos);
  memset(cache, 0, sizeof(*cache));
}

TITANSDEF void titans_kv_cache_set_prefix(titans_kv_cache *cache, const float *k_prefix, const float *v_prefix) {
  size_t n = cache->P * cache->H * cache->d_a;
  if (n == 0) return;
  memcpy(cache->k, k_prefix, n * sizeof(float));
  memcpy(cache->v, v_prefix, n * sizeof(float));
  size_t ld = cache->H * cache->d_a;
  for (size_t j = 0; j < cache->P; j++) titans__attn_panel_put(cache->kt, ld, j, cache->k + j * ld);
}

/* kt := the panels of every allocated row of k, after k was written directly (a restored state). */
static void titans__kv_cache_sync(titans_kv_cache *cache) {
  titans__attn_panel_pack(cache->kt, cache->k, cache->P + cache->reserved, cache->H * cache->d_a);
}

TITANSDEF void titans_kv_cache_reset(titans_kv_cache *cache) {
  cache->count = 0;
  cache->next = 0;
}

TITANSDEF int titans_kv_cache_copy(titans_kv_cache *dst, const titans_kv_cache *src) {
  if (dst == src) return TITANS_OK;
  if (!dst->k || dst->P != src->P || dst->capacity != src->capacity || dst->H != src->H || dst->d_a != src->d_a)
    return titans__error(dst->error, TITANS_ERR_ARG, "kv cache copy: shapes differ");
  /* the valid slots are 0 .. count - 1 (in order before the ring fills, all of them after) */
  if (titans__kv_cache_reserve(dst, src->count)) return TITANS_ERR_NOMEM;
  size_t n = (src->P + src->count) * src->H * src->d_a;
  memcpy(dst->k, src->k, n * sizeof(float));
  memcpy(dst->v, src->v, n * sizeof(float));
  /* the panels of those rows; the spare lanes of the last one are zero on both sides */
  memcpy(dst->kt, src->kt, titans__attn_panel_floats(src->P + src->count, src->H * src->d_a) * sizeof(float));
  if (src->count) memcpy(dst->pos, src->pos, src->count * sizeof(int64_t));
  dst->window = src->window;
  dst->count = src->count;
  dst->next = src->next;
  return TITANS_OK;
}

TITANSDEF int titans_kv_cache_clone(titans_kv_cache *dst, const titans_kv_cache *src) {
  int st = titans__kv_cache_init_reserve(dst, src->P, src->capacity, src->H, src->d_a, src->window, src->reserved);
  if (st != TITANS_OK) return st;
  return titans_kv_cache_copy(dst, src);
}

TITANSDEF int titans_kv_cache_append(titans_kv_cache *cache, const float *k, const float *v,
                                     const int64_t *pos, size_t n) {
  if (n == 0) return TITANS_OK;
  if (!cache->k) return titans__error(cache->error, TITANS_ERR_STATE, "kv cache append: cache not initialised");
  if (!k || !v || !pos) return titans__error(cache->error, TITANS_ERR_ARG, "kv cache append: NULL buffer");
  size_t ld = cache->H * cache->d_a, cap = cache->capacity;
  size_t first = n > cap ? n - cap : 0; /* older rows would be overwritten within this call */
  if (cache->reserved < cap) { /* not wrapped yet: next == count, the slots needed are next .. */
    size_t need = n - first > cap - cache->next ? cap : cache->next + (n - first);
    if (titans__kv_cache_reserve(cache, need)) return TITANS_ERR_NOMEM;
  }
  for (size_t r = first; r < n; r++) {
    size_t slot = cache->next;
    memcpy(cache->k + (cache->P + slot) * ld, k + r * ld, ld * sizeof(float));
    memcpy(cache->v + (cache->P + slot) * ld, v + r * ld, ld * sizeof(float));
    titans__attn_panel_put(cache->kt, ld, cache->P + slot, k + r * ld);
    cache->pos[slot] = pos[r];
    cache->next = slot + 1 == cap ? 0 : slot + 1;
    if (cache->count < cap) cache->count++;
  }
  return TITANS_OK;
}

/* One head of a cached query: prefix, then the visible ring rows oldest first. */
static float titans__kv_cache_attend_head(const titans_kv_cache *c, float *o, const float *qh, size_t h, int64_t qp,
                                          float scale) {
  size_t ld = c->H * c->d_a, cap = c->capacity;
  const float *kpan = c->kt + h * c->d_a * TITANS__ATTN_PW, *vh = c->v + h * c->d_a;
  titans__attn_rows R;
  titans__attn_tile T;
  float lse;
  titans__attn_rows_init(&R, c->d_a, scale);
  titans__attn_rows_add(&R, o, qh, qp, c->window);
  titans__attn_tile_begin(&T, 0, kpan, ld * TITANS__ATTN_PW);
  for (size_t j = 0; j < c->P; j++) titans__attn_tile_add(&R, &T, j, vh + j * ld, 0);
  titans__attn_fold(&R, &T);
  titans__attn_tile_begin(&T, 1, kpan, ld * TITANS__ATTN_PW);
  size_t oldest = (c->next + cap - c->count) % cap;
  for (size_t m = 0; m < c->count; m++) {
    size_t s = (oldest + m) % cap;
    if (c->pos[s] >= R.lo[0] && c->pos[s] <= R.hi[0])
      titans__attn_tile_add(&R, &T, c->P + s, vh + (c->P + s) * ld, c->pos[s]);
  }
  titans__attn_fold(&R, &T);
  titans__attn_rows_finish(&R, &lse, 1);
  return lse;
}

TITANSDEF int titans_kv_cache_attend(titans_kv_cache *cache, float *out, float *lse, const float *q,
                                     int64_t qpos) {
  if (!cache->k) return titans__error(cache->error, TITANS_ERR_STATE, "kv cache attend: cache not initialised");
  if (!out || !q) return titans__error(cache->error, TITANS_ERR_ARG, "kv cache attend: NULL buffer");
  const titans_kv_cache *c = cache;
  size_t H = c->H, d_a = c->d_a;
  float scale = titans__attn_scale(d_a);
#ifdef _OPENMP
  if (H > 1 && titans__attn_work(1, c->P, c->count, H * d_a) >= TITANS__ATTN_PAR_WORK && titans__omp_can_split()) {
#pragma omp parallel for schedule(static, 1)
    for (ptrdiff_t hh = 0; hh < (ptrdiff_t)H; hh++) {
      float l = titans__kv_cache_attend_head(c, out + (size_t)hh * d_a, q + (size_t)hh * d_a, (size_t)hh, qpos, scale);
      if (lse) lse[hh] = l;
    }
    return TITANS_OK;
  }
#endif
  for (size_t h = 0; h < H; h++) {
    float l = titans__kv_cache_attend_head(c, out + h * d_a, q + h * d_a, h, qpos, scale);
    if (lse) lse[h] = l;
  }
  return TITANS_OK;
}

TITANSDEF const char *titans_kv_cache_error(const titans_kv_cache *cache) { return cache->error; }
/* ---- 6. Safetensors files (implementation) ---------------------------------------------------- */
#include <stdlib.h> /* qsort */
#ifndef TITANS_NO_STDIO
#include <errno.h>
#if !defined(TITANS_NO_FSYNC) && (defined(__unix__) || defined(__APPLE__))
#include <fcntl.h>  /* open: declared without feature macros, unlike fileno */
#include <unistd.h> /* fsync, close */
#define TITANS__FSYNC 1
#endif
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

/* ---- reader: a strict JSON parser ------------------------------------------------------------- */

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
    if (!titans__st_accept(p, ','))
      return titans__st_fail(p, close == ']' ? "expected ',' or ']'" : "expected ',' or '}'");
  }
}

/* ---- reader: the safetensors schema ----------------------------------------------------------- */

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
        if ((rc = titans__st_parse_uints(p, name, "shape", t->shape, TITANS_ST_MAX_DIMS, &t->ndim)) != TITANS_OK)
          return rc;
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
      return titans__error(r->error, TITANS_ERR_FORMAT, "safetensors: duplicate tensor name '%.200s'",
                           r->tensors[i].name);
  if (r->n_meta > 1) qsort(r->meta, r->n_meta, 2 * sizeof(const char *), titans__st_cmp_meta);
  for (size_t i = 1; i < r->n_meta; i++)
    if (strcmp(r->meta[2 * i - 2], r->meta[2 * i]) == 0)
      return titans__error(r->error, TITANS_ERR_FORMAT, "safetensors: duplicate __metadata__ key '%.200s'",
                           r->meta[2 * i]);
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
                             t->name, t->offset,
                             t->offset < end ? "overlaps the tensor before it" : "leaves a gap before it");
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
    return titans__error(r->error, TITANS_ERR_IO, "safetensors: short read of '%.180s' (%zu of %zu bytes)", path, got,
                         size);
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

/* ---- writer ----------------------------------------------------------------------------------- */

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
  if (!(t->name = titans__st_strdup(name)))
    return titans__error(w->error, TITANS_ERR_NOMEM, "safetensors: out of memory");
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

#ifdef TITANS__FSYNC
/* fsync of a path: the file (opened for writing: some systems refuse fsync on a read-only descriptor)
   or a folder. 0, or the errno. */
static int titans__st_fsync(const char *path, int folder) {
  int fd = open(path, folder ? O_RDONLY : O_WRONLY);
  if (fd < 0) return errno;
  int err = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  return err;
}

/* fsync of the folder holding path, so the rename itself survives a crash. Best effort: some file
   systems refuse fsync on a folder (EINVAL), and the file's bytes are already on the disk. */
static void titans__st_fsync_folder(const char *path) {
  size_t n = strlen(path);
  while (n > 0 && path[n - 1] != '/') n--;
  char *dir = (char *)titans_alloc_bytes(n + 2, 1);
  if (!dir) return;
  if (n == 0) dir[0] = '.';
  else memcpy(dir, path, n);
  (void)titans__st_fsync(dir, 1);
  titans_free(dir);
}
#endif

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
#ifdef TITANS__FSYNC
    /* the bytes reach the disk before the rename publishes them: a crash leaves the old file or the new */
    if (ok && (err = titans__st_fsync(tmp, 0)) != 0) ok = 0;
#endif
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
#ifdef TITANS__FSYNC
    else titans__st_fsync_folder(path);
#endif
  }
  titans_free(head);
  titans_free(tmp);
  return rc;
}
#endif
/* ---- 7. Models, training, sessions (implementation) ------------------------------------------- */

/* Return the first error of a call / NOMEM for a failed allocation. */
#define TITANS__TRY(expr)        \
  do {                           \
    int titans__rc_ = (expr);    \
    if (titans__rc_) return titans__rc_; \
  } while (0)
#define TITANS__NEED(ptr)        \
  do {                           \
    if (!(ptr)) return TITANS_ERR_NOMEM; \
  } while (0)

/* ---- the block kinds: one table -------------------------------------------------------------------
   Everything that differs between ATTN, SWA, MAC, MAG, MAL, LMM and LM2 is one row of titans__kinds: which
   sublayers (hence which parameters) the kind has, which keys its attention sees, how its memory meets
   the persistent tokens, and its functions: the mixer's training forward and backward and its
   one-token step, written side by side in the kind's own subsection further down ("---- MAG: memory
   as a gate", ...), and its carry: what a session and a stream keep for it beyond the KV cache its keys
   fix and the running memory (MAC's committed memory, LM2's bank; titans__carry). The rest of the model
   (blocks, the whole model, streams, sessions, forks, state files, checkpoints) reads the table and never
   names a kind. To add a kind: write its subsection (forward, backward, step, stream unit, and a carry
   with its functions if its session keeps state of its own), give it a row here and a TITANS_BLOCK_
   number (docs/model.md section 3). Only the KV cache's bookkeeping reads `keys` beyond the table:
   TITANS__KEYS_SEGMENT's cache holds two rows a token (Hm and X) and empties at each segment
   (titans__kv_capacity, titans__session_kv_appended, titans__kv_rebuild), a layout of attention's keys. */

struct titans__arena;
struct titans__layer_fwd;
struct titans__step_work;
struct titans__rows_work;

/* Which keys a kind's attention sees; it also fixes the size of its KV cache in a session. */
enum {
  TITANS__KEYS_NONE = 0,   /* no attention (LMM): no attn.* and no persist parameters */
  TITANS__KEYS_ALL = 1,    /* every earlier token (ATTN; a session keeps the last max_context) */
  TITANS__KEYS_WINDOW = 2, /* the last `window` tokens (SWA, MAG, MAL) */
  TITANS__KEYS_SEGMENT = 3 /* the current segment's Hm and X rows, at local positions (MAC) */
};

/* The functions of a kind (declared with these types so the table can name them before their subsections). */
/* The mixer of a batch (training, evaluation, streams): lf->mix [B, T, d] from lf->xn [B, T, d]. */
typedef int titans__forward_fn(const titans_config *c, const titans_layer *L, struct titans__layer_fwd *lf,
                               struct titans__arena *ar, const int64_t *pos, size_t B, size_t T);
/* Its backward: accumulates dxn [B, T, d] and the gradients G from dmix [B, T, d]. */
typedef int titans__backward_fn(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                struct titans__layer_fwd *lf, struct titans__arena *ar, float *dxn, const float *dmix,
                                const int64_t *pos, size_t B, size_t T);
/* The mixer of one token at position p of a session: mix [d] from xn [d] (scratch in w). */
typedef int titans__step_fn(titans_session *s, int l, float *mix, const float *xn, long long p,
                            struct titans__step_work *w);
/* The mixer of one token in each of n streams of a session batch, with the shared weights' products over
   the n rows: w->mix [n, d] from w->xn [n, d] for the sessions w->s [n]. A kind without it runs its step
   on each stream in turn. */
typedef int titans__step_rows_fn(struct titans__rows_work *w, size_t n, int l);
/* Streams: windows must be multiples of this; 0 (or no function): the kind cannot stream with c. */
typedef size_t titans__stream_unit_fn(const titans_config *c);

/* What a session carries per layer for a kind beyond the KV cache its keys fix and the running memory
   (mem): the kind's own state (MAC: the memory of the segment's start; LM2: the bank and the write in
   progress), one function per job, written in the kind's subsection. Sessions, forks, state files and
   streams call these and never name the kind. */
struct titans__session_layer;
/* Allocates the state of sl (zeroed before); free releases it (also after a failed or no init). */
typedef int titans__carry_init_fn(struct titans__session_layer *sl, const titans_config *c);
typedef void titans__carry_free_fn(struct titans__session_layer *sl);
/* The state at a sequence's start, from the layer's weights L (after the running memory's reset). */
typedef void titans__carry_reset_fn(struct titans__session_layer *sl, const titans_config *c, const titans_layer *L);
/* dst becomes src (a fork; same model, so the same shapes). */
typedef int titans__carry_copy_fn(struct titans__session_layer *dst, const struct titans__session_layer *src,
                                  const titans_config *c);
/* The floats a state file saves and loads (tensor layers.{l}.<carry.tensor>): *count of them. */
typedef float *titans__carry_saved_fn(struct titans__session_layer *sl, const titans_config *c, size_t *count);
/* After a load of those floats (checked finite) at position pos: checks the rest and re-derives caches;
   TITANS_ERR_FORMAT and why in err. */
typedef int titans__carry_loaded_fn(struct titans__session_layer *sl, const titans_config *c, const titans_layer *L,
                                    long long pos, char *err);
/* A stream's carry per row and layer: the floats of it (0: none), and what a window's forward leaves
   there: rows [B, floats] from lf. */
typedef size_t titans__stream_carry_fn(const titans_config *c);
typedef void titans__stream_keep_fn(float *rows, const struct titans__layer_fwd *lf, const titans_config *c, size_t B);

typedef struct titans__carry {
  const char *tensor;        /* its session-state tensor, layers.{l}.<tensor> */
  unsigned char feed_check;  /* 1: each feed checks the saved floats for NaN and Inf (0: a copy of the memory,
                                which is checked itself) */
  titans__carry_init_fn *init;
  titans__carry_free_fn *free;
  titans__carry_reset_fn *reset;
  titans__carry_copy_fn *copy;
  titans__carry_saved_fn *saved;
  titans__carry_loaded_fn *loaded;
  const char *stream_tensor; /* a stream checkpoint's tensor of the rows, [n_layers, B, stream_floats]; NULL: none */
  titans__stream_carry_fn *stream_floats;
  titans__stream_keep_fn *stream_keep;
} titans__carry;

typedef struct titans__kind {
  const char *name;                /* "mag": the name in files, JSON and on the command line */
  unsigned char keys;              /* TITANS__KEYS_* */
  unsigned char mem;               /* 1: a memory layer (mem.* parameters, a memory state to carry) */
  unsigned char gate;              /* 1: out = RMSNorm(y; gate.norm_y) * sigmoid(RMSNorm(m; gate.norm_m)) */
  unsigned char mem_reads_persist; /* 1: the memory reads the N_p persistent tokens before the text */
  unsigned char prefix_from_mem;   /* 1: attention's prefix rows are the memory's outputs for them (MAL) */
  unsigned char bank;              /* 1: an LM2 bank (lm2.* parameters, a bank and a segment's rows to carry) */
  titans__forward_fn *forward;
  titans__backward_fn *backward;
  titans__step_fn *step;
  titans__stream_unit_fn *stream_unit;
  titans__step_rows_fn *step_rows; /* NULL: a session batch runs step stream by stream */
  const titans__carry *carry;      /* NULL: a session carries only the KV cache and the running memory */
} titans__kind;

/* ATTN and SWA share the baseline's code: ATTN is SWA with an unbounded window. */
static titans__forward_fn titans__baseline_forward, titans__mac_forward, titans__mag_forward, titans__mal_forward,
    titans__lmm_forward, titans__lm2_forward;
static titans__backward_fn titans__baseline_backward, titans__mac_backward, titans__mag_backward, titans__mal_backward,
    titans__lmm_backward, titans__lm2_backward;
static titans__step_fn titans__baseline_step, titans__mac_step, titans__mag_step, titans__mal_step, titans__lmm_step,
    titans__lm2_step;
static titans__step_rows_fn titans__baseline_step_rows, titans__mac_step_rows, titans__mag_step_rows,
    titans__mal_step_rows, titans__lmm_step_rows, titans__lm2_step_rows;
static titans__stream_unit_fn titans__swa_stream_unit, titans__mac_stream_unit, titans__mag_stream_unit,
    titans__lmm_stream_unit, titans__lm2_stream_unit;
static titans__carry_init_fn titans__mac_carry_init, titans__lm2_carry_init;
static titans__carry_free_fn titans__mac_carry_free, titans__lm2_carry_free;
static titans__carry_reset_fn titans__mac_carry_reset, titans__lm2_carry_reset;
static titans__carry_copy_fn titans__mac_carry_copy, titans__lm2_carry_copy;
static titans__carry_saved_fn titans__mac_carry_saved, titans__lm2_carry_saved;
static titans__carry_loaded_fn titans__mac_carry_loaded, titans__lm2_carry_loaded;
static titans__stream_carry_fn titans__lm2_stream_floats;
static titans__stream_keep_fn titans__lm2_stream_keep;

/* MAC: the memory as it was at the segment's start, which retrieval reads (a copy of the running memory,
   so a feed does not check it again). */
static const titans__carry titans__mac_carry = {
    "mem.committed", 0, titans__mac_carry_init, titans__mac_carry_free, titans__mac_carry_reset,
    titans__mac_carry_copy, titans__mac_carry_saved, titans__mac_carry_loaded, NULL, NULL, NULL};
/* LM2: the bank as of the segment's start and the sums of the write in progress; a stream carries each
   row's bank after its last complete segment. */
static const titans__carry titans__lm2_carry = {
    "lm2.state", 1, titans__lm2_carry_init, titans__lm2_carry_free, titans__lm2_carry_reset,
    titans__lm2_carry_copy, titans__lm2_carry_saved, titans__lm2_carry_loaded, "stream.bank",
    titans__lm2_stream_floats, titans__lm2_stream_keep};

/* Indexed by titans_block_kind. */
static const titans__kind titans__kinds[TITANS_BLOCK_COUNT] = {
  /* name  keys                  mem gate reads_persist prefix_from_mem bank */
  {"attn", TITANS__KEYS_ALL,     0,  0,   0,            0,              0, titans__baseline_forward,
   titans__baseline_backward, titans__baseline_step, NULL, titans__baseline_step_rows, NULL},
  {"swa",  TITANS__KEYS_WINDOW,  0,  0,   0,            0,              0, titans__baseline_forward,
   titans__baseline_backward, titans__baseline_step, titans__swa_stream_unit, titans__baseline_step_rows, NULL},
  {"mac",  TITANS__KEYS_SEGMENT, 1,  1,   0,            0,              0, titans__mac_forward, titans__mac_backward,
   titans__mac_step, titans__mac_stream_unit, titans__mac_step_rows, &titans__mac_carry},
  {"mag",  TITANS__KEYS_WINDOW,  1,  1,   1,            0,              0, titans__mag_forward, titans__mag_backward,
   titans__mag_step, titans__mag_stream_unit, titans__mag_step_rows, NULL},
  {"mal",  TITANS__KEYS_WINDOW,  1,  0,   1,            1,              0, titans__mal_forward, titans__mal_backward,
   titans__mal_step, NULL, titans__mal_step_rows, NULL},
  {"lmm",  TITANS__KEYS_NONE,    1,  0,   0,            0,              0, titans__lmm_forward, titans__lmm_backward,
   titans__lmm_step, titans__lmm_stream_unit, titans__lmm_step_rows, NULL},
  {"lm2",  TITANS__KEYS_WINDOW,  0,  0,   0,            0,              1, titans__lm2_forward, titans__lm2_backward,
   titans__lm2_step, titans__lm2_stream_unit, titans__lm2_step_rows, &titans__lm2_carry},
};

/* The row of a kind; an all-zero row (no sublayer, no function) for a number outside the enum. */
static const titans__kind *titans__kind_of(int kind) {
  static const titans__kind none = {NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL};
  return kind >= 0 && kind < TITANS_BLOCK_COUNT ? &titans__kinds[kind] : &none;
}

/* Floats a stream carries for the kind's own state per row and layer (its carry's stream_floats): s->bank
   holds [n_layers, B, this]; 0 when the kind carries none. */
static size_t titans__stream_carry_floats(const titans_config *c) {
  const titans__carry *own = titans__kind_of(c->block)->carry;
  return own && own->stream_floats ? own->stream_floats(c) : 0;
}

TITANSDEF const char *titans_block_name(int kind) { return titans__kind_of(kind)->name; }

TITANSDEF titans_block_info titans_block_describe(int kind) {
  const titans__kind *k = titans__kind_of(kind);
  titans_block_info info = {k->name, k->mem, k->bank, 0, 0, k->stream_unit != NULL};
  info.attention = k->name && k->keys != TITANS__KEYS_NONE;
  info.segment = k->keys == TITANS__KEYS_SEGMENT || k->bank;
  return info;
}

TITANSDEF int titans_block_from_name(const char *name) {
  for (int k = 0; k < TITANS_BLOCK_COUNT; k++)
    if (name && strcmp(name, titans__kinds[k].name) == 0) return k;
  return -1;
}

TITANSDEF titans_config titans_config_default(int block, int vocab, int d, int n_layers) {
  titans_config c;
  memset(&c, 0, sizeof c);
  c.block = block;
  c.vocab = vocab;
  c.d = d;
  c.n_layers = n_layers;
  c.attn_heads = d / 64 > 1 ? d / 64 : 1;
  c.ffn_hidden = ((4 * d + 7) / 8) * 8;
  c.window = 64;
  c.segment = 64;
  const titans__kind *k = titans__kind_of(block);
  c.lm2_slots = k->bank ? 16 : 0;
  c.tied = 1;
  c.max_context = 4096;
  c.mem = titans_mem_config_default(d);
  c.n_persist = titans_config_default_persist(&c);
  return c;
}

TITANSDEF int titans_config_default_persist(const titans_config *c) {
  const titans__kind *k = titans__kind_of(c->block);
  if (!k->mem || k->keys == TITANS__KEYS_NONE) return 0; /* the memory kinds with attention */
  /* a memory that reads the persistent tokens first and streams reads them as whole chunks (MAG) */
  return k->mem_reads_persist && k->stream_unit ? c->mem.chunk : 4;
}

TITANSDEF int titans_config_check(const titans_config *c, char *err) {
  if (c->block < 0 || c->block >= TITANS_BLOCK_COUNT)
    return titans__error(err, TITANS_ERR_ARG, "config: unknown block kind %d", c->block);
  const titans__kind *k = &titans__kinds[c->block];
  if (c->vocab < 1 || c->vocab > (1 << 24))
    return titans__error(err, TITANS_ERR_ARG, "config: vocab = %d, want 1..2^24", c->vocab);
  if (c->d < 2 || c->d > 65536) return titans__error(err, TITANS_ERR_ARG, "config: d = %d, want 2..65536", c->d);
  if (c->n_layers < 1 || c->n_layers > 1024)
    return titans__error(err, TITANS_ERR_ARG, "config: n_layers = %d, want 1..1024", c->n_layers);
  if (c->ffn_hidden < 1 || c->ffn_hidden > 1 << 20)
    return titans__error(err, TITANS_ERR_ARG, "config: ffn_hidden = %d, want 1..2^20", c->ffn_hidden);
  if (k->keys != TITANS__KEYS_NONE) {
    if (c->attn_heads < 1 || c->d % c->attn_heads != 0 || (c->d / c->attn_heads) % 2 != 0)
      return titans__error(err, TITANS_ERR_ARG, "config: attn_heads = %d must divide d = %d into even head widths",
                           c->attn_heads, c->d);
    if (c->n_persist < 0 || c->n_persist > 4096)
      return titans__error(err, TITANS_ERR_ARG, "config: n_persist = %d, want 0..4096", c->n_persist);
  } else if (c->n_persist != 0) {
    return titans__error(err, TITANS_ERR_ARG, "config: the LMM block has no persistent tokens (n_persist = %d)",
                         c->n_persist);
  }
  if (k->keys == TITANS__KEYS_WINDOW && (c->window < 1 || c->window > 1 << 24))
    return titans__error(err, TITANS_ERR_ARG, "config: window = %d, want 1..2^24", c->window);
  if (k->keys == TITANS__KEYS_ALL && (c->max_context < 1 || c->max_context > 1 << 24))
    return titans__error(err, TITANS_ERR_ARG, "config: max_context = %d, want 1..2^24", c->max_context);
  if (c->tied != 0 && c->tied != 1) return titans__error(err, TITANS_ERR_ARG, "config: tied must be 0 or 1");
  if (k->mem) {
    int rc = titans_mem_config_check(&c->mem, err);
    if (rc) return rc;
    if (c->mem.d != c->d)
      return titans__error(err, TITANS_ERR_ARG, "config: mem.d = %d differs from d = %d", c->mem.d, c->d);
  }
  if (k->keys == TITANS__KEYS_SEGMENT && (c->segment < 1 || c->segment > 1 << 16 || c->segment % c->mem.chunk != 0))
    return titans__error(err, TITANS_ERR_ARG, "config: segment = %d must be a multiple of the chunk %d (and <= 65536)",
                         c->segment, c->mem.chunk);
  if (k->bank) {
    if (c->segment < 1 || c->segment > 1 << 16)
      return titans__error(err, TITANS_ERR_ARG, "config: segment = %d, want 1..65536", c->segment);
    if (c->lm2_slots < 1 || c->lm2_slots > 1 << 16)
      return titans__error(err, TITANS_ERR_ARG, "config: lm2_slots = %d, want 1..65536", c->lm2_slots);
  } else if (c->lm2_slots != 0) {
    return titans__error(err, TITANS_ERR_ARG, "config: lm2_slots = %d, but only an LM2 block has a bank", c->lm2_slots);
  }
  if (c->mac_learns_from != TITANS_MAC_LEARNS_ATTN_OUTPUT &&
      (c->block != TITANS_BLOCK_MAC || c->mac_learns_from != TITANS_MAC_LEARNS_INPUT))
    return titans__error(err, TITANS_ERR_ARG, "config: mac_learns_from = %d, want 0 (or 1 for a MAC block)",
                         c->mac_learns_from);
  return TITANS_OK;
}

/* ---- parameter layout ------------------------------------------------------------------------- */

/* out = "layers.<l>." (no stdio needed). */
static void titans__layer_prefix(char *out, int l) {
  char digits[12];
  int n = 0;
  do {
    digits[n++] = (char)('0' + l % 10);
    l /= 10;
  } while (l > 0);
  memcpy(out, "layers.", 7);
  for (int i = 0; i < n; i++) out[7 + i] = digits[n - 1 - i];
  out[7 + n] = '.';
  out[8 + n] = 0;
}

/* The one place that fixes the model's parameter order, names, shapes and how each starts: counting
   (titans__model_size), binding (titans_weights_bind, titans_model_init), filling (titans_model_init_weights)
   and, through m->plist, saving and loading all use it. Records into list (may be NULL), binds w to slab
   (w may be NULL; w->layers must have n_layers entries), fills w's bound weights by their rules when init
   is given (slab NULL: w is bound already). Returns the parameter count; *offset advances to the total;
   *exact (may be NULL) adds the same total in double, which cannot wrap (a configuration from a file is
   sized before anything is allocated). */
static size_t titans__model_walk(const titans_config *c, titans_weights *w, float *slab, titans_param *list, size_t max,
                                 size_t *offset, double *exact, const titans__init *init) {
  size_t count = 0, o, d = (size_t)c->d, ff = (size_t)c->ffn_hidden, V = (size_t)c->vocab;
  const titans__kind *k = titans__kind_of(c->block);
  char prefix[64];
  const titans__init_rule small = {TITANS__INIT_NORMAL, 0.02f}, gain = {TITANS__INIT_CONST, 1.0f};
  const titans__init_rule out = {TITANS__INIT_NORMAL, init ? init->out_std : 0.0f};
  /* LM2's bank: m0 normal(0, 1 / sqrt(d)), so a slot has about unit norm like a normalised token; the
     forget gate's bias at logit(0.9), so that at the start a write keeps 90% of the bank and adds a gated
     tanh(U) (docs/model.md 4). */
  const titans__init_rule slots = {TITANS__INIT_NORMAL, 1.0f / sqrtf((float)d)};
  const titans__init_rule keep = {TITANS__INIT_CONST, titans__logit(0.9f)};
  const titans__init_rule head = {c->tied ? TITANS__INIT_NORMAL : TITANS__INIT_EARLIER, 0.02f};
#define TITANS__PARAM(ptr, name, kind, nd, a, b_, rule)                                                  \
  {                                                                                                    \
    const size_t shape_[3] = {a, b_, 0};                                                               \
    o = titans__param_push(list, max, &count, offset, prefix, name, kind, nd, shape_);                 \
  }                                                                                                    \
  if (exact) *exact += (double)(a) * (nd == 2 ? (double)(b_) : 1.0);                                  \
  if (w && slab) (ptr) = slab + o;                                                                      \
  if (init) titans__param_fill(init, (ptr), (nd) == 2 ? (a) : 1, (nd) == 2 ? (b_) : (a), rule);
  prefix[0] = 0;
  TITANS__PARAM(w->tok_emb, "tok_emb", TITANS_PARAM_MATRIX, 2, V, d, small)
  /* The untied output head is stored last but drawn right after the embedding: the order in which every
     seed has drawn its weights since the first version. */
  if (init && !c->tied) titans__param_fill(init, w->lm_head, V, d, small);
  for (int l = 0; l < c->n_layers; l++) {
    titans_layer dummy, *L = w ? &w->layers[l] : &dummy;
    if (w && slab) memset(L, 0, sizeof *L);
    titans__layer_prefix(prefix, l);
    TITANS__PARAM(L->norm1, "norm1", TITANS_PARAM_GAIN, 1, d, 0, gain)
    if (k->keys != TITANS__KEYS_NONE) {
      TITANS__PARAM(L->attn_wq, "attn.wq", TITANS_PARAM_MATRIX, 2, d, d, small)
      TITANS__PARAM(L->attn_wk, "attn.wk", TITANS_PARAM_MATRIX, 2, d, d, small)
      TITANS__PARAM(L->attn_wv, "attn.wv", TITANS_PARAM_MATRIX, 2, d, d, small)
      TITANS__PARAM(L->attn_wo, "attn.wo", TITANS_PARAM_MATRIX, 2, d, d, out)
      if (c->n_persist > 0) {
        TITANS__PARAM(L->persist, "persist", TITANS_PARAM_TOKENS, 2, (size_t)c->n_persist, d, small)
      }
    }
    if (k->bank) {
      size_t Ns = (size_t)c->lm2_slots;
      TITANS__PARAM(L->lm2.m0, "lm2.m0", TITANS_PARAM_TOKENS, 2, Ns, d, slots)
      TITANS__PARAM(L->lm2.wq, "lm2.wq", TITANS_PARAM_MATRIX, 2, d, d, small)
      TITANS__PARAM(L->lm2.wk, "lm2.wk", TITANS_PARAM_MATRIX, 2, d, d, small)
      TITANS__PARAM(L->lm2.wv, "lm2.wv", TITANS_PARAM_MATRIX, 2, d, d, small)
      TITANS__PARAM(L->lm2.w_out, "lm2.w_out", TITANS_PARAM_MATRIX, 2, d, d, small)
      TITANS__PARAM(L->lm2.uq, "lm2.uq", TITANS_PARAM_MATRIX, 2, d, d, small)
      TITANS__PARAM(L->lm2.uk, "lm2.uk", TITANS_PARAM_MATRIX, 2, d, d, small)
      TITANS__PARAM(L->lm2.uv, "lm2.uv", TITANS_PARAM_MATRIX, 2, d, d, small)
      TITANS__PARAM(L->lm2.w_in, "lm2.w_in", TITANS_PARAM_MATRIX, 2, d, d, small)
      TITANS__PARAM(L->lm2.w_f, "lm2.w_f", TITANS_PARAM_MATRIX, 2, d, d, small)
      TITANS__PARAM(L->lm2.b_f, "lm2.b_f", TITANS_PARAM_BIAS, 1, d, 0, keep)
    }
    if (k->gate) {
      TITANS__PARAM(L->gate_norm_y, "gate.norm_y", TITANS_PARAM_GAIN, 1, d, 0, gain)
      TITANS__PARAM(L->gate_norm_m, "gate.norm_m", TITANS_PARAM_GAIN, 1, d, 0, gain)
    }
    if (k->mem) {
      char mp[80];
      size_t pl = strlen(prefix);
      memcpy(mp, prefix, pl);
      memcpy(mp + pl, "mem.", 5);
      if (exact) *exact += (double)titans_mem_param_count(&c->mem);
      count += titans__mem_walk(&c->mem, w ? &L->mem : NULL, slab, list ? list + (count < max ? count : max) : NULL,
                                max > count ? max - count : 0, mp, offset, init);
    }
    TITANS__PARAM(L->norm2, "norm2", TITANS_PARAM_GAIN, 1, d, 0, gain)
    TITANS__PARAM(L->ffn_w1, "ffn.w1", TITANS_PARAM_MATRIX, 2, ff, d, small)
    TITANS__PARAM(L->ffn_w3, "ffn.w3", TITANS_PARAM_MATRIX, 2, ff, d, small)
    TITANS__PARAM(L->ffn_w2, "ffn.w2", TITANS_PARAM_MATRIX, 2, d, ff, out)
  }
  prefix[0] = 0;
  TITANS__PARAM(w->norm_f, "norm_f", TITANS_PARAM_GAIN, 1, d, 0, gain)
  if (!c->tied) {
    TITANS__PARAM(w->lm_head, "lm_head", TITANS_PARAM_MATRIX, 2, V, d, head)
  } else if (w && slab) {
    w->lm_head = NULL;
  }
#undef TITANS__PARAM
  return count;
}

TITANSDEF void titans_weights_bind(titans_weights *w, titans_layer *layers, const titans_config *cfg, float *slab) {
  size_t offset = 0;
  w->layers = layers;
  titans__model_walk(cfg, w, slab, NULL, 0, &offset, NULL, NULL);
}

/* The parameters of a checked configuration, from the walk: *n_params tensors of *n_floats floats in all.
   Returns the floats counted in double (when that is above what size_t holds, the size_t counts wrapped
   and the caller must refuse the configuration). */
static double titans__model_size(const titans_config *c, size_t *n_params, size_t *n_floats) {
  size_t offset = 0;
  double exact = 0.0;
  *n_params = titans__model_walk(c, NULL, NULL, NULL, 0, &offset, &exact, NULL);
  *n_floats = offset;
  return exact;
}

TITANSDEF int titans_model_init(titans_model *m, const titans_config *cfg) {
  memset(m, 0, sizeof *m);
  int rc = titans_config_check(cfg, m->error);
  if (rc) return rc;
  m->cfg = *cfg;
  /* The walk counts in double too: a config whose parameter count is absurd is refused before its
     size_t counts (which may have wrapped) are used. */
  size_t offset = 0;
  double total = titans__model_size(cfg, &m->n_params, &m->n_floats);
  if (total > 4e9)
    return titans__error(m->error, TITANS_ERR_ARG, "model: %.3g parameters is more than this version supports", total);
  offset = m->n_floats;
  m->params = titans_alloc_floats(m->n_floats);
  m->plist = (titans_param *)titans_alloc_bytes(m->n_params, sizeof(titans_param));
  m->w.layers = (titans_layer *)titans_alloc_bytes((size_t)cfg->n_layers, sizeof(titans_layer));
  if (!m->params || !m->plist || !m->w.layers) {
    titans_model_free(m);
    return titans__error(m->error, TITANS_ERR_NOMEM, "model: cannot allocate %zu parameters", offset);
  }
  offset = 0;
  titans__model_walk(cfg, &m->w, m->params, m->plist, m->n_params, &offset, NULL, NULL);
  return TITANS_OK;
}

TITANSDEF void titans_model_set_layer_gates(titans_model *m, int layer, float theta_frac, float eta, float alpha) {
  const titans_config *c = &m->cfg;
  if (layer < 0 || layer >= c->n_layers) return;
  float start[3] = {theta_frac, eta, alpha};
  titans_mem_weights *w = &m->w.layers[layer].mem;
  float *bias[3] = {w->lr_b, w->mom_b, w->decay_b}; /* [H] each; NULL without a memory */
  for (int g = 0; g < 3; g++)
    if (bias[g] && start[g] > 0.0f && start[g] < 1.0f)
      for (int h = 0; h < c->mem.heads; h++) bias[g][h] = titans__logit(start[g]);
}

TITANSDEF void titans_model_set_gates(titans_model *m, float theta_frac, float eta, float alpha) {
  for (int l = 0; l < m->cfg.n_layers; l++) titans_model_set_layer_gates(m, l, theta_frac, eta, alpha);
}

TITANSDEF titans_lookup_init titans_lookup_init_default(void) {
  titans_lookup_init li;
  li.key_shift = 1;
  li.attn_identity = 1.5f;
  li.emb_scale = 10.0f;
  li.emb_shared = 0.0f;
  li.head_gain = 0.5f;
  return li;
}

/* The tap of channel c (of a head of width d_h) that n-gram keys keep: token t - 1 - floor(c n / d_h), tap
   K_c - 2 - floor(c n / d_h) (tap K_c - 1 is the current token). n = 1: the previous token. */
static size_t titans__key_tap(size_t c, size_t n, size_t d_h, size_t K) { return K - 2 - c * n / d_h; }

/* Every memory's key conv [d_m, K_c] on the tokens before its own (one tap per channel, cfg.mem.key_ngram
   groups; the previous token when it is 0 or 1), and wq = wk [d_m, d]; with n >= 2 the query conv reads
   the same groups one token later, so a query of the n tokens up to t meets the key written after them. */
static void titans__shift_memory_keys(titans_model *m) {
  const titans_config *c = &m->cfg;
  size_t K = (size_t)c->mem.conv_width, dh = (size_t)c->mem.head_dim, dm = (size_t)c->mem.heads * dh;
  size_t n = c->mem.key_ngram > 1 ? (size_t)c->mem.key_ngram : 1;
  if (K < n + 1) return;
  for (int l = 0; l < c->n_layers; l++) {
    titans_mem_weights *w = &m->w.layers[l].mem;
    if (!w->conv_k) continue; /* no memory in this kind */
    memcpy(w->wq, w->wk, dm * (size_t)c->d * sizeof(float));
    for (size_t j = 0; j < dm; j++) {
      size_t tap = titans__key_tap(j % dh, n, dh, K);
      for (size_t t = 0; t < K; t++) w->conv_k[j * K + t] = t == tap ? 1.0f : 0.0f;
      if (n >= 2)
        for (size_t t = 0; t < K; t++) w->conv_q[j * K + t] = t == tap + 1 ? 1.0f : 0.0f;
    }
  }
}

/* Every attention as the identity on its own token: wq = wk = scale I, wv = wo = I ([d, d] each). RoPE
   leaves a token's score with itself unrotated, the largest for normalised inputs. */
static void titans__identity_attention(titans_model *m, float scale) {
  size_t d = (size_t)m->cfg.d;
  for (int l = 0; l < m->cfg.n_layers; l++) {
    titans_layer *L = &m->w.layers[l];
    float *mats[4] = {L->attn_wq, L->attn_wk, L->attn_wv, L->attn_wo}; /* NULL without attention */
    if (!mats[0]) continue;
    for (int k = 0; k < 4; k++)
      for (size_t i = 0; i < d; i++)
        for (size_t j = 0; j < d; j++) mats[k][i * d + j] = i == j ? (k < 2 ? scale : 1.0f) : 0.0f;
  }
}

/* Every row of tok_emb [V, d] plus amount x 0.02 (the embeddings' normal std) x s, s [d] a fixed pattern
   of signs: the same for every model and seed, so that the start depends on the config alone. */
static void titans__share_embedding_direction(titans_model *m, float amount) {
  size_t V = (size_t)m->cfg.vocab, d = (size_t)m->cfg.d;
  titans_rng rng;
  titans_rng_seed(&rng, 0x5eed5ba4edULL);
  for (size_t j = 0; j < d; j++) {
    float shared = amount * 0.02f * ((titans_rng_u64(&rng) >> 63) ? 1.0f : -1.0f);
    for (size_t v = 0; v < V; v++) m->w.tok_emb[v * d + j] += shared;
  }
}

TITANSDEF void titans_model_init_lookup(titans_model *m, const titans_lookup_init *li) {
  if (li->key_shift) titans__shift_memory_keys(m);
  if (li->attn_identity > 0.0f) titans__identity_attention(m, li->attn_identity);
  if (li->emb_shared > 0.0f) titans__share_embedding_direction(m, li->emb_shared);
  if (li->emb_scale != 1.0f)
    for (size_t i = 0; i < (size_t)m->cfg.vocab * (size_t)m->cfg.d; i++) m->w.tok_emb[i] *= li->emb_scale;
  if (li->head_gain > 0.0f)
    for (int i = 0; i < m->cfg.d; i++) m->w.norm_f[i] = li->head_gain;
}

/* cfg.mem.key_ngram: every key conv tap but each channel's own (titans__key_tap) set to 0 in slab [n_floats],
   the parameters or a gradient of the same layout. On the parameters it is a projection onto the
   constraint after each optimizer step (the kept taps themselves learn): with small taps on older tokens,
   a repeated text gives nearly parallel keys that must map to different values, and the memory's weights
   grew without bound as it read (docs/long_context.md, "Past the training length"). On the gradient, before
   its norm is taken, it makes the step the projected gradient: the held taps are no parameters of the
   constrained model, yet their gradient was up to 100x the rest at 16K tokens and set the clipping. */
static void titans__zero_held_key_taps(const titans_model *m, float *slab) {
  const titans_config *c = &m->cfg;
  size_t K = (size_t)c->mem.conv_width, dh = (size_t)c->mem.head_dim, dm = (size_t)c->mem.heads * dh;
  size_t n = (size_t)c->mem.key_ngram;
  if (n == 0 || K < n + 1) return;
  for (int l = 0; l < c->n_layers; l++) {
    const float *ck = m->w.layers[l].mem.conv_k; /* [d_m, K_c] in the parameters; NULL without a memory */
    if (!ck) continue;
    float *taps = slab + (ck - m->params); /* [d_m, K_c] */
    for (size_t j = 0; j < dm; j++) {
      size_t tap = titans__key_tap(j % dh, n, dh, K);
      for (size_t t = 0; t < K; t++)
        if (t != tap) taps[j * K + t] = 0.0f;
    }
  }
}

TITANSDEF void titans_model_free(titans_model *m) {
  titans_free(m->params);
  titans_free(m->plist);
  titans_free(m->w.layers);
  m->params = NULL;
  m->plist = NULL;
  m->w.layers = NULL;
}

TITANSDEF void titans_model_init_weights(titans_model *m, uint64_t seed) {
  titans_rng rng;
  titans_rng_seed(&rng, seed);
  titans__init init = {&rng, 0.02f / sqrtf(2.0f * (float)m->cfg.n_layers)};
  size_t offset = 0;
  titans__model_walk(&m->cfg, &m->w, NULL, NULL, 0, &offset, NULL, &init);
}

/* ---- training schedule ------------------------------------------------------------------------ */

TITANSDEF titans_train_config titans_train_config_default(void) {
  titans_train_config t;
  t.lr = 4e-4f;
  t.min_lr = 4e-5f;
  t.warmup_steps = 100;
  t.total_steps = 10000;
  t.weight_decay = 0.1f;
  t.beta1 = 0.9f;
  t.beta2 = 0.95f;
  t.eps = 1e-8f;
  t.clip = 1.0f;
  t.write_cost = 0.0f;
  t.write_cost_from = 0;
  t.write_cost_log = 0.0f;
  return t;
}

TITANSDEF titans_train_config titans_train_config_for_steps(long steps) {
  titans_train_config t = titans_train_config_default();
  t.warmup_steps = steps / 10;
  t.total_steps = steps;
  return t;
}

TITANSDEF float titans_lr_at(const titans_train_config *tc, long step) {
  if (tc->warmup_steps > 0 && step < tc->warmup_steps) return tc->lr * (float)(step + 1) / (float)tc->warmup_steps;
  long span = tc->total_steps - tc->warmup_steps;
  if (span <= 0 || step >= tc->total_steps) return tc->min_lr;
  double progress = (double)(step - tc->warmup_steps) / (double)span;
  return tc->min_lr + (tc->lr - tc->min_lr) * (float)(0.5 * (1.0 + cos(3.141592653589793 * progress)));
}

/* ---- activation arena ------------------------------------------------------------------------- */

/* A bump allocator for one forward/backward: blocks are kept between steps; after a step that needed
   more than one block, they are merged into one of the peak size, so the steady state allocates
   nothing. */
#define TITANS__ARENA_BLOCKS 48
typedef struct titans__arena {
  float *blocks[TITANS__ARENA_BLOCKS];
  size_t sizes[TITANS__ARENA_BLOCKS];
  int count;
  size_t used;  /* floats used in the last block */
  size_t total; /* floats handed out since the last reset (less what titans__arena_rewind gave back) */
  size_t peak;  /* the largest total since the last reset: the size of the block a reset merges into */
} titans__arena;

/* Where an arena stands, to give back everything allocated after it (titans__arena_rewind). */
typedef struct titans__arena_mark {
  int count;
  size_t used, total;
} titans__arena_mark;

static float *titans__arena_alloc(titans__arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15; /* keep every buffer 64-byte aligned relative to its block */
  if (a->count > 0 && n <= a->sizes[a->count - 1] - a->used) {
    float *p = a->blocks[a->count - 1] + a->used;
    a->used += n;
    a->total += n;
    if (a->total > a->peak) a->peak = a->total;
    return p;
  }
  if (a->count == TITANS__ARENA_BLOCKS) return NULL;
  size_t size = a->count > 0 ? 2 * a->sizes[a->count - 1] : ((size_t)1 << 20);
  if (size < n) size = n;
  float *b = titans_alloc_floats(size);
  if (!b) return NULL;
  a->blocks[a->count] = b;
  a->sizes[a->count] = size;
  a->count++;
  a->used = n;
  a->total += n;
  if (a->total > a->peak) a->peak = a->total;
  return b;
}

static titans__arena_mark titans__arena_here(const titans__arena *a) {
  titans__arena_mark m = {a->count, a->used, a->total};
  return m;
}

/* Gives back every buffer allocated since m (they must no longer be used); blocks added since are freed.
   The peak stays counted, so the next reset still merges into one block that holds it. */
static void titans__arena_rewind(titans__arena *a, titans__arena_mark m) {
  while (a->count > m.count && a->count > 1) titans_free(a->blocks[--a->count]);
  if (a->count > m.count) { /* the mark was taken before the first block: keep the block, empty */
    a->used = 0;
    a->total = 0;
    return;
  }
  a->used = m.used;
  a->total = m.total;
}

/* Zeroed floats */
static float *titans__arena_zalloc(titans__arena *a, size_t n) {
  float *p = titans__arena_alloc(a, n);
  if (p) memset(p, 0, n * sizeof(float));
  return p;
}

static void titans__arena_reset(titans__arena *a) {
  if (a->count > 1 || (a->count == 1 && a->sizes[0] < a->peak)) {
    size_t peak = a->peak;
    for (int i = 0; i < a->count; i++) titans_free(a->blocks[i]);
    a->count = 0;
    float *b = titans_alloc_floats(peak);
    if (b) {
      a->blocks[0] = b;
      a->sizes[0] = peak;
      a->count = 1;
    }
  }
  a->used = 0;
  a->total = 0;
  a->peak = 0;
}

static void titans__arena_free(titans__arena *a) {
  for (int i = 0; i < a->count; i++) titans_free(a->blocks[i]);
  memset(a, 0, sizeof *a);
}

/* n positions start, start + 1, ... (int64 storage carved from the float arena) */
static int64_t *titans__arena_positions(titans__arena *a, size_t n, int64_t start) {
  int64_t *p = (int64_t *)(void *)titans__arena_alloc(a, 2 * n + 2);
  if (p)
    for (size_t i = 0; i < n; i++) p[i] = start + (int64_t)i;
  return p;
}

/* ---- attention sublayer: projections, RoPE, masked attention, output projection --------------- */

typedef struct titans__attn_save {
  float *q;   /* [B, Tq, d] after RoPE */
  float *k;   /* [B, P + Tk, d] (positioned rows after RoPE) */
  float *v;   /* [B, P + Tk, d] */
  float *att; /* [B, Tq, d] attention output (input of wo) */
  float *lse; /* [B, Tq, H] */
} titans__attn_save;

/* The inputs of one attention sublayer call over B rows (sequences, or a session batch's streams): the
   rows the queries and the keys come from, their positions and the mask. The forward and its backward
   take the same one. */
typedef struct titans__attn_sub_in {
  const float *xq;     /* [B, Tq, d] the rows projected to queries */
  const float *src;    /* [B, P + Tk, d] the rows projected to keys and values: the always-visible prefix
                          rows (no RoPE), then the positioned rows */
  const int64_t *qpos; /* [Tq] row b's query positions start at qpos + b * pos_stride */
  const int64_t *kpos; /* [Tk] row b's key positions (of the positioned rows) at kpos + b * pos_stride */
  size_t pos_stride;   /* 0: every row has the same positions */
  size_t B, Tq, P, Tk; /* rows, queries a row, prefix rows, positioned key rows a row */
  int64_t window;      /* 0 = no window */
} titans__attn_sub_in;

/* The common call: B rows of T tokens at positions pos [T] attend causally over the P prefix rows and
   themselves (src [B, P + T, d] = prefix || the rows). */
static titans__attn_sub_in titans__attn_sub_self(const float *xq, const float *src, const int64_t *pos, size_t B,
                                                 size_t T, size_t P, int64_t window) {
  const titans__attn_sub_in in = {xq, src, pos, pos, 0, B, T, P, T, window};
  return in;
}

/* out [B, Tq, d] = wo Attn(wq xq, wk src, wv src) for the call `in` (see titans__attn_sub_in).
   Training passes the arena, which gives sv its buffers, and attends over src. A session's token is the
   same call with Tq = 1, P = 0, sv's buffers its own (ar NULL) and its KV cache: the Tk new key and
   value rows join the cache (which holds the prefix and the earlier rows) and the query attends over it.
   B is 1 for a session, the number of streams for a session batch (caches [B]: row b's cache). */
static int titans__attn_sub_forward(const titans_config *c, const titans_layer *L, titans__arena *ar,
                                    titans__attn_save *sv, float *out, const titans__attn_sub_in *in,
                                    titans_kv_cache *const *caches) {
  const float *xq = in->xq, *src = in->src;
  const int64_t *qpos = in->qpos, *kpos = in->kpos;
  size_t pos_stride = in->pos_stride, B = in->B, Tq = in->Tq, P = in->P, Tk = in->Tk;
  int64_t window = in->window;
  size_t d = (size_t)c->d, H = (size_t)c->attn_heads, da = d / H, S = P + Tk;
  if (ar) {
    sv->q = titans__arena_alloc(ar, B * Tq * d);
    sv->k = titans__arena_alloc(ar, B * S * d);
    sv->v = titans__arena_alloc(ar, B * S * d);
    sv->att = titans__arena_alloc(ar, B * Tq * d);
    sv->lse = titans__arena_alloc(ar, B * Tq * H);
    if (!sv->q || !sv->k || !sv->v || !sv->att || !sv->lse) return TITANS_ERR_NOMEM;
  }
  float *kt = NULL; /* [panels of S rows] the keys of one row in panels, for the kernel */
  if (ar && !caches && S > 0) {
    size_t nf = titans__attn_panel_floats(S, d);
    if (nf == 0 || !(kt = titans__arena_alloc(ar, nf))) return TITANS_ERR_NOMEM;
  }
  titans_gemm(0, 1, B * Tq, d, d, 1.0f, titans_cm(xq, d), titans_cm(L->attn_wq, d), 0.0f, titans_m(sv->q, d));
  titans_gemm(0, 1, B * S, d, d, 1.0f, titans_cm(src, d), titans_cm(L->attn_wk, d), 0.0f, titans_m(sv->k, d));
  titans_gemm(0, 1, B * S, d, d, 1.0f, titans_cm(src, d), titans_cm(L->attn_wv, d), 0.0f, titans_m(sv->v, d));
  for (size_t b = 0; b < B; b++) {
    const int64_t *qp = qpos + b * pos_stride, *kp = kpos + b * pos_stride; /* [Tq], [Tk] this row's positions */
    float *q = sv->q + b * Tq * d, *k = sv->k + b * S * d, *v = sv->v + b * S * d, *att = sv->att + b * Tq * d;
    titans_rope_forward(q, qp, Tq, H, da);
    titans_rope_forward(k + P * d, kp, Tk, H, da);
    if (caches) {
      TITANS__TRY(titans_kv_cache_append(caches[b], k, v, kp, Tk));
      TITANS__TRY(titans_kv_cache_attend(caches[b], att, NULL, q, qp[0]));
      continue;
    }
    const titans_attn_shape sh = {qp, kp, Tq, P, Tk, H, da, window};
    TITANS__TRY(titans__attention_forward_ws(att, sv->lse + b * Tq * H, q, k, v, &sh, kt));
  }
  titans_gemm(0, 1, B * Tq, d, d, 1.0f, titans_cm(sv->att, d), titans_cm(L->attn_wo, d), 0.0f, titans_m(out, d));
  return TITANS_OK;
}

/* Backward of titans__attn_sub_forward for the same call `in`: from dout [B, Tq, d], accumulates
   dxq [B, Tq, d], dsrc [B, P + Tk, d] and G's attention weights. */
static int titans__attn_sub_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                     titans__arena *ar, const titans__attn_save *sv, float *dxq, float *dsrc,
                                     const float *dout, const titans__attn_sub_in *in) {
  const float *xq = in->xq, *src = in->src;
  const int64_t *qpos = in->qpos, *kpos = in->kpos;
  size_t pos_stride = in->pos_stride, B = in->B, Tq = in->Tq, P = in->P, Tk = in->Tk;
  int64_t window = in->window;
  size_t d = (size_t)c->d, H = (size_t)c->attn_heads, da = d / H, S = P + Tk;
  float *datt = titans__arena_alloc(ar, B * Tq * d), *dq = titans__arena_zalloc(ar, B * Tq * d);
  float *dk = titans__arena_zalloc(ar, B * S * d), *dv = titans__arena_zalloc(ar, B * S * d);
  size_t nf = S > 0 ? titans__attn_panel_floats(S, d) : 0;
  float *kvt = nf ? titans__arena_alloc(ar, 2 * nf) : NULL; /* [2, panels of S rows] one row's keys and values */
  if (!datt || !dq || !dk || !dv || (S > 0 && !kvt)) return TITANS_ERR_NOMEM;
  /* out = att wo^T */
  titans_gemm(1, 0, d, d, B * Tq, 1.0f, titans_cm(dout, d), titans_cm(sv->att, d), 1.0f, titans_m(G->attn_wo, d));
  titans_gemm(0, 0, B * Tq, d, d, 1.0f, titans_cm(dout, d), titans_cm(L->attn_wo, d), 0.0f, titans_m(datt, d));
  for (size_t b = 0; b < B; b++) {
    const int64_t *qp = qpos + b * pos_stride, *kp = kpos + b * pos_stride; /* [Tq], [Tk] */
    const titans_attn_grads g = {dq + b * Tq * d, dk + b * S * d, dv + b * S * d, datt + b * Tq * d};
    const titans_attn_saved fw = {sv->q + b * Tq * d, sv->k + b * S * d, sv->v + b * S * d, sv->att + b * Tq * d,
                                   sv->lse + b * Tq * H};
    const titans_attn_shape sh = {qp, kp, Tq, P, Tk, H, da, window};
    int rc = titans__attention_backward_ws(&g, &fw, &sh, TITANS__ATTN_BWD_AUTO, kvt);
    if (rc) return rc;
    titans_rope_backward(dq + b * Tq * d, qp, Tq, H, da);
    titans_rope_backward(dk + (b * S + P) * d, kp, Tk, H, da);
  }
  /* q = xq wq^T, k = src wk^T, v = src wv^T */
  titans_gemm(1, 0, d, d, B * Tq, 1.0f, titans_cm(dq, d), titans_cm(xq, d), 1.0f, titans_m(G->attn_wq, d));
  titans_gemm(0, 0, B * Tq, d, d, 1.0f, titans_cm(dq, d), titans_cm(L->attn_wq, d), 1.0f, titans_m(dxq, d));
  titans_gemm(1, 0, d, d, B * S, 1.0f, titans_cm(dk, d), titans_cm(src, d), 1.0f, titans_m(G->attn_wk, d));
  titans_gemm(0, 0, B * S, d, d, 1.0f, titans_cm(dk, d), titans_cm(L->attn_wk, d), 1.0f, titans_m(dsrc, d));
  titans_gemm(1, 0, d, d, B * S, 1.0f, titans_cm(dv, d), titans_cm(src, d), 1.0f, titans_m(G->attn_wv, d));
  titans_gemm(0, 0, B * S, d, d, 1.0f, titans_cm(dv, d), titans_cm(L->attn_wv, d), 1.0f, titans_m(dsrc, d));
  return TITANS_OK;
}

/* ---- Gate(y, m) = RMSNorm(y; norm_y) * sigmoid(RMSNorm(m; norm_m)) ---------------------------- */

typedef struct titans__gate_save {
  float *yn, *sg;        /* [rows, d] RMSNorm(y), sigmoid(RMSNorm(m)) */
  float *rstd_y, *rstd_m; /* [rows] */
  const float *y, *m;     /* [rows, d] the inputs, which the backward reads (training: titans__gate_forward) */
} titans__gate_save;

/* out [rows, d] = Gate(y, m), keeping what the backward needs in sv's buffers (given). A session runs it
   on one row with sv in its scratch (titans__session_gate), so training and inference share it. */
static void titans__gate_rows(const titans__gate_save *sv, float *out, const float *y, const float *m,
                              const float *norm_y, const float *norm_m, size_t rows, size_t d) {
  titans_rmsnorm_forward(sv->yn, sv->rstd_y, y, norm_y, rows, d);
  titans_rmsnorm_forward(sv->sg, sv->rstd_m, m, norm_m, rows, d);
  titans_sigmoid_forward(sv->sg, sv->sg, rows * d);
  for (size_t j = 0; j < rows * d; j++) out[j] = sv->yn[j] * sv->sg[j];
}

static int titans__gate_forward(titans__arena *ar, titans__gate_save *sv, float *out, const float *y, const float *m,
                                const float *norm_y, const float *norm_m, size_t rows, size_t d) {
  sv->yn = titans__arena_alloc(ar, rows * d);
  sv->sg = titans__arena_alloc(ar, rows * d);
  sv->rstd_y = titans__arena_alloc(ar, rows);
  sv->rstd_m = titans__arena_alloc(ar, rows);
  if (!sv->yn || !sv->sg || !sv->rstd_y || !sv->rstd_m) return TITANS_ERR_NOMEM;
  sv->y = y;
  sv->m = m;
  titans__gate_rows(sv, out, y, m, norm_y, norm_m, rows, d);
  return TITANS_OK;
}

/* Backward of titans__gate_forward (which filled sv) with L's gains: from dout [rows, d] accumulates dy,
   dm [rows, d] and the gains' gradients in G. */
static int titans__gate_backward(titans__arena *ar, const titans__gate_save *sv, float *dy, float *dm,
                                 const float *dout, const titans_layer *L, const titans_layer *G, size_t rows,
                                 size_t d) {
  float *dyn = titans__arena_alloc(ar, rows * d), *dmn = titans__arena_alloc(ar, rows * d);
  if (!dyn || !dmn) return TITANS_ERR_NOMEM;
  for (size_t j = 0; j < rows * d; j++) {
    float s = sv->sg[j];
    dyn[j] = dout[j] * s;
    dmn[j] = dout[j] * sv->yn[j] * s * (1.0f - s);
  }
  titans_rmsnorm_backward(dy, G->gate_norm_y, dyn, sv->y, L->gate_norm_y, sv->rstd_y, rows, d);
  titans_rmsnorm_backward(dm, G->gate_norm_m, dmn, sv->m, L->gate_norm_m, sv->rstd_m, rows, d);
  return TITANS_OK;
}

/* ---- SwiGLU FFN: w2 (SiLU(w1 x) * (w3 x)) ----------------------------------------------------- */

typedef struct titans__ffn_save {
  float *u1, *u3, *act; /* [rows, d_ff] w1 x, w3 x, SiLU(u1) * u3 */
} titans__ffn_save;

/* The FFN's hidden rows: u1, u3, act [rows, d_ff] of x [rows, d] into sv's buffers. */
static void titans__ffn_hidden(const titans_config *c, const titans_layer *L, const titans__ffn_save *sv,
                               const float *x, size_t rows) {
  size_t d = (size_t)c->d, ff = (size_t)c->ffn_hidden;
  titans_gemm(0, 1, rows, ff, d, 1.0f, titans_cm(x, d), titans_cm(L->ffn_w1, d), 0.0f, titans_m(sv->u1, ff));
  titans_gemm(0, 1, rows, ff, d, 1.0f, titans_cm(x, d), titans_cm(L->ffn_w3, d), 0.0f, titans_m(sv->u3, ff));
  titans_silu_forward(sv->act, sv->u1, rows * ff);
  for (size_t j = 0; j < rows * ff; j++) sv->act[j] *= sv->u3[j];
}

/* out [rows, d] = FFN(x [rows, d]), keeping u1, u3, act in sv's buffers (given). A session runs it on
   one row with sv in its scratch (titans__session_token), so training and inference share it. */
static void titans__ffn_rows(const titans_config *c, const titans_layer *L, const titans__ffn_save *sv, float *out,
                             const float *x, size_t rows) {
  size_t d = (size_t)c->d, ff = (size_t)c->ffn_hidden;
  titans__ffn_hidden(c, L, sv, x, rows);
  titans_gemm(0, 1, rows, d, ff, 1.0f, titans_cm(sv->act, ff), titans_cm(L->ffn_w2, ff), 0.0f, titans_m(out, d));
}

/* The FFN's saved rows of a training forward: u1, u3, act [rows, d_ff] from the arena. */
static int titans__ffn_alloc(const titans_config *c, titans__arena *ar, titans__ffn_save *sv, size_t rows) {
  size_t ff = (size_t)c->ffn_hidden;
  sv->u1 = titans__arena_alloc(ar, rows * ff);
  sv->u3 = titans__arena_alloc(ar, rows * ff);
  sv->act = titans__arena_alloc(ar, rows * ff);
  return sv->u1 && sv->u3 && sv->act ? TITANS_OK : TITANS_ERR_NOMEM;
}

/* The second half of every block, shared by training (rows = B T) and sessions (one row):
   h = x + mix, out = h + FFN(RMSNorm(h; norm2)). h, hn [rows, d], rstd2 [rows] and sv's buffers are
   given. out may be x (a session updates its residual stream in place): x is read before out is written. */
static void titans__block_ffn_rows(const titans_config *c, const titans_layer *L, const titans__ffn_save *sv,
                                   float *out, float *h, float *hn, float *rstd2, const float *x, const float *mix,
                                   size_t rows) {
  size_t d = (size_t)c->d;
  for (size_t j = 0; j < rows * d; j++) h[j] = x[j] + mix[j];
  titans_rmsnorm_forward(hn, rstd2, h, L->norm2, rows, d);
  titans__ffn_rows(c, L, sv, out, hn, rows);
  for (size_t j = 0; j < rows * d; j++) out[j] += h[j];
}

/* accumulates dx [rows, d] and G's FFN weights */
static int titans__ffn_backward(const titans_config *c, const titans_layer *L, const titans_layer *G, titans__arena *ar,
                                const titans__ffn_save *sv, float *dx, const float *dout, const float *x, size_t rows) {
  size_t d = (size_t)c->d, ff = (size_t)c->ffn_hidden;
  float *dact = titans__arena_alloc(ar, rows * ff), *du1 = titans__arena_zalloc(ar, rows * ff);
  float *du3 = titans__arena_alloc(ar, rows * ff);
  if (!dact || !du1 || !du3) return TITANS_ERR_NOMEM;
  titans_gemm(1, 0, d, ff, rows, 1.0f, titans_cm(dout, d), titans_cm(sv->act, ff), 1.0f, titans_m(G->ffn_w2, ff));
  titans_gemm(0, 0, rows, ff, d, 1.0f, titans_cm(dout, d), titans_cm(L->ffn_w2, ff), 0.0f, titans_m(dact, ff));
  /* act = SiLU(u1) * u3: du3 = dact * SiLU(u1) (= act / u3, recomputed to avoid the division), du1 via SiLU' */
  titans_silu_forward(du3, sv->u1, rows * ff);
  for (size_t j = 0; j < rows * ff; j++) {
    du3[j] *= dact[j];
    dact[j] *= sv->u3[j];
  }
  titans_silu_backward(du1, dact, sv->u1, rows * ff);
  titans_gemm(1, 0, ff, d, rows, 1.0f, titans_cm(du1, ff), titans_cm(x, d), 1.0f, titans_m(G->ffn_w1, d));
  titans_gemm(1, 0, ff, d, rows, 1.0f, titans_cm(du3, ff), titans_cm(x, d), 1.0f, titans_m(G->ffn_w3, d));
  titans_gemm(0, 0, rows, d, ff, 1.0f, titans_cm(du1, ff), titans_cm(L->ffn_w1, d), 1.0f, titans_m(dx, d));
  titans_gemm(0, 0, rows, d, ff, 1.0f, titans_cm(du3, ff), titans_cm(L->ffn_w3, d), 1.0f, titans_m(dx, d));
  return TITANS_OK;
}

/* ---- per-layer activations -------------------------------------------------------------------- */

typedef struct titans__mac_seg {
  size_t t0, n;        /* first position and length of the segment */
  float *xs;           /* [B, n, d] the segment of the normalised block input */
  float *hm;           /* [B, n, d] retrieved memory (MAC step 1) */
  float *src;          /* [B, P + 2n, d] persist || Hm || X */
  float *y;            /* [B, n, d] attention output (step 2) */
  float *mm;           /* [B, n, d] memory output (step 3) */
  int64_t *kpos;       /* [2n] 0..n-1, 0..n-1 */
  titans__attn_save at;
  titans__gate_save gate;
} titans__mac_seg;

/* LM2's saved activations of a forward over [B, T]: S = ceil(T / C) segments, the first S - 1 write (and
   in a stream, the last one too when it is complete: its bank is carried to the next window). */
typedef struct titans__lm2_save {
  size_t nseg;           /* S */
  size_t nwrite;         /* S - 1, or S (a stream's complete last segment) */
  float *q;              /* [B, T, d] read queries E wq^T */
  float *a;              /* [B, T, N_s] read attention over the slots */
  float *emem, *g;       /* [B, T, d] E_mem, sigma(E_mem w_out^T) */
  float *ku, *vu;        /* [B, T, d] write keys E uk^T and values E uv^T */
  float *bank;           /* [nwrite + 1, B, N_s, d] the bank at each segment's start (bank 0: m0 or carried),
                            then after the last write */
  float *kb, *vb;        /* [S, B, N_s, d] read keys and values of the bank */
  float *qu;             /* [nwrite, B, N_s, d] write queries of the bank */
  float *aw;             /* [nwrite, B, N_s, C] write attention over the segment */
  float *u, *gi, *tu, *gf; /* [nwrite, B, N_s, d] U, sigma(U w_in^T), tanh(U), sigma(U w_f^T + b_f) */
} titans__lm2_save;

typedef struct titans__layer_fwd {
  const float *x_in;     /* [B, T, d] block input */
  float *xn, *rstd1;     /* [B, T, d] RMSNorm(x; norm1), [B * T] */
  float *mix;            /* [B, T, d] mixer output */
  float *h, *hn, *rstd2; /* [B, T, d] x + mix, RMSNorm(h; norm2), [B * T] */
  titans__ffn_save ffn;
  float *src;            /* [B, P + T, d] key source / memory input: persist || xn (MAL: the memory output) */
  float *mem_in;         /* [B, N_p + T, d] memory input (MAG, MAL; LMM: xn) */
  float *mem_out;        /* [B, N_p + T, d] memory output (MAG, MAL; LMM: [B, T, d]) */
  float *y, *m;          /* [B, T, d] MAG: gate inputs; MAL: y = the attention's queries */
  titans__attn_save at;
  titans__gate_save gate;
  titans__mac_seg *segs; /* [nseg] (MAC) */
  titans__lm2_save lm2;  /* (LM2) */
  const float *bank_carry;        /* [B, N_s, d] LM2 in a stream: the bank each row carries (fresh rows: m0) */
  size_t nseg;
  titans_mem_state st;   /* kept between steps */
  int st_ready;
  /* streams (NULL otherwise): the state this forward continues and the rows that start afresh */
  const titans_mem_state *carry;  /* the memory state to start from instead of w0 */
  const unsigned char *fresh;     /* [B] rows that start a new document (memory at w0, no SWA tail) */
  const float *attn_tail;         /* [B, window, d] SWA: the carried normalised inputs, oldest first */
  const size_t *attn_tail_rows;   /* [B] how many of the last rows of attn_tail are valid */
  const long long *row_position;  /* [B] tokens each row has read of its current document */
  int64_t *kpos_rows;             /* [B, window + T] SWA in a stream: each row's key positions */
  float *attn_src;                /* [B, P + window + T, d] SWA in a stream: persist || carried rows || xn */
  size_t mem_prefix;              /* MAG: persistent tokens the memory read first in this forward (N_p or 0) */
  const unsigned char *write_cost_skip; /* [B, T] or NULL: titans_trainer_set_write_cost_skip's rows */
  titans_mem_ctx *ctxs;  /* [nctx] kept between steps (MAC: 2 per segment) */
  size_t nctx;
  /* MAC runs each batch row as its own forward, so the rows can run on threads (titans__mac_forward):
     rows[b] is row b's, with B = 1 and its own arena; kept between steps. */
  struct titans__layer_fwd *rows; /* [nrows] */
  size_t nrows;
  titans__arena row_arena;        /* (a row's forward) its activations and its backward's work */
  /* MAC with recomputation (titans_trainer_set_recompute): one segment's activations at a time */
  int recompute;
  titans__arena seg_arena;        /* the current segment's forward and backward */
  float *seg_states;              /* [nseg, slab] the memory state (W, S, conv tails) at each segment's start */
  size_t cap_seg_states;
  long long *seg_positions;       /* [nseg] its position (in the row's arena) */
} titans__layer_fwd;

struct titans__fwd {
  size_t B, T;
  titans__arena arena;
  titans__layer_fwd *layers; /* [n_layers] */
  int *inputs, *targets;     /* [B * T] */
  int64_t *pos;              /* [T] 0..T-1 */
  float **x;                 /* [n_layers + 1] residual stream: x[0] embeddings, x[l + 1] block l's output */
  float *xf, *rstdf;         /* [B, T, d] final norm, [B * T] */
  /* The head runs on the rows a loss counts (every row when logits are asked for): a task whose targets
     are a few answers (MQAR's queries, the needle's digits) pays V d per answer, not per token. */
  size_t n_head;             /* rows the head ran on: B * T, or the rows whose target is >= 0 */
  int *head_rows;            /* [n_head] their row index b * T + i; NULL when the head ran on every row */
  int *head_targets;         /* [n_head] their targets (f->targets when every row) */
  float *xhead;              /* [n_head, d] their final-norm rows (f->xf when every row) */
  float *logits;             /* [n_head, V] */
  /* titans_trainer_set_reduce_overlap: the step's ranges of the gradient slab handed to the start function */
  int handing_out;   /* 1 in the step's last micro-batch (or a failed step's reduction) with a start function */
  double counted;    /* targets counted by the step's earlier micro-batches */
  float hand_scale;  /* the step's counted targets: a range times it is a sum, as the blocking hook gets */
  size_t final_from; /* grads [final_from, n_floats) are handed out (in flight: not to be touched) */
  int start_failed;  /* a start function returned non-zero this step */
};

static titans_mem_ctx *titans__layer_ctx(titans__layer_fwd *lf, size_t i) {
  if (i >= lf->nctx) {
    size_t n = i + 1 > 2 * lf->nctx ? i + 1 : 2 * lf->nctx;
    titans_mem_ctx *c = (titans_mem_ctx *)titans_alloc_bytes(n, sizeof(titans_mem_ctx));
    if (!c) return NULL;
    if (lf->ctxs) memcpy(c, lf->ctxs, lf->nctx * sizeof(titans_mem_ctx));
    for (size_t j = lf->nctx; j < n; j++) titans_mem_ctx_init(&c[j]);
    titans_free(lf->ctxs);
    lf->ctxs = c;
    lf->nctx = n;
  }
  return &lf->ctxs[i];
}

/* (Re)creates the layer's memory state for batch B and sets it to the start of this forward: w0, or
   the state a stream carries (its fresh rows at w0). */
static int titans__layer_state(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf, size_t B) {
  if (!lf->st_ready || lf->st.batch != B) {
    if (lf->st_ready) titans_mem_state_free(&lf->st);
    lf->st_ready = 0;
    if (titans_mem_state_init(&lf->st, &c->mem, B)) return TITANS_ERR_NOMEM;
    lf->st_ready = 1;
  }
  if (!lf->carry) {
    titans_mem_state_reset(&lf->st, &L->mem);
    return TITANS_OK;
  }
  int rc = titans_mem_state_copy(&lf->st, lf->carry);
  if (rc) return rc;
  for (size_t r = 0; r < B; r++)
    if (lf->fresh[r]) titans__mem_state_reset_row(&lf->st, &L->mem, r);
  return TITANS_OK;
}

/* Backward of the layer's memory call that started from the layer's initial state (titans__layer_state):
   d W_0 reaches w0 for the rows that started there, and stops at the window for carried rows. */
static int titans__layer_mem_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                      const titans__layer_fwd *lf, float *dx, const float *dout, const float *x,
                                      titans_mem_ctx *ctx, int from_initial_state) {
  int rc = titans_mem_backward(&c->mem, &L->mem, &G->mem, dx, dout, x, ctx, 0);
  if (rc) return rc;
  if (from_initial_state) titans__mem_w0_grad(&c->mem, &G->mem, ctx, lf->carry ? lf->fresh : NULL);
  return TITANS_OK;
}

/* dst [B, P + T, d] = prefix rows || body rows, per batch row. prefix [P, d] is shared by the rows when
   prefix_stride is 0, else row b's prefix starts at prefix + b * prefix_stride. */
static void titans__concat_prefix(float *dst, const float *prefix, size_t prefix_stride, const float *body, size_t B,
                                  size_t P, size_t T, size_t d) {
  for (size_t b = 0; b < B; b++) {
    float *o = dst + b * (P + T) * d;
    if (P) memcpy(o, prefix + b * prefix_stride, P * d * sizeof(float));
    memcpy(o + P * d, body + b * T * d, T * d * sizeof(float));
  }
}

/* The inverse split of a gradient [B, P + T, d]: prefix rows summed over the batch into dprefix (when
   not NULL), body rows added into dbody [B, T, d]. */
static void titans__split_prefix_grad(float *dprefix, float *dbody, const float *dsrc, size_t B, size_t P, size_t T,
                                      size_t d) {
  for (size_t b = 0; b < B; b++) {
    const float *s = dsrc + b * (P + T) * d;
    if (P && dprefix) titans__axpy(dprefix, 1.0f, s, P * d);
    titans__axpy(dbody + b * T * d, 1.0f, s + P * d, T * d);
  }
}

/* rows [t0, t0 + n) of every batch row of src [B, T, d] into dst [B, n, d] (add = 0) or added (add = 1) */
static void titans__rows_slice(float *dst, const float *src, size_t B, size_t T, size_t t0, size_t n, size_t d,
                               int add) {
  for (size_t b = 0; b < B; b++) {
    if (add) titans__axpy(dst + b * n * d, 1.0f, src + (b * T + t0) * d, n * d);
    else memcpy(dst + b * n * d, src + (b * T + t0) * d, n * d * sizeof(float));
  }
}

/* the reverse: src [B, n, d] into rows [t0, t0 + n) of dst [B, T, d] (add: accumulate) */
static void titans__rows_unslice(float *dst, const float *src, size_t B, size_t T, size_t t0, size_t n, size_t d,
                                 int add) {
  for (size_t b = 0; b < B; b++) {
    if (add) titans__axpy(dst + (b * T + t0) * d, 1.0f, src + b * n * d, n * d);
    else memcpy(dst + (b * T + t0) * d, src + b * n * d, n * d * sizeof(float));
  }
}

/* ---- mixers: what the kinds share -------------------------------------------------------------
   A block is h = x + Mixer(RMSNorm(x)), out = h + FFN(RMSNorm(h)) for every kind; the mixer is the
   kind's own (titans__kinds). Each kind's subsection below holds its mixer three ways, side by side:
   the training forward over a batch [B, T], its backward, and the one-token step of a session (which
   reads the KV cache and the running memory instead of the whole sequence). */

/* The attention window of ATTN, SWA, MAG, MAL (0: unbounded). */
static int64_t titans__window(const titans_config *c) {
  return titans__kind_of(c->block)->keys == TITANS__KEYS_WINDOW ? (int64_t)c->window : 0;
}

/* 1 when x [n] holds no NaN or Inf */
static int titans__all_finite(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return 0;
  return 1;
}

/* titans__all_finite for a session's own large buffers (a memory's W and S, LM2's bank), in one vector
   pass: x * 0 is 0 for a finite x and NaN for Inf or NaN, so the sum of those products is 0 exactly when
   all are finite. The scalar loop with an early exit was a quarter of a generated token's time (the
   check runs after every feed, issue 38). The small rows (a token's x, k, v, the caller's logits) keep
   the scalar loop: inlined on a caller's short array, the vector loads draw -Warray-bounds. */
static int titans__state_finite(const float *x, size_t n) {
  titans__vf zero = titans__vset1(0.0f), acc = zero;
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) acc = titans__vadd(acc, titans__vmul(titans__vload(x + i), zero));
  float sum = titans__vsum(acc);
  for (; i < n; i++) sum += x[i] * 0.0f;
  return sum == 0.0f;
}

/* What a session keeps per layer between tokens. */
struct titans__session_layer {
  titans_kv_cache kv;          /* attention kinds: prefix rows + a ring of keys/values */
  int has_kv;
  titans_mem_state mem;        /* memory kinds: the running memory */
  int has_mem;
  /* a kind's own state (titans__carry: made, reset, copied, saved and restored by its functions) */
  titans_mem_state committed;  /* MAC: the memory as it was at the segment's start (retrieval reads it) */
  float *lm2;                  /* LM2: the bank and its write in progress (titans__lm2_session) */
  int kv_nonfinite;            /* a key or value row with NaN or Inf entered the cache since the last reset */
  int mem_finite;              /* 1: this feed's last memory step rewrote all of mem's W and S and found them finite
                                  (titans__session_state_finite then skips reading them); cleared by that check */
};

/* One token's scratch in a session, named slices of s->work (titans__step_work_carve). */
typedef struct titans__step_work {
  float *x;       /* [d] the residual stream */
  float *xn;      /* [d] RMSNorm(x; norm1), then RMSNorm(h; norm2) */
  float *mix;     /* [d] the mixer's output */
  float *h;       /* [d] x + mix */
  titans__ffn_save ffn;   /* u1, u3, act [d_ff]: the FFN's saved rows (titans__ffn_rows) */
  float *y, *m;   /* [d] the attention and memory outputs the mixer combines (MAC, MAG, MAL) */
  float *pair;    /* [2, d] MAC: Hm_i || X_i, the two key rows of token i */
  float *q, *att; /* [d] the attention's query and output */
  float *k, *v;   /* [2, d] the key and value rows appended to the cache (two for MAC) */
  titans__gate_save gate; /* yn, sg [d], rstd_y, rstd_m [1]: the gate's rows (titans__gate_rows) */
  float *xf;      /* [d] RMSNorm(x; norm_f), the input of the output head */
  /* LM2 (empty for the other kinds) */
  float *a;                   /* [N_s] the token's read attention over the slots, then its write scores */
  float *emem, *g;            /* [d] E_mem, its output gate */
  float *u, *gi, *tu, *gf;    /* [N_s, d] a write's U and gates */
} titans__step_work;

/* Carves w out of base (NULL: only counts); returns the floats it takes. */
static size_t titans__step_work_carve(titans__step_work *w, float *base, const titans_config *c) {
  size_t used = 0, d = (size_t)c->d, ff = (size_t)c->ffn_hidden;
  w->x = titans__take(base, &used, d);
  w->xn = titans__take(base, &used, d);
  w->mix = titans__take(base, &used, d);
  w->h = titans__take(base, &used, d);
  w->ffn.u1 = titans__take(base, &used, ff);
  w->ffn.u3 = titans__take(base, &used, ff);
  w->ffn.act = titans__take(base, &used, ff);
  w->y = titans__take(base, &used, d);
  w->m = titans__take(base, &used, d);
  w->pair = titans__take(base, &used, 2 * d);
  w->q = titans__take(base, &used, d);
  w->att = titans__take(base, &used, d);
  w->k = titans__take(base, &used, 2 * d);
  w->v = titans__take(base, &used, 2 * d);
  w->gate.yn = titans__take(base, &used, d);
  w->gate.sg = titans__take(base, &used, d);
  w->gate.rstd_y = titans__take(base, &used, 1);
  w->gate.rstd_m = titans__take(base, &used, 1);
  w->xf = titans__take(base, &used, d);
  int bank = titans__kind_of(c->block)->bank;
  size_t Ns = bank ? (size_t)c->lm2_slots : 0;
  w->a = titans__take(base, &used, Ns);
  w->emem = titans__take(base, &used, bank ? d : 0);
  w->g = titans__take(base, &used, bank ? d : 0);
  float **per_slot[4] = {&w->u, &w->gi, &w->tu, &w->gf};
  for (int i = 0; i < 4; i++) *per_slot[i] = titans__take(base, &used, Ns * d);
  return used;
}

/* One token of each of n streams in a session batch: named slices of b->work (titans__rows_work_carve) and
   of b->index (the streams of the call in row order, their caches and positions). */
typedef struct titans__rows_work {
  float *x, *xn, *mix, *h; /* [n, d] the residual stream, the norms' outputs, the mixer's output, x + mix */
  float *rstd;             /* [n] */
  titans__ffn_save ffn;    /* u1, u3, act [n, d_ff] */
  float *q, *att;          /* [n, d] the attention's queries and outputs */
  float *k, *v;            /* [n, 2, d] the key and value rows appended to the caches */
  float *xf;               /* [n, d] RMSNorm(x; norm_f) */
  float *logits;           /* [n, V] */
  float *y, *m;            /* [n, d] the attention and memory outputs the mixer combines (MAC, MAG, MAL) */
  float *pair;             /* [n, 2, d] MAC: Hm_i || X_i, each row's two key rows */
  titans__gate_save gate;  /* yn, sg [n, d], rstd_y, rstd_m [n]: the gate's rows (MAC, MAG) */
  float *mem;              /* [titans__mem_rows_floats(n)] the memory's shared buffers (kinds with a memory) */
  titans_session **s;      /* [n] the streams fed in this call, row r's at s[r] */
  size_t *slot;            /* [n] row r's stream number (its row in the caller's tokens and logits) */
  titans_kv_cache **kv;    /* [n] one layer's caches of the rows (titans__session_attend_rows) */
  titans_mem_state **mst;  /* [n] one layer's running memories of the rows (titans__mem_forward_rows) */
  int *finite;             /* [n] whether each row's memory step found its W and S finite */
  int64_t *pos;            /* [n, 2] query and key positions */
  int64_t *qk;             /* [2, n, 2] the positions as titans__attn_sub_forward reads them */
} titans__rows_work;

/* Carves the floats of w for n rows out of base (NULL: only counts); returns the floats. */
static size_t titans__rows_work_carve(titans__rows_work *w, float *base, const titans_config *c, size_t n) {
  size_t used = 0, d = (size_t)c->d, ff = (size_t)c->ffn_hidden;
  float **rows_d[] = {&w->x, &w->xn, &w->mix, &w->h, &w->q, &w->att, &w->xf};
  for (size_t i = 0; i < sizeof rows_d / sizeof *rows_d; i++) *rows_d[i] = titans__take(base, &used, n * d);
  w->rstd = titans__take(base, &used, n);
  w->ffn.u1 = titans__take(base, &used, n * ff);
  w->ffn.u3 = titans__take(base, &used, n * ff);
  w->ffn.act = titans__take(base, &used, n * ff);
  w->k = titans__take(base, &used, 2 * n * d);
  w->v = titans__take(base, &used, 2 * n * d);
  w->logits = titans__take(base, &used, n * (size_t)c->vocab);
  w->y = titans__take(base, &used, n * d);
  w->m = titans__take(base, &used, n * d);
  w->pair = titans__take(base, &used, 2 * n * d);
  w->gate.yn = titans__take(base, &used, n * d);
  w->gate.sg = titans__take(base, &used, n * d);
  w->gate.rstd_y = titans__take(base, &used, n);
  w->gate.rstd_m = titans__take(base, &used, n);
  w->gate.y = w->gate.m = NULL;
  w->mem = titans__take(base, &used, titans__kind_of(c->block)->mem ? titans__mem_rows_floats(&c->mem, n) : 0);
  return used;
}

/* Carves the index part of w (n rows) out of base (NULL: only counts); returns its bytes. */
static size_t titans__rows_index_carve(titans__rows_work *w, unsigned char *base, size_t n) {
  size_t used = 0; /* the int64 first, then pointers, then size_t: each part stays aligned */
  w->pos = (int64_t *)(base ? base + used : NULL);
  used += 6 * n * sizeof(int64_t);
  w->qk = base ? w->pos + 2 * n : NULL;
  w->s = (titans_session **)(base ? base + used : NULL);
  used += n * sizeof(titans_session *);
  w->kv = (titans_kv_cache **)(base ? base + used : NULL);
  used += n * sizeof(titans_kv_cache *);
  w->mst = (titans_mem_state **)(base ? base + used : NULL);
  used += n * sizeof(titans_mem_state *);
  w->slot = (size_t *)(base ? base + used : NULL);
  used += n * sizeof(size_t);
  w->finite = (int *)(base ? base + used : NULL);
  used += n * sizeof(int);
  return used;
}

/* y [n, d_out] = x [n, d_in] W^T for W [d_out, d_in] */
static void titans__linear(float *y, const float *x, const float *W, size_t n, size_t d_out, size_t d_in) {
  titans_gemm(0, 1, n, d_out, d_in, 1.0f, titans_cm(x, d_in), titans_cm(W, d_in), 0.0f, titans_m(y, d_out));
}

/* One token in each of n streams, as titans__session_attend_rows reads it. */
typedef struct titans__attend_rows_in {
  const float *xq;    /* [n, d] row b: the row stream b's query is projected from */
  const float *k_src; /* [n, nk, d] row b: the rows its new keys and values are projected from */
  size_t nk;          /* key rows a stream (1 or 2) */
  const int64_t *pos; /* [n, 2] row b: the query's position, then the new keys' */
} titans__attend_rows_in;

/* The attention of one token in each of n sessions (streams) of one model: titans__attn_sub_forward at
   Tq = 1 on each stream's KV cache of layer l. Row b: the k_src rows [nk, d] (nk <= 2) become keys and
   values at position pos[b * 2 + 1], the query xq [d] sits at pos[b * 2]; out [n, d]. The projections
   are products of [n, d] rows with the weights; sv holds q, att [n, d] and k, v [n nk, d] (given); kv [n]
   and qk [2 n nk] are scratch filled here. */
static int titans__session_attend_rows(const titans_config *c, const titans_layer *L, titans_session *const *s,
                                       size_t n, int l, float *out, const titans__attend_rows_in *in,
                                       titans__attn_save *sv, titans_kv_cache **kv, int64_t *qk) {
  const float *xq = in->xq, *k_src = in->k_src;
  const int64_t *pos = in->pos;
  size_t nk = in->nk;
  /* kv [n]: the streams' caches; qk [n, 2 nk]: the query positions (nk per row, the first used), then the
     key positions, so that one stride (nk) walks both */
  for (size_t b = 0; b < n; b++) {
    kv[b] = &s[b]->layers[l].kv;
    for (size_t j = 0; j < nk; j++) {
      qk[b * nk + j] = pos[b * 2];
      qk[(n + b) * nk + j] = pos[b * 2 + 1];
    }
  }
  const titans__attn_sub_in call = {xq, k_src, qk, qk + n * nk, nk, n, 1, 0, nk, 0};
  TITANS__TRY(titans__attn_sub_forward(c, L, NULL, sv, out, &call, kv));
  /* the rows are checked as they enter (cheap), not the whole cache after every feed (a 4K-row ATTN
     cache is as many floats as the attention itself reads) */
  size_t d = (size_t)c->d;
  for (size_t b = 0; b < n; b++)
    if (!titans__all_finite(sv->k + b * nk * d, nk * d) || !titans__all_finite(sv->v + b * nk * d, nk * d))
      s[b]->layers[l].kv_nonfinite = 1;
  return TITANS_OK;
}

/* A session's attention for one token: titans__session_attend_rows with one stream, the k_src rows [nk, d]
   becoming keys and values at position kp, the query xq [d] at position qp; out [d]. */
static int titans__session_attend(titans_session *s, int l, float *out, const float *xq, const float *k_src, size_t nk,
                                  int64_t qp, int64_t kp, titans__step_work *w) {
  int64_t pos[2] = {qp, kp}, qk[4]; /* [1, 2]; [2, nk] */
  titans_kv_cache *kv[1];
  titans__attn_save sv = {w->q, w->k, w->v, w->att, NULL};
  const titans__attend_rows_in in = {xq, k_src, nk, pos};
  return titans__session_attend_rows(&s->model->cfg, &s->model->w.layers[l], &s, 1, l, out, &in, &sv, kv, qk);
}

/* The training gate on one row: out [d] = RMSNorm(y) * sigmoid(RMSNorm(m)). */
static void titans__session_gate(const titans_layer *L, float *out, const float *y, const float *m,
                                 titans__step_work *w, size_t d) {
  titans__gate_rows(&w->gate, out, y, m, L->gate_norm_y, L->gate_norm_m, 1, d);
}

/* The running memory of layer l on a session batch's n rows: out [n, d] = M(x [n, d]) row by row on each
   row's own memory (titans__mem_forward_rows), as titans__mem_forward_checked on one token per session. */
static int titans__rows_memory(titans__rows_work *w, size_t n, int l, float *out, const float *x) {
  const titans_model *mo = w->s[0]->model;
  for (size_t r = 0; r < n; r++) w->mst[r] = &w->s[r]->layers[l].mem;
  TITANS__TRY(titans__mem_forward_rows(&mo->cfg.mem, &mo->w.layers[l].mem, w->mst, n, out, x, w->mem, w->finite));
  for (size_t r = 0; r < n; r++) w->s[r]->layers[l].mem_finite = w->finite[r];
  return TITANS_OK;
}

/* The attention of layer l on a session batch's n rows, each token's query and key from its row of x
   [n, d] at the stream's position (the self-attention step of ATTN, SWA and MAG; MAL on its memory's
   output); out [n, d]. */
static int titans__rows_attend(titans__rows_work *w, size_t n, int l, float *out, const float *x) {
  const titans_model *m = w->s[0]->model;
  titans__attn_save sv = {w->q, w->k, w->v, w->att, NULL};
  for (size_t b = 0; b < n; b++) w->pos[2 * b] = w->pos[2 * b + 1] = (int64_t)w->s[b]->position;
  const titans__attend_rows_in in = {x, x, 1, w->pos}; /* the token's own row gives its key */
  return titans__session_attend_rows(&m->cfg, &m->w.layers[l], w->s, n, l, out, &in, &sv, w->kv, w->qk);
}

/* ---- ATTN and SWA: the attention baselines --------------------------------------------------------
   mix = wo Attn(wq xn; wk src, wv src) over src = persist || xn: causal over every earlier token (ATTN)
   or over the last `window` (SWA). A stream continues SWA with the last `window` rows of the previous
   window's xn as extra keys (titans__swa_stream_forward, which MAG's stream reuses). */

/* Key position of a carried SWA row that belongs to an earlier document: so far back that no query's
   window reaches it. */
#define TITANS__FAR_POSITION (-((int64_t)1 << 40))

/* SWA continuing a stream: the keys are persist || the carried last `window` normalised inputs || this
   window's xn, at the row's absolute positions (as a session's, so RoPE rounds the same way); carried
   rows of an earlier document are pushed out of every query's reach. The carried rows are constants
   here: their gradient is dropped (truncated backpropagation). */
static int titans__swa_stream_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf,
                                      titans__arena *ar, float *out, size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist, Wc = (size_t)c->window, Tk = Wc + T;
  int64_t *kpos = (int64_t *)(void *)titans__arena_alloc(ar, 2 * B * Tk + 2); /* [B, Tk]; queries: the last T */
  TITANS__NEED(kpos && (lf->attn_src = titans__arena_alloc(ar, B * (P + Tk) * d)));
  for (size_t b = 0; b < B; b++) {
    float *o = lf->attn_src + b * (P + Tk) * d;
    if (P) memcpy(o, L->persist, P * d * sizeof(float));
    memcpy(o + P * d, lf->attn_tail + b * Wc * d, Wc * d * sizeof(float));
    memcpy(o + (P + Wc) * d, lf->xn + b * T * d, T * d * sizeof(float));
    int64_t start = lf->fresh[b] ? 0 : (int64_t)lf->row_position[b];
    size_t valid = lf->fresh[b] ? 0 : lf->attn_tail_rows[b];
    for (size_t j = 0; j < Tk; j++)
      kpos[b * Tk + j] = j + valid >= Wc ? start + (int64_t)j - (int64_t)Wc : TITANS__FAR_POSITION;
  }
  lf->kpos_rows = kpos;
  const titans__attn_sub_in in = {lf->xn, lf->attn_src, kpos + Wc, kpos, Tk, B, T, P, Tk, titans__window(c)};
  return titans__attn_sub_forward(c, L, ar, &lf->at, out, &in, NULL);
}

static int titans__swa_stream_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                       titans__layer_fwd *lf, titans__arena *ar, float *dxn, const float *dmix,
                                       size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist, Wc = (size_t)c->window, Tk = Wc + T;
  const int64_t *kpos = lf->kpos_rows; /* [B, Tk] */
  float *dsrc = titans__arena_zalloc(ar, B * (P + Tk) * d); /* [B, P + Tk, d] */
  TITANS__NEED(dsrc);
  const titans__attn_sub_in in = {lf->xn, lf->attn_src, kpos + Wc, kpos, Tk, B, T, P, Tk, titans__window(c)};
  TITANS__TRY(titans__attn_sub_backward(c, L, G, ar, &lf->at, dxn, dsrc, dmix, &in));
  for (size_t b = 0; b < B; b++) {
    const float *r = dsrc + b * (P + Tk) * d;
    if (P) titans__axpy(G->persist, 1.0f, r, P * d);
    titans__axpy(dxn + b * T * d, 1.0f, r + (P + Wc) * d, T * d); /* the carried rows' gradient is dropped */
  }
  return TITANS_OK;
}

static int titans__baseline_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf,
                                    titans__arena *ar, const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist;
  if (lf->attn_tail) return titans__swa_stream_forward(c, L, lf, ar, lf->mix, B, T);
  TITANS__NEED(lf->src = titans__arena_alloc(ar, B * (P + T) * d)); /* [B, P + T, d] persist || xn */
  titans__concat_prefix(lf->src, L->persist, 0, lf->xn, B, P, T, d);
  const titans__attn_sub_in in = titans__attn_sub_self(lf->xn, lf->src, pos, B, T, P, titans__window(c));
  return titans__attn_sub_forward(c, L, ar, &lf->at, lf->mix, &in, NULL);
}

static int titans__baseline_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                     titans__layer_fwd *lf, titans__arena *ar, float *dxn, const float *dmix,
                                     const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist;
  if (lf->attn_tail) return titans__swa_stream_backward(c, L, G, lf, ar, dxn, dmix, B, T);
  float *dsrc = titans__arena_zalloc(ar, B * (P + T) * d); /* [B, P + T, d] */
  TITANS__NEED(dsrc);
  const titans__attn_sub_in in = titans__attn_sub_self(lf->xn, lf->src, pos, B, T, P, titans__window(c));
  TITANS__TRY(titans__attn_sub_backward(c, L, G, ar, &lf->at, dxn, dsrc, dmix, &in));
  titans__split_prefix_grad(G->persist, dxn, dsrc, B, P, T, d); /* src = persist || xn */
  return TITANS_OK;
}

/* One token: its key and value join the cache (which holds the persistent rows as its prefix). */
static int titans__baseline_step(titans_session *s, int l, float *mix, const float *xn, long long p,
                                 titans__step_work *w) {
  return titans__session_attend(s, l, mix, xn, xn, 1, p, p, w);
}

/* One token in each of n streams: the projections are [n, d] products (titans__session_attend_rows). */
static int titans__baseline_step_rows(titans__rows_work *w, size_t n, int l) {
  return titans__rows_attend(w, n, l, w->mix, w->xn);
}

/* SWA streams any window length: the carried rows make a window's keys what a session's would be. ATTN
   does not stream (its keys would be the whole document). */
static size_t titans__swa_stream_unit(const titans_config *c) {
  (void)c;
  return 1;
}

/* ---- MAC: memory as context ---------------------------------------------------------------------
   The sequence is cut into segments of C tokens. For segment S with normalised input X:
     1. Hm = M*(X): retrieve from the memory as it was at the segment's start (no update),
     2. y = Attn over persist || Hm || X (positions local to the segment, causal, no window),
     3. the memory learns from y: m = M(y) (the update runs through the segment, chunk by chunk;
        with TITANS_MAC_LEARNS_INPUT from X instead: m = M(X)),
     4. mix = Gate(y, m).
   The memory state (and the conv tails of both its input streams) flows from segment to segment; the
   backward walks the segments in reverse, carrying d(state) and d(tails) back (docs/model.md 3.1). */

/* The rows step 3 writes into the memory: the attention output y (the paper) or the block input x,
   each [rows, d] (a segment in training, one token in a session). */
static const float *titans__mac_learn_rows(const titans_config *c, const float *y, const float *x) {
  return c->mac_learns_from == TITANS_MAC_LEARNS_INPUT ? x : y;
}

/* The write-cost skip mask of a memory call (titans_mem_ctx.write_cost_skip) whose rows read `lead`
   positions the sequence does not hold (persistent tokens: the costs apply there), then positions t0 ..
   t0 + n of each of the B rows of skip [B, T] (a layer's write_cost_skip). *out: [B, lead + n], skip
   itself when the call reads the rows whole, NULL when skip is NULL. */
static int titans__mem_call_skip(titans__arena *ar, const unsigned char *skip, size_t B, size_t T, size_t lead,
                                 size_t t0, size_t n, const unsigned char **out) {
  *out = NULL;
  if (!skip) return TITANS_OK;
  if (lead == 0 && t0 == 0 && n == T) return *out = skip, TITANS_OK;
  size_t len = lead + n;
  size_t floats = (B * len + sizeof(float) - 1) / sizeof(float) + 1; /* the arena hands out floats */
  unsigned char *rows = (unsigned char *)(void *)titans__arena_alloc(ar, floats); /* [B, lead + n] */
  if (!rows) return TITANS_ERR_NOMEM;
  for (size_t b = 0; b < B; b++) {
    memset(rows + b * len, 0, lead);
    memcpy(rows + b * len + lead, skip + b * T + t0, n);
  }
  *out = rows;
  return TITANS_OK;
}

/* Segment sg (sg->t0, sg->n set) of the forward over lf's B rows, from the memory state lf->st holds,
   which it advances: steps 1-4 above, the gate's output into lf->mix. Its activations come from ar and
   its two memory calls save into cr (the retrieval) and cu (the update). */
static int titans__mac_segment_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf,
                                       titans__arena *ar, titans__mac_seg *sg, titans_mem_ctx *cr, titans_mem_ctx *cu,
                                       size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist, n = sg->n;
  sg->xs = titans__arena_alloc(ar, B * n * d);
  sg->hm = titans__arena_alloc(ar, B * n * d);
  sg->src = titans__arena_alloc(ar, B * (P + 2 * n) * d);
  sg->y = titans__arena_alloc(ar, B * n * d);
  sg->mm = titans__arena_alloc(ar, B * n * d);
  sg->kpos = (int64_t *)(void *)titans__arena_alloc(ar, 4 * n + 2);
  float *out = titans__arena_alloc(ar, B * n * d); /* [B, n, d] the gate's output */
  TITANS__NEED(sg->xs && sg->hm && sg->src && sg->y && sg->mm && sg->kpos && out);
  for (size_t i = 0; i < n; i++) sg->kpos[i] = sg->kpos[n + i] = (int64_t)i;
  titans__rows_slice(sg->xs, lf->xn, B, T, sg->t0, n, d, 0);
  /* 1. retrieve with the weights committed at the segment's start */
  TITANS__TRY(titans_mem_retrieve(&c->mem, &L->mem, &lf->st, sg->hm, sg->xs, n, cr));
  /* 2. attention over persist || Hm || X, local positions */
  for (size_t b = 0; b < B; b++) {
    float *o = sg->src + b * (P + 2 * n) * d;
    if (P) memcpy(o, L->persist, P * d * sizeof(float));
    memcpy(o + P * d, sg->hm + b * n * d, n * d * sizeof(float));
    memcpy(o + (P + n) * d, sg->xs + b * n * d, n * d * sizeof(float));
  }
  const titans__attn_sub_in in = {sg->xs, sg->src, sg->kpos, sg->kpos, 0, B, n, P, 2 * n, 0};
  TITANS__TRY(titans__attn_sub_forward(c, L, ar, &sg->at, sg->y, &in, NULL));
  /* 3. the memory learns from the attention output (or from X: titans_mac_learns_from) */
  TITANS__TRY(titans__mem_call_skip(ar, lf->write_cost_skip, B, T, 0, sg->t0, n, &cu->write_cost_skip));
  TITANS__TRY(titans_mem_forward(&c->mem, &L->mem, &lf->st, sg->mm, titans__mac_learn_rows(c, sg->y, sg->xs), n, cu));
  /* 4. gate */
  TITANS__TRY(titans__gate_forward(ar, &sg->gate, out, sg->y, sg->mm, L->gate_norm_y, L->gate_norm_m, B * n, d));
  titans__rows_unslice(lf->mix, out, B, T, sg->t0, n, d, 0);
  return TITANS_OK;
}

/* Recomputation (titans_trainer_set_recompute): the forward keeps, per segment, only the memory state
   it started from ([nseg, titans__mem_state_slab_floats] in lf->seg_states); the backward restores that
   state and runs the segment's forward again, into lf->seg_arena and the two contexts lf->ctxs[0, 1],
   just before the segment's backward. The same operations in the same order: the gradients are the
   same bits, and a step's activations shrink from every segment's to one segment's.

   The segment loop over lf's B rows (titans__mac_forward calls it with one row), from the memory state
   lf->st holds. MAC's attention reads local positions 0..n-1 within each segment. */
static int titans__mac_forward_rows(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf,
                                    titans__arena *ar, size_t B, size_t T) {
  size_t C = (size_t)c->segment;
  lf->nseg = (T + C - 1) / C;
  lf->segs =
      (titans__mac_seg *)(void *)titans__arena_alloc(ar, lf->nseg * (sizeof(titans__mac_seg) / sizeof(float) + 1));
  size_t nctx = lf->recompute ? 2 : 2 * lf->nseg, keep = titans__mem_state_slab_floats(&lf->st);
  /* all contexts first: growing the pool moves it, so no pointer into it is taken before */
  TITANS__NEED(lf->segs && titans__layer_ctx(lf, nctx - 1));
  if (lf->recompute) {
    TITANS__NEED(titans__reserve(&lf->seg_states, &lf->cap_seg_states, lf->nseg * keep));
    TITANS__NEED(lf->seg_positions = (long long *)(void *)titans__arena_alloc(ar, 2 * lf->nseg + 1));
  }
  for (size_t s = 0; s < lf->nseg; s++) {
    titans__mac_seg *sg = &lf->segs[s];
    sg->t0 = s * C;
    sg->n = T - sg->t0 < C ? T - sg->t0 : C;
    if (!lf->recompute) {
      TITANS__TRY(titans__mac_segment_forward(c, L, lf, ar, sg, &lf->ctxs[2 * s], &lf->ctxs[2 * s + 1], B, T));
      continue;
    }
    lf->seg_positions[s] = lf->st.position;
    memcpy(lf->seg_states + s * keep, lf->st.w_chunk, keep * sizeof(float)); /* the slab: W, S, tails */
    titans__arena_reset(&lf->seg_arena);
    TITANS__TRY(titans__mac_segment_forward(c, L, lf, &lf->seg_arena, sg, &lf->ctxs[0], &lf->ctxs[1], B, T));
  }
  return TITANS_OK;
}

/* Backward of titans__mac_forward_rows: dxn [B, T, d] (added to) from dmix; the weight gradients are
   added into G. */
static int titans__mac_backward_rows(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                     titans__layer_fwd *lf, titans__arena *ar, float *dxn, const float *dmix, size_t B,
                                     size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist;
  titans__mem_dims m = titans__mem_get_dims(&c->mem);
  size_t dstate = B * m.H * 2 * m.head_size, dtail = 4 * B * (m.K > 0 ? m.K - 1 : 0) * m.dm;
  const float *dnext_state = NULL, *dnext_tail_u = NULL, *dnext_tail_r = NULL;
  float *dnext = NULL; /* [dstate + 2 dtail] recomputation: the chained gradients, apart from the reused contexts */
  if (lf->recompute) TITANS__NEED(dnext = titans__arena_alloc(ar, dstate + 2 * dtail));
  size_t keep = titans__mem_state_slab_floats(&lf->st);
  for (size_t s = lf->nseg; s-- > 0;) {
    titans__mac_seg *sg = &lf->segs[s];
    size_t n = sg->n, S = P + 2 * n;
    titans_mem_ctx *cr = &lf->ctxs[lf->recompute ? 0 : 2 * s], *cu = &lf->ctxs[lf->recompute ? 1 : 2 * s + 1];
    if (lf->recompute) { /* segment s again, from the state it started from */
      ar = &lf->seg_arena;
      titans__arena_reset(ar);
      lf->st.position = lf->seg_positions[s];
      memcpy(lf->st.w_chunk, lf->seg_states + s * keep, keep * sizeof(float));
      TITANS__TRY(titans__mac_segment_forward(c, L, lf, ar, sg, cr, cu, B, T));
    }
    float *dout = titans__arena_alloc(ar, B * n * d), *dy = titans__arena_zalloc(ar, B * n * d);
    float *dmm = titans__arena_zalloc(ar, B * n * d), *dxs = titans__arena_zalloc(ar, B * n * d);
    float *dsrc = titans__arena_zalloc(ar, B * S * d), *dhm = titans__arena_zalloc(ar, B * n * d);
    TITANS__NEED(dout && dy && dmm && dxs && dsrc && dhm);
    titans__rows_slice(dout, dmix, B, T, sg->t0, n, d, 0);
    TITANS__TRY(titans__gate_backward(ar, &sg->gate, dy, dmm, dout, L, G, B * n, d));
    /* the update of segment s feeds every later segment through the state it leaves */
    if (dnext_state) {
      memcpy(cu->dstate_final, dnext_state, dstate * sizeof(float));
      memcpy(cu->dtails_final, dnext_tail_u, dtail * sizeof(float));
    }
    /* the update's input gradient joins dy before the attention's backward reads it, or dX */
    int learns_x = c->mac_learns_from == TITANS_MAC_LEARNS_INPUT;
    TITANS__TRY(titans_mem_backward(&c->mem, &L->mem, &G->mem, learns_x ? dxs : dy, dmm,
                                    titans__mac_learn_rows(c, sg->y, sg->xs), cu, 0));
    const titans__attn_sub_in in = {sg->xs, sg->src, sg->kpos, sg->kpos, 0, B, n, P, 2 * n, 0}; /* the forward's */
    TITANS__TRY(titans__attn_sub_backward(c, L, G, ar, &sg->at, dxs, dsrc, dy, &in));
    for (size_t b = 0; b < B; b++) {
      const float *o = dsrc + b * S * d;
      if (P) titans__axpy(G->persist, 1.0f, o, P * d);
      titans__axpy(dhm + b * n * d, 1.0f, o + P * d, n * d);
      titans__axpy(dxs + b * n * d, 1.0f, o + (P + n) * d, n * d);
    }
    /* the retrieval read the state the update started from; its conv tail is the X stream's */
    memcpy(cr->dstate_final, cu->dstate_init, dstate * sizeof(float));
    if (dnext_tail_r) memcpy(cr->dtails_final, dnext_tail_r, dtail * sizeof(float));
    TITANS__TRY(titans__layer_mem_backward(c, L, G, lf, dxs, dhm, sg->xs, cr, s == 0));
    /* the update stream's tails of segment s - 1 are read by this update; the X stream's by this retrieval */
    dnext_state = cr->dstate_init;
    dnext_tail_u = cu->dtails_init;
    dnext_tail_r = cr->dtails_init;
    if (dnext) { /* the next segment's forward reuses cr and cu */
      memcpy(dnext, dnext_state, dstate * sizeof(float));
      memcpy(dnext + dstate, dnext_tail_u, dtail * sizeof(float));
      memcpy(dnext + dstate + dtail, dnext_tail_r, dtail * sizeof(float));
      dnext_state = dnext, dnext_tail_u = dnext + dstate, dnext_tail_r = dnext + dstate + dtail;
    }
    titans__rows_unslice(dxn, dxs, B, T, sg->t0, n, d, 1);
  }
  return TITANS_OK;
}

/* MAC by batch rows. A segment's products are small (n rows per batch row, n = 64 by default), and
   splitting each of them over threads costs more in thread wake-ups than it saves: thousands of
   parallel regions a step, each about 50-100 us under OMP_WAIT_POLICY=passive on the development
   machine. The batch rows are independent sequences, so each runs the whole segment loop as a forward
   of its own (lf->rows[b], B = 1, with its own arena and memory contexts), and the rows are spread over
   the threads: one parallel region per layer and pass, inside which every kernel runs on its thread.
   In the backward each row adds its weight gradients to a slab of its own; the slabs are summed into G
   in row order afterwards, so the result is the same for any thread count. */

/* lf->rows has B rows, each with a memory state of one row. */
static int titans__mac_rows_ready(const titans_config *c, titans__layer_fwd *lf, size_t B) {
  if (lf->nrows < B) {
    titans__layer_fwd *rows = (titans__layer_fwd *)titans_alloc_bytes(B, sizeof *rows); /* zeroed */
    if (!rows) return TITANS_ERR_NOMEM;
    if (lf->rows) memcpy(rows, lf->rows, lf->nrows * sizeof *rows);
    titans_free(lf->rows);
    lf->rows = rows;
    lf->nrows = B;
  }
  for (size_t b = 0; b < B; b++) {
    titans__layer_fwd *row = &lf->rows[b];
    if (!row->st_ready) {
      if (titans_mem_state_init(&row->st, &c->mem, 1)) return TITANS_ERR_NOMEM;
      row->st_ready = 1;
    }
  }
  return TITANS_OK;
}

/* out: a view of the layer gradients G whose mixer parameters live in slab instead. The mixer's
   parameters are those from norm1 up to norm2 in the model's order (titans__model_walk), so slab holds
   G->norm2 - G->norm1 floats; the view's other pointers (norm2, the FFN) are NULL. titans_layer holds
   float pointers only, which the loop relies on. */
typedef char titans__layer_holds_float_pointers_only[sizeof(titans_layer) % sizeof(float *) == 0 ? 1 : -1];
static void titans__layer_grad_view(titans_layer *out, const titans_layer *G, float *slab) {
  enum { N = sizeof(titans_layer) / sizeof(float *) };
  float *p[N];
  memcpy(p, G, sizeof p);
  for (size_t i = 0; i < N; i++)
    p[i] = p[i] && p[i] >= G->norm1 && p[i] < G->norm2 ? slab + (p[i] - G->norm1) : NULL;
  memcpy(out, p, sizeof p);
}

static int titans__mac_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf, titans__arena *ar,
                               const int64_t *pos, size_t B, size_t T) {
  (void)pos;
  size_t d = (size_t)c->d;
  TITANS__TRY(titans__layer_state(c, L, lf, B)); /* every row's start: w0, or what a stream carries */
  TITANS__TRY(titans__mac_rows_ready(c, lf, B));
  int *status = (int *)(void *)titans__arena_alloc(ar, B); /* [B] each row's return code */
  TITANS__NEED(status);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (B > 1 && !omp_in_parallel())
#endif
  for (ptrdiff_t b = 0; b < (ptrdiff_t)B; b++) {
    titans__layer_fwd *row = &lf->rows[b];
    titans__arena_reset(&row->row_arena);
    titans__mem_state_copy_row(&row->st, 0, &lf->st, (size_t)b);
    row->st.position = lf->st.position;
    row->xn = lf->xn + (size_t)b * T * d;
    row->mix = lf->mix + (size_t)b * T * d;
    row->carry = lf->carry; /* read by the backward only to know that the state was carried */
    row->fresh = lf->fresh ? lf->fresh + b : NULL;
    row->write_cost_skip = lf->write_cost_skip ? lf->write_cost_skip + (size_t)b * T : NULL;
    row->recompute = lf->recompute;
    status[b] = titans__mac_forward_rows(c, L, row, &row->row_arena, 1, T);
    if (!status[b]) titans__mem_state_copy_row(&lf->st, (size_t)b, &row->st, 0);
  }
  for (size_t b = 0; b < B; b++) TITANS__TRY(status[b]);
  lf->st.position = lf->rows[0].st.position;
  return TITANS_OK;
}

static int titans__mac_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                titans__layer_fwd *lf, titans__arena *ar, float *dxn, const float *dmix,
                                const int64_t *pos, size_t B, size_t T) {
  (void)pos;
  size_t d = (size_t)c->d, nmix = (size_t)(G->norm2 - G->norm1);
  int *status = (int *)(void *)titans__arena_alloc(ar, B); /* [B] each row's return code */
  float **slabs =
      (float **)(void *)titans__arena_alloc(ar, B * ((sizeof(float *) + sizeof(float) - 1) / sizeof(float))); /* [B] */
  TITANS__NEED(status && slabs);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (B > 1 && !omp_in_parallel())
#endif
  for (ptrdiff_t b = 0; b < (ptrdiff_t)B; b++) {
    titans__layer_fwd *row = &lf->rows[b];
    titans_layer row_grads;
    slabs[b] = titans__arena_zalloc(&row->row_arena, nmix); /* [nmix] row b's mixer gradients */
    status[b] = TITANS_ERR_NOMEM;
    if (slabs[b]) {
      titans__layer_grad_view(&row_grads, G, slabs[b]);
      status[b] = titans__mac_backward_rows(c, L, &row_grads, row, &row->row_arena, dxn + (size_t)b * T * d,
                                            dmix + (size_t)b * T * d, 1, T);
    }
  }
  for (size_t b = 0; b < B; b++) TITANS__TRY(status[b]);
  for (size_t b = 0; b < B; b++) titans__axpy(G->norm1, 1.0f, slabs[b], nmix); /* in row order: any thread count */
  return TITANS_OK;
}

/* MAC's carry (titans__mac_carry): the committed memory, a second memory state of one row. */
static int titans__mac_carry_init(struct titans__session_layer *sl, const titans_config *c) {
  return titans_mem_state_init(&sl->committed, &c->mem, 1);
}

static void titans__mac_carry_free(struct titans__session_layer *sl) { titans_mem_state_free(&sl->committed); }

static void titans__mac_carry_reset(struct titans__session_layer *sl, const titans_config *c, const titans_layer *L) {
  (void)c, (void)L;
  titans_mem_state_copy(&sl->committed, &sl->mem); /* the first segment reads w0 */
}

static int titans__mac_carry_copy(struct titans__session_layer *dst, const struct titans__session_layer *src,
                                  const titans_config *c) {
  (void)c;
  return titans_mem_state_copy(&dst->committed, &src->committed);
}

static float *titans__mac_carry_saved(struct titans__session_layer *sl, const titans_config *c, size_t *count) {
  (void)c;
  *count = titans__mem_state_slab_floats(&sl->committed);
  return sl->committed.w_chunk;
}

/* The state file holds no position for it: the segment's start. */
static int titans__mac_carry_loaded(struct titans__session_layer *sl, const titans_config *c, const titans_layer *L,
                                    long long pos, char *err) {
  (void)L, (void)err;
  sl->committed.position = pos == 0 ? 0 : ((pos - 1) / c->segment) * c->segment;
  return TITANS_OK;
}

/* One token, i-th of its segment: at the segment's first token the running memory becomes the one
   retrieval reads and the cache empties (the attention of a segment sees only that segment). */
static int titans__mac_step(titans_session *s, int l, float *mix, const float *xn, long long p, titans__step_work *w) {
  const titans_config *c = &s->model->cfg;
  const titans_layer *L = &s->model->w.layers[l];
  struct titans__session_layer *sl = &s->layers[l];
  size_t d = (size_t)c->d;
  int64_t i = (int64_t)(p % c->segment);
  if (i == 0 && p > 0) {
    /* a new segment: retrieval reads the memory as it is now; the X stream's conv tail goes on */
    titans__mem_state_commit(&sl->committed, &sl->mem);
    titans_kv_cache_reset(&sl->kv);
  }
  TITANS__TRY(titans_mem_retrieve(&c->mem, &L->mem, &sl->committed, w->pair, xn, 1, NULL)); /* Hm_i */
  memcpy(w->pair + d, xn, d * sizeof(float));                                                 /* X_i */
  TITANS__TRY(titans__session_attend(s, l, w->y, xn, w->pair, 2, i, i, w));
  TITANS__TRY(titans__mem_forward_checked(&c->mem, &L->mem, &sl->mem, w->m, titans__mac_learn_rows(c, w->y, xn), 1,
                                          NULL, &sl->mem_finite));
  titans__session_gate(L, mix, w->y, w->m, w, d);
  return TITANS_OK;
}

/* titans__mac_step on n streams: the retrieval stream by stream (each from its own committed memory),
   the attention's and the memory's products over the n rows. */
static int titans__mac_step_rows(titans__rows_work *w, size_t n, int l) {
  const titans_model *mo = w->s[0]->model;
  const titans_config *c = &mo->cfg;
  const titans_layer *L = &mo->w.layers[l];
  size_t d = (size_t)c->d;
  for (size_t r = 0; r < n; r++) {
    struct titans__session_layer *sl = &w->s[r]->layers[l];
    long long p = w->s[r]->position;
    int64_t i = (int64_t)(p % c->segment);
    if (i == 0 && p > 0) { /* as titans__mac_step */
      titans__mem_state_commit(&sl->committed, &sl->mem);
      titans_kv_cache_reset(&sl->kv);
    }
    float *pair = w->pair + r * 2 * d; /* Hm_i || X_i */
    TITANS__TRY(titans_mem_retrieve(&c->mem, &L->mem, &sl->committed, pair, w->xn + r * d, 1, NULL));
    memcpy(pair + d, w->xn + r * d, d * sizeof(float));
    w->pos[2 * r] = w->pos[2 * r + 1] = i;
  }
  titans__attn_save sv = {w->q, w->k, w->v, w->att, NULL};
  const titans__attend_rows_in in = {w->xn, w->pair, 2, w->pos};
  TITANS__TRY(titans__session_attend_rows(c, L, w->s, n, l, w->y, &in, &sv, w->kv, w->qk));
  TITANS__TRY(titans__rows_memory(w, n, l, w->m, titans__mac_learn_rows(c, w->y, w->xn)));
  titans__gate_rows(&w->gate, w->mix, w->y, w->m, L->gate_norm_y, L->gate_norm_m, n, d);
  return TITANS_OK;
}

/* Whole segments keep the segments where a session has them. */
static size_t titans__mac_stream_unit(const titans_config *c) { return (size_t)c->segment; }

/* ---- MAG: memory as a gate ----------------------------------------------------------------------
   Two branches over the same normalised input xn, combined by a gate:
     y = SWA over persist || xn (window w),  m = M(persist || xn) at the text's positions (the memory
     reads the persistent tokens first, then the text, updating as it goes),  mix = Gate(y, m). */

/* MAG continuing a stream: the sliding window over persist || carried rows || xn; the memory reads the
   persistent tokens only at a document's start (every row fresh), then the window's xn. */
static int titans__mag_stream_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf,
                                      titans__arena *ar, size_t B, size_t T) {
  size_t d = (size_t)c->d, Pm = lf->fresh[0] ? (size_t)c->n_persist : 0;
  lf->mem_prefix = Pm;
  TITANS__NEED(lf->y = titans__arena_alloc(ar, B * T * d));
  TITANS__NEED(lf->m = titans__arena_alloc(ar, B * T * d));
  TITANS__NEED(lf->mem_in = titans__arena_alloc(ar, B * (Pm + T) * d));
  TITANS__NEED(lf->mem_out = titans__arena_alloc(ar, B * (Pm + T) * d));
  titans_mem_ctx *cx = titans__layer_ctx(lf, 0);
  TITANS__NEED(cx);
  TITANS__TRY(titans__swa_stream_forward(c, L, lf, ar, lf->y, B, T));
  titans__concat_prefix(lf->mem_in, L->persist, 0, lf->xn, B, Pm, T, d);
  TITANS__TRY(titans__layer_state(c, L, lf, B));
  TITANS__TRY(titans__mem_call_skip(ar, lf->write_cost_skip, B, T, Pm, 0, T, &cx->write_cost_skip));
  TITANS__TRY(titans_mem_forward(&c->mem, &L->mem, &lf->st, lf->mem_out, lf->mem_in, Pm + T, cx));
  for (size_t b = 0; b < B; b++)
    memcpy(lf->m + b * T * d, lf->mem_out + (b * (Pm + T) + Pm) * d, T * d * sizeof(float));
  return titans__gate_forward(ar, &lf->gate, lf->mix, lf->y, lf->m, L->gate_norm_y, L->gate_norm_m, B * T, d);
}

static int titans__mag_stream_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                       titans__layer_fwd *lf, titans__arena *ar, float *dxn, const float *dmix,
                                       size_t B, size_t T) {
  size_t d = (size_t)c->d, Pm = lf->mem_prefix;
  float *dy = titans__arena_zalloc(ar, B * T * d), *dm = titans__arena_zalloc(ar, B * T * d);
  float *dmi = titans__arena_zalloc(ar, B * (Pm + T) * d), *dmo = titans__arena_zalloc(ar, B * (Pm + T) * d);
  TITANS__NEED(dy && dm && dmi && dmo);
  TITANS__TRY(titans__gate_backward(ar, &lf->gate, dy, dm, dmix, L, G, B * T, d));
  TITANS__TRY(titans__swa_stream_backward(c, L, G, lf, ar, dxn, dy, B, T));
  for (size_t b = 0; b < B; b++) memcpy(dmo + (b * (Pm + T) + Pm) * d, dm + b * T * d, T * d * sizeof(float));
  TITANS__TRY(titans__layer_mem_backward(c, L, G, lf, dmi, dmo, lf->mem_in, &lf->ctxs[0], 1));
  titans__split_prefix_grad(G->persist, dxn, dmi, B, Pm, T, d);
  return TITANS_OK;
}

static int titans__mag_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf, titans__arena *ar,
                               const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist;
  if (lf->carry) return titans__mag_stream_forward(c, L, lf, ar, B, T);
  TITANS__NEED(lf->src = titans__arena_alloc(ar, B * (P + T) * d));     /* [B, P + T, d] persist || xn */
  TITANS__NEED(lf->y = titans__arena_alloc(ar, B * T * d));             /* attention branch */
  TITANS__NEED(lf->m = titans__arena_alloc(ar, B * T * d));             /* memory branch at the text */
  TITANS__NEED(lf->mem_out = titans__arena_alloc(ar, B * (P + T) * d)); /* memory at every position */
  titans_mem_ctx *cx = titans__layer_ctx(lf, 0);
  TITANS__NEED(cx);
  titans__concat_prefix(lf->src, L->persist, 0, lf->xn, B, P, T, d);
  lf->mem_in = lf->src;
  const titans__attn_sub_in in = titans__attn_sub_self(lf->xn, lf->src, pos, B, T, P, titans__window(c));
  TITANS__TRY(titans__attn_sub_forward(c, L, ar, &lf->at, lf->y, &in, NULL));
  TITANS__TRY(titans__layer_state(c, L, lf, B));
  TITANS__TRY(titans__mem_call_skip(ar, lf->write_cost_skip, B, T, P, 0, T, &cx->write_cost_skip));
  TITANS__TRY(titans_mem_forward(&c->mem, &L->mem, &lf->st, lf->mem_out, lf->mem_in, P + T, cx));
  for (size_t b = 0; b < B; b++) memcpy(lf->m + b * T * d, lf->mem_out + (b * (P + T) + P) * d, T * d * sizeof(float));
  return titans__gate_forward(ar, &lf->gate, lf->mix, lf->y, lf->m, L->gate_norm_y, L->gate_norm_m, B * T, d);
}

static int titans__mag_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                titans__layer_fwd *lf, titans__arena *ar, float *dxn, const float *dmix,
                                const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist;
  if (lf->carry) return titans__mag_stream_backward(c, L, G, lf, ar, dxn, dmix, B, T);
  float *dy = titans__arena_zalloc(ar, B * T * d), *dm = titans__arena_zalloc(ar, B * T * d); /* [B, T, d] */
  float *dsrc = titans__arena_zalloc(ar, B * (P + T) * d),
        *dmo = titans__arena_zalloc(ar, B * (P + T) * d); /* [B, P + T, d] */
  TITANS__NEED(dy && dm && dsrc && dmo);
  /* mix = Gate(y, m) */
  TITANS__TRY(titans__gate_backward(ar, &lf->gate, dy, dm, dmix, L, G, B * T, d));
  /* y = SWA(xn; src) */
  const titans__attn_sub_in in = titans__attn_sub_self(lf->xn, lf->src, pos, B, T, P, titans__window(c));
  TITANS__TRY(titans__attn_sub_backward(c, L, G, ar, &lf->at, dxn, dsrc, dy, &in));
  /* m = the memory's outputs at the text; the persistent positions' outputs are not used */
  for (size_t b = 0; b < B; b++) memcpy(dmo + (b * (P + T) + P) * d, dm + b * T * d, T * d * sizeof(float));
  TITANS__TRY(titans__layer_mem_backward(c, L, G, lf, dsrc, dmo, lf->mem_in, &lf->ctxs[0], 1));
  titans__split_prefix_grad(G->persist, dxn, dsrc, B, P, T, d);
  return TITANS_OK;
}

/* One token: the attention branch over the cache, the memory branch continuing the running memory (which
   read the persistent tokens at titans_session_reset), then the gate. */
static int titans__mag_step(titans_session *s, int l, float *mix, const float *xn, long long p, titans__step_work *w) {
  const titans_config *c = &s->model->cfg;
  const titans_layer *L = &s->model->w.layers[l];
  struct titans__session_layer *sl = &s->layers[l];
  TITANS__TRY(titans__session_attend(s, l, w->y, xn, xn, 1, p, p, w));
  TITANS__TRY(titans__mem_forward_checked(&c->mem, &L->mem, &sl->mem, w->m, xn, 1, NULL, &sl->mem_finite));
  titans__session_gate(L, mix, w->y, w->m, w, (size_t)c->d);
  return TITANS_OK;
}

/* titans__mag_step on n streams: both branches' products over the n rows. */
static int titans__mag_step_rows(titans__rows_work *w, size_t n, int l) {
  const titans_layer *L = &w->s[0]->model->w.layers[l];
  TITANS__TRY(titans__rows_attend(w, n, l, w->y, w->xn));
  TITANS__TRY(titans__rows_memory(w, n, l, w->m, w->xn));
  titans__gate_rows(&w->gate, w->mix, w->y, w->m, L->gate_norm_y, L->gate_norm_m, n, (size_t)w->s[0]->model->cfg.d);
  return TITANS_OK;
}

/* MAG streams when its persistent tokens fill whole memory chunks, so that every later window still
   starts the memory at a chunk boundary; windows are then whole chunks. */
static size_t titans__mag_stream_unit(const titans_config *c) {
  return c->n_persist % c->mem.chunk == 0 ? (size_t)c->mem.chunk : 0;
}

/* ---- MAL: memory as a layer ---------------------------------------------------------------------
   The memory first, then attention over its output:
     y = M(persist || xn) at the text's positions,  mix = SWA(y) over the memory's outputs for
     persist || xn (the persistent tokens' outputs are the always-visible prefix).
   MAL does not stream in this version (the prefix would have to be recomputed from a carried memory). */

static int titans__mal_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf, titans__arena *ar,
                               const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist;
  TITANS__NEED(lf->mem_in = titans__arena_alloc(ar, B * (P + T) * d));  /* [B, P + T, d] persist || xn */
  TITANS__NEED(lf->mem_out = titans__arena_alloc(ar, B * (P + T) * d)); /* [B, P + T, d] */
  TITANS__NEED(lf->y = titans__arena_alloc(ar, B * T * d));             /* [B, T, d] the queries */
  titans_mem_ctx *cx = titans__layer_ctx(lf, 0);
  TITANS__NEED(cx);
  titans__concat_prefix(lf->mem_in, L->persist, 0, lf->xn, B, P, T, d);
  TITANS__TRY(titans__layer_state(c, L, lf, B));
  TITANS__TRY(titans__mem_call_skip(ar, lf->write_cost_skip, B, T, P, 0, T, &cx->write_cost_skip));
  TITANS__TRY(titans_mem_forward(&c->mem, &L->mem, &lf->st, lf->mem_out, lf->mem_in, P + T, cx));
  for (size_t b = 0; b < B; b++) memcpy(lf->y + b * T * d, lf->mem_out + (b * (P + T) + P) * d, T * d * sizeof(float));
  lf->src = lf->mem_out; /* the memory's outputs at the persistent positions are the visible prefix */
  const titans__attn_sub_in in = titans__attn_sub_self(lf->y, lf->src, pos, B, T, P, titans__window(c));
  return titans__attn_sub_forward(c, L, ar, &lf->at, lf->mix, &in, NULL);
}

static int titans__mal_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                titans__layer_fwd *lf, titans__arena *ar, float *dxn, const float *dmix,
                                const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist;
  float *dyq = titans__arena_zalloc(ar, B * T * d), *dmo = titans__arena_zalloc(ar, B * (P + T) * d);
  float *dmi = titans__arena_zalloc(ar, B * (P + T) * d);
  TITANS__NEED(dyq && dmo && dmi);
  /* mix = SWA(y; src = mem_out): y reaches the memory's outputs twice, as queries and as keys/values */
  const titans__attn_sub_in in = titans__attn_sub_self(lf->y, lf->src, pos, B, T, P, titans__window(c));
  TITANS__TRY(titans__attn_sub_backward(c, L, G, ar, &lf->at, dyq, dmo, dmix, &in));
  for (size_t b = 0; b < B; b++) titans__axpy(dmo + (b * (P + T) + P) * d, 1.0f, dyq + b * T * d, T * d);
  TITANS__TRY(titans__layer_mem_backward(c, L, G, lf, dmi, dmo, lf->mem_in, &lf->ctxs[0], 1));
  titans__split_prefix_grad(G->persist, dxn, dmi, B, P, T, d);
  return TITANS_OK;
}

/* One token: the memory's output is both the query and this token's key/value row. */
static int titans__mal_step(titans_session *s, int l, float *mix, const float *xn, long long p, titans__step_work *w) {
  const titans_config *c = &s->model->cfg;
  const titans_layer *L = &s->model->w.layers[l];
  struct titans__session_layer *sl = &s->layers[l];
  TITANS__TRY(titans__mem_forward_checked(&c->mem, &L->mem, &sl->mem, w->y, xn, 1, NULL, &sl->mem_finite));
  return titans__session_attend(s, l, mix, w->y, w->y, 1, p, p, w);
}

/* titans__mal_step on n streams: the memory's and the attention's products over the n rows. */
static int titans__mal_step_rows(titans__rows_work *w, size_t n, int l) {
  TITANS__TRY(titans__rows_memory(w, n, l, w->y, w->xn));
  return titans__rows_attend(w, n, l, w->mix, w->y);
}

/* ---- LMM: the memory alone ----------------------------------------------------------------------
   mix = M(xn): the neural long-term memory as the whole mixer (no attention, no persistent tokens). */

static int titans__lmm_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf, titans__arena *ar,
                               const int64_t *pos, size_t B, size_t T) {
  (void)pos; /* the memory's positions are its own (chunks from the state's position) */
  titans_mem_ctx *cx = titans__layer_ctx(lf, 0);
  TITANS__NEED(cx);
  TITANS__TRY(titans__layer_state(c, L, lf, B));
  TITANS__TRY(titans__mem_call_skip(ar, lf->write_cost_skip, B, T, 0, 0, T, &cx->write_cost_skip));
  return titans_mem_forward(&c->mem, &L->mem, &lf->st, lf->mix, lf->xn, T, cx);
}

static int titans__lmm_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                titans__layer_fwd *lf, titans__arena *ar, float *dxn, const float *dmix,
                                const int64_t *pos, size_t B, size_t T) {
  (void)ar;
  (void)pos;
  (void)B;
  (void)T;
  return titans__layer_mem_backward(c, L, G, lf, dxn, dmix, lf->xn, &lf->ctxs[0], 1);
}

static int titans__lmm_step(titans_session *s, int l, float *mix, const float *xn, long long p, titans__step_work *w) {
  const titans_config *c = &s->model->cfg;
  (void)p;
  (void)w;
  struct titans__session_layer *sl = &s->layers[l];
  return titans__mem_forward_checked(&c->mem, &s->model->w.layers[l].mem, &sl->mem, mix, xn, 1, NULL, &sl->mem_finite);
}

/* titans__lmm_step on n streams: the memory's products over the n rows. */
static int titans__lmm_step_rows(titans__rows_work *w, size_t n, int l) {
  return titans__rows_memory(w, n, l, w->mix, w->xn);
}

/* Whole chunks keep the memory's chunks where a session has them. */
static size_t titans__lmm_stream_unit(const titans_config *c) { return (size_t)c->mem.chunk; }

/* ---- LM2: attention, then a memory bank -----------------------------------------------------------
   "LM2: Large Memory Models" (Kang et al. 2025) in its causal form (docs/model.md 4). After the block's
   sliding-window attention E = SWA(xn) (persistent tokens as in SWA), a bank Mb [N_s, d] of memory
   slots, starting at lm2.m0, is read by every token and written once per segment of C tokens:
     read (the bank of the segment's start):  E_mem = softmax((E wq^T)(Mb wk^T)^T / sqrt(d)) (Mb wv^T),
                                              mix = E + sigma(E_mem w_out^T) * E_mem
     write (when a segment is complete):      U = softmax((Mb uq^T)(E_seg uk^T)^T / sqrt(d)) (E_seg uv^T),
                                              Mb <- sigma(U w_in^T) * tanh(U) + sigma(U w_f^T + b_f) * Mb
   A token reads only a bank written from earlier segments, so the block is causal. The read depends on
   the bank and the write on E only, so a forward first runs the chain of writes, then every read; its
   backward adds each segment's read gradient to the bank's and walks the writes in reverse, so a later
   segment's loss reaches earlier writes and m0. A training forward skips the last segment's write
   (nothing in it reads the result) except in a stream, which carries the bank to its next window; a
   session writes whenever a segment completes. */

/* kb, vb [N_s, d] = bank wk^T, bank wv^T: the bank's read keys and values (fixed for a segment). */
static void titans__lm2_bank_kv(const titans_lm2_weights *W, float *kb, float *vb, const float *bank, size_t Ns,
                                size_t d) {
  titans__linear(kb, bank, W->wk, Ns, d, d);
  titans__linear(vb, bank, W->wv, Ns, d, d);
}

/* A stream's windows are whole segments, so each starts with a bank a session would have. */
static size_t titans__lm2_stream_unit(const titans_config *c) { return (size_t)c->segment; }

/* A read has two halves: the attention over the slots (titans__lm2_read_attend, one segment of one batch
   row: it reads that row's bank) and the gate (titans__lm2_read_gate, any rows: training gates all B x T
   rows in one product, a session its one token). */

/* a [n, N_s] = softmax(q kb^T / sqrt(d)); emem [n, d] = a vb. q [n, d] = E wq^T and the bank's kb, vb
   are given (training projects all rows at once; a session keeps kb, vb per segment). */
static void titans__lm2_read_attend(float *a, float *emem, const float *kb, const float *vb, const float *q, size_t n,
                                    size_t Ns, size_t d) {
  titans_gemm(0, 1, n, Ns, d, 1.0f / sqrtf((float)d), titans_cm(q, d), titans_cm(kb, d), 0.0f, titans_m(a, Ns));
  titans_softmax_forward(a, a, n, Ns);
  titans_gemm(0, 0, n, d, Ns, 1.0f, titans_cm(a, Ns), titans_cm(vb, d), 0.0f, titans_m(emem, d));
}

/* g [n, d] = sigma(emem w_out^T); mix [n, d] = E + g * emem. */
static void titans__lm2_read_gate(const titans_lm2_weights *W, float *mix, float *g, const float *emem, const float *E,
                                  size_t n, size_t d) {
  titans__linear(g, emem, W->w_out, n, d, d);
  titans_sigmoid_forward(g, g, n * d);
  for (size_t j = 0; j < n * d; j++) mix[j] = E[j] + g[j] * emem[j];
}

/* The gated update of a write (training and sessions): bank_out [N_s, d] = sigma(U w_in^T) * tanh(U)
   + sigma(U w_f^T + b_f) * bank_in, keeping gi, tu, gf [N_s, d]. bank_out may be bank_in. */
static void titans__lm2_update(const titans_lm2_weights *W, float *bank_out, float *gi, float *tu, float *gf,
                               const float *u, const float *bank_in, size_t Ns, size_t d) {
  titans__linear(gi, u, W->w_in, Ns, d, d);
  titans__linear(gf, u, W->w_f, Ns, d, d);
  for (size_t r = 0; r < Ns; r++) titans__axpy(gf + r * d, 1.0f, W->b_f, d);
  titans_sigmoid_forward(gi, gi, Ns * d);
  titans_sigmoid_forward(gf, gf, Ns * d);
  titans_tanh_forward(tu, u, Ns * d);
  for (size_t j = 0; j < Ns * d; j++) bank_out[j] = gi[j] * tu[j] + gf[j] * bank_in[j];
}

/* One segment's write for one batch row in training: the segment's write keys and values and the
   products the write keeps for its backward. The forward fills them and the backward reads them, so
   they travel as one (titans__lm2_write_at finds a write's in titans__lm2_save). */
typedef struct titans__lm2_write_view {
  float *qu;            /* [N_s, d] bank_in uq^T */
  float *aw;            /* [N_s, n] softmax(qu ku^T / sqrt(d)) over the segment's tokens */
  float *u;             /* [N_s, d] aw vu */
  float *gi, *tu, *gf;  /* [N_s, d] sigma(u w_in^T), tanh(u), sigma(u w_f^T + b_f) */
  const float *ku, *vu; /* [n, d] E uk^T, E uv^T of the segment's tokens (given) */
  size_t n, Ns, d;      /* the segment's tokens, slots, width */
} titans__lm2_write_view;

/* One segment's write for one batch row in training: qu [N_s, d] = bank_in uq^T, aw [N_s, n] =
   softmax(qu ku^T / sqrt(d)) over the segment's n tokens (ku, vu [n, d] = E uk^T, E uv^T given),
   u [N_s, d] = aw vu, then the gated update, into bank_out [N_s, d] and v's products. (A session
   accumulates the same softmax token by token: titans__lm2_step.) */
static void titans__lm2_write(const titans_lm2_weights *W, float *bank_out, const float *bank_in,
                              const titans__lm2_write_view *v) {
  float *qu = v->qu, *aw = v->aw, *u = v->u;
  const float *ku = v->ku, *vu = v->vu;
  size_t n = v->n, Ns = v->Ns, d = v->d;
  titans__linear(qu, bank_in, W->uq, Ns, d, d);
  titans_gemm(0, 1, Ns, n, d, 1.0f / sqrtf((float)d), titans_cm(qu, d), titans_cm(ku, d), 0.0f, titans_m(aw, n));
  titans_softmax_forward(aw, aw, Ns, n); /* each slot attends over the segment's tokens */
  titans_gemm(0, 0, Ns, d, n, 1.0f, titans_cm(aw, n), titans_cm(vu, d), 0.0f, titans_m(u, d));
  titans__lm2_update(W, bank_out, v->gi, v->tu, v->gf, u, bank_in, Ns, d);
}

/* Training's read task i (titans__lm2_forward, _backward): segment s = i / B of batch row b = i % B, with
   n tokens, the offset o of its bank in an [S, B, N_s, d] array and its first row t of [B, T]. */
typedef struct titans__lm2_read_task {
  size_t n, o, t;
} titans__lm2_read_task;

static titans__lm2_read_task titans__lm2_read_task_of(size_t i, size_t B, size_t T, size_t C, size_t S, size_t Ns,
                                                      size_t d) {
  size_t s = i / B, b = i % B;
  titans__lm2_read_task k = {s + 1 < S ? C : T - s * C, (s * B + b) * Ns * d, b * T + s * C};
  return k;
}

/* The write of segment s for batch row b (of B rows of T tokens, segments of C tokens) in sv: its bank
   before is sv->bank + o, after sv->bank + o + B N_s d, o = (s B + b) N_s d. */
static titans__lm2_write_view titans__lm2_write_at(const titans__lm2_save *sv, size_t s, size_t b, size_t B, size_t T,
                                                   size_t C, size_t Ns, size_t d) {
  size_t o = (s * B + b) * Ns * d, r = (b * T + s * C) * d; /* row b's bank; its segment's first row */
  titans__lm2_write_view v = {sv->qu + o, sv->aw + (s * B + b) * Ns * C, sv->u + o, sv->gi + o, sv->tu + o,
                              sv->gf + o, sv->ku + r, sv->vu + r, C, Ns, d};
  return v;
}

static int titans__lm2_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf, titans__arena *ar,
                               const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist, C = (size_t)c->segment, Ns = (size_t)c->lm2_slots;
  size_t S = (T + C - 1) / C, slab = B * Ns * d; /* slab: one bank per batch row */
  titans__lm2_save *sv = &lf->lm2;
  const titans_lm2_weights *W = &L->lm2;
  sv->nseg = S;
  sv->nwrite = lf->bank_carry && T % C == 0 ? S : S - 1; /* a stream carries the bank after the last write */
  size_t NW = sv->nwrite;
  /* E = SWA(xn) over persist || xn (in a stream: || the carried rows), into lf->y */
  TITANS__NEED(lf->y = titans__arena_alloc(ar, B * T * d)); /* [B, T, d] E */
  if (lf->attn_tail) {
    TITANS__TRY(titans__swa_stream_forward(c, L, lf, ar, lf->y, B, T));
  } else {
    TITANS__NEED(lf->src = titans__arena_alloc(ar, B * (P + T) * d)); /* [B, P + T, d] */
    titans__concat_prefix(lf->src, L->persist, 0, lf->xn, B, P, T, d);
    const titans__attn_sub_in in = titans__attn_sub_self(lf->xn, lf->src, pos, B, T, P, titans__window(c));
    TITANS__TRY(titans__attn_sub_forward(c, L, ar, &lf->at, lf->y, &in, NULL));
  }
  float **rows[6] = {&sv->q, &sv->emem, &sv->g, &sv->ku, &sv->vu, &sv->a};
  for (int i = 0; i < 6; i++) TITANS__NEED(*rows[i] = titans__arena_alloc(ar, B * T * (i < 5 ? d : Ns)));
  TITANS__NEED(sv->bank = titans__arena_alloc(ar, (NW + 1) * slab));
  TITANS__NEED(sv->kb = titans__arena_alloc(ar, S * slab));
  TITANS__NEED(sv->vb = titans__arena_alloc(ar, S * slab));
  float **writes[5] = {&sv->qu, &sv->u, &sv->gi, &sv->tu, &sv->gf};
  for (int i = 0; i < 5; i++) TITANS__NEED(*writes[i] = titans__arena_alloc(ar, NW * slab + 1));
  TITANS__NEED(sv->aw = titans__arena_alloc(ar, NW * B * Ns * C + 1));
  const float *E = lf->y;
  titans__linear(sv->q, E, W->wq, B * T, d, d);
  titans__linear(sv->ku, E, W->uk, B * T, d, d);
  titans__linear(sv->vu, E, W->uv, B * T, d, d);
  /* The chain of writes: bank s + 1 from bank s and segment s. Each batch row's chain is a task of its
     own: a write's products are small (N_s rows), too small to split over threads one at a time. */
  for (size_t b = 0; b < B; b++) /* a stream's carried bank, or m0 where a row starts a document */
    memcpy(sv->bank + b * Ns * d, lf->bank_carry && !lf->fresh[b] ? lf->bank_carry + b * Ns * d : W->m0,
           Ns * d * sizeof(float));
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (B > 1 && !omp_in_parallel())
#endif
  for (ptrdiff_t b = 0; b < (ptrdiff_t)B; b++)
    for (size_t s = 0; s < NW; s++) {
      size_t o = s * slab + (size_t)b * Ns * d; /* row b's bank */
      titans__lm2_write_view v = titans__lm2_write_at(sv, s, (size_t)b, B, T, C, Ns, d);
      titans__lm2_write(W, sv->bank + o + slab, sv->bank + o, &v);
    }
  /* the read keys and values of every segment's starting bank (banks 0..S-1 are contiguous), in one product */
  titans__lm2_bank_kv(W, sv->kb, sv->vb, sv->bank, S * B * Ns, d);
  /* every segment's read of its starting bank: the (segment, row) pairs are independent tasks */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (S * B > 1 && !omp_in_parallel())
#endif
  for (ptrdiff_t i = 0; i < (ptrdiff_t)(S * B); i++) {
    titans__lm2_read_task k = titans__lm2_read_task_of((size_t)i, B, T, C, S, Ns, d);
    titans__lm2_read_attend(sv->a + k.t * Ns, sv->emem + k.t * d, sv->kb + k.o, sv->vb + k.o, sv->q + k.t * d, k.n,
                            Ns, d);
  }
  titans__lm2_read_gate(W, lf->mix, sv->g, sv->emem, E, B * T, d);
  return TITANS_OK;
}

/* One segment's read for one batch row, as training keeps it for the backward. */
typedef struct titans__lm2_read_view {
  const float *a;       /* [n, N_s] the attention over the slots */
  const float *q;       /* [n, d] the read queries E wq^T */
  const float *kb, *vb; /* [N_s, d] the bank's read keys and values */
  size_t n, Ns, d;      /* the segment's tokens, slots, width */
} titans__lm2_read_view;

/* Backward of one segment's read r (one batch row): from demem [n, d] accumulates dq [n, d], and writes
   dkb, dvb [N_s, d] (the gradients of the bank's read keys and values). da [2 n N_s] is scratch. */
static void titans__lm2_read_backward(float *dq, float *dkb, float *dvb, float *da, const float *demem,
                                      const titans__lm2_read_view *r) {
  const float *a = r->a, *q = r->q, *kb = r->kb, *vb = r->vb;
  size_t n = r->n, Ns = r->Ns, d = r->d;
  float scale = 1.0f / sqrtf((float)d);
  float *ds = da + n * Ns; /* [n, N_s] the scores' gradient */
  titans_gemm(0, 1, n, Ns, d, 1.0f, titans_cm(demem, d), titans_cm(vb, d), 0.0f, titans_m(da, Ns)); /* emem = a vb */
  titans_gemm(1, 0, Ns, d, n, 1.0f, titans_cm(a, Ns), titans_cm(demem, d), 0.0f, titans_m(dvb, d));
  memset(ds, 0, n * Ns * sizeof(float));
  titans_softmax_backward(ds, da, a, n, Ns);
  /* scores = q kb^T / sqrt(d) */
  titans_gemm(0, 0, n, d, Ns, scale, titans_cm(ds, Ns), titans_cm(kb, d), 1.0f, titans_m(dq, d));
  titans_gemm(1, 0, Ns, d, n, scale, titans_cm(ds, Ns), titans_cm(q, d), 0.0f, titans_m(dkb, d));
}

/* The gradients of one segment's write (one batch row), as titans__lm2_write_backward forms them. */
typedef struct titans__lm2_write_grad {
  float *dbank;           /* [N_s, d] dL/d bank_in, added into */
  float *dku, *dvu;       /* [n, d] added into */
  float *dzi, *dzf, *dqu; /* [N_s, d] written */
} titans__lm2_write_grad;

/* Backward of one segment's write v (one batch row): from carry [N_s, d] = dL/d bank_out, accumulates
   dbank [N_s, d] (dL/d bank_in), dku, dvu [n, d], and writes dzi, dzf, dqu [N_s, d]: the gradients of
   the write's three products by weights, zi = u w_in^T, zf = u w_f^T + b_f, qu = bank_in uq^T. Those
   weights' gradients are sums over every segment and row, which titans__lm2_backward forms in one product
   each once the chains are done. scratch: N_s d + 2 N_s n floats. */
static void titans__lm2_write_backward(const titans_lm2_weights *W, const titans__lm2_write_grad *g, float *scratch,
                                       const float *carry, const float *bank_in, const titans__lm2_write_view *v) {
  float *dbank = g->dbank, *dku = g->dku, *dvu = g->dvu, *dzi = g->dzi, *dzf = g->dzf, *dqu = g->dqu;
  const float *qu = v->qu, *aw = v->aw, *gi = v->gi, *tu = v->tu, *gf = v->gf, *ku = v->ku, *vu = v->vu;
  size_t n = v->n, Ns = v->Ns, d = v->d;
  float scale = 1.0f / sqrtf((float)d);
  float *du = scratch;                          /* [N_s, d] */
  float *daw = du + Ns * d, *ds = daw + Ns * n; /* [N_s, n] each */
  /* bank_out = gi * tu + gf * bank_in, gi = sigma(zi), gf = sigma(zf), tu = tanh(u) */
  for (size_t j = 0; j < Ns * d; j++) {
    float cj = carry[j];
    dzi[j] = cj * tu[j] * gi[j] * (1.0f - gi[j]);
    dzf[j] = cj * bank_in[j] * gf[j] * (1.0f - gf[j]);
    du[j] = cj * gi[j] * (1.0f - tu[j] * tu[j]);
    dbank[j] += cj * gf[j];
  }
  /* zi = u w_in^T, zf = u w_f^T + b_f */
  titans_gemm(0, 0, Ns, d, d, 1.0f, titans_cm(dzi, d), titans_cm(W->w_in, d), 1.0f, titans_m(du, d));
  titans_gemm(0, 0, Ns, d, d, 1.0f, titans_cm(dzf, d), titans_cm(W->w_f, d), 1.0f, titans_m(du, d));
  /* u = aw vu, aw = softmax(qu ku^T / sqrt(d)) over the segment */
  titans_gemm(0, 1, Ns, n, d, 1.0f, titans_cm(du, d), titans_cm(vu, d), 0.0f, titans_m(daw, n));
  titans_gemm(1, 0, n, d, Ns, 1.0f, titans_cm(aw, n), titans_cm(du, d), 1.0f, titans_m(dvu, d));
  memset(ds, 0, Ns * n * sizeof(float));
  titans_softmax_backward(ds, daw, aw, Ns, n);
  titans_gemm(1, 0, n, d, Ns, scale, titans_cm(ds, n), titans_cm(qu, d), 1.0f, titans_m(dku, d));
  titans_gemm(0, 0, Ns, d, n, scale, titans_cm(ds, n), titans_cm(ku, d), 0.0f, titans_m(dqu, d));
  /* qu = bank_in uq^T */
  titans_gemm(0, 0, Ns, d, d, 1.0f, titans_cm(dqu, d), titans_cm(W->uq, d), 1.0f, titans_m(dbank, d));
}

static int titans__lm2_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                titans__layer_fwd *lf, titans__arena *ar, float *dxn, const float *dmix,
                                const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist, C = (size_t)c->segment, Ns = (size_t)c->lm2_slots;
  const titans__lm2_save *sv = &lf->lm2;
  const titans_lm2_weights *W = &L->lm2, *GW = &G->lm2;
  size_t S = sv->nseg, slab = B * Ns * d, BT = B * T, nmax = T < C ? T : C;
  const float *E = lf->y;
  float *dE = titans__arena_alloc(ar, BT * d), *demem = titans__arena_alloc(ar, BT * d); /* [B, T, d] */
  float *dz = titans__arena_alloc(ar, BT * d);                                           /* [B, T, d] */
  float *dq = titans__arena_zalloc(ar, BT * d), *dku = titans__arena_zalloc(ar, BT * d); /* [B, T, d] */
  float *dvu = titans__arena_zalloc(ar, BT * d);                                         /* [B, T, d] */
  float *dbank = titans__arena_zalloc(ar, S * slab);                                     /* [S, B, N_s, d] */
  float *dkb = titans__arena_alloc(ar, S * slab), *dvb = titans__arena_alloc(ar, S * slab); /* [S, B, N_s, d] */
  size_t NB = S - 1, read_work = 2 * nmax * Ns, write_work = Ns * d + 2 * Ns * C; /* NB: writes back-propagated */
  float *dzi = titans__arena_alloc(ar, NB * slab + 1),
        *dzf = titans__arena_alloc(ar, NB * slab + 1);               /* [NB, B, N_s, d] */
  float *dqu = titans__arena_alloc(ar, NB * slab + 1);               /* [NB, B, N_s, d] */
  float *read_scratch = titans__arena_alloc(ar, S * B * read_work);  /* [S * B, read_work] one per read */
  float *write_scratch = titans__arena_alloc(ar, B * write_work);    /* [B, write_work] one per batch row */
  TITANS__NEED(dE && demem && dz && dq && dku && dvu && dbank && dkb && dvb && dzi && dzf && dqu && read_scratch &&
               write_scratch);
  /* mix = E + g * emem, g = sigma(emem w_out^T) */
  for (size_t j = 0; j < BT * d; j++) {
    float gj = sv->g[j];
    dE[j] = dmix[j];
    demem[j] = dmix[j] * gj;
    dz[j] = dmix[j] * sv->emem[j] * gj * (1.0f - gj);
  }
  titans_gemm(1, 0, d, d, BT, 1.0f, titans_cm(dz, d), titans_cm(sv->emem, d), 1.0f, titans_m(GW->w_out, d));
  titans_gemm(0, 0, BT, d, d, 1.0f, titans_cm(dz, d), titans_cm(W->w_out, d), 1.0f, titans_m(demem, d));
  /* every read: dq, and the read keys' and values' gradients (each (segment, row) pair writes its own
     rows: independent tasks), then the bank's through wk, wv */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (S * B > 1 && !omp_in_parallel())
#endif
  for (ptrdiff_t i = 0; i < (ptrdiff_t)(S * B); i++) {
    titans__lm2_read_task k = titans__lm2_read_task_of((size_t)i, B, T, C, S, Ns, d);
    const titans__lm2_read_view r = {sv->a + k.t * Ns, sv->q + k.t * d, sv->kb + k.o, sv->vb + k.o, k.n, Ns, d};
    titans__lm2_read_backward(dq + k.t * d, dkb + k.o, dvb + k.o, read_scratch + (size_t)i * read_work,
                              demem + k.t * d, &r);
  }
  titans_gemm(1, 0, d, d, S * B * Ns, 1.0f, titans_cm(dkb, d), titans_cm(sv->bank, d), 1.0f, titans_m(GW->wk, d));
  titans_gemm(1, 0, d, d, S * B * Ns, 1.0f, titans_cm(dvb, d), titans_cm(sv->bank, d), 1.0f, titans_m(GW->wv, d));
  titans_gemm(0, 0, S * B * Ns, d, d, 1.0f, titans_cm(dkb, d), titans_cm(W->wk, d), 1.0f, titans_m(dbank, d));
  titans_gemm(0, 0, S * B * Ns, d, d, 1.0f, titans_cm(dvb, d), titans_cm(W->wv, d), 1.0f, titans_m(dbank, d));
  /* the writes in reverse, each batch row's chain a task of its own: dbank[s + 1] is complete (its read,
     and the write that read it) when write s runs. (A stream's last write, s = S - 1, fed only the carried
     bank, whose gradient is dropped.) */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (B > 1 && !omp_in_parallel())
#endif
  for (ptrdiff_t b = 0; b < (ptrdiff_t)B; b++)
    for (size_t s = NB; s-- > 0;) {
      size_t o = s * slab + (size_t)b * Ns * d, r = ((size_t)b * T + s * C) * d;
      const titans__lm2_write_grad g = {dbank + o, dku + r, dvu + r, dzi + o, dzf + o, dqu + o};
      const titans__lm2_write_view v = titans__lm2_write_at(sv, s, (size_t)b, B, T, C, Ns, d);
      titans__lm2_write_backward(W, &g, write_scratch + (size_t)b * write_work, dbank + o + slab, sv->bank + o, &v);
    }
  /* the write weights' gradients over every back-propagated write at once: zi = u w_in^T, zf = u w_f^T + b_f,
     qu = bank_in uq^T (u, bank_in: the first NB writes' rows, contiguous) */
  if (NB > 0) {
    size_t rows = NB * B * Ns;
    titans_gemm(1, 0, d, d, rows, 1.0f, titans_cm(dzi, d), titans_cm(sv->u, d), 1.0f, titans_m(GW->w_in, d));
    titans_gemm(1, 0, d, d, rows, 1.0f, titans_cm(dzf, d), titans_cm(sv->u, d), 1.0f, titans_m(GW->w_f, d));
    titans_gemm(1, 0, d, d, rows, 1.0f, titans_cm(dqu, d), titans_cm(sv->bank, d), 1.0f, titans_m(GW->uq, d));
    for (size_t r = 0; r < rows; r++) titans__axpy(GW->b_f, 1.0f, dzf + r * d, d);
  }
  for (size_t b = 0; b < B; b++) /* rows that started at m0; a carried bank is a constant (truncated BPTT) */
    if (!lf->bank_carry || lf->fresh[b]) titans__axpy(GW->m0, 1.0f, dbank + b * Ns * d, Ns * d);
  /* q = E wq^T, ku = E uk^T, vu = E uv^T */
  const float *dproj[3] = {dq, dku, dvu};
  float *gproj[3] = {GW->wq, GW->uk, GW->uv};
  const float *wproj[3] = {W->wq, W->uk, W->uv};
  for (int i = 0; i < 3; i++) {
    titans_gemm(1, 0, d, d, BT, 1.0f, titans_cm(dproj[i], d), titans_cm(E, d), 1.0f, titans_m(gproj[i], d));
    titans_gemm(0, 0, BT, d, d, 1.0f, titans_cm(dproj[i], d), titans_cm(wproj[i], d), 1.0f, titans_m(dE, d));
  }
  /* E = SWA(xn; persist || xn), in a stream with the carried rows */
  if (lf->attn_tail) return titans__swa_stream_backward(c, L, G, lf, ar, dxn, dE, B, T);
  float *dsrc = titans__arena_zalloc(ar, B * (P + T) * d); /* [B, P + T, d] */
  TITANS__NEED(dsrc);
  const titans__attn_sub_in in = titans__attn_sub_self(lf->xn, lf->src, pos, B, T, P, titans__window(c));
  TITANS__TRY(titans__attn_sub_backward(c, L, G, ar, &lf->at, dxn, dsrc, dE, &in));
  titans__split_prefix_grad(G->persist, dxn, dsrc, B, P, T, d);
  return TITANS_OK;
}

/* A session's LM2 state of one layer, named slices of one allocation (titans__lm2_session_carve). The
   write's softmax over the segment is accumulated token by token (online, as attention over a cache),
   so the state is O(N_s d) whatever the segment length. Saved: bank, then acc, wmax, wsum (contiguous);
   kb, vb, qu are derived from the bank (titans__lm2_session_derive). */
typedef struct titans__lm2_session {
  float *bank;         /* [N_s, d] the bank as of the current segment's start */
  float *acc;          /* [N_s, d] sum over the segment so far of exp(score - wmax) vu_t, per slot */
  float *wmax, *wsum;  /* [N_s] the largest score so far, the sum of exp(score - wmax) */
  float *kb, *vb, *qu; /* [N_s, d] the bank's read keys and values, its write queries */
} titans__lm2_session;

/* Floats of a session's LM2 state; slices into base when it is not NULL. */
static size_t titans__lm2_session_carve(titans__lm2_session *ls, float *base, size_t Ns, size_t d) {
  size_t used = 0;
  ls->bank = titans__take(base, &used, Ns * d);
  ls->acc = titans__take(base, &used, Ns * d);
  ls->wmax = titans__take(base, &used, Ns);
  ls->wsum = titans__take(base, &used, Ns);
  ls->kb = titans__take(base, &used, Ns * d);
  ls->vb = titans__take(base, &used, Ns * d);
  ls->qu = titans__take(base, &used, Ns * d);
  return used;
}

/* The saved part (bank, acc, wmax, wsum) are the first floats of the state. */
static size_t titans__lm2_session_saved(const titans_config *c) {
  return (size_t)c->lm2_slots * (2 * (size_t)c->d + 2);
}

/* kb, vb and qu of the bank (after a reset, a write, a load). */
static void titans__lm2_session_derive(const titans_config *c, const titans_layer *L, float *state) {
  titans__lm2_session ls;
  size_t Ns = (size_t)c->lm2_slots, d = (size_t)c->d;
  titans__lm2_session_carve(&ls, state, Ns, d);
  titans__lm2_bank_kv(&L->lm2, ls.kb, ls.vb, ls.bank, Ns, d);
  titans__linear(ls.qu, ls.bank, L->lm2.uq, Ns, d, d);
}

/* LM2's carry (titans__lm2_carry): the state above in sl->lm2; a stream's, each row's bank. */
static int titans__lm2_carry_init(struct titans__session_layer *sl, const titans_config *c) {
  titans__lm2_session ls;
  sl->lm2 = titans_alloc_floats(titans__lm2_session_carve(&ls, NULL, (size_t)c->lm2_slots, (size_t)c->d));
  return sl->lm2 ? TITANS_OK : TITANS_ERR_NOMEM;
}

static void titans__lm2_carry_free(struct titans__session_layer *sl) {
  titans_free(sl->lm2);
  sl->lm2 = NULL;
}

/* The bank at m0, the write's sums empty. */
static void titans__lm2_carry_reset(struct titans__session_layer *sl, const titans_config *c, const titans_layer *L) {
  memset(sl->lm2, 0, titans__lm2_session_saved(c) * sizeof(float));
  memcpy(sl->lm2, L->lm2.m0, (size_t)c->lm2_slots * (size_t)c->d * sizeof(float));
  titans__lm2_session_derive(c, L, sl->lm2);
}

static int titans__lm2_carry_copy(struct titans__session_layer *dst, const struct titans__session_layer *src,
                                  const titans_config *c) {
  titans__lm2_session ls;
  memcpy(dst->lm2, src->lm2, titans__lm2_session_carve(&ls, NULL, (size_t)c->lm2_slots, (size_t)c->d) * sizeof(float));
  return TITANS_OK;
}

static float *titans__lm2_carry_saved(struct titans__session_layer *sl, const titans_config *c, size_t *count) {
  *count = titans__lm2_session_saved(c);
  return sl->lm2;
}

static int titans__lm2_carry_loaded(struct titans__session_layer *sl, const titans_config *c, const titans_layer *L,
                                    long long pos, char *err) {
  titans__lm2_session ls;
  (void)pos;
  titans__lm2_session_carve(&ls, sl->lm2, (size_t)c->lm2_slots, (size_t)c->d);
  for (int j = 0; j < c->lm2_slots; j++) /* a sum holds exp(0) for its largest term once it has one */
    if (!(ls.wsum[j] == 0.0f || ls.wsum[j] >= 1.0f))
      return titans__error(err, TITANS_ERR_FORMAT, "LM2 write sums are not 0 or >= 1");
  titans__lm2_session_derive(c, L, sl->lm2);
  return TITANS_OK;
}

static size_t titans__lm2_stream_floats(const titans_config *c) { return (size_t)c->lm2_slots * (size_t)c->d; }

/* The bank after the window's last write, when the window ended with one (else the carry stands). */
static void titans__lm2_stream_keep(float *rows, const titans__layer_fwd *lf, const titans_config *c, size_t B) {
  size_t n = B * titans__lm2_stream_floats(c);
  if (lf->lm2.nwrite == lf->lm2.nseg) memcpy(rows, lf->lm2.bank + lf->lm2.nwrite * n, n * sizeof(float));
}

/* A session's write of one token at segment offset i, from its key row uk [d] and value row uv [d]: the
   scores qu_j . uk / sqrt(d) folded into each slot's running softmax; at the segment's end U = acc / wsum
   and the gated update of the bank in place. Scratch a [N_s], u, gi, tu, gf [N_s, d] from w. */
static void titans__lm2_session_write(const titans_config *c, const titans_layer *L, struct titans__session_layer *sl,
                                      size_t i, const float *uk, const float *uv, titans__step_work *w) {
  size_t d = (size_t)c->d, C = (size_t)c->segment, Ns = (size_t)c->lm2_slots;
  titans__lm2_session ls;
  titans__lm2_session_carve(&ls, sl->lm2, Ns, d);
  titans_gemm(0, 1, 1, Ns, d, 1.0f / sqrtf((float)d), titans_cm(uk, d), titans_cm(ls.qu, d), 0.0f, titans_m(w->a, Ns));
  for (size_t j = 0; j < Ns; j++) {
    float *acc = ls.acc + j * d, sc = w->a[j];
    if (i == 0 || ls.wsum[j] == 0.0f) { /* the segment's first token starts the sums (0: no term yet) */
      ls.wmax[j] = sc;
      ls.wsum[j] = 1.0f;
      memcpy(acc, uv, d * sizeof(float));
      continue;
    }
    float mx = sc > ls.wmax[j] ? sc : ls.wmax[j], old = expf(ls.wmax[j] - mx), now = expf(sc - mx);
    ls.wsum[j] = ls.wsum[j] * old + now;
    titans__ops_scale(acc, old, d);
    titans__axpy(acc, now, uv, d);
    ls.wmax[j] = mx;
  }
  if (i + 1 == C) { /* U = acc / wsum (wsum >= 1 here), then the gated update of the bank in place */
    for (size_t j = 0; j < Ns; j++)
      for (size_t e = 0; e < d; e++) w->u[j * d + e] = ls.acc[j * d + e] / ls.wsum[j];
    titans__lm2_update(&L->lm2, ls.bank, w->gi, w->tu, w->gf, w->u, ls.bank, Ns, d);
    titans__lm2_session_derive(c, L, sl->lm2);
  }
}

/* One token at position p, the i-th of its segment: E from the attention over the cache, the read of the
   bank of the segment's start, the token's term of the write's softmax, and when the token completes the
   segment, the write (the next token reads the new bank). */
static int titans__lm2_step(titans_session *s, int l, float *mix, const float *xn, long long p, titans__step_work *w) {
  const titans_config *c = &s->model->cfg;
  const titans_layer *L = &s->model->w.layers[l];
  struct titans__session_layer *sl = &s->layers[l];
  size_t d = (size_t)c->d, Ns = (size_t)c->lm2_slots;
  titans__lm2_session ls;
  titans__lm2_session_carve(&ls, sl->lm2, Ns, d);
  TITANS__TRY(titans__session_attend(s, l, w->y, xn, xn, 1, p, p, w)); /* y = E [d] */
  titans__linear(w->q, w->y, L->lm2.wq, 1, d, d);
  titans__lm2_read_attend(w->a, w->emem, ls.kb, ls.vb, w->q, 1, Ns, d);
  titans__lm2_read_gate(&L->lm2, mix, w->g, w->emem, w->y, 1, d);
  titans__linear(w->k, w->y, L->lm2.uk, 1, d, d);
  titans__linear(w->v, w->y, L->lm2.uv, 1, d, d);
  titans__lm2_session_write(c, L, sl, (size_t)(p % c->segment), w->k, w->v, w);
  return TITANS_OK;
}

/* titans__lm2_step on n streams: the attention, the read's query and gate and the write's key and value
   rows as products over the n rows; each stream's read of its bank and its write stream by stream (with
   that stream's own scratch). */
static int titans__lm2_step_rows(titans__rows_work *w, size_t n, int l) {
  const titans_model *mo = w->s[0]->model;
  const titans_config *c = &mo->cfg;
  const titans_layer *L = &mo->w.layers[l];
  size_t d = (size_t)c->d, Ns = (size_t)c->lm2_slots;
  TITANS__TRY(titans__rows_attend(w, n, l, w->y, w->xn)); /* E [n, d] */
  /* the attention's scratch is free now: q, k, v [n, d] the read's queries, the write's keys and values;
     att [n, d] the read's gate */
  titans__linear(w->q, w->y, L->lm2.wq, n, d, d);
  for (size_t r = 0; r < n; r++) {
    titans__lm2_session ls;
    titans__step_work sw; /* named slices of the stream's own scratch */
    titans__lm2_session_carve(&ls, w->s[r]->layers[l].lm2, Ns, d);
    titans__step_work_carve(&sw, w->s[r]->work, c);
    titans__lm2_read_attend(sw.a, w->m + r * d, ls.kb, ls.vb, w->q + r * d, 1, Ns, d); /* E_mem rows in m */
  }
  titans__lm2_read_gate(&L->lm2, w->mix, w->att, w->m, w->y, n, d);
  titans__linear(w->k, w->y, L->lm2.uk, n, d, d);
  titans__linear(w->v, w->y, L->lm2.uv, n, d, d);
  for (size_t r = 0; r < n; r++) {
    titans__step_work sw;
    titans__step_work_carve(&sw, w->s[r]->work, c);
    titans__lm2_session_write(c, L, &w->s[r]->layers[l], (size_t)(w->s[r]->position % c->segment), w->k + r * d,
                              w->v + r * d, &sw);
  }
  return TITANS_OK;
}

/* ---- blocks ----------------------------------------------------------------------------------- */

/* Recomputation (titans_trainer_set_recompute) keeps none of the FFN's hidden rows: the forward and
   the backward run the FFN on pieces of TITANS__FFN_PIECE rows, each piece's u1, u3, act [piece, d_ff]
   in the arena only while the piece runs (the backward computes them again from hn). Each row's values
   are those of the whole-batch FFN; the FFN's weight gradients are summed piece by piece, which may round
   differently from one product over every row (titans__ffn_piece). */
#define TITANS__FFN_PIECE 1024

/* n rows cut into pieces of 1,024 rows, the last taking the rest (1,024 to 2,047 rows; n itself when
   shorter): piece i of `pieces` is rows [*r0, *r0 + the return). No piece is short: a short last piece
   (1,040 = 1,024 + 16) would fall to the GEMM's small-m methods (titans__gemm_method), whose sums run in
   another order on some ISAs (AVX2's dot method), and its rows would no longer be the whole product's.
   The cuts fall where they fell before the last piece took the rest, so a step whose rows are a
   multiple of 1,024 (every recipe's) is cut, and trains, as it did. */
static size_t titans__ffn_pieces(size_t n) { return n < TITANS__FFN_PIECE ? (n > 0) : n / TITANS__FFN_PIECE; }
static size_t titans__ffn_piece(size_t n, size_t pieces, size_t i, size_t *r0) {
  *r0 = i * TITANS__FFN_PIECE;
  return i + 1 < pieces ? TITANS__FFN_PIECE : n - *r0;
}

/* The second half of a block (titans__block_ffn_rows) piece by piece: h, hn [n, d] kept, x_out [n, d]. */
static int titans__block_ffn_pieces(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf,
                                    titans__arena *ar, float *x_out, const float *x, size_t n) {
  size_t d = (size_t)c->d;
  for (size_t j = 0; j < n * d; j++) lf->h[j] = x[j] + lf->mix[j];
  titans_rmsnorm_forward(lf->hn, lf->rstd2, lf->h, L->norm2, n, d);
  for (size_t i = 0, pieces = titans__ffn_pieces(n); i < pieces; i++) {
    size_t r0, rows = titans__ffn_piece(n, pieces, i, &r0);
    titans__arena_mark piece_start = titans__arena_here(ar);
    titans__ffn_save sv;
    TITANS__TRY(titans__ffn_alloc(c, ar, &sv, rows));
    titans__ffn_rows(c, L, &sv, x_out + r0 * d, lf->hn + r0 * d, rows);
    for (size_t j = r0 * d; j < (r0 + rows) * d; j++) x_out[j] += lf->h[j];
    titans__arena_rewind(ar, piece_start);
  }
  return TITANS_OK;
}

/* x_out [B, T, d] = h + FFN(RMSNorm(h)), h = x + Mixer(RMSNorm(x)) */
static int titans__block_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf,
                                 titans__arena *ar, float *x_out, const float *x, const int64_t *pos, size_t B,
                                 size_t T) {
  size_t d = (size_t)c->d, n = B * T;
  lf->x_in = x;
  TITANS__NEED(lf->xn = titans__arena_alloc(ar, n * d));
  TITANS__NEED(lf->rstd1 = titans__arena_alloc(ar, n));
  TITANS__NEED(lf->mix = titans__arena_alloc(ar, n * d));
  TITANS__NEED(lf->h = titans__arena_alloc(ar, n * d));
  TITANS__NEED(lf->hn = titans__arena_alloc(ar, n * d));
  TITANS__NEED(lf->rstd2 = titans__arena_alloc(ar, n));
  titans_rmsnorm_forward(lf->xn, lf->rstd1, x, L->norm1, n, d);
  TITANS__TRY(titans__kind_of(c->block)->forward(c, L, lf, ar, pos, B, T));
  if (lf->recompute) return titans__block_ffn_pieces(c, L, lf, ar, x_out, x, n);
  TITANS__TRY(titans__ffn_alloc(c, ar, &lf->ffn, n));
  titans__block_ffn_rows(c, L, &lf->ffn, x_out, lf->h, lf->hn, lf->rstd2, x, lf->mix, n);
  return TITANS_OK;
}

/* A block's backward in two halves, so that a reduction overlapping the backward gets the FFN's gradients
   (norm2 and ffn.*, the end of the layer's part of the slab) while the mixer's are computed. First the
   FFN: dh [B * T, d] (written), the gradient at h = x + mix, from dx_out (x_out = h + ffn(rmsnorm(h))). */
static int titans__block_ffn_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                      titans__layer_fwd *lf, titans__arena *ar, float *dh, const float *dx_out,
                                      size_t n) {
  size_t d = (size_t)c->d;
  float *dhn = titans__arena_zalloc(ar, n * d); /* [n, d] */
  TITANS__NEED(dhn);
  memcpy(dh, dx_out, n * d * sizeof(float));
  if (!lf->recompute) TITANS__TRY(titans__ffn_backward(c, L, G, ar, &lf->ffn, dhn, dx_out, lf->hn, n));
  for (size_t i = 0, pieces = lf->recompute ? titans__ffn_pieces(n) : 0; i < pieces; i++) {
    size_t r0, rows = titans__ffn_piece(n, pieces, i, &r0); /* as titans__block_ffn_pieces */
    titans__arena_mark piece_start = titans__arena_here(ar);
    titans__ffn_save sv;
    TITANS__TRY(titans__ffn_alloc(c, ar, &sv, rows));
    titans__ffn_hidden(c, L, &sv, lf->hn + r0 * d, rows);
    TITANS__TRY(titans__ffn_backward(c, L, G, ar, &sv, dhn + r0 * d, dx_out + r0 * d, lf->hn + r0 * d, rows));
    titans__arena_rewind(ar, piece_start);
  }
  titans_rmsnorm_backward(dh, G->norm2, dhn, lf->h, L->norm2, lf->rstd2, n, d);
  return TITANS_OK;
}

/* Then the mixer (the kind's attention, memory or bank) through norm1: dx [B, T, d] (written) from dh
   (h = x + mix(rmsnorm(x))). */
static int titans__block_mixer_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                        titans__layer_fwd *lf, titans__arena *ar, float *dx, const float *dh,
                                        const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, n = B * T;
  float *dxn = titans__arena_zalloc(ar, n * d); /* [n, d] */
  TITANS__NEED(dxn);
  TITANS__TRY(titans__kind_of(c->block)->backward(c, L, G, lf, ar, dxn, dh, pos, B, T));
  memcpy(dx, dh, n * d * sizeof(float));
  titans_rmsnorm_backward(dx, G->norm1, dxn, lf->x_in, L->norm1, lf->rstd1, n, d);
  return TITANS_OK;
}

/* ---- the whole model -------------------------------------------------------------------------- */

/* What a layer's forward keeps between steps: its memory state and contexts, MAC's rows */
static void titans__layer_fwd_free(titans__layer_fwd *lf) {
  if (lf->st_ready) titans_mem_state_free(&lf->st);
  for (size_t i = 0; i < lf->nctx; i++) titans_mem_ctx_free(&lf->ctxs[i]);
  titans_free(lf->ctxs);
  for (size_t b = 0; b < lf->nrows; b++) titans__layer_fwd_free(&lf->rows[b]);
  titans_free(lf->rows);
  titans__arena_free(&lf->row_arena);
  titans__arena_free(&lf->seg_arena);
  titans_free(lf->seg_states);
}

static void titans__fwd_free(struct titans__fwd *f, int n_layers) {
  if (!f) return;
  titans__arena_free(&f->arena);
  if (f->layers) {
    for (int l = 0; l < n_layers; l++) {
      titans__layer_fwd_free(&f->layers[l]);
    }
    titans_free(f->layers);
  }
  titans_free(f->x);
  titans_free(f);
}

/* The token of an entry of a token array: TITANS_NO_LOSS(id) is id. */
static int titans__token_id(int entry) { return entry < 0 ? -1 - entry : entry; }

/* Where a call's batch lives: row b's input i is inputs[b * stride + i] and its target targets[b * stride + i]
   (targets NULL: none, as for logits). The next-token arrays of titans_train_step (tokens [B, T + 1]) are
   inputs = tokens, targets = tokens + 1 at stride T + 1, whose entries may be TITANS_NO_LOSS marks; the
   separate arrays of titans_train_step_targets are at stride T, plain ids as inputs and < 0 for no loss. */
typedef struct titans__batch {
  const int *inputs;  /* [B, stride] */
  const int *targets; /* [B, stride] or NULL */
  size_t stride;      /* T + 1 (next-token arrays) or T (separate arrays) */
  int next_token;     /* 1: one array (inputs may be TITANS_NO_LOSS marks, positions named from the array's) */
  const unsigned char *write_cost_skip; /* [B, T] or NULL: titans_trainer_set_write_cost_skip (training only) */
} titans__batch;

/* A batch of tokens [B, T + 1] (with_targets: positions 1..T are the targets) or of inputs [B, T] alone. */
static titans__batch titans__next_token_batch(const int *tokens, size_t T, int with_targets) {
  titans__batch bt = {tokens, with_targets ? tokens + 1 : NULL, with_targets ? T + 1 : T, 1, NULL};
  return bt;
}

/* Micro-batch i of B rows of T tokens of a batch. */
static titans__batch titans__micro_batch(const titans__batch *whole, size_t i, size_t B, size_t T) {
  titans__batch bt = *whole;
  bt.inputs += i * B * bt.stride;
  if (bt.targets) bt.targets += i * B * bt.stride;
  if (bt.write_cost_skip) bt.write_cost_skip += i * B * T;
  return bt;
}

/* The head's rows: every row (all_rows, or when every row has a target), else only the rows whose target
   is >= 0, gathered into f->xhead. Then the logits [n_head, V]. */
static int titans__head_forward(titans_trainer *t, int all_rows) {
  titans_model *mo = t->model;
  struct titans__fwd *f = t->fwd;
  titans__arena *ar = &f->arena;
  size_t d = (size_t)mo->cfg.d, V = (size_t)mo->cfg.vocab, n = f->B * f->T, m = 0;
  for (size_t i = 0; i < n; i++) m += f->targets[i] >= 0;
  f->head_rows = NULL, f->head_targets = f->targets, f->xhead = f->xf, f->n_head = n;
  if (!all_rows && m < n) {
    f->n_head = m;
    f->head_rows = (int *)(void *)titans__arena_alloc(ar, m + 1);
    f->head_targets = (int *)(void *)titans__arena_alloc(ar, m + 1);
    f->xhead = titans__arena_alloc(ar, m * d + 1);
    if (!f->head_rows || !f->head_targets || !f->xhead)
      return titans__error(t->error, TITANS_ERR_NOMEM, "forward: out of memory");
    for (size_t i = 0, j = 0; i < n; i++)
      if (f->targets[i] >= 0) {
        f->head_rows[j] = (int)i, f->head_targets[j] = f->targets[i];
        memcpy(f->xhead + j * d, f->xf + i * d, d * sizeof(float));
        j++;
      }
  }
  f->logits = titans__arena_alloc(ar, f->n_head * V + 1);
  if (!f->logits) return titans__error(t->error, TITANS_ERR_NOMEM, "forward: out of memory");
  const float *head = mo->cfg.tied ? mo->w.tok_emb : mo->w.lm_head;
  if (f->n_head)
    titans_gemm(0, 1, f->n_head, V, d, 1.0f, titans_cm(f->xhead, d), titans_cm(head, d), 0.0f,
                titans_m(f->logits, V));
  return TITANS_OK;
}

/* Forward of a batch [B, T] (its targets, if any, into f->targets; < 0 left out of the loss) up to the
   logits (of every row with all_rows, else of the rows with a target: titans__head_forward), saving every
   activation in t->fwd. With a stream (else NULL), every row starts from what the stream carries. */
static int titans__model_forward(titans_trainer *t, const titans__batch *batch, size_t B, size_t T,
                                 titans_stream *stream, int all_rows) {
  titans_model *mo = t->model;
  const titans_config *c = &mo->cfg;
  struct titans__fwd *f = t->fwd;
  size_t d = (size_t)c->d, V = (size_t)c->vocab, n = B * T, stride = batch->stride;
  if (B == 0 || T == 0 || n / B != T || n > ((size_t)1 << 31))
    return titans__error(t->error, TITANS_ERR_ARG, "forward: batch %zu x length %zu is out of range", B, T);
  titans__arena_reset(&f->arena);
  titans__arena *ar = &f->arena;
  f->B = B;
  f->T = T;
  f->inputs = (int *)(void *)titans__arena_alloc(ar, n + 1);
  f->targets = (int *)(void *)titans__arena_alloc(ar, n + 1);
  f->pos = titans__arena_positions(ar, T, 0);
  if (!f->inputs || !f->targets || !f->pos) return titans__error(t->error, TITANS_ERR_NOMEM, "forward: out of memory");
  size_t shown = batch->next_token ? 1 : 0; /* a target's column in the caller's array: i + 1 in tokens [B, T + 1] */
  for (size_t b = 0; b < B; b++)
    for (size_t i = 0; i < T; i++) {
      int in = batch->inputs[b * stride + i];
      f->inputs[b * T + i] = batch->next_token ? titans__token_id(in) : in;
      f->targets[b * T + i] = batch->targets ? batch->targets[b * stride + i] : -1;
      if (f->targets[b * T + i] < 0) f->targets[b * T + i] = -1; /* TITANS_NO_LOSS or < 0: not counted by the loss */
      if (f->targets[b * T + i] >= c->vocab)
        return titans__error(t->error, TITANS_ERR_ARG,
                             "forward: target token %d at (%zu, %zu) is outside the vocabulary", f->targets[b * T + i],
                             b, i + shown);
      if (!batch->next_token && (in < 0 || in >= c->vocab))
        return titans__error(t->error, TITANS_ERR_ARG,
                             "forward: input token %d at (%zu, %zu) is outside the vocabulary [0, %zu)", in, b, i, V);
    }
  for (int l = 0; l <= c->n_layers; l++)
    if (!(f->x[l] = titans__arena_alloc(ar, n * d)))
      return titans__error(t->error, TITANS_ERR_NOMEM, "forward: out of memory");
  if (titans_embedding_forward(f->x[0], f->inputs, mo->w.tok_emb, n, V, d))
    return titans__error(t->error, TITANS_ERR_ARG, "forward: an input token is outside the vocabulary [0, %zu)", V);
  for (int l = 0; l < c->n_layers; l++) {
    titans__layer_fwd *lf = &f->layers[l];
    lf->carry = stream && stream->mem ? &stream->mem[l] : NULL;
    lf->fresh = stream ? stream->fresh : NULL;
    lf->recompute = t->recompute;
    lf->write_cost_skip = batch->write_cost_skip;
    lf->attn_tail = stream && stream->attn_tail ? stream->attn_tail + (size_t)l * B * (size_t)c->window * d : NULL;
    lf->attn_tail_rows = stream ? stream->attn_tail_rows : NULL;
    lf->row_position = stream ? stream->row_position : NULL;
    lf->bank_carry = stream && stream->bank ? stream->bank + (size_t)l * B * titans__stream_carry_floats(c) : NULL;
    int rc = titans__block_forward(c, &mo->w.layers[l], lf, ar, f->x[l + 1], f->x[l], f->pos, B, T);
    if (rc) return titans__error(t->error, rc, "forward: layer %d: %s", l, titans_status_string(rc));
  }
  f->xf = titans__arena_alloc(ar, n * d);
  f->rstdf = titans__arena_alloc(ar, n);
  if (!f->xf || !f->rstdf) return titans__error(t->error, TITANS_ERR_NOMEM, "forward: out of memory");
  titans_rmsnorm_forward(f->xf, f->rstdf, f->x[c->n_layers], mo->w.norm_f, n, d);
  return titans__head_forward(t, all_rows);
}

/* titans_trainer_set_reduce_overlap's ranges of the gradient slab, in hand-out order (the top of the model
   first): range k is [low k, low k - 1) with low -1 = n_floats. Untied: the final norm and head; then per
   layer from the top its FFN (norm2, ffn.*) and the rest (norm1, the mixer); the embedding last. Tied: the
   final norm's d floats join the top layer's FFN range (the head is the embedding, whose gradient is
   complete only after the bottom layer). They follow the slab's layout, titans__model_walk: tok_emb, the
   layers in order (norm1 first, norm2 and the FFN last), norm_f, lm_head. */
static size_t titans__grad_range_count(const titans_model *m) {
  return 2 * (size_t)m->cfg.n_layers + (m->cfg.tied ? 1 : 2);
}

static size_t titans__grad_range_low(const titans_model *m, size_t k) {
  size_t L = (size_t)m->cfg.n_layers;
  if (!m->cfg.tied) {
    if (k == 0) return (size_t)(m->w.norm_f - m->params);
    k--;
  }
  if (k >= 2 * L) return 0;
  const titans_layer *layer = &m->w.layers[L - 1 - k / 2];
  return (size_t)((k % 2 == 0 ? layer->norm2 : layer->norm1) - m->params);
}

/* The backward finished grads [lo, final_from): scaled into a sum, it goes to the start function. */
static void titans__hand_out(titans_trainer *t, size_t lo) {
  struct titans__fwd *f = t->fwd;
  if (!f->handing_out || lo >= f->final_from) return;
  float *range = t->grads + lo; /* [n] */
  size_t n = f->final_from - lo;
  for (size_t i = 0; i < n; i++) range[i] *= f->hand_scale; /* as titans__reduce scales the whole slab */
  if (t->reduce_start(range, n, lo, t->reduce_user) != 0) f->start_failed = 1;
  f->final_from = lo;
}

/* Every range not handed out yet, in order (a failed step's zeros, so that no process waits forever). */
static void titans__hand_out_rest(titans_trainer *t) {
  for (size_t k = 0; k < titans__grad_range_count(t->model); k++)
    titans__hand_out(t, titans__grad_range_low(t->model, k));
}

/* Backward from dlogits [n_head, V] (the rows of titans__head_forward) into t->grads. */
static int titans__model_backward(titans_trainer *t, const float *dlogits) {
  titans_model *mo = t->model;
  const titans_config *c = &mo->cfg;
  struct titans__fwd *f = t->fwd;
  titans__arena *ar = &f->arena;
  size_t d = (size_t)c->d, V = (size_t)c->vocab, n = f->B * f->T;
  titans_weights g;
  titans_layer *glayers =
      (titans_layer *)(void *)titans__arena_alloc(ar, (size_t)c->n_layers * (sizeof(titans_layer) / sizeof(float) + 1));
  float *dxf = f->head_rows ? titans__arena_zalloc(ar, n * d) : titans__arena_alloc(ar, n * d), /* rows without a target: 0 */
        *dxhead = f->head_rows ? titans__arena_alloc(ar, f->n_head * d + 1) : dxf, /* [n_head, d] */
        *dx = titans__arena_zalloc(ar, n * d),
        *dprev = titans__arena_alloc(ar, n * d), *dh = titans__arena_alloc(ar, n * d); /* [n, d] each */
  if (!glayers || !dxf || !dxhead || !dx || !dprev || !dh)
    return titans__error(t->error, TITANS_ERR_NOMEM, "backward: out of memory");
  titans_weights_bind(&g, glayers, c, t->grads);
  const float *head = c->tied ? mo->w.tok_emb : mo->w.lm_head;
  float *ghead = c->tied ? g.tok_emb : g.lm_head;
  /* logits = xhead head^T */
  size_t m = f->n_head;
  if (m) {
    titans_gemm(1, 0, V, d, m, 1.0f, titans_cm(dlogits, V), titans_cm(f->xhead, d), 1.0f, titans_m(ghead, d));
    titans_gemm(0, 0, m, d, V, 1.0f, titans_cm(dlogits, V), titans_cm(head, d), 0.0f, titans_m(dxhead, d));
  }
  if (f->head_rows)
    for (size_t j = 0; j < m; j++) memcpy(dxf + (size_t)f->head_rows[j] * d, dxhead + j * d, d * sizeof(float));
  titans_rmsnorm_backward(dx, g.norm_f, dxf, f->x[c->n_layers], mo->w.norm_f, f->rstdf, n, d);
  /* a reduction that overlaps the backward gets each range as soon as nothing below adds to it */
  if (!c->tied) titans__hand_out(t, (size_t)(g.norm_f - t->grads));
  for (int l = c->n_layers; l-- > 0;) {
    const titans_layer *L = &mo->w.layers[l], *G = &g.layers[l];
    titans__arena_mark layer_start = titans__arena_here(ar); /* a layer's backward work is given back after it */
    int rc = titans__block_ffn_backward(c, L, G, &f->layers[l], ar, dh, dx, n);
    if (!rc) {
      titans__hand_out(t, (size_t)(G->norm2 - t->grads)); /* the layer's FFN and norm2 */
      rc = titans__block_mixer_backward(c, L, G, &f->layers[l], ar, dprev, dh, f->pos, f->B, f->T);
    }
    if (rc) return titans__error(t->error, rc, "backward: layer %d: %s", l, titans_status_string(rc));
    titans__hand_out(t, (size_t)(G->norm1 - t->grads)); /* the rest of the layer */
    titans__arena_rewind(ar, layer_start);
    float *tmp = dx;
    dx = dprev;
    dprev = tmp;
  }
  titans_embedding_backward(g.tok_emb, dx, f->inputs, n, d);
  titans__hand_out(t, 0);
  return TITANS_OK;
}

/* A float field is in range when it is finite (the NaN test is the comparison's) and at least lo. */
static int titans__tc_float_ok(float v, float lo) { return v >= lo && v < INFINITY; }

TITANSDEF int titans_train_config_check(const titans_train_config *tc, char *err) {
  const struct { const char *name; float value; } at_least_0[] = {
      {"lr", tc->lr}, {"min_lr", tc->min_lr}, {"weight_decay", tc->weight_decay}, {"clip", tc->clip},
      {"write_cost", tc->write_cost}, {"write_cost_log", tc->write_cost_log}};
  for (size_t i = 0; i < sizeof at_least_0 / sizeof at_least_0[0]; i++)
    if (!titans__tc_float_ok(at_least_0[i].value, 0.0f))
      return titans__error(err, TITANS_ERR_ARG, "train config: %s = %g, want a finite value >= 0", at_least_0[i].name,
                           (double)at_least_0[i].value);
  if (!(tc->beta1 >= 0.0f && tc->beta1 < 1.0f))
    return titans__error(err, TITANS_ERR_ARG, "train config: beta1 = %g, want [0, 1)", (double)tc->beta1);
  if (!(tc->beta2 >= 0.0f && tc->beta2 < 1.0f))
    return titans__error(err, TITANS_ERR_ARG, "train config: beta2 = %g, want [0, 1)", (double)tc->beta2);
  if (!(tc->eps > 0.0f && tc->eps < INFINITY))
    return titans__error(err, TITANS_ERR_ARG, "train config: eps = %g, want a finite value > 0", (double)tc->eps);
  const struct { const char *name; long value; } steps[] = {
      {"warmup_steps", tc->warmup_steps}, {"total_steps", tc->total_steps}, {"write_cost_from", tc->write_cost_from}};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
    if (steps[i].value < 0)
      return titans__error(err, TITANS_ERR_ARG, "train config: %s = %ld, want >= 0", steps[i].name, steps[i].value);
  return TITANS_OK;
}

TITANSDEF int titans_trainer_init(titans_trainer *t, titans_model *m, const titans_train_config *tc) {
  memset(t, 0, sizeof *t);
  t->model = m;
  t->tc = tc ? *tc : titans_train_config_default();
  int rc = titans_train_config_check(&t->tc, t->error);
  if (rc) return rc;
  t->grads = titans_alloc_floats(m->n_floats);
  t->adam_m = titans_alloc_floats(m->n_floats);
  t->adam_v = titans_alloc_floats(m->n_floats);
  t->fwd = (struct titans__fwd *)titans_alloc_bytes(1, sizeof(struct titans__fwd));
  if (t->fwd) {
    t->fwd->layers = (titans__layer_fwd *)titans_alloc_bytes((size_t)m->cfg.n_layers, sizeof(titans__layer_fwd));
    t->fwd->x = (float **)titans_alloc_bytes((size_t)m->cfg.n_layers + 1, sizeof(float *));
  }
  if (!t->grads || !t->adam_m || !t->adam_v || !t->fwd || !t->fwd->layers || !t->fwd->x) {
    titans_trainer_free(t);
    return titans__error(t->error, TITANS_ERR_NOMEM, "trainer: cannot allocate 3 x %zu floats", m->n_floats);
  }
  return TITANS_OK;
}

TITANSDEF void titans_trainer_free(titans_trainer *t) {
  titans_free(t->grads);
  titans_free(t->adam_m);
  titans_free(t->adam_v);
  titans__fwd_free(t->fwd, t->model ? t->model->cfg.n_layers : 0);
  t->grads = t->adam_m = t->adam_v = NULL;
  t->fwd = NULL;
}

/* Every memory context of a layer's forward (MAC's are its rows') gets the costs on writing per token
   (linear, log). */
static void titans__layer_set_write_cost(titans__layer_fwd *lf, float per_token, float per_token_log) {
  for (size_t i = 0; i < lf->nctx; i++) lf->ctxs[i].write_cost = per_token, lf->ctxs[i].write_cost_log = per_token_log;
  for (size_t b = 0; b < lf->nrows; b++) titans__layer_set_write_cost(&lf->rows[b], per_token, per_token_log);
}

/* The costs on writing (titans_train_config.write_cost, write_cost_log) as every memory call of the
   forward sees them: the mean over the batch's B x T tokens, times the gradient's scale (a micro-batch's
   share of the step); none before step write_cost_from. */
static void titans__set_write_cost(titans_trainer *t, float scale) {
  struct titans__fwd *f = t->fwd;
  size_t n = f->B * f->T;
  int on = n > 0 && t->step >= t->tc.write_cost_from;
  float per_token = on ? t->tc.write_cost * scale / (float)n : 0.0f;
  float per_token_log = on ? t->tc.write_cost_log * scale / (float)n : 0.0f;
  for (int l = 0; l < t->model->cfg.n_layers; l++)
    titans__layer_set_write_cost(&f->layers[l], per_token, per_token_log);
}

/* Forward and backward of one batch (stream may be NULL), adding scale * gradient into t->grads;
   *count (may be NULL) gets the targets the loss counted. */
static int titans__forward_backward(titans_trainer *t, titans_stream *stream, const titans__batch *batch, size_t B,
                                    size_t T, float scale, float *loss, double *count) {
  int rc = titans__model_forward(t, batch, B, T, stream, 0);
  if (rc) return rc;
  struct titans__fwd *f = t->fwd;
  size_t V = (size_t)t->model->cfg.vocab, c = f->n_head; /* not all_rows: the head ran on the counted rows */
  if (count) *count = (double)c;
  if (f->handing_out) f->hand_scale = (float)(f->counted + (double)c); /* the step's count, before its backward */
  float *dlogits = titans__arena_alloc(&f->arena, f->n_head * V + 1); /* [n_head, V] */
  if (!dlogits) return titans__error(t->error, TITANS_ERR_NOMEM, "backward: out of memory");
  float l = titans_cross_entropy(dlogits, f->logits, f->head_targets, f->n_head, V, scale);
  if (loss) *loss = l;
  if (!isfinite(l)) return titans__error(t->error, TITANS_ERR_NONFINITE, "step %ld: the loss is not finite", t->step);
  titans__set_write_cost(t, scale);
  return titans__model_backward(t, dlogits);
}

TITANSDEF int titans_forward_backward(titans_trainer *t, const int *tokens, size_t B, size_t T, float scale,
                                      float *loss) {
  titans__batch batch = titans__next_token_batch(tokens, T, 1);
  batch.write_cost_skip = t->write_cost_skip;
  return titans__forward_backward(t, NULL, &batch, B, T, scale, loss, NULL);
}

TITANSDEF int titans_forward_backward_targets(titans_trainer *t, const int *inputs, const int *targets, size_t B,
                                              size_t T, float scale, float *loss) {
  titans__batch batch = {inputs, targets, T, 0, t->write_cost_skip};
  return titans__forward_backward(t, NULL, &batch, B, T, scale, loss, NULL);
}

TITANSDEF void titans_trainer_set_recompute(titans_trainer *t, int on) { t->recompute = on != 0; }

TITANSDEF void titans_trainer_set_write_cost_skip(titans_trainer *t, const unsigned char *skip) {
  t->write_cost_skip = skip;
}

TITANSDEF void titans_trainer_set_reduce(titans_trainer *t,
                                         int (*fn)(float *grads, size_t n, double *stats, void *user), void *user) {
  t->reduce = fn;
  t->reduce_start = NULL;
  t->reduce_user = user;
}

TITANSDEF int titans_trainer_set_reduce_overlap(titans_trainer *t,
                                                int (*start)(float *range, size_t n, size_t offset, void *user),
                                                int (*finish)(float *grads, size_t n, double *stats, void *user),
                                                void *user) {
  if (start && !finish)
    return titans__error(t->error, TITANS_ERR_ARG,
                         "set_reduce_overlap: a start function needs a finish function that waits for its sums");
  t->reduce = finish;
  t->reduce_start = start;
  t->reduce_user = user;
  return TITANS_OK;
}

/* A step begins: nothing of its gradient handed out yet. */
static void titans__hand_out_reset(titans_trainer *t) {
  struct titans__fwd *f = t->fwd;
  f->handing_out = 0;
  f->counted = 0.0;
  f->final_from = t->model->n_floats;
  f->start_failed = 0;
}

/* The backward about to run completes the step's gradient (its last micro-batch; the earlier ones counted
   `counted` targets): with a start function, its ranges are handed out as they become final. */
static void titans__hand_out_arm(titans_trainer *t, double counted) {
  t->fwd->handing_out = t->reduce && t->reduce_start;
  t->fwd->counted = counted;
}

/* titans_trainer_set_reduce(_overlap): this process's gradient (the mean over `count` targets, loss *mean)
   and its status rc become the whole batch's. A failed local step (rc != 0) still takes part, with a NaN
   loss and no gradient, so the others reject the step too; its rc is returned. With a start function the
   ranges the backward handed out are in flight: only grads [0, final_from) is touched before finish. */
static int titans__reduce(titans_trainer *t, float *mean, double count, int rc) {
  size_t n = t->model->n_floats;
  struct titans__fwd *f = t->fwd;
  if (!t->reduce) return rc;
  double stats[2] = {count > 0 ? (double)*mean * count : 0.0, count};
  if (rc) {
    memset(t->grads, 0, f->final_from * sizeof(float));
    stats[0] = NAN;
    stats[1] = 0.0;
  } else if (!t->reduce_start)
    for (size_t i = 0; i < n; i++) t->grads[i] *= (float)count;
  if (t->reduce_start) { /* the ranges a failed or cut-short backward did not hand out, so every process
                            starts the same reductions in the same order */
    f->handing_out = 1;
    f->hand_scale = (float)count;
    titans__hand_out_rest(t);
    f->handing_out = 0;
  }
  if (t->reduce(t->grads, n, stats, t->reduce_user) != 0 || f->start_failed) {
    memset(t->grads, 0, n * sizeof(float));
    return rc ? rc
              : titans__error(t->error, TITANS_ERR_STATE,
                              "step %ld: the reduce function failed; weights left unchanged", t->step);
  }
  if (rc) {
    memset(t->grads, 0, n * sizeof(float));
    return rc;
  }
  float inv = stats[1] > 0 ? (float)(1.0 / stats[1]) : 0.0f;
  for (size_t i = 0; i < n; i++) t->grads[i] *= inv;
  *mean = stats[1] > 0 ? (float)(stats[0] / stats[1]) : (isfinite(stats[0]) ? 0.0f : NAN);
  return TITANS_OK;
}

/* The optimizer step on the gradients accumulated in t->grads (mean loss `mean`): global-norm clip,
   AdamW at titans_lr_at(step). A non-finite loss or gradient leaves weights and moments unchanged. */
static int titans__apply_gradients(titans_trainer *t, float mean) {
  titans_model *mo = t->model;
  titans__zero_held_key_taps(mo, t->grads);
  double sq = 0.0;
  for (size_t i = 0; i < mo->n_floats; i++) sq += (double)t->grads[i] * t->grads[i];
  float norm = (float)sqrt(sq);
  t->last_grad_norm = norm;
  if (!isfinite(norm) || !isfinite(mean)) {
    memset(t->grads, 0, mo->n_floats * sizeof(float));
    return titans__error(t->error, TITANS_ERR_NONFINITE, "step %ld: non-finite %s; weights left unchanged", t->step,
                         isfinite(mean) ? "gradient" : "loss");
  }
  if (t->tc.clip > 0.0f && norm > t->tc.clip) {
    float s = t->tc.clip / norm;
    for (size_t i = 0; i < mo->n_floats; i++) t->grads[i] *= s;
  }
  float lr = titans_lr_at(&t->tc, t->step);
  t->last_lr = lr;
  for (size_t p = 0; p < mo->n_params; p++) {
    const titans_param *pp = &mo->plist[p];
    float wd = pp->kind == TITANS_PARAM_MATRIX ? t->tc.weight_decay : 0.0f;
    const titans_adamw_arrays a = {mo->params + pp->offset, t->grads + pp->offset, t->adam_m + pp->offset,
                                   t->adam_v + pp->offset, pp->size};
    titans_adamw_update(&a, lr, t->tc.beta1, t->tc.beta2, t->tc.eps, wd, t->step + 1);
  }
  titans__zero_held_key_taps(mo, mo->params);
  t->step++;
  return TITANS_OK;
}

/* The optimizer step of titans_train_step on n_micro micro-batches of B rows of a batch. */
static int titans__train_step(titans_trainer *t, const titans__batch *batch, size_t n_micro, size_t B, size_t T,
                              float *loss) {
  titans_model *mo = t->model;
  if (loss) *loss = NAN; /* until a micro-batch gives one */
  if (n_micro == 0) return titans__error(t->error, TITANS_ERR_ARG, "train step: no micro-batch");
  memset(t->grads, 0, mo->n_floats * sizeof(float));
  titans__hand_out_reset(t);
  double total = 0.0, count = 0.0;
  for (size_t i = 0; i < n_micro; i++) {
    float l = 0.0f;
    double c = 0.0;
    titans__batch micro = titans__micro_batch(batch, i, B, T);
    if (i + 1 == n_micro) titans__hand_out_arm(t, count);
    int rc = titans__forward_backward(t, NULL, &micro, B, T, 1.0f / (float)n_micro, &l, &c);
    if (rc) {
      memset(t->grads, 0, t->fwd->final_from * sizeof(float)); /* all of it but ranges in flight */
      return titans__reduce(t, &l, 0.0, rc);
    }
    total += l;
    count += c;
  }
  float mean = (float)(total / (double)n_micro);
  TITANS__TRY(titans__reduce(t, &mean, count, TITANS_OK));
  if (loss) *loss = mean; /* the whole batch's, with a reduce function */
  return titans__apply_gradients(t, mean);
}

TITANSDEF int titans_train_step(titans_trainer *t, const int *tokens, size_t n_micro, size_t B, size_t T, float *loss) {
  titans__batch batch = titans__next_token_batch(tokens, T, 1);
  batch.write_cost_skip = t->write_cost_skip;
  return titans__train_step(t, &batch, n_micro, B, T, loss);
}

TITANSDEF int titans_train_step_targets(titans_trainer *t, const int *inputs, const int *targets, size_t n_micro,
                                        size_t B, size_t T, float *loss) {
  titans__batch batch = {inputs, targets, T, 0, t->write_cost_skip};
  return titans__train_step(t, &batch, n_micro, B, T, loss);
}

/* Mean loss of a batch without gradients. */
static int titans__eval_loss(titans_trainer *t, const titans__batch *batch, size_t B, size_t T, float *loss) {
  int rc = titans__model_forward(t, batch, B, T, NULL, 0);
  if (rc) return rc;
  float l = titans_cross_entropy(NULL, t->fwd->logits, t->fwd->head_targets, t->fwd->n_head,
                                 (size_t)t->model->cfg.vocab, 1.0f);
  if (loss) *loss = l;
  return isfinite(l) ? TITANS_OK : titans__error(t->error, TITANS_ERR_NONFINITE, "eval: the loss is not finite");
}

TITANSDEF int titans_eval_loss(titans_trainer *t, const int *tokens, size_t B, size_t T, float *loss) {
  titans__batch batch = titans__next_token_batch(tokens, T, 1);
  return titans__eval_loss(t, &batch, B, T, loss);
}

TITANSDEF int titans_eval_loss_targets(titans_trainer *t, const int *inputs, const int *targets, size_t B, size_t T,
                                       float *loss) {
  titans__batch batch = {inputs, targets, T, 0, NULL};
  return titans__eval_loss(t, &batch, B, T, loss);
}

TITANSDEF int titans_forward_logits(titans_trainer *t, const int *tokens, size_t B, size_t T, float *logits) {
  titans__batch batch = titans__next_token_batch(tokens, T, 0);
  int rc = titans__model_forward(t, &batch, B, T, NULL, 1);
  if (rc) return rc;
  memcpy(logits, t->fwd->logits, B * T * (size_t)t->model->cfg.vocab * sizeof(float));
  return TITANS_OK;
}

TITANSDEF int titans_forward_logits_targets(titans_trainer *t, const int *inputs, const int *targets, size_t B,
                                            size_t T, float *logits, size_t *n_out) {
  titans__batch batch = {inputs, targets, T, 0, NULL};
  if (n_out) *n_out = 0;
  int rc = titans__model_forward(t, &batch, B, T, NULL, 0);
  if (rc) return rc;
  if (t->fwd->n_head) memcpy(logits, t->fwd->logits, t->fwd->n_head * (size_t)t->model->cfg.vocab * sizeof(float));
  if (n_out) *n_out = t->fwd->n_head;
  return TITANS_OK;
}

/* ---- streams ---------------------------------------------------------------------------------- */

/* Windows of a stream are multiples of this so that MAC's segments and the memory's chunks stay where a
   session has them; 0 for a kind that cannot stream with c (the kind's stream_unit, titans__kinds). */
static size_t titans__stream_unit(const titans_config *c) {
  const titans__kind *k = titans__kind_of(c->block);
  return k->stream_unit ? k->stream_unit(c) : 0;
}

TITANSDEF size_t titans_stream_unit(const titans_config *c) { return titans__stream_unit(c); }

TITANSDEF void titans_stream_free(titans_stream *s) {
  if (s->mem && s->model)
    for (int l = 0; l < s->model->cfg.n_layers; l++) titans_mem_state_free(&s->mem[l]);
  titans_free(s->mem);
  titans_free(s->attn_tail);
  titans_free(s->bank);
  titans_free(s->attn_tail_rows);
  titans_free(s->row_position);
  titans_free(s->fresh);
  titans_free(s->staged);
  s->staged = NULL;
  s->mem = NULL;
  s->attn_tail = NULL;
  s->bank = NULL;
  s->attn_tail_rows = NULL;
  s->row_position = NULL;
  s->fresh = NULL;
}

TITANSDEF int titans_stream_init(titans_stream *s, const titans_model *m, size_t B) {
  memset(s, 0, sizeof *s);
  const titans_config *c = &m->cfg;
  if (!titans__stream_unit(c))
    return titans__error(
        s->error, TITANS_ERR_ARG,
        "stream: %s blocks cannot stream in this version (mac, lmm, swa, lm2 can, and mag when its persistent "
        "tokens are a multiple of the memory chunk)",
        titans_block_name(c->block));
  if (B == 0 || B > ((size_t)1 << 24))
    return titans__error(s->error, TITANS_ERR_ARG, "stream: batch %zu is out of range", B);
  s->model = m;
  s->batch = B;
  s->fresh = (unsigned char *)titans_alloc_bytes(B, 1);
  s->attn_tail_rows = (size_t *)titans_alloc_bytes(B, sizeof(size_t));
  s->row_position = (long long *)titans_alloc_bytes(B, sizeof(long long));
  if (!s->fresh || !s->attn_tail_rows || !s->row_position) goto nomem;
  memset(s->fresh, 1, B);
  if (titans__kind_of(c->block)->keys == TITANS__KEYS_WINDOW) { /* SWA, MAG: each layer's last `window` inputs */
    size_t n = 0;
    if (!titans_size_mul((size_t)c->n_layers * B, (size_t)c->window, &n) || !titans_size_mul(n, (size_t)c->d, &n))
      goto nomem;
    if (!(s->attn_tail = titans_alloc_floats(n))) goto nomem;
  }
  if (titans__stream_carry_floats(c)) { /* the kind's own state per layer and row (LM2: the bank) */
    size_t n = 0;
    if (!titans_size_mul((size_t)c->n_layers * B, titans__stream_carry_floats(c), &n)) goto nomem;
    if (!(s->bank = titans_alloc_floats(n))) goto nomem;
  }
  if (titans__kind_of(c->block)->mem) {
    s->mem = (titans_mem_state *)titans_alloc_bytes((size_t)c->n_layers, sizeof(titans_mem_state));
    if (!s->mem) goto nomem;
    for (int l = 0; l < c->n_layers; l++)
      if (titans_mem_state_init(&s->mem[l], &c->mem, B)) goto nomem;
  }
  return TITANS_OK;
nomem:
  titans_stream_free(s);
  return titans__error(s->error, TITANS_ERR_NOMEM, "stream: cannot allocate the state of %zu rows", B);
}

TITANSDEF int titans_stream_restart(titans_stream *s, size_t row) {
  if (row >= s->batch) return titans__error(s->error, TITANS_ERR_ARG, "stream: row %zu of %zu", row, s->batch);
  s->fresh[row] = 1;
  return TITANS_OK;
}

/* A call of T tokens per row may continue the stream: same model and rows, and windows that keep MAC's
   segments and the memory's chunks at the absolute positions a session uses. */
static int titans__stream_check(titans_trainer *t, const titans_stream *s, size_t T) {
  const titans_config *c = &t->model->cfg;
  if (s->model != t->model || !s->fresh)
    return titans__error(t->error, TITANS_ERR_ARG, "stream: it was made for another model (or freed)");
  size_t unit = titans__stream_unit(c);
  if (T == 0) return titans__error(t->error, TITANS_ERR_ARG, "stream: an empty window");
  const titans__kind *k = titans__kind_of(c->block);
  if (k->mem_reads_persist) /* MAG */
    for (size_t b = 1; b < s->batch; b++)
      if (s->fresh[b] != s->fresh[0])
        return titans__error(t->error, TITANS_ERR_ARG, "stream: MAG rows restart together (the memory reads the "
                             "persistent tokens first): restart every row or none");
  if (s->ended)
    return titans__error(t->error, TITANS_ERR_STATE,
                         "stream: it ended with a window that was not a multiple of the %s (%zu)",
                         titans_block_describe(c->block).segment ? "segment" : "memory chunk", unit);
  return TITANS_OK;
}

/* After a successful call: the stream takes the state the forward left (memory, SWA tails). */
static void titans__stream_advance(titans_trainer *t, titans_stream *s, size_t T) {
  const titans_config *c = &t->model->cfg;
  struct titans__fwd *f = t->fwd;
  const titans__kind *k = titans__kind_of(c->block);
  size_t B = s->batch, d = (size_t)c->d, Wc = (size_t)c->window;
  for (int l = 0; l < c->n_layers; l++) {
    titans__layer_fwd *lf = &f->layers[l];
    if (s->mem) titans_mem_state_copy(&s->mem[l], &lf->st);
    if (s->bank) /* the kind's own state: what the window left (titans__carry) */
      k->carry->stream_keep(s->bank + (size_t)l * B * titans__stream_carry_floats(c), lf, c, B);
    if (!s->attn_tail) continue;
    for (size_t b = 0; b < B; b++) {
      float *tail = s->attn_tail + ((size_t)l * B + b) * Wc * d; /* [Wc, d] */
      const float *xn = lf->xn + b * T * d;                       /* [T, d] */
      if (T >= Wc) memcpy(tail, xn + (T - Wc) * d, Wc * d * sizeof(float));
      else {
        memmove(tail, tail + T * d, (Wc - T) * d * sizeof(float));
        memcpy(tail + (Wc - T) * d, xn, T * d * sizeof(float));
      }
    }
  }
  for (size_t b = 0; b < B; b++) {
    size_t before = s->fresh[b] ? 0 : s->attn_tail_rows[b];
    s->attn_tail_rows[b] = before + T < Wc ? before + T : Wc;
    s->row_position[b] = (s->fresh[b] ? 0 : s->row_position[b]) + (long long)T;
  }
  memset(s->fresh, 0, B);
  s->position += (long long)T;
  if (T % titans__stream_unit(c))
    s->ended = 1; /* MAC's segments and the chunks would no longer sit at a session's positions */
}

TITANSDEF int titans_forward_backward_stream(titans_trainer *t, titans_stream *s, const int *tokens, size_t T,
                                             float scale, float *loss) {
  TITANS__TRY(titans__stream_check(t, s, T));
  titans__batch batch = titans__next_token_batch(tokens, T, 1);
  TITANS__TRY(titans__forward_backward(t, s, &batch, s->batch, T, scale, loss, NULL));
  titans__stream_advance(t, s, T);
  return TITANS_OK;
}

TITANSDEF int titans_train_step_stream(titans_trainer *t, titans_stream *s, const int *tokens, size_t T, float *loss) {
  float l = 0.0f;
  double count = 0.0;
  titans__hand_out_reset(t);
  int rc = titans__stream_check(t, s, T);
  if (rc) return titans__reduce(t, &l, 0.0, rc);
  memset(t->grads, 0, t->model->n_floats * sizeof(float));
  titans__batch batch = titans__next_token_batch(tokens, T, 1);
  batch.write_cost_skip = t->write_cost_skip;
  titans__hand_out_arm(t, 0.0);
  rc = titans__forward_backward(t, s, &batch, s->batch, T, 1.0f, &l, &count);
  if (loss) *loss = l;
  if (rc) {
    memset(t->grads, 0, t->fwd->final_from * sizeof(float)); /* all of it but ranges in flight */
    return titans__reduce(t, &l, 0.0, rc);
  }
  TITANS__TRY(titans__reduce(t, &l, count, TITANS_OK));
  if (loss) *loss = l;
  TITANS__TRY(titans__apply_gradients(t, l));
  titans__stream_advance(t, s, T);
  return TITANS_OK;
}

TITANSDEF int titans_eval_loss_stream(titans_trainer *t, titans_stream *s, const int *tokens, size_t T, float *loss) {
  TITANS__TRY(titans__stream_check(t, s, T));
  titans__batch batch = titans__next_token_batch(tokens, T, 1);
  TITANS__TRY(titans__model_forward(t, &batch, s->batch, T, s, 0));
  float l = titans_cross_entropy(NULL, t->fwd->logits, t->fwd->head_targets, t->fwd->n_head,
                                 (size_t)t->model->cfg.vocab, 1.0f);
  if (loss) *loss = l;
  if (!isfinite(l)) return titans__error(t->error, TITANS_ERR_NONFINITE, "eval: the loss is not finite");
  titans__stream_advance(t, s, T);
  return TITANS_OK;
}

TITANSDEF int titans_forward_logits_stream(titans_trainer *t, titans_stream *s, const int *tokens, size_t T,
                                           float *logits) {
  TITANS__TRY(titans__stream_check(t, s, T));
  titans__batch batch = titans__next_token_batch(tokens, T, 0);
  TITANS__TRY(titans__model_forward(t, &batch, s->batch, T, s, 1));
  memcpy(logits, t->fwd->logits, s->batch * T * (size_t)t->model->cfg.vocab * sizeof(float));
  titans__stream_advance(t, s, T);
  return TITANS_OK;
}

/* ---- inference sessions ----------------------------------------------------------------------- */

/* Rows a layer's KV cache holds at most besides the persistent prefix: as many as the keys the kind's
   attention sees. */
static size_t titans__kv_capacity(const titans_config *c) {
  switch (titans__kind_of(c->block)->keys) {
    case TITANS__KEYS_ALL: return (size_t)c->max_context;
    case TITANS__KEYS_SEGMENT: return 2 * (size_t)c->segment; /* Hm and X rows of one segment */
    default: return (size_t)c->window;
  }
}

TITANSDEF void titans_session_free(titans_session *s) {
  if (s->layers && s->model) {
    const titans__carry *own = titans__kind_of(s->model->cfg.block)->carry;
    for (int l = 0; l < s->model->cfg.n_layers; l++) {
      struct titans__session_layer *sl = &s->layers[l];
      if (sl->has_kv) titans_kv_cache_free(&sl->kv);
      if (sl->has_mem) titans_mem_state_free(&sl->mem);
      if (own) own->free(sl);
    }
  }
  titans_free(s->layers);
  titans_free(s->work);
  s->layers = NULL;
  s->work = NULL;
}

TITANSDEF int titans_session_init(titans_session *s, const titans_model *m) {
  memset(s, 0, sizeof *s);
  s->model = m;
  const titans_config *c = &m->cfg;
  size_t d = (size_t)c->d, H = (size_t)c->attn_heads;
  const titans__kind *k = titans__kind_of(c->block);
  titans__step_work w;
  s->layers =
      (struct titans__session_layer *)titans_alloc_bytes((size_t)c->n_layers, sizeof(struct titans__session_layer));
  s->work_size = titans__step_work_carve(&w, NULL, c);
  s->work = titans_alloc_floats(s->work_size);
  if (!s->layers || !s->work) {
    titans_session_free(s);
    return titans__error(s->error, TITANS_ERR_NOMEM, "session: out of memory");
  }
  for (int l = 0; l < c->n_layers; l++) {
    struct titans__session_layer *sl = &s->layers[l];
    int rc = TITANS_OK;
    if (k->keys != TITANS__KEYS_NONE) {
      int64_t window = titans__window(c);
      /* 16 slots now, more by use: the capacity comes from a file and may be 2^24 (see the header) */
      rc = titans__kv_cache_init_reserve(&sl->kv, (size_t)c->n_persist, titans__kv_capacity(c), H, d / H, window, 16);
      sl->has_kv = rc == TITANS_OK;
    }
    if (!rc && k->mem) {
      rc = titans_mem_state_init(&sl->mem, &c->mem, 1);
      sl->has_mem = rc == TITANS_OK;
    }
    if (!rc && k->carry) rc = k->carry->init(sl, c);
    if (rc) {
      titans_session_free(s);
      return titans__error(s->error, rc, "session: cannot create the state of layer %d", l);
    }
  }
  int rc = titans_session_reset(s);
  if (rc) {
    char msg[TITANS_ERR_MSG_SIZE];
    memcpy(msg, s->error, sizeof msg);
    titans_session_free(s);
    return titans__error(s->error, rc, "%s", msg);
  }
  return TITANS_OK;
}

TITANSDEF int titans_session_reset(titans_session *s) {
  const titans_model *m = s->model;
  const titans_config *c = &m->cfg;
  const titans__kind *k = titans__kind_of(c->block);
  size_t d = (size_t)c->d, P = (size_t)c->n_persist;
  s->position = 0;
  s->broken = 1; /* until every layer is reset */
  for (int l = 0; l < c->n_layers; l++) {
    struct titans__session_layer *sl = &s->layers[l];
    const titans_layer *L = &m->w.layers[l];
    if (sl->has_mem) titans_mem_state_reset(&sl->mem, &L->mem);
    if (k->carry) k->carry->reset(sl, c, L);
    if (!sl->has_kv) continue;
    titans_kv_cache_reset(&sl->kv);
    sl->kv_nonfinite = 0;
    if (P == 0) continue;
    /* Prefix rows: the persistent tokens (MAL: the memory's outputs for them), projected, no RoPE.
       MAG and MAL feed the persistent tokens to the memory first, as the training forward does. */
    float *pk = titans_alloc_floats(3 * P * d); /* [P, d] keys, then the values and the source rows */
    if (!pk) return titans__error(s->error, TITANS_ERR_NOMEM, "session reset: out of memory (layer %d)", l);
    size_t used = P * d;
    float *pv = titans__take(pk, &used, P * d), *src = titans__take(pk, &used, P * d); /* [P, d] each */
    memcpy(src, L->persist, P * d * sizeof(float));
    if (k->mem_reads_persist) {
      float *mo = titans_alloc_floats(P * d);
      int rc = mo ? titans_mem_forward(&c->mem, &L->mem, &sl->mem, mo, L->persist, P, NULL) : TITANS_ERR_NOMEM;
      if (!rc && k->prefix_from_mem) memcpy(src, mo, P * d * sizeof(float));
      titans_free(mo);
      if (rc) {
        titans_free(pk);
        return titans__error(s->error, rc, "session reset: layer %d: %s", l, mo ? sl->mem.error : "out of memory");
      }
    }
    titans__linear(pk, src, L->attn_wk, P, d, d);
    titans__linear(pv, src, L->attn_wv, P, d, d);
    sl->kv_nonfinite = !titans__all_finite(pk, P * d) || !titans__all_finite(pv, P * d);
    titans_kv_cache_set_prefix(&sl->kv, pk, pv);
    titans_free(pk);
  }
  s->broken = 0;
  return TITANS_OK;
}

TITANSDEF int titans_session_copy(titans_session *dst, const titans_session *src) {
  if (dst->model != src->model) return titans__error(dst->error, TITANS_ERR_ARG, "session copy: different models");
  if (src->broken) return titans__error(dst->error, TITANS_ERR_STATE, "session copy: the source session is broken");
  dst->broken = 1; /* until every layer is copied */
  const titans_config *c = &src->model->cfg;
  const titans__carry *own = titans__kind_of(c->block)->carry;
  for (int l = 0; l < c->n_layers; l++) {
    struct titans__session_layer *a = &dst->layers[l];
    const struct titans__session_layer *b = &src->layers[l];
    int rc = TITANS_OK;
    if (a->has_kv) rc = titans_kv_cache_copy(&a->kv, &b->kv);
    a->kv_nonfinite = b->kv_nonfinite;
    if (!rc && a->has_mem) rc = titans_mem_state_copy(&a->mem, &b->mem);
    if (!rc && own) rc = own->copy(a, b, c);
    if (rc == TITANS_ERR_NOMEM) return titans__error(dst->error, rc, "session copy: layer %d: out of memory", l);
    if (rc) return titans__error(dst->error, rc, "session copy: layer %d differs in shape", l);
  }
  dst->position = src->position;
  dst->broken = 0;
  return TITANS_OK;
}

/* TITANS_OK when s can take a token; otherwise TITANS_ERR_STATE and why (nothing is changed). */
static int titans__session_ready(titans_session *s) {
  if (s->broken)
    return titans__error(s->error, TITANS_ERR_STATE, "session: broken by an earlier error; reset or load it first");
  if (s->position >= TITANS_MAX_POSITION)
    return titans__error(s->error, TITANS_ERR_STATE, "session: the position limit 2^62 is reached");
  return TITANS_OK;
}

/* Layer l's mixer failed with rc: s is broken (earlier layers have taken the token). Returns rc. */
static int titans__session_layer_failed(titans_session *s, int l, int rc) {
  s->broken = 1;
  return titans__error(s->error, rc, "session: layer %d at position %lld: %s", l, s->position,
                       titans_status_string(rc));
}

/* Layer l's output x [d] of the token: TITANS_OK when finite, else s is broken. A NaN or Inf in a memory
   (W, S) reaches the layer's output at this very token (y_t reads W_t, and IEEE products and sums keep
   NaN and Inf), as does one in any weight the token used. */
static int titans__session_layer_check(titans_session *s, int l, const float *x) {
  if (titans__all_finite(x, (size_t)s->model->cfg.d)) return TITANS_OK;
  s->broken = 1;
  return titans__error(s->error, TITANS_ERR_NONFINITE,
                       "session: layer %d at position %lld produced NaN or Inf (reset or reload the session)", l,
                       s->position);
}

/* The logits [V] of the token before s->position: TITANS_OK when finite, else s is broken (the same
   weights would give NaN again: do not let the caller go on silently). */
static int titans__session_logits_check(titans_session *s, const float *logits) {
  if (titans__all_finite(logits, (size_t)s->model->cfg.vocab)) return TITANS_OK;
  s->broken = 1;
  return titans__error(s->error, TITANS_ERR_NONFINITE,
                       "session: the output head produced NaN or Inf logits at position %lld", s->position - 1);
}

/* One token through every block: the residual stream w->x [d] ends as the last block's output. Each
   block is titans__block_forward on one row: the same norm, the same second half (residual, norm, FFN,
   residual: titans__block_ffn_rows), with the kind's one-token step as the mixer. */
static int titans__session_token(titans_session *s, int token, titans__step_work *w) {
  const titans_model *mo = s->model;
  const titans_config *c = &mo->cfg;
  size_t d = (size_t)c->d;
  float r;
  TITANS__TRY(titans__session_ready(s));
  if (titans_embedding_forward(w->x, &token, mo->w.tok_emb, 1, (size_t)c->vocab, d))
    return titans__error(s->error, TITANS_ERR_ARG, "session: token %d is outside the vocabulary [0, %d)", token,
                         c->vocab);
  for (int l = 0; l < c->n_layers; l++) {
    const titans_layer *L = &mo->w.layers[l];
    /* h = x + Mixer(RMSNorm(x; norm1)) */
    titans_rmsnorm_forward(w->xn, &r, w->x, L->norm1, 1, d);
    int rc = titans__kind_of(c->block)->step(s, l, w->mix, w->xn, s->position, w);
    if (rc) return titans__session_layer_failed(s, l, rc);
    /* h = x + mix, x = h + FFN(RMSNorm(h; norm2)): the training block's second half on one row */
    titans__block_ffn_rows(c, L, &w->ffn, w->x, w->h, w->xn, &r, w->x, w->mix, 1);
    TITANS__TRY(titans__session_layer_check(s, l, w->x));
  }
  s->position++;
  return TITANS_OK;
}

/* Clears every layer's mem_finite at a feed's start: only a memory step of the feed under way vouches
   for the state the feed's check reads (a state loaded, forked or left by a failed feed is read). */
static void titans__session_forget_checks(titans_session *s) {
  for (int l = 0; l < s->model->cfg.n_layers; l++) s->layers[l].mem_finite = 0;
}

/* A state value can be NaN or Inf while every output stays finite: a memory (W or S) that overflowed
   at a token whose output the gate shuts, or a KV row whose key is -Inf (its softmax weight is 0;
   both found by fuzzing). Checked once per feed call, so that a state feed accepted is one
   titans_session_write saves: the running W and S (the chunk-start copies and MAC's committed memory
   are copies of them, so checking them too would double the cost per generated token), the KV rows
   in use and LM2's bank and sums. A memory layer whose last step of the feed was one token through
   titans__mem_token_step (mem_finite) had its W and S checked as they were written, and is not read again. */
static int titans__session_state_finite(titans_session *s) {
  const titans_config *c = &s->model->cfg;
  const titans__carry *own = titans__kind_of(c->block)->carry;
  for (int l = 0; l < c->n_layers; l++) {
    struct titans__session_layer *sl = &s->layers[l];
    int ok = 1;
    if (sl->has_mem && !sl->mem_finite) {
      size_t n = sl->mem.batch * (size_t)sl->mem.cfg.heads * sl->mem.head_size; /* floats of W, and of S */
      ok = titans__state_finite(sl->mem.w, n) && titans__state_finite(sl->mem.s, n);
    }
    s->layers[l].mem_finite = 0;
    if (ok && sl->has_kv) ok = !sl->kv_nonfinite; /* every row was checked as it entered the cache */
    if (ok && own && own->feed_check) {
      size_t count;
      const float *saved = own->saved(sl, c, &count);
      ok = titans__state_finite(saved, count);
    }
    if (!ok) {
      s->broken = 1;
      return titans__error(s->error, TITANS_ERR_NONFINITE,
                           "session: layer %d's state holds NaN or Inf at position %lld (reset or reload the session)",
                           l, s->position);
    }
  }
  return TITANS_OK;
}

TITANSDEF int titans_session_feed(titans_session *s, const int *tokens, size_t n, float *logits) {
  const titans_model *mo = s->model;
  const titans_config *c = &mo->cfg;
  size_t d = (size_t)c->d;
  titans__step_work w; /* named slices of s->work, sized by the same carve at titans_session_init */
  float r;
  titans__step_work_carve(&w, s->work, c);
  titans__session_forget_checks(s);
  for (size_t i = 0; i < n; i++) TITANS__TRY(titans__session_token(s, tokens[i], &w));
  TITANS__TRY(titans__session_state_finite(s));
  if (logits && n > 0) {
    titans_rmsnorm_forward(w.xf, &r, w.x, mo->w.norm_f, 1, d);
    titans__linear(logits, w.xf, c->tied ? mo->w.tok_emb : mo->w.lm_head, 1, (size_t)c->vocab, d);
    TITANS__TRY(titans__session_logits_check(s, logits));
  }
  return TITANS_OK;
}

/* ---- session batches ------------------------------------------------------------------------------
   A batch's feed is titans_session_feed of one token on n rows: the same embedding, norms, second half of
   every block (titans__block_ffn_rows) and output head over [n, d], the kind's mixer over the n rows
   (titans__step_rows) or its one-token step stream by stream, and the same checks per stream. */

TITANSDEF void titans_session_batch_free(titans_session_batch *b) {
  if (!b) return;
  if (b->streams)
    for (size_t i = 0; i < b->n; i++) titans_session_free(&b->streams[i]);
  titans_free(b->streams);
  titans_free(b->work);
  titans_free(b->index);
  b->streams = NULL;
  b->work = NULL;
  b->index = NULL;
  b->n = 0;
}

TITANSDEF int titans_session_batch_init(titans_session_batch *b, const titans_model *m, size_t n_streams) {
  if (!b) return TITANS_ERR_ARG;
  memset(b, 0, sizeof *b);
  b->model = m;
  if (!m || n_streams == 0)
    return titans__error(b->error, TITANS_ERR_ARG, "session batch: %s", m ? "no streams (n_streams is 0)" : "no model");
  titans__rows_work w;
  size_t floats, bytes; /* n times one row's (the carves are linear in n): checked before carving n rows */
  if (!titans_size_mul(titans__rows_work_carve(&w, NULL, &m->cfg, 1), n_streams, &floats) ||
      !titans_size_mul(titans__rows_index_carve(&w, NULL, 1), n_streams, &bytes))
    return titans__error(b->error, TITANS_ERR_NOMEM, "session batch: %zu streams are too many", n_streams);
  b->streams = (titans_session *)titans_alloc_bytes(n_streams, sizeof(titans_session)); /* zeroed: free is safe */
  b->work = titans_alloc_floats(floats);
  b->index = (unsigned char *)titans_alloc_bytes(bytes, 1);
  b->work_size = floats;
  b->n = n_streams;
  int rc = b->streams && b->work && b->index ? TITANS_OK : TITANS_ERR_NOMEM;
  if (rc) titans__error(b->error, rc, "session batch: out of memory");
  for (size_t i = 0; i < n_streams && !rc; i++)
    if ((rc = titans_session_init(&b->streams[i], m)))
      titans__error(b->error, rc, "session batch: stream %zu: %s", i, b->streams[i].error);
  if (rc) {
    char msg[TITANS_ERR_MSG_SIZE];
    memcpy(msg, b->error, sizeof msg);
    titans_session_batch_free(b);
    return titans__error(b->error, rc, "%s", msg);
  }
  return TITANS_OK;
}

TITANSDEF titans_session *titans_session_batch_stream(titans_session_batch *b, size_t i) {
  return b && b->streams && i < b->n ? &b->streams[i] : NULL;
}

TITANSDEF int titans_session_batch_get(titans_session_batch *b, size_t i, titans_session *dst) {
  titans_session *s = titans_session_batch_stream(b, i);
  if (!b) return TITANS_ERR_ARG;
  if (!s || !dst) return titans__error(b->error, TITANS_ERR_ARG, "session batch get: no stream %zu or no session", i);
  int rc = titans_session_copy(dst, s);
  return rc ? titans__error(b->error, rc, "session batch get: stream %zu: %s", i, dst->error) : TITANS_OK;
}

TITANSDEF int titans_session_batch_put(titans_session_batch *b, size_t i, const titans_session *src) {
  titans_session *s = titans_session_batch_stream(b, i);
  if (!b) return TITANS_ERR_ARG;
  if (!s || !src) return titans__error(b->error, TITANS_ERR_ARG, "session batch put: no stream %zu or no session", i);
  int rc = titans_session_copy(s, src);
  return rc ? titans__error(b->error, rc, "session batch put: stream %zu: %s", i, s->error) : TITANS_OK;
}

TITANSDEF int titans_session_batch_reset(titans_session_batch *b, size_t i) {
  titans_session *s = titans_session_batch_stream(b, i);
  if (!b) return TITANS_ERR_ARG;
  if (!s) return titans__error(b->error, TITANS_ERR_ARG, "session batch reset: no stream %zu", i);
  int rc = titans_session_reset(s);
  return rc ? titans__error(b->error, rc, "session batch reset: stream %zu: %s", i, s->error) : TITANS_OK;
}

/* Row r's stream failed with rc (its session is broken, its error set): the call's first error names it,
   and the row is dropped (titans__rows_compact). Returns the call's first error. */
static int titans__rows_failed(titans_session_batch *b, titans__rows_work *w, size_t r, int rc, int first) {
  if (!first) titans__error(b->error, rc, "session batch feed: stream %zu: %s", w->slot[r], w->s[r]->error);
  w->s[r] = NULL;
  return first ? first : rc;
}

/* Removes the dropped rows of n, moving the later rows (x and mix) up; returns the rows left. */
static size_t titans__rows_compact(titans__rows_work *w, size_t n, size_t d) {
  size_t kept = 0;
  for (size_t r = 0; r < n; r++) {
    if (!w->s[r]) continue;
    if (kept != r) {
      w->s[kept] = w->s[r];
      w->slot[kept] = w->slot[r];
      memcpy(w->x + kept * d, w->x + r * d, d * sizeof(float));
      memcpy(w->mix + kept * d, w->mix + r * d, d * sizeof(float));
    }
    kept++;
  }
  return kept;
}

/* The mixer of layer l on the n rows: the kind's step over the rows, or its one-token step stream by
   stream (each with its session's scratch). A failed stream's row is dropped; returns the rows left. */
static size_t titans__rows_mixer(titans_session_batch *b, titans__rows_work *w, size_t n, int l, int *first) {
  const titans_config *c = &b->model->cfg;
  const titans__kind *k = titans__kind_of(c->block);
  size_t d = (size_t)c->d;
  if (k->step_rows) {
    int rc = k->step_rows(w, n, l);
    for (size_t r = 0; r < n && rc; r++) { /* a shared step failed (a cache could not grow): every row */
      titans__session_layer_failed(w->s[r], l, rc);
      *first = titans__rows_failed(b, w, r, rc, *first);
    }
  } else {
    for (size_t r = 0; r < n; r++) {
      titans_session *s = w->s[r];
      titans__step_work sw; /* named slices of the stream's own scratch */
      titans__step_work_carve(&sw, s->work, c);
      int rc = k->step(s, l, w->mix + r * d, w->xn + r * d, s->position, &sw);
      if (rc) *first = titans__rows_failed(b, w, r, titans__session_layer_failed(s, l, rc), *first);
    }
  }
  return titans__rows_compact(w, n, d);
}

TITANSDEF int titans_session_batch_feed(titans_session_batch *b, const int *tokens, float *logits) {
  if (!b || !b->streams) return TITANS_ERR_ARG;
  if (!tokens) return titans__error(b->error, TITANS_ERR_ARG, "session batch feed: tokens is NULL");
  const titans_model *mo = b->model;
  const titans_config *c = &mo->cfg;
  size_t d = (size_t)c->d, V = (size_t)c->vocab, n = 0;
  titans__rows_work w;
  titans__rows_work_carve(&w, b->work, c, b->n);
  titans__rows_index_carve(&w, b->index, b->n);
  for (size_t i = 0; i < b->n; i++) { /* every check before any change */
    int t = tokens[i];
    if (t == TITANS_SESSION_BATCH_IDLE) continue;
    if (t < 0 || t >= c->vocab)
      return titans__error(b->error, TITANS_ERR_ARG, "session batch feed: stream %zu: token %d is outside [0, %d)", i,
                           t, c->vocab);
    if (titans__session_ready(&b->streams[i]))
      return titans__error(b->error, TITANS_ERR_STATE, "session batch feed: stream %zu: %s", i, b->streams[i].error);
  }
  for (size_t i = 0; i < b->n; i++) {
    if (tokens[i] == TITANS_SESSION_BATCH_IDLE) continue;
    w.s[n] = &b->streams[i];
    w.slot[n] = i;
    titans__session_forget_checks(w.s[n]);
    titans_embedding_forward(w.x + n * d, &tokens[i], mo->w.tok_emb, 1, V, d);
    n++;
  }
  int first = TITANS_OK;
  for (int l = 0; l < c->n_layers && n > 0; l++) {
    const titans_layer *L = &mo->w.layers[l];
    /* h = x + Mixer(RMSNorm(x; norm1)), x = h + FFN(RMSNorm(h; norm2)), as titans__session_token on n rows */
    titans_rmsnorm_forward(w.xn, w.rstd, w.x, L->norm1, n, d);
    n = titans__rows_mixer(b, &w, n, l, &first);
    titans__block_ffn_rows(c, L, &w.ffn, w.x, w.h, w.xn, w.rstd, w.x, w.mix, n);
    for (size_t r = 0; r < n; r++) {
      int rc = titans__session_layer_check(w.s[r], l, w.x + r * d);
      if (rc) first = titans__rows_failed(b, &w, r, rc, first);
    }
    n = titans__rows_compact(&w, n, d);
  }
  for (size_t r = 0; r < n; r++) {
    w.s[r]->position++;
    int rc = titans__session_state_finite(w.s[r]);
    if (rc) first = titans__rows_failed(b, &w, r, rc, first);
  }
  n = titans__rows_compact(&w, n, d);
  if (logits && n > 0) {
    titans_rmsnorm_forward(w.xf, w.rstd, w.x, mo->w.norm_f, n, d);
    titans__linear(w.logits, w.xf, c->tied ? mo->w.tok_emb : mo->w.lm_head, n, V, d);
    for (size_t r = 0; r < n; r++) {
      int rc = titans__session_logits_check(w.s[r], w.logits + r * V);
      if (rc) first = titans__rows_failed(b, &w, r, rc, first);
      else memcpy(logits + w.slot[r] * V, w.logits + r * V, V * sizeof(float));
    }
  }
  return first;
}

/* ---- session state as named tensors ----------------------------------------------------------- */

static size_t titans__push_ref(titans_tensor_ref *list, size_t max, size_t n, const char *prefix, const char *name,
                               float *data, size_t count) {
  if (list && n < max) {
    titans_tensor_ref *r = &list[n];
    size_t lp = strlen(prefix), ln = strlen(name);
    if (lp + ln >= sizeof r->name) lp = ln = 0;
    memcpy(r->name, prefix, lp);
    memcpy(r->name + lp, name, ln);
    r->name[lp + ln] = 0;
    r->data = data;
    r->count = count;
  }
  return n + 1;
}

/* The kind's own state of a layer (its carry's saved floats), when it has one. */
static size_t titans__push_carry(titans_tensor_ref *list, size_t max, size_t n, const char *prefix,
                                 const titans__carry *own, struct titans__session_layer *sl, const titans_config *c) {
  if (!own) return n;
  size_t count;
  float *saved = own->saved(sl, c, &count);
  return titans__push_ref(list, max, n, prefix, own->tensor, saved, count);
}

TITANSDEF size_t titans_session_state(titans_session *s, titans_tensor_ref *list, size_t max) {
  const titans_config *c = &s->model->cfg;
  const titans__carry *own = titans__kind_of(c->block)->carry;
  uint64_t p = (uint64_t)s->position;
  for (int i = 0; i < 3; i++) s->position_code[i] = (float)((p >> (21 * i)) & 0x1FFFFF);
  size_t n = titans__push_ref(list, max, 0, "", "position", s->position_code, 3);
  for (int l = 0; l < c->n_layers; l++) {
    struct titans__session_layer *sl = &s->layers[l];
    char prefix[64];
    titans__layer_prefix(prefix, l);
    if (sl->has_mem)
      n = titans__push_ref(list, max, n, prefix, "mem.state", sl->mem.w_chunk, titans__mem_state_slab_floats(&sl->mem));
    if (sl->has_kv) {
      size_t rows = (sl->kv.P + sl->kv.count) * (size_t)c->d; /* the rows in use: slots 0 .. count - 1 */
      n = titans__push_ref(list, max, n, prefix, "kv.k", sl->kv.k, rows);
      n = titans__push_ref(list, max, n, prefix, "kv.v", sl->kv.v, rows);
    }
    n = titans__push_carry(list, max, n, prefix, own, sl, c);
  }
  return n;
}

/* Rows a session's KV cache has appended since its last reset at position pos (MAC: two per token
   of the current segment; it resets at each segment's first token). */
static long long titans__session_kv_appended(const titans_config *c, long long pos) {
  if (titans__kind_of(c->block)->keys != TITANS__KEYS_SEGMENT) return pos;
  long long seg_start = pos == 0 ? 0 : ((pos - 1) / c->segment) * c->segment;
  return 2 * (pos - seg_start);
}

/* Ring rows a state at position pos holds (the kv.k, kv.v tensors hold P + this many rows). */
static size_t titans__session_kv_rows(const titans_config *c, long long pos) {
  long long a = titans__session_kv_appended(c, pos), cap = (long long)titans__kv_capacity(c);
  return (size_t)(a < cap ? a : cap);
}

/* Rebuilds the ring bookkeeping of a KV cache after `appended` rows were appended since its last reset;
   row r was appended for position pos_of_row(r). */
static void titans__kv_rebuild(titans_kv_cache *kv, long long appended, int mac) {
  size_t cap = kv->capacity;
  kv->count = (size_t)(appended < (long long)cap ? appended : (long long)cap);
  kv->next = (size_t)(appended % (long long)cap);
  for (size_t j = 0; j < kv->count; j++) {
    /* the latest row r < appended with r = j (mod cap) */
    long long r = (long long)j + (long long)cap * ((appended - 1 - (long long)j) / (long long)cap);
    kv->pos[j] = mac ? r / 2 : r;
  }
}

/* The position of three 21-bit pieces; -1 when they are not a position in 0..TITANS_MAX_POSITION. */
static long long titans__position_decode(const float *code) {
  uint64_t p = 0;
  for (int i = 0; i < 3; i++) {
    float f = code[i];
    if (!(f >= 0.0f && f < 2097152.0f) || f != floorf(f)) return -1;
    p |= (uint64_t)f << (21 * i);
  }
  return p > (uint64_t)TITANS_MAX_POSITION ? -1 : (long long)p;
}

TITANSDEF int titans_session_state_prepare(titans_session *s, long long position) {
  const titans_config *c = &s->model->cfg;
  const titans__kind *k = titans__kind_of(c->block);
  if (position < 0 || position > TITANS_MAX_POSITION)
    return titans__error(s->error, TITANS_ERR_ARG, "session state: position %lld is outside 0..2^62", position);
  s->broken = 1; /* being restored: titans_session_state_loaded makes it usable */
  for (int l = 0; l < c->n_layers; l++) {
    struct titans__session_layer *sl = &s->layers[l];
    if (!sl->has_kv) continue;
    if (titans__kv_cache_reserve(&sl->kv, titans__session_kv_rows(c, position)))
      return titans__error(s->error, TITANS_ERR_NOMEM, "session state: cannot allocate layer %d's KV cache", l);
    titans__kv_rebuild(&sl->kv, titans__session_kv_appended(c, position), k->keys == TITANS__KEYS_SEGMENT);
  }
  s->position = position;
  return TITANS_OK;
}

TITANSDEF int titans_session_state_loaded(titans_session *s) {
  const titans_config *c = &s->model->cfg;
  const titans__kind *k = titans__kind_of(c->block);
  long long decoded = titans__position_decode(s->position_code);
  if (decoded < 0) return titans__error(s->error, TITANS_ERR_FORMAT, "session state: bad position");
  uint64_t p = (uint64_t)decoded;
  for (int l = 0; l < c->n_layers; l++)
    if (s->layers[l].has_kv && s->layers[l].kv.count != titans__session_kv_rows(c, decoded))
      return titans__error(s->error, TITANS_ERR_STATE,
                           "session state: position %lld was not prepared (titans_session_state_prepare)", decoded);
  titans_tensor_ref refs[4];
  for (int l = 0; l < c->n_layers; l++) {
    struct titans__session_layer *sl = &s->layers[l];
    char prefix[64];
    titans__layer_prefix(prefix, l);
    size_t nr = 0;
    if (sl->has_mem)
      nr = titans__push_ref(refs, 4, nr, prefix, "mem.state", sl->mem.w_chunk, titans__mem_state_slab_floats(&sl->mem));
    nr = titans__push_carry(refs, 4, nr, prefix, k->carry, sl, c);
    for (size_t i = 0; i < nr; i++)
      for (size_t j = 0; j < refs[i].count; j++)
        if (!isfinite(refs[i].data[j]))
          return titans__error(s->error, TITANS_ERR_FORMAT, "session state: %s holds a non-finite value", refs[i].name);
    long long pos = (long long)p;
    char why[TITANS_ERR_MSG_SIZE];
    if (k->carry && k->carry->loaded(sl, c, &s->model->w.layers[l], pos, why))
      return titans__error(s->error, TITANS_ERR_FORMAT, "session state: layer %d's %s", l, why);
    if (sl->has_mem) sl->mem.position = pos + (k->mem_reads_persist ? c->n_persist : 0);
    if (sl->has_kv) {
      size_t rows = (sl->kv.P + sl->kv.count) * (size_t)c->d;
      for (size_t j = 0; j < rows; j++)
        if (!isfinite(sl->kv.k[j]) || !isfinite(sl->kv.v[j]))
          return titans__error(s->error, TITANS_ERR_FORMAT,
                               "session state: layer %d's KV cache holds a non-finite value", l);
      sl->kv_nonfinite = 0;
      titans__kv_cache_sync(&sl->kv); /* the rows were read into k */
      titans__kv_rebuild(&sl->kv, titans__session_kv_appended(c, pos), k->keys == TITANS__KEYS_SEGMENT);
    }
  }
  s->position = (long long)p;
  s->broken = 0;
  return TITANS_OK;
}

/* ---- sampling --------------------------------------------------------------------------------- */

typedef struct titans__prob {
  float p;
  int index;
} titans__prob;

/* larger probability first; equal ones by index, so the order is total and the draw deterministic */
static int titans__prob_cmp(const void *a, const void *b) {
  const titans__prob *x = (const titans__prob *)a, *y = (const titans__prob *)b;
  if (x->p != y->p) return x->p > y->p ? -1 : 1;
  return x->index - y->index;
}

TITANSDEF int titans_sample_ex(const float *logits, size_t V, float temperature, int top_k, float top_p,
                               titans_rng *rng, int *token) {
  if (!token) return TITANS_ERR_ARG;
  *token = -1;
  if (!logits || V == 0 || V > (size_t)INT_MAX || temperature != temperature || top_p != top_p) return TITANS_ERR_ARG;
  size_t best = 0;
  for (size_t i = 0; i < V; i++) {
    if (logits[i] != logits[i] || logits[i] == INFINITY) return TITANS_ERR_NONFINITE;
    if (logits[i] > logits[best]) best = i;
  }
  if (logits[best] == -INFINITY) return TITANS_ERR_NONFINITE; /* nothing can be drawn */
  if (!(temperature > 0.0f)) {
    *token = (int)best;
    return TITANS_OK;
  }
  if (!rng) return TITANS_ERR_ARG;
  titans__prob *pr = (titans__prob *)titans_alloc_bytes(V, sizeof(titans__prob));
  if (!pr) return TITANS_ERR_NOMEM;
  size_t positive = 0;
  for (size_t i = 0; i < V; i++) {
    pr[i].p = expf((logits[i] - logits[best]) / temperature); /* -Inf (or a far logit) gives 0 */
    pr[i].index = (int)i;
    positive += pr[i].p > 0.0f;
  }
  qsort(pr, V, sizeof *pr, titans__prob_cmp);
  size_t keep = top_k > 0 && (size_t)top_k < V ? (size_t)top_k : V;
  if (keep > positive) keep = positive; /* >= 1: the best token has p = 1 */
  double total = 0.0;
  for (size_t i = 0; i < keep; i++) total += pr[i].p;
  if (top_p > 0.0f && top_p < 1.0f) {
    double acc = 0.0;
    size_t i = 0;
    while (i < keep) {
      acc += pr[i].p;
      i++;
      if (acc >= top_p * total) break;
    }
    keep = i;
    total = acc;
  }
  double u = (double)titans_rng_uniform(rng) * total, acc = 0.0;
  int choice = pr[keep - 1].index;
  for (size_t i = 0; i < keep; i++) {
    acc += pr[i].p;
    if (u < acc) {
      choice = pr[i].index;
      break;
    }
  }
  titans_free(pr);
  *token = choice;
  return TITANS_OK;
}

TITANSDEF int titans_sample(const float *logits, size_t V, float temperature, int top_k, float top_p, titans_rng *rng) {
  int token;
  return titans_sample_ex(logits, V, temperature, top_k, top_p, rng, &token) == TITANS_OK ? token : -1;
}
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
  if (kind != TITANS_TOKENIZER_BYTE)
    return titans__error(tok->error, TITANS_ERR_ARG, "tokenizer: unknown kind %d", kind);
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

TITANSDEF int titans_tokenizer_decode(titans_tokenizer *tok, char *out, size_t max_bytes, size_t *n_bytes,
                                      const int *ids, size_t n_ids) {
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
    if (kind < 0)
      return titans__error(tok->error, TITANS_ERR_FORMAT, "tokenizer '%.64s' is not known to this version", name);
  } else if (vocab != 256) {
    return titans__error(tok->error, TITANS_ERR_FORMAT,
                         "the file names no tokenizer and its vocabulary (%d) is not bytes", vocab);
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

/* ---- numbers as text (locale-independent, no stdio) ------------------------------------------- */

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

/* ---- configurations as JSON ------------------------------------------------------------------- */

enum { TITANS__CK_INT, TITANS__CK_LONG, TITANS__CK_FLOAT, TITANS__CK_BLOCK, TITANS__CK_OBJECT };

typedef struct titans__ck_field {
  const char *key;
  int type;  /* TITANS__CK_* */
  void *ptr; /* int *, long *, float *, int * (block kind), titans__ck_fields * */
  int optional; /* 1: a file without the key keeps the field at 0 (keys added after files were written);
                   2: the same, and the field is written only when it is not 0, so the files of models
                   that do not use it stay byte for byte what earlier versions wrote */
} titans__ck_field;

#define TITANS__CK_MAX_FIELDS 24 /* of one JSON object; the mem object has 17 */
typedef struct titans__ck_fields {
  titans__ck_field f[TITANS__CK_MAX_FIELDS];
  int n;
} titans__ck_fields;

static void titans__ck_add(titans__ck_fields *fs, const char *key, int type, void *ptr) {
  TITANS_ASSERT(fs->n < TITANS__CK_MAX_FIELDS);
  fs->f[fs->n].key = key;
  fs->f[fs->n].type = type;
  fs->f[fs->n].ptr = ptr;
  fs->f[fs->n].optional = 0;
  fs->n++;
}

/* A key that files of earlier versions do not have: when it is missing the field stays 0, which must
   mean what those files meant. */
static void titans__ck_add_optional(titans__ck_fields *fs, const char *key, int type, void *ptr) {
  titans__ck_add(fs, key, type, ptr);
  fs->f[fs->n - 1].optional = 1;
}

/* An optional number (int, long or float) written only when it is not 0: models and runs that do not use
   it keep the files earlier versions wrote, byte for byte. */
static void titans__ck_add_when_set(titans__ck_fields *fs, const char *key, int type, void *ptr) {
  titans__ck_add(fs, key, type, ptr);
  fs->f[fs->n - 1].optional = 2;
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
  titans__ck_add_optional(top, "lm2_slots", TITANS__CK_INT, &c->lm2_slots); /* 0: not LM2 */
  titans__ck_add_optional(top, "mac_learns_from", TITANS__CK_INT, &c->mac_learns_from); /* 0: the paper's y */
  titans__ck_add(mem, "d", TITANS__CK_INT, &c->mem.d);
  titans__ck_add(mem, "heads", TITANS__CK_INT, &c->mem.heads);
  titans__ck_add(mem, "head_dim", TITANS__CK_INT, &c->mem.head_dim);
  titans__ck_add(mem, "depth", TITANS__CK_INT, &c->mem.depth);
  titans__ck_add(mem, "hidden_mult", TITANS__CK_INT, &c->mem.hidden_mult);
  titans__ck_add(mem, "chunk", TITANS__CK_INT, &c->mem.chunk);
  titans__ck_add(mem, "conv_width", TITANS__CK_INT, &c->mem.conv_width);
  titans__ck_add(mem, "residual", TITANS__CK_INT, &c->mem.residual);
  titans__ck_add(mem, "theta_max", TITANS__CK_FLOAT, &c->mem.theta_max);
  titans__ck_add_optional(mem, "surprise_bound", TITANS__CK_FLOAT, &c->mem.surprise_bound); /* 0: unbounded */
  titans__ck_add_when_set(mem, "key_ngram", TITANS__CK_INT, &c->mem.key_ngram);
  titans__ck_add_when_set(mem, "no_momentum", TITANS__CK_INT, &c->mem.no_momentum);
  titans__ck_add_when_set(mem, "no_forget", TITANS__CK_INT, &c->mem.no_forget);
  titans__ck_add_when_set(mem, "gate_key", TITANS__CK_INT, &c->mem.gate_key);
  titans__ck_add_when_set(mem, "qk_linear", TITANS__CK_INT, &c->mem.qk_linear);
  titans__ck_add_when_set(mem, "per_token_grad", TITANS__CK_INT, &c->mem.per_token_grad);
  titans__ck_add_when_set(mem, "least_squares", TITANS__CK_INT, &c->mem.least_squares);
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
  titans__ck_add_when_set(fs, "write_cost", TITANS__CK_FLOAT, &tc->write_cost); /* 0: no cost */
  titans__ck_add_when_set(fs, "write_cost_from", TITANS__CK_LONG, &tc->write_cost_from);
  titans__ck_add_when_set(fs, "write_cost_log", TITANS__CK_FLOAT, &tc->write_cost_log); /* 0: no cost */
}

/* Whether a number field (int, long or float) holds 0: a titans__ck_add_when_set field is then left out. */
static int titans__ck_is_zero(const titans__ck_field *f) {
  switch (f->type) {
  case TITANS__CK_INT: return *(const int *)f->ptr == 0;
  case TITANS__CK_LONG: return *(const long *)f->ptr == 0;
  case TITANS__CK_FLOAT: return *(const float *)f->ptr == 0.0f;
  default: return 0;
  }
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
  for (int i = 0, written = 0; i < fs->n; i++) {
    const titans__ck_field *f = &fs->f[i];
    if (f->optional == 2 && titans__ck_is_zero(f)) continue; /* left out at 0 */
    if (written++) titans__ck_put(b, ",");
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
  int seen[TITANS__CK_MAX_FIELDS] = {0}, rc;
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
      if (fs->f[i].type == TITANS__CK_OBJECT)
        rc = titans__ck_object(j, (const titans__ck_fields *)fs->f[i].ptr, depth + 1);
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
    if (!seen[i] && !fs->f[i].optional)
      return titans__error(j->err, TITANS_ERR_FORMAT, "config JSON: key \"%s\" is missing", fs->f[i].key);
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
    if (!isfinite((float)v))
      return titans__error(j->err, TITANS_ERR_FORMAT, "config JSON: \"%s\" is out of float range", f->key);
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
  char why[TITANS_ERR_MSG_SIZE];
  if (titans_train_config_check(&c, why)) return titans__error(err, TITANS_ERR_FORMAT, "train config JSON: %s", why);
  *tc = c;
  return TITANS_OK;
}

/* ---- shared file checks ----------------------------------------------------------------------- */

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
    if (n == 0 || n >= sizeof head)
      return titans__error(err, TITANS_ERR_FORMAT, "metadata version \"%.32s\" is malformed", version);
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
    return titans__error(err, TITANS_ERR_FORMAT, "the file holds a %.32s, not a %s", kind,
                         want_kind ? want_kind : "model");
  return TITANS_OK;
}

/* The floats of cfg's parameters (the one walk, titans__model_size), before anything is allocated; 0
   when they would not fit a size_t. Only used to refuse a configuration the file cannot hold, so a
   hostile header cannot make the loader allocate more than the file's size implies. */
static size_t titans__ck_param_floats(const titans_config *c) {
  size_t n_params, n_floats;
  double exact = titans__model_size(c, &n_params, &n_floats);
  return exact < 0.5 * (double)SIZE_MAX ? n_floats : 0;
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
  if (!titans__ck_finite(out, p->size))
    return titans__error(err, TITANS_ERR_FORMAT, "tensor '%s' holds NaN or Inf", name);
  if (nonneg)
    for (size_t i = 0; i < p->size; i++)
      if (out[i] < 0.0f) return titans__error(err, TITANS_ERR_FORMAT, "tensor '%s' holds a negative value", name);
  return TITANS_OK;
}

/* ---- models ----------------------------------------------------------------------------------- */

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
    return titans__error(m->error, TITANS_ERR_FORMAT,
                         "the configuration needs %zu floats of parameters, the file holds %zu (a tensor "
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
TITANSDEF int titans_model_save_ex(titans_model *m, const titans_tokenizer *tok, const char *user_meta,
                                   const char *path) {
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
  if ((rc = titans__ck_trainer_state(t, m, r, &inited, err)) != 0 ||
      (rc = titans__ck_user_meta(r, user_meta, err)) != 0) {
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
TITANSDEF int titans_trainer_save(titans_trainer *t, const titans_tokenizer *tok, const char *user_meta,
                                  const char *path) {
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
  if (s->broken)
    return titans__error(s->error, TITANS_ERR_STATE, "session save: the session is broken by an earlier error");
  int rc = titans__ck_state_list(s, &list, &n);
  if (rc) return rc;
  /* what the loader would refuse is never written */
  for (size_t i = 0; i < n; i++)
    if (!titans__ck_finite(list[i].data, list[i].count)) {
      titans__error(s->error, TITANS_ERR_STATE, "session save: state tensor '%s' holds NaN or Inf", list[i].name);
      titans_free(list);
      return TITANS_ERR_STATE;
    }
  titans__ck_hex64(hash, titans_model_hash(s->model));
  rc = titans__ck_add_common_meta(w, &s->model->cfg, "session", NULL);
  if (!rc) rc = titans_st_writer_add_meta(w, "model_hash", hash);
  for (size_t i = 0; i < n && !rc; i++) rc = titans_st_writer_add_f32(w, list[i].name, list[i].data, 1, &list[i].count);
  titans_free(list);
  if (rc) return titans__error(s->error, rc, "session save: %s", w->error);
  return TITANS_OK;
}

/* The file's position: checked, then the KV caches are sized for it once the file is known to hold
   those rows (so a hostile position cannot make the session allocate what the file does not hold). */
static int titans__ck_session_position(titans_session *s, titans_st_reader *r, char *err) {
  const titans_config *c = &s->model->cfg;
  float code[3];
  size_t three = 3;
  const titans_st_tensor *t = titans_st_find(r, "position");
  if (!t || t->dtype != TITANS_ST_F32 || t->ndim != 1 || t->shape[0] != 3)
    return titans__error(err, TITANS_ERR_FORMAT, "state tensor 'position' is missing or not F32 [3]");
  int rc = titans_st_read_f32(r, "position", code, 1, &three);
  if (rc) return titans__error(err, rc, "%s", r->error);
  long long pos = titans__position_decode(code);
  if (pos < 0) return titans__error(err, TITANS_ERR_FORMAT, "state tensor 'position' is not a position in 0..2^62");
  size_t want = ((size_t)c->n_persist + titans__session_kv_rows(c, pos)) * (size_t)c->d;
  for (int l = 0; l < c->n_layers; l++) {
    if (!s->layers[l].has_kv) continue;
    char name[96];
    titans__layer_prefix(name, l);
    size_t pl = strlen(name);
    for (int kv = 0; kv < 2; kv++) {
      memcpy(name + pl, kv ? "kv.v" : "kv.k", 5);
      t = titans_st_find(r, name);
      if (!t || t->dtype != TITANS_ST_F32 || t->ndim != 1 || t->shape[0] != want)
        return titans__error(err, TITANS_ERR_FORMAT, "state tensor '%s' is missing or not F32 [%zu] (position %lld)",
                             name, want, pos);
    }
  }
  if ((rc = titans_session_state_prepare(s, pos)) != 0) return titans__error(err, rc, "%s", s->error);
  return TITANS_OK;
}

/* Checks the file against the session, then copies: nothing but the KV caches' size is changed in s
   before all is valid. */
static int titans__ck_session_read(titans_session *s, titans_st_reader *r, char *err) {
  char mine[1024], theirs[1024], hash[17];
  titans_config fcfg;
  titans_tensor_ref *list = NULL;
  size_t n = 0;
  int rc = titans__ck_check_header(r, "session", err);
  if (rc) return rc;
  if ((rc = titans_config_from_json(&fcfg, titans_st_meta(r, "config"), err)) != 0) return rc;
  if (titans_config_to_json(&s->model->cfg, mine, sizeof mine) || titans_config_to_json(&fcfg, theirs, sizeof theirs) ||
      strcmp(mine, theirs) != 0)
    return titans__error(err, TITANS_ERR_FORMAT, "the state belongs to a model of another configuration");
  const char *fhash = titans_st_meta(r, "model_hash");
  titans__ck_hex64(hash, titans_model_hash(s->model));
  if (!fhash || strcmp(fhash, hash) != 0)
    return titans__error(err, TITANS_ERR_FORMAT,
                         "the state was saved from other weights (model hash %.16s, this model %s)",
                         fhash ? fhash : "missing", hash);
  if ((rc = titans__ck_session_position(s, r, err)) != 0) return rc;
  if ((rc = titans__ck_state_list(s, &list, &n)) != 0) return titans__error(err, rc, "%s", s->error);
  if (r->n_tensors != n)
    rc = titans__error(err, TITANS_ERR_FORMAT, "the file has %zu state tensors, the session %zu", r->n_tensors, n);
  for (size_t i = 0; i < n && !rc; i++) {
    const titans_st_tensor *t = titans_st_find(r, list[i].name);
    if (!t) rc = titans__error(err, TITANS_ERR_FORMAT, "state tensor '%s' is missing", list[i].name);
    else if (t->dtype != TITANS_ST_F32 || t->ndim != 1 || t->shape[0] != list[i].count)
      rc = titans__error(err, TITANS_ERR_FORMAT, "state tensor '%s' is not F32 [%zu]", list[i].name, list[i].count);
  }
  /* all names found and the counts agree: no tensor is left over. Copy (bit-exact, any host order) */
  for (size_t i = 0; i < n && !rc; i++) {
    if ((rc = titans_st_read_f32(r, list[i].name, list[i].data, 1, &list[i].count)) != 0)
      titans__error(err, rc, "%s", r->error);
    else if (!titans__ck_finite(list[i].data, list[i].count))
      rc = titans__error(err, TITANS_ERR_FORMAT, "state tensor '%s' holds NaN or Inf", list[i].name);
  }
  titans_free(list);
  if (rc) return rc;
  if ((rc = titans_session_state_loaded(s)) != 0) return titans__error(err, rc, "%s", s->error);
  return TITANS_OK;
}

TITANSDEF int titans_session_read(titans_session *s, titans_st_reader *r) {
  char err[TITANS_ERR_MSG_SIZE];
  int rc = titans__ck_session_read(s, r, err);
  if (rc) {
    /* back to a new session; if even that fails, the session stays broken (feed refuses it) */
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

/* ---- streams ---------------------------------------------------------------------------------- */

/* A non-negative integer below 2^62 as three exact 21-bit float pieces, and back (-1: not such pieces). */
static void titans__ck_put_u63(float *out, uint64_t v) {
  for (int i = 0; i < 3; i++) out[i] = (float)((v >> (21 * i)) & 0x1FFFFF);
}
static long long titans__ck_get_u63(const float *in) {
  uint64_t v = 0;
  for (int i = 0; i < 3; i++) {
    if (!(in[i] >= 0.0f && in[i] < 2097152.0f) || in[i] != floorf(in[i])) return -1;
    v |= (uint64_t)in[i] << (21 * i);
  }
  return v >> 62 ? -1 : (long long)v;
}

/* out = decimal digits of v (no stdio needed); out holds at least 21 chars. */
static void titans__ck_decimal(char *out, uint64_t v) {
  char digits[21];
  int n = 0;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v > 0);
  for (int i = 0; i < n; i++) out[i] = digits[n - 1 - i];
  out[n] = 0;
}

/* out = "stream.layers.<l>.mem" */
static void titans__ck_stream_mem_name(char *out, int l) {
  memcpy(out, "stream.", 7);
  titans__layer_prefix(out + 7, l);
  strcat(out, "mem");
}

/* Floats staged for a writer: "stream.position" [4] (position, ended), "stream.rows" [B, 5] (fresh, SWA
   tail rows, row position), one "stream.layers.{l}.mem" per memory layer; the SWA tails and the kind's carried
   rows (LM2's banks) go as they are. */
static size_t titans__stream_staged_floats(const titans_stream *s, size_t *mem_floats) {
  *mem_floats = s->mem ? titans_mem_state_floats(&s->mem[0]) : 0;
  return 4 + 5 * s->batch + (size_t)s->model->cfg.n_layers * *mem_floats;
}

static size_t titans__stream_tail_floats(const titans_stream *s) {
  const titans_config *c = &s->model->cfg;
  return s->attn_tail ? (size_t)c->n_layers * s->batch * (size_t)c->window * (size_t)c->d : 0;
}

/* Floats of the kind's own carried rows (its carry's stream_tensor, LM2's "stream.bank" [n_layers, B, N_s, d]);
   0 for a kind without them */
static size_t titans__stream_bank_floats(const titans_stream *s) {
  const titans_config *c = &s->model->cfg;
  return s->bank ? (size_t)c->n_layers * s->batch * titans__stream_carry_floats(c) : 0;
}

TITANSDEF int titans_stream_write(titans_stream *s, titans_st_writer *w) {
  const titans_config *c = &s->model->cfg;
  size_t mem_floats, n = titans__stream_staged_floats(s, &mem_floats), B = s->batch, shape[2];
  char hash[17], batch[32], name[64];
  titans_free(s->staged);
  if (!(s->staged = titans_alloc_floats(n)))
    return titans__error(s->error, TITANS_ERR_NOMEM, "stream save: out of memory");
  float *pos = s->staged, *rows = pos + 4, *mem = rows + 5 * B; /* [4], [B, 5], [n_layers, mem_floats] */
  titans__ck_put_u63(pos, (uint64_t)s->position);
  pos[3] = (float)s->ended;
  for (size_t b = 0; b < B; b++) {
    rows[5 * b] = (float)s->fresh[b];
    rows[5 * b + 1] = (float)s->attn_tail_rows[b];
    titans__ck_put_u63(rows + 5 * b + 2, (uint64_t)s->row_position[b]);
  }
  titans__ck_hex64(hash, titans_model_hash(s->model));
  titans__ck_decimal(batch, B);
  int rc = titans__ck_add_common_meta(w, c, "stream", NULL);
  if (!rc) rc = titans_st_writer_add_meta(w, "model_hash", hash);
  if (!rc) rc = titans_st_writer_add_meta(w, "batch", batch);
  shape[0] = 4;
  if (!rc) rc = titans_st_writer_add_f32(w, "stream.position", pos, 1, shape);
  shape[0] = B;
  shape[1] = 5;
  if (!rc) rc = titans_st_writer_add_f32(w, "stream.rows", rows, 2, shape);
  for (int l = 0; s->mem && l < c->n_layers && !rc; l++) {
    titans_mem_state_save(&s->mem[l], mem + (size_t)l * mem_floats);
    titans__ck_stream_mem_name(name, l);
    rc = titans_st_writer_add_f32(w, name, mem + (size_t)l * mem_floats, 1, &mem_floats);
  }
  shape[0] = titans__stream_tail_floats(s);
  if (!rc && shape[0]) rc = titans_st_writer_add_f32(w, "stream.attn_tail", s->attn_tail, 1, shape);
  shape[0] = titans__stream_bank_floats(s);
  if (!rc && shape[0])
    rc = titans_st_writer_add_f32(w, titans__kind_of(c->block)->carry->stream_tensor, s->bank, 1, shape);
  if (rc) return titans__error(s->error, rc, "stream save: %s", w->error);
  return TITANS_OK;
}

/* Checks the file's header and tensor list against the stream before anything is read. */
static int titans__ck_stream_check(titans_stream *s, titans_st_reader *r, char *err) {
  const titans_config *c = &s->model->cfg;
  char mine[1024], theirs[1024], hash[17], batch[32];
  titans_config fcfg;
  size_t mem_floats, B = s->batch;
  int rc = titans__ck_check_header(r, "stream", err);
  if (rc) return rc;
  if ((rc = titans_config_from_json(&fcfg, titans_st_meta(r, "config"), err)) != 0) return rc;
  if (titans_config_to_json(c, mine, sizeof mine) || titans_config_to_json(&fcfg, theirs, sizeof theirs) ||
      strcmp(mine, theirs) != 0)
    return titans__error(err, TITANS_ERR_FORMAT, "the stream belongs to a model of another configuration");
  const char *fhash = titans_st_meta(r, "model_hash"), *fbatch = titans_st_meta(r, "batch");
  titans__ck_hex64(hash, titans_model_hash(s->model));
  if (!fhash || strcmp(fhash, hash) != 0)
    return titans__error(err, TITANS_ERR_FORMAT,
                         "the stream was saved with other weights (model hash %.16s, this model %s)",
                         fhash ? fhash : "missing", hash);
  titans__ck_decimal(batch, B);
  if (!fbatch || strcmp(fbatch, batch) != 0)
    return titans__error(err, TITANS_ERR_FORMAT, "the stream has %.20s rows, this one %zu", fbatch ? fbatch : "no", B);
  size_t want = 2 + (s->mem ? (size_t)c->n_layers : 0) + (s->attn_tail ? 1 : 0) + (s->bank ? 1 : 0);
  const char *own = s->bank ? titans__kind_of(c->block)->carry->stream_tensor : NULL;
  if (r->n_tensors != want)
    return titans__error(err, TITANS_ERR_FORMAT, "the file has %zu tensors, a stream %zu", r->n_tensors, want);
  titans__stream_staged_floats(s, &mem_floats);
  for (size_t i = 0; i < r->n_tensors; i++) {
    const titans_st_tensor *t = titans_st_tensor_at(r, i);
    size_t count = 1;
    for (size_t k = 0; k < t->ndim; k++) count *= t->shape[k];
    size_t expect = !strcmp(t->name, "stream.position")    ? 4
                    : !strcmp(t->name, "stream.rows")      ? 5 * B
                    : !strcmp(t->name, "stream.attn_tail") ? titans__stream_tail_floats(s)
                    : own && !strcmp(t->name, own)         ? titans__stream_bank_floats(s)
                    : !strncmp(t->name, "stream.layers.", 14) ? mem_floats : 0;
    if (t->dtype != TITANS_ST_F32 || expect == 0 || count != expect)
      return titans__error(err, TITANS_ERR_FORMAT, "tensor '%.64s' is not a stream tensor of this model", t->name);
  }
  return TITANS_OK;
}

/* Reads the file into a buffer and checks every value; copies into s only when all is valid. */
static int titans__ck_stream_read(titans_stream *s, titans_st_reader *r, char *err) {
  const titans_config *c = &s->model->cfg;
  size_t mem_floats, n = titans__stream_staged_floats(s, &mem_floats), B = s->batch, shape[2] = {4, 5};
  size_t tail = titans__stream_tail_floats(s), banks = titans__stream_bank_floats(s);
  char name[64];
  int rc = titans__ck_stream_check(s, r, err);
  if (rc) return rc;
  float *buf = titans_alloc_floats(n + tail + banks); /* [staged layout | SWA tails | the kind's carried rows] */
  if (!buf) return titans__error(err, TITANS_ERR_NOMEM, "out of memory");
  float *pos = buf, *rows = pos + 4, *mem = rows + 5 * B;
  rc = titans_st_read_f32(r, "stream.position", pos, 1, shape);
  shape[0] = B;
  if (!rc) rc = titans_st_read_f32(r, "stream.rows", rows, 2, shape);
  for (int l = 0; s->mem && l < c->n_layers && !rc; l++) {
    titans__ck_stream_mem_name(name, l);
    rc = titans_st_read_f32(r, name, mem + (size_t)l * mem_floats, 1, &mem_floats);
  }
  if (!rc && tail) rc = titans_st_read_f32(r, "stream.attn_tail", buf + n, 1, &tail);
  const char *own = banks ? titans__kind_of(c->block)->carry->stream_tensor : NULL;
  if (!rc && banks) rc = titans_st_read_f32(r, own, buf + n + tail, 1, &banks);
  if (rc) titans__error(err, rc, "%s", r->error);
  if (!rc && (titans__ck_get_u63(pos) < 0 || (pos[3] != 0.0f && pos[3] != 1.0f)))
    rc = titans__error(err, TITANS_ERR_FORMAT, "bad stream position");
  for (size_t b = 0; b < B && !rc; b++)
    if ((rows[5 * b] != 0.0f && rows[5 * b] != 1.0f) ||
        !(rows[5 * b + 1] >= 0.0f && rows[5 * b + 1] <= (float)c->window) ||
        rows[5 * b + 1] != floorf(rows[5 * b + 1]) || titans__ck_get_u63(rows + 5 * b + 2) < 0)
      rc = titans__error(err, TITANS_ERR_FORMAT, "bad stream row %zu", b);
  if (!rc && !titans__ck_finite(buf + n, tail))
    rc = titans__error(err, TITANS_ERR_FORMAT, "the SWA tails hold NaN or Inf");
  if (!rc && !titans__ck_finite(buf + n + tail, banks))
    rc = titans__error(err, TITANS_ERR_FORMAT, "tensor '%s' holds NaN or Inf", own);
  /* each memory state loads into a scratch state first, so a bad one changes nothing */
  titans_mem_state probe;
  int have_probe = !rc && s->mem && titans_mem_state_init(&probe, &c->mem, B) == TITANS_OK;
  if (!rc && s->mem && !have_probe) rc = titans__error(err, TITANS_ERR_NOMEM, "out of memory");
  for (int l = 0; have_probe && l < c->n_layers && !rc; l++)
    if (titans_mem_state_load(&probe, mem + (size_t)l * mem_floats, mem_floats))
      rc = titans__error(err, TITANS_ERR_FORMAT, "layer %d: %s", l, probe.error);
  if (have_probe) titans_mem_state_free(&probe);
  if (!rc) {
    for (int l = 0; s->mem && l < c->n_layers; l++)
      titans_mem_state_load(&s->mem[l], mem + (size_t)l * mem_floats, mem_floats);
    if (tail) memcpy(s->attn_tail, buf + n, tail * sizeof(float));
    if (banks) memcpy(s->bank, buf + n + tail, banks * sizeof(float));
    s->position = titans__ck_get_u63(pos);
    s->ended = pos[3] != 0.0f;
    for (size_t b = 0; b < B; b++) {
      s->fresh[b] = (unsigned char)(rows[5 * b] != 0.0f);
      s->attn_tail_rows[b] = (size_t)rows[5 * b + 1];
      s->row_position[b] = titans__ck_get_u63(rows + 5 * b + 2);
    }
  }
  titans_free(buf);
  return rc;
}

TITANSDEF int titans_stream_read(titans_stream *s, titans_st_reader *r) {
  char err[TITANS_ERR_MSG_SIZE];
  int rc = titans__ck_stream_read(s, r, err);
  return rc ? titans__error(s->error, rc, "stream load: %s", err) : TITANS_OK;
}

#ifndef TITANS_NO_STDIO
TITANSDEF int titans_stream_save(titans_stream *s, const char *path) {
  titans_st_writer w;
  titans_st_writer_init(&w);
  int rc = titans_stream_write(s, &w);
  if (!rc && (rc = titans_st_writer_save(&w, path)) != 0) titans__error(s->error, rc, "stream save: %s", w.error);
  titans_st_writer_free(&w);
  return rc;
}

TITANSDEF int titans_stream_load(titans_stream *s, const char *path) {
  titans_st_reader r;
  int rc = titans_st_reader_load(&r, path);
  if (rc) titans__error(s->error, rc, "stream load: %s", r.error);
  else rc = titans_stream_read(s, &r);
  titans_st_reader_free(&r);
  return rc;
}
#endif

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
