// NCCL 2.30.7's tuning model (tuning.cc) and the rules that differ in older releases: the worked latencies of the reference's §2.8, the
// bandwidth refinements, the size corrections, the allowed combinations, the argmin and the
// topology constants. Every expected number is derived next to it from
// shared/reference/nccl-cost-model.md §2.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "collectives/nccl_tuning.h"
#include "io/input_error.h"

namespace parallax {
namespace {

using A = Algorithm;
using P = Protocol;
using Op = CollectiveOp;

constexpr double kTol = 1e-9;

// DGX H100, one node. Each GPU has 18 NVLinks at NCCL's SM90 20.6 GB/s = 370.8 GB/s.
// Assumed Ring/Tree graph: the search's 6 channels at 60 GB/s (60 is the top SM90 intra speed and
// 6 · 60 = 360 ≤ 370.8), which ncclTopoDupChannels doubles (bwIntra 60 ≥ 50) into 12 × 30 GB/s:
// busBw 360 GB/s. NVLS graph: one channel per GPU (8 heads); per head every GPU carries bw and the
// head 2·bw, so 9·bw ≤ 370.8 → bw ≤ 41.2 → 40 GB/s in the SM90 intra array.
NcclTuningInputs dgx_h100_one_node() {
  NcclTuningInputs in;
  in.ranks = 8;
  in.nodes = 1;
  in.arch = GpuArch::kHopper;
  in.cpu = CpuVendor::kIntel;
  in.intra = NcclLinkType::kNvlink;
  in.channels = 12;
  in.bw_intra_gbs = 30;
  in.nvls_channels = 8;
  in.nvls_bw_intra_gbs = 40;
  in.nvls_supported = true;
  return in;
}

// H100 nodes with 8 × 400 Gb/s NICs (400000/8000 = 50 GB/s → 48 in the SM90 inter array), one
// NIC per GPU. Assumed graphs: 16 channels of 24 GB/s (two channels share each NIC: 48/2), and an
// NVLS graph of 8 channels at 40 GB/s intra, 48 inter. The worked latencies do not depend on these.
NcclTuningInputs h100_nodes(int nodes, CpuVendor cpu) {
  NcclTuningInputs in;
  in.ranks = 8 * nodes;
  in.nodes = nodes;
  in.arch = GpuArch::kHopper;
  in.cpu = cpu;
  in.intra = NcclLinkType::kNvlink;
  in.channels = 16;
  in.bw_intra_gbs = 24;
  in.bw_inter_gbs = 24;
  in.nvls_channels = 8;
  in.nvls_bw_intra_gbs = 40;
  in.nvls_bw_inter_gbs = 48;
  in.nvls_supported = true;
  return in;
}

void expect_latency(const NcclTuningModel& m, Op op, A algo, P proto, double expected) {
  const NcclCost c = m.cost(op, algo, proto);
  EXPECT_TRUE(c.enabled) << algorithm_name(algo) << "/" << protocol_name(proto);
  EXPECT_NEAR(c.latency_us, expected, kTol) << algorithm_name(algo) << "/" << protocol_name(proto);
}

void expect_bandwidth(const NcclTuningModel& m, Op op, A algo, P proto, double expected) {
  const NcclCost c = m.cost(op, algo, proto);
  EXPECT_TRUE(c.enabled) << algorithm_name(algo) << "/" << protocol_name(proto);
  EXPECT_NEAR(c.bandwidth_gbs, expected, 1e-9 * expected) << algorithm_name(algo) << "/"
                                                          << protocol_name(proto);
}

void expect_disabled(const NcclTuningModel& m, Op op, A algo, P proto) {
  EXPECT_FALSE(m.cost(op, algo, proto).enabled) << op_name(op) << " " << algorithm_name(algo) << "/"
                                                << protocol_name(proto);
  EXPECT_FALSE(m.time_us(op, algo, proto, 1 << 20).has_value());
}

// --- §2.8 worked table -----------------------------------------------------------------------

TEST(NcclTuningWorked, EightGpusOneNodeNvlink) {
  const NcclTuningModel m(dgx_h100_one_node());
  // Ring AR: nsteps 2·7 = 14, no inter steps: B + 14·hwNvlink[Ring].
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL, 15.0);      // 6.6 + 14·0.6
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL128, 40.6);   // 14 + 14·1.9
  expect_latency(m, Op::kAllReduce, A::kRing, P::kSimple, 56.0);  // 8.4 + 14·3.4
  // Tree AR: B + 2·(ppn−1)·hwNvlink[Tree], log2i(1) = 0.
  expect_latency(m, Op::kAllReduce, A::kTree, P::kLL, 15.2);      // 6.8 + 2·7·0.6
  expect_latency(m, Op::kAllReduce, A::kTree, P::kLL128, 31.5);   // 14 + 2·7·1.25
  expect_latency(m, Op::kAllReduce, A::kTree, P::kSimple, 64.4);  // 8.4 + 2·7·4
  // NVLS replaces B with the NVLink NVLS latency.
  expect_latency(m, Op::kAllReduce, A::kNvls, P::kSimple, 25.0);
  // Ring AG: nsteps 7.
  expect_latency(m, Op::kAllGather, A::kRing, P::kLL, 10.8);      // 6.6 + 7·0.6
  expect_latency(m, Op::kAllGather, A::kRing, P::kLL128, 27.3);   // 14 + 7·1.9
  expect_latency(m, Op::kAllGather, A::kRing, P::kSimple, 32.2);  // 8.4 + 7·3.4
}

TEST(NcclTuningWorked, TwoGpusOneNodePci) {
  // Two GPUs under a PCIe Gen3 switch: 1 channel of 12 GB/s. LL128 would be off by NCCL's auto
  // rule (typeIntra > NVB), but the table lists the model's latency, so it is forced on here.
  NcclTuningInputs in;
  in.ranks = 2;
  in.nodes = 1;
  in.arch = GpuArch::kAmpere;
  in.intra = NcclLinkType::kPci;
  in.channels = 1;
  in.bw_intra_gbs = kNcclPciBwDefaultGbs;
  const NcclTuningModel m(in);
  // Ring AR: nsteps 2.
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL, 8.6);       // 6.6 + 2·1.0
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL128, 19.0);   // 14 + 2·2.5
  expect_latency(m, Op::kAllReduce, A::kRing, P::kSimple, 19.8);  // 8.4 + 2·5.7
  // Tree AR: ppn − 1 = 1.
  expect_latency(m, Op::kAllReduce, A::kTree, P::kLL, 8.8);       // 6.8 + 2·1.0
  expect_latency(m, Op::kAllReduce, A::kTree, P::kLL128, 17.8);   // 14 + 2·1.9
  expect_latency(m, Op::kAllReduce, A::kTree, P::kSimple, 16.4);  // 8.4 + 2·4.0
  // Ring AG: nsteps 1.
  expect_latency(m, Op::kAllGather, A::kRing, P::kLL, 7.6);       // 6.6 + 1.0
  expect_latency(m, Op::kAllGather, A::kRing, P::kLL128, 16.5);   // 14 + 2.5
  expect_latency(m, Op::kAllGather, A::kRing, P::kSimple, 14.1);  // 8.4 + 5.7
  expect_disabled(m, Op::kAllReduce, A::kNvls, P::kSimple);       // no NVLS on PCI
}

