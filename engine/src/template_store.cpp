#include "template_store.hpp"

#include <algorithm>

#include "base/content_hash.hpp"

namespace flashjit {

TemplateStore::TemplateStore() {
  std::size_t n = 0;
  const EmbeddedTemplate* table = embedded_templates(&n);
  all_.assign(table, table + n);
  std::sort(all_.begin(), all_.end(),
            [](const EmbeddedTemplate& a, const EmbeddedTemplate& b) { return std::string_view(a.path) < b.path; });
  ContentHasher h;
  for (const auto& t : all_) h.field(t.path, std::string_view(t.text, t.size));
  hash_ = h.hex();
}

const TemplateStore& TemplateStore::instance() {
  static const TemplateStore store;
  return store;
}

const EmbeddedTemplate* TemplateStore::find(std::string_view path) const {
  for (const auto& t : all_)
    if (path == t.path) return &t;
  return nullptr;
}

}  // namespace flashjit
