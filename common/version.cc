#include "common/version.h"

namespace hetps {

const char* Version() { return HETPS_VERSION_STRING; }

}  // namespace hetps
