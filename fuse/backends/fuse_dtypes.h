/* Element types of the fuse wire format, shared by the engine and native backends:
 * sizes, names, IEEE binary16 and bfloat16 conversions, and elementwise reduction kernels
 * for every (dtype, op) in fuse_backend.h.
 *
 * float16 and bfloat16 are widened to float32, combined, and rounded back (to nearest, ties
 * to even).  bool is a byte that is 0 or 1: SUM and MAX are logical or, PRODUCT and MIN
 * logical and.  Header-only C++ so a backend can include it without linking anything.
 */
#ifndef FUSE_DTYPES_H
#define FUSE_DTYPES_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define FUSE_HAVE_F16C_PATH 1
#endif

#include "fuse_backend.h"

namespace fuse {

inline size_t dtype_size(int dtype) {
  switch (dtype) {
    case FUSE_UINT8: case FUSE_INT8: case FUSE_BOOL: return 1;
    case FUSE_UINT16: case FUSE_INT16: case FUSE_FLOAT16: case FUSE_BFLOAT16: return 2;
    case FUSE_INT32: case FUSE_FLOAT32: return 4;
    case FUSE_INT64: case FUSE_FLOAT64: return 8;
    default: return 0;
  }
}

inline const char* dtype_name(int dtype) {
  switch (dtype) {
    case FUSE_UINT8: return "uint8";
    case FUSE_INT8: return "int8";
    case FUSE_UINT16: return "uint16";
    case FUSE_INT16: return "int16";
    case FUSE_INT32: return "int32";
    case FUSE_INT64: return "int64";
    case FUSE_FLOAT16: return "float16";
    case FUSE_FLOAT32: return "float32";
    case FUSE_FLOAT64: return "float64";
    case FUSE_BOOL: return "bool";
    case FUSE_BFLOAT16: return "bfloat16";
    default: return "unknown dtype";
  }
}

inline const char* op_name(int op) {
  switch (op) {
    case FUSE_OP_SUM: return "sum";
    case FUSE_OP_MIN: return "min";
    case FUSE_OP_MAX: return "max";
    case FUSE_OP_PRODUCT: return "product";
    default: return "unknown op";
  }
}

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/* IEEE 754 binary16 -> binary32 (exact). */
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) {  // inf or nan: keep the payload
    return bits_float(sign | 0x7f800000u | (man << 13));
  }
  if (exp == 0) {
    if (man == 0) {
      return bits_float(sign);  // signed zero
    }
    // Subnormal: shift the mantissa up until its leading one reaches the implicit bit.
    int shift = 0;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      ++shift;
    }
    man &= 0x3ffu;
    return bits_float(sign | (static_cast<uint32_t>(127 - 14 - shift) << 23) | (man << 13));
  }
  return bits_float(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

/* binary32 -> binary16, round to nearest even; overflow gives inf, nan stays a quiet nan. */
inline uint16_t float_to_half(float f) {
  const uint32_t bits = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t mag = bits & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
  }
  if (mag >= 0x477ff000u) {  // >= 65520 rounds past the largest half (65504)
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (mag < 0x38800000u) {  // below 2^-14: subnormal half or zero
    // Adding 0.5 puts the float's last mantissa bit at 2^-24, the half subnormal step, so the
    // FPU does the rounding; the low bits of the sum are the half's mantissa.
    const float sum = bits_float(mag) + 0.5f;
    return static_cast<uint16_t>(sign | (float_bits(sum) - 0x3f000000u));
  }
  const uint32_t odd = (mag >> 13) & 1u;
  mag += 0xc8000000u + 0xfffu + odd;  // rebias the exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (mag >> 13));
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t bits = float_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // nan: truncate, force quiet
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

/* ---- kernels: out[i] = op(a[i], b[i]) for i < n; out may alias a or b ---- */

using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

struct OpSum { template <class T> static T apply(T a, T b) { return static_cast<T>(a + b); } };
struct OpProduct { template <class T> static T apply(T a, T b) { return static_cast<T>(a * b); } };
struct OpMin { template <class T> static T apply(T a, T b) { return b < a ? b : a; } };
struct OpMax { template <class T> static T apply(T a, T b) { return a < b ? b : a; } };

template <class T, class Op>
void reduce_plain(void* out_, const void* a_, const void* b_, size_t n) {
  T* out = static_cast<T*>(out_);
  const T* a = static_cast<const T*>(a_);
  const T* b = static_cast<const T*>(b_);
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float), class Op>
void reduce_16(void* out_, const void* a_, const void* b_, size_t n) {
  uint16_t* out = static_cast<uint16_t*>(out_);
  const uint16_t* a = static_cast<const uint16_t*>(a_);
  const uint16_t* b = static_cast<const uint16_t*>(b_);
  for (size_t i = 0; i < n; ++i) out[i] = Store(Op::apply(Load(a[i]), Load(b[i])));
}

#ifdef FUSE_HAVE_F16C_PATH
/* float16 eight at a time with the F16C conversions (every x86-64 CPU since 2012; chosen at run
 * time, so the build needs no -m flags).  The scalar conversions above cost a branchy function
 * call per element, which made a float16 allreduce 3x slower than a float32 one of twice the
 * bytes.  The hardware rounds to nearest even like float_to_half; NaN payloads may differ. */
inline bool cpu_has_f16c() {
  // F16C read from CPUID (leaf 1, ECX bit 29) rather than __builtin_cpu_supports("f16c"), which
  // GCC 10 (the wheels' build root, Debian bullseye) does not know; "avx" also checks that the
  // OS saves the AVX registers.
  static const bool has = [] {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
           (ecx & bit_F16C) != 0;
  }();
  return has;
}

template <class Op>
__attribute__((target("avx,f16c"))) void reduce_half_f16c(void* out_, const void* a_,
                                                         const void* b_, size_t n) {
  uint16_t* out = static_cast<uint16_t*>(out_);
  const uint16_t* a = static_cast<const uint16_t*>(a_);
  const uint16_t* b = static_cast<const uint16_t*>(b_);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    __m256 r;
    // min_ps(y, x) is "y < x ? y : x" and max_ps(y, x) is "y > x ? y : x": the same choices,
    // NaNs included, as OpMin and OpMax.
    if constexpr (std::is_same<Op, OpSum>::value) r = _mm256_add_ps(x, y);
    else if constexpr (std::is_same<Op, OpProduct>::value) r = _mm256_mul_ps(x, y);
    else if constexpr (std::is_same<Op, OpMin>::value) r = _mm256_min_ps(y, x);
    else r = _mm256_max_ps(y, x);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) out[i] = float_to_half(Op::apply(half_to_float(a[i]), half_to_float(b[i])));
}

__attribute__((target("avx,f16c"))) inline void scale_half_f16c(uint16_t* p, size_t n, float f) {
  const __m256 factor = _mm256_set1_ps(f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + i),
                     _mm256_cvtps_ph(_mm256_mul_ps(x, factor),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) p[i] = float_to_half(half_to_float(p[i]) * f);
}
#endif

/* p[i] *= f for float16 elements, rounded to nearest even. */
inline void scale_half(uint16_t* p, size_t n, float f) {
#ifdef FUSE_HAVE_F16C_PATH
  if (cpu_has_f16c()) {
    scale_half_f16c(p, n, f);
    return;
  }
#endif
  for (size_t i = 0; i < n; ++i) p[i] = float_to_half(half_to_float(p[i]) * f);
}

template <bool Or>
void reduce_bool(void* out_, const void* a_, const void* b_, size_t n) {
  uint8_t* out = static_cast<uint8_t*>(out_);
  const uint8_t* a = static_cast<const uint8_t*>(a_);
  const uint8_t* b = static_cast<const uint8_t*>(b_);
  for (size_t i = 0; i < n; ++i) {
    out[i] = Or ? static_cast<uint8_t>((a[i] | b[i]) != 0)
                : static_cast<uint8_t>(a[i] != 0 && b[i] != 0);
  }
}

template <class T>
ReduceFn plain_kernel(int op) {
  switch (op) {
    case FUSE_OP_SUM: return &reduce_plain<T, OpSum>;
    case FUSE_OP_MIN: return &reduce_plain<T, OpMin>;
    case FUSE_OP_MAX: return &reduce_plain<T, OpMax>;
    case FUSE_OP_PRODUCT: return &reduce_plain<T, OpProduct>;
    default: return nullptr;
  }
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
ReduceFn kernel_16(int op) {
  switch (op) {
    case FUSE_OP_SUM: return &reduce_16<Load, Store, OpSum>;
    case FUSE_OP_MIN: return &reduce_16<Load, Store, OpMin>;
    case FUSE_OP_MAX: return &reduce_16<Load, Store, OpMax>;
    case FUSE_OP_PRODUCT: return &reduce_16<Load, Store, OpProduct>;
    default: return nullptr;
  }
}

/* The one table from a plain dtype's code to its C type: calls visit(T()) for the integers,
   float32 and float64, and returns true; false for float16, bfloat16 and bool, whose elements
   need conversions (each caller handles those itself). */
template <class Visit>
inline bool visit_plain_dtype(int dtype, Visit&& visit) {
  switch (dtype) {
    case FUSE_UINT8: visit(uint8_t()); return true;
    case FUSE_INT8: visit(int8_t()); return true;
    case FUSE_UINT16: visit(uint16_t()); return true;
    case FUSE_INT16: visit(int16_t()); return true;
    case FUSE_INT32: visit(int32_t()); return true;
    case FUSE_INT64: visit(int64_t()); return true;
    case FUSE_FLOAT32: visit(float()); return true;
    case FUSE_FLOAT64: visit(double()); return true;
    default: return false;
  }
}

/* The kernel for (dtype, op), or nullptr when the pair is unknown. */
inline ReduceFn reduce_kernel(int dtype, int op) {
  ReduceFn plain = nullptr;
  if (visit_plain_dtype(dtype, [&](auto zero) { plain = plain_kernel<decltype(zero)>(op); }))
    return plain;
  switch (dtype) {
    case FUSE_FLOAT16:
#ifdef FUSE_HAVE_F16C_PATH
      if (cpu_has_f16c()) {
        switch (op) {
          case FUSE_OP_SUM: return &reduce_half_f16c<OpSum>;
          case FUSE_OP_MIN: return &reduce_half_f16c<OpMin>;
          case FUSE_OP_MAX: return &reduce_half_f16c<OpMax>;
          case FUSE_OP_PRODUCT: return &reduce_half_f16c<OpProduct>;
          default: return nullptr;
        }
      }
#endif
      return kernel_16<half_to_float, float_to_half>(op);
    case FUSE_BFLOAT16: return kernel_16<bf16_to_float, float_to_bf16>(op);
    case FUSE_BOOL:
      switch (op) {
        case FUSE_OP_SUM: case FUSE_OP_MAX: return &reduce_bool<true>;
        case FUSE_OP_MIN: case FUSE_OP_PRODUCT: return &reduce_bool<false>;
        default: return nullptr;
      }
    default: return nullptr;
  }
}

/* Scaling: the engine's pre/postscale, also applied inside its shared-memory allreduce. */
template <typename T>
inline void scale_typed(T* p, size_t n, double f) {
  for (size_t i = 0; i < n; ++i) p[i] = (T)(p[i] * f);
}

// Multiply every element by `factor` (integers: computed in double, truncated, as Horovod does).
inline void scale_buffer(void* buf, size_t count, int dtype, double factor) {
  if (factor == 1.0) return;
  if (dtype == FUSE_FLOAT32) {     // multiplied in float: the factor rounded to float first
    float* p = (float*)buf;
    float f = (float)factor;
    for (size_t i = 0; i < count; ++i) p[i] *= f;
    return;
  }
  if (visit_plain_dtype(dtype, [&](auto zero) {
        scale_typed(static_cast<decltype(zero)*>(buf), count, factor); }))
    return;
  switch (dtype) {
    case FUSE_FLOAT16: scale_half((uint16_t*)buf, count, (float)factor); break;
    case FUSE_BFLOAT16: {
      uint16_t* p = (uint16_t*)buf;
      float f = (float)factor;
      for (size_t i = 0; i < count; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) * f);
      break;
    }
    case FUSE_BOOL: {  // a bool stays a bool: scaling by 0 clears it, anything else keeps it
      if (factor == 0.0) std::memset(buf, 0, count);
      break;
    }
  }
}

}  // namespace fuse

#endif