TEST(NcclTuningWorked, SixteenGpusTwoNodesIntel) {
  const NcclTuningInputs in = h100_nodes(2, CpuVendor::kIntel);
  const NcclTuningModel m(in);
  // Ring AR: nsteps 30, 2 inter steps; intra steps pay max(hwNvlink, overhead), overhead = 1 µs
  // (Intel), ×3 for Simple.
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL, 40.0);       // 6.6 + 28·max(0.6,1) + 2·2.7
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL128, 75.2);    // 14 + 28·1.9 + 2·4.0
  expect_latency(m, Op::kAllReduce, A::kRing, P::kSimple, 131.6);  // 8.4 + 28·max(3.4,3) + 2·14
  // Tree AR: B + 2·(7·hwNvlink + log2i(2)·hwNet).
  expect_latency(m, Op::kAllReduce, A::kTree, P::kLL, 25.2);       // 6.8 + 2·(4.2 + 5.0)
  expect_latency(m, Op::kAllReduce, A::kTree, P::kLL128, 48.5);    // 14 + 2·(8.75 + 8.5)
  expect_latency(m, Op::kAllReduce, A::kTree, P::kSimple, 92.4);   // 8.4 + 2·(28 + 14)
  // NVLS-Tree: 0 + 25 + 2·1·20.9.
  expect_latency(m, Op::kAllReduce, A::kNvlsTree, P::kSimple, 66.8);
  // Ring AG: nsteps 15, 1 inter step.
  expect_latency(m, Op::kAllGather, A::kRing, P::kLL, 23.3);       // 6.6 + 14·1 + 2.7
  expect_latency(m, Op::kAllGather, A::kRing, P::kLL128, 44.6);    // 14 + 14·1.9 + 4
  expect_latency(m, Op::kAllGather, A::kRing, P::kSimple, 70.0);   // 8.4 + 14·3.4 + 14

  // The plateau: Ring Simple AR on several nodes once nBytes/(nChannels·nRanks) ≥ 64, i.e.
  // nBytes ≥ 64·16·16 = 16384: lat 131.6 · 1.4 = 184.24 (Hopper ≥ SM80).
  const double bw = m.cost(Op::kAllReduce, A::kRing, P::kSimple).bandwidth_gbs;
  EXPECT_NEAR(*m.time_us(Op::kAllReduce, A::kRing, P::kSimple, 16384), 184.24 + 16384 / (1000 * bw),
              kTol);
  EXPECT_NEAR(*m.time_us(Op::kAllReduce, A::kRing, P::kSimple, 16383), 131.6 + 16383 / (1000 * bw),
              kTol);
  // Not for LL, nor for AllGather.
  const double bw_ll = m.cost(Op::kAllReduce, A::kRing, P::kLL).bandwidth_gbs;
  EXPECT_NEAR(*m.time_us(Op::kAllReduce, A::kRing, P::kLL, 1 << 20), 40.0 + (1 << 20) / (1000 * bw_ll),
              kTol);
  const double bw_ag = m.cost(Op::kAllGather, A::kRing, P::kSimple).bandwidth_gbs;
  EXPECT_NEAR(*m.time_us(Op::kAllGather, A::kRing, P::kSimple, 1 << 20),
              70.0 + (1 << 20) / (1000 * bw_ag), kTol);
}

TEST(NcclTuningWorked, SixteenGpusTwoNodesAmd) {
  const NcclTuningModel m(h100_nodes(2, CpuVendor::kAmd));
  // Net overhead 2 µs on AMD (6 µs for Simple) dominates the NVLink step latency.
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL, 68.0);       // 6.6 + 28·2 + 2·2.7
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL128, 78.0);    // 14 + 28·2 + 2·4
  expect_latency(m, Op::kAllReduce, A::kRing, P::kSimple, 204.4);  // 8.4 + 28·6 + 2·14
  // Tree and NVLS-Tree pay no net overhead: as on Intel.
  expect_latency(m, Op::kAllReduce, A::kTree, P::kLL, 25.2);
  expect_latency(m, Op::kAllReduce, A::kTree, P::kLL128, 48.5);
  expect_latency(m, Op::kAllReduce, A::kTree, P::kSimple, 92.4);
  expect_latency(m, Op::kAllReduce, A::kNvlsTree, P::kSimple, 66.8);
  expect_latency(m, Op::kAllGather, A::kRing, P::kLL, 37.3);       // 6.6 + 14·2 + 2.7
  expect_latency(m, Op::kAllGather, A::kRing, P::kLL128, 46.0);    // 14 + 14·2 + 4
  expect_latency(m, Op::kAllGather, A::kRing, P::kSimple, 106.4);  // 8.4 + 14·6 + 14
  // Plateau: 204.4 · 1.4 = 286.16 at nBytes = 16384.
  const double bw = m.cost(Op::kAllReduce, A::kRing, P::kSimple).bandwidth_gbs;
  EXPECT_NEAR(*m.time_us(Op::kAllReduce, A::kRing, P::kSimple, 16384), 286.16 + 16384 / (1000 * bw),
              kTol);
}

TEST(NcclTuningWorked, ThirtyTwoGpusFourNodesIntel) {
  const NcclTuningModel m(h100_nodes(4, CpuVendor::kIntel));
  // Ring AR: nsteps 62, 6 inter steps.
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL, 78.8);       // 6.6 + 56·1 + 6·2.7
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL128, 144.4);   // 14 + 56·1.9 + 6·4
  expect_latency(m, Op::kAllReduce, A::kRing, P::kSimple, 282.8);  // 8.4 + 56·3.4 + 6·14
  // Tree AR: log2i(4) = 2.
  expect_latency(m, Op::kAllReduce, A::kTree, P::kLL, 35.2);       // 6.8 + 2·(4.2 + 2·5)
  expect_latency(m, Op::kAllReduce, A::kTree, P::kLL128, 65.5);    // 14 + 2·(8.75 + 2·8.5)
  expect_latency(m, Op::kAllReduce, A::kTree, P::kSimple, 120.4);  // 8.4 + 2·(28 + 2·14)
  expect_latency(m, Op::kAllReduce, A::kNvlsTree, P::kSimple, 108.6);  // 25 + 2·2·20.9
  // Ring AG: nsteps 31, 3 inter steps.
  expect_latency(m, Op::kAllGather, A::kRing, P::kLL, 42.7);       // 6.6 + 28·1 + 3·2.7
  expect_latency(m, Op::kAllGather, A::kRing, P::kLL128, 79.2);    // 14 + 28·1.9 + 3·4
  expect_latency(m, Op::kAllGather, A::kRing, P::kSimple, 145.6);  // 8.4 + 28·3.4 + 3·14
}

// --- Other latency rules ---------------------------------------------------------------------

TEST(NcclTuningLatency, OneGpuPerNodeUsesTreeNetLatency) {
  // 2 nodes × 1 GPU, Ring AR LL: nsteps 2, both inter; ppn == 1 charges hwNet[Tree][LL] = 5.0
  // instead of hwNet[Ring][LL] = 2.7: 6.6 + 2·5.0 = 16.6.
  NcclTuningInputs in = h100_nodes(2, CpuVendor::kIntel);
  in.ranks = 2;
  const NcclTuningModel m(in);
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL, 16.6);
  // Simple: 8.4 + 2·hwNet[Tree][Simple] = 8.4 + 2·14 = 36.4.
  expect_latency(m, Op::kAllReduce, A::kRing, P::kSimple, 36.4);
}

TEST(NcclTuningLatency, LatencyInterAddedOnceAndTwiceForSimple) {
  NcclTuningInputs in = h100_nodes(2, CpuVendor::kIntel);
  in.latency_inter_us = 10;
  const NcclTuningModel m(in);
  // Ring AR LL: 2 inter steps of 2.7 + 10: 40.0 + 2·10 = 60.0.
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL, 60.0);
  // Ring AR Simple: inter steps of 14 + 2·10: 131.6 + 2·20 = 171.6.
  expect_latency(m, Op::kAllReduce, A::kRing, P::kSimple, 171.6);
  // Tree AR Simple: 8.4 + 2·(28 + 1·(14 + 20)) = 132.4.
  expect_latency(m, Op::kAllReduce, A::kTree, P::kSimple, 132.4);
}

TEST(NcclTuningLatency, NetOverheadOverride) {
  NcclTuningInputs in = h100_nodes(2, CpuVendor::kIntel);
  in.net_overhead_us = 5.0;
  const NcclTuningModel m(in);
  // 6.6 + 28·max(0.6, 5) + 2·2.7 = 152.0; Simple: 8.4 + 28·15 + 2·14 = 456.4.
  expect_latency(m, Op::kAllReduce, A::kRing, P::kLL, 152.0);
  expect_latency(m, Op::kAllReduce, A::kRing, P::kSimple, 456.4);
}

