// Aggregation over a CSR by destination, and the small row kernels around it.
//
//   y[v] = s[v] * (sum_{e in row v} w[u_e] x[u_e] + (v < n_self ? w[v] self[v] : 0)),  u_e = indices[e]
//
// s is an optional per-row scale (mean: 1/deg, gcn: 1/(deg+1)); `self` is an optional per-row term
// (gcn's x[v]); w an optional weight per gathered row (absent: 1). One kernel serves forward and
// backward: backward of y = diag(s) (A x + S x) is x' = A^T (s*g) + S^T (s*g), the kernel on the
// transposed CSR with w = s and self = g, so the scaling costs no pass of its own either way.
//
// Techniques (each measured by bench/kernels.py; the defaults below are the ones that paid here):
// * work split by edges: rows are packed into chunks of about `chunk_edges` edges, and a row with
//   more edges than that (a power-law hub) is cut into pieces whose partial sums are combined after
//   the parallel loop, so a hub never serializes one thread; chunks are scheduled dynamically.
// * feature-column blocking: a chunk is processed one block of `block` columns at a time, so the
//   accumulators of a row stay in registers and the chunk's gathered row pieces and indices stay in
//   cache across rows that share sources.
// * vectorised inner loops (fixed-width blocks unrolled at compile time), compiled for AVX-512,
//   AVX2 and baseline x86-64 and picked at run time (portable build), or for the build machine
//   only when DISTGNN_NATIVE_ARCH is defined.
// * software prefetch of the source row `prefetch` edges ahead (default 8), across row ends.
// * source tiling (Options::tiles, rows sorted): all threads sweep one (column block, source
//   tile) at a time so the gathered rows could be shared in the last-level cache; each row's tile
//   bounds are found tile by tile (two arrays of n_rows). Whether it pays depends on the cache a
//   tenant really gets and on the degree (each tile re-reads and rewrites the output), so the
//   caller picks the count by timing (distgnn/kernels/tiling.py); 0 or 1 here means untiled.
#pragma once
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "distgnn/common.hpp"
#include "distgnn/isa.hpp"

