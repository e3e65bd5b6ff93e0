#include "client/ctl/report.hpp"

#include <gtest/gtest.h>

#include <sstream>

namespace iris::ctl {
namespace {

Report sample() {
  Report r;
  r.fields("irisd").fields = {{"version", "0.1.0"}, {"sessions", 2}};
  auto& t = r.table("sessions", {"session", "pid", "ranks"});
  t.rows.push_back({1, 4242, nlohmann::json::array({0, 3})});
  return r;
}

TEST(Report, TextAlignsFieldsAndTables) {
  std::ostringstream out;
  print_text(sample(), out);
  EXPECT_EQ(out.str(),
            "irisd\n"
            "  version   0.1.0\n"
            "  sessions  2\n"
            "\n"
            "sessions\n"
            "  session  pid   ranks \n"
            "  1        4242  0,3   \n");
}

TEST(Report, JsonKeepsTypes) {
  std::ostringstream out;
  print_json(sample(), out);
  const auto doc = nlohmann::json::parse(out.str());
  EXPECT_EQ(doc["irisd"]["sessions"], 2);
  EXPECT_EQ(doc["sessions"][0]["pid"], 4242);
  EXPECT_EQ(doc["sessions"][0]["ranks"], nlohmann::json::array({0, 3}));
}

TEST(Report, HumanBytes) {
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(human_bytes(3ull << 30), "3.0 GiB");
}

}  // namespace
}  // namespace iris::ctl