TEST(NcclTuningLatency, BroadcastAndReduce) {
  NcclTuningInputs in = dgx_h100_one_node();
  // sameChannels: B + one NVLink Ring step. Simple: 8.4 + 3.4 = 11.8; LL: 6.6 + 0.6 = 7.2.
  expect_latency(NcclTuningModel(in), Op::kBroadcast, A::kRing, P::kSimple, 11.8);
  expect_latency(NcclTuningModel(in), Op::kReduce, A::kRing, P::kLL, 7.2);
  // Otherwise nsteps = 8 steps, Simple taking the Tree figure: 8.4 + 8·4.0 = 40.4;
  // LL: 6.6 + 8·0.6 = 11.4.
  in.ring_same_channels = false;
  expect_latency(NcclTuningModel(in), Op::kBroadcast, A::kRing, P::kSimple, 40.4);
  expect_latency(NcclTuningModel(in), Op::kBroadcast, A::kRing, P::kLL, 11.4);
  // Several nodes: the NET row. 2×8, not same: 8.4 + 16·hwNet[Tree][Simple] = 8.4 + 16·14 = 232.4.
  NcclTuningInputs multi = h100_nodes(2, CpuVendor::kIntel);
  multi.ring_same_channels = false;
  expect_latency(NcclTuningModel(multi), Op::kReduce, A::kRing, P::kSimple, 232.4);
  // Broadcast busBw → algBw ratio is nRanks/nsteps = 1: 12 · 30 = 360.
  expect_bandwidth(NcclTuningModel(in), Op::kBroadcast, A::kRing, P::kSimple, 360.0);
}

TEST(NcclTuningLatency, CollNetAndPat) {
  NcclTuningInputs in = h100_nodes(2, CpuVendor::kIntel);
  in.collnet_supported = true;
  const NcclTuningModel m(in);
  // CollNet Direct: 0 + 2·(min(1, 7)·3.7 + 7·0.4) + 31 = 44.0.
  expect_latency(m, Op::kAllReduce, A::kCollNetDirect, P::kSimple, 44.0);
  // CollNet Chain: 0 + 2·7·2.8 + 30 = 69.2.
  expect_latency(m, Op::kAllReduce, A::kCollNetChain, P::kSimple, 69.2);
  // NVLS across nodes (allowed with CollNet): 25 + 18 = 43.
  expect_latency(m, Op::kAllReduce, A::kNvls, P::kSimple, 43.0);

  // PAT, 4 nodes × 1 GPU: 8 + log2i(4)·hwNet[Tree][Simple]/3.5 + 2.8·4 = 8 + 2·14/3.5 + 11.2 = 27.2.
  NcclTuningInputs pat;
  pat.ranks = 4;
  pat.nodes = 4;
  pat.channels = 2;
  pat.bw_intra_gbs = 48;
  pat.bw_inter_gbs = 48;
  const NcclTuningModel mp(pat);
  expect_latency(mp, Op::kAllGather, A::kPat, P::kSimple, 27.2);
  expect_latency(mp, Op::kReduceScatter, A::kPat, P::kSimple, 27.2);
  // Bandwidth: 4 nodes → bwInter; 2·48·0.75 = 72, not converted (AG off Ring).
  expect_bandwidth(mp, Op::kAllGather, A::kPat, P::kSimple, 72.0);
}

TEST(NcclTuningLatency, PowerCpuFavoursTree) {
  // 2 GPUs on PCI, POWER: PCI Tree Simple takes PCI Ring Simple's 5.7: 8.4 + 2·5.7 = 19.8.
  NcclTuningInputs in;
  in.ranks = 2;
  in.intra = NcclLinkType::kPci;
  in.bw_intra_gbs = 12;
  in.cpu = CpuVendor::kPower;
  expect_latency(NcclTuningModel(in), Op::kAllReduce, A::kTree, P::kSimple, 19.8);
}

// --- Bandwidths ------------------------------------------------------------------------------

TEST(NcclTuningBandwidth, RingRefinementsOneNode) {
  const NcclTuningModel m(dgx_h100_one_node());
  // busBw = 12 · 30 = 360; algBw = busBw · 8/14 for AR.
  // LL: min(llMaxBw[Hopper][N1] = 141, 0.5·360 = 180) = 141 → 141·8/14.
  expect_bandwidth(m, Op::kAllReduce, A::kRing, P::kLL, 141.0 * 8 / 14);
  // LL128: min(0.92·360 = 331.2, 12·36.7 = 440.4) = 331.2 → 331.2·8/14.
  expect_bandwidth(m, Op::kAllReduce, A::kRing, P::kLL128, 331.2 * 8 / 14);
  // Simple: 360·8/14.
  expect_bandwidth(m, Op::kAllReduce, A::kRing, P::kSimple, 360.0 * 8 / 14);
  // AG: ratio 8/7.
  expect_bandwidth(m, Op::kAllGather, A::kRing, P::kSimple, 360.0 * 8 / 7);

  // Before duplication (6 channels × 60): LL128 hits the per-channel cap, min(331.2, 6·36.7) = 220.2.
  NcclTuningInputs six = dgx_h100_one_node();
  six.channels = 6;
  six.bw_intra_gbs = 60;
  expect_bandwidth(NcclTuningModel(six), Op::kAllReduce, A::kRing, P::kLL128, 220.2 * 8 / 14);

  // Multi-node LL uses the CPU row: 2×8 Intel, llMaxBw[0][N2] = 39; 0.5·16·24 = 192 → 39·16/30.
  expect_bandwidth(NcclTuningModel(h100_nodes(2, CpuVendor::kIntel)), Op::kAllReduce, A::kRing,
                   P::kLL, 39.0 * 16 / 30);
  // AMD row, 4 nodes: llMaxBw[1][N4] = 19 → 19·32/62.
  expect_bandwidth(NcclTuningModel(h100_nodes(4, CpuVendor::kAmd)), Op::kAllReduce, A::kRing,
                   P::kLL, 19.0 * 32 / 62);
}

TEST(NcclTuningBandwidth, RingAllReduceTimeIsBusBwTime) {
  // At a size where latency is negligible, Ring AR time − lat = 2(n−1)/n · S / busBw, i.e. the
  // model's busBw is nccl-tests' busbw. S = 1 GiB, busBw = 360 GB/s, n = 8.
  const NcclTuningModel m(dgx_h100_one_node());
  const double s = 1073741824.0;
  const double t = *m.time_us(Op::kAllReduce, A::kRing, P::kSimple, s);
  const double lat = m.cost(Op::kAllReduce, A::kRing, P::kSimple).latency_us;
  EXPECT_NEAR(t - lat, 2.0 * 7 / 8 * s / (1000 * 360.0), 1e-6);
  // AllGather with the total buffer: (n−1)/n · S / busBw.
  const double t_ag = *m.time_us(Op::kAllGather, A::kRing, P::kSimple, s);
  EXPECT_NEAR(t_ag - 32.2, 7.0 / 8 * s / (1000 * 360.0), 1e-6);
}