namespace distgnn::aggregate {

struct Options {
  int64_t chunk_edges = 0;  // target edges per work chunk; 0 = automatic
  int block = 0;            // feature columns per block; 0 = automatic
  int prefetch = -1;        // prefetch distance in edges; 0 = off, < 0 = automatic
  int tiles = 0;            // source tiles (rows must be sorted by source); 0 or 1 = off
  bool sorted = false;      // the caller guarantees every row's sources ascend (enables tiling)
};

// A unit of work: either whole rows [row_begin, row_end) or one piece of a single hub row
// (piece >= 0 indexes the scratch partial sum it writes).
struct Chunk {
  int64_t row_begin, row_end, edge_begin, edge_end;
  int64_t piece;
};
// A plan travels to and from Python as an int64 array [n_chunks, 5].
static_assert(sizeof(Chunk) == 5 * sizeof(int64_t), "Chunk must be five packed int64");

// Packs rows into chunks of about `target` edges (each row also costs one unit for its write).
inline std::vector<Chunk> plan_chunks(const int64_t* indptr, int64_t n_rows, int64_t target,
                                      int64_t* n_pieces) {
  std::vector<Chunk> chunks;
  int64_t pieces = 0;
  int64_t r = 0;
  while (r < n_rows) {
    const int64_t deg = indptr[r + 1] - indptr[r];
    if (deg > target) {
      for (int64_t e = indptr[r]; e < indptr[r + 1]; e += target)
        chunks.push_back({r, r + 1, e, std::min(e + target, indptr[r + 1]), pieces++});
      ++r;
      continue;
    }
    const int64_t start = r;
    int64_t cost = 0;
    while (r < n_rows) {
      const int64_t d = indptr[r + 1] - indptr[r];
      if (d > target || (cost > 0 && cost + d + 1 > target)) break;
      cost += d + 1;
      ++r;
    }
    chunks.push_back({start, r, indptr[start], indptr[r], -1});
  }
  *n_pieces = pieces;
  return chunks;
}

namespace detail {

using namespace distgnn::cpu;  // Isa, detect_isa, ... (distgnn/isa.hpp)

// bfloat16 rows are stored as their 16 raw bits (the upper half of a float32).
struct bf16 {
  uint16_t bits;
};

// A stored row element as the accumulator type: itself, or a bfloat16 widened exactly (its bits
// shifted into the upper half of a float32; vectorises to a zero-extend and a shift).
template <typename T, typename X>
__attribute__((always_inline)) inline T widen(X v) {
  if constexpr (std::is_same_v<X, bf16>) {
    const uint32_t bits = static_cast<uint32_t>(v.bits) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return static_cast<T>(f);
  } else {
    return static_cast<T>(v);
  }
}

// Prefetches every cache line the row piece [p, p + width) touches: from the line holding its first
// byte to the line holding its last (a piece that does not start on a line boundary spans one line
// more than its width in lines; F = 41 float32 rows start anywhere).
template <typename T>
inline void prefetch_row(const T* p, int width) {
#if defined(__GNUC__)
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t last = (start + static_cast<uintptr_t>(width) * sizeof(T) - 1) & ~uintptr_t(63);
  for (uintptr_t line = start & ~uintptr_t(63); line <= last; line += 64)
    __builtin_prefetch(reinterpret_cast<const char*>(line), 0, 3);
#else
  (void)p;
  (void)width;
#endif
}

// Sum of x[indices[e], c0 : c0 + w) over e in [e0, e1) into acc[0 : w). The accumulators are W
// wide (fixed: unrolled, in registers); with Masked, w < W (a row narrower than the block, e.g.
// F = 41 in a 48-column block) and loads are masked to the first w columns, so a narrow row keeps
// the registers and the prefetch too (a plain loop to w ran 4.3x slower than DGL at F = 41).
// Prefetches the row `prefetch` edges ahead, up to pf_end (the chunk's end: across row ends, so
// short rows still get their sources in flight early).
// With Weighted, each gathered row is multiplied by wt[its index] (an FMA instead of an add).
template <int W, bool Masked, bool Weighted, typename T, typename X, typename I>
__attribute__((always_inline)) inline void gather_block(const I* __restrict indices, int64_t e0,
                                                        int64_t e1, const X* __restrict x,
                                                        int64_t F, int64_t c0, int w, int prefetch,
                                                        int64_t pf_end, const T* __restrict wt,
                                                        T* __restrict acc) {
  const int width = Masked ? w : W;
  T a[W];
  for (int j = 0; j < W; ++j) a[j] = (!Masked || j < w) ? acc[j] : T(0);
  int64_t e = e0;
  if constexpr (W * sizeof(T) <= 256) {
    // Two accumulator sets so consecutive edges do not wait on each other's adds (narrow blocks
    // only: for wide blocks one set already fills half the vector registers).
    T b[W];
    for (int j = 0; j < W; ++j) b[j] = T(0);
    for (; e + 1 < e1; e += 2) {
      if (prefetch > 0 && e + prefetch + 1 < pf_end) {
        prefetch_row(x + static_cast<int64_t>(indices[e + prefetch]) * F + c0, width);
        prefetch_row(x + static_cast<int64_t>(indices[e + prefetch + 1]) * F + c0, width);
      }
      const int64_t u = static_cast<int64_t>(indices[e]), t = static_cast<int64_t>(indices[e + 1]);
      const X* __restrict p = x + u * F + c0;
      const X* __restrict q = x + t * F + c0;
      if constexpr (Weighted) {
        const T wu = wt[u], wq = wt[t];
#pragma omp simd
        for (int j = 0; j < W; ++j) a[j] += (!Masked || j < w) ? wu * widen<T>(p[j]) : T(0);
#pragma omp simd
        for (int j = 0; j < W; ++j) b[j] += (!Masked || j < w) ? wq * widen<T>(q[j]) : T(0);
      } else {
#pragma omp simd
        for (int j = 0; j < W; ++j) a[j] += (!Masked || j < w) ? widen<T>(p[j]) : T(0);
#pragma omp simd
        for (int j = 0; j < W; ++j) b[j] += (!Masked || j < w) ? widen<T>(q[j]) : T(0);
      }
    }
    for (int j = 0; j < W; ++j) a[j] += b[j];
  }
  for (; e < e1; ++e) {
    if (prefetch > 0 && e + prefetch < pf_end)
      prefetch_row(x + static_cast<int64_t>(indices[e + prefetch]) * F + c0, width);
    const int64_t u = static_cast<int64_t>(indices[e]);
    const X* __restrict p = x + u * F + c0;
    const T wu = Weighted ? wt[u] : T(1);
#pragma omp simd
    for (int j = 0; j < W; ++j) a[j] += (!Masked || j < w) ? (Weighted ? wu * widen<T>(p[j]) : widen<T>(p[j])) : T(0);
  }
  for (int j = 0; j < W; ++j) acc[j] = a[j];
}

// gather_block with the block's width known at compile time (w == W) or not, weighted or not.
template <int W, typename T, typename X, typename I>
__attribute__((always_inline)) inline void gather(const I* __restrict indices, int64_t e0,
                                                  int64_t e1, const X* __restrict x, int64_t F,
                                                  int64_t c0, int w, int prefetch, int64_t pf_end,
                                                  const T* __restrict wt, T* __restrict acc) {
  if (wt != nullptr) {
    if (w == W)
      gather_block<W, false, true, T>(indices, e0, e1, x, F, c0, w, prefetch, pf_end, wt, acc);
    else
      gather_block<W, true, true, T>(indices, e0, e1, x, F, c0, w, prefetch, pf_end, wt, acc);
  } else if (w == W) {
    gather_block<W, false, false, T>(indices, e0, e1, x, F, c0, w, prefetch, pf_end, wt, acc);
  } else {
    gather_block<W, true, false, T>(indices, e0, e1, x, F, c0, w, prefetch, pf_end, wt, acc);
  }
}

struct Args {
  const int64_t* indptr;
  int64_t F;
  int64_t n_self;
  int prefetch;
  const void* weight = nullptr;  // T [n_src] or null: the weight of each gathered row
  // Source tiling (rows sorted by source id): only column block [c0, c0 + W) and, in row v, the
  // edges [split_lo[v], split_hi[v]) whose sources fall in this pass's tile; `first` starts the
  // sums (self term), `last` applies the scale.
  bool tiled = false;
  int64_t c0 = 0;
  const int64_t* split_lo = nullptr;
  const int64_t* split_hi = nullptr;
  bool first = true, last = true;
};

// Processes one chunk. Whole-row chunks write rows of y; hub pieces write their partial sum
// (unscaled, without the self term) to scratch + piece * F. Untiled: all column blocks, finished
// rows. Tiled: one column block, the sources of one tile, partial sums kept in y between tiles.
template <int W, typename T, typename X, typename I>
__attribute__((always_inline)) inline void run_chunk_body(const Chunk& c, const Args& a,
                                                          const I* __restrict indices,
                                                          const X* __restrict x,
                                                          const T* __restrict scale,
                                                          const X* __restrict self,
                                                          T* __restrict y, T* __restrict scratch) {
  const int64_t F = a.F;
  const T* __restrict wt = static_cast<const T*>(a.weight);
  alignas(64) T acc[W];
  const int64_t c_begin = a.tiled ? a.c0 : 0;
  const int64_t c_end = a.tiled ? std::min<int64_t>(F, a.c0 + W) : F;
  for (int64_t c0 = c_begin; c0 < c_end; c0 += W) {
    const int w = static_cast<int>(std::min<int64_t>(W, F - c0));
    if (c.piece >= 0) {
      int64_t e0 = c.edge_begin, e1 = c.edge_end;
      T* part = scratch + c.piece * F + c0;
      if (a.tiled) {
        e0 = std::max(e0, a.split_lo[c.row_begin]);
        e1 = std::max(e0, std::min(e1, a.split_hi[c.row_begin]));
      }
      if (a.first) std::fill(acc, acc + W, T(0));
      else std::memcpy(acc, part, sizeof(T) * w);
      gather<W, T>(indices, e0, e1, x, F, c0, w, a.prefetch, e1, wt, acc);
      std::memcpy(part, acc, sizeof(T) * w);
      continue;
    }
    for (int64_t v = c.row_begin; v < c.row_end; ++v) {
      int64_t e0 = a.indptr[v], e1 = a.indptr[v + 1];
      int64_t pf_end = c.edge_end;
      if (a.tiled) {
        e0 = a.split_lo[v];
        e1 = a.split_hi[v];
        pf_end = e1;
      }
      T* __restrict out = y + v * F + c0;
      if (!a.first) {
        if (e0 == e1 && !a.last) continue;
        for (int j = 0; j < w; ++j) acc[j] = out[j];
      } else if (self != nullptr && v < a.n_self) {
        const X* __restrict s = self + v * F + c0;
        const T wv = wt != nullptr ? wt[v] : T(1);
        for (int j = 0; j < w; ++j) acc[j] = wv * widen<T>(s[j]);
      } else {
        std::fill(acc, acc + W, T(0));
      }
      gather<W, T>(indices, e0, e1, x, F, c0, w, a.prefetch, pf_end, wt, acc);
      if (scale != nullptr && a.last) {
        const T sv = scale[v];
#pragma omp simd
        for (int j = 0; j < w; ++j) out[j] = acc[j] * sv;
      } else {
#pragma omp simd
        for (int j = 0; j < w; ++j) out[j] = acc[j];
      }
    }
  }
}

template <int W, typename T, typename X, typename I>
void run_chunk_base(const Chunk& c, const Args& a, const I* indices, const X* x, const T* scale,
                    const X* self, T* y, T* scratch) {
  run_chunk_body<W, T>(c, a, indices, x, scale, self, y, scratch);
}
#ifdef DISTGNN_DISPATCH
template <int W, typename T, typename X, typename I>
DISTGNN_TARGET_AVX2 void run_chunk_avx2(const Chunk& c, const Args& a, const I* indices,
                                        const X* x, const T* scale, const X* self, T* y,
                                        T* scratch) {
  run_chunk_body<W, T>(c, a, indices, x, scale, self, y, scratch);
}
template <int W, typename T, typename X, typename I>
DISTGNN_TARGET_AVX512 void run_chunk_avx512(const Chunk& c, const Args& a, const I* indices,
                                            const X* x, const T* scale, const X* self, T* y,
                                            T* scratch) {
  run_chunk_body<W, T>(c, a, indices, x, scale, self, y, scratch);
}
#endif

template <typename T, typename X, typename I>
using ChunkFn = void (*)(const Chunk&, const Args&, const I*, const X*, const T*, const X*, T*, T*);

template <int W, typename T, typename X, typename I>
ChunkFn<T, X, I> pick_isa(Isa isa) {
#ifdef DISTGNN_DISPATCH
  if (isa == Isa::avx512) return &run_chunk_avx512<W, T, X, I>;
  if (isa == Isa::avx2) return &run_chunk_avx2<W, T, X, I>;
#endif
  (void)isa;
  return &run_chunk_base<W, T, X, I>;
}

template <typename T, typename X, typename I>
ChunkFn<T, X, I> pick(int block, Isa isa) {
  switch (block) {
    case 8: return pick_isa<8, T, X, I>(isa);
    case 16: return pick_isa<16, T, X, I>(isa);
    case 32: return pick_isa<32, T, X, I>(isa);
    case 48: return pick_isa<48, T, X, I>(isa);
    case 64: return pick_isa<64, T, X, I>(isa);
    case 128: return pick_isa<128, T, X, I>(isa);
    default: return pick_isa<256, T, X, I>(isa);
  }
}

}  // namespace detail

inline bool valid_block(int block) {
  return block == 0 || block == 8 || block == 16 || block == 32 || block == 48 || block == 64 ||
         block == 128 || block == 256;
}

// Default column block: up to 1 KB of a row (256 float32 columns) in one pass. Narrower blocks
// revisit every gathered row once per block, paying its TLB miss and DRAM page again: on the
// quiet development VM 64-column blocks ran at 0.62x DGL on P26 (a 2.5 GB table) against 0.78x
// for whole 256-column rows, and about 5% slower on R24. Without AVX-512 (16 vector registers)
// the block is 512 bytes, so that the accumulators of a row still fit in registers.
template <typename T>
inline int default_block(int64_t F, detail::Isa isa = detail::detect_isa()) {
  const int64_t bytes = isa == detail::Isa::avx512 ? 1024 : 512;
  int64_t w = bytes / static_cast<int64_t>(sizeof(T));
  if (F < w) w = F <= 8 ? 8 : F <= 16 ? 16 : F <= 32 ? 32 : F <= 48 ? 48 : F <= 64 ? 64 : F <= 128 ? 128 : 256;
  return static_cast<int>(w);
}

// The automatic chunk size: enough chunks for dynamic balance (>= 16 per thread), small enough that
// a chunk's indices and partial rows stay in L2 across column blocks.
inline int64_t default_chunk_edges(int64_t n_edges, int64_t n_rows, int threads) {
  return std::max<int64_t>(256, std::min<int64_t>(16384, (n_edges + n_rows) / (threads * 16) + 1));
}

// The chunk plan of a CSR with n_rows rows for `threads` threads (chunk_edges <= 0: automatic).
// It depends only on indptr, so a caller that aggregates over one graph many times builds it once.
inline std::vector<Chunk> make_plan(const int64_t* indptr, int64_t n_rows, int threads,
                                    int64_t chunk_edges = 0) {
  threads = resolve_threads(threads);
  const int64_t target = chunk_edges > 0 ? chunk_edges
                                         : default_chunk_edges(indptr[n_rows] - indptr[0], n_rows, threads);
  int64_t n_pieces = 0;
  return plan_chunks(indptr, n_rows, target, &n_pieces);
}

// Whether `plan` is a chunk plan of indptr's n_rows rows (as plan_chunks makes: chunks in row
// order covering every row once, hub pieces covering their row's edges in order); sets the number
// of hub pieces. O(number of chunks): a stale plan is refused instead of read out of bounds.
inline bool check_plan(const int64_t* indptr, int64_t n_rows, const Chunk* plan, int64_t n_chunks,
                       int64_t* n_pieces) {
  int64_t row = 0, pieces = 0, edge = indptr[0];
  for (int64_t k = 0; k < n_chunks; ++k) {
    const Chunk& c = plan[k];
    if (c.piece < 0) {
      if (c.row_begin != row || c.row_end <= c.row_begin || c.row_end > n_rows ||
          c.edge_begin != indptr[c.row_begin] || c.edge_end != indptr[c.row_end] || edge != c.edge_begin)
        return false;
      row = c.row_end;
      edge = c.edge_end;
    } else {
      if (c.piece != pieces || c.row_begin != row || c.row_end != row + 1 || c.edge_begin != edge ||
          c.edge_end <= c.edge_begin || c.edge_end > indptr[row + 1])
        return false;
      ++pieces;
      edge = c.edge_end;
      if (edge == indptr[row + 1]) ++row;
    }
  }
  *n_pieces = pieces;
  return row == n_rows;
}

// y[v] = scale[v] * (sum_{e in row v} w[u_e] x[u_e] + (v < n_self ? w[v] self[v] : 0)), v < n_rows,
// u_e = indices[e]. x: [n_src, F] row-major, y: [n_rows, F]; scale, self and weight (w, [n_src])
// may be null. Index values must lie in [0, n_src) (the caller checks). X, the stored type of x
// and self, is T or detail::bf16 (bfloat16 rows: half the gathered bytes, accumulated in T).
// plan: a chunk plan of these rows (make_plan, checked by the caller), or null to build one here.
template <typename T, typename I, typename X = T>
void spmm(const int64_t* indptr, const I* indices, int64_t n_rows, const X* x, int64_t n_src,
          int64_t F, const T* scale, const X* self, int64_t n_self, T* y, int threads, Options opt = {},
          const T* weight = nullptr, const Chunk* plan = nullptr, int64_t n_plan = 0) {
  if (n_rows <= 0) return;
  threads = resolve_threads(threads);
  if (F <= 0) return;
  std::vector<Chunk> own;
  int64_t n_pieces = 0;
  if (plan == nullptr) {
    const int64_t target = opt.chunk_edges > 0
                               ? opt.chunk_edges
                               : default_chunk_edges(indptr[n_rows] - indptr[0], n_rows, threads);
    own = plan_chunks(indptr, n_rows, target, &n_pieces);
    plan = own.data();
    n_plan = static_cast<int64_t>(own.size());
  } else {
    for (int64_t k = 0; k < n_plan; ++k) n_pieces += plan[k].piece >= 0;
  }
  std::vector<T> scratch(static_cast<size_t>(n_pieces * F));
  const int block = opt.block > 0 ? opt.block : default_block<T>(F);
  const detail::ChunkFn<T, X, I> fn = detail::pick<T, X, I>(block, detail::detect_isa());
  detail::Args args{indptr, F, self != nullptr ? n_self : 0, opt.prefetch < 0 ? 8 : opt.prefetch};
  const int64_t n_chunks = n_plan;
  args.weight = weight;
  const int tiles = opt.sorted && opt.tiles > 1 ? opt.tiles : 1;
  if (tiles <= 1) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t k = 0; k < n_chunks; ++k)
      fn(plan[k], args, indices, x, scale, self, y, scratch.data());
  } else {
    // All threads sweep one (column block, source tile) at a time, so the tile's rows are shared
    // in the last-level cache; partial sums wait in y (or scratch) between tiles.
    // lo[v], hi[v]: row v's edges whose sources lie in the current tile. Two arrays, rolled from
    // tile to tile, so the bounds take 2 x n_rows x 8 bytes whatever the number of tiles.
    std::vector<int64_t> lo(static_cast<size_t>(n_rows)), hi(static_cast<size_t>(n_rows));
    args.tiled = true;
    args.split_lo = lo.data();
    args.split_hi = hi.data();
    for (int64_t c0 = 0; c0 < F; c0 += block) {
      for (int t = 0; t < tiles; ++t) {
        const I bound = static_cast<I>(n_src * (t + 1) / tiles);
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int64_t v = 0; v < n_rows; ++v) {
          const int64_t from = t == 0 ? indptr[v] : hi[v];
          lo[v] = from;
          hi[v] = t + 1 == tiles ? indptr[v + 1]
                                 : std::lower_bound(indices + from, indices + indptr[v + 1], bound) - indices;
        }
        args.c0 = c0;
        args.first = t == 0;
        args.last = t + 1 == tiles;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int64_t k = 0; k < n_chunks; ++k)
          fn(plan[k], args, indices, x, scale, self, y, scratch.data());
      }
    }
  }
  if (n_pieces == 0) return;
  // Hub rows: y[r] = scale * (sum of piece partials + w[r] self).
  std::vector<int64_t> first;  // index of the first chunk of each hub row
  for (int64_t k = 0; k < n_chunks; ++k)
    if (plan[k].piece >= 0 && (k == 0 || plan[k - 1].row_begin != plan[k].row_begin ||
                                 plan[k - 1].piece < 0))
      first.push_back(k);
  const int64_t n_hubs = static_cast<int64_t>(first.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t h = 0; h < n_hubs; ++h) {
    const int64_t k0 = first[h];
    const int64_t r = plan[k0].row_begin;
    T* out = y + r * F;
    const T* p0 = scratch.data() + plan[k0].piece * F;
    if (self != nullptr && r < n_self) {
      const T wr = weight != nullptr ? weight[r] : T(1);
      for (int64_t j = 0; j < F; ++j) out[j] = p0[j] + wr * detail::widen<T>(self[r * F + j]);
    } else {
      std::memcpy(out, p0, sizeof(T) * F);
    }
    for (int64_t k = k0 + 1; k < n_chunks && plan[k].piece >= 0 && plan[k].row_begin == r; ++k) {
      const T* p = scratch.data() + plan[k].piece * F;
#pragma omp simd
      for (int64_t j = 0; j < F; ++j) out[j] += p[j];
    }
    if (scale != nullptr) {
      const T sv = scale[r];
#pragma omp simd
      for (int64_t j = 0; j < F; ++j) out[j] *= sv;
    }
  }
}

