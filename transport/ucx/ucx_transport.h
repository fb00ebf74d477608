// The UCX transport: requests and responses as UCP active messages, the payload sent zero-copy
// (rendezvous) when large and received straight into its destination; shared memory between
// processes of one machine, TCP or RDMA between machines, whatever UCX finds.
//
// A UCX listener also listens on gRPC at the same address: gRPC clients are served there as
// usual, and UCX clients bootstrap there (each side learns the other's UCX worker address). A
// UCX connection re-bootstraps by itself after its peer restarts.
//
//   auto ucx = NewUcxTransport({});
//   auto listener = ucx->Listen("0.0.0.0:7000", &handler);   // gRPC + UCX
//   auto connection = ucx->Connect("10.0.0.1:7000", deadline);
#ifndef HETPS_TRANSPORT_UCX_UCX_TRANSPORT_H_
#define HETPS_TRANSPORT_UCX_UCX_TRANSPORT_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "transport/transport.h"

namespace hetps::transport {

struct UcxOptions {
  size_t max_message_bytes = 64 << 20;
  // UCX transports to use (UCX_TLS), e.g. "tcp" or "shm,tcp"; empty: UCX's choice or the
  // UCX_TLS environment variable.
  std::string tls;
  // Network devices (UCX_NET_DEVICES). "auto": those that carry the traffic anyway: "lo" for
  // loopback addresses, else the interface that holds a listener's address or routes to a
  // peer, plus every RDMA port (transport/ucx/net_devices.h).
  std::string net_devices = "auto";
  // Spin on the worker instead of sleeping on its event fd when idle (lower latency, a busy
  // CPU). Callers then also send from their own thread, and Drive() until their calls are
  // done; otherwise Drive() polls for poll_before_sleep at most.
  bool busy_poll = false;
  // Otherwise the progress thread keeps polling this long after its last event before it
  // sleeps: a reply arriving within the window costs no wake-up (tens of microseconds on a VM).
  // A caller waiting for its calls drives the worker this long before it blocks, or 2 us after
  // a window that ended with nothing happening in its second half (DriveWindow in
  // transport/ucx/spin_pacer.h); within it, it yields between polls after 25 us at most
  // (SpinPacer there).
  absl::Duration poll_before_sleep = absl::Microseconds(50);
  // A server's progress thread polls longer: once a round trip takes longer than its window,
  // it sleeps between requests, each request wakes it, and the scheduler places the woken
  // thread beside the thread that sent the request (on one machine, often the client that
  // spins waiting for the answer), so the round trip stays long: a 16 KiB push+pull took 14 or
  // 115 us, fixed for a process's life, with a 50 us window on two CPUs.
  absl::Duration server_poll_before_sleep = absl::Milliseconds(1);
  // A progress thread that no caller drives polls without yielding its CPU for this long after
  // its last event (a yield costs a system call, about a microsecond), then yields between
  // polls for the rest of its window (busy polling: for ever), so that a thread waiting for
  // that CPU runs at once instead of at the window's end. Where a machine has fewer CPUs than
  // busy threads, a shard's 1 ms window otherwise kept a worker or another shard off its CPU: a
  // 1 MiB push+pull to two shards in 512 KiB partitions took 2.3 ms instead of 0.26. Sleeping
  // when idle, less once a yield let another thread work: 2 us, doubling back with each event
  // that came while its yields found the CPU free (SpinPacer in transport/ucx/spin_pacer.h).
  absl::Duration poll_alone = absl::Microseconds(50);
  // While callers drive a client's worker (they wait for their calls), its progress thread
  // stands by asleep, waking at least this often: a caller that gives up waiting wakes it at
  // once, but the answers to calls that no caller waits for (asynchronous ones, after the last
  // waiting caller stopped driving) wait for it this long at most; such calls are sent at once,
  // by the thread that starts them (UcxWorker::RunOrPost). (A polling progress thread, even one
  // that yields at once, counts as busy: with a worker and a shard on a machine of two CPUs, the
  // scheduler left the waiting caller and the shard on one CPU in a third of runs, a 4 KiB
  // push+pull taking 15-20 us instead of 4-5.)
  absl::Duration standby_nap = absl::Microseconds(200);
  // Messages from this many bytes on go by rendezvous (the receiver fetches the payload into
  // place), smaller ones eagerly (sent at once, copied out of UCX's buffers). 0: 512 KiB on a
  // machine without RDMA devices, UCX's own threshold where RDMA makes rendezvous zero-copy;
  // the UCX_RNDV_THRESH environment variable, when set, wins over 0. Without RDMA, UCX's own
  // choice (8-64 KiB) costs a round trip that a copy does not: a 64 KiB push+pull over TCP
  // took 119 us by rendezvous and 60 eagerly, 16 KiB over shared memory 17 and 8.
  size_t rndv_threshold = 0;
  // A server's UCX worker is replaced (for new clients; it serves its own until they leave,
  // then goes) once this many clients have left it. UCX 1.13 destroys an endpoint that a peer
  // connected to only with its worker (without peer failure detection, which would rule out
  // shared memory): each client gone would keep its endpoint, and the client's shared-memory
  // segment attached (4 MiB of address space, the pages the client used, and one of the
  // machine's System V segments, 4096 by default), for the server's life.
  int server_clients_per_worker = 64;
  // How often a worker checks that messages still reach it over shared memory, and the longest
  // a stuck receive queue goes unnoticed (twice this: UcxWorker, Receive checks). A sender
  // killed while it writes into the queue, which all local senders share, leaves it stuck (UCX
  // 1.13): seen about once in 100 to 1,000 kills of a busy peer. Zero: no checks (and none where
  // UCX may not use shared memory).
  absl::Duration receive_check_interval = absl::Seconds(1);
  // For a listener on a wildcard address: where peers reach it (TransportOptions::
  // ucx_advertised_address); "auto" devices follow it.
  std::string advertised_address;
  // What UCX shares with gRPC (its bootstrap runs over gRPC): keepalive, idle timeout and
  // backpressure. Its max_message_bytes is ignored for the one above.
  TransportOptions shared;
};

std::shared_ptr<Transport> NewUcxTransport(const UcxOptions& options);

}  // namespace hetps::transport

#endif  // HETPS_TRANSPORT_UCX_UCX_TRANSPORT_H_
