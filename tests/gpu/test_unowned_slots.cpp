// Cache slots no sequence owns never reach an output: serving frameworks allocate KV caches
// uninitialized, so slots past kv_lens, a last page's spare slots, pages no table row uses,
// table entries past a sequence's pages and rows past a varlen batch hold any bits, NaN and Inf
// included. Every case fills all of them with NaN or Inf and checks the output against the
// float64 reference (a NaN output counts as unwritten), on the family the engine picks and, for
// 16-bit prefill on Hopper, on fa2_sm80 too.
#include <cmath>
#include <limits>

#include "gpu_fixture.hpp"
#include "kernel_family.hpp"

using namespace flashjit;
using flashjit::gpu_test::Fixture;
using tools::CaseSpec;

namespace {

const DType kDtypes[] = {DType::f16, DType::bf16, DType::f32};

CaseSpec base(DType dt, std::int64_t sq, std::int64_t sk, Mask m, float fill, std::uint64_t seed) {
  CaseSpec s;
  s.dtype = dt;
  s.batch = 3;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.seqlen_q = sq;
  s.seqlen_k = sk;
  s.head_dim_qk = s.head_dim_v = 128;
  s.mask = m;
  s.seed = seed;
  s.lse = true;
  s.unowned_fill = fill;
  return s;
}

// kv_lens that end inside a key tile and inside a page (none a multiple of 8).
std::vector<std::int64_t> ragged_lens(std::int64_t sk) { return {sk, 1, sk / 2 + 3}; }

std::vector<CaseSpec> cases_for(float fill) {
  std::vector<CaseSpec> out;
  std::uint64_t seed = 7000 + (std::isnan(fill) ? 0 : 500);
  for (DType dt : kDtypes)
    for (Mask m : {Mask::none, Mask::causal}) {
      CaseSpec contiguous = base(dt, 100, 700, m, fill, ++seed);  // prefill against a cache
      contiguous.kv_lens = ragged_lens(700);
      out.push_back(contiguous);
      for (std::int64_t page : {16, 64, 13}) {  // 13: not a multiple of 8, fa2_sm80 on Hopper too
        CaseSpec paged = base(dt, 77, 600, m, fill, ++seed);
        paged.kv_lens = ragged_lens(600);
        paged.page_size = page;
        out.push_back(paged);
      }
      CaseSpec varlen = base(dt, 0, 0, m, fill, ++seed);  // rows past the batch in every tensor
      varlen.varlen_q = {200, 1, 131};
      varlen.varlen_k = {200, 300, 131};
      out.push_back(varlen);
      CaseSpec varlen_lens = varlen;  // ... and slots past each sequence's used keys
      varlen_lens.seed = ++seed;
      varlen_lens.kv_lens = {150, 299, 1};
      out.push_back(varlen_lens);
      CaseSpec varlen_paged = varlen_lens;
      varlen_paged.seed = ++seed;
      varlen_paged.page_size = 16;
      out.push_back(varlen_paged);
      for (std::int64_t queries : {1, 4}) {  // decode
        CaseSpec decode = base(dt, queries, 900, m, fill, ++seed);
        decode.heads_q = 8;
        decode.kv_lens = ragged_lens(900);
        out.push_back(decode);
        CaseSpec decode_paged = decode;
        decode_paged.seed = ++seed;
        decode_paged.page_size = 16;
        out.push_back(decode_paged);
      }
    }
  return out;
}

// The same cases on fa2_sm80's default tiling where another family served them.
void check_on_fa2(const std::vector<CaseSpec>& specs) {
  Fixture& f = Fixture::get();
  const Arch arch = Arch::parse(f.gpu.info().arch).value();
  int ran = 0;
  for (const CaseSpec& s : specs) {
    auto c = tools::AttentionCase::create(f.gpu, s);
    REQUIRE(c.ok());
    const KernelVariant planned = f.engine->plan(c->args(), arch.name()).value().variant;
    if (planned.family == "fa2_sm80") continue;
    const Tiling t = find_family("fa2_sm80")->default_tiling(arch, planned.semantics, nullptr);
    INFO(s.describe() << " on fa2_sm80 " << t.name());
    gpu_test::check_on_tiling(*c, t);
    ++ran;
  }
  std::printf("  %d cases also run on fa2_sm80\n", ran);
}

}  // namespace

TEST_CASE("unowned K/V slots holding NaN never reach the output") {
  const auto specs = cases_for(std::numeric_limits<float>::quiet_NaN());
  gpu_test::run_and_check_all(specs);
  check_on_fa2(specs);
}

TEST_CASE("unowned K/V slots holding Inf never reach the output") {
  const auto specs = cases_for(std::numeric_limits<float>::infinity());
  gpu_test::run_and_check_all(specs);
  check_on_fa2(specs);
}
