#include "reduce.h"

#include <gloo/math.h>

namespace fuse_gloo {
namespace {

// Gloo's kernels, indexed by op (FUSE_OP_SUM, _MIN, _MAX, _PRODUCT).
template <typename T>
ReduceFn gloo_kernel(int op) {
  switch (op) {
    case FUSE_OP_SUM: return &gloo::sum<T>;
    case FUSE_OP_MIN: return &gloo::min<T>;
    case FUSE_OP_MAX: return &gloo::max<T>;
    case FUSE_OP_PRODUCT: return &gloo::product<T>;
    default: return nullptr;
  }
}

}  // namespace

ReduceFn reduce_function(int dtype, int op) {
  ReduceFn plain = nullptr;
  if (fuse::visit_plain_dtype(dtype, [&](auto zero) { plain = gloo_kernel<decltype(zero)>(op); }))
    return plain;
  return fuse::reduce_kernel(dtype, op);   // float16, bfloat16, bool
}

}  // namespace fuse_gloo
