// Chrome trace of a transfer graph run.
#include "collectives/transfer_trace.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

namespace parallax {
namespace {

// Greedy interval partitioning: the first lane whose last slice ended by `start`.
size_t lane_for(std::vector<Time>& lane_end, Time start, Time finish) {
  for (size_t i = 0; i < lane_end.size(); ++i) {
    if (lane_end[i] <= start) {
      lane_end[i] = finish;
      return i;
    }
  }
  lane_end.push_back(finish);
  return lane_end.size() - 1;
}

}  // namespace

std::string transfer_trace_json(const Topology& topo, const Router& router, const TransferGraph& graph,
                                const std::vector<TaskTiming>& timings, const std::string& title) {
  // Slices in start order (ties by task id) so lanes, and the output bytes, are deterministic.
  std::vector<TaskId> order;
  for (TaskId id = 0; id < graph.size(); ++id) {
    if (id < timings.size() && timings[id].finish != Time::max()) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(), [&](TaskId a, TaskId b) { return timings[a].start < timings[b].start; });

  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  auto meta = [&](int pid, int tid, const std::string& key, const std::string& name) {
    nlohmann::ordered_json e;
    e["ph"] = "M";
    e["pid"] = pid;
    e["tid"] = tid;
    e["name"] = key;
    e["args"]["name"] = name;
    events.push_back(e);
  };
  meta(1, 0, "process_name", title + ": GPUs");
  meta(2, 0, "process_name", title + ": links");
  constexpr int kLanes = 1000;  // tid = owner × kLanes + lane
  std::map<uint32_t, std::vector<Time>> gpu_lanes, link_lanes;
  std::map<int, std::string> gpu_threads, link_threads;
  std::vector<LinkId> path;
  for (TaskId id : order) {
    const Task& t = graph.task(id);
    const TaskTiming& tm = timings[id];
    const double ts = tm.start.seconds() * 1e6;
    const double dur = (tm.finish - tm.start).seconds() * 1e6;
    nlohmann::ordered_json args;
    std::string name;
    if (t.kind == Task::Kind::kDelay) {
      name = "delay";
    } else {
      name = "ch" + std::to_string(t.channel) + " -> " + topo.device(t.dst).name;
      args["bytes"] = t.bytes.value();
      args["phase"] = t.phase;
      args["waited_us"] = (tm.start - tm.ready).seconds() * 1e6;
    }
    args["task"] = id;
    size_t lane = lane_for(gpu_lanes[t.src.value], tm.start, tm.finish);
    int tid = static_cast<int>(t.src.value) * kLanes + static_cast<int>(lane);
    gpu_threads[tid] = topo.device(t.src).name + (lane ? " #" + std::to_string(lane) : "");
    events.push_back({{"ph", "X"}, {"pid", 1}, {"tid", tid}, {"name", name}, {"ts", ts}, {"dur", dur}, {"args", args}});
    if (t.kind != Task::Kind::kTransfer || t.src == t.dst) continue;
    router.route(t.src, t.dst, t.route_key(), path);
    for (LinkId l : path) {
      size_t link_lane = lane_for(link_lanes[l.value], tm.start, tm.finish);
      int link_tid = static_cast<int>(l.value) * kLanes + static_cast<int>(link_lane);
      const Link& link = topo.link(l);
      link_threads[link_tid] = topo.device(link.from).name + " -> " + topo.device(link.to).name +
                               (link_lane ? " #" + std::to_string(link_lane) : "");
      events.push_back({{"ph", "X"}, {"pid", 2}, {"tid", link_tid},
                        {"name", topo.device(t.src).name + " -> " + topo.device(t.dst).name},
                        {"ts", ts}, {"dur", dur}, {"args", {{"task", id}}}});
    }
  }
  for (const auto& [tid, name] : gpu_threads) meta(1, tid, "thread_name", name);
  for (const auto& [tid, name] : link_threads) meta(2, tid, "thread_name", name);
  nlohmann::ordered_json doc;
  doc["traceEvents"] = events;
  doc["displayTimeUnit"] = "ns";
  return doc.dump() + "\n";
}

}  // namespace parallax
