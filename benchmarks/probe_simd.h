/* The AVX-512 intrinsics probe_elementwise.c uses, for CPUs that lack them: without AVX-512F
 * (an AMD EPYC Zen 3, Intel before Skylake-X) each becomes two AVX2 operations on the halves,
 * lane for lane the same results (the reductions keep GCC's order: halves, quarters, pairs);
 * without AVX512_BF16, vcvtne2ps2bf16 (probe_cvtne2ps_bf16) becomes the integer rounding (the
 * same bits but for subnormal and NaN results, which the benchmark's data never produces).
 * probe_bf16_hw() says whether the hardware rounding is there (the runner's "probe.hw" column
 * needs it). tests/test_probe_builds.py builds it for both kinds of CPU. Not part of the package.
 */
#ifndef PROBE_SIMD_H
#define PROBE_SIMD_H
#include <immintrin.h>

int probe_bf16_hw(void) {
#if defined(__AVX512BF16__)
    return 1;
#else
    return 0;
#endif
}

#if !defined(__AVX512F__)
/* a 16-lane vector is two AVX2 registers (a struct GCC keeps in registers; GCC keeps a 64-byte
 * vector type in memory where the CPU has no such registers) */
typedef struct { __m256 lo, hi; } p_v16f;
typedef struct { __m256i lo, hi; } p_v16i;
#define __m512 p_v16f
#define __m512i p_v16i
#define P_F2(name, f)                                                                     \
    static inline __m512 name(__m512 a, __m512 b) { return (__m512){f(a.lo, b.lo), f(a.hi, b.hi)}; }
#define P_I2(name, f)                                                                     \
    static inline __m512i name(__m512i a, __m512i b) { return (__m512i){f(a.lo, b.lo), f(a.hi, b.hi)}; }
