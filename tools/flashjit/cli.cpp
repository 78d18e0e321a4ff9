#include "cli.hpp"

#include "context.hpp"

namespace flashjit::tools {

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err, bool err_is_tty) {
  Context ctx{out, err, err_is_tty, {}};
  CLI::App app{"flashjit: compile fused-attention kernels ahead of time (no GPU needed) and manage the "
               "on-disk kernel cache",
               "flashjit"};
  app.require_subcommand(1);
  app.footer(
      "Environment: FLASHJIT_CACHE_DIR (cache root, absolute; else $XDG_CACHE_HOME/flashjit, else "
      "~/.cache/flashjit), FLASHJIT_CACHE_MAX_BYTES (size cap, e.g. 2G), FLASHJIT_NVRTC_PATH, FLASHJIT_LOG=1.\n"
      "Exit codes: 0 success, 1 the operation failed, 2 bad command line (nothing done).");

  add_warmup_command(app, ctx);
  add_cache_command(app, ctx);
  add_tune_command(app, ctx);
  add_version_command(app, ctx);

  // "A subcommand is required" when the word given is no subcommand: name the word instead.
  const auto explain = [](const CLI::App& top, const CLI::Error& e) {
    const CLI::App* a = &top;
    while (!a->get_subcommands().empty()) a = a->get_subcommands().front();
    if (dynamic_cast<const CLI::RequiredError*>(&e) && !a->remaining().empty())
      return "unknown subcommand '" + a->remaining().front() + "'";
    return std::string(e.what());
  };
  if (auto code = parse_command_line(app, argc, argv, out, err, explain)) return *code;
  return ctx.action ? ctx.action() : kExitOk;
}

}  // namespace flashjit::tools
