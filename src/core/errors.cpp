#include "dsa_indexer/errors.hpp"

#include <utility>

#include "dsa_indexer/tensor.hpp"
#include "core/util.hpp"

namespace dsa_indexer {

Error::~Error() = default;
InvalidArgument::~InvalidArgument() = default;
UnsupportedConfig::~UnsupportedConfig() = default;
CacheError::~CacheError() = default;

CompileError::CompileError(const std::string& what, std::string log, std::vector<std::string> options)
    : Error(what), log_(std::move(log)), options_(std::move(options)) {}
CompileError::~CompileError() = default;

DriverError::DriverError(const std::string& what, std::string call, int result)
    : Error(what), call_(std::move(call)), result_(result) {}
DriverError::~DriverError() = default;

const char* dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f64: return "f64";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
  }
  return "unknown-dtype";
}

int64_t dtype_size(DType t) {
  switch (t) {
    case DType::bf16:
    case DType::f16: return 2;
    case DType::f32:
    case DType::i32: return 4;
    case DType::i64:
    case DType::f64: return 8;
    case DType::e4m3:
    case DType::e5m2: return 1;
  }
  return 0;
}

std::string describe(const TensorDesc& t) {
  if (!t.present()) return "<not given>";
  std::string s = fmt::format("{}[", dtype_name(t.dtype));
  for (int i = 0; i < t.rank && i < kMaxRank; ++i) s += fmt::format("{}{}", i ? "," : "", t.shape[i]);
  s += "] strides [";
  for (int i = 0; i < t.rank && i < kMaxRank; ++i) s += fmt::format("{}{}", i ? "," : "", t.strides[i]);
  s += fmt::format("] on device {}", t.device);
  return s;
}

}  // namespace dsa_indexer
