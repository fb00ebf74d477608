#include "server/etcd_client.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "grpc/support/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/etcd_rpc.grpc.pb.h"
#include "transport/grpc/grpc_deadline.h"

namespace hetps::server {
namespace {

absl::Status FromGrpc(const grpc::Status& status, const std::string& endpoint, const char* what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("etcd at ", endpoint, ": ", what, ": ", status.error_message()));
}

// The smallest key greater than every key starting with `prefix` (etcd's range_end for a
// prefix).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

EtcdClient::Value ValueOf(const etcdserverpb::KeyValue& kv) {
  return EtcdClient::Value{kv.value(), kv.mod_revision(), kv.lease()};
}

class GrpcEtcdClient final : public EtcdClient {
 public:
  GrpcEtcdClient(const std::string& endpoint, absl::Duration call_timeout,
                 std::shared_ptr<grpc::Channel> channel)
      : EtcdClient(endpoint, call_timeout),
        kv_(etcdserverpb::KV::NewStub(channel)),
        lease_(etcdserverpb::Lease::NewStub(channel)) {}

  // The sooner of `deadline` and the client's call timeout from now.
  absl::Time CallDeadline(absl::Time deadline) const {
    return std::min(deadline, hetps::Now() + call_timeout());
  }

  // One unary call by CallDeadline(deadline); errors name etcd and `what`.
  template <typename Stub, typename Request, typename Response>
  absl::Status Unary(Stub* stub,
                     grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                     const Request& request, Response* response, const char* what,
                     absl::Time deadline = absl::InfiniteFuture()) {
    grpc::ClientContext context;
    // On gRPC's monotonic clock: a lease renewal must fail within the lease's time.
    context.set_deadline(transport::GrpcDeadline(CallDeadline(deadline)));
    InFlight in_flight(this, &context);
    return FromGrpc((stub->*method)(&context, request, response), endpoint(), what);
  }

  absl::StatusOr<std::optional<Value>> Get(const std::string& key) override {
    etcdserverpb::RangeRequest request;
    request.set_key(key);
    etcdserverpb::RangeResponse response;
    if (absl::Status status =
            Unary(kv_.get(), &etcdserverpb::KV::Stub::Range, request, &response, "get");
        !status.ok()) {
      return status;
    }
    if (response.kvs().empty()) return std::optional<Value>();
    return std::optional<Value>(ValueOf(response.kvs(0)));
  }

  absl::StatusOr<std::map<std::string, Value>> GetPrefix(const std::string& prefix) override {
    etcdserverpb::RangeRequest request;
    request.set_key(prefix);
    request.set_range_end(PrefixEnd(prefix));
    etcdserverpb::RangeResponse response;
    if (absl::Status status =
            Unary(kv_.get(), &etcdserverpb::KV::Stub::Range, request, &response, "get prefix");
        !status.ok()) {
      return status;
    }
    std::map<std::string, Value> values;
    for (const etcdserverpb::KeyValue& kv : response.kvs()) values[kv.key()] = ValueOf(kv);
    return values;
  }

  absl::Status Put(const std::string& key, const std::string& value, int64_t lease) override {
    etcdserverpb::PutRequest request;
    request.set_key(key);
    request.set_value(value);
    request.set_lease(lease);
    etcdserverpb::PutResponse response;
    return Unary(kv_.get(), &etcdserverpb::KV::Stub::Put, request, &response, "put");
  }

  absl::StatusOr<bool> PutIf(const std::string& key, int64_t mod_revision, const std::string& value,
                             int64_t lease) override {
    etcdserverpb::TxnRequest request;
    etcdserverpb::Compare* compare = request.add_compare();
    compare->set_key(key);
    compare->set_result(etcdserverpb::Compare::EQUAL);
    compare->set_target(etcdserverpb::Compare::MOD);
    compare->set_mod_revision(mod_revision);  // 0: a key that does not exist
    etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
    put->set_key(key);
    put->set_value(value);
    put->set_lease(lease);
    etcdserverpb::TxnResponse response;
    if (absl::Status status =
            Unary(kv_.get(), &etcdserverpb::KV::Stub::Txn, request, &response, "compare-and-put");
        !status.ok()) {
      return status;
    }
    return response.succeeded();
  }

