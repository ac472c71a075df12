/* C probes of the memory ceiling at the access patterns of infiniop's elementwise rows
 * (benchmarks/bench_elementwise_probe.py builds and calls them): AVX-512, non-temporal 64-byte
 * stores, OpenMP over the calling process's threads; on CPUs without AVX-512 (or AVX512_BF16)
 * probe_simd.h turns each 16-lane operation into two AVX2 ones. Not part of the package.
 *
 *   gcc -O3 -march=native -Wno-psabi -fopenmp -shared -fPIC probe_elementwise.c -o probe.so
 *
 * Every function assumes 64-byte aligned outputs, n a multiple of 64 elements (rows of the 2-D
 * cases a multiple of 64 elements) and returns after an sfence on each thread. The values are
 * the operator's (checked bit for bit against infiniop's by the bench runner), so the probe moves
 * the same bytes with the same instructions a hand-written kernel would use.
 */
#include <immintrin.h>
#include "probe_simd.h" /* the same probes on CPUs without AVX-512 (AVX2 pairs) */
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <omp.h>

#define BLOCK 16384 /* elements per OpenMP chunk */

void sub_f32(float *restrict c, const float *restrict a, const float *restrict b_, long n) {
#pragma omp parallel for schedule(static)
    for (long b = 0; b < n; b += BLOCK) {
        long e = b + BLOCK < n ? b + BLOCK : n;
        for (long i = b; i < e; i += 16)
            _mm512_stream_ps(c + i, _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b_ + i)));
        _mm_sfence();
    }
}

/* f16: vcvtph2ps, f32 subtract, vcvtps2ph (round to nearest even): 32 results per line */
void sub_f16(uint16_t *restrict c, const uint16_t *restrict a, const uint16_t *restrict b_, long n) {
#pragma omp parallel for schedule(static)
    for (long b = 0; b < n; b += BLOCK) {
        long e = b + BLOCK < n ? b + BLOCK : n;
        for (long i = b; i < e; i += 32) {
            __m512 x0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i)));
            __m512 y0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b_ + i)));
            __m512 x1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i + 16)));
            __m512 y1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b_ + i + 16)));
            __m256i r0 = _mm512_cvtps_ph(_mm512_sub_ps(x0, y0), _MM_FROUND_TO_NEAREST_INT);
            __m256i r1 = _mm512_cvtps_ph(_mm512_sub_ps(x1, y1), _MM_FROUND_TO_NEAREST_INT);
            _mm512_stream_si512((void *)(c + i),
                                _mm512_inserti64x4(_mm512_castsi256_si512(r0), r1, 1));
        }
        _mm_sfence();
    }
}

static inline __m512 bf16_lo(__m512i v) { /* elements 0..15 of 32 bf16 -> f32 */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16));
}
static inline __m512 bf16_hi(__m512i v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16));
}

/* bf16: widen by shifting, f32 subtract, vcvtne2ps2bf16 (round to nearest even; unlike infiniop
 * it flushes subnormal differences to zero, which the benchmark's data never produces) */
void sub_bf16(uint16_t *restrict c, const uint16_t *restrict a, const uint16_t *restrict b_, long n) {
#pragma omp parallel for schedule(static)
    for (long b = 0; b < n; b += BLOCK) {
        long e = b + BLOCK < n ? b + BLOCK : n;
        for (long i = b; i < e; i += 32) {
            __m512i x = _mm512_loadu_si512(a + i), y = _mm512_loadu_si512(b_ + i);
            __m512 lo = _mm512_sub_ps(bf16_lo(x), bf16_lo(y));
            __m512 hi = _mm512_sub_ps(bf16_hi(x), bf16_hi(y));
            _mm512_stream_si512((void *)(c + i), probe_cvtne2ps_bf16(hi, lo));
        }
        _mm_sfence();
    }
}

/* clip with scalar bounds; a NaN x stays NaN as in infiniop (vmaxps/vminps return the second
 * operand when either is NaN) */
