// The kernel template files, embedded into the library at build time
// (cmake/EmbedTemplates.cmake generates the table): the engine never reads them from disk.
#pragma once

#include <cstddef>

namespace flashjit {

struct EmbeddedTemplate {
  const char* path;  // relative to templates/, the name kernels #include
  const char* text;
  std::size_t size;
};

// The generated table.
const EmbeddedTemplate* embedded_templates(std::size_t* count);

}  // namespace flashjit
