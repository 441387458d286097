// Events, the thread's current stream and its work label (troupe/kernels/stream.hpp).
#include "troupe/kernels/stream.hpp"

#include <mutex>
#include <utility>

namespace troupe {

struct Event::State {
  std::shared_ptr<const NativeEvent> native;
  std::mutex mutex;
  bool done = false;
  std::exception_ptr error;
  std::vector<std::function<void(std::exception_ptr)>> callbacks;
};

Event Event::pending(std::shared_ptr<const NativeEvent> native) {
  Event e;
  e.state_ = std::make_shared<State>();
  e.state_->native = std::move(native);
  return e;
}

const NativeEvent* Event::native() const { return state_ ? state_->native.get() : nullptr; }

Event Event::all(const std::vector<Event>& events) {
  std::vector<Event> open;
  std::exception_ptr failed;
  for (const Event& e : events) {
    if (!e.done()) open.push_back(e);
    else if (!failed) failed = e.error();
  }
  if (open.empty()) {
    Event e;
    if (failed) (e = pending()).complete(failed);
    return e;
  }
  if (open.size() == 1 && !failed) return open[0];
  // What the joined events share: how many are still open and the first failure among them.
  struct Join {
    std::mutex mutex;
    std::size_t open = 0;
    std::exception_ptr error;
  };
  auto join = std::make_shared<Join>();
  join->open = open.size();
  join->error = failed;
  Event joined = pending();
  for (const Event& e : open)
    e.then([join, joined](std::exception_ptr error) {
      std::exception_ptr result;
      {
        std::lock_guard<std::mutex> lock(join->mutex);
        if (error && !join->error) join->error = error;
        if (--join->open > 0) return;
        result = join->error;
      }
      joined.complete(result);
    });
  return joined;
}

void Event::complete(std::exception_ptr error) const {
  if (!state_) return;
  std::vector<std::function<void(std::exception_ptr)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->done) return;
    state_->done = true;
    state_->error = error;
    callbacks.swap(state_->callbacks);
  }
  for (auto& f : callbacks) f(error);
}

bool Event::done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

std::exception_ptr Event::error() const {
  if (!state_) return nullptr;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->error;
}

void Event::then(std::function<void(std::exception_ptr)> f) const {
  if (state_) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (!state_->done) {
      state_->callbacks.push_back(std::move(f));
      return;
    }
  }
  f(error());
}

namespace {

thread_local Stream* current = nullptr;
thread_local std::uint64_t generation = 0;
thread_local const std::string* label = nullptr;
const std::string no_label;

}  // namespace

StreamGuard::StreamGuard(Stream& stream, std::uint64_t g)
    : previous_(std::exchange(current, &stream)), previous_generation_(std::exchange(generation, g)) {}
StreamGuard::~StreamGuard() {
  current = previous_;
  generation = previous_generation_;
}
Stream* current_stream() { return current; }
std::uint64_t current_generation() { return generation; }

WorkLabel::WorkLabel(std::string text) : label_(std::move(text)), previous_(std::exchange(label, &label_)) {}
WorkLabel::~WorkLabel() { label = previous_; }
const std::string& current_work_label() { return label ? *label : no_label; }

}  // namespace troupe