void clip_f32(float *restrict c, const float *restrict a, float lo, float hi, long n) {
    __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
#pragma omp parallel for schedule(static)
    for (long b = 0; b < n; b += BLOCK) {
        long e = b + BLOCK < n ? b + BLOCK : n;
        for (long i = b; i < e; i += 16) {
            __m512 x = _mm512_loadu_ps(a + i);
            _mm512_stream_ps(c + i, _mm512_min_ps(vhi, _mm512_max_ps(vlo, x)));
        }
        _mm_sfence();
    }
}

/* c[r, :] = a[r, :] - b[r] */
void sub_rowbcast_f32(float *restrict c, const float *restrict a, const float *restrict b_, long rows,
                      long cols) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        __m512 y = _mm512_set1_ps(b_[r]);
        for (long i = 0; i < cols; i += 16)
            _mm512_stream_ps(c + r * cols + i, _mm512_sub_ps(_mm512_loadu_ps(a + r * cols + i), y));
        _mm_sfence();
    }
}

/* 16x16 float32 transpose in registers: in-lane 4x4 transposes (unpack, shuffle), then a 4x4
 * transpose of the 128-bit blocks (two rounds of shuffle_f32x4) */
static inline void tr16(__m512 *r) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* u[4g + j], lane L: rows 4g..4g+3 of column 4L + j */
    for (int g = 0; g < 4; g++) {
        u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        __m512 a0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
        __m512 a1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
        __m512 a2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        __m512 a3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
        r[j] = _mm512_shuffle_f32x4(a0, a2, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(a0, a2, 0xDD);
        r[4 + j] = _mm512_shuffle_f32x4(a1, a3, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(a1, a3, 0xDD);
    }
}

/* c[r, k] = at[k, r] - b[r, k]: at is (cols, rows) row-major (c = at.T - b). A task is a block
 * of 512 rows x 64 columns of c: at's block is transposed in 16x16 register tiles into an L2
 * scratch (at read along its rows in 2 KiB runs, prefetched into L2 512 bytes ahead), then c's
 * rows are computed from it and b in 256-byte runs with streaming stores. The fastest of eight
 * C variants on an AMD EPYC (Zen 4), 2026-11-27, one process (4096^2, ms): staged 512 x 64
 * 10.8, 1024 x 64 11.1, 64 x 256 11.4, 256 x 128 12.1, 32 x 1024 14.7; unstaged strips of 32
 * rows of c along k 17.8, of 32 rows of at along r 16.8-16.9 (with or without prefetch);
 * infiniop 9.8. Every extent a multiple of the block. */
void sub_transposed_f32(float *restrict c, const float *restrict at, const float *restrict b_,
                        long rows, long cols) {
    const long br = 512, bk = 64, nbr = rows / br, nbk = cols / bk;
#pragma omp parallel
    {
        float *sc = _mm_malloc(br * bk * sizeof(float), 64);
#pragma omp for schedule(static)
        for (long t = 0; t < nbr * nbk; t++) {
            long r0 = (t / nbk) * br, k0 = (t % nbk) * bk;
            for (long k = k0; k < k0 + bk; k += 16)
                for (long r = r0; r < r0 + br; r += 16) {
                    __m512 v[16];
                    for (int i = 0; i < 16; i++) {
                        v[i] = _mm512_loadu_ps(at + (k + i) * rows + r);
                        _mm_prefetch((const char *)(at + (k + i) * rows + r) + 512, _MM_HINT_T1);
                    }
                    tr16(v);
                    for (int i = 0; i < 16; i++) _mm512_store_ps(sc + (r - r0 + i) * bk + (k - k0), v[i]);
                }
            for (long r = r0; r < r0 + br; r++)
                for (long k = 0; k < bk; k += 16)
                    _mm512_stream_ps(c + r * cols + k0 + k,
                                     _mm512_sub_ps(_mm512_load_ps(sc + (r - r0) * bk + k),
                                                   _mm512_loadu_ps(b_ + r * cols + k0 + k)));
        }
        _mm_sfence();
        _mm_free(sc);
    }
}

/* rearrange's float32 transpose: dst (cols x rows) = src (rows x cols).T. A task is a strip of 32
 * source rows walked along its columns, 16 columns at a time (two 16x16 tiles, one under the
 * other: each destination row receives two lines back to back), each source row prefetched into
 * L2 512 bytes ahead. The fastest of 24 tilings x orders x prefetch distances swept on an AMD
 * EPYC (Zen 4) in one process: 89-98% of a copy. */
void transpose_f32(float *restrict dst, const float *restrict src, long rows, long cols) {
#pragma omp parallel for schedule(static)
    for (long r0 = 0; r0 < rows; r0 += 32) {
        for (long c0 = 0; c0 < cols; c0 += 16)
            for (long r = r0; r < r0 + 32; r += 16) {
                __m512 v[16];
                for (int k = 0; k < 16; k++) {
                    v[k] = _mm512_loadu_ps(src + (r + k) * cols + c0);
                    _mm_prefetch((const char *)(src + (r + k) * cols + c0) + 512, _MM_HINT_T1);
                }
                tr16(v);
                for (int i = 0; i < 16; i++) _mm512_stream_ps(dst + (c0 + i) * rows + r, v[i]);
            }
        _mm_sfence();
    }
}

/* The row probes below (rms_norm, softmax) in float32 (dt 0), fp16 (1) and bf16 (2): 16
 * elements loaded as float32, and 32 results stored with one streaming 64-byte store (fp16 by
 * vcvtps2ph, exact; bf16 rounded as infiniop rounds, or with hw by vcvtne2ps2bf16, which flushes
 * subnormal results to zero: not a rounding infiniop may use, it shows the price of exact
 * rounding on this CPU). */
static inline __m512 row_load(const void *p, long i, int dt) {
    if (dt == 0) return _mm512_loadu_ps((const float *)p + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    if (dt == 1) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* float32 -> bfloat16 bits, round to nearest even in integer operations (subnormals kept, NaN
 * quietened), as infiniop rounds: 16 results in the low halves of 32-bit lanes */
static inline __m256i bf16_round(__m512 f) {
    __m512i b = _mm512_castps_si512(f);
    __m512i hi = _mm512_srli_epi32(b, 16);
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40))));
}

