// hetps's version, as the build's project() names it ("0.1.0").
#ifndef HETPS_COMMON_VERSION_H_
#define HETPS_COMMON_VERSION_H_

namespace hetps {

const char* Version();

}  // namespace hetps

#endif  // HETPS_COMMON_VERSION_H_
