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

/* RMSNorm per row (SPEC 0): out = inp * rstd * gain, rstd = 1 / sqrt(mean(inp^2) + 1e-6).
   out, inp [rows, cols]; gain [cols]; rstd [rows] is saved for the backward. out may alias inp. */
TITANSDEF void titans_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *gain, size_t rows,
                                      size_t cols);
/* dinp [rows, cols] += ..., dgain [cols] += ... (dgain may be NULL: gain frozen); dout, inp [rows, cols];
   gain [cols]; rstd [rows] from the forward. */
TITANSDEF void titans_rmsnorm_backward(float *dinp, float *dgain, const float *dout, const float *inp,
                                       const float *gain, const float *rstd, size_t rows, size_t cols);

/* L2Norm per row (SPEC 0): out = inp * rnorm, rnorm = 1 / sqrt(sum(inp^2) + 1e-6).
   out, inp [rows, cols]; rnorm [rows] is saved for the backward. out may alias inp. */
TITANSDEF void titans_l2norm_forward(float *out, float *rnorm, const float *inp, size_t rows, size_t cols);
/* dinp [rows, cols] += ...; dout, inp [rows, cols]; rnorm [rows]. */
TITANSDEF void titans_l2norm_backward(float *dinp, const float *dout, const float *inp, const float *rnorm,
                                      size_t rows, size_t cols);

/* Causal depthwise conv (SPEC 0): out_t[j] = sum_{s<K} weight[j, s] * u_{t-K+1+s}[j] over the sequence
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

/* One AdamW step with decoupled weight decay over param, grad, m, v [n]; step counts from 1 (bias
   correction; a step < 1 counts as 1):
     m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
     param -= lr * ( (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps) + weight_decay * param ) */
TITANSDEF void titans_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                                   float beta1, float beta2, float eps, float weight_decay, long step);
