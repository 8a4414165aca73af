// Small shared helpers for the native kernels: OpenMP shims and index types.
#pragma once
#include <cstdint>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace distgnn {

inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Resolve a caller's thread request: <= 0 means "OpenMP's default".
inline int resolve_threads(int requested) { return requested > 0 ? requested : max_threads(); }

}  // namespace distgnn
