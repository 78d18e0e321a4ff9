// The disk-cache key is content: any input that can change the binary changes the key, and
// nothing else (names, timestamps) takes part.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "compiler.hpp"
#include "kernel_binaries.hpp"
#include "cudalib/nvrtc_library.hpp"
#include "template_store.hpp"
#include "tests/support/test_support.hpp"

#include "kernel_family.hpp"

using namespace flashjit;

namespace {

KernelVariant variant() {
  KernelVariant v{"fa2_sm80", {}, Tiling(find_family("fa2_sm80")->knobs(), {128, 64, 4, 2})};
  v.semantics.head_dim_qk = v.semantics.head_dim_v = 64;
  return v;
}

}  // namespace

TEST_CASE("the cache key changes with template text, options, NVRTC version, arch and variant") {
  const Arch sm80 = Arch::parse("sm_80").value(), sm90a = Arch::parse("sm_90a").value();
  const std::vector<std::string> opts = compile_options(sm80);
  const auto base = KernelBinaries::cache_key_from(variant(), sm80, "templates-A", "13.0", opts);
  CHECK(base == KernelBinaries::cache_key_from(variant(), sm80, "templates-A", "13.0", opts));
  CHECK(base.name == variant().name());  // readable file name
  // Plan-only knobs (fa3_sm90's grid, decode_sm80's splits) shape the launch, not the code: one entry.
  const KernelFamily* fa3 = find_family("fa3_sm90");
  KernelVariant per_tile{"fa3_sm90", variant().semantics, Tiling(fa3->knobs(), {2, 112, 2, 0, 1})};
  per_tile.semantics.vec = 8;
  KernelVariant walking = per_tile;
  walking.tiling = Tiling(fa3->knobs(), {2, 112, 2, 1, 1});
  const auto per_tile_key = KernelBinaries::cache_key_from(per_tile, sm90a, "t", "13.0", compile_options(sm90a));
  CHECK(per_tile_key == KernelBinaries::cache_key_from(walking, sm90a, "t", "13.0", compile_options(sm90a)));
  CHECK(per_tile_key.name == "fa3_sm90-" + per_tile.semantics.name() + "-g2n112s2c1");
  CHECK(base.arch == "sm_80");

  CHECK(base.content_hash != KernelBinaries::cache_key_from(variant(), sm80, "templates-B", "13.0", opts).content_hash);
  CHECK(base.content_hash != KernelBinaries::cache_key_from(variant(), sm80, "templates-A", "13.1", opts).content_hash);
  CHECK(base.content_hash != KernelBinaries::cache_key_from(variant(), sm90a, "templates-A", "13.0", compile_options(sm90a)).content_hash);
  auto more = opts;
  more.push_back("-DFJ_LAZY_RESCALE=0");
  CHECK(base.content_hash != KernelBinaries::cache_key_from(variant(), sm80, "templates-A", "13.0", more).content_hash);
  // Options are framed: moving a boundary between two options is a different key.
  auto a = opts, b = opts;
  a.push_back("-DX");
  a.push_back("-DY");
  b.push_back("-DX-DY");
  CHECK(KernelBinaries::cache_key_from(variant(), sm80, "t", "13.0", a).content_hash !=
        KernelBinaries::cache_key_from(variant(), sm80, "t", "13.0", b).content_hash);
  KernelVariant other = variant();
  other.tiling[3] = 3;  // stages
  CHECK(base.content_hash != KernelBinaries::cache_key_from(other, sm80, "templates-A", "13.0", opts).content_hash);
  // Entries of an older engine format (other kernel params, other entry names) are never found:
  // their keys differ, so they are misses, not misreads, and age out of the cache.
  CHECK(kEngineFormatVersion >= 2);
  CHECK(base.content_hash != KernelBinaries::cache_key_from(variant(), sm80, "templates-A", "13.0", opts,
                                                             kEngineFormatVersion - 1).content_hash);
}

TEST_CASE("the running process keys on the embedded templates and NVRTC options from the environment") {
  const Arch sm80 = Arch::parse("sm_80").value();
  auto k1 = KernelBinaries::cache_key(variant(), sm80);
  REQUIRE(k1.ok());
  setenv("FLASHJIT_NVRTC_OPTIONS", "-DFJ_LAZY_RESCALE=0", 1);
  auto k2 = KernelBinaries::cache_key(variant(), sm80);
  unsetenv("FLASHJIT_NVRTC_OPTIONS");
  REQUIRE(k2.ok());
  CHECK(k1->content_hash != k2->content_hash);
  const std::string nvrtc = NvrtcLibrary::get().value()->version;
  CHECK(k1->content_hash == KernelBinaries::cache_key_from(variant(), sm80, TemplateStore::instance().content_hash(),
                                                           nvrtc, compile_options(sm80)).content_hash);
}

