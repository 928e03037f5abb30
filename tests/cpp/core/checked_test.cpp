// Checked size arithmetic: exact results, nullopt on any wrap-around.
#include <limits>

#include "core/checked.hpp"
#include "test_support.hpp"

namespace {

using voxpipe::core::checked_add;
using voxpipe::core::checked_mul;
constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

TEST(Checked, MulExactWithinRange) {
  EXPECT_EQ(checked_mul(0, kMax), 0u);
  EXPECT_EQ(checked_mul(kMax, 1), kMax);
  EXPECT_EQ(checked_mul(std::uint64_t{1} << 32, (std::uint64_t{1} << 32) - 1),
            18446744069414584320u);  // 2^64 - 2^32
  EXPECT_EQ(checked_mul(4294967295u, 4294967297u), kMax);  // (2^32-1)(2^32+1) = 2^64-1
  EXPECT_EQ(checked_mul(32767, 32767), 1073676289u);
}

TEST(Checked, MulOverflowIsNullopt) {
  EXPECT_FALSE(checked_mul(std::uint64_t{1} << 32, std::uint64_t{1} << 32));
  EXPECT_FALSE(checked_mul(kMax, 2));
  EXPECT_FALSE(checked_mul(4294967296u, 4294967297u));
  // A NIfTI-2 header with dims that multiply past 2^64.
  std::optional<std::uint64_t> acc = 1;
  for (int i = 0; i < 7 && acc; ++i) acc = checked_mul(*acc, 1000000);
  EXPECT_FALSE(acc);
}

TEST(Checked, AddExactWithinRange) {
  EXPECT_EQ(checked_add(kMax, 0), kMax);
  EXPECT_EQ(checked_add(kMax - 5, 5), kMax);
  EXPECT_EQ(checked_add(352, 2 * 1024 * 1024), 352u + 2u * 1024u * 1024u);
}

TEST(Checked, AddOverflowIsNullopt) {
  EXPECT_FALSE(checked_add(kMax, 1));
  EXPECT_FALSE(checked_add(kMax / 2 + 1, kMax / 2 + 1));
}

}  // namespace
