// Graph attention over a CSR by destination, in the mergeable form a vertex-cut needs
// (docs/design.md#attention-across-parts).
//
// For destination v, head h, over its in-edges u -> v (plus the self loop v -> v when v < n_self):
//
//   e_uv   = LeakyReLU(el[u, h] + er[v, h], slope)
//   m[v,h] = max_u e_uv                                   (-inf for a row without terms)
//   s[v,h] = sum_u exp(e_uv - m[v,h])
//   q[v,h] = sum_u exp(e_uv - m[v,h]) d_uvh z[u, h, :]    (d: keyed attention dropout, 1 without)
//
// so the softmax-weighted sum is q / s, and partial (m, s, q) of one vertex from several parts
// merge exactly: with M = max_k m_k, q = sum_k exp(m_k - M) q_k, s likewise. The dropout mask
// d_uvh is keyed by (seed, epoch, layer, global id of u, global id of v, head) through the hash of
// distgnn/dropout.hpp, so every part draws the same mask for an edge without communication.
//
// Backward treats m as a constant (the result does not depend on it): given gq = dL/dq and
// gs = dL/ds, with w_uv = exp(e_uv - m[v]),
//
//   dL/dz[u]  = sum_v w_uv d_uv gq[v]
//   dL/de_uv  = w_uv (d_uv <gq[v], z[u]> + gs[v])   ->  through the LeakyReLU to el[u] and er[v]
//
// er's gradient sums over a destination's edges (the CSR), el's and z's over a source's edges
// (the transpose, so no atomics): each pass recomputes e, w and the dot products it needs.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "distgnn/common.hpp"
#include "distgnn/dropout.hpp"

namespace distgnn::attention {

struct Dropout {
  double p = 0.0;        // attention dropout probability (0: none)
  uint64_t key = 0;      // dropout::layer_key(seed, epoch, layer)
  const int64_t* src_gids = nullptr;  // [n_src] global ids of the sources
  const int64_t* dst_gids = nullptr;  // [n_dst] global ids of the destinations
};

template <typename T>
struct Mask {
  uint64_t thr = 0;
  T scale = T(1);
  const Dropout* d = nullptr;

