#include "jit/templates.hpp"

#include <set>
#include <sstream>

#include "dsa_indexer/errors.hpp"
#include "core/sha256.hpp"
#include "core/util.hpp"

namespace dsa_indexer::detail {

TemplateSet::TemplateSet(std::map<std::string, std::string> files) : files_(std::move(files)) {
  for (const auto& [name, text] : files_) hashes_[name] = sha256_hex(text);
}

const TemplateSet& TemplateSet::embedded() {
  // Never destroyed: a background compile may still render and hash while the process runs
  // its exit handlers, before the worker's joiner has run (background_compiler.hpp).
  static const TemplateSet* set = [] {
    std::map<std::string, std::string> m;
    for (int i = 0; i < kNumEmbeddedTemplates; ++i)
      m[kEmbeddedTemplates[i].name] = std::string(kEmbeddedTemplates[i].data, kEmbeddedTemplates[i].size);
    return new TemplateSet(std::move(m));
  }();
  return *set;
}

const std::string* TemplateSet::find(const std::string& name) const {
  auto it = files_.find(name);
  return it == files_.end() ? nullptr : &it->second;
}

std::string TemplateSet::hash(const std::string& name) const {
  auto it = hashes_.find(name);
  return it == hashes_.end() ? std::string() : it->second;
}

std::vector<std::string> quoted_includes(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::size_t p = line.find_first_not_of(" \t");
    if (p == std::string::npos || line[p] != '#') continue;
    p = line.find_first_not_of(" \t", p + 1);
    if (p == std::string::npos || line.compare(p, 7, "include") != 0) continue;
    std::size_t a = line.find('"', p + 7);
    if (a == std::string::npos) continue;
    std::size_t b = line.find('"', a + 1);
    if (b == std::string::npos) continue;
    out.push_back(line.substr(a + 1, b - a - 1));
  }
  return out;
}

std::vector<std::string> TemplateSet::include_closure(const std::string& source) const {
  std::set<std::string> seen;
  std::vector<std::string> todo = quoted_includes(source);
  while (!todo.empty()) {
    std::string name = todo.back();
    todo.pop_back();
    if (!seen.insert(name).second) continue;
    const std::string* text = find(name);
    if (!text)
      throw CompileError(fmt::format("codegen: #include \"{}\" names no embedded template", name), "", {});
    for (auto& n : quoted_includes(*text)) todo.push_back(n);
  }
  return {seen.begin(), seen.end()};
}

}  // namespace dsa_indexer::detail