TEST(NcclTuningBandwidth, TreeRefinements) {
  const NcclTuningModel m(dgx_h100_one_node());
  // AR: min(0.92·360 = 331.2, 12·38.7 = 464.4) = 331.2; algBw ×0.5.
  expect_bandwidth(m, Op::kAllReduce, A::kTree, P::kSimple, 331.2 * 0.5);
  // LL: min(331.2/3.8, 141) = 87.157… → ×0.5.
  expect_bandwidth(m, Op::kAllReduce, A::kTree, P::kLL, 331.2 / 3.8 * 0.5);
  // LL128, one node: min(331.2·7/9 = 257.6, 12·36.7 = 440.4) = 257.6 → 128.8.
  expect_bandwidth(m, Op::kAllReduce, A::kTree, P::kLL128, 128.8);

  // 6 × 60: the per-channel Tree cap binds, min(331.2, 6·38.7 = 232.2) → 116.1.
  NcclTuningInputs six = dgx_h100_one_node();
  six.channels = 6;
  six.bw_intra_gbs = 60;
  expect_bandwidth(NcclTuningModel(six), Op::kAllReduce, A::kTree, P::kSimple, 116.1);

  // Tree pattern (all NIC traffic through one GPU): 331.2·0.85·0.5 = 140.76.
  NcclTuningInputs pattern = dgx_h100_one_node();
  pattern.tree_pattern_single_nic = true;
  expect_bandwidth(NcclTuningModel(pattern), Op::kAllReduce, A::kTree, P::kSimple, 140.76);

  // Several nodes, LL128: 2×8, busBw 16·24 = 384 → min(0.92·384 = 353.28, 16·41.4 = 662.4) =
  // 353.28 → min(353.28·120/128 = 331.2, 16·36.7 = 587.2) = 331.2 → ×0.5 = 165.6.
  expect_bandwidth(NcclTuningModel(h100_nodes(2, CpuVendor::kIntel)), Op::kAllReduce, A::kTree,
                   P::kLL128, 165.6);
  // 4 nodes use bwInter: 16·24 = 384 → min(353.28, 16·36.0 = 576) = 353.28 → ×0.5 = 176.64.
  expect_bandwidth(NcclTuningModel(h100_nodes(4, CpuVendor::kIntel)), Op::kAllReduce, A::kTree,
                   P::kSimple, 176.64);
}

TEST(NcclTuningBandwidth, Nvls) {
  const NcclTuningModel m(dgx_h100_one_node());
  // AR: intraBw = 40·0.85·7/8·2 = 59.5; interBw = bwInter = bwIntra on one node = 40;
  // bw = 40; busBw = 8·40 = 320; algBw = 320·8/14.
  expect_bandwidth(m, Op::kAllReduce, A::kNvls, P::kSimple, 320.0 * 8 / 14);
  // AG: intraBw = 40·0.85·7/8·(7/8) = 26.03125 < 40; busBw = 8·26.03125 = 208.25, not converted.
  expect_bandwidth(m, Op::kAllGather, A::kNvls, P::kSimple, 208.25);
  expect_bandwidth(m, Op::kReduceScatter, A::kNvls, P::kSimple, 208.25);

  // Two channels: intraBw = 40·0.85·1/2·2 = 34 binds: busBw 68 → 68·8/14.
  NcclTuningInputs two = dgx_h100_one_node();
  two.nvls_channels = 2;
  expect_bandwidth(NcclTuningModel(two), Op::kAllReduce, A::kNvls, P::kSimple, 68.0 * 8 / 14);

  // NVLS-Tree, 2×8: 4 channels at 40 intra, 24 inter: intraBw = 40·0.85·3/4·2 = 51;
  // interBw = 24·2 (≤ 2 nodes) = 48; cap perChMaxNVLSTreeBws[Hopper][N2] = 57.7 → 48;
  // busBw 192; algBw = 192·16/30 = 102.4.
  NcclTuningInputs nt = h100_nodes(2, CpuVendor::kIntel);
  nt.nvls_channels = 4;
  nt.nvls_bw_inter_gbs = 24;
  expect_bandwidth(NcclTuningModel(nt), Op::kAllReduce, A::kNvlsTree, P::kSimple, 102.4);
  // 60 intra, 40 inter: intraBw 76.5, interBw 80, the cap 57.7 binds: 4·57.7·16/30 = 123.0933….
  nt.nvls_bw_intra_gbs = 60;
  nt.nvls_bw_inter_gbs = 40;
  expect_bandwidth(NcclTuningModel(nt), Op::kAllReduce, A::kNvlsTree, P::kSimple, 4 * 57.7 * 16 / 30);
  // Ampere and Volta have nvlsEfficiency 0: NVLS bandwidth 0, disabled.
  NcclTuningInputs ampere = dgx_h100_one_node();
  ampere.arch = GpuArch::kAmpere;
  expect_disabled(NcclTuningModel(ampere), Op::kAllReduce, A::kNvls, P::kSimple);
}

TEST(NcclTuningBandwidth, CollNetDirect) {
  NcclTuningInputs in = h100_nodes(2, CpuVendor::kIntel);
  in.collnet_supported = true;
  // AR: busBw 16·24 = 384 (CollNet uses bwIntra); f = 8/16 = 0.5, f −= (0.5−1)/2 → 0.75;
  // 384/0.75 = 512; ×0.85 (SM90) = 435.2; ×0.5 = 217.6.
  expect_bandwidth(NcclTuningModel(in), Op::kAllReduce, A::kCollNetDirect, P::kSimple, 217.6);
  // Chain: 384 · 0.5 = 192.
  expect_bandwidth(NcclTuningModel(in), Op::kAllReduce, A::kCollNetChain, P::kSimple, 192.0);
  // AG across nodes needs the plugin's iallgather.
  expect_disabled(NcclTuningModel(in), Op::kAllGather, A::kCollNetDirect, P::kSimple);
  expect_disabled(NcclTuningModel(in), Op::kAllGather, A::kNvls, P::kSimple);
  in.collnet_ag_rs_supported = true;
  // ppn · min(bwIntra, 0.9·bwInter) = 8·min(24, 21.6) = 172.8, not converted.
  expect_bandwidth(NcclTuningModel(in), Op::kAllGather, A::kCollNetDirect, P::kSimple, 172.8);
}

// --- Size corrections ------------------------------------------------------------------------

TEST(NcclTuningCorrections, TreeCorrectionFactorIndex) {
  const NcclTuningModel m(h100_nodes(2, CpuVendor::kIntel));
  const NcclCost c = m.cost(Op::kAllReduce, A::kTree, P::kSimple);
  ASSERT_TRUE(c.enabled);
  auto expect_factor = [&](double bytes, double factor) {
    EXPECT_NEAR(*m.time_us(Op::kAllReduce, A::kTree, P::kSimple, bytes),
                c.latency_us + bytes / (1000 * c.bandwidth_gbs * factor), kTol)
        << bytes;
  };
  // log2i(nBytes >> 6): 131072 = 64·2^11 → i = 11 → Simple 0.5; 131071 → i = 10 → 0.6.
  expect_factor(131072, 0.5);
  expect_factor(131071, 0.6);
  // 64 B → i = 0 → 0.9; 63 B → 63 >> 6 = 0, log2i(0) = −1: no correction.
  expect_factor(64, 0.9);
  expect_factor(63, 1.0);
  // 256 MiB = 64·2^22 → i = 22 → 0.9; 512 MiB → i = 23: past Tree's table (0 … 22), none.
  expect_factor(268435456.0, 0.9);
  expect_factor(536870912.0, 1.0);
  // LL row at i = 12 (262144 B): 0.4.
  const NcclCost ll = m.cost(Op::kAllReduce, A::kTree, P::kLL);
  EXPECT_NEAR(*m.time_us(Op::kAllReduce, A::kTree, P::kLL, 262144),
              ll.latency_us + 262144 / (1000 * ll.bandwidth_gbs * 0.4), kTol);
}

TEST(NcclTuningCorrections, NvlsTreeCorrectionOnBlackwellX86Only) {
  // 512 MiB → i = 23: NVLS-Tree's range reaches 23 (Simple 0.9) on Blackwell with an x86 host.
  const double bytes = 536870912.0;
  NcclTuningInputs in = h100_nodes(2, CpuVendor::kIntel);
  in.arch = GpuArch::kBlackwell;
  const NcclTuningModel bw_x86(in);
  const NcclCost c = bw_x86.cost(Op::kAllReduce, A::kNvlsTree, P::kSimple);
  ASSERT_TRUE(c.enabled);
  EXPECT_NEAR(*bw_x86.time_us(Op::kAllReduce, A::kNvlsTree, P::kSimple, bytes),
              c.latency_us + bytes / (1000 * c.bandwidth_gbs * 0.9), kTol);
  in.cpu = CpuVendor::kOther;  // e.g. Grace (Arm): no correction
  const NcclTuningModel bw_arm(in);
  EXPECT_NEAR(*bw_arm.time_us(Op::kAllReduce, A::kNvlsTree, P::kSimple, bytes),
              c.latency_us + bytes / (1000 * c.bandwidth_gbs), kTol);
  const NcclTuningModel hopper(h100_nodes(2, CpuVendor::kIntel));
  const NcclCost h = hopper.cost(Op::kAllReduce, A::kNvlsTree, P::kSimple);
  EXPECT_NEAR(*hopper.time_us(Op::kAllReduce, A::kNvlsTree, P::kSimple, bytes),
              h.latency_us + bytes / (1000 * h.bandwidth_gbs), kTol);
}

