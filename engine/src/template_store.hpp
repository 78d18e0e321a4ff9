// The embedded kernel templates as the engine uses them: looked up by path, hashed as a whole.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "templates/embedded_templates.hpp"

namespace flashjit {

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
