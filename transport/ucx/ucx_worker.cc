#include "transport/ucx/ucx_worker.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <ucs/debug/debug.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/aligned_buffer.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "transport/ucx/shared_memory.h"
#include "transport/ucx/spin_pacer.h"
#include "transport/ucx/ucx_lanes.h"

namespace hetps::transport::ucx_internal {

namespace {
// The worker the calling thread holds, if any (see UcxWorker::Holding).
thread_local const UcxWorker* held_worker = nullptr;
}  // namespace

// Marks the calling thread as holding the worker while ucx_mu_ is held (restores the previous
// mark: a thread may hold a client and a server worker of one process in turn).
class UcxWorker::Holding {
 public:
  explicit Holding(const UcxWorker* worker) : previous_(held_worker) { held_worker = worker; }
  ~Holding() { held_worker = previous_; }
  Holding(const Holding&) = delete;
  Holding& operator=(const Holding&) = delete;

 private:
  const UcxWorker* const previous_;
};

absl::Status UcxError(absl::string_view what, ucs_status_t status) {
  return absl::UnavailableError(absl::StrCat(what, ": ", ucs_status_string(status)));
}

// Registered receive buffers, by size class (powers of two from 64 KiB), reused.
struct UcxWorker::PooledBuffer {
  ~PooledBuffer() { std::free(data); }
  uint8_t* data = nullptr;
  size_t size = 0;
  ucp_mem_h memh = nullptr;
};

struct UcxWorker::Pool {
  absl::Mutex mu;
  ucp_context_h context ABSL_GUARDED_BY(mu) = nullptr;  // null once the worker stopped
  std::map<size_t, std::vector<std::unique_ptr<PooledBuffer>>> free ABSL_GUARDED_BY(mu);
  std::vector<PooledBuffer*> mapped ABSL_GUARDED_BY(mu);  // to unmap at stop

  void Return(std::unique_ptr<PooledBuffer> buffer) {
    absl::MutexLock lock(&mu);
    if (context == nullptr) return;  // stopped: plain memory, freed here
    free[buffer->size].push_back(std::move(buffer));
  }
};

absl::StatusOr<std::unique_ptr<UcxWorker>> UcxWorker::Create(const UcxOptions& options,
                                                             const std::string& name) {
  std::unique_ptr<UcxWorker> w(new UcxWorker());
  w->options_ = options;
  w->name_ = name;
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return UcxError("ucp_config_read", status);
  if (!options.tls.empty()) ucp_config_modify(config, "TLS", options.tls.c_str());
  if (const size_t threshold = RendezvousThreshold(options.rndv_threshold); threshold > 0) {
    ucp_config_modify(config, "RNDV_THRESH", std::to_string(threshold).c_str());
  }
  if (!options.net_devices.empty() && options.net_devices != "auto") {
    ucp_config_modify(config, "NET_DEVICES", options.net_devices.c_str());
  }
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = w->name_.c_str();
  status = ucp_init(&params, config, &w->context_);
  ucp_config_release(config);
  if (status != UCS_OK) return UcxError("ucp_init", status);
  // UCX takes SIGHUP for its debug mode (UCX_DEBUG_SIGNO); the process's signals belong to the
  // program that embeds us, so the handler that was there before goes back.
  static std::once_flag give_back_sighup;
  std::call_once(give_back_sighup, [] { ucs_debug_disable_signal(SIGHUP); });

  std::string address;
  if (absl::Status created = w->CreateUcpWorker(&w->worker_, &address, &w->ucx_fd_);
      !created.ok()) {
    ucp_cleanup(w->context_);
    return created;
  }
  {
    absl::MutexLock lock(&w->address_mu_);
    w->address_ = std::move(address);
  }
  w->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  w->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  w->standby_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->epoll_fd_ < 0 || w->wake_fd_ < 0 || w->standby_fd_ < 0) {
    for (int* fd : {&w->epoll_fd_, &w->wake_fd_, &w->standby_fd_}) {
      if (*fd >= 0) close(std::exchange(*fd, -1));  // Stop() from the destructor writes to some
    }
    ucp_worker_destroy(w->worker_);
    ucp_cleanup(w->context_);
    return absl::UnavailableError("cannot set up the UCX progress thread's wake-ups");
  }
  for (int fd : {w->ucx_fd_, w->wake_fd_}) w->WatchForInput(fd);
  // No other thread yet: handlers are set here. Every id below the highest gets one: UCX 1.13
  // calls a null handler for an id below the highest registered one (a peer's message with
  // such an id crashed the process), so ids the owner does not serve drop what comes.
  for (unsigned id = 0; id < kReceiveCheckAm; ++id) {
    w->SetAmHandler(
        id, [](const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) { return UCS_OK; });
  }
  w->SetAmHandler(kReceiveCheckAm, [raw = w.get()](const void* header, size_t header_length, void*,
                                                   size_t, const ucp_am_recv_param_t*) {
    uint64_t check = 0;
    if (header_length == sizeof(check)) {
      std::memcpy(&check, header, sizeof(check));
      raw->checks_received_ = std::max(raw->checks_received_, check);
    }
    return UCS_OK;
  });
  if (options.receive_check_interval > absl::ZeroDuration() &&
      MayMapMemory(EffectiveTls(options.tls))) {
    w->check_interval_ns_ = absl::ToInt64Nanoseconds(options.receive_check_interval);
    w->next_check_ns_ = NowNanos() + w->check_interval_ns_;
    // Here, not at the first check: a UCX worker takes milliseconds to start (more on a loaded
    // machine), which the progress thread would keep its callers waiting for.
    w->StartChecker();
  }
  w->pool_ = std::make_shared<Pool>();
  {
    absl::MutexLock lock(&w->pool_->mu);
    w->pool_->context = w->context_;
  }
  w->thread_ = std::thread([raw = w.get()] { raw->Run(); });
  return w;
}