static inline void row_store32(void *y, long i, __m512 a, __m512 b, int dt, int hw) {
    if (dt == 0) {
        _mm512_stream_ps((float *)y + i, a);
        _mm512_stream_ps((float *)y + i + 16, b);
        return;
    }
    __m512i out;
    if (dt == 1)
        out = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)),
                                 _mm512_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT), 1);
    else if (hw)
        out = probe_cvtne2ps_bf16(b, a);
    else
        out = _mm512_inserti64x4(_mm512_castsi256_si512(bf16_round(a)), bf16_round(b), 1);
    _mm512_stream_si512((void *)((uint16_t *)y + i), out);
}

/* rms_norm rows, y = x * (1 / sqrt(mean(x^2) + eps)) * w in float32, rounded once: a row's sum
 * of squares in four 16-lane registers (x read from memory), then the row again (from L1) with
 * streaming stores. Every row a multiple of 64 elements. */
static inline void rms_norm_t(void *y, const void *x, const void *w, long rows, long n, float eps,
                              int dt, int hw) {
    long isz = dt ? 2 : 4;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const char *xr = (const char *)x + r * n * isz;
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (long i = 0; i < n; i += 64)
            for (int k = 0; k < 4; k++) {
                __m512 f = row_load(xr, i + 16 * k, dt);
                a[k] = _mm512_fmadd_ps(f, f, a[k]);
            }
        float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
        __m512 rs = _mm512_set1_ps(1.0f / sqrtf(s / n + eps));
        for (long i = 0; i < n; i += 32)
            row_store32((char *)y + r * n * isz, i,
                        _mm512_mul_ps(_mm512_mul_ps(row_load(xr, i, dt), rs), row_load(w, i, dt)),
                        _mm512_mul_ps(_mm512_mul_ps(row_load(xr, i + 16, dt), rs), row_load(w, i + 16, dt)),
                        dt, hw);
    }
    _mm_sfence();
}

