// Element-wise reduction kernels for every fuse wire dtype, in the shape Gloo's
// AllreduceOptions::Func expects: out[i] = op(a[i], b[i]) for i < n (out may alias a or b).
//
// Integer and IEEE float types use Gloo's kernels from gloo/math.h.  float16 and bfloat16 are
// widened to float32, combined, and rounded back (round to nearest, ties to even).  bool is a
// byte that is 0 or 1: SUM/MAX are logical or, PRODUCT/MIN logical and.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fuse_backend.h"

namespace fuse_gloo {

using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// Bytes per element of a fuse_dtype, or 0 when the value is not a known dtype.
size_t dtype_size(int dtype);

// Printable name of a fuse_dtype / fuse_reduce_op (for error messages).
const char* dtype_name(int dtype);
const char* op_name(int op);

// The kernel for (dtype, op), or nullptr when the pair is not supported.
ReduceFn reduce_function(int dtype, int op);

// ---- 16-bit float conversions (exposed for the unit tests through the binding) ----

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

// IEEE 754 binary16 -> binary32 (exact).
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

// binary32 -> binary16, round to nearest even; overflow gives inf, nan stays a (quiet) nan.
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

inline float bf16_to_float(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

inline uint16_t float_to_bf16(float f) {
  const uint32_t bits = float_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // nan: truncate, force quiet
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace fuse_gloo