absl::Status UcxWorker::CreateUcpWorker(ucp_worker_h* worker, std::string* address, int* event_fd) {
  ucp_worker_params_t params = {};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time (the holder of ucx_mu_), not always the same one.
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t status = ucp_worker_create(context_, &params, worker);
  if (status != UCS_OK) return UcxError("ucp_worker_create", status);
  ucp_address_t* packed = nullptr;
  size_t length = 0;
  status = ucp_worker_get_address(*worker, &packed, &length);
  if (status == UCS_OK) {
    address->assign(reinterpret_cast<const char*>(packed), length);
    ucp_worker_release_address(*worker, packed);
    status = ucp_worker_get_efd(*worker, event_fd);
  }
  if (status != UCS_OK) {
    ucp_worker_destroy(std::exchange(*worker, nullptr));
    return UcxError("setting up a UCX worker", status);
  }
  return absl::OkStatus();
}

UcxWorker::~UcxWorker() {
  Stop();
  // Not in Release(): a caller may still be leaving (EndDriving) when the thread ends.
  if (standby_fd_ >= 0) close(standby_fd_);
}

bool UcxWorker::Post(absl::AnyInvocable<void()> task) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    tasks_.push_back(std::move(task));
  }
  Wake();
  return true;
}

void UcxWorker::Wake() {
  // Sequentially consistent with Run()'s sleeping_/news_ pair: either the thread sees the news
  // before it sleeps, or this sees it sleeping and writes to the eventfd.
  news_.store(true);
  if (!sleeping_.load()) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t written = write(wake_fd_, &one, sizeof(one));
}

UcxWorker::Here UcxWorker::EnterHere() {
  if (held_worker == this) return Here::kHeldAlready;
  // Without busy polling the progress thread may sleep in epoll, armed: it would not notice
  // what a send from here leaves to progress. So a task runs here only where that thread will
  // progress after it: busy polling (it never sleeps), or standing by while callers drive (it
  // progresses before it can sleep again, holding the worker: after this thread lets go).
  // Standing by it would run a posted task only when its nap ends: a call started right after
  // a wait, that nobody waits for yet, would leave up to UcxOptions::standby_nap late.
  if (!options_.busy_poll && !standing_by_.load()) return Here::kBusy;
  if (!ucx_mu_.TryLock()) return Here::kBusy;
  // Holding the worker, the task runs before the progress thread can release UCX, even if
  // Stop() comes meanwhile.
  if (stop_requested_.load()) {
    ucx_mu_.Unlock();
    return Here::kStopping;
  }
  // Again, holding the worker: it may have stopped standing by, and armed, meanwhile.
  if (!options_.busy_poll && !standing_by_.load()) {
    ucx_mu_.Unlock();
    return Here::kBusy;
  }
  entered_from_ = held_worker;
  held_worker = this;
  RunTasks();  // those posted before keep their place
  return Here::kEntered;
}

void UcxWorker::LeaveHere() {
  held_worker = entered_from_;
  ucx_mu_.Unlock();
}

bool UcxWorker::DriveOnce(bool* progressed) {
  if (held_worker == this) return false;
  absl::MutexLock lock(&ucx_mu_);
  if (released_) return false;
  Holding holding(this);
  const bool ran = RunTasks();
  if (Progress() != 0 || ran) *progressed = true;
  return true;
}

void UcxWorker::Stop(absl::AnyInvocable<void()> last) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    last_task_ = std::move(last);
  }
  stop_requested_.store(true);
  Wake();
  WakeFromStandBy();
  if (thread_.joinable()) thread_.join();
}

