#include "network/network_model.h"

#include <stdexcept>
#include <string>

#include "network/analytical_network.h"
#include "network/flow_network.h"
#include "network/packet_network.h"

namespace parallax {

NetworkModel::NetworkModel(Engine& engine, const Topology& topo, const Router& router)
    : engine_(engine), topo_(topo), router_(router), link_bytes_(topo.link_count(), 0.0) {}

uint64_t NetworkModel::start_flow(DeviceId src, DeviceId dst, Bytes size, FlowCallback on_done,
                                  std::optional<uint64_t> route_key) {
  check_ends(src, dst);
  const uint32_t tag = callbacks_.add(next_flow_id_, engine_.now(), std::move(on_done));
  return launch(src, dst, size, callbacks_, tag, route_key);
}

uint64_t NetworkModel::start_flow(DeviceId src, DeviceId dst, Bytes size, FlowSink& sink, uint32_t tag,
                                  std::optional<uint64_t> route_key, uint32_t weight) {
  check_ends(src, dst);
  if (weight < 1 || weight > 255) {
    throw std::invalid_argument("a flow's weight must be 1 to 255, not " + std::to_string(weight));
  }
  return launch(src, dst, size, sink, tag, route_key, weight);
}

void NetworkModel::check_ends(DeviceId src, DeviceId dst) const {
  // Data lives in GPU, host or switch memory; a NIC only forwards it (and the flow model
  // relies on that: see redundant_resources() in flow_network.cpp).
  for (DeviceId end : {src, dst}) {
    if (topo_.device(end).kind == DeviceKind::kNic) {
      throw std::invalid_argument("a flow cannot start or end at NIC \"" + topo_.device(end).name +
                                  "\": NICs only forward data between GPUs, CPUs and switches");
    }
  }
}

uint64_t NetworkModel::launch(DeviceId src, DeviceId dst, Bytes size, FlowSink& sink, uint32_t tag,
                              std::optional<uint64_t> route_key, uint32_t weight) {
  uint64_t id = next_flow_id_++;
  if (src == dst) {
    // Data already where it is needed: completes now, after the current event.
    engine_.schedule_in(Time::zero(), [this, sink = &sink, tag] { complete(sink, tag); });
    return id;
  }
  path_buffer_.clear();
  router_.route(src, dst, route_key.value_or(id), path_buffer_);
  Time latency;
  for (LinkId l : path_buffer_) {
    latency += topo_.link(l).latency;
    link_bytes_[l.value] += size.value();
  }
  begin(FlowStart{id, latency, size, &path_buffer_, &sink, tag, weight});
  return id;
}

void NetworkModel::complete(FlowSink* sink, uint32_t tag) {
  ++completed_;
  sink->flow_finished(tag);
}

uint32_t NetworkModel::Callbacks::add(uint64_t id, Time start, FlowCallback on_done) {
  uint32_t tag;
  if (free_.empty()) {
    tag = static_cast<uint32_t>(pending_.size());
    pending_.emplace_back();
  } else {
    tag = free_.back();
    free_.pop_back();
  }
  pending_[tag] = Pending{id, start, std::move(on_done)};
  return tag;
}

void NetworkModel::Callbacks::flow_finished(uint32_t tag) {
  Pending done = std::move(pending_[tag]);
  pending_[tag].on_done = nullptr;
  free_.push_back(tag);
  if (done.on_done) done.on_done(FlowCompletion{done.id, done.start, engine_.now()});
}

const std::vector<NetworkModelInfo>& network_models() {
  static const std::vector<NetworkModelInfo> models{
      {"analytical", "closed form: alpha(path) + bytes / bottleneck bandwidth; flows never contend"},
      {"flow", "fluid max-min fair sharing of every link among concurrent flows (progressive "
               "filling), re-solved once per timestamp for the flows a change affects; the path "
               "latency (sum of hops) passes before the data flows"},
      {"packet", "packets of 4 KiB forwarded cut-through link by link, first come first served, "
                 "with credit-based (lossless) flow control: a link's input buffer of twice its "
                 "bandwidth x 2 x latency (at least 8 packets); queues, head-of-line blocking and "
                 "congestion spreading; each flow on its ECMP path, or adaptive routing (the "
                 "topology's packets block sets MTU, buffers and routing); about three events per "
                 "packet per hop"},
  };
  return models;
}

std::unique_ptr<NetworkModel> make_network_model(std::string_view name, Engine& engine,
                                                 const Topology& topo, const Router& router) {
  if (name == "analytical") return std::make_unique<AnalyticalNetwork>(engine, topo, router);
  if (name == "flow") return std::make_unique<FlowNetwork>(engine, topo, router);
  if (name == "packet") {
    PacketNetwork::Options options;
    if (topo.info().packet_mtu) options.mtu = *topo.info().packet_mtu;
    options.buffer = topo.info().packet_link_buffer;
    options.adaptive_routing = topo.info().packet_adaptive_routing;
    return std::make_unique<PacketNetwork>(engine, topo, router, options);
  }
  std::string known;
  for (const auto& m : network_models()) known += (known.empty() ? "" : ", ") + m.name;
  throw std::invalid_argument("unknown network model \"" + std::string(name) + "\" (expected " + known + ")");
}

}  // namespace parallax
