// The engine's own CPU kernels. specrepro/engine/kernel.py builds them once per machine (-march=native), and the
// engine calls them where they run, else torch's ops (every result below is also what those give, to fp32 rounding):
//
// rms_norm(x, w, eps): y = x * rsqrt(mean(x^2) + eps) * w over the last dimension, in fp32: torch's CPU rms_norm is
//   six ops (~50 us a call at a decode step's shapes, 61 calls a step on SmolLM2-135M); this is one.
//
// attention(q, k, v, S, mask, scale): grouped-query attention over a layer's first S cache slots, in fp32, as one op.
//
// q8_mm(x, packed, d), where the CPU has AVX-512 BF16 or AVX2 (with FMA and F16C): the 8-bit GEMM of a GGUF Q8_0
//   weight (below, at q8_tile).
//
// llama_layer(...), likewise: a whole decoder layer on 4-bit weights as one op (below).
//
// q4_mm(x, packed, d, z, bulk), likewise: the 4-bit GEMM (bulk: a prompt's rows, on AMX's tiles where the CPU has
//   them: kernels_amx.h). Below for AVX-512 BF16; kernels_avx2.h has its tiles for AVX2.
//
//     y[M, N] (fp32) = x[M, K] (fp32 or bf16, rounded to bf16 as .to(torch.bfloat16) does) @ W^T,
//     W[n, k] = d[n, b] * q[n, k] + z[n, b],   b = k / 32,   q in 0..15   (a GGUF Q4_1 block: d = scale, z = min).
//
//   Since a block's weights share d and z,  sum_k x_k W_nk = sum_b ( d_nb * sum_{k in b} x_k q_nk + z_nb * S_b ),
//   with S_b the block's sum of x. The integers q (exact in bf16) go through VDPBF16PS (32 bf16 products a call, fp32
//   sums); d and z (fp16) are applied once a block, in fp32. Why not torch's int4 kernel: it dequantises every weight
//   to fp32 per tile of 4 rows, so 5 to 8 rows read and convert the weights twice. Here one pass over the weights
//   serves up to 8 rows; 9 or more take a pass per 8. A row's result is the same bit for bit whatever the rows beside
//   it: its operations and their order do not depend on M.
//
//   Layouts (llama._ours writes them): 32 outputs a tile (two zmm of fp32), so
//     packed [N/32, K/32, 8, 2, 32] uint8: for block b, step r, half h (outputs 16h..16h+15), byte t: the low nibble
//       is q[o = 16h + t/2, k = 32b + 4r + t%2], the high one q[o, k + 2];
//     d, z [N/32, K/32, 32] fp16 (a GGUF's own Q4_1 scales and mins are fp16).
#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

// Which 4-bit and 8-bit GEMMs this CPU gets: 1 = VDPBF16PS (AVX-512 BF16), 2 = FMAs on AVX2 (kernels_avx2.h).
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#define SPECREPRO_Q4 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SPECREPRO_Q4 2
#endif

namespace {

#if defined(__AVX512F__)
inline __m512 half16(const at::Half* p) {  // 16 fp16 -> fp32
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
#endif

#if defined(SPECREPRO_Q4)
constexpr int G = 32;        // inputs per block
constexpr int TILE_N = 32;   // outputs per tile
constexpr int PASS_M = 8;    // rows per pass over the weights
constexpr int PREFETCH = 4 * 512;  // bytes ahead of the block being read (4 blocks of a tile)
#endif

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat && x.is_contiguous() && x.dim() >= 1, "x: [..., H] fp32, contiguous");
  const int64_t H = x.size(-1), rows = x.numel() / std::max<int64_t>(H, 1);
  TORCH_CHECK(w.scalar_type() == torch::kFloat && w.is_contiguous() && w.numel() == H, "w: [H] fp32");
  auto y = torch::empty_like(x);
  const float* X = x.data_ptr<float>();
  const float* W = w.data_ptr<float>();
  float* Y = y.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    const float* xi = X + i * H;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < H; ++j) ss += xi[j] * xi[j];
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(H) + static_cast<float>(eps));
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) Y[i * H + j] = (xi[j] * r) * W[j];
  }
  return y;
}

// e^x for x <= 0 (a softmax's shifted scores), 0 below -87 (so -inf, a masked slot, gives 0 exactly): Cephes' expf
// polynomial (within 2 ulp), written so that a simd loop vectorises it (glibc's vector expf needs -ffast-math, which
// would also assume away the mask's infinities).
inline float exp_nonpositive(float x) {
  const float t = x < -87.0f ? -87.0f : x;
  const float n = std::floor(t * 1.44269504088896341f + 0.5f);
  const float r = t - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, 4);
  return x < -87.0f ? 0.0f : e * scale;
}

