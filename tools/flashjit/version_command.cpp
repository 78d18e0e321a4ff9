// `flashjit version`: the library and the NVRTC it loads, plus what else keys the kernel cache
// (so two machines can tell whether a shipped bundle will hit).
#include <memory>

#include <nlohmann/json.hpp>

#include "context.hpp"
#include "flashjit/catalog.hpp"

namespace flashjit::tools {
namespace {

struct VersionOptions {
  bool json = false;
};

int run(Context& ctx, const VersionOptions& o) {
  const std::string number = library_version();
  auto nvrtc = nvrtc_info();
  std::string families, backward_families;
  for (const auto& f : kernel_family_names(Pass::forward)) families += (families.empty() ? "" : ", ") + f;
  for (const auto& f : kernel_family_names(Pass::backward))
    backward_families += (backward_families.empty() ? "" : ", ") + f;
  const std::string templates = templates_hash();
  const int format = engine_format_version();
  if (o.json) {
    nlohmann::json nv = nvrtc.ok() ? nlohmann::json{{"version", nvrtc->version}, {"path", nvrtc->path}}
                                   : nlohmann::json{{"error", nvrtc.error().to_string()}};
    ctx.out << nlohmann::json{{"version", number}, {"nvrtc", nv}, {"engine_format", format},
                              {"templates_hash", templates}, {"kernel_families", families},
                              {"backward_kernel_families", backward_families}}
                   .dump(2)
            << "\n";
  } else {
    ctx.out << "flashjit " << number << "\n";
    if (nvrtc.ok()) ctx.out << "NVRTC " << nvrtc->version << " (" << nvrtc->path << ")\n";
    else ctx.out << "NVRTC: not available (" << nvrtc.error().message() << ")\n";
    ctx.out << "kernel families: " << families << "\n"
            << "backward kernel families: " << backward_families << "\n"
            << "engine format " << format << ", templates " << templates << "\n";
  }
  return nvrtc.ok() ? kExitOk : kExitFailed;
}

}  // namespace

void add_version_command(CLI::App& app, Context& ctx) {
  auto o = std::make_shared<VersionOptions>();
  CLI::App* sub = app.add_subcommand("version", "Print the library version, the NVRTC version and what keys the kernel cache");
  sub->add_flag("--json", o->json, "Machine-readable output on stdout");
  sub->footer("Exit code 1 when NVRTC cannot be loaded (nothing could be compiled).");
  on_parsed(sub, ctx, [&ctx, o] { return run(ctx, *o); });
}

}  // namespace flashjit::tools