TEST_CASE("a corrupt cached kernel is a miss that is rebuilt and replaced, through the engine's path") {
  char tmpl[] = "/tmp/fj-binaries-test-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string root = tmpl;
  std::vector<std::string> log;
  KernelBinaries bins(true, root, [&](const std::string& m) { log.push_back(m); });
  const Arch sm80 = Arch::parse("sm_80").value();
  auto first = bins.get(variant(), sm80);
  REQUIRE(first.ok());
  CHECK(first->origin == BinaryOrigin::compiled);
  auto second = bins.get(variant(), sm80);
  REQUIRE(second.ok());
  CHECK(second->origin == BinaryOrigin::disk);
  CHECK(second->cubin == first->cubin);
  // Flip one byte near the end of the entry file (inside the cubin payload).
  const auto key = KernelBinaries::cache_key(variant(), sm80).value();
  const std::string path = bins.disk()->entry_path(key);
  {
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    REQUIRE(f);
    std::fseek(f, -100, SEEK_END);
    const int c = std::fgetc(f);
    std::fseek(f, -100, SEEK_END);
    std::fputc(c ^ 0x5a, f);
    std::fclose(f);
  }
  auto third = bins.get(variant(), sm80);
  REQUIRE(third.ok());
  CHECK(third->origin == BinaryOrigin::compiled);  // rebuilt
  CHECK(third->cubin == first->cubin);
  bool logged = false;
  for (const auto& m : log) logged |= m.find("corrupt") != std::string::npos || m.find("checksum") != std::string::npos;
  CHECK(logged);
  auto fourth = bins.get(variant(), sm80);  // replaced: a hit again
  REQUIRE(fourth.ok());
  CHECK(fourth->origin == BinaryOrigin::disk);
  std::filesystem::remove_all(root);
}

// ---- issue 6 ----

namespace {

// A fresh private root under /tmp, removed at the end.
struct ScratchRoot {
  test_support::TempDir dir{"fj-binaries-test"};
  std::string root() const { return dir / "root"; }
};

std::size_t entry_files_under(const std::string& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec))
    n += it->path().extension() == ".fjk";
  return n;
}

bool logged(const std::vector<std::string>& log, const std::string& part) {
  for (const auto& m : log)
    if (m.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("an unsafe arch or locks folder is refused like an unsafe root: logged, compiled in memory") {
  ScratchRoot s;
  const std::string root = s.root(), arch = root + "/sm_80";
  REQUIRE(::mkdir(root.c_str(), 0700) == 0);
  std::string why, unsafe;
  SUBCASE("arch folder writable by others") {
    REQUIRE(::mkdir(arch.c_str(), 0700) == 0);
    REQUIRE(::chmod(arch.c_str(), 0777) == 0);
    why = "writable by group or others";
    unsafe = arch;
  }
  SUBCASE("locks folder writable by others") {
    REQUIRE(::mkdir(arch.c_str(), 0700) == 0);
    REQUIRE(::mkdir((arch + "/locks").c_str(), 0700) == 0);
    REQUIRE(::chmod((arch + "/locks").c_str(), 0777) == 0);
    why = "writable by group or others";
    unsafe = arch + "/locks";
  }
  SUBCASE("arch folder is a symlink") {
    REQUIRE(::mkdir((s.dir / "elsewhere").c_str(), 0700) == 0);
    REQUIRE(::symlink((s.dir / "elsewhere").c_str(), arch.c_str()) == 0);
    why = "symbolic link";
    unsafe = arch;
  }
  SUBCASE("arch folder owned by another uid") {
    if (::geteuid() != 0) return;  // only root can give a folder away
    REQUIRE(::mkdir(arch.c_str(), 0700) == 0);
    REQUIRE(::chown(arch.c_str(), 54321, 54321) == 0);
    why = "owned by uid 54321";
    unsafe = arch;
  }
  std::vector<std::string> log;
  KernelBinaries bins(true, root, [&](const std::string& m) { log.push_back(m); });
  auto r = bins.get(variant(), Arch::parse("sm_80").value());
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().to_string()));
  CHECK(r->origin == BinaryOrigin::compiled);
  CHECK(r->cubin.size() > 1000);
  CHECK(logged(log, why));
  CHECK(logged(log, unsafe));
  CHECK(logged(log, "in memory"));
  CHECK(r->disk_cache_problem.find(unsafe) != std::string::npos);
  CHECK(entry_files_under(s.dir.path()) == 0);  // nothing was kept in, or through, the unsafe folder
}

