// SPDX-License-Identifier: Apache-2.0
#include "tests/support/prometheus_text.h"

#include <civetweb.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace distcc_cuda::testing {
namespace {

const std::regex& MetricName() {
  static const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
  return kName;
}

bool ParseValue(absl::string_view text, double* value) {
  if (text == "+Inf") {
    *value = INFINITY;
    return true;
  }
  if (text == "-Inf") {
    *value = -INFINITY;
    return true;
  }
  if (text == "NaN") {
    *value = NAN;
    return true;
  }
  return absl::SimpleAtod(text, value) && !absl::StrContains(text, ' ');
}

// Reads `{a="x",b="y"}` from the front of `rest`: the labels, sorted.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseLabels(
    absl::string_view& rest) {
  std::vector<std::pair<std::string, std::string>> labels;
  if (!absl::ConsumePrefix(&rest, "{")) return labels;
  static const std::regex kLabel("[a-zA-Z_][a-zA-Z0-9_]*");
  while (!absl::ConsumePrefix(&rest, "}")) {
    size_t equals = rest.find('=');
    if (equals == absl::string_view::npos) return absl::InvalidArgumentError("label without =");
    std::string name(rest.substr(0, equals));
    if (!std::regex_match(name, kLabel)) {
      return absl::InvalidArgumentError(absl::StrCat("bad label name '", name, "'"));
    }
    rest.remove_prefix(equals + 1);
    if (!absl::ConsumePrefix(&rest, "\"")) {
      return absl::InvalidArgumentError("label value not quoted");
    }
    std::string value;
    while (true) {
      if (rest.empty()) return absl::InvalidArgumentError("label value not closed");
      char c = rest.front();
      rest.remove_prefix(1);
      if (c == '"') break;
      if (c == '\\') {
        if (rest.empty()) return absl::InvalidArgumentError("escape at the end");
        char escaped = rest.front();
        rest.remove_prefix(1);
        if (escaped == 'n') {
          value += '\n';
        } else if (escaped == '\\' || escaped == '"') {
          value += escaped;
        } else {
          return absl::InvalidArgumentError("bad escape in a label value");
        }
      } else if (c == '\n') {
        return absl::InvalidArgumentError("newline in a label value");
      } else {
        value += c;
      }
    }
    for (const auto& [seen, unused] : labels) {
      if (seen == name) return absl::InvalidArgumentError(absl::StrCat("label ", name, " twice"));
    }
    labels.emplace_back(name, value);
    absl::ConsumePrefix(&rest, ",");
  }
  std::sort(labels.begin(), labels.end());
  return labels;
}

std::string SeriesName(const std::string& name,
                       const std::vector<std::pair<std::string, std::string>>& labels) {
  if (labels.empty()) return name;
  std::vector<std::string> parts;
  for (const auto& [label, value] : labels)
    parts.push_back(absl::StrCat(label, "=\"", value, "\""));
  return absl::StrCat(name, "{", absl::StrJoin(parts, ","), "}");
}

// The family a sample belongs to: its own name, or for a histogram or
// summary the name less _bucket, _sum or _count.
std::string FamilyOf(const std::string& sample, const std::map<std::string, std::string>& types) {
  if (types.count(sample)) return sample;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    if (absl::EndsWith(sample, suffix)) {
      std::string base = sample.substr(0, sample.size() - std::string(suffix).size());
      auto it = types.find(base);
      if (it != types.end() && (it->second == "histogram" || it->second == "summary")) {
        return base;
      }
    }
  }
  return "";
}

}  // namespace

double ScrapedMetrics::Value(const std::string& series_name) const {
  auto it = series.find(series_name);
  return it == series.end() ? 0 : it->second;
}

double ScrapedMetrics::Sum(const std::string& name, const std::string& label_filter) const {
  double sum = 0;
  for (const auto& [key, value] : series) {
    if (key != name && !absl::StartsWith(key, name + "{")) continue;
    if (!label_filter.empty() && !absl::StrContains(key, label_filter)) continue;
    sum += value;
  }
  return sum;
}