void rms_norm_f32(float *y, const float *x, const float *w, long rows, long n, float eps) {
    rms_norm_t(y, x, w, rows, n, eps, 0, 0);
}
void rms_norm_f16(uint16_t *y, const uint16_t *x, const uint16_t *w, long rows, long n, float eps) {
    rms_norm_t(y, x, w, rows, n, eps, 1, 0);
}
void rms_norm_bf16(uint16_t *y, const uint16_t *x, const uint16_t *w, long rows, long n, float eps,
                   int hw) {
    rms_norm_t(y, x, w, rows, n, eps, 2, hw);
}

/* infiniop's exp_nonpositive_scaled (softmax's exp: exp(d) 2^64, the scale cancels in e / sum),
 * same operations */
static inline __m512 expnp(__m512 d) {
    d = _mm512_max_ps(d, _mm512_set1_ps(-104.0f)); d = _mm512_min_ps(d, _mm512_setzero_ps());
    __m512 k = _mm512_fmadd_ps(d, _mm512_set1_ps(1.4426950216293335f), _mm512_set1_ps(12582912.0f));
    __m512 kf = _mm512_sub_ps(k, _mm512_set1_ps(12582912.0f));
    __m512 r = _mm512_fmadd_ps(kf, _mm512_set1_ps(-0.6931471824645996f), d);
    r = _mm512_fmadd_ps(kf, _mm512_set1_ps(1.9046542121259336e-09f), r);
    __m512 r2 = _mm512_mul_ps(r, r), rh = _mm512_mul_ps(r, _mm512_set1_ps(0.5f));
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0.00039893644861876965f), r, _mm512_set1_ps(0.002787017496302724f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.016666410490870476f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.08333292603492737f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.3333333432674408f));
    p = _mm512_fmadd_ps(rh, p, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(r2, p, r);
    __m512 s = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(_mm512_castps_si512(k), 23), _mm512_set1_epi32(1602224128)));
    return _mm512_fmadd_ps(p, s, s);
}
/* the same for fp16/bf16 results (mathlib._exp_nonpositive_half, the same operations): the
 * degree-5 polynomial; fp16 (f16 = 1): one-step reduction, limited at -87, unscaled */
static inline __m512 expnp_half(__m512 d, int f16) {
    d = _mm512_max_ps(d, _mm512_set1_ps(f16 ? -87.0f : -104.0f)); d = _mm512_min_ps(d, _mm512_setzero_ps());
    __m512 k = _mm512_fmadd_ps(d, _mm512_set1_ps(1.4426950216293335f), _mm512_set1_ps(12582912.0f));
    __m512 kf = _mm512_sub_ps(k, _mm512_set1_ps(12582912.0f));
    __m512 r = _mm512_fmadd_ps(kf, _mm512_set1_ps(-0.6931471824645996f), d);
    if (!f16) r = _mm512_fmadd_ps(kf, _mm512_set1_ps(1.9046542121259336e-09f), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e8d20p-7f), r, _mm512_set1_ps(0x1.568de6p-5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.555a92p-3f));
    p = _mm512_fmadd_ps(r, p, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(r, r), p, r);
    __m512 s = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(_mm512_castps_si512(k), 23),
                                                    _mm512_set1_epi32(f16 ? 1065353216 : 1602224128)));
    return _mm512_fmadd_ps(p, s, s);
}
/* softmax rows (4096-element rows, a multiple of 32): the row's max in registers (x from
 * memory), exp(x - max) with infiniop's exp_nonpositive (the same operations; for fp16/bf16
 * rows its half-result version) into an L1 row and
 * a register sum while the next row is prefetched (into L2 for 4-byte rows, as ours), then the
 * row scaled by 1 / sum with streaming stores. */
