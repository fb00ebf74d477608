#include "transport/internal/call_scope.h"

namespace hetps::transport::internal {
namespace {

thread_local int call_depth = 0;

}  // namespace

CallScope::CallScope() { ++call_depth; }
CallScope::~CallScope() { --call_depth; }
bool CallScope::Inside() { return call_depth > 0; }

}  // namespace hetps::transport::internal
