#include "reduce.h"

#include <gloo/math.h>

namespace fuse_gloo {
namespace {

struct Sum {
  static float apply(float a, float b) { return a + b; }
};
struct Product {
  static float apply(float a, float b) { return a * b; }
};
struct Min {
  static float apply(float a, float b) { return b < a ? b : a; }
};
struct Max {
  static float apply(float a, float b) { return a < b ? b : a; }
};

// 16-bit floats: widen, combine in float32, round back.
template <float (*Load)(uint16_t), uint16_t (*Store)(float), typename Op>
void reduce_16(void* out_, const void* a_, const void* b_, size_t n) {
  auto* out = static_cast<uint16_t*>(out_);
  const auto* a = static_cast<const uint16_t*>(a_);
  const auto* b = static_cast<const uint16_t*>(b_);
  for (size_t i = 0; i < n; ++i) {
    out[i] = Store(Op::apply(Load(a[i]), Load(b[i])));
  }
}

template <bool Or>
void reduce_bool(void* out_, const void* a_, const void* b_, size_t n) {
  auto* out = static_cast<uint8_t*>(out_);
  const auto* a = static_cast<const uint8_t*>(a_);
  const auto* b = static_cast<const uint8_t*>(b_);
  for (size_t i = 0; i < n; ++i) {
    out[i] = Or ? static_cast<uint8_t>((a[i] | b[i]) != 0)
                : static_cast<uint8_t>(a[i] != 0 && b[i] != 0);
  }
}

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

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
ReduceFn kernel_16(int op) {
  switch (op) {
    case FUSE_OP_SUM: return &reduce_16<Load, Store, Sum>;
    case FUSE_OP_MIN: return &reduce_16<Load, Store, Min>;
    case FUSE_OP_MAX: return &reduce_16<Load, Store, Max>;
    case FUSE_OP_PRODUCT: return &reduce_16<Load, Store, Product>;
    default: return nullptr;
  }
}

}  // namespace

size_t dtype_size(int dtype) {
  switch (dtype) {
    case FUSE_UINT8: case FUSE_INT8: case FUSE_BOOL: return 1;
    case FUSE_UINT16: case FUSE_INT16: case FUSE_FLOAT16: case FUSE_BFLOAT16: return 2;
    case FUSE_INT32: case FUSE_FLOAT32: return 4;
    case FUSE_INT64: case FUSE_FLOAT64: return 8;
    default: return 0;
  }
}

const char* dtype_name(int dtype) {
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

const char* op_name(int op) {
  switch (op) {
    case FUSE_OP_SUM: return "sum";
    case FUSE_OP_MIN: return "min";
    case FUSE_OP_MAX: return "max";
    case FUSE_OP_PRODUCT: return "product";
    default: return "unknown op";
  }
}

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
    case FUSE_FLOAT16: return kernel_16<half_to_float, float_to_half>(op);
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

}  // namespace fuse_gloo
