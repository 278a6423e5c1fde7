// What the serving tests share: a step timer of a fixed time, for closed-form queues.
#pragma once

#include "serving/fleet.h"

namespace parallax::test {

/// Every engine step takes `t`, whatever the batch.
class ConstantTimer final : public StepTimer {
 public:
  explicit ConstantTimer(Time t) : t_(t) {}
  Time step_time(const RaggedBatch&) override { return t_; }

 private:
  Time t_;
};

}  // namespace parallax::test