// Largest index value + 1 (0 for no entries), or -1 when some index is negative.
template <typename I>
int64_t index_bound(const I* indices, int64_t m, int threads) {
  threads = resolve_threads(threads);
  int64_t hi = 0;
  int64_t lo = 0;
#pragma omp parallel for reduction(max : hi) reduction(min : lo) num_threads(threads)
  for (int64_t e = 0; e < m; ++e) {
    const int64_t v = static_cast<int64_t>(indices[e]);
    hi = std::max(hi, v + 1);
    lo = std::min(lo, v);
  }
  return lo < 0 ? -1 : hi;
}

// out[i] = x[rows[i]] for i < n (rows of width F).
template <typename T, typename I>
void gather_rows(const T* x, int64_t F, const I* rows, int64_t n, T* out, int threads) {
  threads = resolve_threads(threads);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + i * F, x + static_cast<int64_t>(rows[i]) * F, sizeof(T) * F);
}

// y[rows[i]] += x[i] for i < n. Rows may repeat: threads split the columns, never the rows, so
// no two threads touch one element and the result is deterministic.
template <typename T, typename I>
void scatter_add_rows(const T* x, int64_t F, const I* rows, int64_t n, T* y, int threads) {
  threads = resolve_threads(threads);
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(threads, (F + 15) / 16));
#pragma omp parallel for schedule(static, 1) num_threads(threads)
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t c0 = F * p / parts, c1 = F * (p + 1) / parts;
    for (int64_t i = 0; i < n; ++i) {
      T* __restrict dst = y + static_cast<int64_t>(rows[i]) * F;
      const T* __restrict src = x + i * F;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace distgnn::aggregate
