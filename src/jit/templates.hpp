#pragma once
// The device templates embedded into the library at build time (cmake/embed_templates.cmake).
// Includes inside templates are always written relative to templates/ ("ptx/wgmma.cuh"), which
// is also the name under which NVRTC is handed each header.
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace dsa_indexer::detail {

struct EmbeddedFile {
  const char* name;
  const char* data;
  std::size_t size;
};
extern const EmbeddedFile kEmbeddedTemplates[];
extern const int kNumEmbeddedTemplates;

class TemplateSet {
 public:
  explicit TemplateSet(std::map<std::string, std::string> files);
  static const TemplateSet& embedded();

  const std::string* find(const std::string& name) const;
  const std::map<std::string, std::string>& files() const { return files_; }

  // Names of the template files `source` includes, directly or not, sorted. Throws
  // CompileError for an include that names no template (the JIT has no other include path).
  std::vector<std::string> include_closure(const std::string& source) const;

  // sha256 of one file's content.
  std::string hash(const std::string& name) const;

 private:
  std::map<std::string, std::string> files_;
  std::map<std::string, std::string> hashes_;
};

// The quoted names of the #include "..." lines of a source text.
std::vector<std::string> quoted_includes(const std::string& text);

}  // namespace dsa_indexer::detail
