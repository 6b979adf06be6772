// Package chaos is the fault-injection harness of lockguard's reliability suite.
//
// A "bank" workload runs workers (goroutines, or separate OS processes) that each do a
// non-atomic read-modify-write of one balance under a dlock lock, against a Store that checks
// fencing tokens on the read and on the write, the way a database does with a conditional
// update. Every critical section is recorded (holder, token, times, acknowledged or not, loss
// seen or not), and Check verifies after the run that:
//
//   - the final balance equals the number of acknowledged increments (nothing lost or doubled);
//   - the store accepted writes in token order, each one the previous value plus one;
//   - no two acknowledged critical sections overlapped unless the earlier holder was told its
//     lock was lost;
//   - every holder whose lock was taken over saw the loss (Done, Err or Release).
//
// The store lives on its own Redis server, apart from the one the faults are injected into.
// The fault tests themselves are built with the "chaos" tag (make chaos); the checker's own
// tests run with the normal suite.
package chaos
