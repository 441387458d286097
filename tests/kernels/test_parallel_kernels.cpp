// The pool of cores: every kernel that splits its work into tiles (elementwise and the chain's
// walk, casts, reductions, layer norm and its fused add, softmax, the causal mask and the causal
// softmax, cross-entropy, the squared norm, scaling, AdamW, fused attention) gives the same bits on
// 1, 2, 3 and 4 cores as on its caller's thread alone, since its tiles are fixed by the work's size
// and reductions add the tiles' sums in order. And the pool itself: helpers join when cores are
// idle, a tile's exception reaches the caller, and cores taken by concurrent kernel calls are not
// offered twice.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpu/parallel.hpp"
#include "kernels/reference.hpp"
#include "troupe/kernels/attention.hpp"
#include "troupe/kernels/elementwise.hpp"
#include "troupe/kernels/layernorm.hpp"
#include "troupe/kernels/loss.hpp"
#include "troupe/kernels/optim.hpp"
#include "troupe/kernels/reduce.hpp"
#include "troupe/kernels/select.hpp"
#include "troupe/kernels/registry.hpp"
#include "troupe/kernels/softmax.hpp"
#include "troupe/kernels/threading.hpp"

using namespace troupe;
using namespace troupe::kernels;
using test::random_tensor;

namespace {

// Restores the pool's size when a test ends.
class ParallelKernels : public ::testing::Test {
 protected:
  ParallelKernels() : saved_(parallel_cores()) {}
  ~ParallelKernels() override { set_parallel_cores(saved_); }

  // Runs `make` on 1 core, then on 2, 3 and 4, and expects every output's bytes to be equal.
  static void expect_same_bits_on_any_cores(const std::string& what, const std::function<std::vector<Tensor>()>& make) {
    set_parallel_cores(1);
    const std::vector<Tensor> want = make();
    for (int cores = 2; cores <= 4; ++cores) {
      set_parallel_cores(cores);
      const std::vector<Tensor> got = make();
      ASSERT_EQ(got.size(), want.size()) << what;
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].shape(), want[i].shape()) << what << " output " << i;
        const Tensor g = got[i].contiguous(), w = want[i].contiguous();
        EXPECT_EQ(std::memcmp(g.raw_data(), w.raw_data(), w.nbytes()), 0)
            << what << " output " << i << " differs on " << cores << " cores";
      }
    }
  }

 private:
  int saved_;
};

const DType kTypes[] = {DType::f32, DType::bf16};

TEST_F(ParallelKernels, ElementwiseAndCastsGiveTheSameBitsOnAnyCores) {
  for (DType dt : kTypes) {
    const Tensor x = random_tensor({512, 1000}, 1, -4, 4).to(dt);
    const Tensor bias = random_tensor({1000}, 2).to(dt);
    const Tensor other = random_tensor({512, 1000}, 3).to(dt);
    const std::string name = dtype_name(dt);
    expect_same_bits_on_any_cores("gelu " + name, [&] { return std::vector<Tensor>{gelu(x)}; });
    expect_same_bits_on_any_cores("gelu_backward " + name,
                                  [&] { return std::vector<Tensor>{unary_backward(UnaryOp::gelu, other, x)}; });
    expect_same_bits_on_any_cores("broadcast add " + name, [&] { return std::vector<Tensor>{add(x, bias)}; });
    expect_same_bits_on_any_cores("bias_gelu " + name, [&] {
      std::vector<Tensor> out{Tensor::empty(x.shape(), dt)};
      dispatch("bias_gelu", {x, bias}, out);
      return out;
    });
    // A transposed (strided) operand: the walk's tiles cut its runs anywhere.
    expect_same_bits_on_any_cores("strided mul " + name,
                                  [&] { return std::vector<Tensor>{mul(x.transpose(0, 1), other.transpose(0, 1))}; });
  }
  const Tensor wide = random_tensor({700, 1024}, 4, -3, 3);
  expect_same_bits_on_any_cores("cast to bf16", [&] { return std::vector<Tensor>{wide.to(DType::bf16)}; });
  expect_same_bits_on_any_cores("strided cast to f32",
                                [&] { return std::vector<Tensor>{wide.to(DType::bf16).transpose(0, 1).to(DType::f32)}; });
}