  explicit Mask(const Dropout& drop) : d(&drop) {
    thr = dropout::threshold(drop.p);
    scale = thr >= (uint64_t(1) << 24) ? T(0) : T(1.0 / (1.0 - double(thr) / double(1 << 24)));
  }
  // The key of edge (u -> v), drawn once per edge; at(key, h) is then one mix per head.
  uint64_t edge(int64_t u, int64_t v) const {
    if (thr == 0) return 0;
    const uint64_t ku = dropout::mix(d->key + static_cast<uint64_t>(d->src_gids[u]));
    return dropout::mix(ku + static_cast<uint64_t>(d->dst_gids[v]));
  }
  // The scaled mask of head h of the edge whose key is `key`.
  T at(uint64_t key, int64_t h) const {
    if (thr == 0) return T(1);
    return (dropout::mix(key + static_cast<uint64_t>(h)) >> 40) >= thr ? scale : T(0);
  }
};

template <typename T>
inline T leaky(T x, T slope) { return x > T(0) ? x : slope * x; }

// The terms of destination v: in-edges (indices[b..e)) then, when v < n_self, v itself.
template <typename I, typename F>
inline void for_sources(const int64_t* indptr, const I* indices, int64_t v, int64_t n_self, F&& f) {
  for (int64_t j = indptr[v]; j < indptr[v + 1]; ++j) f(static_cast<int64_t>(indices[j]));
  if (v < n_self) f(v);
}

// Forward: m, s [n_dst, H], q [n_dst, H * D] (overwritten).
template <typename T, typename I>
void forward(const int64_t* indptr, const I* indices, int64_t n_dst, int64_t n_self, const T* z,
             const T* el, const T* er, int64_t H, int64_t D, T slope, const Dropout& drop, T* m,
             T* s, T* q, int threads) {
  threads = resolve_threads(threads);
  const Mask<T> mask(drop);
  const int64_t W = H * D;
#pragma omp parallel num_threads(threads)
  {
    std::vector<T> mv(H);
    std::vector<T> scores;  // the row's scores, [terms, H]: the second pass gathers z only
#pragma omp for schedule(dynamic, 64)
    for (int64_t v = 0; v < n_dst; ++v) {
      const T* erv = er + v * H;
      const int64_t terms = indptr[v + 1] - indptr[v] + (v < n_self ? 1 : 0);
      scores.resize(static_cast<size_t>(terms * H));
      std::fill(mv.begin(), mv.end(), -std::numeric_limits<T>::infinity());
      T* e = scores.data();
      for_sources(indptr, indices, v, n_self, [&](int64_t u) {
        const T* elu = el + u * H;
        for (int64_t h = 0; h < H; ++h) {
          e[h] = leaky(elu[h] + erv[h], slope);
          mv[h] = std::max(mv[h], e[h]);
        }
        e += H;
      });
      T* sv = s + v * H;
      T* qv = q + v * W;
      std::fill(sv, sv + H, T(0));
      std::fill(qv, qv + W, T(0));
      e = scores.data();
      for_sources(indptr, indices, v, n_self, [&](int64_t u) {
        const T* zu = z + u * W;
        const uint64_t key = mask.edge(u, v);
        for (int64_t h = 0; h < H; ++h) {
          const T w = std::exp(e[h] - mv[h]);
          sv[h] += w;
          const T wd = w * mask.at(key, h);
          if (wd == T(0)) continue;
          T* __restrict qh = qv + h * D;
          const T* __restrict zh = zu + h * D;
          for (int64_t c = 0; c < D; ++c) qh[c] += wd * zh[c];
        }
        e += H;
      });
      std::copy(mv.begin(), mv.end(), m + v * H);
    }
  }
}

// dL/dpre of edge (u -> v), head h, with pre = el[u] + er[v]; also returns w d (for dL/dz).
template <typename T>
inline T edge_grad(T pre, T m, T d, const T* gq, const T* zu, T gs, int64_t D, T slope, T* wd) {
  const T w = std::exp(leaky(pre, slope) - m);
  *wd = w * d;
  T dot = T(0);
  if (d != T(0))
    for (int64_t c = 0; c < D; ++c) dot += gq[c] * zu[c];
  const T de = w * (d * dot + gs);
  return pre > T(0) ? de : slope * de;
}

// Backward: ger [n_dst, H] over the CSR; gz [n_src, H * D] and gel [n_src, H] over its transpose
// (t_indptr [n_src + 1], t_indices: destinations). All outputs overwritten.
template <typename T, typename I>
void backward(const int64_t* indptr, const I* indices, const int64_t* t_indptr, const I* t_indices,
              int64_t n_dst, int64_t n_src, int64_t n_self, const T* z, const T* el, const T* er,
              const T* m, const T* gq, const T* gs, int64_t H, int64_t D, T slope,
              const Dropout& drop, T* gz, T* gel, T* ger, int threads) {
  threads = resolve_threads(threads);
  const Mask<T> mask(drop);
  const int64_t W = H * D;
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(dynamic, 64)
    for (int64_t v = 0; v < n_dst; ++v) {
      T* gerv = ger + v * H;
      std::fill(gerv, gerv + H, T(0));
      for_sources(indptr, indices, v, n_self, [&](int64_t u) {
        const uint64_t key = mask.edge(u, v);
        for (int64_t h = 0; h < H; ++h) {
          T wd;
          gerv[h] += edge_grad(el[u * H + h] + er[v * H + h], m[v * H + h], mask.at(key, h),
                               gq + v * W + h * D, z + u * W + h * D, gs[v * H + h], D, slope, &wd);
        }
      });
    }
#pragma omp for schedule(dynamic, 64)
    for (int64_t u = 0; u < n_src; ++u) {
      T* gzu = gz + u * W;
      T* gelu = gel + u * H;
      std::fill(gzu, gzu + W, T(0));
      std::fill(gelu, gelu + H, T(0));
      // destinations of u: its out-edges, then u itself when it has a self loop (u < n_self)
      for_sources(t_indptr, t_indices, u, n_self, [&](int64_t v) {
        const uint64_t key = mask.edge(u, v);
        for (int64_t h = 0; h < H; ++h) {
          T wd;
          const T* gqv = gq + v * W + h * D;
          gelu[h] += edge_grad(el[u * H + h] + er[v * H + h], m[v * H + h], mask.at(key, h), gqv,
                               z + u * W + h * D, gs[v * H + h], D, slope, &wd);
          if (wd == T(0)) continue;
          T* __restrict g = gzu + h * D;
          for (int64_t c = 0; c < D; ++c) g[c] += wd * gqv[c];
        }
      });
    }
  }
}

}  // namespace distgnn::attention
