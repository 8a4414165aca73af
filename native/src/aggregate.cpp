// Bindings for the aggregation kernels (issue: native aggregation kernels). None yet.
#include "bindings.hpp"

void register_aggregate(nanobind::module_&) {}
