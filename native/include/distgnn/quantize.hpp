// Rows in fewer bits for the wire: each float32 row of F columns becomes `row_bytes` bytes,
//
//   [n_groups x (float32 scale, float32 low)] [ceil(F * bits / 8) bytes of codes] [zeros to 4 bytes]
//
// group g covering columns [g G, min(F, (g + 1) G)), G = `group` (0: the whole row). Per group,
// with L = 2^bits - 1:
//
//   low = min x,  scale = (max x - low) / L,  code = min(L, floor((x - low) / scale + u)),
//   decoded = low + code * scale
//
// u = 1/2 rounds to nearest (|error| <= scale / 2); a uniform draw u in [0, 1) rounds
// stochastically (|error| < scale and E[decoded] = x: no bias to accumulate in sums). The draw is
// keyed, not random: u = (hash32(row key, column) >> 8) / 2^24 with row key = mix(key + row), so
// a rerun and a resume draw the same (distgnn/row_exchange.py derives `key` from the seed, the
// epoch and the exchange's number in it). Code j of a row sits in byte (j bits) / 8 at bit
// (j bits) % 8. A group with a non-finite value decodes to NaN throughout (a diverged run stays
// visibly diverged). Compiled for AVX-512, AVX2 and baseline x86-64 like the aggregation kernels
// (distgnn/isa.hpp); the loops are written so the compiler vectorises them.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "distgnn/common.hpp"
#include "distgnn/dropout.hpp"
#include "distgnn/isa.hpp"