// p[s] <- e^(p[s] - top) for s < S (top: their maximum), returning their sum: a softmax's numerators.
inline float exponentiate(float* p, int64_t S, float top) {
  float total = 0.f;
#pragma omp simd reduction(+ : total)
  for (int64_t s = 0; s < S; ++s) {
    p[s] = exp_nonpositive(p[s] - top);
    total += p[s];
  }
  return total;
}

inline float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

// One query row: o = softmax(q k^T * scale + m) v over S slots of one k/v head ([S, D] rows), p a scratch [S].
void attend_row(const float* q, const float* k, const float* v, const float* m, int64_t S, int64_t D, float scale,
                float* p, float* o) {
#if defined(__AVX512F__)
  if (D == 64) {  // (every model of the family the zoo ships: four zmm a row)
    const __m512 q0 = _mm512_loadu_ps(q), q1 = _mm512_loadu_ps(q + 16), q2 = _mm512_loadu_ps(q + 32),
                 q3 = _mm512_loadu_ps(q + 48);
    float top = -INFINITY;
    for (int64_t s = 0; s < S; ++s) {
      const float* ks = k + s * 64;
      __m512 a = _mm512_mul_ps(q0, _mm512_loadu_ps(ks));
      a = _mm512_fmadd_ps(q1, _mm512_loadu_ps(ks + 16), a);
      a = _mm512_fmadd_ps(q2, _mm512_loadu_ps(ks + 32), a);
      a = _mm512_fmadd_ps(q3, _mm512_loadu_ps(ks + 48), a);
      p[s] = _mm512_reduce_add_ps(a) * scale + m[s];
      top = std::max(top, p[s]);
    }
    const float total = exponentiate(p, S, top);
    __m512 o0 = _mm512_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
    for (int64_t s = 0; s < S; ++s) {
      if (p[s] == 0.f) continue;  // (a masked slot)
      const __m512 w = _mm512_set1_ps(p[s]);
      const float* vs = v + s * 64;
      o0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(vs), o0);
      o1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(vs + 16), o1);
      o2 = _mm512_fmadd_ps(w, _mm512_loadu_ps(vs + 32), o2);
      o3 = _mm512_fmadd_ps(w, _mm512_loadu_ps(vs + 48), o3);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / total);
    _mm512_storeu_ps(o, _mm512_mul_ps(o0, inv));
    _mm512_storeu_ps(o + 16, _mm512_mul_ps(o1, inv));
    _mm512_storeu_ps(o + 32, _mm512_mul_ps(o2, inv));
    _mm512_storeu_ps(o + 48, _mm512_mul_ps(o3, inv));
    return;
  }
#endif
  float top = -INFINITY;
  for (int64_t s = 0; s < S; ++s) {
    p[s] = dot(q, k + s * D, D) * scale + m[s];
    top = std::max(top, p[s]);
  }
  const float total = exponentiate(p, S, top);
  for (int64_t d = 0; d < D; ++d) o[d] = 0.f;
  for (int64_t s = 0; s < S; ++s) {
    const float* vs = v + s * D;
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) o[d] += p[s] * vs[d];
  }
  const float inv = 1.0f / total;
  for (int64_t d = 0; d < D; ++d) o[d] *= inv;
}

struct Strides {  // of a query row, in floats: per batch row, per query column, per query head
  int64_t b, q, h;
};
struct Shape {  // batch rows, query columns, query heads, k/v heads, cache slots, attended slots, head dim
  int64_t B, Q, Hq, Hkv, C, S, D;
};

// Every (b, qi, h) of a layer: attend_row over k/v head h / (Hq / Hkv) of row b's cache [B, Hkv, C, D] with mask row
// mask[b, 0, qi, :S], into out [B, Q, Hq * D]. The standalone op and the whole layer share it.
void attend_all(const float* q, Strides qs, const float* k, const float* v, const float* mask, float* out, Shape s,
                float scale) {
  const int64_t g = s.Hq / s.Hkv;
  at::parallel_for(0, s.B * s.Q * s.Hq, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> p(s.S);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = i / s.Hq, h = i % s.Hq, b = r / s.Q, qi = r % s.Q;
      const int64_t kv = (b * s.Hkv + h / g) * s.C * s.D;
      attend_row(q + b * qs.b + qi * qs.q + h * qs.h, k + kv, v + kv, mask + r * s.S, s.S, s.D, scale, p.data(),
                 out + r * s.Hq * s.D + h * s.D);
    }
  });
}

