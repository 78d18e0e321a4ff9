// validate_args() (flashjit.hpp): forward()'s checks of the arguments, on their own.
#include "flashjit/flashjit.hpp"
#include "problem.hpp"

namespace flashjit {

Status validate_args(const AttentionArgs& args) {
  auto problem = validate_problem(args);
  if (!problem.ok()) return std::move(problem).error();
  return {};
}

}  // namespace flashjit
