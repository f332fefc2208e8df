#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "dsa_indexer/errors.hpp"
#include "core/env.hpp"

using namespace dsa_indexer::detail;

namespace {
EnvConfig parse(std::map<std::string, std::string> m) {
  return parse_env([&m](const char* n) -> const char* {
    auto it = m.find(n);
    return it == m.end() ? nullptr : it->second.c_str();
  });
}
}  // namespace

TEST_CASE("env defaults", "[env]") {
  EnvConfig c = parse({{"HOME", "/home/u"}});
  CHECK(c.cache_dir == "/home/u/.cache/dsa_indexer");
  CHECK(c.disk_cache);
  CHECK(c.prebuilt_dir.empty());
  CHECK(c.dump_dir.empty());
  CHECK(c.cache_capacity == 256);
  CHECK_FALSE(c.disable_lean);
  CHECK(c.isolation == CompileIsolation::in_process);
  CHECK(c.log_level == LogLevel::warn);
  CHECK(c.lean_compile == LeanCompile::sync);
  CHECK(c.record_manifest.empty());
}

TEST_CASE("env cache directory precedence", "[env]") {
  CHECK(parse({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}}).cache_dir == "/x/dsa_indexer");
  CHECK(parse({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}, {"DSA_INDEXER_CACHE_DIR", "/c"}}).cache_dir == "/c");
  CHECK(parse({}).cache_dir.empty());
}

TEST_CASE("env values", "[env]") {
  EnvConfig c = parse({{"DSA_INDEXER_CACHE_CAPACITY", "3"}, {"DSA_INDEXER_DISK_CACHE", "0"},
                       {"DSA_INDEXER_PREBUILT_DIR", "/p"}, {"DSA_INDEXER_DUMP_DIR", "/d"},
                       {"DSA_INDEXER_COMPILE_ISOLATION", "process"}, {"DSA_INDEXER_LOG", "quiet"},
                       {"DSA_INDEXER_COMPILE_HELPER", "/bin/h"}});
  CHECK(c.cache_capacity == 3);
  CHECK_FALSE(c.disk_cache);
  CHECK(c.prebuilt_dir == "/p");
  CHECK(c.dump_dir == "/d");
  CHECK(c.isolation == CompileIsolation::process);
  CHECK(c.log_level == LogLevel::quiet);
  CHECK(c.compile_helper == "/bin/h");
}

TEST_CASE("env compile mode and shape recording", "[env]") {
  CHECK(parse({{"DSA_INDEXER_LEAN_COMPILE", "sync"}}).lean_compile == LeanCompile::sync);
  CHECK(parse({{"DSA_INDEXER_LEAN_COMPILE", "async"}}).lean_compile == LeanCompile::async);
  CHECK_THROWS_WITH(parse({{"DSA_INDEXER_LEAN_COMPILE", ""}}), Catch::Contains("a non-empty value"));
  CHECK(parse({{"DSA_INDEXER_RECORD_MANIFEST", "/data/shapes.txt"}}).record_manifest == "/data/shapes.txt");
  CHECK_THROWS_WITH(parse({{"DSA_INDEXER_RECORD_MANIFEST", ""}}), Catch::Contains("DSA_INDEXER_RECORD_MANIFEST"));
  for (const char* bad : {"Async", "background", "1", " async"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse({{"DSA_INDEXER_LEAN_COMPILE", bad}}),
                      Catch::Contains("DSA_INDEXER_LEAN_COMPILE") && Catch::Contains("'sync' or 'async'") &&
                          Catch::Contains(std::string("'") + bad + "'"));
  }
}

TEST_CASE("env escape hatch honours both names", "[env]") {
  CHECK(parse({{"DSA_INDEXER_DISABLE_LEAN", "1"}}).disable_lean);
  CHECK(parse({{"CUDNNFE_DSA_INDEXER_FWD_DISABLE_LEAN", "yes"}}).disable_lean);
  CHECK_THROWS_WITH(parse({{"DSA_INDEXER_DISABLE_LEAN", ""}}), Catch::Contains("DSA_INDEXER_DISABLE_LEAN"));
  // A boolean as DSA_INDEXER_DISK_CACHE is: "0" keeps lean on (it used to disable it).
  CHECK_FALSE(parse({{"DSA_INDEXER_DISABLE_LEAN", "0"}}).disable_lean);
  CHECK_FALSE(parse({{"CUDNNFE_DSA_INDEXER_FWD_DISABLE_LEAN", "off"}}).disable_lean);
  CHECK(parse({{"DSA_INDEXER_DISABLE_LEAN", "0"}, {"CUDNNFE_DSA_INDEXER_FWD_DISABLE_LEAN", "1"}}).disable_lean);
  CHECK_THROWS_WITH(parse({{"DSA_INDEXER_DISABLE_LEAN", "please"}}), Catch::Contains("1/0/true/false"));
}

