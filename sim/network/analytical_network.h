// The closed-form network: a flow takes α(path) + size / β(bottleneck link of its path), as if
// it were alone on the network. No contention, so it answers instantly and is the reference
// that the contention-aware models must match for a lone flow.
#pragma once

#include "network/network_model.h"

namespace parallax {

class AnalyticalNetwork final : public NetworkModel {
 public:
  using NetworkModel::NetworkModel;
  std::string_view name() const override { return "analytical"; }

 protected:
  void begin(const FlowStart& flow) override;
};

}  // namespace parallax
