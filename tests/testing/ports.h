// Ports for servers that tests start on 127.0.0.1.
//
// The kernel gives every outgoing connection a port from net.ipv4.ip_local_port_range. A server
// that listened on one of those (the kernel's pick for port 0) and is restarted on the same port
// may find it taken by some other process's connection in the meantime. A server that restarts
// on its port takes one below that range instead, where only servers that pick ports go; and
// since ctest runs tests side by side, each picked port stays reserved for the test process
// that picked it, so that another test cannot start a server on it while it is down.
#ifndef HETPS_TESTS_TESTING_PORTS_H_
#define HETPS_TESTS_TESTING_PORTS_H_

namespace hetps::testing {

// A port free on 127.0.0.1 a moment ago, from the kernel's ephemeral range; 0 on failure.
int FreePort();

// A port free on 127.0.0.1 a moment ago, picked at random below the ephemeral range and
// reserved for this process until it exits: StablePort in other processes never picks it (a
// lock on a file per port, shared by every test process of the machine). Falls back to
// FreePort() where that range starts too low to leave room, or nothing in it could be had.
int StablePort();

// As StablePort, from [lowest, highest].
int StablePortIn(int lowest, int highest);

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_PORTS_H_
