// Bindings for the graph attention kernels (distgnn/attention.hpp). Shapes are checked here;
// index ranges by the caller (distgnn.kernels.ops validates each graph once). The GIL is released while
// a kernel runs.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "bindings.hpp"
#include "distgnn/attention.hpp"

namespace nb = nanobind;
using namespace nb::literals;


namespace {

namespace att = distgnn::attention;

template <typename A>
int64_t rows(const A& a) { return static_cast<int64_t>(a.shape(0)); }
template <typename A>
int64_t cols(const A& a) { return static_cast<int64_t>(a.shape(1)); }

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

// The dropout keys, checked against the row counts.
att::Dropout make_dropout(double p, uint64_t seed, uint64_t epoch, uint64_t layer,
                          const std::optional<Vec<const int64_t>>& src_gids,
                          const std::optional<Vec<const int64_t>>& dst_gids, int64_t n_src,
                          int64_t n_dst) {
  require(p >= 0.0 && p < 1.0, "attention dropout p must lie in [0, 1)");
  att::Dropout d;
  d.p = p;
  if (p > 0.0) {
    require(src_gids && dst_gids, "attention dropout needs src_gids and dst_gids");
    require(rows(*src_gids) == n_src && rows(*dst_gids) == n_dst,
            "src_gids must have z.shape[0] entries and dst_gids len(indptr) - 1");
    d.key = distgnn::dropout::layer_key(seed, epoch, layer);
    d.src_gids = src_gids->data();
    d.dst_gids = dst_gids->data();
  }
  return d;
}

// Common shape checks; returns (n_dst, H, D).
template <typename T, typename I>
void check(const Vec<const int64_t>& indptr, const Vec<const I>& indices, const Mat<const T>& z,
           const Mat<const T>& el, const Mat<const T>& er, int64_t n_self, int64_t* n_dst,
           int64_t* H, int64_t* D) {
  require(rows(indptr) >= 1, "indptr must have at least one entry");
  *n_dst = rows(indptr) - 1;
  require(indptr.data()[0] == 0 && indptr.data()[*n_dst] <= rows(indices),
          "indptr must start at 0 and end within indices");
  *H = cols(el);
  require(*H >= 1 && cols(z) % *H == 0, "z must have H * D columns for el's H heads");
  *D = cols(z) / *H;
  require(rows(el) == rows(z), "el must have z's rows");
  require(rows(er) == *n_dst && cols(er) == *H, "er must have shape [len(indptr) - 1, H]");
  require(n_self >= 0 && n_self <= std::min(*n_dst, rows(z)), "n_self must lie in [0, min(n_dst, n_src)]");
}

template <typename T, typename I>
void forward(Vec<const int64_t> indptr, Vec<const I> indices, Mat<const T> z, Mat<const T> el,
             Mat<const T> er, int64_t n_self, double slope, Mat<T> m, Mat<T> s, Mat<T> q, double p,
             uint64_t seed, uint64_t epoch, uint64_t layer,
             std::optional<Vec<const int64_t>> src_gids, std::optional<Vec<const int64_t>> dst_gids,
             int threads) {
  int64_t n_dst, H, D;
  check<T, I>(indptr, indices, z, el, er, n_self, &n_dst, &H, &D);
  require(rows(m) == n_dst && cols(m) == H && rows(s) == n_dst && cols(s) == H,
          "m and s must have shape [n_dst, H]");
  require(rows(q) == n_dst && cols(q) == H * D, "q must have shape [n_dst, H * D]");
  const att::Dropout drop = make_dropout(p, seed, epoch, layer, src_gids, dst_gids, rows(z), n_dst);
  nb::gil_scoped_release release;
  att::forward<T, I>(indptr.data(), indices.data(), n_dst, n_self, z.data(), el.data(), er.data(),
                     H, D, static_cast<T>(slope), drop, m.data(), s.data(), q.data(), threads);
}

template <typename T, typename I>
void backward(Vec<const int64_t> indptr, Vec<const I> indices, Vec<const int64_t> t_indptr,
              Vec<const I> t_indices, Mat<const T> z, Mat<const T> el, Mat<const T> er,
              int64_t n_self, double slope, Mat<const T> m, Mat<const T> gq, Mat<const T> gs,
              Mat<T> gz, Mat<T> gel, Mat<T> ger, double p, uint64_t seed, uint64_t epoch,
              uint64_t layer, std::optional<Vec<const int64_t>> src_gids,
              std::optional<Vec<const int64_t>> dst_gids, int threads) {
  int64_t n_dst, H, D;
  check<T, I>(indptr, indices, z, el, er, n_self, &n_dst, &H, &D);
  const int64_t n_src = rows(z);
  require(rows(t_indptr) == n_src + 1 && rows(t_indices) == rows(indices),
          "the transpose must have z.shape[0] + 1 row pointers and indices' length");
  require(rows(m) == n_dst && cols(m) == H && rows(gs) == n_dst && cols(gs) == H,
          "m and gs must have shape [n_dst, H]");
  require(rows(gq) == n_dst && cols(gq) == H * D, "gq must have shape [n_dst, H * D]");
  require(rows(gz) == n_src && cols(gz) == H * D && rows(gel) == n_src && cols(gel) == H &&
              rows(ger) == n_dst && cols(ger) == H,
          "gz, gel and ger must have the shapes of z, el and er");
  const att::Dropout drop = make_dropout(p, seed, epoch, layer, src_gids, dst_gids, n_src, n_dst);
  nb::gil_scoped_release release;
  att::backward<T, I>(indptr.data(), indices.data(), t_indptr.data(), t_indices.data(), n_dst,
                      n_src, n_self, z.data(), el.data(), er.data(), m.data(), gq.data(),
                      gs.data(), H, D, static_cast<T>(slope), drop, gz.data(), gel.data(),
                      ger.data(), threads);
}

template <typename T, typename I>
void def_typed(nb::module_& mod) {
  mod.def("attention_forward", &forward<T, I>, "indptr"_a.noconvert(), "indices"_a.noconvert(),
          "z"_a.noconvert(), "el"_a.noconvert(), "er"_a.noconvert(), "n_self"_a, "slope"_a,
          "m"_a.noconvert(), "s"_a.noconvert(), "q"_a.noconvert(), "p"_a = 0.0, "seed"_a = 0,
          "epoch"_a = 0, "layer"_a = 0, "src_gids"_a.noconvert() = nb::none(),
          "dst_gids"_a.noconvert() = nb::none(), "threads"_a = 0,
          "attention_forward(indptr, indices, z, el, er, n_self, slope, m, s, q, p=0, seed=0, "
          "epoch=0, layer=0, src_gids=None, dst_gids=None, threads=0): per destination and head "
          "the largest score m, the sum s of exp(score - m) and q = sum exp(score - m) * mask * "
          "z[u] (distgnn/attention.hpp); z [n_src, H*D], el [n_src, H], er [n_dst, H].");
  mod.def("attention_backward", &backward<T, I>, "indptr"_a.noconvert(), "indices"_a.noconvert(),
          "t_indptr"_a.noconvert(), "t_indices"_a.noconvert(), "z"_a.noconvert(),
          "el"_a.noconvert(), "er"_a.noconvert(), "n_self"_a, "slope"_a, "m"_a.noconvert(),
          "gq"_a.noconvert(), "gs"_a.noconvert(), "gz"_a.noconvert(), "gel"_a.noconvert(),
          "ger"_a.noconvert(), "p"_a = 0.0, "seed"_a = 0, "epoch"_a = 0, "layer"_a = 0,
          "src_gids"_a.noconvert() = nb::none(), "dst_gids"_a.noconvert() = nb::none(),
          "threads"_a = 0,
          "attention_backward(...): gradients of z, el and er given those of q and s (m held "
          "constant); the transpose CSR (t_indptr, t_indices) is the same graph by source.");
}

}  // namespace

void register_attention(nb::module_& m) {
  def_typed<float, int32_t>(m);
  def_typed<float, int64_t>(m);
  def_typed<double, int32_t>(m);
  def_typed<double, int64_t>(m);
}
