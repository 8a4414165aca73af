// Bindings for the aggregation kernels (distgnn/aggregate.hpp) and keyed dropout
// (distgnn/dropout.hpp). Arrays arrive zero-copy (numpy, or torch through DLPack); every array
// argument is `noconvert`, so a wrong dtype is refused instead of silently copied (an output copy
// would be lost). Shapes are checked here; index ranges are checked once per graph by the caller
// (aggregate_index_bound). The GIL is released while a kernel runs.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "bindings.hpp"
#include "distgnn/aggregate.hpp"
#include "distgnn/dropout.hpp"

namespace nb = nanobind;
using namespace nb::literals;


namespace {

namespace agg = distgnn::aggregate;

// y = scale * (A x + self) with shape checks. XB: the element type the array arrives as (T, or
// int16 for bfloat16 rows, which numpy and DLPack-from-numpy lack); X: the kernel's row type.
// weight: one per row of x (and self); plan: aggregate_plan(indptr, ...), checked here.
template <typename T, typename XB, typename X, typename I>
void spmm_rows(Vec<const int64_t> indptr, Vec<const I> indices, Mat<const XB> x, Mat<T> y,
               std::optional<Vec<const T>> scale, std::optional<Mat<const XB>> self, int threads,
               int64_t chunk_edges, int block, int prefetch, int tiles, bool sorted,
               std::optional<Vec<const T>> weight, std::optional<Mat<const int64_t>> plan) {
  if (indptr.shape(0) < 1) throw std::invalid_argument("indptr must have at least one entry");
  const int64_t n_rows = static_cast<int64_t>(indptr.shape(0)) - 1;
  const int64_t F = static_cast<int64_t>(x.shape(1));
  if (static_cast<int64_t>(y.shape(0)) != n_rows || static_cast<int64_t>(y.shape(1)) != F)
    throw std::invalid_argument("y must have shape [len(indptr) - 1, x.shape[1]]");
  const int64_t* ip = indptr.data();
  if (ip[0] != 0 || ip[n_rows] > static_cast<int64_t>(indices.shape(0)))
    throw std::invalid_argument("indptr must start at 0 and end within indices");
  if (scale && static_cast<int64_t>(scale->shape(0)) != n_rows)
    throw std::invalid_argument("scale must have len(indptr) - 1 entries");
  int64_t n_self = 0;
  if (self) {
    if (static_cast<int64_t>(self->shape(1)) != F)
      throw std::invalid_argument("self must have x.shape[1] columns");
    n_self = std::min<int64_t>(n_rows, static_cast<int64_t>(self->shape(0)));
  }
  if (weight && (static_cast<int64_t>(weight->shape(0)) != static_cast<int64_t>(x.shape(0)) ||
                 n_self > static_cast<int64_t>(x.shape(0))))
    throw std::invalid_argument("weight must have x.shape[0] entries (and self at most x.shape[0] rows)");
  const agg::Chunk* chunks = nullptr;
  int64_t n_chunks = 0;
  if (plan) {
    int64_t n_pieces = 0;
    chunks = reinterpret_cast<const agg::Chunk*>(plan->data());
    n_chunks = static_cast<int64_t>(plan->shape(0));
    if (plan->shape(1) != 5 || !agg::check_plan(ip, n_rows, chunks, n_chunks, &n_pieces))
      throw std::invalid_argument("plan is not a chunk plan of this indptr (make it with aggregate_plan)");
  }
  if (!agg::valid_block(block)) throw std::invalid_argument("block must be one of 0, 8, 16, 32, 48, 64, 128, 256");
  if (static_cast<const void*>(x.data()) == static_cast<const void*>(y.data()) && n_rows > 0)
    throw std::invalid_argument("y must not alias x");
  const T* s = scale ? scale->data() : nullptr;
  const X* sf = self ? reinterpret_cast<const X*>(self->data()) : nullptr;
  agg::Options opt{chunk_edges, block, prefetch, tiles, sorted};
  nb::gil_scoped_release release;
  agg::spmm<T, I, X>(ip, indices.data(), n_rows, reinterpret_cast<const X*>(x.data()),
                     static_cast<int64_t>(x.shape(0)), F, s, sf, n_self, y.data(), threads, opt,
                     weight ? weight->data() : nullptr, chunks, n_chunks);
}

// The chunk plan of a CSR as an int64 array [n_chunks, 5] (row_begin, row_end, edge_begin,
// edge_end, piece), for aggregate_spmm(plan=...).
nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> make_plan(Vec<const int64_t> indptr, int threads,
                                                       int64_t chunk_edges) {
  if (indptr.shape(0) < 1) throw std::invalid_argument("indptr must have at least one entry");
  const int64_t n_rows = static_cast<int64_t>(indptr.shape(0)) - 1;
  auto* chunks = new std::vector<agg::Chunk>();
  {
    nb::gil_scoped_release release;
    if (n_rows > 0) *chunks = agg::make_plan(indptr.data(), n_rows, threads, chunk_edges);
  }
  nb::capsule owner(chunks, [](void* p) noexcept { delete static_cast<std::vector<agg::Chunk>*>(p); });
  return nb::ndarray<nb::numpy, int64_t, nb::ndim<2>>(reinterpret_cast<int64_t*>(chunks->data()),
                                                      {chunks->size(), 5}, owner);
}

template <typename T, typename I>
void spmm(Vec<const int64_t> indptr, Vec<const I> indices, Mat<const T> x, Mat<T> y,
          std::optional<Vec<const T>> scale, std::optional<Mat<const T>> self, int threads,
          int64_t chunk_edges, int block, int prefetch, int tiles, bool sorted,
          std::optional<Vec<const T>> weight, std::optional<Mat<const int64_t>> plan) {
  spmm_rows<T, T, T, I>(indptr, indices, x, y, scale, self, threads, chunk_edges, block, prefetch,
                        tiles, sorted, weight, plan);
}

// bfloat16 rows (x and self given as their int16 bit patterns), float32 scale and result.
template <typename I>
void spmm_bf16(Vec<const int64_t> indptr, Vec<const I> indices, Mat<const int16_t> x, Mat<float> y,
               std::optional<Vec<const float>> scale, std::optional<Mat<const int16_t>> self,
               int threads, int64_t chunk_edges, int block, int prefetch, int tiles, bool sorted,
               std::optional<Vec<const float>> weight, std::optional<Mat<const int64_t>> plan) {
  spmm_rows<float, int16_t, agg::detail::bf16, I>(indptr, indices, x, y, scale, self, threads,
                                                  chunk_edges, block, prefetch, tiles, sorted,
                                                  weight, plan);
}

template <typename I>
int64_t index_bound(Vec<const I> indices, int threads) {
  nb::gil_scoped_release release;
  return agg::index_bound(indices.data(), static_cast<int64_t>(indices.shape(0)), threads);
}

template <typename T, typename I>
void gather_rows(Mat<const T> x, Vec<const I> rows, Mat<T> out, int threads) {
  const int64_t n = static_cast<int64_t>(rows.shape(0));
  const int64_t F = static_cast<int64_t>(x.shape(1));
  if (static_cast<int64_t>(out.shape(0)) != n || static_cast<int64_t>(out.shape(1)) != F)
    throw std::invalid_argument("out must have shape [len(rows), x.shape[1]]");
  const int64_t bound = agg::index_bound(rows.data(), n, threads);
  if (bound < 0 || bound > static_cast<int64_t>(x.shape(0)))
    throw std::invalid_argument("rows must lie in [0, x.shape[0])");
  nb::gil_scoped_release release;
  agg::gather_rows(x.data(), F, rows.data(), n, out.data(), threads);
}

template <typename T, typename I>
void scatter_add_rows(Mat<const T> x, Vec<const I> rows, Mat<T> y, int threads) {
  const int64_t n = static_cast<int64_t>(rows.shape(0));
  const int64_t F = static_cast<int64_t>(y.shape(1));
  if (static_cast<int64_t>(x.shape(0)) != n || static_cast<int64_t>(x.shape(1)) != F)
    throw std::invalid_argument("x must have shape [len(rows), y.shape[1]]");
  const int64_t bound = agg::index_bound(rows.data(), n, threads);
  if (bound < 0 || bound > static_cast<int64_t>(y.shape(0)))
    throw std::invalid_argument("rows must lie in [0, y.shape[0])");
  nb::gil_scoped_release release;
  agg::scatter_add_rows(x.data(), F, rows.data(), n, y.data(), threads);
}

void check_p(double p) {
  if (!(p >= 0.0 && p <= 1.0)) throw std::invalid_argument("dropout p must lie in [0, 1]");
}

// x [n, F], one global id per row, out the shape of x, p in [0, 1]
void check_dropout_shapes(size_t n, size_t F, size_t n_gids, size_t out_n, size_t out_F, double p) {
  check_p(p);
  if (n_gids != n) throw std::invalid_argument("global_ids must have x.shape[0] entries");
  if (out_n != n || out_F != F) throw std::invalid_argument("out must have the shape of x");
}

// keyed dropout of x into out; with Relu, ReLU then dropout in the same pass
template <typename T, typename G, bool Relu>
void dropout_apply(Mat<const T> x, Vec<const G> gids, Mat<T> out, double p, uint64_t seed,
                   uint64_t epoch, uint64_t layer, int threads) {
  check_dropout_shapes(x.shape(0), x.shape(1), gids.shape(0), out.shape(0), out.shape(1), p);
  const int64_t n = static_cast<int64_t>(x.shape(0)), F = static_cast<int64_t>(x.shape(1));
  nb::gil_scoped_release release;
  distgnn::dropout::apply<T, G, Relu>(x.data(), gids.data(), n, F, p, seed, epoch, layer,
                                      out.data(), threads);
}

template <typename T>
void relu_dropout_backward(Mat<const T> grad, Mat<const T> out, Mat<T> grad_in, double p, int threads) {
  check_p(p);
  if (grad.shape(0) != out.shape(0) || grad.shape(1) != out.shape(1) ||
      grad_in.shape(0) != out.shape(0) || grad_in.shape(1) != out.shape(1))
    throw std::invalid_argument("grad, out and grad_in must have one shape");
  nb::gil_scoped_release release;
  distgnn::dropout::relu_dropout_backward<T>(grad.data(), out.data(),
                                          static_cast<int64_t>(out.shape(0) * out.shape(1)), p,
                                          grad_in.data(), threads);
}

// ReLU then keyed dropout of bfloat16 rows (their raw bits, int16) into bfloat16 rows, in float32
// arithmetic: the bits of relu_dropout_apply in float32 followed by a cast to bfloat16.
template <typename G>
void relu_dropout_apply_bf16(Mat<const int16_t> x, Vec<const G> gids, Mat<int16_t> out, double p,
                             uint64_t seed, uint64_t epoch, uint64_t layer, int threads) {
  check_dropout_shapes(x.shape(0), x.shape(1), gids.shape(0), out.shape(0), out.shape(1), p);
  const int64_t n = static_cast<int64_t>(x.shape(0)), F = static_cast<int64_t>(x.shape(1));
  nb::gil_scoped_release release;
  distgnn::dropout::apply<float, G, true, uint16_t>(reinterpret_cast<const uint16_t*>(x.data()),
                                                    gids.data(), n, F, p, seed, epoch, layer,
                                                    reinterpret_cast<uint16_t*>(out.data()), threads);
}

void relu_dropout_backward_bf16(Mat<const int16_t> grad, Mat<const int16_t> out, Mat<int16_t> grad_in,
                                double p, int threads) {
  check_p(p);
  if (grad.shape(0) != out.shape(0) || grad.shape(1) != out.shape(1) ||
      grad_in.shape(0) != out.shape(0) || grad_in.shape(1) != out.shape(1))
    throw std::invalid_argument("grad, out and grad_in must have one shape");
  nb::gil_scoped_release release;
  distgnn::dropout::relu_dropout_backward<float, uint16_t>(
      reinterpret_cast<const uint16_t*>(grad.data()), reinterpret_cast<const uint16_t*>(out.data()),
      static_cast<int64_t>(out.shape(0) * out.shape(1)), p, reinterpret_cast<uint16_t*>(grad_in.data()),
      threads);
}

template <typename T, typename G>
void dropout_mask(Vec<const G> gids, Mat<T> out, double p, uint64_t seed, uint64_t epoch,
                  uint64_t layer, int threads) {
  check_p(p);
  const int64_t n = static_cast<int64_t>(out.shape(0)), F = static_cast<int64_t>(out.shape(1));
  if (static_cast<int64_t>(gids.shape(0)) != n)
    throw std::invalid_argument("global_ids must have out.shape[0] entries");
  nb::gil_scoped_release release;
  distgnn::dropout::apply<T>(static_cast<const T*>(nullptr), gids.data(), n, F, p, seed, epoch,
                          layer, out.data(), threads);
}

template <typename T, typename I>
void def_typed(nb::module_& m) {
  m.def("aggregate_spmm", &spmm<T, I>, "indptr"_a.noconvert(), "indices"_a.noconvert(),
        "x"_a.noconvert(), "y"_a.noconvert(), "scale"_a.noconvert() = nb::none(),
        "self"_a.noconvert() = nb::none(), "threads"_a = 0, "chunk_edges"_a = 0, "block"_a = 0,
        "prefetch"_a = -1, "tiles"_a = 0, "sorted"_a = false, "weight"_a.noconvert() = nb::none(),
        "plan"_a.noconvert() = nb::none(),
        "aggregate_spmm(indptr, indices, x, y, scale=None, self=None, threads=0, chunk_edges=0, "
        "block=0, prefetch=-1, tiles=0, sorted=False, weight=None, plan=None): y[v] = scale[v] * "
        "(sum_{e in row v} weight[u] x[u] + weight[v] self[v]), u = indices[e], for v < "
        "len(indptr) - 1 (self only for v < len(self); weight absent: 1). x [n_src, F], y [n_rows, "
        "F], scale [n_rows], weight [n_src]; the same float dtype throughout. Index values must lie "
        "in [0, n_src). plan: aggregate_plan(indptr, threads) reused across calls (chunk_edges is "
        "then ignored). Source tiling (tiles > 1; off by default) only runs when sorted=True "
        "promises ascending sources within every row.");
  m.def("gather_rows", &gather_rows<T, I>, "x"_a.noconvert(), "rows"_a.noconvert(),
        "out"_a.noconvert(), "threads"_a = 0, "gather_rows(x, rows, out, threads=0): out[i] = x[rows[i]].");
  m.def("scatter_add_rows", &scatter_add_rows<T, I>, "x"_a.noconvert(), "rows"_a.noconvert(),
        "y"_a.noconvert(), "threads"_a = 0,
        "scatter_add_rows(x, rows, y, threads=0): y[rows[i]] += x[i] (rows may repeat).");
  m.def("dropout_apply", &dropout_apply<T, I, false>, "x"_a.noconvert(), "global_ids"_a.noconvert(),
        "out"_a.noconvert(), "p"_a, "seed"_a, "epoch"_a, "layer"_a, "threads"_a = 0,
        "dropout_apply(x, global_ids, out, p, seed, epoch, layer, threads=0): out = x * mask, "
        "mask keyed by (seed, epoch, layer, global id, column), kept entries scaled by 1/(1-p).");
  m.def("relu_dropout_apply", &dropout_apply<T, I, true>, "x"_a.noconvert(), "global_ids"_a.noconvert(),
        "out"_a.noconvert(), "p"_a, "seed"_a, "epoch"_a, "layer"_a, "threads"_a = 0,
        "relu_dropout_apply(x, global_ids, out, p, seed, epoch, layer, threads=0): out = "
        "max(x, 0) * mask, the mask of dropout_apply (one pass for ReLU then dropout).");
  m.def("dropout_mask", &dropout_mask<T, I>, "global_ids"_a.noconvert(), "out"_a.noconvert(),
        "p"_a, "seed"_a, "epoch"_a, "layer"_a, "threads"_a = 0,
        "dropout_mask(global_ids, out, p, seed, epoch, layer, threads=0): out = the scaled mask.");
}

std::string isa_name() {
#ifdef DISTGNN_NATIVE_ARCH
  return "native";
#else
  return agg::detail::isa_name(agg::detail::detect_isa());
#endif
}

std::string host_isa_name() {
#ifdef DISTGNN_NATIVE_ARCH
  return "native";
#else
  return agg::detail::isa_name(agg::detail::host_isa());
#endif
}

bool set_isa(const std::string& name) {
#ifdef DISTGNN_NATIVE_ARCH
  return name == "host" || name == "native";
#else
  return agg::detail::set_isa(name);
#endif
}

}  // namespace

