// The network as the rest of the simulator sees it: point-to-point flows of bytes between
// devices, started at the engine's current time, each reporting its completion through a
// callback. What a flow is for (a collective step, a KV-cache transfer) is not its concern.
//
// Models are chosen by name (network_models() lists them with a one-line description that
// states their assumptions): `analytical` (no contention), `flow` (max-min fair sharing) and
// `packet` (packets, queues and credit-based flow control). A lone flow takes the same time in
// every model: the path latency α (sum of per-hop link latencies) plus size / bottleneck
// bandwidth, through transfer_time() (the packet model: on a path of one bandwidth).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "topology/router.h"
#include "topology/topology.h"
#include "units/units.h"

namespace parallax {

/// What a finished flow reports.
struct FlowCompletion {
  uint64_t flow_id = 0;
  Time start;   ///< when start_flow was called
  Time finish;  ///< when the last byte arrived
};

using FlowCallback = std::function<void(const FlowCompletion&)>;

/// Who hears of a flow's last byte, by the `tag` it gave start_flow (a task id, an index). A
/// model's record of a pending flow then holds a pointer and a number instead of a closure:
/// an all-to-all on thousands of GPUs keeps millions of them at once.
class FlowSink {
 public:
  virtual void flow_finished(uint32_t tag) = 0;

 protected:
  FlowSink() = default;
  FlowSink(const FlowSink&) = default;
  FlowSink& operator=(const FlowSink&) = default;
  ~FlowSink() = default;
};

class NetworkModel {
 public:
  /// `engine`, `topo` and `router` must outlive the model.
  NetworkModel(Engine& engine, const Topology& topo, const Router& router);
  virtual ~NetworkModel() = default;
  NetworkModel(const NetworkModel&) = delete;
  NetworkModel& operator=(const NetworkModel&) = delete;

  /// Starts a flow of `size` bytes from `src` to `dst` at engine.now(). `on_done` runs at the
  /// arrival of the last byte (it may start new flows). Returns the flow id, which numbers
  /// flows from 0 in start order and is the ECMP hash key unless `route_key` is given.
  uint64_t start_flow(DeviceId src, DeviceId dst, Bytes size, FlowCallback on_done,
                      std::optional<uint64_t> route_key = std::nullopt);
  /// The same, reporting the arrival of the last byte as `sink.flow_finished(tag)`; `sink`
  /// must outlive the flow. A `weight` of w (1–255) makes it stand for w equal flows that split
  /// `size` on its path: where it is held it takes w fair shares (a contention-free model, which
  /// gives a lone flow its whole path, treats it as one).
  uint64_t start_flow(DeviceId src, DeviceId dst, Bytes size, FlowSink& sink, uint32_t tag,
                      std::optional<uint64_t> route_key = std::nullopt, uint32_t weight = 1);

  virtual std::string_view name() const = 0;

  /// Bytes carried by a directed link so far (counted when a flow starts on it).
  Bytes link_bytes(LinkId link) const { return Bytes(link_bytes_[link.value]); }
  uint64_t flows_started() const { return next_flow_id_; }
  uint64_t flows_completed() const { return completed_; }

 protected:
  struct FlowStart {
    uint64_t id;
    Time latency;        ///< sum of the path's link latencies
    Bytes size;
    const std::vector<LinkId>* path;  ///< valid only during begin()
    FlowSink* sink;
    uint32_t tag;
    uint32_t weight;  ///< 1–255 (start_flow)
  };
  /// Model-specific part of start_flow; the path has at least one link.
  virtual void begin(const FlowStart& flow) = 0;
  /// Models call this when a flow's last byte arrives (at engine.now()).
  void complete(FlowSink* sink, uint32_t tag);

  Engine& engine_;
  const Topology& topo_;
  const Router& router_;

 private:
  void check_ends(DeviceId src, DeviceId dst) const;
  uint64_t launch(DeviceId src, DeviceId dst, Bytes size, FlowSink& sink, uint32_t tag,
                  std::optional<uint64_t> route_key, uint32_t weight = 1);
  // The flows started with a callback: each waits in a slot of this table, whose index is its
  // tag, until it finishes.
  class Callbacks final : public FlowSink {
   public:
    explicit Callbacks(const Engine& engine) : engine_(engine) {}
    uint32_t add(uint64_t id, Time start, FlowCallback on_done);
    void flow_finished(uint32_t tag) override;

   private:
    struct Pending {
      uint64_t id = 0;
      Time start;
      FlowCallback on_done;
    };
    const Engine& engine_;
    std::vector<Pending> pending_;
    std::vector<uint32_t> free_;
  };

  Callbacks callbacks_{engine_};
  std::vector<double> link_bytes_;
  std::vector<LinkId> path_buffer_;
  uint64_t next_flow_id_ = 0;
  uint64_t completed_ = 0;
};

struct NetworkModelInfo {
  std::string name;
  std::string description;
};

/// The registered models, in a fixed order.
const std::vector<NetworkModelInfo>& network_models();
/// Creates the model called `name`; throws std::invalid_argument listing the known names.
std::unique_ptr<NetworkModel> make_network_model(std::string_view name, Engine& engine,
                                                 const Topology& topo, const Router& router);

}  // namespace parallax