// Grouped-query attention over the first S slots of a layer's cache, all fp32:
//   q [B, Hq, Q, D], k and v [B, Hkv, C, D] (C >= S; contiguous), mask [B, 1, Q, S] additive (0 or -inf)
//   -> [B, Q, Hq * D]: softmax(q k^T * scale + mask) v per query head, its k/v head h / (Hq / Hkv).
// torch's way is five ops (baddbmm, softmax, bmm and the reshapes), ~30 us a product at decode shapes on 2 cores.
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t S,
                        const torch::Tensor& mask, double scale) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes() && mask.dim() == 4, "q, k, v, mask: 4-d");
  TORCH_CHECK(q.scalar_type() == torch::kFloat && k.scalar_type() == torch::kFloat &&
                  v.scalar_type() == torch::kFloat && mask.scalar_type() == torch::kFloat,
              "q, k, v and mask: fp32");
  TORCH_CHECK(k.is_contiguous() && v.is_contiguous(), "k, v: contiguous [B, Hkv, C, D]");
  const auto qc = q.contiguous();
  const auto mc = mask.contiguous();
  const int64_t B = q.size(0), Hq = q.size(1), Q = q.size(2), D = q.size(3), Hkv = k.size(1), C = k.size(2);
  TORCH_CHECK(k.size(0) == B && k.size(3) == D && Hq % Hkv == 0 && S <= C && S >= 1, "shapes do not agree");
  TORCH_CHECK(mc.size(0) == B && mc.size(1) == 1 && mc.size(2) == Q && mc.size(3) == S, "mask: [B, 1, Q, S]");
  auto out = torch::empty({B, Q, Hq * D}, q.options());
  attend_all(qc.data_ptr<float>(), {Hq * Q * D, D, Q * D}, k.data_ptr<float>(), v.data_ptr<float>(),
             mc.data_ptr<float>(), out.data_ptr<float>(), {B, Q, Hq, Hkv, C, S, D}, static_cast<float>(scale));
  return out;
}

#if defined(SPECREPRO_Q4)
#if SPECREPRO_Q4 == 1
constexpr int SPREAD = 1;  // Rows::a's elements per input: its bf16 bits

// Step r of a tile's block (64 bytes of packed, see q4_mm) as bf16 integers 0..15 in VNNI order (input pairs
// interleaved, as VDPBF16PS and TDPBF16PS read them): q00 and q01 the pairs 2r and 2r + 1 of outputs 0..15, q10 and
// q11 of outputs 16..31.
inline void nibbles(const uint8_t* wr, __m512i& q00, __m512i& q01, __m512i& q10, __m512i& q11) {
  // bf16 of 0..15 (and 0 above), looked up by each 16-bit lane's nibble
  const __m512i lut = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4170, 0x4160, 0x4150,
                                       0x4140, 0x4130, 0x4120, 0x4110, 0x4100, 0x40E0, 0x40C0, 0x40A0, 0x4080,
                                       0x4040, 0x4000, 0x3F80, 0x0000);
  const __m512i nibble = _mm512_set1_epi16(0x0F);
  const __m512i x0 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr)));
  const __m512i x1 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + 32)));
  q00 = _mm512_permutexvar_epi16(_mm512_and_si512(x0, nibble), lut);
  q01 = _mm512_permutexvar_epi16(_mm512_srli_epi16(x0, 4), lut);
  q10 = _mm512_permutexvar_epi16(_mm512_and_si512(x1, nibble), lut);
  q11 = _mm512_permutexvar_epi16(_mm512_srli_epi16(x1, 4), lut);
}

// Input pair j of a q8_mm tile (32 bytes of packed, see q8_tile) as bf16 integers in VNNI order: exact, |q| <= 128.
inline __m512bh q8_pair(const int8_t* wj) {
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wj))));
  const __m512 hi =
      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wj + 16))));
  return _mm512_cvtne2ps_pbh(hi, lo);
}

#include "kernels_amx.h"  // (the same GEMMs on AMX's tiles, where the CPU has them)

