// The instruction set the kernels run with: each vectorised kernel is compiled for AVX-512, AVX2
// and baseline x86-64 (portable build) and picks one at run time, the host's own unless a narrower
// one is set (tests run every path on one machine: distgnn.kernels.ops.set_isa, DISTGNN_ISA).
// A build with -march=native (DISTGNN_NATIVE_ARCH) compiles one path only and dispatches nothing.
#pragma once
#include <atomic>
#include <string>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(DISTGNN_NATIVE_ARCH)
#define DISTGNN_DISPATCH 1
#define DISTGNN_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))
#define DISTGNN_TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace distgnn::cpu {

enum class Isa { base, avx2, avx512 };

inline const char* isa_name(Isa isa) {
  return isa == Isa::avx512 ? "avx512" : isa == Isa::avx2 ? "avx2" : "base";
}

// The kernels' instruction set when set below the host's (tests run every path on one machine;
// distgnn.kernels.ops.set_isa and the DISTGNN_ISA environment variable); -1: the host's own.
inline std::atomic<int>& isa_override() {
  static std::atomic<int> value{-1};
  return value;
}

inline Isa host_isa() {
#ifdef DISTGNN_DISPATCH
  static const Isa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
      return Isa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
    return Isa::base;
  }();
  return isa;
#else
  return Isa::base;
#endif
}

inline Isa detect_isa() {
  const int forced = isa_override().load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<Isa>(forced) : host_isa();
}

// Sets the kernels' instruction set to `name` (base, avx2, avx512, or "host" for the host's own);
// returns false, changing nothing, when the name is unknown or above what the host supports.
inline bool set_isa(const std::string& name) {
  if (name == "host") {
    isa_override().store(-1);
    return true;
  }
  for (Isa isa : {Isa::base, Isa::avx2, Isa::avx512}) {
    if (name == isa_name(isa)) {
      if (static_cast<int>(isa) > static_cast<int>(host_isa())) return false;
      isa_override().store(static_cast<int>(isa));
      return true;
    }
  }
  return false;
}

}  // namespace distgnn::cpu
