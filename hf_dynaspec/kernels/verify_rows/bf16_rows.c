/* A few token rows times a weight matrix, reading the weight once: the CPU's one-token steps and verification.
 *
 * y[r, o] = sum_i x[r, i] * w[o, i]   w: [O, I] bfloat16 (as uint16) or float32, y: float32 [R, O]
 *
 * Decoding is memory-bound: each kernel streams each weight row once and accumulates it against up to eight
 * input rows at a time in float32, so k rows cost about the weight's bytes, like one row. Three forms:
 * - AVX2/FMA, bf16 weight, float32 x: widens the weight to float32 in registers (CPUs without native bf16, where
 *   PyTorch multiplies a bf16 matrix by k rows one row at a time);
 * - AVX-512 BF16, bf16 weight, bf16 x: `vdpbf16ps` multiplies pairs of bf16 exactly and adds them into float32
 *   (oneDNN's bf16 path costs ~2x the memory bound at one row, PyTorch's own ~2.5x at 5-9 rows);
 * - float32 weight (AVX-512F, else AVX2/FMA): MKL's small-M path costs verify(2) ~2x verify(1).
 * The caller rounds y to the model's dtype. Built and loaded by loader.py; OpenMP splits the output rows over
 * the threads of the OpenMP runtime PyTorch already loaded.
 */
#include <immintrin.h>
#include <stdint.h>

/* Software prefetch this many weight elements ahead of the row being read (8 KB of bf16, 16 KB of float32): with
 * several input rows per weight vector the loop issues too few loads for the hardware prefetcher alone to keep a
 * core's memory requests in flight (measured: eight rows at 4 GB/s per core without, 8 with). Rows of a tile are
 * contiguous, so the address is usually the next rows'; a prefetch past the end of the weight is harmless. */
#define PREFETCH 4096

static inline __m256 load_bf16x8(const uint16_t *p) {
    __m128i half = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

static inline float bf16_to_float(uint16_t v) {
    union { uint32_t u; float f; } bits = { (uint32_t)v << 16 };
    return bits.f;
}

static inline float horizontal_sum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One weight row against N (1..8) input rows on AVX2/FMA; the compiler specialises each N. Eight float32
 * accumulators, the weight vector and an input vector fit AVX2's sixteen registers. W_T is the weight's element
 * type, LOAD8 widens eight of them to float32, SCALAR one (the row's tail). */
#define DEFINE_DOT_AVX2(NAME, N, W_T, LOAD8, SCALAR)                                                       \
    static inline void NAME##_##N(const float *x, int64_t in, const W_T *w_row, float *out,                \
                                  int64_t out_stride) {                                                     \
        __m256 acc[N];                                                                                     \
        for (int r = 0; r < N; r++) acc[r] = _mm256_setzero_ps();                                          \
        int64_t i = 0;                                                                                     \
        for (; i + 8 <= in; i += 8) {                                                                      \
            _mm_prefetch((const char *)(w_row + i + PREFETCH), _MM_HINT_T0);                               \
            __m256 w = LOAD8(w_row + i);                                                                   \
            for (int r = 0; r < N; r++) acc[r] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + r * in + i), acc[r]); \
        }                                                                                                  \
        for (int r = 0; r < N; r++) {                                                                      \
            float sum = horizontal_sum(acc[r]);                                                            \
            for (int64_t j = i; j < in; j++) sum += x[r * in + j] * SCALAR(w_row[j]);                     \
            out[r * out_stride] = sum;                                                                     \
        }                                                                                                  \
    }
#define AS_FLOAT(v) (v)
#define DEFINE_DOT(N) DEFINE_DOT_AVX2(dot_rows, N, uint16_t, load_bf16x8, bf16_to_float)
#define DEFINE_DOT_F32_AVX2(N) DEFINE_DOT_AVX2(dot_f32avx2, N, float, _mm256_loadu_ps, AS_FLOAT)
DEFINE_DOT(1)
DEFINE_DOT(2)
DEFINE_DOT(3)
DEFINE_DOT(4)
DEFINE_DOT(5)
DEFINE_DOT(6)
DEFINE_DOT(7)
DEFINE_DOT(8)

/* The AVX-512 forms: compiled for their instruction sets whatever the file's flags, called only where the CPU has
 * them (checked at run time by the exported has_* functions). Masked loads take the tail of a row. */
#define AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define AVX512_F __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))


