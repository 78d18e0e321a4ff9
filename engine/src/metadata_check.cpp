#include "metadata_check.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace flashjit {
namespace {

Error bad(std::string msg) { return Error(Code::invalid_argument, std::move(msg)); }

std::string at(const char* array, std::int64_t i) { return std::string(array) + "[" + std::to_string(i) + "]"; }

// `count` int32s from `rows` rows of a device array, `stride` elements apart, in stream order.
Result<std::vector<std::int32_t>> read_rows(const DriverLibrary& drv, const std::int32_t* data, std::int64_t rows,
                                            std::int64_t count, std::int64_t stride, CUstream stream) {
  std::vector<std::int32_t> out(std::size_t(rows * count));
  for (std::int64_t r = 0; r < rows && count > 0; ++r)
    FJ_CU(drv, cuMemcpyDtoHAsync(out.data() + r * count, CUdeviceptr(data + r * stride),
                                 std::size_t(count) * sizeof(std::int32_t), stream));
  FJ_CU(drv, cuStreamSynchronize(stream));
  return out;
}

// Prefix sums of `batch` sequences over a tensor of `total` rows, each length at most `max_len`.
Status check_prefix_sums(const char* name, const std::vector<std::int32_t>& cu, std::int64_t total, const char* total_name,
                         std::int64_t max_len, const char* max_name) {
  if (cu.empty()) return {};
  if (cu[0] != 0) return bad(at(name, 0) + " must be 0, got " + std::to_string(cu[0]));
  for (std::size_t i = 1; i < cu.size(); ++i) {
    const std::int64_t len = std::int64_t(cu[i]) - cu[i - 1];
    if (len < 0)
      return bad(at(name, std::int64_t(i)) + " = " + std::to_string(cu[i]) + " must be >= " + at(name, std::int64_t(i) - 1) +
                 " = " + std::to_string(cu[i - 1]) + " (prefix sums never decrease)");
    if (cu[i] > total)
      return bad(at(name, std::int64_t(i)) + " = " + std::to_string(cu[i]) + " reaches past " + total_name + " = " +
                 std::to_string(total));
    if (len > max_len)
      return bad("sequence " + std::to_string(i - 1) + " has " + std::to_string(len) + " rows by " + name + " but " +
                 max_name + " = " + std::to_string(max_len) + " must hold every sequence's length");
  }
  return {};
}

}  // namespace

Status check_device_metadata(const DriverLibrary& drv, const AttentionProblem& problem, CUstream stream) {
  const AttentionArgs& a = *problem.args;
  if (!a.varlen && !a.kv_lens && !a.kv_starts && !a.paged) return {};
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  FJ_CU(drv, cuStreamIsCapturing(stream, &capture));
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return bad("check_metadata synchronizes the stream to read the device metadata, which a CUDA graph capture forbids: "
               "turn it off (and FLASHJIT_CHECK) while capturing");
  const std::int64_t batch = problem.shape.batch;
  std::vector<std::int32_t> cu_k;  // empty: every sequence's keys hold `capacity` rows
  if (a.varlen) {
    const Varlen& vl = *a.varlen;
    auto cu_q = read_rows(drv, vl.cu_seqlens_q, 1, batch + 1, 0, stream);
    if (!cu_q.ok()) return std::move(cu_q).error();
    FJ_TRY(check_prefix_sums("varlen.cu_seqlens_q", *cu_q, a.q.shape[1], "q.shape[1]", vl.max_seqlen_q,
                             "varlen.max_seqlen_q"));
    if (!a.paged) {
      auto k = read_rows(drv, vl.cu_seqlens_k, 1, batch + 1, 0, stream);
      if (!k.ok()) return std::move(k).error();
      cu_k = std::move(k).value();
      FJ_TRY(check_prefix_sums("varlen.cu_seqlens_k", cu_k, a.k.shape[1], "k.shape[1]", vl.max_seqlen_k,
                               "varlen.max_seqlen_k"));
    }
  }
  if (!a.kv_lens && !a.kv_starts) return {};
  const std::int64_t page_size = a.paged ? a.k.shape[1] : 0;
  // Sequence b's keys end at kv_lens[b], else at its capacity: what the cache (or its varlen rows)
  // holds; `rule` says where that capacity comes from.
  std::vector<std::int32_t> ends(std::size_t(batch), 0);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t capacity = a.paged ? a.paged->max_pages * page_size
                                  : cu_k.empty() ? a.k.shape[1]
                                                 : std::int64_t(cu_k[std::size_t(b) + 1]) - cu_k[std::size_t(b)];
    ends[std::size_t(b)] = std::int32_t(capacity);
  }
  if (a.kv_lens) {
    auto lens = read_rows(drv, a.kv_lens, 1, batch, 0, stream);
    if (!lens.ok()) return std::move(lens).error();
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t len = (*lens)[std::size_t(b)], capacity = ends[std::size_t(b)];
      const std::string rule = a.paged        ? "paged.max_pages * k.shape[1] (the page size)"
                               : cu_k.empty() ? "k.shape[1]"
                                              : "sequence " + std::to_string(b) + "'s keys by varlen.cu_seqlens_k";
      if (len < 0) return bad(at("kv_lens", b) + " = " + std::to_string(len) + " must be >= 0");
      if (len > capacity)
        return bad(at("kv_lens", b) + " = " + std::to_string(len) + " exceeds the cache's capacity: " + rule + " = " +
                   std::to_string(capacity));
      ends[std::size_t(b)] = std::int32_t(len);
    }
  }
  std::vector<std::int32_t> starts(std::size_t(batch), 0);
  if (a.kv_starts) {
    auto read = read_rows(drv, a.kv_starts, 1, batch, 0, stream);
    if (!read.ok()) return std::move(read).error();
    starts = std::move(read).value();
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t first = starts[std::size_t(b)], end = ends[std::size_t(b)];
      if (first < 0 || first > end)
        return bad(at("kv_starts", b) + " = " + std::to_string(first) + " must be in [0, " +
                   (a.kv_lens ? at("kv_lens", b) : std::string("the sequence's capacity")) + " = " +
                   std::to_string(end) + "]: a sequence's keys start before they end");
    }
  }
  if (!a.paged) return {};
  // The table entries each sequence's used keys read must name pages of the pools.
  auto table = read_rows(drv, a.paged->block_table, batch, a.paged->max_pages, a.paged->table_stride, stream);
  if (!table.ok()) return std::move(table).error();
  const std::int64_t pages = a.k.shape[0];
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t end = ends[std::size_t(b)], used = (end + page_size - 1) / page_size;
    for (std::int64_t i = starts[std::size_t(b)] / page_size; i < used; ++i) {
      const std::int64_t page = (*table)[std::size_t(b * a.paged->max_pages + i)];
      if (page < 0 || page >= pages)
        return bad("paged.block_table[" + std::to_string(b) + "][" + std::to_string(i) + "] = " + std::to_string(page) +
                   " must name a page of the pools, in [0, k.shape[0] = " + std::to_string(pages) + "), for kv_lens[" +
                   std::to_string(b) + "] = " + std::to_string(end) + " keys");
    }
  }
  return {};
}

}  // namespace flashjit
