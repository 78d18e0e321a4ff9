// A flashjit_attention_args_v2 as the C ABI fuzz targets build it from input bytes, and what
// validation promises once it accepts one: shared by fuzz_c_abi_v2 (the struct itself) and
// fuzz_c_abi_backward (the struct as a backward call's forward).
//
// Input: the bytes of a flashjit_attention_args_v2 (zero-filled when short). The lowest bit of
// each of its struct pointers (lse, varlen, window, alibi, paged) says whether that struct
// follows, in that order (zero-filled when short); the other pointers (tensor data, sinks,
// kv_lens, kv_starts and those inside the structs) are device addresses, never read, taken as
// given.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "c_abi_fuzz_support.hpp"

namespace flashjit::fuzz {

inline constexpr std::int64_t kMaxSeqLen = std::int64_t(1) << 30;
inline constexpr std::int64_t kMaxGrid = 65535;     // batch and heads: CUDA's grid y/z limit
inline constexpr std::size_t kMaxStructSize = 4096;  // the library refuses a larger struct_size unread

// The struct a caller passes, with room for every struct_size the library will read, and the
// structs it points to.
struct ArgsV2Input {
  union {
    flashjit_attention_args_v2 args;
    unsigned char bytes[kMaxStructSize];
  };
  flashjit_lse lse;
  flashjit_varlen varlen;
  flashjit_window window;
  flashjit_alibi alibi;
  flashjit_paged_kv paged;
};

// Reads the struct at `*field` (a pointer of args) from the input when its lowest bit is set.
template <class T>
void read_optional(const T*& field, T& storage, const std::uint8_t* data, std::size_t size, std::size_t& used) {
  const bool present = reinterpret_cast<std::uintptr_t>(field) & 1;
  field = nullptr;
  if (!present) return;
  const std::size_t n = std::min(size - used, sizeof storage);
  std::memcpy(&storage, data + used, n);
  used += n;
  field = &storage;
}

// Fills `c` (zeroed first) from the input at `used`, which moves past what was read.
inline void read_args_v2(const std::uint8_t* data, std::size_t size, std::size_t& used, ArgsV2Input& c) {
  std::memset(&c, 0, sizeof c);
  flashjit_attention_args_v2& a = c.args;
  const std::size_t n = std::min(size - used, sizeof a);
  std::memcpy(&a, data + used, n);
  used += n;
  // The library reads struct_size bytes and takes the rest as zero (an older caller's struct,
  // e.g. one without kv_starts): so does this copy, or the checks would hold the library to
  // fields it never saw. The size and version stay as given.
  const std::size_t seen = std::max(offsetof(flashjit_attention_args_v2, q), std::min<std::size_t>(a.struct_size, sizeof a));
  std::memset(reinterpret_cast<unsigned char*>(&a) + seen, 0, sizeof a - seen);
  read_optional(a.lse, c.lse, data, size, used);
  read_optional(a.varlen, c.varlen, data, size, used);
  read_optional(a.window, c.window, data, size, used);
  read_optional(a.alibi, c.alibi, data, size, used);
  read_optional(a.paged, c.paged, data, size, used);
}

// What an accepted struct's kernel writes (o, lse) and the small arrays it reads besides q, k
// and v (prefix sums, block table, per-sequence and per-head arrays, slopes).
struct AcceptedV2 {
  Outputs out;
  std::vector<Range> reads;
};

// Validation accepted `c` (the call got as far as the compiler): re-derive what it promised.
inline AcceptedV2 check_accepted_v2(const ArgsV2Input& c) {
  const flashjit_attention_args_v2& a = c.args;
  check(a.struct_size >= offsetof(flashjit_attention_args_v2, paged) + sizeof a.paged && a.struct_size <= kMaxStructSize,
        "accepted a struct_size out of range");
  check(a.abi_version >= 2, "accepted an abi_version below 2");
  for (std::size_t i = sizeof a; i < a.struct_size; ++i) check(c.bytes[i] == 0, "accepted a set byte past the known struct");
  AcceptedV2 r{check_accepted_tensors({&a.q, &a.k, &a.v, &a.o}, a.lse), {}};

  const std::int64_t Hq = a.q.shape[2];
  check(a.q.shape[0] <= kMaxGrid && Hq <= kMaxGrid && a.k.shape[2] <= kMaxGrid, "accepted more than 65535 sequences or heads");
  check(a.q.shape[1] <= kMaxSeqLen, "accepted q.shape[1] past 2^30");
  std::int64_t sequences = a.q.shape[0];
  std::vector<Range>& reads = r.reads;  // arrays the kernel reads while it writes o and lse
  if (a.varlen) {
    const flashjit_varlen& vl = *a.varlen;
    check(vl.batch >= 0 && vl.batch <= kMaxGrid, "accepted varlen.batch out of [0, 65535]");
    check(vl.max_seqlen_q >= 0 && vl.max_seqlen_q <= a.q.shape[1], "accepted varlen.max_seqlen_q out of range");
    check(vl.max_seqlen_k >= 0 && vl.max_seqlen_k <= kMaxSeqLen, "accepted varlen.max_seqlen_k out of range");
    sequences = vl.batch;
    reads.push_back(array_range(vl.cu_seqlens_q, 1, vl.batch + 1, 0, 4, "varlen.cu_seqlens_q"));
    if (!a.paged) reads.push_back(array_range(vl.cu_seqlens_k, 1, vl.batch + 1, 0, 4, "varlen.cu_seqlens_k"));
  }
  if (a.paged) {
    const flashjit_paged_kv& pk = *a.paged;
    const std::int64_t page_size = a.k.shape[1];
    check(a.kv_lens != nullptr, "accepted paged without kv_lens");
    check(page_size >= 1 && page_size <= 4096, "accepted a page size out of [1, 4096]");
    check(a.k.shape[0] >= 1 && a.k.shape[0] <= 0x7fffffff, "accepted a page count out of int32");
    check(pk.max_pages >= 1 && u128(pk.max_pages) * u128(page_size) <= u128(kMaxSeqLen),
          "accepted paged.max_pages * page size out of [1, 2^30]");
    check(pk.table_stride >= pk.max_pages, "accepted paged.table_stride below max_pages");
    reads.push_back(array_range(pk.block_table, sequences, pk.max_pages, pk.table_stride, 4, "paged.block_table"));
  } else {
    check(a.k.shape[1] <= kMaxSeqLen, "accepted k.shape[1] past 2^30");
  }
  if (a.kv_lens) reads.push_back(array_range(a.kv_lens, 1, sequences, 0, 4, "kv_lens"));
  if (a.kv_starts) reads.push_back(array_range(a.kv_starts, 1, sequences, 0, 4, "kv_starts"));
  if (a.sinks) reads.push_back(array_range(a.sinks, 1, Hq, 0, 4, "sinks"));
  if (a.alibi) {
    check(a.alibi->batch_stride >= 0, "accepted a negative alibi.batch_stride");
    reads.push_back(array_range(a.alibi->slopes, sequences, Hq, a.alibi->batch_stride, 4, "alibi.slopes"));
  }
  if (a.window) check(a.window->left >= -1 && a.window->right >= -1, "accepted a window side below -1");
  for (const Range& read : reads)
    check(!overlap(read, r.out.o) && !overlap(read, r.out.lse), "accepted an array the kernel reads overlapping o or lse");
  return r;
}

}  // namespace flashjit::fuzz
