#pragma once
// SHA-256 (FIPS 180-4), used for content-addressed cache keys and entry integrity checks.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsa_indexer::detail {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Length-prefixed field, so that ("ab","c") and ("a","bc") hash differently.
  void field(std::string_view s);
  std::array<uint8_t, 32> digest();
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  std::size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace dsa_indexer::detail