TEST(NcclTuningCorrections, RingPlateauBeforeAmpere) {
  // Volta: ×1.9. 2×8 Intel Ring Simple AR lat 131.6 → 250.04 at nBytes = 64·16·16.
  NcclTuningInputs in = h100_nodes(2, CpuVendor::kIntel);
  in.arch = GpuArch::kVolta;
  const NcclTuningModel m(in);
  const double bw = m.cost(Op::kAllReduce, A::kRing, P::kSimple).bandwidth_gbs;
  EXPECT_NEAR(*m.time_us(Op::kAllReduce, A::kRing, P::kSimple, 16384), 250.04 + 16384 / (1000 * bw),
              kTol);
  // One node never plateaus: 56.0 + S/(1000·bw).
  const NcclTuningModel one(dgx_h100_one_node());
  const double bw1 = one.cost(Op::kAllReduce, A::kRing, P::kSimple).bandwidth_gbs;
  EXPECT_NEAR(*one.time_us(Op::kAllReduce, A::kRing, P::kSimple, 1 << 20),
              56.0 + (1 << 20) / (1000 * bw1), kTol);
}

// --- Allowed combinations ----------------------------------------------------------------------

TEST(NcclTuningAllowed, DisabledCombinations) {
  const NcclTuningInputs base = dgx_h100_one_node();
  const NcclTuningModel m(base);
  // Tree is modelled for AllReduce only; Broadcast/Reduce are Ring only.
  expect_disabled(m, Op::kAllGather, A::kTree, P::kSimple);
  expect_disabled(m, Op::kReduceScatter, A::kTree, P::kLL);
  expect_disabled(m, Op::kBroadcast, A::kTree, P::kSimple);
  expect_disabled(m, Op::kReduce, A::kNvls, P::kSimple);
  // NVLS and NVLS-Tree: Simple only; NVLS-Tree needs several nodes.
  expect_disabled(m, Op::kAllReduce, A::kNvls, P::kLL);
  expect_disabled(m, Op::kAllReduce, A::kNvls, P::kLL128);
  expect_disabled(m, Op::kAllReduce, A::kNvlsTree, P::kSimple);
  // PAT: AG/RS, Simple, 1 GPU per node; this node has 8.
  expect_disabled(m, Op::kAllGather, A::kPat, P::kSimple);
  // CollNet without support.
  expect_disabled(m, Op::kAllReduce, A::kCollNetDirect, P::kSimple);
  expect_disabled(m, Op::kAllReduce, A::kCollNetChain, P::kSimple);
  // No cost model for point-to-point, nor for non-NCCL algorithms.
  for (A algo : {A::kRing, A::kTree, A::kNvls, A::kPat}) {
    expect_disabled(m, Op::kAllToAll, algo, P::kSimple);
    expect_disabled(m, Op::kSendRecv, algo, P::kSimple);
  }
  expect_disabled(m, Op::kAllReduce, A::kRecursiveHalvingDoubling, P::kSimple);
  expect_disabled(m, Op::kAllToAll, A::kPairwise, P::kSimple);

  NcclTuningInputs no_nvls = base;
  no_nvls.nvls_supported = false;
  expect_disabled(NcclTuningModel(no_nvls), Op::kAllReduce, A::kNvls, P::kSimple);
  NcclTuningInputs no_ll128 = base;
  no_ll128.ll128_enabled = false;
  expect_disabled(NcclTuningModel(no_ll128), Op::kAllReduce, A::kRing, P::kLL128);
  expect_disabled(NcclTuningModel(no_ll128), Op::kAllReduce, A::kTree, P::kLL128);
  EXPECT_TRUE(NcclTuningModel(no_ll128).cost(Op::kAllReduce, A::kRing, P::kLL).enabled);

  // Multi-node NVLS needs CollNet; NVLS-Tree does not.
  const NcclTuningModel two(h100_nodes(2, CpuVendor::kIntel));
  expect_disabled(two, Op::kAllReduce, A::kNvls, P::kSimple);
  EXPECT_TRUE(two.cost(Op::kAllReduce, A::kNvlsTree, P::kSimple).enabled);
  expect_disabled(two, Op::kAllGather, A::kNvlsTree, P::kSimple);

  // CollNet: Simple only, at most 8 local ranks.
  NcclTuningInputs cn = h100_nodes(2, CpuVendor::kIntel);
  cn.collnet_supported = true;
  expect_disabled(NcclTuningModel(cn), Op::kAllReduce, A::kCollNetDirect, P::kLL);
  expect_disabled(NcclTuningModel(cn), Op::kAllReduce, A::kCollNetChain, P::kLL128);
  expect_disabled(NcclTuningModel(cn), Op::kAllGather, A::kCollNetChain, P::kSimple);
  cn.ranks = 32;  // 16 per node
  expect_disabled(NcclTuningModel(cn), Op::kAllReduce, A::kCollNetDirect, P::kSimple);
  expect_disabled(NcclTuningModel(cn), Op::kAllReduce, A::kCollNetChain, P::kSimple);

  // PAT with 1 GPU per node: AG/RS Simple only, never AR; off when disabled.
  NcclTuningInputs pat;
  pat.ranks = 4;
  pat.nodes = 4;
  pat.bw_intra_gbs = pat.bw_inter_gbs = 24;
  EXPECT_TRUE(NcclTuningModel(pat).cost(Op::kAllGather, A::kPat, P::kSimple).enabled);
  expect_disabled(NcclTuningModel(pat), Op::kAllGather, A::kPat, P::kLL);
  expect_disabled(NcclTuningModel(pat), Op::kAllReduce, A::kPat, P::kSimple);
  pat.pat_enabled = false;
  expect_disabled(NcclTuningModel(pat), Op::kAllGather, A::kPat, P::kSimple);

  // One rank: NCCL never reaches the model.
  NcclTuningInputs one;
  one.bw_intra_gbs = 30;
  expect_disabled(NcclTuningModel(one), Op::kAllReduce, A::kRing, P::kSimple);
}

// --- Choice ------------------------------------------------------------------------------------

TEST(NcclTuningChoose, TinyPicksLlHugePicksBandwidth) {
  const NcclTuningModel m(dgx_h100_one_node());
  // 8 B: every bandwidth term is < 0.001 µs, so the smallest latency wins: Ring LL 15.0
  // (Tree LL 15.2, NVLS 25, Ring LL128 40.6).
  const auto tiny = m.choose(Op::kAllReduce, 8);
  ASSERT_TRUE(tiny.has_value());
  EXPECT_EQ(tiny->algo, A::kRing);
  EXPECT_EQ(tiny->proto, P::kLL);
  EXPECT_NEAR(tiny->time_us, 15.0 + 8 / (1000 * 141.0 * 8 / 14), kTol);
  // 4 GiB: algBw Ring Simple 360·8/14 = 205.7 > Ring LL128 189.3 > NVLS 182.9 > Tree 165.6.
  const double huge = 4294967296.0;
  const auto big = m.choose(Op::kAllReduce, huge);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->algo, A::kRing);
  EXPECT_EQ(big->proto, P::kSimple);
  EXPECT_NEAR(big->time_us, 56.0 + huge / (1000 * 360.0 * 8 / 14), 1e-6);
  // Without Ring, NVLS beats Tree at that size.
  const std::array<A, 2> nvls_or_tree = {A::kTree, A::kNvls};
  const auto no_ring = m.choose(Op::kAllReduce, huge, nvls_or_tree);
  ASSERT_TRUE(no_ring.has_value());
  EXPECT_EQ(no_ring->algo, A::kNvls);
  EXPECT_EQ(no_ring->proto, P::kSimple);
}