  absl::Status Delete(const std::string& key) override {
    etcdserverpb::DeleteRangeRequest request;
    request.set_key(key);
    etcdserverpb::DeleteRangeResponse response;
    return Unary(kv_.get(), &etcdserverpb::KV::Stub::DeleteRange, request, &response, "delete");
  }

  absl::StatusOr<Lease> GrantLease(absl::Duration ttl, absl::Time deadline) override {
    etcdserverpb::LeaseGrantRequest request;
    request.set_ttl(std::max<int64_t>(1, absl::ToInt64Seconds(ttl)));
    etcdserverpb::LeaseGrantResponse response;
    if (absl::Status status = Unary(lease_.get(), &etcdserverpb::Lease::Stub::LeaseGrant, request,
                                    &response, "grant lease", deadline);
        !status.ok()) {
      return status;
    }
    if (!response.error().empty() || response.id() == 0) {
      return absl::UnavailableError(
          absl::StrCat("etcd at ", endpoint(), " granted no lease: ", response.error()));
    }
    return Lease{response.id(), absl::Seconds(response.ttl())};
  }

  absl::StatusOr<absl::Duration> RenewLease(int64_t lease, absl::Time deadline) override {
    grpc::ClientContext context;
    context.set_deadline(transport::GrpcDeadline(CallDeadline(deadline)));
    InFlight in_flight(this, &context);
    std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::LeaseKeepAliveRequest,
                                             etcdserverpb::LeaseKeepAliveResponse>>
        stream = lease_->LeaseKeepAlive(&context);
    etcdserverpb::LeaseKeepAliveRequest request;
    request.set_id(lease);
    etcdserverpb::LeaseKeepAliveResponse response;
    const bool exchanged = stream->Write(request) && stream->Read(&response);
    stream->WritesDone();
    const grpc::Status finished = stream->Finish();
    if (!exchanged) {
      if (!finished.ok()) return FromGrpc(finished, endpoint(), "renew lease");
      return absl::UnavailableError(
          absl::StrCat("etcd at ", endpoint(), ": renew lease: the stream ended"));
    }
    if (response.ttl() <= 0) {
      return absl::NotFoundError(
          absl::StrCat("etcd at ", endpoint(), ": lease ", lease, " has ended"));
    }
    return absl::Seconds(response.ttl());
  }

  absl::Status RevokeLease(int64_t lease, absl::Time deadline) override {
    etcdserverpb::LeaseRevokeRequest request;
    request.set_id(lease);
    etcdserverpb::LeaseRevokeResponse response;
    return Unary(lease_.get(), &etcdserverpb::Lease::Stub::LeaseRevoke, request, &response,
                 "revoke lease", deadline);
  }

  void CancelCalls() override {
    absl::MutexLock lock(&mu_);
    for (grpc::ClientContext* context : in_flight_) context->TryCancel();
  }

 private:
  // Registers a call's context for CancelCalls while it lives.
  class InFlight {
   public:
    InFlight(GrpcEtcdClient* client, grpc::ClientContext* context)
        : client_(client), context_(context) {
      absl::MutexLock lock(&client_->mu_);
      client_->in_flight_.insert(context_);
    }
    ~InFlight() {
      absl::MutexLock lock(&client_->mu_);
      client_->in_flight_.erase(context_);
    }

   private:
    GrpcEtcdClient* const client_;
    grpc::ClientContext* const context_;
  };

  absl::Mutex mu_;
  absl::flat_hash_set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Connect(const std::string& endpoint,
                                                                absl::Duration call_timeout) {
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(transport::GrpcDeadline(hetps::Now() + call_timeout))) {
    return absl::UnavailableError(absl::StrCat("etcd at ", endpoint, " cannot be reached within ",
                                               absl::FormatDuration(call_timeout)));
  }
  return std::unique_ptr<EtcdClient>(new GrpcEtcdClient(endpoint, call_timeout, channel));
}

}  // namespace hetps::server