// MB rows of TT consecutive tiles. A row's sums run in one order whatever MB and TT are (so its result is the same
// bit for bit whatever the rows beside it); TT = 2 for one or two rows gives the chain of VDPBF16PS a second,
// independent one to overlap its latency with.
template <int MB, int TT>
void tile(const uint16_t* A, const float* S, const uint8_t* W, const at::Half* D, const at::Half* Z, float* Y,
          int64_t K, int64_t N, int64_t t) {
  const int64_t KB = K / G;
  __m512 acc[MB][TT][2];
  for (int m = 0; m < MB; ++m)
    for (int u = 0; u < TT; ++u) acc[m][u][0] = acc[m][u][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < KB; ++b) {
    __m512 blk[MB][TT][2];  // sum_{k in b} x_k q_nk
    for (int m = 0; m < MB; ++m)
      for (int u = 0; u < TT; ++u) blk[m][u][0] = blk[m][u][1] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
#pragma GCC unroll 2
      for (int u = 0; u < TT; ++u) {
        const uint8_t* wr = W + ((t + u) * KB + b) * 512 + r * 64;
        _mm_prefetch(reinterpret_cast<const char*>(wr + PREFETCH), _MM_HINT_T0);  // (read once: stay ahead of it)
        __m512i q00, q01, q10, q11;
        nibbles(wr, q00, q01, q10, q11);
#pragma GCC unroll 8
        for (int m = 0; m < MB; ++m) {
          const uint16_t* a = A + m * K + b * G + r * 4;
          __m512i a0 = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(a));      // x of pair 2r, broadcast
          __m512i a1 = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(a + 2));  // pair 2r+1
          blk[m][u][0] = _mm512_dpbf16_ps(blk[m][u][0], (__m512bh)a0, (__m512bh)q00);
          blk[m][u][1] = _mm512_dpbf16_ps(blk[m][u][1], (__m512bh)a0, (__m512bh)q10);
          blk[m][u][0] = _mm512_dpbf16_ps(blk[m][u][0], (__m512bh)a1, (__m512bh)q01);
          blk[m][u][1] = _mm512_dpbf16_ps(blk[m][u][1], (__m512bh)a1, (__m512bh)q11);
        }
      }
    }
    for (int u = 0; u < TT; ++u) {
      const at::Half* d = D + ((t + u) * KB + b) * TILE_N;
      const at::Half* z = Z + ((t + u) * KB + b) * TILE_N;
      const __m512 d0 = half16(d), d1 = half16(d + 16), z0 = half16(z), z1 = half16(z + 16);
      for (int m = 0; m < MB; ++m) {
        const __m512 s = _mm512_set1_ps(S[m * KB + b]);
        acc[m][u][0] = _mm512_fmadd_ps(z0, s, _mm512_fmadd_ps(d0, blk[m][u][0], acc[m][u][0]));
        acc[m][u][1] = _mm512_fmadd_ps(z1, s, _mm512_fmadd_ps(d1, blk[m][u][1], acc[m][u][1]));
      }
    }
  }
  for (int m = 0; m < MB; ++m)
    for (int u = 0; u < TT; ++u) {
      _mm512_storeu_ps(Y + m * N + (t + u) * TILE_N, acc[m][u][0]);
      _mm512_storeu_ps(Y + m * N + (t + u) * TILE_N + 16, acc[m][u][1]);
    }
}

using Tile = void (*)(const uint16_t*, const float*, const uint8_t*, const at::Half*, const at::Half*, float*,
                      int64_t, int64_t, int64_t);
constexpr Tile TILES[] = {nullptr, tile<1, 1>, tile<2, 1>, tile<3, 1>, tile<4, 1>, tile<5, 1>, tile<6, 1>, tile<7, 1>,
                          tile<8, 1>};
constexpr Tile PAIRS[] = {nullptr, tile<1, 2>, tile<2, 2>};  // two tiles at once, for one or two rows
using Lane = uint16_t;
#else
#include "kernels_avx2.h"
using Lane = float;
#endif