TEST_F(ParallelKernels, RowKernelsGiveTheSameBitsOnAnyCores) {
  for (DType dt : kTypes) {
    const std::string name = dtype_name(dt);
    const Tensor x = random_tensor({1030, 256}, 5, -3, 3).to(dt);
    const Tensor r = random_tensor({1030, 256}, 6).to(dt);
    const Tensor gamma = random_tensor({256}, 7, 0.5, 1.5).to(dt), beta = random_tensor({256}, 8).to(dt);
    const Tensor dy = random_tensor({1030, 256}, 9).to(dt);
    expect_same_bits_on_any_cores("layernorm " + name, [&] {
      const LayerNormOutput o = layernorm(x, gamma, beta);
      return std::vector<Tensor>{o.y, o.mean, o.rstd};
    });
    expect_same_bits_on_any_cores("add_layernorm " + name, [&] {
      const AddLayerNormOutput o = add_layernorm(x, r, gamma, beta);
      return std::vector<Tensor>{o.sum, o.y, o.mean, o.rstd};
    });
    // 1030 rows: 33 groups of 32 rows, the last one short, summed into dgamma and dbeta in order.
    expect_same_bits_on_any_cores("layernorm_backward " + name, [&] {
      const LayerNormOutput o = layernorm(x, gamma, beta);
      const LayerNormGrads g = layernorm_backward(dy, x, gamma, o.mean, o.rstd);
      return std::vector<Tensor>{g.dx, g.dgamma, g.dbeta};
    });
    // 2100 rows: 66 groups, folded 64 at a time and then the last 2.
    const Tensor tall = random_tensor({2100, 64}, 18, -3, 3).to(dt), dtall = random_tensor({2100, 64}, 19).to(dt);
    const Tensor g64 = random_tensor({64}, 20, 0.5, 1.5).to(dt);
    expect_same_bits_on_any_cores("layernorm_backward over many rows " + name, [&] {
      const LayerNormOutput o = layernorm(tall, g64, g64);
      const LayerNormGrads g = layernorm_backward(dtall, tall, g64, o.mean, o.rstd);
      return std::vector<Tensor>{g.dx, g.dgamma, g.dbeta};
    });
    expect_same_bits_on_any_cores("softmax " + name, [&] {
      const Tensor y = softmax(x), ly = log_softmax(x);
      return std::vector<Tensor>{y, ly, softmax_backward(dy, y), log_softmax_backward(dy, ly)};
    });
    const Tensor scores = random_tensor({3, 4, 96, 96}, 21, -3, 3).to(dt);
    expect_same_bits_on_any_cores("causal_mask " + name, [&] { return std::vector<Tensor>{causal_mask(scores, -1e4)}; });
    expect_same_bits_on_any_cores("causal_softmax " + name, [&] {
      const Tensor y = causal_softmax(scores, 0.125);
      return std::vector<Tensor>{y, causal_softmax_backward(scores, y, 0.125)};
    });
    const Tensor targets = Tensor::empty({1030}, DType::i64);
    for (std::int64_t i = 0; i < 1030; ++i) targets.data<std::int64_t>()[i] = (i * 37) % 256;
    expect_same_bits_on_any_cores("cross_entropy " + name, [&] {
      const Tensor loss = cross_entropy(x, targets);
      const Tensor one = Tensor::full({}, 1.0, loss.dtype());
      return std::vector<Tensor>{loss, cross_entropy_backward(one, x, targets)};
    });
  }
}

TEST_F(ParallelKernels, ReductionsGiveTheSameBitsOnAnyCores) {
  for (DType dt : kTypes) {
    const std::string name = dtype_name(dt);
    const Tensor x = random_tensor({1030, 1000}, 16, -2, 2).to(dt);
    const Tensor wide = random_tensor({3, 700, 40}, 17, -2, 2).to(dt);
    expect_same_bits_on_any_cores("column sums (bias gradients) " + name,
                                  [&] { return std::vector<Tensor>{sum(x, {0}), mean(x, {0}), max(x, {0})}; });
    expect_same_bits_on_any_cores("row sums " + name,
                                  [&] { return std::vector<Tensor>{sum(x, {1}), mean(x, {-1}), max(x, {1})}; });
    expect_same_bits_on_any_cores("middle axis " + name, [&] {
      return std::vector<Tensor>{sum(wide, {1}), sum_to_shape(x, {1, 1000}), sum(x, {})};
    });
  }
}

