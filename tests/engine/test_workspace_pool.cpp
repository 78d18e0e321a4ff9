// The engine's workspace: one buffer per (context, stream), grown with a synchronization of that
// stream only, never allocated while the stream is captured (a fake device stands in for the
// driver).
#include <doctest/doctest.h>

#include <map>
#include <vector>

#include "workspace_pool.hpp"

using namespace flashjit;

namespace {

struct FakeDevice {
  std::map<CUdeviceptr, std::size_t> live;
  CUdeviceptr next = 0x1000;
  std::vector<CUstream> synced;
  std::map<CUstream, bool> capturing;
  bool fail_alloc = false;
  std::vector<std::pair<CUdeviceptr, std::size_t>> zeroed;

  WorkspaceDevice device() {
    WorkspaceDevice d;
    d.allocate = [this](std::size_t bytes) -> Result<CUdeviceptr> {
      if (fail_alloc) return Error(Code::driver_error, "out of memory");
      const CUdeviceptr p = next;
      next += bytes + 0x1000;
      live[p] = bytes;
      return p;
    };
    d.free = [this](CUdeviceptr p) { live.erase(p); };
    d.synchronize = [this](CUstream s) -> Status {
      synced.push_back(s);
      return {};
    };
    d.capturing = [this](CUstream s) -> Result<bool> { return capturing[s]; };
    d.zero_async = [this](CUdeviceptr p, std::size_t bytes, CUstream s) -> Status {
      zeroed.push_back({p, bytes});
      (void)s;
      return {};
    };
    return d;
  }
};

CUcontext ctx(std::uintptr_t i) { return reinterpret_cast<CUcontext>(i); }
CUstream stream(std::uintptr_t i) { return reinterpret_cast<CUstream>(i); }

}  // namespace

TEST_CASE("a stream's workspace is reused, grown in granules, and never shared with another stream") {
  FakeDevice dev;
  {
    WorkspacePool pool(dev.device());
    const CUdeviceptr a = pool.get(ctx(1), stream(1), 1000).value();
    CHECK(pool.get(ctx(1), stream(1), 5000).value() == a);  // fits the 1 MiB granule
    const CUdeviceptr b = pool.get(ctx(1), stream(2), 1000).value();
    CHECK(b != a);
    CHECK(pool.get(ctx(2), stream(1), 1000).value() != a);  // same handle, other context
    CHECK(pool.buffers() == 3);
    CHECK(dev.synced.empty());

    // Growing synchronizes that stream alone before the old buffer is freed.
    const CUdeviceptr grown = pool.get(ctx(1), stream(1), (3u << 20) + 1).value();
    CHECK(grown != a);
    CHECK(dev.live.count(a) == 0);
    CHECK(dev.live[grown] == (4u << 20));
    CHECK(dev.synced == std::vector<CUstream>{stream(1)});
    CHECK(pool.bytes_held() == (4u << 20) + (2u << 20));
  }
  CHECK(dev.live.empty());  // the pool frees everything it holds
}

TEST_CASE("a captured stream gets its existing workspace, never a new one") {
  FakeDevice dev;
  WorkspacePool pool(dev.device());
  const CUdeviceptr warm = pool.get(ctx(1), stream(1), 4096).value();
  dev.capturing[stream(1)] = true;
  CHECK(pool.get(ctx(1), stream(1), 4096).value() == warm);  // fits: no allocation, fine to capture
  const std::size_t before = dev.live.size();
  auto grow = pool.get(ctx(1), stream(1), 64u << 20);
  REQUIRE_FALSE(grow.ok());
  CHECK(grow.error().message().find("captured into a CUDA graph") != std::string::npos);
  CHECK(dev.live.size() == before);
  CHECK(dev.synced.empty());
  dev.capturing[stream(3)] = true;
  CHECK_FALSE(pool.get(ctx(1), stream(3), 1).ok());  // a cold stream under capture

  dev.fail_alloc = true;
  dev.capturing[stream(4)] = false;
  auto failed = pool.get(ctx(1), stream(4), 1);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().detail("workspace_bytes").has_value());
}

TEST_CASE("a zeroed prefix is zeroed on the stream only when the bytes there may not be zero") {
  FakeDevice dev;
  WorkspacePool pool(dev.device());
  const CUdeviceptr p = pool.get(ctx(1), stream(1), 4096, 256).value();  // fresh memory: already zero
  CHECK(dev.zeroed.empty());
  CHECK(pool.get(ctx(1), stream(1), 4096, 256).value() == p);  // same prefix: its kernels gave it back
  CHECK(dev.zeroed.empty());
  CHECK(pool.get(ctx(1), stream(1), 4096, 64).value() == p);  // a smaller prefix: past 64, now dirty
  CHECK(dev.zeroed.empty());
  CHECK(pool.get(ctx(1), stream(1), 4096, 256).value() == p);  // bytes 64..256 were written meanwhile
  REQUIRE(dev.zeroed.size() == 1);
  CHECK(dev.zeroed[0] == std::make_pair(p, std::size_t(256)));
  dev.capturing[stream(1)] = true;  // a stream-ordered memset is fine during a capture
  CHECK(pool.get(ctx(1), stream(1), 4096, 0).ok());
  CHECK(pool.get(ctx(1), stream(1), 4096, 512).ok());
  CHECK(dev.zeroed.size() == 2);
}

TEST_CASE("a caller's workspace is used as given, its zeroed prefix cleared every call, and checked for size") {
  FakeDevice fake;
  const WorkspaceDevice device = fake.device();
  CallerWorkspace given(device, 0x40000, 4096, stream(1));
  CHECK(given.get(1024, 64).value() == 0x40000);
  CHECK(given.get(4096, 64).value() == 0x40000);  // the caller's memory may hold anything: zeroed again
  REQUIRE(fake.zeroed.size() == 2);
  CHECK((fake.zeroed[1] == std::pair<CUdeviceptr, std::size_t>{0x40000, 64}));
  CHECK(given.get(2048, 0).value() == 0x40000);
  CHECK(fake.zeroed.size() == 2);  // nothing to zero
  auto small = given.get(8192, 0);
  REQUIRE_FALSE(small.ok());
  CHECK(small.error().message().find("workspace.bytes is 4096 but this call needs 8192") != std::string::npos);
  CHECK(fake.live.empty());  // never allocates
}

TEST_CASE("the workspace meter records the largest request and gives no memory") {
  WorkspaceMeter meter;
  CHECK(meter.bytes() == 0);
  CHECK(meter.get(300, 16).value() == 0);
  CHECK(meter.get(100, 0).value() == 0);
  CHECK(meter.bytes() == 300);
}
