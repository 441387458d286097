// CUDA streams (troupe/kernels/stream.hpp): work runs at once on the caller's thread with the
// device's stream as the launch stream, so its kernels and copies run on the GPU in queue order
// while the caller goes on. The handles each work item holds are let go of only once the GPU has
// passed the next recorded event (a host function queued behind it), so no block is reused while a
// kernel may still read or write it. Waits for another CUDA stream's event stay on the GPU
// (cudaStreamWaitEvent); an event of another kind (a host stream's) is waited for by a host
// function, which holds the CUDA stream until it completes.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/common.hpp"
#include "troupe/kernels/cuda.hpp"
#include "troupe/kernels/stream.hpp"

namespace troupe {

namespace cuda {

namespace {

thread_local cudaStream_t current_launch = nullptr;

}  // namespace

cudaStream_t launch_stream() { return current_launch; }

LaunchOn::LaunchOn(cudaStream_t stream) : previous_(std::exchange(current_launch, stream)) {}
LaunchOn::~LaunchOn() { current_launch = previous_; }

void finish_launch(const char* what) {
  check_cuda(cudaGetLastError(), what);
  if (!current_launch) check_cuda(cudaStreamSynchronize(nullptr), what);
}

}  // namespace cuda

namespace {

using cuda::check_cuda;

// A CUDA event, destroyed with the last Event that names it.
class CudaEvent final : public NativeEvent {
 public:
  CudaEvent() { check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreateWithFlags"); }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// What a host function queued behind a recorded event does: complete the stream's own part of it
// and let go of the handles of the work queued before it.
struct Passed {
  Event reached;
  std::exception_ptr error;
  std::vector<std::function<void()>> held;
};

void CUDART_CB on_passed(void* p) {
  std::unique_ptr<Passed> passed(static_cast<Passed*>(p));
  passed->held.clear();  // the tensors' blocks go back to the caching allocator (no CUDA call)
  passed->reached.complete(passed->error);
}

// Holds a CUDA stream until a host stream's event completes.
void CUDART_CB wait_on_host(void* p) {
  std::unique_ptr<Event> event(static_cast<Event*>(p));
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  event->then([&](std::exception_ptr) {
    std::lock_guard<std::mutex> lock(m);
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return done; });
}

class CudaStream final : public Stream {
 public:
  CudaStream(int index, std::string name) : index_(index), name_(std::move(name)) {
    const int count = cuda_device_count();
    TROUPE_CHECK(index >= 0 && index < count, device_mismatch, "a stream on cuda:", index,
                 " requested, but this machine has ", count, " CUDA device(s)");
    check_cuda(cudaSetDevice(index_), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }

  ~CudaStream() override {
    cudaSetDevice(index_);
    cudaStreamSynchronize(stream_);  // the host functions queued behind it have run
    cudaStreamDestroy(stream_);
  }

  const std::string& name() const override { return name_; }

  void enqueue(std::function<void()> work) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The stream failed (later work is skipped until a restart), or the work is a failed step's, late.
      if (error_ || current_generation() < generation_) return;
    }
    std::exception_ptr failed;
    try {
      check_cuda(cudaSetDevice(index_), "cudaSetDevice");
      const cuda::LaunchOn on(stream_);
      work();
    } catch (const Error& e) {
      failed = std::make_exception_ptr(Error(e.kind(), labelled(e.message())));
    } catch (const std::exception& e) {
      failed = std::make_exception_ptr(Error(ErrorKind::runtime, labelled(e.what())));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed && !error_) error_ = failed;
    held_.push_back(std::move(work));
  }

  Event record() override {
    auto native = std::make_shared<CudaEvent>();
    Event recorded = Event::pending(native);
    auto passed = std::make_unique<Passed>();
    passed->reached = Event::pending();
    std::vector<Event> parts;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      passed->held.swap(held_);
      passed->error = error_;
      std::erase_if(waited_, [](const Event& e) { return e.done() && !e.error(); });
      parts = waited_;
    }
    parts.push_back(passed->reached);
    // Complete once the GPU passed this point and every event the stream waited for is complete
    // (their failures are this stream's too).
    Event::all(parts).then([recorded](std::exception_ptr e) { recorded.complete(e); });
    check_cuda(cudaSetDevice(index_), "cudaSetDevice");
    cudaError_t rc = cudaEventRecord(native->get(), stream_);
    if (rc == cudaSuccess) rc = cudaLaunchHostFunc(stream_, on_passed, passed.get());
    if (rc == cudaSuccess) {
      passed.release();  // on_passed owns it now
    } else {
      (void)cudaGetLastError();
      passed->reached.complete(std::make_exception_ptr(
          Error(ErrorKind::runtime, name_ + ": recording an event failed: " + cudaGetErrorString(rc))));
    }
    return recorded;
  }

  void wait(const Event& event) override {
    if (event.done() && !event.error()) return;  // nothing to wait for
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (current_generation() < generation_) return;
      waited_.push_back(event);
    }
    if (event.done()) return;  // failed: the next record carries it
    check_cuda(cudaSetDevice(index_), "cudaSetDevice");
    if (const auto* native = dynamic_cast<const CudaEvent*>(event.native())) {
      check_cuda(cudaStreamWaitEvent(stream_, native->get(), 0), "cudaStreamWaitEvent");
      return;
    }
    auto held = std::make_unique<Event>(event);
    check_cuda(cudaLaunchHostFunc(stream_, wait_on_host, held.get()), "cudaLaunchHostFunc");
    held.release();
  }

  void restart(std::uint64_t generation) override {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = nullptr;
    generation_ = generation;
    waited_.clear();
  }

 private:
  static std::string labelled(const std::string& message) {
    const std::string& label = current_work_label();
    return label.empty() ? message : label + ": " + message;
  }

  int index_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::mutex mutex_;
  std::exception_ptr error_;              // the first failure since the last restart
  std::uint64_t generation_ = 0;          // the last restart's
  std::vector<std::function<void()>> held_;  // work run since the last record, holding its tensors
  std::vector<Event> waited_;             // events waited for since the last restart
};

}  // namespace

std::shared_ptr<Stream> make_cuda_stream(int index, std::string name) {
  return std::make_shared<CudaStream>(index, std::move(name));
}

}  // namespace troupe
