#pragma once
// DSA_INDEXER_COMPILE_ISOLATION=process: NVRTC runs in a helper process (dsa-indexer-nvrtc-helper)
// so that a compiler crash becomes a CompileError carrying the signal and the log instead of
// taking the host process down. The helper is found through DSA_INDEXER_COMPILE_HELPER, else next
// to the library (or executable) that contains this code, else in ../libexec/dsa_indexer/.
#include <string>

#include "nvrtc_compiler.hpp"

namespace dsa_indexer::detail {

CompileOutput compile_in_subprocess(const CompileRequest& req);

// The helper's side: reads one request from fd `in`, compiles, writes one reply to fd `out`.
// Returns the process exit code.
int compile_helper_main(int in, int out);

// Request/reply framing, exposed for tests.
std::string encode_request(const CompileRequest& req);
bool decode_request(const std::string& bytes, CompileRequest* req, TemplateSet** templates);

std::string compile_helper_path();

}  // namespace dsa_indexer::detail