void UcxWorker::WatchForInput(int fd) {
  epoll_event event = {};
  event.events = EPOLLIN;
  event.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
}

void UcxWorker::SetAmHandler(unsigned id, AmHandler handler) {
  if (am_handlers_.size() <= id) am_handlers_.resize(id + 1);
  am_handlers_[id] = std::make_unique<AmSlot>(AmSlot{this, std::move(handler)});
  RegisterAmHandler(id);
}

void UcxWorker::RegisterAmHandler(unsigned id) {
  ucp_am_handler_param_t param = {};
  param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                     UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  param.id = id;
  param.flags = UCP_AM_FLAG_WHOLE_MSG;
  param.cb = &UcxWorker::OnAm;
  param.arg = am_handlers_[id].get();
  const ucs_status_t status = ucp_worker_set_am_recv_handler(worker_, &param);
  if (status != UCS_OK)
    LogError("ucx: cannot set an active-message handler: %s", ucs_status_string(status));
}

ucs_status_t UcxWorker::OnAm(void* arg, const void* header, size_t header_length, void* data,
                             size_t length, const ucp_am_recv_param_t* param) {
  auto* slot = static_cast<AmSlot*>(arg);
  ++slot->worker->arrivals_;
  return slot->handler(header, header_length, data, length, param);
}

bool UcxWorker::RunTasks() {
  // A load first: polling loops call this all the time, and a load keeps the line shared.
  if (!news_.load(std::memory_order_relaxed) || !news_.exchange(false)) return false;
  // Tasks may post tasks (they run on the next round): swap into a local list, so that the
  // member ones keep their capacity and no allocation happens per round.
  std::vector<absl::AnyInvocable<void()>> running;
  running.swap(running_);
  {
    absl::MutexLock lock(&mu_);
    running.swap(tasks_);
  }
  for (auto& task : running) task();
  running.clear();
  running_.swap(running);
  return true;
}

void UcxWorker::ProgressUntil(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = hetps::Now() + timeout;
  if (InsideProgress()) return;
  while (!done() && hetps::Now() < deadline) Progress();
}

void UcxWorker::Run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  const int64_t poll_ns = absl::ToInt64Nanoseconds(options_.poll_before_sleep);
  const int64_t poll_alone_ns = absl::ToInt64Nanoseconds(options_.poll_alone);
  SpinPacer alone(poll_alone_ns);
  const timespec standby_nap = absl::ToTimespec(options_.standby_nap);
  int64_t last_activity = NowNanos();
  while (!stop_requested_.load()) {
    if (drivers_.load() > 0) {
      StandBy(standby_nap);
      last_activity = NowNanos();  // their calls count as activity
      MaybeCheckReceiving(last_activity);
      continue;
    }
    if (ProgressOnce()) {
      alone.OnEvent();
      last_activity = NowNanos();
      MaybeCheckReceiving(last_activity);
      continue;
    }
    // An answer usually follows within microseconds of a message: waking up from epoll would
    // cost more, so poll on for a while before sleeping (or for ever, busy polling). Whoever
    // else wants this CPU goes first when there is nothing to do: always where callers drive
    // (a caller driving the worker, which is then left to it, or one about to wait), otherwise
    // once the thread has polled alone for a while (SpinPacer: less where a thread waits for
    // this CPU).
    const int64_t now = NowNanos();
    MaybeCheckReceiving(now);
    const int64_t idle_ns = now - last_activity;
    if (options_.busy_poll || idle_ns < poll_ns) {
      if (driven_.load(std::memory_order_relaxed)) {
        sched_yield();
      } else if (options_.busy_poll) {
        // Busy polling keeps its spin: busy threads on fewer CPUs than they need are moved
        // apart by the scheduler only while they do not hand the CPU over (unpinned, a shard
        // that adapted stayed beside its busy worker in 4 of 12 pairs, at 20 us a push+pull
        // where the rest took 5).
        if (idle_ns >= poll_alone_ns) sched_yield();
      } else if (idle_ns >= alone.spin_ns()) {
        alone.Yield();
      }
      continue;
    }
    SleepUntilEvent();
    alone.Restart();
    last_activity = NowNanos();
  }
  Release();
}

void UcxWorker::MaybeCheckReceiving(int64_t now_ns) {
  if (check_interval_ns_ == 0 || now_ns < next_check_ns_) return;
  next_check_ns_ = now_ns + check_interval_ns_;
  absl::MutexLock lock(&ucx_mu_);
  Holding holding(this);
  CheckReceiving();
}

bool UcxWorker::ProgressOnce() {
  absl::MutexLock lock(&ucx_mu_);
  Holding holding(this);
  const bool ran = RunTasks();
  return Progress() != 0 || ran;
}

