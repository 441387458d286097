// Stream-ordered execution on the host (troupe/kernels/stream.hpp): events complete once and run
// their callbacks, a stream runs its work in order on its own thread, kernels and copies called
// under a StreamGuard are queued and return at once, a stream waits for another's event without
// its caller waiting, and a failure names its work, fails what follows until a restart, and
// crosses to the streams that wait for it; a failed step's late work is skipped.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/stream.hpp"

using namespace troupe;

namespace {

// A gate a stream's work can be held at: close() then enqueue(hold()), then open().
struct Gate {
  std::promise<void> opened;
  std::shared_future<void> passed = opened.get_future().share();
  std::function<void()> hold() const {
    return [f = passed] { f.wait(); };
  }
  void open() { opened.set_value(); }
};

// Waits (on this test thread) until `e` completes; false after 10 s.
bool wait_for(const Event& e) {
  std::promise<void> p;
  auto f = p.get_future();
  e.then([&p](std::exception_ptr) { p.set_value(); });
  return f.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
}

std::string message_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
  return "";
}

}  // namespace

TEST(Event, CompletesOnceAndRunsItsCallbacksThenOrAtOnce) {
  Event none;
  EXPECT_TRUE(none.done());
  int ran = 0;
  none.then([&](std::exception_ptr e) { ran += e ? 100 : 1; });
  EXPECT_EQ(ran, 1);

  Event e = Event::pending();
  EXPECT_FALSE(e.done());
  e.then([&](std::exception_ptr) { ran += 10; });
  EXPECT_EQ(ran, 1);
  e.complete();
  EXPECT_EQ(ran, 11);
  e.complete(std::make_exception_ptr(Error(ErrorKind::runtime, "late")));  // ignored: it completed
  EXPECT_TRUE(e.done());
  EXPECT_FALSE(e.error());
}

TEST(Event, AllCompletesWithTheLastAndCarriesAFailure) {
  Event a = Event::pending(), b = Event::pending();
  Event both = Event::all({a, b, Event()});
  EXPECT_FALSE(both.done());
  a.complete();
  EXPECT_FALSE(both.done());
  b.complete(std::make_exception_ptr(Error(ErrorKind::runtime, "b broke")));
  ASSERT_TRUE(both.done());
  EXPECT_NE(message_of(both.error()).find("b broke"), std::string::npos);
  EXPECT_TRUE(Event::all({}).done());
  EXPECT_TRUE(Event::all({a}).done());
  EXPECT_TRUE(Event::all({b}).error());  // a failure already known is kept
}

