// Vertex-cut assignment: every edge goes to one partition, vertices are replicated where their
// edges go. Replica sets are bitsets: `words` uint64 per vertex (bit p of vertex v is word
// v * words + p / 64, bit p % 64), so P <= 64 costs 8 bytes per vertex.
//
// Edge order (the stream libra and hdrf see): `store` order, i.e. the CSR by destination row by
// row (v ascending; within a row the sources u ascending), or `shuffle`: a seeded uniform
// permutation of the edge ids (seeded_permutation). Edge e is the e-th entry of `indices`; ties use
// e, not the stream position.
//
// libra and hdrf are sequential (each decision reads every earlier one); random and hash run in
// parallel; the per-part CSR build runs in parallel over rows.
//
// Ties (equal loads or equal scores) are broken by a seeded rule: among the c tied candidates in
// ascending partition order, take number splitmix64(seed ^ (e * GOLDEN)) % c. So the output is a
// pure function of (graph, P, method, seed).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "distgnn/common.hpp"

namespace distgnn::partition {

enum Method : int { kLibra = 0, kHdrf = 1, kRandom = 2, kHash = 3 };

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

inline uint64_t splitmix64(uint64_t x) {
  x += kGolden;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The random number that breaks ties for stream position `e`.
inline uint64_t tie_random(uint64_t seed, uint64_t e) { return splitmix64(seed ^ (e * kGolden)); }

inline int popcount64(uint64_t x) { return __builtin_popcountll(x); }
inline int ctz64(uint64_t x) { return __builtin_ctzll(x); }

// Least-loaded partition among the set bits of `cand` (`words` words), ties by `r`.
inline int least_loaded(const uint64_t* cand, int64_t words, const int64_t* loads, uint64_t r) {
  int64_t best = std::numeric_limits<int64_t>::max();
  int64_t ties = 0;
  for (int64_t w = 0; w < words; ++w)
    for (uint64_t b = cand[w]; b; b &= b - 1) {
      const int64_t l = loads[w * 64 + ctz64(b)];
      if (l < best) { best = l; ties = 1; } else if (l == best) { ++ties; }
    }
  int64_t pick = static_cast<int64_t>(r % static_cast<uint64_t>(ties));
  for (int64_t w = 0; w < words; ++w)
    for (uint64_t b = cand[w]; b; b &= b - 1) {
      const int p = static_cast<int>(w * 64 + ctz64(b));
      if (loads[p] == best && pick-- == 0) return p;
    }
  return -1;  // unreachable when cand is non-empty
}

// Least-loaded partition among all P, ties by `r`.
inline int least_loaded_all(int P, const int64_t* loads, uint64_t r) {
  int64_t best = std::numeric_limits<int64_t>::max();
  int64_t ties = 0;
  for (int p = 0; p < P; ++p) {
    if (loads[p] < best) { best = loads[p]; ties = 1; } else if (loads[p] == best) { ++ties; }
  }
  int64_t pick = static_cast<int64_t>(r % static_cast<uint64_t>(ties));
  for (int p = 0; p < P; ++p)
    if (loads[p] == best && pick-- == 0) return p;
  return -1;
}

inline bool any_bit(const uint64_t* s, int64_t words) {
  for (int64_t w = 0; w < words; ++w)
    if (s[w]) return true;
  return false;
}

inline void set_bit(uint64_t* s, int p) { s[p >> 6] |= uint64_t{1} << (p & 63); }
inline bool has_bit(const uint64_t* s, int p) { return (s[p >> 6] >> (p & 63)) & 1; }

// Libra (docs/design.md#partitioning): for edge (u, v) with replica sets A(u), A(v):
//   both empty -> least-loaded partition overall; one empty -> least-loaded of the other's set;
//   A(u) & A(v) non-empty -> least-loaded common partition; disjoint -> least-loaded partition of
//   the lower-degree endpoint (degree = in + out; ties -> u's set), the other endpoint gains a
//   replica there. Load = edges assigned so far.
struct Libra {
  int P;
  uint64_t seed;
  const int64_t* degree;
  uint64_t* bits;
  int64_t words;
  int64_t* loads;
  std::vector<uint64_t> common;

  Libra(int P_, uint64_t seed_, const int64_t* degree_, uint64_t* bits_, int64_t words_,
        int64_t* loads_)
      : P(P_), seed(seed_), degree(degree_), bits(bits_), words(words_), loads(loads_),
        common(static_cast<size_t>(words_)) {}

  int place(int64_t u, int64_t v, uint64_t e) {
    uint64_t* au = bits + u * words;
    uint64_t* av = bits + v * words;
    const uint64_t r = tie_random(seed, e);
    const bool has_u = any_bit(au, words), has_v = any_bit(av, words);
    int c;
    if (!has_u && !has_v) {
      c = least_loaded_all(P, loads, r);
    } else if (!has_v) {
      c = least_loaded(au, words, loads, r);
    } else if (!has_u) {
      c = least_loaded(av, words, loads, r);
    } else {
      bool any_common = false;
      for (int64_t w = 0; w < words; ++w) {
        common[w] = au[w] & av[w];
        any_common |= common[w] != 0;
      }
      if (any_common) {
        c = least_loaded(common.data(), words, loads, r);
      } else {
        c = degree[u] <= degree[v] ? least_loaded(au, words, loads, r)
                                   : least_loaded(av, words, loads, r);
      }
    }
    set_bit(au, c);
    set_bit(av, c);
    loads[c] += 1;
    return c;
  }
};

// HDRF (Petroni et al., CIKM'15): edge (u, v) goes to argmax_p C_rep(p) + C_bal(p) with
//   theta_u = d(u) / (d(u) + d(v)) (d = in + out degree, known in advance),
//   C_rep(p) = [p in A(u)] (1 + (1 - theta_u)) + [p in A(v)] (1 + (1 - theta_v)),
//   C_bal(p) = lambda (maxload - load(p)) / (epsilon + maxload - minload), epsilon = 1.
// So the replica goes to the higher-degree endpoint, and lambda weighs balance against it.
struct Hdrf {
  int P;
  uint64_t seed;
  const int64_t* degree;
  double lambda;
  uint64_t* bits;
  int64_t words;
  int64_t* loads;
  std::vector<double> score;
  int64_t maxload = 0, minload = 0, at_min;

  // loads may hold an earlier window's counts (a stream resumed window by window): the running
  // maximum, minimum and count at the minimum are taken from them.
  Hdrf(int P_, uint64_t seed_, const int64_t* degree_, double lambda_, uint64_t* bits_,
       int64_t words_, int64_t* loads_)
      : P(P_), seed(seed_), degree(degree_), lambda(lambda_), bits(bits_), words(words_),
        loads(loads_), score(static_cast<size_t>(P_)), at_min(0) {
    maxload = *std::max_element(loads, loads + P);
    minload = *std::min_element(loads, loads + P);
    for (int p = 0; p < P; ++p) at_min += loads[p] == minload;
  }

  int place(int64_t u, int64_t v, uint64_t e) {
    uint64_t* au = bits + u * words;
    uint64_t* av = bits + v * words;
    const double du = static_cast<double>(degree[u]), dv = static_cast<double>(degree[v]);
    const double theta_u = du + dv > 0 ? du / (du + dv) : 0.5;
    const double gu = 2.0 - theta_u, gv = 1.0 + theta_u;  // 1 + (1 - theta)
    const double scale = lambda / (1.0 + static_cast<double>(maxload - minload));
    double best = -1.0;
    int64_t ties = 0;
    for (int p = 0; p < P; ++p) {
      double s = scale * static_cast<double>(maxload - loads[p]);
      if (has_bit(au, p)) s += gu;
      if (has_bit(av, p)) s += gv;
      score[p] = s;
      if (s > best) { best = s; ties = 1; } else if (s == best) { ++ties; }
    }
    int64_t pick = static_cast<int64_t>(tie_random(seed, e) % static_cast<uint64_t>(ties));
    int c = 0;
    for (int p = 0; p < P; ++p)
      if (score[p] == best && pick-- == 0) { c = p; break; }
    set_bit(au, c);
    set_bit(av, c);
    if (loads[c] == minload && --at_min == 0) {
      // every partition that sat at the minimum has now grown by one
      ++minload;
      for (int p = 0; p < P; ++p) at_min += (p == c ? loads[p] + 1 : loads[p]) == minload;
    }
    loads[c] += 1;
    maxload = std::max(maxload, loads[c]);
    return c;
  }
};

// The first row holding edge e_lo (the last v with indptr[v] <= e_lo; empty rows skipped).
inline int64_t row_of_edge(const int64_t* indptr, int64_t n, int64_t e_lo) {
  return static_cast<int64_t>(std::upper_bound(indptr, indptr + n + 1, e_lo) - indptr) - 1;
}

// Stream the edges [e_lo, e_hi) in store order (row v of the CSR by destination, sources
// ascending); window[e - e_lo] is the source of edge e. Every placer keeps its state in the
// caller's arrays (bits, loads), so consecutive windows give what one pass over all edges gives.
template <typename Placer, typename Index, typename Part>
void stream_store(Placer& placer, const int64_t* indptr, int64_t n, const Index* window,
                  int64_t e_lo, int64_t e_hi, Part* edge_part) {
  for (int64_t v = row_of_edge(indptr, n, e_lo); v < n && indptr[v] < e_hi; ++v)
    for (int64_t e = std::max(indptr[v], e_lo); e < std::min(indptr[v + 1], e_hi); ++e)
      edge_part[e] = static_cast<Part>(
          placer.place(static_cast<int64_t>(window[e - e_lo]), v, static_cast<uint64_t>(e)));
}

// Stream the edges in the order perm[0], perm[1], ... (edge ids); dst[e] = destination of e.
template <typename Placer, typename Index, typename Perm, typename Part>
void stream_order(Placer& placer, const Perm* perm, const Index* dst, const Index* indices,
                  int64_t m, Part* edge_part) {
  for (int64_t i = 0; i < m; ++i) {
    const int64_t e = static_cast<int64_t>(perm[i]);
    edge_part[e] = static_cast<Part>(placer.place(static_cast<int64_t>(indices[e]),
                                                  static_cast<int64_t>(dst[e]),
                                                  static_cast<uint64_t>(e)));
  }
}

// A seeded uniform permutation of [0, m) (Fisher-Yates driven by splitmix64).
template <typename Perm>
void seeded_permutation(Perm* perm, int64_t m, uint64_t seed) {
  for (int64_t i = 0; i < m; ++i) perm[i] = static_cast<Perm>(i);
  const uint64_t salt = splitmix64(seed ^ 0x6F72646572ULL);  // "order"
  for (int64_t i = m - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(splitmix64(salt ^ (static_cast<uint64_t>(i) * kGolden)) %
                                           static_cast<uint64_t>(i + 1));
    std::swap(perm[i], perm[j]);
  }
}

// Baselines: `random` puts edge e on splitmix64(seed ^ e) % P; `hash` puts every in-edge of v on
// splitmix64(seed ^ v) % P (by destination). Parallel over rows; bits are set afterwards.
// Over the edges [e_lo, e_hi) of a window as in stream_store.
template <typename Index, typename Part>
void assign_hashed(const int64_t* indptr, int64_t n, const Index* window, int64_t e_lo,
                   int64_t e_hi, int P, uint64_t seed, bool by_destination, Part* edge_part,
                   uint64_t* bits, int64_t words, int64_t* loads, int threads) {
  threads = resolve_threads(threads);
  const uint64_t salt = splitmix64(seed);
  const int64_t first = row_of_edge(indptr, n, e_lo);
  int64_t last = first;  // one past the last row with an edge in the window
  while (last < n && indptr[last] < e_hi) ++last;
#pragma omp parallel for schedule(dynamic, 4096) num_threads(threads)
  for (int64_t v = first; v < last; ++v) {
    const Part hv = static_cast<Part>(splitmix64(salt ^ (static_cast<uint64_t>(v) * kGolden)) %
                                      static_cast<uint64_t>(P));
    for (int64_t e = std::max(indptr[v], e_lo); e < std::min(indptr[v + 1], e_hi); ++e)
      edge_part[e] = by_destination
                         ? hv
                         : static_cast<Part>(splitmix64(salt ^ (static_cast<uint64_t>(e) * kGolden)) %
                                             static_cast<uint64_t>(P));
  }
  for (int64_t v = first; v < last; ++v) {
    uint64_t* av = bits + v * words;
    for (int64_t e = std::max(indptr[v], e_lo); e < std::min(indptr[v + 1], e_hi); ++e) {
      const int c = static_cast<int>(edge_part[e]);
      set_bit(av, c);
      set_bit(bits + static_cast<int64_t>(window[e - e_lo]) * words, c);
      loads[c] += 1;
    }
  }
}

// Root rule `in-edges`: prefer[v] (a bitset, `words` per vertex, zeroed by the caller) gets the
// partitions that hold the most of v's in-edges (several on a tie; none when v has no in-edges).
// O(E) in all, a count array of P per thread, parallel over rows.
template <typename Part>
void most_in_edges(const int64_t* indptr, const Part* edge_part, int64_t n, int P, int64_t words,
                   uint64_t* prefer, int threads) {
  threads = resolve_threads(threads);
#pragma omp parallel num_threads(threads)
  {
    std::vector<int64_t> count(static_cast<size_t>(P), 0);
#pragma omp for schedule(dynamic, 4096)
    for (int64_t v = 0; v < n; ++v) {
      int64_t most = 0;
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) most = std::max(most, ++count[edge_part[e]]);
      uint64_t* out = prefer + v * words;
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e)
        if (count[edge_part[e]] == most) set_bit(out, static_cast<int>(edge_part[e]));
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) count[edge_part[e]] = 0;
    }
  }
}