TEST(NcclTuningChoose, DeterministicAndOrderIndependent) {
  const NcclTuningModel m(h100_nodes(2, CpuVendor::kIntel));
  const std::array<A, 4> fwd = {A::kTree, A::kRing, A::kNvlsTree, A::kPat};
  const std::array<A, 4> rev = {A::kPat, A::kNvlsTree, A::kRing, A::kTree};
  const std::array<P, 3> protos_fwd = {P::kLL, P::kLL128, P::kSimple};
  const std::array<P, 3> protos_rev = {P::kSimple, P::kLL128, P::kLL};
  for (double bytes : {0.0, 8.0, 65536.0, 1048576.0, 67108864.0, 1073741824.0}) {
    const auto a = m.choose(Op::kAllReduce, bytes);
    const auto b = m.choose(Op::kAllReduce, bytes);
    const auto c = m.choose(Op::kAllReduce, bytes, fwd, protos_fwd);
    const auto d = m.choose(Op::kAllReduce, bytes, rev, protos_rev);
    ASSERT_TRUE(a && b && c && d);
    EXPECT_EQ(a->algo, b->algo);
    EXPECT_EQ(a->proto, b->proto);
    EXPECT_EQ(a->time_us, b->time_us);
    EXPECT_EQ(c->algo, d->algo);
    EXPECT_EQ(c->proto, d->proto);
    EXPECT_EQ(c->time_us, d->time_us);
  }
  // At 0 B only latency counts: Tree LL 25.2 beats Ring LL 40.0 on 2×8.
  const auto zero = m.choose(Op::kAllReduce, 0);
  EXPECT_EQ(zero->algo, A::kTree);
  EXPECT_EQ(zero->proto, P::kLL);
  EXPECT_NEAR(zero->time_us, 25.2, kTol);
}

TEST(NcclTuningChoose, RestrictionsAndEdgeCases) {
  const NcclTuningModel m(dgx_h100_one_node());
  // Only Simple: at 8 B the smallest Simple latency is NVLS 25.0 (Ring 56.0, Tree 64.4).
  const std::array<P, 1> simple = {P::kSimple};
  const auto s = m.choose(Op::kAllReduce, 8, {}, simple);
  EXPECT_EQ(s->algo, A::kNvls);
  // Nothing NCCL models: nullopt.
  const std::array<A, 1> pairwise = {A::kPairwise};
  EXPECT_FALSE(m.choose(Op::kAllReduce, 8, pairwise).has_value());
  EXPECT_FALSE(m.choose(Op::kAllToAll, 8).has_value());
  // One rank: Ring/Simple at 0 µs.
  NcclTuningInputs one;
  const auto c = NcclTuningModel(one).choose(Op::kAllReduce, 1 << 20);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->algo, A::kRing);
  EXPECT_EQ(c->proto, P::kSimple);
  EXPECT_EQ(c->time_us, 0.0);
  EXPECT_THROW((void)m.choose(Op::kAllReduce, -1), InputError);
  EXPECT_THROW((void)m.time_us(Op::kAllReduce, A::kRing, P::kLL, std::nan("")), InputError);
}

TEST(NcclTuningInputsValidation, RejectsBadInputs) {
  NcclTuningInputs in = dgx_h100_one_node();
  in.nodes = 3;  // 8 ranks do not split into 3 nodes
  EXPECT_THROW(NcclTuningModel{in}, InputError);
  in = dgx_h100_one_node();
  in.channels = 0;
  EXPECT_THROW(NcclTuningModel{in}, InputError);
  in = dgx_h100_one_node();
  in.bw_intra_gbs = -1;
  EXPECT_THROW(NcclTuningModel{in}, InputError);
  in = dgx_h100_one_node();
  in.ranks = 0;
  EXPECT_THROW(NcclTuningModel{in}, InputError);
  EXPECT_EQ(NcclTuningModel(dgx_h100_one_node()).inputs().channels, 12);
}

// --- Constants ---------------------------------------------------------------------------------

TEST(NcclTuningConstants, LatencyTablesAndWireEfficiency) {
  EXPECT_EQ(*nccl_hw_latency_us(NcclHwLink::kNet, A::kNvlsTree, P::kSimple), 20.9);
  EXPECT_EQ(*nccl_hw_latency_us(NcclHwLink::kNvlink, A::kRing, P::kLL128), 1.9);
  EXPECT_EQ(*nccl_hw_latency_us(NcclHwLink::kPci, A::kRing, P::kSimple), 5.7);
  EXPECT_FALSE(nccl_hw_latency_us(NcclHwLink::kNet, A::kPairwise, P::kSimple).has_value());
  EXPECT_EQ(*nccl_base_latency_us(A::kPat, P::kSimple), 8.0);
  EXPECT_EQ(*nccl_base_latency_us(A::kRing, P::kLL), 6.6);
  EXPECT_FALSE(nccl_base_latency_us(A::kHierarchical, P::kLL).has_value());
  EXPECT_TRUE(is_nccl_algorithm(A::kCollNetChain));
  EXPECT_FALSE(is_nccl_algorithm(A::kDirect));
  // LL: 8 data bytes per 16-byte line; LL128: 120 of 128; Simple: all.
  EXPECT_EQ(protocol_wire_efficiency(P::kLL), 0.5);
  EXPECT_EQ(protocol_wire_efficiency(P::kLL128), 0.9375);
  EXPECT_EQ(protocol_wire_efficiency(P::kSimple), 1.0);
}

TEST(NcclTuningConstants, TopologyBandwidths) {
  EXPECT_EQ(nccl_gpu_arch(70), GpuArch::kVolta);
  EXPECT_EQ(nccl_gpu_arch(86), GpuArch::kAmpere);
  EXPECT_EQ(nccl_gpu_arch(90), GpuArch::kHopper);
  EXPECT_EQ(nccl_gpu_arch(103), GpuArch::kBlackwell);
  EXPECT_EQ(nccl_nvlink_bw_per_link_gbs(60), 18.0);
  EXPECT_EQ(nccl_nvlink_bw_per_link_gbs(70), 20.0);
  EXPECT_EQ(nccl_nvlink_bw_per_link_gbs(80), 20.0);
  EXPECT_EQ(nccl_nvlink_bw_per_link_gbs(86), 12.0);
  EXPECT_EQ(nccl_nvlink_bw_per_link_gbs(90), 20.6);
  EXPECT_EQ(nccl_nvlink_bw_per_link_gbs(100), 40.1);
  EXPECT_EQ(nccl_nvlink_bw_per_link_gbs(GpuArch::kHopper), 20.6);
  // DGX H100: 18 links × 20.6 = 370.8 GB/s per GPU.
  EXPECT_NEAR(18 * nccl_nvlink_bw_per_link_gbs(GpuArch::kHopper), 370.8, 1e-9);
  // width × lane speed / 80: Gen3 x16 16·60/80 = 12, Gen4 24, Gen5 48, Gen4 x8 12.
  EXPECT_EQ(nccl_pci_bw_gbs(3, 16), 12.0);
  EXPECT_EQ(nccl_pci_bw_gbs(4, 16), 24.0);
  EXPECT_EQ(nccl_pci_bw_gbs(5, 16), 48.0);
  EXPECT_EQ(nccl_pci_bw_gbs(4, 8), 12.0);
  EXPECT_THROW((void)nccl_pci_bw_gbs(7, 16), InputError);
  // 400 Gb/s NIC: 400000 Mb/s / 8000 = 50 GB/s; 100 Gb/s → 12.5 (NET_BW default says 12).
  EXPECT_EQ(nccl_net_bw_gbs(400000), 50.0);
  EXPECT_EQ(nccl_net_bw_gbs(100000), 12.5);
  EXPECT_EQ(kNcclNetBwDefaultGbs, 12.0);
}

