/* weights_diff A B: the largest difference between the weights of two model (or trainer) files of the same
   configuration, per tensor relative to that tensor's largest weight in B, and the tensor where it is.
   Prints "weights_diff: max relative R (tensor), max absolute D"; exits 1 when the files cannot be
   compared. Used by tests/test_mpi.sh to compare `mpirun -np N` runs with one process's. */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include <math.h>
#include <stdio.h>

int main(int argc, char **argv) {
  titans_model a, b;
  if (argc != 3) {
    fprintf(stderr, "usage: weights_diff A.safetensors B.safetensors\n");
    return 2;
  }
  if (titans_model_load(&a, argv[1]) != TITANS_OK) { fprintf(stderr, "weights_diff: %s\n", a.error); return 1; }
  if (titans_model_load(&b, argv[2]) != TITANS_OK) { fprintf(stderr, "weights_diff: %s\n", b.error); return 1; }
  if (a.n_floats != b.n_floats || a.n_params != b.n_params) {
    fprintf(stderr, "weights_diff: the files hold different models\n");
    return 1;
  }
  double rel = 0.0, abs_max = 0.0;
  const char *where = "";
  for (size_t p = 0; p < b.n_params; p++) {
    const titans_param *pp = &b.plist[p];
    const float *x = a.params + pp->offset, *y = b.params + pp->offset;
    double scale = 0.0, d = 0.0;
    for (size_t i = 0; i < pp->size; i++) {
      if (fabs((double)y[i]) > scale) scale = fabs((double)y[i]);
      double e = fabs((double)x[i] - (double)y[i]);
      if (!(e <= d)) d = e; /* NaN wins */
    }
    double r = scale > 0 ? d / scale : d;
    if (!(r <= rel)) rel = r, where = pp->name;
    if (!(d <= abs_max)) abs_max = d;
  }
  printf("weights_diff: max relative %.3g (%s), max absolute %.3g\n", rel, where, abs_max);
  titans_model_free(&a);
  titans_model_free(&b);
  return 0;
}