TEST_CASE("env rejects malformed values naming the variable", "[env]") {
  CHECK_THROWS_WITH(parse({{"DSA_INDEXER_CACHE_CAPACITY", "lots"}}), Catch::Contains("DSA_INDEXER_CACHE_CAPACITY") && Catch::Contains("'lots'"));
  CHECK_THROWS_AS(parse({{"DSA_INDEXER_CACHE_CAPACITY", "0"}}), dsa_indexer::InvalidArgument);
  CHECK_THROWS_AS(parse({{"DSA_INDEXER_CACHE_CAPACITY", "-5"}}), dsa_indexer::InvalidArgument);
  CHECK_THROWS_WITH(parse({{"DSA_INDEXER_DISK_CACHE", "maybe"}}), Catch::Contains("DSA_INDEXER_DISK_CACHE"));
  CHECK_THROWS_WITH(parse({{"DSA_INDEXER_COMPILE_ISOLATION", "thread"}}), Catch::Contains("DSA_INDEXER_COMPILE_ISOLATION"));
  CHECK_THROWS_WITH(parse({{"DSA_INDEXER_LOG", "loud"}}), Catch::Contains("DSA_INDEXER_LOG"));
}

TEST_CASE("env: every variable of ours set to the empty string is an error (issue 24, class 4)", "[env]") {
  for (const char* name : {"DSA_INDEXER_CACHE_DIR", "DSA_INDEXER_DISK_CACHE", "DSA_INDEXER_PREBUILT_DIR", "DSA_INDEXER_DUMP_DIR",
                           "DSA_INDEXER_CACHE_CAPACITY", "DSA_INDEXER_DISABLE_LEAN", "CUDNNFE_DSA_INDEXER_FWD_DISABLE_LEAN",
                           "DSA_INDEXER_COMPILE_ISOLATION", "DSA_INDEXER_COMPILE_HELPER", "DSA_INDEXER_COMPILE_TIMEOUT",
                           "DSA_INDEXER_LEAN_COMPILE", "DSA_INDEXER_RECORD_MANIFEST", "DSA_INDEXER_LOG"}) {
    INFO(name);
    CHECK_THROWS_WITH(parse({{"HOME", "/h"}, {name, ""}}), Catch::Contains(name) && Catch::Contains("a non-empty value"));
  }
  // Other programs' variables keep their own conventions: empty is unset.
  CHECK(parse({{"HOME", "/h"}, {"XDG_CACHE_HOME", ""}, {"TMPDIR", ""}}).cache_dir == "/h/.cache/dsa_indexer");
}

TEST_CASE("env: numbers are digits only, HOME and XDG_CACHE_HOME absolute", "[env]") {
  for (const char* v : {" 5", "+5", "5 ", "-5", "0x5", "5e0", "18446744073709551617"}) {
    INFO(v);
    CHECK_THROWS_WITH(parse({{"DSA_INDEXER_CACHE_CAPACITY", v}}), Catch::Contains("digits only"));
    CHECK_THROWS_WITH(parse({{"DSA_INDEXER_COMPILE_TIMEOUT", v}}), Catch::Contains("digits only"));
  }
  CHECK(parse({{"DSA_INDEXER_CACHE_CAPACITY", "007"}}).cache_capacity == 7);
  CHECK_THROWS_WITH(parse({{"HOME", "relative"}}), Catch::Contains("HOME") && Catch::Contains("absolute"));
  CHECK(parse({{"HOME", "relative"}, {"DSA_INDEXER_CACHE_DIR", "/c"}}).cache_dir == "/c");
  // A relative XDG_CACHE_HOME is ignored (the XDG spec), HOME is used.
  CHECK(parse({{"HOME", "/h"}, {"XDG_CACHE_HOME", "x"}}).cache_dir == "/h/.cache/dsa_indexer");
}
