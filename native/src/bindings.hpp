// Each kernel family registers its functions on the one extension module `distgnn._native`.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

// The array types every binding takes: C-contiguous CPU arrays of one and two dimensions.
template <typename T>
using Vec = nanobind::ndarray<T, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;
template <typename T>
using Mat = nanobind::ndarray<T, nanobind::ndim<2>, nanobind::c_contig, nanobind::device::cpu>;

void register_csr(nanobind::module_& m);
void register_aggregate(nanobind::module_& m);
void register_partition(nanobind::module_& m);
void register_attention(nanobind::module_& m);
void register_quantize(nanobind::module_& m);
