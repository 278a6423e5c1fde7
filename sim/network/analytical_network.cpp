#include "network/analytical_network.h"

#include <algorithm>

namespace parallax {

void AnalyticalNetwork::begin(FlowStart&& flow) {
  Bandwidth bottleneck(std::numeric_limits<double>::infinity());
  for (LinkId l : *flow.path) bottleneck = std::min(bottleneck, topo_.resource_capacity(topo_.link(l).resource));
  Time duration = flow.latency + transfer_time(flow.size, bottleneck);
  engine_.schedule_in(duration, [this, id = flow.id, start = flow.start, cb = std::move(flow.on_done)]() mutable {
    complete(id, start, cb);
  });
}

}  // namespace parallax
