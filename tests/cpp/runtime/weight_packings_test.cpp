// runtime/weight_packings.h: one packing per weight for every plan of the process, never a stale
// one (an in-place update, another place in the storage, a freed storage).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "runtime/weight_packings.h"
#include "verifuse/support/status.h"

namespace verifuse::runtime {
namespace {

// A "packing" that remembers what it was made from: the sum of the source and a serial number.
struct FakePacking {
  double sum;
  int serial;
};

class Packer {
 public:
  StatusOr<std::shared_ptr<const FakePacking>> operator()(const at::Tensor& w) {
    ++made;
    return std::make_shared<const FakePacking>(FakePacking{w.sum().item<double>(), made});
  }
  int made = 0;
};

TEST(WeightPackings, TwoViewsOfOneWeightShareOnePacking) {
  WeightPackings<FakePacking> table(/*keepStrong=*/false);
  Packer pack;
  at::Tensor w = at::randn({8, 4});
  at::Tensor view = w.view({8, 4});  // another TensorImpl, same storage and place (a second plan's)
  bool found = true;
  auto first = table.get({w}, "f32", [&] { return pack(w); }, &found);
  EXPECT_FALSE(found);
  auto second = table.get({view}, "f32", [&] { return pack(view); }, &found);
  EXPECT_TRUE(found);
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(pack.made, 1);
  EXPECT_TRUE(table.holds({view}, "f32"));
  // Another kind of packing (another format) of the same weight is its own.
  auto bf16 = table.get({w}, "bf16", [&] { return pack(w); });
  EXPECT_NE(bf16.get(), first.get());
  EXPECT_EQ(pack.made, 2);
}

TEST(WeightPackings, AnInPlaceUpdateRepacks) {
  WeightPackings<FakePacking> table(/*keepStrong=*/false);
  Packer pack;
  at::Tensor w = at::ones({4, 4});
  auto before = table.get({w}, "f32", [&] { return pack(w); });
  w.mul_(2);  // as load_state_dict's copy_ into a parameter: the version moves
  EXPECT_FALSE(table.holds({w}, "f32"));
  auto after = table.get({w}, "f32", [&] { return pack(w); });
  EXPECT_NE(before.get(), after.get());
  EXPECT_DOUBLE_EQ(after->sum, 32.0);
  EXPECT_DOUBLE_EQ(before->sum, 16.0);  // the first plan keeps what it packed
}

TEST(WeightPackings, AnotherPlaceInTheStorageIsAnotherWeight) {
  WeightPackings<FakePacking> table(/*keepStrong=*/false);
  Packer pack;
  at::Tensor base = at::arange(32, at::kFloat).view({8, 4});
  at::Tensor top = base.narrow(0, 0, 4), bottom = base.narrow(0, 4, 4), transposed = base.t();
  auto a = table.get({top}, "f32", [&] { return pack(top); });
  auto b = table.get({bottom}, "f32", [&] { return pack(bottom); });
  auto c = table.get({transposed}, "f32", [&] { return pack(transposed); });
  EXPECT_EQ(pack.made, 3);
  EXPECT_NE(a->sum, b->sum);
  EXPECT_NE(a.get(), c.get());
}

TEST(WeightPackings, CompanionTensorsMustBeTheSameToo) {
  WeightPackings<FakePacking> table(/*keepStrong=*/true);
  Packer pack;
  at::Tensor q = at::ones({4, 4}), scale = at::ones({4}), otherScale = at::full({4}, 2.0);
  auto a = table.get({q, scale}, "int4", [&] { return pack(q); });
  auto b = table.get({q, otherScale}, "int4", [&] { return pack(q); });
  EXPECT_NE(a.get(), b.get());
  auto c = table.get({q, otherScale}, "int4", [&] { return pack(q); });
  EXPECT_EQ(b.get(), c.get());
  EXPECT_EQ(pack.made, 2);
}

TEST(WeightPackings, AWeakTableLetsThePackingGoWithItsLastHolder) {
  WeightPackings<FakePacking> table(/*keepStrong=*/false);
  Packer pack;
  at::Tensor w = at::ones({4, 4});
  auto held = table.get({w}, "f32", [&] { return pack(w); });
  std::weak_ptr<const FakePacking> watch = held;
  held.reset();
  EXPECT_TRUE(watch.expired());
  EXPECT_FALSE(table.holds({w}, "f32"));
  (void)table.get({w}, "f32", [&] { return pack(w); });
  EXPECT_EQ(pack.made, 2);
}

TEST(WeightPackings, AStrongTableKeepsItWhileTheWeightLives) {
  WeightPackings<FakePacking> table(/*keepStrong=*/true);
  Packer pack;
  at::Tensor w = at::ones({4, 4});
  std::weak_ptr<const FakePacking> watch = table.get({w}, "f32", [&] { return pack(w); });
  EXPECT_FALSE(watch.expired());
  (void)table.get({w}, "f32", [&] { return pack(w); });
  EXPECT_EQ(pack.made, 1);
  w = at::Tensor();  // the weight's storage dies; the next miss sweeps its packing out
  at::Tensor other = at::zeros({4, 4});
  (void)table.get({other}, "f32", [&] { return pack(other); });
  EXPECT_TRUE(watch.expired());
}

TEST(WeightPackings, ARefusalIsKeptLikeAPacking) {
  WeightPackings<FakePacking> table(/*keepStrong=*/true);
  int tries = 0;
  at::Tensor w = at::ones({4, 4});
  auto refuse = [&]() -> StatusOr<std::shared_ptr<const FakePacking>> {
    ++tries;
    return unimplemented("not this weight");
  };
  EXPECT_EQ(table.get({w}, "f32", refuse), nullptr);
  EXPECT_EQ(table.get({w}, "f32", refuse), nullptr);
  EXPECT_EQ(tries, 1);
  EXPECT_FALSE(table.holds({w}, "f32"));
}

TEST(WeightPackings, InferenceTensorsAreNotSharedByTheWeakTable) {
  WeightPackings<FakePacking> weak(/*keepStrong=*/false), strong(/*keepStrong=*/true);
  Packer pack;
  at::Tensor w;
  {
    c10::InferenceMode guard;
    w = at::ones({4, 4});  // no version counter: an in-place update could not be seen
  }
  auto a = weak.get({w}, "f32", [&] { return pack(w); });
  auto b = weak.get({w}, "f32", [&] { return pack(w); });
  EXPECT_NE(a.get(), b.get());
  auto c = strong.get({w}, "f32", [&] { return pack(w); });
  auto d = strong.get({w}, "f32", [&] { return pack(w); });
  EXPECT_EQ(c.get(), d.get());
}

TEST(WeightPackings, ConcurrentPackersOfOneWeightEndWithOnePacking) {
  // Packing runs without the table's lock (a 545 MB LM head must not hold up other lookups), so
  // two threads may both pack one weight; the second to finish takes the first one's packing.
  WeightPackings<FakePacking> table(/*keepStrong=*/false);
  at::Tensor w = at::ones({4, 4});
  std::atomic<int> made{0};
  auto slowPack = [&]() -> StatusOr<std::shared_ptr<const FakePacking>> {
    const int serial = ++made;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return std::make_shared<const FakePacking>(FakePacking{16.0, serial});
  };
  std::shared_ptr<const FakePacking> a, b;
  std::thread first([&] { a = table.get({w}, "f32", slowPack); });
  std::thread second([&] { b = table.get({w}, "f32", slowPack); });
  first.join();
  second.join();
  EXPECT_EQ(a.get(), b.get());
  EXPECT_LE(made.load(), 2);
  // And a lookup of another weight is not held up by a packing in progress: the packing waits
  // for the lookup to finish (were the lock held while packing, the lookup would never return).
  at::Tensor other = at::zeros({4, 4});
  auto held = table.get({other}, "f32", slowPack);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> started{false};
  std::thread packing([&] {
    at::Tensor third = at::full({4, 4}, 3.0);
    (void)table.get({third}, "f32", [&]() -> StatusOr<std::shared_ptr<const FakePacking>> {
      started = true;
      released.wait();
      return std::make_shared<const FakePacking>(FakePacking{48.0, 0});
    });
  });
  while (!started) std::this_thread::yield();
  auto lookup = std::async(std::launch::async, [&] {
    bool found = false;
    (void)table.get({other}, "f32", slowPack, &found);
    return found;
  });
  const bool answered = lookup.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  release.set_value();
  packing.join();
  ASSERT_TRUE(answered);
  EXPECT_TRUE(lookup.get());
}

}  // namespace
}  // namespace verifuse::runtime
