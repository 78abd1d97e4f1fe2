// q4_mm's bulk path, on AMX (included by kernels.cpp, which -march=native builds with AMX-BF16 on Sapphire Rapids and
// later Xeons): a prompt's rows (a prefill). VDPBF16PS costs each row of x its own products (one pass over the weights
// serves 8 rows); TDPBF16PS multiplies up to 16 rows by a tile of weights in one instruction, so a 64-column prefill
// chunk costs about a third of what it costs on VDPBF16PS (measured on the 1536x576 shape: 16 rows 67 us, 186 us).
//
// Per tile of outputs and block of 32 inputs: the block's integers q go, in the VNNI order that nibbles() already
// gives, to B (16 input pairs x 16 outputs); x's rows of the block are A (mb rows x 32 bf16); C = A B (fp32) is each
// row's sum_{k in b} x_k q_nk, and d and z are applied once a block in fp32, as on the AVX-512 path. A row's result
// is the same bit for bit whatever the rows beside it, but TDPBF16PS rounds a block's sum differently from VDPBF16PS
// (most outputs differ in their last bits), and one row costs 1.3x more here: so the decode and verification rows
// stay on VDPBF16PS, and only the rows the caller marks as a prompt's (bulk) come here, the same rows in every
// method. $SPECREPRO_KERNELS=no-amx keeps them on VDPBF16PS too (to compare).
#pragma once

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
constexpr int64_t AMX_M = 16;  // rows a pass (a tile's rows)

// Linux lends a process the tile registers on request (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), once.
inline bool amx() {
  static const bool granted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  const char* choice = std::getenv("SPECREPRO_KERNELS");
  return granted && !(choice != nullptr && std::strcmp(choice, "no-amx") == 0);
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0 and 1: C (mb rows of 16 fp32); 2: A (mb rows of 32 bf16); 3 and 4: B (16 input pairs of 16 outputs).
inline void configure(int64_t mb) {
  TileConfig c;
  for (int i = 0; i < 5; ++i) {
    c.colsb[i] = 64;
    c.rows[i] = static_cast<uint8_t>(i < 3 ? mb : 16);
  }
  // (GCC does not see that LDTILECFG reads c: without this barrier it may drop the stores above, seen as a zero
  // configuration and a fault once configure was inlined into q4_amx's loop)
  __asm__ __volatile__("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}

// f(t, bq) for every tile t of outputs, the tiles split among torch's threads, each with its own buffer bq of
// ``buffer`` B rows (each thread configures its own tiles: other code, oneDNN's among it, may use them between calls).
template <typename F>
void amx_tiles(int64_t tiles, int64_t buffer, const F& f) {
  at::parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
    auto* bq = static_cast<__m512i*>(std::aligned_alloc(64, buffer * sizeof(__m512i)));  // (zmm stores: aligned)
    for (int64_t t = t0; t < t1; ++t) f(t, bq);
    std::free(bq);
    _tile_release();
  });
}

// q4_mm's tile t (32 outputs) for all M rows, 16 a pass: A [M, K] bf16 bits, S [M, K/32] their block sums. The
// tile's integers are dequantised once into bq (K/32 blocks of two B tiles, outputs 0..15 and 16..31) and serve
// every pass: a 64-row prefill chunk reads and converts the weights once, not four times.
void q4_amx(const uint16_t* A, const float* S, const uint8_t* W, const at::Half* D, const at::Half* Z, float* Y,
            int64_t M, int64_t K, int64_t N, int64_t t, __m512i* bq) {
  const int64_t KB = K / G;
  for (int64_t b = 0; b < KB; ++b) {
    const uint8_t* wb = W + (t * KB + b) * 512;
    __m512i* b0 = bq + b * 32;
    __m512i* b1 = b0 + 16;
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(wb + r * 64 + PREFETCH), _MM_HINT_T0);
      nibbles(wb + r * 64, b0[2 * r], b0[2 * r + 1], b1[2 * r], b1[2 * r + 1]);
    }
  }
  alignas(64) float c[2][2][AMX_M * 16];  // C of outputs 0..15 and 16..31, for even and odd blocks
  for (int64_t m0 = 0; m0 < M; m0 += AMX_M) {
    const int64_t mb = std::min<int64_t>(AMX_M, M - m0);
    configure(mb);
    __m512 acc[AMX_M][2];
    for (int64_t m = 0; m < mb; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < KB; ++b) {
      float* c0 = c[b & 1][0];
      float* c1 = c[b & 1][1];
      _tile_loadd(2, A + m0 * K + b * G, K * 2);
      _tile_loadd(3, bq + b * 32, 64);
      _tile_loadd(4, bq + b * 32 + 16, 64);
      _tile_zero(0);
      _tile_zero(1);
      _tile_dpbf16ps(0, 2, 3);
      _tile_dpbf16ps(1, 2, 4);
      _tile_stored(0, c0, 64);
      _tile_stored(1, c1, 64);
      const at::Half* d = D + (t * KB + b) * TILE_N;
      const at::Half* z = Z + (t * KB + b) * TILE_N;
      const __m512 d0 = half16(d), d1 = half16(d + 16), z0 = half16(z), z1 = half16(z + 16);
      for (int64_t m = 0; m < mb; ++m) {
        const __m512 s = _mm512_set1_ps(S[(m0 + m) * KB + b]);
        acc[m][0] = _mm512_fmadd_ps(z0, s, _mm512_fmadd_ps(d0, _mm512_load_ps(c0 + m * 16), acc[m][0]));
        acc[m][1] = _mm512_fmadd_ps(z1, s, _mm512_fmadd_ps(d1, _mm512_load_ps(c1 + m * 16), acc[m][1]));
      }
    }
    for (int64_t m = 0; m < mb; ++m) {
      _mm512_storeu_ps(Y + (m0 + m) * N + t * TILE_N, acc[m][0]);
      _mm512_storeu_ps(Y + (m0 + m) * N + t * TILE_N + 16, acc[m][1]);
    }
  }
}
#endif  // AMX-BF16
