// SPDX-License-Identifier: Apache-2.0
#include "client/plan/kernel_manifest.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/instantiation.h"
#include "common/nvcc/nvcc_args.h"
#include "toml++/toml.h"

namespace distcc_cuda::client {
namespace {

// Prefixes messages with the manifest's file and a node's position.
class Context {
 public:
  explicit Context(std::string file) : file_(std::move(file)) {}

  std::string Where(const toml::source_region& region) const {
    if (region.begin.line == 0) return file_;
    return absl::StrCat(file_, ":", region.begin.line, ":", region.begin.column);
  }
  absl::Status Error(const toml::node& node, std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(Where(node.source()), ": ", std::string(what)));
  }
  absl::Status Error(const toml::table& table, std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(Where(table.source()), ": ", std::string(what)));
  }

  // Rejects keys of `table` outside `allowed` (catches typos like "flag").
  absl::Status CheckKeys(const toml::table& table, std::string_view name,
                         std::initializer_list<const char*> allowed) const {
    for (const auto& [key, node] : table) {
      // A named copy: clang before 16 cannot capture a structured binding.
      const std::string_view written = key.str();
      if (std::none_of(allowed.begin(), allowed.end(),
                       [&](const char* known) { return written == known; })) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(key.source()), ": unknown key '", std::string(key.str()), "' in ",
                         std::string(name), " (known: ", absl::StrJoin(allowed, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> String(const toml::table& table, std::string_view key,
                                     bool required) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) {
      if (!required) return std::string();
      return Error(table, absl::StrCat("missing key '", std::string(key), "'"));
    }
    if (!node->is_string()) {
      return Error(*node, absl::StrCat("'", std::string(key), "' must be a string"));
    }
    return std::string(*node->value<std::string>());
  }

  absl::StatusOr<std::vector<std::string>> Strings(const toml::table& table,
                                                   std::string_view key) const {
    std::vector<std::string> out;
    const toml::node* node = table.get(key);
    if (node == nullptr) return out;
    const toml::array* array = node->as_array();
    if (array == nullptr) {
      return Error(*node, absl::StrCat("'", std::string(key), "' must be an array of strings"));
    }
    for (const toml::node& element : *array) {
      if (!element.is_string()) {
        return Error(element, absl::StrCat("'", std::string(key), "' must hold only strings"));
      }
      out.push_back(*element.value<std::string>());
    }
    return out;
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// Renders an axis value as it should appear in generated source.
absl::StatusOr<std::string> AxisValue(const Context& context, const toml::node& node,
                                      std::string_view axis) {
  if (auto text = node.value_exact<std::string>()) return *text;
  if (auto number = node.value_exact<int64_t>()) return absl::StrCat(*number);
  if (auto flag = node.value_exact<bool>()) return std::string(*flag ? "true" : "false");
  return context.Error(node, absl::StrCat("values of axis '", std::string(axis),
                                          "' must be strings, integers or booleans"));
}

absl::StatusOr<v1::InstantiationSet> LoadInstantiationSet(const Context& context,
                                                          const toml::table& table) {
  RETURN_IF_ERROR(context.CheckKeys(table, "[[instantiations]]",
                                    {"name", "unit", "headers", "text", "axes", "per_unit"}));
  v1::InstantiationSet set;
  set.set_manifest_location(context.Where(table.source()));
  ASSIGN_OR_RETURN(*set.mutable_name(), context.String(table, "name", true));
  ASSIGN_OR_RETURN(*set.mutable_unit_name_template(), context.String(table, "unit", false));
  ASSIGN_OR_RETURN(*set.mutable_text_template(), context.String(table, "text", true));
  if (const toml::node* per_unit = table.get("per_unit")) {
    std::optional<int64_t> value = per_unit->value_exact<int64_t>();
    if (!value || *value < 1 || *value > 100000) {
      return context.Error(*per_unit,
                           "'per_unit' is a positive integer: how many grid points share one "
                           "compile unit (leave it out to let the coordinator choose)");
    }
    set.set_instantiations_per_unit(static_cast<int32_t>(*value));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> headers, context.Strings(table, "headers"));
  for (std::string& header : headers) set.add_headers(std::move(header));
  const toml::node* axes_node = table.get("axes");
  if (axes_node == nullptr || !axes_node->is_table()) {
    return context.Error(table, absl::StrCat("instantiation set '", set.name(),
                                             "' needs an [instantiations.axes] table"));
  }
  // Keep the axes in the order they are written, not toml++'s sorted order.
  std::vector<std::pair<const toml::key*, const toml::node*>> axes;
  for (const auto& [key, node] : *axes_node->as_table()) axes.emplace_back(&key, &node);
  std::sort(axes.begin(), axes.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.first->source().begin.line, a.first->source().begin.column) <
           std::make_pair(b.first->source().begin.line, b.first->source().begin.column);
  });
  for (const auto& [key, node] : axes) {
    const toml::array* values = node->as_array();
    if (values == nullptr || values->empty()) {
      return context.Error(
          *node, absl::StrCat("axis '", std::string(key->str()), "' must be a non-empty array"));
    }
    auto* axis = set.add_axes();
    axis->set_name(std::string(key->str()));
    for (const toml::node& value : *values) {
      ASSIGN_OR_RETURN(*axis->add_values(), AxisValue(context, value, std::string(key->str())));
    }
  }
  // Name the placeholder's own line when it lacks an axis.
  absl::Status valid = ValidateInstantiationSet(set);
  if (!valid.ok()) {
    for (const char* key : {"text", "unit"}) {
      const toml::node* node = table.get(key);
      if (node != nullptr && absl::StrContains(valid.message(), "placeholder")) {
        auto names = Placeholders(*node->value<std::string>());
        if (names.ok()) {
          for (const std::string& name : *names) {
            if (std::none_of(set.axes().begin(), set.axes().end(),
                             [&](const auto& a) { return a.name() == name; })) {
              return context.Error(
                  *node, absl::StrCat("placeholder {", name, "} in '", key, "' has no axis; add ",
                                      name, " = [...] under [instantiations.axes]"));
            }
          }
        }
      }
    }
    return valid;
  }
  return set;
}

}  // namespace

