#include "network/packet_network.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace parallax {
namespace {

// A slot of `items` for a new record: a freed one if any, else a new one at the end.
template <class T>
uint32_t take_slot(std::vector<T>& items, std::vector<uint32_t>& free) {
  if (free.empty()) {
    items.emplace_back();
    return static_cast<uint32_t>(items.size() - 1);
  }
  const uint32_t id = free.back();
  free.pop_back();
  return id;
}

}  // namespace

PacketNetwork::PacketNetwork(Engine& engine, const Topology& topo, const Router& router, Options options)
    : NetworkModel(engine, topo, router),
      options_(options),
      ports_(topo.link_count()),
      transmitters_(topo.resource_count()),
      tie_turn_(options.adaptive_routing ? topo.device_count() : 0) {
  const double mtu = options_.mtu.value();
  if (!(mtu > 0.0)) throw std::invalid_argument("a packet network's MTU must be positive");
  if (options_.buffer && !(options_.buffer->value() >= mtu)) {
    throw std::invalid_argument("a packet network's link buffer must hold at least one MTU");
  }
  for (uint32_t l = 0; l < topo.link_count(); ++l) {
    const Link& link = topo.link(LinkId{l});
    Port& port = ports_[l];
    port.transmitter = link.resource;
    transmitters_[link.resource].links.push_back(l);
    const double credit_loop = bytes_moved(topo.resource_capacity(link.resource), link.latency * 2).value();
    port.buffer = static_cast<uint64_t>(std::ceil(options_.buffer ? options_.buffer->value() : std::max(8.0 * mtu, 2.0 * credit_loop)));
  }
}

void PacketNetwork::begin(const FlowStart& start) {
  if (start.size.value() <= 0.0) {
    engine_.schedule_in(start.latency, [this, sink = start.sink, tag = start.tag] { complete(sink, tag); });
    return;
  }
  const uint32_t id = take_slot(flows_, free_flows_);
  Flow& flow = flows_[id];
  flow.path.assign(start.path->begin(), start.path->end());
  flow.dst = topo_.link(flow.path.back()).to;
  flow.size = start.size.value();
  flow.packets = static_cast<uint64_t>(std::ceil(flow.size / options_.mtu.value()));
  flow.injected = 0;
  flow.delivered = 0;
  flow.sink = start.sink;
  flow.tag = start.tag;
  flow.weight = start.weight;
  Port& first = ports_[flow.path.front().value];
  first.sources.push_back(id);
  serve(first.transmitter);
}

// A free transmitter sends the next packet one of its links has ready, the links taking turns.
void PacketNetwork::serve(uint32_t transmitter) {
  Transmitter& tr = transmitters_[transmitter];
  if (tr.busy) return;
  const size_t n = tr.links.size();
  for (size_t i = 0; i < n; ++i) {
    const size_t at = (tr.next + i) % n;
    if (send_from(tr.links[at])) {
      tr.next = (at + 1) % n;
      return;
    }
  }
}

bool PacketNetwork::send_from(uint32_t link) {
  Port& port = ports_[link];
  if (port.forwarded_next) return send_forwarded(port, link) || send_fresh(port, link);
  return send_fresh(port, link) || send_forwarded(port, link);
}

// Only the packet at the head of the queue may go: if the buffer ahead cannot take it, every
// packet behind it waits too.
bool PacketNetwork::send_forwarded(Port& port, uint32_t link) {
  if (port.queue.empty()) return false;
  const uint32_t id = port.queue.front();
  if (port.used + packets_[id].credit > port.buffer) return false;
  port.queue.pop_front();
  port.waiting -= packets_[id].credit;
  port.forwarded_next = false;
  transmit(id, link);
  return true;
}

bool PacketNetwork::send_fresh(Port& port, uint32_t link) {
  if (port.sources.empty()) return false;
  const uint32_t flow_id = port.sources[port.next_source];
  Flow& flow = flows_[flow_id];
  const double mtu = options_.mtu.value();
  const double bytes = flow.injected + 1 < flow.packets ? mtu : flow.size - mtu * static_cast<double>(flow.packets - 1);
  const auto credit = static_cast<uint32_t>(std::ceil(bytes));
  if (port.used + credit > port.buffer) return false;
  if (port.turns_left == 0) port.turns_left = flow.weight;
  ++flow.injected;
  --port.turns_left;
  if (flow.injected == flow.packets) {
    drop_source(port, port.next_source);
  } else if (port.turns_left == 0) {
    port.next_source = (port.next_source + 1) % port.sources.size();
  }
  port.forwarded_next = true;
  const uint32_t id = take_slot(packets_, free_packets_);
  packets_[id] = Packet{flow_id, 0, bytes, credit, engine_.now(), LinkId{link}, LinkId{}};
  transmit(id, link);
  return true;
}

