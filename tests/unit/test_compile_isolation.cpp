#include <catch2/catch.hpp>

#include "codegen.hpp"
#include "compile_isolation.hpp"
#include "dsa_indexer/errors.hpp"
#include "env.hpp"
#include "planner.hpp"

using namespace dsa_indexer::detail;

TEST_CASE("isolation: request framing round-trips", "[isolation]") {
  KernelSpec s;
  s.family = Family::reference;
  GeneratedSource g = render(s);
  CompileRequest req{g.name, g.text, g.kernels, compile_options("sm_90a"), nullptr};
  std::string bytes = encode_request(req);
  CompileRequest back;
  TemplateSet* ts = nullptr;
  REQUIRE(decode_request(bytes, &back, &ts));
  CHECK(back.source == req.source);
  CHECK(back.name_expressions == req.name_expressions);
  CHECK(back.options == req.options);
  CHECK(ts->include_closure(back.source) == TemplateSet::embedded().include_closure(req.source));
  delete ts;
  CHECK_FALSE(decode_request(bytes.substr(0, bytes.size() / 2), &back, &ts));
}