void register_aggregate(nb::module_& m) {
  def_typed<float, int32_t>(m);
  def_typed<float, int64_t>(m);
  def_typed<double, int32_t>(m);
  def_typed<double, int64_t>(m);
  m.def("relu_dropout_backward", &relu_dropout_backward<float>, "grad"_a.noconvert(), "out"_a.noconvert(),
        "grad_in"_a.noconvert(), "p"_a, "threads"_a = 0,
        "relu_dropout_backward(grad, out, grad_in, p, threads=0): grad_in = grad / (1 - p) where "
        "out > 0, else 0 (the gradient of relu_dropout_apply through its output).");
  m.def("relu_dropout_backward", &relu_dropout_backward<double>, "grad"_a.noconvert(), "out"_a.noconvert(),
        "grad_in"_a.noconvert(), "p"_a, "threads"_a = 0);
  m.def("relu_dropout_apply_bf16", &relu_dropout_apply_bf16<int32_t>, "x"_a.noconvert(),
        "global_ids"_a.noconvert(), "out"_a.noconvert(), "p"_a, "seed"_a, "epoch"_a, "layer"_a,
        "threads"_a = 0,
        "relu_dropout_apply_bf16(x, global_ids, out, p, seed, epoch, layer, threads=0): "
        "relu_dropout_apply on bfloat16 rows (int16 views of their bits), computed in float32 and "
        "rounded to nearest even.");
  m.def("relu_dropout_apply_bf16", &relu_dropout_apply_bf16<int64_t>, "x"_a.noconvert(),
        "global_ids"_a.noconvert(), "out"_a.noconvert(), "p"_a, "seed"_a, "epoch"_a, "layer"_a,
        "threads"_a = 0);
  m.def("relu_dropout_backward_bf16", &relu_dropout_backward_bf16, "grad"_a.noconvert(),
        "out"_a.noconvert(), "grad_in"_a.noconvert(), "p"_a, "threads"_a = 0,
        "relu_dropout_backward_bf16(grad, out, grad_in, p, threads=0): relu_dropout_backward on "
        "bfloat16 rows (int16 views), computed in float32 and rounded to nearest even.");
  m.def("aggregate_spmm_bf16", &spmm_bf16<int32_t>, "indptr"_a.noconvert(), "indices"_a.noconvert(),
        "x"_a.noconvert(), "y"_a.noconvert(), "scale"_a.noconvert() = nb::none(),
        "self"_a.noconvert() = nb::none(), "threads"_a = 0, "chunk_edges"_a = 0, "block"_a = 0,
        "prefetch"_a = -1, "tiles"_a = 0, "sorted"_a = false, "weight"_a.noconvert() = nb::none(),
        "plan"_a.noconvert() = nb::none(),
        "aggregate_spmm_bf16(indptr, indices, x, y, scale=None, self=None, ...): aggregate_spmm "
        "over bfloat16 rows, x and self given as int16 bit patterns (torch: t.view(torch.int16)), "
        "summed in float32 into float32 y with float32 scale and weight.");
  m.def("aggregate_spmm_bf16", &spmm_bf16<int64_t>, "indptr"_a.noconvert(), "indices"_a.noconvert(),
        "x"_a.noconvert(), "y"_a.noconvert(), "scale"_a.noconvert() = nb::none(),
        "self"_a.noconvert() = nb::none(), "threads"_a = 0, "chunk_edges"_a = 0, "block"_a = 0,
        "prefetch"_a = -1, "tiles"_a = 0, "sorted"_a = false, "weight"_a.noconvert() = nb::none(),
        "plan"_a.noconvert() = nb::none());
  m.def("aggregate_plan", &make_plan, "indptr"_a.noconvert(), "threads"_a = 0, "chunk_edges"_a = 0,
        "aggregate_plan(indptr, threads=0, chunk_edges=0) -> int64 [n_chunks, 5]: the work chunks "
        "aggregate_spmm would cut this CSR into (rows packed to about chunk_edges edges, 0: "
        "automatic for `threads`; hub rows cut into pieces), to pass as plan= on every call.");
  m.def("aggregate_index_bound", &index_bound<int32_t>, "indices"_a.noconvert(), "threads"_a = 0,
        "max(indices) + 1 (0 when empty), or -1 when an index is negative.");
  m.def("aggregate_index_bound", &index_bound<int64_t>, "indices"_a.noconvert(), "threads"_a = 0);
  m.def("aggregate_isa", &isa_name,
        "Instruction set the aggregation kernels run with: avx512, avx2, base or native.");
  m.def("aggregate_host_isa", &host_isa_name,
        "The widest instruction set this host runs the kernels with (avx512, avx2, base; native "
        "for a DISTGNN_NATIVE_ARCH build).");
  m.def("aggregate_set_isa", &set_isa, "name"_a,
        "aggregate_set_isa(name) -> bool: run the kernels with base, avx2 or avx512 (at most the "
        "host's), or 'host' again; False (nothing changed) for an unknown or unsupported name.");
}