inline uint16_t bf16_bits(float f) {  // round to nearest, ties to even (as torch's cast; the inputs are finite)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

inline float bf16_value(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t input_bits(float f) { return bf16_bits(f); }
inline uint16_t input_bits(at::BFloat16 h) { return h.x; }

inline void put(uint16_t* a, int64_t k, uint16_t bits) { a[k] = bits; }
inline void put(float* a, int64_t k, uint16_t bits) {  // spread: input k's value in lanes k % 2, +2, +4, +6 of its pair
  const float value = bf16_value(bits);
  for (int i = 0; i < 4; ++i) a[(k / 2) * 8 + 2 * i + k % 2] = value;
}

template <typename T>
void round_and_sum(const T* X, int64_t blocks, Lane* a, float* s) {  // x in bf16, and each block's sum of it
  for (int64_t i = 0; i < blocks; ++i) {
    float sum = 0.f;
    for (int j = 0; j < G; ++j) {
      const uint16_t bits = input_bits(X[i * G + j]);
      put(a, i * G + j, bits);
      sum += bf16_value(bits);
    }
    s[i] = sum;
  }
}

// A GEMM's input x [..., K] (fp32 or bf16, contiguous) as M rows rounded to bf16 (its bits, or spread as fp32 for
// kernels_avx2.h), with each block's sum of them.
struct Rows {
  int64_t M;
  std::vector<Lane> a;  // [M, K * SPREAD]
  std::vector<float> sums;  // [M, K/32]
};

Rows rows_of(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() >= 1 && x.is_contiguous() &&
                  (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16),
              "x: [..., K] fp32 or bf16, contiguous");
  const int64_t K = x.size(-1), M = x.numel() / std::max<int64_t>(K, 1);
  TORCH_CHECK(K % G == 0, "x has ", K, " inputs, not a multiple of ", G);
  Rows rows{M, std::vector<Lane>(M * K * SPREAD), std::vector<float>(M * K / G)};
  if (x.scalar_type() == torch::kFloat)
    round_and_sum(x.data_ptr<float>(), M * K / G, rows.a.data(), rows.sums.data());
  else
    round_and_sum(x.data_ptr<at::BFloat16>(), M * K / G, rows.a.data(), rows.sums.data());
  return rows;
}

torch::Tensor output_for(const torch::Tensor& x, int64_t N) {  // [..., N] fp32
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return torch::empty(sizes, x.options().dtype(torch::kFloat));
}

// x [..., K] (fp32 or bf16, contiguous) -> y [..., N] fp32
// tiles: the rows are a prompt's (a prefill), which may run on AMX's tiles (kernels_amx.h) where the CPU has them:
// their sums round differently from VDPBF16PS's, so the caller asks for it only for rows every method computes alike.
torch::Tensor q4_gemm(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& d,
                      const torch::Tensor& z, bool tiles) {
  TORCH_CHECK(packed.dim() == 5 && packed.scalar_type() == torch::kUInt8 && packed.is_contiguous() &&
                  packed.size(2) == 8 && packed.size(3) == 2 && packed.size(4) == 32,
              "packed: [N/32, K/32, 8, 2, 32] uint8");
  const Rows rows = rows_of(x);
  const int64_t K = x.size(-1), M = rows.M, KB = packed.size(1);
  const int64_t N = packed.size(0) * TILE_N;
  TORCH_CHECK(K == KB * G, "x has ", K, " inputs, the weight ", KB * G);
  TORCH_CHECK(d.sizes() == z.sizes() && d.dim() == 3 && d.size(0) * TILE_N == N && d.size(1) == KB &&
                  d.size(2) == TILE_N && d.scalar_type() == torch::kHalf && z.scalar_type() == torch::kHalf &&
                  d.is_contiguous() && z.is_contiguous(),
              "d, z: [N/32, K/32, 32] fp16");
  auto y = output_for(x, N);
  const uint8_t* Wp = packed.data_ptr<uint8_t>();
  const at::Half* Dp = d.data_ptr<at::Half>();
  const at::Half* Zp = z.data_ptr<at::Half>();
  float* Yp = y.data_ptr<float>();
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
  if (tiles && amx()) {
    amx_tiles(N / TILE_N, KB * 32, [&](int64_t t, __m512i* bq) {
      q4_amx(rows.a.data(), rows.sums.data(), Wp, Dp, Zp, Yp, M, K, N, t, bq);
    });
    return y;
  }
#endif
  at::parallel_for(0, N / TILE_N, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t m0 = 0; m0 < M; m0 += PASS_M) {
      const int64_t mb = std::min<int64_t>(PASS_M, M - m0);
      const Lane* am = rows.a.data() + m0 * K * SPREAD;
      const float* sm = rows.sums.data() + m0 * KB;
      int64_t t = t0;
#if SPECREPRO_Q4 == 1
      for (; mb <= 2 && t + 2 <= t1; t += 2) PAIRS[mb](am, sm, Wp, Dp, Zp, Yp + m0 * N, K, N, t);
#endif
      for (; t < t1; ++t) TILES[mb](am, sm, Wp, Dp, Zp, Yp + m0 * N, K, N, t);
    }
  });
  return y;
}

