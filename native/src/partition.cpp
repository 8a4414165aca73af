// Bindings for vertex-cut assignment (issue: vertex-cut partitioning). None yet.
#include "bindings.hpp"

void register_partition(nanobind::module_&) {}
