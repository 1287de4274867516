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
  switch (dtype) {
    case FUSE_UINT8: return gloo_kernel<uint8_t>(op);
    case FUSE_INT8: return gloo_kernel<int8_t>(op);
    case FUSE_UINT16: return gloo_kernel<uint16_t>(op);
    case FUSE_INT16: return gloo_kernel<int16_t>(op);
    case FUSE_INT32: return gloo_kernel<int32_t>(op);
    case FUSE_INT64: return gloo_kernel<int64_t>(op);
    case FUSE_FLOAT32: return gloo_kernel<float>(op);
    case FUSE_FLOAT64: return gloo_kernel<double>(op);
    default: return fuse::reduce_kernel(dtype, op);   // float16, bfloat16, bool
  }
}

}  // namespace fuse_gloo
