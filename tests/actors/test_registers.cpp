// The register protocol alone (actors/src/registers.hpp), without CAF: a register stays taken until
// every consumer released it, a consumer reads only when every producer's oldest register holds its
// next micro-batch, and the firing rule stops at back-pressure, at a failure, after the last one
// and until the memory plan's signals are in.
#include <gtest/gtest.h>

#include "registers.hpp"

namespace troupe::actors {
namespace {

Values values_of(float v) { return std::make_shared<const std::vector<Tensor>>(std::vector<Tensor>{Tensor::full({1}, v)}); }

ReadyPtr ready(int producer, int mb, int reg, float v) {
  return std::make_shared<const Ready>(Ready{nullptr, producer, mb, reg, values_of(v)});
}

TEST(Registers, ARegisterIsFreeOnceEveryConsumerReleasedIt) {
  OutRegisters out(2, 2);  // double buffering, two consumers
  EXPECT_TRUE(out.writable());
  EXPECT_EQ(out.write(), 0);
  EXPECT_EQ(out.write(), 1);
  EXPECT_FALSE(out.writable());  // both registers wait for their readers
  out.release(0);
  EXPECT_FALSE(out.writable());  // one of two consumers is not enough
  out.release(0);
  EXPECT_TRUE(out.writable());
  EXPECT_EQ(out.write(), 0);
  out.release(1);  // a stale second release of a freed register must not free it twice
  out.release(1);
  out.release(1);
  EXPECT_TRUE(out.writable());
  EXPECT_EQ(out.write(), 1);
  EXPECT_FALSE(out.writable());
  EXPECT_THROW(out.write(), Error);
  out.clear();
  EXPECT_TRUE(out.writable());
}

TEST(Registers, ANodeWithoutConsumersIsAlwaysWritable) {
  OutRegisters out(1, 0);
  EXPECT_TRUE(out.writable());
}

TEST(Registers, InputsAreReadableOnlyWhenEveryProducerHoldsTheNextMicroBatch) {
  InRegisters in({3, 5});
  EXPECT_FALSE(in.readable(0));
  in.push(ready(5, 0, 1, 50));
  EXPECT_FALSE(in.readable(0));  // producer 3 has not sent micro-batch 0
  in.push(ready(3, 0, 0, 30));
  in.push(ready(3, 1, 1, 31));
  EXPECT_TRUE(in.readable(0));
  EXPECT_FALSE(in.readable(1));
  EXPECT_EQ(in.value(3, 0).item(), 30);
  EXPECT_EQ(in.value(5, 0).item(), 50);
  std::vector<Taken> taken;
  in.take([&](const Taken& t) { taken.push_back(t); });
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].producer, 3);
  EXPECT_EQ(taken[0].reg, 0);
  EXPECT_EQ(taken[1].producer, 5);
  EXPECT_EQ(taken[1].reg, 1);
  EXPECT_FALSE(in.readable(1));  // producer 5 has not sent micro-batch 1
  in.push(ready(5, 1, 0, 51));
  EXPECT_TRUE(in.readable(1));
  EXPECT_EQ(in.value(3, 0).item(), 31);
  EXPECT_THROW(in.push(ready(4, 0, 0, 1)), Error);  // not a producer of this node
  in.clear();
  EXPECT_FALSE(in.readable(1));
}

TEST(Registers, TheFiringRuleStopsAtBackPressureFailureAndTheLastMicroBatch) {
  InRegisters in({});  // the input actor: nothing to wait for
  OutRegisters out(2, 1);
  int next = 0;
  std::vector<int> fired;
  auto act = [&](int mb) {
    fired.push_back(mb);
    out.write();
    return true;
  };
  const auto always = [](int) { return true; };
  EXPECT_FALSE(act_while_ready(next, 4, in, out, always, act));
  EXPECT_EQ(fired, (std::vector<int>{0, 1}));  // two registers, then it waits for a release
  out.release(0);
  EXPECT_FALSE(act_while_ready(next, 4, in, out, always, act));
  EXPECT_EQ(next, 3);
  out.release(1);
  EXPECT_TRUE(act_while_ready(next, 4, in, out, always, act));  // this call finished the step
  EXPECT_EQ(fired, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(act_while_ready(next, 4, in, out, always, act));  // nothing left: no second "done"
  int failing_next = 0;
  OutRegisters free(1, 0);
  EXPECT_FALSE(act_while_ready(failing_next, 3, in, free, always, [](int) { return false; }));
  EXPECT_EQ(failing_next, 0);  // a failed firing does not count as done
}

// The memory plan's edges (may_act): a micro-batch waits for them even with inputs and a register.
TEST(Registers, TheFiringRuleWaitsForTheMemoryPlansSignals) {
  InRegisters in({});
  OutRegisters out(4, 0);
  int next = 0, signals = 0;
  std::vector<int> fired;
  const auto may_act = [&](int mb) { return mb < signals; };
  const auto act = [&](int mb) {
    fired.push_back(mb);
    return true;
  };
  EXPECT_FALSE(act_while_ready(next, 3, in, out, may_act, act));
  EXPECT_TRUE(fired.empty());
  signals = 2;
  EXPECT_FALSE(act_while_ready(next, 3, in, out, may_act, act));
  EXPECT_EQ(fired, (std::vector<int>{0, 1}));
  signals = 3;
  EXPECT_TRUE(act_while_ready(next, 3, in, out, may_act, act));
  EXPECT_EQ(fired, (std::vector<int>{0, 1, 2}));
}

}  // namespace
}  // namespace troupe::actors
