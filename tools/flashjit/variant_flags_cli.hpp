// The command-line flags that describe variants (dtype, head dims, mask, every boolean
// semantics field, family, tiling, vec), shared by `flashjit warmup` and `flashjit tune`. The
// boolean fields' flags come from the semantics field list, so a new field gets its flag here
// without an edit.
#pragma once

#include <CLI/CLI.hpp>

#include "variant_spec.hpp"

namespace flashjit::tools {

// Adds the flags to `app` (a subcommand or an option group), writing into `flags`, which must
// outlive parsing.
void add_variant_flags(CLI::App* app, VariantFlags& flags);

}  // namespace flashjit::tools
