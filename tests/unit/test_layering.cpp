// The structure of src/ as tests (docs/DESIGN.md, "Layers"): a file includes only its own layer
// and the layers below it, the headers form no cycle, nothing outside src/families/ names a
// family, and no list of family names is kept outside the registry.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Bottom to top. ops and families are one step apart so that a family may use what its
// operation shares (ops/scores_args.hpp) while an operation reaches families only through the
// registry that dispatch/ declares.
const std::vector<std::string> kLayers = {"core", "cuda", "jit", "dispatch", "ops", "families", "api"};

int rank_of(const std::string& layer) {
  for (std::size_t i = 0; i < kLayers.size(); ++i)
    if (kLayers[i] == layer) return static_cast<int>(i);
  return -1;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

// "layer/file" of every source under src/, with its text.
std::map<std::string, std::string> sources() {
  std::map<std::string, std::string> all;
  for (const std::string& layer : list_dir(DSA_TEST_SOURCE_DIR))
    for (const std::string& f : list_dir(std::string(DSA_TEST_SOURCE_DIR) + "/" + layer))
      all[layer + "/" + f] = read(std::string(DSA_TEST_SOURCE_DIR) + "/" + layer + "/" + f);
  return all;
}

std::vector<std::string> quoted_includes(const std::string& text) {
  static const std::regex inc(R"re(^\s*#\s*include\s+"([^"]+)")re");
  std::vector<std::string> out;
  std::istringstream lines(text);
  std::smatch m;
  for (std::string line; std::getline(lines, line);)
    if (std::regex_search(line, m, inc)) out.push_back(m[1]);
  return out;
}

}  // namespace

TEST_CASE("every source lies in a layer, and includes only its own layer and those below", "[codegen][layering]") {
  const auto all = sources();
  REQUIRE(all.size() > 40);
  for (const auto& [path, text] : all) {
    INFO(path);
    const std::string layer = path.substr(0, path.find('/'));
    REQUIRE(rank_of(layer) >= 0);  // no file directly under src/, no unknown folder
    for (const std::string& inc : quoted_includes(text)) {
      INFO("#include \"" << inc << "\"");
      const auto slash = inc.find('/');
      if (slash == std::string::npos) {
        // Outside src/ only: device headers the host shares (dsa_args.cuh), generated files.
        CHECK((inc.size() > 4 && inc.compare(inc.size() - 4, 4, ".cuh") == 0));
        continue;
      }
      const std::string to = inc.substr(0, slash);
      if (to == "dsa_indexer") continue;  // the public headers sit below everything
      REQUIRE(rank_of(to) >= 0);
      CHECK(rank_of(to) <= rank_of(layer));
      CHECK(all.count(inc) == 1);
    }
  }
}

TEST_CASE("the headers of src/ include each other without a cycle", "[codegen][layering]") {
  const auto all = sources();
  std::map<std::string, int> state;  // 0 unseen, 1 on the path, 2 done
  std::vector<std::string> path;
  std::function<void(const std::string&)> visit = [&](const std::string& f) {
    state[f] = 1;
    path.push_back(f);
    for (const std::string& inc : quoted_includes(all.at(f))) {
      if (!all.count(inc)) continue;
      if (state[inc] == 1) {
        std::string cycle;
        for (const auto& p : path) cycle += p + " -> ";
        FAIL("include cycle: " << cycle << inc);
      }
      if (state[inc] == 0) visit(inc);
    }
    path.pop_back();
    state[f] = 2;
  };
  for (const auto& kv : all)
    if (state[kv.first] == 0) visit(kv.first);
}

TEST_CASE("nothing outside src/families/ names a family", "[codegen][layering]") {
  // The family stems are the template stems of src/families/ (whatever families exist), and the
  // KernelFamily values are the public enum's.
  std::set<std::string> stems;
  for (const std::string& f : list_dir(std::string(DSA_TEST_SOURCE_DIR) + "/families"))
    if (f.rfind("sm90_", 0) == 0 && f.size() > 4 && f.compare(f.size() - 4, 4, ".hpp") == 0) stems.insert(f.substr(0, f.size() - 4));
  REQUIRE(stems.size() >= 3);
  std::set<std::string> ids;
  static const std::regex id(R"re(KernelFamily::(\w+))re");
  const std::string pub = read(std::string(DSA_TEST_SOURCE_DIR) + "/../include/dsa_indexer/indexer.hpp");
  const auto enum_at = pub.find("enum class KernelFamily");
  REQUIRE(enum_at != std::string::npos);
  static const std::regex member(R"re(\b(\w+) = \d+)re");
  const std::string body = pub.substr(enum_at, pub.find("};", enum_at) - enum_at);
  for (std::sregex_iterator it(body.begin(), body.end(), member), end; it != end; ++it)
    if ((*it)[1] != "automatic") ids.insert("KernelFamily::" + (*it)[1].str());
  REQUIRE(ids.size() >= 3);
  for (const auto& [path, text] : sources()) {
    if (path.rfind("families/", 0) == 0) continue;
    INFO(path);
    for (const auto& s : stems) CHECK(text.find(s) == std::string::npos);
    for (const auto& s : ids) CHECK(text.find(s) == std::string::npos);
  }
}

TEST_CASE("the family names are listed only by the registry", "[codegen][layering]") {
  // Python, the torch operator and the C API ask the library (kernel_family_info); none of them
  // keeps its own table of names.
  const std::string root = std::string(DSA_TEST_SOURCE_DIR) + "/..";
  for (const char* f : {"/python/dsa_indexer/_lib.py", "/python/dsa_indexer/_forward.py", "/python/dsa_indexer/_torch_op.py",
                        "/python/dsa_indexer/_topk.py", "/python/dsa_indexer/cudnn_compat.py", "/python/csrc/torch_op.cpp",
                        "/python/csrc/torch_topk_op.cpp", "/python/csrc/torch_op_support.hpp", "/src/api/c_api.cpp",
                        "/src/api/indexer.cpp"}) {
    const std::string text = read(root + f);
    INFO(f);
    REQUIRE_FALSE(text.empty());
    for (const char* name : {"\"generic\"", "\"lean\"", "\"reference\"", "\"topk_unfused\"", "'generic'", "'lean'", "'reference'",
                             "'topk_unfused'"})
      CHECK(text.find(name) == std::string::npos);
  }
}