static inline void softmax_t(void *y, const void *x, long rows, long n, int dt) {
    long isz = dt ? 2 : 4;
#pragma omp parallel
    {
        float cache[n] __attribute__((aligned(64)));
#pragma omp for schedule(static)
        for (long r = 0; r < rows; r++) {
            const char *xr = (const char *)x + r * n * isz; char *yr = (char *)y + r * n * isz;
            __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
            for (long i = 0; i < n; i += 64) {
                m0 = _mm512_max_ps(m0, row_load(xr, i, dt)); m1 = _mm512_max_ps(m1, row_load(xr, i + 16, dt));
                m2 = _mm512_max_ps(m2, row_load(xr, i + 32, dt)); m3 = _mm512_max_ps(m3, row_load(xr, i + 48, dt));
            }
            __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3))));
            __m512 s0 = _mm512_setzero_ps(), s1 = s0;
            for (long i = 0; i < n; i += 32) {
                if (r + 1 < rows) { /* the next row, during this heavy pass */
                    const char *nx = xr + (n + i) * isz;
                    if (isz == 4) { _mm_prefetch(nx, _MM_HINT_T1); _mm_prefetch(nx + 64, _MM_HINT_T1); }
                    else _mm_prefetch(nx, _MM_HINT_T0);
                }
                __m512 d0 = _mm512_sub_ps(row_load(xr, i, dt), mx), d1 = _mm512_sub_ps(row_load(xr, i + 16, dt), mx);
                __m512 e0 = dt ? expnp_half(d0, dt == 1) : expnp(d0), e1 = dt ? expnp_half(d1, dt == 1) : expnp(d1);
                s0 = _mm512_add_ps(s0, e0); s1 = _mm512_add_ps(s1, e1);
                _mm512_store_ps(cache + i, e0); _mm512_store_ps(cache + i + 16, e1);
            }
            __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)));
            for (long i = 0; i < n; i += 32) {
                __m512 a = _mm512_mul_ps(_mm512_load_ps(cache + i), inv), b = _mm512_mul_ps(_mm512_load_ps(cache + i + 16), inv);
                row_store32(yr, i, a, b, dt, 0);
            }
        }
        _mm_sfence();
    }
}
void softmax_f32(float *y, const float *x, long rows, long n) { softmax_t(y, x, rows, n, 0); }
void softmax_f16(uint16_t *y, const uint16_t *x, long rows, long n) { softmax_t(y, x, rows, n, 1); }
void softmax_bf16(uint16_t *y, const uint16_t *x, long rows, long n) { softmax_t(y, x, rows, n, 2); }

/* The halving of L lanes that infiniop's reductions end with (rows/spec.py): pairs of pairs,
 * (a[l] + a[l + h]) + (a[l + q] + a[l + h + q]), then the last two. */
static inline float lanes_halved(float *a, long L) {
    long h = L >> 1;
    while (h > 1) {
        long q = h >> 1;
        if (q >= 16)
            for (long l = 0; l < q; l += 16)
                _mm512_store_ps(a + l, _mm512_add_ps(
                    _mm512_add_ps(_mm512_load_ps(a + l), _mm512_loadu_ps(a + l + h)),
                    _mm512_add_ps(_mm512_loadu_ps(a + l + q), _mm512_loadu_ps(a + l + h + q))));
        else
            for (long l = 0; l < q; l++) a[l] = (a[l] + a[l + h]) + (a[l + q] + a[l + h + q]);
        h >>= 2;
    }
    if (h == 1) a[0] = a[0] + a[1];
    return a[0];
}

/* float32 softmax rows (n a multiple of 1024) with infiniop's bits: the sum in the order its
 * contract fixes (lane l = j mod 1024 takes the row's chunks in turn, from -0, in L1; then the
 * halving), the same exp, y = e * (1 / sum); otherwise as softmax_t (a register max, the next
 * row prefetched during the exp pass, streaming stores), and as infiniop since 2026-11-29 a
 * row's outputs are stored during the next row's exp pass (a block of them after each 64
 * exps; two L1 rows alternate). What a hand-written kernel costs when it keeps the reduction
 * order that makes every backend and thread count agree. */
