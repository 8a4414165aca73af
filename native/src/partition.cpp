// Bindings for vertex-cut assignment and per-partition CSR build (distgnn/partition.hpp).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <stdexcept>
#include <string>

#include "bindings.hpp"
#include "distgnn/partition.hpp"

namespace nb = nanobind;
namespace dp = distgnn::partition;

namespace {

template <typename Placer, typename Index, typename Part>
void run_stream(Placer& placer, const int64_t* indptr, const Index* window, int64_t n, int64_t e_lo,
                int64_t e_hi, const std::string& order, uint64_t seed, Part* edge_part) {
  if (order == "store") {
    dp::stream_store(placer, indptr, n, window, e_lo, e_hi, edge_part);
    return;
  }
  // shuffle (one window of every edge): a permutation (uint32 when it fits) and the destination
  // of every edge
  const int64_t m = e_hi;
  std::vector<Index> dst(static_cast<size_t>(m));
  for (int64_t v = 0; v < n; ++v)
    for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) dst[e] = static_cast<Index>(v);
  if (m < (int64_t{1} << 32)) {
    std::vector<uint32_t> perm(static_cast<size_t>(m));
    dp::seeded_permutation(perm.data(), m, seed);
    dp::stream_order(placer, perm.data(), dst.data(), window, m, edge_part);
  } else {
    std::vector<int64_t> perm(static_cast<size_t>(m));
    dp::seeded_permutation(perm.data(), m, seed);
    dp::stream_order(placer, perm.data(), dst.data(), window, m, edge_part);
  }
}

template <typename Index, typename Part>
void assign(Vec<const int64_t> indptr, Vec<const Index> window, int64_t edge_lo, int P,
            const std::string& method, const std::string& order, uint64_t seed,
            Vec<const int64_t> degree, Vec<Part> edge_part, Vec<uint64_t> bits, Vec<int64_t> loads,
            double hdrf_lambda, int threads) {
  const int64_t n = static_cast<int64_t>(indptr.shape(0)) - 1;
  if (n < 0) throw std::invalid_argument("indptr must have N + 1 >= 1 entries");
  const int64_t m = indptr.data()[n];
  const int64_t e_hi = edge_lo + static_cast<int64_t>(window.shape(0));
  if (P < 1) throw std::invalid_argument("P must be >= 1");
  const int64_t words = (P + 63) / 64;
  if (static_cast<int64_t>(bits.shape(0)) != n * words)
    throw std::invalid_argument("bits must have N * ceil(P / 64) words");
  if (static_cast<int64_t>(edge_part.shape(0)) != m)
    throw std::invalid_argument("edge_part must have one entry per edge");
  if (edge_lo < 0 || e_hi > m) throw std::invalid_argument("the window's edges must lie in [0, E)");
  if (static_cast<int64_t>(degree.shape(0)) != n) throw std::invalid_argument("degree must have N entries");
  if (static_cast<int64_t>(loads.shape(0)) != P) throw std::invalid_argument("loads must have P entries");
  if (order != "store" && order != "shuffle") throw std::invalid_argument("unknown order " + order);
  if (order == "shuffle" && (edge_lo != 0 || e_hi != m))
    throw std::invalid_argument("order shuffle needs one window of every edge");
  int meth = method == "libra" ? dp::kLibra : method == "hdrf" ? dp::kHdrf
           : method == "random" ? dp::kRandom : method == "hash" ? dp::kHash : -1;
  if (meth < 0) throw std::invalid_argument("unknown method " + method);
  nb::gil_scoped_release release;
  if (meth == dp::kLibra) {
    dp::Libra placer(P, seed, degree.data(), bits.data(), words, loads.data());
    run_stream(placer, indptr.data(), window.data(), n, edge_lo, e_hi, order, seed, edge_part.data());
  } else if (meth == dp::kHdrf) {
    dp::Hdrf placer(P, seed, degree.data(), hdrf_lambda, bits.data(), words, loads.data());
    run_stream(placer, indptr.data(), window.data(), n, edge_lo, e_hi, order, seed, edge_part.data());
  } else {
    dp::assign_hashed(indptr.data(), n, window.data(), edge_lo, e_hi, P, seed, meth == dp::kHash,
                      edge_part.data(), bits.data(), words, loads.data(), threads);
  }
}

void permutation(Vec<uint32_t> perm, uint64_t seed) {
  nb::gil_scoped_release release;
  dp::seeded_permutation(perm.data(), static_cast<int64_t>(perm.shape(0)), seed);
}

template <typename Part>
void most_in_edges(Vec<const int64_t> indptr, Vec<const Part> edge_part, int P, Vec<uint64_t> prefer,
                   int threads) {
  const int64_t n = static_cast<int64_t>(indptr.shape(0)) - 1;
  if (n < 0) throw std::invalid_argument("indptr must have N + 1 >= 1 entries");
  if (P < 1) throw std::invalid_argument("P must be >= 1");
  const int64_t words = (P + 63) / 64;
  if (static_cast<int64_t>(prefer.shape(0)) != n * words)
    throw std::invalid_argument("prefer must have N * ceil(P / 64) words");
  if (static_cast<int64_t>(edge_part.shape(0)) != indptr.data()[n])
    throw std::invalid_argument("edge_part must have one entry per edge");
  nb::gil_scoped_release release;
  dp::most_in_edges(indptr.data(), edge_part.data(), n, P, words, prefer.data(), threads);
}

