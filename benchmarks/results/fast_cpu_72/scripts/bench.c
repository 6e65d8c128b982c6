#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
void hf_dynaspec_bf16_rows_dp(const uint16_t *x, const uint16_t *w, float *y, int64_t rows, int64_t out_features, int64_t in_features);
void hf_dynaspec_bf16_rows(const float *x, const uint16_t *w, float *y, int64_t rows, int64_t out_features, int64_t in_features);
double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char **argv){
  int64_t O = 151936, I = 896;
  uint16_t *w = aligned_alloc(64, O*I*2); for (int64_t i=0;i<O*I;i++) w[i]=0x3f80 ^ (i & 0x7f);
  uint16_t *x = aligned_alloc(64, 16*I*2); for (int i=0;i<16*I;i++) x[i]=0x3f80;
  float *xf = aligned_alloc(64, 16*I*4); for (int i=0;i<16*I;i++) xf[i]=1.0f;
  float *y = aligned_alloc(64, 16*O*4);
  for (int R = 1; R <= 17; R++) {
    double best=1e9, bestf=1e9;
    for (int k=0;k<5;k++){double t=now(); hf_dynaspec_bf16_rows_dp(x,w,y,R,O,I); t=now()-t; if(t<best)best=t;
      t=now(); hf_dynaspec_bf16_rows(xf,w,y,R,O,I); t=now()-t; if(t<bestf)bestf=t;}
    printf("R=%d dp %.1f ms  avx2 %.1f ms\n", R, best*1e3, bestf*1e3);
  }
}
