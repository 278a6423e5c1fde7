#include "network/analytical_network.h"

#include <algorithm>

namespace parallax {

void AnalyticalNetwork::begin(const FlowStart& flow) {
  Bandwidth bottleneck(std::numeric_limits<double>::infinity());
  for (LinkId l : *flow.path) bottleneck = std::min(bottleneck, topo_.resource_capacity(topo_.link(l).resource));
  Time duration = flow.latency + transfer_time(flow.size, bottleneck);
  engine_.schedule_in(duration, [this, sink = flow.sink, tag = flow.tag] { complete(sink, tag); });
}

}  // namespace parallax
