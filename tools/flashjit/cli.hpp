// The `flashjit` command-line tool: one app, one file per subcommand. main() only wraps
// run_cli(), which tests call directly with string streams.
//
// Exit codes: 0 success; 1 the operation failed (a compile, a bad cache entry, I/O);
// 2 the command line was wrong (nothing was done).
#pragma once

#include <ostream>

#include "common/command_line.hpp"  // kExitOk, kExitFailed, kExitUsage

namespace flashjit::tools {

// Parses argv and runs the chosen subcommand. Results go to `out`, progress and diagnostics to
// `err`; `err_is_tty` selects a redrawn progress bar over plain lines. Throws nothing for bad
// input (that is exit code 2), only for the unexpected (bad_alloc and the like).
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err, bool err_is_tty = false);

}  // namespace flashjit::tools