TEST(NcclTuningConstants, SearchSpeedsAndDuplication) {
  // DGX H100 ring: ≤ 370.8/6 = 61.8 per channel → 60 (SM90 intra).
  EXPECT_EQ(nccl_search_speed(GpuArch::kHopper, false, 370.8 / 6), 60.0);
  // NVLS: ≤ 370.8/9 = 41.2 → 40.
  EXPECT_EQ(nccl_search_speed(GpuArch::kHopper, false, 370.8 / 9), 40.0);
  // 400 Gb/s NIC (50 GB/s) → 48 in the SM90 and SM100 inter arrays.
  EXPECT_EQ(nccl_search_speed(GpuArch::kHopper, true, 50), 48.0);
  EXPECT_EQ(nccl_search_speed(GpuArch::kBlackwell, true, 50), 48.0);
  EXPECT_EQ(nccl_search_speed(GpuArch::kBlackwell, true, 90), 86.0);
  // Default arrays for Volta/Ampere: top 40 intra; below the lowest entry, the lowest (3).
  EXPECT_EQ(nccl_search_speed(GpuArch::kAmpere, false, 1000), 40.0);
  EXPECT_EQ(nccl_search_speed(GpuArch::kAmpere, false, 1), 3.0);
  EXPECT_EQ(nccl_search_speeds(GpuArch::kHopper, true).size(), 17u);
  EXPECT_EQ(nccl_search_speeds(GpuArch::kBlackwell, false).front(), 90.0);
  EXPECT_EQ(nccl_search_speeds(GpuArch::kVolta, true).back(), 0.12);

  // 6 × 60 on SM90 doubles to 12 × 30 (bwIntra ≥ 50).
  NcclGraphBw g = nccl_dup_channels(90, {6, 60, 60}, kNcclMaxChannels);
  EXPECT_EQ(g.channels, 12);
  EXPECT_EQ(g.bw_intra_gbs, 30.0);
  EXPECT_EQ(g.bw_inter_gbs, 30.0);
  // 12 × 30 on SM90 stays (CC > 8.0, bwIntra < 50, > 4 channels) …
  g = nccl_dup_channels(90, {12, 30, 30}, kNcclMaxChannels);
  EXPECT_EQ(g.channels, 12);
  // … but doubles on SM80 (CC not > 8.0) to 24 × 15, and with 4 channels on SM90 to 8 × 15.
  EXPECT_EQ(nccl_dup_channels(80, {12, 30, 30}, kNcclMaxChannels).channels, 24);
  EXPECT_EQ(nccl_dup_channels(90, {4, 30, 30}, kNcclMaxChannels).bw_intra_gbs, 15.0);
  // bwIntra < 25 never doubles.
  EXPECT_EQ(nccl_dup_channels(90, {4, 20, 20}, kNcclMaxChannels).channels, 4);
  // Capped at maxChannels: 40 → 64, bw divided by DIVUP(64, 40) = 2.
  g = nccl_dup_channels(90, {40, 60, 60}, kNcclMaxChannels);
  EXPECT_EQ(g.channels, 64);
  EXPECT_EQ(g.bw_intra_gbs, 30.0);
}


// ---- NCCL releases: each rule the model encodes per version (reference §2.10, NCCL's tags) ----