unsigned UcxWorker::Progress() {
  ++progress_depth_;
  const unsigned events = ucp_worker_progress(worker_);
  --progress_depth_;
  while (!after_progress_.empty()) {
    std::vector<absl::AnyInvocable<void()>> running;
    running.swap(after_progress_);
    for (auto& task : running) task();
  }
  return events;
}

void UcxWorker::EndDriving(bool gave_up) {
  if (gave_up) wanted_.store(true);
  if (drivers_.fetch_sub(1) != 1) return;
  // The last driver leaves. Sequentially consistent with StandBy()'s standing_by_/drivers_
  // pair: either the thread sees no driver before it sleeps, or this sees it standing by.
  // It is woken where a caller waits for it or tasks wait (posted after the last driver ran
  // them); not for calls still in flight that no caller waits for yet (a caller that waits
  // for its next call would pay a system call for each): those wait for its nap's end.
  const bool waited_for = wanted_.exchange(false);
  if ((waited_for || news_.load()) && standing_by_.load()) WakeFromStandBy();
}

void UcxWorker::WakeFromStandBy() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t written = write(standby_fd_, &one, sizeof(one));
}

void UcxWorker::StandBy(const timespec& nap) {
  standing_by_.store(true);
  if (drivers_.load() > 0 && !stop_requested_.load()) {
    pollfd standby = {standby_fd_, POLLIN, 0};
    ppoll(&standby, 1, &nap, nullptr);
  }
  standing_by_.store(false);
  uint64_t count;
  while (read(standby_fd_, &count, sizeof(count)) > 0) {
  }
}

void UcxWorker::SleepUntilEvent() {
  {
    absl::MutexLock lock(&ucx_mu_);
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) return;  // more events already
  }
  sleeping_.store(true);
  if (!news_.load() && !stop_requested_.load()) {
    epoll_event events[2];
    // The timeout only bounds how long a lost wake-up could delay a task.
    epoll_wait(epoll_fd_, events, 2, 100);
  }
  sleeping_.store(false);
  uint64_t count;
  while (read(wake_fd_, &count, sizeof(count)) > 0) {
  }
}

void UcxWorker::Release() {
  absl::MutexLock hold(&ucx_mu_);
  Holding holding(this);
  RunTasks();  // posted before Stop()
  absl::AnyInvocable<void()> last;
  {
    absl::MutexLock lock(&mu_);
    last = std::move(last_task_);
  }
  if (last) last();
  news_.store(true);
  RunTasks();  // posted during `last`
  {
    // Registered memory is released now; buffers still in use stay valid as plain memory.
    absl::MutexLock lock(&pool_->mu);
    for (PooledBuffer* buffer : pool_->mapped) ucp_mem_unmap(context_, buffer->memh);
    pool_->mapped.clear();
    pool_->free.clear();
    pool_->context = nullptr;
  }
  if (checker_ != nullptr) ucp_worker_destroy(checker_);
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
  released_ = true;
  close(epoll_fd_);
  close(wake_fd_);
}

Payload UcxWorker::Buffer(size_t bytes, uint8_t** data) {
  size_t size = size_t{64} << 10;
  while (size < bytes) size <<= 1;
  std::unique_ptr<PooledBuffer> buffer;
  {
    absl::MutexLock lock(&pool_->mu);
    auto& free = pool_->free[size];
    if (!free.empty()) {
      buffer = std::move(free.back());
      free.pop_back();
    }
  }
  if (buffer == nullptr) {
    buffer = std::make_unique<PooledBuffer>();
    buffer->size = size;
    buffer->data = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, size));
    ucp_mem_map_params_t params = {};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = buffer->data;
    params.length = size;
    if (buffer->data != nullptr && ucp_mem_map(context_, &params, &buffer->memh) == UCS_OK) {
      absl::MutexLock lock(&pool_->mu);
      pool_->mapped.push_back(buffer.get());
    }
  }
  *data = buffer->data;
  // The owner hands the buffer back to the pool when the last payload referring to it goes.
  std::shared_ptr<PooledBuffer> owner(buffer.release(), [pool = pool_](PooledBuffer* released) {
    pool->Return(std::unique_ptr<PooledBuffer>(released));
  });
  return Payload::Shared(ByteSpan(*data, bytes), std::move(owner));
}

std::function<void(ucs_status_t)>* UcxWorker::Keep(std::function<void(ucs_status_t)> callback) {
  error_handlers_.push_back(
      std::make_unique<std::function<void(ucs_status_t)>>(std::move(callback)));
  return error_handlers_.back().get();
}

}  // namespace hetps::transport::ucx_internal
