// NodeSpares: erased entries' nodes serve later insertions, their values reset at once, no more
// kept than the cap.
#include "daemon/node_spares.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

namespace iris::daemon {
namespace {

using Map = std::map<int, std::shared_ptr<std::string>>;

TEST(NodeSpares, AnErasedNodeServesTheNextInsertionAndHoldsNothingMeanwhile) {
  NodeSpares<Map> spares(4);
  Map a, b;
  auto held = std::make_shared<std::string>("mapping");
  std::shared_ptr<std::string>& first = spares.put(a, 1);
  first = held;
  EXPECT_EQ(held.use_count(), 2);
  spares.erase(a, a.find(1));
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(held.use_count(), 1) << "the kept node let go of its value";
  EXPECT_EQ(spares.kept(), 1u);
  // Into another map of the type, under another key.
  std::shared_ptr<std::string>& second = spares.put(b, 7);
  EXPECT_EQ(second, nullptr) << "a kept node comes back reset";
  second = std::make_shared<std::string>("x");
  EXPECT_EQ(&second, &first) << "the kept node was used again";
  EXPECT_EQ(spares.kept(), 0u);
  ASSERT_EQ(b.count(7), 1u);
  EXPECT_EQ(*b.at(7), "x");
}

TEST(NodeSpares, PutResetsAValueAlreadyThere) {
  NodeSpares<Map> spares(4);
  Map m;
  spares.put(m, 3) = std::make_shared<std::string>("old");
  spares.put(m, 5) = std::make_shared<std::string>("other");
  spares.erase(m, m.find(5));  // a kept node, which the next put takes
  EXPECT_EQ(spares.put(m, 3), nullptr);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(spares.kept(), 1u) << "the kept node was not needed and stays kept";
}

TEST(NodeSpares, KeepsNoMoreThanItsCap) {
  NodeSpares<Map> spares(2);
  Map m;
  for (int k = 0; k < 5; ++k) spares.put(m, k);
  while (!m.empty()) spares.erase(m, m.begin());
  EXPECT_EQ(spares.kept(), 2u);
  for (int k = 0; k < 3; ++k) spares.put(m, k);  // two kept nodes, then a new one
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(spares.kept(), 0u);
}

}  // namespace
}  // namespace iris::daemon
