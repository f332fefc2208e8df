#include "jit/nvrtc_compiler.hpp"

#include <nvrtc.h>
#include <pthread.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "core/util.hpp"

namespace dsa_indexer::detail {

std::vector<std::string> compile_options(const std::string& arch) {
  // --ptxas-options=-v puts the register and spill report in the log (kept by
  // DSA_INDEXER_DUMP_DIR). One flag per --ptxas-options: NVRTC rejects comma lists.
  // -frandom-seed: without it NVRTC 13.0 names internal-linkage symbols with a per-compile
  // random suffix, so two compiles of one key gave different cubins; with it the cubin is a
  // function of the key, and racing processes publish byte-identical entries.
  return {"-arch=" + arch, "-std=c++17", "--ptxas-options=-v", "-DDSA_JIT=1", "-frandom-seed=0"};
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return fmt::format("{}.{}", major, minor);
}

namespace {

struct ProgramDeleter {
  void operator()(nvrtcProgram* p) const {
    if (p && *p) nvrtcDestroyProgram(p);
    delete p;
  }
};

std::string program_log(nvrtcProgram prog) {
  size_t n = 0;
  if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n == 0) return {};
  std::string log(n, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

[[noreturn]] void compile_fail(const CompileRequest& req, const std::string& step, nvrtcResult r, const std::string& log) {
  throw CompileError(fmt::format("NVRTC {} failed for {}: {}{}{}", step, req.source_name, nvrtcGetErrorString(r),
                                 log.empty() ? "" : "\n", log),
                     log, req.options);
}

// NVRTC holds internal locks while it compiles; a fork() taken then leaves them held forever in
// the child, whose first compile would wait on them for good (seen: a child forked while the
// async worker compiled hung in nvrtcCompileProgram). So the child knows it, and refuses.
std::atomic<int> g_in_flight{0};
std::atomic<bool> g_forked_mid_compile{false};

struct InFlight {
  InFlight() {
    static std::once_flag once;
    std::call_once(once, [] {
      ::pthread_atfork(nullptr, nullptr, [] {
        if (g_in_flight.load() > 0) g_forked_mid_compile = true;
        g_in_flight = 0;
      });
    });
    g_in_flight.fetch_add(1);
  }
  ~InFlight() { g_in_flight.fetch_sub(1); }
};

}  // namespace

bool nvrtc_usable_in_process() { return !g_forked_mid_compile.load(); }

CompileOutput nvrtc_compile(const CompileRequest& req) {
  if (!nvrtc_usable_in_process())
    throw CompileError(fmt::format("cannot compile {} with NVRTC in this process: it was forked while another thread was "
                                   "compiling, which leaves NVRTC's locks held forever here (set DSA_INDEXER_COMPILE_HELPER "
                                   "or DSA_INDEXER_COMPILE_ISOLATION=process to compile in the helper process)",
                                   req.source_name),
                       "", req.options);
  InFlight in_flight;
  const TemplateSet& ts = req.templates ? *req.templates : TemplateSet::embedded();
  std::vector<std::string> header_names = ts.include_closure(req.source);
  std::vector<const char*> hdr_src, hdr_name;
  for (const auto& n : header_names) {
    hdr_name.push_back(n.c_str());
    hdr_src.push_back(ts.find(n)->c_str());
  }
  std::unique_ptr<nvrtcProgram, ProgramDeleter> prog(new nvrtcProgram(nullptr));
  nvrtcResult r = nvrtcCreateProgram(prog.get(), req.source.c_str(), req.source_name.c_str(),
                                     static_cast<int>(hdr_src.size()), hdr_src.data(), hdr_name.data());
  if (r != NVRTC_SUCCESS) compile_fail(req, "nvrtcCreateProgram", r, "");
  for (const auto& e : req.name_expressions) {
    r = nvrtcAddNameExpression(*prog, e.c_str());
    if (r != NVRTC_SUCCESS) compile_fail(req, "nvrtcAddNameExpression(" + e + ")", r, "");
  }
  std::vector<const char*> opts;
  for (const auto& o : req.options) opts.push_back(o.c_str());
  r = nvrtcCompileProgram(*prog, static_cast<int>(opts.size()), opts.data());
  CompileOutput out;
  out.log = program_log(*prog);
  if (r != NVRTC_SUCCESS) compile_fail(req, "nvrtcCompileProgram", r, out.log);
  size_t n = 0;
  r = nvrtcGetCUBINSize(*prog, &n);
  if (r != NVRTC_SUCCESS) compile_fail(req, "nvrtcGetCUBINSize", r, out.log);
  if (n == 0)
    throw CompileError(fmt::format("NVRTC produced an empty cubin for {} (is -arch a real sm_ target?)", req.source_name),
                       out.log, req.options);
  out.cubin.resize(n);
  r = nvrtcGetCUBIN(*prog, out.cubin.data());
  if (r != NVRTC_SUCCESS) compile_fail(req, "nvrtcGetCUBIN", r, out.log);
  for (const auto& e : req.name_expressions) {
    const char* lowered = nullptr;
    r = nvrtcGetLoweredName(*prog, e.c_str(), &lowered);
    if (r != NVRTC_SUCCESS || !lowered) compile_fail(req, "nvrtcGetLoweredName(" + e + ")", r, out.log);
    out.lowered_names.emplace_back(lowered);
  }
  return out;
}

}  // namespace dsa_indexer::detail
