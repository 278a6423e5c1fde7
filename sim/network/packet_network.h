// The packet-level network: every flow is cut into packets of at most one MTU, and each packet
// crosses the links of its path one after another, as switches forward it.
//
// - A directed link sends one packet at a time at its bandwidth, first come first served (the
//   two directions of a half-duplex cable share one transmitter and take turns).
// - Cut-through forwarding: a packet joins the next link's queue once its head has crossed the
//   previous one (its start there + that link's latency), or later if that link is the faster,
//   when enough of it has arrived that sending it cannot outrun its tail (its finish there + the
//   latency − its time on the next link), so a link never idles waiting for a packet's tail. On
//   a path of one bandwidth a lone flow therefore takes α + size/β, as in the analytical and
//   flow models, to within a picosecond a packet (each packet's time is rounded up on its own).
// - Lossless, credit-based flow control (InfiniBand's link-level credits; PFC plays the same
//   part in RoCE fabrics): the device at a link's far end holds an input buffer of B bytes for
//   it. A packet starts on the link only when its bytes are free in that buffer, and frees them
//   when its tail has left on its next link (at its destination: when it has arrived), the
//   credit reaching the sender one link latency later. A full buffer stops its link; the packet
//   at the head of a queue then holds back every packet behind it, whatever their way on
//   (head-of-line blocking), and congestion spreads upstream, which the fluid model does not show.
// - Sources: the first link of a flow serves the flows that start there round-robin, one packet
//   a turn (w for a flow of weight w), taking a new packet only when the link is free, as a NIC
//   arbitrates among its queue pairs; on a link that carries forwarded packets as well, the two
//   take turns. A weight counts there only: queues further on serve packets as they come.
//
// Defaults, not fitted: MTU 4,096 B (InfiniBand's and RoCE's usual), and a link's input buffer
// twice its credit loop, bandwidth × 2 × latency (the bytes in flight while a credit makes the
// round trip), at least 8 MTU: a lone flow's bottleneck link never waits for credits, a
// congested port holds a few microseconds of traffic (a 400 Gb/s hop of 1 µs: 200 kB). Credits
// are whole bytes (a packet takes its size rounded up), so fractional flow sizes cannot leave
// a buffer a hair too full to take the next packet.
//
// Routing: each flow on its hashed shortest path (ECMP), or adaptive (Options): switches choose
// each packet's port among the shortest paths' by the bytes waiting for them.
//
// Assumes deadlock-free routes (the router's up/down shortest paths on trees): credits waiting
// on each other around a cycle of switches would stop it, as they stop real lossless fabrics.
// Costs about three engine events per packet per hop: for collectives and small jobs, where the
// flow model is the tool for iterations of thousands of GPUs.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "network/network_model.h"

namespace parallax {

class PacketNetwork final : public NetworkModel {
 public:
  struct Options {
    Bytes mtu = kDefaultPacketMtu;
    /// Every link's input buffer at its far end; nullopt: twice the link's credit loop, at
    /// least 8 MTU (header).
    std::optional<Bytes> buffer;
    /// Adaptive routing (InfiniBand's AR, Spectrum-X's packet spraying): at every device after
    /// the first link, each packet takes, of the links that lead on along a shortest path, the
    /// one with the fewest bytes waiting for it; packets of a flow may then arrive out of order
    /// (the flow ends with its last). Off: every packet follows its flow's hashed (ECMP) path.
    bool adaptive_routing = false;
  };

  PacketNetwork(Engine& engine, const Topology& topo, const Router& router)
      : PacketNetwork(engine, topo, router, Options{}) {}
  /// Throws std::invalid_argument when the MTU is not positive or a buffer smaller than one MTU.
  PacketNetwork(Engine& engine, const Topology& topo, const Router& router, Options options);

  std::string_view name() const override { return "packet"; }

  /// The input buffer of `link` at its far end (Options::buffer or the default, rounded up to a
  /// whole byte).
  Bytes buffer_of(LinkId link) const { return Bytes(static_cast<double>(ports_[link.value].buffer)); }
  /// Bytes of `link`'s buffer held or promised now: 0 once every flow has ended.
  Bytes held(LinkId link) const { return Bytes(static_cast<double>(ports_[link.value].used)); }
  /// Packets sent so far, counted once per link crossed.
  uint64_t packet_hops() const { return packet_hops_; }

 protected:
  void begin(const FlowStart& flow) override;

 private:
  struct Flow {
    std::vector<LinkId> path;  ///< the hashed path (its first link only, routing adaptively)
    DeviceId dst;
    double size = 0.0;
    uint64_t packets = 0;    ///< ceil(size / MTU): every packet one MTU but the last
    uint64_t injected = 0;
    uint64_t delivered = 0;
    FlowSink* sink = nullptr;
    uint32_t tag = 0;
    uint32_t weight = 1;
  };
  struct Packet {
    uint32_t flow = 0;
    uint32_t hop = 0;  ///< links crossed before `link`
    double bytes = 0.0;
    uint32_t credit = 0;  ///< the buffer bytes it takes: its size rounded up
    Time tail;            ///< when its tail reaches the link's near end
    LinkId link;          ///< the link it waits for or crosses
    LinkId previous;      ///< the link before, whose buffer it holds until it leaves on `link`
  };
  /// First in, first out, in one vector (a link without traffic holds no memory, unlike a
  /// std::deque): taken from `head`, compacted when the taken part is the larger.
  struct PacketQueue {
    std::vector<uint32_t> items;
    size_t head = 0;
    bool empty() const { return head == items.size(); }
    uint32_t front() const { return items[head]; }
    void push_back(uint32_t id) { items.push_back(id); }
    void pop_front();
  };
  struct Port {
    PacketQueue queue;              ///< forwarded packets waiting for this link, in arrival order
    std::vector<uint32_t> sources;  ///< flows that start on this link
    size_t next_source = 0;
    uint32_t turns_left = 0;        ///< packets the current source may still send in its turn
    bool forwarded_next = true;     ///< whose turn it is when both kinds wait
    uint64_t buffer = 0;            ///< input buffer at the far end, bytes
    uint64_t used = 0;              ///< bytes of it held or promised
    uint64_t waiting = 0;           ///< bytes of packets bound for this link, not yet sent
    uint32_t transmitter = 0;
  };
  struct Transmitter {
    std::vector<uint32_t> links;  ///< 1, or 2 for a half-duplex cable
    size_t next = 0;
    bool busy = false;
  };

  void serve(uint32_t transmitter);
  bool send_from(uint32_t link);
  bool send_forwarded(Port& port, uint32_t link);
  bool send_fresh(Port& port, uint32_t link);
  void transmit(uint32_t packet, uint32_t link);
  void choose_port(uint32_t packet);
  void forward(uint32_t packet, LinkId next, Time head);
  void arrive(uint32_t packet, LinkId next);
  void deliver(uint32_t packet);
  void release(uint32_t link, uint32_t credit);
  void drop_source(Port& port, size_t index);

  Options options_;
  std::vector<Port> ports_;
  std::vector<Transmitter> transmitters_;
  std::vector<Flow> flows_;
  std::vector<uint32_t> free_flows_;
  std::vector<Packet> packets_;
  std::vector<uint32_t> free_packets_;
  std::vector<uint32_t> tie_turn_;  ///< adaptive routing: per device, whose turn a tie is
  std::vector<LinkId> choices_;
  uint64_t packet_hops_ = 0;
};

}  // namespace parallax
