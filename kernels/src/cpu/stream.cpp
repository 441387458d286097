// The host's streams: a thread per stream runs its queue in order. Waiting for another stream's
// event blocks this stream's thread, never the thread that queued the wait (CUDA's
// cudaStreamWaitEvent); events complete as the thread reaches them.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "cpu/parallel.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/stream.hpp"

namespace troupe {

namespace {

class CpuStream final : public Stream {
 public:
  explicit CpuStream(std::string name) : name_(std::move(name)), worker_([this] { serve(); }) {}

  ~CpuStream() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    worker_.join();
  }

  const std::string& name() const override { return name_; }

  void enqueue(std::function<void()> work) override {
    push(Item{Item::Kind::work, std::move(work), current_work_label(), Event(), current_generation()});
  }

  Event record() override {
    Event e = Event::pending();
    push(Item{Item::Kind::record, {}, {}, e, current_generation()});
    return e;
  }

  void wait(const Event& event) override {
    if (event.done() && !event.error()) return;  // nothing to wait for
    push(Item{Item::Kind::wait, {}, {}, event, current_generation()});
  }

  void restart(std::uint64_t generation) override { push(Item{Item::Kind::restart, {}, {}, Event(), generation}); }

 private:
  struct Item {
    enum class Kind { work, record, wait, restart } kind;
    std::function<void()> work;
    std::string label;
    Event event;
    std::uint64_t generation = 0;  // of the guard it was queued under (restart: the one it begins)
  };

  void push(Item item) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(item));
    }
    wake_.notify_one();
  }

  // The stream's thread: runs the queue until the stream is destroyed and the queue is empty.
  void serve() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      switch (item.kind) {
        case Item::Kind::work: run(item); break;
        case Item::Kind::record: item.event.complete(error_); break;
        case Item::Kind::wait: await(item); break;
        case Item::Kind::restart:
          error_ = nullptr;
          generation_ = item.generation;
          break;
      }
    }
  }

  void run(Item& item) {
    // The stream failed (later work is skipped until a restart), or the work is a failed step's, late.
    if (error_ || item.generation < generation_) return;
    const auto labelled = [&](const std::string& message) {
      return item.label.empty() ? message : item.label + ": " + message;
    };
    try {
      const cpu::KernelCallScope computing;  // this thread's core is busy: parallel kernels count it out
      item.work();
    } catch (const Error& e) {
      error_ = std::make_exception_ptr(Error(e.kind(), labelled(e.message())));
    } catch (const std::exception& e) {
      error_ = std::make_exception_ptr(Error(ErrorKind::runtime, labelled(e.what())));
    }
    item.work = nullptr;  // the tensors it held go now, on this thread
  }

  void await(const Item& item) {
    const Event& event = item.event;
    struct Signal {
      std::mutex mutex;
      std::condition_variable cv;
      bool done = false;
    };
    auto signal = std::make_shared<Signal>();
    event.then([signal](std::exception_ptr) {
      std::lock_guard<std::mutex> lock(signal->mutex);
      signal->done = true;
      signal->cv.notify_one();
    });
    std::unique_lock<std::mutex> lock(signal->mutex);
    signal->cv.wait(lock, [&] { return signal->done; });
    if (!error_ && item.generation >= generation_) error_ = event.error();
  }

  std::string name_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  // The stream's thread's alone: its first failure since the last restart, and that restart's generation.
  std::exception_ptr error_;
  std::uint64_t generation_ = 0;
  std::thread worker_;        // last: it starts once the members above exist
};

}  // namespace

std::shared_ptr<Stream> make_cpu_stream(std::string name) { return std::make_shared<CpuStream>(std::move(name)); }

}  // namespace troupe
