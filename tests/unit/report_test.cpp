#include "client/ctl/report.hpp"

#include "client/ctl/commands/status_command.hpp"

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

TEST(Report, StatusShowsCopyMethodAndTheEnginesOfEachLink) {
  v1::GetStatusResponse status;
  status.set_engine("hsa");
  status.set_copy_method("hsa_amd_memory_async_copy_on_engine");
  auto* gpu = status.add_devices();
  gpu->set_name("AMD Instinct MI300X (gfx942)");
  gpu->set_bus_id("0000:0c:00.0");
  gpu->add_peer_bus_ids("0000:1c:00.0");
  auto* host = gpu->add_links();
  host->set_bus_id("host");
  host->set_type("pcie");
  host->add_engines(0);
  host->add_engines(1);
  auto* peer = gpu->add_links();
  peer->set_bus_id("0000:1c:00.0");
  peer->set_type("xgmi");
  peer->add_engines(2);
  peer->add_engines(3);
  std::ostringstream json;
  print_json(status_report(status), json);
  const auto doc = nlohmann::json::parse(json.str());
  EXPECT_EQ(doc["irisd"]["copy_method"], "hsa_amd_memory_async_copy_on_engine");
  ASSERT_EQ(doc["links"].size(), 2u);
  EXPECT_EQ(doc["links"][1]["to"], "0000:1c:00.0");
  EXPECT_EQ(doc["links"][1]["link"], "xgmi");
  EXPECT_EQ(doc["links"][1]["engines"], nlohmann::json::array({2, 3}));
  std::ostringstream text;
  print_text(status_report(status), text);
  EXPECT_NE(text.str().find("xgmi  2,3"), std::string::npos) << text.str();
  // Engines that report no links (host, cuda) show no links table.
  status.mutable_devices(0)->clear_links();
  std::ostringstream plain;
  print_json(status_report(status), plain);
  EXPECT_FALSE(nlohmann::json::parse(plain.str()).contains("links"));
}

TEST(Report, HumanBytes) {
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(human_bytes(3ull << 30), "3.0 GiB");
}

}  // namespace
}  // namespace iris::ctl