/* bf16 x bf16 pairs into float32: thirty-two weights per load, one accumulator per input row. */
#define DEFINE_DOT_DP(N)                                                                                   \
    AVX512_BF16 static inline void dot_dp_##N(const uint16_t *x, int64_t in, const uint16_t *w_row,         \
                                              float *out, int64_t out_stride) {                              \
        __m512 acc[N];                                                                                     \
        _Pragma("GCC unroll 16") for (int r = 0; r < N; r++) acc[r] = _mm512_setzero_ps();                  \
        int64_t i = 0;                                                                                     \
        for (; i + 32 <= in; i += 32) {                                                                    \
            _mm_prefetch((const char *)(w_row + i + PREFETCH), _MM_HINT_T0);                               \
            __m512bh w = (__m512bh)_mm512_loadu_si512(w_row + i);                                          \
            _Pragma("GCC unroll 16") for (int r = 0; r < N; r++)                                            \
                acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_loadu_si512(x + r * in + i), w);        \
        }                                                                                                  \
        if (i < in) {                                                                                      \
            __mmask32 m = (__mmask32)((1u << (in - i)) - 1u);                                              \
            __m512bh w = (__m512bh)_mm512_maskz_loadu_epi16(m, w_row + i);                                 \
            _Pragma("GCC unroll 16") for (int r = 0; r < N; r++)                                            \
                acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_maskz_loadu_epi16(m, x + r * in + i), w); \
        }                                                                                                  \
        _Pragma("GCC unroll 16") for (int r = 0; r < N; r++) out[r * out_stride] = _mm512_reduce_add_ps(acc[r]); \
    }

/* float32 weights, sixteen per load. */
#define DEFINE_DOT_F32(N)                                                                                  \
    AVX512_F static inline void dot_f32_##N(const float *x, int64_t in, const float *w_row, float *out,    \
                                            int64_t out_stride) {                                           \
        __m512 acc[N];                                                                                     \
        _Pragma("GCC unroll 16") for (int r = 0; r < N; r++) acc[r] = _mm512_setzero_ps();                 \
        int64_t i = 0;                                                                                     \
        for (; i + 16 <= in; i += 16) {                                                                    \
            _mm_prefetch((const char *)(w_row + i + PREFETCH), _MM_HINT_T0);                               \
            __m512 w = _mm512_loadu_ps(w_row + i);                                                         \
            _Pragma("GCC unroll 16") for (int r = 0; r < N; r++)                                           \
                acc[r] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + r * in + i), acc[r]);                      \
        }                                                                                                  \
        if (i < in) {                                                                                      \
            __mmask16 m = (__mmask16)((1u << (in - i)) - 1u);                                              \
            __m512 w = _mm512_maskz_loadu_ps(m, w_row + i);                                                \
            _Pragma("GCC unroll 16") for (int r = 0; r < N; r++)                                           \
                acc[r] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m, x + r * in + i), acc[r]);             \
        }                                                                                                  \
        _Pragma("GCC unroll 16") for (int r = 0; r < N; r++) out[r * out_stride] = _mm512_reduce_add_ps(acc[r]); \
    }

#define FOR_EACH_N(DEFINE) DEFINE(1) DEFINE(2) DEFINE(3) DEFINE(4) DEFINE(5) DEFINE(6) DEFINE(7) DEFINE(8)
#define FOR_EACH_WIDE_N(DEFINE) DEFINE(9) DEFINE(10) DEFINE(11) DEFINE(12) DEFINE(13) DEFINE(14) DEFINE(15) DEFINE(16)
/* AVX-512's 32 registers hold sixteen accumulators, the weight and an input vector: the AVX-512 forms take up to
 * sixteen rows per pass over a weight row (a 9-17-token verification in one or two passes, not two or three). */
FOR_EACH_N(DEFINE_DOT_DP)
FOR_EACH_WIDE_N(DEFINE_DOT_DP)
FOR_EACH_N(DEFINE_DOT_F32)
FOR_EACH_WIDE_N(DEFINE_DOT_F32)
FOR_EACH_N(DEFINE_DOT_F32_AVX2)

/* One weight row against n (1..8, or 1..16 for the wide forms) input rows: the specialised product for n. */
#define CASE(NAME, N) case N: NAME##_##N(x, in, w_row, out, stride); break;
#define DEFINE_DISPATCH(NAME, ATTRIBUTES, X_T, W_T)                                                        \
    ATTRIBUTES static inline void NAME(int64_t n, const X_T *x, int64_t in, const W_T *w_row, float *out,  \
                                       int64_t stride) {                                                    \
        switch (n) {                                                                                       \
            CASE(NAME, 8) CASE(NAME, 7) CASE(NAME, 6) CASE(NAME, 5) CASE(NAME, 4) CASE(NAME, 3) CASE(NAME, 2) \
            default: NAME##_1(x, in, w_row, out, stride); break;                                           \
        }                                                                                                  \
    }
#define DEFINE_WIDE_DISPATCH(NAME, ATTRIBUTES, X_T, W_T)                                                   \
    ATTRIBUTES static inline void NAME(int64_t n, const X_T *x, int64_t in, const W_T *w_row, float *out,  \
                                       int64_t stride) {                                                    \
        switch (n) {                                                                                       \
            CASE(NAME, 16) CASE(NAME, 15) CASE(NAME, 14) CASE(NAME, 13) CASE(NAME, 12) CASE(NAME, 11)      \
            CASE(NAME, 10) CASE(NAME, 9) CASE(NAME, 8) CASE(NAME, 7) CASE(NAME, 6) CASE(NAME, 5)           \
            CASE(NAME, 4) CASE(NAME, 3) CASE(NAME, 2)                                                      \
            default: NAME##_1(x, in, w_row, out, stride); break;                                           \
        }                                                                                                  \
    }
