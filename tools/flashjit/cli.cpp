#include "cli.hpp"

#include "base/printable.hpp"
#include "context.hpp"

namespace flashjit::tools {

namespace {

// CLI11's messages quote the argument they refuse: enough for any real one, while a megabyte
// argument cannot flood the terminal.
constexpr std::size_t kMaxCliErrorBytes = 1024;

}  // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err, bool err_is_tty) {
  Context ctx{out, err, err_is_tty, {}};
  CLI::App app{"flashjit: compile fused-attention kernels ahead of time (no GPU needed) and manage the "
               "on-disk kernel cache",
               "flashjit"};
  app.require_subcommand(1);
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    std::string message = e.what();
    // "A subcommand is required" when the word given is no subcommand: name the word instead.
    while (!a->get_subcommands().empty()) a = a->get_subcommands().front();
    if (dynamic_cast<const CLI::RequiredError*>(&e) && !a->remaining().empty())
      message = "unknown subcommand '" + a->remaining().front() + "'";
    return "flashjit: " + printable(message, kMaxCliErrorBytes) + "\nRun with --help for more information.\n";
  });
  app.footer(
      "Environment: FLASHJIT_CACHE_DIR (cache root, absolute; else $XDG_CACHE_HOME/flashjit, else "
      "~/.cache/flashjit), FLASHJIT_CACHE_MAX_BYTES (size cap, e.g. 2G), FLASHJIT_NVRTC_PATH, FLASHJIT_LOG=1.\n"
      "Exit codes: 0 success, 1 the operation failed, 2 bad command line (nothing done).");

  add_warmup_command(app, ctx);
  add_cache_command(app, ctx);
  add_tune_command(app, ctx);
  add_version_command(app, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help arrives here too, with exit code 0.
    return app.exit(e, out, err) == 0 ? kExitOk : kExitUsage;
  }
  return ctx.action ? ctx.action() : kExitOk;
}

}  // namespace flashjit::tools
