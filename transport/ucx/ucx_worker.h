// UcxWorker: one UCP context and worker, driven by one progress thread. UCX is used by one
// thread at a time, the one holding the worker (its lock): the progress thread, a thread that
// waits for its calls (driving), or one that runs a task at once (RunOrPost: with busy polling,
// or while the progress thread stands by).
// Other threads Post() tasks, which wake the progress thread through an eventfd. When there is
// nothing to progress the thread polls for a while, then sleeps in epoll on the worker's event
// fd (ucp_worker_arm) and that eventfd, unless busy polling was asked for.
//
// Driving: a thread that waits for its calls drives the worker itself (BeginDriving, DriveOnce,
// EndDriving) while the progress thread stands by, asleep, so a response completes on the
// waiting thread with no hand-off between threads (each costs a context switch when both share
// a CPU). Asleep, not polling: a thread that polls, even one that yields at once, is a busy
// thread to the scheduler, which then left the caller and the shard it waits for on one CPU of
// two in a third of runs. A caller that gives up waiting wakes it (EndDriving); calls no caller
// waits for are progressed when its nap ends (UcxOptions::standby_nap), or at once by a caller
// that drives (they are sent at once, RunOrPost). The progress thread of a worker that callers
// drive yields the CPU at every turn it polls with nothing to do: on a CPU it shares with a caller
// it then takes almost no time, and it still serves at once a caller that blocks instead. A
// server's worker, which no caller drives, polls without yielding for UcxOptions::poll_alone after
// its last event (a yield costs a system call), then yields too; sleeping when idle, less where its
// yields show a thread waiting for its CPU (SpinPacer).
//
//   auto worker = UcxWorker::Create(options, "ucx-server");
//   (*worker)->Post([w = worker->get()] { ... ucp calls on w->worker() ... });
//
// Receive checks: a sender killed while it writes into UCX's shared-memory receive queue (which
// every local sender shares, read in order) leaves it stuck: nothing reaches the worker over
// shared memory again. So the progress thread sends the worker a message over shared memory
// every UcxOptions::receive_check_interval, from a second UCX worker of this process. If the
// last one was in the queue and has not been read by the next check, or could not enter the
// queue (full) and nothing else was read either, the worker starts afresh: a new UCX worker (a
// new queue and address) in its place, after the owner has dropped its endpoints (OnRenewal),
// and the old one destroyed. Peers then reconnect to the new address (a client bootstraps
// again; a server's clients are told goodbye and learn the new address from their next
// bootstrap or probe).
//
// Thread safety: Post, RunOrPost, the driving calls, address and Stop may be called from any
// thread; everything else only from tasks (by the thread holding the worker).
#ifndef HETPS_TRANSPORT_UCX_UCX_WORKER_H_
#define HETPS_TRANSPORT_UCX_UCX_WORKER_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/payload.h"
#include "transport/ucx/ucx_frame.h"
#include "transport/ucx/ucx_transport.h"

namespace hetps::transport::ucx_internal {

// Active-message ids.
inline constexpr unsigned kRequestAm = 1;
inline constexpr unsigned kResponseAm = 2;
inline constexpr unsigned kReceiveCheckAm = 3;  // the worker's own (see Receive checks above)

class UcxWorker {
 public:
  // Called, holding the worker, for every active message `id` (see ucp_am_recv_callback_t).
  using AmHandler = std::function<ucs_status_t(const void* header, size_t header_length, void* data,
                                               size_t length, const ucp_am_recv_param_t* param)>;

  static absl::StatusOr<std::unique_ptr<UcxWorker>> Create(const UcxOptions& options,
                                                           const std::string& name);
  ~UcxWorker();  // Stop()
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // Runs `task` soon, holding the worker (the progress thread, or a driving caller); false
  // once stopping (the task is dropped).
  bool Post(absl::AnyInvocable<void()> task);
  // Runs `task` at once when the calling thread holds the worker (a reply sent from a request's
  // handler) or, with busy polling or while the progress thread stands by, when no other thread
  // holds it (after the tasks posted before); else posts it. False once stopping (the task is
  // dropped). A template, so that a task run at once is never wrapped (the wrapping allocates).
  template <typename Task>
  bool RunOrPost(Task&& task) {
    switch (EnterHere()) {
      case Here::kHeldAlready:
        task();
        return true;
      case Here::kEntered:
        task();
        LeaveHere();
        return true;
      case Here::kStopping:
        return false;
      case Here::kBusy:
        break;
    }
    return Post(absl::AnyInvocable<void()>(std::forward<Task>(task)));
  }