// Roots: a vertex on one partition has its root there. A vertex on several partitions (split) or
// on none (isolated: it is then placed on the chosen partition, so it lives on exactly one) gets
// its root greedily in id order: training vertices first, on the candidate with the fewest
// training roots (then fewest roots); then the others on the candidate with the fewest roots.
// The candidates are v's replicas, or prefer[v] when prefer is given and prefer[v] is not empty
// (see most_in_edges). Ties by tie_random(seed ^ ROOT_SALT, v). train and prefer may be null.
// root[N] int32 out; roots[P], train_roots[P] out (zeroed by the caller).
inline void choose_roots(uint64_t* bits, int64_t words, int64_t n, int P, const bool* train,
                         uint64_t seed, int32_t* root, int64_t* roots, int64_t* train_roots,
                         const uint64_t* prefer = nullptr) {
  const uint64_t salt = splitmix64(seed ^ 0x726F6F7473ULL);  // "roots"
  std::vector<uint64_t> all(static_cast<size_t>(words), 0);
  for (int p = 0; p < P; ++p) set_bit(all.data(), p);
  for (int64_t v = 0; v < n; ++v) {
    const uint64_t* s = bits + v * words;
    int count = 0, only = -1;
    for (int64_t w = 0; w < words && count < 2; ++w) {
      count += popcount64(s[w]);
      if (s[w] && only < 0) only = static_cast<int>(w * 64 + ctz64(s[w]));
    }
    if (count == 1) {
      root[v] = only;
      roots[only] += 1;
      if (train && train[v]) train_roots[only] += 1;
    } else {
      root[v] = -1;
    }
  }
  std::vector<int64_t> key(static_cast<size_t>(P));
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 0 && !train) continue;
    for (int64_t v = 0; v < n; ++v) {
      if (root[v] >= 0) continue;
      const bool is_train = train && train[v];
      if ((pass == 0) != is_train) continue;
      uint64_t* s = bits + v * words;
      const bool isolated = !any_bit(s, words);
      // one key: training roots dominate, then roots (both < 2^31 in practice)
      for (int p = 0; p < P; ++p) key[p] = is_train ? (train_roots[p] << 31) + roots[p] : roots[p];
      const uint64_t r = tie_random(salt, static_cast<uint64_t>(v));
      const uint64_t* preferred = prefer ? prefer + v * words : nullptr;
      const uint64_t* cand = isolated                                    ? all.data()
                             : preferred && any_bit(preferred, words) ? preferred
                                                                        : s;
      const int c = least_loaded(cand, words, key.data(), r);
      if (isolated) set_bit(s, c);
      root[v] = c;
      roots[c] += 1;
      if (is_train) train_roots[c] += 1;
    }
  }
}

