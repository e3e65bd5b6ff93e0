// The limits on log lines a tenant causes (TenantLog) and the escaping of client-supplied text
// (printable): pure, checked with a captured spdlog sink and random strings.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <random>
#include <sstream>
#include <thread>

#include "daemon/operations/printable.hpp"
#include "daemon/operations/tenant_log.hpp"

namespace iris::daemon {
namespace {

TEST(Printable, EscapesEverythingButPrintableAsciiAndCutsWithTheSize) {
  EXPECT_EQ(printable("rank-0 of job/7", 64), "rank-0 of job/7");
  EXPECT_EQ(printable("a\nb\x1b[2J\\c\xc3\xa9", 64), "a\\x0ab\\x1b[2J\\x5cc\\xc3\\xa9");
  const std::string cut = printable(std::string(1'000'000, 'A'), 128);
  EXPECT_LE(cut.size(), 128u);
  EXPECT_NE(cut.find("...(1000000 bytes)"), std::string::npos) << cut;
  EXPECT_EQ(printable("", 8), "");
  EXPECT_EQ(printable("abcdef", 0), "");
}

TEST(Printable, AnyInputComesOutPrintableAndWithinItsBound) {
  std::mt19937_64 rng(20261201);
  for (int trial = 0; trial < 5000; ++trial) {
    std::string in(rng() % 600, '\0');
    for (char& c : in) c = static_cast<char>(rng() % 256);
    const std::size_t max = rng() % 300;
    const std::string out = printable(in, max);
    ASSERT_LE(out.size(), max);
    ASSERT_TRUE(is_printable_ascii(out)) << out;
    // Whole escapes only: a cut never leaves half of a \xNN behind.
    const auto slash = out.rfind('\\');
    if (slash != std::string::npos && out.find("...(", slash) == std::string::npos) {
      ASSERT_LE(slash + 4, out.size()) << out;
    }
    if (in.size() <= max / 4) {
      ASSERT_EQ(out.find("...("), std::string::npos);
    }
  }
}

TEST(Printable, KeysArePrintableAsciiOrNot) {
  EXPECT_TRUE(is_printable_ascii("torch-0a1b/stage 2:~"));
  EXPECT_FALSE(is_printable_ascii("tab\there"));
  EXPECT_FALSE(is_printable_ascii("caf\xc3\xa9"));
  EXPECT_FALSE(is_printable_ascii(std::string("nul\0", 4)));
}

class CapturedLog : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = spdlog::default_logger();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("%v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  void TearDown() override { spdlog::set_default_logger(previous_); }
  std::size_t lines_with(const std::string& needle) const {
    const std::string s = out_.str();
    std::size_t n = 0;
    for (auto at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
    return n;
  }

  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
  std::atomic<uint64_t> suppressed_{0};
};

TEST_F(CapturedLog, OneUidsFloodInEveryKindStaysWithinItsBudgetAndIsCounted) {
  TenantLog log(suppressed_);
  const TenantLogLimits limits;
  for (int i = 0; i < 10'000; ++i)
    log.warn(1000, static_cast<TenantLogKind>(i % kTenantLogKinds), "flood line {}", i);
  const std::size_t written = lines_with("flood line");
  // The burst of the uid's own budget, and at most what refills while the loop runs.
  EXPECT_LE(written, static_cast<std::size_t>(limits.line_burst) + 5);
  EXPECT_GE(written, static_cast<std::size_t>(limits.kind_burst));
  EXPECT_EQ(suppressed_.load(), 10'000 - written);
}

TEST_F(CapturedLog, ABigLineSpendsTheByteBudget) {
  TenantLog log(suppressed_);
  for (int i = 0; i < 1000; ++i) log.warn(7, TenantLogKind::kAttach, "{}", std::string(5000, 'x'));
  // Cut to 1 KiB each; 100 KiB of burst holds about a hundred of them, the kind's 64 fewer.
  EXPECT_LE(out_.str().size(), (100u << 10) + 4096);
  EXPECT_GT(suppressed_.load(), 0u);
  std::istringstream lines(out_.str());
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 1024u + 64);
}

TEST_F(CapturedLog, AnotherUidIsUnaffectedAndTheNextLineSaysWhatWasLeftOut) {
  TenantLogLimits fast;
  fast.kind_lines_per_second = 1000;
  fast.lines_per_second = 1000;
  TenantLog log(suppressed_, fast);
  for (int i = 0; i < 5000; ++i) log.warn(1, TenantLogKind::kSession, "attacker {}", i);
  // However slowly that ran (the budget refills as it runs), the flood ends on a suppressed
  // line, so the attacker's next written line owes a note.
  for (int i = 0; i < 1'000'000; ++i) {
    const uint64_t before = suppressed_.load();
    log.warn(1, TenantLogKind::kSession, "attacker {}", i);
    if (suppressed_.load() > before) break;
  }
  log.warn(2, TenantLogKind::kSession, "bystander speaks");
  EXPECT_EQ(lines_with("bystander speaks"), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  log.warn(1, TenantLogKind::kSession, "attacker again");
  EXPECT_EQ(lines_with("attacker again"), 1u);
  EXPECT_EQ(lines_with("bystander speaks ("), 0u) << "the bystander was charged for the flood";
  const std::string s = out_.str();
  const std::string last = s.substr(s.find("attacker again"));
  EXPECT_NE(last.find("similar lines suppressed)"), std::string::npos) << last;
}

TEST_F(CapturedLog, ClientTextCannotForgeALine) {
  TenantLog log(suppressed_);
  log.warn(3, TenantLogKind::kAttach, "attach '{}'", "x\n2026-12-01 critical irisd stopped");
  EXPECT_EQ(out_.str().find("\n2026"), std::string::npos);
  EXPECT_NE(out_.str().find("x\\x0a2026"), std::string::npos);
}

}  // namespace
}  // namespace iris::daemon
