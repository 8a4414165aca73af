// Dropout keyed by (seed, epoch, layer, global vertex id, column) through a counter-based hash, so
// every replica of a vertex, on any rank, draws the same mask without communication.
//
//   key  = mix(mix(mix(seed) + epoch) + layer)
//   h    = mix(mix(key + gid) + column)              (all arithmetic modulo 2^64)
//   u    = (h >> 40) / 2^24                          (uniform on [0, 1), 24 bits)
//   keep = u >= p;  mask = keep / (1 - p)
//
// mix is SplitMix64's finaliser (Steele, Lea, Flood 2014). tests/ops_reference.py repeats this in
// numpy; the two must stay identical.
//
// The per-row loop is compiled for AVX-512, AVX2 and baseline x86-64 and picked at run time (the
// same bits on every path: only the instruction set differs; distgnn/isa.hpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "distgnn/common.hpp"
#include "distgnn/isa.hpp"

namespace distgnn::dropout {

inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t layer_key(uint64_t seed, uint64_t epoch, uint64_t layer) {
  return mix(mix(mix(seed) + epoch) + layer);
}

// Keep threshold on the 24-bit draw: keep when (h >> 40) >= threshold.
inline uint64_t threshold(double p) {
  if (p <= 0.0) return 0;
  if (p >= 1.0) return uint64_t(1) << 24;
  return static_cast<uint64_t>(p * double(1 << 24) + 0.5);
}

// bfloat16 values are stored as their 16 raw bits (S = uint16_t) and computed on in float32: a
// load widens exactly, a store rounds to nearest even as torch's float -> bfloat16 cast does
// (a NaN becomes the quiet NaN 0x7fc0), so a kernel over bfloat16 gives the bits of the same
// computation in float32 followed by `.to(torch.bfloat16)`, NaN payloads aside.
template <typename T, typename S>
__attribute__((always_inline)) inline T load(S v) {
  if constexpr (std::is_same_v<S, uint16_t>) {
    const uint32_t bits = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  } else {
    return v;
  }
}

template <typename S, typename T>
__attribute__((always_inline)) inline S store(T v) {
  if constexpr (std::is_same_v<S, uint16_t>) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    return static_cast<uint16_t>(v != v ? 0x7fc0u : rounded);
  } else {
    return v;
  }
}

// One row: o[c] = xi[c] * mask(c) (Relu: max(xi[c], 0) * mask(c), NaN kept as ReLU keeps it), or
// the mask itself when xi is null; kv = mix(key + gid). Values are S in memory and T in the
// arithmetic (above). No branches in the column loops, so the compiler vectorises the 64-bit hash.
template <typename T, bool Relu, typename S = T>
__attribute__((always_inline)) inline void row_body(const S* __restrict xi, uint64_t kv, int64_t F,
                                                    uint64_t thr, T scale, S* __restrict o) {
  if (xi != nullptr) {
    for (int64_t c = 0; c < F; ++c) {
      const uint64_t h = mix(kv + static_cast<uint64_t>(c));
      const T x = load<T>(xi[c]);
      const T v = Relu ? ((x > T(0) || x != x) ? x : T(0)) : x;
      o[c] = store<S>(v * ((h >> 40) >= thr ? scale : T(0)));
    }
  } else {
    for (int64_t c = 0; c < F; ++c) {
      const uint64_t h = mix(kv + static_cast<uint64_t>(c));
      o[c] = store<S>((h >> 40) >= thr ? scale : T(0));
    }
  }
}

template <typename T, typename S = T>
using RowFn = void (*)(const S*, uint64_t, int64_t, uint64_t, T, S*);

template <typename T, bool Relu, typename S>
void row_base(const S* xi, uint64_t kv, int64_t F, uint64_t thr, T scale, S* o) {
  row_body<T, Relu, S>(xi, kv, F, thr, scale, o);
}
#ifdef DISTGNN_DISPATCH
template <typename T, bool Relu, typename S>
DISTGNN_TARGET_AVX2 void row_avx2(const S* xi, uint64_t kv, int64_t F, uint64_t thr, T scale, S* o) {
  row_body<T, Relu, S>(xi, kv, F, thr, scale, o);
}
template <typename T, bool Relu, typename S>
DISTGNN_TARGET_AVX512 void row_avx512(const S* xi, uint64_t kv, int64_t F, uint64_t thr, T scale, S* o) {
  row_body<T, Relu, S>(xi, kv, F, thr, scale, o);
}
#endif

