// q4_mm's and q8_mm's tiles on a CPU with AVX2, FMA and F16C but not AVX-512 BF16 (an AVX2-only EPYC, for one):
// included by kernels.cpp there, inside its namespace, with the same layouts (llama._ours, llama.q8_pack) and the same
// arithmetic to fp32 rounding. x is rounded to bf16 as on the AVX-512 path; the integers q (0..15, or -127..127) are
// exact in fp32, and so is each product x_k q_nk; a block's products are summed in fp32 and d and z applied once a
// block. Without VDPBF16PS the products are FMAs on 8 fp32 lanes, one per (output o, input e of a pair): the packed
// bytes already hold a pair's two inputs of an output side by side, so 8 bytes widen to lanes (o, e) of 4 outputs,
// and x comes spread (Rows::a, SPREAD = 4): each input pair (x_2p, x_2p+1) four times over, one ymm, which meets
// those lanes with one FMA. The two lanes of an output are added at the end of the tile.
//
// A row's operations and their order do not depend on the rows beside it, so its result is the same bit for bit
// whatever they are. One pass over a tile's weights serves up to PASS_M rows: each 8 bytes are widened once for
// all of them.
//
// Measured on a 2-core AMD EPYC of the first Zen generation (family 23 model 1: AVX2, FMA, F16C, no AVX-512; 256-bit
// ops run as two 128-bit halves), 2 threads, `calibrate --dtype auto`, quiet, 2026-11-28: the offline model's decode
// step 20.7 ms in bf16 on these kernels against 80.7 ms in fp32 on torch's ops (and 18.1 ms for llama.cpp on the
// same GGUF in the same run); beta(5) 2.39 (llama.cpp's 3.39). The step's GEMMs are bound by the FP pipes, not the
// bytes (the 97 MB of weights as held would take 5.5 ms at the measured copy bandwidth): widening and converting
// a byte pair costs about as much as one row's FMAs, and each extra row costs its FMAs at half the width.
#pragma once

#if SPECREPRO_Q4 == 2
constexpr int SPREAD = 4;  // floats of Rows::a per input: a pair (x_2p, x_2p+1) as (x_2p, x_2p+1) x 4, one ymm

inline __m256 dup_halves(const at::Half* p) {  // 4 fp16 -> (p0, p0, p1, p1, p2, p2, p3, p3) in fp32
  const __m128 v = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}

// y[o] = lane (o, 0) + lane (o, 1) of a row's groups of 4 outputs
template <int GROUPS>
inline void store_pairs(const float (*acc)[8], float* y) {
  for (int g = 0; g < GROUPS; ++g)
    for (int i = 0; i < 4; ++i) y[4 * g + i] = acc[g][2 * i] + acc[g][2 * i + 1];
}

// Groups of 4 outputs summed side by side: for one or two rows, two independent chains of FMAs per row overlap an
// FMA's latency (13% off a one-row GEMM on the Zen 1 EPYC); more rows are chains enough by themselves.
constexpr int side_by_side(int MB) { return MB <= 2 ? 2 : 1; }