TEST_F(ParallelKernels, TheGradientPathAndAttentionGiveTheSameBitsOnAnyCores) {
  const Tensor p0 = random_tensor({300000}, 10), g = random_tensor({300000}, 11);
  expect_same_bits_on_any_cores("adamw", [&] {
    Tensor p = p0.clone(), m = Tensor::zeros(p0.shape(), DType::f32), v = Tensor::zeros(p0.shape(), DType::f32);
    for (std::int64_t step = 1; step <= 3; ++step) adamw_update_(p, g, m, v, AdamWParams{}, step);
    return std::vector<Tensor>{p, m, v};
  });
  expect_same_bits_on_any_cores("squared_norm and scale_", [&] {
    const Tensor scaled = g.clone();
    scale_(scaled, 0.37);
    return std::vector<Tensor>{Tensor::full({}, squared_norm(g), DType::f64), scaled};
  });
  for (DType dt : kTypes) {
    const Tensor q = random_tensor({2, 4, 150, 32}, 12).to(dt), k = random_tensor({2, 4, 150, 32}, 13).to(dt);
    const Tensor v = random_tensor({2, 4, 150, 32}, 14).to(dt), dy = random_tensor({2, 4, 150, 32}, 15).to(dt);
    AttentionDropout drop;
    drop.p = 0.1;
    drop.site = 3;
    expect_same_bits_on_any_cores(std::string("causal_attention ") + dtype_name(dt), [&] {
      const AttentionResult r = causal_attention(q, k, v, 0.17, drop);
      const AttentionGrads gr = causal_attention_backward(dy, q, k, v, r.y, r.lse, 0.17, drop);
      return std::vector<Tensor>{r.y, r.lse, gr.dq, gr.dk, gr.dv};
    });
  }
}

// What the pool's observer heard: helpers starting and stopping a kernel call's tiles.
std::atomic<int> observed_starts{0}, observed_stops{0};
void count_pool_events(bool starts) { ++(starts ? observed_starts : observed_stops); }

TEST_F(ParallelKernels, IdleCoresJoinATiledKernelAndTheObserverHearsThem) {
  set_parallel_cores(4);
  set_pool_observer(&count_pool_events);
  std::mutex m;
  std::set<std::thread::id> seen;
  std::atomic<int> arrived{0};
  // Each tile waits (boundedly) until a second thread has arrived, so one thread cannot take them all.
  cpu::parallel_tiles(8, 1e6, [&](std::int64_t) {
    ++arrived;
    for (int i = 0; i < 2000000 && arrived.load() < 2; ++i) std::this_thread::yield();
    std::lock_guard<std::mutex> lock(m);
    seen.insert(std::this_thread::get_id());
  });
  EXPECT_GE(seen.size(), 2u);
  EXPECT_EQ(cpu::idle_cores(), 4);  // every helper has left
  set_pool_observer(nullptr);
  EXPECT_GE(observed_starts.load(), static_cast<int>(seen.size()) - 1) << "each helper that ran tiles was heard";
  EXPECT_EQ(observed_starts.load(), observed_stops.load());

  set_parallel_cores(1);  // no idle core: the caller runs every tile
  seen.clear();
  cpu::parallel_tiles(8, 1e6, [&](std::int64_t) { seen.insert(std::this_thread::get_id()); });
  EXPECT_EQ(seen, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST_F(ParallelKernels, SmallWorkStaysOnTheCallersThread) {
  set_parallel_cores(4);
  std::set<std::thread::id> seen;
  cpu::parallel_tiles(4, 100, [&](std::int64_t) { seen.insert(std::this_thread::get_id()); });
  EXPECT_EQ(seen, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST_F(ParallelKernels, ATilesErrorReachesTheCallerAfterTheOtherTilesRan) {
  set_parallel_cores(3);
  std::atomic<int> ran{0};
  try {
    cpu::parallel_tiles(16, 1e6, [&](std::int64_t t) {
      ++ran;
      if (t == 5) throw std::runtime_error("tile 5 failed");
    });
    FAIL() << "the tile's error was lost";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "tile 5 failed");
  }
  EXPECT_EQ(ran.load(), 16);
  EXPECT_EQ(cpu::idle_cores(), 3);
}

TEST_F(ParallelKernels, CoresBusyWithOtherKernelCallsAreNotOffered) {
  set_parallel_cores(2);
  {
    const cpu::KernelCallScope one;  // this thread computes a kernel: one core left
    EXPECT_EQ(cpu::idle_cores(), 1);
    const cpu::KernelCallScope nested;  // a kernel calling another counts once
    EXPECT_EQ(cpu::idle_cores(), 1);
    std::thread other([] {
      const cpu::KernelCallScope two;  // a second caller takes the last core
      EXPECT_EQ(cpu::idle_cores(), 0);
      EXPECT_EQ(cpu::helpers_for(8, 1e6), 0);
    });
    other.join();
    EXPECT_EQ(cpu::helpers_for(8, 1e6), 1);
  }
  EXPECT_EQ(cpu::idle_cores(), 2);
}

}  // namespace
