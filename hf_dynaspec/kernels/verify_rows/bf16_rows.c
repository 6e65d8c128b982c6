/* A few rows times a bf16 weight matrix, reading the weight once: the verification pass on AVX2 CPUs.
 *
 * y[r, o] = sum_i x[r, i] * w[o, i]   x: float32 [R, I], w: bfloat16 [O, I] (as uint16), y: float32 [R, O]
 *
 * PyTorch on AVX2-only CPUs (no AVX-512 BF16 / AMX) multiplies a bf16 matrix by R > 1 rows one row at a
 * time, so verifying k draft tokens costs about k one-token steps. Decoding is memory-bound: this kernel
 * streams each weight row once, widens it to float32 in registers and accumulates it against up to eight
 * input rows at a time (fused multiply-add, float32 accumulation, like PyTorch's bf16 kernels). The caller
 * rounds y to bf16. Built and loaded by hf_dynaspec/kernels/cpu_rows.py; OpenMP splits the output rows
 * over the threads of the OpenMP runtime PyTorch already loaded.
 */
#include <immintrin.h>
#include <stdint.h>

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

/* One weight row against N (1..8) input rows; the compiler specialises each N. Eight float32
 * accumulators, the weight vector and an input vector fit AVX2's sixteen registers. */
#define DEFINE_DOT(N)                                                                                      \
    static inline void dot_rows_##N(const float *x, int64_t in, const uint16_t *w_row, float *out,       \
                                    int64_t out_stride) {                                                   \
        __m256 acc[N];                                                                                     \
        for (int r = 0; r < N; r++) acc[r] = _mm256_setzero_ps();                                          \
        int64_t i = 0;                                                                                     \
        for (; i + 8 <= in; i += 8) {                                                                      \
            __m256 w = load_bf16x8(w_row + i);                                                             \
            for (int r = 0; r < N; r++) acc[r] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + r * in + i), acc[r]); \
        }                                                                                                  \
        for (int r = 0; r < N; r++) {                                                                      \
            float sum = horizontal_sum(acc[r]);                                                            \
            for (int64_t j = i; j < in; j++) sum += x[r * in + j] * bf16_to_float(w_row[j]);              \
            out[r * out_stride] = sum;                                                                     \
        }                                                                                                  \
    }
DEFINE_DOT(1)
DEFINE_DOT(2)
DEFINE_DOT(3)
DEFINE_DOT(4)
DEFINE_DOT(5)
DEFINE_DOT(6)
DEFINE_DOT(7)
DEFINE_DOT(8)

/* One weight row against n (1..8) input rows: the specialised product for n. */
static inline void dot_rows(int64_t n, const float *x, int64_t in, const uint16_t *w_row, float *out, int64_t stride) {
    switch (n) {
        case 8: dot_rows_8(x, in, w_row, out, stride); break;
        case 7: dot_rows_7(x, in, w_row, out, stride); break;
        case 6: dot_rows_6(x, in, w_row, out, stride); break;
        case 5: dot_rows_5(x, in, w_row, out, stride); break;
        case 4: dot_rows_4(x, in, w_row, out, stride); break;
        case 3: dot_rows_3(x, in, w_row, out, stride); break;
        case 2: dot_rows_2(x, in, w_row, out, stride); break;
        default: dot_rows_1(x, in, w_row, out, stride); break;
    }
}

int hf_dynaspec_has_avx2_fma(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* Weight rows per tile: a tile (16-40 KB at the hidden sizes of 0.5-1.5B models) stays in L1/L2 while every
 * block of eight input rows passes over it, so long inputs (prefill) do not re-stream the input per weight row. */
#define TILE 16

void hf_dynaspec_bf16_rows(const float *x, const uint16_t *w, float *y, int64_t rows, int64_t out_features,
                           int64_t in_features) {
    int64_t tiles = (out_features + TILE - 1) / TILE;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t o_end = (t + 1) * TILE < out_features ? (t + 1) * TILE : out_features;
        for (int64_t r = 0; r < rows; r += 8) {
            const float *xr = x + r * in_features;
            int64_t n = rows - r >= 8 ? 8 : rows - r;
            for (int64_t o = t * TILE; o < o_end; o++) {
                const uint16_t *w_row = w + o * in_features;
                float *yr = y + r * out_features + o;
                dot_rows(n, xr, in_features, w_row, yr, out_features);
            }
        }
    }
}

/* The shortlisted LM head on CPU: the same products over the rows of a few blocks of a bf16 weight (the clusters
 * a router chose, contiguous in a cluster-permuted head), in one call and one parallel region. Output column c
 * reads weight row starts[b] + (c - out_offsets[b]) for the block b with out_offsets[b] <= c < out_offsets[b+1].
 * One call instead of one BLAS call per block: at V/8 (30-40 blocks) the per-call overhead of a native bf16
 * matmul is as large as the streaming itself. */
void hf_dynaspec_bf16_blocks(const float *x, const uint16_t *w, float *y, int64_t rows, int64_t in_features,
                             const int64_t *starts, const int64_t *out_offsets, int64_t blocks) {
    int64_t out_features = out_offsets[blocks];
    int64_t tiles = (out_features + TILE - 1) / TILE;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t c = t * TILE;
        int64_t c_end = c + TILE < out_features ? c + TILE : out_features;
        int64_t lo = 0, hi = blocks - 1; /* the block holding column c: last b with out_offsets[b] <= c */
        while (lo < hi) {
            int64_t mid = (lo + hi + 1) / 2;
            if (out_offsets[mid] <= c) lo = mid; else hi = mid - 1;
        }
        int64_t b = lo;
        for (; c < c_end; c++) {
            while (c >= out_offsets[b + 1]) b++;
            const uint16_t *w_row = w + (starts[b] + c - out_offsets[b]) * in_features;
            for (int64_t r = 0; r < rows; r += 8) {
                const float *xr = x + r * in_features;
                float *yr = y + r * out_features + c;
                dot_rows(rows - r >= 8 ? 8 : rows - r, xr, in_features, w_row, yr, out_features);
            }
        }
    }
}