absl::StatusOr<ScrapedMetrics> ParsePrometheusText(const std::string& text) {
  ScrapedMetrics scraped;
  std::map<std::string, bool> helped;
  // Per histogram series (less its le label): its buckets in order.
  std::map<std::string, std::vector<std::pair<double, double>>> buckets;
  int number = 0;
  if (!text.empty() && text.back() != '\n') {
    return absl::InvalidArgumentError("the text does not end with a newline");
  }
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    ++number;
    auto error = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", number, " '", line, "': ", why));
    };
    if (absl::StartsWith(line, "# HELP ") || absl::StartsWith(line, "# TYPE ")) {
      bool type = absl::StartsWith(line, "# TYPE ");
      std::vector<std::string> words = absl::StrSplit(line.substr(7), absl::MaxSplits(' ', 1));
      if (!std::regex_match(words[0], MetricName())) return error("bad metric name");
      if (type) {
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                     "untyped"};
        if (words.size() != 2 || !kTypes.count(words[1])) return error("unknown type");
        if (!scraped.types.emplace(words[0], words[1]).second)
          return error("family declared twice");
      } else if (helped[words[0]]) {
        return error("HELP twice");
      } else {
        helped[words[0]] = true;
      }
      continue;
    }
    if (absl::StartsWith(line, "#")) continue;  // a comment
    absl::string_view rest = line;
    size_t name_end = rest.find_first_of("{ ");
    if (name_end == absl::string_view::npos) return error("no value");
    std::string name(rest.substr(0, name_end));
    if (!std::regex_match(name, MetricName())) return error("bad metric name");
    rest.remove_prefix(name_end);
    auto labels = ParseLabels(rest);
    if (!labels.ok()) return error(labels.status().message());
    if (!absl::ConsumePrefix(&rest, " ")) return error("no space before the value");
    std::vector<absl::string_view> fields = absl::StrSplit(rest, ' ');
    double value;
    int64_t timestamp;
    if (fields.size() > 2 || !ParseValue(fields[0], &value) ||
        (fields.size() == 2 && !absl::SimpleAtoi(fields[1], &timestamp))) {
      return error("bad value or timestamp");
    }
    std::string family = FamilyOf(name, scraped.types);
    if (family.empty()) return error("a sample of no declared family");
    const std::string& type = scraped.types[family];
    if (type == "counter" && value < 0) return error("a negative counter");
    std::string series = SeriesName(name, *labels);
    if (!scraped.series.emplace(series, value).second) return error("series given twice");
    if (type == "histogram" && absl::EndsWith(name, "_bucket")) {
      auto le = std::find_if(labels->begin(), labels->end(),
                             [](const auto& label) { return label.first == "le"; });
      double bound;
      if (le == labels->end() || !ParseValue(le->second, &bound)) return error("bucket without le");
      labels->erase(le);
      buckets[SeriesName(family, *labels)].emplace_back(bound, value);
    }
  }
  for (const auto& [series, bounds] : buckets) {
    for (size_t i = 1; i < bounds.size(); ++i) {
      if (bounds[i].first <= bounds[i - 1].first || bounds[i].second < bounds[i - 1].second) {
        return absl::InvalidArgumentError(absl::StrCat(series, ": buckets not cumulative"));
      }
    }
    if (bounds.empty() || !std::isinf(bounds.back().first)) {
      return absl::InvalidArgumentError(absl::StrCat(series, ": no +Inf bucket"));
    }
    std::string count = series;
    size_t brace = count.find('{');
    count.insert(brace == std::string::npos ? count.size() : brace, "_count");
    if (scraped.Value(count) != bounds.back().second) {
      return absl::InvalidArgumentError(absl::StrCat(series, ": +Inf bucket is not _count"));
    }
  }
  return scraped;
}

absl::StatusOr<HttpAnswer> HttpCall(const std::string& method, const std::string& url) {
  static const std::regex kUrl(R"(http://([^/:]+|\[[^\]]+\]):(\d+)(/.*)?)");
  std::smatch match;
  if (!std::regex_match(url, match, kUrl)) {
    return absl::InvalidArgumentError(absl::StrCat("not an http URL: ", url));
  }
  std::string host = match[1];
  if (host.front() == '[') host = host.substr(1, host.size() - 2);
  int port = std::stoi(match[2]);
  std::string path = match[3].length() > 0 ? match[3].str() : "/";
  char error[256] = "";
  mg_init_library(0);
  mg_connection* connection =
      mg_download(host.c_str(), port, 0, error, sizeof(error), "%s %s HTTP/1.0\r\nHost: %s\r\n\r\n",
                  method.c_str(), path.c_str(), host.c_str());
  if (connection == nullptr) {
    return absl::UnavailableError(absl::StrCat(method, " ", url, ": ", error));
  }
  HttpAnswer answer;
  const mg_response_info* info = mg_get_response_info(connection);
  if (info != nullptr) {
    answer.status = info->status_code;
    for (int i = 0; i < info->num_headers; ++i) {
      if (absl::EqualsIgnoreCase(info->http_headers[i].name, "Content-Type")) {
        answer.content_type = info->http_headers[i].value;
      }
    }
  }
  char buffer[8192];
  int got;
  if (method != "HEAD") {
    while ((got = mg_read(connection, buffer, sizeof(buffer))) > 0) answer.body.append(buffer, got);
  }
  mg_close_connection(connection);
  return answer;
}

absl::StatusOr<std::string> HttpGet(const std::string& url) {
  absl::StatusOr<HttpAnswer> answer = HttpCall("GET", url);
  if (!answer.ok()) return answer.status();
  if (answer->status != 200) {
    return absl::FailedPreconditionError(
        absl::StrCat("GET ", url, ": ", answer->status, " ", answer->body));
  }
  return std::move(answer->body);
}

}  // namespace distcc_cuda::testing
