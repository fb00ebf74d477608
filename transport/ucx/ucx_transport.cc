#include "transport/ucx/ucx_transport.h"

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "common/timer_queue.h"
#include "transport/grpc/grpc_transport.h"
#include "transport/ucx/net_devices.h"
#include "transport/ucx/shared_memory.h"
#include "transport/ucx/spin_pacer.h"
#include "transport/ucx/ucx_client.h"
#include "transport/ucx/ucx_server.h"

namespace hetps::transport {
namespace {

// "auto" devices: those that carry traffic to `address` (transport/ucx/net_devices.h). A
// listener whose own address names no interface (a wildcard) follows the address peers reach
// it at, where it is given: every interface would include some that they cannot reach.
UcxOptions Resolve(UcxOptions options, const std::string& address, bool listening) {
  if (options.net_devices == "auto") {
    options.net_devices = ucx_internal::AutoNetDevices(address, listening);
    if (listening && options.net_devices.empty() && !options.advertised_address.empty()) {
      options.net_devices = ucx_internal::AutoNetDevices(options.advertised_address, listening);
    }
  }
  return options;
}

TransportOptions BootstrapOptions(const UcxOptions& options) {
  TransportOptions grpc = options.shared;
  grpc.max_message_bytes = options.max_message_bytes;
  return grpc;
}

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(const UcxOptions& options)
      : options_(options), grpc_(NewGrpcTransport(BootstrapOptions(options))) {}

  ~UcxTransport() override {
    absl::MutexLock lock(&mu_);
    client_workers_.clear();  // stops their progress threads
  }

  absl::string_view name() const override { return "ucx"; }

  absl::StatusOr<std::unique_ptr<Listener>> Listen(const std::string& address,
                                                   RequestHandler* handler) override {
    HETPS_ASSIGN_OR_RETURN(
        std::unique_ptr<ucx_internal::UcxListener> listener,
        ucx_internal::UcxListener::Start(address, handler,
                                         Resolve(options_, address, /*listening=*/true), grpc_));
    return std::unique_ptr<Listener>(std::move(listener));
  }

  using Transport::Connect;
  absl::StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address,
                                                      absl::Time deadline,
                                                      const ConnectOptions& options) override {
    HETPS_ASSIGN_OR_RETURN(ucx_internal::ClientWorker * worker,
                           WorkerFor(address, /*map_memory=*/true));
    absl::StatusOr<std::unique_ptr<ucx_internal::UcxConnection>> connection =
        ucx_internal::UcxConnection::Connect(address, deadline, options, worker, grpc_, &timers_,
                                             options_);
    if (!connection.ok() && ucx_internal::IsMappedMemoryRefused(connection.status())) {
      // Another network namespace of this machine (transport/ucx/shared_memory.h).
      HETPS_ASSIGN_OR_RETURN(worker, WorkerFor(address, /*map_memory=*/false));
      connection = ucx_internal::UcxConnection::Connect(address, deadline, options, worker, grpc_,
                                                        &timers_, options_);
    }
    if (!connection.ok()) return connection.status();
    return std::unique_ptr<Connection>(*std::move(connection));
  }

