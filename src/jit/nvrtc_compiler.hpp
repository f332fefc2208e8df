#pragma once
// NVRTC: generated source -> sm_90a cubin. The generated source may include only embedded
// templates (no include path is ever passed), so a deployment needs just libnvrtc and the driver.
#include <string>
#include <vector>

#include "jit/templates.hpp"

namespace dsa_indexer::detail {

struct CompileRequest {
  std::string source_name;                   // shows in diagnostics
  std::string source;
  std::vector<std::string> name_expressions; // kernels to resolve to lowered names
  std::vector<std::string> options;          // see compile_options()
  const TemplateSet* templates = nullptr;    // default: the embedded set
};

struct CompileOutput {
  std::string cubin;
  std::vector<std::string> lowered_names;    // same order as the name expressions
  std::string log;                           // NVRTC + ptxas log (registers, spills)
};

// The options every variant is compiled with, in a fixed order (they are part of the disk key).
std::vector<std::string> compile_options(const std::string& arch);

// Throws CompileError with the log and the options on any failure, including an empty cubin.
CompileOutput nvrtc_compile(const CompileRequest& req);

// False in a child forked while this process compiled with NVRTC on another thread: NVRTC's
// locks are held forever there, so nvrtc_compile refuses (CompileError) instead of hanging.
bool nvrtc_usable_in_process();

// "major.minor" of the NVRTC library in use (part of the disk key).
std::string nvrtc_version();

}  // namespace dsa_indexer::detail
