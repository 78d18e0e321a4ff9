// flashjit: the offline command-line tool (warmup, cache, version). See cli.hpp.
#include <unistd.h>

#include <exception>
#include <iostream>

#include "cli.hpp"

int main(int argc, char** argv) {
  try {
    return flashjit::tools::run_cli(argc, argv, std::cout, std::cerr, ::isatty(STDERR_FILENO) == 1);
  } catch (const std::exception& e) {
    std::cerr << "flashjit: " << e.what() << "\n";
    return flashjit::tools::kExitFailed;
  }
}