// Rows of part k: counts[i] = number of in-edges of local vertex i (global id l2g[i]) on part k.
template <typename Part>
void part_row_counts(const int64_t* indptr, const Part* edge_part, int k, const int64_t* l2g,
                     int64_t n_k, int64_t* counts, int threads) {
  threads = resolve_threads(threads);
  const Part pk = static_cast<Part>(k);
#pragma omp parallel for schedule(dynamic, 1024) num_threads(threads)
  for (int64_t i = 0; i < n_k; ++i) {
    const int64_t v = l2g[i];
    int64_t c = 0;
    for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) c += edge_part[e] == pk;
    counts[i] = c;
  }
}

// Fill part k's local CSR: local_indices[local_indptr[i] ...] = g2l[u] for each in-edge (u, v) of
// v = l2g[i] on part k, in store order (so sorted when g2l is increasing). Returns the first
// position of an edge whose source has no local id (g2l < 0), or -1.
template <typename Index, typename Part, typename Local>
int64_t part_fill(const int64_t* indptr, const Index* indices, const Part* edge_part, int k,
                  const int64_t* l2g, int64_t n_k, const Local* g2l, const int64_t* local_indptr,
                  Local* local_indices, int threads) {
  threads = resolve_threads(threads);
  const Part pk = static_cast<Part>(k);
  int64_t bad = -1;
#pragma omp parallel for schedule(dynamic, 1024) num_threads(threads)
  for (int64_t i = 0; i < n_k; ++i) {
    const int64_t v = l2g[i];
    int64_t out = local_indptr[i];
    for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
      if (edge_part[e] != pk) continue;
      const Local lu = g2l[static_cast<int64_t>(indices[e])];
      if (lu < 0) {
#pragma omp critical
        bad = e;
      }
      local_indices[out++] = lu;
    }
  }
  return bad;
}

}  // namespace distgnn::partition