namespace distgnn::quantize {

inline int64_t n_groups(int64_t F, int64_t group) {
  return group <= 0 || group >= F ? 1 : (F + group - 1) / group;
}

inline int64_t code_bytes(int64_t F, int bits) { return (F * bits + 7) / 8; }

// Bytes per encoded row: the groups' (scale, low) pairs, the codes, padding to 4 bytes (so every
// row's float32 header is aligned).
inline int64_t row_bytes(int64_t F, int bits, int64_t group) {
  const int64_t raw = 8 * n_groups(F, group) + code_bytes(F, bits);
  return (raw + 3) / 4 * 4;
}

namespace detail {

// A 32-bit integer hash with low bias (Wellons' "lowbias32"); vectorises with 32-bit multiplies.
__attribute__((always_inline)) inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// One row: codes (one byte each) into `codes`, the groups' (scale, low) into `header`.
__attribute__((always_inline)) inline void encode_row_body(const float* __restrict x, int64_t F,
                                                           int bits, int64_t G, bool stochastic,
                                                           uint64_t row_key, float* __restrict header,
                                                           uint8_t* __restrict codes) {
  const float levels = static_cast<float>((1 << bits) - 1);
  const uint32_t k_lo = static_cast<uint32_t>(row_key), k_hi = static_cast<uint32_t>(row_key >> 32);
  for (int64_t g0 = 0, gi = 0; g0 < F; g0 += G, ++gi) {
    const int64_t g1 = g0 + G < F ? g0 + G : F;
    float lo = std::numeric_limits<float>::infinity(), hi = -lo, bad = 0.0f;
#pragma omp simd reduction(min : lo) reduction(max : hi) reduction(+ : bad)
    for (int64_t c = g0; c < g1; ++c) {
      const float v = x[c];
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
      bad += v * 0.0f;  // NaN for an infinity or a NaN, else 0
    }
    const float span = hi - lo;
    float scale = span / levels, inv = span > 0.0f ? levels / span : 0.0f;
    if (bad != 0.0f) {  // a non-finite value: the whole group decodes to NaN
      scale = lo = std::numeric_limits<float>::quiet_NaN();
      inv = 0.0f;
    }
    header[2 * gi] = scale;
    header[2 * gi + 1] = lo;
    const float lo_used = bad != 0.0f ? 0.0f : lo;
    if (stochastic) {
#pragma omp simd
      for (int64_t k = g0; k < g1; ++k) {
        const uint32_t h = hash32(k_lo ^ (static_cast<uint32_t>(k) * 0x9e3779b9U + k_hi));
        const float u = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
        const float t = (x[k] - lo_used) * inv + u;
        const float q = t < levels ? t : levels;
        codes[k] = static_cast<uint8_t>(static_cast<int32_t>(q > 0.0f ? q : 0.0f));
      }
    } else {
#pragma omp simd
      for (int64_t k = g0; k < g1; ++k) {
        const float t = (x[k] - lo_used) * inv + 0.5f;
        const float q = t < levels ? t : levels;
        codes[k] = static_cast<uint8_t>(static_cast<int32_t>(q > 0.0f ? q : 0.0f));
      }
    }
  }
}

// Codes (one byte each, F of them) packed `8 / bits` to a byte, first code in the low bits.
__attribute__((always_inline)) inline void pack_codes(const uint8_t* __restrict codes, int64_t F,
                                                      int bits, uint8_t* __restrict out) {
  if (bits == 8) {
    std::memcpy(out, codes, static_cast<size_t>(F));
    return;
  }
  const int per = 8 / bits;
  const int64_t whole = F / per;
  if (bits == 4) {
    for (int64_t b = 0; b < whole; ++b)
      out[b] = static_cast<uint8_t>(codes[2 * b] | (codes[2 * b + 1] << 4));
  } else {
    for (int64_t b = 0; b < whole; ++b)
      out[b] = static_cast<uint8_t>(codes[4 * b] | (codes[4 * b + 1] << 2) |
                                    (codes[4 * b + 2] << 4) | (codes[4 * b + 3] << 6));
  }
  if (whole * per < F) {  // the last, partial byte; its unused bits stay 0
    uint8_t last = 0;
    for (int64_t j = whole * per; j < F; ++j)
      last = static_cast<uint8_t>(last | (codes[j] << ((j - whole * per) * bits)));
    out[whole] = last;
  }
}

__attribute__((always_inline)) inline void unpack_codes(const uint8_t* __restrict in, int64_t F,
                                                        int bits, uint8_t* __restrict codes) {
  if (bits == 8) {
    std::memcpy(codes, in, static_cast<size_t>(F));
    return;
  }
  const int per = 8 / bits;
  const int64_t whole = F / per;
  if (bits == 4) {
    for (int64_t b = 0; b < whole; ++b) {
      codes[2 * b] = in[b] & 0x0f;
      codes[2 * b + 1] = in[b] >> 4;
    }
  } else {
    for (int64_t b = 0; b < whole; ++b) {
      codes[4 * b] = in[b] & 3;
      codes[4 * b + 1] = (in[b] >> 2) & 3;
      codes[4 * b + 2] = (in[b] >> 4) & 3;
      codes[4 * b + 3] = in[b] >> 6;
    }
  }
  const uint8_t mask = static_cast<uint8_t>((1 << bits) - 1);
  for (int64_t j = whole * per; j < F; ++j)
    codes[j] = (in[whole] >> ((j - whole * per) * bits)) & mask;
}

__attribute__((always_inline)) inline void decode_row_body(const float* __restrict header,
                                                           const uint8_t* __restrict codes,
                                                           int64_t F, int64_t G,
                                                           float* __restrict y) {
  for (int64_t g0 = 0, gi = 0; g0 < F; g0 += G, ++gi) {
    const int64_t g1 = g0 + G < F ? g0 + G : F;
    const float scale = header[2 * gi], lo = header[2 * gi + 1];
    for (int64_t k = g0; k < g1; ++k) y[k] = lo + static_cast<float>(codes[k]) * scale;
  }
}

// One row: encode x (F floats) into `row` (row_bytes), or decode `row` into y. `codes`: F bytes of
// scratch.
template <bool Encode>
__attribute__((always_inline)) inline void row_body(const float* x, uint8_t* row, float* y,
                                                    int64_t F, int bits, int64_t G, bool stochastic,
                                                    uint64_t row_key, uint8_t* codes) {
  const int64_t hb = 8 * n_groups(F, G), cb = code_bytes(F, bits);
  float* header = reinterpret_cast<float*>(row);
  if constexpr (Encode) {
    encode_row_body(x, F, bits, G, stochastic, row_key, header, codes);
    pack_codes(codes, F, bits, row + hb);
    for (int64_t b = hb + cb; b < row_bytes(F, bits, G); ++b) row[b] = 0;
  } else {
    unpack_codes(row + hb, F, bits, codes);
    decode_row_body(header, codes, F, G, y);
  }
}

template <bool Encode>
using RowFn = void (*)(const float*, uint8_t*, float*, int64_t, int, int64_t, bool, uint64_t, uint8_t*);

// The row function compiled for each instruction set; the dispatch sits inside the parallel
// loop (an OpenMP region is outlined into a function of its own, which would not inherit a
// target attribute of the function around it).
template <bool Encode>
void row_base(const float* x, uint8_t* row, float* y, int64_t F, int bits, int64_t G,
              bool stochastic, uint64_t row_key, uint8_t* codes) {
  row_body<Encode>(x, row, y, F, bits, G, stochastic, row_key, codes);
}
#ifdef DISTGNN_DISPATCH
template <bool Encode>
DISTGNN_TARGET_AVX2 void row_avx2(const float* x, uint8_t* row, float* y, int64_t F, int bits,
                                  int64_t G, bool stochastic, uint64_t row_key, uint8_t* codes) {
  row_body<Encode>(x, row, y, F, bits, G, stochastic, row_key, codes);
}
template <bool Encode>
DISTGNN_TARGET_AVX512 void row_avx512(const float* x, uint8_t* row, float* y, int64_t F, int bits,
                                      int64_t G, bool stochastic, uint64_t row_key, uint8_t* codes) {
  row_body<Encode>(x, row, y, F, bits, G, stochastic, row_key, codes);
}
#endif

template <bool Encode>
RowFn<Encode> pick_row() {
#ifdef DISTGNN_DISPATCH
  const cpu::Isa isa = cpu::detect_isa();
  if (isa == cpu::Isa::avx512) return &row_avx512<Encode>;
  if (isa == cpu::Isa::avx2) return &row_avx2<Encode>;
#endif
  return &row_base<Encode>;
}

// Rows ahead whose cache lines a gathering encode requests before it reads them.
constexpr int64_t kPrefetchRows = 4;

// Encode: packed row i from x row `index[i]` (`index` null: row i), so a gather of the rows to
// send costs no pass of its own. Row i's rounding key depends on i alone, so the bytes equal those
// of encoding the gathered rows.
template <bool Encode>
void rows(const float* x, uint8_t* packed, float* y, int64_t n, int64_t F, int bits, int64_t group,
          bool stochastic, uint64_t key, int threads, const int64_t* index = nullptr) {
  const int64_t G = group <= 0 || group >= F ? (F > 0 ? F : 1) : group;
  const int64_t rb = row_bytes(F, bits, G);
  const RowFn<Encode> fn = pick_row<Encode>();
  threads = resolve_threads(threads);
#pragma omp parallel num_threads(threads)
  {
    std::vector<uint8_t> codes(static_cast<size_t>(F));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t row_key = Encode ? dropout::mix(key + static_cast<uint64_t>(i)) : 0;
      const int64_t src = index != nullptr ? index[i] : i;
      if (index != nullptr && i + kPrefetchRows < n) {  // ids jump: fetch a later row's lines now
        const char* ahead = reinterpret_cast<const char*>(x + index[i + kPrefetchRows] * F);
        for (int64_t b = 0; b < F * 4; b += 64) __builtin_prefetch(ahead + b);
        __builtin_prefetch(ahead + F * 4 - 1);  // the last line, where the row starts mid-line
      }
      fn(Encode ? x + src * F : nullptr, packed + i * rb, Encode ? nullptr : y + i * F, F, bits, G,
         stochastic, row_key, codes.data());
    }
  }
}

// Decode packed row i into row index[i] of the table y: assigned (the rows named are distinct,
// so threads share the rows), or with Add added to it, one thread taking the rows in order
// i = 0, 1, ... so a row named twice sums in the order torch's index_add_ sums it.
template <bool Add>
void decode_into(const uint8_t* packed, int64_t n, int64_t F, int bits, int64_t group, float* y,
                 const int64_t* index, int threads) {
  const int64_t G = group <= 0 || group >= F ? (F > 0 ? F : 1) : group;
  const int64_t rb = row_bytes(F, bits, G);
  const RowFn<false> fn = pick_row<false>();
  threads = Add ? 1 : resolve_threads(threads);
#pragma omp parallel num_threads(threads)
  {
    std::vector<uint8_t> codes(static_cast<size_t>(F));
    std::vector<float> row(Add ? static_cast<size_t>(F) : 0);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float* dst = y + index[i] * F;
      uint8_t* src = const_cast<uint8_t*>(packed) + i * rb;
      if (i + kPrefetchRows < n) {  // ids jump: fetch a later row's lines, for writing, now
        const char* ahead = reinterpret_cast<const char*>(y + index[i + kPrefetchRows] * F);
        for (int64_t b = 0; b < F * 4; b += 64) __builtin_prefetch(ahead + b, 1);
        __builtin_prefetch(ahead + F * 4 - 1, 1);
      }
      if constexpr (Add) {
        fn(nullptr, src, row.data(), F, bits, G, false, 0, codes.data());
        for (int64_t k = 0; k < F; ++k) dst[k] += row[k];
      } else {
        fn(nullptr, src, dst, F, bits, G, false, 0, codes.data());
      }
    }
  }
}

}  // namespace detail