TEST(CpuStream, RunsItsWorkInOrderOnItsOwnThread) {
  auto stream = make_cpu_stream("cpu stream 0");
  EXPECT_EQ(stream->name(), "cpu stream 0");
  std::vector<int> order;
  std::thread::id ran_on;
  for (int i = 0; i < 100; ++i) stream->enqueue([&, i] { order.push_back(i); ran_on = std::this_thread::get_id(); });
  ASSERT_TRUE(wait_for(stream->record()));
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(CpuStream, KernelsAndCopiesUnderAGuardAreQueuedAndReturnAtOnce) {
  auto stream = make_cpu_stream("s");
  Gate gate;
  stream->enqueue(gate.hold());
  const Tensor a = Tensor::from_vector<float>({1, 2, 3}, {3});
  const Tensor b = Tensor::from_vector<float>({10, 20, 30}, {3});
  Tensor sum, copy = Tensor::zeros({3}), converted;
  {
    const StreamGuard on(*stream);
    EXPECT_EQ(current_stream(), stream.get());
    sum = kernels::add(a, b);  // queued behind the gate
    copy.copy_from(sum);       // so is the copy, which reads sum
    converted = sum.to(DType::f64);
  }
  EXPECT_EQ(current_stream(), nullptr);
  EXPECT_EQ(copy.to_vector<float>(), (std::vector<float>{0, 0, 0}));  // nothing ran yet
  const Event written = stream->record();
  EXPECT_FALSE(written.done());
  gate.open();
  ASSERT_TRUE(wait_for(written));
  EXPECT_FALSE(written.error());
  EXPECT_EQ(copy.to_vector<float>(), (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(converted.to_vector<double>(), (std::vector<double>{11, 22, 33}));
}

TEST(CpuStream, AStreamWaitsForAnotherStreamsEventNotItsCaller) {
  auto producer = make_cpu_stream("producer"), consumer = make_cpu_stream("consumer");
  Gate gate;
  std::atomic<int> produced{0}, consumed_after{-1};
  producer->enqueue(gate.hold());
  producer->enqueue([&] { produced = 1; });
  const Event made = producer->record();
  const auto queued_at = std::chrono::steady_clock::now();
  consumer->wait(made);
  consumer->enqueue([&] { consumed_after = produced.load(); });
  const Event consumed = consumer->record();
  EXPECT_LT(std::chrono::steady_clock::now() - queued_at, std::chrono::seconds(1));  // the caller went on
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(consumed.done());  // the consumer's thread waits for the gate
  gate.open();
  ASSERT_TRUE(wait_for(consumed));
  EXPECT_EQ(consumed_after.load(), 1);
}

TEST(CpuStream, AFailureNamesItsWorkFailsWhatFollowsAndCrossesToWaitingStreams) {
  auto stream = make_cpu_stream("s"), other = make_cpu_stream("t");
  bool later_ran = false;
  {
    const WorkLabel label("op 'probe %3' failed in step 2, micro-batch 1");
    EXPECT_EQ(current_work_label(), "op 'probe %3' failed in step 2, micro-batch 1");
    stream->enqueue([] { throw Error(ErrorKind::out_of_range, "id 40 is outside [0, 32)"); });
  }
  EXPECT_EQ(current_work_label(), "");
  stream->enqueue([&] { later_ran = true; });
  const Event failed = stream->record();
  other->wait(failed);
  const Event crossed = other->record();
  ASSERT_TRUE(wait_for(failed));
  ASSERT_TRUE(wait_for(crossed));
  EXPECT_FALSE(later_ran);
  ASSERT_TRUE(failed.error());
  EXPECT_EQ(message_of(failed.error()), "out of range: op 'probe %3' failed in step 2, micro-batch 1: id 40 is outside [0, 32)");
  EXPECT_EQ(message_of(crossed.error()), message_of(failed.error()));

  // A restart lets later work run again on both.
  stream->restart(1);
  other->restart(1);
  const StreamGuard next(*stream, 1);
  stream->enqueue([&] { later_ran = true; });
  const Event again = stream->record(), again_other = other->record();
  ASSERT_TRUE(wait_for(again));
  ASSERT_TRUE(wait_for(again_other));
  EXPECT_TRUE(later_ran);
  EXPECT_FALSE(again.error());
  EXPECT_FALSE(again_other.error());
}

TEST(CpuStream, AFailedGenerationsLateWorkIsSkippedAndFailsNothing) {
  auto stream = make_cpu_stream("s");
  std::vector<int> ran;
  stream->restart(2);  // step 2 begins
  {
    const StreamGuard step1(*stream, 1);  // an act of the failed step 1, come late
    EXPECT_EQ(current_generation(), 1u);
    stream->enqueue([&] { ran.push_back(1); });
    stream->enqueue([] { throw Error(ErrorKind::runtime, "step 1's work failed again"); });
  }
  {
    const StreamGuard step2(*stream, 2);
    stream->enqueue([&] { ran.push_back(2); });
  }
  EXPECT_EQ(current_generation(), 0u);
  const Event end = stream->record();
  ASSERT_TRUE(wait_for(end));
  EXPECT_FALSE(end.error());
  EXPECT_EQ(ran, (std::vector<int>{2}));
}

TEST(CpuStream, DestroyingAStreamRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    auto stream = make_cpu_stream("s");
    for (int i = 0; i < 50; ++i) stream->enqueue([&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 50);
}
