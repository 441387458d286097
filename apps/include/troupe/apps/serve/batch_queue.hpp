#pragma once
// The bounded queue between troupe-serve's HTTP threads and inference: requests wait here, and
// worker threads take them in batches of up to max_batch, waiting up to max_wait for a batch to
// fill once its first request is in (dynamic batching); a batch that runs in steps may take the
// requests that arrive meanwhile into its next step (continuous batching). A full queue refuses new requests at once,
// so the server can answer 503 instead of letting latency grow without bound. Destruction runs
// every request already queued, then joins the workers.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "troupe/kernels/error.hpp"

namespace troupe::apps::serve {

/// Jobs of type Job, run in batches by `workers` threads.
template <class Job>
class BatchQueue {
 public:
  /// Runs one batch (1 to max_batch jobs, in arrival order); must answer each job, and those it
  /// takes from `queue` (take_waiting()) while it runs.
  using RunBatch = std::function<void(std::vector<Job>& batch, BatchQueue& queue)>;

  BatchQueue(std::size_t capacity, int max_batch, std::chrono::milliseconds max_wait, int workers, RunBatch run)
      : capacity_(capacity), max_batch_(static_cast<std::size_t>(max_batch)), max_wait_(max_wait), run_(std::move(run)) {
    TROUPE_CHECK(capacity >= 1 && max_batch >= 1 && workers >= 1 && max_wait.count() >= 0, invalid_argument,
                 "serve: the queue needs capacity, batch size and workers >= 1 and a wait >= 0, got ", capacity, ", ",
                 max_batch, ", ", workers, ", ", max_wait.count(), " ms");
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { work(); });
  }
  ~BatchQueue() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  BatchQueue(const BatchQueue&) = delete;
  BatchQueue& operator=(const BatchQueue&) = delete;

  /// Queues `job`; false (and `job` untouched) when capacity jobs are already waiting.
  bool try_push(Job& job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (queue_.size() >= capacity_ || stopping_) return false;
      queue_.push_back(std::move(job));
    }
    ready_.notify_all();  // a worker filling its batch, or an idle one
    return true;
  }
  /// Takes up to `most` waiting jobs at once, without waiting for any: for a batch that runs in
  /// steps, to let the requests that came meanwhile join it.
  std::vector<Job> take_waiting(std::size_t most) {
    std::lock_guard<std::mutex> lock(mutex_);
    return take(most);
  }
  /// The most jobs a batch holds.
  std::size_t max_batch() const { return max_batch_; }
  /// Jobs waiting (not yet taken by a worker).
  std::size_t depth() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.size();
  }

 private:
  void work() {
    for (;;) {
      std::vector<Job> batch;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left
        if (queue_.size() < max_batch_ && !stopping_)  // let the batch fill, for at most max_wait
          ready_.wait_until(lock, std::chrono::steady_clock::now() + max_wait_,
                            [this] { return stopping_ || queue_.size() >= max_batch_; });
        batch = take(max_batch_);
      }
      run_(batch, *this);
    }
  }
  // Up to `most` jobs from the front; the caller holds mutex_.
  std::vector<Job> take(std::size_t most) {
    std::vector<Job> jobs;
    while (!queue_.empty() && jobs.size() < most) {
      jobs.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    return jobs;
  }

  const std::size_t capacity_, max_batch_;
  const std::chrono::milliseconds max_wait_;
  RunBatch run_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace troupe::apps::serve