template <typename T, bool Relu, typename S = T>
RowFn<T, S> pick_row() {
#ifdef DISTGNN_DISPATCH
  const cpu::Isa isa = cpu::detect_isa();
  if (isa == cpu::Isa::avx512) return &row_avx512<T, Relu, S>;
  if (isa == cpu::Isa::avx2) return &row_avx2<T, Relu, S>;
#endif
  return &row_base<T, Relu, S>;
}

// The scale of a kept entry, 1 / (1 - p) with p quantised to the draw's 24 bits (0 when p = 1).
template <typename T>
T keep_scale(uint64_t thr) {
  return thr >= (uint64_t(1) << 24) ? T(0) : T(1.0 / (1.0 - double(thr) / double(1 << 24)));
}

// out[i, c] = x[i, c] * mask(gids[i], c) (Relu: max(x[i, c], 0) * mask), or the mask itself when x
// is null. Rows of width F; values stored as S (T, or uint16_t for bfloat16 computed in T).
template <typename T, typename G, bool Relu = false, typename S = T>
void apply(const S* x, const G* gids, int64_t n, int64_t F, double p, uint64_t seed,
           uint64_t epoch, uint64_t layer, S* out, int threads) {
  threads = resolve_threads(threads);
  const uint64_t key = layer_key(seed, epoch, layer);
  const uint64_t thr = threshold(p);
  const T scale = keep_scale<T>(thr);
  const RowFn<T, S> row = pick_row<T, Relu, S>();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t kv = mix(key + static_cast<uint64_t>(static_cast<int64_t>(gids[i])));
    row(x != nullptr ? x + i * F : nullptr, kv, F, thr, scale, out + i * F);
  }
}

// The gradient of out = max(x, 0) * mask through out itself: grad_in = grad where out > 0 (a kept
// positive entry), times the keep scale; 0 elsewhere. No mask is drawn again. Stored as S.
template <typename T, typename S = T>
__attribute__((always_inline)) inline void relu_grad_body(const S* __restrict grad, const S* __restrict out,
                                                         int64_t count, T scale, S* __restrict grad_in) {
  for (int64_t i = 0; i < count; ++i)
    grad_in[i] = store<S>(load<T>(out[i]) > T(0) ? load<T>(grad[i]) * scale : T(0));
}
template <typename T, typename S = T>
using GradFn = void (*)(const S*, const S*, int64_t, T, S*);
template <typename T, typename S>
void relu_grad_base(const S* grad, const S* out, int64_t count, T scale, S* grad_in) {
  relu_grad_body<T, S>(grad, out, count, scale, grad_in);
}
#ifdef DISTGNN_DISPATCH
template <typename T, typename S>
DISTGNN_TARGET_AVX2 void relu_grad_avx2(const S* grad, const S* out, int64_t count, T scale, S* grad_in) {
  relu_grad_body<T, S>(grad, out, count, scale, grad_in);
}
template <typename T, typename S>
DISTGNN_TARGET_AVX512 void relu_grad_avx512(const S* grad, const S* out, int64_t count, T scale, S* grad_in) {
  relu_grad_body<T, S>(grad, out, count, scale, grad_in);
}
#endif

template <typename T, typename S = T>
void relu_dropout_backward(const S* grad, const S* out, int64_t count, double p, S* grad_in,
                           int threads) {
  threads = resolve_threads(threads);
  const T scale = keep_scale<T>(threshold(p));
  GradFn<T, S> fn = &relu_grad_base<T, S>;
#ifdef DISTGNN_DISPATCH
  const cpu::Isa isa = cpu::detect_isa();
  if (isa == cpu::Isa::avx512) fn = &relu_grad_avx512<T, S>;
  else if (isa == cpu::Isa::avx2) fn = &relu_grad_avx2<T, S>;
#endif
  constexpr int64_t kChunk = 1 << 16;  // values per task: large, contiguous, cache-line aligned
  const int64_t chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, len = std::min(kChunk, count - begin);
    fn(grad + begin, out + begin, len, scale, grad_in + begin);
  }
}

}  // namespace distgnn::dropout
