#include "tma_map.hpp"

#include <cstring>

#include "cudalib/driver_library.hpp"

namespace flashjit {
namespace {

// Bytes of a box row each swizzle pattern covers at most.
std::uint64_t swizzle_span(TmaSwizzle s) {
  switch (s) {
    case TmaSwizzle::b32: return 32;
    case TmaSwizzle::b64: return 64;
    case TmaSwizzle::b128: return 128;
    case TmaSwizzle::none: break;
  }
  return 0;
}

CUtensorMapSwizzle driver_swizzle(TmaSwizzle s) {
  switch (s) {
    case TmaSwizzle::b32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case TmaSwizzle::b64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case TmaSwizzle::b128: return CU_TENSOR_MAP_SWIZZLE_128B;
    case TmaSwizzle::none: break;
  }
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

}  // namespace

TmaView tma_view(const char* name, const void* data, const std::int64_t* shape, const std::int64_t* stride, int rank,
                 int elem_bytes) {
  TmaView v;
  v.name = name;
  v.data = data;
  v.elem_bytes = elem_bytes;
  if (rank < 1 || rank > kTmaMaxRank || stride[rank - 1] != 1) return v;  // rank 0: refused, with the reason
  v.rank = rank;
  for (int i = 0; i < rank; ++i) {
    const int from = rank - 1 - i;  // innermost first
    v.dims[i] = shape[from] < 0 ? 0 : std::uint64_t(shape[from]);
    if (i > 0) v.strides[i - 1] = stride[from] < 0 ? 0 : std::uint64_t(stride[from]) * std::uint64_t(elem_bytes);
    v.box[i] = 1;
  }
  return v;
}

std::string tma_refusal(const TmaView& v) {
  const std::string who = std::string("TMA cannot address ") + v.name + ": ";
  if (v.rank < 1 || v.rank > kTmaMaxRank)
    return who + "its innermost dim must be contiguous (stride 1) in a view of 1 to 5 dims";
  if (v.elem_bytes != 1 && v.elem_bytes != 2 && v.elem_bytes != 4 && v.elem_bytes != 8)
    return who + "elements must be 1, 2, 4 or 8 bytes";
  if (reinterpret_cast<std::uintptr_t>(v.data) % kTmaAlign != 0) return who + "its address must be 16-byte aligned";
  for (int i = 0; i < v.rank; ++i) {
    const std::string dim = "dim " + std::to_string(i) + " (0 is innermost)";
    if (v.dims[i] == 0 || v.dims[i] > kTmaMaxDim) return who + dim + " must hold 1 to 2^32 elements";
    if (v.box[i] == 0 || v.box[i] > kTmaMaxBox) return who + "the box along " + dim + " must be 1 to 256 elements";
    if (i > 0 && (v.strides[i - 1] % kTmaAlign != 0 || v.strides[i - 1] >= kTmaMaxStride))
      return who + "the stride of " + dim + " (" + std::to_string(v.strides[i - 1]) +
             " bytes) must be a multiple of 16 bytes below 2^40";
  }
  const std::uint64_t row = std::uint64_t(v.box[0]) * std::uint64_t(v.elem_bytes);
  if (row % kTmaAlign != 0) return who + "a box row (" + std::to_string(row) + " bytes) must be a multiple of 16 bytes";
  if (v.swizzle != TmaSwizzle::none && row > swizzle_span(v.swizzle))
    return who + "a box row (" + std::to_string(row) + " bytes) must fit the swizzle span (" +
           std::to_string(swizzle_span(v.swizzle)) + " bytes)";
  return "";
}

Result<CUtensorMap> encode_tma_map(const TmaView& v) {
  if (std::string why = tma_refusal(v); !why.empty()) return Error(Code::invalid_argument, why);
  auto drv_r = DriverLibrary::get();
  if (!drv_r.ok()) return std::move(drv_r).error();
  const DriverLibrary& drv = *drv_r.value();
  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_UINT16;
  switch (v.elem_bytes) {
    case 1: type = CU_TENSOR_MAP_DATA_TYPE_UINT8; break;
    case 4: type = CU_TENSOR_MAP_DATA_TYPE_UINT32; break;
    case 8: type = CU_TENSOR_MAP_DATA_TYPE_UINT64; break;
    default: break;  // 2: f16 and bf16 move as 16-bit words
  }
  cuuint32_t element_strides[kTmaMaxRank] = {1, 1, 1, 1, 1};
  CUtensorMap map;
  FJ_CU(drv, cuTensorMapEncodeTiled(&map, type, cuuint32_t(v.rank), const_cast<void*>(v.data), v.dims, v.strides,
                                    v.box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, driver_swizzle(v.swizzle),
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return map;
}

namespace {

bool same_view(const TmaView& a, const TmaView& b) {
  if (a.data != b.data || a.rank != b.rank || a.elem_bytes != b.elem_bytes || a.swizzle != b.swizzle) return false;
  for (int i = 0; i < kTmaMaxRank; ++i)
    if (a.dims[i] != b.dims[i] || a.box[i] != b.box[i] || (i + 1 < kTmaMaxRank && a.strides[i] != b.strides[i]))
      return false;
  return true;
}

// The memo: room for the three or four maps of a call, for a few alternating problems (layers
// of different shapes, K and V of separate caches).
constexpr int kSlots = 16;
static_assert((kSlots & (kSlots - 1)) == 0, "slots are indexed by mask");
struct Slot {
  bool used = false;
  TmaView view;
  CUtensorMap map;
};
struct Memo {
  Slot slots[kSlots];
  int next = 0;       // the slot the next new map takes
  int last_hit = -1;  // a call asks for its maps in the same order each time, and new maps
                      // take consecutive slots: the slot after the last hit is the likely one
                      // (after a call's last map, the first one's: not known, so a full scan)
};

// This thread's memo. Not inlined: in a shared library each access to a thread_local is a call
// into the dynamic linker (__tls_get_addr), which GCC repeats at every use in a loop rather
// than keep the address in a register; one call here gives it once.
[[gnu::noinline]] Memo& this_threads_memo() {
  thread_local Memo memo;
  return memo;
}

}  // namespace

Status encode_tma_map_cached(const TmaView& v, void* out) {
  Memo& memo = this_threads_memo();
  // The likely slot first, then every slot (the likely one again: the loop stays simple).
  for (int probe = -1; probe < kSlots; ++probe) {
    const int i = probe < 0 ? (memo.last_hit + 1) & (kSlots - 1) : probe;
    const Slot& s = memo.slots[i];
    if (s.used && same_view(s.view, v)) {
      memo.last_hit = i;
      std::memcpy(out, &s.map, sizeof s.map);
      return {};
    }
  }
  auto map = encode_tma_map(v);
  if (!map.ok()) return std::move(map).error();
  Slot& s = memo.slots[memo.next];
  memo.last_hit = memo.next;
  memo.next = (memo.next + 1) % kSlots;
  s.used = true;
  s.view = v;
  s.map = map.value();
  std::memcpy(out, &s.map, sizeof s.map);
  return {};
}

Result<CUtensorMap> encode_tma_map_cached(const TmaView& v) {
  CUtensorMap map;
  FJ_TRY(encode_tma_map_cached(v, &map));
  return map;
}

}  // namespace flashjit
