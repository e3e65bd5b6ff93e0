#include "client/ctl/report.hpp"

#include <algorithm>
#include <cstdio>

namespace iris::ctl {

Section& Report::fields(std::string name) {
  Section s;
  s.name = std::move(name);
  sections_.push_back(std::move(s));
  return sections_.back();
}

Section& Report::table(std::string name, std::vector<std::string> columns) {
  Section s;
  s.name = std::move(name);
  s.is_table = true;
  s.columns = std::move(columns);
  sections_.push_back(std::move(s));
  return sections_.back();
}

namespace {
std::string cell_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string joined;
    for (const auto& e : v) {
      if (!joined.empty()) joined += ',';
      joined += cell_text(e);
    }
    return joined.empty() ? "-" : joined;
  }
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", v.get<double>());
    return buf;
  }
  if (v.is_null()) return "-";
  return v.dump();
}
}  // namespace

void print_text(const Report& report, std::ostream& out) {
  bool first = true;
  for (const Section& s : report.sections()) {
    if (!first) out << '\n';
    first = false;
    out << s.name << '\n';
    if (!s.is_table) {
      std::size_t width = 0;
      for (const auto& [k, v] : s.fields) width = std::max(width, k.size());
      for (const auto& [k, v] : s.fields)
        out << "  " << k << std::string(width - k.size() + 2, ' ') << cell_text(v) << '\n';
      continue;
    }
    if (s.rows.empty()) {
      out << "  (none)\n";
      continue;
    }
    std::vector<std::size_t> widths;
    for (const auto& c : s.columns) widths.push_back(c.size());
    std::vector<std::vector<std::string>> cells;
    for (const auto& row : s.rows) {
      cells.emplace_back();
      for (std::size_t i = 0; i < row.size(); ++i) {
        cells.back().push_back(cell_text(row[i]));
        widths[i] = std::max(widths[i], cells.back().back().size());
      }
    }
    auto line = [&](const std::vector<std::string>& values) {
      out << ' ';
      for (std::size_t i = 0; i < values.size(); ++i)
        out << ' ' << values[i] << std::string(widths[i] - values[i].size() + 1, ' ');
      out << '\n';
    };
    line(s.columns);
    for (const auto& row : cells) line(row);
  }
}

void print_json(const Report& report, std::ostream& out) {
  nlohmann::json doc = nlohmann::json::object();
  for (const Section& s : report.sections()) {
    if (!s.is_table) {
      nlohmann::json obj = nlohmann::json::object();
      for (const auto& [k, v] : s.fields) obj[k] = v;
      doc[s.name] = obj;
      continue;
    }
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : s.rows) {
      nlohmann::json obj = nlohmann::json::object();
      for (std::size_t i = 0; i < row.size(); ++i) obj[s.columns[i]] = row[i];
      rows.push_back(obj);
    }
    doc[s.name] = rows;
  }
  out << doc.dump(2) << '\n';
}

std::string human_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  }
  return buf;
}

}  // namespace iris::ctl
