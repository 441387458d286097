// troupe::Error: the kind prefix, message() without it, and printable() for quoting file contents.
#include <gtest/gtest.h>

#include "troupe/kernels/error.hpp"

using namespace troupe;

TEST(Error, MessageLeavesOutTheKind) {
  const Error e(ErrorKind::io, "'w.safetensors' is truncated");
  EXPECT_STREQ(e.what(), "i/o error: 'w.safetensors' is truncated");
  EXPECT_EQ(e.message(), "'w.safetensors' is truncated");
  EXPECT_EQ(e.kind(), ErrorKind::io);
}

TEST(Error, PrintableEscapesWhatCouldBreakTheLineOrTheTerminal) {
  EXPECT_EQ(printable("weight.bias"), "weight.bias");
  EXPECT_EQ(printable("a\nb"), "a\\x0ab");
  EXPECT_EQ(printable("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(printable("it's"), "it\\x27s");
  EXPECT_EQ(printable("back\\slash"), "back\\x5cslash");
  EXPECT_EQ(printable("\x7f\xff"), "\\x7f\\xff");
  EXPECT_EQ(printable(std::string("\0", 1)), "\\x00");
  const std::string long_name(200, 'x');
  EXPECT_EQ(printable(long_name), std::string(80, 'x') + "...");
}