void softmax_order_f32(float *y, const float *x, long rows, long n) {
    const long L = 1024;
#pragma omp parallel
    {
        float cache2[2][n] __attribute__((aligned(64)));
        float lanes[L] __attribute__((aligned(64)));
        int nth = omp_get_num_threads(), me = omp_get_thread_num();
        long r0 = rows * me / nth, r1 = rows * (me + 1) / nth;
        const float *pc = 0; float *py = 0; __m512 pinv = _mm512_setzero_ps();
        for (long r = r0; r < r1; r++) {
            const float *xr = x + r * n, *nx = xr + n;
            float *yr = y + r * n, *cache = cache2[r & 1];
            __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
            for (long i = 0; i < n; i += 64) {
                m0 = _mm512_max_ps(m0, _mm512_loadu_ps(xr + i)); m1 = _mm512_max_ps(m1, _mm512_loadu_ps(xr + i + 16));
                m2 = _mm512_max_ps(m2, _mm512_loadu_ps(xr + i + 32)); m3 = _mm512_max_ps(m3, _mm512_loadu_ps(xr + i + 48));
            }
            __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3))));
            /* the previous row's blocks turned to sit ~2 KB (mod 4 KB) from this row's loads */
            long rot = pc ? ((2048 - (((char *)py - (char *)xr) & 4095)) & 4095) / 4 / 64 * 64 : 0;
            for (long l = 0; l < L; l += 16) _mm512_store_ps(lanes + l, _mm512_set1_ps(-0.0f));
            for (long c = 0; c < n; c += L)
                for (long l = 0; l < L; l += 32) {
                    long j = c + l;
                    if (r + 1 < rows) {
                        _mm_prefetch((const char *)(nx + j), _MM_HINT_T1);
                        _mm_prefetch((const char *)(nx + j + 16), _MM_HINT_T1);
                    }
                    __m512 e0 = expnp(_mm512_sub_ps(_mm512_loadu_ps(xr + j), mx));
                    __m512 e1 = expnp(_mm512_sub_ps(_mm512_loadu_ps(xr + j + 16), mx));
                    _mm512_store_ps(cache + j, e0); _mm512_store_ps(cache + j + 16, e1);
                    _mm512_store_ps(lanes + l, _mm512_add_ps(_mm512_load_ps(lanes + l), e0));
                    _mm512_store_ps(lanes + l + 16, _mm512_add_ps(_mm512_load_ps(lanes + l + 16), e1));
                    if (pc && (l & 63) == 32) { /* a block of the previous row after each 64 exps */
                        long b = c + ((l - 32 + rot) & (L - 1));
                        for (long u = b; u < b + 64; u += 16)
                            _mm512_stream_ps(py + u, _mm512_mul_ps(_mm512_load_ps(pc + u), pinv));
                    }
                }
            __m512 inv = _mm512_set1_ps(1.0f / lanes_halved(lanes, L));
            if (r + 1 == r1) {
                for (long i = 0; i < n; i += 32) {
                    _mm512_stream_ps(yr + i, _mm512_mul_ps(_mm512_load_ps(cache + i), inv));
                    _mm512_stream_ps(yr + i + 16, _mm512_mul_ps(_mm512_load_ps(cache + i + 16), inv));
                }
            } else { pc = cache; py = yr; pinv = inv; }
        }
        _mm_sfence();
    }
}

/* rope, GPT-NeoX halves (algo 1), x [seq, nhead, dh] contiguous, dh a multiple of 64, tables
 * [max_pos, dh / 2] of x's dtype gathered by pos: per pair (a, b) = (x[i], x[i + dh/2]),
 * (a cos - b sin, a sin + b cos) in float32, rounded once; rows streamed (64-byte stores). */
