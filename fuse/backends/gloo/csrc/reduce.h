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

#include "fuse_dtypes.h"

namespace fuse_gloo {

using fuse::ReduceFn;
using fuse::dtype_name;
using fuse::dtype_size;
using fuse::op_name;

// The kernel for (dtype, op): Gloo's own for the integer and IEEE types, fuse's shared kernels
// (fuse_dtypes.h) for float16, bfloat16 and bool; nullptr when the pair is not supported.
ReduceFn reduce_function(int dtype, int op);

}  // namespace fuse_gloo