  // Drives for as long as a progress thread would poll: until done with busy polling, else
  // for the poll window before sleeping (the caller then blocks; DriveWindow shortens the
  // window where the answer cannot come while the caller spins). Sleeping when idle, the caller
  // yields between polls once it has spun for as long as its SpinPacer says (2 us where a
  // yield let another thread work, as where a shard waits for the caller's CPU). A busy caller
  // never yields: busy threads on fewer CPUs than they need are moved apart by the scheduler
  // only while they do not (unpinned, a busy worker that yielded stayed beside its shard in 3
  // of 12 pairs, at 70 us a push+pull where the rest took 5).
  bool Drive(absl::FunctionRef<bool()> done) override {
    if (done()) return true;
    // What a thread's waits learned is its own, as the CPU it runs on is.
    thread_local ucx_internal::DriveWindow window;
    thread_local ucx_internal::SpinPacer pacer(ucx_internal::SpinPacer::kCallerMaxSpinNs);
    pacer.Restart();
    int64_t last_event = NowNanos();
    const int64_t give_up =
        options_.busy_poll
            ? std::numeric_limits<int64_t>::max()
            : last_event + window.Begin(absl::ToInt64Nanoseconds(options_.poll_before_sleep));
    const ClientWorkers workers = DrivenWorkers();
    bool driving = !workers.empty();
    bool progressed = false;
    int64_t idle_at_give_up = 0;
    // The clock is read every few rounds only: on some VMs a read costs as much as a round.
    for (uint32_t round = 1; driving && !done(); ++round) {
      if (round % 8 == 0) {
        const int64_t now = NowNanos();
        if (progressed) {
          last_event = now;
          pacer.OnEvent();
        }
        progressed = false;
        if (now >= give_up) {
          idle_at_give_up = now - last_event;
          break;
        }
        if (!options_.busy_poll && now - last_event >= pacer.spin_ns()) pacer.Yield();
      }
      driving = false;
      for (ucx_internal::UcxWorker* worker : workers) driving |= worker->DriveOnce(&progressed);
    }
    if (progressed) pacer.OnEvent();
    const bool finished = done();
    for (ucx_internal::UcxWorker* worker : workers) worker->EndDriving(/*gave_up=*/!finished);
    if (!options_.busy_poll) window.End(finished, idle_at_give_up);
    return finished;
  }

  void Progress() override {
    const ClientWorkers workers = DrivenWorkers();
    bool progressed = false;
    for (ucx_internal::UcxWorker* worker : workers) worker->DriveOnce(&progressed);
    // The caller works on while its calls are under way: the progress thread, should it have
    // stood by for this turn, takes them over.
    for (ucx_internal::UcxWorker* worker : workers) worker->EndDriving(/*gave_up=*/true);
  }

 private:
  using ClientWorkers = absl::InlinedVector<ucx_internal::UcxWorker*, 2>;  // no allocation

  // Every client worker, each told that this thread drives it (EndDriving() when done).
  ClientWorkers DrivenWorkers() {
    ClientWorkers workers;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [devices, client] : client_workers_) workers.push_back(client->worker.get());
    }
    for (ucx_internal::UcxWorker* worker : workers) worker->BeginDriving();
    return workers;
  }

  // One client worker per set of network devices (those that reach the peer) and transports
  // (without memory-mapped ones for peers whose wake-ups they would lose).
  absl::StatusOr<ucx_internal::ClientWorker*> WorkerFor(const std::string& address,
                                                        bool map_memory) {
    UcxOptions options = Resolve(options_, address, /*listening=*/false);
    if (!map_memory) {
      options.tls = ucx_internal::WithoutMappedMemory(ucx_internal::EffectiveTls(options.tls));
      if (options.tls.empty()) {
        return ucx_internal::MappedMemoryRefused(
            absl::StrCat(address, " (and UCX may use no transport but memory-mapped ones here)"));
      }
    }
    const std::string key = absl::StrCat(options.net_devices, "|", options.tls);
    absl::MutexLock lock(&mu_);
    if (auto it = client_workers_.find(key); it != client_workers_.end()) return it->second.get();
    // Only a worker that exists goes into the map: Drive() uses every entry.
    HETPS_ASSIGN_OR_RETURN(std::unique_ptr<ucx_internal::ClientWorker> worker,
                           ucx_internal::ClientWorker::Create(options));
    return client_workers_.emplace(key, std::move(worker)).first->second.get();
  }

  const UcxOptions options_;
  const std::shared_ptr<Transport> grpc_;
  TimerQueue timers_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<ucx_internal::ClientWorker>> client_workers_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::shared_ptr<Transport> NewUcxTransport(const UcxOptions& options) {
  return std::make_shared<UcxTransport>(options);
}

}  // namespace hetps::transport
