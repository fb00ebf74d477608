// Ports for servers that tests start on 127.0.0.1.
//
// The kernel gives every outgoing connection a port from net.ipv4.ip_local_port_range. A server
// that listened on one of those (the kernel's pick for port 0) and is restarted on the same port
// may find it taken by some other process's connection in the meantime. A server that restarts
// on its port takes one below that range instead, where only servers that pick ports go.
#ifndef HETPS_TESTS_TESTING_PORTS_H_
#define HETPS_TESTS_TESTING_PORTS_H_

namespace hetps::testing {

// A port free on 127.0.0.1 a moment ago, from the kernel's ephemeral range; 0 on failure.
int FreePort();

// A port free on 127.0.0.1 a moment ago, picked at random below the ephemeral range (falls back
// to FreePort() where that range starts too low to leave room).
int StablePort();

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_PORTS_H_