// One decoder layer of the Llama family on the engine's 4-bit weights (no q/k/v biases, no per-head q/k norm), all
// in fp32 between the GEMMs, as llama.LlamaStack.forward's loop does it op by op (about 30 ops a layer there, whose
// dispatching is ~3 ms of a decode step on 2 cores):
//   h = rms_norm(x, w_attn); [q, k, v] = h Wqkv; q and k rotated (x cos + roll(x, D/2) ssin); k and v written at
//   their slots; x += attention(q, the cache's first S slots) Wo; h = rms_norm(x, w_mlp); [g, u] = h Wgu;
//   x += (silu(g) u) Wdown.
// q4_mm(x, packed, d, z, bulk): x [..., K] -> [..., N] fp32, where bulk (bool, x's leading shape, or none) marks the
// rows that are a prompt's: those run on q4_gemm's tiles path, the others on VDPBF16PS, each row's result the same bit
// for bit whatever rows are beside it.
torch::Tensor q4_mm(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& d,
                    const torch::Tensor& z, const c10::optional<torch::Tensor>& bulk) {
  if (!bulk.has_value()) return q4_gemm(x, packed, d, z, false);
  const auto marked = bulk->reshape(-1);
  TORCH_CHECK(marked.scalar_type() == torch::kBool && marked.numel() * x.size(-1) == x.numel(),
              "bulk: bool, one per row of x");
  const int64_t n = marked.sum().item<int64_t>();
  if (n == 0 || n == marked.numel()) return q4_gemm(x, packed, d, z, n > 0);
  const auto flat = x.reshape({-1, x.size(-1)});
  const auto rows = marked.nonzero().squeeze(1), rest = marked.logical_not().nonzero().squeeze(1);
  const auto a = q4_gemm(flat.index_select(0, rows), packed, d, z, true);
  auto y = torch::empty({flat.size(0), a.size(1)}, a.options());
  y.index_copy_(0, rows, a);
  y.index_copy_(0, rest, q4_gemm(flat.index_select(0, rest), packed, d, z, false));
  auto sizes = x.sizes().vec();
  sizes.back() = a.size(1);
  return y.view(sizes);
}

