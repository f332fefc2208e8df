#pragma once
// Helpers for unit tests: temp directories and a Problem builder.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace dsa_test {

// A fresh directory under $TMPDIR (or /tmp), removed at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/dsa_test.XXXXXX";
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    if (!path_.empty()) {
      std::string cmd = "chmod -R u+rwx '" + path_ + "' 2>/dev/null; rm -rf '" + path_ + "'";
      (void)std::system(cmd.c_str());
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A warning sink for objects that take one (the background worker, the manifest recorder):
// keeps every message, thread-safely.
class MessageLog {
 public:
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& m) {
      std::lock_guard<std::mutex> lk(mu_);
      seen_.push_back(m);
    };
  }
  std::vector<std::string> messages() const {
    std::lock_guard<std::mutex> lk(mu_);
    return seen_;
  }
  std::size_t count() const { return messages().size(); }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> seen_;
};

// Whole-file read and overwrite, for tests that damage cache entries on purpose.
inline std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
inline void spit(const std::string& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

}  // namespace dsa_test