// MB rows of tile t (32 outputs = 8 groups of 4), as the AVX-512 path's tile: per block, blk = sum_{k in b} x_k q_nk
// (the low nibbles of step r meet pair 2r, the high ones pair 2r + 1), then acc = z S_b + (d blk + acc), the zero
// term in lane e = 0 only.
template <int MB>
void tile(const float* A, const float* S, const uint8_t* W, const at::Half* D, const at::Half* Z, float* Y,
          int64_t K, int64_t N, int64_t t) {
  constexpr int GC = side_by_side(MB);
  const int64_t KB = K / G, row = K * SPREAD;
  alignas(32) float acc[MB][8][8] = {};
  const __m256i nibble = _mm256_set1_epi32(0x0F);
  for (int64_t b = 0; b < KB; ++b) {
    const uint8_t* wb = W + (t * KB + b) * 512;
    for (int r = 0; r < 8; ++r) _mm_prefetch(reinterpret_cast<const char*>(wb + PREFETCH + r * 64), _MM_HINT_T0);
    const at::Half* d = D + (t * KB + b) * TILE_N;
    const at::Half* z = Z + (t * KB + b) * TILE_N;
    for (int g0 = 0; g0 < 8; g0 += GC) {  // group g: outputs 4g..4g+3, half g / 4, its bytes 8 (g % 4) ..
      __m256 blk[MB][GC];
      for (int m = 0; m < MB; ++m)
        for (int u = 0; u < GC; ++u) blk[m][u] = _mm256_setzero_ps();
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
#pragma GCC unroll 8
        for (int u = 0; u < GC; ++u) {
          const int g = g0 + u;
          const uint8_t* w8 = wb + r * 64 + (g / 4) * 32 + (g % 4) * 8;
          const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w8)));
          const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, nibble));
          const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
          for (int m = 0; m < MB; ++m) {
            const float* a = A + m * row + (b * 16 + 2 * r) * 8;
            blk[m][u] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(a), blk[m][u]);
            blk[m][u] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(a + 8), blk[m][u]);
          }
        }
      }
      for (int u = 0; u < GC; ++u) {
        const int g = g0 + u;
        const __m256 dd = dup_halves(d + 4 * g);
        const __m256 zz = _mm256_blend_ps(dup_halves(z + 4 * g), _mm256_setzero_ps(), 0xAA);
        for (int m = 0; m < MB; ++m) {
          const __m256 s = _mm256_set1_ps(S[m * KB + b]);
          const __m256 sum = _mm256_fmadd_ps(dd, blk[m][u], _mm256_load_ps(acc[m][g]));
          _mm256_store_ps(acc[m][g], _mm256_fmadd_ps(zz, s, sum));
        }
      }
    }
  }
  for (int m = 0; m < MB; ++m) store_pairs<8>(acc[m], Y + m * N + t * TILE_N);
}

using Tile = void (*)(const float*, const float*, const uint8_t*, const at::Half*, const at::Half*, float*, int64_t,
                      int64_t, int64_t);
constexpr Tile TILES[] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>, tile<7>, tile<8>};

// MB rows of q8_mm's tile t (16 outputs = 4 groups of 4): per block, blk = sum over its 16 input pairs of the
// pair's 8 bytes of a group (lanes (o, e), sign-extended) times x's pair, then acc = d blk + acc.
template <int MB>
void q8_tile(const float* A, const int8_t* W, const at::Half* D, float* Y, int64_t K, int64_t N, int64_t t) {
  const int64_t KB = K / G, row = K * SPREAD;
  alignas(32) float acc[MB][4][8] = {};
  constexpr int GC = side_by_side(MB);
  for (int64_t b = 0; b < KB; ++b) {
    const int8_t* wb = W + (t * K + b * G) * 16;  // 16 pairs of 32 bytes
    for (int j = 0; j < 8; ++j) _mm_prefetch(reinterpret_cast<const char*>(wb + 8 * G * 16 + j * 64), _MM_HINT_T0);
    for (int g0 = 0; g0 < 4; g0 += GC) {
      __m256 blk[MB][GC];
      for (int m = 0; m < MB; ++m)
        for (int u = 0; u < GC; ++u) blk[m][u] = _mm256_setzero_ps();
#pragma GCC unroll 16
      for (int j = 0; j < G / 2; ++j) {
#pragma GCC unroll 4
        for (int u = 0; u < GC; ++u) {
          const __m256 w = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wb + j * 32 + (g0 + u) * 8))));
          for (int m = 0; m < MB; ++m)
            blk[m][u] = _mm256_fmadd_ps(w, _mm256_loadu_ps(A + m * row + (b * 16 + j) * 8), blk[m][u]);
        }
      }
      for (int u = 0; u < GC; ++u) {
        const __m256 dd = dup_halves(D + (t * KB + b) * 16 + 4 * (g0 + u));
        for (int m = 0; m < MB; ++m)
          _mm256_store_ps(acc[m][g0 + u], _mm256_fmadd_ps(dd, blk[m][u], _mm256_load_ps(acc[m][g0 + u])));
      }
    }
  }
  for (int m = 0; m < MB; ++m) store_pairs<4>(acc[m], Y + m * N + t * 16);
}

using Q8Tile = void (*)(const float*, const int8_t*, const at::Half*, float*, int64_t, int64_t, int64_t);
constexpr Q8Tile Q8_TILES[] = {nullptr, q8_tile<1>, q8_tile<2>, q8_tile<3>, q8_tile<4>, q8_tile<5>, q8_tile<6>,
                               q8_tile<7>, q8_tile<8>};
#endif
