// Kernel templates embedded into the library at build time (cmake/EmbedTemplates.cmake): the
// engine never reads template files at run time.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace flashjit {

struct EmbeddedTemplate {
  const char* path;  // relative to templates/, the name kernels #include
  const char* text;
  std::size_t size;
};

// Generated table.
const EmbeddedTemplate* embedded_templates(std::size_t* count);

class TemplateStore {
 public:
  static const TemplateStore& instance();

  // nullptr when absent.
  const EmbeddedTemplate* find(std::string_view path) const;
  const std::vector<EmbeddedTemplate>& all() const { return all_; }
  // Hash over every embedded file (path and text): any template edit changes it.
  const std::string& content_hash() const { return hash_; }

 private:
  TemplateStore();
  std::vector<EmbeddedTemplate> all_;
  std::string hash_;
};

}  // namespace flashjit