DEFINE_DISPATCH(dot_rows, , float, uint16_t)
DEFINE_WIDE_DISPATCH(dot_dp, AVX512_BF16, uint16_t, uint16_t)
DEFINE_WIDE_DISPATCH(dot_f32, AVX512_F, float, float)
DEFINE_DISPATCH(dot_f32avx2, , float, float)

int hf_dynaspec_has_avx2_fma(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int hf_dynaspec_has_avx512_bf16(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
}

int hf_dynaspec_has_avx512f(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

/* Weight rows per tile: a tile (16-40 KB at the hidden sizes of 0.5-1.5B models) stays in L1/L2 while every
 * block of eight input rows passes over it, so long inputs (prefill) do not re-stream the input per weight row. */
#define TILE 16

#define DEFINE_ROWS(NAME, ATTRIBUTES, DOT, X_T, W_T, BLOCK)                                                        \
    ATTRIBUTES void NAME(const X_T *x, const W_T *w, float *y, int64_t rows, int64_t out_features,         \
                         int64_t in_features) {                                                             \
        int64_t tiles = (out_features + TILE - 1) / TILE;                                                  \
        _Pragma("omp parallel for schedule(static)")                                                       \
        for (int64_t t = 0; t < tiles; t++) {                                                              \
            int64_t o_end = (t + 1) * TILE < out_features ? (t + 1) * TILE : out_features;                 \
            for (int64_t r = 0; r < rows; r += BLOCK) {                                                    \
                const X_T *xr = x + r * in_features;                                                       \
                int64_t n = rows - r >= BLOCK ? BLOCK : rows - r;                                          \
                for (int64_t o = t * TILE; o < o_end; o++)                                                 \
                    DOT(n, xr, in_features, w + o * in_features, y + r * out_features + o, out_features);  \
            }                                                                                              \
        }                                                                                                  \
    }
DEFINE_ROWS(hf_dynaspec_bf16_rows, , dot_rows, float, uint16_t, 8)
DEFINE_ROWS(hf_dynaspec_bf16_rows_dp, AVX512_BF16, dot_dp, uint16_t, uint16_t, 16)
DEFINE_ROWS(hf_dynaspec_f32_rows_avx512, AVX512_F, dot_f32, float, float, 16)
DEFINE_ROWS(hf_dynaspec_f32_rows, , dot_f32avx2, float, float, 8)

/* The shortlisted LM head on CPU: the same products over the rows of a few blocks of a bf16 weight (the clusters
 * a router chose, contiguous in a cluster-permuted head), in one call and one parallel region. Output column c
 * reads weight row starts[b] + (c - out_offsets[b]) for the block b with out_offsets[b] <= c < out_offsets[b+1].
 * One call instead of one BLAS call per block: at V/8 (30-40 blocks) the per-call overhead of a native bf16
 * matmul is as large as the streaming itself. */
#define DEFINE_BLOCKS(NAME, ATTRIBUTES, DOT, X_T, BLOCK)                                                           \
    ATTRIBUTES void NAME(const X_T *x, const uint16_t *w, float *y, int64_t rows, int64_t in_features,     \
                         const int64_t *starts, const int64_t *out_offsets, int64_t blocks) {              \
        int64_t out_features = out_offsets[blocks];                                                        \
        int64_t tiles = (out_features + TILE - 1) / TILE;                                                  \
        _Pragma("omp parallel for schedule(static)")                                                       \
        for (int64_t t = 0; t < tiles; t++) {                                                              \
            int64_t c = t * TILE;                                                                          \
            int64_t c_end = c + TILE < out_features ? c + TILE : out_features;                             \
            int64_t lo = 0, hi = blocks - 1; /* the block holding column c: last b with out_offsets[b] <= c */ \
            while (lo < hi) {                                                                              \
                int64_t mid = (lo + hi + 1) / 2;                                                           \
                if (out_offsets[mid] <= c) lo = mid; else hi = mid - 1;                                    \
            }                                                                                              \
            int64_t b = lo;                                                                                \
            for (; c < c_end; c++) {                                                                       \
                while (c >= out_offsets[b + 1]) b++;                                                       \
                const uint16_t *w_row = w + (starts[b] + c - out_offsets[b]) * in_features;                \
                for (int64_t r = 0; r < rows; r += BLOCK)                                                  \
                    DOT(rows - r >= BLOCK ? BLOCK : rows - r, x + r * in_features, in_features, w_row,    \
                        y + r * out_features + c, out_features);                                           \
            }                                                                                              \
        }                                                                                                  \
    }
DEFINE_BLOCKS(hf_dynaspec_bf16_blocks, , dot_rows, float, 8)
DEFINE_BLOCKS(hf_dynaspec_bf16_blocks_dp, AVX512_BF16, dot_dp, uint16_t, 16)
