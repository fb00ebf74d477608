// LeakSanitizer's suppressions, built into every executable of a sanitizer build
// (HETPS_SANITIZE; cmake/HetpsHelpers.cmake) so that the test processes and the programs they
// start all use them.
//
// OpenSSL 3 keeps a random generator per thread, reached only through its per-thread keys
// (pthread_setspecific), where LeakSanitizer does not find them. gRPC's TLS handshakes create
// them on gRPC's pool threads, so a process that ended after a TLS connection was now and then
// reported leaking them (40-byte EVP_RAND_CTX objects and what hangs off them), and the report
// turned its exit status into 1: PsBenchTest.PresentsTheJobsTokenAndTrustsItsCaAgainstACluster
// failed 4 of 15 runs so. hetps's code never calls OpenSSL itself (gRPC does).
extern "C" const char* __lsan_default_suppressions();
extern "C" const char* __lsan_default_suppressions() { return "leak:libcrypto.so\n"; }
