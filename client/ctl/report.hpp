// What an iris-ctl command prints, independent of the format: sections of key/value fields and
// tables. One printer renders text for people, the other JSON for scripts.
#pragma once

#include <deque>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace iris::ctl {

struct Section {
  std::string name;
  bool is_table = false;
  std::vector<std::pair<std::string, nlohmann::json>> fields;  // key/value section
  std::vector<std::string> columns;                            // table section
  std::vector<std::vector<nlohmann::json>> rows;
};

class Report {
 public:
  Section& fields(std::string name);
  Section& table(std::string name, std::vector<std::string> columns);
  const std::deque<Section>& sections() const { return sections_; }

  // iris-ctl's exit status after printing it: 0, or 2 when irisd answered but is unhealthy.
  int exit_code = 0;

 private:
  std::deque<Section> sections_;  // stable references while sections are added
};

void print_text(const Report& report, std::ostream& out);
void print_json(const Report& report, std::ostream& out);

// "1.5 GiB", "12.0 KiB", "512 B"
std::string human_bytes(uint64_t bytes);

}  // namespace iris::ctl
