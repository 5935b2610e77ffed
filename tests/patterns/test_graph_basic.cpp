// Smoke tests of the Graph container and the registry's error messages.
#include <gtest/gtest.h>

#include "common/error.h"
#include "patterns/pattern.h"

using namespace sb;

TEST(Registry, UnknownPatternListsNames) {
  try {
    build_pattern("nope", 8, false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid patterns: dense"), std::string::npos) << e.what();
  }
}

TEST(Graph, DenseValidates) {
  Graph g = build_pattern("dense", 5, true);
  g.validate();
  EXPECT_EQ(g.n_edges(), 15);
  EXPECT_EQ(g.stats().max_hops, 1);
}