static inline void rope_neox_t(void *y, const void *x, const int32_t *pos, const void *sin,
                               const void *cos, long seq, long nh, long dh, int dt) {
    long half = dh / 2, isz = dt ? 2 : 4;
#pragma omp parallel for schedule(static)
    for (long s = 0; s < seq; s++) {
        const char *sr = (const char *)sin + pos[s] * half * isz;
        const char *cr = (const char *)cos + pos[s] * half * isz;
        for (long h = 0; h < nh; h++) {
            long off = (s * nh + h) * dh;
            const char *xr = (const char *)x + off * isz;
            char *yr = (char *)y + off * isz;
            for (long i = 0; i < half; i += 32) {
                __m512 a0 = row_load(xr, i, dt), a1 = row_load(xr, i + 16, dt);
                __m512 b0 = row_load(xr, i + half, dt), b1 = row_load(xr, i + half + 16, dt);
                __m512 s0 = row_load(sr, i, dt), s1 = row_load(sr, i + 16, dt);
                __m512 c0 = row_load(cr, i, dt), c1 = row_load(cr, i + 16, dt);
                row_store32(yr, i, _mm512_sub_ps(_mm512_mul_ps(a0, c0), _mm512_mul_ps(b0, s0)),
                            _mm512_sub_ps(_mm512_mul_ps(a1, c1), _mm512_mul_ps(b1, s1)), dt, 0);
                row_store32(yr, i + half, _mm512_add_ps(_mm512_mul_ps(a0, s0), _mm512_mul_ps(b0, c0)),
                            _mm512_add_ps(_mm512_mul_ps(a1, s1), _mm512_mul_ps(b1, c1)), dt, 0);
            }
        }
    }
    _mm_sfence();
}
void rope_neox_f32(float *y, const float *x, const int32_t *pos, const float *sin, const float *cos,
                   long seq, long nh, long dh) { rope_neox_t(y, x, pos, sin, cos, seq, nh, dh, 0); }
void rope_neox_f16(uint16_t *y, const uint16_t *x, const int32_t *pos, const uint16_t *sin,
                   const uint16_t *cos, long seq, long nh, long dh) { rope_neox_t(y, x, pos, sin, cos, seq, nh, dh, 1); }
void rope_neox_bf16(uint16_t *y, const uint16_t *x, const int32_t *pos, const uint16_t *sin,
                    const uint16_t *cos, long seq, long nh, long dh) { rope_neox_t(y, x, pos, sin, cos, seq, nh, dh, 2); }

/* layer_norm rows (InfiniCore's three outputs): mean and biased variance in registers (two
 * passes over the row, the first from memory), then z = (x - mean) * (1 / std) and
 * y = z * w + b streamed, std per row stored; the next row prefetched during the output pass
 * (into L2 for 4-byte rows, as ours). n a multiple of 64. */
static inline void layer_norm_t(void *y, void *z, void *sd, const void *x, const void *w,
                                const void *b, long rows, long n, float eps, int dt) {
    long isz = dt ? 2 : 4;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const char *xr = (const char *)x + r * n * isz, *nx = xr + n * isz;
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (long i = 0; i < n; i += 64)
            for (int k = 0; k < 4; k++) a[k] = _mm512_add_ps(a[k], row_load(xr, i + 16 * k, dt));
        float mean = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]))) / n;
        __m512 mv = _mm512_set1_ps(mean);
        for (int k = 0; k < 4; k++) a[k] = _mm512_setzero_ps();
        for (long i = 0; i < n; i += 64)
            for (int k = 0; k < 4; k++) {
                __m512 d = _mm512_sub_ps(row_load(xr, i + 16 * k, dt), mv);
                a[k] = _mm512_add_ps(a[k], _mm512_mul_ps(d, d));
            }
        float var = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]))) / n;
        float std = sqrtf(var + eps);
        __m512 rs = _mm512_set1_ps(1.0f / std);
        for (long i = 0; i < n; i += 32) {
            if (r + 1 < rows) {
                if (isz == 4) { _mm_prefetch(nx + i * 4, _MM_HINT_T1); _mm_prefetch(nx + i * 4 + 64, _MM_HINT_T1); }
                else _mm_prefetch(nx + i * 2, _MM_HINT_T0);
            }
            __m512 z0 = _mm512_mul_ps(_mm512_sub_ps(row_load(xr, i, dt), mv), rs);
            __m512 z1 = _mm512_mul_ps(_mm512_sub_ps(row_load(xr, i + 16, dt), mv), rs);
            row_store32((char *)z + r * n * isz, i, z0, z1, dt, 0);
            row_store32((char *)y + r * n * isz, i,
                        _mm512_add_ps(_mm512_mul_ps(z0, row_load(w, i, dt)), row_load(b, i, dt)),
                        _mm512_add_ps(_mm512_mul_ps(z1, row_load(w, i + 16, dt)), row_load(b, i + 16, dt)),
                        dt, 0);
        }
        if (dt == 0) ((float *)sd)[r] = std;
        else {
            __m256i h = dt == 1 ? _mm512_cvtps_ph(_mm512_set1_ps(std), _MM_FROUND_TO_NEAREST_INT)
                                : bf16_round(_mm512_set1_ps(std));
            ((uint16_t *)sd)[r] = (uint16_t)_mm256_extract_epi16(h, 0);
        }
    }
    _mm_sfence();
}
void layer_norm_f32(void *y, void *z, void *sd, const void *x, const void *w, const void *b,
                    long rows, long n, float eps) { layer_norm_t(y, z, sd, x, w, b, rows, n, eps, 0); }
