// EtcdClient: the etcd v3 calls (over gRPC) that shards coordinate replication with: keys read
// and written, compare-and-swap transactions, and leases that etcd ends when their holder stops
// renewing them. Every call has a deadline; etcd's errors come back as the gRPC status
// (UNAVAILABLE while etcd cannot be reached).
//
//   HETPS_ASSIGN_OR_RETURN(auto etcd, EtcdClient::Connect("127.0.0.1:2379"));
//   HETPS_ASSIGN_OR_RETURN(EtcdClient::Lease lease, etcd->GrantLease(absl::Seconds(3)));
//   HETPS_ASSIGN_OR_RETURN(bool won, etcd->PutIf("/job/primary/0", 0, "shard 1", lease.id));
//
// Thread-safe.
#ifndef HETPS_SERVER_ETCD_CLIENT_H_
#define HETPS_SERVER_ETCD_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace hetps::server {

class EtcdClient {
 public:
  // A key's value, the store revision that last changed it, and its lease (0: none).
  struct Value {
    std::string value;
    int64_t mod_revision = 0;
    int64_t lease = 0;
  };

  // `endpoint` is "host:port" of etcd's client URL (plain HTTP/2). Unavailable if etcd does not
  // answer within `call_timeout`, which also bounds every call.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Connect(
      const std::string& endpoint, absl::Duration call_timeout = absl::Seconds(5));
  virtual ~EtcdClient() = default;

  const std::string& endpoint() const { return endpoint_; }

  // nullopt when the key does not exist.
  virtual absl::StatusOr<std::optional<Value>> Get(const std::string& key) = 0;
  // Every key that starts with `prefix`.
  virtual absl::StatusOr<std::map<std::string, Value>> GetPrefix(const std::string& prefix) = 0;
  virtual absl::Status Put(const std::string& key, const std::string& value, int64_t lease = 0) = 0;
  // Puts `value` only if the key was last changed at `mod_revision` (0: only if it does not
  // exist), atomically; whether it did.
  virtual absl::StatusOr<bool> PutIf(const std::string& key, int64_t mod_revision,
                                     const std::string& value, int64_t lease = 0) = 0;
  virtual absl::Status Delete(const std::string& key) = 0;

  // A lease that etcd ends, deleting the keys put with it, unless renewed within its time to
  // live: `ttl` in whole seconds, at least one, or etcd's minimum if that is longer (1.5 election
  // timeouts, 2 s with etcd's defaults).
  struct Lease {
    int64_t id = 0;
    absl::Duration ttl;
  };
  // The lease calls end by `deadline` or the client's call timeout, whichever comes first: an
  // answer that comes after the lease it is about has ended is of no use.
  virtual absl::StatusOr<Lease> GrantLease(absl::Duration ttl, absl::Time deadline) = 0;
  // Renews it once: the time to live it has again. NotFound if it has already ended.
  virtual absl::StatusOr<absl::Duration> RenewLease(int64_t lease, absl::Time deadline) = 0;
  virtual absl::Status RevokeLease(int64_t lease, absl::Time deadline) = 0;

  // Ends the calls in flight now (Cancelled), for a process that stops: a silent etcd would
  // otherwise hold each for its deadline. Later calls go ahead as usual.
  virtual void CancelCalls() = 0;

 protected:
  EtcdClient(std::string endpoint, absl::Duration call_timeout)
      : endpoint_(std::move(endpoint)), call_timeout_(call_timeout) {}
  absl::Duration call_timeout() const { return call_timeout_; }

 private:
  const std::string endpoint_;
  const absl::Duration call_timeout_;
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_ETCD_CLIENT_H_