void PacketNetwork::drop_source(Port& port, size_t index) {
  port.sources.erase(port.sources.begin() + static_cast<std::ptrdiff_t>(index));
  port.turns_left = 0;
  if (port.next_source >= port.sources.size()) port.next_source = 0;
}

// Cut-through: the head reaches the next device one latency after the start, the tail one
// latency after the finish; the packet joins the next queue when the head is there and, if
// the next link is faster, late enough not to outrun the tail (header). Its finish here still
// waits for its tail, which the first link's packets have with them.
void PacketNetwork::transmit(uint32_t id, uint32_t link) {
  Packet& packet = packets_[id];
  Port& port = ports_[link];
  port.used += packet.credit;
  ++packet_hops_;
  const Link& l = topo_.link(LinkId{link});
  const Time now = engine_.now();
  const Time finish = std::max(now + transfer_time(Bytes(packet.bytes), topo_.resource_capacity(l.resource)), packet.tail);
  transmitters_[port.transmitter].busy = true;
  engine_.schedule_at(finish, [this, t = port.transmitter] {
    transmitters_[t].busy = false;
    serve(t);
  });
  const Flow& flow = flows_[packet.flow];
  if (packet.previous.valid()) {
    // Its tail has left the buffer it held at this end of the previous link.
    engine_.schedule_at(finish + topo_.link(packet.previous).latency,
                        [this, previous = packet.previous, credit = packet.credit] { release(previous.value, credit); });
  }
  packet.tail = finish + l.latency;
  const Time head = now + l.latency;
  if (l.to == flow.dst) {
    engine_.schedule_at(packet.tail, [this, id] { deliver(id); });
  } else if (options_.adaptive_routing) {
    engine_.schedule_at(head, [this, id] { choose_port(id); });
  } else {
    forward(id, flow.path[packet.hop + 1], head);
  }
}

// An adaptive switch, when the head arrives: of the ports that lead on along a shortest path,
// the one with the fewest bytes waiting for it (ties taken in turn).
void PacketNetwork::choose_port(uint32_t id) {
  const Packet& packet = packets_[id];
  const DeviceId at = topo_.link(packet.link).to;
  router_.equal_next_hops(at, flows_[packet.flow].dst, choices_);
  uint32_t& turn = tie_turn_[at.value];
  LinkId best = choices_[turn % choices_.size()];
  for (size_t i = 1; i < choices_.size(); ++i) {
    const LinkId candidate = choices_[(turn + i) % choices_.size()];
    if (ports_[candidate.value].waiting < ports_[best.value].waiting) best = candidate;
  }
  ++turn;
  forward(id, best, engine_.now());
}

// The packet joins `next`'s queue when its head is at the device (`head`) or, if `next` is the
// faster link, when sending it there can no longer outrun its tail.
void PacketNetwork::forward(uint32_t id, LinkId next, Time head) {
  Packet& packet = packets_[id];
  const Time on_next = transfer_time(Bytes(packet.bytes), topo_.resource_capacity(topo_.link(next).resource));
  ports_[next.value].waiting += packet.credit;
  const Time ready = std::max(head, packet.tail - on_next);
  if (ready == engine_.now()) {
    arrive(id, next);
  } else {
    engine_.schedule_at(ready, [this, id, next] { arrive(id, next); });
  }
}

void PacketNetwork::arrive(uint32_t id, LinkId next) {
  Packet& packet = packets_[id];
  ++packet.hop;
  packet.previous = packet.link;
  packet.link = next;
  Port& port = ports_[next.value];
  port.queue.push_back(id);
  serve(port.transmitter);
}

// The destination takes the packet at once; its credit goes back over the last link.
void PacketNetwork::deliver(uint32_t id) {
  const Packet packet = packets_[id];
  free_packets_.push_back(id);
  Flow& flow = flows_[packet.flow];
  const LinkId last = packet.link;
  engine_.schedule_in(topo_.link(last).latency, [this, last, credit = packet.credit] { release(last.value, credit); });
  if (++flow.delivered < flow.packets) return;
  FlowSink* sink = flow.sink;
  const uint32_t tag = flow.tag;
  flow.path.clear();
  free_flows_.push_back(packet.flow);
  complete(sink, tag);
}

void PacketNetwork::release(uint32_t link, uint32_t credit) {
  Port& port = ports_[link];
  port.used -= credit;
  serve(port.transmitter);
}

void PacketNetwork::PacketQueue::pop_front() {
  ++head;
  if (head == items.size()) {
    items.clear();
    head = 0;
  } else if (head >= 1024 && 2 * head >= items.size()) {
    items.erase(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(head));
    head = 0;
  }
}

}  // namespace parallax
