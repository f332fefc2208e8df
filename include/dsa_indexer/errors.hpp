#pragma once
// Typed errors. Every error raised by the library is one of these; messages name the
// parameter, the expected value and the actual value.
#include <stdexcept>
#include <string>
#include <vector>

#include "dsa_indexer/export.hpp"

namespace dsa_indexer {

class DSA_INDEXER_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  ~Error() override;
};

// The call is malformed: wrong rank, shape, dtype, stride, alignment, device or scalar value.
class DSA_INDEXER_API InvalidArgument : public Error {
 public:
  using Error::Error;
  ~InvalidArgument() override;
};

// The call is well formed but asks for something this build or device does not implement
// (a head count other than 16/32/64, a non-Hopper device, ...).
class DSA_INDEXER_API UnsupportedConfig : public Error {
 public:
  using Error::Error;
  ~UnsupportedConfig() override;
};

// NVRTC rejected the generated source or crashed; carries the log and the options used.
class DSA_INDEXER_API CompileError : public Error {
 public:
  CompileError(const std::string& what, std::string log, std::vector<std::string> options);
  ~CompileError() override;
  const std::string& log() const { return log_; }
  const std::vector<std::string>& options() const { return options_; }

 private:
  std::string log_;
  std::vector<std::string> options_;
};

// A CUDA driver call failed; carries the call's name and its CUresult.
class DSA_INDEXER_API DriverError : public Error {
 public:
  DriverError(const std::string& what, std::string call, int result);
  ~DriverError() override;
  const std::string& call() const { return call_; }
  int result() const { return result_; }

 private:
  std::string call_;
  int result_;
};

// The on-disk kernel cache could not be used as asked (only raised by the cache tools: the
// forward path degrades to memory-only caching instead).
class DSA_INDEXER_API CacheError : public Error {
 public:
  using Error::Error;
  ~CacheError() override;
};

}  // namespace dsa_indexer