TEST_CASE("a FIFO in place of a cached kernel does not block the engine; it is rebuilt") {
  ScratchRoot s;
  const std::string root = s.root();
  const Arch sm80 = Arch::parse("sm_80").value();
  {
    KernelBinaries bins(true, root, {});
    const std::string path = bins.disk()->entry_path(KernelBinaries::cache_key(variant(), sm80).value());
    REQUIRE(::mkdir((root + "/sm_80").c_str(), 0700) == 0);
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  }
  const int code = test_support::run_bounded(120, [&] {
    KernelBinaries bins(true, root, {});
    auto r = bins.get(variant(), sm80);
    if (!r.ok() || r->origin != BinaryOrigin::compiled) return 1;
    auto again = bins.get(variant(), sm80);
    return again.ok() && again->origin == BinaryOrigin::disk ? 0 : 2;
  });
  CHECK(code == 0);  // 128 + SIGALRM means it blocked
}

TEST_CASE("a kernel that could not be stored says so; the caller still gets it") {
  ScratchRoot s;
  const std::string root = s.root();
  const Arch sm80 = Arch::parse("sm_80").value();
  std::vector<std::string> log;
  KernelBinaries bins(true, root, [&](const std::string& m) { log.push_back(m); });
  const std::string path = bins.disk()->entry_path(KernelBinaries::cache_key(variant(), sm80).value());
  REQUIRE(::mkdir((root + "/sm_80").c_str(), 0700) == 0);
  REQUIRE(::mkdir(path.c_str(), 0700) == 0);  // a folder where the entry file goes
  auto r = bins.get(variant(), sm80);
  REQUIRE(r.ok());
  CHECK(r->origin == BinaryOrigin::compiled);
  CHECK(r->disk_cache_problem.find(path) != std::string::npos);
  CHECK(logged(log, "could not store"));
  auto fine = KernelBinaries(true, s.dir / "other", {}).get(variant(), sm80);
  REQUIRE(fine.ok());
  CHECK(fine->disk_cache_problem.empty());
}

// ---- issue 21 ----

TEST_CASE("one cache key, one set of bytes: tilings differing only in a plan-only knob compile alike (G8)") {
  // fa3_sm90's grid knob (p) changes how the plan launches the kernel, not the kernel: both
  // tilings share one cache entry, whose bytes must not depend on which of them compiled first.
  const Arch sm90a = Arch::parse("sm_90a").value();
  const KernelFamily* fa3 = find_family("fa3_sm90");
  KernelVariant per_tile{"fa3_sm90", variant().semantics, Tiling(fa3->knobs(), {1, 64, 2, 0, 1})};
  per_tile.semantics.vec = 8;
  KernelVariant walking = per_tile;
  walking.tiling = Tiling(fa3->knobs(), {1, 64, 2, 1, 1});
  const auto key = KernelBinaries::cache_key(per_tile, sm90a);
  REQUIRE(key.ok());
  REQUIRE(*key == KernelBinaries::cache_key(walking, sm90a).value());

  ScratchRoot first_per_tile, first_walking;
  KernelBinaries a(true, first_per_tile.root(), {}), b(true, first_walking.root(), {});
  auto from_a = a.get(per_tile, sm90a);
  auto from_b = b.get(walking, sm90a);
  REQUIRE_MESSAGE(from_a.ok(), (from_a.ok() ? "" : from_a.error().to_string()));
  REQUIRE_MESSAGE(from_b.ok(), (from_b.ok() ? "" : from_b.error().to_string()));
  CHECK(from_a->origin == BinaryOrigin::compiled);
  CHECK(from_b->origin == BinaryOrigin::compiled);
  CHECK(from_a->cubin == from_b->cubin);
  const std::string entry_a = test_support::read_file(a.disk()->entry_path(*key));
  CHECK(entry_a.size() > from_a->cubin.size());
  CHECK(entry_a == test_support::read_file(b.disk()->entry_path(*key)));
}
