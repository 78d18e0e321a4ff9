// Checked mode on a real GPU: bad device metadata (varlen prefix sums, kv_lens, block-table
// entries) is refused with INVALID_ARGUMENT naming the array, the index and the rule, and nothing
// is written; good metadata runs as without it; the default clamps silently; a capture refuses it.
#include <cstring>
#include <string>
#include <vector>

#include "gpu_fixture.hpp"

using namespace flashjit;
using flashjit::gpu_test::Fixture;
using tools::CaseSpec;

namespace {

CaseSpec paged_case() {
  CaseSpec s;
  s.dtype = DType::bf16;
  s.batch = 3;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.seqlen_q = 40;
  s.seqlen_k = 300;
  s.head_dim_qk = s.head_dim_v = 64;
  s.kv_lens = {300, 17, 150};
  s.page_size = 16;
  return s;
}

CaseSpec varlen_case() {
  CaseSpec s;
  s.dtype = DType::f16;
  s.heads_q = s.heads_kv = 4;
  s.head_dim_qk = s.head_dim_v = 64;
  s.varlen_q = {30, 0, 70};
  s.varlen_k = {50, 10, 90};
  return s;
}

// An int32 array on the device that outlives the call.
struct DeviceInts {
  tools::DeviceBuffer buf;
  explicit DeviceInts(const std::vector<std::int32_t>& v) {
    buf = tools::DeviceBuffer::allocate(Fixture::get().gpu.driver(), v.size() * sizeof(std::int32_t)).value();
    REQUIRE(buf.upload(v.data(), v.size() * sizeof(std::int32_t)).ok());
  }
  const std::int32_t* ptr() const { return static_cast<const std::int32_t*>(buf.ptr()); }
};

// Runs `args` in checked mode: refused, its message holding every `needles` entry, o untouched.
void expect_refused(const tools::AttentionCase& c, AttentionArgs args, const std::vector<std::string>& needles) {
  Fixture& f = Fixture::get();
  args.check_metadata = true;
  REQUIRE(c.poison().ok());
  auto st = f.engine->forward(args, nullptr);
  REQUIRE(!st.ok());
  const std::string msg = st.error().message();
  INFO(msg);
  CHECK(st.error().code() == Code::invalid_argument);
  for (const auto& n : needles) CHECK(msg.find(n) != std::string::npos);
  REQUIRE(f.gpu.driver().cuCtxSynchronize() == CUDA_SUCCESS);
  auto r = c.check().value();  // every output element still holds the poison: nothing written
  CHECK(r.rel_l2 == 0);
  const std::int64_t elems = c.args().o.shape[0] * c.args().o.shape[1] * c.args().o.shape[2] * c.args().o.shape[3];
  CHECK(r.unwritten == elems);
}

}  // namespace

TEST_CASE("checked mode: good metadata runs and matches the reference") {
  Fixture& f = Fixture::get();
  for (const CaseSpec& s : {paged_case(), varlen_case()}) {
    auto c = tools::AttentionCase::create(f.gpu, s);
    REQUIRE(c.ok());
    AttentionArgs args = c->args();
    args.check_metadata = true;
    REQUIRE(c->poison().ok());
    auto st = f.engine->forward(args, nullptr);
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
    REQUIRE(f.gpu.driver().cuCtxSynchronize() == CUDA_SUCCESS);
    auto r = c->check().value();
    CHECK(r.unwritten == 0);
    CHECK(r.rel_l2 <= gpu_test::tolerance(s));
  }
}

