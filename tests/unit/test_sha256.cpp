#include <catch2/catch.hpp>

#include "core/sha256.hpp"

using dsa_indexer::detail::Sha256;
using dsa_indexer::detail::sha256_hex;

TEST_CASE("sha256 matches the FIPS 180-4 test vectors", "[sha256]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  CHECK(sha256_hex(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256 streaming equals one-shot and fields are length-prefixed", "[sha256]") {
  Sha256 a;
  a.update("hello ");
  a.update("world");
  CHECK(a.hex_digest() == sha256_hex("hello world"));
  Sha256 f1, f2;
  f1.field("ab");
  f1.field("c");
  f2.field("a");
  f2.field("bc");
  CHECK(f1.hex_digest() != f2.hex_digest());
}