// x [B, Q, H] fp32; w: packed, d and z of wqkv, wo, w_gate_up and w_down (q4_mm's layout); cos and ssin [B, Q, D]
// (ssin: sin with its first half negated); k and v: the layer's cache [B, Hkv, C, D] fp32, written in place; slots
// [Q] int64; mask [B, 1, Q, S] additive; bulk [B, Q] bool: the columns that are a prompt's (q4_mm), or none.
// Returns the new x.
torch::Tensor llama_layer(const torch::Tensor& x, const torch::Tensor& attn_norm, const torch::Tensor& mlp_norm,
                          double eps, at::TensorList w, const torch::Tensor& cos, const torch::Tensor& ssin,
                          const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& slots, int64_t S,
                          const torch::Tensor& mask, int64_t n_heads, const c10::optional<torch::Tensor>& bulk) {
  TORCH_CHECK(w.size() == 12, "w: packed, d and z of wqkv, wo, w_gate_up and w_down");
  TORCH_CHECK(x.dim() == 3 && x.scalar_type() == torch::kFloat && x.is_contiguous(), "x: [B, Q, H] fp32");
  const int64_t B = x.size(0), Q = x.size(1), Hq = n_heads;
  TORCH_CHECK(k.dim() == 4 && k.sizes() == v.sizes() && k.scalar_type() == torch::kFloat && k.is_contiguous() &&
                  v.scalar_type() == torch::kFloat && v.is_contiguous() && k.size(0) == B,
              "k, v: the layer's cache [B, Hkv, C, D] fp32");
  const int64_t Hkv = k.size(1), C = k.size(2), D = k.size(3), width = (Hq + 2 * Hkv) * D;
  TORCH_CHECK(Hq % Hkv == 0 && D % 2 == 0 && S >= 1 && S <= C, "heads, head dim or S do not agree");
  TORCH_CHECK(cos.sizes() == ssin.sizes() && cos.numel() == B * Q * D && cos.is_contiguous() && ssin.is_contiguous() &&
                  cos.scalar_type() == torch::kFloat && ssin.scalar_type() == torch::kFloat,
              "cos, ssin: [B, Q, D] fp32");
  TORCH_CHECK(slots.scalar_type() == torch::kLong && slots.numel() == Q && slots.is_contiguous(), "slots: [Q] int64");
  TORCH_CHECK(mask.scalar_type() == torch::kFloat && mask.numel() == B * Q * S && mask.is_contiguous(),
              "mask: [B, 1, Q, S] fp32");
  auto qkv = q4_mm(rms_norm(x, attn_norm, eps), w[0], w[1], w[2], bulk);  // [B, Q, (Hq + 2Hkv) D]
  TORCH_CHECK(qkv.size(2) == width, "wqkv gives ", qkv.size(2), " outputs, the heads need ", width);
  float* P = qkv.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = ssin.data_ptr<float>();
  const int64_t* sl = slots.data_ptr<int64_t>();
  float* Kc = k.data_ptr<float>();
  float* Vc = v.data_ptr<float>();
  std::vector<float> rotated(D);
  for (int64_t r = 0; r < B * Q; ++r) {  // r = b Q + qi
    const int64_t b = r / Q, qi = r % Q, half = D / 2;
    TORCH_CHECK(sl[qi] >= 0 && sl[qi] < C, "slot ", sl[qi], " is outside the cache's ", C);
    const float* c = cp + r * D;
    const float* s = sp + r * D;
    for (int64_t j = 0; j < Hq + Hkv; ++j) {  // the q heads, then the k heads
      float* u = P + r * width + j * D;
      for (int64_t e = 0; e < D; ++e) rotated[e] = u[e] * c[e] + u[e < half ? e + half : e - half] * s[e];
      std::memcpy(u, rotated.data(), D * sizeof(float));
    }
    for (int64_t j = 0; j < Hkv; ++j) {
      std::memcpy(Kc + ((b * Hkv + j) * C + sl[qi]) * D, P + r * width + (Hq + j) * D, D * sizeof(float));
      std::memcpy(Vc + ((b * Hkv + j) * C + sl[qi]) * D, P + r * width + (Hq + Hkv + j) * D, D * sizeof(float));
    }
  }
  auto att = torch::empty({B, Q, Hq * D}, x.options());
  attend_all(P, {Q * width, width, D}, Kc, Vc, mask.data_ptr<float>(), att.data_ptr<float>(), {B, Q, Hq, Hkv, C, S, D},
             1.0f / std::sqrt(static_cast<float>(D)));
  auto y = q4_mm(att, w[3], w[4], w[5], bulk);  // [B, Q, H]
  float* X1 = y.data_ptr<float>();
  const float* X0 = x.data_ptr<float>();
  for (int64_t e = 0; e < x.numel(); ++e) X1[e] += X0[e];  // x + attention's output, in y's storage
  auto gu = q4_mm(rms_norm(y, mlp_norm, eps), w[6], w[7], w[8], bulk);  // [B, Q, 2I]
  const int64_t I = gu.size(2) / 2;
  auto act = torch::empty({B, Q, I}, x.options());
  float* G = gu.data_ptr<float>();
  float* Ap = act.data_ptr<float>();
  for (int64_t r = 0; r < B * Q; ++r) {
    const float* gr = G + r * 2 * I;
    const float* ur = gr + I;
    float* ar = Ap + r * I;
#pragma omp simd
    for (int64_t e = 0; e < I; ++e) {  // silu(g) = g / (1 + e^-g), with e^-|g| <= 1 for either sign
      const float t = exp_nonpositive(-std::fabs(gr[e]));
      ar[e] = (gr[e] >= 0.f ? gr[e] / (1.f + t) : gr[e] * t / (1.f + t)) * ur[e];
    }
  }
  auto out = q4_mm(act, w[9], w[10], w[11], bulk);  // [B, Q, H]
  float* O = out.data_ptr<float>();
  for (int64_t e = 0; e < out.numel(); ++e) O[e] += X1[e];
  return out;
}

