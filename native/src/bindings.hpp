// Each kernel family registers its functions on the one extension module `distgnn._native`.
#pragma once
#include <nanobind/nanobind.h>

void register_csr(nanobind::module_& m);
void register_aggregate(nanobind::module_& m);
void register_partition(nanobind::module_& m);