void roots(Vec<uint64_t> bits, int P, nb::ndarray<const bool, nb::ndim<1>, nb::c_contig, nb::device::cpu> train,
           uint64_t seed, Vec<int32_t> root, Vec<int64_t> roots, Vec<int64_t> train_roots,
           Vec<const uint64_t> prefer) {
  const int64_t n = static_cast<int64_t>(root.shape(0));
  const int64_t words = (P + 63) / 64;
  if (static_cast<int64_t>(bits.shape(0)) != n * words)
    throw std::invalid_argument("bits must have N * ceil(P / 64) words");
  if (static_cast<int64_t>(train.shape(0)) != n) throw std::invalid_argument("train must have N entries");
  if (static_cast<int64_t>(roots.shape(0)) != P || static_cast<int64_t>(train_roots.shape(0)) != P)
    throw std::invalid_argument("roots and train_roots must have P entries");
  const bool preferring = prefer.shape(0) != 0;
  if (preferring && static_cast<int64_t>(prefer.shape(0)) != n * words)
    throw std::invalid_argument("prefer must be empty or have N * ceil(P / 64) words");
  nb::gil_scoped_release release;
  dp::choose_roots(bits.data(), words, n, P, train.data(), seed, root.data(), roots.data(),
                   train_roots.data(), preferring ? prefer.data() : nullptr);
}

template <typename Part>
void row_counts(Vec<const int64_t> indptr, Vec<const Part> edge_part, int k, Vec<const int64_t> l2g,
                Vec<int64_t> counts, int threads) {
  if (counts.shape(0) != l2g.shape(0)) throw std::invalid_argument("counts must match l2g");
  nb::gil_scoped_release release;
  dp::part_row_counts(indptr.data(), edge_part.data(), k, l2g.data(),
                      static_cast<int64_t>(l2g.shape(0)), counts.data(), threads);
}

template <typename Index, typename Part>
int64_t fill(Vec<const int64_t> indptr, Vec<const Index> indices, Vec<const Part> edge_part, int k,
             Vec<const int64_t> l2g, Vec<const int32_t> g2l, Vec<const int64_t> local_indptr,
             Vec<int32_t> local_indices, int threads) {
  if (local_indptr.shape(0) != l2g.shape(0) + 1)
    throw std::invalid_argument("local_indptr must have n_k + 1 entries");
  nb::gil_scoped_release release;
  return dp::part_fill(indptr.data(), indices.data(), edge_part.data(), k, l2g.data(),
                       static_cast<int64_t>(l2g.shape(0)), g2l.data(), local_indptr.data(),
                       local_indices.data(), threads);
}

}  // namespace

void register_partition(nb::module_& m) {
  const char* assign_doc =
      "partition_assign(indptr, window, edge_lo, P, method, order, seed, degree, edge_part, bits, "
      "loads, hdrf_lambda, threads): place the edges [edge_lo, edge_lo + len(window)) (window: "
      "their sources, a slice of indices) into edge_part [E] (partition of each edge, store "
      "order), updating bits [N * ceil(P/64)] (replica bitsets, zeroed by the caller before the "
      "first window) and loads [P] (edges per part); windows in ascending order give what one "
      "window of every edge gives. method: libra | hdrf | random | hash; order (libra, hdrf): "
      "store | shuffle (one window of every edge).";
  m.def("partition_assign", &assign<int32_t, uint8_t>, assign_doc);
  m.def("partition_assign", &assign<int32_t, uint16_t>);
  m.def("partition_assign", &assign<int64_t, uint8_t>);
  m.def("partition_assign", &assign<int64_t, uint16_t>);
  m.def("partition_permutation", &permutation,
        "partition_permutation(perm, seed): the seeded edge order `shuffle` uses (uint32).");
  m.def("partition_most_in_edges", &most_in_edges<uint8_t>,
        "partition_most_in_edges(indptr, edge_part, P, prefer, threads): prefer [N * ceil(P/64)] "
        "(zeroed by the caller) = bitsets of the partitions holding the most in-edges of each vertex.");
  m.def("partition_most_in_edges", &most_in_edges<uint16_t>);
  m.def("partition_roots", &roots,
        "partition_roots(bits, P, train, seed, root, roots, train_roots, prefer): choose each "
        "vertex's root partition (isolated vertices are placed on one) among its replicas, or among "
        "prefer's bits for the vertex when prefer is not empty and they are not; fills root [N] int32.");
  m.def("partition_row_counts", &row_counts<uint8_t>,
        "partition_row_counts(indptr, edge_part, k, l2g, counts, threads): in-edges on part k "
        "of each local vertex.");
  m.def("partition_row_counts", &row_counts<uint16_t>);
  const char* fill_doc =
      "partition_fill(indptr, indices, edge_part, k, l2g, g2l, local_indptr, local_indices, "
      "threads) -> int: local CSR of part k; returns -1, or the edge whose source is not local.";
  m.def("partition_fill", &fill<int32_t, uint8_t>, fill_doc);
  m.def("partition_fill", &fill<int32_t, uint16_t>);
  m.def("partition_fill", &fill<int64_t, uint8_t>);
  m.def("partition_fill", &fill<int64_t, uint16_t>);
}