void layer_norm_f16(void *y, void *z, void *sd, const void *x, const void *w, const void *b,
                    long rows, long n, float eps) { layer_norm_t(y, z, sd, x, w, b, rows, n, eps, 1); }
void layer_norm_bf16(void *y, void *z, void *sd, const void *x, const void *w, const void *b,
                     long rows, long n, float eps) { layer_norm_t(y, z, sd, x, w, b, rows, n, eps, 2); }

/* add_rms_norm rows: s = a + b in float32 (kept in an L1 row), residual_out = s rounded and
 * streamed, the sum of squares in registers; then y = s * (1 / sqrt(mean + eps)) * w streamed.
 * The next rows prefetched during the second pass. n a multiple of 64. */
static inline void add_rms_norm_t(void *y, void *res, const void *a, const void *b, const void *w,
                                  long rows, long n, float eps, int dt) {
    long isz = dt ? 2 : 4;
#pragma omp parallel
    {
        float sum[n] __attribute__((aligned(64)));
#pragma omp for schedule(static)
        for (long r = 0; r < rows; r++) {
            const char *ar = (const char *)a + r * n * isz, *br = (const char *)b + r * n * isz;
            __m512 q0 = _mm512_setzero_ps(), q1 = q0;
            for (long i = 0; i < n; i += 32) {
                __m512 s0 = _mm512_add_ps(row_load(ar, i, dt), row_load(br, i, dt));
                __m512 s1 = _mm512_add_ps(row_load(ar, i + 16, dt), row_load(br, i + 16, dt));
                _mm512_store_ps(sum + i, s0); _mm512_store_ps(sum + i + 16, s1);
                q0 = _mm512_fmadd_ps(s0, s0, q0); q1 = _mm512_fmadd_ps(s1, s1, q1);
                row_store32((char *)res + r * n * isz, i, s0, s1, dt, 0);
            }
            __m512 rs = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(_mm512_add_ps(q0, q1)) / n + eps));
            for (long i = 0; i < n; i += 32) {
                if (r + 1 < rows) {
                    const char *na = ar + n * isz, *nb = br + n * isz;
                    if (isz == 4) { _mm_prefetch(na + i * 4, _MM_HINT_T1); _mm_prefetch(na + i * 4 + 64, _MM_HINT_T1);
                                    _mm_prefetch(nb + i * 4, _MM_HINT_T1); _mm_prefetch(nb + i * 4 + 64, _MM_HINT_T1); }
                    else { _mm_prefetch(na + i * 2, _MM_HINT_T0); _mm_prefetch(nb + i * 2, _MM_HINT_T0); }
                }
                row_store32((char *)y + r * n * isz, i,
                            _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(sum + i), rs), row_load(w, i, dt)),
                            _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(sum + i + 16), rs), row_load(w, i + 16, dt)),
                            dt, 0);
            }
        }
        _mm_sfence();
    }
}
void add_rms_norm_f32(void *y, void *res, const void *a, const void *b, const void *w, long rows,
                      long n, float eps) { add_rms_norm_t(y, res, a, b, w, rows, n, eps, 0); }
void add_rms_norm_f16(void *y, void *res, const void *a, const void *b, const void *w, long rows,
                      long n, float eps) { add_rms_norm_t(y, res, a, b, w, rows, n, eps, 1); }
void add_rms_norm_bf16(void *y, void *res, const void *a, const void *b, const void *w, long rows,
                       long n, float eps) { add_rms_norm_t(y, res, a, b, w, rows, n, eps, 2); }