  // A caller about to wait for its calls drives the worker: BeginDriving, DriveOnce until its
  // calls are done (or it gives up), EndDriving. DriveOnce runs posted tasks and progresses
  // once, holding the worker (waiting while another driver holds it); false when it cannot
  // (the worker stopped, or the calling thread holds it already: a callback must not wait);
  // sets `*progressed` when anything happened (a task ran, UCX had events).
  void BeginDriving() {
    drivers_.fetch_add(1);
    driven_.store(true, std::memory_order_relaxed);
  }
  bool DriveOnce(bool* progressed);
  // `gave_up`: the caller leaves calls of its own not done to the progress thread (it waits
  // for them blocked, or works meanwhile).
  void EndDriving(bool gave_up = false);
  // Runs `last` on the progress thread after the tasks already posted, then ends the thread
  // and releases UCX. Idempotent.
  void Stop(absl::AnyInvocable<void()> last = nullptr);

  // The worker's address, for the peer's ucp_ep_create; a new one after a renewal.
  std::string address() const {
    absl::MutexLock lock(&address_mu_);
    return address_;
  }
  // How often the worker started afresh because its receive queue was stuck.
  int renewals() const { return renewals_.load(); }
  const UcxOptions& options() const { return options_; }

  // --- Only by the thread holding the worker (in tasks, handlers and callbacks) ---
  ucp_worker_h worker() const { return worker_; }
  void SetAmHandler(unsigned id, AmHandler handler);
  // Runs, holding the worker, before a renewal replaces the UCX worker (see Receive checks):
  // the owner fails its calls and closes its endpoints, which belong to the old one.
  void OnRenewal(absl::AnyInvocable<void()> drop_endpoints) {
    on_renewal_ = std::move(drop_endpoints);
  }
  // Progresses until `done()` or `timeout` (for closing endpoints and flushing). Does nothing
  // inside progress (UCX's own callbacks), where progress must not nest.
  void ProgressUntil(const std::function<bool()>& done, absl::Duration timeout);
  // Whether the calling thread is inside ucp_worker_progress (in a handler or callback).
  bool InsideProgress() const { return progress_depth_ > 0; }
  // Inside progress: runs `task` as soon as ucp_worker_progress returns (before other tasks).
  void RunAfterProgress(absl::AnyInvocable<void()> task) {
    after_progress_.push_back(std::move(task));
  }
  // A registered buffer of at least `bytes` bytes from a pool, handed back when the last
  // Payload referring to it goes. The memory stays valid after the worker stops.
  Payload Buffer(size_t bytes, uint8_t** data);
  // Keeps `callback` alive until the worker stops; returns where it lives.
  std::function<void(ucs_status_t)>* Keep(std::function<void(ucs_status_t)> callback);

 private:
  struct PooledBuffer;
  struct Pool;
  class Holding;

  UcxWorker() = default;
  void WatchForInput(int fd);  // in the progress thread's epoll
  // Hands am_handlers_[id] to UCX.
  void RegisterAmHandler(unsigned id);
  // A UCX worker of `context_` for one thread at a time, its address and event fd.
  absl::Status CreateUcpWorker(ucp_worker_h* worker, std::string* address, int* event_fd);
  // Receive checks, from the progress thread: one every interval, holding the worker.
  void MaybeCheckReceiving(int64_t now_ns);
  // Starts afresh if the last check has not arrived, else sends the next one.
  void CheckReceiving();
  void SendReceiveCheck();
  // The checker and its endpoint to this worker (none if UCX refuses: no checks then).
  void StartChecker();
  // A new UCX worker in place of the stuck one (see Receive checks).
  void Renew();
  enum class Here { kHeldAlready, kEntered, kStopping, kBusy };
  // For RunOrPost: whether the calling thread may use UCX now. kEntered: it took the worker
  // (and ran the tasks posted before); it must LeaveHere() after its task.
  Here EnterHere();
  void LeaveHere();
  void Run();
  // One round of posted tasks and progress, holding the worker; true if anything happened.
  bool ProgressOnce();
  // ucp_worker_progress, counted in progress_depth_.
  unsigned Progress();
  // Arms the worker's event fd and sleeps until UCX or a task needs the thread (bounded).
  void SleepUntilEvent();
  // While callers drive: sleeps until woken (EndDriving, Stop) or for `nap` at most.
  void StandBy(const timespec& nap);
  void WakeFromStandBy();
  // After Stop(): the last tasks, then UCX is released.
  void Release();
  // Runs what was posted; false if nothing was. Needs the worker held.
  bool RunTasks();
  // Tells the progress thread about news (writes to the eventfd if it sleeps).
  void Wake();
  static ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* data,
                           size_t length, const ucp_am_recv_param_t* param);