TEST_CASE("checked mode: bad kv_lens and block-table entries name the array, the index and the rule") {
  Fixture& f = Fixture::get();
  auto c = tools::AttentionCase::create(f.gpu, paged_case());
  REQUIRE(c.ok());
  const std::int64_t capacity = c->args().paged->max_pages * 16;
  DeviceInts past({300, std::int32_t(capacity + 1), 5});
  AttentionArgs a = c->args();
  a.kv_lens = past.ptr();
  expect_refused(*c, a, {"kv_lens[1]", std::to_string(capacity + 1), "capacity"});
  DeviceInts negative({300, -2, 5});
  a.kv_lens = negative.ptr();
  expect_refused(*c, a, {"kv_lens[1]", ">= 0"});
  // A table row whose used pages name a page past the pools.
  std::vector<std::int32_t> table(std::size_t(3 * c->args().paged->table_stride), 0);
  const std::int64_t pages = c->args().k.shape[0];
  table[std::size_t(2 * c->args().paged->table_stride + 4)] = std::int32_t(pages);  // kv_lens[2] = 150 uses 10 pages
  DeviceInts bad_table(table);
  a = c->args();
  a.paged->block_table = bad_table.ptr();
  expect_refused(*c, a, {"paged.block_table[2][4]", std::to_string(pages), "k.shape[0]"});
  // The same call unchecked runs: the kernels clamp the entry (memory-safe, silently wrong keys).
  a.check_metadata = false;
  auto st = f.engine->forward(a, nullptr);
  CHECK(st.ok());
  REQUIRE(f.gpu.driver().cuCtxSynchronize() == CUDA_SUCCESS);
  // Key starts: past the sequence's end, or negative, refused by name; table entries before a
  // sequence's first key are never read, so a bad one there is not refused.
  DeviceInts late({0, 18, 5}), below({0, -1, 0}), skip_bad_page({0, 0, 80});
  a = c->args();
  a.kv_starts = late.ptr();
  expect_refused(*c, a, {"kv_starts[1] = 18", "kv_lens[1] = 17"});
  a.kv_starts = below.ptr();
  expect_refused(*c, a, {"kv_starts[1] = -1", "[0, "});
  std::vector<std::int32_t> early(std::size_t(3 * c->args().paged->table_stride), 0);
  early[std::size_t(2 * c->args().paged->table_stride + 4)] = std::int32_t(pages);  // before key 80's page 5
  DeviceInts early_table(early);
  a.paged->block_table = early_table.ptr();
  a.kv_starts = skip_bad_page.ptr();
  a.check_metadata = true;
  st = f.engine->forward(a, nullptr);
  CHECK_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
  REQUIRE(f.gpu.driver().cuCtxSynchronize() == CUDA_SUCCESS);
}

TEST_CASE("checked mode: bad prefix sums name the array, the index and the rule") {
  auto c = tools::AttentionCase::create(Fixture::get().gpu, varlen_case());
  REQUIRE(c.ok());
  // q holds 100 rows (max_seqlen_q 70), k 150 (max_seqlen_k 90).
  REQUIRE(c->args().q.shape[1] == 100);
  REQUIRE(c->args().k.shape[1] == 150);
  struct Bad {
    std::vector<std::int32_t> cu_q, cu_k;
    std::vector<std::string> needles;
  };
  const Bad cases[] = {
      {{0, 30, 20, 100}, {0, 50, 60, 150}, {"varlen.cu_seqlens_q[2]", "never decrease"}},
      {{1, 30, 30, 100}, {0, 50, 60, 150}, {"varlen.cu_seqlens_q[0]", "must be 0"}},
      {{0, 30, 30, 100}, {0, 50, 60, 151}, {"varlen.cu_seqlens_k[3]", "k.shape[1] = 150"}},
      {{0, 30, 30, 100}, {0, 50, 50, 141}, {"sequence 2", "91", "varlen.max_seqlen_k = 90"}},
      {{0, 0, 0, 71}, {0, 50, 60, 150}, {"sequence 2", "71", "varlen.max_seqlen_q = 70"}},
  };
  for (const Bad& b : cases) {
    DeviceInts cu_q(b.cu_q), cu_k(b.cu_k);
    AttentionArgs a = c->args();
    a.varlen->cu_seqlens_q = cu_q.ptr();
    a.varlen->cu_seqlens_k = cu_k.ptr();
    expect_refused(*c, a, b.needles);
  }
}

TEST_CASE("checked mode refuses a graph capture, which it would break by synchronizing") {
  Fixture& f = Fixture::get();
  auto c = tools::AttentionCase::create(f.gpu, paged_case());
  REQUIRE(c.ok());
  REQUIRE(f.engine->forward(c->args(), nullptr).ok());  // warm: compiled and planned
  const DriverLibrary& drv = f.gpu.driver();
  CUstream stream = nullptr;
  REQUIRE(drv.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(drv.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  AttentionArgs a = c->args();
  a.check_metadata = true;
  auto st = f.engine->forward(a, stream);
  CUgraph graph = nullptr;
  REQUIRE(drv.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  if (graph) drv.cuGraphDestroy(graph);
  drv.cuStreamDestroy(stream);
  REQUIRE(!st.ok());
  CHECK(st.error().message().find("capture") != std::string::npos);
}
