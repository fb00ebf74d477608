// The etcd client and lease holder against a real etcd (Debian's etcd-server, started for each
// test on 127.0.0.1): keys, compare-and-swap, leases that end with their keys, and a holder
// that knows when its lease can no longer be trusted.
#include "server/etcd_client.h"

#include <signal.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "server/lease_holder.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/status_assertions.h"

namespace hetps::server {
namespace {

class EtcdClientTest : public testing::EtcdTest {
 protected:
  // Waits (bounded) until `key` is gone; false if it is still there at the deadline.
  bool GoneWithin(const std::string& key, absl::Duration limit) {
    return testing::AwaitCondition(
        [&] {
          absl::StatusOr<std::optional<EtcdClient::Value>> value = client_->Get(key);
          return value.ok() && !value->has_value();
        },
        limit);
  }
};

TEST_F(EtcdClientTest, KeysArePutReadByPrefixAndDeleted) {
  ASSERT_OK(client_->Put("/job/a/1", "one"));
  ASSERT_OK(client_->Put("/job/a/2", "two"));
  ASSERT_OK(client_->Put("/job/b", "other"));
  absl::StatusOr<std::optional<EtcdClient::Value>> one = client_->Get("/job/a/1");
  ASSERT_TRUE(one.ok() && one->has_value()) << one.status();
  EXPECT_EQ((*one)->value, "one");
  EXPECT_GT((*one)->mod_revision, 0);
  absl::StatusOr<std::map<std::string, EtcdClient::Value>> prefix = client_->GetPrefix("/job/a/");
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  ASSERT_EQ(prefix->size(), 2u);
  EXPECT_EQ(prefix->at("/job/a/2").value, "two");
  ASSERT_OK(client_->Delete("/job/a/1"));
  absl::StatusOr<std::optional<EtcdClient::Value>> gone = client_->Get("/job/a/1");
  ASSERT_OK(gone);
  EXPECT_FALSE(gone->has_value());
}

TEST_F(EtcdClientTest, PutIfIsACompareAndSwapOnTheKeysRevision) {
  // Created only if absent: the first of two contenders wins.
  absl::StatusOr<bool> first = client_->PutIf("/job/primary", 0, "shard 0");
  absl::StatusOr<bool> second = client_->PutIf("/job/primary", 0, "shard 1");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(*first);
  EXPECT_FALSE(*second);
  auto current = client_->Get("/job/primary");
  ASSERT_TRUE(current.ok() && current->has_value());
  EXPECT_EQ((*current)->value, "shard 0");
  // Replaced only by whoever read the current revision.
  absl::StatusOr<bool> swapped =
      client_->PutIf("/job/primary", (*current)->mod_revision, "shard 2");
  absl::StatusOr<bool> stale = client_->PutIf("/job/primary", (*current)->mod_revision, "shard 3");
  ASSERT_TRUE(swapped.ok() && stale.ok());
  EXPECT_TRUE(*swapped);
  EXPECT_FALSE(*stale);
  EXPECT_EQ((*client_->Get("/job/primary"))->value, "shard 2");
}

TEST_F(EtcdClientTest, AKeyPutWithALeaseGoesWhenTheLeaseEnds) {
  absl::StatusOr<EtcdClient::Lease> lease =
      client_->GrantLease(absl::Seconds(1), absl::InfiniteFuture());
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->ttl, absl::Seconds(1));
  ASSERT_OK(client_->Put("/job/alive", "yes", lease->id));
  absl::StatusOr<absl::Duration> renewed = client_->RenewLease(lease->id, absl::InfiniteFuture());
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_EQ(*renewed, absl::Seconds(1));
  EXPECT_TRUE(GoneWithin("/job/alive", absl::Seconds(10)));
  EXPECT_EQ(client_->RenewLease(lease->id, absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(EtcdClientTest, AHolderKeepsItsLeaseAndKnowsWhenItCanNoLongerTrustIt) {
  absl::StatusOr<std::unique_ptr<LeaseHolder>> holder =
      LeaseHolder::Start(client_.get(), absl::Seconds(1));
  ASSERT_TRUE(holder.ok()) << holder.status();
  ASSERT_OK(client_->Put("/job/alive", "yes", (*holder)->id()));
  // Renewed: the key outlives several times to live.
  absl::SleepFor(absl::Seconds(3));
  EXPECT_TRUE((*holder)->held());
  auto alive = client_->Get("/job/alive");
  ASSERT_OK(alive);
  EXPECT_TRUE(alive->has_value());

  // etcd stops answering: within a time to live the holder no longer claims the lease.
  ASSERT_TRUE(etcd_->process().Stop());
  const absl::Time stopped = absl::Now();
  EXPECT_TRUE(testing::AwaitCondition([&] { return !(*holder)->held(); }, absl::Seconds(5)));
  EXPECT_LE(absl::Now() - stopped, absl::Seconds(1) + absl::Milliseconds(500));
  etcd_->process().Signal(SIGCONT);
  (*holder)->Stop(/*revoke=*/false);
}

// Forwards to a real client and notes, per RenewLease, how long it was given.
class RenewalRecorder : public EtcdClient {
 public:
  explicit RenewalRecorder(EtcdClient* real)
      : EtcdClient(real->endpoint(), absl::Seconds(5)), real_(real) {}
  std::vector<absl::Duration> allowed() {
    absl::MutexLock lock(&mu_);
    return allowed_;
  }

  absl::StatusOr<std::optional<Value>> Get(const std::string& key) override {
    return real_->Get(key);
  }
  absl::StatusOr<std::map<std::string, Value>> GetPrefix(const std::string& prefix) override {
    return real_->GetPrefix(prefix);
  }
  absl::Status Put(const std::string& key, const std::string& value, int64_t lease) override {
    return real_->Put(key, value, lease);
  }
  absl::StatusOr<bool> PutIf(const std::string& key, int64_t mod_revision, const std::string& value,
                             int64_t lease) override {
    return real_->PutIf(key, mod_revision, value, lease);
  }
  absl::Status Delete(const std::string& key) override { return real_->Delete(key); }
  absl::StatusOr<Lease> GrantLease(absl::Duration ttl, absl::Time deadline) override {
    return real_->GrantLease(ttl, deadline);
  }
  absl::StatusOr<absl::Duration> RenewLease(int64_t lease, absl::Time deadline) override {
    {
      absl::MutexLock lock(&mu_);
      allowed_.push_back(deadline - absl::Now());
    }
    return real_->RenewLease(lease, deadline);
  }
  absl::Status RevokeLease(int64_t lease, absl::Time deadline) override {
    return real_->RevokeLease(lease, deadline);
  }
  void CancelCalls() override { real_->CancelCalls(); }

 private:
  EtcdClient* const real_;
  absl::Mutex mu_;
  std::vector<absl::Duration> allowed_ ABSL_GUARDED_BY(mu_);
};

// A renewal that etcd answers after the lease ended is of no use: a holder cut off from etcd
// must not wait for one longer than its lease lasts (it waited the client's 5 s call timeout,
// then took a new lease that late).
TEST_F(EtcdClientTest, AHolderGivesEachRenewalNoLongerThanItsLeaseLasts) {
  RenewalRecorder recorder(client_.get());
  absl::StatusOr<std::unique_ptr<LeaseHolder>> holder =
      LeaseHolder::Start(&recorder, absl::Seconds(1));
  ASSERT_OK(holder);
  ASSERT_TRUE(
      testing::AwaitCondition([&] { return recorder.allowed().size() >= 2; }, absl::Seconds(10)));
  (*holder)->Stop(/*revoke=*/true);
  for (absl::Duration allowed : recorder.allowed()) EXPECT_LE(allowed, absl::Seconds(1));
}

// A shard stopping while etcd does not answer (SIGTERM during an etcd outage) waits for
// nothing past its lease: the renewal in flight is cancelled, and a lease that ended needs no
// revoking. It waited for the etcd client's 5 s call timeout twice.
TEST_F(EtcdClientTest, AHolderStoppedWhileEtcdIsSilentWaitsNoLongerThanItsLease) {
  absl::StatusOr<std::unique_ptr<LeaseHolder>> holder =
      LeaseHolder::Start(client_.get(), absl::Seconds(1));
  ASSERT_TRUE(holder.ok()) << holder.status();
  ASSERT_TRUE(etcd_->process().Stop());
  // By then a renewal is on its way (one every third of the lease) and gets no answer.
  EXPECT_TRUE(testing::AwaitCondition([&] { return !(*holder)->held(); }, absl::Seconds(5)));
  const absl::Time stopping = absl::Now();
  (*holder)->Stop(/*revoke=*/true);
  EXPECT_LT(absl::Now() - stopping, absl::Seconds(2));
  etcd_->process().Signal(SIGCONT);
}

TEST_F(EtcdClientTest, AHolderReplacesALostLeaseThroughItsReplaceFunction) {
  absl::Mutex mu;
  std::vector<std::pair<int64_t, int64_t>> replaced;  // (ended, granted)
  absl::StatusOr<std::unique_ptr<LeaseHolder>> holder = LeaseHolder::Start(
      client_.get(), absl::Seconds(1), [&](int64_t ended, int64_t granted) -> absl::Status {
        // What the ended lease held, attached to the new one.
        HETPS_RETURN_IF_ERROR(client_->Put("/job/alive", "again", granted));
        absl::MutexLock lock(&mu);
        replaced.emplace_back(ended, granted);
        return absl::OkStatus();
      });
  ASSERT_TRUE(holder.ok()) << holder.status();
  const int64_t first = (*holder)->id();
  ASSERT_OK(client_->Put("/job/alive", "yes", first));
  // etcd ends the lease (as it does when it is not renewed in time): the holder takes another.
  ASSERT_OK(client_->RevokeLease(first, absl::InfiniteFuture()));
  ASSERT_TRUE(testing::AwaitCondition(
      [&] {
        absl::MutexLock lock(&mu);
        return !replaced.empty();
      },
      absl::Seconds(10)));
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(replaced.front().first, first);
    EXPECT_EQ(replaced.front().second, (*holder)->id());
  }
  EXPECT_NE((*holder)->id(), first);
  EXPECT_TRUE(testing::AwaitCondition([&] { return (*holder)->held(); }, absl::Seconds(5)));
  EXPECT_FALSE((*holder)->ended());
  // The new lease is renewed: its key outlives several times to live.
  absl::SleepFor(absl::Seconds(3));
  EXPECT_TRUE((*holder)->held());
  auto alive = client_->Get("/job/alive");
  ASSERT_TRUE(alive.ok()) << alive.status();
  ASSERT_TRUE(alive->has_value());
  EXPECT_EQ((*alive)->value, "again");
  EXPECT_EQ((*alive)->lease, (*holder)->id());
  (*holder)->Stop(/*revoke=*/true);
}

TEST_F(EtcdClientTest, AHolderWhoseReplaceRefusesStaysWithoutALease) {
  int calls = 0;
  absl::StatusOr<std::unique_ptr<LeaseHolder>> holder = LeaseHolder::Start(
      client_.get(), absl::Seconds(1), [&](int64_t, int64_t granted) -> absl::Status {
        ++calls;  // the holder's thread only
        HETPS_RETURN_IF_ERROR(client_->Put("/job/replaced", "no", granted));
        return absl::AbortedError("taken over meanwhile");
      });
  ASSERT_TRUE(holder.ok()) << holder.status();
  const int64_t first = (*holder)->id();
  ASSERT_OK(client_->RevokeLease(first, absl::InfiniteFuture()));
  ASSERT_TRUE(testing::AwaitCondition([&] { return (*holder)->ended(); }, absl::Seconds(10)));
  EXPECT_FALSE((*holder)->held());
  EXPECT_EQ((*holder)->id(), first);  // the lease that ended: none replaced it
  EXPECT_EQ(calls, 1);
  // The lease it granted and refused is revoked, with what was attached to it.
  EXPECT_TRUE(GoneWithin("/job/replaced", absl::Seconds(5)));
}

TEST(EtcdClientUnreachableTest, ConnectingToNothingFailsWithinTheTimeout) {
  const absl::Time start = absl::Now();
  auto client = EtcdClient::Connect("127.0.0.1:1", absl::Milliseconds(300));
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace hetps::server