namespace release {

NcclTuningInputs one_gpu_per_node(int nodes, int version) {
  NcclTuningInputs in = h100_nodes(nodes, CpuVendor::kIntel);
  in.ranks = nodes;
  in.channels = 2;
  in.nvls_supported = false;
  in.nccl_version = version;
  return in;
}

NcclTuningInputs eight_per_node(int nodes, int version) {
  NcclTuningInputs in = h100_nodes(nodes, CpuVendor::kIntel);
  in.nccl_version = version;
  return in;
}

TEST(NcclRelease, VersionsParseAndOlderThan218AreRefused) {
  EXPECT_EQ(parse_nccl_version("2.23.4"), 223);
  EXPECT_EQ(parse_nccl_version("v2.18.5-1"), 218);
  EXPECT_EQ(parse_nccl_version("2.30"), 230);
  EXPECT_THROW(parse_nccl_version("2.17.1"), InputError);
  EXPECT_THROW(parse_nccl_version("two"), InputError);
  EXPECT_THROW(parse_nccl_version("2"), InputError);
  NcclTuningInputs in = eight_per_node(2, 217);
  EXPECT_THROW(NcclTuningModel{in}, InputError);
}

TEST(NcclRelease, PatArrivesIn223AtFivePercentMoreThanFrom224) {
  const double s = 4 << 20;
  EXPECT_FALSE(NcclTuningModel(one_gpu_per_node(16, 222)).cost(Op::kAllGather, A::kPat, P::kSimple).enabled);
  const NcclCost v223 = NcclTuningModel(one_gpu_per_node(16, 223)).cost(Op::kAllGather, A::kPat, P::kSimple);
  const NcclCost v224 = NcclTuningModel(one_gpu_per_node(16, 224)).cost(Op::kAllGather, A::kPat, P::kSimple);
  ASSERT_TRUE(v223.enabled && v224.enabled);
  EXPECT_NEAR(v223.bandwidth_gbs / v224.bandwidth_gbs, 0.85 / 0.75, kTol);
  // 2.28 gave PAT its 8 µs base latency (0 before).
  const NcclCost v228 = NcclTuningModel(one_gpu_per_node(16, 228)).cost(Op::kAllGather, A::kPat, P::kSimple);
  EXPECT_NEAR(v228.latency_us - v224.latency_us, 8.0, kTol);
  EXPECT_NE(NcclTuningModel(one_gpu_per_node(16, 222)).choose(Op::kAllGather, s)->algo, A::kPat);
}

TEST(NcclRelease, AllGatherAndReduceScatterAreRingOnlyBefore223) {
  NcclTuningInputs in = dgx_h100_one_node();
  in.nccl_version = 222;
  EXPECT_FALSE(NcclTuningModel(in).cost(Op::kReduceScatter, A::kNvls, P::kSimple).enabled);
  in.nccl_version = 223;
  EXPECT_TRUE(NcclTuningModel(in).cost(Op::kReduceScatter, A::kNvls, P::kSimple).enabled);
}

TEST(NcclRelease, RingLLRanAtAQuarterOrAThirdBefore221) {
  // Across nodes llMaxBw (20.4 GB/s, Intel, N4) caps both; on one node Hopper's is 141.
  NcclTuningInputs one = dgx_h100_one_node();  // 12 × 30 = 360 GB/s
  one.nccl_version = 220;
  const double ag220 = NcclTuningModel(one).cost(Op::kAllGather, A::kRing, P::kLL).bandwidth_gbs;
  const double ar220 = NcclTuningModel(one).cost(Op::kAllReduce, A::kRing, P::kLL).bandwidth_gbs;
  one.nccl_version = 221;
  const double ag221 = NcclTuningModel(one).cost(Op::kAllGather, A::kRing, P::kLL).bandwidth_gbs;
  EXPECT_NEAR(ag220, 360.0 / 3.0 * 8 / 7, 1e-6);  // one node, AllGather: 1/3, then × n/nsteps
  EXPECT_NEAR(ar220, 360.0 / 4.0 * 8 / 14, 1e-6);  // AllReduce: 1/4
  EXPECT_NEAR(ag221, 141.0 * 8 / 7, 1e-6);         // 1/2 = 180, capped at llMaxBw 141
}

TEST(NcclRelease, LL128WithOneGpuPerNodeRanAt07Before223) {
  const double v222 = NcclTuningModel(one_gpu_per_node(4, 222)).cost(Op::kAllGather, A::kRing, P::kLL128).bandwidth_gbs;
  const double v223 = NcclTuningModel(one_gpu_per_node(4, 223)).cost(Op::kAllGather, A::kRing, P::kLL128).bandwidth_gbs;
  EXPECT_NEAR(v222 / v223, 0.7 / 0.92, kTol);  // 2 × 24 = 48 GB/s: under the 2 × 36.7 cap both times
}

TEST(NcclRelease, RingAllReduceCountedTwoMoreNetworkStepsBefore223) {
  // 2·nNodes network steps instead of 2(nNodes − 1): two steps move from the intra latency
  // (max(3.4, 3·1 µs net overhead) = 3.4) to the network's 14 µs. Ring Simple, 4 nodes.
  const double v222 = NcclTuningModel(eight_per_node(4, 222)).cost(Op::kAllReduce, A::kRing, P::kSimple).latency_us;
  const double v223 = NcclTuningModel(eight_per_node(4, 223)).cost(Op::kAllReduce, A::kRing, P::kSimple).latency_us;
  EXPECT_NEAR(v222 - v223, 2 * (14.0 - 3.4), kTol);
}

TEST(NcclRelease, TreeSimpleHopsCost28MicrosecondsOn219To222) {
  // Tree Simple, 4 nodes × 8: 2((ppn − 1)·intra + log2(4)·inter) = 2(7·4 + 2·14) on 2.23+
  // (+ base 8.4), 2(7·28 + 2·28) on 2.19–2.22 (base 0).
  const double v222 = NcclTuningModel(eight_per_node(4, 222)).cost(Op::kAllReduce, A::kTree, P::kSimple).latency_us;
  const double v223 = NcclTuningModel(eight_per_node(4, 223)).cost(Op::kAllReduce, A::kTree, P::kSimple).latency_us;
  EXPECT_NEAR(v222, 2 * (7 * 28.0 + 2 * 28.0), kTol);
  EXPECT_NEAR(v223, 8.4 + 2 * (7 * 4.0 + 2 * 14.0), kTol);
}

TEST(NcclRelease, NvlsTreeLatencyAndRatioFollowTheRelease) {
  // 4 nodes. 2.18: 23 µs + 2(nNodes − 1) network hops of 19 µs, algBw = busBw · 0.7·4/(2·3).
  // 2.19–2.27: 25 (NVLink) + 2·log2(4) hops of 14 µs, ratio 5/6. 2.28+: the hop is 20.9 µs.
  const NcclCost v218 = NcclTuningModel(eight_per_node(4, 218)).cost(Op::kAllReduce, A::kNvlsTree, P::kSimple);
  const NcclCost v227 = NcclTuningModel(eight_per_node(4, 227)).cost(Op::kAllReduce, A::kNvlsTree, P::kSimple);
  const NcclCost v230 = NcclTuningModel(eight_per_node(4, 230)).cost(Op::kAllReduce, A::kNvlsTree, P::kSimple);
  EXPECT_NEAR(v218.latency_us, 23 + 2 * 3 * 19.0, kTol);
  EXPECT_NEAR(v227.latency_us, 25 + 2 * 2 * 14.0, kTol);
  EXPECT_NEAR(v230.latency_us, 25 + 2 * 2 * 20.9, kTol);
  // 2.18: 8 channels × bwInter 48 (plain, > 2 nodes) · 0.7·4/6; 2.27: 8 × min(40, 48/2) · 5/6.
  EXPECT_NEAR(v218.bandwidth_gbs, 8 * 48.0 * 0.7 * 4 / 6, 1e-9);
  EXPECT_NEAR(v227.bandwidth_gbs, 8 * 24.0 * 5 / 6, 1e-9);
}

TEST(NcclRelease, BlackwellHasItsOwnRowsFrom228) {
  NcclTuningInputs in = dgx_h100_one_node();
  in.arch = GpuArch::kBlackwell;
  in.nccl_version = 227;  // Hopper's llMaxBw (141) before Blackwell's row (282)
  EXPECT_NEAR(NcclTuningModel(in).cost(Op::kAllGather, A::kRing, P::kLL).bandwidth_gbs, 141.0 * 8 / 7, 1e-6);
  in.nccl_version = 228;
  EXPECT_NEAR(NcclTuningModel(in).cost(Op::kAllGather, A::kRing, P::kLL).bandwidth_gbs, 180.0 * 8 / 7, 1e-6);
}

// enqueue.cc's per-call channel count, by hand from its loops.
TEST(NcclEnqueueChannels, RingAndTreeDropChannelsForSmallCalls) {
  const NcclTuningModel m(dgx_h100_one_node());  // 12 channels, 12 · 30 GB/s > PCI_BW: 512 threads
  // Simple: one channel per 512 threads · 64 B = 32 KiB of the call.
  EXPECT_EQ(m.enqueue_channels(A::kRing, P::kSimple, 1 << 30), 12);
  EXPECT_EQ(m.enqueue_channels(A::kRing, P::kSimple, 12 * 32768), 12);
  EXPECT_EQ(m.enqueue_channels(A::kRing, P::kSimple, 12 * 32768 - 1), 11);
  EXPECT_EQ(m.enqueue_channels(A::kTree, P::kSimple, 65536), 2);
  EXPECT_EQ(m.enqueue_channels(A::kRing, P::kSimple, 0), 1);
  // Ring LL: 8 B per thread times the 8 ranks, 512 threads: 32 KiB per channel.
  EXPECT_EQ(m.enqueue_channels(A::kRing, P::kLL, 3 * 32768), 3);
  // LL128: 640 threads · 8 B = 5 KiB per channel.
  EXPECT_EQ(m.enqueue_channels(A::kRing, P::kLL128, 5 * 5120), 5);
  // A slow PCIe graph (2 channels · 6 GB/s ≤ PCI_BW) runs Ring Simple with 256 threads.
  NcclTuningInputs pci = dgx_h100_one_node();
  pci.channels = 2;
  pci.bw_intra_gbs = 6;
  EXPECT_EQ(NcclTuningModel(pci).enqueue_channels(A::kRing, P::kSimple, 2 * 16384), 2);
  EXPECT_EQ(NcclTuningModel(pci).enqueue_channels(A::kTree, P::kSimple, 2 * 16384), 1);
}

TEST(NcclEnqueueChannels, CollNetDirectStepsDownCountingHeads) {
  NcclTuningInputs in = h100_nodes(2, CpuVendor::kIntel);
  in.channels = 32;
  in.collnet_supported = true;
  const NcclTuningModel m(in);
  // 640 threads · 8 heads · 512 B, halved at 24 channels: 16 channels hold exactly 20 MiB,
  // one byte less goes on to the next step and stops at 15 (15 · 1.25 MiB < 20 MiB).
  EXPECT_EQ(m.enqueue_channels(A::kCollNetDirect, P::kSimple, 20 << 20), 16);
  EXPECT_EQ(m.enqueue_channels(A::kCollNetDirect, P::kSimple, (20 << 20) - 1), 15);
  EXPECT_EQ(m.enqueue_channels(A::kCollNetDirect, P::kSimple, 0), 1);
  EXPECT_EQ(m.enqueue_channels(A::kCollNetDirect, P::kSimple, 1e12), 32);
}

TEST(NcclEnqueueChannels, NvlsCtasFollowReleaseAndArchitecture) {
  auto ctas = [](GpuArch arch, int nodes, int version, A algo) {
    NcclTuningInputs in = h100_nodes(nodes, CpuVendor::kIntel);
    in.arch = arch;
    in.channels = 8;
    in.nccl_version = version;
    return NcclTuningModel(in).enqueue_channels(algo, P::kSimple, 1 << 30);
  };
  EXPECT_EQ(ctas(GpuArch::kHopper, 1, 230, A::kNvls), 16);
  EXPECT_EQ(ctas(GpuArch::kBlackwell, 2, 224, A::kNvlsTree), 16);
  EXPECT_EQ(ctas(GpuArch::kBlackwell, 2, 225, A::kNvlsTree), 32);
  EXPECT_EQ(ctas(GpuArch::kBlackwell, 1, 226, A::kNvls), 32);
  EXPECT_EQ(ctas(GpuArch::kBlackwell, 1, 227, A::kNvls), 24);
  EXPECT_EQ(ctas(GpuArch::kBlackwell, 2, 227, A::kNvls), 32);
  EXPECT_EQ(ctas(GpuArch::kBlackwell, 2, 228, A::kNvls), 8);  // no more than the ring's channels
  EXPECT_EQ(ctas(GpuArch::kBlackwell, 2, 228, A::kNvlsTree), 32);
}

}  // namespace release
}  // namespace
}  // namespace parallax