#if SPECREPRO_Q4 == 1
// q8_mm: the 8-bit GEMM of a GGUF Q8_0 weight (the offline model's LM head): W[n, k] = d[n, b] * q[n, k], q int8,
// b = k / 32: y = sum_b d_nb * sum_{k in b} x_k q_nk, x rounded to bf16 (as a bf16 F.linear reads it), q exact in
// bf16, through VDPBF16PS with fp32 sums. Layouts (llama.q8_pack): 16 outputs a tile; packed [N/16, K/2, 32] int8:
// at input pair j, bytes 0..15 are outputs 0..7 at k = 2j and 2j+1 (output-major), bytes 16..31 outputs 8..15;
// d [N/16, K/32, 16] fp16. Two running sums a block (even and odd pairs) whatever the rows, so a row's result does
// not depend on the rows beside it; up to 8 rows a pass over the weights.
template <int MB>
void q8_tile(const uint16_t* A, const int8_t* W, const at::Half* D, float* Y, int64_t K, int64_t N, int64_t t) {
  const int64_t KB = K / G;
  __m512 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < KB; ++b) {
    __m512 even[MB], odd[MB];
    for (int m = 0; m < MB; ++m) even[m] = odd[m] = _mm512_setzero_ps();
    const int8_t* wb = W + (t * K + b * G) * 16;  // 16 pairs of 32 bytes
    _mm_prefetch(reinterpret_cast<const char*>(wb + 8 * G * 16), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(wb + 8 * G * 16 + 256), _MM_HINT_T0);
#pragma GCC unroll 16
    for (int j = 0; j < G / 2; ++j) {
      const __m512bh w = q8_pair(wb + j * 32);
      for (int m = 0; m < MB; ++m) {
        const __m512i x = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(A + m * K + b * G + 2 * j));
        if (j % 2 == 0)
          even[m] = _mm512_dpbf16_ps(even[m], (__m512bh)x, w);
        else
          odd[m] = _mm512_dpbf16_ps(odd[m], (__m512bh)x, w);
      }
    }
    const __m512 d = half16(D + (t * KB + b) * 16);
    for (int m = 0; m < MB; ++m) acc[m] = _mm512_fmadd_ps(d, _mm512_add_ps(even[m], odd[m]), acc[m]);
  }
  for (int m = 0; m < MB; ++m) _mm512_storeu_ps(Y + m * N + t * 16, acc[m]);
}

using Q8Tile = void (*)(const uint16_t*, const int8_t*, const at::Half*, float*, int64_t, int64_t, int64_t);
constexpr Q8Tile Q8_TILES[] = {nullptr, q8_tile<1>, q8_tile<2>, q8_tile<3>, q8_tile<4>, q8_tile<5>, q8_tile<6>,
                               q8_tile<7>, q8_tile<8>};
#endif

// x [..., K] (fp32 or bf16, contiguous) -> y [..., N] fp32
torch::Tensor q8_mm(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& d) {
  TORCH_CHECK(packed.dim() == 3 && packed.scalar_type() == torch::kChar && packed.is_contiguous() &&
                  packed.size(2) == 32, "packed: [N/16, K/2, 32] int8");
  const Rows rows = rows_of(x);
  const int64_t K = x.size(-1), M = rows.M, N = packed.size(0) * 16, KB = K / G;
  TORCH_CHECK(packed.size(1) * 2 == K && K % G == 0, "x has ", K, " inputs, the weight ", packed.size(1) * 2);
  TORCH_CHECK(d.dim() == 3 && d.size(0) * 16 == N && d.size(1) == KB && d.size(2) == 16 &&
                  d.scalar_type() == torch::kHalf && d.is_contiguous(), "d: [N/16, K/32, 16] fp16");
  auto y = output_for(x, N);
  const int8_t* Wp = packed.data_ptr<int8_t>();
  const at::Half* Dp = d.data_ptr<at::Half>();
  float* Yp = y.data_ptr<float>();
  at::parallel_for(0, N / 16, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t m0 = 0; m0 < M; m0 += PASS_M)
      for (int64_t t = t0; t < t1; ++t)
        Q8_TILES[std::min<int64_t>(PASS_M, M - m0)](rows.a.data() + m0 * K * SPREAD, Wp, Dp, Yp + m0 * N, K, N, t);
  });
  return y;
}

#endif  // SPECREPRO_Q4

}  // namespace

TORCH_LIBRARY(specrepro, m) {
  m.def("rms_norm(Tensor x, Tensor w, float eps) -> Tensor");
  m.def("attention(Tensor q, Tensor k, Tensor v, int S, Tensor mask, float scale) -> Tensor");
#if defined(SPECREPRO_Q4)
  m.def("q4_mm(Tensor x, Tensor packed, Tensor d, Tensor z, Tensor? bulk=None) -> Tensor");
  m.def("llama_layer(Tensor x, Tensor attn_norm, Tensor mlp_norm, float eps, Tensor[] w, Tensor cos, Tensor ssin, "
        "Tensor(a!) k, Tensor(b!) v, Tensor slots, int S, Tensor mask, int n_heads, Tensor? bulk=None) -> Tensor");
  m.def("q8_mm(Tensor x, Tensor packed, Tensor d) -> Tensor");
#endif
}

TORCH_LIBRARY_IMPL(specrepro, CPU, m) {
  m.impl("rms_norm", rms_norm);
  m.impl("attention", attention);
#if defined(SPECREPRO_Q4)
  m.impl("q4_mm", q4_mm);
  m.impl("llama_layer", llama_layer);
  m.impl("q8_mm", q8_mm);
#endif
}