P_F2(p_add, _mm256_add_ps)
P_F2(p_sub, _mm256_sub_ps)
P_F2(p_mul, _mm256_mul_ps)
P_F2(p_max, _mm256_max_ps)
P_F2(p_min, _mm256_min_ps)
P_F2(p_unpacklo, _mm256_unpacklo_ps)
P_F2(p_unpackhi, _mm256_unpackhi_ps)
P_I2(p_add_epi32, _mm256_add_epi32)
P_I2(p_and, _mm256_and_si256)
P_I2(p_or, _mm256_or_si256)
#define _mm512_add_ps p_add
#define _mm512_sub_ps p_sub
#define _mm512_mul_ps p_mul
#define _mm512_max_ps p_max
#define _mm512_min_ps p_min
#define _mm512_unpacklo_ps p_unpacklo
#define _mm512_unpackhi_ps p_unpackhi
#define _mm512_add_epi32 p_add_epi32
#define _mm512_and_si512 p_and
#define _mm512_or_si512 p_or
static inline __m512 p_fmadd(__m512 a, __m512 b, __m512 c) {
    return (__m512){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
#define _mm512_fmadd_ps p_fmadd
#define _mm512_slli_epi32(a, n) ((__m512i){_mm256_slli_epi32((a).lo, n), _mm256_slli_epi32((a).hi, n)})
#define _mm512_srli_epi32(a, n) ((__m512i){_mm256_srli_epi32((a).lo, n), _mm256_srli_epi32((a).hi, n)})
static inline __m512i p_castps_si512(__m512 a) { return (__m512i){_mm256_castps_si256(a.lo), _mm256_castps_si256(a.hi)}; }
static inline __m512 p_castsi512_ps(__m512i a) { return (__m512){_mm256_castsi256_ps(a.lo), _mm256_castsi256_ps(a.hi)}; }
#define _mm512_castps_si512 p_castps_si512
#define _mm512_castsi512_ps p_castsi512_ps
static inline __m512 p_set1_ps(float x) { return (__m512){_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
static inline __m512i p_set1_epi32(int x) { return (__m512i){_mm256_set1_epi32(x), _mm256_set1_epi32(x)}; }
#define _mm512_set1_ps p_set1_ps
#define _mm512_setzero_ps() p_set1_ps(0.0f)
#define _mm512_set1_epi32 p_set1_epi32

/* GCC's reduction order: the high half with the low, then the quarters, then pairs */
static inline float p_reduce_add(__m512 a) {
    __m256 t3 = _mm256_add_ps(a.hi, a.lo);
    __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_extractf128_ps(t3, 0));
    __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return t8[0] + t8[1];
}
static inline float p_reduce_max(__m512 a) {
    __m256 t3 = _mm256_max_ps(a.hi, a.lo);
    __m128 t6 = _mm_max_ps(_mm256_extractf128_ps(t3, 1), _mm256_extractf128_ps(t3, 0));
    __m128 t8 = _mm_max_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_max_ps(t8, _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1)))[0];
}
#define _mm512_reduce_add_ps p_reduce_add
#define _mm512_reduce_max_ps p_reduce_max

/* memory: a 64-byte streaming store is two 32-byte ones */
static inline __m512 p_loadu_ps(const float *p) { return (__m512){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
static inline __m512 p_load_ps(const float *p) { return (__m512){_mm256_load_ps(p), _mm256_load_ps(p + 8)}; }
static inline void p_store_ps(float *p, __m512 v) { _mm256_store_ps(p, v.lo); _mm256_store_ps(p + 8, v.hi); }
static inline void p_stream_ps(float *p, __m512 v) { _mm256_stream_ps(p, v.lo); _mm256_stream_ps(p + 8, v.hi); }
static inline __m512i p_loadu_si512(const void *p) {
    return (__m512i){_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)p + 1)};
}
static inline void p_stream_si512(void *p, __m512i v) {
    _mm256_stream_si256((__m256i *)p, v.lo);
    _mm256_stream_si256((__m256i *)p + 1, v.hi);
}
#define _mm512_loadu_ps(p) p_loadu_ps((const float *)(p))
#define _mm512_load_ps(p) p_load_ps((const float *)(p))
#define _mm512_store_ps(p, v) p_store_ps((float *)(p), v)
#define _mm512_stream_ps(p, v) p_stream_ps((float *)(p), v)
#define _mm512_loadu_si512 p_loadu_si512
#define _mm512_stream_si512 p_stream_si512

/* lanes within 128-bit blocks act on each half; shuffle_f32x4 picks blocks of a (low half of
 * the result) and of b (high half) */
#define _mm512_shuffle_ps(a, b, imm)                                                      \
    ((__m512){_mm256_shuffle_ps((a).lo, (b).lo, imm), _mm256_shuffle_ps((a).hi, (b).hi, imm)})
#define _mm512_shuffle_f32x4(a, b, imm)                                                   \
    ((__m512){_mm256_permute2f128_ps((a).lo, (a).hi, ((imm) & 3) | (((imm) >> 2 & 3) << 4)),  \
              _mm256_permute2f128_ps((b).lo, (b).hi, ((imm) >> 4 & 3) | (((imm) >> 6 & 3) << 4))})

/* conversions */
#define _mm512_castsi512_si256(v) ((v).lo)
#define _mm512_extracti64x4_epi64(v, i) ((i) ? (v).hi : (v).lo)
#define _mm512_castsi256_si512(v) ((__m512i){v, _mm256_setzero_si256()})
#define _mm512_inserti64x4(v, h, i) ((i) ? (__m512i){(v).lo, h} : (__m512i){h, (v).hi})
static inline __m512i p_cvtepu16_epi32(__m256i h) {
    return (__m512i){_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), _mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1))};
}
#define _mm512_cvtepu16_epi32 p_cvtepu16_epi32
static inline __m256i p_cvtepi32_epi16(__m512i v) { /* the low halves of 16 lanes, in order */
    const __m256i lo16 = _mm256_set1_epi32(0xffff);
    __m256i packed = _mm256_packus_epi32(_mm256_and_si256(v.lo, lo16), _mm256_and_si256(v.hi, lo16));
    return _mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0));
}
#define _mm512_cvtepi32_epi16 p_cvtepi32_epi16
static inline __m512 p_cvtph_ps(__m256i h) {
    return (__m512){_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))};
}
#define _mm512_cvtph_ps p_cvtph_ps
#define _mm512_cvtps_ph(v, r)                                                             \
    _mm256_inserti128_si256(_mm256_castsi128_si256(_mm256_cvtps_ph((v).lo, r)), _mm256_cvtps_ph((v).hi, r), 1)

/* masks: 16 bits from the halves' compares, and a select on them */
#define _mm512_cmp_ps_mask(a, b, pred)                                                    \
    ((__mmask16)(_mm256_movemask_ps(_mm256_cmp_ps((a).lo, (b).lo, pred)) |                \
                 _mm256_movemask_ps(_mm256_cmp_ps((a).hi, (b).hi, pred)) << 8))
static inline __m256i p_mask8(int k) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(k), bit), bit);
}
static inline __m512i p_mask_mov_epi32(__m512i src, __mmask16 k, __m512i a) {
    return (__m512i){_mm256_blendv_epi8(src.lo, a.lo, p_mask8(k & 0xff)),
                     _mm256_blendv_epi8(src.hi, a.hi, p_mask8(k >> 8))};
}
#define _mm512_mask_mov_epi32 p_mask_mov_epi32
#endif /* !__AVX512F__ */

/* vcvtne2ps2bf16(b, a) as 32 bf16 bits: a's 16 roundings first; without AVX512_BF16 the
 * integer rounding */
#if defined(__AVX512BF16__)
#define probe_cvtne2ps_bf16(b, a) ((__m512i)_mm512_cvtne2ps_pbh(b, a))
#else
static inline __m256i p_bf16_round16(__m512 f) {
    __m512i b = _mm512_castps_si512(f);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)),
                                                   _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1))), 16);
    return _mm512_cvtepi32_epi16(r);
}
#define probe_cvtne2ps_bf16(b, a) _mm512_inserti64x4(_mm512_castsi256_si512(p_bf16_round16(a)), p_bf16_round16(b), 1)
#endif
#endif /* PROBE_SIMD_H */