  UcxOptions options_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  mutable absl::Mutex address_mu_;
  std::string address_ ABSL_GUARDED_BY(address_mu_);
  std::atomic<int> renewals_{0};
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int standby_fd_ = -1;  // an eventfd, written to wake the thread standing by
  int ucx_fd_ = -1;
  // Only the thread holding the worker touches these.
  int progress_depth_ = 0;
  std::vector<absl::AnyInvocable<void()>> after_progress_;
  struct AmSlot {
    UcxWorker* worker;
    AmHandler handler;
  };
  std::vector<std::unique_ptr<AmSlot>> am_handlers_;  // by id; UCX holds their addresses
  uint64_t arrivals_ = 0;                             // active messages received
  std::vector<std::unique_ptr<std::function<void(ucs_status_t)>>> error_handlers_;
  std::shared_ptr<Pool> pool_;
  // Receive checks: the sender (a second UCX worker) and its endpoint to this one, created with
  // the worker and again after a renewal; checks numbered from 1.
  ucp_worker_h checker_ = nullptr;
  ucp_ep_h checker_ep_ = nullptr;
  uint64_t checks_sent_ = 0;
  uint64_t checks_received_ = 0;
  bool check_queued_ = false;  // the last check is in the queue (its send completed)
  uint64_t arrivals_at_check_ = 0;
  absl::AnyInvocable<void()> on_renewal_;
  // Only the progress thread: when the next check is due; 0 interval: no checks.
  int64_t check_interval_ns_ = 0;
  int64_t next_check_ns_ = 0;

  // Held by whoever uses UCX. Taken before mu_ when both are.
  absl::Mutex ucx_mu_;
  bool released_ ABSL_GUARDED_BY(ucx_mu_) = false;                    // UCX is gone (after Stop)
  const UcxWorker* entered_from_ ABSL_GUARDED_BY(ucx_mu_) = nullptr;  // for LeaveHere
  std::vector<absl::AnyInvocable<void()>> running_ ABSL_GUARDED_BY(ucx_mu_);

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<absl::AnyInvocable<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  // Lock-free hints for the polling loop: something was posted, Stop was called, the progress
  // thread sleeps (only then does Wake write to the eventfd), how many callers drive the worker,
  // whether any ever did.
  std::atomic<bool> news_{false};
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<int> drivers_{0};
  std::atomic<bool> driven_{false};
  // The progress thread stands by; a caller that gave up waits while others still drive.
  std::atomic<bool> standing_by_{false};
  std::atomic<bool> wanted_{false};
  absl::AnyInvocable<void()> last_task_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
  std::string name_;
};

// Sends one frame as an active message on `ep`; `done` runs, holding the worker, when UCX is
// done with the header and the payload (or the send failed). The payload is sent from where it
// is (rendezvous zero-copy when large).
// A list of buffer pieces as UCX's send and receive calls take it: pieces that follow each
// other in memory are merged first (in `pieces`); one piece as a contiguous buffer, several as
// an IOV, none as an empty contiguous buffer. Contiguous matters: UCX 1.13 moves IOV data over
// TCP at a quarter of the contiguous speed, and its rendezvous copies IOV data through the
// shared-memory FIFO where a contiguous buffer goes in one zero-copy read (cma). UCX reads
// `pieces` until the operation completes.
struct UcxBuffer {
  ucp_datatype_t datatype;
  void* buffer;
  size_t count;
};
UcxBuffer DescribePieces(absl::Span<ucp_dt_iov_t> pieces);

// Sends `frame` and `payload` as active message `am_id`; `eager` makes UCX send it eagerly
// whatever its size (SendWindow: a slow link), else UCX picks by the rendezvous threshold.
void SendFrame(UcxWorker& worker, ucp_ep_h ep, unsigned am_id, const UcxFrame& frame,
               Payload payload, bool eager, absl::AnyInvocable<void(ucs_status_t)> done);
// How many frames this process sent from inside UCX's callbacks (UcxWorker::InsideProgress).
// Over TCP a server sends none (see UcxListener's SendReply), nor does a client (see its
// SendRequest); for tests.
uint64_t SendsInsideProgressForTesting();

// Creates an endpoint to `address`; `on_error` runs, holding the worker, if UCX reports the
// endpoint failed. UCX may report it even while the endpoint is being closed, so the worker
// keeps `on_error` until it stops: it must hold only weak references. INVALID_ARGUMENT if
// `address` cannot be a worker address (see the .cc), UNAVAILABLE if UCX refuses.
absl::StatusOr<ucp_ep_h> CreateEndpoint(UcxWorker& worker, const std::string& address,
                                        std::function<void(ucs_status_t)> on_error);

// Closes `ep`, flushing what was sent on it, and waits up to `wait` for the close to complete
// (progressing the worker); what is not complete by then completes in the background. `ep` is
// not to be used after. Every close flushes: UCX 1.13 refuses to force one without peer failure
// detection (see CreateEndpoint), and a flush to a peer that is gone ends with the peer's
// connection. (UCX 1.13 frees an endpoint that the peer connected to only with the worker: see
// UcxOptions::server_clients_per_worker.) Inside UCX's callbacks the close waits, with no
// wait, until the round of progress under way is over (RunAfterProgress): a close there may
// destroy transport endpoints that the round still holds events for, which UCX's TCP transport
// asserts against.
void CloseEndpoint(UcxWorker& worker, ucp_ep_h ep, absl::Duration wait = absl::ZeroDuration());
// How long a shutdown waits for its goodbye and the close to go out.
inline constexpr absl::Duration kCloseWait = absl::Seconds(1);

absl::Status UcxError(absl::string_view what, ucs_status_t status);

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TRANSPORT_UCX_UCX_WORKER_H_
