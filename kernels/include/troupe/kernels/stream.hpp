#pragma once
// Stream-ordered execution (CUDA's model, for any device): a stream is an in-order queue of a
// device's work; an event marks how far a stream's work had got when it was recorded. While a
// thread has a current stream (StreamGuard), kernel calls (dispatch) and host copies
// (Tensor::copy_from) are queued on it instead of run: the caller gets its output handles at
// once and passes them on with an event, and a consumer on another stream waits for that event on
// the stream, not on its own thread. The host hears of completion through Event::then, never by
// waiting. A failure fails the events recorded after it on its stream (and on the streams that
// waited for them) until the stream is restarted, so it reaches whoever waits first. Work carries
// the generation of the guard it was queued under (a step), so a failed step's late work can
// neither run nor fail the next step's.

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace troupe {

/// A device's own handle of an event (a CUDA event), which that device's streams wait for
/// without the host; each device's streams know their own kind.
class NativeEvent {
 public:
  virtual ~NativeEvent() = default;
};

/// The completion of the work queued on a stream before the event was recorded: it happens once,
/// with the first failure of that work or with none. A default-constructed Event is complete.
class Event {
 public:
  Event() = default;
  /// An event nothing has completed yet, for the stream that records it (Stream::record), with
  /// that device's own handle of it when it has one.
  static Event pending(std::shared_ptr<const NativeEvent> native = nullptr);
  /// An event that completes when every one of `events` has, with the first failure among them.
  static Event all(const std::vector<Event>& events);
  /// Completes a pending event (once; later calls do nothing) and runs its callbacks here.
  void complete(std::exception_ptr error = nullptr) const;
  /// True when there is nothing left to wait for.
  bool done() const;
  /// The failure it completed with (null while pending or when the work succeeded).
  std::exception_ptr error() const;
  /// Runs `f(error)` once the event completes: at once on this thread when it has, else on the
  /// thread that completes it (a stream's), so `f` must be short and must not block.
  void then(std::function<void(std::exception_ptr)> f) const;
  /// The device's own handle of the event, or null.
  const NativeEvent* native() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

/// An in-order queue of one device's work. Its methods are thread-safe; work runs in the order it
/// was queued, after every event waited for before it.
class Stream {
 public:
  virtual ~Stream() = default;
  /// The stream's name, for errors and traces ("cpu stream 1").
  virtual const std::string& name() const = 0;
  /// Queues `work`, named by the thread's WorkLabel: if it throws, the error (prefixed by the
  /// label) fails the events recorded after it and the work queued after it is skipped, until
  /// restart().
  virtual void enqueue(std::function<void()> work) = 0;
  /// An event that completes once the work queued so far has run (or failed).
  virtual Event record() = 0;
  /// Makes the work queued after this call wait until `event` completes; a failed event fails this
  /// stream as its own work would.
  virtual void wait(const Event& event) = 0;
  /// Begins `generation` (a new step): work queued after this call runs again after a failure,
  /// and work queued later under a guard of an earlier generation (a failed step's acts that came
  /// late) is skipped and fails nothing.
  virtual void restart(std::uint64_t generation) = 0;
};

/// A stream of the host's cores: a thread of its own runs its queue (kernels it runs still use
/// the parallel kernels' pool). Destroying it runs what is queued first.
std::shared_ptr<Stream> make_cpu_stream(std::string name);
/// A stream of CUDA device `index`: work runs at once on the caller's thread with the device's
/// stream as the one CUDA kernels and copies launch on, so the kernels run in queue order on the
/// GPU while the caller goes on; the handles the work holds are kept until the GPU has passed the
/// next recorded event; waits for another CUDA stream's event stay on the GPU. Throws
/// `unsupported` in a build without CUDA, or naming the device when it is absent.
std::shared_ptr<Stream> make_cuda_stream(int index, std::string name);

/// Makes `stream` the thread's current stream while it lives, for work of `generation` (guards nest).
class StreamGuard {
 public:
  explicit StreamGuard(Stream& stream, std::uint64_t generation = 0);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream* previous_;
  std::uint64_t previous_generation_;
};

/// The thread's current stream, or null: kernels then run on the calling thread.
Stream* current_stream();
/// The generation of the thread's current guard (0 without one).
std::uint64_t current_generation();

/// Names the work this thread queues while it lives (which op, step and micro-batch), so that the
/// error a failing kernel raises later on its stream says whose work it was. Labels nest.
class WorkLabel {
 public:
  explicit WorkLabel(std::string label);
  ~WorkLabel();
  WorkLabel(const WorkLabel&) = delete;
  WorkLabel& operator=(const WorkLabel&) = delete;

 private:
  std::string label_;
  const std::string* previous_;
};

/// The thread's current work label ("" when none).
const std::string& current_work_label();

}  // namespace troupe