absl::StatusOr<KernelManifest> LoadKernelManifest(const std::string& path) {
  const std::string absolute = AbsolutePath(path);
  if (!IsRegularFile(absolute)) {
    return absl::NotFoundError(absl::StrCat("manifest ", path, " does not exist"));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(absolute));
  ASSIGN_OR_RETURN(
      KernelManifest manifest,
      ParseKernelManifest(text, path, std::filesystem::path(absolute).parent_path().string()));
  manifest.path = absolute;
  return manifest;
}

absl::StatusOr<KernelManifest> ParseKernelManifest(const std::string& text, const std::string& path,
                                                   const std::string& directory) {
  KernelManifest manifest;
  manifest.path = path;
  manifest.directory = directory;
  Context context(path);
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& error) {
    return absl::InvalidArgumentError(
        absl::StrCat(context.Where(error.source()), ": ", std::string(error.description())));
  }
  RETURN_IF_ERROR(context.CheckKeys(root, "the manifest", {"build", "link", "instantiations"}));
  const toml::table* build = root["build"].as_table();
  if (build == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": missing [build] table (with output = \"libNAME.so\")"));
  }
  RETURN_IF_ERROR(
      context.CheckKeys(*build, "[build]", {"output", "archs", "flags", "link_flags", "sources"}));
  ASSIGN_OR_RETURN(manifest.output, context.String(*build, "output", true));
  // "", "." and ".." would name the output folder, not a library in it.
  if (manifest.output.empty() || manifest.output == "." || manifest.output == ".." ||
      manifest.output.find('/') != std::string::npos) {
    return context.Error(*build->get("output"),
                         "'output' is a file name such as libNAME.so; choose its folder with -o");
  }
  ASSIGN_OR_RETURN(manifest.archs, context.Strings(*build, "archs"));
  if (manifest.archs.empty()) manifest.archs = {"sm_100"};
  absl::Status archs_ok = GencodeFlags(manifest.archs).status();
  if (!archs_ok.ok()) {
    return context.Error(*build->get("archs"), std::string(archs_ok.message()));
  }
  ASSIGN_OR_RETURN(manifest.flags, context.Strings(*build, "flags"));
  ASSIGN_OR_RETURN(manifest.link.flags, context.Strings(*build, "link_flags"));
  if (const toml::node* link_node = root.get("link")) {
    const toml::table* link = link_node->as_table();
    if (link == nullptr)
      return context.Error(*link_node, "write the link's settings as a [link] table");
    RETURN_IF_ERROR(context.CheckKeys(
        *link, "[link]", {"linker", "flags", "cudart", "libraries", "library_dirs", "soname"}));
    if (link->contains("flags") && build->contains("link_flags")) {
      return context.Error(*build->get("link_flags"),
                           "both [build] link_flags and [link] flags are set; keep [link] flags");
    }
    ASSIGN_OR_RETURN(std::string linker, context.String(*link, "linker", false));
    if (!linker.empty()) manifest.link.linker = linker;
    if (link->contains("flags")) {
      ASSIGN_OR_RETURN(manifest.link.flags, context.Strings(*link, "flags"));
    }
    ASSIGN_OR_RETURN(std::string cudart, context.String(*link, "cudart", false));
    if (!cudart.empty()) {
      absl::StatusOr<CudaRuntime> runtime = ParseCudaRuntime(cudart);
      if (!runtime.ok())
        return context.Error(*link->get("cudart"), std::string(runtime.status().message()));
      manifest.link.cudart = *runtime;
    }
    ASSIGN_OR_RETURN(manifest.link.libraries, context.Strings(*link, "libraries"));
    ASSIGN_OR_RETURN(manifest.link.library_dirs, context.Strings(*link, "library_dirs"));
    for (std::string& folder : manifest.link.library_dirs) folder = AbsolutePath(folder, directory);
    ASSIGN_OR_RETURN(manifest.link.soname, context.String(*link, "soname", false));
  }
  ASSIGN_OR_RETURN(manifest.sources, context.Strings(*build, "sources"));
  if (const toml::node* sets = root.get("instantiations")) {
    const toml::array* array = sets->as_array();
    if (array == nullptr) {
      return context.Error(*sets, "write instantiation sets as [[instantiations]] tables");
    }
    for (const toml::node& element : *array) {
      if (!element.is_table()) {
        return context.Error(element, "write instantiation sets as [[instantiations]] tables");
      }
      ASSIGN_OR_RETURN(v1::InstantiationSet set,
                       LoadInstantiationSet(context, *element.as_table()));
      manifest.instantiation_sets.push_back(std::move(set));
    }
  }
  if (manifest.sources.empty() && manifest.instantiation_sets.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": nothing to build; list sources under [build] or add [[instantiations]]"));
  }
  // Missing files are reported here, with the manifest's name, rather than
  // as a compiler error later.
  for (const std::string& source : manifest.sources) {
    if (!IsRegularFile(AbsolutePath(source, manifest.directory))) {
      return absl::NotFoundError(absl::StrCat(context.Where(build->get("sources")->source()),
                                              ": source '", source, "' not found in ",
                                              manifest.directory));
    }
  }
  for (size_t i = 0; i < manifest.instantiation_sets.size(); ++i) {
    for (const std::string& header : manifest.instantiation_sets[i].headers()) {
      if (!IsRegularFile(AbsolutePath(header, manifest.directory))) {
        return absl::NotFoundError(absl::StrCat(manifest.instantiation_sets[i].manifest_location(),
                                                ": header '", header, "' not found in ",
                                                manifest.directory));
      }
    }
  }
  return manifest;
}

}  // namespace distcc_cuda::client
