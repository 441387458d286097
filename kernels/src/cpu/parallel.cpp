// The pool of cores behind parallel_tiles: parallel_cores() - 1 helper threads, started on first
// use, each sleeping until a kernel offers it tiles (after a short spin, so the next kernel of a
// chain of parallel ones finds it awake).
#include "cpu/parallel.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "troupe/kernels/threading.hpp"

namespace troupe::cpu {

namespace {

// Threads computing a kernel (callers inside dispatch, and helpers at work).
std::atomic<int> busy{0};
std::atomic<PoolObserver> observer{nullptr};
thread_local int call_depth = 0;

// One parallel_tiles call: its tiles, taken one at a time by whoever runs them.
struct Job {
  void (*run)(void*, std::int64_t) = nullptr;
  void* context = nullptr;
  std::int64_t tiles = 0;
  std::atomic<std::int64_t> next{0};
  std::atomic<int> inside{0};  // helpers that joined and have not left
  int seats = 0;               // helpers still welcome (under the pool's mutex)
  std::mutex error_mutex;
  std::exception_ptr error;

  // Runs tiles until none is left; a helper (`yielding`) leaves earlier, after the tile in hand,
  // once more threads compute than there are cores: another kernel call has begun on a scheduler
  // thread, and the caller finishes the tiles while that call gets the core back.
  void work(bool yielding) {
    for (std::int64_t t = next.fetch_add(1); t < tiles; t = next.fetch_add(1)) {
      try {
        run(context, t);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
      if (yielding && busy.load(std::memory_order_relaxed) > parallel_cores()) return;
    }
  }
};

inline void pause() { __builtin_ia32_pause(); }

// Pauses a caller spends waiting for its helpers' last tiles before it yields its core.
constexpr int kWaitSpins = 200;
// How long a helper looks for the next job before it sleeps, yielding its core to any other
// thread that wants it meanwhile: waking a sleeping thread took up to a millisecond on the VMs
// measured, longer than many tiled kernels (bench/run kernels, lines "pool").
constexpr std::chrono::microseconds kIdleSpin{300};

class Pool {
 public:
  // Offers `job` to `helpers` helpers, starting helpers up to parallel_cores() - 1.
  void open(Job& job, int helpers) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(threads_.size()) < parallel_cores() - 1) threads_.emplace_back([this] { serve(); });
      job.seats = helpers;
      open_.push_back(&job);
      pending_.fetch_add(1, std::memory_order_release);
    }
    for (int i = 0; i < helpers; ++i) wake_.notify_one();
  }

  // Takes `job` off the offers and waits for the helpers that joined it to leave.
  void close(Job& job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = open_.begin(); it != open_.end(); ++it)
        if (*it == &job) {
          open_.erase(it);
          pending_.fetch_sub(1, std::memory_order_relaxed);
          break;
        }
      job.seats = 0;
    }
    // A helper still inside runs its last tile; should it have lost its core, yielding gives it back.
    for (int spins = 0; job.inside.load(std::memory_order_acquire) != 0; ++spins)
      if (spins < kWaitSpins) pause();
      else std::this_thread::yield();
  }

 private:
  // A helper's life: take a seat at an offered job, run its tiles, spin a little, sleep.
  void serve() {
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + kIdleSpin;
      while (pending_.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
      Job* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return !open_.empty(); });
        job = open_.front();
        if (--job->seats == 0) {
          open_.pop_front();
          pending_.fetch_sub(1, std::memory_order_relaxed);
        }
        job->inside.fetch_add(1, std::memory_order_relaxed);
      }
      busy.fetch_add(1, std::memory_order_relaxed);
      const PoolObserver told = observer.load(std::memory_order_relaxed);
      if (told) told(true);
      job->work(true);
      if (told) told(false);
      busy.fetch_sub(1, std::memory_order_relaxed);
      job->inside.fetch_sub(1, std::memory_order_release);  // the job may be gone from here on
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job*> open_;
  std::atomic<int> pending_{0};
  std::vector<std::thread> threads_;
};

// Never destroyed: helpers may sleep in it while the process exits.
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

}  // namespace

KernelCallScope::KernelCallScope() : counted_(call_depth++ == 0) {
  if (counted_) busy.fetch_add(1, std::memory_order_relaxed);
}

KernelCallScope::~KernelCallScope() {
  --call_depth;
  if (counted_) busy.fetch_sub(1, std::memory_order_relaxed);
}

int idle_cores() { return std::max(0, parallel_cores() - busy.load(std::memory_order_relaxed)); }

int helpers_for(std::int64_t tiles, double tile_work) {
  const double by_work = static_cast<double>(tiles) * tile_work / kMinParallelWork - 1;
  if (by_work < 1) return 0;
  const std::int64_t by_tiles = tiles - 1;
  const int idle = idle_cores() - (call_depth > 0 ? 0 : 1);  // a caller outside dispatch is busy too
  return static_cast<int>(std::max<std::int64_t>(0, std::min<std::int64_t>({by_tiles, idle, static_cast<std::int64_t>(by_work)})));
}

void run_tiles(std::int64_t tiles, int helpers, void (*run)(void*, std::int64_t), void* context) {
  Job job;
  job.run = run;
  job.context = context;
  job.tiles = tiles;
  Pool& p = pool();
  p.open(job, helpers);
  job.work(false);
  p.close(job);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace troupe::cpu

namespace troupe {

void set_pool_observer(PoolObserver o) { cpu::observer.store(o, std::memory_order_relaxed); }

}  // namespace troupe