// x [n, F] float32 -> packed [n, row_bytes(F, bits, group)]; bits 2, 4 or 8. With `index` ([n],
// each in [0, rows of x)): packed row i from x row index[i] (a fused gather and encode).
inline void encode(const float* x, int64_t n, int64_t F, int bits, int64_t group, bool stochastic,
                   uint64_t key, uint8_t* packed, int threads, const int64_t* index = nullptr) {
  detail::rows<true>(x, packed, nullptr, n, F, bits, group, stochastic, key, threads, index);
}

// packed [n, row_bytes(F, bits, group)] -> rows index[i] of the table y [rows, F] float32,
// assigned (`index` distinct) or added to (`add`, in the order of `index`): the decode fused with
// the scatter of the received rows into their table.
inline void decode_into(const uint8_t* packed, int64_t n, int64_t F, int bits, int64_t group,
                        float* y, const int64_t* index, bool add, int threads) {
  if (add)
    detail::decode_into<true>(packed, n, F, bits, group, y, index, threads);
  else
    detail::decode_into<false>(packed, n, F, bits, group, y, index, threads);
}

// packed [n, row_bytes(F, bits, group)] -> y [n, F] float32.
inline void decode(const uint8_t* packed, int64_t n, int64_t F, int bits, int64_t group, float* y,
                   int threads) {
  detail::rows<false>(nullptr, const_cast<uint8_t*>(packed), y, n, F, bits, group, false, 0, threads);
}

}  // namespace distgnn::quantize
