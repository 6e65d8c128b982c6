#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <omp.h>
double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((target("avx512f"))) int main(){
  size_t n = (size_t)1<<30; char *a = aligned_alloc(64, n); for (size_t i=0;i<n;i+=4096) a[i]=1;
  for (size_t i=0;i<n;i++) a[i]=(char)i;
  for (int k=0;k<4;k++){
    double t=now(); __m512 acc = _mm512_setzero_ps();
    #pragma omp parallel
    { __m512i s = _mm512_setzero_si512();
      #pragma omp for schedule(static)
      for (size_t i=0;i<n;i+=256){ _mm_prefetch(a+i+4096,_MM_HINT_T0);_mm_prefetch(a+i+4096+64,_MM_HINT_T0);_mm_prefetch(a+i+4096+128,_MM_HINT_T0);_mm_prefetch(a+i+4096+192,_MM_HINT_T0);
        s=_mm512_xor_si512(s,_mm512_load_si512(a+i)); s=_mm512_xor_si512(s,_mm512_load_si512(a+i+64)); s=_mm512_xor_si512(s,_mm512_load_si512(a+i+128)); s=_mm512_xor_si512(s,_mm512_load_si512(a+i+192)); }
      if (_mm512_reduce_add_epi32(s)==12345) printf("x");
    }
    double d=now()-t; printf("threads %d: %.1f GB/s\n", omp_get_max_threads(), n/d/1e9);
  }
}
