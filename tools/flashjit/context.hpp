// What every subcommand shares: the output streams, and the action the parsed subcommand
// leaves behind for run_cli() to run once parsing succeeded.
//
// A subcommand is one file with one entry point, `void add_X_command(CLI::App&, Context&)`,
// that adds itself to the app and, from its parse callback, sets Context::action.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <ostream>
#include <string>

#include "cli.hpp"
#include "flashjit/status.hpp"

namespace flashjit::tools {

struct Context {
  std::ostream& out;
  std::ostream& err;
  bool err_is_tty = false;
  std::function<int()> action;  // set by the parsed subcommand's callback
};

// Makes `run` the action once `sub` has parsed. `run` is copied; it must own what it needs
// (typically a shared_ptr to the subcommand's options).
inline void on_parsed(CLI::App* sub, Context& ctx, std::function<int()> run) {
  sub->callback([&ctx, run = std::move(run)] { ctx.action = run; });
}

// "flashjit <command>: <option>: <rule>" on err; returns kExitUsage.
inline int usage_error(Context& ctx, const std::string& command, const std::string& message) {
  ctx.err << "flashjit " << command << ": " << message << "\nRun with --help for more information.\n";
  return kExitUsage;
}

// "flashjit <command>: <what>: <error with its details>" on err; returns kExitFailed.
inline int failure(Context& ctx, const std::string& command, const std::string& what, const Error& error) {
  ctx.err << "flashjit " << command << ": " << what << (what.empty() ? "" : ": ") << error.to_string() << "\n";
  return kExitFailed;
}

void add_warmup_command(CLI::App& app, Context& ctx);
void add_cache_command(CLI::App& app, Context& ctx);
void add_version_command(CLI::App& app, Context& ctx);
void add_tune_command(CLI::App& app, Context& ctx);

}  // namespace flashjit::tools
